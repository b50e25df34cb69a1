"""``sap-precompile``: compile every CUDA kernel a scene's step launches, without a GPU, and report each.

    sap-precompile humanoid                                  # sm_90 (or this GPU's), every preset and path
    sap-precompile humanoid --preset approx32 --newton-path fused --resources
    sap-precompile humanoid --arch 90 --out cache/ --json
    sap-precompile humanoid --preset drake --approximation lagged similar --resources

For each configuration asked for (every combination of ``--preset``, ``--newton-path``,
``--linear-solver`` — all of each by default — and ``--approximation``, the contact
approximation, ``sap`` by default), one ``collide`` + ``step`` of the scene runs as a
dry run on the CPU device (nothing executes) to list the (module, block size) variants the step
launches on a GPU; each variant is then compiled once for ``sm_<arch>`` with Warp's NVRTC and its
compile time printed. With ``--resources`` each kernel's registers (REG), stack, shared and
local memory follow, read with cuobjdump (``pip install -e ".[cuda-tools]"``). With ``--lives``
(``sap-precompile humanoid --preset approx32 --newton-path fused --linear-solver cholesky
--lives``) the fused Newton kernel's module (or those of the kernels named) is compiled once
more with line information and read with nvdisasm (the same extra): the most registers live at
once, the Python lines where they are, and every load and store of local memory (the spills)
with its line and how many loops of the machine code hold it (see
docs/benchmarks.md § Where the registers are live). With ``--ncu-source CSV``, an Nsight
Compute profile taken on a GPU (``ncu --set full``, its source page as CSV) is put on the same
Python lines: where the kernel's warps spent their time and what they waited for, per stage of
the fused kernel and per line (docs/benchmarks.md § The fused kernel under Nsight Compute).

The files go into Warp's kernel cache (``WARP_CACHE_PATH``, default ``~/.cache/warp``), where a
GPU machine with the same Warp version looks first: copy the cache over, point
``WARP_CACHE_PATH`` at it, and the first step starts without compiling (docs/benchmarks.md,
GPU readiness). A variant already in the cache is not compiled again (shown as cached); ``--out
DIR`` writes the variants into a folder of their own instead.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import sys
import time

import numpy as np

from sap_tools.cli import (
    PRESET_CHOICES,
    check_out_dir,
    entry_point,
    fail,
    init_warp,
    load_scene_arg,
    parser,
    register_cap_label,
    register_caps,
    scene_solver_kwargs,
)

__all__ = ["main", "configurations", "mjwarp_step_variants", "launched_resources"]

DEFAULT_ARCH = 90  # an H100/H200 (sm_90) when no GPU is here to ask


def configurations(presets, newton_paths, linear_solvers, approximations=("sap",)):
    """Every (preset, newton_path, linear_solver, approximation) asked for. PCR runs the staged
    loop whatever ``newton_path`` says, so a fused/PCR pair is the staged/PCR one and is listed once."""
    out = []
    for preset, path, solver, approx in itertools.product(presets, newton_paths, linear_solvers, approximations):
        if solver == "pcr":
            path = "staged"
        if (preset, path, solver, approx) not in out:
            out.append((preset, path, solver, approx))
    return out


CUDA_DEFAULT_BLOCK_DIM = 256  # what Warp gives a wp.launch without block_dim on a CUDA device


@contextlib.contextmanager
def _recording_warp_launches(variants: dict):
    """Record, without running, every launch that third-party code makes through Warp's own
    ``wp.launch`` / ``wp.launch_tiled`` (sap_gpu records its own launches in sap_gpu.launch):
    ``variants[(module name, CUDA block size)] = (module, [kernel keys])``. ``wp.capture_while``
    and ``wp.capture_if`` run their bodies once, so every kernel of a loop or a branch is seen."""
    import warp as wp
    from warp._src import context as wctx

    saved = (wp.launch, wp.launch_tiled, wp.capture_while, wp.capture_if, wctx.launch)

    def add(kernel, block_dim):
        module, kernels = variants.setdefault((kernel.module.name, int(block_dim)), (kernel.module, []))
        if kernel.key not in kernels:
            kernels.append(kernel.key)

    def launch(kernel, dim=None, *args, **kw):
        block_dim = kw.get("block_dim", args[10] if len(args) > 10 else None)
        if 0 not in tuple(np.atleast_1d(dim if dim is not None else kw.get("dim", 1))):
            add(kernel, block_dim or CUDA_DEFAULT_BLOCK_DIM)

    def launch_tiled(kernel, *args, **kw):
        if 0 not in tuple(np.atleast_1d(kw.get("dim", args[0] if args else 1))):
            add(kernel, kw["block_dim"])

    def capture_while(condition, while_body, stream=None, **kw):
        while_body(**kw)

    def capture_if(condition, on_true=None, on_false=None, stream=None, **kw):
        for branch in (on_true, on_false):
            if callable(branch):
                branch(**kw)

    wp.launch = wctx.launch = launch
    wp.launch_tiled, wp.capture_while, wp.capture_if = launch_tiled, capture_while, capture_if
    try:
        yield variants
    finally:
        wp.launch, wp.launch_tiled, wp.capture_while, wp.capture_if, wctx.launch = saved


def mjwarp_step_variants(scene) -> dict:
    """The (module, CUDA block size) variants one MuJoCo Warp step of the scene's MuJoCo model
    launches (``mjw.put_model`` / ``put_data`` with its default capacities for two worlds, as
    ``sap-benchmark --vs-mjwarp`` builds it), recorded without running."""
    import copy

    import mujoco
    import mujoco_warp as mjw
    import warp as wp

    if getattr(scene, "mj_model", None) is None:
        raise ValueError(f"--vs-mjwarp: scene {scene.name!r} has no MuJoCo model (use an MJCF scene such as humanoid)")
    mjm = copy.copy(scene.mj_model)
    mjd = mujoco.MjData(mjm)
    variants: dict = {}
    with wp.ScopedDevice("cpu"), _recording_warp_launches(variants):
        m = mjw.put_model(mjm)
        d = mjw.put_data(mjm, mjd, nworld=2)
        variants.clear()  # what put_model/put_data launch is set-up, not the step
        mjw.step(m, d)
    return variants


def _default_arch() -> int:
    import warp as wp

    init_warp()  # the arch of a GPU if there is one; no CUDA-driver warning where there is none
    return wp.get_cuda_device().arch if wp.get_cuda_device_count() > 0 else DEFAULT_ARCH


@entry_point("sap-precompile")
def main(argv=None) -> int:
    from sap_common.config import (
        CONTACT_APPROXIMATIONS,
        DEFAULT_FUSED_CHOLESKY,
        FUSED_CHOLESKYS,
        FUSED_HESSIANS,
        LINEAR_SOLVERS,
        NEWTON_PATHS,
        PRESETS,
    )

    prog = "sap-precompile"
    p = parser(prog, __doc__)
    p.add_argument("scene", help="built-in scene name, JSON scene file or MJCF/URDF file")
    p.add_argument("--arch", type=int, default=None,
                   help=f"SM architecture, e.g. 90 for an H100 (default: this machine's GPU, else {DEFAULT_ARCH})")
    p.add_argument("--preset", nargs="+", default=list(PRESETS), help=f"presets (default: all: {PRESET_CHOICES})")
    p.add_argument("--newton-path", nargs="+", default=list(NEWTON_PATHS),
                   help=f"Newton paths (default: all: {', '.join(NEWTON_PATHS)})")
    p.add_argument("--linear-solver", nargs="+", default=list(LINEAR_SOLVERS),
                   help=f"linear solvers (default: all: {', '.join(LINEAR_SOLVERS)})")
    p.add_argument("--approximation", nargs="+", default=["sap"],
                   help=f"contact approximations (default: sap; valid: {', '.join(CONTACT_APPROXIMATIONS)})")
    p.add_argument("--line-search", nargs="+", default=[None], metavar="LINE_SEARCH",
                   help="line search(es) (default: the scene's, else SapConfig's default, exact_root)")
    p.add_argument("--fused-max-registers", nargs="+", default=["auto"], metavar="N",
                   help="SapConfig.fused_max_registers, the fused Newton kernel's register cap: auto (default: "
                        "sap_gpu's cap per kernel), none (the compiler's choice) or 32..255; several = each")
    p.add_argument("--fused-hessian", nargs="+", default=["rows"], metavar="HOW",
                   help=f"SapConfig.fused_hessian, how the fused kernel forms H: {', '.join(FUSED_HESSIANS)} "
                        f"(default rows); several = each")
    p.add_argument("--fused-cholesky", nargs="+", default=[DEFAULT_FUSED_CHOLESKY], metavar="HOW",
                   help=f"SapConfig.fused_cholesky, how the fused kernel factors H: {', '.join(FUSED_CHOLESKYS)} "
                        f"(default {DEFAULT_FUSED_CHOLESKY}, which a GPU takes as lanes); several = each (lanes with "
                        f"an H formed by rows; an H formed by tiles is factored by tile)")
    p.add_argument("--cuda-output", default="cubin", choices=("cubin", "ptx"),
                   help="what to compile to: cubin (default; what Warp loads with wp.config.cuda_output='cubin' "
                        "and with a driver older than its CUDA toolkit) or ptx")
    p.add_argument("--out", default=None, help="write the compiled variants into this folder, not Warp's cache")
    p.add_argument("--resources", action="store_true", help="print each kernel's REG/STACK/SHARED/LOCAL (cuobjdump)")
    p.add_argument("--lives", nargs="?", const="fused_newton", default=None, metavar="KERNEL",
                   help="where the registers of the kernels whose name contains KERNEL (default fused_newton) are "
                        "live and where they spill, per Python line and loop depth: each such module is compiled "
                        "again with line information into a temporary folder and read with nvdisasm")
    p.add_argument("--ncu-source", default=None, metavar="CSV",
                   help="an Nsight Compute profile of a kernel taken on a GPU (ncu --set full ... -o R, then ncu "
                        "--import R.ncu-rep --page source --csv --print-source sass > CSV): its warp-state samples "
                        "and executed instructions per Python line of the matching kernel, compiled again with line "
                        "information as --lives does (which it implies)")
    p.add_argument("--vs-mjwarp", action="store_true",
                   help="also compile MuJoCo Warp's step of the scene's MuJoCo model the same way (MJCF scenes)")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = p.parse_args(argv)
    from sap_common.config import DEFAULT_LINE_SEARCH, SapConfig

    for flag, values, valid in (("--newton-path", args.newton_path, NEWTON_PATHS),
                                ("--fused-hessian", args.fused_hessian, FUSED_HESSIANS),
                                ("--fused-cholesky", args.fused_cholesky, FUSED_CHOLESKYS),
                                ("--linear-solver", args.linear_solver, LINEAR_SOLVERS),
                                ("--approximation", args.approximation, CONTACT_APPROXIMATIONS)):
        bad = [v for v in values if v not in valid]
        if bad:
            return fail(prog, f"{flag}: {bad[0]!r} is not valid; valid: {', '.join(valid)}")
    try:
        for preset in args.preset:
            for line_search in args.line_search:
                SapConfig.from_preset(preset, line_search_variant=line_search or DEFAULT_LINE_SEARCH)
    except ValueError as e:
        return fail(prog, f"--preset/--line-search: {e}")
    try:
        caps = register_caps("--fused-max-registers", args.fused_max_registers)
    except ValueError as e:
        return fail(prog, e)
    if args.resources and args.cuda_output != "cubin":
        return fail(prog, "--resources: cuobjdump reads CUBIN files; use it with --cuda-output cubin")
    args.ncu_text = None
    if args.ncu_source is not None:
        try:
            with open(args.ncu_source, encoding="utf-8") as f:
                args.ncu_text = f.read()
        except OSError as e:
            return fail(prog, f"--ncu-source: cannot read {args.ncu_source}: {e.strerror}")
        from sap_gpu.precompile import ncu_kernel_names

        args.ncu_kernels = ncu_kernel_names(args.ncu_text)
        if not args.ncu_kernels:
            return fail(prog, f"--ncu-source: no kernel table in {args.ncu_source}; expected the output of ncu "
                              "--import REPORT --page source --csv --print-source sass")
        if args.lives is None:
            args.lives = "fused_newton"
    if args.lives is not None and args.cuda_output != "cubin":
        return fail(prog, "--lives: nvdisasm reads CUBIN files; use it with --cuda-output cubin")
    if args.arch is not None and args.arch < 50:
        return fail(prog, f"--arch: an SM architecture such as 80, 90 or 100, got {args.arch}")
    try:
        scene = load_scene_arg(args.scene, 1)
        if args.out is not None:
            check_out_dir("--out", args.out, create=True)
    except ValueError as e:
        return fail(prog, e)
    from sap_gpu.plan import swept_cholesky
    from sap_gpu.precompile import find_cuobjdump, find_nvdisasm, step_variants

    cuobjdump = find_cuobjdump() if args.resources else None
    if args.resources and cuobjdump is None:
        return fail(prog, "--resources: cuobjdump not found; install it with pip install -e \".[cuda-tools]\" "
                          "(the nvidia-cuda-cuobjdump wheel) or put CUDA's cuobjdump on PATH")
    args.nvdisasm = find_nvdisasm() if args.lives is not None else None
    if args.lives is not None and args.nvdisasm is None:
        return fail(prog, "--lives: nvdisasm not found; install it with pip install -e \".[cuda-tools]\" "
                          "(the nvidia-cuda-nvdisasm wheel) or put CUDA's nvdisasm on PATH")
    arch = args.arch if args.arch is not None else _default_arch()
    variants, used_by = {}, {}
    for (preset, path, solver, approx), line_search, cap, hessian, cholesky in itertools.product(
            configurations(args.preset, args.newton_path, args.linear_solver, args.approximation),
            dict.fromkeys(args.line_search), caps, dict.fromkeys(args.fused_hessian),
            dict.fromkeys(args.fused_cholesky)):
        kwargs, _ = scene_solver_kwargs(scene, preset, line_search)
        kwargs.update(newton_path=path, contact_linear_solver=solver, discrete_contact_approximation=approx)
        if path == "fused" and solver == "cholesky":  # only where the fused kernel reads it (no unused-knob warning)
            kwargs["fused_max_registers"] = cap
        if hessian != "rows":  # only where the fused kernel reads it (no unused-knob warning otherwise)
            if path != "fused" or solver != "cholesky":
                continue
            kwargs["fused_hessian"] = hessian
        cholesky, plain = swept_cholesky(cholesky, hessian, True)  # what a GPU's kernel takes with this H
        if not plain:  # set where the default does not give it, and only where the fused kernel reads it
            if path != "fused" or solver != "cholesky":
                continue
            kwargs["fused_cholesky"] = cholesky
        try:
            record = step_variants(scene.sap_model, scene.max_rigid_contact, **kwargs)
        except ValueError as e:
            return fail(prog, e)
        label = (f"{preset}/{path}/{solver}" + ("" if line_search is None else f"/{line_search}")
                 + ("" if approx == "sap" else f"/{approx}")
                 + register_cap_label(cap) + ("" if hessian == "rows" else f"/{hessian}")
                 + ("" if plain else f"/{cholesky}"))
        for key, module in record.variants.items():
            variants.setdefault(key, (module, record.kernels[key]))
            if label not in used_by.setdefault(key, []):  # lanes and tile asked for an H formed by tiles: one run
                used_by[key].append(label)
    rows = _compile_all(variants, used_by, arch, args, cuobjdump, f"{args.scene} (sap_gpu)")
    report = dict(scene=args.scene, arch=arch, cuda_output=args.cuda_output, sap_gpu=_summary(rows), variants=rows)
    if args.vs_mjwarp:
        try:
            theirs = mjwarp_step_variants(scene)
        except ValueError as e:
            return fail(prog, e)
        mj_rows = _compile_all(theirs, {k: ["mujoco_warp step"] for k in theirs}, arch, args, cuobjdump,
                               f"{args.scene} (MuJoCo Warp)")
        report.update(mujoco_warp=_summary(mj_rows), mujoco_warp_variants=mj_rows)
        ours, other = report["sap_gpu"], report["mujoco_warp"]
        print(f"side by side, sm_{arch}: compile {ours['seconds']:.1f} s (sap_gpu) vs {other['seconds']:.1f} s "
              f"(MuJoCo Warp); heaviest kernel REG {ours['max_reg']} vs {other['max_reg']}, STACK "
              f"{ours['max_stack']} vs {other['max_stack']} B", flush=True)
    if args.json:
        print(json.dumps(report))
    if args.ncu_text is not None and not any("ncu" in r for r in rows):
        print(f"{prog}: --ncu-source: none of the report's kernels ({', '.join(args.ncu_kernels)}) was compiled: "
              "give the configuration the report ran (--preset, --newton-path, --fused-max-registers, ...)",
              file=sys.stderr)
        return 1
    failed = [r for r in rows + report.get("mujoco_warp_variants", []) if "error" in r]
    return 1 if failed else 0


def _compile_all(variants: dict, used_by: dict, arch: int, args, cuobjdump, label: str) -> list[dict]:
    """Compile every variant, printing one line per module (and, with --resources, per kernel)."""
    from sap_gpu.precompile import compile_variant, kernel_resources

    print(f"{label}: {len(variants)} (module, block size) variants for sm_{arch}, {args.cuda_output}; cache "
          f"{args.out or os.environ.get('WARP_CACHE_PATH') or 'Warp default'}", flush=True)
    rows, total, cpu_total, t0 = [], 0.0, 0.0, time.perf_counter()
    for (name, block_dim), (module, kernels) in variants.items():
        try:
            r = compile_variant(module, block_dim, arch, args.out, args.cuda_output)
        except Exception as e:  # a compile error is this tool's finding: name the module, go on with the rest
            print(f"FAILED {name} (block {block_dim}): {' '.join(str(e).split())[:400]}", flush=True)
            rows.append(dict(module=name, block_dim=block_dim, error=str(e)[:2000], used_by=used_by[(name, block_dim)]))
            continue
        total += r.seconds
        cpu_total += r.cpu_seconds
        print(f"{r.seconds:8.1f} s  {name} (block {block_dim}){'  cached' if r.cached else ''}", flush=True)
        row = dict(module=name, block_dim=block_dim, seconds=r.seconds, cpu_seconds=r.cpu_seconds, cached=r.cached,
                   path=r.path,
                   kernels=kernels, used_by=used_by[(name, block_dim)])
        if args.resources and r.path:
            row["resources"] = launched_resources(kernel_resources(r.path, cuobjdump), kernels)
            for fn, res in sorted(row["resources"].items()):
                print(f"           {fn}: " + ", ".join(f"{k} {v}" for k, v in res.items()), flush=True)
        if args.lives is not None and any(args.lives in k for k in kernels):
            try:
                row["lives"] = _lives(module, block_dim, arch, [k for k in kernels if args.lives in k], args.nvdisasm,
                                      args.ncu_text, row)
            except Exception as e:  # like a compile error: say which module, go on
                print(f"FAILED --lives of {name} (block {block_dim}): {' '.join(str(e).split())[:400]}", flush=True)
                row["error"] = f"--lives: {str(e)[:2000]}"
        rows.append(row)
    failed = sum("error" in r for r in rows)
    print(f"{label}: {total:.1f} s of compiling ({cpu_total:.1f} s of CPU time; {time.perf_counter() - t0:.1f} s "
          f"wall), {len(rows) - failed} variants compiled or cached, {failed} failed", flush=True)
    return rows


LIVES_TOP = 8  # --lives: the Python lines printed with the most registers live (the JSON has all)
CODE_TOP = 8  # --lives: the kernel lines printed with the most machine instructions (the JSON has all)


def _code_by_kernel_line(lines) -> dict:
    """``{kernel line: machine instructions}``, most first, of a kernel's :class:`SourceLives`:
    its code size by the kernel line each instruction is inlined at (a fused kernel's stages; a
    subroutine's instructions go to the line of its name in brackets). On an H100 the fused
    kernel waits for its own instructions more than for memory
    (docs/benchmarks.md § The fused kernel under Nsight Compute), so this is a figure to bring
    down, and it needs no GPU."""
    code: dict = {}
    for line in lines:
        where = line.called_from if line.function == "kernel" else f"[{line.function}]"
        code[where] = code.get(where, 0) + line.instructions
    return dict(sorted(code.items(), key=lambda x: (-x[1], x[0])))


def _lives(module, block_dim: int, arch: int, kernels: list[str], nvdisasm: str, ncu_text: str | None = None,
           row: dict | None = None) -> dict:
    """--lives: compile the variant again with line information into a temporary folder and print,
    for each launched kernel of ``kernels``, its peak of live registers, the Python lines with the
    most, and its local-memory loads and stores by loop depth. Returns the JSON of it. With
    ``ncu_text`` (--ncu-source) whose report holds one of the variant's kernels, also its samples
    per Python line (printed, and stored in ``row["ncu"]``)."""
    import dataclasses
    import tempfile

    from sap_gpu.precompile import compile_variant, kernel_lives, ncu_kernel_names, ncu_source_samples

    with tempfile.TemporaryDirectory(prefix="sap-lives-") as folder:
        r = compile_variant(module, block_dim, arch, folder, "cubin", lineinfo=True)
        full = kernel_lives(r.path, nvdisasm)
        lives = launched_resources(full, kernels)
        if ncu_text is not None and set(ncu_kernel_names(ncu_text)) & set(full):
            samples = ncu_source_samples(ncu_text, r.path, nvdisasm)
            row["ncu"] = {k: dict(v, lines=[dataclasses.asdict(x) for x in v["lines"]]) for k, v in samples.items()}
            for key, v in samples.items():
                _print_samples(key, v)
    out = {}
    for key, k in sorted(lives.items()):
        functions = ", ".join(f"{f} {n}" for f, n in sorted(k["functions"].items(), key=lambda x: -x[1]))
        print(f"           {key}: peak {k['peak']} registers live (by function: {functions}); compiled again "
              f"with line information in {r.seconds:.1f} s", flush=True)
        code = _code_by_kernel_line(k["lines"])
        total = sum(code.values())
        print(f"             code: {total:,} machine instructions; the most by kernel line (a fused kernel's "
              "stages): " + ", ".join(f"{where} {n:,}" for where, n in list(code.items())[:CODE_TOP]), flush=True)
        print("             live  depth  instr  where (called from) [function]", flush=True)
        for line in k["lines"][:LIVES_TOP]:
            print(f"             {line.peak:4d}  {line.depth:5d}  {line.instructions:5d}  {_where(line)}", flush=True)
        spills = [line for line in k["lines"] if line.local_loads or line.local_stores]
        if not spills:
            print("             local memory: none", flush=True)
        for depth in sorted({line.depth for line in spills}):
            at = sorted((line for line in spills if line.depth == depth),
                        key=lambda x: -(x.local_loads + x.local_stores))
            print(f"             local memory at loop depth {depth}: {sum(x.local_loads for x in at)} loads, "
                  f"{sum(x.local_stores for x in at)} stores, at "
                  + "; ".join(f"{_where(x)} {x.local_loads}/{x.local_stores}" for x in at[:4])
                  + ("; ..." if len(at) > 4 else ""), flush=True)
        out[key] = dict(peak=k["peak"], functions=k["functions"], instructions=total, code=code,
                        lines=[dataclasses.asdict(x) for x in k["lines"]])
    return out


NCU_TOP = 8  # --ncu-source: the Python lines printed with the most samples (the JSON has all)
NCU_STALLS = 4  # --ncu-source: the stall reasons named in the summary and per line


def _pct(n: int, total: int) -> float:
    return 100.0 * n / total if total else 0.0


def _print_samples(kernel: str, v: dict) -> None:
    """--ncu-source: the kernel's samples by kernel line (the stages of a fused kernel), then the
    Python lines with the most."""
    total, executed = v["samples"], v["executed"]
    top = sorted(v["stalls"].items(), key=lambda x: -x[1])[:NCU_STALLS]
    print(f"           {kernel}: Nsight Compute: {total:,} warp samples, {executed:,} warp instructions executed; "
          "samples by state: " + ", ".join(f"{k} {_pct(n, total):.1f} %" for k, n in top), flush=True)
    stages: dict = {}
    for line in v["lines"]:
        st = stages.setdefault(line.called_from, dict(samples=0, executed=0, instructions=0, stalls={}))
        st["samples"] += line.samples
        st["executed"] += line.executed
        st["instructions"] += line.instructions
        for k, n in line.stalls.items():
            st["stalls"][k] = st["stalls"].get(k, 0) + n
    print("             samples  executed  instr  kernel line: top states (% of all samples)", flush=True)
    for where, st in sorted(stages.items(), key=lambda x: -x[1]["samples"])[:NCU_TOP]:
        states = ", ".join(f"{k} {_pct(n, total):.1f}" for k, n in sorted(st["stalls"].items(), key=lambda x: -x[1])
                           [:NCU_STALLS])
        print(f"             {_pct(st['samples'], total):5.1f} %  {_pct(st['executed'], executed):6.1f} %  "
              f"{st['instructions']:5d}  {where}: {states}", flush=True)
    print("             samples  executed  instr  where (called from) [function]", flush=True)
    for line in v["lines"][:NCU_TOP]:
        print(f"             {_pct(line.samples, total):5.1f} %  {_pct(line.executed, executed):6.1f} %  "
              f"{line.instructions:5d}  {_where(line)}", flush=True)


def _where(line) -> str:
    text = line.where if line.called_from == line.where else f"{line.where} ({line.called_from})"
    return text if line.function == "kernel" else f"{text} [{line.function}]"


def launched_resources(resources: dict, kernels: list[str]) -> dict:
    """The entries of :func:`~sap_gpu.precompile.kernel_resources` that belong to the launched
    ``kernels`` (a module's binary also holds its kernels the step never launches, and backward
    kernels where the module builds them), keyed by kernel name."""
    out = {}
    for key in kernels:
        hits = [fn for fn in resources if fn.startswith(key + "_") and fn.endswith("_cuda_kernel_forward")
                and fn[len(key) + 1:-len("_cuda_kernel_forward")].isalnum()]
        for fn in hits:
            out[key] = resources[fn]
    return out


def _summary(rows: list[dict]) -> dict:
    res = [v for r in rows for v in r.get("resources", {}).values()]
    return dict(seconds=sum(r.get("seconds", 0.0) for r in rows),
                cpu_seconds=sum(r.get("cpu_seconds", 0.0) for r in rows), variants=len(rows),
                failed=sum("error" in r for r in rows), max_reg=max((v["REG"] for v in res), default=None),
                max_stack=max((v["STACK"] for v in res), default=None))


if __name__ == "__main__":
    raise SystemExit(main())

"""``sap-precompile``: compile every CUDA kernel a scene's step launches, without a GPU, and report each.

    sap-precompile humanoid                                  # sm_90 (or this GPU's), every preset and path
    sap-precompile humanoid --preset approx32 --newton-path fused --resources
    sap-precompile humanoid --arch 90 --out cache/ --json

For each configuration asked for (every combination of ``--preset``, ``--newton-path`` and
``--linear-solver``; all of each by default), one ``collide`` + ``step`` of the scene runs as a
dry run on the CPU device (nothing executes) to list the (module, block size) variants the step
launches on a GPU; each variant is then compiled once for ``sm_<arch>`` with Warp's NVRTC and its
compile time printed. With ``--resources`` each kernel's registers (REG), stack, shared and
local memory follow, read with cuobjdump (``pip install -e ".[cuda-tools]"``).

The files go into Warp's kernel cache (``WARP_CACHE_PATH``, default ``~/.cache/warp``), where a
GPU machine with the same Warp version looks first: copy the cache over, point
``WARP_CACHE_PATH`` at it, and the first step starts without compiling (docs/benchmarks.md,
GPU readiness). A variant already in the cache is not compiled again (shown as cached); ``--out
DIR`` writes the variants into a folder of their own instead.
"""

from __future__ import annotations

import itertools
import json
import os
import time

from sap_tools.cli import PRESET_CHOICES, fail, load_scene_arg, parser, scene_solver_kwargs

__all__ = ["main", "configurations"]

DEFAULT_ARCH = 90  # an H100/H200 (sm_90) when no GPU is here to ask


def configurations(presets, newton_paths, linear_solvers):
    """Every (preset, newton_path, linear_solver) asked for. PCR runs the staged loop whatever
    ``newton_path`` says, so a fused/PCR pair is the staged/PCR one and is listed once."""
    out = []
    for preset, path, solver in itertools.product(presets, newton_paths, linear_solvers):
        if solver == "pcr":
            path = "staged"
        if (preset, path, solver) not in out:
            out.append((preset, path, solver))
    return out


def _default_arch() -> int:
    import warp as wp

    wp.init()
    return wp.get_cuda_device().arch if wp.get_cuda_device_count() > 0 else DEFAULT_ARCH


def main(argv=None) -> int:
    from sap_common.config import LINEAR_SOLVERS, NEWTON_PATHS, PRESETS

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
    p.add_argument("--line-search", default=None, help="line search (default: the scene's, else monotone_decay)")
    p.add_argument("--cuda-output", default="cubin", choices=("cubin", "ptx"),
                   help="what to compile to: cubin (default; what Warp loads with wp.config.cuda_output='cubin' "
                        "and with a driver older than its CUDA toolkit) or ptx")
    p.add_argument("--out", default=None, help="write the compiled variants into this folder, not Warp's cache")
    p.add_argument("--resources", action="store_true", help="print each kernel's REG/STACK/SHARED/LOCAL (cuobjdump)")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = p.parse_args(argv)
    from sap_common.config import SapConfig

    for flag, values, valid in (("--newton-path", args.newton_path, NEWTON_PATHS),
                                ("--linear-solver", args.linear_solver, LINEAR_SOLVERS)):
        bad = [v for v in values if v not in valid]
        if bad:
            return fail(prog, f"{flag}: {bad[0]!r} is not valid; valid: {', '.join(valid)}")
    try:
        for preset in args.preset:
            SapConfig.from_preset(preset, line_search_variant=args.line_search or "monotone_decay")
    except ValueError as e:
        return fail(prog, f"--preset/--line-search: {e}")
    if args.resources and args.cuda_output != "cubin":
        return fail(prog, "--resources: cuobjdump reads CUBIN files; use it with --cuda-output cubin")
    if args.arch is not None and args.arch < 50:
        return fail(prog, f"--arch: an SM architecture such as 80, 90 or 100, got {args.arch}")
    if args.out is not None and os.path.exists(args.out) and not os.path.isdir(args.out):
        return fail(prog, f"--out: {args.out!r} exists and is not a directory")
    try:
        scene = load_scene_arg(args.scene, 1)
    except ValueError as e:
        return fail(prog, e)
    from sap_gpu.precompile import compile_variant, find_cuobjdump, kernel_resources, step_variants

    cuobjdump = find_cuobjdump() if args.resources else None
    if args.resources and cuobjdump is None:
        return fail(prog, "--resources: cuobjdump not found; install it with pip install -e \".[cuda-tools]\" "
                          "(the nvidia-cuda-cuobjdump wheel) or put CUDA's cuobjdump on PATH")
    arch = args.arch if args.arch is not None else _default_arch()
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    variants, used_by = {}, {}
    for preset, path, solver in configurations(args.preset, args.newton_path, args.linear_solver):
        kwargs, _ = scene_solver_kwargs(scene, preset, args.line_search)
        kwargs.update(newton_path=path, contact_linear_solver=solver)
        record = step_variants(scene.sap_model, scene.max_rigid_contact, **kwargs)
        for key, module in record.variants.items():
            variants.setdefault(key, (module, record.kernels[key]))
            used_by.setdefault(key, []).append(f"{preset}/{path}/{solver}")
    print(f"{args.scene}: {len(variants)} (module, block size) variants for sm_{arch}, {args.cuda_output}; "
          f"cache {args.out or os.environ.get('WARP_CACHE_PATH') or 'Warp default'}", flush=True)
    rows, total, t0 = [], 0.0, time.perf_counter()
    for (name, block_dim), (module, kernels) in variants.items():
        try:
            r = compile_variant(module, block_dim, arch, args.out, args.cuda_output)
        except Exception as e:  # a compile error is this tool's finding: name the module, go on with the rest
            print(f"FAILED {name} (block {block_dim}): {' '.join(str(e).split())[:400]}", flush=True)
            rows.append(dict(module=name, block_dim=block_dim, error=str(e)[:2000], used_by=used_by[(name, block_dim)]))
            continue
        total += r.seconds
        print(f"{r.seconds:8.1f} s  {name} (block {block_dim}){'  cached' if r.cached else ''}", flush=True)
        row = dict(module=name, block_dim=block_dim, seconds=r.seconds, cached=r.cached, path=r.path,
                   kernels=kernels, used_by=used_by[(name, block_dim)])
        if args.resources and args.cuda_output == "cubin" and r.path:
            row["resources"] = kernel_resources(r.path, cuobjdump)
            for fn, res in sorted(row["resources"].items()):
                print(f"           {fn}: " + ", ".join(f"{k} {v}" for k, v in res.items()), flush=True)
        rows.append(row)
    failed = [r for r in rows if "error" in r]
    print(f"total {total:.1f} s of compiling ({time.perf_counter() - t0:.1f} s wall), {len(rows) - len(failed)} "
          f"variants compiled or cached, {len(failed)} failed", flush=True)
    if args.json:
        print(json.dumps(dict(scene=args.scene, arch=arch, cuda_output=args.cuda_output, total_seconds=total,
                              variants=rows)))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Compile a step's CUDA kernels ahead of time, on any machine, and read what each kernel uses.

Warp compiles a module's CUDA code with NVRTC the first time a kernel of it is launched on a
GPU, once per block size it is launched with. Warp ships NVRTC, so the same compile runs on a
machine without a GPU; this module does it for exactly the variants a step launches:

* :func:`step_variants` builds a solver and a collision pipeline for a model on the CPU device
  and runs one ``collide`` + ``step`` as a dry run of :func:`sap_gpu.launch.record_launches`
  (nothing is launched, nothing is compiled for the CPU): every (module, CUDA block size)
  variant the step launches, with its kernels.
* :func:`compile_variant` compiles one variant for an SM architecture into Warp's kernel cache
  (``wp.config.kernel_cache_dir``, the ``WARP_CACHE_PATH`` environment variable) or a folder.
  A GPU machine whose kernel cache holds these files loads them instead of compiling, as long
  as it runs the same Warp version with the same settings and looks for the same file kind
  (:data:`CUDA_OUTPUTS`: Warp loads CUBIN for ``wp.config.cuda_output = "cubin"``, and by
  default when the driver is older than Warp's CUDA toolkit; else PTX for the architecture
  ``min(device arch, wp.config.ptx_target_arch or 75)``).
* :func:`kernel_resources` reads each compiled kernel's registers, stack, shared and local
  memory with ``cuobjdump --dump-resource-usage`` (the ``[cuda-tools]`` extra installs it).
* :func:`kernel_lives` says where in the source a kernel's registers are live and where it
  spills: compiled with line information (``compile_variant(..., lineinfo=True)``), its machine
  code is read with ``nvdisasm`` (the same extra): the registers live at every instruction and
  the Python line each instruction comes from.
* :func:`ncu_source_samples` puts an Nsight Compute profile taken on a GPU (its warp-state
  samples and instruction counts, per machine instruction) on the same Python lines, from the
  kernel compiled again with line information on any machine.

This uses two Warp calls that are not public API (``Module._compile`` with the resolved options
of a given block size: ``wp.compile_aot_module`` compiles a module's default block size only);
warp-lang is pinned to 1.19 in pyproject.toml.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass

import warp as wp

from sap_common.model import SapModel

from .launch import LaunchRecord, record_launches

__all__ = ["CUDA_OUTPUTS", "step_variants", "compile_variant", "CompileResult", "find_cuobjdump",
           "kernel_resources", "find_nvdisasm", "kernel_lives", "SourceLives", "ncu_source_samples",
           "ncu_kernel_names", "SourceSamples"]

CUDA_OUTPUTS = ("cubin", "ptx")


def step_variants(model: SapModel, max_rigid_contact: int, steps: int = 1, **config) -> LaunchRecord:
    """The (module, CUDA block size) variants that constructing a solver and pipeline for ``model``
    and running ``steps`` × (``collide`` + ``step``) launches, found by a dry run on the CPU
    device (``config``: any :class:`~sap_common.config.SapConfig` knob, e.g.
    ``contact_preset_variant``, ``newton_path``, ``contact_linear_solver``)."""
    from .arrays import control, state
    from .collision import CollisionPipeline
    from .solver import SolverSAP

    with record_launches(dry_run=True) as record:
        solver = SolverSAP(model, max_rigid_contact=max_rigid_contact, device="cpu", **config)
        pipeline = CollisionPipeline(model, max_rigid_contact, solver.config, device="cpu")
        s, c = state(model, "cpu"), control(model, "cpu")
        contacts = pipeline.contacts()
        for _ in range(steps):
            pipeline.collide(s, contacts)
            solver.step(s, s, c, contacts, 1e-3)
    return record


@dataclass
class CompileResult:
    """One compiled variant: ``seconds`` of wall time and ``cpu_seconds`` of this process's CPU
    time (NVRTC runs in-process on one core, so on a busy machine the CPU time is the figure that
    does not depend on the other work), both 0 if ``cached``; the artifact's ``path``."""

    module: str
    block_dim: int
    arch: int
    seconds: float
    cpu_seconds: float
    cached: bool
    path: str | None


def compile_variant(module, block_dim: int, arch: int, out_dir: str | None = None,
                    cuda_output: str = "cubin", lineinfo: bool = False) -> CompileResult:
    """Compile Warp module ``module`` at ``block_dim`` for ``sm_<arch>`` (``cuda_output`` "cubin"
    or "ptx"). ``out_dir`` None writes into Warp's kernel cache, where a GPU looks, and skips a
    variant already there; a folder gets the files of every variant side by side. ``lineinfo``
    adds the source line of every instruction (NVRTC's ``--generate-line-info``; the machine
    code is the same), for :func:`kernel_lives`; its files keep the variant's name, so they go
    to an ``out_dir`` of their own, never to the kernel cache."""
    if cuda_output not in CUDA_OUTPUTS:
        raise ValueError(f"cuda_output: {cuda_output!r} is not valid; valid: {', '.join(CUDA_OUTPUTS)}")
    if lineinfo and out_dir is None:
        raise ValueError("lineinfo: give an out_dir; a variant compiled with line information keeps the variant's "
                         "file name and must not take its place in Warp's kernel cache")
    wp.init()
    module.get_module_hash(block_dim)  # the variant's hash names its files
    options = module.resolved_options[block_dim]
    if lineinfo:
        options = {**options, "lineinfo": True}
    target = None
    if out_dir is not None:
        target = os.path.join(out_dir, module.get_module_identifier(block_dim))
        os.makedirs(target, exist_ok=True)
    t, cpu = time.perf_counter(), time.process_time()
    compiled = module._compile(None, target, output_arch=int(arch), use_ptx=cuda_output == "ptx", options=options)
    seconds, cpu_seconds = time.perf_counter() - t, time.process_time() - cpu
    folder = target or os.path.join(wp.config.kernel_cache_dir, module.get_module_identifier(block_dim))
    suffix = "ptx" if cuda_output == "ptx" else "cubin"
    paths = sorted(glob.glob(os.path.join(folder, f"*.sm{int(arch)}*.{suffix}")))
    return CompileResult(module=module.name, block_dim=int(block_dim), arch=int(arch),
                         seconds=seconds if compiled else 0.0, cpu_seconds=cpu_seconds if compiled else 0.0,
                         cached=not compiled,
                         path=paths[0] if paths else None)


def _find_cuda_tool(name: str) -> str | None:
    """CUDA's ``name`` executable: on PATH, or from the ``nvidia-cuda-<name>`` wheel of this Python."""
    hit = shutil.which(name)
    if hit:
        return hit
    for root in {sys.prefix, sys.base_prefix}:
        found = sorted(glob.glob(os.path.join(root, "lib", "python3*", "site-packages", "nvidia", "cu*", "bin", name)))
        if found:
            return found[-1]
    return None


def find_cuobjdump() -> str | None:
    """The ``cuobjdump`` executable: on PATH, or from the ``nvidia-cuda-cuobjdump`` wheel of this
    Python (``pip install -e ".[cuda-tools]"``); None if neither."""
    return _find_cuda_tool("cuobjdump")


def find_nvdisasm() -> str | None:
    """The ``nvdisasm`` executable: on PATH, or from the ``nvidia-cuda-nvdisasm`` wheel of this
    Python (``pip install -e ".[cuda-tools]"``); None if neither."""
    return _find_cuda_tool("nvdisasm")


RESOURCE_FIELDS = ("REG", "STACK", "SHARED", "LOCAL")


def kernel_resources(cubin: str, cuobjdump: str | None = None) -> dict:
    """``{kernel: {"REG", "STACK", "SHARED", "LOCAL": int}}`` of a CUBIN file (per thread: registers,
    stack and local bytes; per block: static shared bytes), from ``cuobjdump
    --dump-resource-usage``. ``RuntimeError`` if cuobjdump is missing or fails."""
    tool = cuobjdump or find_cuobjdump()
    if tool is None:
        raise RuntimeError("cuobjdump not found: install the [cuda-tools] extra (pip install -e \".[cuda-tools]\") "
                           "or put CUDA's cuobjdump on PATH")
    run = subprocess.run([tool, "--dump-resource-usage", cubin], capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"cuobjdump failed on {cubin}: {run.stderr.strip()}")
    out, lines = {}, run.stdout.splitlines()
    for i, line in enumerate(lines):
        if "Function" in line and i + 1 < len(lines):
            name = line.split("Function", 1)[1].strip().rstrip(":")
            values = {}
            for token in lines[i + 1].split():
                key, _, value = token.partition(":")
                if key.replace("[0]", "") in RESOURCE_FIELDS and value.isdigit():
                    values[key] = int(value)
            out[name] = {k: values.get(k, 0) for k in RESOURCE_FIELDS}
    return out


# ---------------------------------------------------------------------------------------- lives

_SASS = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")  # an instruction: /*address*/ opcode operands ;
_LIVE = re.compile(r"//\s*\|\s*(\d*)\s*\|")  # nvdisasm -plr -lrm count: the first column, GPRs live
_LINE = re.compile(r'//## File "(.*?)", line (\d+)')  # nvdisasm -gi: the innermost location of a line


@dataclass
class SourceLives:
    """The instructions of one kernel that come from one Python line (``where``, ``file.py:line``;
    the innermost Python frame, so a line of a ``wp.func`` rather than the kernel line calling
    it, which is ``called_from``): the most general-purpose registers live at any of them
    (``peak``), how many there are, and how many of them load from or store to local memory
    (``local_loads``, ``local_stores``: the spills, and arrays the compiler put in local memory).
    ``depth`` is how many loops of the machine code hold them (the backward branches around
    them), so the same line inside and outside a loop gives two entries: a spill at depth 0 runs
    once per launch, one at depth 1 once per trip of the outermost loop (the fused kernel's Newton
    loop), and so on. ``where`` is ``file (native code)`` for C++ of a ``wp.func_native``
    snippet, whose line numbers NVRTC counts on from the last Python line before it, and
    ``(no line)`` for CUDA's own subroutines (the slow paths of division and square root)."""

    where: str
    called_from: str
    function: str
    depth: int
    peak: int
    instructions: int
    local_loads: int
    local_stores: int


def _function_label(label: str, kernel: str) -> str:
    """A readable name for a subroutine label of a kernel's machine code."""
    label = label.lstrip("$")
    if label.startswith("__internal_"):  # CUDA's own: $__internal_1_$__cuda_sm20_div_rn_f64_full
        return label.split("$", 1)[-1].lstrip("_")
    if label.startswith(kernel + "$"):  # a __noinline__ function: the last two names of its mangled one
        inner, parts, i = label[len(kernel) + 1:], [], 0
        while i < len(inner):  # Itanium mangling: an identifier is <length><characters>
            m = re.match(r"\d+", inner[i:])
            word = inner[i + m.end():i + m.end() + int(m.group())] if m else ""
            if m and len(word) == int(m.group()) and word.isidentifier():
                parts.append(word)
                i += m.end() + len(word)
            else:
                i += 1
        return "::".join(parts[-2:]) or inner
    return label


def _sections(text: str, parse) -> dict:
    """``{kernel: (entries, state)}`` over the ``.text.<kernel>`` sections of an nvdisasm listing:
    ``parse(line, state, entries)`` sees every line of a section; ``state["function"]`` is the
    subroutine the line is in (None: the kernel itself), ``state["raw"]`` its label."""
    out, kernel, state = {}, None, {}
    for line in text.splitlines():
        if line.startswith(".text."):
            kernel = line[len(".text."):].split(":", 1)[0].strip()
            state = {"function": None, "raw": None}
            out[kernel] = ({}, state)
            continue
        if kernel is None:
            continue
        if line.startswith("$") and line.split()[0].endswith(":"):
            state["raw"] = line.split()[0][:-1]
            state["function"] = _function_label(state["raw"], kernel)
            continue
        parse(line, state, out[kernel][0])
    return out


def _opcode(text: str) -> str:
    """The opcode of one SASS instruction's text, past a predicate (``@P0 BRA ...`` → ``BRA``)."""
    words = text.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].rstrip(";") if words else ""


def _located(line, state, out):
    """A ``_sections`` parser of an ``nvdisasm --print-line-info-inline`` listing: address →
    (the chain of source locations, innermost first, as nvdisasm lists them; the opcode)."""
    m = _LINE.search(line)
    if m:
        if not state.get("open"):
            state["chain"], state["open"] = [], True
        state["chain"].append((m.group(1), int(m.group(2))))
        return
    m = _SASS.search(line)
    if m:
        state["open"] = False
        out[int(m.group(1), 16)] = (tuple(state.get("chain", ())), _opcode(m.group(2)), state["function"] or "kernel")


def _place(chain, sizes: dict) -> tuple[str, str]:
    """(innermost Python line, the kernel line it is inlined at) of a chain of source locations;
    a line past its file's end is C++ of a ``wp.func_native`` snippet."""
    def name(f: str, n: int) -> str:
        return f"{os.path.basename(f)} (native code)" if n > _py_lines(f, sizes) else f"{os.path.basename(f)}:{n}"

    py = [(f, n) for f, n in chain if f.endswith(".py")]
    if not py:
        return "(no line)", "(no line)"
    return name(*py[0]), name(*py[-1])


def _line_listing(cubin: str, tool: str) -> dict:
    """``{kernel: {address: (chain, opcode, function)}}`` of a CUBIN file with line information;
    ``RuntimeError`` if nvdisasm fails or the file has none."""
    run = subprocess.run([tool, "--print-line-info-inline", cubin], capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"nvdisasm failed on {cubin}: {run.stderr.strip()}")
    chains = {kernel: entries for kernel, (entries, _) in _sections(run.stdout, _located).items()}
    if not any(chain for entries in chains.values() for chain, _, _ in entries.values()):
        raise RuntimeError(f"{cubin}: no line information; compile it with compile_variant(..., lineinfo=True)")
    return chains


def _py_lines(path: str, cache: dict) -> int:
    if path not in cache:
        try:
            with open(path, encoding="utf-8") as f:
                cache[path] = sum(1 for _ in f)
        except OSError:
            cache[path] = 0
    return cache[path]


def kernel_lives(cubin: str, nvdisasm: str | None = None) -> dict:
    """``{kernel: {"peak": int, "functions": {function: peak}, "lines": [SourceLives]}}`` of a
    CUBIN file compiled with line information (:func:`compile_variant` with ``lineinfo=True``):
    for every kernel, the most general-purpose registers live at one of its instructions
    (``peak``; the kernel's REG adds what the hardware reserves), the same per subroutine
    (``functions``, "kernel" for the kernel's own code: a ``__noinline__`` function and CUDA's
    slow paths of division and square root are subroutines), and per Python line
    (:class:`SourceLives`, highest peak first), from ``nvdisasm --print-life-ranges`` and
    ``--print-line-info-inline``. ``RuntimeError`` if nvdisasm is missing or fails, or the file has
    no line information."""
    tool = nvdisasm or find_nvdisasm()
    if tool is None:
        raise RuntimeError("nvdisasm not found: install the [cuda-tools] extra (pip install -e \".[cuda-tools]\") "
                           "or put CUDA's nvdisasm on PATH")
    run = subprocess.run([tool, "--print-life-ranges", "--life-range-mode", "count", cubin], capture_output=True,
                         text=True)
    if run.returncode != 0:
        raise RuntimeError(f"nvdisasm failed on {cubin}: {run.stderr.strip()}")
    chains = _line_listing(cubin, tool)

    def live(line, state, out):
        label = re.match(r"(\.L_x_\d+):", line)
        if label:
            state.setdefault("pending", []).append(label.group(1))
            return
        m = _SASS.search(line)
        if m:
            address, text = int(m.group(1), 16), m.group(2)
            for name in state.pop("pending", []):
                state.setdefault("labels", {})[name] = address
            target = re.search(r"`\((\.L_x_\d+)\)", text)
            opcode = _opcode(text)
            if opcode.startswith("BRA") and target:
                state.setdefault("branches", []).append((address, target.group(1)))
            callee = re.search(r"`\((\$[^)\s]+)\)", text)
            if opcode.startswith("CALL") and callee:
                state.setdefault("calls", []).append((address, callee.group(1)))
            state.setdefault("owner", {})[address] = state["raw"]
            c = _LIVE.search(line[m.end():])
            out[address] = (int(c.group(1)) if c and c.group(1) else 0, opcode, state["function"] or "kernel")

    def depths(kernel_out: dict, state: dict) -> dict:
        """address → the loops around it: the backward branches' spans that hold it, plus, in a
        subroutine, the most loops around one of its calls."""
        labels, owner = state.get("labels", {}), state.get("owner", {})
        spans = [(labels[t], a) for a, t in state.get("branches", []) if t in labels and labels[t] <= a]
        own = {address: sum(lo <= address <= hi for lo, hi in spans) for address in kernel_out}
        base: dict = {}
        for _ in range(8):  # calls nest a few deep (the kernel → a __noinline__ function → a slow path)
            base = {callee: max(own[a] + base.get(owner[a], 0) for a, c in state.get("calls", []) if c == callee)
                    for callee in {c for _, c in state.get("calls", [])}}
        return {address: own[address] + base.get(owner[address], 0) for address in kernel_out}

    counts = _sections(run.stdout, live)
    sizes: dict = {}

    out = {}
    for kernel, (instructions, state) in counts.items():
        located_at = chains.get(kernel, {})
        depth = depths(instructions, state)
        per_line, functions = {}, {}
        for address, (n, opcode, function) in instructions.items():
            where, called_from = _place(located_at.get(address, ((), "", ""))[0], sizes)
            functions[function] = max(functions.get(function, 0), n)
            row = per_line.setdefault((where, called_from, function, depth[address]),
                                      SourceLives(where, called_from, function, depth[address], 0, 0, 0, 0))
            row.peak = max(row.peak, n)
            row.instructions += 1
            row.local_loads += opcode.startswith("LDL")
            row.local_stores += opcode.startswith("STL")
        lines = sorted(per_line.values(), key=lambda r: (-r.peak, r.where, r.called_from, r.depth))
        out[kernel] = dict(peak=max(functions.values(), default=0), functions=functions, lines=lines)
    return out


# ------------------------------------------------------------------------ Nsight Compute samples

@dataclass
class SourceSamples:
    """What Nsight Compute saw at the instructions of one kernel that come from one Python line
    (``where``, innermost; ``called_from``, the kernel line; ``function`` as in
    :class:`SourceLives`): ``samples``, the warp-state samples taken there (each says what a warp
    was doing or waiting for at that moment: ``stalls``, by ncu's reason name without its
    ``stall_`` prefix, such as ``no_inst``, ``long_sb``, ``wait``, ``selected``), and
    ``executed``, the warp-level instructions executed there."""

    where: str
    called_from: str
    function: str
    instructions: int
    samples: int
    executed: int
    stalls: dict


def _ncu_tables(text: str) -> dict:
    """``{kernel: (header, rows)}`` of ``ncu --import R --page source --csv --print-source sass``:
    each kernel's table follows a ``"Kernel Name","<name>"`` line."""
    import csv
    import io

    out, kernel, header = {}, None, None
    for row in csv.reader(io.StringIO(text)):
        if len(row) >= 2 and row[0] == "Kernel Name":
            kernel, header = row[1], None
            out[kernel] = (None, [])
        elif kernel is not None and header is None and "Address" in row:
            header = row
            out[kernel] = (header, [])
        elif kernel is not None and header is not None and len(row) >= len(header) - 1:
            out[kernel][1].append(row)
    return {k: v for k, v in out.items() if v[0] is not None}


def ncu_kernel_names(csv_text: str) -> list[str]:
    """The kernels whose per-instruction tables an Nsight Compute source CSV holds."""
    return list(_ncu_tables(csv_text))


def _count(text: str) -> int:
    text = text.replace(",", "").strip()
    try:
        return int(float(text)) if text else 0
    except ValueError:
        return 0


def ncu_source_samples(csv_text: str, cubin: str, nvdisasm: str | None = None) -> dict:
    """Nsight Compute's per-instruction counts of a kernel, per Python line: ``csv_text`` is
    ``ncu --import REPORT --page source --csv --print-source sass`` of a report taken with the
    ``SourceCounters`` section (``--set full``) on a GPU; ``cubin`` the same kernel compiled again
    with line information (:func:`compile_variant` with ``lineinfo=True``, on any machine: the
    machine code is the same, which this checks instruction by instruction). Returns ``{kernel:
    {"samples", "executed": int, "stalls": {reason: samples}, "lines": [SourceSamples]}}`` for
    each kernel of the report found in the CUBIN file (most samples first). ``RuntimeError`` if a
    kernel's machine code differs from the report's (another build or configuration), if none is
    found, or if nvdisasm is missing or fails."""
    tool = nvdisasm or find_nvdisasm()
    if tool is None:
        raise RuntimeError("nvdisasm not found: install the [cuda-tools] extra (pip install -e \".[cuda-tools]\") "
                           "or put CUDA's nvdisasm on PATH")
    tables = _ncu_tables(csv_text)
    if not tables:
        raise RuntimeError("no kernel table in the Nsight Compute CSV: expected the output of ncu --import REPORT "
                           "--page source --csv --print-source sass")
    chains = _line_listing(cubin, tool)
    found = {k: v for k, v in tables.items() if k in chains}
    if not found:
        raise RuntimeError(f"the report's kernels ({', '.join(sorted(tables))}) are not in {cubin} (its kernels: "
                           f"{', '.join(sorted(chains))})")
    sizes: dict = {}
    out = {}
    for kernel, (header, rows) in found.items():
        col = {name: i for i, name in enumerate(header)}
        stall_cols = {name[len("stall_"):]: i for name, i in col.items()
                      if name.startswith("stall_") and "Not Issued" not in name}
        listing = chains[kernel]
        addresses = [int(r[col["Address"]], 16) for r in rows]
        base = min(addresses)
        differ = [a - base for a, r in zip(addresses, rows)
                  if a - base not in listing or listing[a - base][1] != _opcode(r[col["Source"]])]
        if differ or len(rows) != len(listing):
            raise RuntimeError(f"{kernel}: the report's machine code is not {cubin}'s ({len(differ)} of {len(rows)} "
                               f"instructions differ, {len(listing)} in the file): compile the configuration the "
                               "report ran")
        per_line, totals = {}, {"samples": 0, "executed": 0, "stalls": {}}
        for a, r in zip(addresses, rows):
            chain, _, function = listing[a - base]
            where, called_from = _place(chain, sizes)
            row = per_line.setdefault((where, called_from, function),
                                      SourceSamples(where, called_from, function, 0, 0, 0, {}))
            n, e = _count(r[col["Warp Stall Sampling (All Samples)"]]), _count(r[col["Instructions Executed"]])
            row.instructions += 1
            row.samples += n
            row.executed += e
            totals["samples"] += n
            totals["executed"] += e
            for reason, i in stall_cols.items():
                v = _count(r[i])
                if v:
                    row.stalls[reason] = row.stalls.get(reason, 0) + v
                    totals["stalls"][reason] = totals["stalls"].get(reason, 0) + v
        lines = sorted(per_line.values(), key=lambda x: (-x.samples, x.where, x.called_from))
        out[kernel] = dict(totals, lines=lines)
    return out

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

This uses two Warp calls that are not public API (``Module._compile`` with the resolved options
of a given block size: ``wp.compile_aot_module`` compiles a module's default block size only);
warp-lang is pinned to 1.19 in pyproject.toml.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass

import warp as wp

from sap_common.model import SapModel

from .launch import LaunchRecord, record_launches

__all__ = ["CUDA_OUTPUTS", "step_variants", "compile_variant", "CompileResult", "find_cuobjdump",
           "kernel_resources"]

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
                    cuda_output: str = "cubin") -> CompileResult:
    """Compile Warp module ``module`` at ``block_dim`` for ``sm_<arch>`` (``cuda_output`` "cubin"
    or "ptx"). ``out_dir`` None writes into Warp's kernel cache, where a GPU looks, and skips a
    variant already there; a folder gets the files of every variant side by side."""
    if cuda_output not in CUDA_OUTPUTS:
        raise ValueError(f"cuda_output: {cuda_output!r} is not valid; valid: {', '.join(CUDA_OUTPUTS)}")
    wp.init()
    module.get_module_hash(block_dim)  # the variant's hash names its files
    options = module.resolved_options[block_dim]
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


def find_cuobjdump() -> str | None:
    """The ``cuobjdump`` executable: on PATH, or from the ``nvidia-cuda-cuobjdump`` wheel of this
    Python (``pip install -e ".[cuda-tools]"``); None if neither."""
    hit = shutil.which("cuobjdump")
    if hit:
        return hit
    for root in {sys.prefix, sys.base_prefix}:
        found = sorted(glob.glob(os.path.join(root, "lib", "python3*", "site-packages", "nvidia", "cu*", "bin",
                                              "cuobjdump")))
        if found:
            return found[-1]
    return None


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

r"""``sap-benchmark``: sap_gpu throughput over a num_worlds sweep, optionally against MuJoCo Warp.

    sap-benchmark humanoid --num-worlds 1024 4096 8192 --preset approx32 approx64 drake --vs-mjwarp \
        --mjwarp-nconmax 24 --mjwarp-njmax 64 --out results.json
    sap-benchmark humanoid --num-worlds 8192 --breakdown         # + per-stage timing (eager pass)
    sap-benchmark humanoid --line-search exact_root monotone_decay --override cost_rel_tol=1e-4  # a sweep
    sap-benchmark sphere_drop --num-worlds 4 --steps 5 --device cpu --json
    sap-benchmark path/to/model.xml --num-worlds 256,1024         # any MJCF (or a JSON scene file)
    sap-benchmark humanoid --num-worlds 1024 8192 --randomize     # + each run with per-world parameters

Each run builds the scene with ``num_worlds`` identical worlds and steps it ``collide →
control noise → step`` (plus a small kernel that accumulates iteration and contact statistics
on the device). ``--warmup`` eager steps come first (they load the kernels); on a CUDA device
one step is then captured in a CUDA graph (``wp.ScopedCapture``; the Newton loop's
``wp.capture_while`` needs conditional graph nodes, CUDA ≥ 12.4: if capture fails the run
falls back to eager launches and reports ``graph: false`` with the reason) and replayed once
more as warm-up. The timed region is the wall clock around ``--steps`` replays (or eager
steps on the CPU device) and a final ``wp.synchronize_device``:

* world-steps/s = num_worlds · steps / seconds; ms/step = 1000 · seconds / steps (one step of
  every world); real-time factor (RTF) = steps · dt / seconds, per world (simulated seconds of
  one world per wall-clock second; multiply by num_worlds for the aggregate).
* Newton / line-search iterations: mean and 95th percentile over every (world, step) pair, and
  line-search probes per Newton iteration (the structure line; each probe is one pass over the
  rows, a block reduction on the fused path); contacts per world: mean (and max) of the
  collision count; truncated: contacts dropped for lack of slots, summed over (world, step);
  converged: fraction of (world, step) pairs whose status has CONVERGED; capped: (world, step)
  pairs that stopped at the Newton iteration cap (status MAX_ITERATIONS).
* GPU memory: device memory taken by the run (model, state, solver, collision, statistics and
  graph), from Warp's memory-pool counter, or free-memory difference where the pool is off;
  null on the CPU device.
* A sap_gpu run is valid when nothing is non-finite (no step flagged NON_FINITE, every final
  state finite), no contact was truncated, and the converged fraction is at least
  :data:`MIN_CONVERGED_FRACTION`; otherwise the table and the JSON say why
  (``invalid_reason``). A MuJoCo Warp run is valid when its final state is finite and it did not
  overflow its nconmax/njmax capacity.

Control noise: every step each channel draws ``u ~ N(0, σ)`` on the device (``wp.rand_init``
keyed by seed, a device step counter, world and channel, so it lives inside the graph). On an
MJCF scene the channels are the motor actuators: ``u`` is the MuJoCo ``ctrl``, clamped to its
ctrlrange, applied as ``joint_act = gear·gain·u`` (what MuJoCo applies for that ctrl); with
``--vs-mjwarp`` the same draws are written to MuJoCo Warp's ``d.ctrl``. On other scenes the
channels are all DOFs and ``u`` [N, N·m] is added to ``joint_f``.

``--vs-mjwarp`` runs MuJoCo Warp (``mujoco_warp.step``) on the scene's compiled MuJoCo model
with the same dt, worlds, steps, warm-up, graph capture and noise, in the same process, and
prints the ratio sap_gpu/mjwarp of world-steps/s. ``--breakdown`` adds an eager pass with
``SolverSAP.stage_hook``: each stage is timed with ``wp.synchronize_device`` and
``perf_counter`` (collision around ``pipeline.collide``), reported as ms per step and %; on a
CUDA device the same steps also give each kernel's own device time (Warp's activity timing,
CUDA events around every kernel, copy and memset), summed per kernel, as a second table.
After the timed run, ``--structure-steps`` eager steps are counted (:func:`structure`): device
operations per step (launches, copies, memsets: a CUDA graph's nodes) and, for sap_gpu, those
of the Newton loop and the batch's trips through it against the per-world Newton iterations.
``--structure`` adds the memory traffic (:mod:`sap_tools.benchmark.traffic`): the fused Newton
kernel's global loads and stores per Newton iteration of a world, *derived* from its access
pattern over the lists the step built, and the set-up kernels' launches, threads and bytes per
step, *counted* from one recorded step.
``--newton-path fused staged`` runs both of ``SolverSAP``'s Newton paths and prints the
speed-up (on the CPU device also by process CPU time, which other load disturbs less).
``--randomize`` measures every sap_gpu run twice in the same process: as above, then with a
``sap_gpu.WorldParameters`` of the run's model filled by :func:`sap_tools.randomize.draw` with
``np.random.default_rng(--seed)`` (per world: friction, body masses with their inertia, joint
damping, drive gains), which both the solver and the collision pipeline read. That run is
labelled ``/randomized`` (JSON ``randomized: true`` and ``randomized_fields``, the fields whose
values differ between worlds, read back from the solver's parameters) and ``ratio
randomized/plain`` prints its world-steps/s over the plain run's (on the CPU device also by
process CPU time): the cost of reading parameters per world, plus whatever the drawn dynamics
change in the iterations (compare the Newton columns). MuJoCo Warp (``--vs-mjwarp``) has no
per-world parameters here: it runs once, on the model's values.
``--json`` prints one JSON object as the last line: with one sap_gpu run its fields sit at the
top level; always ``runs`` (every run, each with valid, world_steps_per_s, ms_per_step,
num_worlds, preset, device, …), ``valid`` (all runs), with ``--vs-mjwarp``, ``ratios`` and, with
``--randomize``, ``randomized_ratios`` (with one configuration, the plain run's fields at the top
level and ``randomized_ratio``).
``--out`` writes the same object to a file for ``sap-plot-benchmark``.
"""

from __future__ import annotations

import gc
import itertools
import json
import math
import os
import sys

import numpy as np
import warp as wp

from sap_common.config import LINEAR_SOLVERS, SapConfig
from sap_common.constants import (
    DEFAULT_FUSED_CHOLESKY,
    DEFAULT_FUSED_HESSIAN,
    DEFAULT_NEWTON_PATH,
    FUSED_CHOLESKY_AUTO,
    FUSED_CHOLESKYS,
    FUSED_HESSIANS,
    FUSED_MAX_REGISTERS_AUTO,
    NEWTON_PATHS,
)
from sap_common.io import LoadedScene
from sap_tools import randomize
from sap_tools.benchmark.measure import (
    MIN_CONVERGED_FRACTION,
    RANDOMIZED_SUFFIX,
    breakdown,
    breakdown_table,
    cholesky_speedups,
    hessian_speedups,
    path_speedups,
    randomized_ratios,
    ratios,
    register_cap_speedups,
    sparse_speedups,
    structure,
    structure_line,
    table,
    time_run,
    validity,
)
from sap_tools.benchmark.runs import (
    DEFAULT_NOISE_STD,
    MjwarpRun,
    SapRun,
    load_scene,
    memory_in_use,
    noise_channels,
    percentile_from_histogram,
)
from sap_tools.benchmark.traffic import newton_traffic, setup_traffic, traffic_lines
from sap_tools.cli import (
    LINE_SEARCH_CHOICES,
    PRESET_CHOICES,
    atomic_output,
    check_out,
    check_run_memory,
    cpu_model,
    entry_point,
    fail,
    parse_override,
    parser,
    register_cap_label,
    register_caps,
    warp_device,
)
from sap_tools.fanout import RAY_LOCAL, map_tasks, ray_resources, ray_session, task_device
from sap_tools.progress import Progress

# The command line is here; the runs are in sap_tools.benchmark.runs, their timing, structure counts,
# validity and report tables in sap_tools.benchmark.measure (their public names are also
# importable from sap_tools.benchmark, for scripts).
__all__ = ["main", "load_scene", "noise_channels", "percentile_from_histogram", "SapRun", "MjwarpRun",
           "time_run", "breakdown", "structure", "validity", "DEFAULT_NOISE_STD", "MIN_CONVERGED_FRACTION"]

DEFAULT_SCENE = "humanoid"
DEFAULT_STEPS = 500  # MuJoCo Warp's published reference run (mjwarp-testspeed) uses --nstep 500
DEFAULT_WARMUP = 10
DEFAULT_SEED = 0
DEFAULT_STRUCTURE_STEPS = 5  # eager steps whose device operations are counted after the timed run


# ----------------------------------------------------------------------------- runs


def _hardware(device) -> str:
    if device.is_cuda:
        return f"{device.name} ({device.total_memory / 2**30:.0f} GiB)"
    return f"{cpu_model()} ({os.cpu_count()} logical CPUs)"


def _run_one(make, label: str, scene: LoadedScene, args, device, extra: dict) -> dict:
    """Construct a run (``make(scene)``), time it and summarize it as one report row.

    ``make`` takes the scene as its argument rather than closing over it, so that the caller can
    drop its own reference to the scene (and the device arrays it holds) before loading the next.
    """
    gc.collect()
    mem0 = memory_in_use(device)
    run = make(scene)
    W = scene.sap_model.num_worlds
    with Progress(args.steps, f"{label} x{W}", enabled=not args.quiet) as bar:
        timing = time_run(run, args.steps, args.warmup, not args.no_graph, bar)
    mem1 = memory_in_use(device)
    s = timing["seconds"]
    row = dict(backend=run.backend, label=label, scene=scene.name, num_worlds=W, steps=args.steps,
               warmup=args.warmup, dt=run.dt, device=str(device), hardware=_hardware(device),
               world_steps_per_s=W * args.steps / s, ms_per_step=1e3 * s / args.steps,
               realtime_factor=args.steps * run.dt / s,
               gpu_memory_mib=None if mem0 is None else max(mem1 - mem0, 0) / 2**20, **timing, **extra)
    row.update(run.summary())
    row["valid"], row["invalid_reason"] = validity(row)
    row.update(structure(run, args.structure_steps))
    if getattr(args, "structure", False) and run.backend == "sap_gpu":
        setup = setup_traffic(run)  # one more step, recorded; the Newton figure is of that step
        newton = newton_traffic(run.solver) if run.solver.work.fused else None
        row["traffic"] = dict(setup=setup, newton=newton)
    if args.breakdown and run.backend == "sap_gpu":
        row["breakdown"] = breakdown(run, args.breakdown_steps)
    del run
    return row


# ----------------------------------------------------------------------------- command line


def _positive_ints(flag: str, values: list[str]) -> list[int]:
    out = []
    for v in values:
        for part in str(v).split(","):
            if part.strip():
                try:
                    n = int(part)
                except ValueError:
                    raise ValueError(f"{flag}: expected integers >= 1, got {part!r}") from None
                if n < 1:
                    raise ValueError(f"{flag}: expected integers >= 1, got {n}")
                out.append(n)
    if not out:
        raise ValueError(f"{flag}: give at least one value")
    return out


def _parser():
    p = parser("sap-benchmark", __doc__)
    p.add_argument("scene", nargs="*", default=None,
                   help=f"built-in scenes, JSON scene files or MJCF/URDF files, a sweep (default {DEFAULT_SCENE})")
    p.add_argument("--num-worlds", nargs="+", default=["1024"], help="worlds per run, a sweep: 1024 4096 or 1024,4096")
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS, help=f"timed steps per run (default {DEFAULT_STEPS})")
    p.add_argument("--warmup", type=int, default=DEFAULT_WARMUP, help=f"untimed steps first (default {DEFAULT_WARMUP})")
    p.add_argument("--preset", nargs="+", default=["approx32"],
                   help=f"contact_preset_variant(s): {PRESET_CHOICES} (default approx32; several = a sweep)")
    p.add_argument("--line-search", nargs="+", default=None,
                   help=f"line_search_variant(s): {LINE_SEARCH_CHOICES} (default: SapConfig's; several = a sweep)")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="any SapConfig knob for every sap_gpu run, e.g. --override cost_rel_tol=1e-4 (repeatable)")
    p.add_argument("--max-iterations", type=int, default=None,
                   help="Newton iteration cap of sap_gpu (default: the preset's, 100)")
    p.add_argument("--linear-solver", nargs="+", default=None, choices=LINEAR_SOLVERS,
                   help="contact_linear_solver(s) of sap_gpu (default: the config's; several = a sweep, "
                        "runs labelled preset/solver)")
    p.add_argument("--rows", nargs="+", default=["sparse"], choices=("sparse", "dense"),
                   help="J and A products of the Newton loop over non-zero columns (sparse, default) or every "
                        "column (dense: the plain path); both = a sweep with the speed-up printed")
    p.add_argument("--newton-path", nargs="+", default=[DEFAULT_NEWTON_PATH], choices=NEWTON_PATHS,
                   help=f"SolverSAP newton_path: fused (one block per world runs its whole Newton loop) or staged "
                        f"(one kernel per stage, a capture_while trip per batch iteration); default "
                        f"{DEFAULT_NEWTON_PATH}; both = a sweep with the speed-up printed")
    p.add_argument("--fused-max-registers", nargs="+", default=["auto"], metavar="N",
                   help="SapConfig.fused_max_registers, the fused Newton kernel's CUDA register cap: auto (default: "
                        "sap_gpu's cap per kernel), none (the compiler's choice) or 32..255; several = a sweep with "
                        "the speed-up over none printed (runs labelled /nocap and /regN)")
    p.add_argument("--fused-hessian", nargs="+", default=[DEFAULT_FUSED_HESSIAN], choices=FUSED_HESSIANS,
                   help="SapConfig.fused_hessian, how the fused Newton kernel forms H: rows (default: lanes over H's "
                        "rows in global memory) or tiles (tile products in shared memory, nv <= 32); both = a sweep "
                        "with the speed-up of tiles over rows printed (runs labelled /tiles)")
    p.add_argument("--fused-cholesky", nargs="+", default=[DEFAULT_FUSED_CHOLESKY], choices=FUSED_CHOLESKYS,
                   help="SapConfig.fused_cholesky, how the fused Newton kernel factors H: auto (default: lanes on a "
                        "GPU, tile on the CPU device), lanes (H's rows in the lanes' registers, nv <= 32, H formed by "
                        "rows) or tile (Warp's tile Cholesky; what an H formed by tiles takes); lanes tile = a sweep "
                        "with the speed-up of lanes over tile printed (the run the default does not take is "
                        "labelled /lanes or /tile)")
    p.add_argument("--structure-steps", type=int, default=DEFAULT_STRUCTURE_STEPS,
                   help=f"eager steps after the timed run whose device operations are counted (default "
                        f"{DEFAULT_STRUCTURE_STEPS})")
    p.add_argument("--structure", action="store_true",
                   help="also the memory traffic of each sap_gpu run: the fused Newton loop's global loads and stores "
                        "per iteration of a world (derived from its access pattern) and the set-up kernels' launches "
                        "and bytes per step (counted from one recorded step); printed as traffic: lines")
    p.add_argument("--device", default=None, help="Warp device (default: cuda:0 where present, else cpu)")
    p.add_argument("--max-rigid-contact", type=int, default=None, help="contact slots per world (default: the scene's)")
    p.add_argument("--dt", type=float, default=None, help="time step [s] (default: the scene's; humanoid 5 ms)")
    p.add_argument("--noise-std", type=float, default=DEFAULT_NOISE_STD,
                   help=f"σ of the per-step control noise (default {DEFAULT_NOISE_STD}; 0 = none)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"noise seed (default {DEFAULT_SEED})")
    p.add_argument("--no-graph", action="store_true", help="eager launches on a CUDA device too")
    p.add_argument("--breakdown", action="store_true",
                   help="per-stage timing of each sap_gpu run (eager pass; on CUDA also each kernel's device time)")
    p.add_argument("--breakdown-steps", type=int, default=20, help="steps of the breakdown pass (default 20)")
    p.add_argument("--vs-mjwarp", action="store_true", help="also run MuJoCo Warp on the same model (MJCF scenes)")
    p.add_argument("--randomize", action="store_true",
                   help="measure every sap_gpu run twice in the same process: as is, then with per-world parameters "
                        "(sap_gpu.WorldParameters read by the solver and the collision pipeline) drawn by "
                        "sap_tools.randomize.draw with --seed (friction, masses and inertia, damping, drive gains), "
                        "labelled /randomized, with its ratio to the plain run printed (the cost of reading "
                        "parameters per world); with --vs-mjwarp only the sap_gpu runs are randomized (MuJoCo Warp "
                        "runs once, on the model's values)")
    p.add_argument("--mjwarp-nconmax", type=int, default=None, help="MuJoCo Warp nconmax (default: its own)")
    p.add_argument("--mjwarp-njmax", type=int, default=None, help="MuJoCo Warp njmax (default: its own)")
    p.add_argument("--out", default=None, help="write every result as JSON to this file (for sap-plot-benchmark)")
    p.add_argument("--cuda-output", default=None, choices=("cubin", "ptx"),
                   help="what Warp compiles CUDA modules to (default: Warp's choice); cubin loads a kernel cache "
                        "made by sap-precompile")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--ray", nargs="?", const=RAY_LOCAL, default=None, metavar="ADDRESS",
                   help="run each run of the sweep as a Ray task (one GPU each on a CUDA --device): on the cluster at "
                        "ADDRESS, or (no address) the one RAY_ADDRESS names, else a local Ray instance; needs pip "
                        "install ray (docs/scaling.md)")
    return p


# SapConfig knobs that sap-benchmark sets from flags of their own (and sweeps): not --override's.
_KNOB_FLAGS = {"contact_preset_variant": "--preset", "line_search_variant": "--line-search",
               "max_iterations": "--max-iterations", "contact_linear_solver": "--linear-solver",
               "newton_path": "--newton-path", "fused_max_registers": "--fused-max-registers",
               "fused_hessian": "--fused-hessian", "fused_cholesky": "--fused-cholesky",
               "max_rigid_contact": "--max-rigid-contact"}


def _validate(args) -> tuple[list[int], list[str], dict, object]:
    """Check every flag before anything is built; ``ValueError`` names the flag and valid values."""
    worlds = _positive_ints("--num-worlds", args.num_worlds)
    for flag, v, lo in (("--steps", args.steps, 1), ("--warmup", args.warmup, 1),
                        ("--breakdown-steps", args.breakdown_steps, 1), ("--structure-steps", args.structure_steps, 1)):
        if v < lo:  # --warmup >= 1: the first step loads the kernels and must not be timed
            raise ValueError(f"{flag}: must be >= {lo}, got {v}")
    if args.max_rigid_contact is not None and args.max_rigid_contact < 0:
        raise ValueError(f"--max-rigid-contact: must be >= 0, got {args.max_rigid_contact}")
    if args.dt is not None and not (math.isfinite(args.dt) and args.dt > 0):
        raise ValueError(f"--dt: must be a finite time step > 0 s, got {args.dt}")
    if not (math.isfinite(args.noise_std) and args.noise_std >= 0):
        raise ValueError(f"--noise-std: must be finite and >= 0, got {args.noise_std}")
    for flag, v in (("--mjwarp-nconmax", args.mjwarp_nconmax), ("--mjwarp-njmax", args.mjwarp_njmax)):
        if v is not None and (not args.vs_mjwarp or v < 1):
            raise ValueError(f"{flag}: needs --vs-mjwarp and a value >= 1, got {v}")
    overrides = dict(parse_override("--override", o) for o in args.override)
    for key in overrides:
        if key in _KNOB_FLAGS:
            raise ValueError(f"--override: {key} has its own flag, {_KNOB_FLAGS[key]}; set it there")
    if args.max_iterations is not None:
        overrides["max_iterations"] = args.max_iterations
    if args.linear_solver is not None:
        overrides["contact_linear_solver"] = args.linear_solver[0]  # each is applied per run in main()
    presets = [p.strip() for v in args.preset for p in str(v).split(",") if p.strip()]
    args.line_search = [s.strip() for v in (args.line_search or []) for s in str(v).split(",") if s.strip()] or None
    given = {"--max-iterations": ("max_iterations",), "--linear-solver": ("contact_linear_solver",),
             "--override": tuple(k for k, _ in map(lambda o: parse_override("--override", o), args.override))}
    for p in presets:  # preset alone, then with each line search, then with each flag's knobs
        for ls in args.line_search or [None]:
            for flag, keys in (("--preset", ()), ("--line-search", ()), *given.items()):
                line = {} if ls is None or flag == "--preset" else {"line_search_variant": ls}
                try:
                    SapConfig.from_preset(p, **line, **{k: overrides[k] for k in keys if k in overrides})
                except (ValueError, TypeError) as e:
                    raise ValueError(f"{flag}: {e}") from None
    if args.vs_mjwarp:
        try:
            import mujoco_warp  # noqa: F401
        except ImportError:
            raise ValueError("--vs-mjwarp: needs the 'mujoco_warp' package (pip install mujoco-warp)") from None
    args.fused_max_registers = register_caps("--fused-max-registers", args.fused_max_registers)
    device = warp_device(args.device)
    if args.out is not None:
        check_out("--out", args.out)
    return worlds, presets, overrides, device


def _run_specs(args, scene_names: list, worlds: list, presets: list, overrides: dict, cuda: bool) -> list[dict]:
    """Every run of the sweep, in the order the local run makes them: per scene, per num_worlds,
    every sap_gpu configuration, then MuJoCo Warp (``--vs-mjwarp``). ``cuda``: whether the runs
    are on a CUDA device (``fused_cholesky="auto"`` takes a factorization per device)."""
    from sap_gpu.plan import swept_cholesky

    specs = []
    caps = args.fused_max_registers  # none and caps, checked by _validate
    for name in scene_names:
        for W in worlds:
            for preset, line_search in itertools.product(presets, args.line_search or [None]):
                for solver in (args.linear_solver or [None]):
                    for sparsity in dict.fromkeys(args.rows):
                        runs = set()
                        for path, cap, hessian, cholesky in itertools.product(
                                dict.fromkeys(args.newton_path), caps, dict.fromkeys(args.fused_hessian),
                                dict.fromkeys(args.fused_cholesky)):
                            cholesky, plain = swept_cholesky(cholesky, hessian, cuda)  # what the kernel takes
                            if (hessian != DEFAULT_FUSED_HESSIAN or not plain) and path != "fused":
                                continue  # the staged path has no fused kernel to form or factor H in
                            if (path, cap, hessian, cholesky) in runs:
                                continue  # lanes and tile asked for an H formed by tiles: one run
                            runs.add((path, cap, hessian, cholesky))
                            run_overrides = dict(overrides)
                            if hessian != DEFAULT_FUSED_HESSIAN:
                                run_overrides["fused_hessian"] = hessian
                            if not plain:
                                run_overrides["fused_cholesky"] = cholesky
                            if solver is not None:
                                run_overrides["contact_linear_solver"] = solver
                            if cap != FUSED_MAX_REGISTERS_AUTO:
                                run_overrides["fused_max_registers"] = cap
                            if line_search is not None:
                                run_overrides["line_search_variant"] = line_search
                            cfg = SapConfig.from_preset(preset, **run_overrides)
                            extra = dict(preset=cfg.contact_preset_variant, line_search=cfg.line_search_variant,
                                         linear_solver=cfg.contact_linear_solver, rows=sparsity, newton_path=path,
                                         fused_max_registers=cap, fused_hessian=hessian, fused_cholesky=cholesky)
                            label = ((f"{name}/" if len(scene_names) > 1 else "") + cfg.contact_preset_variant
                                     + (f"/{line_search}" if len(args.line_search or []) > 1 else "")
                                     + (f"/{solver}" if args.linear_solver else "")
                                     + (f"/{sparsity}" if args.rows != ["sparse"] else "")
                                     + (f"/{path}" if args.newton_path != [DEFAULT_NEWTON_PATH] else "")
                                     + register_cap_label(cap)
                                     + (f"/{hessian}" if hessian != DEFAULT_FUSED_HESSIAN else "")
                                     + ("" if plain else f"/{cholesky}"))
                            spec = dict(kind="sap", scene=name, num_worlds=W, preset=preset,
                                        overrides=run_overrides, sparse=sparsity == "sparse", path=path,
                                        label=label, extra=dict(extra, randomized=False), randomize=False)
                            specs.append(spec)
                            if getattr(args, "randomize", False):  # the same run reading per-world parameters
                                specs.append(dict(spec, label=label + RANDOMIZED_SUFFIX, randomize=True,
                                                  extra=dict(extra, randomized=True)))
            if args.vs_mjwarp:
                specs.append(dict(kind="mjwarp", scene=name, num_worlds=W,
                                  label=(f"{name}/" if len(scene_names) > 1 else "") + "mujoco_warp",
                                  extra=dict(preset=None, line_search=None, linear_solver=None, rows=None,
                                             newton_path=None, randomized=False)))
    return specs


def _settings(args) -> dict:
    """What a run reads of the command line (plain values: they travel to Ray workers)."""
    keys = ("steps", "warmup", "no_graph", "quiet", "structure_steps", "structure", "breakdown", "breakdown_steps",
            "dt", "max_rigid_contact", "noise_std", "seed", "mjwarp_nconmax", "mjwarp_njmax", "cuda_output")
    return {k: getattr(args, k) for k in keys}


def _check_memory(args, scenes0: list, specs: list[dict], device) -> None:
    """``ValueError`` naming --num-worlds for the first sap_gpu run of the sweep whose memory would not
    fit (:meth:`SapRun.memory_estimate` against the free memory: sap_tools.cli.check_run_memory),
    estimated from the one-world scenes before any scene of the sweep is built
    (docs/scaling.md § Memory). The runs are built one after the other, so each is checked alone.
    MuJoCo Warp's runs (--vs-mjwarp) are not estimated."""
    by_name = dict(zip(args.scene or [DEFAULT_SCENE], scenes0))
    for spec in specs:
        if spec["kind"] != "sap":
            continue
        scene0 = by_name[spec["scene"]]
        C = scene0.max_rigid_contact if args.max_rigid_contact is None else args.max_rigid_contact
        estimate = SapRun.memory_estimate(scene0, spec["num_worlds"], spec["preset"], spec["overrides"], device,
                                          noise_channels(scene0), spec["path"], spec.get("randomize", False), C)
        check_run_memory(estimate, device, f"the run {spec['label']}",
                         f"{spec['num_worlds']} worlds of {scene0.name}", capacity=C)


def _execute(spec: dict, settings: dict, device) -> dict:
    """One run of the sweep on ``device`` (a name or a wp.Device): its report row."""
    import types

    args = types.SimpleNamespace(**settings)
    if args.cuda_output:
        wp.config.cuda_output = args.cuda_output
    device = warp_device(device) if isinstance(device, str) else device
    W = spec["num_worlds"]
    scene = load_scene(spec["scene"], W, check_memory=False)  # the whole run was checked by main (_check_memory)
    C = scene.max_rigid_contact if args.max_rigid_contact is None else args.max_rigid_contact
    scene.max_rigid_contact = C
    dt = args.dt if args.dt is not None else scene.dt
    channels = noise_channels(scene)
    extra = dict(spec["extra"], noise_std=args.noise_std, seed=args.seed, noise_channels=channels.count,
                 max_rigid_contact=C, nv=scene.sap_model.joint_dof_count, warp_version=wp.__version__)
    if spec["kind"] == "mjwarp":
        import mujoco_warp

        extra.update(mjwarp_version=mujoco_warp.__version__, nconmax=args.mjwarp_nconmax, njmax=args.mjwarp_njmax)
        return _run_one(lambda s: MjwarpRun(s, device, dt, channels, args.noise_std, args.seed,
                                            args.mjwarp_nconmax, args.mjwarp_njmax), spec["label"], scene, args,
                        device, extra)
    values = randomize.draw(scene.sap_model, np.random.default_rng(args.seed)) if spec.get("randomize") else None
    return _run_one(lambda s: SapRun(s, spec["preset"], spec["overrides"], device, dt, channels, args.noise_std,
                                     args.seed, spec["sparse"], spec["path"], parameter_values=values),
                    spec["label"], scene, args, device, extra)


def _check_randomize(scene: LoadedScene, seed: int) -> None:
    """``ValueError`` naming --randomize if a draw for ``scene`` (one world) breaks its model's rules
    for per-world values (sap_common.parameters.check_worlds): before any run is built."""
    from sap_common import parameters as spec

    m = scene.sap_model
    values = randomize.draw(m, np.random.default_rng(seed))
    model_values = {k: np.asarray(getattr(m, k), dtype=np.float64) for k in spec.PARAMETER_FIELDS}
    candidate = {k: np.broadcast_to(v, (m.num_worlds, *v.shape)).copy() for k, v in model_values.items()}
    candidate.update(values)
    try:
        spec.check_worlds(m, candidate, np.arange(m.num_worlds), list(values))
    except ValueError as e:
        raise ValueError(f"--randomize: {scene.name}: the drawn values break the model's rules: {e}") from None


def _execute_task(spec: dict, settings: dict, device: str) -> dict:
    """One run in a Ray worker (quiet, on the device Ray gives it)."""
    from sap_tools.cli import quiet_warp

    quiet_warp()
    return _execute(spec, dict(settings, quiet=True), task_device(device))


def _suffix(q: dict) -> str:
    """The label suffix of a speed-up between runs with per-world parameters (--randomize)."""
    return RANDOMIZED_SUFFIX if q.get("randomized") else ""


@entry_point("sap-benchmark")
def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        worlds, presets, overrides, device = _validate(args)
        scene_names = args.scene or [DEFAULT_SCENE]
        scenes0 = [load_scene(name, 1) for name in scene_names]
        for scene0 in scenes0:
            if args.vs_mjwarp and getattr(scene0, "mj_model", None) is None:
                raise ValueError(f"--vs-mjwarp: needs an MJCF scene (humanoid, humanoid3 or an .xml file); "
                                 f"{scene0.name!r} has no MuJoCo model")
            if args.randomize:
                _check_randomize(scene0, args.seed)
        specs = _run_specs(args, scene_names, worlds, presets, overrides, device.is_cuda)
        _check_memory(args, scenes0, specs, device)
    except ValueError as e:
        return fail("sap-benchmark", e)
    if args.cuda_output:
        wp.config.cuda_output = args.cuda_output
    cfg_note = "".join(f", {k} {v}" for k, v in overrides.items() if k != "contact_linear_solver")
    if args.linear_solver:
        cfg_note += f", contact_linear_solver {' / '.join(args.linear_solver)}"
    if FUSED_CHOLESKY_AUTO in args.fused_cholesky and "fused" in args.newton_path:
        from sap_gpu.plan import resolve_fused_cholesky

        # what the default factorization is on this device (it differs between a GPU and the CPU)
        cfg_note += f", fused_cholesky auto = {resolve_fused_cholesky(FUSED_CHOLESKY_AUTO, device.is_cuda)}"
    if args.randomize:
        cfg_note += f", --randomize: each sap_gpu run also with per-world parameters (draw seed {args.seed})"
    for scene0 in scenes0:
        dt = args.dt if args.dt is not None else scene0.dt
        C = scene0.max_rigid_contact if args.max_rigid_contact is None else args.max_rigid_contact
        channels = noise_channels(scene0)
        print(f"sap-benchmark: {scene0.name} (nv {scene0.sap_model.joint_dof_count}, {C} contact slots), dt {dt:g} s, "
              f"{args.steps} timed steps after {args.warmup} warm-up; noise σ {args.noise_std:g} ({channels.units}) "
              f"on {channels.count} {channels.target} channels, seed {args.seed}; {device} = {_hardware(device)}"
              f"{cfg_note}")
    settings = _settings(args)
    if args.ray is not None:
        try:
            with ray_session(args.ray) as ray:
                rows = map_tasks(ray, _execute_task, [(spec, settings, str(device)) for spec in specs],
                                 [ray_resources(str(device)) for _ in specs])
        except ValueError as e:
            return fail("sap-benchmark", e)
        print(f"ray: {len(rows)} runs as Ray tasks, each on {ray_resources(str(device))}")
    else:
        rows = [_execute(spec, settings, device) for spec in specs]
        gc.collect()
    print(table(rows))
    notes = sorted({r["graph_note"] for r in rows})
    print("timing: " + "; ".join(notes))
    for r in rows:
        if r["backend"] == "sap_gpu":
            print(structure_line(r))
            if "traffic" in r:
                print("\n".join(traffic_lines(r["label"], r["num_worlds"], r["traffic"]["newton"],
                                               r["traffic"]["setup"])))
    for r in rows:
        if "breakdown" in r:
            print(breakdown_table(r))
    ratio_rows = ratios(rows)
    for q in ratio_rows:
        print(f"ratio sap_gpu/mjwarp ({q['label']}, {q['num_worlds']} worlds): {q['ratio']:.3f}")
    randomized = randomized_ratios(rows)
    for q in randomized:
        cpu = "" if q["cpu_ratio"] is None else f" (by process CPU time: {q['cpu_ratio']:.3f})"
        print(f"ratio randomized/plain ({q['label']}, {q['num_worlds']} worlds): {q['ratio']:.3f}{cpu}")
    speedups = sparse_speedups(rows)
    # With several scenes each summary line names its scene (a comparison never crosses scenes).
    where = (lambda q: f"{q['scene']}: ") if len(scenes0) > 1 else (lambda q: "")  # noqa: E731
    for q in speedups:
        print(f"speed-up sparse/dense rows ({where(q)}{q['preset']}/{q['linear_solver']}{_suffix(q)}, "
              f"{q['num_worlds']} worlds): {q['speedup']:.3f}")
    path_rows = path_speedups(rows)
    for q in path_rows:
        cpu = "" if q["cpu_speedup"] is None else f" (by process CPU time: {q['cpu_speedup']:.3f})"
        print(f"speed-up fused/staged Newton path ({where(q)}{q['preset']}/{q['linear_solver']}/{q['rows']}"
              f"{_suffix(q)}, {q['num_worlds']} worlds): {q['speedup']:.3f}{cpu}")
    cap_rows = register_cap_speedups(rows)
    for q in cap_rows:
        print(f"speed-up register cap {q['fused_max_registers']}/none ({where(q)}{q['label']}, {q['num_worlds']} "
              f"worlds): {q['speedup']:.3f}")
    hessian_rows = hessian_speedups(rows)
    for q in hessian_rows:
        print(f"speed-up fused_hessian tiles/rows ({where(q)}{q['label']}, {q['num_worlds']} worlds): "
              f"{q['speedup']:.3f}")
    cholesky_rows = cholesky_speedups(rows)
    for q in cholesky_rows:
        print(f"speed-up fused_cholesky lanes/tile ({where(q)}{q['label']}, {q['num_worlds']} worlds): "
              f"{q['speedup']:.3f}")
    result = dict(scene=scenes0[0].name if len(scenes0) == 1 else [sc.name for sc in scenes0], device=str(device),
                  hardware=_hardware(device),
                  valid=all(r["valid"] for r in rows), runs=rows, ratios=ratio_rows, sparse_speedups=speedups,
                  newton_path_speedups=path_rows, register_cap_speedups=cap_rows, fused_hessian_speedups=hessian_rows,
                  fused_cholesky_speedups=cholesky_rows, randomized_ratios=randomized)
    plain = [r for r in rows if r["backend"] == "sap_gpu" and not r.get("randomized")]
    if len(plain) == 1:  # a single sap_gpu configuration: its (plain) run's fields at the top level too
        result = {**plain[0], **result}
        own = [q for q in ratio_rows if q["label"] == plain[0]["label"]]
        if len(own) == 1:
            result["ratio"] = own[0]["ratio"]
        if len(randomized) == 1:
            result["randomized_ratio"] = randomized[0]["ratio"]
    if args.out:
        with atomic_output(args.out) as tmp, open(tmp, "w") as f:
            json.dump(result, f, indent=1)
        print(f"results written to {args.out}")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How ``sap-benchmark`` measures a run and reports it.

:func:`time_run` warms a run up, captures one step in a CUDA graph where it can and times the
replays; :func:`breakdown` times each stage of eager steps; :func:`structure` counts the device
operations of a step and the Newton loop's trips; :func:`validity` decides whether a run's
throughput counts; :func:`table` and friends print the report. What each figure means is in
:mod:`sap_tools.benchmark.cli`'s docstring (``sap-benchmark --help``).
"""

from __future__ import annotations

import math
import re
import time

import numpy as np
import warp as wp

from sap_common.constants import DEFAULT_FUSED_CHOLESKY, FUSED_MAX_REGISTERS_NONE
from sap_tools.progress import Progress

__all__ = ["time_run", "breakdown", "kernel_times", "structure", "validity", "table", "structure_line",
           "breakdown_table", "ratios", "sparse_speedups", "path_speedups", "register_cap_speedups",
           "hessian_speedups", "cholesky_speedups", "randomized_ratios", "RANDOMIZED_SUFFIX", "MIN_CONVERGED_FRACTION"]

# A sap_gpu run is valid only if at least this fraction of its (world, step) pairs converged.
# An unconverged step returns an unfinished iterate, so a run whose steps stop early (a too-small
# iteration cap, a broken solve) buys throughput with unfinished work and is not comparable; one
# in a thousand is the most we accept. Below 1 because a step that hits the Newton cap has run
# every iteration up to it (the cap is 100, the humanoid's mean is ~9 and its p95 ~15), so rare
# capped steps make a run slower, never faster: requiring 1.0 would void a multi-million
# world-step run for a single hard step (one in 4.1 million was seen at 8192 humanoid worlds).
MIN_CONVERGED_FRACTION = 0.999
# The label suffix of a run with per-world parameters (sap-benchmark --randomize).
RANDOMIZED_SUFFIX = "/randomized"
# At most this many progress-bar refreshes in the timed region; each synchronizes the device
# (only when the bar is on: --quiet times without them).
PROGRESS_UPDATES = 50

# ----------------------------------------------------------------------------- timing


def time_run(run, steps: int, warmup: int, use_graph: bool, bar: Progress) -> dict:
    """Warm up, capture a graph where possible, then time ``steps`` steps (see the module docstring)."""
    device = run.device
    for _ in range(warmup):
        run.step()
    wp.synchronize_device(device)
    graph, note = None, "eager launches (Warp CPU device)" if not device.is_cuda else "eager launches (--no-graph)"
    if device.is_cuda and use_graph:
        if not wp.is_conditional_graph_supported():
            note = "eager launches: conditional graph nodes (wp.capture_while) need CUDA >= 12.4"
        else:
            try:
                with wp.ScopedCapture(device=device) as capture:
                    run.step()
                graph, note = capture.graph, "CUDA graph replay"
                wp.capture_launch(graph)  # the first replay uploads the graph: warm-up, not timed
                wp.synchronize_device(device)
            except Exception as e:  # noqa: BLE001 -- any capture failure falls back to eager, reported
                graph, note = None, f"eager launches: graph capture failed ({type(e).__name__}: {e})"
    run.reset_stats()
    chunk = max(1, steps // PROGRESS_UPDATES) if bar.enabled else steps
    wp.synchronize_device(device)
    t0, c0 = time.perf_counter(), time.process_time()
    done = 0
    while done < steps:
        n = min(chunk, steps - done)
        for _ in range(n):
            if graph is not None:
                wp.capture_launch(graph)
            else:
                run.step()
        done += n
        if bar.enabled:
            wp.synchronize_device(device)
            bar.update(done)
    wp.synchronize_device(device)
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    return dict(seconds=seconds, cpu_seconds=cpu_seconds, graph=graph is not None, graph_note=note)


class _StageTimer:
    """``stage_hook``: synchronize, then charge the time since the last mark to ``name``."""

    def __init__(self, device):
        self.device, self.seconds, self.calls, self.last = device, {}, {}, 0.0

    def start(self) -> None:
        wp.synchronize_device(self.device)
        self.last = time.perf_counter()

    def __call__(self, name: str) -> None:
        wp.synchronize_device(self.device)
        now = time.perf_counter()
        self.seconds[name] = self.seconds.get(name, 0.0) + now - self.last
        self.calls[name] = self.calls.get(name, 0) + 1
        self.last = now


def breakdown(run, steps: int) -> dict:
    """Per-stage wall time of ``steps`` eager steps (``stage_hook`` + synchronize + perf_counter).

    Stages in pipeline order: collision, control_noise, then the solver's (boundary_in …
    boundary_out; the Newton stages summed over iterations), then statistics. Returns
    ``{"steps", "ms_per_step", "stages": [{"stage", "ms_per_step", "percent", "calls_per_step"}],
    "kernels"}``: on a CUDA device ``kernels`` is :func:`kernel_times` of the same steps (each
    kernel's own time on the device, which the synchronizations around the stages do not
    change), elsewhere ``None``.
    """
    timer = _StageTimer(run.device)
    run.set_stage_hook(timer)
    cuda = run.device.is_cuda
    try:
        if cuda:
            wp.timing_begin(cuda_filter=DEVICE_ACTIVITIES)
        try:
            for _ in range(steps):
                timer.start()
                run.step(mark=timer)
        finally:
            activities = wp.timing_end() if cuda else None
    finally:
        run.set_stage_hook(None)
    total = sum(timer.seconds.values())
    stages = [dict(stage=k, ms_per_step=1e3 * v / steps, percent=100.0 * v / total if total > 0 else 0.0,
                   calls_per_step=timer.calls[k] / steps) for k, v in timer.seconds.items()]
    kernels = None if activities is None else kernel_times([(r.name, r.elapsed) for r in activities], steps)
    return dict(steps=steps, ms_per_step=1e3 * total / steps, stages=stages, kernels=kernels)


# What the breakdown times on a CUDA device with Warp's activity timing (``wp.timing_begin``):
# the package's kernels, Warp's own (array fills, reductions), copies and memsets. Each is timed
# on the device between CUDA events recorded around it, so the figure is the operation's own
# time, with no launch overhead or host synchronization in it.
DEVICE_ACTIVITIES = wp.TIMING_KERNEL | wp.TIMING_KERNEL_BUILTIN | wp.TIMING_MEMCPY | wp.TIMING_MEMSET
# Warp names a kernel "forward kernel <qualified name>_<8 hex digits of its hash>", a local
# kernel's qualified name with "__locals__" before the function's own name.
_KERNEL_NAME = re.compile(r"^(?:forward|backward) kernel (?:.*__locals__)?(?P<name>.+?)(?:_[0-9a-f]{8})?$")


def kernel_times(activities: list[tuple[str, float]], steps: int) -> list[dict]:
    """Device time per kernel (and per kind of copy or memset) of ``steps`` steps, from Warp's
    activity timing results as ``(name, elapsed ms)`` pairs: the kernel's own name (hash and
    enclosing function dropped), ``ms_per_step``, ``percent`` of the summed device time and
    ``calls_per_step``, most expensive first."""
    ms, calls = {}, {}
    for name, elapsed in activities:
        m = _KERNEL_NAME.match(name)
        key = m.group("name") if m else name
        ms[key] = ms.get(key, 0.0) + elapsed
        calls[key] = calls.get(key, 0) + 1
    total = sum(ms.values())
    rows = [dict(kernel=k, ms_per_step=v / steps, percent=100.0 * v / total if total > 0 else 0.0,
                 calls_per_step=calls[k] / steps) for k, v in ms.items()]
    return sorted(rows, key=lambda r: -r["ms_per_step"])


class _OperationCounter:
    """Counts the device operations issued while active: kernel launches (``wp.launch``,
    ``wp.launch_tiled``), copies (``wp.copy``) and memsets (``array.zero_``, ``array.fill_``):
    on CUDA each is one graph node of a captured step (a ``capture_while`` body's nodes counted
    once per trip it runs). ``mark(stage)`` charges the operations since the last mark to a stage."""

    def __init__(self):
        self.count, self.last, self.by_stage, self.calls = 0, 0, {}, {}
        self.paused = False  # True while the benchmark itself reads results back
        self._saved = []

    def _wrap(self, owner, name):
        original = getattr(owner, name)

        def counted(*args, **kwargs):
            self.count += not self.paused
            return original(*args, **kwargs)

        self._saved.append((owner, name, original))
        setattr(owner, name, counted)

    def __enter__(self):
        for owner, name in ((wp, "launch"), (wp, "launch_tiled"), (wp, "copy"), (wp.array, "zero_"),
                            (wp.array, "fill_")):
            self._wrap(owner, name)
        return self

    def __exit__(self, *exc):
        for owner, name, original in reversed(self._saved):
            setattr(owner, name, original)
        self._saved.clear()

    def mark(self, stage: str) -> None:
        self.by_stage[stage] = self.by_stage.get(stage, 0) + self.count - self.last
        self.calls[stage] = self.calls.get(stage, 0) + 1
        self.last = self.count


def structure(run, steps: int) -> dict:
    """Device operations per step and, for sap_gpu, the Newton loop's structure, from ``steps``
    eager steps after the timed run (no synchronization added; operations counted as issued).

    Returns ``launches_per_step`` (every kernel launch, copy and memset of a step, collision and
    statistics included) and, for sap_gpu, ``newton_launches_per_step`` (those of stage 3),
    ``newton_trips_per_step`` (passes of the batch through the Newton loop: the staged path's
    ``capture_while`` trips, 1 for the fused launch), ``newton_mean_structure`` (mean Newton
    iterations per world over the same steps) and ``newton_max_structure`` (mean over the steps
    of the slowest world's count, which the staged path's trips follow).
    """
    counter = _OperationCounter()
    is_sap = run.backend == "sap_gpu"
    iterations = []
    if is_sap:
        run.set_stage_hook(counter.mark)
    try:
        with counter:
            for _ in range(steps):
                run.step(mark=counter.mark)
                if is_sap:  # not the step's: .numpy() may copy through wp.copy
                    counter.paused = True
                    iterations.append(run.solver.last_newton_iterations.numpy().copy())
                    counter.paused = False
    finally:
        if is_sap:
            run.set_stage_hook(None)
    out = dict(launches_per_step=counter.count / steps, structure_steps=steps)
    if is_sap:
        newton = [k for k in counter.by_stage if k.startswith("newton_") or k in ("linear_solve", "line_search")]
        trips = counter.calls.get("newton_evaluate", 0) + counter.calls.get("newton_fused", 0)
        its = np.array(iterations)
        out.update(newton_launches_per_step=sum(counter.by_stage[k] for k in newton) / steps,
                   newton_trips_per_step=trips / steps, newton_mean_structure=float(its.mean()),
                   newton_max_structure=float(its.max(axis=1).mean()))
    return out


# ----------------------------------------------------------------------------- validity and report


def validity(row: dict) -> tuple[bool, str | None]:
    """``(valid, reason)`` of a report row (see the module docstring): sap_gpu needs nothing
    non-finite, no truncated contact and a converged fraction ≥ :data:`MIN_CONVERGED_FRACTION`;
    MuJoCo Warp a finite final state and no capacity overflow. ``reason`` lists every failure."""
    reasons = []
    if row.get("non_finite_worlds"):
        reasons.append(f"{row['non_finite_worlds']} worlds end with a non-finite state")
    if row["backend"] == "sap_gpu":
        if row.get("non_finite_steps"):
            reasons.append(f"{row['non_finite_steps']} world-steps flagged NON_FINITE")
        if row.get("truncated_contacts"):
            reasons.append(f"{row['truncated_contacts']} contacts truncated for lack of slots "
                           f"(max_rigid_contact {row.get('max_rigid_contact')}: raise --max-rigid-contact)")
        if row["converged_fraction"] < MIN_CONVERGED_FRACTION:
            reasons.append(f"converged fraction {row['converged_fraction']:.4%} < {MIN_CONVERGED_FRACTION:.1%} "
                           f"({row.get('capped_steps', 0)} of {row.get('world_steps', '?')} world-steps capped)")
    if row.get("overflow_worlds"):
        reasons.append(f"{row['overflow_worlds']} worlds overflowed MuJoCo Warp's capacity "
                       f"({', '.join(row['overflow_flags'])}: raise --mjwarp-nconmax / --mjwarp-njmax)")
    return not reasons, "; ".join(reasons) or None


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _converged(f: float) -> str:
    """A fraction as a percentage that never rounds a shortfall up to 100 %."""
    return "100%" if f == 1.0 else f"{math.floor(f * 1e5) / 1e3:.3f}%"


def table(rows: list[dict]) -> str:
    """The human-readable table of report rows."""
    w = max([12] + [len(r["label"]) for r in rows])
    head = (f"{'run':<{w}} {'worlds':>7} {'world-steps/s':>14} {'ms/step':>9} {'RTF':>9} {'mem MiB':>8} "
            f"{'Newton':>11} {'line search':>12} {'contacts':>9} {'converged':>9} {'capped':>7} {'trunc':>6} "
            f"{'graph':>5} {'ops/step':>9} {'trips':>6}  valid")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['label']:<{w}} {r['num_worlds']:>7} {r['world_steps_per_s']:>14,.0f} {r['ms_per_step']:>9.3f} "
            f"{r['realtime_factor']:>9.2f} {_fmt(r['gpu_memory_mib'], '8.1f'):>8} "
            f"{_fmt(r['newton_mean'], '.2f') + '/' + _fmt(r['newton_p95'], 'd'):>11} "
            f"{_fmt(r['line_search_mean'], '.2f') + '/' + _fmt(r['line_search_p95'], 'd'):>12} "
            f"{_fmt(r['contacts_per_world_mean'], '.2f'):>9} {_converged(r['converged_fraction']):>9} "
            f"{_fmt(r.get('capped_steps'), 'd'):>7} "
            f"{_fmt(r['truncated_contacts'], 'd'):>6} {'yes' if r['graph'] else 'no':>5} "
            f"{_fmt(r.get('launches_per_step'), '9.1f'):>9} {_fmt(r.get('newton_trips_per_step'), '6.1f'):>6}  "
            f"{'yes' if r['valid'] else 'NO: ' + r['invalid_reason']}")
    return "\n".join(lines)


def structure_line(r: dict) -> str:
    """The structural figures of one sap_gpu run (see :func:`structure`)."""
    return (f"structure: {r['label']} x{r['num_worlds']}: {r['launches_per_step']:.1f} device ops/step, "
            f"{r['newton_launches_per_step']:.1f} of them in the Newton loop; {r['newton_trips_per_step']:.1f} "
            f"Newton trips/step of the batch against {r['newton_mean_structure']:.2f} mean and "
            f"{r['newton_max_structure']:.2f} slowest-world Newton iterations per step "
            f"({r['structure_steps']} counted steps); {r['probes_per_iteration']:.2f} line-search probes per Newton "
            f"iteration, each one pass over the rows")


def breakdown_table(row: dict) -> str:
    b = row["breakdown"]
    lines = [f"breakdown: {row['label']} x{row['num_worlds']}, {b['steps']} eager steps, "
             f"{b['ms_per_step']:.3f} ms/step with a device synchronization after every stage",
             f"  {'stage':<18} {'ms/step':>9} {'%':>6} {'calls/step':>10}"]
    for s in b["stages"]:
        lines.append(f"  {s['stage']:<18} {s['ms_per_step']:>9.3f} {s['percent']:>6.1f} {s['calls_per_step']:>10.2f}")
    top = max(b["stages"], key=lambda s: s["ms_per_step"])
    lines.append(f"  dominant stage: {top['stage']} ({top['percent']:.1f} %)")
    kernels = b.get("kernels")
    if kernels:
        total = sum(k["ms_per_step"] for k in kernels)
        lines.append(f"kernels: {row['label']} x{row['num_worlds']}, the same steps, {total:.3f} ms/step of "
                     f"device time (each operation timed on the device)")
        lines.append(f"  {'kernel':<36} {'ms/step':>9} {'%':>6} {'calls/step':>10}")
        for k in kernels:
            lines.append(f"  {k['kernel']:<36} {k['ms_per_step']:>9.3f} {k['percent']:>6.1f} "
                         f"{k['calls_per_step']:>10.2f}")
    return "\n".join(lines)


def ratios(rows: list[dict]) -> list[dict]:
    key = lambda r: (r.get("scene"), r["num_worlds"])  # noqa: E731
    mj = {key(r): r for r in rows if r["backend"] == "mujoco_warp"}
    return [dict(scene=r.get("scene"), num_worlds=r["num_worlds"], preset=r["preset"],
                 linear_solver=r.get("linear_solver"), label=r["label"],
                 ratio=r["world_steps_per_s"] / mj[key(r)]["world_steps_per_s"])
            for r in rows if r["backend"] == "sap_gpu" and key(r) in mj]


def _randomized(r: dict) -> bool:
    """Whether run ``r`` read per-world parameters (``--randomize``); files written before the field
    existed hold plain runs only. A speed-up divides runs of the same kind."""
    return bool(r.get("randomized", False))


def randomized_ratios(rows: list[dict]) -> list[dict]:
    """world-steps/s of each run with per-world parameters (``--randomize``) over the plain run of the
    same scene, num_worlds and configuration (its label without :data:`RANDOMIZED_SUFFIX`): the cost
    of reading parameters per world. On the CPU device also by process CPU time (``cpu_ratio``, as
    :func:`path_speedups`'s ``cpu_speedup``; else null)."""
    key = lambda r, label: (r.get("scene"), r["num_worlds"], label)  # noqa: E731
    plain = {key(r, r["label"]): r for r in rows if r["backend"] == "sap_gpu" and not _randomized(r)}
    out = []
    for r in rows:
        if r["backend"] != "sap_gpu" or not _randomized(r) or not r["label"].endswith(RANDOMIZED_SUFFIX):
            continue
        p = plain.get(key(r, r["label"][:-len(RANDOMIZED_SUFFIX)]))
        if p is None:
            continue
        cpu = p["cpu_seconds"] / r["cpu_seconds"] if "cuda" not in str(r["device"]) and r["cpu_seconds"] > 0 else None
        out.append(dict(scene=r.get("scene"), num_worlds=r["num_worlds"], preset=r["preset"],
                        linear_solver=r.get("linear_solver"), label=r["label"], plain_label=p["label"],
                        world_steps_per_s=r["world_steps_per_s"], plain_world_steps_per_s=p["world_steps_per_s"],
                        ratio=r["world_steps_per_s"] / p["world_steps_per_s"], cpu_ratio=cpu,
                        randomized_fields=r.get("randomized_fields")))
    return out


def sparse_speedups(rows: list[dict]) -> list[dict]:
    """world-steps/s of sparse rows over dense rows, per (scene, num_worlds, preset, linear solver)
    run in both."""
    key = lambda r: (r.get("scene"), r["num_worlds"], r["preset"], r["linear_solver"], r.get("newton_path"),  # noqa: E731
                     r.get("fused_max_registers"), r.get("fused_hessian"), r.get("fused_cholesky"), _randomized(r))
    dense = {key(r): r for r in rows if r.get("rows") == "dense"}
    return [dict(scene=r.get("scene"), num_worlds=r["num_worlds"], preset=r["preset"],
                 linear_solver=r["linear_solver"], randomized=_randomized(r),
                 speedup=r["world_steps_per_s"] / dense[key(r)]["world_steps_per_s"])
            for r in rows if r.get("rows") == "sparse" and key(r) in dense]


def path_speedups(rows: list[dict]) -> list[dict]:
    """world-steps/s of the fused Newton path over the staged one, per (scene, num_worlds, preset,
    linear solver, rows) run with both; on the CPU device also by process CPU time (``cpu_speedup``: Warp
    runs CPU kernels on the calling thread, so the process's CPU time is the run's work, which
    other load on a shared machine disturbs much less than the wall clock)."""
    key = lambda r: (r.get("scene"), r["num_worlds"], r["preset"], r["linear_solver"], r["rows"],  # noqa: E731
                     r.get("fused_max_registers"), _randomized(r))
    staged = {key(r): r for r in rows if r.get("newton_path") == "staged"}
    out = []
    for r in rows:  # the fused runs that form and factor H as the default configuration does
        if r.get("newton_path") == "fused" and r.get("fused_hessian", "rows") == "rows" \
                and _cholesky(r) == _default_cholesky(r) and key(r) in staged:
            s = staged[key(r)]
            cpu = s["cpu_seconds"] / r["cpu_seconds"] if "cuda" not in r["device"] and r["cpu_seconds"] > 0 else None
            out.append(dict(scene=r.get("scene"), num_worlds=r["num_worlds"], preset=r["preset"],
                            linear_solver=r["linear_solver"], randomized=_randomized(r),
                            rows=r["rows"], speedup=r["world_steps_per_s"] / s["world_steps_per_s"], cpu_speedup=cpu))
    return out


def register_cap_speedups(rows: list[dict]) -> list[dict]:
    """world-steps/s of each run with a register cap on the fused kernel (an integer, or ``auto``:
    sap_gpu's cap per kernel) over the same run without one (SapConfig.fused_max_registers
    ``none``; ``None`` in files written before ``auto`` was the default), per (scene, num_worlds,
    preset, linear solver, rows, Newton path) run with both."""
    key = lambda r: (r.get("scene"), r["num_worlds"], r["preset"], r["linear_solver"], r.get("rows"),  # noqa: E731
                     r.get("newton_path"), r.get("fused_hessian"), r.get("fused_cholesky"), _randomized(r))
    uncapped = lambda r: r.get("fused_max_registers") in (None, FUSED_MAX_REGISTERS_NONE)  # noqa: E731
    base = {key(r): r for r in rows if r["backend"] == "sap_gpu" and uncapped(r)}
    return [dict(scene=r.get("scene"), num_worlds=r["num_worlds"], preset=r["preset"], label=r["label"],
                 linear_solver=r["linear_solver"], fused_max_registers=r["fused_max_registers"],
                 speedup=r["world_steps_per_s"] / base[key(r)]["world_steps_per_s"])
            for r in rows if r["backend"] == "sap_gpu" and not uncapped(r) and key(r) in base]


def hessian_speedups(rows: list[dict]) -> list[dict]:
    """world-steps/s of each fused run that forms H by tile products (SapConfig.fused_hessian
    ``tiles``) over the same run that forms it by rows with the default factorization, per (scene,
    num_worlds, preset, linear solver, rows, register cap) run with both: the gain of setting
    ``fused_hessian="tiles"`` alone (an H formed by tiles is factored by the tile Cholesky whatever
    ``fused_cholesky`` says)."""
    key = lambda r: (r.get("scene"), r["num_worlds"], r["preset"], r["linear_solver"], r.get("rows"),  # noqa: E731
                     r.get("newton_path"), r.get("fused_max_registers"), _randomized(r))
    base = {key(r): r for r in rows if r["backend"] == "sap_gpu" and r.get("fused_hessian", "rows") == "rows"
            and _cholesky(r) == _default_cholesky(r)}
    return [dict(scene=r.get("scene"), num_worlds=r["num_worlds"], preset=r["preset"], label=r["label"],
                 linear_solver=r["linear_solver"], fused_max_registers=r.get("fused_max_registers"),
                 speedup=r["world_steps_per_s"] / base[key(r)]["world_steps_per_s"])
            for r in rows if r["backend"] == "sap_gpu" and r.get("fused_hessian") == "tiles" and key(r) in base]


def _cholesky(r: dict) -> str:
    """A run's fused_cholesky; runs recorded before the field existed factored by tile."""
    return r.get("fused_cholesky", "tile")


def _default_cholesky(r: dict) -> str:
    """The factorization the default configuration takes on the device of run ``r``
    (``fused_cholesky="auto"``: lanes on a GPU, tile on the CPU device)."""
    from sap_gpu.plan import resolve_fused_cholesky

    return resolve_fused_cholesky(DEFAULT_FUSED_CHOLESKY, "cuda" in str(r.get("device", "")))


def cholesky_speedups(rows: list[dict]) -> list[dict]:
    """world-steps/s of each fused run that factors H in the lanes' registers
    (SapConfig.fused_cholesky ``lanes``) over the same run with Warp's tile Cholesky, per (scene,
    num_worlds, preset, linear solver, rows, register cap) run with both (H formed by rows)."""
    key = lambda r: (r.get("scene"), r["num_worlds"], r["preset"], r["linear_solver"], r.get("rows"),  # noqa: E731
                     r.get("newton_path"), r.get("fused_max_registers"), r.get("fused_hessian", "rows"),
                     _randomized(r))
    base = {key(r): r for r in rows if r["backend"] == "sap_gpu" and _cholesky(r) == "tile"}
    return [dict(scene=r.get("scene"), num_worlds=r["num_worlds"], preset=r["preset"], label=r["label"],
                 linear_solver=r["linear_solver"], fused_max_registers=r.get("fused_max_registers"),
                 speedup=r["world_steps_per_s"] / base[key(r)]["world_steps_per_s"])
            for r in rows if r["backend"] == "sap_gpu" and r.get("fused_cholesky") == "lanes" and key(r) in base]

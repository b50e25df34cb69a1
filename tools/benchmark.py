"""``sap-benchmark``: sap_gpu throughput over a num_worlds sweep, optionally against MuJoCo Warp.

    sap-benchmark humanoid --num-worlds 1024 4096 8192 --preset approx32 approx64 drake --vs-mjwarp \\
        --mjwarp-nconmax 24 --mjwarp-njmax 64 --out results.json
    sap-benchmark humanoid --num-worlds 8192 --breakdown         # + per-stage timing (eager pass)
    sap-benchmark sphere_drop --num-worlds 4 --steps 5 --device cpu --json
    sap-benchmark path/to/model.xml --num-worlds 256,1024         # any MJCF (or a JSON scene file)

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
* Newton / line-search iterations: mean and 95th percentile over every (world, step) pair;
  contacts per world: mean (and max) of the collision count; truncated: contacts dropped for
  lack of slots, summed over (world, step); converged: fraction of (world, step) pairs whose
  status has CONVERGED; capped: (world, step) pairs that stopped at the Newton iteration cap
  (status MAX_ITERATIONS).
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
``perf_counter`` (collision around ``pipeline.collide``), reported as ms per step and %.
After the timed run, ``--structure-steps`` eager steps are counted (:func:`structure`): device
operations per step (launches, copies, memsets: a CUDA graph's nodes) and, for sap_gpu, those
of the Newton loop and the batch's trips through it against the per-world Newton iterations.
``--newton-path fused staged`` runs both of ``SolverSAP``'s Newton paths and prints the
speed-up (on the CPU device also by process CPU time, which other load disturbs less).
``--json`` prints one JSON object as the last line: with one sap_gpu run its fields sit at the
top level; always ``runs`` (every run, each with valid, world_steps_per_s, ms_per_step,
num_worlds, preset, device, …), ``valid`` (all runs) and, with ``--vs-mjwarp``, ``ratios``.
``--out`` writes the same object to a file for ``sap-plot-benchmark``.
"""

from __future__ import annotations

import copy
import gc
import json
import math
import os
import platform
import sys
import time
from dataclasses import dataclass

import numpy as np
import warp as wp

import sap_gpu
from sap_common.config import LINEAR_SOLVERS, SapConfig
from sap_common.io import LoadedScene
from sap_common.state import StepStatus
from sap_gpu.solver import DEFAULT_NEWTON_PATH, NEWTON_PATHS
from tools.cli import LINE_SEARCH_CHOICES, PRESET_CHOICES, check_out, fail, load_scene_arg, parser, warp_device
from tools.progress import Progress

__all__ = ["main", "load_scene", "noise_channels", "percentile_from_histogram", "SapRun", "MjwarpRun",
           "time_run", "breakdown", "structure", "validity", "DEFAULT_NOISE_STD", "MIN_CONVERGED_FRACTION"]

DEFAULT_SCENE = "humanoid"
DEFAULT_STEPS = 500  # MuJoCo Warp's published reference run (mjwarp-testspeed) uses --nstep 500
DEFAULT_WARMUP = 10
DEFAULT_SEED = 0
# σ of the control noise: a tenth of the humanoid's ctrl half-range (±1), i.e. up to ~12 N·m of
# hip torque at one σ — visible joint motion, rarely at the clamp.
DEFAULT_NOISE_STD = 0.1
# A sap_gpu run is valid only if at least this fraction of its (world, step) pairs converged.
# An unconverged step returns an unfinished iterate, so a run whose steps stop early (a too-small
# iteration cap, a broken solve) buys throughput with unfinished work and is not comparable; one
# in a thousand is the most we accept. Below 1 because a step that hits the Newton cap has run
# every iteration up to it (the cap is 100, the humanoid's mean is ~9 and its p95 ~15), so rare
# capped steps make a run slower, never faster: requiring 1.0 would void a multi-million
# world-step run for a single hard step (one in 4.1 million was seen at 8192 humanoid worlds).
MIN_CONVERGED_FRACTION = 0.999
# Line-search iterations per step at or above this share the last histogram bin (their p95 is
# then a lower bound); Newton iterations get one bin per count up to max_iterations.
LS_HIST_BINS = 256
# At most this many progress-bar refreshes in the timed region; each synchronizes the device
# (only when the bar is on: --quiet times without them).
PROGRESS_UPDATES = 50
PERCENTILE = 95.0
DEFAULT_STRUCTURE_STEPS = 5  # eager steps whose device operations are counted after the timed run

# Columns of the per-world statistics accumulator (int64, summed over steps on the device).
_STAT_NAMES = ("steps", "converged", "newton", "line_search", "contacts", "truncated", "contacts_max", "non_finite",
               "capped")
S_STEPS, S_CONVERGED, S_NEWTON, S_LINE_SEARCH, S_CONTACTS, S_TRUNCATED, S_CONTACTS_MAX, S_NON_FINITE, S_CAPPED = (
    wp.constant(i) for i in range(len(_STAT_NAMES)))
CONVERGED = wp.constant(int(StepStatus.CONVERGED))
NON_FINITE = wp.constant(int(StepStatus.NON_FINITE))
MAX_ITERATIONS = wp.constant(int(StepStatus.MAX_ITERATIONS))


# ----------------------------------------------------------------------------- device kernels


@wp.func
def _draw(seed: int, step: int, world: int, num_keys: int, key: int, sigma: float, lower: wp.float64,
          upper: wp.float64) -> wp.float64:
    """``clamp(σ·n, lower, upper)`` with ``n ~ N(0, 1)`` keyed by (seed, step, world, key)."""
    s = wp.rand_init(seed, step)
    state = wp.rand_init(wp.randi(s), world * num_keys + key)
    return wp.clamp(wp.float64(sigma * wp.randn(state)), lower, upper)


@wp.kernel
def _control_noise(seed: int, num_keys: int, sigma: float, key: wp.array(dtype=wp.int32),
                   dof: wp.array(dtype=wp.int32), gain: wp.array(dtype=wp.float64),
                   lower: wp.array(dtype=wp.float64), upper: wp.array(dtype=wp.float64),
                   step: wp.array(dtype=wp.int32), base: wp.array2d(dtype=wp.float64),
                   out: wp.array2d(dtype=wp.float64)):
    """``out[w, dof_k] = base[w, dof_k] + gain_k · u`` for channel k of world w (sap_gpu)."""
    world, k = wp.tid()
    u = _draw(seed, step[0], world, num_keys, key[k], sigma, lower[k], upper[k])
    out[world, dof[k]] = base[world, dof[k]] + gain[k] * u


@wp.kernel
def _ctrl_noise(seed: int, num_keys: int, sigma: float, key: wp.array(dtype=wp.int32),
                lower: wp.array(dtype=wp.float64), upper: wp.array(dtype=wp.float64),
                step: wp.array(dtype=wp.int32), ctrl: wp.array2d(dtype=wp.float32)):
    """``ctrl[w, key_k] = u``: MuJoCo Warp's ctrl from the same draws as :func:`_control_noise`."""
    world, k = wp.tid()
    ctrl[world, key[k]] = wp.float32(_draw(seed, step[0], world, num_keys, key[k], sigma, lower[k], upper[k]))


@wp.kernel
def _advance(step: wp.array(dtype=wp.int32)):
    step[0] = step[0] + 1


@wp.kernel
def _accumulate_sap(status: wp.array(dtype=wp.int32), newton: wp.array(dtype=wp.int32),
                    line_search: wp.array(dtype=wp.int32), count: wp.array(dtype=wp.int32),
                    overflow: wp.array(dtype=wp.int32), stats: wp.array2d(dtype=wp.int64),
                    newton_hist: wp.array2d(dtype=wp.int32), ls_hist: wp.array2d(dtype=wp.int32)):
    """Add one step's diagnostics of world w to its accumulators (no atomics: one thread per world)."""
    world = wp.tid()
    s = status[world]
    n = newton[world]
    ls = line_search[world]
    c = count[world]
    stats[world, S_STEPS] = stats[world, S_STEPS] + wp.int64(1)
    if (s & CONVERGED) != 0:
        stats[world, S_CONVERGED] = stats[world, S_CONVERGED] + wp.int64(1)
    if (s & NON_FINITE) != 0:
        stats[world, S_NON_FINITE] = stats[world, S_NON_FINITE] + wp.int64(1)
    if (s & MAX_ITERATIONS) != 0:
        stats[world, S_CAPPED] = stats[world, S_CAPPED] + wp.int64(1)
    stats[world, S_NEWTON] = stats[world, S_NEWTON] + wp.int64(n)
    stats[world, S_LINE_SEARCH] = stats[world, S_LINE_SEARCH] + wp.int64(ls)
    stats[world, S_CONTACTS] = stats[world, S_CONTACTS] + wp.int64(c)
    stats[world, S_TRUNCATED] = stats[world, S_TRUNCATED] + wp.int64(overflow[world])
    stats[world, S_CONTACTS_MAX] = wp.max(stats[world, S_CONTACTS_MAX], wp.int64(c))
    nb, lb = newton_hist.shape[1], ls_hist.shape[1]
    newton_hist[world, wp.clamp(n, 0, nb - 1)] = newton_hist[world, wp.clamp(n, 0, nb - 1)] + 1
    ls_hist[world, wp.clamp(ls, 0, lb - 1)] = ls_hist[world, wp.clamp(ls, 0, lb - 1)] + 1


@wp.kernel
def _accumulate_mjwarp(max_iterations: int, solver_niter: wp.array(dtype=wp.int32), nacon: wp.array(dtype=wp.int32),
                       stats: wp.array2d(dtype=wp.int64), newton_hist: wp.array2d(dtype=wp.int32)):
    """MuJoCo Warp's counterpart: solver iterations per world; contacts (a total over worlds) in world 0's row."""
    world = wp.tid()
    n = solver_niter[world]
    stats[world, S_STEPS] = stats[world, S_STEPS] + wp.int64(1)
    if n < max_iterations:  # its solver stopped on its tolerance, not on the iteration cap
        stats[world, S_CONVERGED] = stats[world, S_CONVERGED] + wp.int64(1)
    else:
        stats[world, S_CAPPED] = stats[world, S_CAPPED] + wp.int64(1)
    stats[world, S_NEWTON] = stats[world, S_NEWTON] + wp.int64(n)
    if world == 0:
        stats[0, S_CONTACTS] = stats[0, S_CONTACTS] + wp.int64(nacon[0])
    nb = newton_hist.shape[1]
    newton_hist[world, wp.clamp(n, 0, nb - 1)] = newton_hist[world, wp.clamp(n, 0, nb - 1)] + 1


# ----------------------------------------------------------------------------- scene and noise


def load_scene(name: str, num_worlds: int) -> LoadedScene:
    """A built-in scene, a JSON scene file, or an MJCF/URDF file (through ``load_mjcf``)."""
    return load_scene_arg(name, num_worlds)


@dataclass(frozen=True)
class NoiseChannels:
    """Where the control noise goes: channel k draws with key ``key[k]`` and writes DOF ``dof[k]``.

    Attributes:
        key: draw key of each channel (the MuJoCo actuator id on MJCF scenes), (K,).
        num_keys: keys per world (MuJoCo's nu, or nv).
        dof: DOF written by each channel (same in public and SAP order: hinge/slide), (K,).
        gain: ``joint = gain · u`` (gear·gain of a motor; 1 for a raw DOF), (K,).
        lower, upper: clamp of ``u`` (a motor's ctrlrange; ±inf for raw DOFs), (K,).
        target: the control field written (``joint_act`` or ``joint_f``).
        units: what ``u`` (and so σ) is measured in.
    """

    key: np.ndarray
    num_keys: int
    dof: np.ndarray
    gain: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    target: str
    units: str

    @property
    def count(self) -> int:
        return len(self.key)


def noise_channels(scene: LoadedScene) -> NoiseChannels:
    """The noise channels of a scene: its motor actuators (MJCF), else every DOF on ``joint_f``."""
    mp = getattr(scene, "mujoco_map", None)
    if mp is not None:
        motors = [a for a in mp.actuators if a.kind == "motor"]
        arr = lambda f, dt=np.float64: np.array([f(a) for a in motors], dtype=dt)  # noqa: E731
        return NoiseChannels(arr(lambda a: a.mj_actuator, np.int32), mp.nu, arr(lambda a: a.dof, np.int32),
                             arr(lambda a: a.gear * a.gain), arr(lambda a: a.ctrl_lower), arr(lambda a: a.ctrl_upper),
                             "joint_act", "MuJoCo ctrl")
    nv = scene.sap_model.joint_dof_count
    idx = np.arange(nv, dtype=np.int32)
    return NoiseChannels(idx, nv, idx, np.ones(nv), np.full(nv, -np.inf), np.full(nv, np.inf), "joint_f", "N, N·m")


class _Noise:
    """The noise channels on the device and a launcher for either backend's kernel."""

    def __init__(self, ch: NoiseChannels, sigma: float, seed: int, num_worlds: int, device):
        self.ch, self.sigma, self.seed, self.W, self.device = ch, float(sigma), int(seed), num_worlds, device
        # A zero-channel scene launches nothing; its arrays hold one unused entry.
        pad = lambda a, dt: wp.array(a if ch.count else np.zeros(1), dtype=dt, device=device)  # noqa: E731
        self.key, self.dof = pad(ch.key, wp.int32), pad(ch.dof, wp.int32)
        self.gain, self.lower = pad(ch.gain, wp.float64), pad(ch.lower, wp.float64)
        self.upper = pad(ch.upper, wp.float64)
        self.step = wp.zeros(1, dtype=wp.int32, device=device)

    def sap(self, base, out) -> None:
        if self.ch.count:
            wp.launch(_control_noise, dim=(self.W, self.ch.count), device=self.device, inputs=[
                self.seed, self.ch.num_keys, self.sigma, self.key, self.dof, self.gain, self.lower, self.upper,
                self.step, base], outputs=[out])

    def ctrl(self, ctrl) -> None:
        if self.ch.count:
            wp.launch(_ctrl_noise, dim=(self.W, self.ch.count), device=self.device, inputs=[
                self.seed, self.ch.num_keys, self.sigma, self.key, self.lower, self.upper, self.step],
                outputs=[ctrl])

    def advance(self) -> None:
        wp.launch(_advance, dim=1, device=self.device, inputs=[self.step])


def percentile_from_histogram(hist: np.ndarray, q: float = PERCENTILE) -> int:
    """The smallest count c such that at least q % of the samples are ≤ c (``hist[c]`` = samples
    with count c, summed over any leading axes)."""
    counts = np.asarray(hist, dtype=np.int64).reshape(-1, np.shape(hist)[-1]).sum(0)
    total = int(counts.sum())
    if total == 0:
        return 0
    rank = math.ceil(round(q * total / 100.0, 9))  # round: 0.95 · 100 must not become 96
    return int(np.searchsorted(np.cumsum(counts), rank))


def _memory_in_use(device) -> int | None:
    """Bytes of device memory in use (Warp's pool counter, or total − free); None on the CPU."""
    if not device.is_cuda:
        return None
    wp.synchronize_device(device)
    if wp.is_mempool_enabled(device):
        return int(wp.get_mempool_used_mem_current(device))
    return int(device.total_memory - device.free_memory)


# ----------------------------------------------------------------------------- the two backends


class SapRun:
    """sap_gpu on a scene: collide → noise → step → accumulate statistics, all on the device."""

    backend = "sap_gpu"

    def __init__(self, scene: LoadedScene, preset: str, overrides: dict, device, dt: float, noise: NoiseChannels,
                 sigma: float, seed: int, sparse_rows: bool = True, newton_path: str = DEFAULT_NEWTON_PATH):
        m, C = scene.sap_model, scene.max_rigid_contact
        self.device, self.dt, self.W = device, dt, m.num_worlds
        self.solver = sap_gpu.SolverSAP(m, max_rigid_contact=C, contact_preset_variant=preset, device=device,
                                        newton_path=newton_path, **overrides)
        self.solver.sparse_rows = sparse_rows
        self.pipeline = sap_gpu.CollisionPipeline(m, C, self.solver.config, device=device)
        self.contacts = self.pipeline.contacts()
        self.state = sap_gpu.to_device(scene.state, device)
        self.control = sap_gpu.to_device(scene.control, device)
        self.target = getattr(self.control, noise.target)
        self.base = wp.clone(self.target)
        self.noise = _Noise(noise, sigma, seed, self.W, device)
        self.stats = wp.zeros((self.W, len(_STAT_NAMES)), dtype=wp.int64, device=device)
        self.newton_hist = wp.zeros((self.W, self.solver.config.max_iterations + 1), dtype=wp.int32, device=device)
        self.ls_hist = wp.zeros((self.W, LS_HIST_BINS), dtype=wp.int32, device=device)

    def step(self, mark=None) -> None:
        """One step of every world; ``mark(stage)`` (if given) is called after collision, noise and statistics."""
        mark = mark or (lambda name: None)
        self.pipeline.collide(self.state, self.contacts)
        mark("collision")
        self.noise.sap(self.base, self.target)
        mark("control_noise")
        self.solver.step(self.state, self.state, self.control, self.contacts, self.dt)
        s = self.solver
        wp.launch(_accumulate_sap, dim=self.W, device=self.device, inputs=[
            s.last_status, s.last_newton_iterations, s.last_line_search_iterations, self.contacts.count,
            self.contacts.overflow], outputs=[self.stats, self.newton_hist, self.ls_hist])
        self.noise.advance()
        mark("statistics")

    def set_stage_hook(self, hook) -> None:
        self.solver.stage_hook = hook

    def reset_stats(self) -> None:
        for a in (self.stats, self.newton_hist, self.ls_hist):
            a.zero_()

    def summary(self) -> dict:
        """Statistics of the steps since :meth:`reset_stats` and the validity of the final state."""
        st = self.stats.numpy()
        pairs = max(int(st[:, S_STEPS].sum()), 1)
        host = sap_gpu.to_host(self.state)
        finite = np.isfinite(host.joint_q).all(1) & np.isfinite(host.joint_qd).all(1)
        return dict(newton_mean=float(st[:, S_NEWTON].sum() / pairs),
                    newton_p95=percentile_from_histogram(self.newton_hist.numpy()),
                    line_search_mean=float(st[:, S_LINE_SEARCH].sum() / pairs),
                    line_search_p95=percentile_from_histogram(self.ls_hist.numpy()),
                    contacts_per_world_mean=float(st[:, S_CONTACTS].sum() / pairs),
                    contacts_per_world_max=int(st[:, S_CONTACTS_MAX].max()),
                    truncated_contacts=int(st[:, S_TRUNCATED].sum()),
                    converged_fraction=float(st[:, S_CONVERGED].sum() / pairs),
                    capped_steps=int(st[:, S_CAPPED].sum()), world_steps=int(st[:, S_STEPS].sum()),
                    non_finite_steps=int(st[:, S_NON_FINITE].sum()),
                    non_finite_worlds=int((~finite).sum()))


class MjwarpRun:
    """MuJoCo Warp on the scene's compiled MuJoCo model: noise on ``d.ctrl`` → ``mjw.step`` → statistics."""

    backend = "mujoco_warp"

    def __init__(self, scene: LoadedScene, device, dt: float, noise: NoiseChannels, sigma: float, seed: int,
                 nconmax: int | None, njmax: int | None):
        import mujoco
        import mujoco_warp as mjw

        self.mjw, self.device, self.dt, self.W = mjw, device, dt, scene.sap_model.num_worlds
        mjm = copy.copy(scene.mj_model)
        mjm.opt.timestep = dt
        mjd = mujoco.MjData(mjm)  # qpos0 at rest, ctrl 0: the state load_mjcf starts sap_gpu from
        with wp.ScopedDevice(device):
            self.m = mjw.put_model(mjm)
            self.m.opt.warn_overflow = 0  # overflows are read from d.overflow at the end, not printed
            self.d = mjw.put_data(mjm, mjd, nworld=self.W, nconmax=nconmax, njmax=njmax)
        self.max_iterations = int(mjm.opt.iterations)
        # Capacity overflows make a MuJoCo Warp run invalid; reaching its iteration caps is its design.
        cap = mjw.OverflowType
        self.capacity_bits = int(cap.ALL) & ~int(cap.ITERATIONS | cap.LS_ITERATIONS)
        self.noise = _Noise(noise, sigma, seed, self.W, device)
        self.stats = wp.zeros((self.W, len(_STAT_NAMES)), dtype=wp.int64, device=device)
        self.newton_hist = wp.zeros((self.W, self.max_iterations + 1), dtype=wp.int32, device=device)

    def step(self, mark=None) -> None:
        """One step of every world (``mark`` is accepted for symmetry; MuJoCo Warp has no breakdown here)."""
        with wp.ScopedDevice(self.device):
            self.noise.ctrl(self.d.ctrl)
            self.mjw.step(self.m, self.d)
            wp.launch(_accumulate_mjwarp, dim=self.W, device=self.device, inputs=[
                self.max_iterations, self.d.solver_niter, self.d.nacon], outputs=[self.stats, self.newton_hist])
            self.noise.advance()

    def reset_stats(self) -> None:
        for a in (self.stats, self.newton_hist, self.d.overflow):
            a.zero_()

    def summary(self) -> dict:
        st = self.stats.numpy()
        pairs = max(int(st[:, S_STEPS].sum()), 1)
        finite = np.isfinite(self.d.qpos.numpy()).all(1) & np.isfinite(self.d.qvel.numpy()).all(1)
        overflow = self.d.overflow.numpy() & self.capacity_bits
        return dict(newton_mean=float(st[:, S_NEWTON].sum() / pairs),
                    newton_p95=percentile_from_histogram(self.newton_hist.numpy()),
                    line_search_mean=None, line_search_p95=None,
                    contacts_per_world_mean=float(st[:, S_CONTACTS].sum() / pairs), contacts_per_world_max=None,
                    truncated_contacts=None, converged_fraction=float(st[:, S_CONVERGED].sum() / pairs),
                    capped_steps=int(st[:, S_CAPPED].sum()), world_steps=int(st[:, S_STEPS].sum()),
                    non_finite_steps=None, non_finite_worlds=int((~finite).sum()),
                    overflow_worlds=int((overflow != 0).sum()),
                    overflow_flags=[f.name for f in self.mjw.OverflowType
                                    if f.value and not f.value & (f.value - 1) and np.any(overflow & f.value)])


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


def breakdown(run: SapRun, steps: int) -> dict:
    """Per-stage wall time of ``steps`` eager steps (``stage_hook`` + synchronize + perf_counter).

    Stages in pipeline order: collision, control_noise, then the solver's (boundary_in …
    boundary_out; the Newton stages summed over iterations), then statistics. Returns
    ``{"steps", "ms_per_step", "stages": [{"stage", "ms_per_step", "percent", "calls_per_step"}]}``.
    """
    timer = _StageTimer(run.device)
    run.set_stage_hook(timer)
    try:
        for _ in range(steps):
            timer.start()
            run.step(mark=timer)
    finally:
        run.set_stage_hook(None)
    total = sum(timer.seconds.values())
    stages = [dict(stage=k, ms_per_step=1e3 * v / steps, percent=100.0 * v / total if total > 0 else 0.0,
                   calls_per_step=timer.calls[k] / steps) for k, v in timer.seconds.items()]
    return dict(steps=steps, ms_per_step=1e3 * total / steps, stages=stages)


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


# ----------------------------------------------------------------------------- runs and reports


def _hardware(device) -> str:
    if device.is_cuda:
        return f"{device.name} ({device.total_memory / 2**30:.0f} GiB)"
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    return f"{model} ({os.cpu_count()} logical CPUs)"


def _run_one(make, label: str, scene: LoadedScene, args, device, extra: dict) -> dict:
    """Construct a run (``make()``), time it and summarize it as one report row."""
    gc.collect()
    mem0 = _memory_in_use(device)
    run = make()
    W = scene.sap_model.num_worlds
    with Progress(args.steps, f"{label} x{W}", enabled=not args.quiet) as bar:
        timing = time_run(run, args.steps, args.warmup, not args.no_graph, bar)
    mem1 = _memory_in_use(device)
    s = timing["seconds"]
    row = dict(backend=run.backend, label=label, scene=scene.name, num_worlds=W, steps=args.steps,
               warmup=args.warmup, dt=run.dt, device=str(device), hardware=_hardware(device),
               world_steps_per_s=W * args.steps / s, ms_per_step=1e3 * s / args.steps,
               realtime_factor=args.steps * run.dt / s,
               gpu_memory_mib=None if mem0 is None else max(mem1 - mem0, 0) / 2**20, **timing, **extra)
    row.update(run.summary())
    row["valid"], row["invalid_reason"] = validity(row)
    row.update(structure(run, args.structure_steps))
    if args.breakdown and run.backend == "sap_gpu":
        row["breakdown"] = breakdown(run, args.breakdown_steps)
    del run
    return row


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
            f"({r['structure_steps']} counted steps)")


def breakdown_table(row: dict) -> str:
    b = row["breakdown"]
    lines = [f"breakdown: {row['label']} x{row['num_worlds']}, {b['steps']} eager steps, "
             f"{b['ms_per_step']:.3f} ms/step with a device synchronization after every stage",
             f"  {'stage':<18} {'ms/step':>9} {'%':>6} {'calls/step':>10}"]
    for s in b["stages"]:
        lines.append(f"  {s['stage']:<18} {s['ms_per_step']:>9.3f} {s['percent']:>6.1f} {s['calls_per_step']:>10.2f}")
    top = max(b["stages"], key=lambda s: s["ms_per_step"])
    lines.append(f"  dominant stage: {top['stage']} ({top['percent']:.1f} %)")
    return "\n".join(lines)


def _ratios(rows: list[dict]) -> list[dict]:
    mj = {r["num_worlds"]: r for r in rows if r["backend"] == "mujoco_warp"}
    return [dict(num_worlds=r["num_worlds"], preset=r["preset"], linear_solver=r.get("linear_solver"),
                 label=r["label"], ratio=r["world_steps_per_s"] / mj[r["num_worlds"]]["world_steps_per_s"])
            for r in rows if r["backend"] == "sap_gpu" and r["num_worlds"] in mj]


def _sparse_speedups(rows: list[dict]) -> list[dict]:
    """world-steps/s of sparse rows over dense rows, per (num_worlds, preset, linear solver) run in both."""
    key = lambda r: (r["num_worlds"], r["preset"], r["linear_solver"], r.get("newton_path"))  # noqa: E731
    dense = {key(r): r for r in rows if r.get("rows") == "dense"}
    return [dict(num_worlds=r["num_worlds"], preset=r["preset"], linear_solver=r["linear_solver"],
                 speedup=r["world_steps_per_s"] / dense[key(r)]["world_steps_per_s"])
            for r in rows if r.get("rows") == "sparse" and key(r) in dense]


def _path_speedups(rows: list[dict]) -> list[dict]:
    """world-steps/s of the fused Newton path over the staged one, per (num_worlds, preset, linear
    solver, rows) run with both; on the CPU device also by process CPU time (``cpu_speedup``: Warp
    runs CPU kernels on the calling thread, so the process's CPU time is the run's work, which
    other load on a shared machine disturbs much less than the wall clock)."""
    key = lambda r: (r["num_worlds"], r["preset"], r["linear_solver"], r["rows"])  # noqa: E731
    staged = {key(r): r for r in rows if r.get("newton_path") == "staged"}
    out = []
    for r in rows:
        if r.get("newton_path") == "fused" and key(r) in staged:
            s = staged[key(r)]
            cpu = s["cpu_seconds"] / r["cpu_seconds"] if "cuda" not in r["device"] and r["cpu_seconds"] > 0 else None
            out.append(dict(num_worlds=r["num_worlds"], preset=r["preset"], linear_solver=r["linear_solver"],
                            rows=r["rows"], speedup=r["world_steps_per_s"] / s["world_steps_per_s"], cpu_speedup=cpu))
    return out


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
    p.add_argument("scene", nargs="?", default=DEFAULT_SCENE,
                   help=f"built-in scene, JSON scene file or MJCF/URDF file (default {DEFAULT_SCENE})")
    p.add_argument("--num-worlds", nargs="+", default=["1024"], help="worlds per run, a sweep: 1024 4096 or 1024,4096")
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS, help=f"timed steps per run (default {DEFAULT_STEPS})")
    p.add_argument("--warmup", type=int, default=DEFAULT_WARMUP, help=f"untimed steps first (default {DEFAULT_WARMUP})")
    p.add_argument("--preset", nargs="+", default=["approx32"],
                   help=f"contact_preset_variant(s): {PRESET_CHOICES} (default approx32; several = a sweep)")
    p.add_argument("--line-search", default=None,
                   help=f"line_search_variant: one of {LINE_SEARCH_CHOICES} (default: the preset's)")
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
    p.add_argument("--structure-steps", type=int, default=DEFAULT_STRUCTURE_STEPS,
                   help=f"eager steps after the timed run whose device operations are counted (default "
                        f"{DEFAULT_STRUCTURE_STEPS})")
    p.add_argument("--device", default=None, help="Warp device (default: Warp's default, cuda:0 where present)")
    p.add_argument("--max-rigid-contact", type=int, default=None, help="contact slots per world (default: the scene's)")
    p.add_argument("--dt", type=float, default=None, help="time step [s] (default: the scene's; humanoid 5 ms)")
    p.add_argument("--noise-std", type=float, default=DEFAULT_NOISE_STD,
                   help=f"σ of the per-step control noise (default {DEFAULT_NOISE_STD}; 0 = none)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"noise seed (default {DEFAULT_SEED})")
    p.add_argument("--no-graph", action="store_true", help="eager launches on a CUDA device too")
    p.add_argument("--breakdown", action="store_true", help="per-stage timing of each sap_gpu run (eager pass)")
    p.add_argument("--breakdown-steps", type=int, default=20, help="steps of the breakdown pass (default 20)")
    p.add_argument("--vs-mjwarp", action="store_true", help="also run MuJoCo Warp on the same model (MJCF scenes)")
    p.add_argument("--mjwarp-nconmax", type=int, default=None, help="MuJoCo Warp nconmax (default: its own)")
    p.add_argument("--mjwarp-njmax", type=int, default=None, help="MuJoCo Warp njmax (default: its own)")
    p.add_argument("--out", default=None, help="write every result as JSON to this file (for sap-plot-benchmark)")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


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
    overrides = {}
    if args.line_search is not None:
        overrides["line_search_variant"] = args.line_search
    if args.max_iterations is not None:
        overrides["max_iterations"] = args.max_iterations
    if args.linear_solver is not None:
        overrides["contact_linear_solver"] = args.linear_solver[0]  # each is applied per run in main()
    presets = [p.strip() for v in args.preset for p in str(v).split(",") if p.strip()]
    for p in presets:  # preset alone, then with the line search, then with the linear solver
        for flag, keys in (("--preset", ()), ("--line-search", ("line_search_variant",)),
                           ("--max-iterations", ("line_search_variant", "max_iterations")),
                           ("--linear-solver", tuple(overrides))):
            try:
                SapConfig.from_preset(p, **{k: overrides[k] for k in keys if k in overrides})
            except ValueError as e:
                raise ValueError(f"{flag}: {e}") from None
    if args.vs_mjwarp:
        try:
            import mujoco_warp  # noqa: F401
        except ImportError:
            raise ValueError("--vs-mjwarp: needs the 'mujoco_warp' package (pip install mujoco-warp)") from None
    device = warp_device(args.device)
    if args.out is not None:
        check_out("--out", args.out)
    return worlds, presets, overrides, device


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        worlds, presets, overrides, device = _validate(args)
        scene0 = load_scene(args.scene, 1)
        if args.vs_mjwarp and getattr(scene0, "mj_model", None) is None:
            raise ValueError(f"--vs-mjwarp: needs an MJCF scene (humanoid, humanoid3 or an .xml file); "
                             f"{scene0.name!r} has no MuJoCo model")
    except ValueError as e:
        return fail("sap-benchmark", e)
    dt = args.dt if args.dt is not None else scene0.dt
    C = scene0.max_rigid_contact if args.max_rigid_contact is None else args.max_rigid_contact
    channels = noise_channels(scene0)
    cfg_note = "".join(f", {k} {v}" for k, v in overrides.items() if k != "contact_linear_solver")
    if args.linear_solver:
        cfg_note += f", contact_linear_solver {' / '.join(args.linear_solver)}"
    print(f"sap-benchmark: {scene0.name} (nv {scene0.sap_model.joint_dof_count}, {C} contact slots), dt {dt:g} s, "
          f"{args.steps} timed steps after {args.warmup} warm-up; noise σ {args.noise_std:g} ({channels.units}) on "
          f"{channels.count} {channels.target} channels, seed {args.seed}; {device} = {_hardware(device)}{cfg_note}")
    rows = []
    for W in worlds:
        scene = load_scene(args.scene, W)
        scene.max_rigid_contact = C
        common = dict(noise_std=args.noise_std, seed=args.seed, noise_channels=channels.count,
                      max_rigid_contact=C, nv=scene.sap_model.joint_dof_count, warp_version=wp.__version__)
        for preset in presets:
            for solver in (args.linear_solver or [None]):
                for sparsity in dict.fromkeys(args.rows):
                    for path in dict.fromkeys(args.newton_path):
                        run_overrides = dict(overrides)
                        if solver is not None:
                            run_overrides["contact_linear_solver"] = solver
                        cfg = SapConfig.from_preset(preset, **run_overrides)
                        extra = dict(preset=cfg.contact_preset_variant, line_search=cfg.line_search_variant,
                                     linear_solver=cfg.contact_linear_solver, rows=sparsity, newton_path=path,
                                     **common)
                        label = (cfg.contact_preset_variant + (f"/{solver}" if args.linear_solver else "")
                                 + (f"/{sparsity}" if args.rows != ["sparse"] else "")
                                 + (f"/{path}" if args.newton_path != [DEFAULT_NEWTON_PATH] else ""))
                        rows.append(_run_one(lambda: SapRun(scene, preset, run_overrides, device, dt, channels,
                                                            args.noise_std, args.seed, sparsity == "sparse", path),
                                             label, scene, args, device, extra))
        if args.vs_mjwarp:
            import mujoco_warp

            extra = dict(preset=None, **common, line_search=None, linear_solver=None, rows=None, newton_path=None,
                         mjwarp_version=mujoco_warp.__version__, nconmax=args.mjwarp_nconmax, njmax=args.mjwarp_njmax)
            rows.append(_run_one(lambda: MjwarpRun(scene, device, dt, channels, args.noise_std, args.seed,
                                                   args.mjwarp_nconmax, args.mjwarp_njmax),
                                 "mujoco_warp", scene, args, device, extra))
        del scene
    print(table(rows))
    notes = sorted({r["graph_note"] for r in rows})
    print("timing: " + "; ".join(notes))
    for r in rows:
        if r["backend"] == "sap_gpu":
            print(structure_line(r))
    for r in rows:
        if "breakdown" in r:
            print(breakdown_table(r))
    ratios = _ratios(rows)
    for q in ratios:
        print(f"ratio sap_gpu/mjwarp ({q['label']}, {q['num_worlds']} worlds): {q['ratio']:.3f}")
    speedups = _sparse_speedups(rows)
    for q in speedups:
        print(f"speed-up sparse/dense rows ({q['preset']}/{q['linear_solver']}, {q['num_worlds']} worlds): "
              f"{q['speedup']:.3f}")
    path_speedups = _path_speedups(rows)
    for q in path_speedups:
        cpu = "" if q["cpu_speedup"] is None else f" (by process CPU time: {q['cpu_speedup']:.3f})"
        print(f"speed-up fused/staged Newton path ({q['preset']}/{q['linear_solver']}/{q['rows']}, "
              f"{q['num_worlds']} worlds): {q['speedup']:.3f}{cpu}")
    result = dict(scene=scene0.name, device=str(device), hardware=_hardware(device),
                  valid=all(r["valid"] for r in rows), runs=rows, ratios=ratios, sparse_speedups=speedups,
                  newton_path_speedups=path_speedups)
    sap_rows = [r for r in rows if r["backend"] == "sap_gpu"]
    if len(sap_rows) == 1:  # a single sap_gpu run: its fields at the top level too
        result = {**sap_rows[0], **result}
        if len(ratios) == 1:
            result["ratio"] = ratios[0]["ratio"]
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        print(f"results written to {args.out}")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The runs ``sap-benchmark`` times: a scene, its control noise and either backend stepping it.

:class:`SapRun` (sap_gpu) and :class:`MjwarpRun` (MuJoCo Warp) each step a batched scene
``collide → control noise → step`` and accumulate per-world iteration and contact statistics on
the device; ``summary()`` reads them back once, after the timed region. The noise draws and the
statistics are kernels, so a step stays capturable in a CUDA graph. The measurement around these
runs is in :mod:`sap_tools.benchmark.measure`, the command line in :mod:`sap_tools.benchmark.cli`.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import warp as wp

import sap_gpu
from sap_common.config import SapConfig
from sap_common.constants import DEFAULT_NEWTON_PATH
from sap_common.io import LoadedScene
from sap_common.parameters import PARAMETER_FIELDS
from sap_common.state import MemoryEstimate, StepStatus
from sap_tools.cli import load_scene_arg

__all__ = ["load_scene", "NoiseChannels", "noise_channels", "percentile_from_histogram", "memory_in_use",
           "SapRun", "MjwarpRun", "DEFAULT_NOISE_STD", "PERCENTILE"]

# σ of the control noise: a tenth of the humanoid's ctrl half-range (±1), i.e. up to ~12 N·m of
# hip torque at one σ — visible joint motion, rarely at the clamp.
DEFAULT_NOISE_STD = 0.1
# Line-search iterations per step at or above this share the last histogram bin (their p95 is
# then a lower bound); Newton iterations get one bin per count up to max_iterations.
LS_HIST_BINS = 256
PERCENTILE = 95.0

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


def load_scene(name: str, num_worlds: int, check_memory: bool = True) -> LoadedScene:
    """A built-in scene, a JSON scene file, or an MJCF/URDF file (through ``load_mjcf``); with
    ``check_memory``, refused when its host arrays would not fit (``sap_tools.cli.load_scene_arg``)."""
    return load_scene_arg(name, num_worlds, check_memory=check_memory)


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
    hist = np.asarray(hist)
    rows = hist.reshape(-1, hist.shape[-1])
    # Summed with an int64 accumulator, not converted first: a (num_worlds, bins) histogram of int32
    # copied to int64 would double its memory at the end of a large run.
    counts = rows.sum(0, dtype=np.int64) if np.issubdtype(rows.dtype, np.integer) else rows.astype(np.int64).sum(0)
    total = int(counts.sum())
    if total == 0:
        return 0
    rank = math.ceil(round(q * total / 100.0, 9))  # round: 0.95 · 100 must not become 96
    return int(np.searchsorted(np.cumsum(counts), rank))


def memory_in_use(device) -> int | None:
    """Bytes of device memory in use (Warp's pool counter, or total − free); None on the CPU."""
    if not device.is_cuda:
        return None
    wp.synchronize_device(device)
    if wp.is_mempool_enabled(device):
        return int(wp.get_mempool_used_mem_current(device))
    return int(device.total_memory - device.free_memory)


# ----------------------------------------------------------------------------- the two backends


class SapRun:
    """sap_gpu on a scene: collide → noise → step → accumulate statistics, all on the device.

    ``parameter_values`` ({field: (num_worlds, *shape) host values}, e.g. :func:`sap_tools.randomize.draw`'s):
    written into a :class:`sap_gpu.WorldParameters` of the scene's model that the solver and the
    collision pipeline both read (``sap-benchmark --randomize``); None: the model's values, shared.
    """

    backend = "sap_gpu"

    def __init__(self, scene: LoadedScene, preset: str, overrides: dict, device, dt: float, noise: NoiseChannels,
                 sigma: float, seed: int, sparse_rows: bool = True, newton_path: str = DEFAULT_NEWTON_PATH,
                 parameter_values: dict | None = None):
        m, C = scene.sap_model, scene.max_rigid_contact
        self.device, self.dt, self.W = device, dt, m.num_worlds
        params = None
        if parameter_values is not None:
            params = sap_gpu.WorldParameters(m, device=device)
            for name, values in parameter_values.items():
                params.set(name, values)
        self.solver = sap_gpu.SolverSAP(m, max_rigid_contact=C, contact_preset_variant=preset, device=device,
                                        newton_path=newton_path, parameters=params, **overrides)
        self.solver.sparse_rows = sparse_rows
        self.pipeline = sap_gpu.CollisionPipeline(m, C, self.solver.config, device=device, parameters=params)
        self.contacts = self.pipeline.contacts()
        self.state = sap_gpu.to_device(scene.state, device)
        self.control = sap_gpu.to_device(scene.control, device)
        self.target = getattr(self.control, noise.target)
        self._allocate_own(noise, sigma, seed, self.solver.config.max_iterations)

    def _allocate_own(self, noise: NoiseChannels, sigma: float, seed: int, max_iterations: int) -> None:
        """What the run adds to the solver's, the pipeline's and the batch's arrays: the noise
        channels, the noised field's base values and the statistics (``self.target``, ``self.W``
        and ``self.device`` set)."""
        self.base = wp.clone(self.target)
        self.noise = _Noise(noise, sigma, seed, self.W, self.device)
        self.stats = wp.zeros((self.W, len(_STAT_NAMES)), dtype=wp.int64, device=self.device)
        self.newton_hist = wp.zeros((self.W, max_iterations + 1), dtype=wp.int32, device=self.device)
        self.ls_hist = wp.zeros((self.W, LS_HIST_BINS), dtype=wp.int32, device=self.device)

    @staticmethod
    def memory_estimate(scene: LoadedScene, num_worlds: int, preset: str, overrides: dict, device,
                        noise: NoiseChannels, newton_path: str = DEFAULT_NEWTON_PATH,
                        randomized: bool = False, max_rigid_contact: int | None = None) -> MemoryEstimate:
        """The memory of a run of ``num_worlds`` worlds of ``scene`` (any world count: its model's
        template is read) with ``max_rigid_contact`` slots (default: the scene's), without building
        it: ``sap_gpu.estimate_memory`` (solver, collision pipeline and contacts, the device state and
        control, with ``randomized`` the per-world parameters), the run's own arrays (``benchmark
        statistics``, measured on 1 and 2 worlds), and on the host the scene's state and control
        (``state (host)``, ``control (host)``) and with ``randomized`` the drawn values
        (``randomized values (host)``, at most one value per world of every field)."""
        from sap_common.state import control_memory, probe_memory, state_memory
        from sap_gpu.device import device_nbytes
        from sap_gpu.parameters import parameters_memory

        m = scene.sap_model
        C = scene.max_rigid_contact if max_rigid_contact is None else max_rigid_contact
        cfg = SapConfig.from_preset(preset, newton_path=newton_path, **overrides)
        out = sap_gpu.estimate_memory(m, C, preset, device, parameters=randomized, newton_path=newton_path,
                                      **overrides)
        cpu = wp.get_device("cpu")

        def measure(W):
            probe = SapRun.__new__(SapRun)
            probe.W, probe.device = W, cpu
            probe.target = wp.zeros((W, max(m.joint_dof_count, 1)), dtype=wp.float64, device=cpu)
            probe._allocate_own(noise, 0.0, 0, cfg.max_iterations)
            return device_nbytes(probe) - device_nbytes(probe.target)

        out = out + probe_memory("benchmark statistics", m, measure, key=("sap-benchmark", cfg.max_iterations))
        out = out + state_memory(m, name="state (host)") + control_memory(m, name="control (host)")
        if randomized:
            _, host = parameters_memory(m, parts=True)
            out = out + MemoryEstimate(m.num_worlds, tuple(dataclasses.replace(p, name="randomized values (host)")
                                                           for p in host.parts))
        return out.worlds(num_worlds)

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
                    probes_per_iteration=float(st[:, S_LINE_SEARCH].sum() / max(int(st[:, S_NEWTON].sum()), 1)),
                    contacts_per_world_mean=float(st[:, S_CONTACTS].sum() / pairs),
                    contacts_per_world_max=int(st[:, S_CONTACTS_MAX].max()),
                    truncated_contacts=int(st[:, S_TRUNCATED].sum()),
                    converged_fraction=float(st[:, S_CONVERGED].sum() / pairs),
                    capped_steps=int(st[:, S_CAPPED].sum()), world_steps=int(st[:, S_STEPS].sum()),
                    non_finite_steps=int(st[:, S_NON_FINITE].sum()),
                    non_finite_worlds=int((~finite).sum()), register_cap=self.solver.fused_max_registers,
                    plan=self.solver.plan.describe(), randomized_fields=self.varied_fields())

    def varied_fields(self) -> list[str]:
        """The per-world parameter fields whose values differ between worlds in what the solver reads
        (read back from its ``parameters``; none for the shared, model's values)."""
        p = self.solver.parameters
        if p.shared:
            return []
        out = []
        for name in PARAMETER_FIELDS:
            a = p.get(name)
            if not np.array_equal(a, np.broadcast_to(a[:1], a.shape), equal_nan=True):
                out.append(name)
        return out


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
                    non_finite_steps=None, non_finite_worlds=int((~finite).sum()), register_cap=None,
                    overflow_worlds=int((overflow != 0).sum()),
                    overflow_flags=[f.name for f in self.mjw.OverflowType
                                    if f.value and not f.value & (f.value - 1) and np.any(overflow & f.value)])

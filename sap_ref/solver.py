"""SolverSAP: the sap_ref time step, one world at a time (docs/pipeline.md).

    solver = SolverSAP(model, max_rigid_contact=16, contact_preset_variant="drake")
    pipeline = CollisionPipeline(model, 16, solver.config)
    contacts = pipeline.contacts()
    pipeline.collide(state, contacts)
    solver.step(state, state, control, contacts, dt)
    solver.last_results[0].solve.history     # every Newton iterate and line-search probe

Each world: boundary (stage 0) → free motion (1) → contact Jacobians, weights, limit and
drive rows (2) → Newton on ℓ(v) (3) → position update (4) → boundary out (5). Worlds never
share data; a world whose inputs are not finite is flagged and left unchanged. With
``parameters=`` (a :class:`~sap_ref.WorldParameters`), world w steps as the one-world model
``parameters.world_model(w)`` does.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from sap_common.collision_rules import check_contact_materials, check_hunt_crossley_materials
from sap_common.config import SapConfig
from sap_common.conventions import check_num_worlds, joint_quaternions_ok
from sap_common.kinematics import body_state
from sap_common.kinematics import forward_kinematics as world_poses
from sap_common.model import SapModel
from sap_common.state import (
    MemoryEstimate,
    SapContacts,
    SapControl,
    SapState,
    StepStatus,
    available_host_memory,
    check_contacts,
    check_control,
    check_memory,
    check_state,
    control_memory,
    host_nbytes,
    probe_memory,
    state_memory,
)
from sap_common.time_step import check_time_step, time_step_bound

from . import boundary
from .arrays import check_host_device
from .collision import CollisionPipeline
from .constraints import (
    DriveConstraints,
    HuntCrossley,
    LimitConstraints,
    drive_constraints,
    hunt_crossley_data,
    limit_constraints,
)
from .contact_jacobian import (
    ContactGeometry,
    body_inertia_weights,
    contact_geometry,
    contact_regularization,
    delassus_weights,
    split_kinematic,
)
from .contact_solve import SapProblem, SolveResult, make_problem, solve
from .free_motion import FreeMotion, free_motion
from .holonomic import HolonomicRows, holonomic_constraints
from .integration import integrate_positions
from .kinematics import body_jacobians, forward_kinematics, motion_subspaces
from .linear_solve import PcrSettings
from .observables import (
    OBSERVABLE_NAMES,
    STATISTIC_NAMES,
    StepObservables,
    WorldStatistics,
    initial_state_into,
    world_observables,
)
from .parameters import WorldParameters, parameters_memory, world_slice, write_world

__all__ = ["SolverSAP", "WorldResult", "estimate_memory"]


@dataclass
class WorldResult:
    """Every intermediate of one world's step (for teaching and debugging).

    Attributes:
        free_motion: M, A, k and v* (stage 1).
        contacts: contact frames, points and Jacobians J (stage 2).
        w: contact weights, (C,).  R / v_hat: contact regularization and bias, (C, 3) (read by the
            ``sap`` approximation only).
        limits / drives: the limit and drive rows of this step.
        problem: the SAP problem on the participating DOFs (stage 3 input).
        solve: the Newton solve: solution, γ, iterations, history (stage 3).
        v1: new velocities, SAP order, (nv,).  q1: new coordinates, (nq,).
        status: :class:`StepStatus` bits.
        body_q: the body poses the contact stage used (at q₀; float32-rounded unless
            ``use_f64_boundary_pose``), (B, 7), or None for a rejected world.
        hunt_crossley: the contacts' Hunt–Crossley data (fₑ₀, vₙ₀, n₀, ε_s) under ``lagged`` and
            ``similar``; None under ``sap``.
        holonomic: the holonomic constraint rows of this step (g₀, J, w, R, v̂ and the regime).
    """

    free_motion: FreeMotion | None
    contacts: ContactGeometry | None
    w: np.ndarray | None
    R: np.ndarray | None
    v_hat: np.ndarray | None
    limits: LimitConstraints | None
    drives: DriveConstraints | None
    problem: SapProblem | None
    solve: SolveResult | None
    v1: np.ndarray
    q1: np.ndarray
    status: StepStatus
    body_q: np.ndarray | None = None
    hunt_crossley: HuntCrossley | None = None
    holonomic: HolonomicRows | None = None

    @property
    def contact_impulses(self) -> np.ndarray:
        """γ of each contact in its frame (t₁, t₂, n) [N·s] (impulse on body 1), (C, 3)."""
        return self.solve.evaluation.contact_gamma.astype(np.float64)

    @property
    def contact_impulses_W(self) -> np.ndarray:
        """``R_WC γ``: each contact's impulse on body 1 in world [N·s] (force = impulse / h), (C, 3)."""
        return np.einsum("cij,cj->ci", self.contacts.R_WC, self.contact_impulses)


class SolverSAP:
    """Drake's SAP time step for every world of ``model`` (NumPy/SciPy reference).

    Args:
        model: the model (at least one articulated DOF).
        max_rigid_contact: contact slots per world (the capacity of the contacts passed to step).
        contact_preset_variant: ``approx32`` (default), ``approx64`` or ``drake`` (docs/presets.md).
        device: None or ``"cpu"`` (sap_ref runs on the host; the argument exists so that
            ``sap_ref`` and ``sap_gpu`` are called alike).
        parameters: a :class:`~sap_ref.WorldParameters` of this very ``model`` object, or None. With
            it, world ``w`` steps as a one-world solver of ``parameters.world_model(w)`` (same
            preset, capacity and overrides) does, bit for bit: each world runs as such a solver,
            rebuilt when the world's parameters are next written. A Hunt–Crossley approximation
            sets ``parameters.forbid_rigid``.
        **overrides: any :class:`~sap_common.config.SapConfig` knob; wins over the preset
            (``newton_path``, which only sap_gpu's device loop reads, is checked here too).

    Diagnostics after :meth:`step` (arrays over worlds): ``last_newton_iterations``,
    ``last_line_search_iterations``, ``last_truncated_contact_count``, ``last_status``
    (:class:`StepStatus` bits), ``last_linear_solver_iterations`` and
    ``last_linear_solver_residual`` (PCR iterations summed over the step's Newton iterations and
    the largest final relative residual; 0 with Cholesky), and ``last_results`` (one
    :class:`WorldResult` per world). :meth:`diagnostics` returns them as a dict, like sap_gpu.
    """

    def __init__(self, model: SapModel, *, max_rigid_contact: int, contact_preset_variant: str = "approx32",
                 device=None, parameters: WorldParameters | None = None, **overrides):
        check_host_device(device)
        if not isinstance(model, SapModel):
            raise ValueError(f"model: expected a SapModel, got {type(model).__name__}")
        if model.joint_dof_count < 1:
            raise ValueError("model: SolverSAP needs at least one articulated DOF (joint_dof_count >= 1), got 0")
        self.model = model
        self.config = SapConfig.from_preset(contact_preset_variant, max_rigid_contact=max_rigid_contact, **overrides)
        check_hunt_crossley_materials(model, self.config)
        if parameters is not None and (not isinstance(parameters, WorldParameters) or parameters.model is not model):
            raise ValueError(f"parameters: expected a sap_ref.WorldParameters of this solver's model (the same "
                             f"object), got {_describe(parameters, model)}")
        # Refused before anything is allocated when the arrays and a step's results would not fit
        # (docs/scaling.md § Memory).
        check_memory(_solver_memory(model, self.config), available_host_memory, "sap_ref.SolverSAP",
                     capacity=self.config.max_rigid_contact)
        self._allocate(model.num_worlds)
        self.last_results: list[WorldResult] = []
        self.dt_bound = time_step_bound(model)  # [s]; longer steps warn (sap_common.time_step)
        self.parameters = parameters
        if parameters is not None:
            self._world_args = dict(max_rigid_contact=max_rigid_contact, contact_preset_variant=contact_preset_variant,
                                    **overrides)
            self._world_solvers: dict[int, tuple[int, SolverSAP, float]] = {}  # w -> (version, solver, dt bound)
            self._forbid_rigid()

    def _allocate(self, W: int) -> None:
        """The arrays over worlds: the last step's diagnostics, its observables and the per-world
        statistics since each world's reset (sap_ref.observables; sap_gpu's attributes of the same
        names, as NumPy arrays)."""
        self.last_newton_iterations = np.zeros(W, dtype=np.int32)
        self.last_line_search_iterations = np.zeros(W, dtype=np.int32)
        self.last_truncated_contact_count = np.zeros(W, dtype=np.int32)
        self.last_status = np.zeros(W, dtype=np.int32)
        self.last_linear_solver_iterations = np.zeros(W, dtype=np.int32)
        self.last_linear_solver_residual = np.zeros(W, dtype=np.float64)
        self.observables = StepObservables.zeros(W, max(self.config.max_rigid_contact, 1), self.model.body_count)
        self.world_statistics = WorldStatistics.zeros(W)

    @classmethod
    def memory_estimate(cls, model: SapModel, *, max_rigid_contact: int, contact_preset_variant: str = "approx32",
                        device=None, parameters: WorldParameters | None = None, **overrides) -> MemoryEstimate:
        """What this constructor's arguments would take on the host, without allocating it: a
        :class:`~sap_common.state.MemoryEstimate` of the parts ``solver`` (the arrays over worlds,
        measured on 1 and 2 worlds) and ``step`` (what a step of every world holds at its peak: the
        batch's converted inputs and outputs, and each world's :class:`WorldResult` twice, the last
        step's and the new one). What the constructor checks against the host's available memory
        (docs/scaling.md § Memory). With ``parameters``, each world's own one-world solver is not
        counted."""
        check_host_device(device)
        if not isinstance(model, SapModel):
            raise ValueError(f"model: expected a SapModel, got {type(model).__name__}")
        return _solver_memory(model, SapConfig.from_preset(contact_preset_variant, max_rigid_contact=max_rigid_contact,
                                                           **overrides))

    def step(self, state_in: SapState, state_out: SapState, control: SapControl, contacts: SapContacts | None,
             dt: float) -> None:
        """Advance every world by ``dt`` (``state_out`` may be ``state_in``)."""
        if self.parameters is not None:
            self._step_parameters(state_in, state_out, control, contacts, dt)
            return
        model, cfg = self.model, self.config
        x = boundary.read_inputs(model, state_in, control, dt, cfg.use_f64_boundary_pose, self.dt_bound)
        check_state(model, state_out, "state_out")  # before any work, not at the write
        if contacts is None:
            contacts = SapContacts.allocate(model.num_worlds, cfg.max_rigid_contact)
        self._check_contacts(contacts)
        q1, v1 = x.joint_q.copy(), x.v0.copy()
        keep = np.zeros(model.num_worlds, dtype=bool)
        results = []
        for w in range(model.num_worlds):
            r = self._step_world(w, x, contacts, dt)
            keep[w] = bool(r.status & (StepStatus.NON_FINITE | StepStatus.INVALID_QUATERNION))
            if not keep[w]:
                q1[w], v1[w] = r.q1, r.v1
            if contacts.overflow[w] > 0:
                r.status |= StepStatus.CONTACT_OVERFLOW
            results.append(r)
        stepped = ~keep
        body_qd0 = np.zeros((model.num_worlds, model.body_count, 6))
        if np.any(stepped):  # public body twists at (q₀, v₀), for body_acceleration
            body_qd0[stepped] = body_state(model, x.joint_q[stepped], x.v0[stepped], "sap")[1]
        boundary.write_state(model, state_in, state_out, q1, v1, keep, cfg.use_f64_boundary_pose)
        obs = self.observables
        for w, r in enumerate(results):
            world_observables(obs, w, r, r.body_q, dt)
        obs.body_acceleration[...] = 0.0
        obs.body_acceleration[stepped] = (np.asarray(state_out.body_qd)[stepped] - body_qd0[stepped]) / dt
        self.last_results = results
        self.last_status[:] = [int(r.status) for r in results]
        self.last_newton_iterations[:] = [r.solve.iterations if r.solve else 0 for r in results]
        self.last_line_search_iterations[:] = [r.solve.line_search_iterations if r.solve else 0 for r in results]
        self.last_truncated_contact_count[:] = contacts.overflow
        self.last_linear_solver_iterations[:] = [r.solve.linear_solver_iterations if r.solve else 0 for r in results]
        self.last_linear_solver_residual[:] = [r.solve.linear_solver_residual if r.solve else 0.0 for r in results]
        self.world_statistics.add(self.last_status, self.last_newton_iterations, self.last_line_search_iterations)

    def reset(self, state: SapState | None = None, world_mask=None) -> None:
        """Reset the worlds of ``world_mask`` ((num_worlds,) bool or integer array, nonzero = reset;
        None: every world): their diagnostics, observables and statistics, and, when ``state`` is
        given, their state (the model's initial state, ``joint_qd`` in the state's order,
        ``body_f`` zero). sap_gpu's ``reset`` with a host mask (docs/scaling.md)."""
        W = self.model.num_worlds
        if world_mask is None:
            mask = np.ones(W, bool)
        else:
            a = np.asarray(world_mask)
            if a.shape != (W,) or not (a.dtype == np.bool_ or np.issubdtype(a.dtype, np.integer)):
                raise ValueError(f"world_mask: expected a bool or integer array shaped ({W},) or None, got "
                                 f"{a.dtype} {a.shape}")
            mask = a != 0
        if state is not None:
            check_state(self.model, state, "state")
        for name in _DIAGNOSTICS:
            getattr(self, name)[mask] = 0
        self.observables.clear(mask)
        self.world_statistics.clear(mask)
        if state is not None and self.parameters is None:
            initial_state_into(self.model, state, mask)
        elif state is not None:  # each world's own initial state (body_qd, a FREE joint's SAP joint_qd use its COM)
            for w in np.flatnonzero(mask):
                one = world_slice(state, w)
                initial_state_into(self.parameters.world_model(w), one, np.ones(1, bool))
                write_world(state, one, w)

    def read_observables(self) -> dict:
        """Copies of :attr:`observables` by name (the keys of sap_gpu's ``read_observables``)."""
        return {name: getattr(self.observables, name).copy() for name in OBSERVABLE_NAMES}

    def statistics(self) -> dict:
        """Copies of the per-world statistics and ``any_failed`` (the keys of sap_gpu's)."""
        out = {name: getattr(self.world_statistics, name).copy() for name in STATISTIC_NAMES}
        out["any_failed"] = self.world_statistics.any_failed
        return out

    def body_poses(self, joint_q, body_q) -> None:
        """Fill ``body_q (num_worlds, B, 7)`` with every world's body poses ``[p, quat xyzw]`` at
        coordinates ``joint_q (num_worlds, nq)`` (forward kinematics; what :meth:`step` leaves in
        ``state_out.body_q``). sap_gpu's method of the same name does this on the device."""
        W, nq, B = self.model.num_worlds, self.model.joint_coord_count, self.model.body_count
        joint_q = np.asarray(joint_q)
        if joint_q.shape != (W, nq) or joint_q.dtype != np.float64:
            raise ValueError(f"joint_q: expected a float64 array shaped {(W, nq)}, got {joint_q.dtype} {joint_q.shape}")
        if not isinstance(body_q, np.ndarray) or body_q.shape != (W, B, 7) or body_q.dtype != np.float64:
            raise ValueError(f"body_q: expected a float64 array shaped {(W, B, 7)}")
        body_q[...] = world_poses(self.model, joint_q)

    def diagnostics(self) -> dict:
        """Copies of the per-world diagnostics of the last step (the keys of sap_gpu's)."""
        return {"status": self.last_status.copy(), "newton_iterations": self.last_newton_iterations.copy(),
                "line_search_iterations": self.last_line_search_iterations.copy(),
                "truncated_contact_count": self.last_truncated_contact_count.copy(),
                "linear_solver_iterations": self.last_linear_solver_iterations.copy(),
                "linear_solver_residual": self.last_linear_solver_residual.copy()}

    def _step_world(self, w: int, x: boundary.SapInputs, contacts: SapContacts, dt: float) -> WorldResult:
        """Stages 1–4 for world w."""
        model, cfg = self.model, self.config
        q0, v0 = x.joint_q[w], x.v0[w]
        rejected = StepStatus(0) if x.quat_ok[w] else StepStatus.INVALID_QUATERNION
        if not x.finite[w]:
            rejected |= StepStatus.NON_FINITE
        if rejected:
            return WorldResult(None, None, None, None, None, None, None, None, None, v0, q0, rejected)
        body_q = forward_kinematics(model, q0)
        fm = free_motion(model, q0, v0, dt, precision=cfg.free_motion_solve_precision, joint_f=x.joint_f[w],
                         body_f=x.body_f[w], joint_act=x.joint_act[w], body_q=body_q,
                         pcr_settings=PcrSettings.from_config(cfg) if cfg.matrixfree_representation else None)
        if not cfg.use_f64_boundary_pose:  # the pose crossing into the contact stage is float32
            body_q = body_q.astype(np.float32).astype(np.float64)
        J_bodies = body_jacobians(model, q0, body_q, motion_subspaces(model, q0, body_q))
        geo = contact_geometry(model, contacts, w, body_q, J_bodies, cfg.contact_point_mode)
        J_dyn, vc_kin = split_kinematic(model, geo.J, v0)  # kinematic DOFs: known velocity, infinite mass
        if cfg.contact_weight_mode == "diag_delassus":
            weights = delassus_weights(J_dyn, np.diag(fm.A), cfg.sap_contact_weight_precision)
        else:
            weights = body_inertia_weights(model, geo, body_q, cfg.sap_contact_weight_precision)
        R, v_hat = contact_regularization(weights, geo.ke, geo.tau_d, geo.phi0, dt, cfg.contact_beta,
                                          cfg.contact_sigma, cfg.sap_contact_weight_precision)
        hc = None
        if cfg.discrete_contact_approximation != "sap":  # Hunt–Crossley: fₑ₀, n₀ (from vₙ₀ = (J v₀)ₙ), ε_s
            vn0 = geo.J[:, 2, :] @ v0 if len(geo.phi0) else np.zeros(0)
            hc = hunt_crossley_data(weights, geo.mu, geo.ke, geo.hcd, geo.phi0, vn0, dt, cfg.contact_sigma,
                                    cfg.stiction_tolerance, cfg.discrete_contact_approximation == "similar",
                                    cfg.sap_contact_weight_precision)
        limits = limit_constraints(model, q0, v0, fm.v_star, fm.A, dt, body_q, J_bodies)
        drives = drive_constraints(model, q0, fm.A, dt, x.joint_target_pos[w], x.joint_target_vel[w],
                                   x.joint_act[w])
        holonomic = holonomic_constraints(model, q0, fm.A, dt, body_q, J_bodies)
        problem = make_problem(model, fm.A, fm.v_star, J_dyn, R, v_hat - vc_kin, geo.mu, limits, drives,
                               cfg.contact_solve_precision, hc, holonomic)
        sol = solve(problem, v0[problem.dofs], cfg)
        v1 = fm.v_star.copy()
        v1[problem.dofs] = sol.v
        q1 = integrate_positions(model, q0, v0, v1, dt, cfg.position_integration)
        status = sol.status
        if not (np.all(np.isfinite(v1)) and np.all(np.isfinite(q1))):
            status |= StepStatus.NON_FINITE
        elif not joint_quaternions_ok(model, q1)[0]:  # e.g. sap_euler's drift carried |q| past QUAT_NORM_MAX
            status |= StepStatus.INVALID_QUATERNION
        return WorldResult(fm, geo, weights.astype(np.float64), R.astype(np.float64), v_hat.astype(np.float64),
                           limits, drives, problem, sol, v1, q1, status, body_q, hc, holonomic)

    def _forbid_rigid(self) -> None:
        """A Hunt–Crossley approximation reads the parameters: refuse a rigid stiffness (every world checked)."""
        if self.config.discrete_contact_approximation != "sap":
            self.parameters.forbid_rigid = True

    def _world_solver(self, w: int) -> tuple[SolverSAP, float]:
        """World ``w``'s one-world solver of ``parameters.world_model(w)`` and that model's
        ``time_step_bound``, rebuilt when the world's parameters were written since."""
        version = int(self.parameters.version[w])
        cached = self._world_solvers.get(w)
        if cached is None or cached[0] != version:
            solver = SolverSAP(self.parameters.world_model(w), **self._world_args)
            bound, solver.dt_bound = solver.dt_bound, math.inf  # the batch warns once, for every world
            cached = self._world_solvers[w] = (version, solver, bound)
        return cached[1], cached[2]

    def _step_parameters(self, state_in: SapState, state_out: SapState, control: SapControl,
                         contacts: SapContacts | None, dt: float) -> None:
        """:meth:`step` with per-world parameters: every input checked as the batch's, then each world
        stepped by its one-world solver on one-world copies, its rows written back."""
        model, cfg = self.model, self.config
        self._forbid_rigid()
        solvers = [self._world_solver(w) for w in range(model.num_worlds)]
        w_min = min(range(model.num_worlds), key=lambda w: solvers[w][1])
        check_time_step(solvers[w_min][0].model, dt, solvers[w_min][1], stacklevel=4)
        check_state(model, state_in, "state_in")
        check_control(model, control, "control")
        check_state(model, state_out, "state_out")
        if contacts is None:
            contacts = SapContacts.allocate(model.num_worlds, cfg.max_rigid_contact)
        self._check_contacts(contacts)
        obs, results = self.observables, []
        for w, (solver, _) in enumerate(solvers):
            one_in, one_c = world_slice(state_in, w), world_slice(contacts, w)
            one_out = one_in if state_out is state_in else world_slice(state_out, w)
            solver.step(one_in, one_out, world_slice(control, w), one_c, dt)
            write_world(state_out, one_out, w)
            for name in _DIAGNOSTICS:
                getattr(self, name)[w] = getattr(solver, name)[0]
            for f in dataclasses.fields(obs):
                getattr(obs, f.name)[w] = getattr(solver.observables, f.name)[0]
            results.append(solver.last_results[0])
        self.last_results = results
        self.world_statistics.add(self.last_status, self.last_newton_iterations, self.last_line_search_iterations)

    def _check_contacts(self, contacts: SapContacts) -> None:
        if not isinstance(contacts, SapContacts):
            raise ValueError(f"contacts: expected SapContacts or None, got {type(contacts).__name__}")
        check_contacts(self.model, contacts)
        check_contact_materials(contacts, self.config)
        if contacts.capacity != self.config.max_rigid_contact:
            raise ValueError(f"contacts: capacity {contacts.capacity} does not match the solver's "
                             f"max_rigid_contact {self.config.max_rigid_contact}")
        for w in range(self.model.num_worlds):
            n = int(contacts.count[w])
            for name, hi in (("shape0", self.model.shape_count), ("shape1", self.model.shape_count)):
                idx = getattr(contacts, name)[w, :n]
                if np.any((idx < 0) | (idx >= hi)):
                    raise ValueError(f"contacts.{name}[{w}]: shape indices must lie in [0, {hi})")
            for name in ("body0", "body1"):
                idx = getattr(contacts, name)[w, :n]
                if np.any((idx < -1) | (idx >= self.model.body_count)):
                    raise ValueError(f"contacts.{name}[{w}]: body indices must lie in [-1, {self.model.body_count})")


# ----------------------------------------------------------------------------- memory

# The Python objects of one world's step results (a WorldResult: a dozen dataclasses holding ~60
# small NumPy arrays, their headers and scalars) and the step's temporaries, beside the arrays'
# data that _step_bytes counts: 12.2–12.5 kB per world, fitted to the peak a step of 64 worlds of
# sphere_slide, arm_push_block and rope_box reaches under tracemalloc on CPython 3.11
# (tests/test_memory_estimate.py holds the estimate to the measured peak).
RESULT_OBJECT_BYTES = 12_000


def _step_bytes(model: SapModel, capacity: int) -> int:
    """Bytes a step of one world holds at its peak, at full contact capacity C: the last step's
    WorldResult and the new one (each: the Python objects, M and A of the free motion and the
    problem's A, nv² each; the contacts' J and the problem's, 3C·nv each), and the batch's
    converted inputs and outputs (SapInputs, q₁, v₁, the twists at q₀: about two states and a
    control), float64."""
    nv, nq, B, C = model.joint_dof_count, model.joint_coord_count, model.body_count, capacity
    result = RESULT_OBJECT_BYTES + 8 * (3 * nv * nv + 2 * 3 * C * nv)
    batch = 8 * (2 * (nq + nv + 19 * B) + 4 * nv)
    return 2 * result + batch


def _solver_memory(model: SapModel, cfg: SapConfig) -> MemoryEstimate:
    """``SolverSAP.memory_estimate`` for a configuration: the arrays of ``_allocate`` measured on 1
    and 2 worlds (``sap_common.state.probe_memory``) and a step's peak per world (:func:`_step_bytes`)."""
    C = cfg.max_rigid_contact

    def measure(W):
        probe = SolverSAP.__new__(SolverSAP)
        probe.model, probe.config = model, cfg
        probe._allocate(W)
        return host_nbytes(probe, skip=(SapModel,))

    return (probe_memory("solver", model, measure, key=("sap_ref", C))
            + MemoryEstimate.of("step", model.num_worlds, per_world=_step_bytes(model, C)))


def estimate_memory(model: SapModel, max_rigid_contact: int, contact_preset_variant: str = "approx32", device=None,
                    *, num_worlds: int | None = None, parameters: bool = False, pipeline: bool = True, states: int = 1,
                    control: bool = True, **overrides) -> MemoryEstimate:
    """sap_gpu's ``estimate_memory`` on the host: the ``solver`` and its ``step``
    (:meth:`SolverSAP.memory_estimate`), with ``pipeline`` the ``collision pipeline`` (its status per
    world) and its ``contacts``, ``states`` states, with ``control`` a control and with
    ``parameters`` a :class:`WorldParameters` (``parameters``), for ``num_worlds`` worlds (default
    the model's), without allocating them (docs/scaling.md § Memory)."""
    out = SolverSAP.memory_estimate(model, max_rigid_contact=max_rigid_contact,
                                    contact_preset_variant=contact_preset_variant, device=device, **overrides)
    if pipeline:
        out = out + CollisionPipeline.memory_estimate(model, max_rigid_contact, device=device)
    for _ in range(int(states)):
        out = out + state_memory(model)
    if control:
        out = out + control_memory(model)
    if parameters:
        out = out + parameters_memory(model)
    return out if num_worlds is None else out.worlds(check_num_worlds(num_worlds))


# The per-world diagnostics of the last step (arrays over worlds).
_DIAGNOSTICS = ("last_newton_iterations", "last_line_search_iterations", "last_truncated_contact_count",
                "last_status", "last_linear_solver_iterations", "last_linear_solver_residual")


def _describe(parameters, model) -> str:
    if not isinstance(parameters, WorldParameters):
        return type(parameters).__name__
    return "the WorldParameters of another model object" if parameters.model is not model else "WorldParameters"

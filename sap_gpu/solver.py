"""SolverSAP on the device: the sap_ref time step batched over num_worlds in Warp (docs/pipeline.md).

    solver = SolverSAP(model, max_rigid_contact=16, contact_preset_variant="drake", device="cuda:0")
    state, control = sap_gpu.state(model, device), sap_gpu.control(model, device)
    pipeline = sap_gpu.CollisionPipeline(model, 16, solver.config, device=device)
    contacts = pipeline.contacts()
    pipeline.collide(state, contacts)
    solver.step(state, state, control, contacts, dt)

Same constructor arguments, ``step()`` signature, diagnostics and errors as
:class:`sap_ref.solver.SolverSAP`, plus ``device``. Every buffer lives in the solver's
:class:`~sap_gpu.workspace.Workspace` (``solver.work``), allocated here; ``step()`` launches
kernels and copies into those buffers only (no allocation, no host synchronization inside the
Newton loop: ``wp.capture_while``), so ``collide`` + ``step`` can be captured in a CUDA graph.
Diagnostics (``last_status`` …) are device arrays; :meth:`diagnostics` copies them.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import warp as wp

from sap_common.collision_rules import check_contact_materials, check_hunt_crossley_materials
from sap_common.config import SapConfig
from sap_common.conventions import check_num_worlds
from sap_common.model import SapModel
from sap_common.rows import RowKind
from sap_common.state import (
    MemoryEstimate,
    SapContacts,
    SapControl,
    SapState,
    check_memory,
    control_memory,
    state_memory,
)
from sap_common.time_step import check_time_step, time_step_bound

from . import (
    boundary,
    constraints,
    contact_jacobian,
    dynamics,
    free_motion,
    holonomic,
    integration,
    kinematics,
    observables,
)
from .arrays import GpuModel, check_array, check_device_contacts, check_device_control, check_device_state
from .collision import CollisionPipeline
from .contact_solve import newton_kernels
from .contact_solve_fused import fused_newton_kernel, launch_fused
from .device import STAGING, device_nbytes, free_memory, get_device, probe_memory
from .launch import dry_run_open, launch_threads, loop_while
from .linear_solve import cholesky_solve
from .parameters import WorldParameters, check_parameters, parameters_memory
from .plan import NewtonPlan
from .workspace import Workspace

wp.set_module_options({"enable_backward": False})

__all__ = ["SolverSAP", "check_device_state", "check_device_control", "check_device_contacts", "estimate_memory"]


@wp.kernel
def _set_one(a: wp.array(dtype=int)):
    a[0] = 1


class SolverSAP:
    """Drake's SAP time step for every world of ``model``, in Warp (see the module docstring).

    Args:
        model: the model (at least one articulated DOF).
        max_rigid_contact: contact slots per world (the capacity of the contacts passed to step).
        contact_preset_variant: ``approx32`` (default), ``approx64`` or ``drake``.
        device: Warp device (default: Warp's default device).
        parameters: a :class:`~sap_gpu.parameters.WorldParameters` of ``model`` on ``device``: per-world
            masses, gains, limits, materials, gravity, read by every kernel of the step (None: the
            model's values in every world). World w then steps as the one-world model
            ``model.replace(num_worlds=1, **parameters.world_fields(w))`` does, bit for bit.
        **overrides: any :class:`~sap_common.config.SapConfig` knob. ``newton_path`` chooses how
            stage 3 runs: ``"fused"`` (default; one block of threads per world runs that world's
            whole Newton loop in one launch, :mod:`sap_gpu.contact_solve_fused`) or ``"staged"``
            (one thread per world per kernel, a ``wp.capture_while`` trip per Newton iteration
            of the batch, :mod:`sap_gpu.contact_solve`). Both solve the same problem with the
            same tests and report the same diagnostics; with ``contact_linear_solver="pcr"``
            the staged loop runs either way (PCR is not fused).

    After :meth:`step`: ``last_status``, ``last_newton_iterations``, ``last_line_search_iterations``
    and ``last_truncated_contact_count`` are device arrays over worlds (:meth:`diagnostics` gives
    NumPy copies). ``work`` holds every intermediate of the last step (A, v*, J, R, v̂, the
    Newton problem ``work.P`` …), documented in :mod:`sap_gpu.workspace`. ``plan`` is the
    :class:`~sap_gpu.plan.NewtonPlan` decided at construction: which Newton loop runs, its padded
    size, how H is formed and factored, the register cap. ``fused_max_registers`` is that cap
    (``SapConfig.fused_max_registers`` with ``"auto"`` resolved; ``None``: the compiler's choice,
    no fused kernel, or the CPU device, where a cap means nothing). ``fused_cholesky`` is the
    factorization a fused kernel of one tile takes (``SapConfig.fused_cholesky`` with ``"auto"``
    resolved for the device: ``lanes`` on a GPU, ``tile`` on the CPU device).
    """

    def __init__(self, model: SapModel, *, max_rigid_contact: int, contact_preset_variant: str = "approx32",
                 device=None, parameters: WorldParameters | None = None, **overrides):
        if not isinstance(model, SapModel):
            raise ValueError(f"model: expected a SapModel, got {type(model).__name__}")
        if model.joint_dof_count < 1:
            raise ValueError("model: SolverSAP needs at least one articulated DOF (joint_dof_count >= 1), got 0")
        self.model = model
        self.config = cfg = SapConfig.from_preset(contact_preset_variant, max_rigid_contact=max_rigid_contact,
                                                  **overrides)
        check_hunt_crossley_materials(model, cfg)
        self.device = get_device(device)
        if parameters is not None:  # a wrong argument is reported before the memory is
            check_parameters(parameters, model, self.device)
        # Which Newton loop runs, decided once (sap_gpu.plan). A dry run of record_launches
        # records what a GPU compiles (sap-precompile), so it plans for CUDA: on the CPU device a
        # register cap means nothing and is left out (a cap makes a kernel a module of its own).
        self.plan = plan = NewtonPlan.resolve(cfg, model.joint_dof_count, self.device.is_cuda or dry_run_open(),
                                                 bool(model.body_kinematic.any()))
        # Refused before anything is allocated when the buffers would not fit (docs/scaling.md § Memory).
        check_memory(_solver_memory(model, cfg, plan, self.device), lambda: free_memory(self.device),
                     "sap_gpu.SolverSAP", where=f"device {self.device}", capacity=cfg.max_rigid_contact)
        self._allocate(model, parameters)
        self.kernels = newton_kernels(plan)
        self.fused_kernel = fused_newton_kernel(plan) if plan.fused else None

    def _allocate(self, model: SapModel, parameters: WorldParameters | None, sizing: bool = False) -> None:
        """Every buffer of the solver (``self.config``, ``self.plan`` and ``self.device`` set).
        ``sizing``: a probe of the memory estimate (:func:`_solver_memory`), which launches nothing."""
        cfg, plan = self.config, self.plan
        self.m = GpuModel(model, self.device)
        # The per-world parameters every kernel reads (sap_gpu.parameters): the model's, shared by
        # every world, unless given. A Hunt–Crossley solver refuses rigid shapes in them too.
        self.parameters = self.m.params = check_parameters(parameters, model, self.device, shared=self.m.params)
        if cfg.discrete_contact_approximation != "sap" and parameters is not None:
            parameters.check_rigid()
        self.work = w = Workspace(model, self.m, cfg, plan, sizing=sizing)
        self.pose32 = not cfg.use_f64_boundary_pose  # the pose crossing into the contact stage is float32
        # diagnostics (device arrays, refreshed by step)
        self.last_status = w.N.status
        self.last_newton_iterations = w.N.iterations
        self.last_line_search_iterations = w.N.ls_iterations
        self.last_truncated_contact_count = wp.zeros(model.num_worlds, dtype=wp.int32, device=self.device)
        self.last_linear_solver_iterations = w.pcr_work.iterations if cfg.contact_linear_solver == "pcr" \
            else wp.zeros(model.num_worlds, dtype=wp.int32, device=self.device)
        self.last_linear_solver_residual = w.pcr_work.residual if cfg.contact_linear_solver == "pcr" \
            else wp.zeros(model.num_worlds, dtype=w.TL, device=self.device)
        # Profiling hook: when set, called with a stage name after each stage's launches
        # (``sap-benchmark --breakdown`` synchronizes there). None costs nothing and keeps
        # step() capturable.
        self.stage_hook = None
        # The Newton loop's J and A products run over each row's non-zero columns
        # (constraints.row_support); False lists every column: the plain dense path, which gives
        # the same sums term for term (tests/test_gpu_sparse_rows.py) and is kept for comparison.
        self.sparse_rows = True
        self.dt_bound = time_step_bound(model)  # [s]; longer steps warn (sap_common.time_step)
        # What reset() clears of the last step's diagnostics (the arrays above, and the warm start).
        D = observables.Diagnostics()
        D.status, D.newton_iterations, D.line_search_iterations = (self.last_status, self.last_newton_iterations,
                                                                   self.last_line_search_iterations)
        D.truncated, D.linear_iterations = self.last_truncated_contact_count, self.last_linear_solver_iterations
        res = self.last_linear_solver_residual
        D.residual32 = res if res.dtype == wp.float32 else w.residual32
        D.residual64 = res if res.dtype == wp.float64 else w.residual64
        D.v_init = w.v_init
        self._diag = D
        # The observables and statistics of the last step (device arrays; sap_gpu.observables).
        self.observables = w.obs
        self.world_statistics = w.stats

    @classmethod
    def memory_estimate(cls, model: SapModel, *, max_rigid_contact: int, contact_preset_variant: str = "approx32",
                        device=None, parameters: WorldParameters | None = None, **overrides) -> MemoryEstimate:
        """What this constructor's arguments would allocate, without allocating it: a
        :class:`~sap_common.state.MemoryEstimate` of the part ``solver`` (every buffer the solver
        keeps: the model on the device, the workspace, the diagnostics) and, on the CPU device,
        ``host staging`` (the initial state built on the host while the workspace is built). What
        the constructor checks against the device's free memory (docs/scaling.md § Memory).
        ``parameters`` are the caller's, already allocated, and not counted."""
        if not isinstance(model, SapModel):
            raise ValueError(f"model: expected a SapModel, got {type(model).__name__}")
        cfg = SapConfig.from_preset(contact_preset_variant, max_rigid_contact=max_rigid_contact, **overrides)
        d = get_device(device)
        return _solver_memory(model, cfg, NewtonPlan.resolve(cfg, model.joint_dof_count, d.is_cuda or dry_run_open(),
                                                   bool(model.body_kinematic.any())),
                              d)

    @property
    def fused_cholesky(self) -> str:
        """``SapConfig.fused_cholesky`` resolved for the device (``plan.cholesky``)."""
        return self.plan.cholesky

    @property
    def fused_max_registers(self) -> int | None:
        """The fused kernel's register cap on CUDA (``plan.max_registers``; None: none, or no fused kernel)."""
        return self.plan.max_registers

    @property
    def newton_path(self) -> str:
        """``config.newton_path``: ``"fused"`` or ``"staged"``."""
        return self.config.newton_path

    @property
    def fused(self) -> bool:
        """Whether stage 3 runs the fused loop (``newton_path="fused"`` with Cholesky)."""
        return self.work.fused

    def _stage(self, name: str) -> None:
        if self.stage_hook is not None:
            self.stage_hook(name)

    # ------------------------------------------------------------------ the time step

    def step(self, state_in: SapState, state_out: SapState, control: SapControl, contacts: SapContacts | None,
             dt: float) -> None:
        """Advance every world by ``dt`` (``state_out`` may be ``state_in``)."""
        m, cfg, w = self.m, self.config, self.work
        contacts = self._check_inputs(state_in, state_out, control, contacts, dt)
        h = float(dt)
        # 0. boundary in: every world checked (and the inputs the step keeps copied), velocities and
        #    forces in SAP order, poses
        boundary.check_inputs(m, state_in, control, w.N.status, w.N.done, w.q0, w.qd_in, w.body_q_in, w.body_qd_in,
                              w.joint_act, w.target_pos, w.target_vel)
        boundary.joint_arrays_to_sap(m, state_in, control, self.pose32, w.v0, w.joint_f)
        kinematics.forward_kinematics(m, w.q0, w.v0, w.body_X, w.body_V, w.dof_S)
        boundary.body_wrenches_to_sap(m, state_in, self.pose32, w.body_X, w.body_f)
        boundary.body_twists_to_public(m, w.body_X, w.body_V, w.obs.body_qd0)  # for body_acceleration
        self._stage("boundary_in")
        # 1. free motion: A = M + h·D, v*
        dynamics.mass_matrix(m, h, w.body_X, w.dof_S, w.Ic, w.A)
        if m.has_kinematic:  # a kinematic block of A is never used: the identity (any mass)
            dynamics.identity_kinematic_block(m, w.A)
        dynamics.generalized_forces(m, w.body_X, w.body_V, w.dof_S, w.v0, w.body_f, w.acc, w.wrench, w.tau)
        free_motion.free_motion_rhs(m, h, w.tau, w.v0, w.joint_f, w.joint_act, w.rhs)
        if m.has_kinematic:  # no force moves a kinematic DOF
            free_motion.zero_kinematic_rhs(m, w.rhs)
        free_motion.solve_free_motion(w.A, w.rhs, w.v0, w.v_star, w.all_worlds, w.fm_scratch,
                                      cfg.free_motion_solve_precision, cfg.matrixfree_representation)
        if m.has_kinematic:  # v* = v₀ there, the prescribed velocity
            free_motion.keep_kinematic_velocity(m, w.v0, w.v_star)
        self._stage("free_motion")
        # 2. contact Jacobians, weights and regularization
        body_X, dof_S = w.body_X, w.dof_S
        if self.pose32:
            kinematics.round_poses(w.body_X, w.body_Xc)
            kinematics.motion_subspaces(m, w.q0, w.body_Xc, w.dof_Sc)
            body_X, dof_S = w.body_Xc, w.dof_Sc
        contact_jacobian.contact_geometry(m, contacts, cfg.contact_point_mode == "contact_midpoint", body_X, dof_S,
                                          w.R_WC, w.p0, w.p1, w.contact_J, w.P.contact_count, w.contact_mu)
        if m.has_kinematic:  # J_kin v₀ is known: J keeps the dynamic columns only (infinite mass)
            contact_jacobian.split_kinematic(m, contacts, w.v0, w.contact_J, w.contact_vc_kin)
        contact_jacobian.contact_weights(m, contacts, cfg.contact_weight_mode == "diag_delassus",
                                         cfg.sap_contact_weight_precision, h, cfg.contact_beta, cfg.contact_sigma,
                                         w.A, body_X, w.R_WC, w.p0, w.p1, w.contact_J, w.contact_w, w.contact_R,
                                         w.contact_v_hat)
        if cfg.discrete_contact_approximation != "sap":  # Hunt–Crossley: fₑ₀, n₀ (from vₙ₀ = (J v₀)ₙ), ε_s
            constraints.hunt_crossley_data(m, contacts, cfg.sap_contact_weight_precision, h, cfg.contact_sigma,
                                                cfg.stiction_tolerance, w.contact_w, w.contact_J, w.v0, w.contact_hc,
                                                w.contact_vn0)
        self._stage("contact_jacobian")
        #    the scalar rows (limits, holonomic constraints, drives), the participating DOFs, non-zero columns
        self._constraint_rows(contacts, h, body_X, dof_S)
        self._stage("constraints")
        # 3. contact solve: Newton on ℓ(v)
        self._newton(h)
        # 4. integration
        integration.integrate_positions(m, w.q0, w.v0, w.v1, h, cfg.position_integration, w.q1)
        self._stage("integration")
        # 5. boundary out
        boundary.select_outputs(m, w.q0, w.v0, contacts.overflow, w.q1, w.v1, w.N.status, state_out,
                                self.last_truncated_contact_count)  # and q₁ (v₁ in SAP order) into state_out
        #    the contact observables, at the poses the contact stage used (before FK at q₁)
        observables.contact_observables(m, w.T, h, w.N.status, w.P.contact_count, w.P.gamma, w.R_WC, w.p0, w.p1,
                                        w.obs)
        observables.body_contact_wrenches(m, contacts, body_X, w.obs)
        if state_out.joint_qd_order == "public":
            boundary.joint_velocities_to_public(m, self.pose32, w.q1, w.v1, state_out.joint_qd)
        kinematics.forward_kinematics(m, w.q1, w.v1, state_out.body_q, w.body_V, w.dof_S)  # the poses at q₁
        boundary.body_twists_to_public(m, state_out.body_q, w.body_V, state_out.body_qd)
        boundary.keep_rejected_worlds(m, state_in, state_out, w.N.status, w.q0, w.qd_in, w.body_q_in, w.body_qd_in)
        #    observables: body accelerations over the step, the per-world statistics
        observables.accelerations_and_statistics(m, h, w.N.status, w.N.iterations, w.N.ls_iterations,
                                                 state_out.body_qd, w.obs, w.stats)
        self._stage("boundary_out")

    def _check_inputs(self, state_in, state_out, control, contacts, dt) -> SapContacts:
        """Every argument of :meth:`step` checked (``ValueError`` naming the field) before any kernel
        runs; returns the contacts to read (the workspace's empty ones for ``None``)."""
        check_time_step(self.model, dt, self.dt_bound, stacklevel=4)  # the warning points at step()'s caller
        check_device_state(self.m, state_in, "state_in")
        check_device_state(self.m, state_out, "state_out")
        check_device_control(self.m, control)
        if not isinstance(self.sparse_rows, (bool, np.bool_)):
            raise ValueError(f"sparse_rows: expected True (non-zero columns only) or False (dense), "
                             f"got {self.sparse_rows!r}")
        if contacts is None:
            contacts = self.work.empty_contacts
        check_device_contacts(self.m, contacts, self.config.max_rigid_contact)
        check_contact_materials(contacts, self.config)
        return contacts

    def _constraint_rows(self, contacts: SapContacts, h: float, body_X, dof_S) -> None:
        """Stage 2's scalar rows (limits, holonomic constraints, drives: :mod:`sap_common.rows`), the
        participation and every row's non-zero columns."""
        m, w, P = self.m, self.work, self.work.P
        rows = w.rows
        constraints.limit_constraints(m, rows, h, w.q0, w.v0, w.v_star, w.A, body_X, dof_S, w.row_active, w.row_J,
                                      w.row_R, w.row_v_hat)
        holonomic.holonomic_constraints(m, w.holonomic, rows.holonomic_row0, h, w.q0, w.A, body_X, dof_S,
                                        w.row_active, w.row_J, w.row_R, w.row_v_hat, w.holonomic_g0)
        constraints.drive_constraints(m, rows, h, w.q0, w.A, w.drive_q0, w.drive_Kp, w.drive_Kd, w.row_active, w.row_J)
        constraints.participation(m, rows.count, contacts, w.contact_J, w.row_active, w.row_J, w.tree_scratch, w.v0,
                                  w.v_star, w.dof_mask, w.v_init)
        constraints.row_support(m, rows.count, not self.sparse_rows, contacts, w.contact_J, w.row_active, w.row_J,
                                w.A, P.contact_cols, P.contact_ncols, P.row_cols, P.row_ncols, P.A_cols, P.A_ncols,
                                P.dof_contacts, P.dof_ncontacts, P.dof_rows, P.dof_nrows)

    def _newton(self, h: float) -> None:
        """Stage 3: the fused loop in one launch, or the staged loop under ``wp.capture_while``."""
        w, kk, d = self.work, self.kernels, self.device
        P, N = w.P, w.N
        W = self.m.num_worlds
        P.h = wp.float64(h)
        if w.fused:  # one launch: warm start, the loop of every world, v₁
            launch_fused(self.fused_kernel, P, N, 0, w.v_init, w.H, w.newton_rhs, w.newton_dv, w.newton_L, w.v1, d)
            self._stage("newton_fused")
            return
        wp.copy(P.v, w.v_init) if w.T == wp.float64 else _cast_into(w.v_init, P.v)
        N.iterations.zero_()
        N.ls_iterations.zero_()
        N.alpha_prev.zero_()
        S = w.pcr_work
        S.iterations.zero_()
        S.residual.zero_()
        pcr = self.config.contact_linear_solver == "pcr"
        launch_threads(_set_one, dim=1, device=d, inputs=[w.loop_condition])

        def body():
            N.count.zero_()
            launch_threads(kk.evaluate, dim=W, device=d, inputs=[P, N, S], outputs=[w.H, w.newton_rhs])
            self._stage("newton_evaluate")
            if pcr:
                launch_threads(kk.newton_pcr, dim=W, device=d, inputs=[P, N, S, w.newton_rhs], outputs=[w.newton_dv])
            else:
                cholesky_solve(w.H, w.newton_rhs, w.newton_dv, N.pending, w.newton_L, w.newton_failed)
            self._stage("linear_solve")
            launch_threads(kk.line_search, dim=W, device=d, inputs=[P, N, w.newton_dv, w.newton_failed])
            wp.copy(w.loop_condition, N.count)
            self._stage("line_search")

        loop_while(w.loop_condition, body)
        launch_threads(kk.finish, dim=W, device=d, inputs=[P], outputs=[w.v1])
        self._stage("newton_finish")

    # ------------------------------------------------------------------ helpers

    def body_poses(self, joint_q: wp.array, body_q: wp.array) -> None:
        """Fill ``body_q (num_worlds, B)`` of ``wp.transformd`` with every world's body poses at
        coordinates ``joint_q (num_worlds, nq)`` (forward kinematics; what :meth:`step` leaves in
        ``state_out.body_q``). For adapters that hold coordinates and need the poses for collision
        before a step; launches one kernel, allocates nothing."""
        m = self.m
        check_array("joint_q", joint_q, (m.num_worlds, m.nq), wp.float64, m.device)
        check_array("body_q", body_q, (m.num_worlds, m.body_count), wp.transformd, m.device)
        kinematics.body_poses(m, joint_q, body_q)

    def evaluate_at(self, v) -> dict:
        """ℓ, ∇ℓ, γ and H of the last step's problem at velocities ``v (W, nv)`` (SAP order).

        A teaching/debugging hook (and how the tests compare this stage with sap_ref): it
        reuses the last :meth:`step`'s A, v*, J, R, v̂ and rows, and leaves the step's results
        alone apart from the Newton scratch buffers. It runs the evaluation of the solver's
        Newton path (the fused kernel evaluates once and stops). Returns NumPy arrays:
        ``ell (W,)``, ``grad (W, nv)``, ``H (W, nv, nv)`` (symmetric, from the lower triangle the
        kernels form; None with PCR, which never forms it), ``H_diag (W, nv)``,
        ``contact_gamma (W, C, 3)`` (0 in unused slots), ``row_gamma (W, S)`` (every scalar row's, 0
        for a row not in use) and by kind ``limit_gamma (W, L)``, ``holonomic_gamma (W, E)`` (the
        holonomic constraints' rows), ``drive_gamma (W, D)``.
        """
        w, kk = self.work, self.kernels
        P, N = w.P, w.N
        W, nv, C = self.m.num_worlds, self.m.nv, self.config.max_rigid_contact
        rows = w.rows.host
        v = np.asarray(v, dtype=np.float64).reshape(W, nv)
        P.v.assign(v.astype(np.float32 if w.T == wp.float32 else np.float64))
        saved = (N.abs_tol, N.rel_tol, N.max_iterations)
        # A negative tolerance is never met: evaluate goes on to assemble H for every world.
        N.abs_tol, N.rel_tol, N.max_iterations = w.T(-1.0), w.T(-1.0), -1
        # Copies: on the CPU device .numpy() is a view of the array, which the zeroing below would
        # clear too, and the step's Newton counts would be restored as zeros.
        done, iterations, status = N.done.numpy().copy(), N.iterations.numpy().copy(), N.status.numpy().copy()
        N.done.zero_()
        N.iterations.zero_()
        try:
            if w.fused:
                launch_fused(self.fused_kernel, P, N, 1, w.v_init, w.H, w.newton_rhs, w.newton_dv, w.newton_L, w.v1,
                             self.device)
            else:
                launch_threads(kk.evaluate, dim=W, device=self.device, inputs=[P, N, w.pcr_work], outputs=[w.H,
                               w.newton_rhs])
            gamma = P.gamma.numpy().astype(np.float64)
            contact_gamma = gamma[:, :3 * C].reshape(W, C, 3)
            contact_gamma[np.arange(C)[None, :] >= P.contact_count.numpy()[:, None]] = 0.0  # unused slots
            pcr = self.config.contact_linear_solver == "pcr"
            H = None
            if not pcr:  # evaluate forms the lower triangle (all the Cholesky reads)
                H = np.tril(w.H.numpy()[:, :nv, :nv].astype(np.float64))
                H = H + np.tril(H, -1).transpose(0, 2, 1)
            out = dict(ell=N.ell.numpy().astype(np.float64), grad=P.grad.numpy().astype(np.float64), H=H,
                       H_diag=(w.pcr_work.diag.numpy().astype(np.float64) if pcr else
                               np.diagonal(H, axis1=1, axis2=2).copy()),
                       contact_gamma=contact_gamma, row_gamma=gamma[:, 3 * C:3 * C + rows.count])
            for name, kind in (("limit_gamma", RowKind.LIMIT), ("holonomic_gamma", RowKind.HOLONOMIC),
                               ("drive_gamma", RowKind.DRIVE)):
                r = rows.rows(kind)
                out[name] = out["row_gamma"][:, r.start:r.stop]
        finally:
            N.abs_tol, N.rel_tol, N.max_iterations = saved
            N.done.assign(done)
            N.iterations.assign(iterations)
            N.status.assign(status)
        return out

    # ------------------------------------------------------------------ reset, observables, statistics

    def reset(self, state: SapState | None = None, world_mask: wp.array | None = None) -> None:
        """Reset the worlds of ``world_mask``: their solver state, and their state if given.

        Args:
            state: a device state of this solver's model (any velocity order), or None. Its masked
                worlds get the model's initial state (``SapModel.state()``: ``joint_q_init``,
                ``joint_qd_init`` in the state's order, the body poses and twists of forward
                kinematics, ``body_f`` zero); the other worlds are not touched. Pass None to
                write the new states yourself (domain randomization).
            world_mask: a device array ``(num_worlds,)`` of ``wp.bool`` or ``wp.int32`` (nonzero =
                reset) on the solver's device, or None for every world.

        In the masked worlds this clears the last step's diagnostics (``last_status``, iterations,
        truncated contacts, the linear solver's counters), the Newton warm start buffer, the
        observables (:attr:`observables`: no contact, zero wrenches and accelerations) and the
        statistics (:attr:`world_statistics`: counters from zero, ``failed`` 0), then recounts
        ``any_failed``. SAP warm-starts every step from the state's own velocities and carries no
        iterate from one step to the next, so a reset world's next step is the step a new solver
        would take from the same state, bit for bit, and the other worlds step exactly as they
        would have without the reset (tests/test_scale_reset.py).

        Launches only (two kernels and a memset): no allocation, no host synchronization, no
        compilation after the first call; inside a captured CUDA graph the replay reads whatever
        the mask array holds then. Bad arguments raise ``ValueError`` before any launch.
        """
        m = self.m
        if world_mask is None:
            mask = self.work.all_worlds
        else:
            if not isinstance(world_mask, wp.array):
                raise ValueError(f"world_mask: expected a wp.array of wp.bool or wp.int32 shaped ({m.num_worlds},) "
                                 f"or None, got {type(world_mask).__name__}")
            if world_mask.dtype not in (wp.bool, wp.int32):
                raise ValueError(f"world_mask: expected dtype wp.bool or wp.int32, got "
                                 f"{wp.types.type_repr(world_mask.dtype)}")
            check_array("world_mask", world_mask, (m.num_worlds,), world_mask.dtype, m.device)
            mask = world_mask
        if state is not None:
            check_device_state(m, state, "state")
        w = self.work
        observables.reset_worlds(m, mask, self._diag, w.obs, w.stats, w.initial, state)
        observables.recount_failures(m, w.stats)

    def read_observables(self) -> dict:
        """NumPy copies of :attr:`observables` (the keys of ``sap_gpu.observables.OBSERVABLE_NAMES``;
        vec3d arrays as (…, 3), ``body_acceleration`` as (W, B, 6)): one host copy per array."""
        return {name: getattr(self.observables, name).numpy().copy() for name in observables.OBSERVABLE_NAMES}

    def statistics(self) -> dict:
        """NumPy copies of the per-world statistics since each world's last reset
        (``sap_gpu.observables.STATISTIC_NAMES``) and ``any_failed`` (a bool)."""
        out = {name: getattr(self.world_statistics, name).numpy().copy() for name in observables.STATISTIC_NAMES}
        out["any_failed"] = bool(self.world_statistics.any_failed.numpy()[0])
        return out

    def diagnostics(self) -> dict:
        """NumPy copies of the per-world diagnostics of the last step."""
        return {"status": self.last_status.numpy().copy(),
                "newton_iterations": self.last_newton_iterations.numpy().copy(),
                "line_search_iterations": self.last_line_search_iterations.numpy().copy(),
                "truncated_contact_count": self.last_truncated_contact_count.numpy().copy(),
                "linear_solver_iterations": self.last_linear_solver_iterations.numpy().copy(),
                "linear_solver_residual": self.last_linear_solver_residual.numpy().astype(np.float64)}


# ----------------------------------------------------------------------------- memory


def _solver_memory(model: SapModel, cfg: SapConfig, plan: NewtonPlan, device) -> MemoryEstimate:
    """``SolverSAP.memory_estimate`` for a resolved configuration and plan: the solver's buffers
    measured on 1 and 2 worlds (``sap_gpu.device.probe_memory``: the constructor's own allocation,
    in its sizing mode), plus on the CPU device the host staging of the workspace's initial state
    (``model.state()`` and its joint_qd in SAP order)."""

    def measure(model_w, probe_device):
        probe = SolverSAP.__new__(SolverSAP)
        probe.model, probe.config, probe.plan, probe.device = model_w, cfg, plan, probe_device
        probe._allocate(model_w, None, sizing=True)
        return device_nbytes(probe)

    out = probe_memory("solver", model, measure, key=(cfg, plan))
    if device.is_cpu:
        nv = model.joint_dof_count
        staging = state_memory(model, name=STAGING)
        out = out + MemoryEstimate(model.num_worlds, tuple(
            dataclasses.replace(p, per_world=p.per_world + 8 * nv) for p in staging.parts))
    return out


def estimate_memory(model: SapModel, max_rigid_contact: int, contact_preset_variant: str = "approx32", device=None,
                    *, num_worlds: int | None = None, parameters: bool = False, pipeline: bool = True, states: int = 1,
                    control: bool = True, **overrides) -> MemoryEstimate:
    """The device memory of a batch of ``model`` (``num_worlds`` worlds, default the model's) on
    ``device``, estimated without allocating it: a :class:`~sap_common.state.MemoryEstimate` whose
    parts are the ``solver`` (:meth:`SolverSAP.memory_estimate`, with ``host staging`` on the CPU
    device), with ``pipeline`` the ``collision pipeline`` and its ``contacts``
    (:meth:`CollisionPipeline.memory_estimate`), ``states`` device states (``state``), with
    ``control`` a device control, and with ``parameters`` a :class:`WorldParameters`
    (``parameters``). Compare ``.nbytes`` with the device's free memory before building a large
    batch; each constructor checks its own part (docs/scaling.md § Memory).
    """
    d = get_device(device)
    out = SolverSAP.memory_estimate(model, max_rigid_contact=max_rigid_contact,
                                    contact_preset_variant=contact_preset_variant, device=d, **overrides)
    if pipeline:
        out = out + CollisionPipeline.memory_estimate(model, max_rigid_contact, device=d,
                                                      parameters=True if parameters else None)
    for _ in range(int(states)):
        out = out + state_memory(model)
    if control:
        out = out + control_memory(model)
    if parameters:
        out = out + parameters_memory(model)
    return out if num_worlds is None else out.worlds(check_num_worlds(num_worlds))


@wp.kernel
def _cast_f64_f32(src: wp.array2d(dtype=wp.float64), dst: wp.array2d(dtype=wp.float32)):
    w, i = wp.tid()
    dst[w, i] = wp.float32(src[w, i])


def _cast_into(src, dst) -> None:
    launch_threads(_cast_f64_f32, dim=src.shape, device=src.device, inputs=[src], outputs=[dst])

"""Every device buffer of one solver's time step, allocated once, stage by stage.

:class:`Workspace` is to :class:`sap_gpu.solver.SolverSAP` what MuJoCo Warp's ``Data`` is to its
``step``: the solver builds one at construction and ``step()`` only launches kernels that read
and write it, so a step allocates nothing and can be captured in a CUDA graph. The buffers are
built in the order of the time step, one method per stage, and every one is documented there
with its shape, unit and meaning. Per-world arrays have a leading ``num_worlds`` axis W; B is
the body count, nq/nv the coordinate and DOF counts, C the contact capacity, S the scalar rows
(L limit rows, E holonomic constraint rows, D drives: :mod:`sap_common.rows`); a stage with
none of something still gets a 1-entry array, so kernel signatures never change. Velocities
and forces are in SAP order (docs/conventions.md).
"""

from __future__ import annotations

import numpy as np
import warp as wp

from sap_common.config import SapConfig
from sap_common.conventions import joint_qd_public_to_sap
from sap_common.model import SapModel

from . import blocked_cholesky, constraints, holonomic
from .arrays import GpuModel
from .arrays import contacts as make_contacts
from .constraints import HC_DATA
from .contact_problem import ROW_START, check_rolled_arrays, problem_types
from .contact_solve_fused import SLAB_ROWS
from .launch import launch_threads
from .line_search import line_search_settings
from .linear_solve import allocate_pcr_work
from .observables import InitialState, StepObservables, WorldStatistics
from .plan import FUSED_TILE, NewtonPlan

wp.set_module_options({"enable_backward": False})

__all__ = ["Workspace"]


# The identity on H's padding, one kernel per scalar type. Not a generic kernel (dtype=Any): a
# generic kernel's overloads are made at its first launch, which a dry run of
# sap_gpu.launch.record_launches skips, so sap-precompile could not compile them ahead of time.
@wp.kernel
def _identity_padding_f64(nv: int, H: wp.array3d(dtype=wp.float64)):
    """H[w, i, i] = 1 for i ≥ nv: the padded system solves the unpadded one (blocked_cholesky)."""
    world, i = wp.tid()
    if i >= nv:
        H[world, i, i] = wp.float64(1.0)


@wp.kernel
def _identity_padding_f32(nv: int, H: wp.array3d(dtype=wp.float32)):
    """H[w, i, i] = 1 for i ≥ nv, in float32."""
    world, i = wp.tid()
    if i >= nv:
        H[world, i, i] = wp.float32(1.0)


class Workspace:
    """The buffers of every stage of :meth:`SolverSAP.step <sap_gpu.solver.SolverSAP.step>` for
    ``model`` under ``config`` on ``m.device`` (see the module docstring for the notation).

    Besides the buffers it holds what sizes them: ``n_pad`` (the free-motion system's padded
    size), ``rows`` (:class:`~sap_gpu.constraints.RowLayout`, the scalar rows), ``holonomic``
    (:class:`~sap_gpu.holonomic.HolonomicLayout`), ``plan`` (the
    :class:`~sap_gpu.plan.NewtonPlan` stage 3 runs), ``fused`` (``plan.fused``) and ``T``/``TL``
    (the Warp scalars of the objective and of the Newton linear solve). ``sizing=True`` builds every
    buffer and launches nothing: how ``SolverSAP``'s memory estimate measures a small batch
    (docs/scaling.md § Memory); such a workspace is not stepped.
    """

    def __init__(self, model: SapModel, m: GpuModel, config: SapConfig, plan: NewtonPlan, sizing: bool = False):
        self.device = m.device
        self.plan = plan
        self.sizing = sizing  # a probe of SolverSAP's memory estimate: every buffer, no launch
        self._boundary(m)
        self._free_motion(m, config)
        self._contact_jacobian(m, config)
        self._constraints(model, m)
        self._newton(m, config)
        self._observables(model, m, config)

    def _zeros(self, shape, dtype=wp.float64):
        return wp.zeros(shape, dtype=dtype, device=self.device)

    def _boundary(self, m: GpuModel) -> None:
        """Stages 0 and 5 (and the kinematics both share).

        q0: q₀, (W, nq).  v0: v₀ [m/s, rad/s], (W, nv).  joint_f: generalized forces [N, N·m],
        (W, nv).  joint_act, target_pos, target_vel: the control's actuation and drive targets,
        (W, nv).  body_f: body wrenches [τ_O; f] at the origins, world [N·m, N], (W, B).
        body_X: body poses at q₀, (W, B) transforms (the poses at q₁ go straight into the output
        state's body_q).  body_V: body twists [ω; v_O], (W, B).
        dof_S: each DOF's motion subspace (the child's twist per unit rate), (W, nv).
        qd_in, body_q_in, body_qd_in: state_in's velocities and body state, kept for the worlds
        a step leaves unchanged (state_out may be state_in); q0, these and the control's arrays
        are stored by the input check (``boundary.check_inputs``), not copied.  q1: q₁, (W, nq).  v1: v₁, (W, nv).
        """
        z, W, B, nq, nv = self._zeros, m.num_worlds, m.body_count, m.nq, m.nv
        self.q0, self.v0, self.joint_f, self.joint_act = z((W, nq)), z((W, nv)), z((W, nv)), z((W, nv))
        self.target_pos, self.target_vel = z((W, nv)), z((W, nv))
        self.body_f = z((W, B), wp.spatial_vectord)
        self.body_X, self.body_V = z((W, B), wp.transformd), z((W, B), wp.spatial_vectord)
        self.dof_S = z((W, nv), wp.spatial_vectord)
        self.qd_in, self.body_q_in, self.body_qd_in = z((W, nv)), z((W, B), wp.transformd), z((W, B),
                                                                                             wp.spatial_vectord)
        self.q1, self.v1 = z((W, nq)), z((W, nv))

    def _free_motion(self, m: GpuModel, config: SapConfig) -> None:
        """Stage 1: A = M + h·D (+ armature) and v*.

        Ic: composite spatial inertias, (W, B).  acc, wrench: the bias-force recursion's body
        accelerations and wrenches, (W, B).  tau: bias and applied generalized forces, (W, nv).
        A: (W, n_pad, n_pad) [kg, kg·m²], padded with the identity.  rhs: h·k, (W, n_pad, 1).
        v_star: v* [m/s, rad/s], (W, nv).  fm_scratch: the free-motion solve's scratch (a
        float32 copy of A and its factor for fp32, PCR work with ``matrixfree_representation``).
        all_worlds: 1 per world (every world solves its free motion).
        """
        z, W, B, nv = self._zeros, m.num_worlds, m.body_count, m.nv
        self.n_pad = n = blocked_cholesky.padded_size(nv)
        self.Ic = z((W, B), wp.spatial_matrixd)
        self.acc, self.wrench = z((W, B), wp.spatial_vectord), z((W, B), wp.spatial_vectord)
        self.tau, self.v_star = z((W, nv)), z((W, nv))
        self.A, self.rhs = z((W, n, n)), z((W, n, 1))
        fm32 = config.free_motion_solve_precision == "fp32"
        self.fm_scratch = {"dv64": z((W, n, 1))}
        if fm32:
            self.fm_scratch.update(A32=z((W, n, n), wp.float32), rhs32=z((W, n, 1), wp.float32),
                                   dv32=z((W, n, 1), wp.float32))
        if config.matrixfree_representation:  # PCR on A·p: no factor storage
            self.fm_scratch["pcr"] = allocate_pcr_work(wp.float32 if fm32 else wp.float64, W, nv, config,
                                                       self.device)
        elif fm32:
            self.fm_scratch["L32"] = z((W, n, n), wp.float32)
        else:
            self.fm_scratch["L64"] = z((W, n, n))
        self.all_worlds = wp.array(np.ones(W, np.int32), dtype=int, device=self.device)

    def _contact_jacobian(self, m: GpuModel, config: SapConfig) -> None:
        """Stage 2, contacts: frames, points, Jacobians, weights and regularization.

        body_Xc, dof_Sc: the poses and subspaces the contact stage reads when the boundary pose
        is rounded through float32 (``use_f64_boundary_pose=False``), (W, B) and (W, nv).
        R_WC: contact frames (columns t₁, t₂, n̂ in world), (W, C).  p0, p1: the points where the
        bodies' velocities are taken [m], (W, C).  contact_J: J, 3 rows per contact (t₁, t₂, n),
        (W, 3C, nv).  contact_w: weights w [1/kg], (W, C).  contact_R: R per row [s/kg], (W, C).
        contact_v_hat: v̂ₙ [m/s], (W, C).  contact_mu: μ, (W, C).  contact_hc: the Hunt–Crossley
        data (k [N/m], d [s/m], fₑ₀ [N], n₀ [N·s], ε_s [m/s]) of each contact under ``lagged`` /
        ``similar``, (W, C) (a 1-entry stand-in under ``sap``).  contact_vn0: the contacts' normal
        velocity at v₀ [m/s], (W, C) (Hunt–Crossley only, likewise).  contact_vc_kin: the contacts'
        known velocity of the kinematic DOFs J_kin v₀ [m/s] (t₁, t₂, n), (W, C) (a 1-entry stand-in
        without kinematic bodies; docs/formulation.md § Kinematic bodies).  empty_contacts: what
        ``step(contacts=None)`` reads (no contact).
        """
        z, W, B, nv, C = self._zeros, m.num_worlds, m.body_count, m.nv, config.max_rigid_contact
        self.body_Xc, self.dof_Sc = z((W, B), wp.transformd), z((W, nv), wp.spatial_vectord)
        self.R_WC, self.p0, self.p1 = z((W, C), wp.mat33d), z((W, C), wp.vec3d), z((W, C), wp.vec3d)
        self.contact_J = z((W, 3 * C, nv))
        self.contact_w, self.contact_R, self.contact_v_hat = z((W, C)), z((W, C), wp.vec3d), z((W, C))
        self.contact_mu = z((W, C))
        hc = config.discrete_contact_approximation != "sap"
        self.contact_hc = z((W, C) if hc else (1, 1), HC_DATA)
        self.contact_vn0 = z((W, C) if hc else (1, 1))
        self.contact_vc_kin = z((W, C) if m.has_kinematic else (1, 1), wp.vec3d)
        self.empty_contacts = make_contacts(W, C, self.device)

    def _constraints(self, model: SapModel, m: GpuModel) -> None:
        """Stage 2, the scalar rows (limits, holonomic constraints, drives) and who takes part in
        the solve.

        row_active: 1 where a scalar row is in use this step (a limit row inside its window;
        every holonomic and drive row), (W, S).  row_J, row_R [s·…], row_v_hat: the rows' J
        (W, S, nv), R and v̂ (W, S) (R and v̂ of the limit and holonomic rows). The rows of each
        kind are ``rows`` (:class:`~sap_gpu.constraints.RowLayout`); the holonomic constraints'
        g₀ is in ``holonomic_g0 (W, E)`` (docs/formulation.md § Holonomic constraints).
        drive_q0, drive_Kp, drive_Kd: each drive's q₀ and near-rigid gains, (W, D).
        dof_mask: 1 for a DOF that takes part in the Newton solve (its tree has a row), (W, nv).
        tree_scratch: per tree, (W, trees).  v_init: the Newton warm start, (W, nv).
        """
        z, W, nv = self._zeros, m.num_worlds, m.nv
        self.rows = constraints.row_layout(model, self.device)
        self.holonomic = holonomic.holonomic_layout(model, self.device)
        S = max(self.rows.count, 1)
        self.holonomic_g0 = z((W, max(self.holonomic.rows, 1)))
        self.row_active, self.row_J = z((W, S), wp.int32), z((W, S, nv))
        self.row_R, self.row_v_hat = z((W, S)), z((W, S))
        D = max(self.rows.drive_count, 1)
        self.drive_q0, self.drive_Kp, self.drive_Kd = z((W, D)), z((W, D)), z((W, D))
        self.dof_mask, self.tree_scratch = z((W, nv), wp.int32), z((W, max(model.tree_count, 1)), wp.int32)
        self.v_init = z((W, nv))

    def _newton(self, m: GpuModel, config: SapConfig) -> None:
        """Stage 3: the Problem and Newton structs (:mod:`sap_gpu.contact_problem`) and the linear
        solve's buffers.

        P: the step's problem (views of the stage 1–2 buffers above, the non-zero column lists
        and the Newton iterate v, Δv, ∇ℓ, γ, G in T).  N: per-world iteration state (ℓ,
        iterations, status, done) and the settings.  H: (W, ns, ns) in TL, lower triangle,
        padding the identity (a 1-entry stand-in with PCR).  newton_rhs, newton_dv: −∇ℓ and Δv,
        (W, ns, 1) (with ``fused_hessian="tiles"`` Δv stays in shared memory and newton_dv is not
        written).  newton_L: the blocked factorization's scratch, or with ``fused_hessian="tiles"``
        the tile assembly's scratch, (W, 32, 32): A's columns, then each slab's J rows (0–15) and
        G J (16–31), then the factor check's copy of H's diagonal.  newton_failed: 1 where the
        last factorization met a failed pivot, (W,).  pcr_work: PCR's work struct (a stand-in
        with Cholesky).  loop_condition: the staged loop's count of pending worlds, (1,).
        ns is the plan's padded size (``plan.size``).
        """
        z, W, nv, C = self._zeros, m.num_worlds, m.nv, config.max_rigid_contact
        S = self.rows.count
        plan = self.plan
        T, TL = plan.T, plan.TL
        self.T, self.TL = T, TL
        Problem, Newton = problem_types(T)
        rows = max(3 * C + S, 1)
        P = Problem()
        P.nv, P.n_pad, P.h = nv, self.n_pad, wp.float64(0.0)
        P.A, P.v_star, P.dof_mask = self.A, self.v_star, self.dof_mask
        P.contact_J, P.contact_R, P.contact_v_hat, P.contact_mu = (self.contact_J, self.contact_R, self.contact_v_hat,
                                                                   self.contact_mu)
        P.contact_hc = self.contact_hc
        P.contact_vc_kin = self.contact_vc_kin
        P.row_start = ROW_START(*self.rows.start)
        P.row_active, P.row_J = self.row_active, self.row_J
        P.row_R, P.row_v_hat = self.row_R, self.row_v_hat
        P.drive_dof, P.drive_q0 = self.rows.drive_dof, self.drive_q0
        P.drive_Kp, P.drive_Kd = self.drive_Kp, self.drive_Kd
        P.q_target, P.v_target, P.u0, P.effort = self.target_pos, self.target_vel, self.joint_act, \
            m.params.array("joint_effort_limit")
        P.v, P.dv, P.grad = z((W, nv), T), z((W, nv), T), z((W, nv), T)
        P.vc, P.dvc, P.dp, P.line = z((W, rows), T), z((W, rows), T), z((W, nv), T), z((W, 3), T)
        P.gamma = z((W, rows), T)
        P.contact_G = z((W, max(C, 1)), wp.types.matrix((3, 3), T))
        P.row_G = z((W, max(S, 1)), T)
        P.contact_count = z(W, wp.int32)
        P.contact_cols, P.contact_ncols = z((W, C, nv), wp.int32), z((W, C), wp.int32)
        P.row_cols, P.row_ncols = z((W, max(S, 1), nv), wp.int32), z((W, max(S, 1)), wp.int32)
        P.A_cols, P.A_ncols = z((W, nv, nv), wp.int32), z((W, nv), wp.int32)
        P.dof_contacts, P.dof_ncontacts = z((W, nv, max(C, 1)), wp.int32), z((W, nv), wp.int32)
        P.dof_rows, P.dof_nrows = z((W, nv, max(S, 1)), wp.int32), z((W, nv), wp.int32)
        self.P = P
        N = Newton()
        N.ell, N.ell_prev, N.alpha_prev = z(W, T), z(W, T), z(W, T)
        N.residual, N.scale = z(W, T), z(W, T)
        N.iterations, N.ls_iterations = z(W, wp.int32), z(W, wp.int32)
        N.done, N.pending, N.status, N.count = z(W, wp.int32), z(W, wp.int32), z(W, wp.int32), z(1, wp.int32)
        newton, ls = config.newton, config.line_search
        N.max_iterations = newton.max_iterations
        N.abs_tol, N.rel_tol = T(newton.optimality_abs_tol), T(newton.optimality_rel_tol)
        N.cost_abs, N.cost_rel = T(newton.cost_abs_tol), T(newton.cost_rel_tol)
        search = line_search_settings(T)()
        search.max_iterations, search.rho, search.armijo_c = ls.max_iterations, T(ls.rho), T(ls.armijo_c)
        search.slop, search.cost_abs, search.cost_rel = T(ls.relative_slop), N.cost_abs, N.cost_rel
        N.line_search = search
        self.N = N
        pcr = plan.linear_solver == "pcr"
        self.fused = plan.fused
        ns = plan.size
        self.newton_rhs, self.newton_dv = z((W, ns, 1), TL), z((W, ns, 1), TL)
        # PCR never forms H: 1-entry stand-ins keep the kernel signature; Cholesky's PCR work
        # struct is a stand-in too (its arrays are never read).
        self.H = z((1, 1, 1), TL) if pcr else z((W, ns, ns), TL)
        if not pcr and not self.sizing:  # the padding of H: the identity, written once (evaluate writes rows < nv)
            padding = _identity_padding_f64 if TL == wp.float64 else _identity_padding_f32
            launch_threads(padding, dim=(W, ns), device=self.device, inputs=[nv], outputs=[self.H])
        if not pcr and ns > blocked_cholesky.TILE:
            self.newton_L = z((W, ns, ns), TL)
        elif plan.hessian == "tiles":  # a slab of J and of GJ
            self.newton_L = z((W, max(FUSED_TILE, 2 * SLAB_ROWS), FUSED_TILE), TL)
        else:
            self.newton_L = z((1, 1, 1), TL)
        check_rolled_arrays(P, self.H)
        self.newton_failed = z(W, wp.int32)
        self.pcr_work = allocate_pcr_work(TL, W, nv, config, self.device, C, S) if pcr \
            else allocate_pcr_work(TL, 1, 1, config, self.device)
        self.loop_condition = z(1, wp.int32)

    def _observables(self, model: SapModel, m: GpuModel, config: SapConfig) -> None:
        """After the step (and for ``SolverSAP.reset``): observables, statistics, the initial state.

        obs: :class:`~sap_gpu.observables.StepObservables`: contact_count (W,); contact_impulse
        [N·s], contact_force [N], contact_point0/1 [m], contact_normal, world frame, (W, C);
        body_contact_force [N], body_contact_torque [N·m] about the body origin, (W, B);
        body_qd0 (public twists at the step's start) and body_acceleration [m/s², rad/s²], (W, B).
        stats: :class:`~sap_gpu.observables.WorldStatistics`: per-world counters since the
        world's last reset, (W,), and any_failed (1,).  initial: the model's initial state
        (:class:`~sap_gpu.observables.InitialState`; joint_qd in both orders).  residual32 /
        residual64: one-entry stand-ins for the linear-solver residual of the other precision.
        """
        z, W, B, C = self._zeros, m.num_worlds, m.body_count, max(config.max_rigid_contact, 1)
        O = StepObservables()
        O.contact_count = z(W, wp.int32)
        O.contact_impulse, O.contact_force = z((W, C), wp.vec3d), z((W, C), wp.vec3d)
        O.contact_point0, O.contact_point1, O.contact_normal = z((W, C), wp.vec3d), z((W, C), wp.vec3d), z(
            (W, C), wp.vec3d)
        O.body_contact_force, O.body_contact_torque = z((W, B), wp.vec3d), z((W, B), wp.vec3d)
        O.body_qd0, O.body_acceleration = z((W, B), wp.spatial_vectord), z((W, B), wp.spatial_vectord)
        self.obs = O
        S = WorldStatistics()
        S.steps, S.newton_iterations, S.line_search_iterations = z(W, wp.int64), z(W, wp.int64), z(W, wp.int64)
        S.status_union, S.failed_steps, S.failed = z(W, wp.int32), z(W, wp.int64), z(W, wp.int32)
        S.any_failed = z(1, wp.int32)
        self.stats = S
        host = model.state()
        I = InitialState()
        arr = lambda a, dtype: wp.array(np.ascontiguousarray(a), dtype=dtype, device=self.device)  # noqa: E731
        I.joint_q = arr(host.joint_q, wp.float64)
        I.joint_qd_public = arr(host.joint_qd, wp.float64)
        I.joint_qd_sap = arr(joint_qd_public_to_sap(model, host.joint_q, host.joint_qd), wp.float64)
        I.body_q = arr(host.body_q, wp.transformd)
        I.body_qd = arr(host.body_qd, wp.spatial_vectord)
        self.initial = I
        self.residual32, self.residual64 = z(1, wp.float32), z(1, wp.float64)

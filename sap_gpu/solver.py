"""SolverSAP on the device: the sap_ref time step batched over num_worlds in Warp (docs/pipeline.md).

    solver = SolverSAP(model, max_rigid_contact=16, contact_preset_variant="drake", device="cuda:0")
    state, control = sap_gpu.state(model, device), sap_gpu.control(model, device)
    pipeline = sap_gpu.CollisionPipeline(model, 16, device=device)
    contacts = pipeline.contacts()
    pipeline.collide(state, contacts)
    solver.step(state, state, control, contacts, dt)

Same constructor arguments, ``step()`` signature, diagnostics and errors as
:class:`sap_ref.solver.SolverSAP`, plus ``device``. Every buffer is allocated here; ``step()``
launches kernels and copies into its own buffers only (no allocation, no host synchronization
inside the Newton loop: ``wp.capture_while``), so ``collide`` + ``step`` can be captured in a
CUDA graph. Diagnostics (``last_status`` …) are device arrays; :meth:`diagnostics` copies them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import warp as wp

from sap_common.constants import DEFAULT_NEWTON_PATH, NEWTON_PATHS
from sap_common.conventions import check_order
from sap_common.config import SapConfig
from sap_common.model import SapModel
from sap_common.state import SapContacts, SapControl, SapState, StepStatus
from sap_common.time_step import check_time_step, time_step_bound

from . import blocked_cholesky, boundary, constraints, contact_jacobian, dynamics, free_motion, integration, kinematics
from .arrays import GpuModel
from .arrays import contacts as make_contacts
from .contact_solve import newton_kernels
from .device import get_device
from .fused_newton import fused_newton_kernel, fused_size
from .launch import TILE_BLOCK_DIM, world_block_dim
from .linear_solve import allocate_pcr_work, cholesky_solve

wp.set_module_options({"enable_backward": False})

__all__ = ["SolverSAP", "NEWTON_PATHS", "DEFAULT_NEWTON_PATH", "check_device_state", "check_device_control",
           "check_device_contacts"]

# The two implementations of stage 3 (SolverSAP's newton_path), defined in sap_common.constants.

NON_FINITE = wp.constant(int(StepStatus.NON_FINITE))
INVALID_QUATERNION = wp.constant(int(StepStatus.INVALID_QUATERNION))
REJECTED = wp.constant(int(StepStatus.NON_FINITE | StepStatus.INVALID_QUATERNION))  # worlds left unchanged
CONTACT_OVERFLOW = wp.constant(int(StepStatus.CONTACT_OVERFLOW))


def _check(name, a, shape, dtype, device):
    if not isinstance(a, wp.array):
        raise ValueError(f"{name}: expected a wp.array (use sap_gpu.to_device), got {type(a).__name__}")
    if tuple(a.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {tuple(a.shape)}")
    if a.dtype != dtype:
        raise ValueError(f"{name}: expected dtype {wp.types.type_repr(dtype)}, got {wp.types.type_repr(a.dtype)}")
    if a.device != device:
        raise ValueError(f"{name}: on device {a.device}, but the solver runs on {device}")


def check_device_state(m: GpuModel, state: SapState, name: str = "state") -> None:
    """``ValueError`` naming the field if a device state does not match the model (docs/design.md § Bad input)."""
    W, B = m.num_worlds, m.body_count
    _check(f"{name}.joint_q", state.joint_q, (W, m.nq), wp.float64, m.device)
    _check(f"{name}.joint_qd", state.joint_qd, (W, m.nv), wp.float64, m.device)
    _check(f"{name}.body_q", state.body_q, (W, B), wp.transformd, m.device)
    _check(f"{name}.body_qd", state.body_qd, (W, B), wp.spatial_vectord, m.device)
    _check(f"{name}.body_f", state.body_f, (W, B), wp.spatial_vectord, m.device)
    for flag in ("joint_qd_order", "body_f_order"):
        check_order(f"{name}.{flag}", getattr(state, flag))


def check_device_control(m: GpuModel, control: SapControl, name: str = "control") -> None:
    for f in ("joint_f", "joint_target_pos", "joint_target_vel", "joint_act"):
        _check(f"{name}.{f}", getattr(control, f), (m.num_worlds, m.nv), wp.float64, m.device)
    check_order(f"{name}.joint_f_order", control.joint_f_order)


def check_device_contacts(m: GpuModel, contacts: SapContacts, capacity: int, name: str = "contacts") -> None:
    W, C = m.num_worlds, capacity
    if not isinstance(contacts, SapContacts):
        raise ValueError(f"{name}: expected SapContacts or None, got {type(contacts).__name__}")
    if isinstance(contacts.shape0, wp.array) and contacts.shape0.ndim == 2 and contacts.shape0.shape[1] != C:
        raise ValueError(f"{name}: capacity {contacts.shape0.shape[1]} does not match the solver's "
                         f"max_rigid_contact {C}")
    for f in ("count", "overflow"):
        _check(f"{name}.{f}", getattr(contacts, f), (W,), wp.int32, m.device)
    for f in ("shape0", "shape1", "body0", "body1"):
        _check(f"{name}.{f}", getattr(contacts, f), (W, C), wp.int32, m.device)
    for f in ("phi0", "margin0", "margin1", "mu", "ke", "ke0", "ke1", "tau_d"):
        _check(f"{name}.{f}", getattr(contacts, f), (W, C), wp.float64, m.device)
    for f in ("x0", "x1", "normal"):
        _check(f"{name}.{f}", getattr(contacts, f), (W, C), wp.vec3d, m.device)


@wp.func
def world_quaternions_ok(quat_coord: wp.array(dtype=int), quat_count: int, q: wp.array(dtype=wp.float64)) -> int:
    """1 if every BALL/FREE/DISTANCE quaternion of one world's joint_q is accepted (quat_norm_ok)."""
    for k in range(quat_count):
        i = quat_coord[k]
        if kinematics.quat_norm_ok(wp.quatd(q[i], q[i + 1], q[i + 2], q[i + 3])) == 0:
            return 0
    return 1


@wp.kernel
def _check_inputs(quat_coord: wp.array(dtype=int), quat_count: int, nq: int, nv: int, body_count: int,
                  joint_q: wp.array2d(dtype=wp.float64),
                  joint_qd: wp.array2d(dtype=wp.float64), joint_f: wp.array2d(dtype=wp.float64),
                  joint_act: wp.array2d(dtype=wp.float64), target_pos: wp.array2d(dtype=wp.float64),
                  target_vel: wp.array2d(dtype=wp.float64), body_f: wp.array2d(dtype=wp.spatial_vectord),
                  status: wp.array(dtype=int), done: wp.array(dtype=int)):
    """A world whose inputs are not finite (NON_FINITE) or whose quaternions are rejected
    (INVALID_QUATERNION) is flagged and takes no part; it is left unchanged, as in sap_ref."""
    world = wp.tid()
    ok = int(1)
    for i in range(nq):
        if not wp.isfinite(joint_q[world, i]):
            ok = 0
    for i in range(nv):
        if not (wp.isfinite(joint_qd[world, i]) and wp.isfinite(joint_f[world, i]) and wp.isfinite(joint_act[world, i])
                and wp.isfinite(target_pos[world, i]) and wp.isfinite(target_vel[world, i])):
            ok = 0
    for b in range(body_count):
        for i in range(6):
            if not wp.isfinite(body_f[world, b][i]):
                ok = 0
    flags = int(0)
    if ok == 0:
        flags = NON_FINITE
    if world_quaternions_ok(quat_coord, quat_count, joint_q[world]) == 0:
        flags = flags | INVALID_QUATERNION
    status[world] = flags
    done[world] = 0
    if flags != 0:
        done[world] = 1


@wp.kernel
def _select_outputs(quat_coord: wp.array(dtype=int), quat_count: int, nq: int, nv: int,
                    q0: wp.array2d(dtype=wp.float64), v0: wp.array2d(dtype=wp.float64),
                    overflow: wp.array(dtype=int), q1: wp.array2d(dtype=wp.float64), v1: wp.array2d(dtype=wp.float64),
                    status: wp.array(dtype=int)):
    """Flag non-finite results, quaternions the step carried out of range, and contact overflow; a
    NON_FINITE or INVALID_QUATERNION world keeps q₀, v₀ (docs/design.md § Bad input)."""
    world = wp.tid()
    if (status[world] & REJECTED) == 0:  # a world rejected on input keeps its input flags only
        ok = int(1)
        for i in range(nq):
            if not wp.isfinite(q1[world, i]):
                ok = 0
        for i in range(nv):
            if not wp.isfinite(v1[world, i]):
                ok = 0
        if ok == 0:
            status[world] = status[world] | NON_FINITE
        elif world_quaternions_ok(quat_coord, quat_count, q1[world]) == 0:
            status[world] = status[world] | INVALID_QUATERNION  # e.g. sap_euler's drift carried |q| past QUAT_NORM_MAX
    if (status[world] & REJECTED) != 0:
        for i in range(nq):
            q1[world, i] = q0[world, i]
        for i in range(nv):
            v1[world, i] = v0[world, i]
    if overflow[world] > 0:
        status[world] = status[world] | CONTACT_OVERFLOW


@wp.kernel
def _keep_rejected_worlds(same_qd_order: int, nq: int, nv: int, body_count: int, status: wp.array(dtype=int),
                          q_in: wp.array2d(dtype=wp.float64), qd_in: wp.array2d(dtype=wp.float64),
                          body_q_in: wp.array2d(dtype=wp.transformd),
                          body_qd_in: wp.array2d(dtype=wp.spatial_vectord),
                          joint_q_out: wp.array2d(dtype=wp.float64), joint_qd_out: wp.array2d(dtype=wp.float64),
                          body_q_out: wp.array2d(dtype=wp.transformd),
                          body_qd_out: wp.array2d(dtype=wp.spatial_vectord)):
    """A NON_FINITE or INVALID_QUATERNION world gets state_in's values back, bit for bit (joint_qd
    only when both states use the same order; otherwise it keeps the converted v₀)."""
    world = wp.tid()
    if (status[world] & REJECTED) == 0:
        return
    for i in range(nq):
        joint_q_out[world, i] = q_in[world, i]
    if same_qd_order != 0:
        for i in range(nv):
            joint_qd_out[world, i] = qd_in[world, i]
    for b in range(body_count):
        body_q_out[world, b] = body_q_in[world, b]
        body_qd_out[world, b] = body_qd_in[world, b]


@wp.kernel
def _set_one(a: wp.array(dtype=int)):
    a[0] = 1


@wp.kernel
def _identity_padding(nv: int, H: wp.array3d(dtype=Any)):
    """H[w, i, i] = 1 for i ≥ nv: the padded system solves the unpadded one (blocked_cholesky)."""
    world, i = wp.tid()
    if i >= nv:
        H[world, i, i] = H.dtype(1.0)


class SolverSAP:
    """Drake's SAP time step for every world of ``model``, in Warp (see the module docstring).

    Args:
        model: the model (at least one articulated DOF).
        max_rigid_contact: contact slots per world (the capacity of the contacts passed to step).
        contact_preset_variant: ``approx32`` (default), ``approx64`` or ``drake``.
        device: Warp device (default: Warp's default device).
        newton_path: how stage 3 runs on the device: ``"fused"`` (one block of threads per world
            runs that world's whole Newton loop in one launch, :mod:`sap_gpu.fused_newton`) or
            ``"staged"`` (one thread per world per kernel, a ``wp.capture_while`` trip per
            Newton iteration of the batch, :mod:`sap_gpu.contact_solve`). Both solve the same
            problem with the same tests and report the same diagnostics; with
            ``contact_linear_solver="pcr"`` the staged loop runs either way (PCR is not fused).
        **overrides: any :class:`~sap_common.config.SapConfig` knob.

    After :meth:`step`: ``last_status``, ``last_newton_iterations``, ``last_line_search_iterations``
    and ``last_truncated_contact_count`` are device arrays over worlds (:meth:`diagnostics` gives
    NumPy copies).
    """

    def __init__(self, model: SapModel, *, max_rigid_contact: int, contact_preset_variant: str = "approx32",
                 device=None, newton_path: str = DEFAULT_NEWTON_PATH, **overrides):
        if not isinstance(model, SapModel):
            raise ValueError(f"model: expected a SapModel, got {type(model).__name__}")
        if not isinstance(newton_path, str) or newton_path not in NEWTON_PATHS:
            raise ValueError(f"newton_path: {newton_path!r} is not valid; valid: {', '.join(NEWTON_PATHS)}")
        if model.joint_dof_count < 1:
            raise ValueError("model: SolverSAP needs at least one articulated DOF (joint_dof_count >= 1), got 0")
        self.model = model
        self.config = cfg = SapConfig.from_preset(contact_preset_variant, max_rigid_contact=max_rigid_contact,
                                                  **overrides)
        self.device = get_device(device)
        self.m = m = GpuModel(model, self.device)
        W, B, nq, nv, C = m.num_worlds, m.body_count, m.nq, m.nv, cfg.max_rigid_contact
        self.n_pad = n = blocked_cholesky.padded_size(nv)
        d = self.device
        z = lambda shape, dtype=wp.float64: wp.zeros(shape, dtype=dtype, device=d)  # noqa: E731
        # stage 0/1/4/5 buffers
        self.q0, self.v0, self.joint_f, self.joint_act = z((W, nq)), z((W, nv)), z((W, nv)), z((W, nv))
        self.target_pos, self.target_vel = z((W, nv)), z((W, nv))
        self.body_f = z((W, B), wp.spatial_vectord)
        self.body_X, self.body_V = z((W, B), wp.transformd), z((W, B), wp.spatial_vectord)
        self.dof_S = z((W, nv), wp.spatial_vectord)
        self.body_Xc, self.dof_Sc = z((W, B), wp.transformd), z((W, nv), wp.spatial_vectord)
        self.Ic = z((W, B), wp.spatial_matrixd)
        self.acc, self.wrench = z((W, B), wp.spatial_vectord), z((W, B), wp.spatial_vectord)
        self.tau, self.v_star, self.v1, self.q1 = z((W, nv)), z((W, nv)), z((W, nv)), z((W, nq))
        # state_in's velocities and body state, kept for worlds left unchanged (state_out may be state_in)
        self.qd_in, self.body_q_in, self.body_qd_in = z((W, nv)), z((W, B), wp.transformd), z((W, B), wp.spatial_vectord)
        self.A, self.rhs = z((W, n, n)), z((W, n, 1))
        fm32 = cfg.free_motion_solve_precision == "fp32"
        self.fm_scratch = {"dv64": z((W, n, 1))}
        if fm32:
            f32 = wp.float32
            self.fm_scratch.update(A32=z((W, n, n), f32), rhs32=z((W, n, 1), f32), dv32=z((W, n, 1), f32))
        if cfg.matrixfree_representation:  # PCR on A·p: no factor storage
            self.fm_scratch["pcr"] = allocate_pcr_work(wp.float32 if fm32 else wp.float64, W, nv, cfg, d)
        elif fm32:
            self.fm_scratch["L32"] = z((W, n, n), wp.float32)
        else:
            self.fm_scratch["L64"] = z((W, n, n))
        self.all_worlds = wp.array(np.ones(W, np.int32), dtype=int, device=d)
        # stage 2 buffers
        self.R_WC, self.p0, self.p1 = z((W, C), wp.mat33d), z((W, C), wp.vec3d), z((W, C), wp.vec3d)
        self.contact_J = z((W, 3 * C, nv))
        self.contact_w, self.contact_R, self.contact_v_hat = z((W, C)), z((W, C), wp.vec3d), z((W, C))
        self.contact_mu = z((W, C))
        self.limits = constraints.limit_layout(model, d)
        L = self.limits.count
        self.limit_active, self.limit_J = z((W, max(L, 1)), wp.int32), z((W, max(L, 1), nv))
        self.limit_R, self.limit_v_hat = z((W, max(L, 1))), z((W, max(L, 1)))
        driven = np.flatnonzero((model.joint_target_ke > 0) | (model.joint_target_kd > 0)).astype(np.int32)
        self.drive_count = len(driven)
        self.drive_dof = wp.array(driven if len(driven) else np.zeros(1, np.int32), dtype=int, device=d)
        D = max(self.drive_count, 1)
        self.drive_q0, self.drive_Kp, self.drive_Kd = z((W, D)), z((W, D)), z((W, D))
        self.dof_mask, self.tree_scratch = z((W, nv), wp.int32), z((W, max(model.tree_count, 1)), wp.int32)
        self.v_init = z((W, nv))
        # stage 3 buffers
        T = wp.float32 if cfg.contact_solve_precision == "fp32" else wp.float64
        TL = wp.float32 if cfg.contact_linear_solve_precision == "fp32" else wp.float64
        self.T, self.TL = T, TL
        self.kernels = kk = newton_kernels(T, TL, cfg.line_search_variant, cfg.contact_linear_solver)
        rows = 3 * C + L + self.drive_count
        P = kk.Problem()
        P.nv, P.n_pad, P.limit_count, P.drive_count, P.h = nv, n, L, self.drive_count, wp.float64(0.0)
        P.A, P.v_star, P.dof_mask = self.A, self.v_star, self.dof_mask
        P.contact_J, P.contact_R, P.contact_v_hat, P.contact_mu = self.contact_J, self.contact_R, self.contact_v_hat, \
            self.contact_mu
        P.limit_active, P.limit_J, P.limit_R, P.limit_v_hat = self.limit_active, self.limit_J, self.limit_R, \
            self.limit_v_hat
        P.drive_dof, P.drive_q0, P.drive_Kp, P.drive_Kd = self.drive_dof, self.drive_q0, self.drive_Kp, self.drive_Kd
        P.q_target, P.v_target, P.u0, P.effort = self.target_pos, self.target_vel, self.joint_act, m.joint_effort_limit
        P.v, P.dv, P.grad = z((W, nv), T), z((W, nv), T), z((W, nv), T)
        P.vc, P.dvc, P.dp, P.line = z((W, max(rows, 1)), T), z((W, max(rows, 1)), T), z((W, nv), T), z((W, 3), T)
        P.gamma = z((W, max(rows, 1)), T)
        P.contact_G = z((W, max(C, 1)), wp.types.matrix((3, 3), T))
        P.limit_G, P.drive_G = z((W, max(L, 1)), T), z((W, D), T)
        P.contact_count = wp.zeros(W, dtype=int, device=d)
        P.contact_cols, P.contact_ncols = z((W, C, nv), wp.int32), z((W, C), wp.int32)
        P.limit_cols, P.limit_ncols = z((W, max(L, 1), nv), wp.int32), z((W, max(L, 1)), wp.int32)
        P.A_cols, P.A_ncols = z((W, nv, nv), wp.int32), z((W, nv), wp.int32)
        P.dof_contacts, P.dof_ncontacts = z((W, nv, max(C, 1)), wp.int32), z((W, nv), wp.int32)
        P.dof_limits, P.dof_nlimits = z((W, nv, max(L, 1)), wp.int32), z((W, nv), wp.int32)
        self.P = P
        N = kk.Newton()
        N.ell, N.ell_prev, N.alpha_prev = z(W, T), z(W, T), z(W, T)
        N.residual, N.scale = z(W, T), z(W, T)
        N.iterations, N.ls_iterations = z(W, wp.int32), z(W, wp.int32)
        N.done, N.pending, N.status, N.count = z(W, wp.int32), z(W, wp.int32), z(W, wp.int32), z(1, wp.int32)
        N.max_iterations, N.ls_max_iterations = cfg.max_iterations, cfg.line_search_max_iterations
        N.abs_tol, N.rel_tol = T(cfg.optimality_abs_tol), T(cfg.optimality_rel_tol)
        N.cost_abs, N.cost_rel = T(cfg.cost_abs_tol), T(cfg.cost_rel_tol)
        N.rho, N.armijo_c, N.slop = T(cfg.rho), T(cfg.armijo_c), T(cfg.line_search_relative_slop)
        self.N = N
        pcr = cfg.contact_linear_solver == "pcr"
        # The fused loop (Cholesky only) pads the system to 32 or a multiple of 32
        # (fused_newton.fused_size); the staged loop to blocked_cholesky.padded_size.
        self.newton_path = newton_path
        self.fused = newton_path == "fused" and not pcr
        ns = fused_size(nv) if self.fused else n
        self.newton_rhs, self.newton_dv = z((W, ns, 1), TL), z((W, ns, 1), TL)
        # PCR never forms H: 1-entry stand-ins keep the kernel signature; Cholesky's PCR work
        # struct is a stand-in too (its arrays are never read).
        self.H = z((1, 1, 1), TL) if pcr else z((W, ns, ns), TL)
        if not pcr:  # the padding of H: the identity, written once (evaluate writes rows < nv only)
            wp.launch(_identity_padding, dim=(W, ns), inputs=[nv], outputs=[self.H], device=d)
        self.newton_L = z((W, ns, ns), TL) if not pcr and ns > blocked_cholesky.TILE else z((1, 1, 1), TL)
        if self.fused:
            self.fused_kernel = fused_newton_kernel(kk, ns)
        self.newton_failed = z(W, wp.int32)  # per world: the last factorization had a failed pivot
        self.pcr_work = allocate_pcr_work(TL, W, nv, cfg, d, C, L, self.drive_count) if pcr \
            else allocate_pcr_work(TL, 1, 1, cfg, d)
        self.last_linear_solver_iterations = self.pcr_work.iterations if pcr else z(W, wp.int32)
        self.last_linear_solver_residual = self.pcr_work.residual if pcr else z(W, TL)
        self.loop_condition = z(1, wp.int32)
        self.empty_contacts = make_contacts(W, C, d)  # what step(contacts=None) reads: no contact
        # diagnostics (device arrays, refreshed by step)
        self.last_status = N.status
        self.last_newton_iterations = N.iterations
        self.last_line_search_iterations = N.ls_iterations
        self.last_truncated_contact_count = z(W, wp.int32)
        # Profiling hook: when set, called with a stage name after each stage's launches
        # (``sap_tools/benchmark/cli.py --breakdown`` synchronizes there). None costs nothing and keeps
        # step() capturable.
        self.stage_hook = None
        # The Newton loop's J and A products run over each row's non-zero columns
        # (constraints.row_support); False lists every column: the plain dense path, which gives
        # the same sums term for term (tests/test_gpu_sparse_rows.py) and is kept for comparison.
        self.sparse_rows = True
        self.dt_bound = time_step_bound(model)  # [s]; longer steps warn (sap_common.time_step)

    def _stage(self, name: str) -> None:
        if self.stage_hook is not None:
            self.stage_hook(name)

    # ------------------------------------------------------------------ the time step

    def step(self, state_in: SapState, state_out: SapState, control: SapControl, contacts: SapContacts | None,
             dt: float) -> None:
        """Advance every world by ``dt`` (``state_out`` may be ``state_in``)."""
        m, cfg, P, N = self.m, self.config, self.P, self.N
        check_time_step(self.model, dt, self.dt_bound)
        check_device_state(m, state_in, "state_in")
        check_device_state(m, state_out, "state_out")
        check_device_control(m, control)
        if not isinstance(self.sparse_rows, (bool, np.bool_)):
            raise ValueError(f"sparse_rows: expected True (non-zero columns only) or False (dense), "
                             f"got {self.sparse_rows!r}")
        if contacts is None:
            contacts = self.empty_contacts
        check_device_contacts(m, contacts, cfg.max_rigid_contact)
        pose32 = not cfg.use_f64_boundary_pose
        h = float(dt)
        # 0. boundary in
        wp.copy(self.q0, state_in.joint_q)
        wp.copy(self.qd_in, state_in.joint_qd)
        wp.copy(self.body_q_in, state_in.body_q)
        wp.copy(self.body_qd_in, state_in.body_qd)
        wp.copy(self.joint_act, control.joint_act)
        wp.copy(self.target_pos, control.joint_target_pos)
        wp.copy(self.target_vel, control.joint_target_vel)
        bd = world_block_dim(self.device)
        wp.launch(_check_inputs, dim=m.num_worlds, block_dim=bd, device=self.device, inputs=[
            m.quat_coord, m.quat_count, m.nq, m.nv, m.body_count, state_in.joint_q, state_in.joint_qd, control.joint_f,
            control.joint_act, control.joint_target_pos, control.joint_target_vel, state_in.body_f],
                  outputs=[N.status, N.done])
        boundary.joint_arrays_to_sap(m, state_in, control, pose32, self.v0, self.joint_f)
        kinematics.forward_kinematics(m, self.q0, self.v0, self.body_X, self.body_V, self.dof_S)
        boundary.body_wrenches_to_sap(m, state_in, pose32, self.body_X, self.body_f)
        self._stage("boundary_in")
        # 1. free motion
        dynamics.mass_matrix(m, h, self.body_X, self.dof_S, self.Ic, self.A)
        dynamics.generalized_forces(m, self.body_X, self.body_V, self.dof_S, self.v0, self.body_f, self.acc,
                                    self.wrench, self.tau)
        free_motion.free_motion_rhs(m, h, self.tau, self.v0, self.joint_f, self.joint_act, self.rhs)
        free_motion.solve_free_motion(self.A, self.rhs, self.v0, self.v_star, self.all_worlds, self.fm_scratch,
                                      cfg.free_motion_solve_precision, cfg.matrixfree_representation)
        self._stage("free_motion")
        # 2. contact Jacobians and weights, limit and drive rows
        body_X, dof_S = self.body_X, self.dof_S
        if pose32:  # the pose crossing into the contact stage is float32
            kinematics.round_poses(self.body_X, self.body_Xc)
            kinematics.motion_subspaces(m, self.q0, self.body_Xc, self.dof_Sc)
            body_X, dof_S = self.body_Xc, self.dof_Sc
        wp.copy(P.contact_count, contacts.count)
        wp.copy(self.contact_mu, contacts.mu)
        contact_jacobian.contact_geometry(m, contacts, cfg.contact_point_mode == "contact_midpoint", body_X, dof_S,
                                          self.R_WC, self.p0, self.p1, self.contact_J)
        contact_jacobian.contact_weights(m, contacts, cfg.contact_weight_mode == "diag_delassus",
                                         cfg.sap_contact_weight_precision, h, cfg.contact_beta, cfg.contact_sigma,
                                         self.A, body_X, self.R_WC, self.p0, self.p1, self.contact_J, self.contact_w,
                                         self.contact_R, self.contact_v_hat)
        self._stage("contact_jacobian")
        constraints.limit_rows(m, self.limits, h, self.q0, self.v0, self.v_star, self.A, body_X, dof_S,
                               self.limit_active, self.limit_J, self.limit_R, self.limit_v_hat)
        constraints.drive_rows(m, self.drive_dof, self.drive_count, h, self.q0, self.A, self.drive_q0, self.drive_Kp,
                               self.drive_Kd)
        constraints.participation(m, self.limits.count, self.drive_dof, self.drive_count, contacts, self.contact_J,
                                  self.limit_active, self.limit_J, self.tree_scratch, self.v0, self.v_star,
                                  self.dof_mask, self.v_init)
        constraints.row_support(m, self.limits.count, not self.sparse_rows, contacts, self.contact_J,
                                self.limit_active, self.limit_J, self.A, P.contact_cols, P.contact_ncols, P.limit_cols,
                                P.limit_ncols, P.A_cols, P.A_ncols, P.dof_contacts, P.dof_ncontacts, P.dof_limits,
                                P.dof_nlimits)
        self._stage("constraints")
        # 3. Newton
        self._newton(h)
        # 4. integration, 5. boundary out
        integration.integrate_positions(m, self.q0, self.v0, self.v1, h, cfg.position_integration, self.q1)
        self._stage("integration")
        wp.launch(_select_outputs, dim=m.num_worlds, block_dim=bd, device=self.device, inputs=[
            m.quat_coord, m.quat_count, m.nq, m.nv, self.q0, self.v0, contacts.overflow],
                  outputs=[self.q1, self.v1, N.status])
        wp.copy(self.last_truncated_contact_count, contacts.overflow)
        wp.copy(state_out.joint_q, self.q1)
        if state_out.joint_qd_order == "public":
            boundary.joint_velocities_to_public(m, pose32, self.q1, self.v1, state_out.joint_qd)
        else:
            wp.copy(state_out.joint_qd, self.v1)
        kinematics.forward_kinematics(m, self.q1, self.v1, self.body_X, self.body_V, self.dof_S)
        wp.copy(state_out.body_q, self.body_X)
        boundary.body_twists_to_public(m, self.body_X, self.body_V, state_out.body_qd)
        wp.launch(_keep_rejected_worlds, dim=m.num_worlds, block_dim=bd, device=self.device, inputs=[
            int(state_in.joint_qd_order == state_out.joint_qd_order), m.nq, m.nv, m.body_count, N.status, self.q0,
            self.qd_in, self.body_q_in, self.body_qd_in], outputs=[state_out.joint_q, state_out.joint_qd,
                                                                   state_out.body_q, state_out.body_qd])
        self._stage("boundary_out")

    def _newton(self, h: float) -> None:
        P, N, kk, d = self.P, self.N, self.kernels, self.device
        W, bd = self.m.num_worlds, world_block_dim(self.device)
        P.h = wp.float64(h)
        if self.fused:  # one launch: warm start, the loop of every world, v₁
            wp.launch_tiled(self.fused_kernel, dim=[W], inputs=[P, N, 0, self.H.shape[1] // blocked_cholesky.TILE,
                                                                self.v_init],
                            outputs=[self.H, self.newton_rhs, self.newton_dv, self.newton_L, self.v1],
                            block_dim=TILE_BLOCK_DIM, device=d)
            self._stage("newton_fused")
            return
        wp.copy(P.v, self.v_init) if self.T == wp.float64 else _cast_into(self.v_init, P.v)
        N.iterations.zero_()
        N.ls_iterations.zero_()
        N.alpha_prev.zero_()
        S = self.pcr_work
        S.iterations.zero_()
        S.residual.zero_()
        pcr = self.config.contact_linear_solver == "pcr"
        wp.launch(_set_one, dim=1, inputs=[self.loop_condition], device=d)

        def body():
            N.count.zero_()
            wp.launch(kk.evaluate, dim=W, inputs=[P, N, S], outputs=[self.H, self.newton_rhs], block_dim=bd, device=d)
            self._stage("newton_evaluate")
            if pcr:
                wp.launch(kk.newton_pcr, dim=W, inputs=[P, N, S, self.newton_rhs], outputs=[self.newton_dv],
                          block_dim=bd, device=d)
            else:
                cholesky_solve(self.H, self.newton_rhs, self.newton_dv, N.pending, self.newton_L, self.newton_failed)
            self._stage("linear_solve")
            wp.launch(kk.line_search, dim=W, inputs=[P, N, self.newton_dv, self.newton_failed], block_dim=bd,
                      device=d)
            wp.copy(self.loop_condition, N.count)
            self._stage("line_search")

        wp.capture_while(self.loop_condition, body)
        wp.launch(kk.finish, dim=W, inputs=[P], outputs=[self.v1], block_dim=bd, device=d)
        self._stage("newton_finish")

    # ------------------------------------------------------------------ helpers

    def evaluate_at(self, v) -> dict:
        """ℓ, ∇ℓ, γ and H of the last step's problem at velocities ``v (W, nv)`` (SAP order).

        A teaching/debugging hook (and how the tests compare this stage with sap_ref): it
        reuses the last :meth:`step`'s A, v*, J, R, v̂ and rows, and leaves the step's results
        alone apart from the Newton scratch buffers. It runs the evaluation of the solver's
        Newton path (the fused kernel evaluates once and stops). Returns NumPy arrays:
        ``ell (W,)``, ``grad (W, nv)``, ``H (W, nv, nv)`` (symmetric, from the lower triangle the
        kernels form; None with PCR, which never forms it), ``H_diag (W, nv)``,
        ``contact_gamma (W, C, 3)`` (0 in unused slots), ``limit_gamma (W, L)``
        (0 for inactive rows), ``drive_gamma (W, D)``.
        """
        P, N, kk = self.P, self.N, self.kernels
        W, nv, C, L = self.m.num_worlds, self.m.nv, self.config.max_rigid_contact, self.limits.count
        v = np.asarray(v, dtype=np.float64).reshape(W, nv)
        P.v.assign(v.astype(np.float32 if self.T == wp.float32 else np.float64))
        saved = (N.abs_tol, N.rel_tol, N.max_iterations)
        # A negative tolerance is never met: evaluate goes on to assemble H for every world.
        N.abs_tol, N.rel_tol, N.max_iterations = self.T(-1.0), self.T(-1.0), -1
        done, iterations, status = N.done.numpy(), N.iterations.numpy(), N.status.numpy()
        N.done.zero_()
        N.iterations.zero_()
        try:
            if self.fused:
                wp.launch_tiled(self.fused_kernel, dim=[W], inputs=[P, N, 1, self.H.shape[1] // blocked_cholesky.TILE,
                                                                    self.v_init],
                                outputs=[self.H, self.newton_rhs, self.newton_dv, self.newton_L, self.v1],
                                block_dim=TILE_BLOCK_DIM, device=self.device)
            else:
                wp.launch(kk.evaluate, dim=W, inputs=[P, N, self.pcr_work], outputs=[self.H, self.newton_rhs],
                          block_dim=world_block_dim(self.device), device=self.device)
            gamma = P.gamma.numpy().astype(np.float64)
            contact_gamma = gamma[:, :3 * C].reshape(W, C, 3)
            contact_gamma[np.arange(C)[None, :] >= P.contact_count.numpy()[:, None]] = 0.0  # unused slots
            pcr = self.config.contact_linear_solver == "pcr"
            H = None
            if not pcr:  # evaluate forms the lower triangle (all the Cholesky reads)
                H = np.tril(self.H.numpy()[:, :nv, :nv].astype(np.float64))
                H = H + np.tril(H, -1).transpose(0, 2, 1)
            out = dict(ell=N.ell.numpy().astype(np.float64), grad=P.grad.numpy().astype(np.float64), H=H,
                       H_diag=(self.pcr_work.diag.numpy().astype(np.float64) if pcr else
                               np.diagonal(H, axis1=1, axis2=2).copy()),
                       contact_gamma=contact_gamma, limit_gamma=gamma[:, 3 * C:3 * C + L],
                       drive_gamma=gamma[:, 3 * C + L:3 * C + L + self.drive_count])
        finally:
            N.abs_tol, N.rel_tol, N.max_iterations = saved
            N.done.assign(done)
            N.iterations.assign(iterations)
            N.status.assign(status)
        return out

    def diagnostics(self) -> dict:
        """NumPy copies of the per-world diagnostics of the last step."""
        return {"status": self.last_status.numpy().copy(),
                "newton_iterations": self.last_newton_iterations.numpy().copy(),
                "line_search_iterations": self.last_line_search_iterations.numpy().copy(),
                "truncated_contact_count": self.last_truncated_contact_count.numpy().copy(),
                "linear_solver_iterations": self.last_linear_solver_iterations.numpy().copy(),
                "linear_solver_residual": self.last_linear_solver_residual.numpy().astype(np.float64)}


@wp.kernel
def _cast_f64_f32(src: wp.array2d(dtype=wp.float64), dst: wp.array2d(dtype=wp.float32)):
    w, i = wp.tid()
    dst[w, i] = wp.float32(src[w, i])


def _cast_into(src, dst) -> None:
    wp.launch(_cast_f64_f32, dim=src.shape, inputs=[src], outputs=[dst], device=src.device)

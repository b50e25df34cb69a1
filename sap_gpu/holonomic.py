"""Holonomic constraint rows on the device: couplers, distance, ball, weld and axis alignment.

Counterpart of :mod:`sap_ref.holonomic` (docs/formulation.md § Holonomic constraints). The rows
are scalar rows of kind HOLONOMIC (:mod:`sap_common.rows`), after the limit rows (rows
``row0 … row0 + E − 1`` of the scalar rows' ``row_J``, ``row_R``, ``row_v_hat``, ``row_active``),
so the participation, the non-zero column lists, the Hessian, the line search and both Newton
paths treat them as every scalar row; their term is the limit term without the clamp (γ = y,
G = 1/R). One thread per world builds every constraint's g₀, J, its Delassus weight, R and v̂
each step, in float64.
"""

import numpy as np
import warp as wp

from sap_common.constants import CONSTRAINT_DISTANCE_MIN, CONSTRAINT_DISTANCE_MIN_RELATIVE, HOLONOMIC_BETA
from sap_common.model import ConstraintType, SapModel

from .contact_jacobian import contact_frame
from .kinematics import add_point_jacobian_along
from .launch import launch_threads

wp.set_module_options({"enable_backward": False})

__all__ = ["HolonomicLayout", "holonomic_layout", "holonomic_constraints"]

# β²/(4π²), folded in float64 (arithmetic between Python constants in a kernel is float32).
_R_FACTOR = HOLONOMIC_BETA * HOLONOMIC_BETA / (4.0 * np.pi**2)
_PI = float(np.pi)  # a Python float: the kernel's literal is the float64 π
COUPLER = wp.constant(int(ConstraintType.COUPLER))
DISTANCE = wp.constant(int(ConstraintType.DISTANCE))
BALL = wp.constant(int(ConstraintType.BALL))
WELD = wp.constant(int(ConstraintType.WELD))
_P5 = wp.types.vector(5, wp.float64)


class HolonomicLayout:
    """The model's holonomic constraints on the device (``count`` constraints, ``rows`` rows).

    Per constraint: ``type``, ``body_a``/``body_b`` (−1 = world), ``X_a``/``X_b``, ``axis``,
    the coupler's coordinates ``q0``/``q1`` and DOFs ``dof0``/``dof1`` (−1 otherwise), and
    ``params`` (ρ, Δq, ℓ₀, k, c) as float64 columns; ``row_start`` (count + 1).
    """

    def __init__(self, model: SapModel, device):
        m = model
        self.count, self.rows = m.constraint_count, m.constraint_row_count
        K = max(self.count, 1)

        def arr(x, dtype, fill, shape=()):
            a = np.asarray(x)
            if self.count == 0:
                a = np.full((K, *shape), fill)
            return wp.array(np.ascontiguousarray(a), dtype=dtype, device=device)

        joint_ids = lambda js, starts: [int(starts[j]) if j >= 0 else -1 for j in js]  # noqa: E731
        self.type = arr(m.constraint_type, int, -1)
        self.body_a, self.body_b = arr(m.constraint_body_a, int, -1), arr(m.constraint_body_b, int, -1)
        self.X_a = arr(m.constraint_X_a, wp.transformd, 0.0, (7,))
        self.X_b = arr(m.constraint_X_b, wp.transformd, 0.0, (7,))
        self.axis = arr(m.constraint_axis, wp.vec3d, 0.0, (3,))
        self.q0 = arr(joint_ids(m.constraint_joint0, m.joint_q_start), int, -1)
        self.q1 = arr(joint_ids(m.constraint_joint1, m.joint_q_start), int, -1)
        self.dof0 = arr(joint_ids(m.constraint_joint0, m.joint_qd_start), int, -1)
        self.dof1 = arr(joint_ids(m.constraint_joint1, m.joint_qd_start), int, -1)
        params = np.stack([m.constraint_gear_ratio, m.constraint_offset, m.constraint_length,
                           m.constraint_stiffness, m.constraint_damping], axis=1) if self.count else None
        self.params = arr(params, _P5, 0.0, (5,))
        self.row_start = wp.array(np.asarray(m.constraint_row_start, np.int32), dtype=int, device=device)


def holonomic_layout(model: SapModel, device) -> HolonomicLayout:
    return HolonomicLayout(model, device)


@wp.func
def _add_angular_along(world: int, body: int, n: wp.vec3d, sign: wp.float64, row: int,
                       body_parent: wp.array(dtype=int), body_joint: wp.array(dtype=int),
                       joint_qd_start: wp.array(dtype=int), dof_S: wp.array2d(dtype=wp.spatial_vectord),
                       J: wp.array3d(dtype=wp.float64)):
    """J[row] += sign · n̂ᵀ J_ω(body): one direction of a body's angular velocity."""
    b = body
    while b >= 0:
        j = body_joint[b]
        for k in range(joint_qd_start[j], joint_qd_start[j + 1]):
            S = dof_S[world, k]
            J[world, row, k] = J[world, row, k] + sign * wp.dot(n, wp.vec3d(S[0], S[1], S[2]))
        b = body_parent[b]


@wp.func
def _pose(world: int, body: int, body_X: wp.array2d(dtype=wp.transformd)) -> wp.transformd:
    if body < 0:
        return wp.transformd(wp.vec3d(wp.float64(0.0), wp.float64(0.0), wp.float64(0.0)),
                             wp.quatd(wp.float64(0.0), wp.float64(0.0), wp.float64(0.0), wp.float64(1.0)))
    return body_X[world, body]


@wp.func
def _rotation_vector(q_WP: wp.quatd, q_WQ: wp.quatd) -> wp.vec3d:
    """a_PQ in world: θ·k̂ of R_WPᵀR_WQ, θ = 2·atan2(|v|, |w|) ∈ [0, π] (sap_ref.holonomic.rotation_vector)."""
    q = wp.mul(wp.quat_inverse(wp.normalize(q_WP)), wp.normalize(q_WQ))
    v = wp.vec3d(q[0], q[1], q[2])
    n = wp.length(v)
    if n == wp.float64(0.0):
        return wp.vec3d(wp.float64(0.0), wp.float64(0.0), wp.float64(0.0))
    theta = wp.float64(2.0) * wp.atan2(n, wp.abs(q[3]))
    k = v / n
    if q[3] < wp.float64(0.0):
        k = -k
    return wp.quat_rotate(wp.normalize(q_WP), theta * k)


@wp.kernel
def _holonomic_rows(
    body_parent: wp.array(dtype=int), body_joint: wp.array(dtype=int), joint_qd_start: wp.array(dtype=int),
    nv: int, count: int, row0: int, dt: wp.float64,
    ctype: wp.array(dtype=int), body_a: wp.array(dtype=int), body_b: wp.array(dtype=int),
    X_a: wp.array(dtype=wp.transformd), X_b: wp.array(dtype=wp.transformd), axis: wp.array(dtype=wp.vec3d),
    q0i: wp.array(dtype=int), q1i: wp.array(dtype=int), dof0: wp.array(dtype=int), dof1: wp.array(dtype=int),
    params: wp.array(dtype=_P5), row_start: wp.array(dtype=int),
    joint_q_in: wp.array2d(dtype=wp.float64), A_in: wp.array3d(dtype=wp.float64),
    body_X_in: wp.array2d(dtype=wp.transformd), dof_S_in: wp.array2d(dtype=wp.spatial_vectord),
    active_out: wp.array2d(dtype=int), J_out: wp.array3d(dtype=wp.float64), R_out: wp.array2d(dtype=wp.float64),
    v_hat_out: wp.array2d(dtype=wp.float64), g0_out: wp.array2d(dtype=wp.float64),
):
    world = wp.tid()
    zero = wp.float64(0.0)
    one = wp.float64(1.0)
    for c in range(count):
        r0 = row_start[c]
        n = row_start[c + 1] - r0
        for i in range(n):
            for k in range(nv):
                J_out[world, row0 + r0 + i, k] = zero
            active_out[world, row0 + r0 + i] = 0
            g0_out[world, r0 + i] = zero
        t = ctype[c]
        p = params[c]
        ok = int(1)
        if t == COUPLER:
            rho = p[0]
            g0_out[world, r0] = joint_q_in[world, q0i[c]] - rho * joint_q_in[world, q1i[c]] - p[1]
            J_out[world, row0 + r0, dof0[c]] = J_out[world, row0 + r0, dof0[c]] + one
            J_out[world, row0 + r0, dof1[c]] = J_out[world, row0 + r0, dof1[c]] - rho
        else:
            a = body_a[c]
            b = body_b[c]
            X_WP = wp.transform_multiply(_pose(world, a, body_X_in), X_a[c])
            X_WQ = wp.transform_multiply(_pose(world, b, body_X_in), X_b[c])
            p_P = wp.transform_get_translation(X_WP)
            p_Q = wp.transform_get_translation(X_WQ)
            d = p_Q - p_P
            if t == BALL:
                for i in range(3):
                    e = wp.vec3d(zero, zero, zero)
                    e[i] = one
                    g0_out[world, r0 + i] = d[i]
                    add_point_jacobian_along(world, b, p_Q, e, one, row0 + r0 + i, body_parent, body_joint,
                                             joint_qd_start, body_X_in, dof_S_in, J_out)
                    add_point_jacobian_along(world, a, p_P, e, -one, row0 + r0 + i, body_parent, body_joint,
                                             joint_qd_start, body_X_in, dof_S_in, J_out)
            elif t == DISTANCE:
                dist = wp.length(d)
                if dist < wp.float64(CONSTRAINT_DISTANCE_MIN) + wp.float64(CONSTRAINT_DISTANCE_MIN_RELATIVE) * p[2]:
                    ok = 0
                else:
                    u = d / dist
                    g0_out[world, r0] = dist - p[2]
                    add_point_jacobian_along(world, b, p_Q, u, one, row0 + r0, body_parent, body_joint,
                                             joint_qd_start, body_X_in, dof_S_in, J_out)
                    add_point_jacobian_along(world, a, p_P, u, -one, row0 + r0, body_parent, body_joint,
                                             joint_qd_start, body_X_in, dof_S_in, J_out)
            elif t == WELD:
                q_WP = wp.transform_get_rotation(X_WP)
                aPQ = _rotation_vector(q_WP, wp.transform_get_rotation(X_WQ))
                p_M = wp.float64(0.5) * (p_P + p_Q)
                for i in range(3):
                    e = wp.vec3d(zero, zero, zero)
                    e[i] = one
                    g0_out[world, r0 + i] = aPQ[i]
                    g0_out[world, r0 + 3 + i] = d[i]
                    _add_angular_along(world, b, e, one, row0 + r0 + i, body_parent, body_joint, joint_qd_start,
                                       dof_S_in, J_out)
                    _add_angular_along(world, a, e, -one, row0 + r0 + i, body_parent, body_joint, joint_qd_start,
                                       dof_S_in, J_out)
                    add_point_jacobian_along(world, b, p_M, e, one, row0 + r0 + 3 + i, body_parent, body_joint,
                                             joint_qd_start, body_X_in, dof_S_in, J_out)
                    add_point_jacobian_along(world, a, p_M, e, -one, row0 + r0 + 3 + i, body_parent, body_joint,
                                             joint_qd_start, body_X_in, dof_S_in, J_out)
            else:  # axis alignment: the swing, along the tangents of the axis carried by R_WP
                q_P = wp.transform_get_rotation(X_WP)
                a_P = wp.quat_rotate(q_P, axis[c])
                a_Q = wp.quat_rotate(wp.transform_get_rotation(X_WQ), axis[c])
                # (t̂₁, t̂₂) = R_WP · the contact-frame tangents of â, ⊥ a_P and smooth in the poses
                # (sap_ref.holonomic.swing_tangents); the swing, π·t̂₁ at exactly opposite axes.
                F = contact_frame(axis[c])
                cr = wp.cross(a_P, a_Q)
                sn = wp.length(cr)
                s = wp.vec3d(zero, zero, zero)
                if sn != zero:
                    s = wp.atan2(sn, wp.dot(a_P, a_Q)) * cr / sn
                elif wp.dot(a_P, a_Q) < zero:
                    s = wp.float64(_PI) * wp.quat_rotate(q_P, wp.vec3d(F[0, 0], F[1, 0], F[2, 0]))
                for i in range(2):
                    tv = wp.quat_rotate(q_P, wp.vec3d(F[0, i], F[1, i], F[2, i]))
                    g0_out[world, r0 + i] = wp.dot(tv, s)
                    _add_angular_along(world, b, tv, one, row0 + r0 + i, body_parent, body_joint, joint_qd_start,
                                       dof_S_in, J_out)
                    _add_angular_along(world, a, tv, -one, row0 + r0 + i, body_parent, body_joint, joint_qd_start,
                                       dof_S_in, J_out)
        if ok == 0:
            continue
        # Drake's weight: ‖J diag(A)⁻¹ Jᵀ‖_F / n, one for the whole constraint.
        wsum = zero
        for i in range(n):
            for j in range(n):
                Wij = zero
                for k in range(nv):
                    Wij = Wij + J_out[world, row0 + r0 + i, k] * J_out[world, row0 + r0 + j, k] / A_in[world, k, k]
                wsum = wsum + Wij * Wij
        w = wp.max(wp.sqrt(wsum) / wp.float64(n), wp.float64(1e-12))
        stiffness = p[3]
        tau = p[4] / stiffness
        R_comp = one / (dt * (dt + tau) * stiffness)
        R_nr = wp.float64(_R_FACTOR) * w
        if R_comp < R_nr:
            tau = dt
        R = wp.max(R_comp, R_nr)
        for i in range(n):
            active_out[world, row0 + r0 + i] = 1
            R_out[world, row0 + r0 + i] = R
            v_hat_out[world, row0 + r0 + i] = -g0_out[world, r0 + i] / (dt + tau)


def holonomic_constraints(m, layout: HolonomicLayout, row0: int, dt: float, joint_q, A, body_X, dof_S, active, J, R,
                          v_hat, g0) -> None:
    """Launch: every holonomic constraint's rows into scalar rows ``row0 …`` with J, R, v̂ and g₀
    (docs/formulation.md § Holonomic constraints)."""
    if layout.count == 0:
        return
    launch_threads(_holonomic_rows, dim=m.num_worlds, device=m.device, inputs=[
        m.body_parent, m.body_joint, m.joint_qd_start, m.nv, layout.count, int(row0), wp.float64(dt), layout.type,
        layout.body_a, layout.body_b, layout.X_a, layout.X_b, layout.axis, layout.q0, layout.q1, layout.dof0,
        layout.dof1, layout.params, layout.row_start, joint_q, A, body_X, dof_S], outputs=[active, J, R, v_hat, g0])

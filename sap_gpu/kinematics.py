"""Forward kinematics, body twists and motion subspaces.

Forward kinematics runs one block of lanes per world, the tree level by level (the joints of a
level over the lanes, a block barrier between levels); the motion subspaces at given poses one
thread per (world, joint); :func:`body_poses` one thread per world.

Counterpart of :mod:`sap_ref.kinematics` (same conventions: SAP order, world frame, body
origins). Per world, joints parents first:

    X_WC = X_WP · X_PF · X_FM(q) · X_CM⁻¹          (FREE/DISTANCE: X_WC = q)
    S_k  = the child's twist at its origin per unit velocity of DOF k, parent still
    V_C  = shift(V_P, p_C − p_P) + Σ_k S_k qd_k     (shift: v ← v + ω × r)

All float64. Float literals are wrapped in ``wp.float64`` (Warp's default literal is float32).
"""

from __future__ import annotations

import warp as wp

from sap_common.constants import QUAT_NORM_MAX, QUAT_NORM_MIN
from sap_common.model import JointType

from .blocked_cholesky import block_sync
from .launch import launch_blocks, launch_threads

wp.set_module_options({"enable_backward": False})

__all__ = ["forward_kinematics", "body_poses", "motion_subspaces", "round_poses", "quat_norm_ok", "PRISMATIC",
           "REVOLUTE", "BALL", "FIXED", "FREE", "DISTANCE", "D6", "add_point_jacobian",
           "add_point_jacobian_along"]

PRISMATIC = wp.constant(int(JointType.PRISMATIC))
REVOLUTE = wp.constant(int(JointType.REVOLUTE))
BALL = wp.constant(int(JointType.BALL))
FIXED = wp.constant(int(JointType.FIXED))
FREE = wp.constant(int(JointType.FREE))
DISTANCE = wp.constant(int(JointType.DISTANCE))
D6 = wp.constant(int(JointType.D6))
# The accepted range of |q|² (sap_common.conventions.quaternion_norm_ok), as float64 constants.
QUAT_NORM2_MIN = wp.constant(wp.float64(QUAT_NORM_MIN * QUAT_NORM_MIN))
QUAT_NORM2_MAX = wp.constant(wp.float64(QUAT_NORM_MAX * QUAT_NORM_MAX))


@wp.func
def quat_norm_ok(q: wp.quatd) -> int:
    """1 if q is finite with QUAT_NORM_MIN ≤ |q| ≤ QUAT_NORM_MAX (the quaternion policy), else 0.

    |q|² is summed ((x² + y²) + z²) + w², as on the host; NaN fails both comparisons.
    """
    n2 = ((q[0] * q[0] + q[1] * q[1]) + q[2] * q[2]) + q[3] * q[3]
    if n2 >= QUAT_NORM2_MIN and n2 <= QUAT_NORM2_MAX:
        return 1
    return 0


@wp.func
def twist(w: wp.vec3d, v: wp.vec3d) -> wp.spatial_vectord:
    return wp.spatial_vectord(w[0], w[1], w[2], v[0], v[1], v[2])


@wp.func
def twist_w(t: wp.spatial_vectord) -> wp.vec3d:
    return wp.vec3d(t[0], t[1], t[2])


@wp.func
def twist_v(t: wp.spatial_vectord) -> wp.vec3d:
    return wp.vec3d(t[3], t[4], t[5])


@wp.func
def shift_twist(t: wp.spatial_vectord, r: wp.vec3d) -> wp.spatial_vectord:
    """The same rigid motion seen at a point r further on: v ← v + ω × r."""
    w = twist_w(t)
    return twist(w, twist_v(t) + wp.cross(w, r))


@wp.func
def quat_axis_angle_d(axis: wp.vec3d, angle: wp.float64) -> wp.quatd:
    half = angle * wp.float64(0.5)
    s = wp.sin(half)
    return wp.quatd(axis[0] * s, axis[1] * s, axis[2] * s, wp.cos(half))


@wp.func
def load_quat(q: wp.array(dtype=wp.float64), i: int) -> wp.quatd:
    """Normalized quaternion from q[i:i+4] ([x, y, z, w])."""
    return wp.normalize(wp.quatd(q[i], q[i + 1], q[i + 2], q[i + 3]))


@wp.func
def joint_transform(jt: int, qs: int, ds: int, nl: int, na: int, q: wp.array(dtype=wp.float64),
                    axis: wp.array(dtype=wp.vec3d)) -> wp.transformd:
    """X_FM(q) (FREE/DISTANCE: the world pose stored in q)."""
    zero = wp.float64(0.0)
    p = wp.vec3d(zero, zero, zero)
    r = wp.quatd(zero, zero, zero, wp.float64(1.0))
    if jt == PRISMATIC:
        p = axis[ds] * q[qs]
    elif jt == REVOLUTE:
        r = quat_axis_angle_d(axis[ds], q[qs])
    elif jt == BALL:
        r = load_quat(q, qs)
    elif jt == FREE or jt == DISTANCE:
        p = wp.vec3d(q[qs], q[qs + 1], q[qs + 2])
        r = load_quat(q, qs + 3)
    elif jt == D6:
        for i in range(nl):
            p = p + axis[ds + i] * q[qs + i]
        for k in range(na):
            r = r * quat_axis_angle_d(axis[ds + nl + k], q[qs + nl + k])
    return wp.transformd(p, r)


@wp.func
def dof_subspace(jt: int, i: int, ds: int, nl: int, qs: int, q: wp.array(dtype=wp.float64),
                 axis: wp.array(dtype=wp.vec3d), X_WF: wp.transformd, X_WC: wp.transformd,
                 X_CM: wp.transformd) -> wp.spatial_vectord:
    """S of DOF ``ds + i`` of a non-floating joint: the child's twist at its origin per unit rate.

    Revolute / ball / D6 angular: ``[a; a × d]`` (a the world axis, turned by preceding D6
    angular axes; d = p_C − p_Mo); prismatic / D6 linear: ``[0; a]``.
    """
    zero = wp.float64(0.0)
    q_WF = wp.transform_get_rotation(X_WF)
    d = wp.transform_get_translation(X_WC) - wp.transform_point(X_WC, wp.transform_get_translation(X_CM))
    a = wp.vec3d(zero, zero, zero)
    linear = 0
    if jt == PRISMATIC:
        a = wp.quat_rotate(q_WF, axis[ds])
        linear = 1
    elif jt == REVOLUTE:
        a = wp.quat_rotate(q_WF, axis[ds])
    elif jt == BALL:  # the i-th unit vector, built without indexing a vector at run time (that needs a stack)
        one = wp.float64(1.0)
        a = wp.quat_rotate(q_WF, wp.vec3d(wp.where(i == 0, one, zero), wp.where(i == 1, one, zero),
                                          wp.where(i == 2, one, zero)))
    elif jt == D6:
        if i < nl:
            a = wp.quat_rotate(q_WF, axis[ds + i])
            linear = 1
        else:
            r = q_WF
            for k in range(nl, i):
                r = r * quat_axis_angle_d(axis[ds + k], q[qs + k])
            a = wp.quat_rotate(r, axis[ds + i])
    if linear == 1:
        return twist(wp.vec3d(zero, zero, zero), a)
    return twist(a, wp.cross(a, d))


@wp.kernel(enable_backward=False, module="unique")
def _forward_kinematics(
    joint_type: wp.array(dtype=int), joint_parent: wp.array(dtype=int), joint_child: wp.array(dtype=int),
    joint_X_p: wp.array(dtype=wp.transformd), joint_X_c: wp.array(dtype=wp.transformd),
    joint_q_start: wp.array(dtype=int), joint_qd_start: wp.array(dtype=int),
    joint_lin_count: wp.array(dtype=int), joint_ang_count: wp.array(dtype=int), joint_axis: wp.array(dtype=wp.vec3d),
    joint_order: wp.array(dtype=int), level_start: wp.array(dtype=int), level_count: int,
    joint_q_in: wp.array2d(dtype=wp.float64), joint_qd_in: wp.array2d(dtype=wp.float64),
    body_X_out: wp.array2d(dtype=wp.transformd), body_V_out: wp.array2d(dtype=wp.spatial_vectord),
    dof_S_out: wp.array2d(dtype=wp.spatial_vectord),
):
    """One block per world: the tree level by level, the joints of a level over the lanes, a
    block barrier between levels (a joint reads only its parent's pose and twist, one level up)."""
    world, lane = wp.tid()
    bd = wp.block_dim()
    q = joint_q_in[world]
    qd = joint_qd_in[world]
    zero = wp.float64(0.0)
    one = wp.float64(1.0)
    for level in range(level_count):
        for k in range(level_start[level] + lane, level_start[level + 1], bd):
            j = joint_order[k]
            jt = joint_type[j]
            c = joint_child[j]
            p = joint_parent[j]
            qs = joint_q_start[j]
            ds = joint_qd_start[j]
            nd = joint_qd_start[j + 1] - ds
            nl = joint_lin_count[j]
            na = joint_ang_count[j]
            X_FM = joint_transform(jt, qs, ds, nl, na, q, joint_axis)
            if jt == FREE or jt == DISTANCE:
                body_X_out[world, c] = X_FM
                V = wp.spatial_vectord(zero, zero, zero, zero, zero, zero)
                for i in range(6):
                    unit6 = wp.spatial_vectord(zero, zero, zero, zero, zero, zero)
                    unit6[i] = one
                    dof_S_out[world, ds + i] = unit6
                    V[i] = qd[ds + i]
                body_V_out[world, c] = V
                continue
            X_WF = joint_X_p[j]
            V_P = wp.spatial_vectord(zero, zero, zero, zero, zero, zero)
            p_P = wp.vec3d(zero, zero, zero)
            if p >= 0:
                X_WF = body_X_out[world, p] * joint_X_p[j]
                V_P = body_V_out[world, p]
                p_P = wp.transform_get_translation(body_X_out[world, p])
            X_WC = X_WF * X_FM * wp.transform_inverse(joint_X_c[j])
            body_X_out[world, c] = X_WC
            V = shift_twist(V_P, wp.transform_get_translation(X_WC) - p_P)
            for i in range(nd):
                S = dof_subspace(jt, i, ds, nl, qs, q, joint_axis, X_WF, X_WC, joint_X_c[j])
                dof_S_out[world, ds + i] = S
                V = V + S * qd[ds + i]
            body_V_out[world, c] = V
        block_sync(lane)  # this level's poses and twists stored before the next level reads them


def forward_kinematics(m, joint_q, joint_qd_sap, body_X, body_V, dof_S) -> None:
    """Launch: body poses ``body_X (W, B)``, twists ``body_V (W, B)`` and ``dof_S (W, nv)``.

    ``joint_qd_sap`` in SAP order. Counterpart of ``sap_ref.kinematics.forward_kinematics``,
    ``body_velocities`` and ``motion_subspaces``. One block of lanes per world, the tree level
    by level (``GpuModel.level_start``); each joint computes what the one-thread-per-world
    walk computed, from the same inputs, so the results are the same bits.
    """
    launch_blocks(_forward_kinematics, num_worlds=m.num_worlds, device=m.device, inputs=[m.joint_type,
                  m.joint_parent, m.joint_child, m.joint_X_p, m.joint_X_c, m.joint_q_start, m.joint_qd_start,
                  m.joint_lin_count, m.joint_ang_count, m.joint_axis, m.joint_order, m.level_start, m.level_count,
                  joint_q, joint_qd_sap], outputs=[body_X, body_V, dof_S])


@wp.kernel
def _body_poses(
    joint_type: wp.array(dtype=int), joint_parent: wp.array(dtype=int), joint_child: wp.array(dtype=int),
    joint_X_p: wp.array(dtype=wp.transformd), joint_X_c: wp.array(dtype=wp.transformd),
    joint_q_start: wp.array(dtype=int), joint_qd_start: wp.array(dtype=int),
    joint_lin_count: wp.array(dtype=int), joint_ang_count: wp.array(dtype=int), joint_axis: wp.array(dtype=wp.vec3d),
    joint_order: wp.array(dtype=int), joint_count: int,
    joint_q_in: wp.array2d(dtype=wp.float64), body_X_out: wp.array2d(dtype=wp.transformd),
):
    """The poses of _forward_kinematics alone (the same products, so the same bits)."""
    world = wp.tid()
    q = joint_q_in[world]
    for k in range(joint_count):
        j = joint_order[k]
        jt = joint_type[j]
        c = joint_child[j]
        p = joint_parent[j]
        X_FM = joint_transform(jt, joint_q_start[j], joint_qd_start[j], joint_lin_count[j], joint_ang_count[j], q,
                               joint_axis)
        if jt == FREE or jt == DISTANCE:
            body_X_out[world, c] = X_FM
            continue
        X_WF = joint_X_p[j]
        if p >= 0:
            X_WF = body_X_out[world, p] * joint_X_p[j]
        body_X_out[world, c] = X_WF * X_FM * wp.transform_inverse(joint_X_c[j])


def body_poses(m, joint_q, body_X) -> None:
    """Launch: body poses ``body_X (W, B)`` from ``joint_q`` alone (what :func:`forward_kinematics`
    writes there). Counterpart of ``sap_common.kinematics.forward_kinematics``."""
    launch_threads(_body_poses, dim=m.num_worlds, device=m.device, inputs=[m.joint_type, m.joint_parent, m.joint_child,
                   m.joint_X_p, m.joint_X_c, m.joint_q_start, m.joint_qd_start, m.joint_lin_count, m.joint_ang_count,
                   m.joint_axis, m.joint_order, m.joint_count, joint_q], outputs=[body_X])


@wp.kernel
def _motion_subspaces(
    joint_type: wp.array(dtype=int), joint_parent: wp.array(dtype=int), joint_child: wp.array(dtype=int),
    joint_X_p: wp.array(dtype=wp.transformd), joint_X_c: wp.array(dtype=wp.transformd),
    joint_q_start: wp.array(dtype=int), joint_qd_start: wp.array(dtype=int),
    joint_lin_count: wp.array(dtype=int), joint_axis: wp.array(dtype=wp.vec3d),
    joint_q_in: wp.array2d(dtype=wp.float64), body_X_in: wp.array2d(dtype=wp.transformd),
    dof_S_out: wp.array2d(dtype=wp.spatial_vectord),
):
    """One thread per (world, joint): the joint's subspaces read only given poses."""
    world, j = wp.tid()
    zero = wp.float64(0.0)
    jt = joint_type[j]
    ds = joint_qd_start[j]
    nd = joint_qd_start[j + 1] - ds
    if jt == FREE or jt == DISTANCE:
        for i in range(6):
            unit6 = wp.spatial_vectord(zero, zero, zero, zero, zero, zero)
            unit6[i] = wp.float64(1.0)
            dof_S_out[world, ds + i] = unit6
        return
    p = joint_parent[j]
    X_WF = joint_X_p[j]
    if p >= 0:
        X_WF = body_X_in[world, p] * joint_X_p[j]
    for i in range(nd):
        dof_S_out[world, ds + i] = dof_subspace(jt, i, ds, joint_lin_count[j], joint_q_start[j], joint_q_in[world],
                                                joint_axis, X_WF, body_X_in[world, joint_child[j]], joint_X_c[j])


@wp.kernel
def _round_poses(body_X_in: wp.array2d(dtype=wp.transformd), body_X_out: wp.array2d(dtype=wp.transformd)):
    w, b = wp.tid()
    X = body_X_in[w, b]
    for i in range(7):
        X[i] = wp.float64(wp.float32(X[i]))
    body_X_out[w, b] = X


def motion_subspaces(m, joint_q, body_X, dof_S) -> None:
    """Launch: ``dof_S (W, nv)`` from given body poses (sap_ref: ``motion_subspaces(model, q, body_q)``)."""
    if m.joint_count == 0:
        return
    launch_threads(_motion_subspaces, dim=(m.num_worlds, m.joint_count), device=m.device, inputs=[m.joint_type,
                   m.joint_parent, m.joint_child, m.joint_X_p, m.joint_X_c, m.joint_q_start, m.joint_qd_start,
                   m.joint_lin_count, m.joint_axis, joint_q, body_X], outputs=[dof_S])


def round_poses(body_X, body_X_out) -> None:
    """Launch: poses rounded through float32 (``use_f64_boundary_pose=False``)."""
    launch_threads(_round_poses, dim=body_X.shape, device=body_X.device, inputs=[body_X], outputs=[body_X_out])


# ----------------------------------------------------------------------------- point Jacobians
# Counterpart of sap_ref.kinematics.point_jacobian, added into a row block of J in place: the contact,
# limit and holonomic stages build their rows with these.


@wp.func
def add_point_jacobian(world: int, body: int, p: wp.vec3d, R_WC: wp.mat33d, sign: wp.float64, row: int,
                       body_parent: wp.array(dtype=int), body_joint: wp.array(dtype=int),
                       joint_qd_start: wp.array(dtype=int), body_X: wp.array2d(dtype=wp.transformd),
                       dof_S: wp.array2d(dtype=wp.spatial_vectord), J: wp.array3d(dtype=wp.float64)):
    """J[row:row+3] += sign · R_WCᵀ J_v(body, p) (the world, body −1, adds nothing)."""
    b = body
    Rt = wp.transpose(R_WC)
    while b >= 0:
        j = body_joint[b]
        o = wp.transform_get_translation(body_X[world, b])
        for k in range(joint_qd_start[j], joint_qd_start[j + 1]):
            S = dof_S[world, k]
            w = wp.vec3d(S[0], S[1], S[2])
            col = Rt * (wp.vec3d(S[3], S[4], S[5]) + wp.cross(w, p - o))
            for a in range(3):
                J[world, row + a, k] = J[world, row + a, k] + sign * col[a]
        b = body_parent[b]


@wp.func
def add_point_jacobian_along(world: int, body: int, p: wp.vec3d, n: wp.vec3d, sign: wp.float64, row: int,
                             body_parent: wp.array(dtype=int), body_joint: wp.array(dtype=int),
                             joint_qd_start: wp.array(dtype=int), body_X: wp.array2d(dtype=wp.transformd),
                             dof_S: wp.array2d(dtype=wp.spatial_vectord), J: wp.array3d(dtype=wp.float64)):
    """J[row] += sign · n̂ᵀ J_v(body, p): one direction of a point velocity (distance limits)."""
    b = body
    while b >= 0:
        j = body_joint[b]
        o = wp.transform_get_translation(body_X[world, b])
        for k in range(joint_qd_start[j], joint_qd_start[j + 1]):
            S = dof_S[world, k]
            col = wp.vec3d(S[3], S[4], S[5]) + wp.cross(wp.vec3d(S[0], S[1], S[2]), p - o)
            J[world, row, k] = J[world, row, k] + sign * wp.dot(n, col)
        b = body_parent[b]

"""Mass matrix, bias and gravity forces of one world, in SAP coordinates.

* ``mass_matrix`` — composite-rigid-body algorithm (CRBA), armature on the diagonal.
* ``bias_forces`` — ``C(q, v) v − τ_g`` by recursive Newton–Euler (RNEA) with q̈ = 0 and the
  gravity field applied as a base acceleration −g (MuJoCo's ``qfrc_bias``; Drake's
  ``CalcBiasTerm`` minus ``CalcGravityGeneralizedForces``).
* ``gravity_forces`` — τ_g.
* ``body_wrench_forces`` — generalized forces ``Σ_b J_bᵀ F_b`` of body wrenches.

All spatial quantities are world-frame, at each body origin, angular first (SAP order);
accelerations are classical (the acceleration of the body-origin point). See docs/formulation.md § Free motion.
"""

from __future__ import annotations

import numpy as np

from sap_common import spatial
from sap_common.model import JointType, SapModel

from .kinematics import body_jacobians, body_velocities, forward_kinematics, motion_subspaces

__all__ = [
    "body_spatial_inertias",
    "mass_matrix",
    "mass_matrix_jacobian_form",
    "bias_forces",
    "gravity_forces",
    "body_wrench_forces",
]

_FLOATING = (JointType.FREE, JointType.DISTANCE)


def _twist_shift(d: np.ndarray) -> np.ndarray:
    """``T(d) (6, 6)``: a twist at point A to the same motion at B = A + d: ``v_B = v_A + ω × d``."""
    T = np.eye(6)
    T[3:, :3] = -spatial.skew(d)
    return T


def body_spatial_inertias(model: SapModel, body_q: np.ndarray) -> np.ndarray:
    """``(B, 6, 6)`` spatial inertia of each body about its origin, world axes."""
    R = spatial.quat_to_matrix(body_q[:, 3:])
    com_W = np.einsum("bij,bj->bi", R, model.body_com)
    I_W = R @ model.body_inertia @ np.swapaxes(R, -1, -2)
    return spatial.spatial_inertia(model.body_mass, com_W, I_W)


def mass_matrix(model: SapModel, joint_q: np.ndarray, body_q=None, S=None) -> np.ndarray:
    """``M(q) (nv, nv)`` by the composite-rigid-body algorithm, armature added to the diagonal.

    Composite inertias ``Ic`` accumulate children into parents (shifted to the parent origin);
    ``M_jj = S_jᵀ Ic_c S_j`` and, walking up, ``M_ij = S_iᵀ F`` with ``F = Ic_c S_j`` moved to
    each ancestor's origin. ``body_q``/``S`` may be passed in when already computed.
    Drake: ``MultibodyTree::CalcMassMatrix``.
    """
    joint_q = np.asarray(joint_q, dtype=np.float64)
    body_q = forward_kinematics(model, joint_q) if body_q is None else body_q
    S = motion_subspaces(model, joint_q, body_q) if S is None else S
    Ic = body_spatial_inertias(model, body_q)
    parent = model.body_parent
    for j in model.joint_order[::-1]:  # children before parents
        c = int(model.joint_child[j])
        p = int(parent[c])
        if p >= 0:
            T = _twist_shift(body_q[c, :3] - body_q[p, :3])
            Ic[p] += T.T @ Ic[c] @ T
    M = np.zeros((model.joint_dof_count, model.joint_dof_count))
    for j in range(model.joint_count):
        cols_j = model.joint_qd_slice(j)
        if cols_j.stop == cols_j.start:
            continue
        b = int(model.joint_child[j])
        F = Ic[b] @ S[j]  # wrench at b's origin per unit joint-j velocity
        M_jj = S[j].T @ F
        M[cols_j, cols_j] = 0.5 * (M_jj + M_jj.T)  # symmetric up to rounding; make it exact
        while parent[b] >= 0:
            a = int(parent[b])
            F = _twist_shift(body_q[b, :3] - body_q[a, :3]).T @ F  # the same wrench about a's origin
            i = int(model.body_joint[a])
            cols_i = model.joint_qd_slice(i)
            M[cols_i, cols_j] = S[i].T @ F
            M[cols_j, cols_i] = M[cols_i, cols_j].T
            b = a
    M[np.diag_indices_from(M)] += model.joint_armature
    return M


def mass_matrix_jacobian_form(model: SapModel, joint_q: np.ndarray) -> np.ndarray:
    """``Σ_b J_bᵀ M_b J_b`` + armature: the mass matrix from body Jacobians (a check of CRBA)."""
    body_q = forward_kinematics(model, joint_q)
    J = body_jacobians(model, joint_q, body_q)
    Mb = body_spatial_inertias(model, body_q)
    M = np.einsum("bki,bkl,blj->ij", J, Mb, J)
    M[np.diag_indices_from(M)] += model.joint_armature
    return M


def _relative_motion(model: SapModel, j: int, joint_q, joint_qd):
    """Joint j's relative motion in F with q̈ = 0: ``(ω_rel, v_rel, α_rel)``.

    ω_rel = angular velocity of M in F, v_rel = velocity of Mo in F, α_rel = F-frame derivative
    of ω_rel. α_rel is non-zero only for D6 joints, whose later axes turn with the earlier ones.
    """
    jt = JointType(int(model.joint_type[j]))
    d0 = int(model.joint_qd_start[j])
    qd = joint_qd[model.joint_qd_slice(j)]
    w, v, alpha = np.zeros(3), np.zeros(3), np.zeros(3)
    if jt == JointType.REVOLUTE:
        w = model.joint_axis[d0] * qd[0]
    elif jt == JointType.PRISMATIC:
        v = model.joint_axis[d0] * qd[0]
    elif jt == JointType.BALL:
        w = qd.copy()
    elif jt == JointType.D6:
        nl, na = (int(x) for x in model.joint_dof_dim[j])
        q = joint_q[model.joint_q_slice(j)]
        v = qd[:nl] @ model.joint_axis[d0:d0 + nl]
        R = np.eye(3)
        for k in range(na):
            ax = model.joint_axis[d0 + nl + k]
            w_k = R @ ax * qd[nl + k]
            alpha = alpha + spatial.cross(w, w_k)  # d/dt(R_prefix a_k) = ω_prefix × (R_prefix a_k)
            w = w + w_k
            R = R @ spatial.quat_to_matrix(spatial.quat_from_axis_angle(ax, q[nl + k]))
    return w, v, alpha


def _inverse_dynamics_zero_acceleration(model: SapModel, joint_q, joint_qd, base_acceleration, body_q=None,
                                        S=None) -> np.ndarray:
    """RNEA with q̈ = 0 and the world accelerating at ``base_acceleration``: ``(nv,)`` forces.

    Forward pass (classical accelerations, parents first):
        ω_C = ω_P + ω_rel,   ω̇_C = ω̇_P + ω_P × ω_rel + α_rel
        a_Mo = a_Po + ω̇_P × r + ω_P × (ω_P × r) + 2 ω_P × v_rel      (r = p_Mo − p_Po)
        a_Co = a_Mo + ω̇_C × d + ω_C × (ω_C × d)                       (d = p_Co − p_Mo)
    Newton–Euler per body about its origin O (c = COM offset, I_C about the COM):
        f = m (a_O + ω̇ × c + ω × (ω × c)),   τ_O = I_C ω̇ + ω × I_C ω + c × f
    Backward pass: wrenches accumulate into parents; the joint force is ``S_jᵀ W_child``.
    """
    joint_q = np.asarray(joint_q, dtype=np.float64)
    joint_qd = np.asarray(joint_qd, dtype=np.float64)
    body_q = forward_kinematics(model, joint_q) if body_q is None else body_q
    V = body_velocities(model, joint_q, joint_qd, body_q)
    B = model.body_count
    w_dot, a_O = np.zeros((B, 3)), np.zeros((B, 3))
    g_base = np.asarray(base_acceleration, dtype=np.float64)
    for j in model.joint_order:
        c, p = int(model.joint_child[j]), int(model.joint_parent[j])
        if JointType(int(model.joint_type[j])) in _FLOATING:
            a_O[c] = g_base  # q̈ = 0: ω̇ = 0 and a_O = 0 relative to the accelerating world
            continue
        if p >= 0:
            X_WF = spatial.transform_compose(body_q[p], model.joint_X_p[j])
            w_P, w_dot_P, a_P, p_P = V[p, :3], w_dot[p], a_O[p], body_q[p, :3]
        else:
            X_WF = model.joint_X_p[j]
            w_P, w_dot_P, a_P, p_P = np.zeros(3), np.zeros(3), g_base, np.zeros(3)
        R_WF = spatial.quat_to_matrix(X_WF[3:])
        w_rel, v_rel, alpha_rel = (R_WF @ x for x in _relative_motion(model, j, joint_q, joint_qd))
        p_Mo = spatial.transform_point(body_q[c], model.joint_X_c[j, :3])
        r = p_Mo - p_P
        a_Mo = (a_P + spatial.cross(w_dot_P, r) + spatial.cross(w_P, spatial.cross(w_P, r))
                + 2.0 * spatial.cross(w_P, v_rel))
        w_C = V[c, :3]
        w_dot[c] = w_dot_P + spatial.cross(w_P, w_rel) + alpha_rel
        d = body_q[c, :3] - p_Mo
        a_O[c] = a_Mo + spatial.cross(w_dot[c], d) + spatial.cross(w_C, spatial.cross(w_C, d))

    R = spatial.quat_to_matrix(body_q[:, 3:])
    W = np.zeros((B, 6))  # [τ_O; f] at each body origin
    for b in range(B):
        c_W = R[b] @ model.body_com[b]
        I_C = R[b] @ model.body_inertia[b] @ R[b].T
        w = V[b, :3]
        f = model.body_mass[b] * (a_O[b] + spatial.cross(w_dot[b], c_W) + spatial.cross(w, spatial.cross(w, c_W)))
        W[b, :3] = I_C @ w_dot[b] + spatial.cross(w, I_C @ w) + spatial.cross(c_W, f)
        W[b, 3:] = f
    S = motion_subspaces(model, joint_q, body_q) if S is None else S
    tau = np.zeros(model.joint_dof_count)
    for j in model.joint_order[::-1]:  # children before parents
        c = int(model.joint_child[j])
        tau[model.joint_qd_slice(j)] = S[j].T @ W[c]
        p = int(model.body_parent[c])
        if p >= 0:
            W[p, :3] += W[c, :3] + spatial.cross(body_q[c, :3] - body_q[p, :3], W[c, 3:])
            W[p, 3:] += W[c, 3:]
    return tau


def bias_forces(model: SapModel, joint_q: np.ndarray, joint_qd: np.ndarray, body_q=None, S=None) -> np.ndarray:
    """``C(q, v) v − τ_g (nv,)``, joint_qd in SAP order (MuJoCo's ``qfrc_bias`` meaning)."""
    return _inverse_dynamics_zero_acceleration(model, joint_q, joint_qd, -model.gravity, body_q, S)


def gravity_forces(model: SapModel, joint_q: np.ndarray, body_q=None, S=None) -> np.ndarray:
    """``τ_g (nv,)``: generalized gravity forces (Drake's ``CalcGravityGeneralizedForces``)."""
    zero = np.zeros(model.joint_dof_count)
    return -_inverse_dynamics_zero_acceleration(model, joint_q, zero, -model.gravity, body_q, S)


def body_wrench_forces(model: SapModel, joint_q: np.ndarray, body_f: np.ndarray, body_q=None, S=None) -> np.ndarray:
    """``Σ_b J_bᵀ F_b (nv,)`` for body wrenches ``F_b = [τ_O; f]`` (SAP order, world, at origins)."""
    J = body_jacobians(model, joint_q, body_q, S)
    return np.einsum("bki,bk->i", J, np.asarray(body_f, dtype=np.float64))

"""Kinematics of one world: poses, velocities, motion subspaces S(q), Jacobians, N(q).

Spatial vectors are SAP order, world frame, at each body's origin: a body twist is
``V_b = [ω; v_O]`` and ``V_b = J_b(q) · qd`` with qd in SAP order. Poses and velocities come
from :mod:`sap_common.kinematics` (shared with the scene loaders); this module adds what
the dynamics and the contact Jacobians need. Drake: ``MultibodyTree::CalcJacobianSpatialVelocity``,
``Mobilizer::MapVelocityToQDot``.
"""

from __future__ import annotations

import numpy as np

from sap_common import kinematics as _kin
from sap_common import spatial
from sap_common.model import JointType, SapModel
from sap_common.state import SapState

__all__ = [
    "forward_kinematics",
    "body_velocities",
    "body_com_positions",
    "motion_subspaces",
    "body_jacobians",
    "point_jacobian",
    "qdot_map",
    "update_body_state",
]

_FLOATING = (JointType.FREE, JointType.DISTANCE)


def forward_kinematics(model: SapModel, joint_q: np.ndarray) -> np.ndarray:
    """World pose ``[p_WO, q_WB]`` of every body origin, ``(B, 7)`` (one world)."""
    return _kin.forward_kinematics(model, joint_q)[0]


def body_velocities(model: SapModel, joint_q: np.ndarray, joint_qd: np.ndarray, body_q=None) -> np.ndarray:
    """Body twists ``[ω; v_O]`` (world, at each origin), ``(B, 6)``; ``joint_qd`` in SAP order."""
    bq = None if body_q is None else body_q[None]
    return _kin.body_velocities(model, joint_q, joint_qd, bq)[0]


def body_com_positions(model: SapModel, body_q: np.ndarray) -> np.ndarray:
    """World position of every body's centre of mass, ``(B, 3)``."""
    return spatial.transform_point(body_q, model.body_com)


def _shift_rows(J: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Jacobian of a twist moved by ``r`` along the same body: ``v' = v + ω × r``."""
    out = J.copy()
    out[3:] = J[3:] - spatial.skew(r) @ J[:3]
    return out


def motion_subspaces(model: SapModel, joint_q: np.ndarray, body_q=None) -> list[np.ndarray]:
    """Per joint, ``S_j (6, nv_j)``: the child's twist at its origin per unit joint velocity.

    The parent held still, ``V_child = S_j qd_j`` (world frame, SAP order). Revolute:
    ``[a; a × d]`` with a the world axis and d = p_Co − p_Mo; prismatic ``[0; a]``; ball
    ``[R_WF; −[d]× R_WF]`` (ω in F); FREE/DISTANCE the identity; D6 linear axes ``[0; l]``,
    angular axes ``[a_k; a_k × d]`` with a_k rotated by the preceding angular axes.
    """
    joint_q = np.asarray(joint_q, dtype=np.float64)
    if body_q is None:
        body_q = forward_kinematics(model, joint_q)
    S = []
    for j in range(model.joint_count):
        jt = JointType(int(model.joint_type[j]))
        c, p = int(model.joint_child[j]), int(model.joint_parent[j])
        d0, n = int(model.joint_qd_start[j]), int(model.joint_qd_start[j + 1] - model.joint_qd_start[j])
        Sj = np.zeros((6, n))
        if jt in _FLOATING:
            Sj[:] = np.eye(6)
            S.append(Sj)
            continue
        X_WF = spatial.transform_compose(body_q[p], model.joint_X_p[j]) if p >= 0 else model.joint_X_p[j]
        R_WF = spatial.quat_to_matrix(X_WF[3:])
        d = body_q[c, :3] - spatial.transform_point(body_q[c], model.joint_X_c[j, :3])
        if jt == JointType.REVOLUTE:
            a = R_WF @ model.joint_axis[d0]
            Sj[:, 0] = np.concatenate([a, spatial.cross(a, d)])
        elif jt == JointType.PRISMATIC:
            Sj[3:, 0] = R_WF @ model.joint_axis[d0]
        elif jt == JointType.BALL:
            Sj[:3] = R_WF
            Sj[3:] = -spatial.skew(d) @ R_WF
        elif jt == JointType.D6:
            nl, na = (int(x) for x in model.joint_dof_dim[j])
            q = joint_q[model.joint_q_slice(j)]
            for i in range(nl):
                Sj[3:, i] = R_WF @ model.joint_axis[d0 + i]
            R = R_WF.copy()  # rotation applied before angular axis k
            for k in range(na):
                ax = model.joint_axis[d0 + nl + k]
                a = R @ ax
                Sj[:, nl + k] = np.concatenate([a, spatial.cross(a, d)])
                R = R @ spatial.quat_to_matrix(spatial.quat_from_axis_angle(ax, q[nl + k]))
        S.append(Sj)
    return S


def body_jacobians(model: SapModel, joint_q: np.ndarray, body_q=None, S=None) -> np.ndarray:
    """``J (B, 6, nv)`` with ``V_b = J[b] · qd`` (SAP order, world frame, at each body origin).

    Built parents first: ``J_c = shift(J_p, p_Co − p_Po) + S_j`` in joint j's columns.
    """
    joint_q = np.asarray(joint_q, dtype=np.float64)
    if body_q is None:
        body_q = forward_kinematics(model, joint_q)
    if S is None:
        S = motion_subspaces(model, joint_q, body_q)
    J = np.zeros((model.body_count, 6, model.joint_dof_count))
    for j in model.joint_order:
        c, p = int(model.joint_child[j]), int(model.body_parent[model.joint_child[j]])
        if p >= 0:
            J[c] = _shift_rows(J[p], body_q[c, :3] - body_q[p, :3])
        J[c][:, model.joint_qd_slice(j)] += S[j]
    return J


def point_jacobian(model: SapModel, body: int, p_W: np.ndarray, body_q: np.ndarray, J_bodies: np.ndarray) -> np.ndarray:
    """``(3, nv)`` Jacobian of the velocity of the point of ``body`` at world position ``p_W``.

    ``v_P = v_O + ω × (p_W − p_O)``. Body −1 (the world) gives zeros.
    """
    if body < 0:
        return np.zeros((3, model.joint_dof_count))
    return _shift_rows(J_bodies[body], np.asarray(p_W, dtype=np.float64) - body_q[body, :3])[3:]


def qdot_map(model: SapModel, joint_q: np.ndarray) -> np.ndarray:
    """``N(q) (nq, nv)`` with ``q̇ = N(q) · qd`` (qd in SAP order).

    Scalar coordinates: 1. Ball: ``½ Q(q)`` with ω in F. FREE/DISTANCE: ``ṗ = v_O`` and
    ``q̇_quat = ½ Q(q) ω``. Q uses the stored, unnormalized quaternion (Drake's
    ``QuaternionFloatingMobilizer``, docs/formulation.md § Integration).
    """
    joint_q = np.asarray(joint_q, dtype=np.float64)
    N = np.zeros((model.joint_coord_count, model.joint_dof_count))
    for j in range(model.joint_count):
        jt = JointType(int(model.joint_type[j]))
        q0, d0 = int(model.joint_q_start[j]), int(model.joint_qd_start[j])
        if jt == JointType.BALL:
            N[q0:q0 + 4, d0:d0 + 3] = spatial.quat_derivative_matrix(joint_q[q0:q0 + 4])
        elif jt in _FLOATING:
            N[q0:q0 + 3, d0 + 3:d0 + 6] = np.eye(3)
            N[q0 + 3:q0 + 7, d0:d0 + 3] = spatial.quat_derivative_matrix(joint_q[q0 + 3:q0 + 7])
        else:
            n = int(model.joint_q_start[j + 1]) - q0
            N[q0:q0 + n, d0:d0 + n] = np.eye(n)
    return N


def update_body_state(model: SapModel, state: SapState) -> None:
    """Fill ``state.body_q`` and ``state.body_qd`` (public) from its joint coordinates."""
    body_q, body_qd = _kin.body_state(model, state.joint_q, state.joint_qd, state.joint_qd_order)
    state.body_q[...] = body_q
    state.body_qd[...] = body_qd

"""Joint transforms and forward kinematics (poses and velocities), batched over worlds.

Shared by both implementations' hosts: ``SapModel.state()`` fills ``body_q``/``body_qd``
with it, the scene loaders check it against Drake's recorded poses, and ``sap_ref``'s
kinematics builds on it (motion subspaces, N(q), Jacobians) instead of repeating it.

All arrays are float64 with a leading world axis: ``joint_q (W, nq)``, ``joint_qd (W, nv)``,
``body_q (W, B, 7)`` = ``[p_WO, q_WB]`` of each body origin O, and body twists
``V_WB (W, B, 6)`` = ``[ω; v_O]`` (SAP order, world frame, at the body origin).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from . import spatial
from .conventions import body_twist_sap_to_public, check_order, joint_qd_public_to_sap
from .enums import JointType

if TYPE_CHECKING:  # annotations only: model imports this module
    from .model import SapModel

__all__ = [
    "joint_transform",
    "joint_twist",
    "forward_kinematics",
    "body_velocities",
    "body_state",
]


def _batch(a, width: int, name: str) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    if a.ndim == 1:
        a = a[None]
    if a.ndim != 2 or a.shape[1] != width:
        raise ValueError(f"{name}: expected shape (num_worlds, {width}) or ({width},), got {a.shape}")
    return a


def joint_transform(model: SapModel, j: int, joint_q: np.ndarray) -> np.ndarray:
    """X_FM(q) of joint ``j`` (frame M in frame F), ``(W, 7)``.

    FREE/DISTANCE joints are not relative to their parent; for them this returns the world
    pose of the child body origin stored in q.
    """
    joint_q = _batch(joint_q, model.joint_coord_count, "joint_q")
    W = joint_q.shape[0]
    jt = JointType(int(model.joint_type[j]))
    q = joint_q[:, model.joint_q_slice(j)]
    d0 = int(model.joint_qd_start[j])
    X = spatial.transform_identity(W)
    if jt == JointType.PRISMATIC:
        X[:, :3] = q[:, :1] * model.joint_axis[d0]
    elif jt == JointType.REVOLUTE:
        X[:, 3:] = spatial.quat_from_axis_angle(np.broadcast_to(model.joint_axis[d0], (W, 3)), q[:, 0])
    elif jt == JointType.BALL:
        X[:, 3:] = spatial.quat_normalize(q)
    elif jt in (JointType.FREE, JointType.DISTANCE):
        X[:, :3] = q[:, :3]
        X[:, 3:] = spatial.quat_normalize(q[:, 3:7])
    elif jt == JointType.D6:
        nl, na = (int(x) for x in model.joint_dof_dim[j])
        X[:, :3] = q[:, :nl] @ model.joint_axis[d0:d0 + nl]
        for k in range(na):
            a = np.broadcast_to(model.joint_axis[d0 + nl + k], (W, 3))
            X[:, 3:] = spatial.quat_multiply(X[:, 3:], spatial.quat_from_axis_angle(a, q[:, nl + k]))
    return X


def joint_twist(model: SapModel, j: int, joint_q: np.ndarray, joint_qd_sap: np.ndarray):
    """Relative motion of frame M in frame F: ``(ω_FM_F, v_FMo_F)``, each ``(W, 3)``.

    ``joint_qd_sap`` is in SAP order. For FREE/DISTANCE joints the result is the child
    body's world twist ``(ω, v_O)``.
    """
    joint_q = _batch(joint_q, model.joint_coord_count, "joint_q")
    qd = _batch(joint_qd_sap, model.joint_dof_count, "joint_qd")[:, model.joint_qd_slice(j)]
    W = joint_q.shape[0]
    jt = JointType(int(model.joint_type[j]))
    d0 = int(model.joint_qd_start[j])
    w, v = np.zeros((W, 3)), np.zeros((W, 3))
    if jt == JointType.PRISMATIC:
        v = qd[:, :1] * model.joint_axis[d0]
    elif jt == JointType.REVOLUTE:
        w = qd[:, :1] * model.joint_axis[d0]
    elif jt == JointType.BALL:
        w = qd.copy()
    elif jt in (JointType.FREE, JointType.DISTANCE):
        w, v = qd[:, :3].copy(), qd[:, 3:6].copy()
    elif jt == JointType.D6:
        nl, na = (int(x) for x in model.joint_dof_dim[j])
        q = joint_q[:, model.joint_q_slice(j)]
        v = qd[:, :nl] @ model.joint_axis[d0:d0 + nl]
        R = spatial.quat_identity(W)  # rotation applied before angular axis k
        for k in range(na):
            a = np.broadcast_to(model.joint_axis[d0 + nl + k], (W, 3))
            w = w + spatial.quat_rotate(R, a) * qd[:, nl + k:nl + k + 1]
            R = spatial.quat_multiply(R, spatial.quat_from_axis_angle(a, q[:, nl + k]))
    return w, v


def forward_kinematics(model: SapModel, joint_q: np.ndarray) -> np.ndarray:
    """World pose of every body origin, ``body_q (W, B, 7)``, quaternions normalized.

    ``X_WC = X_WP · X_PF · X_FM(q) · X_CM⁻¹`` joint by joint, parents first; FREE and
    DISTANCE joints store ``X_WC`` directly.
    """
    joint_q = _batch(joint_q, model.joint_coord_count, "joint_q")
    W = joint_q.shape[0]
    body_q = np.zeros((W, model.body_count, 7))
    for j in model.joint_order:
        c, p = int(model.joint_child[j]), int(model.joint_parent[j])
        X_FM = joint_transform(model, j, joint_q)
        if JointType(int(model.joint_type[j])) in (JointType.FREE, JointType.DISTANCE):
            body_q[:, c] = X_FM
            continue
        X_WF = spatial.transform_compose(body_q[:, p], model.joint_X_p[j]) if p >= 0 else (
            np.broadcast_to(model.joint_X_p[j], (W, 7))
        )
        X_WM = spatial.transform_compose(X_WF, X_FM)
        body_q[:, c] = spatial.transform_compose(X_WM, spatial.transform_inverse(model.joint_X_c[j]))
    return body_q


def body_velocities(model: SapModel, joint_q, joint_qd_sap, body_q=None) -> np.ndarray:
    """World twist ``[ω; v_O]`` of every body at its origin, ``(W, B, 6)``.

    ``ω_C = ω_P + R_WF ω_FM``; the point Mo moves with ``v_Po + ω_P × (p_Mo − p_Po) + R_WF v_FM``
    and the child origin with ``v_Mo + ω_C × (p_Co − p_Mo)``.
    """
    joint_q = _batch(joint_q, model.joint_coord_count, "joint_q")
    qd = _batch(joint_qd_sap, model.joint_dof_count, "joint_qd")
    if body_q is None:
        body_q = forward_kinematics(model, joint_q)
    W = joint_q.shape[0]
    V = np.zeros((W, model.body_count, 6))
    for j in model.joint_order:
        c, p = int(model.joint_child[j]), int(model.joint_parent[j])
        w_rel, v_rel = joint_twist(model, j, joint_q, qd)
        if JointType(int(model.joint_type[j])) in (JointType.FREE, JointType.DISTANCE):
            V[:, c, :3], V[:, c, 3:] = w_rel, v_rel
            continue
        if p >= 0:
            X_WF = spatial.transform_compose(body_q[:, p], model.joint_X_p[j])
            w_P, v_P, p_P = V[:, p, :3], V[:, p, 3:], body_q[:, p, :3]
        else:
            X_WF = np.broadcast_to(model.joint_X_p[j], (W, 7))
            w_P, v_P, p_P = np.zeros((W, 3)), np.zeros((W, 3)), np.zeros((W, 3))
        p_Mo = spatial.transform_point(body_q[:, c], model.joint_X_c[j, :3])
        w_C = w_P + spatial.transform_vector(X_WF, w_rel)
        v_Mo = v_P + spatial.cross(w_P, p_Mo - p_P) + spatial.transform_vector(X_WF, v_rel)
        V[:, c, :3] = w_C
        V[:, c, 3:] = v_Mo + spatial.cross(w_C, body_q[:, c, :3] - p_Mo)
    return V


def body_state(model: SapModel, joint_q, joint_qd, joint_qd_order: str):
    """``(body_q (W, B, 7), body_qd (W, B, 6))`` with ``body_qd`` public ``[v_C, ω]``."""
    check_order("joint_qd_order", joint_qd_order)
    joint_q = _batch(joint_q, model.joint_coord_count, "joint_q")
    qd = _batch(joint_qd, model.joint_dof_count, "joint_qd")
    if joint_qd_order == "public":
        qd = joint_qd_public_to_sap(model, joint_q, qd)
    body_q = forward_kinematics(model, joint_q)
    V = body_velocities(model, joint_q, qd, body_q)
    return body_q, body_twist_sap_to_public(model, body_q, V)

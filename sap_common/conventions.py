"""The public ↔ SAP boundary: the one place where velocity and force orders are converted.

docs/conventions.md. Only FREE and DISTANCE joint segments (and body wrenches/twists) differ:

========  =========================  =========================
          public                     sap
========  =========================  =========================
twist     ``[v_C, ω]`` (COM first)   ``[ω, v_O]`` (body origin)
wrench    ``[f, τ_C]`` (about COM)   ``[τ_O, f]`` (about origin)
========  =========================  =========================

All vectors in world coordinates. With ``r = r_OC`` the body-origin-to-COM offset in world
(``R_WB · body_com``):

    v_O = v_C − ω × r          τ_O = τ_C + r × f

so ``x_sap = P_v(r) x_pub`` for twists and ``w_sap = P_f(r) w_pub`` for wrenches, with
``P_f(r) = P_v(r)^{-T}``: the power ``wᵀx`` is the same in both orders. ``r`` rotates with
the body, so the conversion uses the current ``joint_q``/``body_q`` and is redone every step.

Array converters take arrays with or without the leading world axis and return new arrays
(inputs are never modified). Revolute, prismatic, ball, fixed and D6 segments are copied.
``pose_dtype=np.float32`` evaluates r from the pose rounded to float32 (the solvers'
``use_f64_boundary_pose=False``); the arithmetic of the conversion stays float64.
"""

from __future__ import annotations

import numpy as np

from . import spatial
from .constants import QUAT_NORM_MAX, QUAT_NORM_MIN
from .enums import JointType

__all__ = [
    "ORDERS",
    "check_order",
    "check_num_worlds",
    "quaternion_norm_ok",
    "quaternion_coords",
    "joint_quaternions_ok",
    "P_v",
    "P_f",
    "floating_joint_com_offsets",
    "joint_qd_public_to_sap",
    "joint_qd_sap_to_public",
    "joint_f_public_to_sap",
    "joint_f_sap_to_public",
    "body_f_public_to_sap",
    "body_f_sap_to_public",
    "body_twist_sap_to_public",
    "body_twist_public_to_sap",
]

ORDERS = ("public", "sap")

_FLOATING_TYPES = (int(JointType.FREE), int(JointType.DISTANCE))


def check_order(field: str, value) -> str:
    """Return ``value`` if it is a valid order flag, else raise ``ValueError`` naming ``field``."""
    if value not in ORDERS:
        raise ValueError(f"{field}: must be one of {', '.join(map(repr, ORDERS))}, got {value!r}")
    return value


def check_num_worlds(num_worlds) -> int:
    """``num_worlds`` as an int if it is an integer >= 1, else ``ValueError`` naming it (every
    function that takes a number of worlds checks it here, before any other work)."""
    if isinstance(num_worlds, bool) or not isinstance(num_worlds, (int, np.integer)) or num_worlds < 1:
        raise ValueError(f"num_worlds: must be an integer >= 1, got {num_worlds!r}")
    return int(num_worlds)


def quaternion_norm_ok(q) -> np.ndarray:
    """Is each quaternion ``q (..., 4)`` accepted: finite with QUAT_NORM_MIN ≤ |q| ≤ QUAT_NORM_MAX?

    The quaternion policy of both backends (docs/conventions.md, ``sap_common.constants``):
    accepted quaternions are normalized on read; the others reject their world. |q|² is summed
    as ((x² + y²) + z²) + w² in float64, the order sap_gpu's kernels use, so both backends
    decide alike; a NaN or ±inf component fails the test (NaN compares false, inf overflows).
    """
    q = np.asarray(q, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow to inf and NaN are what the test rejects
        n2 = ((q[..., 0] * q[..., 0] + q[..., 1] * q[..., 1]) + q[..., 2] * q[..., 2]) + q[..., 3] * q[..., 3]
    return (n2 >= QUAT_NORM_MIN * QUAT_NORM_MIN) & (n2 <= QUAT_NORM_MAX * QUAT_NORM_MAX)


def quaternion_coords(model) -> np.ndarray:
    """Index in ``joint_q`` of the first coordinate of every quaternion (BALL: the joint's 4
    coordinates; FREE/DISTANCE: coordinates 3:7), joints in index order, ``(K,)`` int32."""
    starts = []
    for j, t in enumerate(model.joint_type):
        q0 = int(model.joint_q_start[j])
        if int(t) == JointType.BALL:
            starts.append(q0)
        elif int(t) in _FLOATING_TYPES:
            starts.append(q0 + 3)
    return np.array(starts, dtype=np.int32)


def joint_quaternions_ok(model, joint_q) -> np.ndarray:
    """Per world, are all quaternions of ``joint_q (W, nq)`` accepted (:func:`quaternion_norm_ok`)? ``(W,)`` bool."""
    q = np.asarray(joint_q, dtype=np.float64)
    q = q[None] if q.ndim == 1 else q
    idx = quaternion_coords(model)
    if len(idx) == 0:
        return np.ones(q.shape[0], dtype=bool)
    quats = q[:, idx[:, None] + np.arange(4)]  # (W, K, 4)
    return np.all(quaternion_norm_ok(quats), axis=1)


def P_v(r) -> np.ndarray:
    """Twist map ``[v_C; ω] ↦ [ω; v_O]``: ``[[0, 1], [1, [r]×]]``, shape ``(..., 6, 6)``."""
    r = np.asarray(r, dtype=np.float64)
    I = np.broadcast_to(np.eye(3), r.shape[:-1] + (3, 3))
    Z = np.zeros_like(I)
    return np.concatenate(
        [np.concatenate([Z, I], -1), np.concatenate([I, spatial.skew(r)], -1)], -2
    )


def P_f(r) -> np.ndarray:
    """Wrench map ``[f; τ_C] ↦ [τ_O; f]``: ``[[[r]×, 1], [1, 0]] = P_v(r)^{-T}``."""
    r = np.asarray(r, dtype=np.float64)
    I = np.broadcast_to(np.eye(3), r.shape[:-1] + (3, 3))
    Z = np.zeros_like(I)
    return np.concatenate(
        [np.concatenate([spatial.skew(r), I], -1), np.concatenate([I, Z], -1)], -2
    )


def _floating_joints(model) -> np.ndarray:
    return np.flatnonzero(np.isin(model.joint_type, _FLOATING_TYPES))


def _as_batch(a, width: int, name: str):
    a = np.asarray(a, dtype=np.float64)
    single = a.ndim == 1
    a2 = a[None] if single else a
    if a2.ndim != 2 or a2.shape[1] != width:
        raise ValueError(f"{name}: expected shape (num_worlds, {width}) or ({width},), got {a.shape}")
    return a2, single


def _rotate_com(quat, com, pose_dtype) -> np.ndarray:
    """``R(q/|q|) · com`` evaluated in ``pose_dtype`` (float32 rounds the pose first), as float64."""
    if np.dtype(pose_dtype) == np.float64:
        return spatial.quat_rotate(spatial.quat_normalize(quat), com)
    if np.dtype(pose_dtype) != np.float32:
        raise ValueError(f"pose_dtype: must be float32 or float64, got {np.dtype(pose_dtype).name}")
    q32 = np.asarray(quat, dtype=np.float32)
    q32 = q32 / np.linalg.norm(q32, axis=-1, keepdims=True)
    c32 = np.asarray(com, dtype=np.float32)
    u, w = q32[..., :3], q32[..., 3:]
    t = np.float32(2.0) * spatial.cross(u, c32)
    return (c32 + w * t + spatial.cross(u, t)).astype(np.float64)


def floating_joint_com_offsets(model, joint_q, pose_dtype=np.float64) -> tuple[np.ndarray, np.ndarray]:
    """``(joints, r)``: the FREE/DISTANCE joint indices and ``r_OC`` in world, ``(W, n, 3)``.

    ``pose_dtype=np.float32`` evaluates r from the pose rounded to float32 (the
    ``use_f64_boundary_pose=False`` setting); the conversion itself stays float64.
    """
    q, _ = _as_batch(joint_q, model.joint_coord_count, "joint_q")
    joints = _floating_joints(model)
    r = np.zeros((q.shape[0], len(joints), 3))
    for k, j in enumerate(joints):
        q0 = int(model.joint_q_start[j])
        r[:, k] = _rotate_com(q[:, q0 + 3:q0 + 7], model.body_com[model.joint_child[j]], pose_dtype)
    return joints, r


def _convert_joint_array(model, joint_q, x, name, convert, pose_dtype=np.float64):
    q, _ = _as_batch(joint_q, model.joint_coord_count, "joint_q")
    x2, single = _as_batch(x, model.joint_dof_count, name)
    if q.shape[0] != x2.shape[0]:
        raise ValueError(f"{name}: {x2.shape[0]} worlds but joint_q has {q.shape[0]}")
    out = x2.copy()
    joints, r = floating_joint_com_offsets(model, q, pose_dtype)
    for k, j in enumerate(joints):
        d0 = int(model.joint_qd_start[j])
        out[:, d0:d0 + 6] = convert(x2[:, d0:d0 + 6], r[:, k])
    return out[0] if single else out


def _twist_pub_to_sap(x, r):  # [v_C, ω] -> [ω, v_O]
    v_C, w = x[..., :3], x[..., 3:]
    return np.concatenate([w, v_C - spatial.cross(w, r)], -1)


def _twist_sap_to_pub(x, r):  # [ω, v_O] -> [v_C, ω]
    w, v_O = x[..., :3], x[..., 3:]
    return np.concatenate([v_O + spatial.cross(w, r), w], -1)


def _wrench_pub_to_sap(x, r):  # [f, τ_C] -> [τ_O, f]
    f, tau_C = x[..., :3], x[..., 3:]
    return np.concatenate([tau_C + spatial.cross(r, f), f], -1)


def _wrench_sap_to_pub(x, r):  # [τ_O, f] -> [f, τ_C]
    tau_O, f = x[..., :3], x[..., 3:]
    return np.concatenate([f, tau_O - spatial.cross(r, f)], -1)


def joint_qd_public_to_sap(model, joint_q, joint_qd, pose_dtype=np.float64) -> np.ndarray:
    """Joint velocities, public → SAP order (FREE/DISTANCE: ``[v_C, ω] → [ω, v_O]``)."""
    return _convert_joint_array(model, joint_q, joint_qd, "joint_qd", _twist_pub_to_sap, pose_dtype)


def joint_qd_sap_to_public(model, joint_q, joint_qd, pose_dtype=np.float64) -> np.ndarray:
    """Joint velocities, SAP → public order (FREE/DISTANCE: ``[ω, v_O] → [v_C, ω]``)."""
    return _convert_joint_array(model, joint_q, joint_qd, "joint_qd", _twist_sap_to_pub, pose_dtype)


def joint_f_public_to_sap(model, joint_q, joint_f, pose_dtype=np.float64) -> np.ndarray:
    """Generalized forces, public → SAP order (FREE/DISTANCE: ``[f, τ_C] → [τ_O, f]``)."""
    return _convert_joint_array(model, joint_q, joint_f, "joint_f", _wrench_pub_to_sap, pose_dtype)


def joint_f_sap_to_public(model, joint_q, joint_f, pose_dtype=np.float64) -> np.ndarray:
    """Generalized forces, SAP → public order (FREE/DISTANCE: ``[τ_O, f] → [f, τ_C]``)."""
    return _convert_joint_array(model, joint_q, joint_f, "joint_f", _wrench_sap_to_pub, pose_dtype)


def _body_r(model, body_q: np.ndarray, pose_dtype=np.float64) -> np.ndarray:
    return _rotate_com(body_q[..., 3:], model.body_com, pose_dtype)


def _as_body_batch(a, model, width: int, name: str):
    a = np.asarray(a, dtype=np.float64)
    single = a.ndim == 2
    a3 = a[None] if single else a
    if a3.ndim != 3 or a3.shape[1:] != (model.body_count, width):
        raise ValueError(
            f"{name}: expected shape (num_worlds, {model.body_count}, {width}) or "
            f"({model.body_count}, {width}), got {a.shape}"
        )
    return a3, single


def _convert_body_array(model, body_q, x, name, convert, pose_dtype=np.float64):
    bq, _ = _as_body_batch(body_q, model, 7, "body_q")
    x3, single = _as_body_batch(x, model, 6, name)
    if bq.shape[0] != x3.shape[0]:
        raise ValueError(f"{name}: {x3.shape[0]} worlds but body_q has {bq.shape[0]}")
    out = convert(x3, _body_r(model, bq, pose_dtype))
    return out[0] if single else out


def body_f_public_to_sap(model, body_q, body_f, pose_dtype=np.float64) -> np.ndarray:
    """Body wrenches ``(W, B, 6)``: public ``[f, τ_C]`` → SAP ``[τ_O, f]`` (every body)."""
    return _convert_body_array(model, body_q, body_f, "body_f", _wrench_pub_to_sap, pose_dtype)


def body_f_sap_to_public(model, body_q, body_f, pose_dtype=np.float64) -> np.ndarray:
    """Body wrenches ``(W, B, 6)``: SAP ``[τ_O, f]`` → public ``[f, τ_C]``."""
    return _convert_body_array(model, body_q, body_f, "body_f", _wrench_sap_to_pub, pose_dtype)


def body_twist_sap_to_public(model, body_q, V, pose_dtype=np.float64) -> np.ndarray:
    """Body twists ``(W, B, 6)``: SAP ``[ω, v_O]`` → public ``body_qd`` ``[v_C, ω]``."""
    return _convert_body_array(model, body_q, V, "body_qd", _twist_sap_to_pub, pose_dtype)


def body_twist_public_to_sap(model, body_q, body_qd, pose_dtype=np.float64) -> np.ndarray:
    """Body twists ``(W, B, 6)``: public ``[v_C, ω]`` → SAP ``[ω, v_O]``."""
    return _convert_body_array(model, body_q, body_qd, "body_qd", _twist_pub_to_sap, pose_dtype)

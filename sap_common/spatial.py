"""Rotations, rigid transforms and spatial (6-D) algebra, float64, NumPy only.

Conventions (docs/conventions.md):

* Quaternions are ``[x, y, z, w]`` (scalar last, as ``wp.quat``), Hamilton product,
  ``q_AB`` rotates vectors from frame B to frame A: ``v_A = R(q_AB) v_B``.
* A transform ``X_AB`` is a length-7 array ``[p_AoBo_A, q_AB]``; ``X_AC = X_AB ∘ X_BC``.
* Spatial vectors are angular-first: a twist is ``[ω; v]``, a wrench is ``[τ; f]``; both
  taken at a named point and expressed in a named frame.

Every function accepts leading batch dimensions (``(..., 4)``, ``(..., 7)``, ``(..., 3)``)
unless its docstring says otherwise. Functions that build a rotation from a quaternion
normalize it first, as Drake does, so the unnormalized quaternions of Drake's discrete
update (docs/formulation.md § Integration) are handled without further care.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "cross",
    "skew",
    "quat_identity",
    "quat_multiply",
    "quat_conjugate",
    "quat_inverse",
    "quat_normalize",
    "quat_rotate",
    "quat_rotate_inv",
    "quat_to_matrix",
    "quat_from_matrix",
    "quat_from_axis_angle",
    "quat_to_axis_angle",
    "quat_exp",
    "quat_log",
    "quat_integrate",
    "quat_derivative",
    "quat_derivative_matrix",
    "quat_from_rpy",
    "quat_canonical",
    "quat_angle_between",
    "transform_identity",
    "transform",
    "transform_compose",
    "transform_inverse",
    "transform_point",
    "transform_vector",
    "transform_to_matrix",
    "spatial_cross_motion",
    "spatial_cross_force",
    "spatial_cross_motion_matrix",
    "spatial_cross_force_matrix",
    "spatial_adjoint",
    "spatial_adjoint_force",
    "spatial_inertia",
]

_EPS_NORM = 1e-300  # below this a quaternion has no direction; normalizing it is an error


def _as_f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def cross(a, b) -> np.ndarray:
    """``a × b`` for ``(..., 3)`` arrays; equal to ``np.cross``, several times faster on 3-vectors."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.ndim == 1 and b.ndim == 1:
        return np.array([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]])
    a0, a1, a2, b0, b1, b2 = a[..., 0], a[..., 1], a[..., 2], b[..., 0], b[..., 1], b[..., 2]
    return np.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], -1)


def skew(v) -> np.ndarray:
    """Cross-product matrix: ``skew(a) @ b == a × b``. Shape ``(..., 3) -> (..., 3, 3)``."""
    v = _as_f64(v)
    x, y, z = v[..., 0], v[..., 1], v[..., 2]
    o = np.zeros_like(x)
    return np.stack(
        [np.stack([o, -z, y], -1), np.stack([z, o, -x], -1), np.stack([-y, x, o], -1)], -2
    )


# --------------------------------------------------------------------------- quaternions


def _shape(shape) -> tuple:
    return (int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape)


def quat_identity(shape=()) -> np.ndarray:
    """The identity rotation ``[0, 0, 0, 1]``, of shape ``shape + (4,)``."""
    q = np.zeros(_shape(shape) + (4,))
    q[..., 3] = 1.0
    return q


def quat_multiply(a, b) -> np.ndarray:
    """Hamilton product ``a ⊗ b`` (apply b first, then a, when both rotate vectors)."""
    a, b = _as_f64(a), _as_f64(b)
    ax, ay, az, aw = a[..., 0], a[..., 1], a[..., 2], a[..., 3]
    bx, by, bz, bw = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
    return np.stack(
        [
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
            aw * bw - ax * bx - ay * by - az * bz,
        ],
        -1,
    )


def quat_conjugate(q) -> np.ndarray:
    """``[-x, -y, -z, w]``: the inverse rotation of a unit quaternion."""
    q = _as_f64(q)
    return np.concatenate([-q[..., :3], q[..., 3:]], -1)


def quat_inverse(q) -> np.ndarray:
    """Multiplicative inverse ``q* / |q|²`` (exact for unnormalized quaternions too)."""
    q = _as_f64(q)
    return quat_conjugate(q) / np.sum(q * q, -1, keepdims=True)


def quat_normalize(q) -> np.ndarray:
    """``q / |q|``. Raises ``ValueError`` for a (near-)zero quaternion."""
    q = _as_f64(q)
    n = np.linalg.norm(q, axis=-1, keepdims=True)
    if np.any(~(n > _EPS_NORM)):
        raise ValueError("quaternion: cannot normalize a zero or non-finite quaternion")
    return q / n


def quat_rotate(q, v) -> np.ndarray:
    """``R(q) v`` for a unit quaternion q (no normalization; see :func:`quat_to_matrix`)."""
    q, v = _as_f64(q), _as_f64(v)
    u, w = q[..., :3], q[..., 3:]
    t = 2.0 * cross(u, v)
    return v + w * t + cross(u, t)


def quat_rotate_inv(q, v) -> np.ndarray:
    """``R(q)ᵀ v`` for a unit quaternion q."""
    return quat_rotate(quat_conjugate(q), v)


def quat_to_matrix(q) -> np.ndarray:
    """Rotation matrix of ``q / |q|``. Shape ``(..., 4) -> (..., 3, 3)``."""
    x, y, z, w = np.moveaxis(quat_normalize(q), -1, 0)
    return np.stack(
        [
            np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)], -1),
            np.stack([2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)], -1),
            np.stack([2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], -1),
        ],
        -2,
    )


def quat_from_matrix(R) -> np.ndarray:
    """Unit quaternion with ``w ≥ 0`` of a rotation matrix (Shepperd's branch choice).

    Shape ``(..., 3, 3) -> (..., 4)``. R must be a rotation (orthonormal, det +1).
    """
    R = _as_f64(R)
    batch = R.shape[:-2]
    Rf = R.reshape(-1, 3, 3)
    out = np.empty((Rf.shape[0], 4))
    for i, m in enumerate(Rf):
        tr = m[0, 0] + m[1, 1] + m[2, 2]
        # Pick the largest of (w, x, y, z) to divide by: no cancellation anywhere.
        k = int(np.argmax([tr, m[0, 0], m[1, 1], m[2, 2]]))
        if k == 0:
            s = 2.0 * np.sqrt(1.0 + tr)
            q = [(m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s, 0.25 * s]
        elif k == 1:
            s = 2.0 * np.sqrt(1.0 + m[0, 0] - m[1, 1] - m[2, 2])
            q = [0.25 * s, (m[0, 1] + m[1, 0]) / s, (m[0, 2] + m[2, 0]) / s, (m[2, 1] - m[1, 2]) / s]
        elif k == 2:
            s = 2.0 * np.sqrt(1.0 + m[1, 1] - m[0, 0] - m[2, 2])
            q = [(m[0, 1] + m[1, 0]) / s, 0.25 * s, (m[1, 2] + m[2, 1]) / s, (m[0, 2] - m[2, 0]) / s]
        else:
            s = 2.0 * np.sqrt(1.0 + m[2, 2] - m[0, 0] - m[1, 1])
            q = [(m[0, 2] + m[2, 0]) / s, (m[1, 2] + m[2, 1]) / s, 0.25 * s, (m[1, 0] - m[0, 1]) / s]
        out[i] = q
    out = quat_canonical(quat_normalize(out))
    return out.reshape(batch + (4,))


def quat_canonical(q) -> np.ndarray:
    """The same rotation with ``w ≥ 0`` (q and −q are the same rotation)."""
    q = _as_f64(q)
    return np.where(q[..., 3:] < 0.0, -q, q)


def quat_from_axis_angle(axis, angle) -> np.ndarray:
    """Rotation by ``angle`` [rad] about the unit vector ``axis`` (normalized here)."""
    axis = _as_f64(axis)
    n = np.linalg.norm(axis, axis=-1, keepdims=True)
    if np.any(~(n > 0.0)):
        raise ValueError("axis: must be a non-zero finite 3-vector")
    half = 0.5 * _as_f64(angle)[..., None]
    return np.concatenate([axis / n * np.sin(half), np.cos(half)], -1)


def quat_to_axis_angle(q) -> tuple[np.ndarray, np.ndarray]:
    """``(axis, angle)`` with angle in ``[0, π]``; axis is ``[1, 0, 0]`` for the identity."""
    q = quat_canonical(quat_normalize(q))
    s = np.linalg.norm(q[..., :3], axis=-1)
    angle = 2.0 * np.arctan2(s, q[..., 3])
    safe = s > 0.0
    axis = np.where(safe[..., None], q[..., :3] / np.where(safe, s, 1.0)[..., None], [1.0, 0.0, 0.0])
    return axis, angle


def quat_exp(rotvec) -> np.ndarray:
    """Exponential map: the rotation by ``|rotvec|`` about ``rotvec`` (rotation vector)."""
    rotvec = _as_f64(rotvec)
    theta = np.linalg.norm(rotvec, axis=-1, keepdims=True)
    half = 0.5 * theta
    # sin(θ/2)/θ, with its Taylor series where θ is tiny (no 0/0).
    small = theta < 1e-6
    sinc_half = np.where(small, 0.5 - theta**2 / 48.0, np.sin(half) / np.where(small, 1.0, theta))
    return np.concatenate([rotvec * sinc_half, np.cos(half)], -1)


def quat_log(q) -> np.ndarray:
    """Rotation vector of ``q`` (inverse of :func:`quat_exp`, angle in ``[0, π]``)."""
    axis, angle = quat_to_axis_angle(q)
    return axis * angle[..., None]


def quat_integrate(q, omega, dt) -> np.ndarray:
    """Exponential-map increment ``exp(ω dt) ⊗ q``, ω expressed in the parent (left) frame.

    This is the rotation part of the ``midpoint`` position map (docs/formulation.md § Integration); the result
    is normalized.
    """
    dq = quat_exp(_as_f64(omega) * np.asarray(dt, dtype=np.float64)[..., None])
    return quat_normalize(quat_multiply(dq, q))


def quat_derivative(q, omega) -> np.ndarray:
    """``q̇ = ½ (ω, 0) ⊗ q`` for ω expressed in the parent (left) frame (docs/formulation.md § Integration).

    ``q`` is used as given (not normalized), exactly as Drake's ``N(q)``.
    """
    omega = _as_f64(omega)
    w0 = np.concatenate([omega, np.zeros(omega.shape[:-1] + (1,))], -1)
    return 0.5 * quat_multiply(w0, q)


def quat_derivative_matrix(q) -> np.ndarray:
    """The 4×3 matrix ``Q(q)`` with ``q̇ = Q(q) ω`` (xyzw rows; Drake's CalcQMatrix, reordered)."""
    x, y, z, w = np.moveaxis(_as_f64(q), -1, 0)
    return 0.5 * np.stack(
        [
            np.stack([w, z, -y], -1),
            np.stack([-z, w, x], -1),
            np.stack([y, -x, w], -1),
            np.stack([-x, -y, -z], -1),
        ],
        -2,
    )


def quat_from_rpy(rpy) -> np.ndarray:
    """Drake's space-fixed roll-pitch-yaw: ``R = Rz(yaw) Ry(pitch) Rx(roll)``."""
    rpy = _as_f64(rpy)
    ex, ey, ez = np.eye(3)
    qx = quat_from_axis_angle(np.broadcast_to(ex, rpy.shape), rpy[..., 0])
    qy = quat_from_axis_angle(np.broadcast_to(ey, rpy.shape), rpy[..., 1])
    qz = quat_from_axis_angle(np.broadcast_to(ez, rpy.shape), rpy[..., 2])
    return quat_multiply(qz, quat_multiply(qy, qx))


def quat_angle_between(a, b) -> np.ndarray:
    """Angle [rad] of the rotation taking ``a`` to ``b`` (sign of either quaternion ignored)."""
    a, b = quat_normalize(a), quat_normalize(b)
    d = np.abs(np.sum(a * b, -1))
    return 2.0 * np.arctan2(
        np.linalg.norm(quat_multiply(quat_conjugate(a), b)[..., :3], axis=-1), d
    )


# --------------------------------------------------------------------------- transforms


def transform_identity(shape=()) -> np.ndarray:
    """Identity transform ``[0, 0, 0, 0, 0, 0, 1]``, of shape ``shape + (7,)``."""
    X = np.zeros(_shape(shape) + (7,))
    X[..., 6] = 1.0
    return X


def transform(p=(0.0, 0.0, 0.0), q=(0.0, 0.0, 0.0, 1.0)) -> np.ndarray:
    """Pack a position ``p (..., 3)`` and a quaternion ``q (..., 4)`` into ``[p, q] (..., 7)``."""
    p, q = _as_f64(p), _as_f64(q)
    batch = np.broadcast_shapes(p.shape[:-1], q.shape[:-1])
    return np.concatenate([np.broadcast_to(p, batch + (3,)), np.broadcast_to(q, batch + (4,))], -1)


def transform_compose(X_AB, X_BC) -> np.ndarray:
    """``X_AC = X_AB ∘ X_BC``: ``p_AC = p_AB + R_AB p_BC``, ``q_AC = q_AB ⊗ q_BC``."""
    X_AB, X_BC = _as_f64(X_AB), _as_f64(X_BC)
    q_AB = quat_normalize(X_AB[..., 3:])
    p = X_AB[..., :3] + quat_rotate(q_AB, X_BC[..., :3])
    q = quat_multiply(q_AB, quat_normalize(X_BC[..., 3:]))
    return np.concatenate([p, q], -1)


def transform_inverse(X_AB) -> np.ndarray:
    """``X_BA = X_AB⁻¹``: ``q_BA = q_AB*``, ``p_BA = −R_BA p_AB``."""
    X_AB = _as_f64(X_AB)
    q_BA = quat_conjugate(quat_normalize(X_AB[..., 3:]))
    return np.concatenate([-quat_rotate(q_BA, X_AB[..., :3]), q_BA], -1)


def transform_point(X_AB, p_B) -> np.ndarray:
    """``p_A = p_AB + R_AB p_B`` (a point given in B, returned in A)."""
    X_AB = _as_f64(X_AB)
    return X_AB[..., :3] + quat_rotate(quat_normalize(X_AB[..., 3:]), p_B)


def transform_vector(X_AB, v_B) -> np.ndarray:
    """``v_A = R_AB v_B`` (a free vector: rotation only)."""
    return quat_rotate(quat_normalize(_as_f64(X_AB)[..., 3:]), v_B)


def transform_to_matrix(X_AB) -> np.ndarray:
    """Homogeneous 4×4 matrix of ``X_AB``."""
    X_AB = _as_f64(X_AB)
    T = np.zeros(X_AB.shape[:-1] + (4, 4))
    T[..., :3, :3] = quat_to_matrix(X_AB[..., 3:])
    T[..., :3, 3] = X_AB[..., :3]
    T[..., 3, 3] = 1.0
    return T


# --------------------------------------------------------------------------- spatial algebra


def spatial_cross_motion(a, b) -> np.ndarray:
    """Motion cross product ``a ×ₘ b`` of twists ``[ω; v]``: ``[ω_a×ω_b; ω_a×v_b + v_a×ω_b]``."""
    a, b = _as_f64(a), _as_f64(b)
    wa, va, wb, vb = a[..., :3], a[..., 3:], b[..., :3], b[..., 3:]
    return np.concatenate([cross(wa, wb), cross(wa, vb) + cross(va, wb)], -1)


def spatial_cross_force(a, f) -> np.ndarray:
    """Force cross product ``a ×_f f`` of a twist ``[ω; v]`` and a wrench ``[τ; f]``.

    ``[ω×τ + v×f; ω×f]``; it is the negative transpose of the motion cross product.
    """
    a, f = _as_f64(a), _as_f64(f)
    w, v, tau, force = a[..., :3], a[..., 3:], f[..., :3], f[..., 3:]
    return np.concatenate([cross(w, tau) + cross(v, force), cross(w, force)], -1)


def spatial_cross_motion_matrix(a) -> np.ndarray:
    """6×6 matrix ``crm(a)`` with ``crm(a) b = a ×ₘ b``."""
    a = _as_f64(a)
    S_w, S_v = skew(a[..., :3]), skew(a[..., 3:])
    Z = np.zeros_like(S_w)
    return np.concatenate([np.concatenate([S_w, Z], -1), np.concatenate([S_v, S_w], -1)], -2)


def spatial_cross_force_matrix(a) -> np.ndarray:
    """6×6 matrix ``crf(a) = −crm(a)ᵀ`` with ``crf(a) f = a ×_f f``."""
    return -np.swapaxes(spatial_cross_motion_matrix(a), -1, -2)


def spatial_adjoint(R_AB, p_AB) -> np.ndarray:
    """6×6 map of a twist ``[ω; v_Bo]`` expressed in B to the same motion at Ao in A.

    ``ω_A = R ω_B``, ``v_Ao = R v_Bo + p_AB × (R ω_B)`` (rigid shift from Bo to Ao).
    """
    R_AB, p_AB = _as_f64(R_AB), _as_f64(p_AB)
    Z = np.zeros_like(R_AB)
    return np.concatenate(
        [np.concatenate([R_AB, Z], -1), np.concatenate([skew(p_AB) @ R_AB, R_AB], -1)], -2
    )


def spatial_adjoint_force(R_AB, p_AB) -> np.ndarray:
    """6×6 map of a wrench ``[τ_Bo; f]`` in B to ``[τ_Ao; f]`` in A (= adjoint⁻ᵀ)."""
    R_AB, p_AB = _as_f64(R_AB), _as_f64(p_AB)
    Z = np.zeros_like(R_AB)
    return np.concatenate(
        [np.concatenate([R_AB, skew(p_AB) @ R_AB], -1), np.concatenate([Z, R_AB], -1)], -2
    )


def spatial_inertia(mass, com, inertia) -> np.ndarray:
    """6×6 spatial inertia about the frame origin O, angular-first, in that frame.

    ``[[I_C + m [c]×[c]×ᵀ, m [c]×], [m [c]×ᵀ, m 1]]`` with c the COM and I_C the rotational
    inertia about the COM (parallel-axis theorem). Kinetic energy is ``½ Vᵀ M V`` for the
    twist ``V = [ω; v_O]``.
    """
    mass = _as_f64(mass)
    com, inertia = _as_f64(com), _as_f64(inertia)
    C = skew(com)
    m = mass[..., None, None]
    top = np.concatenate([inertia + m * (C @ np.swapaxes(C, -1, -2)), m * C], -1)
    bottom = np.concatenate([m * np.swapaxes(C, -1, -2), m * np.eye(3)], -1)
    return np.concatenate([top, bottom], -2)

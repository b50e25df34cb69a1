"""Holonomic constraints: couplers, distance, ball, weld and axis-alignment rows of one world.

docs/formulation.md § Holonomic constraints. Each constraint i has a constraint function
g_i(q) ∈ ℝⁿⁱ whose rate is ġ_i = J_i v at q₀; it is linearized over the step, g ≈ g₀ + h·J v,
and regularized like every SAP constraint:

    R_comp = 1/(h·(h + τ)·k),   R_nr = β²/(4π²)·w_i,   R = max(R_comp, R_nr)
    τ ← h where R_comp < R_nr (near-rigid: critically damped)
    v̂ = −g₀/(h + τ),   y = (v̂ − vc)/R,   γ = y,   G = 1/R,   ℓ = ½·R·y²

with β = 0.1 (``HOLONOMIC_BETA``) and w_i Drake's Delassus estimate ‖J_i diag(A)⁻¹ J_iᵀ‖_F/n_i,
one weight for all n_i rows of the constraint. The impulses are unbounded (bilateral), so every
row is a plain quadratic. Per type (P on A, Q on B, points and frames in world at q₀):

* coupler: g = q₀ − ρ·q₁ − Δq, J = e_dof0ᵀ − ρ·e_dof1ᵀ, k = ∞;
* distance: g = ‖p_Q − p_P‖ − ℓ₀, J = p̂ᵀ(J_v,B(p_Q) − J_v,A(p_P)), k and τ = c/k from the model;
* ball: g = p_Q − p_P, J = J_v,B(p_Q) − J_v,A(p_P), k = ∞;
* weld: g = [a_PQ ; p_Q − p_P] with a_PQ = θ·k̂ of R_PQ expressed in world, J the spatial
  velocity of B relative to A at the points of A and B coincident with the midpoint M of the two
  frame origins (angular rows first), k = ∞;
* axis alignment: with a_P = R_WP â, a_Q = R_WQ â, the swing s = ∠(a_P, a_Q)·(a_P × a_Q)/|a_P × a_Q|
  and (t̂₁, t̂₂) = R_WP·(the contact-frame tangents of â), an orthonormal basis perpendicular to
  a_P that moves smoothly with the poses (``swing_tangents``):
  g = [t̂₁·s ; t̂₂·s], J = [t̂₁ᵀ ; t̂₂ᵀ](J_ω,B − J_ω,A), k = ∞ (not a Drake constraint).

Drake: ``SapHolonomicConstraint``, ``SapCouplerConstraint``, ``SapDistanceConstraint``,
``SapBallConstraint``, ``SapWeldConstraint`` (built in ``SapDriver::Add*Constraints``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sap_common import spatial
from sap_common.constants import (
    CONSTRAINT_DISTANCE_MIN,
    CONSTRAINT_DISTANCE_MIN_RELATIVE,
    HOLONOMIC_BETA,
)
from sap_common.model import ConstraintType, SapModel

from .contact_jacobian import contact_frames, delassus_weights
from .kinematics import point_jacobian

__all__ = ["HolonomicRows", "holonomic_constraints", "holonomic_terms", "constraint_kinematics", "swing_vector",
           "rotation_vector"]

# β²/(4π²) of the near-rigid floor.
_R_FACTOR = HOLONOMIC_BETA**2 / (4.0 * np.pi**2)


@dataclass
class HolonomicRows:
    """The holonomic constraint rows of one world at q₀ (E = ``model.constraint_row_count`` rows).

    Attributes:
        J: rows, (E, nv).
        g0: the constraint function at q₀ [m or rad], (E,).
        w: each row's Delassus weight (its constraint's) [1/kg or 1/(kg·m²)], (E,).
        R: regularization [velocity per impulse], (E,).
        v_hat: bias velocity −g₀/(h + τ), (E,).
        near_rigid: True where the near-rigid floor sets R (then τ = h), (E,).
        active: False for a distance row skipped this step (its points closer than
            ``CONSTRAINT_DISTANCE_MIN + CONSTRAINT_DISTANCE_MIN_RELATIVE·ℓ₀``: no direction);
            such a row has J = 0, g₀ = 0, R = 1, v̂ = 0 and no impulse, (E,).
        constraint: the constraint of each row, (E,).
    """

    J: np.ndarray
    g0: np.ndarray
    w: np.ndarray
    R: np.ndarray
    v_hat: np.ndarray
    near_rigid: np.ndarray
    active: np.ndarray
    constraint: np.ndarray

    @classmethod
    def empty(cls, nv: int) -> "HolonomicRows":
        z = np.zeros(0)
        return cls(np.zeros((0, nv)), z, z, z, z, np.zeros(0, bool), np.zeros(0, bool), np.zeros(0, np.int32))


def rotation_vector(q_WP, q_WQ) -> np.ndarray:
    """``a_PQ`` in world: θ·k̂ of the rotation R_PQ = R_WPᵀ R_WQ (θ ∈ [0, π]), expressed in W.

    From the quaternion q_PQ = q_WP* ⊗ q_WQ as Eigen's AngleAxis takes it from a quaternion (what
    Drake's ``RotationMatrix::ToAngleAxis`` does after its matrix-to-quaternion step):
    θ = 2·atan2(|v|, |w|), k̂ = v/|v| (negated when w < 0), zero rotation when v = 0.
    """
    q = spatial.quat_multiply(spatial.quat_conjugate(spatial.quat_normalize(q_WP)), spatial.quat_normalize(q_WQ))
    v, w = q[:3], float(q[3])
    n = float(np.linalg.norm(v))
    if n == 0.0:
        return np.zeros(3)
    theta = 2.0 * np.arctan2(n, abs(w))
    k = v / (n if w >= 0.0 else -n)
    return spatial.quat_rotate(spatial.quat_normalize(q_WP), theta * k)


def swing_vector(a_P: np.ndarray, a_Q: np.ndarray, across: np.ndarray) -> np.ndarray:
    """The rotation vector of the smallest rotation taking unit ``a_P`` to unit ``a_Q``,
    s = atan2(|a_P × a_Q|, a_P·a_Q)·(a_P × a_Q)/|a_P × a_Q|: 0 when the axes are parallel, π·``across``
    (a unit vector ⊥ a_P) when they are exactly opposite. Near opposite axes its direction is
    whatever the rounding of a_P × a_Q gives: every direction ⊥ a_P serves."""
    c = np.cross(a_P, a_Q)
    sn = float(np.linalg.norm(c))
    if sn == 0.0:
        return np.zeros(3) if float(a_P @ a_Q) >= 0.0 else np.pi * across
    return np.arctan2(sn, float(a_P @ a_Q)) * c / sn


def constraint_kinematics(model: SapModel, k: int, joint_q, body_q, J_bodies):
    """``(g, J, active)`` of constraint k at (joint_q, body_q): its rows' function values (n,) and
    Jacobian (n, nv), and False for a distance constraint whose points are too close to define a
    direction (docs/formulation.md § Holonomic constraints)."""
    nv = model.joint_dof_count
    ct = ConstraintType(int(model.constraint_type[k]))
    if ct == ConstraintType.COUPLER:
        j0, j1 = int(model.constraint_joint0[k]), int(model.constraint_joint1[k])
        rho = float(model.constraint_gear_ratio[k])
        q0, q1 = joint_q[int(model.joint_q_start[j0])], joint_q[int(model.joint_q_start[j1])]
        J = np.zeros((1, nv))
        J[0, int(model.joint_qd_start[j0])] = 1.0
        J[0, int(model.joint_qd_start[j1])] += -rho
        return np.array([q0 - rho * q1 - float(model.constraint_offset[k])]), J, True
    a, b = int(model.constraint_body_a[k]), int(model.constraint_body_b[k])
    X_WA = spatial.transform_identity() if a < 0 else body_q[a]
    X_WB = spatial.transform_identity() if b < 0 else body_q[b]
    X_WP = spatial.transform_compose(X_WA, model.constraint_X_a[k])
    X_WQ = spatial.transform_compose(X_WB, model.constraint_X_b[k])
    p_WP, p_WQ = X_WP[:3], X_WQ[:3]
    if ct in (ConstraintType.BALL, ConstraintType.DISTANCE):
        Jv = point_jacobian(model, b, p_WQ, body_q, J_bodies) - point_jacobian(model, a, p_WP, body_q, J_bodies)
        d = p_WQ - p_WP
        if ct == ConstraintType.BALL:
            return d, Jv, True
        dist = float(np.linalg.norm(d))
        length = float(model.constraint_length[k])
        if dist < CONSTRAINT_DISTANCE_MIN + CONSTRAINT_DISTANCE_MIN_RELATIVE * length:
            return np.zeros(1), np.zeros((1, nv)), False
        p_hat = d / dist
        return np.array([dist - length]), (p_hat @ Jv)[None, :], True
    Jw = lambda body: np.zeros((3, nv)) if body < 0 else J_bodies[body][:3]  # noqa: E731
    if ct == ConstraintType.WELD:
        p_WM = 0.5 * (p_WP + p_WQ)
        J = np.zeros((6, nv))
        J[:3] = Jw(b) - Jw(a)
        J[3:] = point_jacobian(model, b, p_WM, body_q, J_bodies) - point_jacobian(model, a, p_WM, body_q, J_bodies)
        return np.concatenate([rotation_vector(X_WP[3:], X_WQ[3:]), p_WQ - p_WP]), J, True
    axis = model.constraint_axis[k]
    T = swing_tangents(X_WP[3:], axis)
    s = swing_vector(spatial.quat_rotate(X_WP[3:], axis), spatial.quat_rotate(X_WQ[3:], axis), T[:, 0])
    return T.T @ s, T.T @ (Jw(b) - Jw(a)), True


def swing_tangents(q_WP, axis: np.ndarray) -> np.ndarray:
    """``(3, 2)``: the axis alignment's row directions (t̂₁, t̂₂) ⊥ a_P, smooth in the poses.

    The contact-frame tangents of the fixed unit axis â (in P), carried to world by R_WP. The swing
    s is ⊥ a_P, so the two rows hold all of it (|g| = θ). A basis built from the bisector m̂ jumped
    by a quarter turn where two of m̂'s components tie (an axis along a world axis), and m̂ itself
    loses its digits as the axes turn opposite (‖a_P + a_Q‖ → 0); R_WP carries neither defect."""
    return spatial.quat_rotate(q_WP, contact_frames(axis[None, :])[0][:, :2].T).T


def holonomic_constraints(model: SapModel, joint_q, A, dt: float, body_q, J_bodies) -> HolonomicRows:
    """Every holonomic constraint's rows with their R and v̂ for this step (module docstring).

    ``body_q``, ``J_bodies``: the poses and body Jacobians the contact stage uses (float32-rounded
    poses under ``use_f64_boundary_pose=False``); ``joint_q`` the coordinates (couplers).
    """
    nv = model.joint_dof_count
    E = model.constraint_row_count
    if E == 0:
        return HolonomicRows.empty(nv)
    joint_q = np.asarray(joint_q, dtype=np.float64)
    J, g0 = np.zeros((E, nv)), np.zeros(E)
    w, R, v_hat = np.zeros(E), np.ones(E), np.zeros(E)
    near_rigid, active = np.zeros(E, bool), np.zeros(E, bool)
    constraint = np.zeros(E, np.int32)
    A_diag = np.diag(A)
    for k in range(model.constraint_count):
        r0, r1 = int(model.constraint_row_start[k]), int(model.constraint_row_start[k + 1])
        constraint[r0:r1] = k
        g, Jk, ok = constraint_kinematics(model, k, joint_q, body_q, J_bodies)
        if not ok:
            continue
        J[r0:r1], g0[r0:r1], active[r0:r1] = Jk, g, True
        wk = float(delassus_weights(Jk[None], A_diag)[0])
        stiffness = float(model.constraint_stiffness[k])
        tau = float(model.constraint_damping[k]) / stiffness  # c/k (0 for k = ∞)
        with np.errstate(divide="ignore"):
            R_comp = 1.0 / (dt * (dt + tau) * stiffness)
        R_nr = _R_FACTOR * wk
        rigid = R_comp < R_nr
        if rigid:
            tau = dt
        w[r0:r1], R[r0:r1], near_rigid[r0:r1] = wk, max(R_comp, R_nr), rigid
        v_hat[r0:r1] = -g / (dt + tau)
    return HolonomicRows(J=J, g0=g0, w=w, R=R, v_hat=v_hat, near_rigid=near_rigid, active=active,
                         constraint=constraint)


def holonomic_terms(vc: np.ndarray, R: np.ndarray, v_hat: np.ndarray):
    """``(gamma, G, ell)`` of bilateral holonomic rows: ``y = (v̂ − vc)/R``, γ = y, G = 1/R,
    ℓ = ½·R·y² (Drake's ``SapHolonomicConstraint`` with unbounded impulses)."""
    dt = vc.dtype.type
    y = (v_hat - vc) / R
    return y, (dt(1.0) / R).astype(vc.dtype), dt(0.5) * R * y * y

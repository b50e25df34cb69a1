"""SAP constraint terms: cost ℓᵢ, impulse γᵢ = −∂ℓᵢ/∂vcᵢ, Hessian Gᵢ = −∂γᵢ/∂vcᵢ.

docs/formulation.md § The cost and its derivatives.

Three kinds, each a set of rows ``J`` (so vc = J v) with per-row parameters:

* friction cone (contacts, ``discrete_contact_approximation="sap"``), docs/formulation.md § Friction cone:
  regularized projection of ``y = R⁻¹(v̂ − vc)`` onto the friction cone in the R-norm, three regions
  (stiction, sliding, no contact);
* Hunt–Crossley (contacts, ``"lagged"`` and ``"similar"``), docs/formulation.md § Hunt–Crossley contact: the
  normal impulse ``n(z) = h(fₑ₀ − hkz)₊(1 − dz)₊`` with its antiderivative as cost and a smooth
  Coulomb friction of regularization velocity ε_s;
* limits (joint position limits and distance-joint limits), docs/formulation.md § Limits: one-sided
  ``γ = max(0, y)``, near-rigid with β = 0.1, added only inside the window
  ``q₀ ± 2h·max(|v₀|, |v*|)``;
* drives (PD toward targets with an effort limit, feed-forward ``joint_act`` inside the
  clamp), docs/formulation.md § Drives: ``γ = h·clamp(−Kp(q₀ + h v − q_d) − Kd(v − v_d) + u₀, ±e)``.

Limits, drives and the holonomic constraints (:mod:`sap_ref.holonomic`) are *scalar rows*
(:mod:`sap_common.rows`): :class:`ScalarRows` holds them in one table, kind after kind, and
:func:`scalar_row_terms` evaluates each kind's term on its rows.

Drake: ``SapFrictionConeConstraint``, ``SapHuntCrossleyConstraint``, ``SapLimitConstraint``,
``SapPdControllerConstraint``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sap_common import spatial
from sap_common.config import precision_dtype
from sap_common.constants import (
    DISTANCE_EPS,
    DRIVE_BETA,
    HC_VELOCITY_GUARD,
    LIMIT_BETA,
    LIMIT_WINDOW_FACTOR,
    SOFT_NORM_EPS,
)
from sap_common.model import JointType, SapModel
from sap_common.rows import ROW_KINDS, RowKind, driven_dofs

from .contact_jacobian import delassus_weights
from .holonomic import HolonomicRows, holonomic_terms
from .kinematics import point_jacobian

__all__ = [
    "SOFT_NORM_EPS",
    "LIMIT_BETA",
    "DRIVE_BETA",
    "LIMIT_WINDOW_FACTOR",
    "STICTION",
    "SLIDING",
    "NO_CONTACT",
    "friction_cone",
    "HuntCrossley",
    "hunt_crossley",
    "hunt_crossley_data",
    "hunt_crossley_impulse",
    "hunt_crossley_impulse_derivative",
    "hunt_crossley_antiderivative",
    "LimitConstraints",
    "limit_constraints",
    "limit_terms",
    "DriveConstraints",
    "drive_constraints",
    "drive_terms",
    "ScalarRows",
    "scalar_rows",
    "scalar_row_terms",
    "ROW_TERMS",
]

STICTION, SLIDING, NO_CONTACT = 0, 1, 2


# ----------------------------------------------------------------------------- friction cone


def friction_cone(vc: np.ndarray, R: np.ndarray, v_hat: np.ndarray, mu: np.ndarray):
    """``(gamma (C,3), G (C,3,3), ell (C,), mode (C,))`` of the friction-cone constraints.

    ``y = R⁻¹(v̂ − vc)``, ``y_r = √(y_t1² + y_t2² + ε²)``, ``t̂ = y_t / y_r``,
    ``μ̂ = μ R_t/R_n``, ``μ̃² = μ² R_t/R_n``, ``f = 1/(1 + μ̃²)``:

    * stiction ``y_r ≤ μ y_n``: γ = y, ``G = R⁻¹``;
    * sliding ``−μ̂ y_r < y_n < y_r/μ``: ``γ_n = f (y_n + μ̂ y_r)``, ``γ_t = μ γ_n t̂``,
      ``∂γ_t/∂y_t = μ((γ_n/y_r) P⊥ + μ̂ f P)``, ``∂γ_t/∂y_n = μ f t̂``, ``∂γ_n/∂y_t = μ̂ f t̂ᵀ``,
      ``∂γ_n/∂y_n = f``, ``G = (∂γ/∂y) R⁻¹`` (P = t̂t̂ᵀ, P⊥ = 1 − P);
    * no contact otherwise: γ = 0, G = 0.

    ``ℓ = ½ γᵀ R γ``. Arrays keep the dtype of ``vc`` (``contact_solve_precision``).
    """
    dt = vc.dtype
    y = (v_hat - vc) / R
    y_t, y_n = y[:, :2], y[:, 2]
    y_r = np.sqrt(np.sum(y_t * y_t, axis=1) + dt.type(SOFT_NORM_EPS) ** 2)
    t_hat = y_t / y_r[:, None]
    R_t, R_n = R[:, 0], R[:, 2]
    mu_hat = mu * R_t / R_n
    mu_tilde2 = mu * mu * R_t / R_n
    f = dt.type(1.0) / (dt.type(1.0) + mu_tilde2)

    stiction = y_r <= mu * y_n
    # y_n < y_r/μ written as μ y_n < y_r, which is also right for μ = 0 (no division).
    sliding = ~stiction & (y_n > -mu_hat * y_r) & (mu * y_n < y_r)
    mode = np.full(len(y), NO_CONTACT, dtype=np.int32)
    mode[stiction], mode[sliding] = STICTION, SLIDING

    gamma = np.zeros_like(y)
    G = np.zeros((len(y), 3, 3), dtype=dt)
    gamma[stiction] = y[stiction]
    G[stiction] = np.einsum("ci,ij->cij", 1.0 / R[stiction], np.eye(3, dtype=dt))

    s = sliding
    g_n = f[s] * (y_n[s] + mu_hat[s] * y_r[s])
    gamma[s, 2] = g_n
    gamma[s, :2] = (mu[s] * g_n)[:, None] * t_hat[s]
    P = np.einsum("ci,cj->cij", t_hat[s], t_hat[s])
    P_perp = np.eye(2, dtype=dt) - P
    dgamma_dy = np.zeros((int(s.sum()), 3, 3), dtype=dt)
    dgamma_dy[:, :2, :2] = mu[s, None, None] * ((g_n / y_r[s])[:, None, None] * P_perp
                                                + (mu_hat[s] * f[s])[:, None, None] * P)
    dgamma_dy[:, :2, 2] = (mu[s] * f[s])[:, None] * t_hat[s]
    dgamma_dy[:, 2, :2] = (mu_hat[s] * f[s])[:, None] * t_hat[s]
    dgamma_dy[:, 2, 2] = f[s]
    G[s] = dgamma_dy / R[s][:, None, :]

    ell = dt.type(0.5) * np.sum(gamma * R * gamma, axis=1)
    return gamma, G, ell, mode


# ----------------------------------------------------------------------------- Hunt–Crossley


@dataclass
class HuntCrossley:
    """Per-contact data of the Hunt–Crossley constraint of one step (C contacts), fixed at q₀, v₀.

    docs/formulation.md § Hunt–Crossley contact. Drake: ``SapHuntCrossleyConstraint::DoMakeData``.

    Attributes:
        similar: False for ``lagged`` (friction uses n₀), True for ``similar`` (z = vₙ − μ‖v_t‖_s).
        h: time step [s].
        k: combined stiffness [N/m], (C,).  d: combined dissipation [s/m], (C,).
        fe0: elastic force at q₀, ``fₑ₀ = −k φ₀`` [N], (C,).
        vn0: normal velocity at v₀, ``(J v₀)ₙ`` [m/s], (C,).
        n0: the previous-step normal impulse ``n₀ = (h fₑ₀)₊ (1 − d vₙ₀)₊`` [N·s], (C,).
        eps: friction regularization velocity ``ε_s = max(v_s, μ σ w n₀)`` [m/s], (C,).
    """

    similar: bool
    h: float
    k: np.ndarray
    d: np.ndarray
    fe0: np.ndarray
    vn0: np.ndarray
    n0: np.ndarray
    eps: np.ndarray

    def astype(self, dtype) -> "HuntCrossley":
        c = lambda x: np.asarray(x, dtype=dtype)  # noqa: E731
        return HuntCrossley(self.similar, self.h, c(self.k), c(self.d), c(self.fe0), c(self.vn0), c(self.n0),
                            c(self.eps))


def hunt_crossley_data(w, mu, ke, hcd, phi0, vn0, dt: float, sigma: float, stiction_tolerance: float,
                       similar: bool, precision: str = "fp64") -> HuntCrossley:
    """The per-step data of the Hunt–Crossley constraints (docs/formulation.md § Hunt–Crossley contact).

    In ``sap_contact_weight_precision``: ``w_t = max(w, ‖(w, w, w)‖/√3)`` (Drake's tangential
    Delassus estimate, w up to rounding), ``R_t = σ w_t``, ``fₑ₀ = k·(−φ₀)``,
    ``n₀ = (h fₑ₀)₊·(1 − d vₙ₀)₊`` with vₙ₀ the normal velocity at v₀, and
    ``ε_s = max(v_s, μ R_t n₀)``. Drake: ``SapHuntCrossleyConstraint::DoMakeData``.
    """
    t = precision_dtype(precision)
    w, mu, ke, hcd, phi0, vn0 = (np.asarray(x, dtype=t) for x in (w, mu, ke, hcd, phi0, vn0))
    h, zero = t(dt), t(0.0)
    w_rms = np.sqrt(w * w + w * w + w * w) / t(np.sqrt(3.0))
    R_t = t(sigma) * np.maximum(t(0.5) * (w + w), w_rms)
    fe0 = ke * -phi0
    n0 = np.maximum(zero, h * fe0) * np.maximum(zero, t(1.0) - hcd * vn0)
    eps = np.maximum(t(stiction_tolerance), mu * R_t * n0)
    return HuntCrossley(similar=bool(similar), h=float(dt), k=ke, d=hcd, fe0=fe0, vn0=vn0, n0=n0, eps=eps)


def hunt_crossley_impulse(z, h, k, d, fe0):
    """``n(z) = h·(fₑ₀ − h k z)₊·(1 − d z)₊`` [N·s], elementwise (Drake:
    ``CalcDiscreteHuntCrossleyImpulse``): 0 where either factor is ≤ 0."""
    xdot = -z
    fe = fe0 + h * k * xdot
    damping = z.dtype.type(1.0) + d * xdot
    return np.where((fe > 0) & (damping > 0), h * fe * damping, z.dtype.type(0.0))


def hunt_crossley_impulse_derivative(z, h, k, d, fe0):
    """``n'(z) = −h·[k h (1 − d z) + d (fₑ₀ − h k z)]`` where both factors of n are > 0, else 0
    (Drake: ``CalcDiscreteHuntCrossleyImpulseGradient``)."""
    xdot = -z
    fe = fe0 + h * k * xdot
    damping = z.dtype.type(1.0) + d * xdot
    return np.where((fe > 0) & (damping > 0), -h * (k * h * damping + d * fe), z.dtype.type(0.0))


def hunt_crossley_antiderivative(z, h, k, d, fe0):
    """``N(z) = ∫₀^z n``, constant beyond v̂ = min(v_x, v_d) (Drake:
    ``CalcDiscreteHuntCrossleyAntiderivative``).

    With v_d = 1/(d + g), v_x = fₑ₀/h/(k + g) (g = ``HC_VELOCITY_GUARD``: d = 0 or k = 0 make
    them huge), ṽ = min(z, v̂) and Δf = −h k ṽ: ``N = h·[ṽ(fₑ₀ + ½Δf) − d ṽ²/2·(fₑ₀ + ⅔Δf)]``.
    """
    t = z.dtype.type
    g = t(HC_VELOCITY_GUARD)
    v_d = t(1.0) / (d + g)
    v_x = fe0 / h / (k + g)
    v = np.minimum(z, np.minimum(v_x, v_d))
    df = -h * k * v
    return h * (v * (fe0 + t(0.5) * df) - d * v * v / t(2.0) * (fe0 + t(2.0 / 3.0) * df))


def hunt_crossley(vc: np.ndarray, mu: np.ndarray, hc: HuntCrossley):
    """``(gamma (C,3), G (C,3,3), ell (C,), mode (C,))`` of the Hunt–Crossley constraints.

    With ``‖v_t‖_s = √(‖v_t‖² + ε_s²) − ε_s``, ``s = ‖v_t‖_s + ε_s``, ``t̂ = v_t/s``, P = t̂t̂ᵀ,
    P⊥ = 1 − P (docs/formulation.md § Hunt–Crossley contact):

    * similar, z = vₙ − μ‖v_t‖_s: ``ℓ = −N(z)``, ``γ = (−μ n(z) t̂, n(z))``,
      ``G = [[−μ² n'(z) P + μ n(z) P⊥/s, μ n'(z) t̂], [μ n'(z) t̂ᵀ, −n'(z)]]``;
    * lagged, z = vₙ: ``ℓ = −N(vₙ) + μ n₀ ‖v_t‖_s``, ``γ = (−μ n₀ t̂, n(vₙ))``,
      ``G = [[μ n₀ P⊥/s, 0], [0, −n'(vₙ)]]``.

    ``mode``: NO_CONTACT where γ = 0 (no normal impulse and no friction), else STICTION where
    ‖v_t‖ ≤ ε_s (the linear part of the smooth friction law), else SLIDING. Arrays keep the dtype
    of ``vc`` (``contact_solve_precision``). Drake: ``SapHuntCrossleyConstraint::DoCalcData``,
    ``DoCalcCost``, ``DoCalcImpulse``, ``DoCalcCostHessian``.
    """
    dt = vc.dtype
    hc = hc.astype(dt)
    h = dt.type(hc.h)
    vt = vc[:, :2]
    vn = vc[:, 2]
    eps = hc.eps
    vt2 = vt[:, 0] * vt[:, 0] + vt[:, 1] * vt[:, 1]
    vt_soft = np.sqrt(vt2 + eps * eps) - eps
    s = vt_soft + eps
    t_soft = vt / s[:, None]
    z = vn - mu * vt_soft if hc.similar else vn
    n = hunt_crossley_impulse(z, h, hc.k, hc.d, hc.fe0)
    dn = hunt_crossley_impulse_derivative(z, h, hc.k, hc.d, hc.fe0)
    N = hunt_crossley_antiderivative(z, h, hc.k, hc.d, hc.fe0)
    n_friction = n if hc.similar else hc.n0
    gamma = np.empty_like(vc)
    gamma[:, :2] = (-mu * n_friction)[:, None] * t_soft
    gamma[:, 2] = n
    P = np.einsum("ci,cj->cij", t_soft, t_soft)
    P_perp = np.eye(2, dtype=dt) - P
    G = np.zeros((len(vc), 3, 3), dtype=dt)
    if hc.similar:
        G[:, :2, :2] = (-mu * mu * dn)[:, None, None] * P + (mu * n)[:, None, None] * P_perp / s[:, None, None]
        G[:, :2, 2] = (mu * dn)[:, None] * t_soft
        G[:, 2, :2] = G[:, :2, 2]
        ell = -N
    else:
        G[:, :2, :2] = (mu * hc.n0)[:, None, None] * P_perp / s[:, None, None]
        ell = -N + mu * vt_soft * hc.n0
    G[:, 2, 2] = -dn
    mode = np.where(np.sqrt(vt2) <= eps, STICTION, SLIDING).astype(np.int32)
    mode[(n == 0) & (mu * n_friction == 0)] = NO_CONTACT
    return gamma, G, ell, mode


# ----------------------------------------------------------------------------- limits


@dataclass
class LimitConstraints:
    """One-sided limit rows of one world (L rows).

    Attributes:
        J: rows, (L, nv): +e_dof for a lower limit, −e_dof for an upper one, ±p̂ᵀ(J₁ − J₀) for
            a distance limit.
        g0: constraint value at q₀ (< 0 violated) [m or rad], (L,).
        R: regularization, (L,).
        v_hat: bias velocity −g₀/(h + τ), (L,).
        joint: joint of each row, (L,).
        side: −1 lower, +1 upper, (L,).
    """

    J: np.ndarray
    g0: np.ndarray
    R: np.ndarray
    v_hat: np.ndarray
    joint: np.ndarray
    side: np.ndarray


def _limit_row(rows, g, k, tau, joint, side, J_row):
    rows.append((J_row, g, k, tau, joint, side))


def limit_constraints(model: SapModel, joint_q, v0, v_star, A, dt: float, body_q=None,
                      J_bodies=None) -> LimitConstraints:
    """Limit rows active in this step (docs/formulation.md § Limits), with their R and v̂.

    A limit enters only if it lies inside ``q₀ ± 2δ``, δ = h·max(|v₀|, |v*|) (distance limits:
    the same test on the anchor distance and its rate). ``k = joint_limit_ke``,
    ``τ = joint_limit_kd / joint_limit_ke``, ``R = max(β²w/(4π²), 1/(h k (h + τ)))`` with
    β = 0.1 and Drake's Delassus weight w, ``v̂ = −g₀/(h + τ)``. A limit with ke = 0 is inert, and
    so is a kinematic body's (its velocity is prescribed).
    """
    joint_q, v0, v_star = (np.asarray(x, dtype=np.float64) for x in (joint_q, v0, v_star))
    nv = model.joint_dof_count
    rows = []
    for j in range(model.joint_count):
        jt = JointType(int(model.joint_type[j]))
        d0 = int(model.joint_qd_start[j])
        if model.body_kinematic[model.joint_child[j]]:
            continue
        if jt in (JointType.PRISMATIC, JointType.REVOLUTE, JointType.D6):
            q0 = int(model.joint_q_start[j])
            for k in range(int(model.joint_qd_start[j + 1]) - d0):
                dof, q = d0 + k, joint_q[q0 + k]
                lo, hi, ke = model.joint_limit_lower[dof], model.joint_limit_upper[dof], model.joint_limit_ke[dof]
                if ke <= 0.0 or not (np.isfinite(lo) or np.isfinite(hi)):
                    continue
                window = LIMIT_WINDOW_FACTOR * dt * max(abs(v0[dof]), abs(v_star[dof]))
                tau = model.joint_limit_kd[dof] / ke
                e = np.zeros(nv)
                e[dof] = 1.0
                if lo >= q - window:
                    _limit_row(rows, q - lo, ke, tau, j, -1, e)
                if hi <= q + window:
                    _limit_row(rows, hi - q, ke, tau, j, +1, -e)
        elif jt == JointType.DISTANCE:
            lo, hi, ke = model.joint_limit_lower[d0], model.joint_limit_upper[d0], model.joint_limit_ke[d0]
            if ke <= 0.0 or not (np.isfinite(hi) or lo > 0.0):
                continue
            p, c = int(model.joint_parent[j]), int(model.joint_child[j])
            p_P = spatial.transform_point(body_q[p], model.joint_X_p[j, :3]) if p >= 0 else model.joint_X_p[j, :3]
            p_C = spatial.transform_point(body_q[c], model.joint_X_c[j, :3])
            d_vec = p_C - p_P
            dist = float(np.linalg.norm(d_vec))
            if dist < DISTANCE_EPS:
                continue
            J_row = (d_vec / dist) @ (point_jacobian(model, c, p_C, body_q, J_bodies)
                                      - point_jacobian(model, p, p_P, body_q, J_bodies))
            window = LIMIT_WINDOW_FACTOR * dt * max(abs(J_row @ v0), abs(J_row @ v_star))
            tau = model.joint_limit_kd[d0] / ke
            if lo > 0.0 and lo >= dist - window:
                _limit_row(rows, dist - lo, ke, tau, j, -1, J_row)
            if np.isfinite(hi) and hi <= dist + window:
                _limit_row(rows, hi - dist, ke, tau, j, +1, -J_row)
    if not rows:
        z = np.zeros(0)
        return LimitConstraints(np.zeros((0, nv)), z, z, z, np.zeros(0, np.int32), np.zeros(0, np.int32))
    J = np.array([r[0] for r in rows])
    g0, k, tau = (np.array([r[i] for r in rows]) for i in (1, 2, 3))
    w = delassus_weights(J[:, None, :], np.diag(A))
    with np.errstate(divide="ignore"):
        R_compliant = 1.0 / (dt * k * (dt + tau))
    R = np.maximum(LIMIT_BETA**2 / (4.0 * np.pi**2) * w, R_compliant)
    return LimitConstraints(J=J, g0=g0, R=R, v_hat=-g0 / (dt + tau),
                            joint=np.array([r[4] for r in rows], np.int32),
                            side=np.array([r[5] for r in rows], np.int32))


def limit_terms(vc: np.ndarray, R: np.ndarray, v_hat: np.ndarray):
    """``(gamma, G, ell)`` of one-sided limit rows: ``γ = max(0, y)``, ``y = (v̂ − vc)/R``."""
    y = (v_hat - vc) / R
    gamma = np.maximum(y, 0.0).astype(vc.dtype)
    G = np.where(y > 0.0, 1.0 / R, 0.0).astype(vc.dtype)
    return gamma, G, vc.dtype.type(0.5) * R * gamma * gamma


# ----------------------------------------------------------------------------- drives


@dataclass
class DriveConstraints:
    """PD drive rows of one world (D rows, one per driven DOF).

    Attributes:
        dof: the driven DOF of each row, (D,).
        J: rows e_dofᵀ, (D, nv).
        q0: the DOF's coordinate at the start of the step, (D,).
        q_target / v_target: ``joint_target_pos`` / ``joint_target_vel``, (D,).
        u0: feed-forward ``joint_act`` (inside the clamp), (D,).
        Kp / Kd: effective gains after the near-rigid clamp, (D,).
        effort: effort limit e (inf = none), (D,).
        h: time step [s].
    """

    dof: np.ndarray
    J: np.ndarray
    q0: np.ndarray
    q_target: np.ndarray
    v_target: np.ndarray
    u0: np.ndarray
    Kp: np.ndarray
    Kd: np.ndarray
    effort: np.ndarray
    h: float


def drive_constraints(model: SapModel, joint_q, A, dt: float, q_target, v_target, u0) -> DriveConstraints:
    """Drive rows with Drake's near-rigid effective gains (docs/formulation.md § Drives).

    With ``R = 1/(h(h Kp + Kd))`` and ``R_nr = β² w/(4π²)`` (β = 0.1, w = 1/A_dd): if R < R_nr,
    keep the ratio Kd/Kp and lower the gains until R = R_nr.
    """
    driven = driven_dofs(model)
    nv = model.joint_dof_count
    q_of_dof = np.zeros(nv)
    for j in range(model.joint_count):
        jt = JointType(int(model.joint_type[j]))
        if jt in (JointType.PRISMATIC, JointType.REVOLUTE, JointType.D6):
            n = int(model.joint_qd_start[j + 1] - model.joint_qd_start[j])
            q_of_dof[model.joint_qd_slice(j)] = np.asarray(joint_q)[int(model.joint_q_start[j]):][:n]
    Kp, Kd = model.joint_target_ke[driven].copy(), model.joint_target_kd[driven].copy()
    w = 1.0 / np.diag(A)[driven]
    R_nr = DRIVE_BETA**2 / (4.0 * np.pi**2) * w
    R = 1.0 / (dt * (dt * Kp + Kd))
    for i in np.flatnonzero(R < R_nr):
        if dt * Kp[i] > Kd[i]:
            tau = Kd[i] / Kp[i]
            Kp[i] = 1.0 / (dt * (dt + tau) * R_nr[i])
            Kd[i] = tau * Kp[i]
        else:
            ratio = Kp[i] / Kd[i]
            Kd[i] = 1.0 / (dt * (1.0 + dt * ratio) * R_nr[i])
            Kp[i] = ratio * Kd[i]
    J = np.zeros((len(driven), nv))
    J[np.arange(len(driven)), driven] = 1.0
    return DriveConstraints(dof=driven, J=J, q0=q_of_dof[driven], q_target=np.asarray(q_target)[driven],
                            v_target=np.asarray(v_target)[driven], u0=np.asarray(u0)[driven], Kp=Kp, Kd=Kd,
                            effort=model.joint_effort_limit[driven].copy(), h=float(dt))


def drive_terms(vc: np.ndarray, d: DriveConstraints):
    """``(gamma, G, ell)`` of the drive rows (docs/formulation.md § Drives).

    ``y = −Kp(q₀ + h v − q_d) − Kd(v − v_d) + u₀``, ``c = h Kp + Kd``, ``γ = h·clamp(y, ±e)``,
    ``G = h c`` inside the clamp else 0, ``ℓ = (h/c)·Φ_e(y)`` with Φ_e(y) = y²/2 for |y| ≤ e and
    ``e(|y| − e/2)`` beyond.
    """
    dt = vc.dtype.type
    h = dt(d.h)
    Kp, Kd = d.Kp.astype(vc.dtype), d.Kd.astype(vc.dtype)
    e = d.effort.astype(vc.dtype)
    y = -Kp * (d.q0.astype(vc.dtype) + h * vc - d.q_target.astype(vc.dtype)) - Kd * (vc - d.v_target.astype(vc.dtype)) \
        + d.u0.astype(vc.dtype)
    c = h * Kp + Kd
    inside = np.abs(y) <= e
    gamma = h * np.clip(y, -e, e)
    G = np.where(inside, h * c, dt(0.0))
    with np.errstate(invalid="ignore"):  # e·(|y| − e/2) is not used where e = inf
        phi = np.where(inside, dt(0.5) * y * y, e * (np.abs(y) - dt(0.5) * e))
    return gamma, G, (h / c) * phi


# ----------------------------------------------------------------------------- the scalar rows


@dataclass
class ScalarRows:
    """Every scalar constraint row of one world's step in one table (S rows), kind after kind in
    the order of :data:`sap_common.rows.ROW_KINDS`: the active limit rows, the holonomic
    constraints' rows, the drive rows (docs/formulation.md § The cost and its derivatives).

    Attributes:
        kind: :class:`~sap_common.rows.RowKind` of each row, (S,).
        J: the rows, (S, n) (n: the DOFs the table is restricted to).
        R, v_hat: regularization and bias velocity of the limit and holonomic rows, (S,)
            (1 and 0 on the drive rows, whose term does not read them).
        drive: the drive rows' parameters (:class:`DriveConstraints`, one per DRIVE row, in order).
    """

    kind: np.ndarray
    J: np.ndarray
    R: np.ndarray
    v_hat: np.ndarray
    drive: DriveConstraints
    _segments: tuple | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def from_parts(cls, drive: DriveConstraints, limit=None, holonomic=None) -> "ScalarRows":
        """The table of ``limit`` and ``holonomic`` rows, each ``(J, R, v̂)`` or None (no row), and the
        drive rows of ``drive``, in the order of ``ROW_KINDS`` (float64; J on the columns of ``drive.J``)."""
        n, D = drive.J.shape[1], len(drive.dof)
        none = (np.zeros((0, n)), np.zeros(0), np.zeros(0))
        blocks = {RowKind.LIMIT: none if limit is None else limit,
                  RowKind.HOLONOMIC: none if holonomic is None else holonomic,
                  RowKind.DRIVE: (drive.J, np.ones(D), np.zeros(D))}
        kind = np.concatenate([np.full(len(blocks[k][1]), int(k), np.int32) for k in ROW_KINDS])
        J, R, v_hat = (np.concatenate([np.asarray(blocks[k][i], np.float64) for k in ROW_KINDS]) for i in range(3))
        return cls(kind=kind, J=J.reshape(len(kind), n), R=R, v_hat=v_hat, drive=drive)

    def __len__(self) -> int:
        return len(self.kind)

    def rows(self, kind: RowKind) -> slice:
        """The rows of ``kind`` (a slice, empty if there are none: the kinds are contiguous, in
        ascending order)."""
        return dict(self.segments())[kind]

    def count(self, kind: RowKind) -> int:
        """The number of rows of ``kind``."""
        sl = self.rows(kind)
        return sl.stop - sl.start

    def segments(self) -> tuple:
        """``(kind, rows)`` of every kind, in the order of ``ROW_KINDS`` (a kind without rows gives
        an empty slice, which sums add as zero). Found once per table: every evaluation of the
        cost walks them several times."""
        if self._segments is None:
            ends = np.searchsorted(self.kind, [int(k) for k in ROW_KINDS] + [len(ROW_KINDS)], "left")
            self._segments = tuple((kind, slice(int(ends[i]), int(ends[i + 1]))) for i, kind in enumerate(ROW_KINDS))
        return self._segments

    def with_rows(self, kind: RowKind, J=None, R=None, v_hat=None) -> "ScalarRows":
        """A copy with the rows of ``kind`` given new values (those given; J on the table's columns).
        How a test substitutes another implementation's rows of one kind into this problem."""
        sl = self.rows(kind)
        new = {"J": self.J.copy(), "R": self.R.copy(), "v_hat": self.v_hat.copy()}
        for name, value in (("J", J), ("R", R), ("v_hat", v_hat)):
            if value is not None:
                new[name][sl] = value
        return ScalarRows(kind=self.kind, drive=self.drive, **new)

    def astype(self, dtype) -> "ScalarRows":
        c = lambda x: np.asarray(x, dtype=dtype)  # noqa: E731
        return ScalarRows(kind=self.kind, J=c(self.J), R=c(self.R), v_hat=c(self.v_hat), drive=self.drive)

    def restricted(self, dofs: np.ndarray) -> "ScalarRows":
        """The rows on the columns ``dofs`` (the participating DOFs)."""
        drive = DriveConstraints(**{**self.drive.__dict__, "J": self.drive.J[:, dofs]})
        return ScalarRows(kind=self.kind, J=self.J[:, dofs], R=self.R, v_hat=self.v_hat, drive=drive)


def scalar_rows(limits: LimitConstraints, holonomic: HolonomicRows, drives: DriveConstraints) -> ScalarRows:
    """The step's scalar rows from its set-up stages, in the order of ``ROW_KINDS``."""
    return ScalarRows.from_parts(drives, limit=(limits.J, limits.R, limits.v_hat),
                                 holonomic=(holonomic.J, holonomic.R, holonomic.v_hat))


# Each kind's term on its rows: (vc of those rows, the table, their slice) -> (gamma, G, ell).
ROW_TERMS = {
    RowKind.LIMIT: lambda vc, rows, sl: limit_terms(vc, rows.R[sl], rows.v_hat[sl]),
    RowKind.HOLONOMIC: lambda vc, rows, sl: holonomic_terms(vc, rows.R[sl], rows.v_hat[sl]),
    RowKind.DRIVE: lambda vc, rows, sl: drive_terms(vc, rows.drive),
}


def scalar_row_terms(vc: np.ndarray, rows: ScalarRows):
    """``(gamma, G, ell)`` of every scalar row at row velocities ``vc`` (S,): each kind's term
    (:data:`ROW_TERMS`) on its rows, in the dtype of ``vc``."""
    gamma, G, ell = np.zeros_like(vc), np.zeros_like(vc), np.zeros_like(vc)
    for kind, sl in rows.segments():
        if sl.stop > sl.start:
            gamma[sl], G[sl], ell[sl] = ROW_TERMS[kind](vc[sl], rows, sl)
    return gamma, G, ell

"""Stage 2 for contacts: frames, Jacobians J, weights w, regularization R and bias v̂.

For contact i between body 0 and body 1 (normal n̂ from shape 0 into shape 1):

* frame ``R_WC = [t̂₁ | t̂₂ | n̂]`` with Drake's tangent basis (``RotationMatrix::MakeFromOneUnitVector``);
* ``J_i v = R_WCᵀ [V₁(p₁) − V₀(p₀)]`` (3 × nv), rows (t₁, t₂, n): the velocity of body 1
  relative to body 0. ``witness_point`` mode uses p₀ = x₀, p₁ = x₁; ``contact_midpoint`` uses
  p₀ = p₁ = α₀x₀ + α₁x₁ with α₀ = k₀/(k₀+k₁) (Drake's stiffness-weighted point,
  docs/formulation.md § Contact frame and Jacobian);
* weight w_i: ``diag_delassus`` ``‖J_i diag(A)⁻¹ J_iᵀ‖_F / 3`` (Drake, docs/formulation.md § Weights) or
  ``body_inertia`` ``⅓ Σ_c Σ_b [1/m_b + (r_b × c)ᵀ I_b⁻¹ (r_b × c)]`` over the three frame
  directions c and the contact's dynamic bodies (r_b from the body's COM, in body axes),
  both floored at 1e-12 (docs/formulation.md § Weights);
* ``R = diag(σw, σw, max(β²w/(4π²), 1/(h k (h + τ_d))))`` and ``v̂ = (0, 0, −φ₀/(h + τ_d))``
  (docs/formulation.md § Regularization) for the ``sap`` approximation; for ``lagged`` and
  ``similar`` the Hunt–Crossley data fₑ₀ = −kφ₀, n₀ and ε_s instead
  (:func:`sap_ref.constraints.hunt_crossley_data`, docs/formulation.md § Hunt–Crossley contact).

Drake: ``DiscreteUpdateManager::AppendDiscreteContactPairsForPointContact``,
``SapModel::CalcDelassusDiagonalApproximation``, ``SapFrictionConeConstraint::DoMakeData``,
``SapHuntCrossleyConstraint::DoMakeData``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sap_common import spatial
from sap_common.config import precision_dtype
from sap_common.constants import WEIGHT_FLOOR
from sap_common.model import SapModel

from .kinematics import point_jacobian

__all__ = [
    "WEIGHT_FLOOR",
    "ContactGeometry",
    "contact_frames",
    "contact_points",
    "contact_geometry",
    "split_kinematic",
    "delassus_weights",
    "body_inertia_weights",
    "contact_regularization",
]


@dataclass
class ContactGeometry:
    """The contacts of one world, ready for the solve (C contacts, nv DOFs).

    Attributes:
        R_WC: contact frames, columns (t̂₁, t̂₂, n̂), world, (C, 3, 3).
        p0 / p1: points of body 0 / body 1 whose velocities J measures [m], world, (C, 3).
        J: contact Jacobians, rows (t₁, t₂, n), (C, 3, nv).
        phi0: signed distance at q₀ [m], (C,).
        mu, ke, tau_d: combined friction, stiffness [N/m], dissipation time [s], (C,).
        hcd: combined Hunt–Crossley dissipation [s/m], (C,).
        body0 / body1: body indices (−1 = world), (C,).
    """

    R_WC: np.ndarray
    p0: np.ndarray
    p1: np.ndarray
    J: np.ndarray
    phi0: np.ndarray
    mu: np.ndarray
    ke: np.ndarray
    tau_d: np.ndarray
    hcd: np.ndarray
    body0: np.ndarray
    body1: np.ndarray


def contact_frames(normals: np.ndarray) -> np.ndarray:
    """``R_WC (C, 3, 3)`` with z = n̂ and Drake's tangents (docs/formulation.md § Contact frame and Jacobian).

    With u = n̂, i the index of u's smallest |u_i| (first on ties), j = i+1, k = j+1 (mod 3),
    r = 1/√(1 − u_i²), s = −r u_i: x-axis v (v_i = 0, v_j = −r u_k, v_k = r u_j), y-axis w
    (w_i = √(1 − u_i²), w_j = s u_j, w_k = s u_k).
    """
    normals = np.asarray(normals, dtype=np.float64).reshape(-1, 3)
    R = np.zeros((len(normals), 3, 3))
    for c, u in enumerate(normals):
        i = int(np.argmin(np.abs(u)))
        j, k = (i + 1) % 3, (i + 2) % 3
        root = np.sqrt(1.0 - u[i] * u[i])
        r, s = 1.0 / root, -u[i] / root
        R[c, [i, j, k], 0] = [0.0, -r * u[k], r * u[j]]
        R[c, [i, j, k], 1] = [root, s * u[j], s * u[k]]
        R[c, :, 2] = u
    return R


def _midpoint_weights(k0: np.ndarray, k1: np.ndarray) -> np.ndarray:
    """α₀ = k₀/(k₀+k₁), with ½ for 0/0 and ∞/∞, and 1/0 for ∞ against a finite stiffness."""
    k0, k1 = np.asarray(k0, dtype=np.float64), np.asarray(k1, dtype=np.float64)
    a0 = np.full(k0.shape, 0.5)
    inf0, inf1 = np.isinf(k0), np.isinf(k1)
    a0[inf0 & ~inf1] = 1.0
    a0[~inf0 & inf1] = 0.0
    finite = ~inf0 & ~inf1 & (k0 + k1 > 0.0)
    a0[finite] = k0[finite] / (k0[finite] + k1[finite])
    return a0


def contact_points(x0, x1, ke0, ke1, mode: str):
    """``(p0, p1)``: the points whose velocities the Jacobian compares (``contact_point_mode``)."""
    x0, x1 = np.asarray(x0, dtype=np.float64), np.asarray(x1, dtype=np.float64)
    if mode == "witness_point":
        return x0.copy(), x1.copy()
    if mode == "contact_midpoint":
        a0 = _midpoint_weights(ke0, ke1)[:, None]
        p = a0 * x0 + (1.0 - a0) * x1
        return p, p.copy()
    raise ValueError(f"contact_point_mode: {mode!r} is not valid; valid: witness_point, contact_midpoint")


def contact_geometry(model: SapModel, contacts, world: int, body_q: np.ndarray, J_bodies: np.ndarray,
                     point_mode: str) -> ContactGeometry:
    """Frames, points and Jacobians of world ``world``'s valid contacts."""
    n = int(contacts.count[world])
    sl = (world, slice(0, n))
    body0, body1 = contacts.body0[sl].astype(np.int64), contacts.body1[sl].astype(np.int64)
    R_WC = contact_frames(contacts.normal[sl])
    p0, p1 = contact_points(contacts.x0[sl], contacts.x1[sl], contacts.ke0[sl], contacts.ke1[sl], point_mode)
    J = np.zeros((n, 3, model.joint_dof_count))
    for c in range(n):
        Jv = point_jacobian(model, int(body1[c]), p1[c], body_q, J_bodies) - point_jacobian(
            model, int(body0[c]), p0[c], body_q, J_bodies)
        J[c] = R_WC[c].T @ Jv
    return ContactGeometry(R_WC=R_WC, p0=p0, p1=p1, J=J, phi0=contacts.phi0[sl].astype(np.float64),
                           mu=contacts.mu[sl].astype(np.float64), ke=contacts.ke[sl].astype(np.float64),
                           tau_d=contacts.tau_d[sl].astype(np.float64), hcd=contacts.hcd[sl].astype(np.float64),
                           body0=body0, body1=body1)


def split_kinematic(model: SapModel, J: np.ndarray, v0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(J_dyn (C, 3, nv), vc_kin (C, 3))``: the contact Jacobians on the dynamic DOFs and the known
    contact velocity of the kinematic DOFs (docs/formulation.md § Kinematic bodies).

    ``vc = J v = J_dyn v_dyn + J_kin v_kin`` with ``v_kin = v₀`` prescribed: ``J_dyn`` is J with the
    kinematic columns zeroed and ``vc_kin = J_kin v₀``. The friction cone depends on ``v̂ − vc`` only,
    so the problem takes ``J_dyn`` and ``v̂ − vc_kin``: exactly the same cost in the dynamic DOFs.
    Without kinematic bodies J is returned as it is and ``vc_kin`` is zero.
    """
    kinematic = model.dof_kinematic
    vc_kin = np.zeros(J.shape[:2])
    if not np.any(kinematic):
        return J, vc_kin
    vc_kin = np.einsum("cik,k->ci", J[:, :, kinematic], np.asarray(v0, dtype=np.float64)[kinematic])
    J_dyn = J.copy()
    J_dyn[:, :, kinematic] = 0.0
    return J_dyn, vc_kin


def delassus_weights(J: np.ndarray, A_diag: np.ndarray, precision: str = "fp64") -> np.ndarray:
    """Drake's ``w_i = ‖J_i diag(A)⁻¹ J_iᵀ‖_F / n_i`` for constraint blocks ``J (m, n_i, nv)``."""
    dt = precision_dtype(precision)
    J = np.asarray(J, dtype=dt)
    W = np.einsum("cik,k,cjk->cij", J, (1.0 / np.asarray(A_diag, dtype=dt)).astype(dt), J)
    w = np.sqrt(np.sum(W * W, axis=(1, 2))) / J.shape[1]
    return np.maximum(w, dt(WEIGHT_FLOOR))


def body_inertia_weights(model: SapModel, geometry: ContactGeometry, body_q: np.ndarray,
                         precision: str = "fp64") -> np.ndarray:
    """``body_inertia`` weights (docs/formulation.md § Weights): each dynamic body's inverse inertia at the contact.

    ``ω_b(c) = 1/m_b + (R_bᵀ(r_b × c))ᵀ I_b⁻¹ (R_bᵀ(r_b × c))`` with r_b from the body's COM to
    its contact point, summed over the contact's dynamic bodies (not the world, welded or kinematic
    bodies: infinite mass), averaged over c ∈ (t₁, t₂, n).
    """
    dt = precision_dtype(precision)
    C = len(geometry.phi0)
    w = np.zeros(C, dtype=dt)
    com_W = spatial.transform_point(body_q, model.body_com) if model.body_count else np.zeros((0, 3))
    for c in range(C):
        for b, p in ((geometry.body0[c], geometry.p0[c]), (geometry.body1[c], geometry.p1[c])):
            if b < 0 or model.body_static[b] or model.body_kinematic[b] or model.body_mass[b] == 0.0:
                continue
            R_b = spatial.quat_to_matrix(body_q[b, 3:]).astype(dt)
            I_inv = np.linalg.inv(model.body_inertia[b].astype(dt))
            r = (p - com_W[b]).astype(dt)
            for axis in range(3):
                arm = R_b.T @ spatial.cross(r, geometry.R_WC[c, :, axis]).astype(dt)
                w[c] += dt(1.0) / dt(model.body_mass[b]) + arm @ I_inv @ arm
        w[c] = w[c] / dt(3.0)
    return np.maximum(w, dt(WEIGHT_FLOOR))


def contact_regularization(w, ke, tau_d, phi0, dt: float, beta: float, sigma: float,
                           precision: str = "fp64"):
    """``(R (C, 3), v_hat (C, 3))`` of the friction-cone constraints (docs/formulation.md § Regularization).

    ``R_t = σ w``, ``R_n = max(β² w/(4π²), 1/(h k (h + τ_d)))`` (k = ∞ gives the near-rigid
    value), ``v̂ = (0, 0, −φ₀/(h + τ_d))`` with the user τ_d even when R_n is the floor.
    """
    d = precision_dtype(precision)
    w, ke, tau_d, phi0 = (np.asarray(x, dtype=d) for x in (w, ke, tau_d, phi0))
    h, beta, sigma = d(dt), d(beta), d(sigma)
    with np.errstate(divide="ignore"):
        R_compliant = d(1.0) / (h * ke * (h + tau_d))  # 0 for ke = inf
    R_n = np.maximum(beta * beta / d(4.0 * np.pi**2) * w, R_compliant)
    R = np.stack([sigma * w, sigma * w, R_n], axis=-1)
    v_hat = np.zeros_like(R)
    v_hat[:, 2] = -phi0 / (h + tau_d)
    return R, v_hat


"""Collision rules both narrow phases share: contacts per shape pair and material combination.

``sap_ref.collision`` and ``sap_gpu.collision`` implement the same narrow phase; what decides
*how many* contacts a pair may give and *which* material a contact gets lives here once.
"""

from __future__ import annotations

import math

import numpy as np

from .enums import ShapeType

__all__ = ["MAX_CONTACTS_PER_PAIR", "contact_capacity", "combine_materials"]

_P, _S, _C, _B = ShapeType.PLANE, ShapeType.SPHERE, ShapeType.CAPSULE, ShapeType.BOX
# Most contacts one pair can produce, by unordered pair of shape types.
MAX_CONTACTS_PER_PAIR = {
    frozenset([_P, _S]): 1, frozenset([_P, _C]): 2, frozenset([_P, _B]): 8, frozenset([_S]): 1,
    frozenset([_S, _C]): 1, frozenset([_S, _B]): 1, frozenset([_C]): 2, frozenset([_C, _B]): 3, frozenset([_B]): 8,
}


def contact_capacity(model) -> int:
    """Most contacts the narrow phase can report for one world: Σ over ``model.shape_pair`` of
    ``MAX_CONTACTS_PER_PAIR`` (a ``max_rigid_contact`` that can never overflow)."""
    return sum(MAX_CONTACTS_PER_PAIR[frozenset([ShapeType(int(model.shape_type[a])),
                                                ShapeType(int(model.shape_type[b]))])]
               for a, b in model.shape_pair)


def combine_materials(model, a: int, b: int, config):
    """``(mu, ke, ke0, ke1, tau_d)`` of shapes (a, b) with the config's fallbacks.

    docs/formulation.md § Material combination.

    Per shape, NaN → ``fallback_mu`` / ``fallback_stiffness`` / ``contact_tau_d``. Then
    μ = 2μ₀μ₁/(μ₀+μ₁) (0 if both are 0), k = k₀k₁/(k₀+k₁) (one ∞: the other; both ∞: ∞; both 0: 0),
    τ_d = τ₀ + τ₁; ke0, ke1 are the resolved per-shape stiffnesses. Drake:
    ``CalcContactFrictionFromSurfaceProperties``, ``GetCombinedPointContactStiffness``,
    ``GetCombinedDissipationTimeConstant``.
    """
    def get(arr, s, fallback):
        v = arr[s]
        return float(fallback) if np.isnan(v) else float(v)

    mu0, mu1 = (get(model.shape_material_mu, s, config.fallback_mu) for s in (a, b))
    k0, k1 = (get(model.shape_material_ke, s, config.fallback_stiffness) for s in (a, b))
    t0, t1 = (get(model.shape_material_tau, s, config.contact_tau_d) for s in (a, b))
    mu = 0.0 if mu0 + mu1 == 0.0 else 2.0 * mu0 * mu1 / (mu0 + mu1)
    if math.isinf(k0) or math.isinf(k1):
        ke = k1 if math.isinf(k0) else k0
    else:
        ke = 0.0 if k0 + k1 == 0.0 else k0 * k1 / (k0 + k1)
    return mu, ke, k0, k1, t0 + t1

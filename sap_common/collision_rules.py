"""Collision rules both narrow phases share: contacts per shape pair and material combination.

``sap_ref.collision`` and ``sap_gpu.collision`` implement the same narrow phase; what decides
*how many* contacts a pair may give and *which* material a contact gets lives here once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .constants import MANIFOLD_MAX_POINTS
from .enums import ShapeType

__all__ = ["MAX_CONTACTS_PER_PAIR", "contact_capacity", "pair_capacity", "combine_materials",
           "combine_hc_dissipation", "check_hunt_crossley_materials", "MaterialFallbacks",
           "check_contact_materials", "BROAD_PHASES",
           "check_broad_phase"]

# Broad-phase modes of both collision pipelines: "aabb" tests a candidate pair's narrow phase only
# when the two shapes' world bounding boxes (grown by their margins) overlap (a plane: when the
# other box reaches below its surface plus the margins); "none" runs the narrow phase on every
# candidate pair. Both give the same contacts (docs/design.md § Collision).
BROAD_PHASES = ("aabb", "none")


def check_broad_phase(broad_phase) -> str:
    """``broad_phase`` if it is one of ``BROAD_PHASES``, else ``ValueError`` naming the valid values."""
    if not isinstance(broad_phase, str) or broad_phase not in BROAD_PHASES:
        raise ValueError(f"broad_phase: expected one of {', '.join(BROAD_PHASES)}, got {broad_phase!r}")
    return broad_phase

_P, _S, _C, _B = ShapeType.PLANE, ShapeType.SPHERE, ShapeType.CAPSULE, ShapeType.BOX
_CY, _E, _M, _H = ShapeType.CYLINDER, ShapeType.ELLIPSOID, ShapeType.CONVEX_MESH, ShapeType.HEIGHTFIELD


def _max_contacts() -> dict:
    """Most contacts one pair can produce, by unordered pair of shape types.

    The four primitives keep their own routines; a pair with a cylinder, ellipsoid, mesh or height
    field gets a manifold of at most ``MANIFOLD_MAX_POINTS`` (4) points, or 1 where a sphere or an
    ellipsoid (which touch in one point) meets anything but a height field (whose creases it can
    touch in several); plane–ellipsoid 1. Plane–height field and
    height field–height field never meet (both live on the world)."""
    table = {
        frozenset([_P, _S]): 1, frozenset([_P, _C]): 2, frozenset([_P, _B]): 8, frozenset([_S]): 1,
        frozenset([_S, _C]): 1, frozenset([_S, _B]): 1, frozenset([_C]): 2, frozenset([_C, _B]): 3, frozenset([_B]): 8,
    }
    for a in ShapeType:
        for b in ShapeType:
            key = frozenset([a, b])
            if key in table or key in (frozenset([_P]), frozenset([_P, _H]), frozenset([_H])):
                continue
            table[key] = 1 if (_S in key or _E in key) and _H not in key else MANIFOLD_MAX_POINTS
    return table


MAX_CONTACTS_PER_PAIR = _max_contacts()


def contact_capacity(model) -> int:
    """Most contacts the narrow phase can report for one world: Σ over ``model.shape_pair`` of
    ``MAX_CONTACTS_PER_PAIR`` (a ``max_rigid_contact`` that can never overflow)."""
    return sum(pair_capacity(model))


def pair_capacity(model) -> np.ndarray:
    """``MAX_CONTACTS_PER_PAIR`` of each candidate pair of ``model.shape_pair``, (P,) int."""
    return np.array([MAX_CONTACTS_PER_PAIR[frozenset([ShapeType(int(model.shape_type[a])),
                                                      ShapeType(int(model.shape_type[b]))])]
                     for a, b in model.shape_pair], dtype=np.int64)


@dataclass(frozen=True)
class MaterialFallbacks:
    """The configuration knobs a collision pipeline combines materials with: what a shape that sets
    no friction, stiffness, dissipation time scale or Hunt–Crossley dissipation gets
    (``SapConfig.fallback_mu``, ``fallback_stiffness``, ``contact_tau_d``,
    ``fallback_hc_dissipation``). A pipeline stamps them on the contacts it fills
    (``contacts.materials``), and a solver refuses contacts stamped with other values than its own
    configuration's: the contacts' μ, k, τ_d and d would silently follow another configuration."""

    fallback_mu: float
    fallback_stiffness: float
    contact_tau_d: float
    fallback_hc_dissipation: float = 50.0

    @classmethod
    def of(cls, config) -> "MaterialFallbacks":
        return cls(float(config.fallback_mu), float(config.fallback_stiffness), float(config.contact_tau_d),
                   float(config.fallback_hc_dissipation))


def check_contact_materials(contacts, config) -> None:
    """``ValueError`` if ``contacts`` were filled by a pipeline whose material fallbacks differ from
    ``config``'s (contacts filled by other means carry no stamp and are not checked)."""
    made = getattr(contacts, "materials", None)
    if made is None:
        return
    mine = MaterialFallbacks.of(config)
    if made != mine:
        diff = ", ".join(f"{k} {getattr(made, k)!r} (solver: {getattr(mine, k)!r})"
                         for k in ("fallback_mu", "fallback_stiffness", "contact_tau_d", "fallback_hc_dissipation")
                         if getattr(made, k) != getattr(mine, k))
        raise ValueError(f"contacts: made by a CollisionPipeline whose configuration differs from the solver's: "
                         f"{diff}; build the pipeline with the solver's configuration: "
                         f"CollisionPipeline(model, max_rigid_contact, solver.config)")


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


def combine_hc_dissipation(model, a: int, b: int, config) -> float:
    """The Hunt–Crossley dissipation d [s/m] of shapes (a, b) with the config's fallbacks.

    docs/formulation.md § Material combination. Per shape, NaN → ``fallback_hc_dissipation``
    (d) and ``fallback_stiffness`` (k). Each shape's d is weighted by the *other* shape's
    stiffness, ``d = k₁/(k₀+k₁)·d₀ + k₀/(k₀+k₁)·d₁`` (the softer shape deforms more, so its
    dissipation counts more); a rigid shape (k = ∞) contributes nothing: the other shape's d; both
    k = 0 gives 0. Drake: ``GetCombinedHuntCrossleyDissipation`` (contact_properties.cc). Example:
    k = 1e5 with d = 5 against k = 4e5 with d = 20 gives 0.8·5 + 0.2·20 = 8 s/m, not the mean 12.5.
    """
    def get(arr, s, fallback):
        v = arr[s]
        return float(fallback) if np.isnan(v) else float(v)

    hcd = getattr(model, "shape_material_hcd", None)
    d0, d1 = ((config.fallback_hc_dissipation if hcd is None else get(hcd, s, config.fallback_hc_dissipation))
              for s in (a, b))
    k0, k1 = (get(model.shape_material_ke, s, config.fallback_stiffness) for s in (a, b))
    if math.isinf(k0) and math.isinf(k1):
        return 0.5 * (d0 + d1)  # two rigid shapes (a pair the Hunt–Crossley solvers refuse): neither deforms more
    if math.isinf(k0):
        return d1
    if math.isinf(k1):
        return d0
    denom = k0 + k1
    if denom == 0.0:
        return 0.0
    return (k1 / denom) * d0 + (k0 / denom) * d1


def check_hunt_crossley_materials(model, config) -> None:
    """``ValueError`` if ``config`` asks for a Hunt–Crossley approximation (``lagged``, ``similar``)
    and a shape of a candidate pair is rigid (``shape_material_ke`` = inf): the constraint's normal
    impulse h·(fₑ₀ − hkv)₊(1 − dv)₊ needs a finite stiffness (Drake refuses rigid point contact
    too). Checked once, when a solver is built. A kinematic body (``body_kinematic``) is refused
    with them too: its known contact velocity enters the friction cone through v̂, and a
    Hunt–Crossley constraint has no v̂ (docs/formulation.md § Kinematic bodies)."""
    if config.discrete_contact_approximation == "sap":
        return
    for b in np.flatnonzero(model.body_kinematic):
        raise ValueError(f"body_kinematic[{b}] ({model.body_name[b]}): kinematic bodies are solved with "
                         f"discrete_contact_approximation 'sap' only, got "
                         f"{config.discrete_contact_approximation!r}")
    in_pairs = {int(s) for pair in model.shape_pair for s in pair}
    for s in sorted(in_pairs):
        if math.isinf(model.shape_material_ke[s]):
            raise ValueError(f"shape_material_ke[{s}] ({model.shape_name[s]}): inf (rigid) has no Hunt–Crossley "
                             f"counterpart; with discrete_contact_approximation "
                             f"{config.discrete_contact_approximation!r} give it a finite stiffness > 0 (or NaN for "
                             f"fallback_stiffness), or use discrete_contact_approximation 'sap'")

"""Collision: the narrow phase for the model's candidate shape pairs, one world at a time.

``CollisionPipeline(model, max_rigid_contact).collide(state, contacts)`` fills
:class:`~sap_common.state.SapContacts` (DESIGN §4, §6). For a candidate pair (a, b) of
``model.shape_pair``, shape 0 = a and shape 1 = b whatever their types:

* ``normal`` n̂ points from shape 0 into shape 1; ``x0`` is the point of shape 0 deepest into
  shape 1 (on shape 0's surface), ``x1`` the point of shape 1 deepest into shape 0, and
  ``phi0 = n̂·(x1 − x0)`` (so x1 − x0 = φ₀ n̂, φ₀ < 0 in penetration) — spec §8.1/§8.2;
* a contact is kept while ``phi0 < margin0 + margin1``;
* materials per shape (NaN = unset → the config's ``fallback_mu``, ``fallback_stiffness``,
  ``contact_tau_d``) combine as Drake does (spec §8.3): ``μ = 2μ₀μ₁/(μ₀+μ₁)``,
  ``k = k₀k₁/(k₀+k₁)``, ``τ_d = τ₀ + τ₁``;
* beyond ``max_rigid_contact`` per world the deepest contacts are kept (ties: generation
  order), kept contacts stay in generation order, and the dropped ones are counted in
  ``contacts.overflow``.

Point sets per pair (``MAX_CONTACTS_PER_PAIR``): plane–sphere 1, plane–capsule 2 (segment ends),
plane–box 8 (corners), sphere–sphere 1, sphere–capsule 1, sphere–box 1, capsule–capsule 1
(2 at the overlap ends when parallel), capsule–box 3 (segment ends, plus the segment's deepest
point when it is deeper than both ends), box–box 8 (see ``collision_box``).
Drake: ``QueryObject::ComputePointPairPenetration`` for point contact.
"""

from __future__ import annotations

import math

import numpy as np

from sap_common import spatial
from sap_common.config import SapConfig
from sap_common.model import SapModel, ShapeType
from sap_common.state import SapContacts, SapState, check_contacts, check_state

from .collision_box import box_box, box_signed_distance, closest_point_on_box, segment_closest_points

__all__ = ["CollisionPipeline", "MAX_CONTACTS_PER_PAIR", "contact_capacity", "pair_contacts",
           "combine_materials"]

P, S, C, B = ShapeType.PLANE, ShapeType.SPHERE, ShapeType.CAPSULE, ShapeType.BOX
MAX_CONTACTS_PER_PAIR = {
    frozenset([P, S]): 1, frozenset([P, C]): 2, frozenset([P, B]): 8, frozenset([S]): 1,
    frozenset([S, C]): 1, frozenset([S, B]): 1, frozenset([C]): 2, frozenset([C, B]): 3, frozenset([B]): 8,
}
# Normal used when two centres coincide and no direction is defined (any fixed unit vector
# keeps the result deterministic).
DEFAULT_NORMAL = np.array([0.0, 0.0, 1.0])
# Closer than this [m], two core points "coincide": their difference is rounding noise and its
# direction meaningless, so the routine's fallback normal is used instead.
COINCIDENT_DISTANCE = 1e-12
# Segments whose directions' cross product is below this (unit directions) count as parallel.
PARALLEL_TOL = 1e-6
# capsule–box: the segment's interior minimum is a separate contact only when it is deeper than
# both ends by more than this [m] (a capsule lying flat on a face gives just its two ends).
INTERIOR_DEPTH_MARGIN = 1e-6
GOLDEN_ITERATIONS = 80  # golden-section steps on [0, 1]: 0.618^80 ≈ 2e-17


def contact_capacity(model: SapModel) -> int:
    """Most contacts the narrow phase can report for one world of ``model``."""
    return sum(MAX_CONTACTS_PER_PAIR[frozenset([ShapeType(int(model.shape_type[a])),
                                                ShapeType(int(model.shape_type[b]))])]
               for a, b in model.shape_pair)


def _unit(v, fallback=DEFAULT_NORMAL) -> np.ndarray:
    n = np.linalg.norm(v)
    return np.array(fallback, dtype=np.float64) if n < COINCIDENT_DISTANCE else v / n


def _perpendicular(X) -> np.ndarray:
    """A shape frame's x axis: perpendicular to a capsule's segment (used when no normal is defined)."""
    return spatial.quat_rotate(X[3:], [1.0, 0.0, 0.0])


def _segment(X, half_length):
    """World end points of a capsule's segment (along the shape frame's z)."""
    axis = spatial.quat_rotate(X[3:], [0.0, 0.0, half_length])
    return X[:3] - axis, X[:3] + axis


def _closest_on_segment(p0, p1, x):
    d = p1 - p0
    dd = d @ d
    t = 0.0 if dd == 0.0 else float(np.clip((x - p0) @ d / dd, 0.0, 1.0))
    return p0 + t * d


# ----------------------------------------------------------------------------- pair routines
# Each returns a list of (x0, x1, normal, phi0) for its canonical order (lower ShapeType first).


def plane_sphere(Xp, size_p, Xs, size_s):
    """φ = n̂·(c − p₀) − r; x0 = c − (φ + r) n̂ (on the plane), x1 = c − r n̂."""
    n = spatial.quat_rotate(Xp[3:], [0.0, 0.0, 1.0])
    c, r = Xs[:3], size_s[0]
    d = n @ (c - Xp[:3])
    return [(c - d * n, c - r * n, n, d - r)]


def plane_capsule(Xp, size_p, Xc, size_c):
    """The two segment end spheres against the plane (φ is linear along the segment).

    Each end reports its end sphere's deepest point: on the capsule's surface for the deeper
    end (and for both when the capsule lies flat), inside the capsule body for the shallower
    end of a tilted capsule — the usual two-point manifold of a capsule.
    """
    out = []
    for e in _segment(Xc, size_c[1]):
        out += plane_sphere(Xp, size_p, np.concatenate([e, Xc[3:]]), size_c)
    return out


def _box_corners(Xb, size_b):
    signs = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)], dtype=float)
    return spatial.transform_point(np.broadcast_to(Xb, (8, 7)), signs * size_b)


def plane_box(Xp, size_p, Xb, size_b):
    """Each of the 8 corners: φ = n̂·(corner − p₀), x0 its projection on the plane."""
    n = spatial.quat_rotate(Xp[3:], [0.0, 0.0, 1.0])
    out = []
    for corner in _box_corners(Xb, size_b):
        d = n @ (corner - Xp[:3])
        out.append((corner - d * n, corner, n, d))
    return out


def _sphere_sphere(c0, r0, c1, r1, fallback=DEFAULT_NORMAL):
    n = _unit(c1 - c0, fallback)
    return (c0 + r0 * n, c1 - r1 * n, n, np.linalg.norm(c1 - c0) - r0 - r1)


def sphere_sphere(X0, size0, X1, size1):
    """Centres c₀, c₁: n̂ = (c₁ − c₀)/|c₁ − c₀|, φ = |c₁ − c₀| − r₀ − r₁ (n̂ = +z if they coincide;
    with a capsule, a direction ⊥ its segment)."""
    return [_sphere_sphere(X0[:3], size0[0], X1[:3], size1[0])]


def sphere_capsule(Xs, size_s, Xc, size_c):
    """Sphere against the capsule's segment point closest to the sphere centre."""
    q = _closest_on_segment(*_segment(Xc, size_c[1]), Xs[:3])
    # Centre on the segment: any direction ⊥ the segment keeps both points on their surfaces.
    return [_sphere_sphere(Xs[:3], size_s[0], q, size_c[0], _perpendicular(Xc))]


def sphere_box(Xs, size_s, Xb, size_b):
    """Closest box point q to the centre c: outside, n̂ = (c − q)/|c − q| from the box; inside,
    the face of least penetration. Returned for the order (sphere, box)."""
    c, r = Xs[:3], size_s[0]
    q, n_box, dist = closest_point_on_box(Xb, size_b, c)  # n_box: outward from the box at q
    # dist is the signed distance of c to the box (negative inside).
    return [(c - r * n_box, q, -n_box, dist - r)]


def capsule_capsule(X0, size0, X1, size1):
    """Closest points of the two segments as spheres; for (nearly) parallel overlapping
    segments, the two ends of the overlap instead (a stable line contact)."""
    a0, a1 = _segment(X0, size0[1])
    b0, b1 = _segment(X1, size1[1])
    da, db = a1 - a0, b1 - b0
    la, lb = np.linalg.norm(da), np.linalg.norm(db)
    if la > 0 and lb > 0 and np.linalg.norm(np.cross(da / la, db / lb)) < PARALLEL_TOL:
        u = da / la
        s0, s1 = sorted(((b0 - a0) @ u, (b1 - a0) @ u))
        lo, hi = max(0.0, s0), min(la, s1)
        if hi > lo:
            out = []
            for s in (lo, hi):
                pa = a0 + s * u
                out.append(_sphere_sphere(pa, size0[0], _closest_on_segment(b0, b1, pa), size1[0],
                                          _perpendicular(X0)))
            return out
    pa, pb = segment_closest_points(a0, a1, b0, b1)
    # Intersecting segments: a direction ⊥ both axes keeps both points on their surfaces: the
    # axes' common perpendicular, else (parallel, or a zero-length segment) a ⊥ of the other one.
    fallback = np.cross(da, db)
    if np.linalg.norm(fallback) < PARALLEL_TOL * max(la * lb, 1e-300):
        fallback = _perpendicular(X1) if la == 0.0 else _perpendicular(X0)
    return [_sphere_sphere(pa, size0[0], pb, size1[0], _unit(fallback))]


def capsule_box(Xc, size_c, Xb, size_b):
    """Segment end spheres against the box, plus the segment point of least signed distance to
    the box (convex along the segment: golden section) when deeper than both ends."""
    p0, p1 = _segment(Xc, size_c[1])
    sd = lambda t: box_signed_distance(Xb, size_b, p0 + t * (p1 - p0))  # noqa: E731
    out = []
    for p in (p0, p1):
        out += sphere_box(np.concatenate([p, Xc[3:]]), size_c, Xb, size_b)
    lo, hi = 0.0, 1.0
    g = (math.sqrt(5.0) - 1.0) / 2.0
    x1, x2 = hi - g * (hi - lo), lo + g * (hi - lo)
    f1, f2 = sd(x1), sd(x2)
    for _ in range(GOLDEN_ITERATIONS):
        if f1 <= f2:
            hi, x2, f2 = x2, x1, f1
            x1 = hi - g * (hi - lo)
            f1 = sd(x1)
        else:
            lo, x1, f1 = x1, x2, f2
            x2 = lo + g * (hi - lo)
            f2 = sd(x2)
    t = 0.5 * (lo + hi)
    if sd(t) < min(sd(0.0), sd(1.0)) - INTERIOR_DEPTH_MARGIN:
        out += sphere_box(np.concatenate([p0 + t * (p1 - p0), Xc[3:]]), size_c, Xb, size_b)
    return out


_ROUTINES = {
    (P, S): plane_sphere, (P, C): plane_capsule, (P, B): plane_box, (S, S): sphere_sphere,
    (S, C): sphere_capsule, (S, B): sphere_box, (C, C): capsule_capsule, (C, B): capsule_box,
    (B, B): box_box,
}


def pair_contacts(type0, X0, size0, type1, X1, size1):
    """Contacts ``[(x0, x1, normal, phi0)]`` of shape 0 against shape 1 (any type order)."""
    t0, t1 = ShapeType(int(type0)), ShapeType(int(type1))
    if (t0, t1) in _ROUTINES:
        return _ROUTINES[(t0, t1)](X0, size0, X1, size1)
    if (t1, t0) in _ROUTINES:  # canonical order is (t1, t0): swap the points, flip the normal
        return [(x1, x0, -n, phi) for x0, x1, n, phi in _ROUTINES[(t1, t0)](X1, size1, X0, size0)]
    raise ValueError(f"shape_type: no narrow phase for {t0.name}–{t1.name}")


def combine_materials(model: SapModel, a: int, b: int, config: SapConfig):
    """``(mu, ke, ke0, ke1, tau_d)`` of pair (a, b) with the config's fallbacks (spec §8.3)."""
    def get(arr, s, fallback):
        v = arr[s]
        return fallback if np.isnan(v) else float(v)

    mu0, mu1 = (get(model.shape_material_mu, s, config.fallback_mu) for s in (a, b))
    k0, k1 = (get(model.shape_material_ke, s, config.fallback_stiffness) for s in (a, b))
    t0, t1 = (get(model.shape_material_tau, s, config.contact_tau_d) for s in (a, b))
    mu = 0.0 if mu0 + mu1 == 0.0 else 2.0 * mu0 * mu1 / (mu0 + mu1)
    if math.isinf(k0) or math.isinf(k1):
        ke = k1 if math.isinf(k0) else k0
    else:
        ke = k0 * k1 / (k0 + k1)
    return mu, ke, k0, k1, t0 + t1


class CollisionPipeline:
    """Narrow phase over ``model.shape_pair`` for every world (NumPy, one world at a time).

    Args:
        model: the model.
        max_rigid_contact: contact slots per world (≥ 0).
        config: supplies the material fallbacks (default ``SapConfig()``).
    """

    def __init__(self, model: SapModel, max_rigid_contact: int, config: SapConfig | None = None):
        if not isinstance(model, SapModel):
            raise ValueError(f"model: expected a SapModel, got {type(model).__name__}")
        if isinstance(max_rigid_contact, bool) or not isinstance(max_rigid_contact, (int, np.integer)) \
                or max_rigid_contact < 0:
            raise ValueError(f"max_rigid_contact: must be an integer >= 0, got {max_rigid_contact!r}")
        self.model, self.max_rigid_contact = model, int(max_rigid_contact)
        self.config = config or SapConfig()
        self._materials = [combine_materials(model, int(a), int(b), self.config) for a, b in model.shape_pair]

    def contacts(self) -> SapContacts:
        """Empty contact buffers for this pipeline."""
        return SapContacts.allocate(self.model.num_worlds, self.max_rigid_contact)

    def _shape_pose(self, body_q, s):
        b = int(self.model.shape_body[s])
        X = self.model.shape_transform[s]
        return X if b < 0 else spatial.transform_compose(body_q[b], X)

    def collide(self, state: SapState, contacts: SapContacts) -> None:
        """Fill ``contacts`` from ``state.body_q`` for every world."""
        m = self.model
        check_state(m, state, "state")
        if not isinstance(contacts, SapContacts):
            raise ValueError(f"contacts: expected SapContacts, got {type(contacts).__name__}")
        check_contacts(m, contacts)
        if contacts.capacity != self.max_rigid_contact:
            raise ValueError(f"contacts: capacity {contacts.capacity} does not match max_rigid_contact "
                             f"{self.max_rigid_contact}")
        for w in range(m.num_worlds):
            self._collide_world(state.body_q[w], contacts, w)

    def _collide_world(self, body_q, contacts: SapContacts, w: int) -> None:
        m = self.model
        found = []
        for (a, b), mat in zip(m.shape_pair, self._materials):
            a, b = int(a), int(b)
            margin = m.shape_margin[a] + m.shape_margin[b]
            for x0, x1, n, phi in pair_contacts(m.shape_type[a], self._shape_pose(body_q, a), m.shape_size[a],
                                                m.shape_type[b], self._shape_pose(body_q, b), m.shape_size[b]):
                if phi < margin and np.isfinite(phi):
                    found.append((a, b, x0, x1, n, float(phi), mat))
        keep = range(len(found))
        if len(found) > self.max_rigid_contact:  # keep the deepest, in generation order
            keep = sorted(sorted(keep, key=lambda i: (found[i][5], i))[:self.max_rigid_contact])
        keep = list(keep)
        for f in ("shape0", "shape1", "body0", "body1"):
            getattr(contacts, f)[w] = -1
        for f in ("x0", "x1", "normal", "phi0", "margin0", "margin1", "mu", "ke", "ke0", "ke1", "tau_d"):
            getattr(contacts, f)[w] = 0.0
        for slot, i in enumerate(keep):
            a, b, x0, x1, n, phi, (mu, ke, k0, k1, tau) = found[i]
            contacts.shape0[w, slot], contacts.shape1[w, slot] = a, b
            contacts.body0[w, slot], contacts.body1[w, slot] = m.shape_body[a], m.shape_body[b]
            contacts.x0[w, slot], contacts.x1[w, slot], contacts.normal[w, slot] = x0, x1, n
            contacts.phi0[w, slot] = phi
            contacts.margin0[w, slot], contacts.margin1[w, slot] = m.shape_margin[a], m.shape_margin[b]
            contacts.mu[w, slot], contacts.ke[w, slot] = mu, ke
            contacts.ke0[w, slot], contacts.ke1[w, slot], contacts.tau_d[w, slot] = k0, k1, tau
        contacts.count[w] = len(keep)
        contacts.overflow[w] = len(found) - len(keep)

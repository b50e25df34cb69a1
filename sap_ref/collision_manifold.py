"""Multi-point contact (manifolds) for the general convex pairs and the plane pairs of the new
shapes. Readable NumPy; ``sap_gpu.collision_manifold`` is the same algorithm.

One point cannot hold a face: a cube resting on one point contact tips about it. Where a face
touches, a pair therefore reports up to ``MANIFOLD_MAX_POINTS`` (4) points:

1. **Reference face.** After GJK/EPA (:mod:`sap_ref.collision_convex`) gives the normal n̂ from
   shape 0 into shape 1, the faces of shape 0 with outward normal ≈ +n̂ and of shape 1 with
   ≈ −n̂ are candidates (box and mesh faces, cylinder caps); the best aligned one, within
   ``FACE_ALIGNMENT_TOL`` (shape 1 must beat shape 0 by ``FACE_ALIGNMENT_TIE``), is the
   reference, with outward normal n_ref, plane n_ref·x = d_ref and polygon R. None: one point
   (edge–edge, curved–curved, anything touching at a point).
2. **Incident feature** of the other shape, toward the reference (direction u = −n_ref): a box or
   mesh face most aligned with u (any alignment, as box–box does); a cylinder's cap (the cap
   polygon, ``CYLINDER_CAP_POLYGON`` rim points) when |u·axis| ≥ 1/√2, else its side segment (the
   rim points of both caps toward u); a capsule's side segment (the core's ends moved by r toward u
   across the axis: its surface line facing u) when |u·axis| < 1/√2; otherwise its support point
   (sphere, ellipsoid, a capsule end).
3. **Candidates**, every one a point q of the incident shape's surface, in this order: (a)
   incident vertices inside R's prism (its side planes along n_ref), (b) R's vertices projected
   along n_ref onto an incident polygon and inside it, (c) crossings of incident edges with R's
   side planes that are inside the other side planes — the vertices of the clipped contact
   polygon (Sutherland–Hodgman's output, enumerated without buffers) — then the incident shape's
   exact support point along u and the GJK/EPA witness on the incident shape (when inside R's
   prism: they make the deepest point exact where the polygon is an inscribed approximation, a
   cylinder cap). Each candidate's depth is φ = n_ref·q − d_ref and its reference-side witness
   q − φ n_ref (on R).
4. **Reduction** to at most 4 among the candidates with φ < margin: the deepest (ties within
   ``MANIFOLD_DEPTH_TIE``: the first), the farthest from it, the one spanning the largest triangle
   with those two, the one adding the largest area outside that triangle. Each must add more than
   ``MANIFOLD_MERGE_DISTANCE`` (a distance, or the height of a triangle over a side); ties within
   ``MANIFOLD_AREA_TIE`` (relative) go to the first. Four corners of a resting face, a quadrilateral
   inscribed in a resting cylinder cap, the two ends of a lying cylinder or capsule.

How many points: box–mesh and mesh–mesh faces, a mesh or a cylinder on a plane, a capsule or a
cylinder lying on a face: 2–4 (the clipped patch's extreme points); a mesh vertex, an edge
crossing an edge, anything with a sphere or an ellipsoid: 1 (``MAX_CONTACTS_PER_PAIR``).

Height fields reduce their prisms' contacts with the same passes (:mod:`sap_ref.collision_heightfield`).
"""

from __future__ import annotations

import math

import numpy as np

from sap_common.constants import (
    CLIP_TOL,
    CYLINDER_CAP_POLYGON,
    FACE_ALIGNMENT_TIE,
    FACE_ALIGNMENT_TOL,
    MANIFOLD_AREA_TIE,
    MANIFOLD_DEPTH_TIE,
    MANIFOLD_MAX_POINTS,
    MANIFOLD_MERGE_DISTANCE,
)
from sap_common.enums import ShapeType

from .collision_convex import convex_contact
from .collision_support import PRISM, Convex, support

__all__ = ["shape_faces", "incident_feature", "reference_face", "clip_candidates", "reduce_manifold",
           "convex_manifold", "plane_manifold"]

_HALF_SQRT2 = math.sqrt(0.5)


def shape_faces(shape: Convex):
    """The flat faces of a shape, world frame: ``[(n, d, polygon (k, 3), disk)]`` (n outward unit,
    n·x = d on the face, polygon counter-clockwise about n; disk = (centre, radius) of a cylinder
    cap, whose polygon is its inscribed ``CYLINDER_CAP_POLYGON``-gon, else None). Box: +x, −x, +y,
    −y, +z, −z; mesh and height-field prism: ``shape.faces`` = [(n_local, d_local, vertex
    indices)]; cylinder: +z cap, −z cap; other shapes: none."""
    k, p, R = shape.kind, shape.p, shape.R
    out = []
    if k == ShapeType.BOX:
        h = shape.size
        for axis in range(3):
            i1, i2 = (axis + 1) % 3, (axis + 2) % 3
            for s in (1.0, -1.0):
                corners = []
                for su, sv in ((1.0, 1.0), (-1.0, 1.0), (-1.0, -1.0), (1.0, -1.0)):
                    c = np.zeros(3)
                    c[axis], c[i1], c[i2] = s * h[axis], su * h[i1], sv * h[i2]
                    corners.append(c)
                if s < 0.0:
                    corners.reverse()
                n_local = np.zeros(3)
                n_local[axis] = s
                out.append(_world_face(p, R, n_local, h[axis], np.array(corners)))
    elif k == ShapeType.CONVEX_MESH or k == PRISM:
        for n_local, d_local, idx in shape.faces:
            out.append(_world_face(p, R, n_local, d_local, shape.verts[idx]))
    elif k == ShapeType.CYLINDER:
        r, hl = shape.size[0], shape.size[1]
        for s in (1.0, -1.0):
            n, d, poly = _world_face(p, R, np.array([0.0, 0.0, s]), hl, _cap_polygon(r, s * hl, s))
            out.append((n, d, poly, (p + s * hl * R[:, 2], r)))
        return out
    return [(n, d, poly, None) for n, d, poly in out]


def _cap_polygon(r, z, s):
    """``CYLINDER_CAP_POLYGON`` rim points at height z, counter-clockwise about s·e_z."""
    N = CYLINDER_CAP_POLYGON
    angles = [2.0 * math.pi * i / N for i in range(N)]
    if s < 0.0:
        angles = angles[::-1]
    return np.array([[r * math.cos(a), r * math.sin(a), z] for a in angles])


def _world_face(p, R, n_local, d_local, poly_local):
    n = R @ n_local
    return n, float(d_local + n @ p), p + poly_local @ R.T


def reference_face(A: Convex, B: Convex, n):
    """``(side, n_ref, d_ref, polygon, disk)`` of the reference face for normal n (from A into B), or
    None: the face of A best aligned with +n or of B with −n, within ``FACE_ALIGNMENT_TOL``."""
    best = None  # (alignment, side, face)
    for side, shape, direction in ((0, A, n), (1, B, -n)):
        for face in shape_faces(shape):
            align = float(face[0] @ direction)
            if best is None or align > best[0] + (FACE_ALIGNMENT_TIE if side != best[1] else 0.0):
                best = (align, side, face)
    if best is None or best[0] < 1.0 - FACE_ALIGNMENT_TOL:
        return None
    _, side, (n_ref, d_ref, poly, disk) = best
    return side, n_ref, d_ref, poly, disk


def incident_feature(shape: Convex, u):
    """The incident feature toward direction u (module docstring): ``(points (k, 3), kind)`` with
    kind ``"polygon"`` (counter-clockwise about its outward normal, returned as a third element),
    ``"segment"`` or ``"point"``. Returns ``(points, kind, polygon_normal or None)``."""
    k = shape.kind
    if k in (ShapeType.BOX, ShapeType.CONVEX_MESH, PRISM):
        best = None
        for face in shape_faces(shape):
            if best is None or face[0] @ u > best[0] @ u:
                best = face
        return best[2], "polygon", best[0]
    axis = shape.R[:, 2]
    if k == ShapeType.CYLINDER:
        ul = shape.R.T @ u
        r, hl = shape.size[0], shape.size[1]
        if abs(ul[2]) >= _HALF_SQRT2:
            s = 1.0 if ul[2] >= 0.0 else -1.0
            n, _, poly = _world_face(shape.p, shape.R, np.array([0.0, 0.0, s]), hl, _cap_polygon(r, s * hl, s))
            return poly, "polygon", n
        rho = math.sqrt(ul[0] * ul[0] + ul[1] * ul[1])
        radial = np.array([ul[0] / rho, ul[1] / rho, 0.0]) if rho > 0.0 else np.array([1.0, 0.0, 0.0])
        ends = np.array([r * radial - [0.0, 0.0, hl], r * radial + [0.0, 0.0, hl]])
        return shape.p + ends @ shape.R.T, "segment", None
    if k == ShapeType.CAPSULE and abs(axis @ u) < _HALF_SQRT2:
        hl, r = shape.size[1], shape.size[0]
        side = u - (u @ axis) * axis  # the surface line faces u across the axis
        side = r * side / math.sqrt(side @ side)
        return np.array([shape.p - hl * axis + side, shape.p + hl * axis + side]), "segment", None
    return (support(shape, u) + shape.radius * u)[None, :], "point", None


def _side_planes(poly, n):
    """Outward side-plane normals m_i = (r_{i+1} − r_i) × n, unit, of a polygon (counter-clockwise about n)."""
    out = []
    for i in range(len(poly)):
        m = np.cross(poly[(i + 1) % len(poly)] - poly[i], n)
        nm = math.sqrt(m @ m)
        out.append(m / nm if nm > 0.0 else m)
    return out


def _inside(x, poly, planes, skip=-1):
    return all(i == skip or m @ (x - poly[i]) <= CLIP_TOL for i, m in enumerate(planes))


def _radial(x, centre, n):
    """Distance of x from the axis through ``centre`` along n."""
    r = x - centre
    r = r - (r @ n) * n
    return math.sqrt(r @ r)


def _circle_crossings(qa, qb, centre, radius, n):
    """Points of segment qa–qb (strictly inside it) whose distance from the axis (centre, n) is the
    radius, in order along the segment: the segment's crossings of a cap's rim seen along n."""
    pa, d = qa - centre, qb - qa
    pa, d = pa - (pa @ n) * n, d - (d @ n) * n
    a, b, c = d @ d, 2.0 * (pa @ d), pa @ pa - radius * radius
    disc = b * b - 4.0 * a * c
    if not (a > 0.0 and disc > 0.0):
        return []
    root = math.sqrt(disc)
    return [qa + t * (qb - qa) for t in ((-b - root) / (2.0 * a), (-b + root) / (2.0 * a)) if 0.0 < t < 1.0]


def clip_candidates(n_ref, poly, feature, extra=(), disk=None, witness=()):
    """Candidate points on the incident feature (module docstring, step 3): (a), (b), (c), then
    ``extra`` (the exact support point) and ``witness`` (the GJK/EPA witness on the incident shape,
    the exact deepest point), each kept when inside the reference. Where the faces are nearly
    parallel the witness can lie beyond the reference face (a cap tilted by 1e-5 rad against
    another: 18 µm beyond its rim), and its projection onto the face would be off the shape. The
    clipped polygon comes first so that, among equally deep points, a vertex of the contact patch
    is chosen before an interior witness. ``poly`` None is an unbounded reference (a plane): every
    point is inside. ``disk`` (centre, radius): a cylinder cap, tested as the exact disk (its
    polygon's vertices, on the rim, serve (b))."""
    points, kind, n_inc = feature
    if poly is None:
        return list(points) + list(extra) + list(witness)
    planes = _side_planes(poly, n_ref)
    if disk is None:
        inside = lambda x, skip=-1: _inside(x, poly, planes, skip)  # noqa: E731
    else:
        inside = lambda x, skip=-1: _radial(x, disk[0], n_ref) <= disk[1] + CLIP_TOL  # noqa: E731
    out = [q for q in points if inside(q)]  # (a)
    if kind == "polygon" and abs(n_inc @ n_ref) > 0.0:  # (b)
        inc_planes = _side_planes(points, n_inc)
        d_inc = float(n_inc @ points[0])
        for r in poly:
            q = r + ((d_inc - n_inc @ r) / (n_inc @ n_ref)) * n_ref
            if _inside(q, points, inc_planes):
                out.append(q)
    if kind != "point":  # (c)
        edges = len(points) if kind == "polygon" else 1
        for j in range(edges):
            qa, qb = points[j], points[(j + 1) % len(points)]
            if disk is not None:
                out += _circle_crossings(qa, qb, disk[0], disk[1], n_ref)
                continue
            for i, m in enumerate(planes):
                da, db = m @ (qa - poly[i]), m @ (qb - poly[i])
                if (da < -CLIP_TOL and db > CLIP_TOL) or (da > CLIP_TOL and db < -CLIP_TOL):
                    x = qa + (qb - qa) * (da / (da - db))
                    if inside(x, i):
                        out.append(x)
    return out + [q for q in extra if inside(q)] + [q for q in witness if inside(q)]


def reduce_manifold(points, depths, margin):
    """Indices of at most ``MANIFOLD_MAX_POINTS`` candidates (module docstring, step 4), in the
    order chosen; candidates with depth ≥ margin never count."""
    ok = [i for i in range(len(points)) if depths[i] < margin]
    if not ok:
        return []
    p1 = ok[0]
    for i in ok[1:]:
        if depths[i] < depths[p1] - MANIFOLD_DEPTH_TIE:
            p1 = i
    chosen = [p1]

    def pick(score, threshold):
        """The first candidate of largest score above threshold; a later one must beat the best by
        the relative MANIFOLD_AREA_TIE."""
        best, best_score = None, threshold
        for i in ok:  # a chosen point scores 0, below every threshold: no exclusion needed
            s = score(points[i])
            if s > (best_score * (1.0 + MANIFOLD_AREA_TIE) if best is not None else best_score):
                best, best_score = i, s
        return best

    a = points[p1]
    p2 = pick(lambda x: math.sqrt((x - a) @ (x - a)), MANIFOLD_MERGE_DISTANCE)
    if p2 is None:
        return chosen
    chosen.append(p2)
    b = points[p2]
    L = math.sqrt((b - a) @ (b - a))
    area = lambda x, y, z: 0.5 * math.sqrt(np.cross(y - x, z - x) @ np.cross(y - x, z - x))  # noqa: E731
    p3 = pick(lambda x: area(a, b, x), 0.5 * MANIFOLD_MERGE_DISTANCE * L)
    if p3 is None or MANIFOLD_MAX_POINTS < 3:
        return chosen
    chosen.append(p3)
    c = points[p3]
    tri = area(a, b, c)
    p4 = pick(lambda x: area(a, b, x) + area(b, c, x) + area(c, a, x) - tri, 0.5 * MANIFOLD_MERGE_DISTANCE * L)
    if p4 is not None and MANIFOLD_MAX_POINTS >= 4:
        chosen.append(p4)
    return chosen


def _contacts_from(side, n_ref, d_ref, points, chosen):
    """Contacts ``(x0, x1, n, φ)`` of the chosen incident points against a reference on ``side``."""
    out = []
    for i in chosen:
        q = points[i]
        phi = float(n_ref @ q - d_ref)
        on_ref = q - phi * n_ref
        if side == 0:
            out.append((on_ref, q, n_ref, phi))
        else:
            out.append((q, on_ref, -n_ref, phi))
    return out


def convex_manifold(A: Convex, B: Convex, margin: float = 0.0):
    """Contacts of two convex shapes (normal from A into B): a manifold where a face touches, else
    the one GJK/EPA contact (also when no candidate is within the margin)."""
    x0, x1, n, phi = convex_contact(A, B)
    ref = reference_face(A, B, n)
    if ref is None:
        return [(x0, x1, n, phi)]
    side, n_ref, d_ref, poly, disk = ref
    inc = B if side == 0 else A
    u = -n_ref
    feature = incident_feature(inc, u)
    points = clip_candidates(n_ref, poly, feature, [support(inc, u) + inc.radius * u], disk,
                             [x1 if side == 0 else x0])
    depths = [float(n_ref @ q - d_ref) for q in points]
    # A point feature (sphere, ellipsoid, capsule end) touches in one point: its support point and
    # the GJK/EPA witness are two roundings of it, so only the deepest is kept.
    chosen = reduce_manifold(points, depths, margin)[:1 if feature[1] == "point" else MANIFOLD_MAX_POINTS]
    return _contacts_from(side, n_ref, d_ref, points, chosen) if chosen else [(x0, x1, n, phi)]


def plane_manifold(plane, shape: Convex, margin: float = 0.0):
    """Plane (half-space z ≤ 0 of the frame ``plane = (p, R)``) against a cylinder, ellipsoid or mesh: the plane is the
    reference (unbounded). Candidates: a cylinder's incident feature then its exact support point
    along −n̂, or every hull point of a mesh; reduced as in :func:`reduce_manifold`. An
    ellipsoid touches in its support point only. Returns contacts with the normal n̂ of the plane."""
    n_ref = plane[1][:, 2]
    d_ref = float(n_ref @ plane[0])
    u = -n_ref
    extra = [support(shape, u)]
    if shape.kind == ShapeType.ELLIPSOID:
        points = extra
    elif shape.kind == ShapeType.CONVEX_MESH:
        points = list(shape.p + shape.verts @ shape.R.T)
    else:
        points = clip_candidates(n_ref, None, incident_feature(shape, u), extra)
    depths = [float(n_ref @ q - d_ref) for q in points]
    chosen = reduce_manifold(points, depths, margin) or [int(np.argmin(depths))]
    return _contacts_from(0, n_ref, d_ref, points, chosen)

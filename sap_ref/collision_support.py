"""The shapes of the general convex pairs (NumPy): the shape record, support functions and the
closest point on a simplex, shared by GJK/EPA (:mod:`sap_ref.collision_convex`), the manifolds
(:mod:`sap_ref.collision_manifold`) and the height fields (:mod:`sap_ref.collision_heightfield`).
``sap_gpu.collision_support`` holds the same functions for the device, with the same tie rules.
"""

from __future__ import annotations

import math

import numpy as np

from sap_common.constants import FLAT_SIMPLEX
from sap_common.enums import ShapeType

__all__ = ["Convex", "PRISM", "support", "support_local", "support_pair", "closest_on_simplex", "closest_segment",
           "closest_triangle", "closest_tetrahedron", "TETRA_FACES", "sgn"]

PRISM = -1  # a height-field prism: a core given by its 6 vertices


class Convex:
    """One convex shape in the world: ``kind`` (a ShapeType, or −1 for a height-field prism),
    ``p`` (3,) and ``R`` (3, 3) its frame's world pose, ``size`` (3,) its ShapeType size,
    ``verts`` (V, 3) its points in its own frame (mesh, prism), ``radius`` its core radius
    (sphere and capsule radius, else 0)."""

    def __init__(self, kind, p, R, size, verts=None):
        self.kind, self.p, self.R = int(kind), np.asarray(p, dtype=np.float64), np.asarray(R, dtype=np.float64)
        self.size = np.asarray(size, dtype=np.float64)
        self.verts = verts
        self.radius = float(self.size[0]) if self.kind in (ShapeType.SPHERE, ShapeType.CAPSULE) else 0.0


def sgn(x: float) -> float:
    """+1 for x ≥ 0 (ties take the + side), −1 otherwise."""
    return 1.0 if x >= 0.0 else -1.0


def support_local(shape: Convex, dl) -> np.ndarray:
    """The core's point farthest along ``dl`` (shape frame), in the shape frame.

    sphere: 0; capsule: (0, 0, ±L); box: sign(d) ⊙ h; cylinder: r·(d_x, d_y)/|(d_x, d_y)| (or
    (r, 0) when d ∥ z) and ±L; ellipsoid: A²d/|Ad|, A = diag(a, b, c); mesh, prism: the first
    vertex of largest v·d."""
    k, h = shape.kind, shape.size
    if k == ShapeType.SPHERE:
        return np.zeros(3)
    if k == ShapeType.CAPSULE:
        return np.array([0.0, 0.0, sgn(dl[2]) * h[1]])
    if k == ShapeType.BOX:
        return np.array([sgn(dl[0]) * h[0], sgn(dl[1]) * h[1], sgn(dl[2]) * h[2]])
    if k == ShapeType.CYLINDER:
        rho = math.sqrt(dl[0] * dl[0] + dl[1] * dl[1])
        if rho > 0.0:
            return np.array([h[0] * dl[0] / rho, h[0] * dl[1] / rho, sgn(dl[2]) * h[1]])
        return np.array([h[0], 0.0, sgn(dl[2]) * h[1]])
    if k == ShapeType.ELLIPSOID:
        ad = h * dl
        return h * ad / math.sqrt(ad @ ad)
    dots = shape.verts @ dl
    return shape.verts[int(np.argmax(dots))].copy()


def support(shape: Convex, d) -> np.ndarray:
    """The core's world point farthest along the world direction ``d``: p + R s(Rᵀd)."""
    return shape.p + shape.R @ support_local(shape, shape.R.T @ d)


def closest_on_simplex(W):
    """The point of conv(W) nearest the origin, for 1–4 points W (k, 3).

    Returns ``(v, lam, keep)``: v = Σ lam_i W[keep_i], the barycentric weights and the indices of
    the smallest sub-simplex carrying v (Voronoi regions, Ericson §5.1). A tetrahedron that
    encloses the origin returns all four with v = 0 (the caller's overlap test)."""
    n = len(W)
    if n == 1:
        return W[0].copy(), np.array([1.0]), [0]
    if n == 2:
        return closest_segment(W, [0, 1])
    if n == 3:
        return closest_triangle(W, [0, 1, 2])
    return closest_tetrahedron(W)


def closest_segment(W, idx):
    a, b = W[idx[0]], W[idx[1]]
    ab = b - a
    den = ab @ ab
    t = 0.0 if den <= 0.0 else -(a @ ab) / den
    if t <= 0.0:
        return a.copy(), np.array([1.0]), [idx[0]]
    if t >= 1.0:
        return b.copy(), np.array([1.0]), [idx[1]]
    return a + t * ab, np.array([1.0 - t, t]), list(idx)


def closest_triangle(W, idx):
    """Ericson's ClosestPtPointTriangle with p = 0, as regions of the triangle idx."""
    a, b, c = W[idx[0]], W[idx[1]], W[idx[2]]
    ab, ac = b - a, c - a
    d1, d2 = -(ab @ a), -(ac @ a)
    if d1 <= 0.0 and d2 <= 0.0:
        return a.copy(), np.array([1.0]), [idx[0]]
    d3, d4 = -(ab @ b), -(ac @ b)
    if d3 >= 0.0 and d4 <= d3:
        return b.copy(), np.array([1.0]), [idx[1]]
    vc = d1 * d4 - d3 * d2
    if vc <= 0.0 and d1 >= 0.0 and d3 <= 0.0:
        return closest_segment(W, [idx[0], idx[1]])
    d5, d6 = -(ab @ c), -(ac @ c)
    if d6 >= 0.0 and d5 <= d6:
        return c.copy(), np.array([1.0]), [idx[2]]
    vb = d5 * d2 - d1 * d6
    if vb <= 0.0 and d2 >= 0.0 and d6 <= 0.0:
        return closest_segment(W, [idx[0], idx[2]])
    va = d3 * d6 - d5 * d4
    if va <= 0.0 and (d4 - d3) >= 0.0 and (d5 - d6) >= 0.0:
        return closest_segment(W, [idx[1], idx[2]])
    den = va + vb + vc
    if not den > 0.0:  # a degenerate (flat) triangle: its nearest edge
        best = None
        for e in ([idx[0], idx[1]], [idx[0], idx[2]], [idx[1], idx[2]]):
            r = closest_segment(W, e)
            if best is None or r[0] @ r[0] < best[0] @ best[0]:
                best = r
        return best
    v, w = vb / den, vc / den
    return a + ab * v + ac * w, np.array([1.0 - v - w, v, w]), list(idx)


TETRA_FACES = ((0, 1, 2, 3), (0, 1, 3, 2), (0, 2, 3, 1), (1, 2, 3, 0))


def closest_tetrahedron(W):
    # A tetrahedron flatter than FLAT_SIMPLEX (volume against its size cubed) has no inside: its
    # face orientations are rounding noise (GJK on a curved core clusters its points).
    e = W[1:] - W[0]
    scale = max(math.sqrt(x @ x) for x in e)
    flat = not abs(e[0] @ np.cross(e[1], e[2])) > FLAT_SIMPLEX * scale * scale * scale
    best, inside = None, not flat
    for i, j, k, opposite in TETRA_FACES:
        a, b, c, d = W[i], W[j], W[k], W[opposite]
        nrm = np.cross(b - a, c - a)
        s_origin, s_opposite = -(nrm @ a), nrm @ (d - a)
        if flat or s_origin * s_opposite < 0.0 or s_opposite == 0.0:  # the origin is outside this face
            inside = False
            r = closest_triangle(W, [i, j, k])
            if best is None or r[0] @ r[0] < best[0] @ best[0]:
                best = r
    if inside:
        return np.zeros(3), np.full(4, 0.25), [0, 1, 2, 3]
    return best


def support_pair(A: Convex, B: Convex, d):
    """(w, a, b): a = s_A(d), b = s_B(−d), w = a − b = s_D(d)."""
    a, b = support(A, d), support(B, -d)
    return a - b, a, b

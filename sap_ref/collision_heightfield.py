"""Height fields (NumPy): a convex shape against a grid of heights, reduced to at most 4 contacts.

Canonical order: the other shape 0, the height field 1. Every cell triangle under
the shape's bounding box is a prism (the triangle and its copy at z = −base); GJK/EPA against the
shape gives the prism's candidates (one, or a manifold where a face touches), kept where the
terrain-side witness lies on the triangle (within ``ON_FACE_TOL``, so on the terrain surface). A
penetrating prism whose witness is on a wall
(inside the terrain) instead gives the contact along the triangle's normal: the shape's deepest
point below the triangle's plane, when it projects inside the triangle; when it does not (near a
crease, the projections onto both neighbours' planes can fall across their shared edge; at the
grid's border the deepest point can lie beyond it), the contact straight up (the height field's z)
from the shape's point deepest below the triangle within the triangle's column. The prisms are
visited row by
row (cells along x, triangle A before B), and the contacts kept so far plus each prism's are
reduced to 4 by the manifolds' :func:`~sap_ref.collision_manifold.reduce_manifold` (a running
reduction: it needs no buffer, and keeps the deepest).
``sap_gpu.collision_heightfield`` is the same algorithm on the device.
"""

from __future__ import annotations

import math

import numpy as np

from sap_common import geometry
from sap_common.constants import ON_FACE_TOL, RAISE_GAP, RAISE_MAX_ITERATIONS

from .collision_convex import gjk
from .collision_manifold import convex_manifold, reduce_manifold
from .collision_support import PRISM, Convex, closest_on_simplex, support

__all__ = ["heightfield_contacts"]


def _on_triangle(tri_world, x) -> bool:
    """Whether x is within ``ON_FACE_TOL`` of the triangle (3, 3)."""
    v, _, _ = closest_on_simplex(np.asarray(tri_world) - x)
    return math.sqrt(v @ v) <= ON_FACE_TOL


def _deepest_below(shape: Convex, tri, hf_p, hf_R):
    """The shape's point deepest below a cell triangle straight down from it: the x0 minimizing
    t = (x0's height) − (the triangle's plane's height there), both along the height field's z,
    over the shape's points inside the triangle's column. Returns (x0, t), or None when the shape
    misses the column. ``tri`` (3, 3) is the triangle in the height field's frame (hf_p, hf_R).

    Raise the triangle from below the shape along z: it first touches the shape at x0, at the
    raise t (a point of the shape in the column lower than that would have met the triangle
    earlier). The distance f(t) between the core and the triangle raised by t is convex in t, so
    Newton's method on f(t) = radius + RAISE_GAP from below, with f'(t) = z·(b − a)/f from GJK's
    witnesses a (core) and b (triangle), climbs to the touch without passing it: a step is exact
    where the touching features are flat, and converges quadratically elsewhere. GJK is exact on
    polytope cores (the point, segment, box and mesh), so x0 = a + radius·(b − a)/f is too, up to
    the RAISE_GAP left open (GJK's touching distance: it reports no witnesses below it)."""
    r = shape.radius
    up = hf_R[:, 2]
    tri_world = hf_p + tri @ hf_R.T
    # the raise that puts the triangle below the shape with room to spare (any gap will do)
    low = float(up @ support(shape, -up)) - r - float(np.max(tri_world @ up))
    high = float(up @ support(shape, up)) + r - float(np.min(tri_world @ up))
    t = low - (high - low) - 1e-3
    twice = np.vstack([tri, tri])  # the prism record's 6 points: the triangle twice
    lift = np.array([0.0, 0.0, 1.0])
    for _ in range(RAISE_MAX_ITERATIONS):
        raised = Convex(PRISM, hf_p, hf_R, np.zeros(3), twice + t * lift)
        result = gjk(shape, raised)
        if result[0] == "overlap":  # rounding took the step past the touch: back off by the gap
            t -= RAISE_GAP
            continue
        _, f, a, b = result
        gap = f - r - RAISE_GAP
        slope = float(up @ (b - a)) / f
        if gap <= RAISE_GAP:
            return a + r * (b - a) / f, t
        if not slope < 0.0:
            return None  # the raised triangle passes beside the shape: it misses the column
        t -= gap / slope
    return None


def _vertical_contact(shape: Convex, tri, hf_p, hf_R, n_up, tri_world):
    """The contact straight up from the shape's point deepest below the triangle within its column
    (:func:`_deepest_below`) to the triangle's plane: (x0, x1, −up, φ < 0) with x1 = x0 − φ·up on
    the plane, or None when the shape does not reach below the triangle."""
    up = hf_R[:, 2]
    found = _deepest_below(shape, tri, hf_p, hf_R)
    if found is None:
        return None
    x0 = found[0]
    s = float(n_up @ (tri_world[0] - x0)) / float(n_up @ up)  # x0 + s·up is on the triangle's plane
    if not s > 0.0:
        return None
    return x0, x0 + s * up, -up, -s


def heightfield_contacts(shape: Convex, hf_p, hf_R, hf_size, heights, local_bounds, margin: float = 0.0):
    """Contacts of a convex shape (shape 0) against a height field (shape 1; pose hf_p, hf_R, size
    (hx, hy, base), heights (rows, columns)): the module docstring's prisms, reduced to 4.
    ``local_bounds`` (2, 3) is the shape's own bounding box. Normal from the shape into the terrain.

    Each prism is a convex core whose only face is its top triangle (its walls and bottom are inside
    the terrain or below it), so :func:`convex_manifold` clips against the terrain surface only."""
    hx, hy, base = (float(v) for v in hf_size)
    nrow, ncol = heights.shape
    # The shape's bounding box in the height field's frame (its 8 corners moved there).
    lo, hi = local_bounds
    corners = np.array([[x, y, z] for x in (lo[0], hi[0]) for y in (lo[1], hi[1]) for z in (lo[2], hi[2])])
    in_hf = (corners @ shape.R.T + shape.p - hf_p) @ hf_R
    bmin, bmax = in_hf.min(axis=0) - margin, in_hf.max(axis=0) + margin
    dx, dy = 2.0 * hx / (ncol - 1), 2.0 * hy / (nrow - 1)
    j0, j1 = max(0, int(math.floor((bmin[0] + hx) / dx))), min(ncol - 1, int(math.ceil((bmax[0] + hx) / dx)))
    i0, i1 = max(0, int(math.floor((bmin[1] + hy) / dy))), min(nrow - 1, int(math.ceil((bmax[1] + hy) / dy)))
    kept = []  # the reduced contacts so far: (x0 on the shape, x1 on the terrain, n, phi)
    for i in range(i0, i1):
        for j in range(j0, j1):
            for t in (0, 1):
                tri = geometry.hfield_triangle(heights, hx, hy, i, j, t)
                if tri[:, 2].max() + margin < bmin[2]:
                    continue
                n_up_local = np.cross(tri[1] - tri[0], tri[2] - tri[0])
                n_up_local = n_up_local / math.sqrt(n_up_local @ n_up_local)
                prism = Convex(PRISM, hf_p, hf_R, np.zeros(3),
                               np.vstack([tri, tri * [1.0, 1.0, 0.0] - [0.0, 0.0, base]]))
                prism.faces = [(n_up_local, float(n_up_local @ tri[0]), np.array([0, 1, 2]))]
                tri_world = hf_p + tri @ hf_R.T
                contacts = convex_manifold(shape, prism, margin)
                if len(contacts) > 1:
                    # A manifold against the shape's face may take the prism's support point or its
                    # GJK/EPA witness, on a wall or the bottom (inside the terrain): keep the points
                    # on the triangle; with none, the first goes on as a single contact.
                    on = [c for c in contacts if _on_triangle(tri_world, c[1])]
                    contacts = on if on else contacts[:1]
                if not _on_triangle(tri_world, contacts[0][1]):
                    if contacts[0][3] >= 0.0:
                        continue
                    # A penetrating prism whose witness is on a wall: the contact along the top normal.
                    n_up = hf_R @ n_up_local
                    q = support(shape, -n_up) - shape.radius * n_up
                    depth = float(n_up @ (q - tri_world[0]))
                    on_plane = q - depth * n_up
                    if not _on_triangle(tri_world, on_plane):
                        # Its projection left the triangle (near a crease both neighbours' can; at
                        # the grid's border the shape can reach beyond the grid): the contact straight
                        # up from the shape's point deepest below the triangle within its column.
                        contact = _vertical_contact(shape, tri, hf_p, hf_R, n_up, tri_world)
                        if contact is None:
                            continue
                        contacts = [contact]
                    else:
                        contacts = [(q, on_plane, -n_up, depth)]
                merged = kept + contacts  # reduce as we go: at most 4 + 4 candidates at a time
                kept = [merged[k] for k in reduce_manifold([c[0] for c in merged], [c[3] for c in merged], margin)]
    return kept

"""Shape geometry both backends share: convex-hull faces of meshes, height-field grids, and the
local bounding boxes the broad phase starts from. NumPy (and SciPy's Qhull for hulls).

* **Convex meshes.** A CONVEX_MESH shape is the convex hull of its points (as MuJoCo and Drake
  collide a mesh through its hull). :func:`convex_hull` returns the hull's extreme points and
  its faces as *polygons*: Qhull's triangles are merged into one face when their planes agree
  within ``FACE_MERGE_TOL``, so a cube has 6 square faces, not 12 triangles (a face is what a
  multi-point contact clips against, see docs/design.md § Collision). Each face lists its
  vertices counter-clockwise seen from outside and carries its plane n·x = d (n outward, unit).
* **Height fields.** Heights h[i, j] (row i along y, column j along x) sit at
  x_j = −hx + 2hx·j/(ncol − 1), y_i = −hy + 2hy·i/(nrow − 1). Each cell (i, j)–(i + 1, j + 1) is
  split along its diagonal from (i, j) to (i + 1, j + 1) into two triangles (MuJoCo's split):
  A = ((i, j), (i + 1, j + 1), (i + 1, j)) and B = ((i, j), (i, j + 1), (i + 1, j + 1)), both
  counter-clockwise seen from above. The solid is the union of the triangles' prisms down to
  z = −base.
* **Local bounds.** :func:`shape_local_bounds` gives each shape's axis-aligned box in its own
  frame (lower, upper corners); a plane's is unbounded (±inf) except its top z = 0.
"""

from __future__ import annotations

import math

import numpy as np

from .constants import FACE_MERGE_TOL
from .enums import ShapeType

__all__ = ["ConvexHull", "convex_hull", "mesh_faces", "hfield_point", "hfield_triangle", "hfield_grid",
           "shape_local_bounds"]


class ConvexHull:
    """The hull of a point set: ``vertices (V, 3)`` (extreme points, in input order), ``index (V,)``
    (their positions in the input), ``faces`` (list of arrays of indices into ``vertices``,
    counter-clockwise from outside) and ``planes (F, 4)`` (unit outward normal n, offset d:
    n·x ≤ d inside)."""

    def __init__(self, vertices, index, faces, planes):
        self.vertices, self.index, self.faces, self.planes = vertices, index, faces, planes


def convex_hull(points, where: str = "vertices") -> ConvexHull:
    """The convex hull of ``points`` (n, 3) [m] with merged polygon faces (module docstring).

    Raises ``ValueError`` naming ``where`` for fewer than 4 points, non-finite values, or points
    that span no volume (all on one plane)."""
    from scipy.spatial import ConvexHull as QHull
    from scipy.spatial import QhullError

    pts = np.asarray(points, dtype=np.float64)
    if pts.ndim != 2 or pts.shape[1] != 3 or pts.shape[0] < 4:
        raise ValueError(f"{where}: expected at least 4 points shaped (n, 3), got shape {pts.shape}")
    if not np.all(np.isfinite(pts)):
        raise ValueError(f"{where}: points must be finite")
    try:
        hull = QHull(pts)
    except QhullError:
        raise ValueError(f"{where}: the points span no volume (they lie on a plane or a line); a convex "
                         "mesh needs a solid hull") from None
    scale = float(np.max(np.abs(pts - pts.mean(axis=0))))
    if not hull.volume > (FACE_MERGE_TOL * scale) * scale * scale:
        raise ValueError(f"{where}: the points span no volume (they lie on a plane or a line); a convex "
                         "mesh needs a solid hull")
    extreme = np.sort(hull.vertices)  # keep the caller's order
    new_index = {int(v): k for k, v in enumerate(extreme)}
    verts = pts[extreme]
    eq = hull.equations  # n·x + e ≤ 0 inside, n unit
    # Merge facets whose planes agree (union-find over Qhull's neighbours).
    parent = list(range(len(hull.simplices)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    tol = FACE_MERGE_TOL * max(scale, 1e-300)
    for f, nbrs in enumerate(hull.neighbors):
        for g in nbrs:
            if g > f and np.max(np.abs(eq[f, :3] - eq[g, :3])) <= FACE_MERGE_TOL and abs(eq[f, 3] - eq[g, 3]) <= tol:
                parent[find(g)] = find(f)
    groups: dict[int, list[int]] = {}
    for f in range(len(hull.simplices)):
        groups.setdefault(find(f), []).append(f)
    faces, planes = [], []
    for root in sorted(groups):
        members = groups[root]
        first = min(members)
        n = eq[first, :3] / np.linalg.norm(eq[first, :3])
        ids = sorted({new_index[int(v)] for f in members for v in hull.simplices[f]})
        P = verts[ids]
        c = P.mean(axis=0)
        u = P[0] - c
        u = u - (u @ n) * n
        u /= np.linalg.norm(u)
        w = np.cross(n, u)
        angle = np.arctan2((P - c) @ w, (P - c) @ u)
        order = [ids[k] for k in np.argsort(angle, kind="stable")]
        faces.append(np.array(order, dtype=np.int32))
        planes.append(np.concatenate([n, [float(n @ verts[order[0]])]]))
    return ConvexHull(verts, extreme.astype(np.int64), faces, np.array(planes))


def mesh_faces(mesh_vertex, mesh_vertex_start):
    """Face arrays of every mesh of a model (the derived ``mesh_face_*`` fields of
    :class:`~sap_common.model.SapModel`): ``(face_start (M+1,), face_vertex_start (F+1,),
    face_vertex (FV,) global vertex indices, face_plane (F, 4))``."""
    face_start, fv_start, fv, planes = [0], [0], [], []
    for m in range(len(mesh_vertex_start) - 1):
        lo, hi = int(mesh_vertex_start[m]), int(mesh_vertex_start[m + 1])
        hull = convex_hull(mesh_vertex[lo:hi], f"mesh_vertex[{lo}:{hi}] (mesh {m})")
        for face, plane in zip(hull.faces, hull.planes):
            fv.extend(int(lo + hull.index[k]) for k in face)
            fv_start.append(len(fv))
            planes.append(plane)
        face_start.append(len(planes))
    return (np.array(face_start, dtype=np.int32), np.array(fv_start, dtype=np.int32), np.array(fv, dtype=np.int32),
            np.array(planes, dtype=np.float64).reshape(-1, 4))


def hfield_point(heights, hx: float, hy: float, i: int, j: int) -> np.ndarray:
    """Grid point (row i, column j) of a height field in its shape frame [m]."""
    nrow, ncol = heights.shape
    return np.array([-hx + 2.0 * hx * j / (ncol - 1), -hy + 2.0 * hy * i / (nrow - 1), heights[i, j]])


def hfield_triangle(heights, hx: float, hy: float, i: int, j: int, t: int) -> np.ndarray:
    """Triangle t ∈ {0, 1} (A, B of the module docstring) of cell (i, j), (3, 3), counter-clockwise from above."""
    if t == 0:
        corners = ((i, j), (i + 1, j + 1), (i + 1, j))
    else:
        corners = ((i, j), (i, j + 1), (i + 1, j + 1))
    return np.array([hfield_point(heights, hx, hy, a, b) for a, b in corners])


def hfield_grid(model, s: int) -> np.ndarray:
    """Heights (nrow, ncol) [m] of height-field shape ``s``."""
    h = int(model.shape_source[s])
    nrow, ncol = (int(x) for x in model.hfield_shape[h])
    lo = int(model.hfield_start[h])
    return np.asarray(model.hfield_height[lo:lo + nrow * ncol]).reshape(nrow, ncol)


def shape_local_bounds(shape_type, size, shape_source, mesh_vertex, mesh_vertex_start, hfield_height, hfield_start,
                       rounding=None):
    """Axis-aligned bounds of every shape in its own frame, ``(S, 2, 3)`` [m] (lower, upper).

    Sphere ±r; capsule ±r in x, y and ±(half_length + r) in z; box ±h; cylinder ±r, ±half_length;
    ellipsoid ±(a, b, c); mesh: its points' bounding box; height field: (±hx, ±hy, [−base, max h]);
    plane: (−inf, −inf, −inf) to (inf, inf, 0). A shape with a rounding radius ρ > 0 (``rounding``
    (S,), None = all 0) has its core's bounds grown by ρ on every side."""
    S = len(shape_type)
    out = np.zeros((S, 2, 3))
    for s in range(S):
        t, z = ShapeType(int(shape_type[s])), np.asarray(size[s], dtype=np.float64)
        if t == ShapeType.PLANE:
            hi = np.array([math.inf, math.inf, 0.0])
            out[s] = (np.array([-math.inf] * 3), hi)
            continue
        if t == ShapeType.SPHERE:
            h = np.full(3, z[0])
        elif t == ShapeType.CAPSULE:
            h = np.array([z[0], z[0], z[1] + z[0]])
        elif t == ShapeType.CYLINDER:
            h = np.array([z[0], z[0], z[1]])
        elif t in (ShapeType.BOX, ShapeType.ELLIPSOID):
            h = z.copy()
        elif t == ShapeType.CONVEX_MESH:
            m = int(shape_source[s])
            v = mesh_vertex[mesh_vertex_start[m]:mesh_vertex_start[m + 1]]
            out[s] = (v.min(axis=0), v.max(axis=0))
            continue
        else:  # HEIGHTFIELD
            hf = int(shape_source[s])
            heights = hfield_height[hfield_start[hf]:hfield_start[hf + 1]]
            out[s] = (np.array([-z[0], -z[1], -z[2]]), np.array([z[0], z[1], float(np.max(heights))]))
            continue
        out[s] = (-h, h)
    if rounding is not None:
        for s in range(S):
            if rounding[s] != 0.0:
                out[s] = (out[s, 0] - rounding[s], out[s, 1] + rounding[s])
    return out

"""Collision shapes as triangle meshes, and their world poses (for the inspector's and the viewer's drawings).

One mesh per shape, in the shape's own frame (``ShapeType``'s sizes): a box is its 8 corners,
a sphere a UV sphere, a capsule a cylinder with two hemispherical caps along z, a plane a square
of side ``plane_size`` in its z = 0 plane. ``shape_poses`` composes each shape's body pose with
its ``shape_transform``; world shapes (body −1) keep their transform. A body without a collision
shape is drawn as the box of its inertia, or as its frame's axes where it has no mass
(:func:`body_stand_ins`).
"""

from __future__ import annotations

import numpy as np

from sap_common import spatial
from sap_common.model import SapModel, ShapeType

__all__ = ["shape_poses", "shape_mesh", "body_colors", "inertia_box", "body_stand_ins", "box_mesh", "PALETTE"]

# Body colours (RGB 0–255): eight hues at least 25° apart, none grey and none in the blue of the
# viewer's controls and force arrows (200°–240°), so a screenshot test can find each body's hue.
# Neighbouring bodies get distant hues (orange, green, magenta, ...).
PALETTE = ((235, 130, 20), (30, 170, 80), (210, 50, 160), (225, 190, 20), (140, 60, 210), (20, 175, 165),
           (215, 40, 40), (120, 200, 30))
GROUND_COLOR = (200, 200, 200)


def body_colors(model: SapModel) -> np.ndarray:
    """One palette colour per body, cycling, (B, 3) uint8."""
    return np.array([PALETTE[b % len(PALETTE)] for b in range(model.body_count)], dtype=np.uint8)


def inertia_box(model, b: int):
    """``(half extents (3,) [m], pose [p, quat xyzw] in the body frame)`` of the uniform box with body
    ``b``'s mass and inertia about its COM, along the principal axes (a box of half extents a, b, c
    has I₁ = m(b² + c²)/3, …); None for a massless body or one without inertia."""
    mass = float(model.body_mass[b])
    if not mass > 0:
        return None
    moments, axes = np.linalg.eigh(np.asarray(model.body_inertia[b], np.float64))
    if not moments.max() > 0:
        return None
    if np.linalg.det(axes) < 0:
        axes[:, 2] *= -1.0
    sq = 1.5 / mass * (moments.sum() - 2.0 * moments)  # a² = 3(I₂ + I₃ − I₁)/(2m), …
    half = np.sqrt(np.maximum(sq, 0.0))
    return half, np.concatenate([model.body_com[b], spatial.quat_from_matrix(axes)])


def body_stand_ins(model: SapModel) -> dict:
    """How to draw the bodies without a collision shape: ``{body: ("box", half extents, pose in the
    body frame)}`` for one with mass (:func:`inertia_box`), ``{body: ("axes",)}`` for a massless
    one that is no joint's parent (its frame is all there is to show); a massless body between two
    joints (an MJCF chain's intermediate frame) is drawn by its children and gets none."""
    shaped = {int(b) for b in model.shape_body if b >= 0}
    parents = {int(p) for p in model.joint_parent if p >= 0}
    out = {}
    for b in range(model.body_count):
        if b in shaped:
            continue
        box = inertia_box(model, b)
        if box is not None:
            out[b] = ("box",) + box
        elif b not in parents:
            out[b] = ("axes",)
    return out


def shape_poses(model: SapModel, body_q: np.ndarray) -> np.ndarray:
    """World pose ``X_WS = X_WB X_BS`` of every shape [m, quat xyzw], (S, 7), from ``body_q (B, 7)``."""
    X = np.array(model.shape_transform, dtype=np.float64, copy=True)
    on_body = model.shape_body >= 0
    if np.any(on_body):
        X[on_body] = spatial.transform_compose(np.asarray(body_q, float)[model.shape_body[on_body]], X[on_body])
    return X


def _uv_sphere(radius: float, n: int, z_lo: float = -np.pi / 2, z_hi: float = np.pi / 2, dz: float = 0.0):
    """Vertices and triangles of a latitude band of a sphere (a whole sphere by default), centre (0, 0, dz)."""
    lat = np.linspace(z_lo, z_hi, n // 2 + 1)
    lon = np.linspace(0.0, 2 * np.pi, n, endpoint=False)
    la, lo = np.meshgrid(lat, lon, indexing="ij")
    v = np.stack([radius * np.cos(la) * np.cos(lo), radius * np.cos(la) * np.sin(lo), radius * np.sin(la) + dz], -1)
    v = v.reshape(-1, 3)
    faces = []
    rows, cols = len(lat), len(lon)
    for i in range(rows - 1):
        for j in range(cols):
            a, b = i * cols + j, i * cols + (j + 1) % cols
            c, d = a + cols, b + cols
            faces += [(a, b, d), (a, d, c)]
    return v, np.array(faces, dtype=np.int32)


def _weld(v: np.ndarray, f: np.ndarray):
    """Merge coincident vertices (a UV sphere's poles) and drop the triangles that collapse."""
    _, first, inverse = np.unique(np.round(v, 12), axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first)  # keep the vertices in their first-seen order
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    f = rank[inverse.ravel()][f]
    keep = (f[:, 0] != f[:, 1]) & (f[:, 1] != f[:, 2]) & (f[:, 0] != f[:, 2])
    return v[first[order]], f[keep].astype(np.int32)


def box_mesh(half_extents):
    """``(vertices (8, 3), faces (12, 3))`` of a box with these half extents, centred at the origin."""
    corners = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], float)
    v = corners * np.asarray(half_extents, float)
    f = [(0, 1, 3), (0, 3, 2), (4, 6, 7), (4, 7, 5), (0, 4, 5), (0, 5, 1),
         (2, 3, 7), (2, 7, 6), (0, 2, 6), (0, 6, 4), (1, 5, 7), (1, 7, 3)]
    return v, np.array(f, dtype=np.int32)


def shape_mesh(model: SapModel, s: int, plane_size: float = 2.0, n: int = 16):
    """``(vertices (V, 3) [m], faces (F, 3) int32)`` of shape ``s`` in its own frame."""
    kind, size = ShapeType(int(model.shape_type[s])), model.shape_size[s]
    if kind == ShapeType.BOX:
        return box_mesh(size)
    if kind == ShapeType.SPHERE:
        return _weld(*_uv_sphere(float(size[0]), n))
    if kind == ShapeType.CAPSULE:
        r, hl = float(size[0]), float(size[1])
        top_v, top_f = _uv_sphere(r, n, 0.0, np.pi / 2, hl)
        bot_v, bot_f = _uv_sphere(r, n, -np.pi / 2, 0.0, -hl)
        # The two hemispheres' equators (first/last ring) are joined by the cylinder's side.
        cols = n
        top_ring = np.arange(cols)                       # latitude 0 of the top cap
        bot_ring = len(top_v) + (len(bot_v) - cols) + np.arange(cols)  # latitude 0 of the bottom cap
        side = []
        for j in range(cols):
            a, b = bot_ring[j], bot_ring[(j + 1) % cols]
            c, d = top_ring[j], top_ring[(j + 1) % cols]
            side += [(a, b, d), (a, d, c)]
        v = np.concatenate([top_v, bot_v])
        f = np.concatenate([top_f, bot_f + len(top_v), np.array(side, dtype=np.int32)])
        return _weld(v, f)
    if kind == ShapeType.CYLINDER:
        return _cylinder(float(size[0]), float(size[1]), n)
    if kind == ShapeType.ELLIPSOID:
        v, f = _weld(*_uv_sphere(1.0, n))
        return v * np.asarray(size, float), f
    if kind == ShapeType.CONVEX_MESH:
        return _convex_mesh(model, int(model.shape_source[s]))
    if kind == ShapeType.HEIGHTFIELD:
        from sap_common.geometry import hfield_grid

        return _heightfield(hfield_grid(model, s), float(size[0]), float(size[1]), float(size[2]))
    half = plane_size / 2
    v = np.array([[-half, -half, 0], [half, -half, 0], [half, half, 0], [-half, half, 0]], float)
    return v, np.array([(0, 1, 2), (0, 2, 3)], dtype=np.int32)


def _cylinder(r: float, hl: float, n: int):
    """A closed cylinder along z: two rings of n points, the side, and a fan on each cap."""
    a = np.linspace(0.0, 2 * np.pi, n, endpoint=False)
    ring = np.stack([r * np.cos(a), r * np.sin(a)], -1)
    v = np.concatenate([np.c_[ring, np.full(n, -hl)], np.c_[ring, np.full(n, hl)], [[0, 0, -hl], [0, 0, hl]]])
    bottom, top = 2 * n, 2 * n + 1
    f = []
    for j in range(n):
        k = (j + 1) % n
        f += [(j, k, n + k), (j, n + k, n + j), (bottom, k, j), (top, n + j, n + k)]
    return v, np.array(f, dtype=np.int32)


def _convex_mesh(model: SapModel, m: int):
    """The hull of mesh ``m`` (the model's faces, each polygon a fan of triangles)."""
    lo, hi = int(model.mesh_vertex_start[m]), int(model.mesh_vertex_start[m + 1])
    f = []
    for face in range(int(model.mesh_face_start[m]), int(model.mesh_face_start[m + 1])):
        ids = np.asarray(model.mesh_face_vertex[model.mesh_face_vertex_start[face]:
                                                model.mesh_face_vertex_start[face + 1]]) - lo
        f += [(int(ids[0]), int(ids[k]), int(ids[k + 1])) for k in range(1, len(ids) - 1)]
    return np.asarray(model.mesh_vertex[lo:hi], float), np.array(f, dtype=np.int32)


def _heightfield(heights: np.ndarray, hx: float, hy: float, base: float):
    """A height field as a closed solid: the grid of heights on top (the triangles of
    ``sap_common.geometry.hfield_triangle``), the same grid at z = −base below, and the four walls."""
    nrow, ncol = heights.shape
    x, y = np.meshgrid(np.linspace(-hx, hx, ncol), np.linspace(-hy, hy, nrow))
    top = np.stack([x, y, heights], -1).reshape(-1, 3)
    v = np.concatenate([top, np.c_[top[:, :2], np.full(len(top), -base)]])
    idx = np.arange(nrow * ncol).reshape(nrow, ncol)
    low = nrow * ncol
    f = []
    for i in range(nrow - 1):
        for j in range(ncol - 1):
            a, b, c, d = idx[i, j], idx[i, j + 1], idx[i + 1, j + 1], idx[i + 1, j]
            f += [(a, c, d), (a, b, c), (low + a, low + d, low + c), (low + a, low + c, low + b)]
    border = list(idx[0, :]) + list(idx[1:, -1]) + list(idx[-1, -2::-1]) + list(idx[-2:0:-1, 0])  # counter-clockwise
    for k in range(len(border)):
        p, q = int(border[k]), int(border[(k + 1) % len(border)])
        f += [(p, low + p, low + q), (p, low + q, q)]
    return v, np.array(f, dtype=np.int32)

"""Both collision pipelines against MuJoCo's own collision functions, for every pair type with a
cylinder, ellipsoid, convex mesh or height field.

Each case is an MJCF model of the two geoms (``tests/collision_cases.py``), imported through
``load_mjcf``; MuJoCo's body poses (random, Hypothesis) are our state. The deepest of our
contacts must have MuJoCo's signed distance and MuJoCo's witness points:

* every convex pair (and plane pairs): ``mj_geomDistance`` (MuJoCo's GJK/EPA with its tolerance
  set to 1e-12), separated and penetrating alike;
* a curved shape (sphere, capsule, cylinder, ellipsoid) on the height field: ``mj_collision``'s
  deepest contact (MuJoCo collides each cell's prism);
* a box or a mesh on a planar ramp (a height field without creases, where a straight edge between
  two points above the surface stays above it): one vertex pushed up to 1 mm into the interior of
  a cell triangle with every other vertex clear of the terrain. Our deepest contact must be that
  vertex's exact depth along its triangle's normal, and at least as deep as ``mj_collision``'s
  deepest: MuJoCo collides each cell's prism and reports a prism's distance out through a wall
  (inside the terrain) when that is shorter, so it can miss the vertex's depth (observed:
  −0.000845 m reported for a vertex 0.000926 m below its triangle); ours is through the surface.

Tolerances: ``POLYTOPE_TOL`` where both GJK/EPA end exactly (polytope cores, plane pairs),
``CURVED_TOL`` where one side is curved (both iterate to a tolerance; measured worst 2e-10 on φ
over 60 poses per pair), ``WITNESS_TOL`` for curved witness points (MuJoCo's EPA places them to
~1e-6 m; ours are on the surfaces to 1e-9 m).
"""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest
from collision_cases import (
    CY,
    NEW_PAIR_TYPES,
    B,
    C,
    E,
    H,
    M,
    P,
    S,
    mujoco_distance,
    mujoco_pose,
    pair_scene,
    random_qpos,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sap_gpu
from sap_common import spatial
from sap_common.collision_rules import contact_capacity
from sap_common.geometry import hfield_grid, hfield_triangle
from sap_gpu.collision import CollisionPipeline as GpuPipeline
from sap_ref.collision import CollisionPipeline as RefPipeline
from sap_ref.collision import shape_geometry

# [m] Polytope cores (point, segment, box, mesh) and plane pairs: both GJK/EPA end exactly; float32
# mesh vertices are the same numbers on both sides. Rounding of metre-scale coordinates.
POLYTOPE_TOL = 1e-12
# [m] A curved core: both sides iterate (EPA, refinement) to ~1e-10 m; measured worst 2e-10.
CURVED_TOL = 1e-8
# [m] Witness points of a curved pair: MuJoCo's EPA places them to ~1e-6 m (measured worst
# 2.8e-6 against ours, which lie on the surfaces to 1e-9 m).
WITNESS_TOL = 1e-5
SIZES = {P: (0.0, 0.0, 0.0), S: (0.06, 0.0, 0.0), C: (0.04, 0.08, 0.0), B: (0.05, 0.07, 0.04), CY: (0.07, 0.05, 0.0),
         E: (0.05, 0.08, 0.11), M: (0.0, 0.0, 0.0), H: (0.0, 0.0, 0.0)}
CONVEX_PAIRS = [p for p in NEW_PAIR_TYPES if H not in p]
CURVED = (S, C, CY, E)


def _polytope_pair(t0, t1) -> bool:
    return all(t in (P, S, C, B, M) for t in (t0, t1))


def _pipeline(backend, model, device):
    if backend == "ref":
        return RefPipeline(model, contact_capacity(model))
    return GpuPipeline(model, contact_capacity(model), device=device)


def _collide(pipeline, state, backend, device):
    c = pipeline.contacts()
    pipeline.collide(state if backend == "ref" else sap_gpu.to_device(state, device), c)
    return c if backend == "ref" else sap_gpu.to_host(c)


def _deepest(c):
    n = int(c.count[0])
    assert n >= 1, "no contact reported"
    k = int(np.argmin(c.phi0[0, :n]))
    return c.x0[0, k], c.x1[0, k], c.normal[0, k], float(c.phi0[0, k])


_PIPELINES = {}


def _cached_pipeline(key, backend, model, device):
    if (key, backend) not in _PIPELINES:
        _PIPELINES[(key, backend)] = _pipeline(backend, model, device)
    return _PIPELINES[(key, backend)]


@pytest.mark.parametrize("backend", ["ref", "gpu"])
@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_signed_distance_and_witness_points_match_mj_geom_distance(backend, device, data):
    t0, t1 = data.draw(st.sampled_from(CONVEX_PAIRS), label="pair type")
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    scene = pair_scene(t0, SIZES[t0], t1, SIZES[t1], margin=1.0)  # every pair within 2 m is reported
    pipe = _cached_pipeline((t0, t1), backend, scene.sap_model, device)
    d, state = mujoco_pose(scene, random_qpos(scene, np.random.default_rng(seed)))
    dist, w0, w1 = mujoco_distance(scene, d)
    x0, x1, n, phi = _deepest(_collide(pipe, state, backend, device))
    tol = POLYTOPE_TOL if _polytope_pair(t0, t1) else CURVED_TOL
    assert phi == pytest.approx(dist, abs=tol), (t0.name, t1.name)
    if not (_polytope_pair(t0, t1) and abs(phi) < 1e-9):  # touching polytopes: the witness is a whole patch
        wtol = tol if _polytope_pair(t0, t1) else WITNESS_TOL
        unique = max(np.abs(x0 - w0).max(), np.abs(x1 - w1).max()) <= wtol
        # Where a face of one shape touches (flat support), the witness on it is any point of the
        # patch; MuJoCo's must then be on the same face plane and give the same separation.
        assert unique or abs(n @ (w1 - w0) - phi) <= wtol, (t0.name, t1.name, x0, w0, x1, w1)


def _terrain_height(heights, hx, hy, x, y):
    """The triangulated terrain's height at (x, y) (sap_common.geometry's triangles)."""
    nrow, ncol = heights.shape
    dx, dy = 2 * hx / (ncol - 1), 2 * hy / (nrow - 1)
    j, i = min(int((x + hx) / dx), ncol - 2), min(int((y + hy) / dy), nrow - 2)
    u, v = (x + hx) / dx - j, (y + hy) / dy - i
    if v >= u:  # triangle A: (i, j), (i + 1, j + 1), (i + 1, j)
        return heights[i, j] + (heights[i + 1, j] - heights[i, j]) * v + (heights[i + 1, j + 1] - heights[i + 1, j]) * u
    return heights[i, j] + (heights[i, j + 1] - heights[i, j]) * u + (heights[i + 1, j + 1] - heights[i, j + 1]) * v


def _mj_deepest(scene, d):
    mujoco.mj_collision(scene.mj_model, d)
    return min((float(c.dist) for c in d.contact[:d.ncon]), default=None)


@pytest.mark.parametrize("backend", ["ref", "gpu"])
@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_curved_shapes_on_a_height_field_match_mj_collision(backend, device, data):
    t = data.draw(st.sampled_from(CURVED), label="shape")
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    scene = pair_scene(t, SIZES[t], H, SIZES[H], mesh1="terrain", margin=0.0)
    pipe = _cached_pipeline((t, H), backend, scene.sap_model, device)
    rng = np.random.default_rng(seed)
    q = random_qpos(scene, rng, 0.25)
    q[2] = rng.uniform(0.03, 0.12)
    d, state = mujoco_pose(scene, q)
    mj = _mj_deepest(scene, d)
    c = _collide(pipe, state, backend, device)
    if mj is None or mj < -0.01:  # MuJoCo reports nothing, or a deep overlap (prism walls)
        return
    assert c.count[0] >= 1
    assert c.phi0[0, :c.count[0]].min() == pytest.approx(mj, abs=CURVED_TOL)


@pytest.mark.parametrize("backend", ["ref", "gpu"])
@pytest.mark.parametrize("shape", [B, M], ids=["box", "mesh"])
@settings(max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), depth=st.floats(1e-5, 1e-3))
def test_polytope_vertex_into_a_height_field_cell_matches_mj_collision(backend, shape, device, seed, depth):
    scene = pair_scene(shape, SIZES[shape], H, SIZES[H], mesh1="ramp", margin=0.0)
    model = scene.sap_model
    pipe = _cached_pipeline((shape, H, "ramp"), backend, model, device)
    h = model.shape_index("g1")
    s = 1 - h
    heights = hfield_grid(model, h)
    hx, hy = model.shape_size[h, :2]
    verts = (shape_geometry(model, s)[0] if shape == M else
             np.array([[a, b, c] for a in (-1, 1) for b in (-1, 1) for c in (-1, 1)]) * model.shape_size[s])
    rng = np.random.default_rng(seed)
    q = random_qpos(scene, rng, 0.2)
    q[2] = 0.3
    _, state = mujoco_pose(scene, q)
    X = spatial.transform_compose(state.body_q[0, 0], model.shape_transform[s])
    W = spatial.transform_point(np.broadcast_to(X, (len(verts), 7)), verts)
    gaps = np.array([w[2] - _terrain_height(heights, hx, hy, w[0], w[1]) for w in W])
    low = int(np.argmin(gaps))
    q[2] -= gaps[low] + depth
    # Only the lowest vertex may touch, well inside a triangle (≥ 5 mm from its edges seen from above).
    others = np.sort(gaps)[1] - gaps[low]
    nrow, ncol = heights.shape
    u = (W[low, 0] + hx) / (2 * hx / (ncol - 1))
    v = (W[low, 1] + hy) / (2 * hy / (nrow - 1))
    fu, fv = u - math.floor(u), v - math.floor(v)
    edge = min(fu, 1 - fu, fv, 1 - fv, abs(fu - fv) / math.sqrt(2)) * 2 * hx / (ncol - 1)
    if not (others > 5e-3 and edge > 5e-3 and abs(W[low, 0]) < hx and abs(W[low, 1]) < hy):
        return
    d, state = mujoco_pose(scene, q)
    X = spatial.transform_compose(state.body_q[0, 0], model.shape_transform[s])
    # ... and no terrain vertex (a peak) inside the shape: the vertex is the only overlap.
    grid = np.array([[-hx + 2 * hx * jj / (ncol - 1), -hy + 2 * hy * ii / (nrow - 1), heights[ii, jj]]
                     for ii in range(nrow) for jj in range(ncol)])
    local = (grid - X[:3]) @ spatial.quat_to_matrix(X[3:])
    planes = ([(row_[:3], row_[3]) for row_ in model.mesh_face_plane] if shape == M else
              [(sign * np.eye(3)[k], model.shape_size[s, k]) for k in range(3) for sign in (1, -1)])
    if np.any(np.max([local @ n - off for n, off in planes], axis=0) < 0.0):
        return
    w = spatial.transform_point(X, verts[low])
    i, j = int(math.floor(v)), int(math.floor(u))
    tri = hfield_triangle(heights, hx, hy, i, j, 0 if fv >= fu else 1)
    n_up = np.cross(tri[1] - tri[0], tri[2] - tri[0])
    exact = (n_up / np.linalg.norm(n_up)) @ (w - tri[0])
    mj = _mj_deepest(scene, d)
    c = _collide(pipe, state, backend, device)
    assert mj is not None and c.count[0] >= 1
    ours = c.phi0[0, :c.count[0]].min()
    assert ours == pytest.approx(exact, abs=POLYTOPE_TOL)
    assert ours <= mj + POLYTOPE_TOL

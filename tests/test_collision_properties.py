"""Properties every new pair type must have, in both backends, on random shapes and poses
(Hypothesis), checked against geometry written independently here (implicit functions and support
functions of each shape, a convex feasibility problem solved by SciPy).

The properties:

* **symmetry**: the pair built in the other shape order gives the mirrored contacts (witness
  points swapped, normal negated, same φ), exactly;
* **φ sign**: the deepest φ is negative exactly when the shapes overlap (an inside/outside test:
  min over x of max(g₀(x), g₁(x)) < 0 with gᵢ ≤ 0 inside shape i), decided away from touching;
* **witness points on both surfaces**: x0 on shape 0's boundary (g₀ = 0), x1 on shape 1's;
* **normal = the direction of least separation**: the separation along n̂,
  σ(n̂) = min_b n̂·b − max_a n̂·a (independent support functions), equals the deepest φ and no other
  direction separates more (σ(n') ≤ φ for random and nearby n'), i.e. φ = max σ;
* every point of a manifold shares its pair's normal (a reference face), except height fields.

Height-field pairs (the terrain is not convex) check the first three with the terrain's own
inside test (below its triangulated surface) and surface test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from collision_cases import CONVEX, CUBE, CY, GEM, NEW_PAIR_TYPES, B, C, E, H, M, P, S
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sap_gpu
from sap_common import spatial
from sap_common.builder import ModelBuilder
from sap_common.collision_rules import MAX_CONTACTS_PER_PAIR, contact_capacity
from sap_common.geometry import convex_hull, hfield_triangle
from sap_gpu.collision import CollisionPipeline as GpuPipeline
from sap_ref.collision import CollisionPipeline as RefPipeline

# [m] Polytope cores and plane pairs end exactly: rounding of metre-scale coordinates.
EXACT_TOL = 1e-12
# [m] Curved cores iterate (GJK/EPA, refinement) to ~1e-10 m (sap_common.constants.EPA_TOL).
ITERATIVE_TOL = 1e-8
# [m] φ this close to 0 is touching: the inside test's solver (SLSQP, 1e-10) cannot decide the sign.
TOUCHING = 1e-5
HEIGHTS = np.array([[0.02 * math.sin(0.9 * i + 0.4 * j) + 0.01 * j for j in range(6)] for i in range(5)])
HF_SIZE = (0.3, 0.25, 0.1)  # hx, hy, base
MESHES = {"gem": GEM, "cube": CUBE}


@st.composite
def shapes(draw, t):
    """(type, size, mesh points or None) of one shape."""
    f = lambda lo, hi: draw(st.floats(lo, hi))  # noqa: E731
    if t == S:
        return t, np.array([f(0.02, 0.1), 0, 0]), None
    if t == C:
        return t, np.array([f(0.02, 0.08), f(0.0, 0.1), 0]), None
    if t in (B, E):
        return t, np.array([f(0.02, 0.1), f(0.02, 0.1), f(0.02, 0.1)]), None
    if t == CY:
        return t, np.array([f(0.02, 0.1), f(0.01, 0.1), 0]), None
    if t == M:
        name = draw(st.sampled_from(sorted(MESHES)))
        return t, np.zeros(3), MESHES[name] * draw(st.floats(0.5, 1.5))
    return t, np.zeros(3), None  # plane, height field


@st.composite
def pairs(draw):
    t0, t1 = draw(st.sampled_from(NEW_PAIR_TYPES))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    X0, X1 = _random_poses(rng, t0, t1)
    return draw(shapes(t0)), X0, draw(shapes(t1)), X1


def _random_poses(rng, t0, t1):
    """World poses of two shapes near the origin (a plane nearly level, a height field upright at
    the origin with the other shape above its grid)."""
    spread = 0.2 if H in (t0, t1) else 0.1
    poses = []
    for t in (t0, t1):
        p = rng.uniform(-spread, spread, 3)
        if H in (t0, t1):
            p[2] = rng.uniform(0.0, 0.12)
        if t == P:
            p = np.array([0.0, 0.0, rng.uniform(-0.05, 0.05)])
        if t == H:  # the terrain at the origin (terrain_height is in its frame)
            p = np.zeros(3)
        q = spatial.quat_normalize(rng.normal(size=4)) if t not in (H,) else np.array([0.0, 0.0, 0.0, 1.0])
        if t == P:
            q = spatial.quat_normalize(np.array([*rng.normal(size=2) * 0.3, 0.0, 1.0]))
        poses.append(spatial.transform(p, q))
    return poses[0], poses[1]


def _build(first, X_first, second, X_second):
    """A two-shape model (a plane or height field on the world, the others on free bodies) and its
    state with the shapes at the given world poses. A shape may carry a fourth entry, its rounding
    radius."""
    b = ModelBuilder()
    bodies = []
    for shape, X in ((first, X_first), (second, X_second)):
        t, size, mesh = shape[:3]
        if t == P:
            b.add_shape_plane(-1, X, margin=0.5)
            continue
        if t == H:
            b.add_shape_heightfield(HEIGHTS, X, hx=HF_SIZE[0], hy=HF_SIZE[1], base=HF_SIZE[2], margin=0.5)
            continue
        body = b.add_body(1.0, inertia=(1, 1, 1))
        b.add_joint_free(-1, body)
        bodies.append(X)
        kw = dict(margin=0.5)
        if len(shape) > 3:
            kw["rounding"] = shape[3]
        if t == S:
            b.add_shape_sphere(body, radius=size[0], **kw)
        elif t == C:
            b.add_shape_capsule(body, radius=size[0], half_length=size[1], **kw)
        elif t == B:
            b.add_shape_box(body, None, *size, **kw)
        elif t == CY:
            b.add_shape_cylinder(body, radius=size[0], half_length=size[1], **kw)
        elif t == E:
            b.add_shape_ellipsoid(body, None, *size, **kw)
        else:
            b.add_shape_convex_mesh(body, vertices=mesh, **kw)
    model = b.finalize()
    state = model.state()
    for i, X in enumerate(bodies):
        state.body_q[0, i] = X
    return model, state


def _contacts(backend, model, state, device):
    if backend == "ref":
        pipe = RefPipeline(model, contact_capacity(model))
        c = pipe.contacts()
        pipe.collide(state, c)
        return c
    pipe = GpuPipeline(model, contact_capacity(model), device=device)
    c = pipe.contacts()
    pipe.collide(sap_gpu.to_device(state, device), c)
    return sap_gpu.to_host(c)


def _mirrored_contacts(backend, first, X0, second, X1, device):
    """The pair's contacts, checked to be mirrored exactly by the other shape order (symmetry)."""
    forward = _list(_contacts(backend, *_build(first, X0, second, X1), device))
    backward = _list(_contacts(backend, *_build(second, X1, first, X0), device))
    assert len(forward) == len(backward)
    for (x0, x1, n, phi), (y0, y1, m, psi) in zip(forward, backward):
        assert np.array_equal(x0, y1) and np.array_equal(x1, y0) and np.array_equal(n, -m) and phi == psi
    return forward


def _list(c):
    return [(c.x0[0, k], c.x1[0, k], c.normal[0, k], float(c.phi0[0, k])) for k in range(int(c.count[0]))]


# ----------------------------------------------------------------------------- independent geometry


def _frame(X):
    return X[:3], spatial.quat_to_matrix(X[3:])


def implicit(shape, X):
    """g(x): < 0 inside, 0 on the boundary, > 0 outside (not a distance for every type)."""
    t, size, mesh = shape
    p, R = _frame(X)
    if t == P:
        return lambda x: R[:, 2] @ (x - p)
    if t == M:
        hull = convex_hull(mesh)
        return lambda x: max(pl[:3] @ (R.T @ (x - p)) - pl[3] for pl in hull.planes)

    def g(x):
        l = R.T @ (x - p)
        if t == S:
            return math.sqrt(l @ l) - size[0]
        if t == C:
            z = min(max(l[2], -size[1]), size[1])
            return math.sqrt(l[0] ** 2 + l[1] ** 2 + (l[2] - z) ** 2) - size[0]
        if t == B:
            return float(np.max(np.abs(l) - size))
        if t == CY:
            return max(math.hypot(l[0], l[1]) - size[0], abs(l[2]) - size[1])
        return min(size) * (math.sqrt(np.sum((l / size) ** 2)) - 1.0)  # ellipsoid, scaled to metres
    return g


def support_fn(shape, X):
    """s(d): the shape's point farthest along d (written here, not sap_ref's)."""
    t, size, mesh = shape
    p, R = _frame(X)

    def s(d):
        l = R.T @ d
        if t == S:
            return p + size[0] * d / np.linalg.norm(d)
        if t == C:
            return p + R @ np.array([0.0, 0.0, size[1] * np.sign(l[2])]) + size[0] * d / np.linalg.norm(d)
        if t == B:
            return p + R @ (np.sign(l) * size)
        if t == CY:  # along the axis (ρ = 0) every point of the cap is farthest: its centre
            rho = math.hypot(l[0], l[1])
            radial = size[0] * l[:2] / rho if rho > 0 else np.zeros(2)
            return p + R @ np.array([radial[0], radial[1], size[1] * np.sign(l[2])])
        if t == E:
            return p + R @ (size ** 2 * l / np.linalg.norm(size * l))
        return p + R @ mesh[int(np.argmax(mesh @ l))]
    return s


def test_a_cylinder_s_support_along_its_axis_is_its_cap():
    """The random search met a contact normal exactly along a cylinder's axis (two cylinders cap to
    cap), where the radial direction is undefined; the support is then the cap (its centre)."""
    X = np.array([0.1, -0.2, 0.3, 1.0, 0.0, 0.0, 0.0])
    s = support_fn((CY, np.array([0.0625, 0.05, 0.0]), None), X)
    assert np.array_equal(s(np.array([0.0, 0.0, 2.0])), np.array([0.1, -0.2, 0.35]))
    assert np.array_equal(s(np.array([0.0, 0.0, -1.0])), np.array([0.1, -0.2, 0.25]))


def overlap_margin(g0, g1, *starts):
    """min over x of max(g0(x), g1(x)) (SLSQP on (x, t)): < 0 when the interiors intersect.

    SLSQP from each of ``starts``, the least value found: a negative value is a point inside both
    shapes (a certificate); a cylinder's implicit function has kinks at its rims, where SLSQP may
    stop early from one start (the random search found it at +0.9 mm from the witnesses'
    midpoint, at −2.0 mm from 1e-17 m away), so one start alone is no proof of separation."""
    from scipy.optimize import minimize

    cons = [{"type": "ineq", "fun": lambda z, g=g: z[3] - g(z[:3])} for g in (g0, g1)]
    best = np.inf
    for x_start in starts:
        z0 = np.concatenate([x_start, [max(g0(x_start), g1(x_start))]])
        res = minimize(lambda z: z[3], z0, constraints=cons, method="SLSQP", options={"ftol": 1e-12, "maxiter": 500})
        best = min(best, max(g0(res.x[:3]), g1(res.x[:3])))
    return best


def terrain_height(x, y):
    hx, hy = HF_SIZE[:2]
    nrow, ncol = HEIGHTS.shape
    dx, dy = 2 * hx / (ncol - 1), 2 * hy / (nrow - 1)
    j, i = min(max(int((x + hx) // dx), 0), ncol - 2), min(max(int((y + hy) // dy), 0), nrow - 2)
    u, v = (x + hx) / dx - j, (y + hy) / dy - i
    tri = hfield_triangle(HEIGHTS, hx, hy, i, j, 0 if v >= u else 1)
    n = np.cross(tri[1] - tri[0], tri[2] - tri[0])
    return tri[0, 2] - (n[0] * (x - tri[0, 0]) + n[1] * (y - tri[0, 1])) / n[2]


def _tol(t0, t1):
    return EXACT_TOL if all(t in (P, S, C, B, M, H) for t in (t0, t1)) else ITERATIVE_TOL


# ----------------------------------------------------------------------------- the properties


# ~50 s on two cores for both backends: behind slow (run by CI after the default run, and drawn
# afresh by its random search); the default run covers every pair type against MuJoCo
# (test_collision_mujoco_oracle.py) and sap_ref against sap_gpu (test_gpu_collision.py).
@pytest.mark.slow
@pytest.mark.parametrize("backend", ["ref", "gpu"])
@settings(max_examples=120, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=pairs())
def test_symmetry_sign_surfaces_and_least_separation(backend, device, case):
    first, X0, second, X1 = case
    (t0, _, _), (t1, _, _) = first, second
    forward = _mirrored_contacts(backend, first, X0, second, X1, device)
    if not forward:
        assert H in (t0, t1)  # only a shape off the terrain's footprint reports nothing
        return
    assert len(forward) <= MAX_CONTACTS_PER_PAIR[frozenset([t0, t1])]
    tol = _tol(t0, t1)
    g0, g1 = (lambda x: x[2] - terrain_height(x[0], x[1])) if t0 == H else implicit(first, X0), \
        (lambda x: x[2] - terrain_height(x[0], x[1])) if t1 == H else implicit(second, X1)
    for x0, x1, n, phi in forward:
        assert abs(np.linalg.norm(n) - 1.0) < 1e-12
        assert np.allclose(x1 - x0, phi * n, rtol=0, atol=1e-12)
        # Witness points on both surfaces (scaled implicit functions: zero on the boundary).
        assert abs(g0(x0)) <= max(tol, 1e-12) * 10 and abs(g1(x1)) <= max(tol, 1e-12) * 10, (t0.name, t1.name)
    deepest = min(forward, key=lambda c: c[3])
    x0, x1, n, phi = deepest
    # φ sign against an inside/outside test.
    if abs(phi) > TOUCHING:
        if H in (t0, t1):  # the terrain: a point of the shape below the surface, or none of its witnesses
            shape_point = x1 if t0 == H else x0
            g = g0 if t0 == H else g1
            if phi > 0:  # off the grid's footprint there is no terrain (terrain_height extends its edge)
                on_grid = abs(shape_point[0]) <= HF_SIZE[0] and abs(shape_point[1]) <= HF_SIZE[1]
                assert g(shape_point) >= 0 or not on_grid
            else:  # deeper than the shape is thick, the witness may be the shape's point beyond a cell's wall
                lowest = support_fn(second, X1)(np.array([0, 0, -1.0])) if t0 == H else \
                    support_fn(first, X0)(np.array([0, 0, -1.0]))
                assert g(shape_point) < 0 or g(lowest) < 0
        elif P not in (t0, t1):
            assert (phi < 0) == (overlap_margin(g0, g1, 0.5 * (x0 + x1), x0, x1) < 0), (t0.name, t1.name, phi)
        else:
            assert (phi < 0) == (g0(x1) < 0 if t0 == P else g1(x0) < 0)
    # Normal = the direction of least separation: φ = σ(n̂) = max σ.
    if P in (t0, t1):
        plane_normal = spatial.quat_to_matrix((X0 if t0 == P else X1)[3:])[:, 2]
        assert np.allclose(n, plane_normal if t0 == P else -plane_normal, atol=1e-12)
    elif H not in (t0, t1):
        s0, s1 = support_fn(first, X0), support_fn(second, X1)
        sigma = lambda d: d @ (s1(-d) - s0(d))  # noqa: E731
        assert sigma(n) == pytest.approx(phi, abs=tol * 10)
        rng = np.random.default_rng(0)
        others = [v / np.linalg.norm(v) for v in rng.normal(size=(200, 3))]
        others += [(n + 1e-3 * v) / np.linalg.norm(n + 1e-3 * v) for v in rng.normal(size=(50, 3))]
        assert max(sigma(d) for d in others) <= phi + tol * 10
        # A manifold's points share the pair's normal (one reference face).
        for c in forward:
            assert np.allclose(c[2], n, atol=1e-12)


# ----------------------------------------------------------------------------- regressions

# Deep overlaps whose normal of least separation lies on an edge of the polytope: across the edge's
# great circle of normals the polytope's support point jumps from one end of the edge to the other,
# so σ has a kink there. The refinement's Newton steps stalled next to the kink with the normal up to
# ~1e-3 rad off, and a witness point 1.7e-6 m (the box) and 4.7e-5 m (the gem) off its surface.
# The box–ellipsoid pair is what pairs() draws for the seed 1111438 with these sizes (the ellipsoid
# a sphere, so the exact answer is the sphere centre's distance to the box); the gem–ellipsoid pair
# came from a random search of the same kind.
EDGE_OPTIMA = {
    "box-ellipsoid": ((B, np.array([0.03125, 0.03125, 0.0332]), None),
                      np.array([0.07625767682875664, 0.010318588073609039, 0.014066695188912154, 0.359963589606539,
                                -0.3995954399445211, -0.7112093925785947, -0.45269294056910814]),
                      (E, np.array([0.03125, 0.03125, 0.03125]), None),
                      np.array([0.09179405816585925, 0.05256875644705891, -0.012458573060842928, 0.6197629169515508,
                                -0.08597026597896924, -0.24357775304511664, -0.741062020589844])),
    "gem-ellipsoid": ((M, np.zeros(3), GEM * 0.8771064852957586),
                      np.array([-0.08607992862322739, 0.0492924436718542, -0.02886232414663424, -0.24906738536710182,
                                0.6641852412797741, -0.4190070703387539, 0.5667949168955723]),
                      (E, np.array([0.09786253309064365, 0.05998714797618182, 0.059334273947894436]), None),
                      np.array([-0.01852714207447495, 0.04196797014280375, -0.09256398384307046, -0.13595183030632482,
                                0.4865434157168522, 0.8507412510696428, 0.1450238883336037])),
}


@pytest.mark.parametrize("backend", ["ref", "gpu"])
@pytest.mark.parametrize("name", sorted(EDGE_OPTIMA))
def test_deep_overlap_across_a_polytope_edge_puts_the_witnesses_on_both_surfaces(backend, device, name):
    first, X0, second, X1 = EDGE_OPTIMA[name]
    forward = _list(_contacts(backend, *_build(first, X0, second, X1), device))
    backward = _list(_contacts(backend, *_build(second, X1, first, X0), device))
    assert len(forward) == len(backward) == 1  # a point against an edge: one contact
    (x0, x1, n, phi), (y0, y1, m, psi) = forward[0], backward[0]
    assert np.array_equal(x0, y1) and np.array_equal(x1, y0) and np.array_equal(n, -m) and phi == psi
    assert phi < -0.02
    # The property test's bars: on both surfaces, φ = σ(n̂) and no direction separates more.
    assert abs(implicit(first, X0)(x0)) <= ITERATIVE_TOL * 10 and abs(implicit(second, X1)(x1)) <= ITERATIVE_TOL * 10
    s0, s1 = support_fn(first, X0), support_fn(second, X1)
    sigma = lambda d: d @ (s1(-d) - s0(d))  # noqa: E731
    assert sigma(n) == pytest.approx(phi, abs=ITERATIVE_TOL * 10)
    rng = np.random.default_rng(0)
    nearby = [(n + 1e-3 * v) / np.linalg.norm(n + 1e-3 * v) for v in rng.normal(size=(200, 3))]
    assert max(sigma(d) for d in nearby) <= phi + ITERATIVE_TOL * 10
    if name == "box-ellipsoid":  # a sphere: the exact answer from its centre's nearest point on the box
        p, R = _frame(X0)
        local = R.T @ (X1[:3] - p)
        nearest = np.clip(local, -first[1], first[1])
        assert np.count_nonzero(local != nearest) == 2  # the centre is beside an edge
        gap = np.linalg.norm(local - nearest)
        assert phi == pytest.approx(gap - second[1][0], abs=1e-12)
        assert np.allclose(n, R @ (local - nearest) / gap, rtol=0, atol=1e-8)
        assert np.allclose(x0, p + R @ nearest, rtol=0, atol=1e-10)


def _column_depth(tri):
    """(depth(x), inside(x)) for a cell triangle (3, 3) of the terrain (its frame is the world's):
    depth = z − the triangle's plane at (x, y), inside = (x, y) in the triangle (its edges' sides)."""
    nrm = np.cross(tri[1] - tri[0], tri[2] - tri[0])
    nrm = nrm / nrm[2]
    xy = tri[:, :2]

    def depth(x):
        return x[2] - tri[0, 2] + nrm[0] * (x[0] - tri[0, 0]) + nrm[1] * (x[1] - tri[0, 1])

    def side(a, b, x):
        return (b[0] - a[0]) * (x[1] - a[1]) - (b[1] - a[1]) * (x[0] - a[0])

    sense = side(xy[0], xy[1], xy[2])

    def inside(x, slack=0.0):
        return all(side(xy[k], xy[(k + 1) % 3], x) * sense >= -slack for k in range(3))
    return depth, inside


def _sphere_deepest_in_column(centre, radius, tri):
    """The sphere's point deepest below the triangle's plane (least ``depth``) among its points
    inside the triangle's vertical column, in closed form: the unconstrained minimizer (along the
    plane's normal), else the best of the slices by the three walls (disks: along the normal's part
    in the wall) and the three vertical edges (their lowest point inside the sphere)."""
    depth, inside = _column_depth(tri)
    n = np.cross(tri[1] - tri[0], tri[2] - tri[0])
    n = n / np.linalg.norm(n)
    candidates = [centre - radius * n]
    for k in range(3):
        a, b = tri[k], tri[(k + 1) % 3]
        m = np.array([b[1] - a[1], a[0] - b[0], 0.0])
        m = m / np.linalg.norm(m)  # the wall's horizontal normal
        off = m @ (centre - a)
        if abs(off) < radius:
            along = n - (n @ m) * m
            candidates.append(centre - off * m - math.sqrt(radius**2 - off**2) * along / np.linalg.norm(along))
        gap = np.linalg.norm(a[:2] - centre[:2])  # the vertical line through vertex a
        if gap < radius:
            candidates.append(np.array([a[0], a[1], centre[2] - math.sqrt(radius**2 - gap**2)]))
    feasible = [x for x in candidates if inside(x, 1e-14)]
    return min(feasible, key=depth)



# A cylinder whose cap is nearly parallel to the contact normal (tilts of 1e-5 to 3e-3 rad) with its
# rim crossing another rim or an edge: random searches of such pairs (2,000 cylinder pairs, caps
# within 2 mm of touching; 2,400 pairs of boxes, cube meshes and cylinders with near-parallel faces)
# put a witness up to 1.2e-4 m off a surface, in two ways. (1) The rim's support point swings along
# the rim with the normal's last digits, so the witness rebuilt from it missed the other shape (the
# single contact and, through it, a manifold's deepest point). (2) A manifold kept GJK/EPA's witness
# even where it lay beyond the reference cap's rim, and projected it onto the cap's plane outside the
# cap. The cases below are five of those draws (the witness was off by 7.7e-5, 1.5e-5, 8.9e-6,
# 9.9e-5 and 5.6e-7 m), and a sixth found later (5.6e-4 m).
NEARLY_PARALLEL_CAPS = {
    "manifold, witness beyond the reference rim": (
        (CY, np.array([0.0424982545455201, 0.04822109859839392, 0.0]), None),
        np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.24474427197724982, -0.969587665626129]),
        (CY, np.array([0.05046793364828883, 0.0943722222513778, 0.0]), None),
        np.array([0.005539916747694542, 0.051881026702956, 0.14109464037336378, -1.502807559284192e-06,
                  5.9350759461936935e-06, 0.0, 0.9999999999812582])),
    "manifold, rim against rim": (
        (CY, np.array([0.02553347323213386, 0.029333545054185707, 0.0]), None),
        np.array([-0.04818333558329249, 0.049399012536400395, 0.07589479563693641, -3.2773041955448404e-07,
                  -6.225371133697266e-06, 0.0, 0.9999999999805687]),
        (CY, np.array([0.08845489006785018, 0.04738785081842798, 0.0]), None),
        np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.6484898920710411, -0.7612232654626956])),
    "single contact, rim against rim": (
        (CY, np.array([0.06515994492018544, 0.05101661614271703, 0.0]), None),
        np.array([0.0013358857315625492, 0.06850296938713143, 0.1101932266869698, -0.0008841609514748064,
                  0.0010743581010206524, 0.0, 0.9999990320065728]),
        (CY, np.array([0.08726075279614513, 0.060022660456933656, 0.0]), None),
        np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.14473210313864912, -0.9894708779550127])),
    "manifold, rim against a cube's edge": (
        (M, np.zeros(3), CUBE * (0.04576259494797977 / np.abs(CUBE).max())),
        np.array([0.036499581998070324, 0.05449274201670317, 0.05447039965305847, -0.45488332158567596,
                  0.8905510432903573, 1.793324029174601e-05, 5.211561939289206e-05]),
        (CY, np.array([0.03553746123112095, 0.010204795930104402, 0.0]), None),
        np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.2081166583643172, -0.978104011090472])),
    # A box whose bottom face is tilted 1e-7 rad against a cap 1 mm into it: the refined normal
    # ties two corners of the box (an edge) against the cap, and the edge's point nearest EPA's
    # witness, moved onto the cap's plane, lay 0.56 mm beyond the rim (the explore run found it);
    # the witness is now kept to the part of the edge over the cap.
    "manifold, a box's edge beyond a cap's rim": (
        (CY, np.array([0.04121886837404623, 0.07612102883946778, 0.0]), None),
        np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.9925916385601233, -0.1214983088792986]),
        (B, np.array([0.04121886837404623, 0.09127719120235092, 0.04121886837404623]), None),
        np.array([-0.02700035449345904, 0.11212468323387942, 0.1163778776101592, -7.231301797518903e-08,
                  6.056143722061612e-08, 0.9804878107671611, -0.19657988945212793])),
    "single contact, rim against a box's edge": (
        (B, np.array([0.08548538776524434, 0.029488767485582042, 0.08229669283885988]), None),
        np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.04928472593615798, 0.9987847695021174]),
        (CY, np.array([0.05374231264650989, 0.01003844892840363, 0.0]), None),
        np.array([-0.038896700224957725, -0.0038869108774274, 0.0908399287103765, 7.807368185427658e-05,
                  -0.0002929000757406797, 0.7795673316450985, -0.6263183563857816])),
}


@pytest.mark.parametrize("backend", ["ref", "gpu"])
@pytest.mark.parametrize("name", sorted(NEARLY_PARALLEL_CAPS))
def test_nearly_parallel_cylinder_caps_keep_the_witnesses_on_both_surfaces(backend, device, name):
    first, X0, second, X1 = NEARLY_PARALLEL_CAPS[name]
    contacts = _list(_contacts(backend, *_build(first, X0, second, X1), device))
    assert len(contacts) == (1 if name.startswith("single") else 4)
    g0, g1 = implicit(first, X0), implicit(second, X1)
    for x0, x1, n, phi in contacts:
        assert -2e-3 < phi < 0.0
        assert np.allclose(x1 - x0, phi * n, rtol=0, atol=1e-12)
        # ITERATIVE_TOL itself, ten times tighter than the property test's bar for curved pairs.
        assert abs(g0(x0)) <= ITERATIVE_TOL and abs(g1(x1)) <= ITERATIVE_TOL, (g0(x0), g1(x1))


@st.composite
def nearly_parallel_pairs(draw):
    """A shape with a flat top (box, cylinder, mesh) and, above it, a second shape whose underside is
    nearly parallel to that top: upright, upside down or (capsule, cylinder) lying, turned about
    the vertical, tilted by 1e-7 to 3e-2 rad, its lowest point within 2 mm of the top. The pairs of
    the new shape types only (NEW_PAIR_TYPES); a shape order at random."""
    t0 = draw(st.sampled_from((B, CY, M)))
    t1 = draw(st.sampled_from([t for t in CONVEX if (min(t0, t), max(t0, t)) in NEW_PAIR_TYPES]))
    bottom, top = draw(shapes(t0)), draw(shapes(t1))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    turn = lambda axis, angle: spatial.quat_from_axis_angle(np.asarray(axis, dtype=float), angle)  # noqa: E731
    q = np.array([0.0, 0.0, 0.0, 1.0])
    if t1 in (C, CY) and rng.random() < 0.5:
        q = turn([1.0, 0.0, 0.0], math.pi / 2)  # lying
    if rng.random() < 0.3:
        q = spatial.quat_multiply(turn([1.0, 0.0, 0.0], math.pi), q)  # upside down
    tilt_axis = np.array([*rng.normal(size=2), 0.0])
    q = spatial.quat_multiply(turn([0.0, 0.0, 1.0], rng.uniform(0.0, 2 * math.pi)), q)
    q = spatial.quat_multiply(turn(tilt_axis, 10 ** rng.uniform(-7.0, -1.5)), q)
    X0 = spatial.transform(np.zeros(3), turn([0.0, 0.0, 1.0], rng.uniform(0.0, 2 * math.pi)))
    offset = rng.normal(size=2) * rng.uniform(0.0, 0.08)
    X1 = spatial.transform(np.array([offset[0], offset[1], 0.0]), q)
    # Support functions along ±z, off the axis by 1e-13 rad (a cylinder's exactly along its axis is a
    # whole cap, which support_fn does not pick a point of).
    up = np.array([1e-13, 0.0, 1.0])
    X1[2] = support_fn(bottom, X0)(up)[2] - support_fn(top, X1)(-up)[2] - rng.uniform(-2e-3, 2e-3)
    if rng.random() < 0.5:
        return top, X1, bottom, X0
    return bottom, X0, top, X1


# ~7 s on one core for both backends: in the default run (CI's random search draws afresh).
@pytest.mark.parametrize("backend", ["ref", "gpu"])
@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=nearly_parallel_pairs())
def test_nearly_parallel_faces_keep_the_witnesses_on_both_surfaces(backend, device, case):
    """Faces nearly parallel to each other, where a support point is ill-conditioned (a cylinder's
    rim swings with the normal's last digits) and where manifolds clip one face against another:
    every contact's witness points lie on both surfaces, x1 − x0 = φn̂ (the property test's bars)."""
    first, X0, second, X1 = case
    contacts = _list(_contacts(backend, *_build(first, X0, second, X1), device))
    tol = max(_tol(first[0], second[0]), 1e-12) * 10
    g0, g1 = implicit(first, X0), implicit(second, X1)
    for x0, x1, n, phi in contacts:
        assert np.allclose(x1 - x0, phi * n, rtol=0, atol=1e-12)
        assert abs(g0(x0)) <= tol and abs(g1(x1)) <= tol, (first[0].name, second[0].name, g0(x0), g1(x1))

# [m] A height field's contact straight up raises the cell triangle until it touches the shape,
# stopping within twice sap_common.constants.RAISE_GAP (1e-11 m) short (sap_ref.collision_heightfield
# ._deepest_below): its depth and, on a polytope or rounded core, its witness are that exact, up to
# the slope of the surfaces where they meet (≤ 5 here).
RAISE_TOL = 1e-10
# [m] On a curved core (an ellipsoid) GJK's witness is known to a relative 1e-12 in the distance
# only: the depth is stationary at the optimum, so a point δ along the surface changes it by
# ~δ²/(2ρ) (ρ the radius of curvature, here 0.0625 m), and a 1e-13 m depth leaves δ ~1e-7 m.
ALONG_CURVED_SURFACE_TOL = 1e-6


@pytest.mark.parametrize("backend", ["ref", "gpu"])
@pytest.mark.parametrize("kind", [E, S])
def test_a_shape_deep_in_the_terrain_at_a_crease_gets_its_contact(backend, device, kind):
    """A sphere-like ellipsoid (r = 0.0625) whose centre is 4.3 cm below the terrain, over a cell's
    diagonal crease: every prism under it penetrates with its witness on a wall, and the deepest
    point's projection onto either triangle's plane falls across the crease, so neither took the
    contact along its normal and the deepest reported φ was +0.46 m (the explore run found it).
    Each such triangle takes the contact straight up from the sphere's point deepest below it within
    its column instead: the closed form's, to the raise's gap (a sphere of the same size: its
    witness too; the ellipsoid's GJK witness to its iteration along the surface)."""
    first = (kind, np.array([0.0625, 0.0625, 0.0625]) if kind == E else np.array([0.0625, 0.0, 0.0]), None)
    X0 = np.array([0.16081933, -0.14721935, 0.00849398, -0.72480629, 0.07127463, 0.07229923, 0.68143128])
    X1 = spatial.transform(np.zeros(3), np.array([0.0, 0.0, 0.0, 1.0]))
    contacts = _list(_contacts(backend, *_build(first, X0, (H, np.zeros(3), None), X1), device))
    vertical = [c for c in contacts if np.array_equal(np.abs(c[2]), [0.0, 0.0, 1.0])]
    assert vertical
    hx, hy = HF_SIZE[:2]
    tris = [hfield_triangle(HEIGHTS, hx, hy, i, j, t) for i in range(HEIGHTS.shape[0] - 1)
            for j in range(HEIGHTS.shape[1] - 1) for t in (0, 1)]
    position_tol = ALONG_CURVED_SURFACE_TOL if kind == E else RAISE_TOL
    for x0, x1, n, phi in vertical:
        np.testing.assert_array_equal(n, [0.0, 0.0, -1.0])
        np.testing.assert_allclose(x1, x0 - phi * np.array([0.0, 0.0, 1.0]), rtol=0, atol=1e-15)
        assert abs(np.linalg.norm(x0 - X0[:3]) - 0.0625) <= (ITERATIVE_TOL if kind == E else EXACT_TOL)  # on it
        assert phi < 0.0
        # some triangle whose column holds x0 at this depth has the closed form's deepest point there
        best = [_sphere_deepest_in_column(X0[:3], 0.0625, tri) for tri in tris
                if _column_depth(tri)[1](x0, RAISE_TOL) and abs(_column_depth(tri)[0](x0) - phi) <= RAISE_TOL]
        assert any(np.linalg.norm(x0 - b) <= position_tol for b in best), (x0, best)
    phi = min(c[3] for c in vertical)
    assert phi < -0.1
    lowest = X0[:3] - np.array([0.0, 0.0, 0.0625])
    assert phi <= lowest[2] - terrain_height(lowest[0], lowest[1]) + RAISE_TOL  # at least as deep as its lowest point


@pytest.mark.parametrize("backend", ["ref", "gpu"])
def test_a_shape_deep_in_the_terrain_beyond_its_border_gets_its_contact(backend, device):
    """A cylinder (r = h = 0.0625) 8 cm under the terrain at the grid's border, its lowest point just
    beyond the grid (y = 0.2539 > 0.25): the prisms under it penetrate with their witnesses on walls
    and the deepest point's projection leaves every triangle, and the contact straight up from the
    lowest point had no triangle above it, so no penetrating contact was reported (the deepest φ
    was +0.17 m; the explore run found it). Now each triangle takes the contact straight up from the
    cylinder's point deepest below it within its column: x0 on the cylinder and inside the column,
    x1 on the terrain straight above, and no point of the cylinder in that column deeper."""
    first = (CY, np.array([0.0625, 0.0625, 0.0]), None)
    X0 = np.concatenate([[0.1796, 0.1933, 0.0048],
                         spatial.quat_normalize(np.array([0.7048675, -0.1247609, -0.1952026, -0.670442]))])
    X1 = spatial.transform(np.zeros(3), np.array([0.0, 0.0, 0.0, 1.0]))
    contacts = _list(_contacts(backend, *_build(first, X0, (H, np.zeros(3), None), X1), device))
    x0, x1, n, phi = min(contacts, key=lambda c: c[3])
    assert phi < -0.08
    g = implicit(first, X0)
    assert abs(g(x0)) <= ITERATIVE_TOL
    assert abs(x1[2] - terrain_height(x1[0], x1[1])) <= ITERATIVE_TOL
    np.testing.assert_array_equal(n, [0.0, 0.0, -1.0])
    np.testing.assert_allclose(x1, x0 - phi * np.array([0.0, 0.0, 1.0]), rtol=0, atol=1e-15)
    # optimality: sample the cylinder's volume; none of its points in x0's column is deeper
    hx, hy = HF_SIZE[:2]
    tris = [hfield_triangle(HEIGHTS, hx, hy, i, j, t) for i in range(HEIGHTS.shape[0] - 1)
            for j in range(HEIGHTS.shape[1] - 1) for t in (0, 1)]
    depth, inside = next(_column_depth(t) for t in tris
                         if _column_depth(t)[1](x0, RAISE_TOL) and abs(_column_depth(t)[0](x0) - phi) <= RAISE_TOL)
    rng = np.random.default_rng(0)
    p, R = _frame(X0)
    rho, ang = np.sqrt(rng.uniform(0, 1, 20000)) * 0.0625, rng.uniform(0, 2 * np.pi, 20000)
    z = rng.uniform(-0.0625, 0.0625, 20000)
    pts = p + np.stack([rho * np.cos(ang), rho * np.sin(ang), z], axis=1) @ R.T
    in_column = [x for x in pts if inside(x)]
    assert len(in_column) > 100
    assert min(depth(x) for x in in_column) >= phi - RAISE_TOL


@pytest.mark.parametrize("backend", ["ref", "gpu"])
def test_a_manifold_on_a_height_field_keeps_its_points_on_the_terrain(backend, device):
    """A box 5.6 cm under the grid's border corner, its face the reference of a manifold against
    one prism: the manifold took the prism's support point, a corner of its bottom (z = −base),
    and reported it as a terrain witness 15 cm under the surface (a random search found it). A
    manifold now keeps the points that lie on the triangle; every terrain witness is on the
    terrain, every box witness on the box."""
    box = (B, np.array([0.09968858778021317, 0.06335982494460324, 0.04900021811419812]), None)
    X = np.array([0.26467098703589226, -0.19370443994839345, -0.05605328741317458, -0.12149590262185697,
                  0.1407327116815311, -0.14964910900509182, -0.9711015362375066])
    terrain = spatial.transform(np.zeros(3), np.array([0.0, 0.0, 0.0, 1.0]))
    contacts = _list(_contacts(backend, *_build((H, np.zeros(3), None), terrain, box, X), device))
    assert contacts and min(c[3] for c in contacts) < 0.0
    g = implicit(box, X)
    for x0, x1, n, phi in contacts:  # the terrain is shape 0 here, as the search drew it
        assert abs(g(x1)) <= EXACT_TOL * 10
        assert abs(x0[0]) <= HF_SIZE[0] and abs(x0[1]) <= HF_SIZE[1]
        assert abs(x0[2] - terrain_height(x0[0], x0[1])) <= EXACT_TOL * 10, (x0, phi)
        np.testing.assert_allclose(x1 - x0, phi * n, rtol=0, atol=1e-12)


# ----------------------------------------------------------------------------- rounded shapes
# A shape with a rounding radius ρ is its core swept by a ball of radius ρ: its implicit function is
# the core's distance minus ρ, its support function the core's plus ρ along the direction.

ROUNDABLE = (S, C, B, CY, E, M)
# [m] The rounding radii drawn: from a fifth of the smallest cores' size to about the cores' size.
ROUNDING_RANGE = (0.004, 0.05)


def _segment_distance(x, a, b):
    d = b - a
    t = min(max((x - a) @ d / (d @ d), 0.0), 1.0) if d @ d > 0 else 0.0
    return float(np.linalg.norm(x - a - t * d))


def _ellipsoid_projection_distance(l, a):
    """Distance from the point l (outside) to the ellipsoid with semi-axes a: its nearest point is
    aᵢ²lᵢ/(aᵢ² + t) for the root t > 0 of Σ(aᵢlᵢ/(aᵢ² + t))² = 1 (decreasing in t), by bisection."""
    f = lambda t: np.sum((a * l / (a * a + t)) ** 2) - 1.0  # noqa: E731
    lo, hi = 0.0, float(np.linalg.norm(l) * np.max(a)) + 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if f(mid) > 0 else (lo, mid)
    y = a * a * l / (a * a + 0.5 * (lo + hi))
    return float(np.linalg.norm(l - y))


def core_distance(shape, X):
    """d(x) ≥ 0: the distance from x to the shape's core (0 inside), in closed form (written here):
    a convex mesh's is the least distance to its faces' polygons, an ellipsoid's a projection."""
    t, size, mesh = shape[:3]
    p, R = _frame(X)
    inside = implicit(shape[:3], X)
    hull = convex_hull(mesh) if t == M else None

    def d(x):
        if inside(x) <= 0.0:
            return 0.0
        l = R.T @ (x - p)
        if t == S:
            return float(np.linalg.norm(l)) - size[0]
        if t == C:
            return _segment_distance(l, np.array([0, 0, -size[1]]), np.array([0, 0, size[1]])) - size[0]
        if t == B:
            return float(np.linalg.norm(np.maximum(np.abs(l) - size, 0.0)))
        if t == CY:
            return math.hypot(max(math.hypot(l[0], l[1]) - size[0], 0.0), max(abs(l[2]) - size[1], 0.0))
        if t == E:
            return _ellipsoid_projection_distance(l, np.asarray(size, dtype=float))
        best = math.inf
        for face, plane in zip(hull.faces, hull.planes):
            poly = hull.vertices[face]
            n = plane[:3]
            foot = l - (n @ l - plane[3]) * n
            edges = [(poly[k], poly[(k + 1) % len(poly)]) for k in range(len(poly))]
            if all(np.cross(b - a, foot - a) @ n >= 0.0 for a, b in edges):  # counter-clockwise about n
                best = min(best, abs(n @ l - plane[3]))
            else:
                best = min(best, min(_segment_distance(l, a, b) for a, b in edges))
        return best
    return d


def rounded_support(shape, X):
    s, rho = support_fn(shape[:3], X), (shape[3] if len(shape) > 3 else 0.0)
    return lambda d: s(d) + rho * d / np.linalg.norm(d)


def _surface(shape, X):
    """g(x) of a (rounded) shape: 0 on its surface, < 0 inside."""
    if len(shape) < 4:
        return implicit(shape, X)
    d, g = core_distance(shape, X), implicit(shape[:3], X)
    return lambda x: (d(x) if g(x) > 0.0 else g(x)) - shape[3]


@st.composite
def rounded_pairs(draw):
    """A rounded shape and any other shape (a plane, a height field, a rounded or a plain one), in
    a random order, posed as :func:`pairs` poses them."""
    t0 = draw(st.sampled_from(ROUNDABLE))
    t1 = draw(st.sampled_from((P,) + ROUNDABLE + (H,)))
    first = (*draw(shapes(t0)), draw(st.floats(*ROUNDING_RANGE)))
    second = draw(shapes(t1))
    if t1 in ROUNDABLE and draw(st.booleans()):
        second = (*second, draw(st.floats(*ROUNDING_RANGE)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    X0, X1 = _random_poses(rng, t0, t1)
    if t1 in ROUNDABLE and draw(st.booleans()):
        return second, X1, first, X0
    return first, X0, second, X1


# ~60 s on two cores for both backends: behind slow, with the property test above.
@pytest.mark.slow
@pytest.mark.parametrize("backend", ["ref", "gpu"])
@settings(max_examples=120, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=rounded_pairs())
def test_rounded_shapes_symmetry_sign_surfaces_and_least_separation(backend, device, case):
    """The properties of the module docstring for rounded shapes, with their implicit function the
    core's distance minus ρ and their support function the core's plus ρ along the direction: the
    deepest contact's witnesses on both rounded surfaces (a manifold's other points are their
    cores' points moved by ρ along the normal: on or inside the rounded shape)."""
    first, X0, second, X1 = case
    t0, t1 = first[0], second[0]
    forward = _mirrored_contacts(backend, first, X0, second, X1, device)
    if not forward:
        assert H in (t0, t1)
        return
    tol = max(_tol(t0, t1), 1e-12) * 10
    terrain = lambda x: x[2] - terrain_height(x[0], x[1])  # noqa: E731
    g0 = terrain if t0 == H else _surface(first, X0)
    g1 = terrain if t1 == H else _surface(second, X1)
    for x0, x1, n, phi in forward:
        assert abs(np.linalg.norm(n) - 1.0) < 1e-12
        assert np.allclose(x1 - x0, phi * n, rtol=0, atol=1e-12)
        assert g0(x0) <= tol and g1(x1) <= tol, (t0.name, t1.name, g0(x0), g1(x1))
        if t0 == H:
            assert abs(g0(x0)) <= tol
        if t1 == H:
            assert abs(g1(x1)) <= tol
    x0, x1, n, phi = min(forward, key=lambda c: c[3])
    if H in (t0, t1):
        return  # a prism's contact straight up may start inside a rounded corner: the terrain side is checked
    if {t0, t1} != {C, B}:  # a capsule's end sphere deep in a box: its witness inside the capsule, rounded or not
        assert abs(g0(x0)) <= tol and abs(g1(x1)) <= tol, (t0.name, t1.name, g0(x0), g1(x1))
    if abs(phi) > TOUCHING:
        if P in (t0, t1):
            assert (phi < 0) == (g0(x1) < 0 if t0 == P else g1(x0) < 0)
        elif E not in (t0, t1) and M not in (t0, t1):  # SLSQP on the closed-form implicit functions
            assert (phi < 0) == (overlap_margin(g0, g1, 0.5 * (x0 + x1), x0, x1) < 0), (t0.name, t1.name, phi)
    if P in (t0, t1):
        plane_normal = spatial.quat_to_matrix((X0 if t0 == P else X1)[3:])[:, 2]
        assert np.allclose(n, plane_normal if t0 == P else -plane_normal, atol=1e-12)
        return
    if {t0, t1} == {C, B}:
        capsule = first if t0 == C else second
        if phi < -(capsule[1][0] + (capsule[3] if len(capsule) > 3 else 0.0)):
            # An end sphere's centre inside the box: capsule–box reports each end sphere's sphere–box
            # contact (its own face of least penetration), whose depth along that normal is the end's,
            # not the whole capsule's (the other end may reach deeper); the same for a plain capsule of
            # the rounded one's radius (sap_ref.collision_box.capsule_box).
            return
    s0, s1 = rounded_support(first, X0), rounded_support(second, X1)
    sigma = lambda d: d @ (s1(-d) - s0(d))  # noqa: E731
    assert sigma(n) == pytest.approx(phi, abs=tol)
    rng = np.random.default_rng(0)
    others = [v / np.linalg.norm(v) for v in rng.normal(size=(200, 3))]
    others += [(n + 1e-3 * v) / np.linalg.norm(n + 1e-3 * v) for v in rng.normal(size=(50, 3))]
    assert max(sigma(d) for d in others) <= phi + tol
    if {t0, t1} & {CY, E, M} or t0 == t1 == B:  # a manifold (the closed forms' points have their own normals)
        for c in forward:
            assert np.allclose(c[2], n, atol=1e-12)


def _rounded_box_on(backend, device, rho, tilt, other, X_other, margin=0.0):
    """A box (half extents 0.1, 0.2, 0.05) with rounding ρ tilted by ``tilt`` about x at 0.3 m up,
    and ``other``: its contacts ``[(x0, x1, n, φ)]`` (the box is shape 0) and the box's pose."""
    X_box = spatial.transform(np.array([0.0, 0.0, 0.3]), spatial.quat_from_axis_angle(np.array([1.0, 0.0, 0.0]), tilt))
    box = (B, np.array([0.1, 0.2, 0.05]), None, rho)
    model, state = _build(box, X_box, other, X_other)
    model = model.replace(shape_margin=[margin, margin])
    return _list(_contacts(backend, model, state, device)), X_box


@pytest.mark.parametrize("backend", ["ref", "gpu"])
@pytest.mark.parametrize("tilt", [0.0, 0.3])
def test_a_rounded_box_on_a_plane_is_its_corners_depths_less_the_radius(backend, device, tilt):
    """A rounded box on a plane: each corner's contact has φ = the core corner's height over the plane
    − ρ, its box witness the corner moved down by ρ, its plane witness straight below (4 corners of a
    level box; of a tilted one the 2 of its lowest edge, within the margin)."""
    rho = 0.02
    corners = spatial.transform_point(
        np.broadcast_to(spatial.transform(np.array([0.0, 0.0, 0.3]),
                                          spatial.quat_from_axis_angle(np.array([1.0, 0.0, 0.0]), tilt)), (8, 7)),
        np.array([[x, y, z] for x in (-0.1, 0.1) for y in (-0.2, 0.2) for z in (-0.05, 0.05)]))
    lowest = corners[:, 2].min()
    plane_height = lowest - rho + 0.004  # the rounded box 4 mm into the plane
    contacts, _ = _rounded_box_on(backend, device, rho, tilt, (P, np.zeros(3), None),
                                  spatial.transform(np.array([0.0, 0.0, plane_height])))
    expected = sorted(float(z - plane_height - rho) for z in corners[:, 2] if z - plane_height - rho < 0.0)
    assert len(contacts) == (4 if tilt == 0.0 else 2)
    assert sorted(c[3] for c in contacts) == pytest.approx(expected, abs=EXACT_TOL)
    assert min(c[3] for c in contacts) == pytest.approx(-0.004, abs=EXACT_TOL)
    for x0, x1, n, phi in contacts:
        np.testing.assert_allclose(n, [0.0, 0.0, -1.0], atol=1e-15)  # from the box (shape 0) into the plane
        assert np.linalg.norm(corners - (x0 + [0.0, 0.0, rho]), axis=1).min() <= EXACT_TOL  # a corner, moved down
        assert x1[2] == pytest.approx(plane_height, abs=EXACT_TOL)


@pytest.mark.parametrize("backend", ["ref", "gpu"])
@pytest.mark.parametrize("where", ["face", "edge", "corner"])
def test_a_rounded_box_against_a_sphere_is_the_core_distance_less_both_radii(backend, device, where):
    """A sphere (r = 0.03) beside a level rounded box's face, edge or corner: φ = |c − q| − r − ρ for the
    core's nearest point q, the normal along c − q, the box witness q + ρn̂, the sphere's c − rn̂."""
    rho, r = 0.015, 0.03
    core = np.array([0.1, 0.2, 0.05])
    offset = {"face": [0.02, 0.0, 0.0], "edge": [0.02, 0.03, 0.0], "corner": [0.02, 0.01, 0.03]}[where]
    q = np.array([0.1, 0.2 if where != "face" else 0.05, 0.05 if where == "corner" else 0.0]) + [0.0, 0.0, 0.3]
    c = q + np.array(offset)
    contacts, _ = _rounded_box_on(backend, device, rho, 0.0, (S, np.array([r, 0.0, 0.0]), None),
                                  spatial.transform(c), margin=0.05)
    assert len(contacts) == 1
    x0, x1, n, phi = contacts[0]
    gap = np.linalg.norm(np.array(offset))
    assert phi == pytest.approx(gap - r - rho, abs=EXACT_TOL)
    np.testing.assert_allclose(n, np.array(offset) / gap, atol=1e-12)
    np.testing.assert_allclose(x0, q + rho * n, atol=EXACT_TOL)
    np.testing.assert_allclose(x1, c - r * n, atol=EXACT_TOL)
    assert np.all(core > 0)


@pytest.mark.parametrize("backend", ["ref", "gpu"])
def test_rounded_boxes_apart_across_their_edges_are_apart(backend, device):
    """Two level boxes whose cores are 2 cm apart in x and in y (2.83 cm apart across their edges),
    each rounded by 1.2 cm: they do not touch (φ = 2√2 − 2.4 cm = +0.43 cm). The boxes' separating
    axes give only a lower bound of the distance (2 cm), which less the radii would be a 4 mm
    penetration; rounded boxes take GJK/EPA instead, exact."""
    rho = 0.012
    first = (B, np.array([0.1, 0.1, 0.1]), None, rho)
    second = (B, np.array([0.1, 0.1, 0.1]), None, rho)
    X0 = spatial.transform(np.zeros(3))
    X1 = spatial.transform(np.array([0.22, 0.22, 0.05]))
    model, state = _build(first, X0, second, X1)
    assert not _list(_contacts(backend, model.replace(shape_margin=[0.0, 0.0]), state, device))
    contacts = _list(_contacts(backend, model.replace(shape_margin=[0.005, 0.0]), state, device))
    assert len(contacts) == 1
    x0, x1, n, phi = contacts[0]
    assert phi == pytest.approx(math.sqrt(2) * 0.02 - 2 * rho, abs=EXACT_TOL)
    np.testing.assert_allclose(n, [math.sqrt(0.5), math.sqrt(0.5), 0.0], atol=1e-12)
    np.testing.assert_allclose(x0[:2], [0.1 + rho * math.sqrt(0.5)] * 2, atol=EXACT_TOL)

"""sap_ref.collision: every pair type against analytic geometry, conventions, determinism."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sap_common import scenes, spatial
from sap_common.builder import ModelBuilder
from sap_common.config import SapConfig
from sap_common.model import ShapeType
from sap_ref.collision import (MAX_CONTACTS_PER_PAIR, CollisionPipeline, combine_materials, contact_capacity,
                               pair_contacts)
from sap_ref.collision_box import box_signed_distance
from strategies import quaternions, vectors

P, S, C, B = ShapeType.PLANE, ShapeType.SPHERE, ShapeType.CAPSULE, ShapeType.BOX
TOL = 1e-12  # float64 geometry of O(1) m: a few ulps


def X(p=(0, 0, 0), q=(0, 0, 0, 1)):
    return spatial.transform(np.asarray(p, float), np.asarray(q, float))


def _sd_sphere(c, r, p):
    return np.linalg.norm(p - c) - r


def _sd_capsule(Xc, size, p):
    axis = spatial.quat_rotate(Xc[3:], [0, 0, size[1]])
    a, b = Xc[:3] - axis, Xc[:3] + axis
    t = np.clip((p - a) @ (b - a) / max((b - a) @ (b - a), 1e-300), 0, 1)
    return np.linalg.norm(p - (a + t * (b - a))) - size[0]


def _sd(t, Xs, size, p):
    if t == P:
        return spatial.quat_rotate(Xs[3:], [0, 0, 1.0]) @ (p - Xs[:3])
    if t == S:
        return _sd_sphere(Xs[:3], size[0], p)
    if t == C:
        return _sd_capsule(Xs, size, p)
    return box_signed_distance(Xs, size, p)


def check_conventions(t0, X0, s0, t1, X1, s1, contacts):
    for x0, x1, n, phi in contacts:
        assert abs(np.linalg.norm(n) - 1) < TOL
        np.testing.assert_allclose(x1 - x0, phi * n, atol=1e-10)
        # Every witness point is on or inside its own shape (the end spheres of a capsule lie
        # inside its body where the other end is deeper) ...
        assert _sd(t0, X0, s0, x0) < 1e-10 and _sd(t1, X1, s1, x1) < 1e-10
    if contacts:
        # ... and, for shallow contact (the regime a narrow phase serves; a capsule run through
        # the middle of a box has no well-defined deepest point), the deepest contact's witnesses
        # lie exactly on the two surfaces.
        x0, x1, n, phi = min(contacts, key=lambda c: c[3])
        smallest = min(np.min(s[s > 0]) if np.any(s > 0) else np.inf for s in (s0, s1))
        if -phi < 0.5 * smallest:
            assert abs(_sd(t0, X0, s0, x0)) < 1e-10 and abs(_sd(t1, X1, s1, x1)) < 1e-10


# ----------------------------------------------------------------------------- analytic cases


def test_plane_sphere_both_orders():
    Xp, Xs = X((0, 0, 0.2)), X((1, 2, 0.25))
    [(x0, x1, n, phi)] = pair_contacts(P, Xp, np.zeros(3), S, Xs, np.array([0.1, 0, 0]))
    assert phi == pytest.approx(-0.05) and n.tolist() == [0, 0, 1]
    np.testing.assert_allclose(x0, [1, 2, 0.2]) and np.testing.assert_allclose(x1, [1, 2, 0.15])
    [(y0, y1, m, psi)] = pair_contacts(S, Xs, np.array([0.1, 0, 0]), P, Xp, np.zeros(3))
    assert psi == phi and np.array_equal(m, -n) and np.array_equal(y0, x1) and np.array_equal(y1, x0)


def test_tilted_plane():
    q = spatial.quat_from_axis_angle([1, 0, 0], 0.3)
    Xp = X((0, 0, 0), q)
    n_expected = spatial.quat_rotate(q, [0, 0, 1.0])
    c = 0.05 * n_expected + np.array([0.3, 0.0, 0.0]) @ np.eye(3)
    [(_, _, n, phi)] = pair_contacts(P, Xp, np.zeros(3), S, X(c), np.array([0.1, 0, 0]))
    np.testing.assert_allclose(n, n_expected, atol=TOL)
    assert phi == pytest.approx(n_expected @ c - 0.1)


def test_plane_capsule_lying_and_standing():
    size = np.array([0.05, 0.2, 0])
    lying = pair_contacts(P, X(), np.zeros(3), C, X((0, 0, 0.04), spatial.quat_from_axis_angle([0, 1, 0], math.pi / 2)), size)
    assert len(lying) == 2 and all(c[3] == pytest.approx(-0.01) for c in lying)
    standing = [c for c in pair_contacts(P, X(), np.zeros(3), C, X((0, 0, 0.24)), size) if c[3] < 0]
    assert len(standing) == 1 and standing[0][3] == pytest.approx(-0.01)


def test_plane_box_resting_and_tilted():
    h = np.array([0.1, 0.2, 0.05])
    resting = [c for c in pair_contacts(P, X(), np.zeros(3), B, X((0, 0, 0.049)), h) if c[3] < 0]
    assert len(resting) == 4 and all(c[3] == pytest.approx(-0.001) for c in resting)
    tilted = X((0, 0, 0.05), spatial.quat_from_axis_angle([1, 0, 0], 0.2))
    deepest = min(c[3] for c in pair_contacts(P, X(), np.zeros(3), B, tilted, h))
    assert deepest == pytest.approx(0.05 - (0.2 * math.sin(0.2) + 0.05 * math.cos(0.2)))


def test_sphere_sphere_and_coincident_centres():
    [(x0, x1, n, phi)] = pair_contacts(S, X((0, 0, 0)), np.array([0.1, 0, 0]), S, X((0.15, 0, 0)), np.array([0.1, 0, 0]))
    assert phi == pytest.approx(-0.05) and n.tolist() == [1, 0, 0]
    [(_, _, n, phi)] = pair_contacts(S, X(), np.array([0.1, 0, 0]), S, X(), np.array([0.2, 0, 0]))
    assert n.tolist() == [0, 0, 1] and phi == pytest.approx(-0.3)  # fixed normal, no NaN


def test_sphere_capsule_and_centre_on_segment():
    size_c = np.array([0.05, 0.3, 0])
    [(_, _, n, phi)] = pair_contacts(S, X((0.12, 0, 0.1)), np.array([0.1, 0, 0]), C, X(), size_c)
    assert phi == pytest.approx(0.12 - 0.15) and n == pytest.approx([-1, 0, 0])
    [(x0, x1, n, phi)] = pair_contacts(S, X((0, 0, 0.1)), np.array([0.1, 0, 0]), C, X(), size_c)
    assert np.all(np.isfinite(n)) and phi == pytest.approx(-0.15)


def test_sphere_box_outside_edge_and_inside():
    h = np.array([0.1, 0.1, 0.1])
    [(_, x1, n, phi)] = pair_contacts(S, X((0.2, 0.2, 0)), np.array([0.05, 0, 0]), B, X(), h)
    assert phi == pytest.approx(math.sqrt(2) * 0.1 - 0.05)
    np.testing.assert_allclose(x1, [0.1, 0.1, 0], atol=TOL)
    [(_, x1, n, phi)] = pair_contacts(S, X((0.0, 0.07, 0)), np.array([0.05, 0, 0]), B, X(), h)
    assert phi == pytest.approx(-0.03 - 0.05)  # centre inside: nearest face y = +0.1
    np.testing.assert_allclose(n, [0, -1, 0])  # from the sphere into the box


def test_capsule_capsule_crossing_and_parallel():
    s = np.array([0.05, 0.3, 0])
    across = X((0, 0, 0.08), spatial.quat_from_axis_angle([0, 1, 0], math.pi / 2))
    crossing = pair_contacts(C, X((0, 0, 0), spatial.quat_from_axis_angle([1, 0, 0], math.pi / 2)), s, C, across, s)
    assert len(crossing) == 1 and crossing[0][3] == pytest.approx(-0.02)
    lay = spatial.quat_from_axis_angle([0, 1, 0], math.pi / 2)
    parallel = pair_contacts(C, X((0, 0, 0), lay), s, C, X((0.1, 0, 0.09), lay), s)
    assert len(parallel) == 2 and all(c[3] == pytest.approx(-0.01) for c in parallel)
    xs = sorted(c[0][0] for c in parallel)
    assert xs == pytest.approx([-0.2, 0.3])  # the two ends of the overlap


def test_capsule_box_lying_on_a_face_and_across_an_edge():
    h = np.array([0.2, 0.2, 0.1])
    s = np.array([0.05, 0.1, 0])
    lay = spatial.quat_from_axis_angle([0, 1, 0], math.pi / 2)
    flat = [c for c in pair_contacts(C, X((0, 0, 0.149), lay), s, B, X(), h) if c[3] < 0]
    assert len(flat) == 2 and all(c[3] == pytest.approx(-0.001) for c in flat)
    # A capsule tilted 30° down across the box's top edge at x = 0.2, z = 0.1: points of the
    # segment, p(s) = (0.2 + s cos30°, 0.14 − s/2), are √(s² − 0.04 s + 0.0016) from the edge,
    # least at s = 0.02 (interior): √0.0012 − r. Both ends stay clear.
    down = spatial.quat_from_axis_angle([0, 1, 0], 2 * math.pi / 3)  # z axis → (cos 30°, 0, −sin 30°)
    edge = pair_contacts(C, X((0.2, 0, 0.14), down), s, B, X(), h)
    assert len(edge) == 3 and min(c[3] for c in edge) == pytest.approx(math.sqrt(0.0012) - 0.05, abs=1e-9)
    assert sorted(c[3] for c in edge)[1] > 0


def test_box_box_stack_and_edge_crossing():
    h = np.array([0.05, 0.05, 0.05])
    stack = [c for c in pair_contacts(B, X(), h, B, X((0.01, 0, 0.099)), h) if c[3] < 0]
    assert len(stack) == 4 and all(c[3] == pytest.approx(-0.001) for c in stack)
    assert all(c[2] @ [0, 0, 1] == pytest.approx(1.0) for c in stack)
    yawed = pair_contacts(B, X(), h, B, X((0, 0, 0.099), spatial.quat_from_axis_angle([0, 0, 1], math.pi / 4)), h)
    assert len(yawed) == 8 and all(c[3] == pytest.approx(-0.001) for c in yawed)  # octagon of the overlap
    # Two boxes turned 45° about perpendicular axes, edge on edge.
    e0 = X((0, 0, 0), spatial.quat_from_axis_angle([1, 0, 0], math.pi / 4))
    e1 = X((0, 0, 2 * 0.05 * math.sqrt(2) - 0.002), spatial.quat_from_axis_angle([0, 1, 0], math.pi / 4))
    [(x0, x1, n, phi)] = pair_contacts(B, e0, h, B, e1, h)
    assert phi == pytest.approx(-0.002, abs=1e-9) and n == pytest.approx([0, 0, 1])


# ----------------------------------------------------------------------------- properties

TYPES = {P: None, S: st.tuples(st.floats(0.02, 0.3)).map(lambda t: np.array([t[0], 0, 0])),
         C: st.tuples(st.floats(0.02, 0.2), st.floats(0.0, 0.3)).map(lambda t: np.array([t[0], t[1], 0])),
         B: vectors(3, 0.02, 0.3)}


@settings(max_examples=300)
@given(st.sampled_from([(P, S), (P, C), (P, B), (S, S), (S, C), (S, B), (C, C), (C, B), (B, B)]),
       st.booleans(), st.data())
def test_conventions_hold_for_random_pairs(types, swap, data):
    t0, t1 = types
    size0 = np.zeros(3) if t0 == P else data.draw(TYPES[t0])
    size1 = data.draw(TYPES[t1])
    X0 = X(data.draw(vectors(3, -0.2, 0.2)), data.draw(quaternions()))
    X1 = X(data.draw(vectors(3, -0.2, 0.2)), data.draw(quaternions()))
    if swap:
        t0, X0, size0, t1, X1, size1 = t1, X1, size1, t0, X0, size0
    contacts = pair_contacts(t0, X0, size0, t1, X1, size1)
    assert len(contacts) <= MAX_CONTACTS_PER_PAIR[frozenset([t0, t1])]
    assert all(np.all(np.isfinite(np.concatenate([c[0], c[1], c[2], [c[3]]]))) for c in contacts)
    if {t0, t1} == {B}:
        # Box–box edge contacts put x1 on the normal through x0 (collision_box): identities only.
        for x0, x1, n, phi in contacts:
            assert abs(np.linalg.norm(n) - 1) < TOL
            np.testing.assert_allclose(x1 - x0, phi * n, atol=1e-10)
        return
    check_conventions(t0, X0, size0, t1, X1, size1, contacts)
    # Sphere-swept shapes: φ is the exact distance between the two cores minus the radii.
    if {t0, t1} == {S}:
        assert contacts[0][3] == pytest.approx(np.linalg.norm(X1[:3] - X0[:3]) - size0[0] - size1[0])


@settings(max_examples=200)
@given(vectors(3, -0.3, 0.3), quaternions(), vectors(3, 0.02, 0.2), st.floats(0.01, 0.2))
def test_sphere_box_distance_is_the_box_signed_distance(c, q, h, r):
    [(x0, x1, n, phi)] = pair_contacts(S, X(c), np.array([r, 0, 0]), B, X((0, 0, 0), q), h)
    assert phi == pytest.approx(box_signed_distance(X((0, 0, 0), q), h, c) - r, abs=TOL)
    assert abs(box_signed_distance(X((0, 0, 0), q), h, x1)) < 1e-10  # on the box surface
    np.testing.assert_allclose(x1 - x0, phi * n, atol=1e-10)


# ----------------------------------------------------------------------------- pipeline


def test_materials_combine_with_fallbacks():
    b = ModelBuilder()
    b.add_joint_free(-1, b.add_body(1.0, inertia=(1, 1, 1)))
    b.add_ground_plane(mu=0.3, ke=1e5, tau=0.0)
    b.add_shape_sphere(0, radius=0.1)  # unset: fallbacks
    b.add_shape_sphere(0, X((0, 0, 0.3)), radius=0.1, ke=math.inf, mu=0.0)
    m = b.finalize()
    cfg = SapConfig(fallback_mu=0.6, fallback_stiffness=2e5, contact_tau_d=0.05)
    mu, ke, k0, k1, tau = combine_materials(m, 0, 1, cfg)
    assert mu == pytest.approx(2 * 0.3 * 0.6 / 0.9) and ke == pytest.approx(1e5 * 2e5 / 3e5)
    assert (k0, k1, tau) == (1e5, 2e5, 0.05)
    mu, ke, _, _, _ = combine_materials(m, 0, 2, cfg)
    assert ke == 1e5 and mu == 0.0  # infinite stiffness yields the other; μ = 0 against anything is 0


def _sphere_scene(z, margin=0.0, worlds=1):
    b = ModelBuilder()
    b.add_joint_free(-1, b.add_body(1.0, inertia=(1, 1, 1)), q0=(0, 0, z, 0, 0, 0, 1))
    b.add_ground_plane(margin=margin)
    b.add_shape_sphere(0, radius=0.1, margin=margin)
    return b.replicate(worlds).finalize()


def test_margin_reports_speculative_contacts():
    for margin, expected in ((0.0, 0), (0.003, 1)):
        m = _sphere_scene(0.105, margin)
        pipe = CollisionPipeline(m, 2)
        c = pipe.contacts()
        pipe.collide(m.state(), c)
        assert c.count[0] == expected
        if expected:
            assert c.phi0[0, 0] == pytest.approx(0.005) and c.margin0[0, 0] == c.margin1[0, 0] == 0.003


def test_scenes_and_determinism():
    # box_stack starts 1 mm apart: sink each level by its gaps plus 0.5 mm so every interface touches.
    sink = {"box_stack": np.array([0.0005, 0.002, 0.0035])}
    for name, expected in (("sphere_drop", 0), ("box_slide", 4), ("box_stack", 12), ("sphere_on_sphere", 1)):
        scene = scenes.get(name, num_worlds=3)
        state = scene.state.copy()
        if name in sink:
            state.body_q[:, :, 2] -= sink[name]
        pipe = CollisionPipeline(scene.sap_model, max(contact_capacity(scene.sap_model), 1))
        a, b = pipe.contacts(), pipe.contacts()
        pipe.collide(state, a)
        pipe.collide(state, b)
        assert a.count.tolist() == [a.count[0]] * 3 and a.count[0] >= expected, (name, a.count)
        for f in ("count", "shape0", "shape1", "body0", "body1", "x0", "x1", "normal", "phi0", "mu", "ke", "tau_d"):
            assert np.array_equal(getattr(a, f), getattr(b, f)), f
            assert np.array_equal(getattr(a, f)[0], getattr(a, f)[2]), f
    scene = scenes.get("sphere_drop")
    state = scene.state.copy()
    state.body_q[0, 0, 2] = 0.095
    pipe = CollisionPipeline(scene.sap_model, 1)
    c = pipe.contacts()
    pipe.collide(state, c)
    assert c.count[0] == 1 and c.phi0[0, 0] == pytest.approx(-0.005)
    assert (c.shape0[0, 0], c.shape1[0, 0], c.body0[0, 0], c.body1[0, 0]) == (0, 1, -1, 0)
    # Unset materials took Drake's defaults: k = 1e6 each (5e5 combined), τ 0.1 each, μ 0.5.
    assert (c.ke[0, 0], c.tau_d[0, 0], c.mu[0, 0]) == (5e5, pytest.approx(0.2), 0.5)


def test_overflow_keeps_the_deepest_and_never_writes_past_capacity():
    scene = scenes.get("box_slide")
    state = scene.state.copy()
    tilt = spatial.quat_from_axis_angle([1, 0, 0], 0.01)  # the corners now sit at different depths
    state.body_q[0, 0, 3:] = tilt
    full = CollisionPipeline(scene.sap_model, 8)
    all_c = full.contacts()
    full.collide(state, all_c)
    n = int(all_c.count[0])
    for cap in (0, 1, 2):
        pipe = CollisionPipeline(scene.sap_model, cap)
        c = pipe.contacts()
        pipe.collide(state, c)
        assert c.count[0] == min(cap, n) and c.overflow[0] == n - min(cap, n)
        assert c.x0.shape == (1, cap, 3)
        if cap:
            kept = sorted(c.phi0[0, :cap])
            assert kept == pytest.approx(sorted(all_c.phi0[0, :n])[:cap])


def test_bad_input():
    m = _sphere_scene(0.1)
    with pytest.raises(ValueError, match=r"max_rigid_contact: must be an integer >= 0"):
        CollisionPipeline(m, -1)
    pipe = CollisionPipeline(m, 2)
    with pytest.raises(ValueError, match=r"contacts: capacity 3 does not match max_rigid_contact 2"):
        pipe.collide(m.state(), CollisionPipeline(m, 3).contacts())
    bad = m.state()
    bad.body_q = np.zeros((2, 1, 7))
    with pytest.raises(ValueError, match=r"state.body_q: expected shape \(1, 1, 7\)"):
        pipe.collide(bad, pipe.contacts())

"""sap_ref.collision_manifold: how many points a resting face gets and where, and that they hold it:
a mesh cube stands still (both backends), where one point would let it tip.

Points per contact (docs/design.md § Collision): a face resting on a face or a plane gets the 4
corners of the contact patch (the deepest, the farthest from it, the largest triangle, the largest
area outside it), a cylinder standing on its cap a quadrilateral inscribed in the rim, a cylinder
or capsule lying on a face its 2 ends, a vertex or a rim point 1, anything with a sphere or an
ellipsoid 1.
"""

import math

import numpy as np
import pytest
from collision_cases import CUBE

import sap_gpu
from sap_common import geometry, spatial
from sap_common.builder import ModelBuilder, solid_box_inertia
from sap_common.model import ShapeType as T
from sap_common.state import StepStatus
from sap_ref.collision import CollisionPipeline, pair_contacts
from sap_ref.collision_manifold import reduce_manifold
from sap_ref.solver import SolverSAP

I = np.array([0, 0, 0, 0, 0, 0, 1.0])
Z3 = np.zeros(3)
APPROX = 1e-15
H = 0.06  # the test cube's half size (collision_cases.CUBE)


def X(p, q=(0, 0, 0, 1)):
    return np.concatenate([np.asarray(p, float), np.asarray(q, float)])


def _mesh(points):
    hull = geometry.convex_hull(points)
    return hull.vertices, [(pl[:3], pl[3], f) for f, pl in zip(hull.faces, hull.planes)]


CUBE_GEO = _mesh(CUBE)


def _corners(contacts, k):
    """Sorted (x, y) of witness k of every contact, rounded."""
    return sorted((round(c[k][0], 9), round(c[k][1], 9)) for c in contacts)


def test_mesh_cube_on_a_plane_a_box_and_a_mesh_gets_its_four_corners():
    on_plane = pair_contacts(T.PLANE, I, Z3, T.CONVEX_MESH, X((0.3, 0.1, H - 1e-4)), Z3, None, CUBE_GEO)
    assert len(on_plane) == 4 and all(c[3] == pytest.approx(-1e-4, abs=APPROX) for c in on_plane)
    assert _corners(on_plane, 1) == [(0.24, 0.04), (0.24, 0.16), (0.36, 0.04), (0.36, 0.16)]
    assert all(c[0][2] == 0.0 and c[2].tolist() == [0, 0, 1] for c in on_plane)
    on_box = pair_contacts(T.BOX, I, np.full(3, 0.1), T.CONVEX_MESH, X((0.01, 0.02, 0.1 + H - 1e-4)), Z3, None,
                           CUBE_GEO)
    assert len(on_box) == 4 and _corners(on_box, 1) == [(-0.05, -0.04), (-0.05, 0.08), (0.07, -0.04), (0.07, 0.08)]
    # Over a box edge: the patch is clipped by the box's face, its corners are the cut points.
    overhang = pair_contacts(T.BOX, I, np.full(3, 0.1), T.CONVEX_MESH, X((0.09, 0, 0.1 + H - 1e-4)), Z3, None, CUBE_GEO)
    assert len(overhang) == 4 and _corners(overhang, 0) == [(0.03, -0.06), (0.03, 0.06), (0.1, -0.06), (0.1, 0.06)]
    # Two cubes, the upper one turned 45°: an octagon; its extreme points span most of it.
    q = spatial.quat_from_axis_angle(np.array([0, 0, 1.0]), math.pi / 4)
    octagon = pair_contacts(T.CONVEX_MESH, I, Z3, T.CONVEX_MESH, X((0, 0, 2 * H - 1e-4), q), Z3, CUBE_GEO, CUBE_GEO)
    assert len(octagon) == 4 and all(c[3] == pytest.approx(-1e-4, abs=1e-14) for c in octagon)
    pts = np.array([c[0][:2] for c in octagon])
    cross = lambda a, b: a[0] * b[1] - a[1] * b[0]  # noqa: E731
    area = 0.5 * abs(cross(pts[2] - pts[0], pts[1] - pts[0])) + 0.5 * abs(cross(pts[3] - pts[0], pts[1] - pts[0]))
    assert area > 0.5 * (2 * H) ** 2  # a quadrilateral spanning more than half the square


def test_tilted_mesh_cube_touches_with_one_corner_or_one_edge():
    corner = spatial.quat_from_axis_angle(np.array([1.0, 1.0, 0]) / math.sqrt(2), 0.3)
    one = [c for c in pair_contacts(T.PLANE, I, Z3, T.CONVEX_MESH, X((0, 0, 0.07), corner), Z3, None, CUBE_GEO)
           if c[3] < 0]
    assert len(one) == 1
    edge = spatial.quat_from_axis_angle(np.array([1.0, 0, 0]), 0.3)
    low = H * (math.cos(0.3) + math.sin(0.3))
    two = pair_contacts(T.PLANE, I, Z3, T.CONVEX_MESH, X((0, 0, low - 1e-4), edge), Z3, None, CUBE_GEO)
    assert len(two) == 2 and all(c[3] == pytest.approx(-1e-4, abs=1e-14) for c in two)


def test_cylinders_standing_lying_and_on_the_rim():
    size = np.array([0.05, 0.1, 0.0])
    standing = pair_contacts(T.PLANE, I, Z3, T.CYLINDER, X((0, 0, 0.1 - 1e-4)), size)
    assert len(standing) == 4 and all(c[3] == pytest.approx(-1e-4, abs=APPROX) for c in standing)
    assert all(math.hypot(c[1][0], c[1][1]) == pytest.approx(0.05, abs=1e-15) for c in standing)  # on the rim
    lying_q = spatial.quat_from_axis_angle(np.array([1.0, 0, 0]), math.pi / 2)
    lying = pair_contacts(T.PLANE, I, Z3, T.CYLINDER, X((0, 0, 0.05 - 1e-4), lying_q), size)
    assert len(lying) == 2 and sorted(round(c[1][1], 12) for c in lying) == [-0.1, 0.1]
    # Tilted 0.5 rad with its lowest rim point 0.1 mm in (centre height r sin θ + L cos θ − 1e-4):
    # one point. (Sunk deeper, the cap's chord under the plane gives a clipped patch of 2–4.)
    z = 0.05 * math.sin(0.5) + 0.1 * math.cos(0.5) - 1e-4
    rim = pair_contacts(T.PLANE, I, Z3, T.CYLINDER, X((0, 0, z), spatial.quat_from_axis_angle(
        np.array([1.0, 0, 0]), 0.5)), size)
    assert len(rim) == 1
    # The exact deepest rim point: centre height − (r sin θ + L cos θ).
    assert rim[0][3] == pytest.approx(-1e-4, abs=1e-15)
    sunk = pair_contacts(T.PLANE, I, Z3, T.CYLINDER, X((0, 0, 0.08), spatial.quat_from_axis_angle(
        np.array([1.0, 0, 0]), 0.5)), size)
    assert len(sunk) == 4 and min(c[3] for c in sunk) == pytest.approx(
        0.08 - 0.05 * math.sin(0.5) - 0.1 * math.cos(0.5), abs=1e-15)
    on_box = pair_contacts(T.BOX, I, np.full(3, 0.2), T.CYLINDER, X((0.01, 0, 0.3 - 1e-4)), size)
    assert len(on_box) == 4 and all(c[3] == pytest.approx(-1e-4, abs=1e-14) for c in on_box)


def test_capsule_lying_on_a_mesh_face_gets_its_two_ends_and_an_ellipsoid_one_point():
    along_x = spatial.quat_from_axis_angle(np.array([0, 1.0, 0]), math.pi / 2)
    lying = pair_contacts(T.CAPSULE, X((0, 0, H + 0.05 - 1e-4), along_x), np.array([0.05, 0.04, 0]),
                          T.CONVEX_MESH, I, Z3, None, CUBE_GEO)
    assert len(lying) == 2 and sorted(round(c[0][0], 12) for c in lying) == [-0.04, 0.04]
    assert all(c[3] == pytest.approx(-1e-4, abs=1e-14) for c in lying)
    ell = pair_contacts(T.ELLIPSOID, X((0, 0, H + 0.03 - 1e-4)), np.array([0.08, 0.05, 0.03]),
                        T.CONVEX_MESH, I, Z3, None, CUBE_GEO)
    assert len(ell) == 1 and ell[0][3] == pytest.approx(-1e-4, abs=1e-12)


def test_box_on_a_flat_height_field_gets_its_four_corners():
    flat = np.zeros((5, 5))
    c = pair_contacts(T.BOX, X((0.3, 0.2, 0.095)), np.full(3, 0.1), T.HEIGHTFIELD, I, np.array([1, 1, 0.1]), None, flat)
    assert len(c) == 4 and all(x[3] == pytest.approx(-0.005, abs=1e-15) for x in c)
    assert _corners(c, 0) == [(0.2, 0.1), (0.2, 0.3), (0.4, 0.1), (0.4, 0.3)]


def test_reduction_keeps_the_deepest_then_spreads_and_skips_duplicates():
    pts = [np.array(p, float) for p in ([0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0], [0.5, 0.5, 0], [1, 1, 0])]
    depths = [-1e-3, -1e-3, -2e-3, -1e-3, -1e-3, -1e-3]
    chosen = reduce_manifold(pts, depths, 0.0)
    assert chosen[0] == 2 and sorted(chosen) == [0, 1, 2, 3]  # the deepest first; the centre and the copy dropped
    assert reduce_manifold(pts, depths, -5e-3) == []  # none within the margin
    assert reduce_manifold([pts[0], pts[0] + 1e-9], [0.0, 0.0], 1.0) == [0]  # closer than MANIFOLD_MERGE_DISTANCE


# ----------------------------------------------------------------------------- standing still


def _cube_on_ground(num_worlds=1):
    """A 1 kg mesh cube (half size 0.06 m) resting on the ground with its 4 bottom corners 0.1 mm in."""
    b = ModelBuilder()
    body = b.add_body(1.0, inertia=solid_box_inertia(1.0, H, H, H))
    b.add_joint_free(-1, body, q0=(0, 0, H - 1e-4, 0, 0, 0, 1))
    # k = 1e5 N/m per shape (5e4 in series): soft enough that SAP's near-rigid regularization stays
    # off, so each corner is a plain spring (at 1e6 N/m it is on and the cube sinks 2.2× deeper).
    b.add_ground_plane(mu=0.8, ke=1e5, tau=0.01)
    b.add_shape_convex_mesh(body, vertices=CUBE, mu=0.8, ke=1e5, tau=0.01)
    return b.replicate(num_worlds).finalize()


STEPS = 500  # 1 s at 2 ms: the cube settles (τ_d 0.02 s) many times over
# [m], [rad] Settled, a resting cube holds still: drift of rounding only (a tipping cube moves cm).
STILL_POSITION = 1e-6
STILL_ROTATION = 1e-6


@pytest.mark.parametrize("backend", ["ref", "gpu"])
def test_a_mesh_cube_standing_on_its_face_stays_still(backend, device):
    model = _cube_on_ground()
    if backend == "ref":
        solver = SolverSAP(model, max_rigid_contact=8)
        pipe = CollisionPipeline(model, 8, solver.config)
        state, control, contacts = model.state(), model.control(), pipe.contacts()
        for _ in range(STEPS):
            pipe.collide(state, contacts)
            solver.step(state, state, control, contacts, 2e-3)
            assert solver.last_status[0] & StepStatus.CONVERGED
        final = state.body_q[0, 0]
        count = int(contacts.count[0])
    else:
        solver = sap_gpu.SolverSAP(model, max_rigid_contact=8, device=device)
        pipe = sap_gpu.CollisionPipeline(model, 8, solver.config, device=device)
        state, control = sap_gpu.to_device(model.state(), device), sap_gpu.to_device(model.control(), device)
        contacts = pipe.contacts()
        for _ in range(STEPS):
            pipe.collide(state, contacts)
            solver.step(state, state, control, contacts, 2e-3)
        final = state.body_q.numpy()[0, 0]
        count = int(contacts.count.numpy()[0])
    assert count == 4  # its four bottom corners
    assert np.abs(final[:2]).max() < STILL_POSITION
    assert spatial.quat_angle_between(final[3:], np.array([0, 0, 0, 1.0])) < STILL_ROTATION
    # It sank to the static penetration of 4 springs of k = 5e4 N/m (the pair's series stiffness) under 9.81 N.
    assert final[2] == pytest.approx(H - 9.81 / (4 * 5e4), abs=1e-7)

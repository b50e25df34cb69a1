"""sap_common.builder: layouts per joint type, collision filters, and every input error."""

import math

import numpy as np
import pytest

from sap_common import spatial
from sap_common.builder import (
    DEFAULT_LIMIT_KD,
    DEFAULT_LIMIT_KE,
    ModelBuilder,
    solid_box_inertia,
    solid_capsule_inertia,
    solid_sphere_inertia,
)
from sap_common.model import ShapeType

I3 = (0.1, 0.1, 0.1)


def two_bodies():
    b = ModelBuilder()
    b.add_body(1.0, inertia=I3, name="a")
    b.add_body(1.0, inertia=I3, name="b")
    return b


# ----------------------------------------------------------------------------- layouts


def test_every_joint_type_layout():
    b = ModelBuilder()
    bodies = [b.add_body(1.0, inertia=I3) for _ in range(7)]
    b.add_joint_prismatic(-1, bodies[0], axis=(0, 0, 2), q0=0.1)
    b.add_joint_revolute(bodies[0], bodies[1], axis=(1, 0, 0), q0=0.2, qd0=0.3)
    b.add_joint_ball(bodies[1], bodies[2], q0=(0, 0, 1, 1))
    b.add_joint_fixed(bodies[2], bodies[3])
    b.add_joint_free(-1, bodies[4], q0=(1, 2, 3, 0, 0, 0, 2), qd0=(1, 2, 3, 4, 5, 6))
    b.add_joint_distance(bodies[4], bodies[5], limit_lower=0.5, limit_upper=1.0)
    b.add_joint_d6(bodies[5], bodies[6], linear_axes=[(1, 0, 0)], angular_axes=[(0, 1, 0), (0, 0, 1)])
    m = b.finalize()
    assert list(m.joint_type) == [0, 1, 2, 3, 4, 5, 6]
    assert m.joint_q_start.tolist() == [0, 1, 2, 6, 6, 13, 20, 23]
    assert m.joint_qd_start.tolist() == [0, 1, 2, 5, 5, 11, 17, 20]
    assert (m.joint_coord_count, m.joint_dof_count) == (23, 20)
    assert m.joint_dof_dim.tolist() == [[1, 0], [0, 1], [0, 3], [0, 0], [3, 3], [3, 3], [1, 2]]
    np.testing.assert_allclose(m.joint_axis[0], [0, 0, 1])  # normalized
    np.testing.assert_allclose(m.joint_axis[2:5], 0.0)  # ball: no axes
    np.testing.assert_allclose(m.joint_axis[17:20], np.eye(3)[[0, 1, 2]][[0, 1, 2]])
    # Initial coordinates: quaternions normalized, free joint [p, q], velocity public.
    np.testing.assert_allclose(m.joint_q_init[2:6], [0, 0, 1 / math.sqrt(2), 1 / math.sqrt(2)])
    np.testing.assert_allclose(m.joint_q_init[6:13], [1, 2, 3, 0, 0, 0, 1])
    np.testing.assert_allclose(m.joint_qd_init[5:11], [1, 2, 3, 4, 5, 6])
    # Distance limits live in the first DOF slot; other slots are unlimited.
    assert (m.joint_limit_lower[11], m.joint_limit_upper[11]) == (0.5, 1.0)
    assert np.all(np.isinf(m.joint_limit_lower[12:17]))
    assert m.joint_limit_ke[0] == DEFAULT_LIMIT_KE and m.joint_limit_kd[0] == DEFAULT_LIMIT_KD


def test_per_dof_parameters_and_defaults():
    b = two_bodies()
    b.add_joint_revolute(-1, 0, axis=(0, 1, 0), limit_lower=-1, limit_upper=2, target_ke=10, target_kd=1,
                         effort_limit=5, armature=0.2, damping=0.3)
    b.add_joint_ball(0, 1, armature=(0.1, 0.2, 0.3), damping=0.5)
    m = b.finalize()
    assert m.joint_target_ke.tolist() == [10, 0, 0, 0] and m.joint_target_kd.tolist() == [1, 0, 0, 0]
    assert m.joint_effort_limit[0] == 5 and np.all(np.isinf(m.joint_effort_limit[1:]))
    assert m.joint_armature.tolist() == [0.2, 0.1, 0.2, 0.3]
    assert m.joint_damping.tolist() == [0.3, 0.5, 0.5, 0.5]
    assert (m.joint_limit_lower[0], m.joint_limit_upper[0]) == (-1, 2)


def test_shapes_and_default_material_is_unset():
    b = two_bodies()
    b.add_joint_free(-1, 0)
    b.add_joint_free(-1, 1)
    b.add_ground_plane(height=0.2, mu=0.3)
    b.add_shape_sphere(0, radius=0.1, ke=1e5)
    b.add_shape_capsule(1, spatial.transform((0, 0, 0.1)), radius=0.05, half_length=0.2, tau=0.01, margin=0.01)
    b.add_shape_box(1, hx=0.1, hy=0.2, hz=0.3, collision_group=-1, contype=2, conaffinity=3)
    m = b.finalize()
    assert m.shape_type.tolist() == [ShapeType.PLANE, ShapeType.SPHERE, ShapeType.CAPSULE, ShapeType.BOX]
    assert m.shape_body.tolist() == [-1, 0, 1, 1]
    np.testing.assert_allclose(m.shape_transform[0], [0, 0, 0.2, 0, 0, 0, 1])
    np.testing.assert_allclose(m.shape_size, [[0, 0, 0], [0.1, 0, 0], [0.05, 0.2, 0], [0.1, 0.2, 0.3]])
    assert m.shape_material_mu[0] == 0.3 and np.isnan(m.shape_material_mu[1:]).all()
    assert m.shape_material_ke[1] == 1e5 and m.shape_material_tau[2] == 0.01 and m.shape_margin[2] == 0.01
    assert m.shape_collision_group.tolist() == [0, 0, 0, -1]
    assert m.shape_contype.tolist() == [1, 1, 1, 2] and m.shape_conaffinity.tolist() == [1, 1, 1, 3]


def test_inertia_helpers_are_physical():
    for I in (solid_sphere_inertia(2, 0.3), solid_box_inertia(2, 0.1, 0.2, 0.3), solid_capsule_inertia(2, 0.1, 0.3)):
        ModelBuilder().add_body(2.0, inertia=I)  # passes the SPD and triangle checks
    # A capsule with no cylinder is a sphere; with a long cylinder it tends to a rod.
    np.testing.assert_allclose(solid_capsule_inertia(2, 0.1, 0.0), solid_sphere_inertia(2, 0.1), rtol=1e-12)


def test_joints_may_be_added_in_any_order():
    b = ModelBuilder()
    for _ in range(3):
        b.add_body(1.0, inertia=I3)
    b.add_joint_revolute(1, 2)  # grandchild first
    b.add_joint_revolute(0, 1)
    b.add_joint_revolute(-1, 0)
    m = b.finalize()
    assert m.joint_order.tolist() == [2, 1, 0]
    assert m.body_parent.tolist() == [-1, 0, 1]


def test_replicate_sets_world_count():
    b = two_bodies()
    b.add_joint_free(-1, 0)
    b.add_joint_fixed(0, 1)
    assert b.replicate(7).finalize().num_worlds == 7


# ----------------------------------------------------------------------------- collision filters


def _pairs(builder):
    return builder.finalize().shape_pair.tolist()


def test_filters_same_body_static_and_adjacent():
    b = ModelBuilder()
    for _ in range(3):
        b.add_body(1.0, inertia=I3)
    b.add_joint_revolute(-1, 0)  # body 0 hinged to the world
    b.add_joint_revolute(0, 1)  # body 1 child of body 0 (adjacent)
    b.add_joint_fixed(-1, 2)  # body 2 welded to the world (static)
    b.add_ground_plane()  # 0
    b.add_shape_sphere(0, radius=0.1)  # 1
    b.add_shape_sphere(0, radius=0.1)  # 2 (same body as 1)
    b.add_shape_sphere(1, radius=0.1)  # 3
    b.add_shape_sphere(2, radius=0.1)  # 4 (static)
    # ground–body0 kept (the world is exempt from the adjacency filter); 1–2 same body;
    # body0–body1 adjacent; ground–static and static–static never collide.
    assert _pairs(b) == [[0, 1], [0, 2], [0, 3], [1, 4], [2, 4], [3, 4]]


def test_filters_groups_masks_and_explicit_pairs():
    b = ModelBuilder()
    for _ in range(5):
        b.add_joint_free(-1, b.add_body(1.0, inertia=I3))
    b.add_shape_sphere(0, radius=0.1, collision_group=1)  # 0
    b.add_shape_sphere(1, radius=0.1, collision_group=2)  # 1: other group than 0
    b.add_shape_sphere(2, radius=0.1, collision_group=-1)  # 2: collides with every group
    b.add_shape_sphere(3, radius=0.1, contype=2, conaffinity=2)  # 3: no mask bit shared with 2
    b.add_shape_sphere(4, radius=0.1, contype=2, conaffinity=1)  # 4: 2&2 with 3, 1&1 with 2
    assert _pairs(b) == [[0, 2], [1, 2], [2, 4], [3, 4]]
    b.add_collision_filter_pair(2, 0)
    assert _pairs(b) == [[1, 2], [2, 4], [3, 4]]


def test_distance_joint_bodies_still_collide():
    b = two_bodies()
    b.add_joint_free(-1, 0)
    b.add_joint_distance(0, 1, limit_upper=1.0)
    b.add_shape_sphere(0, radius=0.1)
    b.add_shape_sphere(1, radius=0.1)
    assert _pairs(b) == [[0, 1]]


# ----------------------------------------------------------------------------- errors

BAD_BODIES = [
    (dict(mass=-1.0, inertia=I3), r"mass must be finite and >= 0"),
    (dict(mass=float("nan"), inertia=I3), r"mass must be finite and >= 0"),
    (dict(mass=True, inertia=I3), r"mass must be a real number >= 0"),
    (dict(mass=1.0), r"inertia is required"),
    (dict(mass=1.0, inertia=(1.0, -1.0, 1.0)), r"inertia must be positive definite"),
    (dict(mass=1.0, inertia=(0.0, 0.0, 0.0)), r"inertia must be positive definite"),
    (dict(mass=1.0, inertia=[[1, 0.5, 0], [0, 1, 0], [0, 0, 1]]), r"inertia must be symmetric"),
    (dict(mass=1.0, inertia=(1.0, 1.0, 3.0)), r"triangle inequality"),
    (dict(mass=1.0, inertia=np.eye(2)), r"inertia must be 3x3"),
    (dict(mass=1.0, inertia=I3, com=(0, 0, float("inf"))), r"com must be finite"),
    (dict(mass=1.0, inertia=I3, com=(0, 0)), r"com must be a scalar or a sequence of 3"),
]


@pytest.mark.parametrize("kwargs,match", BAD_BODIES)
def test_bad_body(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ModelBuilder().add_body(**kwargs)


def test_massless_frame_body_is_allowed():
    ModelBuilder().add_body(0.0, inertia=(0.0, 0.0, 0.0))


BAD_JOINTS = [
    (lambda b: b.add_joint_revolute(5, 0), r"parent must be -1 \(world\) or a body index in \[0, 2\)"),
    (lambda b: b.add_joint_revolute(-2, 0), r"parent must be -1"),
    (lambda b: b.add_joint_revolute(-1, 9), r"child must be a body index in \[0, 2\)"),
    (lambda b: b.add_joint_revolute(0, 0), r"parent and child must differ"),
    (lambda b: (b.add_joint_revolute(-1, 0), b.add_joint_revolute(1, 0)), r"already has a parent joint"),
    (lambda b: (b.add_joint_revolute(0, 1), b.add_joint_revolute(1, 0)), r"would create a cycle"),
    (lambda b: b.add_joint_revolute(-1, 0, axis=(0, 0, 0)), r"axis 0 must be a non-zero finite 3-vector"),
    (lambda b: b.add_joint_prismatic(-1, 0, axis=(0, float("nan"), 1)), r"axis 0 must be a non-zero finite"),
    (lambda b: b.add_joint_revolute(-1, 0, limit_lower=1.0, limit_upper=0.0),
     r"limit_lower \[1.0\] must be <= limit_upper \[0.0\]"),
    (lambda b: b.add_joint_revolute(-1, 0, limit_lower=float("nan")), r"must not be NaN"),
    (lambda b: b.add_joint_revolute(-1, 0, target_ke=-1.0), r"target_ke must be finite and >= 0"),
    (lambda b: b.add_joint_revolute(-1, 0, target_kd=-1.0), r"target_kd must be finite and >= 0"),
    (lambda b: b.add_joint_revolute(-1, 0, limit_ke=-1.0), r"limit_ke must be finite and >= 0"),
    (lambda b: b.add_joint_revolute(-1, 0, limit_kd=-1.0), r"limit_kd must be finite and >= 0"),
    (lambda b: b.add_joint_prismatic(-1, 0, armature=-0.1), r"armature must be finite and >= 0"),
    (lambda b: b.add_joint_prismatic(-1, 0, damping=-0.1), r"damping must be finite and >= 0"),
    (lambda b: b.add_joint_prismatic(-1, 0, effort_limit=0.0), r"effort_limit must be > 0 \(inf = no limit\)"),
    (lambda b: b.add_joint_prismatic(-1, 0, q0=float("nan")), r"q0 must be finite"),
    (lambda b: b.add_joint_free(0, 1), r"parent must be -1 \(a FREE joint connects a body to the world\)"),
    (lambda b: b.add_joint_free(-1, 0, q0=(0, 0, 0, 0, 0, 0, 0)),
     r"q0 quaternion must be a non-zero finite quaternion"),
    (lambda b: b.add_joint_free(-1, 0, q0=(0, 0, 0)), r"q0 must be \[x, y, z, qx, qy, qz, qw\]"),
    (lambda b: b.add_joint_free(-1, 0, armature=(1, 2)), r"armature must be a scalar or a sequence of 6"),
    (lambda b: b.add_joint_ball(-1, 0, q0=(0, 0, 0, 0)), r"q0 must be a non-zero finite quaternion"),
    (lambda b: b.add_joint_ball(-1, 0, damping=-1), r"damping must be finite and >= 0"),
    (lambda b: b.add_joint_distance(-1, 0, limit_lower=-0.1), r"limit_lower \(a distance\) must be >= 0 m"),
    (lambda b: b.add_joint_distance(-1, 0, limit_lower=2.0, limit_upper=1.0),
     r"limit_lower \[2.0\] must be <= limit_upper"),
    (lambda b: b.add_joint_d6(-1, 0), r"linear_axes and angular_axes take 0-3 axes each, at least one"),
    (lambda b: b.add_joint_d6(-1, 0, linear_axes=[(1, 0, 0)] * 4), r"0-3 axes each"),
    (lambda b: b.add_joint_d6(-1, 0, angular_axes=[(1, 0, 0), (2, 0, 0)]),
     r"angular axes must be linearly independent"),
    (lambda b: b.add_joint_d6(-1, 0, linear_axes=[(1, 0, 0), (0, 1, 0)], target_ke=(1, 2, 3)),
     r"target_ke must be a scalar or a sequence of 2"),
    (lambda b: b.add_joint_revolute(-1, 0, parent_xform=(0, 0, 0)), r"parent_xform must be a transform"),
    (lambda b: b.add_joint_revolute(-1, 0, child_xform=(0, 0, 0, 0, 0, 0, 0)),
     r"child_xform quaternion .* must be non-zero"),
    (lambda b: (b.add_joint_revolute(-1, 0, name="j"), b.add_joint_revolute(0, 1, name="j")),
     r"name 'j' is already used"),
]


@pytest.mark.parametrize("make,match", BAD_JOINTS)
def test_bad_joint(make, match):
    with pytest.raises(ValueError, match=match):
        make(two_bodies())


BAD_SHAPES = [
    (lambda b: b.add_shape_plane(0), r"planes \(half-spaces\) attach to the world only"),
    (lambda b: b.add_shape_sphere(3, radius=0.1), r"body must be -1 \(world\) or a body index in \[0, 2\)"),
    (lambda b: b.add_shape_sphere(0, radius=0.0), r"radius must be > 0 m"),
    (lambda b: b.add_shape_capsule(0, radius=0.1, half_length=-1), r"half_length >= 0 m"),
    (lambda b: b.add_shape_box(0, hx=0.1, hy=0.0, hz=0.1), r"hx, hy, hz must be > 0 m"),
    (lambda b: b.add_shape_sphere(0, radius=0.1, mu=-0.1), r"mu must be finite and >= 0"),
    (lambda b: b.add_shape_sphere(0, radius=0.1, ke=0.0), r"ke must be > 0 N/m"),
    (lambda b: b.add_shape_sphere(0, radius=0.1, tau=-1.0), r"tau must be finite and >= 0 s"),
    (lambda b: b.add_shape_sphere(0, radius=0.1, margin=-1.0), r"margin must be finite and >= 0 m"),
    (lambda b: b.add_shape_box(0, rounding=-0.01), r"rounding must be a finite radius >= 0 m, got -0.01"),
    (lambda b: b.add_shape_box(0, rounding=float("nan")), r"rounding must be a finite radius >= 0 m"),
    (lambda b: b.add_ground_plane(rounding=0.01), r"rounding must be 0 for a plane; rounded shapes are spheres"),
    (lambda b: b.add_shape_sphere(0, radius=0.1, collision_group=-2), r"collision_group must be an integer >= -1"),
    (lambda b: b.add_shape_sphere(0, radius=0.1, contype=-1), r"contype must be a 32-bit unsigned bitmask"),
    (lambda b: b.add_shape_sphere(0, radius=0.1, conaffinity=2**32), r"conaffinity must be a 32-bit"),
    (lambda b: b.add_shape_sphere(0, radius=0.1, friction=1), r"unknown argument\(s\) friction; valid: mu, ke"),
    (lambda b: b.add_shape_sphere(0, xform=(0, 0, 0, 1), radius=0.1), r"xform must be a transform"),
    (lambda b: b.add_collision_filter_pair(0, 5), r"shape_b must be a shape index in \[0, 1\)"),
    (lambda b: b.add_collision_filter_pair(0, 0), r"shape_a and shape_b must differ"),
]


@pytest.mark.parametrize("make,match", BAD_SHAPES)
def test_bad_shape(make, match):
    b = two_bodies()
    if "filter" in str(match) or "shape_" in str(match):
        b.add_shape_sphere(0, radius=0.1)
    with pytest.raises(ValueError, match=match):
        make(b)


def test_body_without_joint_fails_at_finalize():
    b = two_bodies()
    b.add_joint_free(-1, 0)
    with pytest.raises(ValueError, match=r"body_name\[1\] \(b\): body has no joint"):
        b.finalize()


@pytest.mark.parametrize("n", [0, -3, 2.5, True])
def test_bad_replicate(n):
    with pytest.raises(ValueError, match=r"num_worlds must be an integer >= 1"):
        ModelBuilder().replicate(n)


def test_bad_gravity():
    with pytest.raises(ValueError, match=r"gravity: must be a finite 3-vector"):
        ModelBuilder(gravity=(0, 0, float("nan")))

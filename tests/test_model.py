"""sap_common.model: frozen SapModel, sizes, derived topology, state()/control(), validation."""

import dataclasses

import numpy as np
import pytest

from sap_common import spatial
from sap_common.builder import ModelBuilder
from sap_common.kinematics import forward_kinematics
from sap_common.model import JointType, SapModel, ShapeType, joint_coord_count, joint_dof_count

I3 = (0.1, 0.1, 0.1)


def chain_model(num_worlds=1):
    """world -rev- a -ball- b ; world -free- c (with a sphere); ground plane."""
    bld = ModelBuilder()
    a = bld.add_body(1.0, com=(0, 0, -0.5), inertia=I3, name="a")
    b = bld.add_body(2.0, inertia=I3, name="b")
    c = bld.add_body(0.5, com=(0.1, 0, 0), inertia=I3, name="c")
    bld.add_joint_revolute(-1, a, spatial.transform((0, 0, 2)), axis=(0, 1, 0), q0=0.3, qd0=1.0, name="hinge")
    bld.add_joint_ball(a, b, spatial.transform((0, 0, -1)), qd0=(0, 0, 2), name="ball")
    bld.add_joint_free(-1, c, q0=(1, 0, 0.5, 0, 0, 0, 1), qd0=(1, 0, 0, 0, 0, 3), name="free")
    bld.add_ground_plane(name="ground")
    bld.add_shape_sphere(c, radius=0.1, name="ball_c")
    return bld.replicate(num_worlds).finalize()


def fields_of(model):
    return {f.name: getattr(model, f.name) for f in dataclasses.fields(model) if f.init}


def with_(model, **changes):
    return SapModel(**{**fields_of(model), **changes})


def test_sizes_and_derived_topology():
    m = chain_model()
    assert (m.body_count, m.joint_count, m.shape_count) == (3, 3, 2)
    assert (m.joint_coord_count, m.joint_dof_count) == (1 + 4 + 7, 1 + 3 + 6)
    assert m.body_joint.tolist() == [0, 1, 2]
    assert m.body_parent.tolist() == [-1, 0, -1]
    assert m.tree_count == 2 and m.body_tree.tolist() == [0, 0, 1]
    assert m.dof_tree.tolist() == [0] * 4 + [1] * 6
    assert not m.body_static.any()
    assert m.shape_pair.tolist() == [[0, 1]]
    assert [joint_coord_count(t) for t in (JointType.PRISMATIC, JointType.BALL, JointType.FREE)] == [1, 4, 7]
    assert joint_dof_count(JointType.D6, (2, 1)) == 3
    assert m.body_index("b") == 1 and m.joint_index("free") == 2 and m.shape_index("ground") == 0
    with pytest.raises(ValueError, match=r"body name: 'zz' not found; valid: a, b, c"):
        m.body_index("zz")


def test_model_is_frozen_and_arrays_read_only():
    m = chain_model()
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.num_worlds = 3
    with pytest.raises(ValueError, match="read-only"):
        m.body_mass[0] = 5.0
    src = np.array([1.0, 2.0, 3.0])
    b = ModelBuilder()
    b.add_body(1.0, com=src, inertia=I3)
    b.add_joint_free(-1, 0)
    model = b.finalize()
    src[0] = 99.0  # the model never aliases a caller's buffer
    assert model.body_com[0, 0] == 1.0


def test_state_and_control_are_public_and_batched():
    m = chain_model(num_worlds=4)
    s, c = m.state(), m.control()
    assert s.joint_qd_order == "public" and s.body_f_order == "public" and c.joint_f_order == "public"
    assert s.joint_q.shape == (4, 12) and s.joint_qd.shape == (4, 10)
    assert s.body_q.shape == (4, 3, 7) and s.body_qd.shape == (4, 3, 6) and s.body_f.shape == (4, 3, 6)
    assert all(getattr(c, f).shape == (4, 10) for f in ("joint_f", "joint_target_pos", "joint_target_vel", "joint_act"))
    np.testing.assert_array_equal(s.body_q, forward_kinematics(m, s.joint_q))
    # Free body: body_qd is public [v_C, ω], equal to the joint's public velocity.
    np.testing.assert_allclose(s.body_qd[:, 2], np.tile([1, 0, 0, 0, 0, 3], (4, 1)))
    # Revolute body: ω = 1 rad/s about y; the COM 0.5 m below the pivot moves at 0.5 m/s.
    np.testing.assert_allclose(s.body_qd[0, 0, 3:], [0, 1, 0])
    assert np.linalg.norm(s.body_qd[0, 0, :3]) == pytest.approx(0.5)
    s.joint_q[0, 0] = 5.0  # each call returns new buffers
    assert m.state().joint_q[0, 0] == pytest.approx(0.3)


def test_replicate_and_initial_state():
    m = chain_model()
    m4 = m.replicate(4)
    assert m4.num_worlds == 4 and m.num_worlds == 1
    np.testing.assert_array_equal(m4.joint_q_init, m.joint_q_init)
    q = m.joint_q_init.copy()
    q[0] = -0.2
    qd_sap = np.zeros(10)
    qd_sap[4:7] = (0, 0, 3)  # free joint ω in SAP order
    m2 = m.with_initial_state(q, qd_sap, joint_qd_order="sap")
    assert m2.joint_q_init[0] == -0.2
    # v_C = v_O + ω × r with r = (0.1, 0, 0): (0, 0.3, 0).
    np.testing.assert_allclose(m2.joint_qd_init[4:10], [0, 0.3, 0, 0, 0, 3])


def test_replace_is_a_validated_copy_with_the_fields_given():
    m = chain_model(2)
    mu = np.full(m.shape_count, 0.9)
    m2 = m.replace(shape_material_mu=mu, gravity=(0.0, 0.0, -1.62), body_mass=m.body_mass * 2)
    np.testing.assert_array_equal(m2.shape_material_mu, mu)
    np.testing.assert_array_equal(m2.gravity, [0.0, 0.0, -1.62])
    np.testing.assert_array_equal(m2.body_mass, m.body_mass * 2)
    assert m2.num_worlds == 2 and m.gravity[2] == pytest.approx(-9.81)  # the original is unchanged
    for f in dataclasses.fields(m):  # the rest, derived fields included, as before
        if f.name not in ("shape_material_mu", "gravity", "body_mass"):
            a, b = getattr(m, f.name), getattr(m2, f.name)
            same = np.array_equal(a, b, equal_nan=a.dtype.kind == "f") if isinstance(a, np.ndarray) else a == b
            assert same, f.name  # (NaN: a material left to the solver's fallback)
    with pytest.raises(ValueError, match=r"body_mass\[0\] \(a\): must be finite and >= 0"):
        m.replace(body_mass=np.r_[-1.0, m.body_mass[1:]])
    with pytest.raises(ValueError, match="gravity: expected shape"):
        m.replace(gravity=(0.0, -9.81))
    with pytest.raises(ValueError, match="body_masses: not a SapModel field; valid: .*body_mass"):
        m.replace(body_masses=m.body_mass)
    with pytest.raises(ValueError, match="joint_q_start: derived from the constructor fields"):
        m.replace(joint_q_start=m.joint_q_start)


def test_summary_lists_joints_and_shapes():
    text = chain_model().summary()
    assert "3 bodies" in text and "REVOLUTE world -> a" in text and "SPHERE on c" in text


def test_static_trees_and_fixed_bodies():
    b = ModelBuilder()
    b.add_body(1.0, inertia=I3)
    b.add_body(1.0, inertia=I3)
    b.add_joint_fixed(-1, 0)
    b.add_joint_fixed(0, 1)
    m = b.finalize()
    assert m.body_static.tolist() == [True, True] and m.joint_dof_count == 0


# ----------------------------------------------------------------------------- direct validation

BAD_FIELDS = [
    (dict(num_worlds=0), r"num_worlds: must be an integer >= 1, got 0"),
    (dict(num_worlds=1.5), r"num_worlds: must be an integer >= 1"),
    (dict(body_mass=np.array([1.0, -2.0, 1.0])), r"body_mass\[1\] \(b\): must be finite and >= 0"),
    (dict(body_mass=np.ones(2)), r"body_com: expected shape \(2, 3\)"),
    (dict(body_inertia=np.stack([np.eye(3), -np.eye(3), np.eye(3)])),
     r"body_inertia\[1\] \(b\): inertia must be positive definite"),
    (dict(body_name=("a", "a", "c")), r"body_name: name 'a' is used twice"),
    (dict(joint_type=np.array([1, 2, 9])), r"joint_type\[2\]: 9 is not a JointType; valid: PRISMATIC=0"),
    (dict(joint_parent=np.array([-1, 7, -1])), r"joint_parent\[1\] \(ball\): 7 is not a body index in \[-1, 3\)"),
    (dict(joint_child=np.array([0, 2, 2])),
     r"joint_child\[2\] \(free\): body 'c' is already the child of joint 'ball'"),
    (dict(joint_child=np.array([0, 0, 2])), r"joint_parent\[1\] \(ball\): a body cannot be jointed to itself"),
    (dict(joint_parent=np.array([1, 0, -1])), r"joint_parent: the joints form a cycle"),
    (dict(joint_dof_dim=np.array([[0, 1], [0, 2], [3, 3]])),
     r"joint_dof_dim\[1\] \(ball\): a BALL joint has dof_dim \(0, 3\)"),
    (dict(joint_X_p=np.zeros((3, 7))), r"joint_X_p\[0\]: quaternion \(entries 3:7, xyzw\) must be non-zero"),
    (dict(joint_armature=np.full(10, -1.0)), r"joint_armature\[0:1\] \(hinge, DOFs 0:1\): must be finite and >= 0"),
    (dict(joint_effort_limit=np.zeros(10)), r"joint_effort_limit\[0:1\] \(hinge, DOFs 0:1\): must be > 0"),
    (dict(joint_limit_lower=np.r_[np.full(4, -np.inf), 1.0, np.full(5, -np.inf)]),
     r"\(free, DOFs 4:10\): FREE joints take no position limits"),
    (dict(joint_limit_lower=np.r_[-np.inf, 0.0, np.full(8, -np.inf)]),
     r"\(ball, DOFs 1:4\): BALL joints take no position limits"),
    (dict(joint_limit_lower=np.r_[2.0, np.full(9, -np.inf)], joint_limit_upper=np.r_[1.0, np.full(9, np.inf)]),
     r"lower \[2.0\] must be <= upper \[1.0\]"),
    (dict(joint_target_ke=np.r_[0.0, 1.0, np.zeros(8)]),
     r"drives act on PRISMATIC, REVOLUTE and D6 DOFs only, not on BALL"),
    (dict(joint_axis=np.zeros((10, 3))), r"joint_axis\[0\] \(hinge, DOFs 0:1\): must be a non-zero finite vector"),
    (dict(joint_q_init=np.zeros(12)),
     r"joint_q_init\[1:5\] \(ball\): a quaternion must be finite with 1e-09 <= \|q\| <= 1e\+09"),
    (dict(joint_q_init=np.r_[0.0, 0, 0, 0, 1e-200, np.zeros(7)]),
     r"joint_q_init\[1:5\] \(ball\): a quaternion must be finite"),
    (dict(joint_qd_init=np.full(10, np.nan)), r"joint_qd_init: must be finite"),
    (dict(shape_type=np.array([0, 99])), r"shape_type\[1\] \(ball_c\): 99 is not a ShapeType; valid: PLANE=0"),
    (dict(shape_body=np.array([0, 2])),
     r"shape_body\[0\] \(ground\): planes \(half-spaces\) must be attached to the world"),
    (dict(shape_size=np.zeros((2, 3))), r"shape_size\[1\] \(ball_c\): sphere radius must be > 0"),
    (dict(shape_material_ke=np.array([np.nan, -1.0])),
     r"shape_material_ke\[1\] \(ball_c\): must be > 0, inf = rigid \(NaN = unset\)"),
    (dict(shape_material_mu=np.array([np.nan, -1.0])), r"shape_material_mu\[1\] \(ball_c\): must be >= 0"),
    (dict(shape_material_tau=np.array([np.inf, 0.0])), r"shape_material_tau\[0\] \(ground\): must be finite and >= 0"),
    (dict(shape_margin=np.array([0.0, -0.1])), r"shape_margin\[1\] \(ball_c\): must be finite and >= 0"),
    (dict(shape_collision_group=np.array([0, -5])), r"shape_collision_group\[1\] \(ball_c\): must be >= -1"),
    (dict(shape_rounding=np.array([0.0, -0.1])), r"shape_rounding\[1\] \(ball_c\): must be finite and >= 0 m"),
    (dict(shape_rounding=np.array([0.0, np.nan])), r"shape_rounding\[1\] \(ball_c\): must be finite and >= 0 m"),
    (dict(shape_rounding=np.array([0.01, 0.0])),
     r"shape_rounding\[0\] \(ground\): a PLANE takes no rounding \(0\); rounded shapes are SPHERE, CAPSULE, BOX"),
    (dict(shape_rounding=np.array([0.0, 1e3])),
     r"shape_rounding\[1\] \(ball_c\): at most 100 times the core's largest half extent"),
    (dict(shape_rounding=np.zeros(3)), r"shape_rounding: expected shape \(2\), got \(3,\)"),
    (dict(shape_filter_pair=np.array([[0, 0]])), r"shape_filter_pair\[0\]: \(0, 0\) must name two different shapes"),
    (dict(gravity=np.array([0, 0, np.inf])), r"gravity: must be finite"),
]


@pytest.mark.parametrize("changes,match", BAD_FIELDS, ids=lambda x: next(iter(x)) if isinstance(x, dict) else "")
def test_direct_construction_is_validated(changes, match):
    with pytest.raises(ValueError, match=match):
        with_(chain_model(), **changes)


def test_body_without_joint_is_rejected():
    m = chain_model()
    with pytest.raises(ValueError, match=r"body_name\[2\] \(c\): body has no joint"):
        f = fields_of(m)
        keep = [0, 1]
        with_(m, **{k: f[k][keep] for k in ("joint_type", "joint_parent", "joint_child", "joint_X_p",
                                            "joint_X_c", "joint_dof_dim")},
              joint_name=f["joint_name"][:2], **{k: f[k][:4] for k in (
                  "joint_axis", "joint_armature", "joint_damping", "joint_target_ke", "joint_target_kd",
                  "joint_effort_limit", "joint_limit_lower", "joint_limit_upper", "joint_limit_ke",
                  "joint_limit_kd", "joint_qd_init")}, joint_q_init=f["joint_q_init"][:5])


def test_distance_joint_limit_slots():
    b = ModelBuilder()
    b.add_body(1.0, inertia=I3)
    b.add_joint_distance(-1, 0, limit_upper=1.0)
    m = b.finalize()
    lo = m.joint_limit_lower.copy()
    lo[3] = 0.0
    with pytest.raises(ValueError, match=r"DISTANCE joint keeps its distance limits in the slot of its first DOF"):
        with_(m, joint_limit_lower=lo)
    lo = m.joint_limit_lower.copy()
    lo[0] = -1.0
    with pytest.raises(ValueError, match=r"a distance limit must be >= 0"):
        with_(m, joint_limit_lower=lo)


def test_plane_shape_type_values():
    assert [(t.name, t.value) for t in ShapeType] == [
        ("PLANE", 0), ("SPHERE", 1), ("CAPSULE", 2), ("BOX", 3), ("CYLINDER", 4), ("ELLIPSOID", 5), ("CONVEX_MESH", 6),
        ("HEIGHTFIELD", 7)]  # the kernels order pairs by these values (canonical order: lower type first)
    assert [t.value for t in JointType] == [0, 1, 2, 3, 4, 5, 6]


def test_a_welded_body_with_a_moving_child_is_static():
    b = ModelBuilder()
    post, arm = b.add_body(1.0, inertia=I3), b.add_body(1.0, inertia=I3)
    b.add_joint_fixed(-1, post)
    b.add_joint_revolute(post, arm)
    m = b.finalize()
    assert m.body_static.tolist() == [True, False]


def test_rounding_defaults_to_zero_and_grows_the_bounds():
    """``shape_rounding`` (default 0: the bounds of the shape itself) grows a shape's local bounds by
    its radius on every side: the rounded shape's box."""
    m = chain_model()
    assert m.shape_rounding.tolist() == [0.0, 0.0]
    rounded = with_(m, shape_rounding=np.array([0.0, 0.02]))
    np.testing.assert_array_equal(rounded.shape_local_bounds[1], m.shape_local_bounds[1] + [[-0.02] * 3, [0.02] * 3])
    np.testing.assert_array_equal(rounded.shape_local_bounds[0], m.shape_local_bounds[0])

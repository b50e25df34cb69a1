"""sap_newton.convert: a newton.Model → SapModel, checked against this project's own builders.

A robot built with Newton's ModelBuilder and the same robot built with ours give the same
SapModel; a robot imported by Newton's MJCF importer and by our ``load_mjcf`` give the same
mass matrix and bias forces. Both to float32 round-off, since Newton stores float32.
"""

import math
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

newton = pytest.importorskip("newton")
import warp as wp  # noqa: E402
from newton_scenes import (  # noqa: E402
    PROBE_MJCF,
    fourbar_newton,
    geared_pair_newton,
    mixed_robot_newton,
    mixed_robot_sap,
    weld_drop_newton,
)

import sap_newton  # noqa: E402
from sap_common.builder import DEFAULT_LIMIT_KD, DEFAULT_LIMIT_KE  # noqa: E402
from sap_common.conventions import joint_qd_public_to_sap  # noqa: E402
from sap_common.io import load_mjcf  # noqa: E402
from sap_common.model import JointType, ShapeType  # noqa: E402
from sap_ref.dynamics import bias_forces, mass_matrix  # noqa: E402

# Newton stores every parameter in float32: one rounding is ≤ 2^-24 ≈ 6e-8 relative, and
# Newton's own float32 arithmetic (quaternion normalization, axis normalization, inertia
# transforms at import) adds a few ulps. Observed: ≤ 5e-8 relative on M and the bias forces.
FLOAT32_RTOL = 1e-6
# Model fields compared between the twins (names and initial states aside).
FIELDS = ("body_mass", "body_com", "body_inertia", "joint_type", "joint_parent", "joint_child", "joint_X_p",
          "joint_X_c", "joint_dof_dim", "joint_axis", "joint_armature", "joint_damping", "joint_target_ke",
          "joint_target_kd", "joint_effort_limit", "joint_limit_lower", "joint_limit_upper", "shape_type",
          "shape_body", "shape_transform", "shape_size", "shape_margin", "shape_material_mu",
          "shape_material_ke", "shape_material_tau", "gravity", "shape_pair")


def _close(name, a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape, f"{name}: shapes {a.shape} vs {b.shape}"
    same = a == b  # equal infinities included
    scale = max(1.0, np.max(np.abs(np.where(np.isfinite(b), b, 0.0)), initial=0.0))
    diff = np.abs(np.subtract(a, b, out=np.zeros_like(a), where=~same))
    assert np.all(diff <= FLOAT32_RTOL * scale), f"{name}: max |Δ| {np.max(diff)} (scale {scale})"


def _random_states(model, rng, count):
    """(q, v_public) pairs: random quaternions for ball/free joints, uniform elsewhere."""
    out = []
    for _ in range(count):
        q = rng.uniform(-0.8, 0.8, model.joint_coord_count)
        for j in range(model.joint_count):
            jt, q0 = JointType(int(model.joint_type[j])), int(model.joint_q_start[j])
            if jt == JointType.BALL:
                q[q0:q0 + 4] = rng.normal(size=4)
                q[q0:q0 + 4] /= np.linalg.norm(q[q0:q0 + 4])
            elif jt == JointType.FREE:
                q[q0 + 3:q0 + 7] = rng.normal(size=4)
                q[q0 + 3:q0 + 7] /= np.linalg.norm(q[q0 + 3:q0 + 7])
        out.append((q, rng.normal(size=model.joint_dof_count)))
    return out


def _same_dynamics(a, b, rng, count=20):
    """M(q) and C(q, v)v − τ_g of two models with the same coordinates agree to float32 round-off."""
    worst = 0.0
    for q, v in _random_states(a, rng, count):
        Ma, Mb = mass_matrix(a, q), mass_matrix(b, q)
        ba = bias_forces(a, q, joint_qd_public_to_sap(a, q, v))
        bb = bias_forces(b, q, joint_qd_public_to_sap(b, q, v))
        worst = max(worst, np.max(np.abs(Ma - Mb)) / np.max(np.abs(Mb)), np.max(np.abs(ba - bb)) / np.max(np.abs(bb)))
    assert worst <= FLOAT32_RTOL, f"relative |ΔM|, |Δbias| up to {worst}"
    return worst


def test_core_packages_do_not_import_newton():
    code = ("import sys; import sap_common, sap_ref, sap_gpu, sap_common.io, sap_common.scenes; "
            "print('newton' in sys.modules, 'sap_newton' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split()[-2:] == ["False", "False"], out.stdout


def test_newton_built_robot_equals_our_builder():
    conv = sap_newton.convert_model(mixed_robot_newton())
    ours = mixed_robot_sap()
    theirs = conv.sap_model
    assert conv.notes == ()
    for f in FIELDS:
        _close(f, getattr(theirs, f), getattr(ours, f))
    limited = np.isfinite(ours.joint_limit_lower) | np.isfinite(ours.joint_limit_upper)
    _close("joint_limit_ke", theirs.joint_limit_ke[limited], ours.joint_limit_ke[limited])
    _close("joint_limit_kd", theirs.joint_limit_kd[limited], ours.joint_limit_kd[limited])
    _close("joint_q_init", theirs.joint_q_init, ours.joint_q_init)
    _same_dynamics(theirs, ours, np.random.default_rng(0))


def test_newton_mjcf_import_equals_load_mjcf():
    builder = newton.ModelBuilder()
    builder.add_mjcf(PROBE_MJCF)
    theirs = sap_newton.to_sap_model(builder.finalize(device="cpu"))
    ours = load_mjcf(PROBE_MJCF).sap_model
    assert [JointType(int(t)).name for t in theirs.joint_type] == [JointType(int(t)).name for t in ours.joint_type]
    for f in ("body_mass", "body_com", "body_inertia", "joint_X_p", "joint_X_c", "joint_axis", "joint_armature",
              "joint_damping", "joint_limit_lower", "joint_limit_upper", "shape_type", "shape_size"):
        _close(f, getattr(theirs, f), getattr(ours, f))
    _same_dynamics(theirs, ours, np.random.default_rng(1))


def test_newton_imported_humanoid_equals_load_mjcf_with_shared_ankle_anchor():
    """Newton 1.8's importer folds two hinges of one body into a D6 at the first hinge's anchor;
    the humanoid's ankle hinges sit 4 cm apart, so with its stock file Newton's M differs from
    MuJoCo's (~1e-3 relative, docs/newton.md). With one shared anchor both agree to round-off."""
    mujoco_warp = pytest.importorskip("mujoco_warp")
    path = os.path.join(os.path.dirname(mujoco_warp.__file__), "test_data", "humanoid", "humanoid.xml")
    with open(path) as f:
        xml = f.read()
    stock_anchor = '<joint pos="0 0 .04" stiffness="3"/>'
    assert stock_anchor in xml
    xml = xml.replace(stock_anchor, '<joint pos="0 0 .08" stiffness="3"/>')
    builder = newton.ModelBuilder()
    builder.add_mjcf(xml)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        conv = sap_newton.convert_model(builder.finalize(device="cpu"))
    text = "\n".join(str(r.message) for r in record)
    assert "passive joint stiffness (springs) dropped" in text and "MuJoCo actuators" in text
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # load_mjcf's own notes on stiffness and actuators
        ours = load_mjcf(xml).sap_model
    theirs = conv.sap_model
    short = [n.rsplit("/", 1)[-1] for n in theirs.body_name]
    order = [short.index(n) for n in ours.body_name]
    _close("body_mass", theirs.body_mass[order], ours.body_mass)
    _close("body_inertia", theirs.body_inertia[order], ours.body_inertia)
    _same_dynamics(theirs, ours, np.random.default_rng(2), count=10)


def test_worlds_with_different_parameters_share_a_group_with_per_world_parameters():
    model = mixed_robot_newton(num_worlds=3)
    mass = model.body_mass.numpy()
    mass[6] *= 1.5  # body 0 of world 1 (6 bodies per world)
    model.body_mass.assign(mass)
    model.set_gravity((0.0, 0.0, -1.62), world=2)
    conv = sap_newton.convert_model(model)
    assert [g.worlds.tolist() for g in conv.groups] == [[0, 1, 2]]
    g = conv.groups[0]
    assert sorted(g.parameters) == ["body_mass", "gravity"]
    assert g.parameters["body_mass"][:, 0] == pytest.approx([2.0, 3.0, 2.0])
    assert g.parameters["gravity"][:, 2] == pytest.approx([-9.81, -9.81, -1.62], rel=1e-6)


def test_worlds_with_different_parameters_form_groups_without_per_world_parameters():
    model = mixed_robot_newton(num_worlds=3)
    mass = model.body_mass.numpy()
    mass[6] *= 1.5  # body 0 of world 1 (6 bodies per world)
    model.body_mass.assign(mass)
    conv = sap_newton.convert_model(model, per_world_parameters=False)
    assert [g.worlds.tolist() for g in conv.groups] == [[0, 2], [1]]
    assert conv.world_group.tolist() == [0, 1, 0] and conv.world_slot.tolist() == [0, 0, 1]
    assert conv.groups[1].sap_model.body_mass[0] == pytest.approx(3.0)
    assert conv.groups[0].sap_model.body_mass[0] == pytest.approx(2.0)
    assert conv.groups[0].body_index.tolist() == [list(range(0, 6)), list(range(12, 18))]
    with pytest.raises(ValueError, match="2 templates"):
        conv.sap_model
    # The ground plane (global) is shape 0 of every template; world shapes route to their group.
    ground = model.shape_label.index("ground_plane")
    assert conv.shape_local[ground] == 0 and conv.shape_group[ground] == -1
    for g in conv.groups:
        assert (g.shape_index[:, 0] == ground).all()
        assert (conv.shape_group[g.shape_index[:, 1:]] == conv.groups.index(g)).all()


def test_per_world_gravity_is_carried():
    model = mixed_robot_newton(num_worlds=2)
    model.set_gravity((0.0, 0.0, -1.62), world=1)
    conv = sap_newton.convert_model(model, per_world_parameters=False)
    assert len(conv.groups) == 2
    assert conv.groups[conv.world_group[1]].sap_model.gravity[2] == pytest.approx(-1.62, rel=1e-6)


def test_candidate_pairs_are_newtons():
    """Groups, filter pairs and parent filtering: SAP tests exactly Newton's shape pairs."""
    b = newton.ModelBuilder()
    cfg = newton.ModelBuilder.ShapeConfig
    bodies = [b.add_body(xform=wp.transform((0.3 * i, 0, 1), wp.quat_identity()), mass=1.0,
                         inertia=wp.mat33(np.eye(3) * 0.01)) for i in range(4)]
    s = [b.add_shape_sphere(bodies[0], radius=0.1, cfg=cfg(collision_group=1)),
         b.add_shape_sphere(bodies[1], radius=0.1, cfg=cfg(collision_group=2)),
         b.add_shape_box(bodies[2], hx=0.1, hy=0.1, hz=0.1, cfg=cfg(collision_group=-1)),
         b.add_shape_capsule(bodies[3], radius=0.05, half_height=0.1, cfg=cfg(collision_group=1))]
    b.add_shape_collision_filter_pair(s[0], s[3])
    b.add_ground_plane()
    model = b.finalize(device="cpu")
    conv = sap_newton.convert_model(model)
    g = conv.groups[0]
    newton_pairs = {tuple(sorted(p)) for p in model.shape_contact_pairs.numpy().tolist()}
    ours = {tuple(sorted(int(g.shape_index[0, i]) for i in p)) for p in g.sap_model.shape_pair}
    assert ours == newton_pairs
    assert (s[0], s[1]) not in ours and (s[0], s[3]) not in ours and (s[0], s[2]) in ours


def _articulate(b):
    b.add_articulation(list(range(b.joint_count)))
    return b


def test_drive_modes_map_like_newtons_mujoco_solver():
    b = newton.ModelBuilder()
    mode = newton.JointTargetMode
    modes = (mode.NONE, mode.POSITION, mode.VELOCITY, mode.POSITION_VELOCITY, mode.EFFORT)
    parent = -1
    for k, m in enumerate(modes):
        link = b.add_link(mass=1.0, inertia=wp.mat33(np.eye(3) * 0.01))
        b.add_joint_revolute(parent, link, axis=(0, 1, 0), target_ke=10.0 + k, target_kd=1.0 + k, actuator_mode=m)
        parent = link
    _articulate(b)
    conv = sap_newton.convert_model(b.finalize(device="cpu"))
    m, g = conv.sap_model, conv.groups[0]
    assert m.joint_target_ke.tolist() == [0.0, 11.0, 0.0, 13.0, 0.0]
    assert m.joint_target_kd.tolist() == [0.0, 2.0, 3.0, 4.0, 0.0]
    assert g.target_q_index[0].tolist() == [-1, 1, -1, 3, -1]  # position targets: coordinates
    assert g.target_qd_index[0].tolist() == [-1, -1, 2, 3, -1]  # velocity targets: VELOCITY modes


def test_material_and_limit_options():
    model = mixed_robot_newton()
    sap_mat = sap_newton.to_sap_model(model, contact_material="sap", joint_limits="drake")
    assert np.isnan(sap_mat.shape_material_ke).all() and np.isnan(sap_mat.shape_material_tau).all()
    assert sap_mat.shape_material_mu[1] == pytest.approx(0.8)
    assert (sap_mat.joint_limit_ke == DEFAULT_LIMIT_KE).all() and (sap_mat.joint_limit_kd == DEFAULT_LIMIT_KD).all()
    newton_mat = sap_newton.to_sap_model(model)
    assert newton_mat.shape_material_tau[1] == pytest.approx(200.0 / 2e4)
    for bad in (dict(contact_material="drake"), dict(joint_limits="hard"), dict(skip_unsupported_shapes=1)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            sap_newton.convert_model(model, **bad)


def test_margin_inflates_spheres_and_capsules_and_shifts_planes():
    b = newton.ModelBuilder()
    body = b.add_body(mass=1.0, inertia=wp.mat33(np.eye(3) * 0.01))
    b.add_shape_sphere(body, radius=0.1, cfg=newton.ModelBuilder.ShapeConfig(margin=0.01))
    b.add_shape_capsule(body, radius=0.05, half_height=0.2, cfg=newton.ModelBuilder.ShapeConfig(margin=0.02))
    b.add_ground_plane(cfg=newton.ModelBuilder.ShapeConfig(margin=0.03))
    m = sap_newton.to_sap_model(b.finalize(device="cpu"))
    assert ShapeType(int(m.shape_type[0])) == ShapeType.PLANE
    assert m.shape_transform[0, 2] == pytest.approx(0.03)
    assert m.shape_size[1, 0] == pytest.approx(0.11) and m.shape_size[2, :2] == pytest.approx([0.07, 0.2])


def test_margin_rounds_boxes_cylinders_and_ellipsoids():
    """Newton's surface margin offsets a box's, cylinder's or ellipsoid's surface outward: SAP's
    rounding radius (the core keeps its size); a shape without one keeps rounding 0."""
    b = newton.ModelBuilder()
    body = b.add_body(mass=1.0, inertia=wp.mat33(np.eye(3) * 0.01))
    b.add_shape_box(body, hx=0.1, hy=0.2, hz=0.3, cfg=newton.ModelBuilder.ShapeConfig(margin=0.01))
    b.add_shape_cylinder(body, radius=0.1, half_height=0.2, cfg=newton.ModelBuilder.ShapeConfig(margin=0.02))
    b.add_shape_ellipsoid(body, rx=0.1, ry=0.2, rz=0.3, cfg=newton.ModelBuilder.ShapeConfig(margin=0.03))
    b.add_shape_box(body, hx=0.1, hy=0.1, hz=0.1)
    m = sap_newton.to_sap_model(b.finalize(device="cpu"))
    assert [ShapeType(int(t)) for t in m.shape_type] == [ShapeType.BOX, ShapeType.CYLINDER, ShapeType.ELLIPSOID,
                                                         ShapeType.BOX]
    assert m.shape_rounding == pytest.approx([0.01, 0.02, 0.03, 0.0])
    assert m.shape_size[0] == pytest.approx([0.1, 0.2, 0.3]) and m.shape_size[1, :2] == pytest.approx([0.1, 0.2])
    assert m.shape_size[2] == pytest.approx([0.1, 0.2, 0.3])


def _one_body(shape_adder, **body_kw):
    b = newton.ModelBuilder()
    body = b.add_body(mass=1.0, inertia=wp.mat33(np.eye(3) * 0.01), **body_kw)
    shape_adder(b, body)
    return b


@pytest.mark.parametrize("adder, match", [
    (lambda b, body: b.add_shape_cone(body, radius=0.1, half_height=0.2, label="cone"), "'cone'.*CONE"),
    (lambda b, body: b.add_shape_cylinder(body, radius=0.1, half_height=0.2, barrel_radius=0.3, label="keg"),
     r"'keg'.*barrel cylinder \(shape_scale\[2\], the barrel radius, 0.3"),
    (lambda b, body: b.add_shape_plane(body=body, width=0, length=0, label="tray"), "'tray'.*plane on a body"),
])
def test_unsupported_shapes_are_refused_by_name(adder, match):
    model = _one_body(adder).finalize(device="cpu")
    with pytest.raises(ValueError, match=match):
        sap_newton.convert_model(model)


def test_unsupported_shapes_can_be_skipped_and_visual_shapes_are_ignored():
    def adder(b, body):
        b.add_shape_sphere(body, radius=0.1)
        b.add_shape_cone(body, radius=0.1, half_height=0.2, label="cone")
        b.add_shape_cylinder(body, radius=0.1, half_height=0.2, label="visual_can",
                             cfg=newton.ModelBuilder.ShapeConfig(has_shape_collision=False))
    model = _one_body(adder).finalize(device="cpu")
    with pytest.warns(UserWarning, match="unsupported collision shapes skipped.*'cone'"):
        conv = sap_newton.convert_model(model, skip_unsupported_shapes=True)
    assert conv.sap_model.shape_count == 1


def test_unsupported_joints_and_bodies_are_refused_by_name():
    b = newton.ModelBuilder()
    a = b.add_link(mass=1.0, inertia=wp.mat33(np.eye(3) * 0.01))
    c = b.add_link(mass=1.0, inertia=wp.mat33(np.eye(3) * 0.01))
    b.add_joint_free(a)
    b.add_joint_distance(a, c, min_distance=0.1, max_distance=0.5, label="tether")
    _articulate(b)
    with pytest.raises(ValueError, match="'tether'.*DISTANCE joint"):
        sap_newton.convert_model(b.finalize(device="cpu"))

    b = newton.ModelBuilder()
    body = b.add_link(mass=1.0, inertia=wp.mat33(np.eye(3) * 0.01))
    b.add_joint_free(body, parent_xform=wp.transform((0, 0, 1), wp.quat_identity()), label="offset_root")
    _articulate(b)
    with pytest.raises(ValueError, match="'offset_root'.*non-identity joint_X_p"):
        sap_newton.convert_model(b.finalize(device="cpu"))

    b = newton.ModelBuilder()
    b.add_body(mass=1.0, inertia=wp.mat33(np.eye(3) * 0.01))
    b.add_particle((0, 0, 1), (0, 0, 0), mass=0.1)
    with pytest.raises(ValueError, match="particles"):
        sap_newton.convert_model(b.finalize(device="cpu"))

    b = newton.ModelBuilder()
    b.add_link(mass=1.0, inertia=wp.mat33(np.eye(3) * 0.01), label="loose")
    link = b.add_link(mass=1.0, inertia=wp.mat33(np.eye(3) * 0.01))
    b.add_joint_revolute(-1, link, axis=(0, 1, 0))
    _articulate(b)
    with pytest.raises(ValueError, match="'loose'.*no joint"):
        sap_newton.convert_model(b.finalize(device="cpu"))

    b = newton.ModelBuilder()
    link = b.add_link(mass=1.0, inertia=wp.mat33(np.eye(3) * 0.01))
    b.add_joint_revolute(-1, link, axis=(0, 1, 0), enabled=False, label="off_hinge")
    _articulate(b)
    with pytest.raises(ValueError, match="'off_hinge'.*disabled.*no disabled tree joints"):
        sap_newton.convert_model(b.finalize(device="cpu"))

    with pytest.raises(ValueError, match="model: expected a newton.Model"):
        sap_newton.convert_model(mixed_robot_sap())


def test_dropped_features_are_noted():
    b = newton.ModelBuilder()
    link = b.add_link(mass=1.0, inertia=wp.mat33(np.eye(3) * 0.01))
    b.add_joint_revolute(-1, link, axis=(0, 1, 0), stiffness=5.0, friction=0.2, label="springy")
    ball = b.add_link(mass=1.0, inertia=wp.mat33(np.eye(3) * 0.01))
    b.add_joint_ball(link, ball, actuator_mode=newton.JointTargetMode.POSITION, label="driven_ball")
    model = _articulate(b).finalize(device="cpu")
    ke = model.joint_target_ke.numpy()
    ke[1:4] = 5.0
    model.joint_target_ke.assign(ke)
    with pytest.warns(UserWarning) as record:
        conv = sap_newton.convert_model(model)
    text = "\n".join(str(r.message) for r in record)
    for what in ("passive joint stiffness (springs) dropped: 'springy'", "joint friction dropped: 'springy'",
                 "drives on BALL/FREE joints dropped: 'driven_ball'"):
        assert what in text
    assert len(conv.notes) == 3
    assert not conv.sap_model.joint_target_ke.any()


def test_d6_with_two_non_orthonormal_angular_axes_is_refused():
    b = newton.ModelBuilder()
    link = b.add_link(mass=1.0, inertia=wp.mat33(np.eye(3) * 0.01))
    cfg = newton.ModelBuilder.JointDofConfig
    b.add_joint_d6(-1, link, angular_axes=[cfg(axis=(1, 0, 0)), cfg(axis=(math.sqrt(0.5), math.sqrt(0.5), 0))],
                   label="skew")
    _articulate(b)
    with pytest.raises(ValueError, match="'skew'.*not orthonormal"):
        sap_newton.convert_model(b.finalize(device="cpu"))


def test_free_joint_parameters_are_reordered_to_sap_order():
    """Newton orders a FREE joint's DOFs [linear, angular], SAP's parameters are [angular, linear]."""
    model = mixed_robot_newton()
    armature = model.joint_armature.numpy()
    armature[:6] = np.arange(1, 7) * 1e-3
    model.joint_armature.assign(armature)
    with pytest.warns(UserWarning, match="FREE-joint armature/damping applied in SAP's"):
        m = sap_newton.to_sap_model(model)
    np.testing.assert_allclose(m.joint_armature[:6], np.array([4, 5, 6, 1, 2, 3]) * 1e-3, rtol=FLOAT32_RTOL)


def test_mimic_joints_become_couplers():
    """Newton's mimic relation q_follower = c₀ + c₁·q_reference is SAP's coupler (joint0 the
    follower); stepping with SAP keeps it; a mimic on a BALL joint is refused by name."""
    from sap_common.model import ConstraintType
    from sap_ref.solver import SolverSAP

    b = newton.ModelBuilder()
    l0 = b.add_link(mass=1.0, inertia=wp.mat33(np.eye(3) * 0.01))
    l1 = b.add_link(mass=1.0, com=wp.vec3(0.2, 0.0, 0.0), inertia=wp.mat33(np.eye(3) * 0.01))
    j0 = b.add_joint_revolute(-1, l0, axis=(0, 1, 0), label="leader")
    j1 = b.add_joint_revolute(l0, l1, parent_xform=wp.transform((0.3, 0, 0), wp.quat_identity()), axis=(0, 1, 0),
                              label="follower")
    _articulate(b)
    b.set_joint_mimic(j1, j0, coeffs=(0.1, -0.5))
    m = sap_newton.to_sap_model(b.finalize(device="cpu"))
    assert m.constraint_count == 1 and ConstraintType(int(m.constraint_type[0])) == ConstraintType.COUPLER
    assert m.joint_name[m.constraint_joint0[0]] == "follower" and m.joint_name[m.constraint_joint1[0]] == "leader"
    assert m.constraint_gear_ratio[0] == -0.5 and m.constraint_offset[0] == pytest.approx(0.1, rel=1e-7)
    state = m.state()
    solver = SolverSAP(m, max_rigid_contact=0, contact_preset_variant="drake")
    for _ in range(200):
        solver.step(state, state, m.control(), None, 1e-3)
    q = state.joint_q[0]
    assert abs(q[1] - (m.constraint_offset[0] - 0.5 * q[0])) < 1e-6 and abs(q[0]) > 1e-3  # it moved

    b = newton.ModelBuilder()
    l0 = b.add_link(mass=1.0, inertia=wp.mat33(np.eye(3) * 0.01))
    l1 = b.add_link(mass=1.0, inertia=wp.mat33(np.eye(3) * 0.01))
    j0 = b.add_joint_revolute(-1, l0, axis=(0, 1, 0), label="leader")
    j1 = b.add_joint_ball(l0, l1, label="ball_follower")
    _articulate(b)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # add_constraint_mimic is deprecated in Newton 1.7
        b.add_constraint_mimic(j1, j0, 0.0, 1.0)
    with pytest.raises(ValueError, match="'ball_follower'.*single-DOF joints"):
        sap_newton.convert_model(b.finalize(device="cpu"))


# The largest loop-closure gap [m] of the Newton four-bar after 200 SAP steps: 10× the 1.2e-4 m
# measured, still 1/200 of the shortest link.
LOOP_GAP_MAX = 1e-3


def _newton_fourbar(loop_adder):
    """A Newton four-bar (crank and coupler one articulation, the rocker another) whose loop is
    closed by ``loop_adder(builder, coupler, rocker)``; released at crank angle −1 rad."""
    from sap_common.scenes import _fourbar_points

    a_len, b_len, c_len, d_len = 0.2, 0.45, 0.35, 0.4
    th = _fourbar_points(a_len, b_len, c_len, d_len, -1.0)
    b = newton.ModelBuilder()
    inertia = wp.mat33(np.eye(3) * 0.01)
    crank, coupler, rocker = (b.add_link(mass=m, inertia=inertia) for m in (0.5, 1.0, 0.7))
    at = lambda x, z=0.0: wp.transform((x, 0, z), wp.quat_identity())  # noqa: E731
    j0 = b.add_joint_revolute(-1, crank, parent_xform=at(0, 1), axis=(0, 1, 0), label="crank")
    j1 = b.add_joint_revolute(crank, coupler, parent_xform=at(a_len), axis=(0, 1, 0), label="coupler")
    j2 = b.add_joint_revolute(-1, rocker, parent_xform=at(d_len, 1), axis=(0, 1, 0), label="rocker")
    b.add_articulation([j0, j1])
    b.add_articulation([j2])
    loop_adder(b, coupler, rocker, at(b_len), at(c_len))
    for j, q in enumerate(th):
        b.joint_q[j] = q
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return b.finalize(device="cpu")


@pytest.mark.parametrize("kind, types", [
    ("revolute", ("BALL", "AXIS_ALIGN")), ("ball", ("BALL",)), ("fixed", ("WELD",))])
def test_loop_joints_become_constraints(kind, types):
    """A body's second parent joint (outside Newton's articulations) closes a loop: a ball loop
    joint maps to a ball constraint, a fixed one to a weld, a revolute one to a ball plus two
    axis-alignment rows; the loop joint's coordinates are not SAP's. Stepped with SAP, the
    revolute four-bar stays closed."""
    from sap_common.model import ConstraintType
    from sap_ref.holonomic import constraint_kinematics
    from sap_ref.kinematics import body_jacobians, forward_kinematics, motion_subspaces
    from sap_ref.solver import SolverSAP

    def add(b, coupler, rocker, X_p, X_c):
        adder = {"revolute": lambda **k: b.add_joint_revolute(axis=(0, 1, 0), **k), "ball": b.add_joint_ball,
                 "fixed": b.add_joint_fixed}[kind]
        adder(parent=coupler, child=rocker, parent_xform=X_p, child_xform=X_c, label="loop")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = sap_newton.to_sap_model(_newton_fourbar(add))
    assert m.joint_count == 3 and m.joint_coord_count == 3
    assert tuple(ConstraintType(int(t)).name for t in m.constraint_type) == types
    assert m.constraint_body_a[0] == 1 and m.constraint_body_b[0] == 2
    np.testing.assert_allclose(m.constraint_X_a[0, :3], [0.45, 0, 0], rtol=1e-7)
    if kind != "revolute":
        return
    np.testing.assert_allclose(m.constraint_axis[1], [0, 1, 0])
    state = m.state()
    solver = SolverSAP(m, max_rigid_contact=0, contact_preset_variant="drake")
    for _ in range(200):
        solver.step(state, state, m.control(), None, 2e-3)
    q = state.joint_q[0]
    body_q = forward_kinematics(m, q)
    J_b = body_jacobians(m, q, body_q, motion_subspaces(m, q, body_q))
    gap = max(np.abs(constraint_kinematics(m, k, q, body_q, J_b)[0]).max() for k in range(m.constraint_count))
    # Near-rigid rows are compliant by R = β²w/(4π²): the gap follows the load (1.2e-4 m here,
    # swinging at 2 ms steps), and an open loop would drift by the links' lengths.
    assert gap < LOOP_GAP_MAX and abs(q[0] - m.joint_q_init[0]) > 0.1  # it swung, the loop held


def test_a_prismatic_loop_joint_is_refused():
    def add(b, coupler, rocker, X_p, X_c):
        b.add_joint_prismatic(parent=coupler, child=rocker, parent_xform=X_p, child_xform=X_c, axis=(1, 0, 0),
                              label="slider")

    with pytest.raises(ValueError, match="'slider'.*closes a loop.*PRISMATIC"):
        sap_newton.to_sap_model(_newton_fourbar(add))


def test_newton_twin_of_fourbar_gives_the_same_model():
    """The built-in fourbar (a ball constraint closing the loop, the rocker's limit) built in
    Newton with the loop as a second parent BALL joint of the rocker: the same model to Newton's
    float32, the ball constraint included."""
    from sap_common import scenes

    ours = scenes.get("fourbar").sap_model
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = sap_newton.to_sap_model(fourbar_newton())
    for f in ("body_mass", "body_com", "body_inertia", "joint_type", "joint_parent", "joint_child", "joint_X_p",
              "joint_X_c", "joint_axis", "joint_damping", "joint_limit_lower", "joint_limit_upper", "gravity",
              "constraint_type", "constraint_body_a", "constraint_body_b", "constraint_X_a", "constraint_X_b",
              "constraint_row_start", "joint_q_init"):
        _close(f, getattr(theirs, f), getattr(ours, f))
    _close("joint_limit_ke", theirs.joint_limit_ke[2], ours.joint_limit_ke[2])
    _close("joint_limit_kd", theirs.joint_limit_kd[2], ours.joint_limit_kd[2])


def test_newton_twin_of_geared_pair_gives_the_same_model():
    """The built-in geared_pair built in Newton, the gear as a mimic joint (output = 0.1 − 0.5·motor):
    the same model to Newton's float32, the coupler included (its name aside: sap_newton names a
    mimic after its follower)."""
    from sap_common import scenes

    ours = scenes.get("geared_pair").sap_model
    theirs = sap_newton.to_sap_model(geared_pair_newton())
    for f in ("body_mass", "body_com", "body_inertia", "joint_type", "joint_parent", "joint_child", "joint_X_p",
              "joint_X_c", "joint_axis", "joint_armature", "joint_damping", "joint_target_ke", "joint_target_kd",
              "joint_limit_lower", "joint_limit_upper", "gravity", "constraint_type", "constraint_joint0",
              "constraint_joint1", "constraint_gear_ratio", "constraint_offset", "constraint_row_start",
              "joint_q_init"):
        _close(f, getattr(theirs, f), getattr(ours, f))
    # The motor's drive clamp; the undriven output's effort limit clamps nothing (Newton's default
    # 1e6 N·m, the builder's inf).
    _close("joint_effort_limit", theirs.joint_effort_limit[0], ours.joint_effort_limit[0])
    assert theirs.constraint_name == ("mimic:output",) and ours.constraint_name == ("gear_mesh",)



def test_newton_twin_of_weld_drop_gives_the_same_model():
    """The built-in weld_drop built in Newton, the weld a FIXED loop joint between the two free
    bodies: the same bodies, free joints at the same poses and the same weld frames to Newton's
    float32 (shapes aside: Newton's default contact gap and margins are not the scene's)."""
    from sap_common import scenes

    ours = scenes.get("weld_drop").sap_model
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = sap_newton.to_sap_model(weld_drop_newton())
    for f in ("body_mass", "body_com", "body_inertia", "joint_type", "joint_parent", "joint_child", "joint_X_p",
              "joint_X_c", "gravity", "constraint_type", "constraint_body_a", "constraint_body_b", "constraint_X_a",
              "constraint_X_b", "constraint_row_start", "joint_q_init"):
        _close(f, getattr(theirs, f), getattr(ours, f))
    assert theirs.constraint_name == ("loop:weld",) and theirs.joint_name == ours.joint_name


# MJCF equalities of each kind Newton's importer projects: a connect closing a loop (the partner
# point compiles to the rocker's origin), a weld between two free bodies, a joint equality within
# one tree, and an inactive connect.
_EQ_MJCF = """<mujoco><worldbody>
  <body name="l0" pos="0 0 1"><joint name="j0" type="hinge" axis="0 1 0"/>
    <inertial pos="0.1 0 0" mass="1" diaginertia="0.001 0.01 0.01"/>
    <body name="l1" pos="0.2 0 0"><joint name="j1" type="hinge" axis="0 1 0"/>
      <inertial pos="0.15 0 0" mass="1" diaginertia="0.001 0.01 0.01"/></body></body>
  <body name="r" pos="0.5 0 1"><joint name="jr" type="hinge" axis="0 1 0"/>
    <inertial pos="0 0 -0.1" mass="1" diaginertia="0.01 0.01 0.001"/></body>
  <body name="f" pos="0 0.5 1"><freejoint/><inertial pos="0 0 0" mass="1" diaginertia="0.01 0.01 0.01"/></body>
  <body name="g" pos="0.3 0.5 1.1" quat="0.9 0.1 0.2 0.3"><freejoint/>
    <inertial pos="0 0 0" mass="1" diaginertia="0.01 0.01 0.01"/></body>
</worldbody><equality>
  <connect name="pin" body1="l1" body2="r" anchor="0.3 0 0"/>
  <weld name="glue" body1="f" body2="g"/>
  <joint name="gear" joint1="j1" joint2="j0" polycoef="0 -0.5 0 0 0"/>
  <connect name="off" body1="l0" body2="f" anchor="0 0 0" active="false"/>
</equality></mujoco>"""


def test_mjcf_equalities_through_newtons_importer_are_mapped():
    """Newton's MJCF importer turns connect into a BALL loop joint, weld into a FIXED one and a
    joint equality into a mimic, keeping the MuJoCo rows for its MuJoCo solver: sap_newton maps
    the projections to the constraints load_mjcf gives (ball, weld, coupler, all holding at the
    initial state), and leaves the inactive connect's disabled loop joint open."""
    from sap_common.model import ConstraintType
    from sap_ref.holonomic import constraint_kinematics
    from sap_ref.kinematics import body_jacobians, forward_kinematics, motion_subspaces

    with pytest.warns(UserWarning, match="inactive equality constraints"):
        ours = load_mjcf(_EQ_MJCF)
    b = newton.ModelBuilder()
    b.add_mjcf(_EQ_MJCF)
    with pytest.warns(UserWarning) as record:
        conv = sap_newton.convert_model(b.finalize(device="cpu"))
    theirs = conv.sap_model
    assert [n for n in conv.notes if "loop" in n or "equality" in n] == ["disabled loop joints left open: 'off' (1)"]
    assert str(record[0].message).endswith("disabled loop joints left open: 'off' (1)")
    types = lambda m: sorted(ConstraintType(int(t)).name for t in m.constraint_type)  # noqa: E731
    assert types(theirs) == types(ours.sap_model) == ["BALL", "COUPLER", "WELD"]
    k = list(theirs.constraint_type).index(int(ConstraintType.COUPLER))
    assert theirs.joint_name[theirs.constraint_joint0[k]].endswith("/j1") and theirs.constraint_gear_ratio[k] == -0.5
    assert theirs.constraint_offset[k] == 0.0
    q = theirs.joint_q_init
    body_q = forward_kinematics(theirs, q)
    J_b = body_jacobians(theirs, q, body_q, motion_subspaces(theirs, q, body_q))
    for k in range(theirs.constraint_count):
        g = constraint_kinematics(theirs, k, q, body_q, J_b)[0]
        np.testing.assert_allclose(g, 0.0, atol=FLOAT32_RTOL, err_msg=theirs.constraint_name[k])



def test_mujoco_equality_rows_without_a_projection():
    """Rows added with ``newton.solvers.mujoco.add_equality_*`` (no loop joint, no mimic): a
    connect becomes a ball (body2's point where the anchor sits at the reference pose: FREE
    joints at joint_q, hinges at 0), a weld a weld (its relpose, or the bodies' relative pose at
    the reference pose), a linear joint equality a coupler; a nonlinear one is ignored by label
    (noted)."""
    from sap_common.model import ConstraintType

    eq = newton.solvers.mujoco
    b = newton.ModelBuilder()
    bob = b.add_link(xform=wp.transform((0.3, 0.0, 1.0), wp.quat_identity()), mass=1.0,
                     inertia=wp.mat33(np.eye(3) * 0.01), label="bob")
    b.add_articulation([b.add_joint_free(bob)])
    arm = b.add_link(mass=1.0, inertia=wp.mat33(np.eye(3) * 0.01))
    arm2 = b.add_link(mass=1.0, inertia=wp.mat33(np.eye(3) * 0.01))
    j0 = b.add_joint_revolute(-1, arm, parent_xform=wp.transform((0, 1, 1), wp.quat_identity()), axis=(0, 1, 0))
    j1 = b.add_joint_revolute(arm, arm2, parent_xform=wp.transform((0.2, 0, 0), wp.quat_identity()), axis=(0, 1, 0))
    b.add_articulation([j0, j1])
    b.joint_q[8] = 0.7  # arm2's hinge away from 0: the reference pose is at 0
    eq.add_equality_connect(b, bob, arm2, anchor=(-0.1, 0.0, 0.2), label="tether")
    eq.add_equality_joint(b, j1, j0, polycoef=(0.2, -0.5), label="gear")
    eq.add_equality_weld(b, arm2, bob, label="glue")  # relpose: the bodies' pose at the reference pose
    eq.add_equality_joint(b, j1, j0, polycoef=(0.0, 1.0, 0.3), label="cam")
    model = b.finalize(device="cpu")
    with pytest.warns(UserWarning, match="ignored.*'cam'"):
        m = sap_newton.to_sap_model(model)
    assert m.constraint_name == ("equality:tether", "equality:glue", "equality:gear")
    assert [ConstraintType(int(t)) for t in m.constraint_type] == [ConstraintType.BALL, ConstraintType.WELD,
                                                                   ConstraintType.COUPLER]
    assert (m.constraint_body_a[0], m.constraint_body_b[0]) == (0, 2)
    # At the reference pose the anchor (0.2, 0, 1.2) in world lies at (0, -1, 0.2) in arm2's frame.
    _close("p_AP", m.constraint_X_a[0, :3], [-0.1, 0.0, 0.2])
    _close("p_BQ", m.constraint_X_b[0, :3], [0.0, -1.0, 0.2])
    assert m.constraint_gear_ratio[2] == -0.5 and m.constraint_offset[2] == pytest.approx(0.2, rel=FLOAT32_RTOL)
    assert (m.constraint_joint0[2], m.constraint_joint1[2]) == (2, 1)
    # The weld: frame P on arm2 where bob's origin sits at the reference pose, Q = bob's frame.
    assert (m.constraint_body_a[1], m.constraint_body_b[1]) == (2, 0)
    _close("X_AP", m.constraint_X_a[1], [0.1, -1.0, 0.0, 0, 0, 0, 1])
    _close("X_BQ", m.constraint_X_b[1], [0, 0, 0, 0, 0, 0, 1])
    # Newton's MuJoCo solver holds the same points and frames (its rows' eq_data; quaternions wxyz).
    pytest.importorskip("mujoco")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mj = newton.solvers.SolverMuJoCo(model, use_mujoco_cpu=True).mj_model
    # The model's rows come first, in order (further weld rows of Newton's own follow them).
    connect, weld = (int(np.flatnonzero(mj.eq_type == k)[0]) for k in (0, 1))  # mjEQ_CONNECT, mjEQ_WELD
    _close("MuJoCo anchor", mj.eq_data[connect, 0:3], m.constraint_X_a[0, :3])
    _close("MuJoCo partner", mj.eq_data[connect, 3:6], m.constraint_X_b[0, :3])
    _close("MuJoCo weld anchor", mj.eq_data[weld, 0:3], m.constraint_X_b[1, :3])
    X_AP = m.constraint_X_a[1]
    _close("MuJoCo relpose", mj.eq_data[weld, 3:10], [*X_AP[:3], X_AP[6], *X_AP[3:6]])


def test_kinematic_body_maps_to_body_kinematic():
    """BodyFlags.KINEMATIC → SapModel.body_kinematic: a kinematic belt on a prismatic joint at
    0.5 m/s under a box, stepped by sap_newton.SolverSAP (Newton's own contacts): the belt keeps
    its velocity, its coordinate advances by h·v, and friction carries the box at its speed."""
    b = newton.ModelBuilder()
    belt = b.add_link(mass=1.0, inertia=wp.mat33(np.eye(3) * 0.01), is_kinematic=True, label="conveyor")
    b.add_shape_box(belt, hx=1.0, hy=0.3, hz=0.02)
    joint = b.add_joint_prismatic(-1, belt, axis=newton.Axis.X,
                                  parent_xform=wp.transform((0, 0, -0.02), wp.quat_identity()), label="belt")
    b.add_articulation([joint])
    b.joint_qd[b.joint_qd_start[joint]] = 0.5
    box = b.add_body(mass=1.0, inertia=wp.mat33(np.eye(3) * 0.01),
                     xform=wp.transform((0, 0, 0.1), wp.quat_identity()), label="box")
    b.add_shape_box(box, hx=0.1, hy=0.1, hz=0.1)
    model = b.finalize(device="cpu")
    sap_model = sap_newton.convert_model(model).sap_model
    assert sap_model.body_kinematic.tolist() == [True, False]
    solver = sap_newton.SolverSAP(model)
    s0, s1, control = model.state(), model.state(), model.control()
    pipeline = newton.CollisionPipeline(model)
    contacts = pipeline.contacts()
    steps, dt = 300, 1e-3
    for _ in range(steps):
        pipeline.collide(s0, contacts)
        solver.step(s0, s1, control, contacts, dt)
        s0, s1 = s1, s0
        assert s0.joint_qd.numpy()[0] == np.float32(0.5)
    assert s0.joint_q.numpy()[0] == pytest.approx(steps * dt * 0.5, rel=1e-5)  # float32 sums
    # Carried at the belt's speed after 0.3 s: the COM's 0.0005 m/s above it is the box still
    # rocking as it settles on Newton's default (soft) material, ω × r.
    assert abs(s0.body_qd.numpy()[box][0] - 0.5) < 0.01

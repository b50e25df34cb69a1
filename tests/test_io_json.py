"""sap_common.io.load_json and the Drake helpers, on every committed Drake anchor."""

import copy
import json

import numpy as np
import pytest

from sap_common import spatial
from sap_common.config import SapConfig
from sap_common.conventions import joint_qd_public_to_sap
from sap_common.io import body_pose_error, drake_qv_to_joint, load_json, load_recording, recorded_body_indices
from sap_common.model import JointType, ShapeType
from conftest import DATA, DRAKE_ANCHORS

# The anchors' own self-check of body poses is ≤ 1e-15; the loader must keep 1e-12.
INITIAL_POSE_TOL = 1e-12


@pytest.mark.parametrize("path", DRAKE_ANCHORS, ids=lambda p: p.stem)
def test_anchor_loads_and_initial_poses_match(path):
    spec = json.loads(path.read_text())
    scene = load_json(path)
    rec = load_recording(scene)
    idx = recorded_body_indices(scene, spec["recording"]["bodies"])
    dp, dr = body_pose_error(scene.state.body_q[0, idx], rec["body_pose_W"][0])
    assert dp <= INITIAL_POSE_TOL and dr <= INITIAL_POSE_TOL
    assert scene.dt == spec["plant"]["time_step"] and scene.num_steps == spec["recording"]["num_steps"]
    assert scene.sap_model.joint_dof_count == spec["plant"]["nv"]
    assert scene.body_names == tuple(b["name"] for b in spec["bodies"][1:])
    assert scene.max_rigid_contact >= spec["recording"]["max_contacts_C"]
    cfg = SapConfig.from_preset(**scene.solver_kwargs)
    assert cfg.contact_preset_variant == "drake" and cfg.line_search_variant == "exact_root"
    assert cfg.line_search_max_iterations == 100 and cfg.max_iterations == 100
    # The initial state is Drake's q0/v0 mapped to our coordinates.
    q, qd = drake_qv_to_joint(scene, spec["state"]["q0"], spec["state"]["v0"])
    np.testing.assert_allclose(scene.state.joint_q[0], q, atol=1e-15)
    np.testing.assert_allclose(scene.state.joint_qd[0], qd, atol=1e-15)


def test_candidate_pairs_and_materials_are_drakes():
    scene = load_json(DATA / "drake" / "sphere_slide.json")
    m = scene.sap_model
    assert m.shape_type.tolist() == [ShapeType.PLANE, ShapeType.SPHERE]
    assert m.shape_body.tolist() == [-1, 0]
    np.testing.assert_array_equal(m.shape_material_ke, [1e5, 1e5])
    np.testing.assert_array_equal(m.shape_material_tau, [0.0, 0.02])
    np.testing.assert_array_equal(m.shape_material_mu, [0.3, 0.6])  # dynamic friction only
    assert m.shape_pair.tolist() == [[0, 1]]
    box = load_json(DATA / "drake" / "box_corners_slide.json").sap_model
    assert box.shape_pair.tolist() == [[0, k] for k in range(1, 9)]  # ground vs 8 corners, not corner-corner


def test_actuator_becomes_drive_armature_and_targets():
    scene = load_json(DATA / "drake" / "prismatic_pd.json")
    m, c = scene.sap_model, scene.control
    assert JointType(int(m.joint_type[0])) == JointType.PRISMATIC
    assert m.joint_armature[0] == pytest.approx(0.4)  # 1e-3 · 20²
    assert (m.joint_target_ke[0], m.joint_target_kd[0], m.joint_effort_limit[0]) == (400.0, 40.0, 60.0)
    assert m.joint_damping[0] == 2.0
    assert (c.joint_target_pos[0, 0], c.joint_target_vel[0, 0], c.joint_act[0, 0]) == (0.5, 0.0, 0.0)


def test_limits_use_drakes_limit_constraint():
    scene = load_json(DATA / "drake" / "pendulum_limit.json")
    m = scene.sap_model
    assert (m.joint_limit_lower[0], m.joint_limit_upper[0]) == (-0.5, 0.9)
    # k = 1e12 and τ = kd/ke = h (docs/formulation.md § Limits).
    assert m.joint_limit_ke[0] == 1e12 and m.joint_limit_kd[0] / m.joint_limit_ke[0] == pytest.approx(scene.dt)


def test_free_body_velocity_orders():
    path = DATA / "drake" / "free_spin.json"
    scene = load_json(path)
    rec = load_recording(scene)
    q, qd_sap = drake_qv_to_joint(scene, rec["q"][5], rec["v"][5], joint_qd_order="sap")
    _, qd_pub = drake_qv_to_joint(scene, rec["q"][5], rec["v"][5], joint_qd_order="public")
    np.testing.assert_array_equal(qd_sap, rec["v"][5])  # Drake's v is our SAP order
    np.testing.assert_allclose(joint_qd_public_to_sap(scene.sap_model, q, qd_pub), qd_sap, atol=1e-15)
    # Quaternion reordered wxyz -> xyzw, not normalized (Drake's |q| drifts; docs/formulation.md § Integration).
    np.testing.assert_array_equal(q[3:7], rec["q"][5][[1, 2, 3, 0]])
    assert np.linalg.norm(rec["q"][-1][:4]) > 1.01  # the drift is really in the data
    # The initial public velocity is the recorded COM velocity.
    spec = json.loads(path.read_text())
    np.testing.assert_allclose(scene.state.joint_qd[0, :3], spec["bodies"][1]["initial_velocity_W"]["v_WBcm_W"],
                               atol=1e-14)


def test_replicated_scene():
    scene = load_json(DATA / "drake" / "sphere_drop.json", num_worlds=5)
    assert scene.sap_model.num_worlds == 5 and scene.state.joint_q.shape == (5, 7)
    assert np.all(scene.state.joint_q == scene.state.joint_q[:1])
    again = scene.replicate(2)
    assert again.state.body_q.shape == (2, 1, 7) and again.control.joint_f.shape == (2, 6)


def _pendulum_spec():
    return json.loads((DATA / "drake" / "pendulum_limit.json").read_text())


def test_ball_rpy_loads_as_quaternion_ball_joint():
    spec = _pendulum_spec()
    j = spec["joints"][0]
    j.update(type="ball_rpy", nq=3, nv=3, position_lower_limits=["-inf"] * 3,
             position_upper_limits=["inf"] * 3, damping=[0.0] * 3)
    spec["state"]["q0"], spec["state"]["v0"] = [0.3, -0.2, 0.5], [0.1, 0.2, 0.3]
    scene = load_json(spec)
    m = scene.sap_model
    assert JointType(int(m.joint_type[0])) == JointType.BALL
    R = spatial.quat_to_matrix(scene.state.joint_q[0])
    Rx, Ry, Rz = (spatial.quat_to_matrix(spatial.quat_from_axis_angle(np.eye(3)[i], a))
                  for i, a in enumerate([0.3, -0.2, 0.5]))
    np.testing.assert_allclose(R, Rz @ Ry @ Rx, atol=1e-15)
    np.testing.assert_array_equal(scene.state.joint_qd[0], [0.1, 0.2, 0.3])
    assert scene.source is None and scene.name == "pendulum_limit"


BAD_SPECS = [
    (lambda s: s["joints"][0].update(type="screw"), r"joint 'hinge'.*joint type 'screw' is not supported; valid: quaternion_floating, revolute"),
    (lambda s: s["joints"][0].update(parent_body="moon"), r"joint 'hinge'.*unknown body 'moon'; bodies: world, pendulum"),
    (lambda s: s["plant"].update(time_step=0.0), r"plant.time_step must be > 0 s"),
    (lambda s: s.pop("bodies"), r"missing required key 'bodies'"),
    (lambda s: s["bodies"][1].update(mass=-1.0), r"mass must be finite and >= 0"),
    (lambda s: s["geometries"].append({"index": 0, "name": "cyl", "body": "pendulum", "body_index": 1,
                                       "shape": {"type": "cylinder"}, "X_BG": {"p": [0, 0, 0], "quat_xyzw": [0, 0, 0, 1]},
                                       "point_contact_stiffness": 1e6, "relaxation_time": 0.1, "dynamic_friction": 0.5}),
     r"shape 'cylinder' is not supported; valid: sphere, box, half_space"),
    (lambda s: s["sap_internals"]["solver_parameters"].update(line_search_type="wolfe"), r"line_search_type: 'wolfe' is not supported"),
]


@pytest.mark.parametrize("edit,match", BAD_SPECS)
def test_bad_scene_files(edit, match):
    spec = copy.deepcopy(_pendulum_spec())
    edit(spec)
    with pytest.raises(ValueError, match=match):
        load_json(spec)


def test_not_json(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{not json")
    with pytest.raises(ValueError, match=r"x.json: not valid JSON"):
        load_json(p)
    with pytest.raises(ValueError, match=r"path_or_dict: expected a path or a dict"):
        load_json(3)

"""sap_common.io.load_json and the Drake helpers, on every committed Drake anchor."""

import copy
import json
import os
import re

import numpy as np
import pytest
from conftest import DATA, DRAKE_ANCHORS
from hypothesis import given, settings
from hypothesis import strategies as st

from sap_common import spatial
from sap_common.config import SapConfig
from sap_common.conventions import joint_qd_public_to_sap
from sap_common.io import body_pose_error, drake_qv_to_joint, load_json, load_recording, recorded_body_indices
from sap_common.model import JointType, ShapeType

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
    for bad in (0, -1, 2.0, False):  # the argument named, not the file's bodies, before the file is read
        with pytest.raises(ValueError, match=r"^num_worlds: must be an integer >= 1, got "):
            load_json(DATA / "drake" / "no_such_file.json", num_worlds=bad)
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


def _box_spec():
    return json.loads((DATA / "drake" / "box_corners_slide.json").read_text())


def _pd_spec():
    return json.loads((DATA / "drake" / "prismatic_pd.json").read_text())


def _dp_spec():
    return json.loads((DATA / "drake" / "double_pendulum.json").read_text())


def _dp_anchor_spec():
    """The double pendulum with a body ``anchor`` welded to the world (joint ``anchor_weld``)."""
    spec = _dp_spec()
    spec["bodies"].append({"index": 3, "name": "anchor", "mass": 1.0, "com_B": [0, 0, 0],
                           "inertia_about_com_B": [[1, 0, 0], [0, 1, 0], [0, 0, 1]]})
    last = max(spec["joints"], key=lambda j: j["v_start"])
    spec["joints"].append({"name": "anchor_weld", "type": "weld", "parent_body": "world", "child_body": "anchor",
                           "q_start": last["q_start"] + last["nq"], "v_start": last["v_start"] + last["nv"],
                           "nq": 0, "nv": 0, "frame_on_parent_F": {"X_PF": _IDENTITY},
                           "frame_on_child_M": {"X_CM": _IDENTITY}})
    return spec


_IDENTITY = {"p": [0, 0, 0], "quat_xyzw": [0, 0, 0, 1]}
_DISTANCE = dict(type="distance", body_A="link1", p_AP=[0, 0, 0], body_B="link2", p_BQ=[0, 0, 0.1], distance=0.5,
                 stiffness=100.0)


def _with_constraint(spec=None, **c):
    spec = _dp_spec() if spec is None else spec
    spec["constraints"] = [c]
    return spec


def _set(path, value):
    """An edit that sets ``spec[path...] = value`` (path: keys and list indices)."""
    def edit(spec):
        c = spec
        for k in path[:-1]:
            c = c[k]
        c[path[-1]] = value
        return spec
    return edit


def _delete(path):
    def edit(spec):
        c = spec
        for k in path[:-1]:
            c = c[k]
        del c[path[-1]]
        return spec
    return edit


def _shaped(shape):
    def make(spec):
        spec["geometries"].append({"index": 0, "name": "g", "body": "pendulum", "body_index": 1,
                                   "shape": shape, "X_BG": {"p": [0, 0, 0], "quat_xyzw": [0, 0, 0, 1]},
                                   "point_contact_stiffness": 1e6, "relaxation_time": 0.1, "dynamic_friction": 0.5})
        return spec
    return make


# The catalogue of malformed scene files: (make the spec from a good one, the message after
# "<file>: "; a regex). Each names the JSON path of the bad value and what was expected there.
MALFORMED = {
    "top-level list": (lambda: [_pendulum_spec()], r"top level: expected an object with keys plant, bodies, joints"),
    "top-level number": (lambda: 3, r"top level: expected an object .*got the number 3"),
    "no plant": (lambda: _delete(["plant"])(_pendulum_spec()), r"plant: missing; expected an object"),
    "time step zero": (lambda: _set(["plant", "time_step"], 0.0)(_pendulum_spec()),
                       r"plant\.time_step: expected a finite number > 0 \[s\], got 0\.0"),
    "time step string": (lambda: _set(["plant", "time_step"], "1ms")(_pendulum_spec()),
                         r"plant\.time_step: expected a finite number > 0 \[s\], got the string '1ms'"),
    "gravity of 2": (lambda: _set(["plant", "gravity_W"], [0, -9.81])(_pendulum_spec()),
                     r"plant\.gravity_W: expected a list of 3 numbers, got a list of 2"),
    "no bodies": (lambda: _delete(["bodies"])(_pendulum_spec()), r"^bodies: missing; expected a non-empty list"),
    "bodies an object": (lambda: _set(["bodies"], {})(_pendulum_spec()),
                         r"^bodies: expected a non-empty list of bodies \(body 0 is the world\), got an object"),
    "bodies empty": (lambda: _set(["bodies"], [])(_pendulum_spec()),
                     r"^bodies: expected a non-empty list .*got a list of 0"),
    "body a string": (lambda: _set(["bodies", 1], "pendulum")(_pendulum_spec()),
                      r"bodies\[1\]: expected a body object .*got the string 'pendulum'"),
    "no world body": (lambda: _delete(["bodies", 0])(_pendulum_spec()),
                      r"^bodies: no body with index 0 \(the world body\)"),
    "body index twice": (lambda: _set(["bodies", 1, "index"], 0)(_pendulum_spec()),
                         r"bodies\[1\]\.index: body index 0 is used twice"),
    "mass missing": (lambda: _delete(["bodies", 1, "mass"])(_pendulum_spec()),
                     r"bodies\[1\]\.mass: missing; expected a finite number >= 0 \[kg\]"),
    "mass a string": (lambda: _set(["bodies", 1, "mass"], "heavy")(_pendulum_spec()),
                      r"bodies\[1\]\.mass: expected a finite number >= 0 \[kg\], got the string 'heavy'"),
    "mass negative": (lambda: _set(["bodies", 1, "mass"], -1.0)(_pendulum_spec()),
                      r"bodies\[1\]\.mass: expected a finite number >= 0 \[kg\], got -1\.0"),
    "mass NaN": (lambda: _set(["bodies", 1, "mass"], float("nan"))(_pendulum_spec()),
                 r"bodies\[1\]\.mass: expected a finite number >= 0 \[kg\], got nan"),
    "mass true": (lambda: _set(["bodies", 1, "mass"], True)(_pendulum_spec()),
                  r"bodies\[1\]\.mass: expected a finite number .*got the boolean true"),
    "com of 2": (lambda: _set(["bodies", 1, "com_B"], [0, 0])(_pendulum_spec()),
                 r"bodies\[1\]\.com_B: expected a list of 3 numbers, got a list of 2"),
    "com infinite": (lambda: _set(["bodies", 1, "com_B"], [0, float("inf"), 0])(_pendulum_spec()),
                     r"bodies\[1\]\.com_B\[1\]: expected a finite number \[m\], got inf"),
    "inertia 2x3": (lambda: _set(["bodies", 1, "inertia_about_com_B"], [[1, 0, 0], [0, 1, 0]])(_pendulum_spec()),
                    r"bodies\[1\]\.inertia_about_com_B: expected a 3x3 matrix"),
    "inertia row short": (lambda: _set(["bodies", 1, "inertia_about_com_B", 2], [0, 1])(_pendulum_spec()),
                          r"bodies\[1\]\.inertia_about_com_B\[2\]: expected a list of 3 numbers, got a list of 2"),
    "inertia not SPD": (lambda: _set(["bodies", 1, "inertia_about_com_B"], [[1, 0, 0], [0, -1, 0], [0, 0, 1]])(
        _pendulum_spec()), r"bodies\[1\]: add_body\(name='pendulum'\): inertia"),
    "body without a joint": (lambda: _delete(["joints", 0])(_pendulum_spec()),
                             r"bodies\[1\]: body 'pendulum' is the child of no joint"),
    "joints an object": (lambda: _set(["joints"], {"hinge": 1})(_pendulum_spec()),
                         r"^joints: expected a list, got an object"),
    "joint type screw": (lambda: _set(["joints", 0, "type"], "screw")(_pendulum_spec()),
                         r"joints\[0\]\.type: expected one of quaternion_floating, revolute, prismatic, ball_rpy, "
                         r"weld, got the string 'screw'"),
    "nq of a float": (lambda: _set(["joints", 0, "nq"], 1.0)(_pendulum_spec()),
                      r"joints\[0\]\.nq: expected an integer >= 0, got the number 1\.0"),
    "nq wrong for the type": (lambda: _set(["joints", 0, "nq"], 2)(_pendulum_spec()),
                              r"joints\[0\]: a revolute joint has nq = 1 and nv = 1, got nq = 2, nv = 1"),
    "unknown parent body": (lambda: _set(["joints", 0, "parent_body"], "moon")(_pendulum_spec()),
                            r"joints\[0\]\.parent_body: unknown body 'moon'; bodies: world, pendulum"),
    "no X_PF": (lambda: _delete(["joints", 0, "frame_on_parent_F", "X_PF"])(_pendulum_spec()),
                r"joints\[0\]\.frame_on_parent_F\.X_PF: missing; expected a pose"),
    "quaternion of 3": (lambda: _set(["joints", 0, "frame_on_child_M", "X_CM", "quat_xyzw"], [0, 0, 1])(
        _pendulum_spec()), r"joints\[0\]\.frame_on_child_M\.X_CM\.quat_xyzw: expected a list of 4 numbers, "
                           r"got a list of 3"),
    "zero quaternion": (lambda: _set(["joints", 0, "frame_on_child_M", "X_CM", "quat_xyzw"], [0, 0, 0, 0])(
        _pendulum_spec()), r"X_CM\.quat_xyzw: expected a non-zero quaternion"),
    "axis zero": (lambda: _set(["joints", 0, "axis"], [0, 0, 0])(_pendulum_spec()),
                  r"joints\[0\]: add_joint_revolute.*axis"),
    "limit NaN": (lambda: _set(["joints", 0, "position_lower_limits"], [float("nan")])(_pendulum_spec()),
                  r"joints\[0\]\.position_lower_limits\[0\]: expected a number \(or \"inf\"/\"-inf\"\), got nan"),
    "limit string": (lambda: _set(["joints", 0, "position_upper_limits"], ["infinite"])(_pendulum_spec()),
                     r"joints\[0\]\.position_upper_limits\[0\]: expected a number .*got the string 'infinite'"),
    "q0 short": (lambda: _set(["state", "q0"], [])(_pendulum_spec()),
                 r"state\.q0: expected at least 1 numbers .*got 0"),
    "v0 string": (lambda: _set(["state", "v0"], "zero")(_pendulum_spec()),
                  r"state\.v0: expected a list of numbers, got the string 'zero'"),
    "actuator on unknown joint": (lambda: _set(["actuation", "actuators", 0, "joint"], "elbow")(_pd_spec()),
                                  r"actuation\.actuators\[0\]\.joint: unknown joint 'elbow'; joints: slide$"),
    "pd flag a string": (lambda: _set(["actuation", "actuators", 0, "pd_controlled"], "yes")(_pd_spec()),
                         r"actuation\.actuators\[0\]\.pd_controlled: expected true or false, got the string 'yes'"),
    "pd gains missing": (lambda: _delete(["actuation", "actuators", 0, "pd_gains", "d"])(_pd_spec()),
                         r"actuation\.actuators\[0\]\.pd_gains\.d: missing; expected a finite number >= 0"),
    "geometries missing": (lambda: _delete(["geometries"])(_box_spec()),
                           r"collision_candidate_pairs\[0\]\.geometries\[0\]: unknown geometry index 0; "
                           r"geometries: \(none\)"),
    "geometry on unknown body": (lambda: _set(["geometries", 1, "body_index"], 7)(_box_spec()),
                                 r"geometries\[1\]\.body_index: unknown body index 7; bodies: 0, 1"),
    "shape capsule": (lambda: _shaped({"type": "capsule"})(_pendulum_spec()),
                      r"geometries\[0\]\.shape\.type: expected one of sphere, box, half_space, cylinder, convex, "
                      r"got the string 'capsule'"),
    "cylinder without length": (lambda: _shaped({"type": "cylinder", "radius": 0.1})(_pendulum_spec()),
                                r"geometries\[0\]\.shape\.length: missing; expected a finite number > 0 \[m\]"),
    "convex with 3 points": (lambda: _shaped({"type": "convex", "vertices": [[0, 0, 0], [1, 0, 0], [0, 1, 0]]})(
        _pendulum_spec()), r"geometries\[0\]\.shape\.vertices: expected a list of at least 4 points"),
    "convex point of 2 numbers": (lambda: _shaped({"type": "convex", "vertices": [[0, 0, 0], [1, 0, 0], [0, 1, 0],
                                                                                   [0, 0]]})(_pendulum_spec()),
                                  r"geometries\[0\]\.shape\.vertices\[3\]: expected a list of 3 numbers"),
    "radius negative": (lambda: _set(["geometries", 1, "shape", "radius"], -0.005)(_box_spec()),
                        r"geometries\[1\]\.shape\.radius: expected a finite number > 0 \[m\], got -0\.005"),
    "stiffness a list": (lambda: _set(["geometries", 1, "point_contact_stiffness"], [1e7])(_box_spec()),
                         r"geometries\[1\]\.point_contact_stiffness: expected a finite number > 0 \[N/m\], "
                         r"got a list of 1"),
    "geometry index twice": (lambda: _set(["geometries", 2, "index"], 1)(_box_spec()),
                             r"geometries\[2\]\.index: geometry index 1 is used twice"),
    "pair of three": (lambda: _set(["collision_candidate_pairs", 0, "geometries"], [0, 1, 2])(_box_spec()),
                      r"collision_candidate_pairs\[0\]\.geometries: expected a list of 2 geometry indices, "
                      r"got a list of 3"),
    "pair with itself": (lambda: _set(["collision_candidate_pairs", 0, "geometries"], [1, 1])(_box_spec()),
                         r"collision_candidate_pairs\[0\]\.geometries: a geometry cannot collide with itself"),
    "unknown geometry in a pair": (lambda: _set(["collision_candidate_pairs", 3, "geometries"], [0, 99])(_box_spec()),
                                   r"collision_candidate_pairs\[3\]\.geometries\[1\]: unknown geometry index 99"),
    "num_steps zero": (lambda: _set(["recording", "num_steps"], 0)(_pendulum_spec()),
                       r"recording\.num_steps: expected an integer >= 1, got the number 0"),
    "line search wolfe": (lambda: _set(["sap_internals", "solver_parameters", "line_search_type"], "wolfe")(
        _pendulum_spec()), r"sap_internals\.solver_parameters\.line_search_type: expected one of exact, backtracking, "
                           r"got the string 'wolfe'"),
    "max_iterations string": (lambda: _set(["sap_internals", "solver_parameters", "max_iterations"], "100")(
        _pendulum_spec()), r"sap_internals\.solver_parameters\.max_iterations: expected an integer >= 1"),
    "scene name a number": (lambda: _set(["scene"], 7)(_pendulum_spec()),
                            r"^scene: expected a string, got the number 7"),
    "approximation tamsi": (lambda: _set(["plant", "discrete_contact_approximation"], "kTamsi")(_box_spec()),
                            r"plant\.discrete_contact_approximation: expected one of kSap, kLagged, kSimilar, got the "
                            r"string 'kTamsi'"),
    "stiction tolerance zero": (lambda: _set(["plant", "stiction_tolerance"], 0.0)(_set(
        ["plant", "discrete_contact_approximation"], "kLagged")(_box_spec())),
        r"plant\.stiction_tolerance: expected a finite number > 0 \[m/s\], got 0\.0"),
    "negative rounding": (lambda: _set(["geometries", 1, "shape", "rounding"], -0.01)(_box_spec()),
                          r"geometries\[1\]\.shape\.rounding: expected a finite number >= 0 \[m\], got -0\.01"),
    "negative Hunt–Crossley dissipation": (lambda: _set(["geometries", 1, "hunt_crossley_dissipation"], -5.0)(
        _box_spec()), r"geometries\[1\]\.hunt_crossley_dissipation: expected a finite number >= 0 \[s/m\], got -5\.0"),
    "hydroelastic contact model": (lambda: _set(["plant", "contact_model"], "kHydroelasticWithFallback")(_box_spec()),
                                   r"plant\.contact_model: 'kHydroelasticWithFallback' is not supported; valid: kPoint "
                                   r"\(this project implements point contact only: Drake's hydroelastic contact"),
    "hydroelastic geometry": (lambda: _set(["geometries", 0, "hydroelastic_modulus"], 1e7)(_box_spec()),
                              r"geometries\[0\]\.hydroelastic_modulus: hydroelastic properties are not supported"),
    # Holonomic constraints (double pendulum: bodies link1, link2; joints joint1, joint2).
    "constraints an object": (lambda: _set(["constraints"], {"type": "ball"})(_dp_spec()),
                              r"^constraints: expected a list, got an object"),
    "constraint type hinge": (lambda: _with_constraint(type="hinge"),
                              r"constraints\[0\]\.type: expected one of coupler, distance, ball, weld, "
                              r"got the string 'hinge'"),
    "coupler unknown joint": (lambda: _with_constraint(type="coupler", joint0="joint1", joint1="elbow", gear_ratio=2.0),
                              r"constraints\[0\]\.joint1: unknown joint 'elbow'; joints: joint1, joint2"),
    "coupler same joint": (lambda: _with_constraint(type="coupler", joint0="joint1", joint1="joint1", gear_ratio=2.0),
                           r"constraints\[0\]: add_coupler\(name='constraint_0'\): joint0 and joint1 must differ"),
    "coupler no ratio": (lambda: _with_constraint(type="coupler", joint0="joint1", joint1="joint2"),
                         r"constraints\[0\]\.gear_ratio: missing; expected a finite number"),
    "coupler on a weld": (lambda: _with_constraint(type="coupler", joint0="joint1", joint1="anchor_weld",
                                                   gear_ratio=1.0, spec=_dp_anchor_spec()),
                          r"constraints\[0\]: add_coupler\(name='constraint_0'\): joint1 'anchor_weld' is a FIXED "
                          r"joint with 0 DOFs; a coupler needs single-DOF joints"),
    "ball unknown body": (lambda: _with_constraint(type="ball", body_A="link1", p_AP=[0, 0, 0], body_B="moon",
                                                   p_BQ=[0, 0, 0]),
                          r"constraints\[0\]\.body_B: unknown body 'moon'; bodies: world, link1, link2"),
    "ball point of 2": (lambda: _with_constraint(type="ball", body_A="link1", p_AP=[0, 0], body_B="link2",
                                                 p_BQ=[0, 0, 0]),
                        r"constraints\[0\]\.p_AP: expected a list of 3 numbers, got a list of 2"),
    "ball one body": (lambda: _with_constraint(type="ball", body_A="link1", p_AP=[0, 0, 0], body_B="link1",
                                               p_BQ=[0, 0, 0]),
                      r"constraints\[0\]: add_ball\(name='constraint_0'\): body_a and body_b must differ"),
    "weld no X_BQ": (lambda: _with_constraint(type="weld", body_A="link1", X_AP=_IDENTITY, body_B="link2"),
                     r"constraints\[0\]\.X_BQ: missing; expected a pose"),
    "weld zero quaternion": (lambda: _with_constraint(type="weld", body_A="link1", X_AP=_IDENTITY, body_B="link2",
                                                      X_BQ={"p": [0, 0, 0], "quat_xyzw": [0, 0, 0, 0]}),
                             r"constraints\[0\]\.X_BQ\.quat_xyzw: expected a non-zero quaternion"),
    "distance negative stiffness": (lambda: _with_constraint(**{**_DISTANCE, "stiffness": -5.0}),
                                    r"constraints\[0\]\.stiffness: expected a number > 0 \(or \"inf\"/\"-inf\"\) "
                                    r"\[N/m\], got -5\.0"),
    "distance zero length": (lambda: _with_constraint(**{**_DISTANCE, "distance": 0.0}),
                             r"constraints\[0\]\.distance: expected a finite number > 0 \[m\], got 0\.0"),
    "distance negative damping": (lambda: _with_constraint(**{**_DISTANCE, "damping": -1.0}),
                                  r"constraints\[0\]\.damping: expected a finite number >= 0 \[N·s/m\], got -1\.0"),
    "distance both on the world": (lambda: _with_constraint(**{**_DISTANCE, "body_A": "world", "body_B": "anchor"},
                                                            spec=_dp_anchor_spec()),
                                   r"^bodies: the model built .*constraint_body_a/body_b\[0\] \(constraint_0\): "
                                   r"both bodies are the world or welded to it"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_scene_file_names_the_file_the_path_and_what_was_expected(tmp_path, case):
    make, message = MALFORMED[case]
    path = tmp_path / "bad_scene.json"
    path.write_text(json.dumps(make()))  # json.dumps writes NaN/Infinity, which json.load reads back
    with pytest.raises(ValueError) as e:
        load_json(path)
    text = str(e.value)
    assert text.startswith(f"{path}: "), text
    assert re.search(message, text[len(f"{path}: "):]), text
    if isinstance(make(), dict):  # a parsed dict gets the same message, naming it a dict
        with pytest.raises(ValueError, match=r"^scene dict: ") as e2:
            load_json(make())
        assert str(e2.value) == "scene dict: " + text[len(f"{path}: "):]


@pytest.mark.parametrize("name, approximation", [("sphere_slide", "sap"), ("sphere_slide_lagged", "lagged"),
                                                 ("incline_stick_slip_similar", "similar")])
def test_the_scene_file_carries_the_contact_approximation(name, approximation):
    """plant.discrete_contact_approximation (kSap, kLagged, kSimilar) becomes the solver's; a
    Hunt–Crossley file also gives its stiction tolerance and each geometry's d."""
    scene = load_json(DATA / "drake" / f"{name}.json")
    cfg = SapConfig.from_preset(**scene.solver_kwargs)
    assert cfg.discrete_contact_approximation == approximation
    if approximation == "sap":
        assert "stiction_tolerance" not in scene.solver_kwargs
        assert np.all(np.isnan(scene.sap_model.shape_material_hcd))  # d is not read under sap
    else:
        assert cfg.stiction_tolerance == 1e-4
        assert not np.any(np.isnan(scene.sap_model.shape_material_hcd))
    if name.startswith("incline"):  # ground d = 20 s/m, the corners 5 s/m
        np.testing.assert_array_equal(scene.sap_model.shape_material_hcd, [20.0, 5.0, 5.0, 5.0, 5.0])


def test_hydroelastic_contact_is_the_stated_limitation():
    """Drake's default contact model (hydroelastic with point fallback) is not implemented: a scene
    recorded with it is refused when loaded, with the reason, not run as point contact."""
    spec = _set(["plant", "contact_model"], "kHydroelasticWithFallback")(
        _set(["plant", "discrete_contact_approximation"], "kLagged")(_box_spec()))
    with pytest.raises(ValueError, match=r"plant\.contact_model: .*point contact only.*contact surface"):
        load_json(spec)
    with pytest.raises(ValueError, match=r"contact_model: 'kHydroelastic' is not supported"):
        load_json(_set(["plant", "contact_model"], "kHydroelastic")(_box_spec()))


def test_every_committed_anchor_still_loads(drake_anchor_paths):
    for path in drake_anchor_paths:
        load_json(path)


# --- Hypothesis: mutate a good file ---------------------------------------------------------

# The top-level keys the loader reads; mutations elsewhere (versions, checks, …) cannot matter.
READ_KEYS = ("scene", "description", "plant", "bodies", "joints", "actuation", "geometries",
             "collision_candidate_pairs", "state", "recording", "sap_internals", "num_steps", "constraints")
MUTATION_SOURCES = ("pendulum_limit", "prismatic_pd", "box_corners_slide", "double_pendulum", "free_spin")
_SPECS = {n: json.loads((DATA / "drake" / f"{n}.json").read_text()) for n in MUTATION_SOURCES}


def _paths(x, prefix=()):
    """Every path (tuple of keys / indices) below ``x``, parents before children."""
    items = x.items() if isinstance(x, dict) else enumerate(x) if isinstance(x, list) else ()
    for k, v in items:
        yield prefix + (k,)
        yield from _paths(v, prefix + (k,))


_MUTABLE = {n: [p for p in _paths(s) if p[0] in READ_KEYS] for n, s in _SPECS.items()}


def _wrong_types(v):
    """JSON values of a different type than ``v`` (and non-finite numbers for a number)."""
    pool = {"string": "x", "null": None, "list": [1, "a"], "object": {"k": 1}, "bool": True, "number": 2.5}
    kind = ("bool" if isinstance(v, bool) else "number" if isinstance(v, (int, float)) else "string"
            if isinstance(v, str) else "list" if isinstance(v, list) else "object" if isinstance(v, dict) else "null")
    out = [w for k, w in pool.items() if k != kind]
    if kind == "number":
        out += [float("nan"), float("inf"), float("-inf")]
    return out


def _json_path(p) -> str:
    s = ""
    for k in p:
        s += f"[{k}]" if isinstance(k, int) else f"[{json.dumps(k)}]" if not k.isidentifier() else (f".{k}" if s else k)
    return s


# "<file>: <path>: <what>": a path is keys and [indices], starting at a top-level key.
_ERROR = re.compile(r'^(?P<path>top level|[A-Za-z_]\w*(?:\[\d+\]|\["[^"]+"\]|\.[A-Za-z_]\w*)*): \S')


@st.composite
def _mutations(draw, max_edits):
    name = draw(st.sampled_from(MUTATION_SOURCES))
    spec = copy.deepcopy(_SPECS[name])
    edits = []
    for _ in range(draw(st.integers(1, max_edits))):
        paths = [p for p in _paths(spec) if p[0] in READ_KEYS]
        p = draw(st.sampled_from(paths))
        parent = spec
        for k in p[:-1]:
            parent = parent[k]
        if draw(st.booleans()):
            del parent[p[-1]]
            edits.append(("delete", p))
        else:
            parent[p[-1]] = draw(st.sampled_from(_wrong_types(parent[p[-1]])))
            edits.append(("replace", p))
    return name, spec, edits


def _load_mutated(tmp_path, spec):
    path = tmp_path / "mutated.json"
    path.write_text(json.dumps(spec))
    try:
        load_json(path)
    except ValueError as e:
        text = str(e)
        assert text.startswith(f"{path}: "), text
        m = _ERROR.match(text[len(f"{path}: "):])
        assert m, f"no JSON path in: {text}"
        top = re.split(r"[.\[]", m["path"])[0]
        assert m["path"] == "top level" or top in READ_KEYS, text
        return m["path"]
    return None


@settings(max_examples=int(os.environ.get("SAP_JSON_MUTATIONS", "150")))
@given(_mutations(max_edits=1))
def test_one_mutation_loads_or_names_the_mutated_path(tmp_path_factory, mutation):
    """Delete a key or replace a value by one of another type: the file loads, or the error names
    the file and a path; a replaced value that is rejected is named itself (or its container)."""
    _, spec, [(op, p)] = mutation
    where = _load_mutated(tmp_path_factory.mktemp("m"), spec)
    if where is not None and op == "replace":
        mutated = _json_path(p)
        assert where.startswith(mutated) or mutated.startswith(where), (where, mutated)


@settings(max_examples=int(os.environ.get("SAP_JSON_MUTATIONS", "150")))
@given(_mutations(max_edits=4))
def test_several_mutations_load_or_name_a_path(tmp_path_factory, mutation):
    _load_mutated(tmp_path_factory.mktemp("m"), mutation[1])


def test_not_json(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{not json")
    with pytest.raises(ValueError, match=r"x.json: not valid JSON"):
        load_json(p)
    p.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(ValueError, match=r"x.json: not "):
        load_json(p)
    with pytest.raises(FileNotFoundError):
        load_json(tmp_path / "missing.json")
    with pytest.raises(ValueError, match=r"path_or_dict: expected a path or a dict"):
        load_json(3)


def test_a_shape_s_rounding_loads():
    """A shape's ``rounding`` (this project's extension of the format) is the model's rounding radius;
    absent, 0."""
    spec = _box_spec()
    spec["geometries"][1]["shape"]["rounding"] = 0.005
    model = load_json(spec).sap_model
    assert model.shape_rounding[1] == 0.005 and np.count_nonzero(model.shape_rounding) == 1

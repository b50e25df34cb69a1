"""sap_ref.solver: the constraint-free time step against Drake, batching and bad input."""

import json

import numpy as np
import pytest

from sap_common.config import SapConfig
from sap_common.conventions import joint_qd_sap_to_public
from sap_common.io import body_pose_error, load_json, load_recording, recorded_body_indices
from sap_common import scenes
from sap_ref.solver import step_unconstrained
from conftest import DATA

# The bound for reproducing Drake's contact-free anchors over their whole recording
# (observed: ≤ 5e-14 m and rad).
ANCHOR_POSITION_TOL = 1e-9
ANCHOR_ROTATION_TOL = 1e-9


@pytest.mark.parametrize("name", ["double_pendulum", "free_spin"])
def test_drake_preset_reproduces_contact_free_anchors(name):
    path = DATA / "drake" / f"{name}.json"
    scene = load_json(path)
    rec = load_recording(scene)
    idx = recorded_body_indices(scene, json.loads(path.read_text())["recording"]["bodies"])
    cfg = SapConfig.from_preset(**scene.solver_kwargs)
    assert cfg.position_integration == "sap_euler"
    state = scene.state.copy()
    worst_p = worst_r = 0.0
    for n in range(1, scene.num_steps + 1):
        step_unconstrained(scene.sap_model, state, state, scene.control, scene.dt, cfg)
        dp, dr = body_pose_error(state.body_q[0, idx], rec["body_pose_W"][n])
        worst_p, worst_r = max(worst_p, dp), max(worst_r, dr)
    assert worst_p <= ANCHOR_POSITION_TOL and worst_r <= ANCHOR_ROTATION_TOL


def test_worlds_are_independent_and_identical_worlds_agree():
    scene = scenes.get("free_spin", num_worlds=3)
    s = scene.state.copy()
    s.joint_qd[1] *= 0.5  # world 1 differs
    out = s.copy()
    step_unconstrained(scene.sap_model, s, out, scene.control, scene.dt)
    np.testing.assert_array_equal(out.joint_q[0], out.joint_q[2])
    np.testing.assert_array_equal(out.joint_qd[0], out.joint_qd[2])
    solo = scenes.get("free_spin", num_worlds=1)
    s1 = solo.state.copy()
    s1.joint_qd[0] *= 0.5
    step_unconstrained(solo.sap_model, s1, s1, solo.control, solo.dt)
    np.testing.assert_array_equal(out.joint_q[1], s1.joint_q[0])


@pytest.mark.parametrize("preset", ["approx32", "drake"])
def test_output_order_follows_state_out(preset):
    scene = scenes.get("free_spin")
    cfg = SapConfig.from_preset(preset)
    a, b = scene.state.copy(), scene.state.copy()
    b.joint_qd_order = "sap"
    step_unconstrained(scene.sap_model, scene.state, a, scene.control, scene.dt, cfg)
    step_unconstrained(scene.sap_model, scene.state, b, scene.control, scene.dt, cfg)
    # approx32 evaluates the boundary offset r from the pose rounded to float32.
    pose = np.float64 if cfg.use_f64_boundary_pose else np.float32
    public = joint_qd_sap_to_public(scene.sap_model, b.joint_q, b.joint_qd, pose_dtype=pose)
    np.testing.assert_array_equal(public, a.joint_qd)
    np.testing.assert_array_equal(a.body_q, b.body_q)


def test_bad_input():
    scene = scenes.get("free_spin")
    m, s, c = scene.sap_model, scene.state, scene.control
    with pytest.raises(ValueError, match=r"dt: must be a finite time step > 0 s"):
        step_unconstrained(m, s, s, c, 0.0)
    bad = s.copy()
    bad.joint_q = np.zeros((1, 6))
    with pytest.raises(ValueError, match=r"state_in.joint_q: expected shape \(1, 7\)"):
        step_unconstrained(m, bad, s, c, 1e-3)
    with pytest.raises(ValueError, match=r"joint limits or drives, which are SAP constraints"):
        limited = scenes.get("pendulum_limit")
        step_unconstrained(limited.sap_model, limited.state, limited.state, limited.control, 1e-3)

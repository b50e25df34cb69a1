"""sap_ref.solver.SolverSAP: Drake anchors without contact, batching, statuses and bad input.

Contact anchors and the contact physics checklist are in test_ref_solver_contact.py.
"""

import json

import numpy as np
import pytest
from conftest import ANCHOR_DEFAULT_STEPS, ANCHOR_LENGTHS, DATA, anchor_steps

from sap_common import scenes
from sap_common.builder import ModelBuilder
from sap_common.conventions import joint_qd_sap_to_public
from sap_common.io import body_pose_error, load_json, load_recording, recorded_body_indices
from sap_common.state import SapContacts, StepStatus
from sap_ref.solver import SolverSAP

# The required bound for Drake's contact-free anchors over a recording (observed over the whole of it:
# ≤ 5e-14 m and rad; pendulum_limit and prismatic_pd reach 1e-16 through the Newton solve).
CONTACT_FREE_POSITION_TOL = 1e-9
CONTACT_FREE_ROTATION_TOL = 1e-9
CONTACT_FREE_ANCHORS = ("double_pendulum", "free_spin", "pendulum_limit", "prismatic_pd")


def run_anchor(name, length=None, **overrides):
    """Step a Drake anchor with its solver settings, its first ``anchor_steps(scene, length)`` steps
    (``None``: all); return (max position, max rotation error)."""
    path = DATA / "drake" / f"{name}.json"
    scene = load_json(path)
    rec = load_recording(scene)
    idx = recorded_body_indices(scene, json.loads(path.read_text())["recording"]["bodies"])
    solver = SolverSAP(scene.sap_model, max_rigid_contact=scene.max_rigid_contact,
                       **{**scene.solver_kwargs, **overrides})
    state = scene.state.copy()
    worst_p = worst_r = 0.0
    for n in range(1, anchor_steps(scene, length) + 1):
        solver.step(state, state, scene.control, None, scene.dt)
        assert solver.last_status[0] == StepStatus.CONVERGED
        dp, dr = body_pose_error(state.body_q[0, idx], rec["body_pose_W"][n])
        worst_p, worst_r = max(worst_p, dp), max(worst_r, dr)
    return worst_p, worst_r


@pytest.mark.parametrize("length", ANCHOR_LENGTHS)
@pytest.mark.parametrize("name", CONTACT_FREE_ANCHORS)
def test_drake_preset_reproduces_contact_free_anchors(name, length):
    worst_p, worst_r = run_anchor(name, length)
    assert worst_p <= CONTACT_FREE_POSITION_TOL and worst_r <= CONTACT_FREE_ROTATION_TOL


def test_every_event_of_the_drake_recordings_is_in_the_default_run_s_steps(drake_anchor_paths):
    """The default run follows each anchor for ANCHOR_DEFAULT_STEPS steps (conftest): each
    recording's contact count changes for the last time, and pendulum_limit's joint reaches the
    stop and turns back, before then; after it, nothing new happens in any recording."""
    for path in drake_anchor_paths:
        rec = load_recording(load_json(path))
        changes = np.flatnonzero(np.diff(rec["contact_count"]))
        assert len(changes) == 0 or changes[-1] + 1 < ANCHOR_DEFAULT_STEPS, path.name
    q = load_recording(load_json(DATA / "drake" / "pendulum_limit.json"))["q"][:, 0]
    lowest = int(np.argmin(q))
    assert q[lowest] < -0.49 and 0 < lowest < ANCHOR_DEFAULT_STEPS - 100  # at the stop (−0.5), then back


def test_limit_stops_the_pendulum_without_penetration():
    scene = scenes.get("pendulum_limit")
    solver = SolverSAP(scene.sap_model, max_rigid_contact=0, contact_preset_variant="drake")
    state = scene.state.copy()
    qs = []
    for _ in range(1000):
        solver.step(state, state, scene.control, None, scene.dt)
        qs.append(state.joint_q[0, 0])
    # τ = h halves the remaining gap per step: no penetration beyond a few µrad (anchor: −0.499993).
    assert min(qs) > -0.5 - 1e-5 and min(qs) < -0.49


def test_drive_settles_at_the_static_offset():
    scene = scenes.get("prismatic_pd")
    solver = SolverSAP(scene.sap_model, max_rigid_contact=0)
    state = scene.state.copy()
    for _ in range(scene.num_steps):
        solver.step(state, state, scene.control, None, scene.dt)
    assert state.joint_q[0, 0] == pytest.approx(0.5 - 2 * 9.81 / 400, abs=1e-4)  # q_d − m g/Kp


def test_worlds_are_independent_and_identical_worlds_agree():
    scene = scenes.get("free_spin", num_worlds=3)
    s = scene.state.copy()
    s.joint_qd[1] *= 0.5  # world 1 differs
    out = s.copy()
    solver = SolverSAP(scene.sap_model, max_rigid_contact=0)
    solver.step(s, out, scene.control, None, scene.dt)
    np.testing.assert_array_equal(out.joint_q[0], out.joint_q[2])
    np.testing.assert_array_equal(out.joint_qd[0], out.joint_qd[2])
    solo = scenes.get("free_spin", num_worlds=1)
    s1 = solo.state.copy()
    s1.joint_qd[0] *= 0.5
    SolverSAP(solo.sap_model, max_rigid_contact=0).step(s1, s1, solo.control, None, solo.dt)
    np.testing.assert_array_equal(out.joint_q[1], s1.joint_q[0])
    np.testing.assert_array_equal(out.joint_qd[1], s1.joint_qd[0])


def test_non_finite_world_is_flagged_and_others_untouched():
    scene = scenes.get("prismatic_pd", num_worlds=3)
    solver = SolverSAP(scene.sap_model, max_rigid_contact=0)
    reference = scene.state.copy()
    solver.step(reference, reference, scene.control, None, scene.dt)
    bad = scene.state.copy()
    bad.joint_qd[1, 0] = np.nan
    before = bad.copy()
    solver.step(bad, bad, scene.control, None, scene.dt)
    assert solver.last_status[1] == StepStatus.NON_FINITE and solver.last_status[0] == StepStatus.CONVERGED
    np.testing.assert_array_equal(bad.joint_q[[0, 2]], reference.joint_q[[0, 2]])
    np.testing.assert_array_equal(bad.joint_qd[[0, 2]], reference.joint_qd[[0, 2]])
    np.testing.assert_array_equal(bad.joint_q[1], before.joint_q[1])  # left unchanged


@pytest.mark.parametrize("preset", ["approx32", "drake"])
def test_output_order_follows_state_out(preset):
    scene = scenes.get("free_spin")
    solver = SolverSAP(scene.sap_model, max_rigid_contact=0, contact_preset_variant=preset)
    a, b = scene.state.copy(), scene.state.copy()
    b.joint_qd_order = "sap"
    solver.step(scene.state, a, scene.control, None, scene.dt)
    solver.step(scene.state, b, scene.control, None, scene.dt)
    # approx32 evaluates the boundary offset r from the pose rounded to float32.
    pose = np.float64 if solver.config.use_f64_boundary_pose else np.float32
    np.testing.assert_array_equal(joint_qd_sap_to_public(scene.sap_model, b.joint_q, b.joint_qd, pose_dtype=pose),
                                  a.joint_qd)
    np.testing.assert_array_equal(a.body_q, b.body_q)


def test_config_and_diagnostics():
    scene = scenes.get("prismatic_pd", num_worlds=2)
    solver = SolverSAP(scene.sap_model, max_rigid_contact=4, contact_preset_variant="approx-64",
                       line_search_variant="exact")
    assert solver.config.contact_preset_variant == "approx64" and solver.config.max_rigid_contact == 4
    assert solver.config.line_search_max_iterations == 100
    state = scene.state.copy()
    solver.step(state, state, scene.control, solver_contacts := SapContacts.allocate(2, 4), scene.dt)
    assert solver.last_newton_iterations.tolist() == [1, 1]
    assert solver.last_line_search_iterations.min() >= 1
    assert solver.last_truncated_contact_count.tolist() == [0, 0]
    r = solver.last_results[0]
    assert r.free_motion.A.shape == (1, 1) and r.drives.dof.tolist() == [0] and len(r.solve.history) == 1
    assert solver_contacts.count.tolist() == [0, 0]


# ----------------------------------------------------------------------------- bad input (docs/design.md § Bad input)


def _solver_and_scene():
    scene = scenes.get("sphere_drop", num_worlds=2)
    return SolverSAP(scene.sap_model, max_rigid_contact=2), scene


def test_model_without_dofs():
    b = ModelBuilder()
    b.add_joint_fixed(-1, b.add_body(1.0, inertia=(1, 1, 1)))
    with pytest.raises(ValueError, match=r"model: SolverSAP needs at least one articulated DOF"):
        SolverSAP(b.finalize(), max_rigid_contact=0)
    with pytest.raises(ValueError, match=r"model: expected a SapModel"):
        SolverSAP("model", max_rigid_contact=0)


@pytest.mark.parametrize("kwargs,match", [
    (dict(max_rigid_contact=-1), r"max_rigid_contact: must be an integer >= 0"),
    (dict(max_rigid_contact=4, contact_preset_variant="fast"), r"contact_preset_variant: 'fast' is not valid"),
    (dict(max_rigid_contact=4, tolerance=1.0), r"unknown SapConfig knob\(s\) tolerance"),
    (dict(max_rigid_contact=4, rho=2.0), r"rho: must be finite and in \(0.0, 1.0\)"),
])
def test_bad_configuration(kwargs, match):
    scene = scenes.get("sphere_drop")
    with pytest.raises(ValueError, match=match):
        SolverSAP(scene.sap_model, **kwargs)


@pytest.mark.parametrize("dt", [0.0, -1e-3, float("nan"), float("inf"), True, "1e-3"])
def test_bad_dt(dt):
    solver, scene = _solver_and_scene()
    with pytest.raises(ValueError, match=r"dt: must be a finite time step > 0 s"):
        solver.step(scene.state, scene.state, scene.control, None, dt)


@pytest.mark.parametrize("field,value,match", [
    ("joint_q", np.zeros((2, 6)), r"state_in.joint_q: expected shape \(2, 7\)"),
    ("joint_qd", np.zeros((1, 6)), r"state_in.joint_qd: expected shape \(2, 6\)"),
    ("body_f", np.zeros((2, 2, 6)), r"state_in.body_f: expected shape \(2, 1, 6\)"),
    ("joint_qd_order", "world", r"state_in.joint_qd_order: must be one of 'public', 'sap'"),
])
def test_bad_state(field, value, match):
    solver, scene = _solver_and_scene()
    state = scene.state.copy()
    object.__setattr__(state, field, value)
    with pytest.raises(ValueError, match=match):
        solver.step(state, state, scene.control, None, 1e-3)


def test_bad_control_and_contacts():
    solver, scene = _solver_and_scene()
    control = scene.control.copy()
    control.joint_act = np.zeros((2, 5))
    with pytest.raises(ValueError, match=r"control.joint_act: expected shape \(2, 6\)"):
        solver.step(scene.state, scene.state, control, None, 1e-3)
    with pytest.raises(ValueError, match=r"contacts: capacity 3 does not match the solver's max_rigid_contact 2"):
        solver.step(scene.state, scene.state, scene.control, SapContacts.allocate(2, 3), 1e-3)
    with pytest.raises(ValueError, match=r"contacts.count: expected shape \(2,\)"):
        solver.step(scene.state, scene.state, scene.control, SapContacts.allocate(1, 2), 1e-3)
    bad = SapContacts.allocate(2, 2)
    bad.count[0] = 1
    bad.shape0[0, 0], bad.shape1[0, 0], bad.body0[0, 0], bad.body1[0, 0] = 0, 7, -1, 0
    with pytest.raises(ValueError, match=r"contacts.shape1\[0\]: shape indices must lie in \[0, 2\)"):
        solver.step(scene.state, scene.state, scene.control, bad, 1e-3)
    with pytest.raises(ValueError, match=r"contacts: expected SapContacts or None"):
        solver.step(scene.state, scene.state, scene.control, {}, 1e-3)
    before = scene.state.joint_q.copy()
    for args, name in (((None, scene.state, scene.control), "state_in"),
                       ((scene.state, None, scene.control), "state_out"),
                       ((scene.state, scene.state, None), "control")):
        with pytest.raises(ValueError, match=rf"{name}: expected a Sap(State|Control), got NoneType"):
            solver.step(*args, None, 1e-3)
    assert np.array_equal(scene.state.joint_q, before)  # refused before any work

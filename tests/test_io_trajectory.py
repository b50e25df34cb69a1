"""sap_common.io.trajectory: the minimal trajectory format and Drake recordings read as trajectories.

No pydrake needed: the Drake recordings are the committed files.
"""

import json
import re

import numpy as np
import pytest
from conftest import DATA

from sap_common import scenes
from sap_common.conventions import joint_qd_sap_to_public
from sap_common.io import drake_qv_to_joint, load_json, load_recording
from sap_common.io.trajectory import (
    TRAJECTORY_FORMAT,
    Trajectory,
    load_trajectory,
    load_trajectory_scene,
    trajectory_states,
    write_trajectory,
)

DRAKE = DATA / "drake"


def _pendulum_rows(n=4):
    q = np.linspace(0.8, 0.7, n + 1)[:, None]
    v = np.linspace(0.0, -0.3, n + 1)[:, None]
    return q, v


@pytest.mark.parametrize("ext", ["npz", "json"])
def test_written_trajectory_reads_back_field_for_field(tmp_path, ext):
    q, v = _pendulum_rows()
    contacts = {"contact_count": np.array([0, 1, 0, 0, 1]), "contact_shape0": np.array([[-1], [0], [-1], [-1], [0]]),
                "contact_shape1": np.array([[-1], [1], [-1], [-1], [1]]),
                "contact_phi": np.array([[0.0], [-1e-4], [0.0], [0.0], [-2e-4]])}
    path = write_trajectory(tmp_path / f"t.{ext}", scene="pendulum_limit", dt=1e-3, q=q, v=v, convention="public",
                            engine="mine", contacts=contacts)
    t = load_trajectory(path)
    assert (t.scene, t.scene_path, t.dt, t.convention, t.engine, t.num_steps) == ("pendulum_limit", None, 1e-3,
                                                                                  "public", "mine", 4)
    np.testing.assert_array_equal(t.q, q)
    np.testing.assert_array_equal(t.v, v)
    for k, a in contacts.items():
        np.testing.assert_array_equal(t.contacts[k], a)


def test_npz_strings_need_no_pickle(tmp_path):
    q, v = _pendulum_rows()
    path = write_trajectory(tmp_path / "t.npz", scene="pendulum_limit", dt=1e-3, q=q, v=v)
    with np.load(path, allow_pickle=False) as f:
        assert str(f["format"]) == TRAJECTORY_FORMAT and str(f["convention"]) == "public"


def test_scene_path_is_relative_to_the_trajectory_file(tmp_path):
    (tmp_path / "scenes").mkdir()
    scene_file = tmp_path / "scenes" / "pendulum.json"
    scene_file.write_text((DRAKE / "pendulum_limit.json").read_text())
    rec = load_recording(DRAKE / "pendulum_limit.json")
    path = write_trajectory(tmp_path / "t.npz", scene="scenes/pendulum.json", dt=1e-3, q=rec["q"][:3], v=rec["v"][:3],
                            convention="drake")
    t = load_trajectory(path)
    assert t.scene_path == str(scene_file)
    assert load_trajectory_scene(t).name == "pendulum_limit"


def _fields(tmp_path, **change):
    q, v = _pendulum_rows()
    fields = {"format": TRAJECTORY_FORMAT, "version": 1, "scene": "pendulum_limit", "dt": 1e-3,
              "convention": "public", "q": q.tolist(), "v": v.tolist()}
    fields.update(change)
    for k in [k for k, x in fields.items() if x is None]:
        del fields[k]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(fields))
    return path


@pytest.mark.parametrize("change, message", [
    ({"format": "something-else"}, "format: expected 'sap-trajectory'"),
    ({"version": 2}, "version: this reader knows version 1"),
    ({"dt": None}, "missing required field 'dt'"),
    ({"dt": -1.0}, "dt: expected a finite time step > 0"),
    ({"convention": "euler"}, "convention: 'euler' is not one of public, sap, drake, mujoco"),
    ({"q": [[0.1]]}, "q: expected shape (N+1, n) with N >= 1"),
    ({"v": [[0.0], [float("nan")], [0.0], [0.0], [0.0]]}, "v: row 1 is not finite"),
    ({"v": [[0.0], [0.0]]}, "q and v: 5 and 2 rows"),
    ({"scene": "missing/scene.json"}, "scene: the scene file 'missing/scene.json' does not exist"),
    ({"contact_count": [0, 1, 0, 0, 0]}, "contacts: contact_shape0, contact_shape1, contact_phi missing"),
    ({"contact_count": [0, 2, 0, 0, 0], "contact_shape0": [[0]] * 5, "contact_shape1": [[1]] * 5,
      "contact_phi": [[0.0]] * 5}, "contact_count: entries must lie in [0, 1]"),
    ({"contact_count": [0, 1, 0, 0, 0], "contact_shape0": [[0]] * 5, "contact_shape1": [[1]] * 5,
      "contact_phi": [[0.0]] * 4}, "contact_phi: expected shape (5, 1)"),
])
def test_malformed_trajectory_names_the_field(tmp_path, change, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        load_trajectory(_fields(tmp_path, **change))


def test_not_a_trajectory(tmp_path):
    with pytest.raises(ValueError, match="a trajectory file ends in .npz or .json"):
        load_trajectory(DRAKE / "README.md")
    with pytest.raises(ValueError, match="no such trajectory file"):
        load_trajectory(tmp_path / "nothing.npz")
    (tmp_path / "x.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="expected a JSON object"):
        load_trajectory(tmp_path / "x.json")


def test_drake_recording_reads_as_a_trajectory_with_our_contact_convention():
    t = load_trajectory(DRAKE / "sphere_drop.json")
    rec = load_recording(DRAKE / "sphere_drop.json")
    assert (t.convention, t.engine, t.dt, t.num_steps) == ("drake", "drake", 1e-3, 2000)
    c = t.contacts
    n = int(np.argmax(c["contact_count"] > 0))
    # Shape 0 is the ground (geometry 0), shape 1 the ball; the normal points from the ground into
    # the ball (+z) and the force on the ball pushes it up; φ = −depth.
    assert (c["contact_shape0"][n, 0], c["contact_shape1"][n, 0]) == (0, 1)
    np.testing.assert_array_equal(c["contact_normal"][n, 0], [0, 0, 1])
    assert c["contact_force"][-1, 0, 2] == pytest.approx(9.81, rel=1e-3)
    assert c["contact_phi"][n, 0] == -rec["contact_depth"][n, 0] < 0
    assert c["contact_mu"][n, 0] == 0.5 and c["contact_ke"][n, 0] == 5e5 and c["contact_tau_d"][n, 0] == 0.2
    assert set(t.extra) == {"generalized_contact_forces", "net_actuation", "dynamics_residual",
                            "contact_separation_speed", "contact_slip_speed"}


@pytest.mark.parametrize("convention", ["public", "sap", "drake"])
def test_every_convention_gives_the_same_states(tmp_path, convention):
    scene = load_json(DRAKE / "free_spin.json")
    rec = load_recording(DRAKE / "free_spin.json")
    q_sap, qd_sap = drake_qv_to_joint(scene, rec["q"][:6], rec["v"][:6], joint_qd_order="sap")
    if convention == "drake":
        q, v, name = rec["q"][:6], rec["v"][:6], "free_spin.json"
        (tmp_path / name).write_text((DRAKE / name).read_text())
    elif convention == "sap":
        q, v, name = q_sap, qd_sap, "free_spin"
    else:
        q, v, name = q_sap, joint_qd_sap_to_public(scene.sap_model, q_sap, qd_sap), "free_spin"
    t = load_trajectory(write_trajectory(tmp_path / "t.npz", scene=name, dt=1e-3, q=q, v=v, convention=convention))
    got_q, got_qd = trajectory_states(t, scene)
    np.testing.assert_array_equal(got_q, q_sap)
    np.testing.assert_allclose(got_qd, qd_sap, rtol=0, atol=1e-15)  # public → SAP: one ω × r


def test_columns_must_match_the_scene(tmp_path):
    q, v = np.zeros((3, 2)), np.zeros((3, 2))
    t = load_trajectory(write_trajectory(tmp_path / "t.npz", scene="pendulum_limit", dt=1e-3, q=q, v=v))
    with pytest.raises(ValueError, match="2 and 2 columns do not match scene 'pendulum_limit' \\(nq 1, nv 1\\)"):
        trajectory_states(t, scenes.get("pendulum_limit"))


def test_mujoco_convention_converts_through_the_mjcf_map(tmp_path):
    pytest.importorskip("mujoco")
    import mujoco

    from sap_common.io import load_mjcf

    xml = tmp_path / "ball.xml"
    xml.write_text('<mujoco><option timestep="0.002"/><worldbody><geom type="plane" size="1 1 .1"/>'
                   '<body pos="0 0 1"><freejoint/><geom type="sphere" size=".1" mass="1"/></body></worldbody></mujoco>')
    scene = load_mjcf(str(xml))
    m = scene.mj_model
    d = mujoco.MjData(m)
    d.qvel[:] = [0.1, 0.2, 0.3, 1.0, -2.0, 0.5]  # [v_O; ω_B]
    qpos, qvel = [d.qpos.copy()], [d.qvel.copy()]
    mujoco.mj_step(m, d)
    qpos.append(d.qpos.copy())
    qvel.append(d.qvel.copy())
    t = load_trajectory(write_trajectory(tmp_path / "t.npz", scene="ball.xml", dt=0.002, q=np.array(qpos),
                                         v=np.array(qvel), convention="mujoco", engine="mujoco"))
    q, qd = trajectory_states(t, load_trajectory_scene(t))
    np.testing.assert_allclose(q[:, :3], np.array(qpos)[:, :3])
    # SAP order [ω_W, v_O]: MuJoCo's ω is in the body frame, at identity rotation in row 0 the same.
    np.testing.assert_allclose(qd[0], [1.0, -2.0, 0.5, 0.1, 0.2, 0.3])


def test_trajectory_dataclass_counts_steps():
    t = Trajectory(scene="x", scene_path=None, dt=0.1, convention="sap", q=np.zeros((4, 1)), v=np.zeros((4, 1)))
    assert t.num_steps == 3


def test_a_scene_file_given_as_a_recording_says_what_it_is(tmp_path):
    """A Drake recording's JSON without its NPZ, and a scene file that was never recorded: each
    error says which it is and what to do, not only that some .npz does not exist."""
    spec = json.loads((DATA / "drake" / "prismatic_pd.json").read_text())
    lone = tmp_path / "scene.json"
    lone.write_text(json.dumps(spec))
    with pytest.raises(ValueError, match=re.escape(f"{lone}: a Drake recording's scene file without its recording: "
                                                   f"the arrays are read from {tmp_path / 'scene.npz'}")):
        load_trajectory(lone)
    spec.pop("recording")
    hand = tmp_path / "hand.json"
    hand.write_text(json.dumps(spec))
    with pytest.raises(ValueError, match=re.escape(f"{hand}: a scene file, not a recording: record it first "
                                                   f"(sap-record {hand})")):
        load_trajectory(hand)

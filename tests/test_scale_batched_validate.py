"""Batched trajectory files: ``q (W, N+1, nq)``, ``v (W, N+1, nv)`` hold W worlds; ``sap-validate``
reports each world and names the failing world and step (docs/validation.md § Batched files)."""

import json

import numpy as np
import pytest

import sap_ref
from sap_common import scenes
from sap_common.io.trajectory import load_trajectory, write_trajectory
from sap_tools.cli import scene_solver_kwargs
from sap_tools.validate.cli import main as validate

SCENE, W, STEPS = "sphere_slide", 3, 10
CORRUPT_WORLD, CORRUPT_ROW = 1, 6  # the recorded row 6 is off: step 6 (row 5 → 6) fails first


def _batched(path, corrupt=False):
    """W worlds of the scene rolled out by sap_ref with the settings sap-validate uses, each from
    its own initial velocity; written as one batched file (public convention)."""
    scene = scenes.get(SCENE, num_worlds=W)
    kwargs, _ = scene_solver_kwargs(scene, None, None, default_preset="drake")
    solver = sap_ref.SolverSAP(scene.sap_model, max_rigid_contact=scene.max_rigid_contact, **kwargs)
    pipeline = sap_ref.CollisionPipeline(scene.sap_model, scene.max_rigid_contact, solver.config)
    contacts = pipeline.contacts()
    state = scene.state.copy()
    state.joint_qd[:, 0] += np.array([0.0, 0.3, -0.2])  # the worlds slide differently
    qs, vs = [state.joint_q.copy()], [state.joint_qd.copy()]
    for _ in range(STEPS):
        pipeline.collide(state, contacts)
        solver.step(state, state, scene.control, contacts, scene.dt)
        qs.append(state.joint_q.copy())
        vs.append(state.joint_qd.copy())
    q, v = np.stack(qs, axis=1), np.stack(vs, axis=1)  # (W, N+1, n)
    if corrupt:
        q[CORRUPT_WORLD, CORRUPT_ROW, 0] += 1e-6  # 1 µm: a millionth of the bar's reach, far above round-off
    return write_trajectory(path, scene=SCENE, dt=scene.dt, q=q, v=v, convention="public", engine="test")


def test_a_batched_file_reads_as_worlds(tmp_path):
    traj = load_trajectory(_batched(tmp_path / "batch.npz"))
    assert traj.batched and traj.num_worlds == W and traj.num_steps == STEPS
    one = traj.world(2)
    assert not one.batched and one.q.shape == (STEPS + 1, traj.q.shape[2])
    np.testing.assert_array_equal(one.v, traj.v[2])
    with pytest.raises(ValueError, match=r"world: must lie in \[0, 3\)"):
        traj.world(3)


def test_every_world_of_a_clean_batch_passes(tmp_path, capsys):
    path = _batched(tmp_path / "batch.npz")
    assert validate([path, "--mode", "both", "--json", "--quiet"]) == 0
    out = capsys.readouterr().out
    report = json.loads(out.strip().splitlines()[-1])["reports"][0]
    assert report["num_worlds"] == W and report["failing_worlds"] == [] and report["first_failure"] is None
    assert [w["verdict"] for w in report["worlds"]] == ["pass"] * W
    assert all(w["one_step"]["max_dv"] <= 1e-12 for w in report["worlds"])
    assert "3 worlds" in out and "world 2: pass" in out


def test_the_failing_world_and_step_are_named(tmp_path, capsys):
    path = _batched(tmp_path / "batch.npz", corrupt=True)
    junit = tmp_path / "v.xml"
    assert validate([path, "--json", "--quiet", "--junit", str(junit)]) == 1
    out = capsys.readouterr().out
    report = json.loads(out.strip().splitlines()[-1])["reports"][0]
    assert report["failing_worlds"] == [CORRUPT_WORLD]
    assert report["first_failure"] == {"world": CORRUPT_WORLD, "mode": "one-step", "step": CORRUPT_ROW}
    assert [w["verdict"] for w in report["worlds"]] == ["pass", "FAIL", "pass"]
    assert f"world {CORRUPT_WORLD} fails first at step {CORRUPT_ROW} (one-step)" in out
    xml = junit.read_text()
    assert xml.count("<testcase") == W and xml.count("<failure") == 1
    assert f'name="one-step [sap_ref] world {CORRUPT_WORLD}"' in xml


def test_malformed_batched_files_are_named(tmp_path):
    q = np.zeros((2, 4, 7))
    q[..., 6] = 1.0
    with pytest.raises(ValueError, match=r"q and v: \(2, 4\) and \(3, 4\) worlds and rows; they must match"):
        write_trajectory(tmp_path / "a.npz", scene=SCENE, dt=1e-3, q=q, v=np.zeros((3, 4, 6)))
    with pytest.raises(ValueError, match="both plain"):
        write_trajectory(tmp_path / "b.npz", scene=SCENE, dt=1e-3, q=q, v=np.zeros((4, 6)))
    bad = np.zeros((2, 4, 6))
    bad[1, 2, 0] = np.nan
    with pytest.raises(ValueError, match="v: world 1, row 2 is not finite"):
        write_trajectory(tmp_path / "c.npz", scene=SCENE, dt=1e-3, q=q, v=bad)

"""sap-view without a browser: trajectories, the viser scene and panel, the headless video.

The browser half (a real Chromium looking at the page) is tests/test_view_browser.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from sap_common import scenes
from sap_common.io import load_json, load_recording
from sap_ref.collision import CollisionPipeline
from sap_ref.kinematics import forward_kinematics
from sap_ref.solver import SolverSAP
from sap_tools.browser import free_port
from sap_tools.shapes import body_colors, shape_mesh
from sap_tools.trajectory import recording_trajectory, rollout_trajectory
from sap_tools.view.cli import main
from conftest import DATA

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
G = 9.81
# The settled stack still creeps (τ_d relaxation): 150 steps in, Σ f_z is within 0.1 % of the weights.
SETTLED_FORCE_RTOL = 1e-3


def test_rollout_matches_an_independent_run():
    scene = scenes.get("box_stack", num_worlds=2)
    traj = rollout_trajectory(scene, 12)
    solver = SolverSAP(scene.sap_model, max_rigid_contact=scene.max_rigid_contact)
    pipe = CollisionPipeline(scene.sap_model, scene.max_rigid_contact, solver.config)
    contacts, state = pipe.contacts(), scene.state.copy()
    assert traj.num_frames == 13 and traj.num_worlds == 2
    np.testing.assert_array_equal(traj.body_q[0], scene.state.body_q)
    for n in range(1, 13):
        pipe.collide(state, contacts)
        solver.step(state, state, scene.control, contacts, scene.dt)
        np.testing.assert_array_equal(traj.body_q[n], state.body_q)
        np.testing.assert_array_equal(traj.contact_count[n], contacts.count)
        r = solver.last_results[1]
        k = int(contacts.count[1])
        np.testing.assert_allclose(traj.contact_force[n, 1, :k], r.contact_impulses_W / scene.dt, rtol=1e-12)


def test_sap_gpu_rollout_matches_sap_ref(device):
    """The viewer's sap_gpu rollout (drake preset, fp64) is sap_ref's to rounding, contacts included."""
    scene = scenes.get("box_stack", num_worlds=2)
    gpu = rollout_trajectory(scene, 12, backend="gpu", device=device, contact_preset_variant="drake")
    ref = rollout_trajectory(scene, 12, contact_preset_variant="drake")
    np.testing.assert_allclose(gpu.body_q, ref.body_q, atol=1e-9)
    np.testing.assert_array_equal(gpu.contact_count, ref.contact_count)
    np.testing.assert_allclose(gpu.contact_force, ref.contact_force, atol=1e-6 * np.abs(ref.contact_force).max())
    assert gpu.source.startswith("sap_gpu rollout")


def test_settled_stack_forces_carry_the_weight_above_each_interface():
    """Σ f_z over all contacts = (3 + 2 + 1) m g: the ground carries three boxes, the next interface two."""
    scene = scenes.get("box_stack")
    traj = rollout_trajectory(scene, 150)
    m = float(scene.sap_model.body_mass[0])
    k = int(traj.contact_count[-1, 0])
    total = traj.contact_force[-1, 0, :k, 2].sum()
    assert total == pytest.approx(6 * m * G, rel=SETTLED_FORCE_RTOL)
    assert np.abs(traj.contact_force[-1, 0, :k, :2].sum(axis=0)).max() < SETTLED_FORCE_RTOL * m * G


def test_state_of_a_frame_reruns_the_same_step():
    scene = scenes.get("sphere_slide")
    traj = rollout_trajectory(scene, 5)
    state = traj.state(3)
    solver = SolverSAP(scene.sap_model, max_rigid_contact=scene.max_rigid_contact)
    pipe = CollisionPipeline(scene.sap_model, scene.max_rigid_contact, solver.config)
    contacts = pipe.contacts()
    pipe.collide(state, contacts)
    solver.step(state, state, scene.control, contacts, scene.dt)
    np.testing.assert_allclose(state.body_q, traj.body_q[4], atol=1e-12)


def test_drake_recording_is_shown_as_recorded():
    path = str(DATA / "drake" / "sphere_slide.npz")
    traj = recording_trajectory(path, every=10)
    rec = load_recording(path[:-4] + ".json")
    frames = np.arange(0, len(rec["t"]), 10)
    np.testing.assert_array_equal(traj.t, rec["t"][frames])
    np.testing.assert_array_equal(traj.body_q[:, 0, 0], rec["body_pose_W"][frames, 0])
    np.testing.assert_array_equal(traj.contact_count[:, 0], rec["contact_count"][frames])
    np.testing.assert_array_equal(traj.contact_force[:, 0, :1], rec["contact_f_Bc_W"][frames, :1])
    # The recorded coordinates, converted to ours, put the body where the recording says.
    scene = load_json(path[:-4] + ".json")
    for n in (0, len(frames) // 2, len(frames) - 1):
        np.testing.assert_allclose(forward_kinematics(scene.sap_model, traj.joint_q[n, 0])[:, :3],
                                   traj.body_q[n, 0, :, :3], atol=1e-12)


def test_shape_meshes_are_closed_and_sized():
    scene = scenes.get("humanoid")
    m = scene.sap_model
    for s in range(m.shape_count):
        v, f = shape_mesh(m, s)
        assert f.min() >= 0 and f.max() < len(v)
        if int(m.shape_type[s]) == 2:  # capsule: radius and half length along z
            r, hl = m.shape_size[s, :2]
            assert np.max(np.hypot(v[:, 0], v[:, 1])) == pytest.approx(r)
            assert np.max(v[:, 2]) == pytest.approx(hl + r)
        if int(m.shape_type[s]) != 0:  # every edge of a closed mesh is shared by two triangles
            edges = np.sort(np.concatenate([f[:, [0, 1]], f[:, [1, 2]], f[:, [2, 0]]]), axis=1)
            _, counts = np.unique(edges, axis=0, return_counts=True)
            assert np.all(counts == 2)


@pytest.fixture
def server():
    viser = pytest.importorskip("viser")
    srv = viser.ViserServer(host="127.0.0.1", port=free_port(), verbose=False)
    yield srv
    srv.stop()


def test_viewer_scene_follows_the_frame_and_the_world(server):
    from sap_tools.view.cli import Viewer

    scene = scenes.get("box_stack", num_worlds=2)
    traj = rollout_trajectory(scene, 6)
    traj.body_q[:, 1, :, 0] += 1.0  # tell the worlds apart
    view = Viewer(traj, server)
    m = scene.sap_model
    view.show(5, 1)
    for b in range(m.body_count):
        h = view.bodies[1, b]
        np.testing.assert_allclose(h.position, traj.body_q[5, 1, b, :3], atol=1e-6)
        np.testing.assert_allclose(h.wxyz, traj.body_q[5, 1, b, [6, 3, 4, 5]], atol=1e-6)
        assert h.visible and not view.bodies[0, b].visible
    assert int(view.slider.value) == 5
    assert "Frame 5" in view.status.content and "sap-view: ready" in view.status.content
    view.play.value = True
    view.playing = True
    view.speed.value = 10
    view.tick(0.25)  # 2.5 frames at 10 frames per second: two whole frames
    assert view.frame == 0  # 5 + 2 wraps around the 7 frames
    assert list(body_colors(m)[0]) != list(body_colors(m)[1])


def test_inspect_this_step_shows_the_inspectors_figures(server):
    pytest.importorskip("matplotlib")
    from sap_tools.view.cli import Viewer

    scene = scenes.get("sphere_slide")
    traj = rollout_trajectory(scene, 3, contact_preset_variant="drake")
    view = Viewer(traj, server)
    cap = view.inspect(0, 0, dpi=30)
    assert cap.step == 0 and cap.config.contact_preset_variant == "drake"
    images = [h for h in view._inspect_handles if type(h).__name__ == "GuiImageHandle"]
    assert len(images) == 5
    # The re-run step is the rollout's step 0: the same new pose.
    np.testing.assert_allclose(cap.result.q1, traj.joint_q[1, 0], atol=1e-12)


def _gl_unavailable() -> str | None:
    """Why MuJoCo cannot render offscreen here (None if it can), asked in a fresh process."""
    code = ("from sap_tools.view.video import select_gl; select_gl(); import mujoco; "
            "m = mujoco.MjModel.from_xml_string('<mujoco/>'); mujoco.Renderer(m, 64, 64).render()")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    return None if r.returncode == 0 else "MuJoCo cannot open an offscreen OpenGL context (EGL/OSMesa): " + (
        r.stderr.strip().splitlines() or ["?"])[-1]


@pytest.mark.parametrize("ext", [".mp4", ".gif"])
def test_video_is_rendered_headless(ext, tmp_path):
    imageio = pytest.importorskip("imageio.v2")
    if ext == ".mp4":
        pytest.importorskip("imageio_ffmpeg")
    reason = _gl_unavailable()
    if reason:
        pytest.skip(reason)
    out = tmp_path / f"drop{ext}"
    rec = str(DATA / "drake" / "sphere_drop.npz")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "sap_tools.view", rec, "--video", str(out), "--size", "160x120",
                        "--every", "100", "--quiet"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"video written to {out}" in r.stdout and time.monotonic() - t0 < 300
    if ext == ".gif":
        from PIL import Image

        frames = imageio.mimread(str(out))
        with Image.open(out) as gif:  # Pillow merges identical frames (the ball at rest) into longer ones
            durations = []
            for i in range(gif.n_frames):
                gif.seek(i)
                durations.append(gif.info["duration"])
        # 21 frames at 30 fps; GIF counts time in centiseconds, so each 33.3 ms frame lasts 30 or 40 ms.
        assert 21 * 30 <= sum(durations) <= 21 * 40 and len(frames) >= 2
    else:
        frames = [f for f in imageio.get_reader(str(out))]  # (len() of an ffmpeg reader is inf)
        assert len(frames) == 21  # frames 0, 100, …, 2000 of the recording
    assert frames[0].shape[:2] == (120, 160)
    assert all(float(np.asarray(f)[..., :3].std()) > 10 for f in frames)  # not blank
    # The ball falls: the first and a mid-fall frame differ.
    assert np.abs(np.asarray(frames[0], float) - np.asarray(frames[2], float)).mean() > 0.5


@pytest.mark.parametrize("argv, message", [
    (["box_stack", "--video", "out.avi"], "--video:"),
    (["box_stack", "--video", "out.mp4", "--size", "641x480"], "--size:"),
    (["box_stack", "--port", "70000"], "--port:"),
    (["box_stack", "--world", "1"], "--world: must lie in [0, 1)"),
    (["box_stack", "--device", "cpu"], "--device: only applies"),
    ([str(DATA / "drake" / "sphere_drop.npz"), "--steps", "10"], "recording:"),
    (["no/such/file.npz"], "recording:"),
    (["no_such_scene"], "valid:"),
    (["box_stack", "--serve-seconds", "0"], "--serve-seconds:"),
])
def test_bad_arguments_are_one_line_errors(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("sap-view: error: ") and message in err and err.count("\n") == 1


def test_help_lists_the_examples(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "sap-view box_stack --video box_stack.mp4" in out and "--serve-seconds" in out


def test_docs_screenshots_show_the_bodies():
    """The committed screenshots (``python -m sap_tools.browser --docs``) pass the browser tests' check."""
    from test_view_browser import SCENES, check_shows_bodies

    img = os.path.join(ROOT, "docs", "img")
    for name in SCENES:
        for kind in ("view", "inspect"):
            path = os.path.join(img, f"{kind}_{name}.png")
            assert os.path.getsize(path) < 200_000  # small PNGs in the repository
        check_shows_bodies(os.path.join(img, f"view_{name}.png"), name)
    docs = open(os.path.join(ROOT, "docs", "inspect.md"), encoding="utf-8").read()
    for f in os.listdir(img):
        assert f"(img/{f})" in docs

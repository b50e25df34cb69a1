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
from conftest import DATA

from sap_common import scenes
from sap_common.io import load_json, load_recording
from sap_ref.collision import CollisionPipeline
from sap_ref.kinematics import forward_kinematics
from sap_ref.solver import SolverSAP
from sap_tools.browser import free_port
from sap_tools.shapes import body_colors, shape_mesh
from sap_tools.trajectory import recording_trajectory, rollout_trajectory
from sap_tools.view.cli import main

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
    (["box_stack", "--video", "out.mp4", "--world", "1"], "--world: must lie in [0, 1)"),
    (["box_stack", "--world", "0"], "--world: applies to --video"),
    (["box_stack", "--fps", "10"], "--fps: applies to --video"),
    (["box_stack", "--video", "out.mp4", "--port", "9000"], "--port: serves the browser viewer, and --video writes a "
                                                          "file instead"),
    (["box_stack", "--video", "out.mp4", "--serve-seconds", "5"], "--serve-seconds: serves the browser viewer"),
    (["box_stack", "--video", "out.mp4", "--host", "0.0.0.0"], "--host: serves the browser viewer"),
    (["box_stack", "--host", "10.255.255.1"],
     "--host: '10.255.255.1' (10.255.255.1) is not an address of this machine"),
    (["box_stack", "--host", "no-such-host.invalid"],
     "--host: 'no-such-host.invalid' is not an address or a host name"),
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


# ----------------------------------------------------------------------------- serving: bounded, no silent moves


def test_a_taken_port_is_an_error_before_any_work(capsys, monkeypatch):
    import socket

    import sap_tools.view.cli as view

    monkeypatch.setattr(view, "load_trajectory", lambda *a, **k: pytest.fail("work started before the check"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["box_stack", "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"sap-view: error: --port: {port} is in use on 127.0.0.1; give another port (--port ")
    assert err.count("\n") == 1


def test_the_server_start_is_bounded_and_never_moves_port():
    """viser waits without end for an address it cannot bind and moves to another port when one is
    taken; the viewer's start gives up after a bounded wait, and refuses a moved port."""
    import socket

    pytest.importorskip("viser")
    from sap_tools.view.cli import _start_server

    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=r"did not start listening on 10.255.255.1:\d+ within 2 s"):
        _start_server("10.255.255.1", free_port(), "test", timeout=2.0)
    assert time.monotonic() - t0 < 30
    with socket.socket() as taken:  # taken after the check, before the start
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(RuntimeError, match=rf"--port: {port} on 127.0.0.1 was taken by another program"):
            _start_server("127.0.0.1", port, "test")
    server = _start_server("127.0.0.1", free_port(), "test")  # and a free one serves
    server.stop()


def test_serve_seconds_ends_the_viewer_process():
    port = free_port()
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "sap_tools.view", "sphere_drop", "--steps", "3", "--port", str(port),
                        "--serve-seconds", "1", "--quiet"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - t0 < 300


# ----------------------------------------------------------------------------- what sap-view plays


def test_a_trajectory_file_plays_and_is_posed_by_its_coordinates(tmp_path):
    """A user's trajectory file (the format of docs/validation.md): the bodies where forward
    kinematics of the recorded coordinates puts them."""
    from sap_common.io.trajectory import write_trajectory
    from sap_common.kinematics import forward_kinematics
    from sap_tools.view.cli import load_trajectory

    scene = scenes.get("double_pendulum")
    ref = rollout_trajectory(scene, 20)
    path = write_trajectory(tmp_path / "mine.npz", scene="double_pendulum", dt=scene.dt, q=ref.joint_q[:, 0],
                            v=ref.joint_qd[:, 0], convention="public", engine="mine")
    traj = load_trajectory(str(path), every=5)
    assert traj.num_frames == 5 and "mine trajectory mine.npz" in traj.source
    np.testing.assert_allclose(traj.t, ref.t[::5])
    np.testing.assert_allclose(traj.body_q[:, 0], forward_kinematics(scene.sap_model, ref.joint_q[::5, 0]), atol=1e-12)
    np.testing.assert_allclose(traj.body_q, ref.body_q[::5], atol=1e-12)


def test_a_mujoco_recording_plays_with_its_contact_points(tmp_path):
    pytest.importorskip("mujoco")
    from sap_tools.record.cli import record_mujoco
    from sap_tools.view.cli import load_trajectory

    path = record_mujoco(os.path.join(ROOT, "sap_common", "data", "mesh_quadruped.xml"), str(tmp_path), steps=30,
                         integrator="implicitfast")
    traj = load_trajectory(path)
    from sap_common.io.trajectory import load_trajectory as read

    rec = read(path)
    assert traj.num_frames == 31 and traj.scene.name == "mesh_quadruped"
    assert (traj.contact_count[:, 0] == rec.contacts["contact_count"]).all() and traj.contact_count.max() > 0
    k = int(np.argmax(rec.contacts["contact_count"]))
    n = int(rec.contacts["contact_count"][k])
    np.testing.assert_array_equal(traj.contact_point[k, 0, :n], rec.contacts["contact_point"][k, :n])
    assert not traj.contact_force.any()  # MuJoCo's recording has no forces: points only


def test_a_nan_in_a_recording_names_the_file_the_field_and_the_row(tmp_path, capsys):
    import shutil

    from sap_common.io.trajectory import write_trajectory

    for name in ("sphere_drop.json", "sphere_drop.npz"):
        shutil.copy(DATA / "drake" / name, tmp_path / name)
    rec = dict(np.load(tmp_path / "sphere_drop.npz"))
    rec["body_pose_W"][7, 0, 2] = np.nan
    np.savez(tmp_path / "sphere_drop.npz", **rec)
    assert main([str(tmp_path / "sphere_drop.npz")]) == 2
    err = capsys.readouterr().err
    assert err == (f"sap-view: error: {tmp_path / 'sphere_drop.npz'}: body_pose_W: row 7 is not finite (NaN or "
                   "infinity; 1 row in all)\n")
    q = np.zeros((4, 2))
    q[2, 1] = np.inf
    write_trajectory(tmp_path / "t.npz", scene="double_pendulum", dt=1e-3, q=np.zeros((4, 2)), v=np.zeros((4, 2)))
    bad = dict(np.load(tmp_path / "t.npz"))
    bad["q"] = q
    np.savez(tmp_path / "t.npz", **bad)
    assert main([str(tmp_path / "t.npz")]) == 2
    assert capsys.readouterr().err == f"sap-view: error: {tmp_path / 't.npz'}: q: row 2 is not finite\n"


def test_a_body_without_shapes_is_drawn_as_the_box_of_its_inertia():
    from sap_tools.shapes import body_stand_ins

    scene = scenes.get("double_pendulum")
    m = scene.sap_model
    stand_ins = body_stand_ins(m)
    assert sorted(stand_ins) == [0, 1] and all(v[0] == "box" for v in stand_ins.values())
    for b, (_, half, X) in stand_ins.items():  # the box's inertia, turned into the body frame, is the body's
        from sap_common import spatial

        mass = float(m.body_mass[b])
        a2 = half**2
        box = mass / 3 * np.diag([a2[1] + a2[2], a2[0] + a2[2], a2[0] + a2[1]])
        R = spatial.quat_to_matrix(X[3:])
        np.testing.assert_allclose(R @ box @ R.T, m.body_inertia[b], atol=1e-12 * np.abs(m.body_inertia[b]).max())
        np.testing.assert_allclose(X[:3], m.body_com[b])
    # The humanoid's massless frames between two hinges are drawn by their children.
    humanoid = scenes.get("humanoid").sap_model
    assert not any(humanoid.body_name[b].count("/") for b in body_stand_ins(humanoid))


def test_the_viewer_draws_shapeless_bodies(server):
    from sap_tools.view.cli import Viewer

    names = []
    add = server.scene.add_mesh_simple
    server.scene.add_mesh_simple = lambda name, *a, **k: names.append(name) or add(name, *a, **k)
    traj = rollout_trajectory(scenes.get("double_pendulum"), 3)
    Viewer(traj, server)
    m = traj.scene.sap_model
    assert names == [f"/world0/{m.body_name[b]}/inertia" for b in range(m.body_count)]


def test_video_of_a_scene_without_shapes_shows_its_bodies(tmp_path):
    imageio = pytest.importorskip("imageio.v2")
    reason = _gl_unavailable()
    if reason:
        pytest.skip(reason)
    from sap_tools.shapes import body_colors

    out = tmp_path / "pendulum.gif"
    r = subprocess.run([sys.executable, "-m", "sap_tools.view", "double_pendulum", "--steps", "3", "--video", str(out),
                        "--size", "160x120", "--quiet"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    img = np.asarray(imageio.mimread(str(out))[-1])[..., :3].astype(float)
    for color in body_colors(scenes.get("double_pendulum").sap_model):  # each body's colour (shaded) is there
        assert (np.abs(img - color).sum(-1) < 120).sum() > 20, color


def test_every_shape_type_is_drawn_closed():
    """Cylinders, ellipsoids, convex meshes and height fields get closed meshes of the right volume."""
    from sap_common import ModelBuilder
    from sap_tools.shapes import shape_mesh

    b = ModelBuilder()
    body = b.add_body(1.0, inertia=np.eye(3) * 0.01)
    b.add_joint_free(-1, body, q0=(0, 0, 1, 0, 0, 0, 1))
    shapes = {"cylinder": (b.add_shape_cylinder(body, radius=0.1, half_length=0.2), np.pi * 0.01 * 0.4),
              "ellipsoid": (b.add_shape_ellipsoid(body, a=0.1, b=0.2, c=0.3), 4 / 3 * np.pi * 0.006),
              "mesh": (b.add_shape_convex_mesh(body, vertices=[[x, y, z] for x in (0, 1) for y in (0, 1)
                                                               for z in (0, 1)] + [[0.5, 0.5, 0.5]]), 1.0),
              "heightfield": (b.add_shape_heightfield(heights=[[0.0, 0.1, 0.0], [0.2, 0.0, 0.05]], hx=1.0, hy=0.5,
                                                      base=0.1), 0.3)}
    m = b.finalize()
    for name, (s, volume) in shapes.items():
        v, f = shape_mesh(m, s, n=64)
        edges = np.sort(np.concatenate([f[:, [0, 1]], f[:, [1, 2]], f[:, [2, 0]]]), axis=1)
        _, counts = np.unique(edges, axis=0, return_counts=True)
        assert np.all(counts == 2), name
        a, c, d = v[f[:, 0]], v[f[:, 1]], v[f[:, 2]]
        signed = np.einsum("ij,ij->i", a, np.cross(c, d)).sum() / 6  # > 0: faces point outward
        assert signed == pytest.approx(volume, rel=0.01 if name in ("cylinder", "ellipsoid") else 1e-12), name


def test_ctrl_c_while_the_video_is_written_keeps_the_old_file(tmp_path, capsys, monkeypatch):
    pytest.importorskip("imageio")
    import sap_tools.view.video as video

    out = tmp_path / "old.gif"
    out.write_bytes(b"GIF89a the old video")

    def interrupted(traj, frames, world=0, size=(640, 480)):
        yield np.zeros((size[1], size[0], 3), np.uint8)
        raise KeyboardInterrupt

    monkeypatch.setattr(video, "render_frames", interrupted)
    assert main([str(DATA / "drake" / "sphere_drop.npz"), "--video", str(out), "--size", "64x64", "--quiet"]) == 130
    assert capsys.readouterr().err == (f"sap-view: interrupted (Ctrl-C); not written: {out} (an existing file keeps "
                                       "its old content)\n")
    assert out.read_bytes() == b"GIF89a the old video" and os.listdir(tmp_path) == ["old.gif"]


def test_a_frame_past_the_rollout_is_an_error_before_the_rollout(capsys, monkeypatch):
    import sap_tools.view.cli as view

    pytest.importorskip("viser")  # the serving path checks it is installed first
    monkeypatch.setattr(view, "rollout_trajectory", lambda *a, **k: pytest.fail("the rollout ran before the check"))
    assert main(["box_stack", "--steps", "20", "--frame", "21"]) == 2
    err = capsys.readouterr().err
    assert err == "sap-view: error: --frame: must lie in [0, 21), got 21 (the rollout's 20 steps give 21 frames)\n"
    assert main(["box_stack", "--frame", "100000"]) == 2  # the default rollout: 500 steps at most
    assert "--frame: must lie in [0, 501), got 100000" in capsys.readouterr().err

"""Headless video of a :class:`~sap_tools.trajectory.Trajectory`: MuJoCo's offscreen renderer, imageio to encode.

The bodies' collision shapes become MuJoCo geoms on mocap bodies (one per body); each frame
sets the mocap poses from the trajectory, renders, and draws the frame's contact forces as
arrows. No display is needed: MuJoCo opens an EGL context (``MUJOCO_GL=egl``, the default set
here when there is no display), or OSMesa (``MUJOCO_GL=osmesa``); either must be chosen before
``mujoco`` is first imported, which ``sap-view`` does. An ``.mp4`` needs imageio-ffmpeg (it
ships an ffmpeg binary); a ``.gif`` needs only imageio (Pillow).
"""

from __future__ import annotations

import os

import numpy as np

from sap_common.model import ShapeType
from sap_tools.progress import Progress
from sap_tools.shapes import GROUND_COLOR, body_colors, body_stand_ins, shape_mesh
from sap_tools.trajectory import Trajectory

__all__ = ["VIDEO_FORMATS", "parse_size", "check_video_path", "select_gl", "scene_xml", "render_frames",
           "render_video"]

VIDEO_FORMATS = (".mp4", ".gif")
MAX_VIDEO_FRAMES = 3000  # a longer run is subsampled to this many frames (a minute and a half at 30 fps)


def parse_size(text: str) -> tuple[int, int]:
    """``"640x480"`` → (640, 480); both even (H.264 needs even sizes) and in [64, 4096]."""
    try:
        w, h = (int(x) for x in str(text).lower().split("x"))
    except ValueError:
        raise ValueError(f"--size: expected WIDTHxHEIGHT such as 640x480, got {text!r}") from None
    if not (64 <= w <= 4096 and 64 <= h <= 4096 and w % 2 == 0 and h % 2 == 0):
        raise ValueError(f"--size: width and height must be even and lie in [64, 4096], got {w}x{h}")
    return w, h


def check_video_path(path: str) -> str:
    """``path`` if its extension is one of :data:`VIDEO_FORMATS` and its encoder is installed."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in VIDEO_FORMATS:
        raise ValueError(f"--video: {ext or 'no extension'!r} is not a video format here; use one of "
                         f"{', '.join(VIDEO_FORMATS)}")
    try:
        import imageio.v2  # noqa: F401
    except ImportError:
        raise ValueError("--video: needs imageio (pip install -e \".[viewer]\")") from None
    if ext == ".mp4":
        try:
            import imageio_ffmpeg  # noqa: F401
        except ImportError:
            raise ValueError("--video: an .mp4 needs imageio-ffmpeg (pip install -e \".[viewer]\"); "
                             "a .gif needs only imageio") from None
    return path


def select_gl() -> str:
    """Choose MuJoCo's OpenGL backend for offscreen rendering before ``mujoco`` is imported:
    keep ``MUJOCO_GL`` if set, else ``egl`` when there is no display. Returns the choice."""
    if "MUJOCO_GL" not in os.environ and not os.environ.get("DISPLAY"):
        os.environ["MUJOCO_GL"] = "egl"
    return os.environ.get("MUJOCO_GL", "glfw")


def _f(x) -> str:
    return " ".join(f"{float(v):.9g}" for v in np.ravel(x))


def _wxyz(q):
    return np.array([q[3], q[0], q[1], q[2]])


def _geom(m, s, rgba, plane_half: float) -> str:
    kind, size = ShapeType(int(m.shape_type[s])), m.shape_size[s]
    X = m.shape_transform[s]
    common = f'pos="{_f(X[:3])}" quat="{_f(_wxyz(X[3:]))}" rgba="{_f(rgba)}" contype="0" conaffinity="0"'
    if kind == ShapeType.PLANE:
        return f'<geom type="plane" size="{plane_half:.6g} {plane_half:.6g} 0.1" material="grid" {common}/>'
    if kind == ShapeType.SPHERE:
        return f'<geom type="sphere" size="{size[0]:.9g}" {common}/>'
    if kind == ShapeType.CAPSULE:
        return f'<geom type="capsule" size="{size[0]:.9g} {size[1]:.9g}" {common}/>'
    if kind == ShapeType.CYLINDER:
        return f'<geom type="cylinder" size="{size[0]:.9g} {size[1]:.9g}" {common}/>'
    if kind == ShapeType.ELLIPSOID:
        return f'<geom type="ellipsoid" size="{_f(size)}" {common}/>'
    if kind in (ShapeType.CONVEX_MESH, ShapeType.HEIGHTFIELD):  # the triangles the viewer draws, as a mesh asset
        return f'<geom type="mesh" mesh="shape{s}" {common}/>'
    return f'<geom type="box" size="{_f(size)}" {common}/>'


def scene_xml(traj: Trajectory, width: int, height: int) -> str:
    """An MJCF of the trajectory's shapes: world shapes fixed, one mocap body per body."""
    m = traj.scene.sap_model
    p = traj.body_q[..., :3].reshape(-1, 3) if m.body_count else np.zeros((1, 3))
    size = max(float(np.ptp(p, axis=0).max()), 0.3)
    colors = np.concatenate([body_colors(m) / 255.0, np.ones((m.body_count, 1))], 1)
    ground = (*(np.array(GROUND_COLOR) / 255.0), 1.0)
    world = [_geom(m, s, ground, 2 * size) for s in range(m.shape_count) if m.shape_body[s] < 0]
    meshes = ""
    for s in range(m.shape_count):
        if ShapeType(int(m.shape_type[s])) in (ShapeType.CONVEX_MESH, ShapeType.HEIGHTFIELD):
            v, f = shape_mesh(m, s)
            meshes += f'<mesh name="shape{s}" vertex="{_f(v)}" face="{" ".join(str(int(i)) for i in f.ravel())}"/>'
    bodies = []
    stand_ins = body_stand_ins(m)
    for b in range(m.body_count):
        geoms = "".join(_geom(m, s, colors[b], 1.0) for s in range(m.shape_count) if m.shape_body[s] == b)
        kind = stand_ins.get(b, ("",))[0]
        if kind == "box":  # no collision shape: the box of its inertia (at least 1 % of the scene)
            half, X = np.maximum(stand_ins[b][1], 0.01 * size), stand_ins[b][2]
            geoms += (f'<geom type="box" size="{_f(half)}" pos="{_f(X[:3])}" quat="{_f(_wxyz(X[3:]))}" '
                      f'rgba="{_f(colors[b])}" contype="0" conaffinity="0"/>')
        elif kind == "axes":  # no mass either: its frame's three axes
            length = 0.1 * size
            geoms += "".join(f'<geom type="capsule" fromto="0 0 0 {_f(length * np.eye(3)[i])}" '
                             f'size="{0.02 * length:.6g}" rgba="{rgb} 1" contype="0" conaffinity="0"/>'
                             for i, rgb in enumerate(("0.9 0.1 0.1", "0.1 0.7 0.1", "0.1 0.2 0.9")))
        bodies.append(f'<body name="b{b}" mocap="true">{geoms}</body>')
    centre = 0.5 * (p.min(0) + p.max(0))
    return (f'<mujoco><visual><global offwidth="{width}" offheight="{height}"/><quality shadowsize="2048"/>'
            '<headlight ambient=".45 .45 .45" diffuse=".6 .6 .6" specular=".1 .1 .1"/></visual>'
            '<asset><texture type="skybox" builtin="gradient" rgb1="1 1 1" rgb2=".75 .8 .88" width="64" height="64"/>'
            '<texture name="grid" type="2d" builtin="checker" rgb1=".9 .9 .9" rgb2=".78 .78 .78" '
            'width="256" height="256"/><material name="grid" texture="grid" texrepeat="8 8" reflectance="0"/>'
            + meshes + '</asset>'
            f'<worldbody><light pos="{_f(centre + [0, 0, 4 * size])}" dir="0 0 -1" directional="true" '
            'diffuse=".5 .5 .5"/>'
            + "".join(world) + "".join(bodies) + "</worldbody></mujoco>")


def render_frames(traj: Trajectory, frames, world: int = 0, size=(640, 480)):
    """Yield an RGB image (H, W, 3) uint8 for each frame index in ``frames``."""
    select_gl()
    import mujoco

    w, h = size
    mj = mujoco.MjModel.from_xml_string(scene_xml(traj, w, h))
    data = mujoco.MjData(mj)
    try:
        renderer = mujoco.Renderer(mj, h, w)
    except Exception as e:  # noqa: BLE001 - every GL failure gets the same advice
        raise RuntimeError(f"MuJoCo could not open an offscreen OpenGL context (MUJOCO_GL="
                           f"{os.environ.get('MUJOCO_GL', '')!r}): {e}. Install EGL (Debian: libegl1, libgl1-mesa-dri) "
                           "or OSMesa (libosmesa6, then MUJOCO_GL=osmesa), chosen before mujoco is imported") from None
    p = traj.body_q[:, world, :, :3].reshape(-1, 3) if traj.body_q.shape[2] else np.zeros((1, 3))
    extent = max(float(np.ptp(p, axis=0).max()), 0.3)
    cam = mujoco.MjvCamera()
    cam.lookat[:] = 0.5 * (p.min(0) + p.max(0))
    cam.distance, cam.azimuth, cam.elevation = 1.8 * extent, 130.0, -22.0
    fmax = float(np.linalg.norm(traj.contact_force[:, world], axis=-1).max(initial=0.0))
    scale = 0.25 * extent / fmax if fmax > 0 else 0.0
    try:
        for n in frames:
            data.mocap_pos[:] = traj.body_q[n, world, :, :3]
            data.mocap_quat[:] = traj.body_q[n, world][:, [6, 3, 4, 5]]
            mujoco.mj_kinematics(mj, data)
            renderer.update_scene(data, camera=cam)
            k = int(traj.contact_count[n, world])
            for c in range(k):
                start = traj.contact_point[n, world, c]
                end = start + scale * traj.contact_force[n, world, c]
                if renderer.scene.ngeom >= renderer.scene.maxgeom or not np.linalg.norm(end - start) > 0:
                    continue
                g = renderer.scene.geoms[renderer.scene.ngeom]
                mujoco.mjv_initGeom(g, mujoco.mjtGeom.mjGEOM_ARROW, np.zeros(3), np.zeros(3), np.zeros(9),
                                    np.array([0.12, 0.43, 0.9, 1.0], np.float32))
                mujoco.mjv_connector(g, mujoco.mjtGeom.mjGEOM_ARROW, 0.008 * extent, start, end)
                renderer.scene.ngeom += 1
            yield renderer.render().copy()
    finally:
        renderer.close()


def render_video(traj: Trajectory, path: str, world: int = 0, fps: int = 30, size=(640, 480), every=None,
                 quiet: bool = True) -> int:
    """Write the trajectory as a video (``.mp4`` or ``.gif``); returns the number of frames.

    ``every``: use every N-th frame; default: the stride that plays the run in real time at
    ``fps`` (at most :data:`MAX_VIDEO_FRAMES` frames).
    """
    import imageio.v2 as imageio

    check_video_path(path)
    if not 0 <= world < traj.num_worlds:
        raise ValueError(f"--world: must lie in [0, {traj.num_worlds}), got {world}")
    if every is None:
        dt = float(np.median(np.diff(traj.t))) if traj.num_frames > 1 else 1.0
        every = max(1, int(round(1.0 / (fps * dt))), -(-traj.num_frames // MAX_VIDEO_FRAMES))
    frames = list(range(0, traj.num_frames, every))
    if frames[-1] != traj.num_frames - 1:
        frames.append(traj.num_frames - 1)
    if path.lower().endswith(".gif"):
        writer = imageio.get_writer(path, mode="I", duration=1000.0 / fps, loop=0)
    else:
        writer = imageio.get_writer(path, fps=fps, codec="libx264", quality=7, macro_block_size=2)
    with writer, Progress(len(frames), f"{traj.scene.name} video", enabled=not quiet) as bar:
        for i, img in enumerate(render_frames(traj, frames, world, size)):
            writer.append_data(img)
            bar.update(i + 1)
    return len(frames)

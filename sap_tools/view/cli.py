"""``sap-view``: watch a rollout or a recorded Drake run in the browser (viser), or render it to a video.

    sap-view box_stack                                   # roll out with sap_ref, serve on :8080
    sap-view humanoid --steps 200 --num-worlds 4 --backend gpu --device cpu
    sap-view tests/data/drake/sphere_slide.npz           # a Drake recording (the .json beside it)
    sap-view robot.mujoco.npz                            # a trajectory file (sap-record --engine mujoco, yours)
    sap-view box_stack --video box_stack.mp4             # no browser: an MP4 rendered headless

Open the printed address in a browser. The page shows the bodies with their collision shapes
(a body without one as the box of its inertia, or as axes where it has no mass),
the ground, the contact points and force arrows of the step into the current frame; the panel
has play/pause, a time slider, the playback speed, the world of the batch to show, and
"Inspect this step": the step inspector's figures (the ones ``sap-inspect`` writes) for the step
from the current frame, shown in the panel, with the full HTML report to download. viser
bundles its web client, so no network is needed.

``--video`` renders with MuJoCo's offscreen renderer (EGL, or OSMesa with MUJOCO_GL=osmesa) and
encodes with imageio-ffmpeg: no display and no browser needed (``pip install -e ".[viewer]"``).
The video is written atomically (complete, or not at all: an existing file stays as it was).

Serving checks the address first: an address that is not this machine's, or a port in use, is a
one-line error (exit 2) before any work, and the start of the server is bounded
(:data:`SERVER_START_TIMEOUT_S`).
"""

from __future__ import annotations

import errno
import io
import os
import socket
import sys
import threading
import time

import numpy as np

from sap_tools.cli import (
    LINE_SEARCH_CHOICES,
    PRESET_CHOICES,
    atomic_output,
    check_flags,
    check_out,
    entry_point,
    fail,
    load_scene_arg,
    parser,
    scene_solver_kwargs,
    warp_device,
)
from sap_tools.progress import Progress
from sap_tools.shapes import GROUND_COLOR, body_colors, body_stand_ins, box_mesh, shape_mesh
from sap_tools.trajectory import Trajectory, is_recording, load_recorded, rollout_trajectory

__all__ = ["Viewer", "load_trajectory", "check_address", "serve", "main", "FORCE_ARROW_LENGTH",
           "SERVER_START_TIMEOUT_S"]

PROG = "sap-view"
FORCE_ARROW_LENGTH = 0.25  # the largest contact force of the run is drawn this long, as a fraction of the scene size
BODY_OPACITY = 0.8  # force arrows start at the contact point and point into body 1: let them show through
_CONTACT_COLOR = (20, 20, 20)
_FORCE_COLOR = (30, 110, 230)
# The longest wait for viser's server to start listening: it binds a free address in milliseconds,
# and a start that does not end (viser retries an address it cannot bind without end) is an error.
SERVER_START_TIMEOUT_S = 30.0
# Flags of the two outputs (the browser viewer and --video), refused with the other, and their defaults.
SERVE_FLAGS = ("--host", "--port", "--serve-seconds", "--frame")
VIDEO_FLAGS = ("--fps", "--size", "--world")
SERVE_DEFAULTS = {"host": "127.0.0.1", "port": 8080, "frame": 0}
VIDEO_DEFAULTS = {"fps": 30, "size": "640x480", "world": 0}
# A body without collision shapes is drawn as the box of its inertia, at least this big (a fraction
# of the scene size), or as axes this long where it has no mass or no inertia.
MIN_BODY_BOX = 0.01
BODY_AXES_LENGTH = 0.1


def _wxyz(q_xyzw):
    q = np.asarray(q_xyzw, float)
    return np.array([q[3], q[0], q[1], q[2]])


def _scene_size(traj: Trajectory) -> tuple[np.ndarray, float]:
    """Centre and size [m] of the region the bodies move through (for the camera and arrow lengths)."""
    p = traj.body_q[..., :3].reshape(-1, 3) if traj.body_q.shape[2] else np.zeros((1, 3))
    lo, hi = p.min(0), p.max(0)
    size = max(float(np.max(hi - lo)), 4 * float(np.max(traj.scene.sap_model.shape_size, initial=0.05)), 0.3)
    return 0.5 * (lo + hi), size


class Viewer:
    """The viser scene and panel of a :class:`Trajectory`; ``show(frame, world)`` moves the bodies.

    Args:
        traj: what to show.
        server: a ``viser.ViserServer``.
    """

    def __init__(self, traj: Trajectory, server):
        self.traj, self.server = traj, server
        self.frame, self.world = 0, 0
        self.playing = False
        self.capture = None
        self._inspect_handles = []
        self._lock = threading.RLock()  # show() may re-enter through the slider's callback
        m = traj.scene.sap_model
        self.centre, self.size = _scene_size(traj)
        fmax = float(np.linalg.norm(traj.contact_force, axis=-1).max(initial=0.0))
        self.force_scale = FORCE_ARROW_LENGTH * self.size / fmax if fmax > 0 else 0.0  # [m per N]
        scene = server.scene
        scene.set_up_direction("+z")
        server.initial_camera.position = tuple(self.centre + np.array([1.1, -1.3, 0.7]) * self.size)
        server.initial_camera.look_at = tuple(self.centre)
        colors = body_colors(m)
        self.bodies = {}
        stand_ins = body_stand_ins(m)  # bodies without a collision shape: their inertia's box, or axes
        for w in range(traj.num_worlds):
            for b in range(m.body_count):
                axes = stand_ins.get(b, ("",))[0] == "axes"
                self.bodies[w, b] = scene.add_frame(f"/world{w}/{m.body_name[b]}", visible=w == 0, show_axes=axes,
                                                    axes_length=BODY_AXES_LENGTH * self.size,
                                                    axes_radius=0.05 * BODY_AXES_LENGTH * self.size)
        for b, (kind, *box) in stand_ins.items():
            if kind != "box":
                continue
            v, f = box_mesh(np.maximum(box[0], MIN_BODY_BOX * self.size))
            for w in range(traj.num_worlds):
                scene.add_mesh_simple(f"/world{w}/{m.body_name[b]}/inertia", v, f, color=tuple(colors[b]),
                                      opacity=BODY_OPACITY, position=box[1][:3], wxyz=_wxyz(box[1][3:]))
        for s in range(m.shape_count):
            X = m.shape_transform[s]
            b = int(m.shape_body[s])
            v, f = shape_mesh(m, s, plane_size=3 * self.size, n=20)
            if b < 0:
                offset = np.array([self.centre[0], self.centre[1], 0.0]) if int(m.shape_type[s]) == 0 else np.zeros(3)
                scene.add_mesh_simple(f"/static/{m.shape_name[s]}", v + offset, f, color=GROUND_COLOR, side="double",
                                      position=X[:3], wxyz=_wxyz(X[3:]))
                if int(m.shape_type[s]) == 0:
                    scene.add_grid(f"/static/{m.shape_name[s]}_grid", width=3 * self.size, height=3 * self.size,
                                   cell_size=self.size / 10, section_size=self.size / 2,
                                   position=X[:3] + [self.centre[0], self.centre[1], 1e-4 * self.size],
                                   wxyz=_wxyz(X[3:]))
                continue
            for w in range(traj.num_worlds):
                scene.add_mesh_simple(f"/world{w}/{m.body_name[b]}/{m.shape_name[s]}", v, f, color=tuple(colors[b]),
                                      opacity=BODY_OPACITY, position=X[:3], wxyz=_wxyz(X[3:]))
        self._build_panel()
        self.show(0, 0)

    # -- panel ---------------------------------------------------------------------------------
    def _build_panel(self):
        gui, traj = self.server.gui, self.traj
        self.status = gui.add_markdown(self._status_text())
        self.play = gui.add_checkbox("Play", False)
        self.slider = gui.add_slider("Frame", 0, traj.num_frames - 1, 1, 0)
        self.speed = gui.add_slider("Frames per second", 1, 120, 1, min(30, max(1, traj.num_frames // 4)))
        worlds = [str(w) for w in range(traj.num_worlds)]
        self.world_choice = gui.add_dropdown("World", worlds, initial_value="0", visible=traj.num_worlds > 1)
        self.show_contacts = gui.add_checkbox("Contacts and forces", True)
        self.inspect_button = gui.add_button("Inspect this step")
        self.inspector = gui.add_folder("Step inspector")

        @self.slider.on_update
        def _(_):
            if int(self.slider.value) != self.frame:
                self.show(int(self.slider.value), self.world)

        @self.world_choice.on_update
        def _(_):
            self.show(self.frame, int(self.world_choice.value))

        @self.show_contacts.on_update
        def _(_):
            self.show(self.frame, self.world)

        @self.play.on_update
        def _(_):
            self.playing = bool(self.play.value)

        @self.inspect_button.on_click
        def _(event):
            self.inspect_button.disabled = True
            try:
                self.inspect(self.frame, self.world, client=event.client)
            finally:
                self.inspect_button.disabled = False

    def _status_text(self) -> str:
        t = self.traj
        return (f"**{t.scene.name}** — {t.source}; {t.num_frames} frames, h = {t.scene.dt:g} s, "
                f"{t.num_worlds} world{'s' if t.num_worlds > 1 else ''}. "
                f"Frame {self.frame}: t = {t.t[self.frame]:.4g} s, "
                f"{int(t.contact_count[self.frame, self.world])} contacts. sap-view: ready")

    # -- drawing -------------------------------------------------------------------------------
    def show(self, frame: int, world: int) -> None:
        """Put every body of the shown world at its pose of ``frame``, draw that frame's contacts."""
        traj, m = self.traj, self.traj.scene.sap_model
        frame = int(np.clip(frame, 0, traj.num_frames - 1))
        with self._lock, self.server.atomic():
            if world != self.world:
                for b in range(m.body_count):
                    self.bodies[self.world, b].visible = False
                    self.bodies[world, b].visible = True
            self.frame, self.world = frame, world
            for b in range(m.body_count):
                X = traj.body_q[frame, world, b]
                h = self.bodies[world, b]
                h.position, h.wxyz = X[:3], _wxyz(X[3:])
            k = int(traj.contact_count[frame, world])
            visible = bool(self.show_contacts.value) if hasattr(self, "show_contacts") else True
            if k and visible:
                p, f = traj.contact_point[frame, world, :k], traj.contact_force[frame, world, :k]
                self._points = self.server.scene.add_point_cloud(
                    "/contacts/points", p.astype(np.float32), _CONTACT_COLOR, point_size=0.02 * self.size,
                    point_shape="circle")
                if self.force_scale > 0:  # a recording without forces (MuJoCo's) shows the points only
                    ends = np.stack([p, p + self.force_scale * f], axis=1).astype(np.float32)
                    self._arrows = self.server.scene.add_arrows(
                        "/contacts/forces", ends, _FORCE_COLOR, shaft_radius=0.004 * self.size,
                        head_radius=0.01 * self.size, head_length=0.02 * self.size)
            else:
                for h in (getattr(self, "_points", None), getattr(self, "_arrows", None)):
                    if h is not None:
                        h.visible = False
            if hasattr(self, "status"):
                self.status.content = self._status_text()
            if hasattr(self, "slider") and int(self.slider.value) != frame:
                self.slider.value = frame

    def tick(self, dt: float) -> None:
        """Advance playback by ``dt`` seconds of wall time (called by the serve loop)."""
        if not self.playing:
            return
        self._acc = getattr(self, "_acc", 0.0) + dt * float(self.speed.value)
        n = int(self._acc)
        if n:
            self._acc -= n
            self.show((self.frame + n) % self.traj.num_frames, self.world)

    # -- on-demand inspection -----------------------------------------------------------------------
    def inspect(self, frame: int, world: int, client=None, dpi: int = 60):
        """Re-run the step from ``frame`` (world ``world``) in sap_ref and show the inspector's figures."""
        import matplotlib.image

        from sap_common.config import SapConfig
        from sap_ref.collision import CollisionPipeline
        from sap_tools.inspector import report_html
        from sap_tools.inspector_figures import figures, png
        from sap_tools.step_capture import capture_step, summary

        traj, scene = self.traj, self.traj.scene
        frame = min(frame, traj.num_frames - 1)
        state = traj.state(frame)
        kw = dict(traj.solver_kwargs)
        cfg = SapConfig.from_preset(kw.pop("contact_preset_variant", "approx32"), **kw)
        pipe = CollisionPipeline(scene.sap_model, scene.max_rigid_contact, cfg)
        contacts = pipe.contacts()
        pipe.collide(state, contacts)
        cap = capture_step(scene.sap_model, state, scene.control, contacts, scene.dt, world, scene=scene.name,
                           step=frame, **traj.solver_kwargs)
        self.capture = cap
        for h in self._inspect_handles:
            h.remove()
        self._inspect_handles = []
        with self.inspector:
            self._inspect_handles.append(self.server.gui.add_markdown(
                "\n\n".join(f"- {s}" for s in summary(cap))))
            for title, fig in figures(cap):
                img = matplotlib.image.imread(io.BytesIO(png(fig, dpi)), format="png")
                self._inspect_handles.append(self.server.gui.add_image((img[..., :3] * 255).astype(np.uint8),
                                                                       label=title, format="png"))
            download = self.server.gui.add_button("Download the HTML report")
            self._inspect_handles.append(download)

        @download.on_click
        def _(event):
            event.client.send_file_download(f"sap_inspect_{scene.name}_{frame}.html",
                                            report_html([cap]).encode("utf-8"))

        return cap


def load_trajectory(source: str, *, steps=None, num_worlds: int = 1, backend: str = "ref", device=None,
                    preset=None, line_search=None, every: int = 1, quiet: bool = True,
                    frame: int | None = None) -> Trajectory:
    """A recorded run (a Drake recording: ``.npz``, or its recorded ``.json``; a trajectory file:
    ``.npz``/``.json`` of the format of docs/validation.md, MuJoCo recordings included) or a
    rollout of a scene (name or file). ``frame`` (``--frame``), if given, is checked against a
    rollout's frame count before the rollout runs (a recording's is known once it is read)."""
    if is_recording(source) or (source.lower().endswith(".npz") and not os.path.exists(source)):
        if backend != "ref" or preset or line_search or steps is not None or num_worlds != 1:
            raise ValueError("recording: --steps, --num-worlds, --backend, --preset and --line-search apply to "
                             "rollouts, not to a recording")
        if not os.path.exists(source):
            raise ValueError(f"recording: {source!r} does not exist")
        return load_recorded(source, every)
    scene = load_scene_arg(source, num_worlds)
    kwargs, _ = scene_solver_kwargs(scene, preset, line_search)
    n = min(scene.num_steps, 500) if steps is None else steps
    if frame is not None and not 0 <= frame <= n:  # a rollout of n steps has frames 0 … n
        raise ValueError(f"--frame: must lie in [0, {n + 1}), got {frame} (the rollout's {n} steps give "
                         f"{n + 1} frames)")
    with Progress(n, f"{scene.name} ({'sap_gpu' if backend == 'gpu' else 'sap_ref'})", enabled=not quiet) as bar:
        return rollout_trajectory(scene, n, backend, device, progress=bar.update, **kwargs)


def check_address(host: str, port: int) -> None:
    """``ValueError`` naming ``--host`` or ``--port`` when the server could not listen there: the
    address is not one of this machine's (or no address at all), or the port is in use or not
    allowed. Checked by binding every address ``host`` resolves to, as the server will (with
    SO_REUSEADDR, as asyncio's server sets it), then letting go."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise ValueError(f"--host: {host!r} is not an address or a host name this machine can resolve "
                         f"({e.strerror}); use 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)") from None
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(address)
            except OSError as e:
                if e.errno == errno.EADDRINUSE:
                    raise ValueError(f"--port: {port} is in use on {host}; give another port (--port "
                                     f"{_free_port(host, port)} is free now)") from None
                if e.errno == errno.EADDRNOTAVAIL:
                    raise ValueError(f"--host: {host!r} ({address[0]}) is not an address of this machine, so "
                                     "nothing can listen there; use 127.0.0.1 (this machine only), 0.0.0.0 (every "
                                     "interface) or one of this machine's addresses") from None
                if e.errno == errno.EACCES:
                    raise ValueError(f"--port: {port} on {host} needs privileges (ports below 1024 do); use a port "
                                     "of 1024 or above, such as 8080") from None
                raise ValueError(f"--host/--port: cannot listen on {host}:{port} ({e.strerror or e})") from None


def _free_port(host: str, start: int) -> int:
    """The first port after ``start`` that ``host`` can bind now (for the error message)."""
    for port in range(start + 1, min(start + 100, 65536)):
        try:
            check_address(host, port)
            return port
        except ValueError:
            continue
    return 0


def _start_server(host: str, port: int, label: str, timeout: float = SERVER_START_TIMEOUT_S):
    """A running ``viser.ViserServer`` on exactly ``host:port``, or ``RuntimeError``: viser waits
    without end for an address it cannot bind (trying port after port) and moves to the next port
    without a word when one is taken; here the start is bounded by ``timeout`` and a server on
    another port is stopped and refused."""
    import viser

    box: dict = {}

    def start():
        try:
            box["server"] = viser.ViserServer(host=host, port=port, verbose=False, label=label)
        except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
            box["error"] = e

    thread = threading.Thread(target=start, name="sap-view server start", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise RuntimeError(f"--host/--port: the viewer did not start listening on {host}:{port} within {timeout:g} s")
    if "error" in box:
        raise RuntimeError(f"--host/--port: the viewer could not start on {host}:{port} ({box['error']})")
    server = box["server"]
    if int(server.get_port()) != port:
        server.stop()
        raise RuntimeError(f"--port: {port} on {host} was taken by another program while the run was prepared "
                           f"(the viewer would have moved to port {server.get_port()}); give another port")
    return server


def serve(traj: Trajectory, host: str, port: int, seconds: float | None, frame: int = 0, quiet: bool = False):
    """Serve ``traj`` until Ctrl-C (``KeyboardInterrupt`` propagates, after the server stops) or
    ``seconds`` have passed; ``RuntimeError`` when the server cannot start on ``host:port``."""
    server = _start_server(host, port, f"sap-view: {traj.scene.name}")
    try:
        view = Viewer(traj, server)
        view.show(frame, 0)
        if not quiet:
            print(f"sap-view: serving {traj.scene.name} ({traj.num_frames} frames) at http://{host}:{port}/ "
                  f"— Ctrl-C to stop", flush=True)
        end = None if seconds is None else time.monotonic() + seconds
        last = time.monotonic()
        while end is None or time.monotonic() < end:
            time.sleep(0.02)
            now = time.monotonic()
            view.tick(now - last)
            last = now
    finally:
        server.stop()


@entry_point(PROG)
def main(argv=None) -> int:
    p = parser(PROG, __doc__)
    p.add_argument("source", help="scene name, scene file (JSON/MJCF), a Drake recording (.npz, or its .json) or a "
                                  "trajectory file (.npz/.json, e.g. a MuJoCo recording)")
    p.add_argument("--steps", type=int, default=None, help="rollout length (default: the scene's, at most 500)")
    p.add_argument("--num-worlds", type=int, default=1, help="worlds of the rollout's batch (default 1)")
    p.add_argument("--backend", default="ref", help="ref (sap_ref, default) or gpu (sap_gpu)")
    p.add_argument("--device", default=None, help="Warp device for --backend gpu")
    p.add_argument("--preset", default=None, help=f"contact_preset_variant: one of {PRESET_CHOICES}")
    p.add_argument("--line-search", default=None, help=f"line_search_variant: one of {LINE_SEARCH_CHOICES}")
    p.add_argument("--every", type=int, default=None,
                   help="use every N-th frame (default: all; a video: the stride that plays in real time)")
    # Serving and video flags default to None so that one given with the other output is seen (and refused).
    p.add_argument("--host", default=None, help="address to serve on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="port to serve on (default 8080); one in use is an error")
    p.add_argument("--frame", type=int, default=None, help="frame shown first (default 0)")
    p.add_argument("--serve-seconds", type=float, default=None, help="stop serving after this long (default: Ctrl-C)")
    p.add_argument("--video", default=None, help="write an MP4 (or .gif) instead of serving; needs no display")
    p.add_argument("--fps", type=int, default=None, help="video frames per second (default 30)")
    p.add_argument("--size", default=None, help="video size WxH (default 640x480)")
    p.add_argument("--world", type=int, default=None, help="world shown in the video (default 0)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    if args.video is not None:
        from sap_tools.view.video import select_gl

        select_gl()  # before anything imports mujoco (an MJCF scene does)
    try:
        check_flags(args.preset, args.line_search)
        serving_given = [f for f in SERVE_FLAGS if getattr(args, f[2:].replace("-", "_")) is not None]
        video_given = [f for f in VIDEO_FLAGS if getattr(args, f[2:].replace("-", "_")) is not None]
        for flag, default in SERVE_DEFAULTS.items() | VIDEO_DEFAULTS.items():
            if getattr(args, flag) is None:
                setattr(args, flag, default)
        if args.video is not None and serving_given:
            raise ValueError(f"{serving_given[0]}: serves the browser viewer, and --video writes a file instead; "
                             f"leave out {', '.join(serving_given)} (or --video)")
        if args.video is None and video_given:
            raise ValueError(f"{video_given[0]}: applies to --video; the browser viewer has its own controls "
                             "(frames per second, world)")
        if args.every is not None and args.every < 1:
            raise ValueError(f"--every: must be >= 1, got {args.every}")
        if args.backend not in ("ref", "gpu"):
            raise ValueError(f"--backend: must be one of ref, gpu, got {args.backend!r}")
        if args.device is not None and args.backend != "gpu":
            raise ValueError("--device: only applies to --backend gpu")
        if args.num_worlds < 1:
            raise ValueError(f"--num-worlds: must be >= 1, got {args.num_worlds}")
        if not 0 <= args.world < args.num_worlds:
            raise ValueError(f"--world: must lie in [0, {args.num_worlds}), got {args.world}")
        if not 0 < args.port < 65536:
            raise ValueError(f"--port: must lie in [1, 65535], got {args.port}")
        if args.serve_seconds is not None and args.serve_seconds <= 0:
            raise ValueError(f"--serve-seconds: must be > 0, got {args.serve_seconds}")
        size = None
        if args.video is not None:
            from sap_tools.view.video import check_video_path, parse_size

            size = parse_size(args.size)
            if args.fps < 1:
                raise ValueError(f"--fps: must be >= 1, got {args.fps}")
            check_video_path(check_out("--video", args.video))
        else:
            import viser  # noqa: F401 - fail early with the install hint

            check_address(args.host, args.port)
        device = warp_device(args.device) if args.backend == "gpu" else None
        traj = load_trajectory(args.source, steps=args.steps, num_worlds=args.num_worlds, backend=args.backend,
                               device=device, preset=args.preset, line_search=args.line_search,
                               every=1 if args.video is not None else (args.every or 1),
                               quiet=args.quiet, frame=args.frame)
        if not 0 <= args.frame < traj.num_frames:
            raise ValueError(f"--frame: must lie in [0, {traj.num_frames}), got {args.frame}")
    except ImportError as e:
        return fail(PROG, f"{e.name or e} is not installed: pip install -e \".[viewer]\"")
    except ValueError as e:
        return fail(PROG, e)
    if args.video is not None:
        from sap_tools.view.video import render_video

        try:
            with atomic_output(args.video) as tmp:
                n = render_video(traj, tmp, world=args.world, fps=args.fps, size=size, every=args.every,
                                 quiet=args.quiet)
        except (ValueError, RuntimeError) as e:
            return fail(PROG, e)
        print(f"video written to {args.video} ({n} frames, {os.path.getsize(args.video) / 1024:.0f} KiB)")
        return 0
    try:
        serve(traj, args.host, args.port, args.serve_seconds, args.frame, args.quiet)
    except RuntimeError as e:
        return fail(PROG, e)
    return 0


if __name__ == "__main__":
    sys.exit(main())

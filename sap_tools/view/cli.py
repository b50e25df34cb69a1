"""``sap-view``: watch a rollout or a recorded Drake run in the browser (viser), or render it to a video.

    sap-view box_stack                                   # roll out with sap_ref, serve on :8080
    sap-view humanoid --steps 200 --num-worlds 4 --backend gpu --device cpu
    sap-view tests/data/drake/sphere_slide.npz           # a Drake recording (the .json beside it)
    sap-view box_stack --video box_stack.mp4             # no browser: an MP4 rendered headless

Open the printed address in a browser. The page shows the bodies with their collision shapes,
the ground, the contact points and force arrows of the step into the current frame; the panel
has play/pause, a time slider, the playback speed, the world of the batch to show, and
"Inspect this step": the step inspector's figures (the ones ``sap-inspect`` writes) for the step
from the current frame, shown in the panel, with the full HTML report to download. viser
bundles its web client, so no network is needed.

``--video`` renders with MuJoCo's offscreen renderer (EGL, or OSMesa with MUJOCO_GL=osmesa) and
encodes with imageio-ffmpeg: no display and no browser needed (``pip install -e ".[viewer]"``).
"""

from __future__ import annotations

import io
import os
import sys
import threading
import time

import numpy as np

from sap_tools.cli import (LINE_SEARCH_CHOICES, PRESET_CHOICES, check_flags, check_out, fail, load_scene_arg, parser,
                           scene_solver_kwargs, warp_device)
from sap_tools.progress import Progress
from sap_tools.shapes import GROUND_COLOR, body_colors, shape_mesh
from sap_tools.trajectory import Trajectory, is_recording, recording_trajectory, rollout_trajectory

__all__ = ["Viewer", "load_trajectory", "main", "FORCE_ARROW_LENGTH"]

PROG = "sap-view"
FORCE_ARROW_LENGTH = 0.25  # the largest contact force of the run is drawn this long, as a fraction of the scene size
BODY_OPACITY = 0.8  # force arrows start at the contact point and point into body 1: let them show through
_CONTACT_COLOR = (20, 20, 20)
_FORCE_COLOR = (30, 110, 230)


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
        for w in range(traj.num_worlds):
            for b in range(m.body_count):
                self.bodies[w, b] = scene.add_frame(f"/world{w}/{m.body_name[b]}", show_axes=False, visible=w == 0)
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
                    preset=None, line_search=None, every: int = 1, quiet: bool = True) -> Trajectory:
    """A Drake recording (``.npz``, or a recorded ``.json``) or a rollout of a scene (name or file)."""
    if is_recording(source):
        if backend != "ref" or preset or line_search or steps is not None or num_worlds != 1:
            raise ValueError("recording: --steps, --num-worlds, --backend, --preset and --line-search apply to "
                             "rollouts, not to a recording")
        if not os.path.exists(source):
            raise ValueError(f"recording: {source!r} does not exist")
        return recording_trajectory(source, every)
    scene = load_scene_arg(source, num_worlds)
    kwargs, _ = scene_solver_kwargs(scene, preset, line_search)
    n = min(scene.num_steps, 500) if steps is None else steps
    with Progress(n, f"{scene.name} ({'sap_gpu' if backend == 'gpu' else 'sap_ref'})", enabled=not quiet) as bar:
        return rollout_trajectory(scene, n, backend, device, progress=bar.update, **kwargs)


def serve(traj: Trajectory, host: str, port: int, seconds: float | None, frame: int = 0, quiet: bool = False):
    """Serve ``traj`` until Ctrl-C or ``seconds`` have passed."""
    import viser

    server = viser.ViserServer(host=host, port=port, verbose=False, label=f"sap-view: {traj.scene.name}")
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
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


def main(argv=None) -> int:
    p = parser(PROG, __doc__)
    p.add_argument("source", help="scene name, scene file (JSON/MJCF), or a Drake recording (.npz, or its .json)")
    p.add_argument("--steps", type=int, default=None, help="rollout length (default: the scene's, at most 500)")
    p.add_argument("--num-worlds", type=int, default=1, help="worlds of the rollout's batch (default 1)")
    p.add_argument("--backend", default="ref", help="ref (sap_ref, default) or gpu (sap_gpu)")
    p.add_argument("--device", default=None, help="Warp device for --backend gpu")
    p.add_argument("--preset", default=None, help=f"contact_preset_variant: one of {PRESET_CHOICES}")
    p.add_argument("--line-search", default=None, help=f"line_search_variant: one of {LINE_SEARCH_CHOICES}")
    p.add_argument("--every", type=int, default=None,
                   help="use every N-th frame (default: all; a video: the stride that plays in real time)")
    p.add_argument("--host", default="127.0.0.1", help="address to serve on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port to serve on (default 8080)")
    p.add_argument("--frame", type=int, default=0, help="frame shown first (default 0)")
    p.add_argument("--serve-seconds", type=float, default=None, help="stop serving after this long (default: Ctrl-C)")
    p.add_argument("--video", default=None, help="write an MP4 (or .gif) instead of serving; needs no display")
    p.add_argument("--fps", type=int, default=30, help="video frames per second (default 30)")
    p.add_argument("--size", default="640x480", help="video size WxH (default 640x480)")
    p.add_argument("--world", type=int, default=0, help="world shown in the video (default 0)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    if args.video is not None:
        from sap_tools.view.video import select_gl

        select_gl()  # before anything imports mujoco (an MJCF scene does)
    try:
        check_flags(args.preset, args.line_search)
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
        device = warp_device(args.device) if args.backend == "gpu" else None
        traj = load_trajectory(args.source, steps=args.steps, num_worlds=args.num_worlds, backend=args.backend,
                               device=device, preset=args.preset, line_search=args.line_search,
                               every=1 if args.video is not None else (args.every or 1),
                               quiet=args.quiet)
        if not 0 <= args.frame < traj.num_frames:
            raise ValueError(f"--frame: must lie in [0, {traj.num_frames}), got {args.frame}")
    except ImportError as e:
        return fail(PROG, f"{e.name or e} is not installed: pip install -e \".[viewer]\"")
    except ValueError as e:
        return fail(PROG, e)
    if args.video is not None:
        from sap_tools.view.video import render_video

        try:
            n = render_video(traj, args.video, world=args.world, fps=args.fps, size=size, every=args.every,
                             quiet=args.quiet)
        except (ValueError, RuntimeError) as e:
            return fail(PROG, e)
        print(f"video written to {args.video} ({n} frames, {os.path.getsize(args.video) / 1024:.0f} KiB)")
        return 0
    serve(traj, args.host, args.port, args.serve_seconds, args.frame, args.quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())

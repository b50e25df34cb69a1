"""A Newton-built quadruped falls on the ground, simulated by SAP, recorded by a Newton viewer.

The robot is built with Newton's ``ModelBuilder`` (a box torso on a free joint, four legs of two
driven hinges each, capsule and sphere colliders, a ground plane); the simulation loop is the
usual Newton one; the solver is this project's SAP — the one line that differs from a Newton
example using MuJoCo is marked below (``--solver mujoco`` runs that line instead).

Headless by default: ``--viewer file`` writes Newton's recording (``.json``), which
``newton.viewer.ViewerFile`` loads back for playback in Newton's GL viewer; ``--viewer usd``
writes a USD stage (needs ``usd-core``), ``--viewer null`` records nothing, ``--viewer gl`` opens
a window (needs a display). The recording goes to ``--out``, or without it into a new temporary
folder (never into the working directory); the path is printed. Runs on a CPU-only machine
(Warp's CPU device)::

    python examples/newton_robot_fall.py --out robot_fall.json
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import newton
import numpy as np
import warp as wp

import sap_newton
from sap_tools.cli import check_out

FPS = 60
SUBSTEPS = 8  # dt = 1/480 s
HIP_ANGLE, KNEE_ANGLE = 0.4, -0.8  # rad: the pose the drives hold
START_HEIGHT = 0.6  # m, torso centre
START_ROLL = 1.2  # rad: lands on its side and tips over


def build_robot(num_worlds: int = 1, device: str = "cpu", rolls=None) -> newton.Model:
    """The quadruped in ``num_worlds`` worlds (each a little differently rolled, or rolled by
    ``rolls[w]`` radians when given), on a ground plane."""

    def quadruped(b: newton.ModelBuilder, roll: float) -> None:
        b.default_shape_cfg.ke, b.default_shape_cfg.kd, b.default_shape_cfg.mu = 5e4, 500.0, 0.8
        q = wp.quat_from_axis_angle(wp.vec3(1.0, 0.0, 0.0), roll)
        torso = b.add_link(xform=wp.transform((0.0, 0.0, START_HEIGHT), q), label="torso")
        b.add_shape_box(torso, hx=0.25, hy=0.12, hz=0.05)
        joints = [b.add_joint_free(torso, label="root")]
        for side, (x, y) in (("fl", (0.2, 0.15)), ("fr", (0.2, -0.15)), ("hl", (-0.2, 0.15)), ("hr", (-0.2, -0.15))):
            thigh = b.add_link(label=f"{side}_thigh")
            b.add_shape_capsule(thigh, xform=wp.transform((0.0, 0.0, -0.1), wp.quat_identity()), radius=0.03,
                                half_height=0.07)
            shin = b.add_link(label=f"{side}_shin")
            b.add_shape_capsule(shin, xform=wp.transform((0.0, 0.0, -0.1), wp.quat_identity()), radius=0.025,
                                half_height=0.07)
            b.add_shape_sphere(shin, xform=wp.transform((0.0, 0.0, -0.2), wp.quat_identity()), radius=0.035)
            joints.append(b.add_joint_revolute(torso, thigh, parent_xform=wp.transform((x, y, -0.05),
                                                                                        wp.quat_identity()),
                                               axis=(0.0, 1.0, 0.0), target_q=HIP_ANGLE, target_ke=150.0,
                                               target_kd=5.0, limit_lower=-1.2, limit_upper=1.2, effort_limit=60.0,
                                               armature=0.01, label=f"{side}_hip"))
            joints.append(b.add_joint_revolute(thigh, shin, parent_xform=wp.transform((0.0, 0.0, -0.2),
                                                                                       wp.quat_identity()),
                                               axis=(0.0, 1.0, 0.0), target_q=KNEE_ANGLE, target_ke=150.0,
                                               target_kd=5.0, limit_lower=-2.2, limit_upper=0.2, effort_limit=60.0,
                                               armature=0.01, label=f"{side}_knee"))
        b.add_articulation(joints)

    builder = newton.ModelBuilder()
    if rolls is None:
        rolls = [START_ROLL * (1.0 + 0.5 * w / max(num_worlds - 1, 1)) for w in range(num_worlds)]
    if num_worlds == 1:
        quadruped(builder, float(rolls[0]))
    else:
        for w in range(num_worlds):
            builder.begin_world()
            quadruped(builder, float(rolls[w]))
            builder.end_world()
    builder.default_shape_cfg.ke, builder.default_shape_cfg.kd, builder.default_shape_cfg.mu = 5e4, 500.0, 0.8
    builder.add_ground_plane()
    model = builder.finalize(device=device)
    # Start every joint at its drive target (Newton's joint_q is the initial state).
    q, q_start = model.joint_q.numpy(), model.joint_q_start.numpy()
    for j, label in enumerate(model.joint_label):
        if label.endswith("_hip") or label.endswith("_knee"):
            q[q_start[j]] = HIP_ANGLE if label.endswith("_hip") else KNEE_ANGLE
    model.joint_q.assign(q)
    return model


def recording_path(kind: str, out: str | None) -> str | None:
    """Where ``--viewer file``/``usd`` writes: ``out``, or a file in a new temporary folder."""
    if kind not in ("file", "usd"):
        return None
    if out is not None:
        return out
    return os.path.join(tempfile.mkdtemp(prefix="sap-newton-example-"),
                        "robot_fall.json" if kind == "file" else "robot_fall.usda")


def make_viewer(kind: str, out: str | None, num_frames: int):
    if kind == "file":
        return newton.viewer.ViewerFile(out, auto_save=False)
    if kind == "usd":
        return newton.viewer.ViewerUSD(out, fps=FPS, num_frames=num_frames)
    if kind == "null":
        return newton.viewer.ViewerNull(num_frames=num_frames)
    return newton.viewer.ViewerGL()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="newton_robot_fall.py", description=__doc__.splitlines()[0])
    p.add_argument("--viewer", choices=("file", "usd", "null", "gl"), default="file")
    p.add_argument("--out", default=None, help="recording path (file: .json, usd: .usda; default: a file in a new "
                                               "temporary folder)")
    p.add_argument("--num-frames", type=int, default=120)
    p.add_argument("--num-worlds", type=int, default=1)
    p.add_argument("--solver", choices=("sap", "mujoco"), default="sap")
    p.add_argument("--collision", choices=("newton", "sap"), default="newton",
                   help="SAP solver only: Newton's collision pipeline or this project's")
    p.add_argument("--device", default="cuda:0" if wp.is_cuda_available() else "cpu",
                   help="Warp device, passed explicitly to everything (default cuda:0 where present, else cpu)")
    args = p.parse_args(argv)
    if args.num_frames < 1 or args.num_worlds < 1:
        p.error("--num-frames and --num-worlds must be >= 1")
    if args.out is not None and args.viewer in ("file", "usd"):
        try:  # before the run: the project's check of an output path (a file there keeps its content)
            check_out("--out", args.out)
        except ValueError as e:
            p.error(str(e))

    model = build_robot(args.num_worlds, args.device)
    if args.solver == "sap":
        solver = sap_newton.SolverSAP(model, collision=args.collision, max_rigid_contact=32)  # <- the one line
    else:
        solver = newton.solvers.SolverMuJoCo(model)  # what a Newton example would have
    uses_newton_contacts = args.solver == "sap" and args.collision == "newton"
    pipeline = newton.CollisionPipeline(model) if uses_newton_contacts else None
    contacts = pipeline.contacts() if pipeline else None

    state_0, state_1, control = model.state(), model.state(), model.control()
    newton.eval_fk(model, state_0.joint_q, state_0.joint_qd, state_0)
    out = recording_path(args.viewer, args.out)
    viewer = make_viewer(args.viewer, out, args.num_frames)
    viewer.set_model(model)
    dt = 1.0 / (FPS * SUBSTEPS)
    torso = [i for i, label in enumerate(model.body_label) if label.endswith("torso")]
    start_z = state_0.body_q.numpy()[torso, 2].copy()
    sim_time = 0.0
    viewer.begin_frame(sim_time)
    viewer.log_state(state_0)
    viewer.end_frame()
    for _ in range(args.num_frames):
        for _ in range(SUBSTEPS):
            state_0.clear_forces()
            if pipeline:
                pipeline.collide(state_0, contacts)
            solver.step(state_0, state_1, control, contacts, dt)
            state_0, state_1 = state_1, state_0
            sim_time += dt
        viewer.begin_frame(sim_time)
        viewer.log_state(state_0)
        viewer.end_frame()
    viewer.close()  # the file and USD viewers write their recording here

    end_z = state_0.body_q.numpy()[torso, 2]
    print(f"{args.solver}: {args.num_frames} frames ({sim_time:.3f} s), torso height {np.round(start_z, 3).tolist()}"
          f" m -> {np.round(end_z, 3).tolist()} m")
    if args.solver == "sap":
        d = solver.diagnostics()
        print(f"last step: status {d['status'].tolist()}, Newton iterations {d['newton_iterations'].tolist()}, "
              f"contacts {d['contact_count'].tolist()}, dropped {d['truncated_contact_count'].tolist()}")
    if out is not None:
        if not os.path.isfile(out):  # the viewer wrote nothing there: say so, and fail
            print(f"newton_robot_fall.py: error: the recording {out} was not written", file=sys.stderr)
            return 1
        print(f"recording: {out}")
    return 0 if np.all(np.isfinite(end_z)) else 1


if __name__ == "__main__":
    sys.exit(main())

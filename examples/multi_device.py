"""N independent worlds split over the devices given, one process per device, results gathered.

The one-process-per-device recipe (docs/scaling.md § Many devices): each device gets its own
process, and that process passes its device explicitly to everything it builds (model arrays,
solver, collision, states), so nothing lands on Warp's implicit default device (``cuda:0``). The
worlds are split into contiguous shards, one per device; world ``w`` starts from the scene's
state with its velocities nudged by a random draw keyed by ``(seed, w)``, so its trajectory does
not depend on which process or device ran it nor on its neighbours; the gathered results are
therefore the results of one process running every world, bit for bit (on identical devices;
tests/test_scale_examples.py checks it with two CPU processes).

    python examples/multi_device.py --scene box_stack --num-worlds 8 --devices cpu cpu --steps 50
    python examples/multi_device.py --num-worlds 16384 --devices cuda:0 cuda:1 cuda:2 cuda:3 --out run.npz

Each worker is this file run with ``--worker``: a separate Python process launched with
``subprocess`` (as torchrun would launch it), which writes its shard to a ``.npz`` file; the parent
waits for all of them and gathers the shards in world order. ``--out`` writes the gathered arrays.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

RESULT_FIELDS = ("joint_q", "joint_qd", "status", "newton_iterations", "body_contact_force")
NUDGE = 0.05  # [m/s, rad/s]: σ of the per-world velocity nudge


def initial_state(scene, world_ids, seed: int):
    """The scene's state for the worlds ``world_ids`` (global indices), each nudged by its own draw."""
    state = scene.state.copy()
    for i, w in enumerate(world_ids):
        rng = np.random.default_rng([seed, int(w)])
        state.joint_qd[i] = state.joint_qd[i] + rng.normal(0.0, NUDGE, state.joint_qd.shape[1])
    return state


def run_shard(scene_name: str, world_ids, device: str, steps: int, seed: int) -> dict:
    """Step the worlds ``world_ids`` on ``device`` (explicitly, everywhere); per-world results."""
    import warp as wp

    import sap_gpu
    from sap_common import scenes

    wp.config.log_level = wp.LOG_WARNING
    device = sap_gpu.device.get_device(device)
    scene = scenes.get(scene_name, num_worlds=len(world_ids))
    C = scene.max_rigid_contact
    solver = sap_gpu.SolverSAP(scene.sap_model, max_rigid_contact=C, device=device, **scene.solver_kwargs)
    pipeline = sap_gpu.CollisionPipeline(scene.sap_model, C, solver.config, device=device)
    contacts = pipeline.contacts()
    state = sap_gpu.to_device(initial_state(scene, world_ids, seed), device)
    control = sap_gpu.to_device(scene.control, device)
    for _ in range(steps):
        pipeline.collide(state, contacts)
        solver.step(state, state, control, contacts, scene.dt)
    host = sap_gpu.to_host(state)
    return {"world": np.asarray(world_ids, np.int64), "joint_q": host.joint_q, "joint_qd": host.joint_qd,
            "status": solver.diagnostics()["status"], "newton_iterations": solver.statistics()["newton_iterations"],
            "body_contact_force": solver.read_observables()["body_contact_force"]}


def shards(num_worlds: int, devices) -> list:
    """Contiguous world ranges, one per device (sizes differ by at most one)."""
    return [np.asarray(s, np.int64) for s in np.array_split(np.arange(num_worlds), len(devices))]


def run(scene_name: str, num_worlds: int, devices, steps: int, seed: int = 0, timeout: float = 600.0) -> dict:
    """One worker process per device; returns the gathered per-world results (world order)."""
    parts = shards(num_worlds, devices)
    with tempfile.TemporaryDirectory(prefix="sap-multi-device-") as tmp:
        procs = []
        for i, (device, ids) in enumerate(zip(devices, parts)):
            out = os.path.join(tmp, f"shard{i}.npz")
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--scene", scene_name, "--device", device,
                   "--worlds", ",".join(map(str, ids)), "--steps", str(steps), "--seed", str(seed), "--out", out]
            procs.append((subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True), out,
                          device))
        results = []
        for proc, out, device in procs:
            log, _ = proc.communicate(timeout=timeout)
            if proc.returncode != 0:
                raise RuntimeError(f"the worker on {device} failed (exit {proc.returncode}):\n{log}")
            with np.load(out) as f:
                results.append({k: f[k] for k in f.files})
    return gather(results, num_worlds)


def gather(results, num_worlds: int) -> dict:
    """The shards' arrays put together in world order (``ValueError`` if a world is missing or twice)."""
    world = np.concatenate([r["world"] for r in results])
    if sorted(world.tolist()) != list(range(num_worlds)):
        raise ValueError(f"shards: expected each of the {num_worlds} worlds once, got {sorted(world.tolist())}")
    order = np.argsort(world)
    return {k: np.concatenate([r[k] for r in results])[order] for k in RESULT_FIELDS}


def run_local(scene_name: str, num_worlds: int, device: str, steps: int, seed: int = 0) -> dict:
    """Every world in this process on one device (what the gathered run must equal)."""
    return gather([run_shard(scene_name, np.arange(num_worlds), device, steps, seed)], num_worlds)


def check_arguments(p: argparse.ArgumentParser, args) -> None:
    """``p.error`` (one line, exit 2) for a device this machine does not have, an unknown scene, or
    an ``--out`` that cannot be written (a file there keeps its content)."""
    import sap_gpu
    from sap_common import scenes
    from sap_tools.cli import check_out

    try:
        for device in args.devices:
            sap_gpu.device.get_device(device, "--devices")
        scenes.get(args.scene, num_worlds=1)
    except ValueError as e:
        p.error(str(e))
    if args.out:
        try:  # the project's check of an output path, where np.savez writes
            check_out("--out", args.out if args.out.endswith(".npz") else args.out + ".npz")
        except ValueError as e:
            p.error(str(e))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="multi_device.py", description=__doc__.splitlines()[0])
    p.add_argument("--scene", default="box_stack", help="built-in scene (default box_stack)")
    p.add_argument("--num-worlds", type=int, default=8)
    p.add_argument("--devices", nargs="+", default=["cpu", "cpu"], help="one worker process per entry (cpu, cuda:N)")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="write the gathered arrays to this .npz")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--device", default=None, help=argparse.SUPPRESS)
    p.add_argument("--worlds", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:  # one shard, on one device; the parent reads --out
        ids = np.array([int(x) for x in args.worlds.split(",")], np.int64)
        np.savez(args.out, **run_shard(args.scene, ids, args.device, args.steps, args.seed))
        return 0
    if args.num_worlds < len(args.devices) or args.steps < 1:
        p.error("--num-worlds must be at least the number of devices, and --steps >= 1")
    check_arguments(p, args)  # every device, the scene and --out, before any worker starts
    try:
        out = run(args.scene, args.num_worlds, args.devices, args.steps, args.seed)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"multi_device.py: error: {e}", file=sys.stderr)
        return 1
    for device, ids in zip(args.devices, shards(args.num_worlds, args.devices)):
        print(f"{device}: worlds {ids[0]}..{ids[-1]}")
    print(f"{args.num_worlds} worlds, {args.steps} steps: status {out['status'].tolist()}, Newton iterations "
          f"{out['newton_iterations'].tolist()}")
    if args.out:
        np.savez(args.out, **out)
        print(f"results written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

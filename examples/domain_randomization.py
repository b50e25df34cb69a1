"""Domain randomization on the humanoid: step W worlds, reset the fallen ones with new parameters.

What a reinforcement-learning environment with domain randomization does, on ``sap_gpu``:

1. a stand-in "policy" writes ``control.joint_act``: Gaussian torques, ``NOISE`` times each motor's
   effort limit, a new draw per world, DOF and step (zero on the root's free joint). It keeps
   nobody standing: the humanoid collapses, which is what makes worlds fall and reset;
2. one step of every world: ``pipeline.collide`` then ``solver.step``, both reading the per-world
   parameters (``sap_gpu.WorldParameters``: friction, masses and inertias, damping, drive gains;
   the humanoid's motors are feed-forward, so its gains are zero and a draw keeps them zero);
3. a kernel flags each world that is *done*: its root (the free joint's z) fell below
   ``--fall-height``, its episode reached ``--max-episode`` steps, or the solver failed it;
4. every ``--reset-every`` steps, a reset batch: ``solver.reset(state, flagged)`` puts the flagged
   worlds back to the initial state (the others go on untouched), and their parameters are
   redrawn: ``sap_tools.randomize.draw`` on the host, uploaded into preallocated device arrays,
   written with ``params.set(name, device_values, world_mask=flagged)``.

Everything in steps 1-4 but the host draw is a kernel launch on the device: no host
synchronization and no allocation, so on a CUDA device the step and the reset batch are each
captured once in a CUDA graph (``wp.ScopedCapture``) and replayed; on the CPU device the same
calls run eagerly. The host reads the counters only to print progress (about ten times a run).

    python examples/domain_randomization.py --num-worlds 8 --steps 300 --device cpu
    python examples/domain_randomization.py --num-worlds 4096 --steps 2000 --out dr.json
"""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import warp as wp

from sap_tools import cli

wp.set_module_options({"enable_backward": False})

PROG = "domain_randomization.py"
SCENE = "humanoid"
NOISE = 0.3  # σ of the policy's torque, as a fraction of each motor's effort limit
PROGRESS_LINES = 10  # about this many progress lines a run
# Why a world was flagged for reset (the mask's value: nonzero = reset).
FELL, TIMEOUT, FAILED = wp.constant(1), wp.constant(2), wp.constant(3)


@wp.kernel
def policy(seed: int, clock: wp.array(dtype=wp.int32), scale: wp.array(dtype=wp.float64),
           act: wp.array2d(dtype=wp.float64)):
    """act[w, i] = scale[i] · N(0, 1), drawn per (seed, step, world, DOF)."""
    w, i = wp.tid()
    s = wp.rand_init(seed, clock[0])
    s = wp.rand_init(wp.int32(s), w * scale.shape[0] + i)
    act[w, i] = scale[i] * wp.float64(wp.randn(s))


@wp.kernel
def track(joint_q: wp.array2d(dtype=wp.float64), root_z: int, fall_height: wp.float64, max_episode: int,
          failed: wp.array(dtype=wp.int32), episode: wp.array(dtype=wp.int32), flagged: wp.array(dtype=wp.int32),
          clock: wp.array(dtype=wp.int32)):
    """After a step: count the episode's step and flag a world that is done (it stays flagged, and
    its episode length frozen, until the next reset batch)."""
    w = wp.tid()
    if w == 0:
        clock[0] = clock[0] + 1
    if flagged[w] != 0:
        return
    episode[w] = episode[w] + 1
    if failed[w] != 0:
        flagged[w] = FAILED
    elif joint_q[w, root_z] < fall_height:
        flagged[w] = FELL
    elif episode[w] >= max_episode:
        flagged[w] = TIMEOUT


@wp.kernel
def finish(flagged: wp.array(dtype=wp.int32), episode: wp.array(dtype=wp.int32), counts: wp.array2d(dtype=wp.int32)):
    """After a reset batch: count the finished episodes (counts[w] = falls, timeouts, failures,
    episode steps), start new ones, clear the flags."""
    w = wp.tid()
    f = flagged[w]
    if f == 0:
        return
    counts[w, f - 1] = counts[w, f - 1] + 1
    counts[w, 3] = counts[w, 3] + episode[w]
    episode[w] = 0
    flagged[w] = 0


def _capture(device, fn):
    """``fn`` captured in a CUDA graph, or None with the reason (a CPU device; no conditional graph
    nodes, which the solver's Newton loop needs; a failed capture). ``fn`` must have run once
    eagerly (its kernels loaded: nothing compiles inside a capture)."""
    if not device.is_cuda:
        return None, "eager launches (Warp CPU device)"
    if not wp.is_conditional_graph_supported():
        return None, "eager launches (CUDA graphs with conditional nodes need CUDA >= 12.4)"
    try:
        with wp.ScopedCapture(device=device) as capture:
            fn()
    except Exception as e:  # noqa: BLE001 -- the example still runs, eagerly, and says why
        return None, f"eager launches (graph capture failed: {type(e).__name__}: {e})"
    return capture.graph, "CUDA graph replay"


def run(num_worlds: int, steps: int, device, seed: int = 0, reset_every: int = 10, fall_height: float = 0.7,
        max_episode: int = 400, log=print) -> dict:
    """The loop; returns the summary (host copies, read once at the end)."""
    import sap_gpu
    from sap_common import scenes
    from sap_common.enums import JointType
    from sap_tools import randomize

    scene = scenes.get(SCENE, num_worlds=num_worlds)
    model, C = scene.sap_model, scene.max_rigid_contact
    W, nv = num_worlds, model.joint_dof_count
    rng = np.random.default_rng(seed)

    # Per-world parameters, first drawn for every world with host values: checked on the host
    # (a bad value is a ValueError naming it), then uploaded -- an allocation and a copy, fine at
    # setup, not inside a captured graph.
    params = sap_gpu.WorldParameters(model, device=device)
    first = randomize.draw(model, rng)
    for name, values in first.items():
        params.set(name, values)
    fields = list(first)  # the randomized fields (body_mass brings body_inertia)
    solver = sap_gpu.SolverSAP(model, max_rigid_contact=C, device=device, parameters=params, **scene.solver_kwargs)
    pipeline = sap_gpu.CollisionPipeline(model, C, solver.config, device=device, parameters=params)
    contacts = pipeline.contacts()
    state = sap_gpu.to_device(scene.state, device)
    control = sap_gpu.to_device(scene.control, device)
    initial = {name: params.get(name) for name in fields}
    # The redraws' device side: one preallocated array per field, in the field's dtype and shape
    # (params.array(name)); each reset batch uploads a host draw into it (the same memory, so a
    # graph captured over it reads the new values) and params.set writes the flagged worlds' rows.
    draws = {name: wp.empty_like(params.array(name)) for name in fields}

    free = [j for j in range(model.joint_count) if int(model.joint_type[j]) == int(JointType.FREE)]
    root_z = int(model.joint_q_start[free[0]]) + 2  # the free joint's z coordinate in joint_q
    effort = np.asarray(model.joint_effort_limit, np.float64)
    scale = wp.array(NOISE * np.where(np.isfinite(effort), effort, 0.0), dtype=wp.float64,
                     device=device)  # zero on DOFs without an effort limit: the root's free joint
    clock = wp.zeros(1, dtype=wp.int32, device=device)
    episode = wp.zeros(W, dtype=wp.int32, device=device)
    flagged = wp.zeros(W, dtype=wp.int32, device=device)  # the reset mask: int32, nonzero = reset
    counts = wp.zeros((W, 4), dtype=wp.int32, device=device)  # falls, timeouts, failures, episode steps
    failed = solver.world_statistics.failed

    def step():  # one step of every world: launches only
        wp.launch(policy, dim=(W, nv), device=device, inputs=[seed, clock, scale], outputs=[control.joint_act])
        pipeline.collide(state, contacts)
        solver.step(state, state, control, contacts, scene.dt)
        wp.launch(track, dim=W, device=device, inputs=[state.joint_q, root_z, fall_height, max_episode, failed],
                  outputs=[episode, flagged, clock])

    def reset_batch():  # the flagged worlds start over with new parameters: launches only
        solver.reset(state, flagged)
        # Device values and a device int32 mask: one kernel writes the flagged worlds' rows and one
        # checks them (a bad value flags the world in params.invalid instead of raising), with no
        # allocation and no host synchronization, so this is captured with the rest. A host-value
        # set here (NumPy values, or a NumPy mask) would allocate, upload and read the mask back:
        # correct eagerly, but not capturable in a CUDA graph.
        for name in fields:
            params.set(name, draws[name], world_mask=flagged)
        wp.launch(finish, dim=W, device=device, inputs=[flagged], outputs=[episode, counts])

    def redraw():  # host side of a reset batch: new values for every world (the mask picks the rows used;
        # drawing all W is what keeps the host from having to read the mask first)
        for name, values in randomize.draw(model, rng).items():
            draws[name].assign(values)

    def progress(i, since):  # the one host synchronization: progress, about PROGRESS_LINES times a run
        c, pending = counts.numpy(), int(np.count_nonzero(flagged.numpy()))
        resets = int(c[:, :3].sum())
        mean = f"{c[:, 3].sum() / resets:.1f} steps" if resets else "-"
        log(f"step {i}/{steps}: {resets} resets so far ({int(c[:, 0].sum())} fell, {int(c[:, 1].sum())} timed out, "
            f"{int(c[:, 2].sum())} failed; {resets - since} since the last report), mean episode {mean}, "
            f"{pending} worlds flagged awaiting reset")
        return resets

    step_graph = reset_graph = None
    mode = "eager launches (Warp CPU device)"
    report_every = max(1, steps // reset_every // PROGRESS_LINES)  # in reset batches
    since = 0
    for i in range(1, steps + 1):
        if step_graph is not None:
            wp.capture_launch(step_graph)
        else:
            step()
            if i == 1:  # kernels loaded: capture the step where the device allows
                step_graph, mode = _capture(device, step)
        batch = i % reset_every == 0
        if batch:
            redraw()
            if reset_graph is not None:
                wp.capture_launch(reset_graph)
            else:
                reset_batch()
                if step_graph is not None:  # the same, for the reset batch (host draw excluded)
                    reset_graph, how = _capture(device, reset_batch)
                    if reset_graph is None:
                        mode += f"; reset batches: {how}"
        if (batch and (i // reset_every) % report_every == 0) or i == steps:
            since = progress(i, since)

    c = counts.numpy()
    final = {name: params.get(name) for name in fields}
    changed = np.zeros(W, bool)
    for name in fields:
        changed |= np.any(final[name].reshape(W, -1) != initial[name].reshape(W, -1), axis=1)
    resets = c[:, :3].sum(axis=1)
    q = state.joint_q.numpy()
    return {
        "scene": SCENE, "num_worlds": W, "steps": steps, "device": str(device), "mode": mode, "seed": seed,
        "reset_every": reset_every, "fall_height": fall_height, "max_episode": max_episode,
        "resets": resets.tolist(), "falls": c[:, 0].tolist(), "timeouts": c[:, 1].tolist(),
        "failures": c[:, 2].tolist(),
        "mean_episode_length": float(c[:, 3].sum() / resets.sum()) if resets.sum() else None,
        "parameters_changed": changed.tolist(),
        "invalid_parameters": int(params.invalid.numpy().sum()),
        "total_mass_initial": initial["body_mass"].sum(axis=1).tolist(),
        "total_mass_final": final["body_mass"].sum(axis=1).tolist(),
        "friction_mean_initial": initial["shape_material_mu"].mean(axis=1).tolist(),
        "friction_mean_final": final["shape_material_mu"].mean(axis=1).tolist(),
        "flagged_awaiting_reset": int(np.count_nonzero(flagged.numpy())),
        "root_height": q[:, root_z].tolist(),
        "finite": bool(np.isfinite(q).all()),
    }


def check(out: dict) -> str | None:
    """What is wrong with a run, or None: non-finite states, invalid parameters, or a world whose
    parameters changed without a reset (or were not redrawn at one)."""
    if not out["finite"]:
        return "a world's state is not finite"
    if out["invalid_parameters"]:
        return f"{out['invalid_parameters']} worlds hold invalid parameters"
    bad = [w for w, (n, c) in enumerate(zip(out["resets"], out["parameters_changed"])) if (n > 0) != c]
    if bad:
        return f"worlds {bad}: parameters changed without a reset, or kept at one"
    return None


@cli.entry_point(PROG)
def main(argv=None) -> int:
    p = cli.parser(PROG, __doc__)
    p.add_argument("--num-worlds", type=int, default=16, help="worlds stepped together (default 16)")
    p.add_argument("--steps", type=int, default=300, help="steps of every world (default 300)")
    p.add_argument("--device", default=None, help="Warp device (default cuda:0 where present, else cpu)")
    p.add_argument("--seed", type=int, default=0, help="seed of the parameter draws and the policy's noise")
    p.add_argument("--reset-every", type=int, default=10, metavar="K",
                   help="steps between reset batches (default 10)")
    p.add_argument("--fall-height", type=float, default=0.7,
                   help="a world whose root is below this height [m] has fallen (default 0.7; it starts at 1.28)")
    p.add_argument("--max-episode", type=int, default=400, help="steps before an episode times out (default 400)")
    p.add_argument("--out", default=None, help="write the summary to this JSON file")
    args = p.parse_args(argv)
    for flag, value in (("--num-worlds", args.num_worlds), ("--steps", args.steps),
                        ("--reset-every", args.reset_every), ("--max-episode", args.max_episode)):
        if value < 1:
            p.error(f"{flag}: expected an integer >= 1, got {value}")
    if not math.isfinite(args.fall_height):
        p.error(f"--fall-height: expected a finite height, got {args.fall_height}")
    try:
        if args.out:
            cli.check_out("--out", args.out)
        device = cli.warp_device(args.device)
    except ValueError as e:
        p.error(str(e))
    print(f"{SCENE}: {args.num_worlds} worlds, {args.steps} steps on {device}; reset batch every "
          f"{args.reset_every} steps (root below {args.fall_height} m, or {args.max_episode} steps)")
    out = run(args.num_worlds, args.steps, device, args.seed, args.reset_every, args.fall_height, args.max_episode)
    redrawn = sum(out["parameters_changed"])
    mean = out["mean_episode_length"]
    print(f"done ({out['mode']}): {sum(out['resets'])} resets in {sum(n > 0 for n in out['resets'])} of "
          f"{args.num_worlds} worlds, mean episode {'-' if mean is None else f'{mean:.1f} steps'}, parameters "
          f"redrawn in {redrawn} worlds, {out['flagged_awaiting_reset']} flagged awaiting reset")
    for w in range(min(args.num_worlds, 8)):
        print(f"  world {w}: {out['resets'][w]} resets, total mass {out['total_mass_initial'][w]:.2f} -> "
              f"{out['total_mass_final'][w]:.2f} kg, mean friction {out['friction_mean_initial'][w]:.3f} -> "
              f"{out['friction_mean_final'][w]:.3f}, root at {out['root_height'][w]:.3f} m")
    if args.out:
        with cli.atomic_output(args.out) as tmp, open(tmp, "w") as f:
            json.dump(out, f, indent=1)
        print(f"summary written to {args.out}")
    problem = check(out)
    if problem:
        print(f"{PROG}: error: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

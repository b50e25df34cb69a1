"""A policy-style loop on Newton with SAP: act, step, read contact forces, reset the fallen worlds.

What a reinforcement-learning environment does every control step, with everything on the device
and no host synchronization inside the loop (so one iteration can be captured in a CUDA graph):

1. the "policy" writes joint targets (here: the standing pose plus noise, drawn on the device);
2. ``SUBSTEPS`` SAP steps, each writing the requested observables: ``BODY_CONTACT_F`` (the net
   contact wrench on every body, Newton's ``(f, τ about the COM)``) and ``WORLD_STATUS``;
3. a kernel turns them into a reward per world (alive bonus, minus a penalty on the torso's contact
   force) and a *fallen* flag: the torso touches the ground (its contact force exceeds
   ``TORSO_CONTACT_N``), it sank below ``MIN_HEIGHT``, or the solver flagged the world
   (``solver.world_failed``);
4. ``solver.reset(state, fallen_mask)`` puts the fallen worlds back to the model's initial state and
   clears their solver state, with Newton's mask convention (``world_count + 1`` entries); the
   other worlds go on, bit for bit as without the reset.

The quadruped of ``newton_robot_fall.py`` stands in the even worlds and starts rolled over (so it
falls, is reset, and falls again) in the odd ones. Runs on the CPU::

    python examples/newton_policy_loop.py --num-worlds 4 --iterations 40 --device cpu
"""

from __future__ import annotations

import argparse
import os
import sys

import newton
import numpy as np
import warp as wp

import sap_newton

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from newton_robot_fall import HIP_ANGLE, KNEE_ANGLE, START_ROLL, build_robot  # noqa: E402

FPS = 60  # control steps per simulated second
SUBSTEPS = 8  # SAP steps per control step: dt = 1/480 s
TORSO_CONTACT_N = 5.0  # [N]: a torso pressed on the ground this hard has fallen (it weighs ~ 10 N)
MIN_HEIGHT = 0.12  # [m]: a torso centre this low has fallen
NOISE = 0.1  # [rad]: σ of the policy's joint-target noise
CONTACT_PENALTY = 0.01  # reward lost per newton of torso contact force


@wp.kernel
def policy(seed: int, step: int, hip: float, knee: float, noise: float, target_index: wp.array(dtype=wp.int32),
           target_is_hip: wp.array(dtype=wp.int32), joint_target_q: wp.array(dtype=wp.float32)):
    """A stand-in for a trained policy: the standing pose plus Gaussian noise per joint and step."""
    i = wp.tid()
    state = wp.rand_init(seed, step * target_index.shape[0] + i)
    base = knee
    if target_is_hip[i] != 0:
        base = hip
    joint_target_q[target_index[i]] = base + noise * wp.randn(state)


@wp.kernel
def reward_and_fallen(torso: wp.array(dtype=wp.int32), body_q: wp.array(dtype=wp.transform),
                      body_contact_f: wp.array(dtype=wp.spatial_vector), world_failed: wp.array(dtype=wp.int32),
                      min_height: float, torso_contact: float, penalty: float, reward: wp.array(dtype=wp.float32),
                      resets: wp.array(dtype=wp.int32), fallen: wp.array(dtype=wp.bool)):
    w = wp.tid()
    b = torso[w]
    f = wp.length(wp.spatial_top(body_contact_f[b]))
    z = wp.transform_get_translation(body_q[b])[2]
    reward[w] = reward[w] + 1.0 - penalty * f
    down = f > torso_contact or z < min_height or world_failed[w] != 0
    fallen[w] = down
    if down:
        resets[w] = resets[w] + 1
    if w == 0:
        fallen[torso.shape[0]] = False  # Newton's last mask entry: global entities (none here)


def run(num_worlds: int, iterations: int, device: str, seed: int = 0) -> dict:
    """The loop; returns per-world results (one host copy at the end)."""
    rolls = [0.0 if w % 2 == 0 else START_ROLL for w in range(num_worlds)]
    model = build_robot(num_worlds, device, rolls=rolls)
    solver = sap_newton.SolverSAP(model, collision="sap", max_rigid_contact=32)
    K = solver.ObservableKind
    obs = solver.observables({K.BODY_CONTACT_F, K.WORLD_STATUS})
    state_0, state_1, control = model.state(), model.state(), model.control()
    newton.eval_fk(model, state_0.joint_q, state_0.joint_qd, state_0)
    labels = model.joint_label
    q_start = model.joint_q_start.numpy()
    driven = [j for j, label in enumerate(labels) if label.endswith(("_hip", "_knee"))]
    target_index = wp.array([int(q_start[j]) for j in driven], dtype=wp.int32, device=device)
    target_is_hip = wp.array([int(labels[j].endswith("_hip")) for j in driven], dtype=wp.int32, device=device)
    torso = wp.array([i for i, label in enumerate(model.body_label) if label.endswith("torso")], dtype=wp.int32,
                     device=device)
    reward = wp.zeros(num_worlds, dtype=wp.float32, device=device)
    resets = wp.zeros(num_worlds, dtype=wp.int32, device=device)
    fallen = wp.zeros(num_worlds + 1, dtype=wp.bool, device=device)
    dt = 1.0 / (FPS * SUBSTEPS)
    for it in range(iterations):
        wp.launch(policy, dim=target_index.shape[0], device=device,
                  inputs=[seed, it, HIP_ANGLE, KNEE_ANGLE, NOISE, target_index, target_is_hip],
                  outputs=[control.joint_target_q])
        for _ in range(SUBSTEPS):
            solver.step(state_0, state_1, control, None, dt, observables=obs)
            state_0, state_1 = state_1, state_0
        wp.launch(reward_and_fallen, dim=num_worlds, device=device,
                  inputs=[torso, state_0.body_q, obs.body_contact_f, solver.world_failed, MIN_HEIGHT,
                          TORSO_CONTACT_N, CONTACT_PENALTY], outputs=[reward, resets, fallen])
        solver.reset(state_0, fallen)  # the fallen worlds start over; the others are untouched
    return {"resets": resets.numpy().tolist(), "reward": reward.numpy().tolist(),
            "torso_height": state_0.body_q.numpy()[torso.numpy(), 2].tolist(),
            "status": obs.world_status.numpy().tolist(), "any_failed": int(solver.any_failed.numpy()[0]),
            "finite": bool(np.isfinite(state_0.joint_q.numpy()).all())}


def main(argv=None) -> int:
    wp.config.log_level = wp.LOG_WARNING
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-worlds", type=int, default=4)
    p.add_argument("--iterations", type=int, default=60, help="control steps (each SUBSTEPS SAP steps)")
    p.add_argument("--device", default="cuda:0" if wp.is_cuda_available() else "cpu",
                   help="Warp device, passed explicitly to everything (default cuda:0 where present, else cpu)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.num_worlds < 1 or args.iterations < 1:
        p.error("--num-worlds and --iterations must be >= 1")
    out = run(args.num_worlds, args.iterations, args.device, args.seed)
    for w in range(args.num_worlds):
        print(f"world {w}: {out['resets'][w]} resets, reward {out['reward'][w]:.1f}, torso at "
              f"{out['torso_height'][w]:.3f} m, status {out['status'][w]}")
    print(f"any world failed in the solver: {bool(out['any_failed'])}")
    return 0 if out["finite"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""Measure what the contact approximation changes: the tables of docs/presets.md § Contact approximation.

    python scripts/compare_approximations.py              # both scenes, every approximation (~2 min on 2 cores)
    python scripts/compare_approximations.py --json

Each scene is rolled out with sap_ref under the drake preset and Drake's exact line search, once
per approximation (sap, lagged, similar), from the scene's own initial state:

* ``incline_stick_slip`` (a box on a 0.3 rad incline, pushed down at 0.5 m/s, μ 0.5 holds it):
  when it stops, whether it leaves the incline while sliding (gliding), how fast it creeps once
  stuck and how far, the Newton iterations, and the time per step;
* ``box_stack`` (three 10 cm cubes released 1 mm apart): when the stack settles (every body
  slower than 1 mm/s from then on), the deepest contact at the end, how far the top box moves
  after settling, the Newton iterations, and the time per step.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from sap_common import scenes
from sap_ref.collision import CollisionPipeline
from sap_ref.solver import SolverSAP

APPROXIMATIONS = ("sap", "lagged", "similar")
SETTLED_SPEED = 1e-3  # [m/s] a body slower than this is at rest (the creep speeds are ~1e-4 m/s and below)


def rollout(name: str, approximation: str):
    """Positions, linear speeds, contact counts, Newton iterations and seconds per step of one rollout."""
    scene = scenes.get(name)
    solver = SolverSAP(scene.sap_model, max_rigid_contact=scene.max_rigid_contact, contact_preset_variant="drake",
                       line_search_variant="exact_root", discrete_contact_approximation=approximation)
    pipeline = CollisionPipeline(scene.sap_model, scene.max_rigid_contact, solver.config)
    contacts, state = pipeline.contacts(), scene.state.copy()
    free = [j for j in range(scene.sap_model.joint_count)]
    pos, speed, count, iters, depth = [], [], [], [], []
    t0 = time.perf_counter()
    for _ in range(scene.num_steps):
        pipeline.collide(state, contacts)
        solver.step(state, state, scene.control, contacts, scene.dt)
        q, qd = state.joint_q[0], state.joint_qd[0]  # FREE joints: q = [p, quat], public qd = [v_com, ω]
        pos.append(np.array([q[7 * j:7 * j + 3] for j in free]))
        speed.append(np.array([np.linalg.norm(qd[6 * j:6 * j + 3]) for j in free]))
        n = int(contacts.count[0])
        count.append(n)
        depth.append(float(-contacts.phi0[0, :n].min()) if n else 0.0)
        iters.append(int(solver.last_newton_iterations[0]))
    seconds = (time.perf_counter() - t0) / scene.num_steps
    return scene, np.array(pos), np.array(speed), np.array(count), np.array(iters), np.array(depth), seconds


def incline(approximation: str) -> dict:
    scene, pos, speed, count, iters, _, seconds = rollout("incline_stick_slip", approximation)
    stop = int(np.argmax(speed[:, 0] < SETTLED_SPEED))
    t = (np.arange(len(speed)) + 1) * scene.dt
    return {"stop_time_s": float(t[stop]), "steps_off_the_incline": int(np.sum(count < 4)),
            "creep_speed_end_m_s": float(speed[-1, 0]),
            "creep_after_stop_m": float(np.linalg.norm(pos[-1, 0] - pos[stop, 0])),
            "newton_mean": float(iters.mean()), "newton_max": int(iters.max()), "ms_per_step": 1e3 * seconds}


def stack(approximation: str) -> dict:
    scene, pos, speed, count, iters, depth, seconds = rollout("box_stack", approximation)
    moving = np.flatnonzero(speed.max(axis=1) >= SETTLED_SPEED)
    settle = int(moving[-1]) + 1 if moving.size else 0
    t = (np.arange(len(speed)) + 1) * scene.dt
    top = pos[:, -1]
    return {"settle_time_s": float(t[min(settle, len(t) - 1)]), "deepest_contact_end_m": float(depth[-1]),
            "top_box_drift_after_settling_m": float(np.linalg.norm(top[-1, :2] - top[min(settle, len(t) - 1), :2])),
            "final_speed_max_m_s": float(speed[-1].max()), "newton_mean": float(iters.mean()),
            "newton_max": int(iters.max()), "ms_per_step": 1e3 * seconds}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = p.parse_args(argv)
    out = {"incline_stick_slip": {a: incline(a) for a in APPROXIMATIONS},
           "box_stack": {a: stack(a) for a in APPROXIMATIONS}}
    for scene, rows in out.items():
        print(scene)
        for a, r in rows.items():
            cells = (f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in r.items())
            print(f"  {a:8s} " + "  ".join(cells))
    if args.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

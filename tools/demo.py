"""``sap-demo``: run a built-in scene with the SAP solver, print step summaries, plot the run.

    sap-demo                                  # box_stack with sap_ref, writes sap_demo.png
    sap-demo sphere_slide --preset drake --line-search exact_root --steps 500
    sap-demo tests/data/drake/box_corners_slide.json --out box.png
    sap-demo box_stack --backend gpu --device cuda:0     # the same run on sap_gpu

Every ``--print-every`` steps a summary line (time, contacts, Newton and line-search iterations,
deepest penetration, kinetic energy); a progress bar runs meanwhile. The PNG shows the body
heights, the total normal contact force and the iterations per step.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from sap_common.state import StepStatus
from sap_ref.collision import CollisionPipeline
from sap_ref.dynamics import mass_matrix
from sap_ref.solver import SolverSAP
from tools.cli import warp_device
from tools.progress import Progress
from tools.scenes import _load

DEFAULT_SCENE = "box_stack"


def kinetic_energy(model, joint_q, joint_qd_sap) -> float:
    """½ vᵀ M(q) v of world 0 (armature included) [J]."""
    return float(0.5 * joint_qd_sap @ mass_matrix(model, joint_q) @ joint_qd_sap)


class _GpuRun:
    """sap_gpu on one world, read back to NumPy after every step (a demo, not a benchmark)."""

    def __init__(self, scene, device, **kw):
        import sap_gpu

        self.sap_gpu = sap_gpu
        self.solver = sap_gpu.SolverSAP(scene.sap_model, device=device, **kw)
        self.pipeline = sap_gpu.CollisionPipeline(scene.sap_model, scene.max_rigid_contact, self.solver.config,
                                                  device=device)
        self.contacts_dev = self.pipeline.contacts()
        self.state_dev = sap_gpu.to_device(scene.state, device)
        self.control_dev = sap_gpu.to_device(scene.control, device)
        self.config = self.solver.config

    def step(self, dt):
        self.pipeline.collide(self.state_dev, self.contacts_dev)
        self.solver.step(self.state_dev, self.state_dev, self.control_dev, self.contacts_dev, dt)
        state, contacts = self.sap_gpu.to_host(self.state_dev), self.sap_gpu.to_host(self.contacts_dev)
        d = self.solver.diagnostics()
        count = int(contacts.count[0])
        # γ of the last Newton evaluation, which is at the returned velocities (the loop stops there).
        gamma_n = self.solver.P.gamma.numpy()[0, 2:3 * count:3].astype(np.float64)
        return state, contacts, dict(gamma_n=gamma_n, v1=self.solver.v1.numpy()[0], newton=int(d["newton_iterations"][0]),
                                     line_search=int(d["line_search_iterations"][0]), status=int(d["status"][0]))


def run(scene, steps: int, preset: str, line_search: str | None, print_every: int, quiet: bool,
        backend: str = "ref", device: str | None = None):
    """Step world 0 of ``scene`` with ``backend`` (``ref`` or ``gpu``); return per-step records."""
    overrides = {} if line_search is None else {"line_search_variant": line_search}
    kw = dict(max_rigid_contact=scene.max_rigid_contact, contact_preset_variant=preset, **overrides)
    if backend == "gpu":
        gpu = _GpuRun(scene, device, **kw)
    else:
        solver = SolverSAP(scene.sap_model, **kw)
        pipeline = CollisionPipeline(scene.sap_model, scene.max_rigid_contact, solver.config)
        contacts = pipeline.contacts()
        state = scene.state.copy()
    rec = dict(t=[], height=[], normal_force=[], newton=[], line_search=[], contacts=[], status=[], energy=[])
    print(f"{'t [s]':>8} {'contacts':>8} {'newton':>6} {'ls':>4} {'min φ [mm]':>11} {'KE [J]':>10}  status")
    with Progress(steps, scene.name, enabled=not quiet) as bar:
        for n in range(steps):
            if backend == "gpu":
                state, contacts, out = gpu.step(scene.dt)
            else:
                pipeline.collide(state, contacts)
                solver.step(state, state, scene.control, contacts, scene.dt)
                r = solver.last_results[0]
                out = dict(gamma_n=r.contact_impulses[:, 2] if r.problem is not None else np.zeros(0), v1=r.v1,
                           newton=int(solver.last_newton_iterations[0]),
                           line_search=int(solver.last_line_search_iterations[0]), status=int(solver.last_status[0]))
            count = int(contacts.count[0])
            force = float(np.sum(out["gamma_n"][:count]) / scene.dt) if count else 0.0
            rec["t"].append((n + 1) * scene.dt)
            rec["height"].append(state.body_q[0, :, 2].copy())
            rec["normal_force"].append(force)
            rec["newton"].append(out["newton"])
            rec["line_search"].append(out["line_search"])
            rec["contacts"].append(count)
            rec["status"].append(out["status"])
            rec["energy"].append(kinetic_energy(scene.sap_model, state.joint_q[0], out["v1"]))
            if (n + 1) % print_every == 0 or n == 0 or n + 1 == steps:
                phi = float(contacts.phi0[0, :count].min()) * 1e3 if count else float("nan")
                status = StepStatus(rec["status"][-1])
                if not quiet:
                    sys.stderr.write("\r")
                print(f"{rec['t'][-1]:8.3f} {count:8d} {rec['newton'][-1]:6d} {rec['line_search'][-1]:4d} "
                      f"{phi:11.4f} {rec['energy'][-1]:10.4f}  {status.name or int(status)}")
            bar.update(n + 1, f"newton {rec['newton'][-1]}")
    return rec


def plot(scene, rec, path: str, backend: str = "ref") -> bool:
    """Write the run's plot to ``path``; False (with a message) if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("sap-demo: matplotlib is not installed (pip install -e \".[plot]\"); no plot written", file=sys.stderr)
        return False
    t = np.array(rec["t"])
    fig, ax = plt.subplots(3, 1, figsize=(8, 8), sharex=True)
    heights = np.array(rec["height"])
    for b, name in enumerate(scene.body_names):
        ax[0].plot(t, heights[:, b], label=name)
    ax[0].set_ylabel("body origin z [m]")
    ax[0].legend(fontsize=7, ncol=3)
    ax[1].plot(t, rec["normal_force"], color="tab:red")
    ax[1].set_ylabel("Σ normal contact force [N]")
    ax[2].plot(t, rec["newton"], label="Newton iterations")
    ax[2].plot(t, rec["line_search"], label="line-search evaluations", alpha=0.7)
    ax[2].set_ylabel("iterations")
    ax[2].set_xlabel("t [s]")
    ax[2].legend(fontsize=7)
    fig.suptitle(f"sap-demo: {scene.name} ({'sap_gpu' if backend == 'gpu' else 'sap_ref'})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="sap-demo", description=__doc__.split("\n")[0])
    parser.add_argument("scene", nargs="?", default=DEFAULT_SCENE, help=f"scene name or JSON file (default {DEFAULT_SCENE})")
    parser.add_argument("--steps", type=int, default=None, help="steps to run (default: the scene's)")
    parser.add_argument("--preset", default="approx32", help="contact_preset_variant (default approx32)")
    parser.add_argument("--line-search", default=None, help="line_search_variant (default: the config's)")
    parser.add_argument("--print-every", type=int, default=50, help="summary line every N steps (default 50)")
    parser.add_argument("--out", default="sap_demo.png", help="plot file (default sap_demo.png)")
    parser.add_argument("--backend", default="ref", help="ref (sap_ref, default) or gpu (sap_gpu, Warp)")
    parser.add_argument("--device", default=None, help="Warp device for --backend gpu (default: Warp's default)")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    try:
        if args.backend not in ("ref", "gpu"):
            raise ValueError(f"--backend: must be one of 'ref', 'gpu', got {args.backend!r}")
        if args.device is not None and args.backend != "gpu":
            raise ValueError("--device: only applies to --backend gpu")
        if args.backend == "gpu":
            warp_device(args.device)
        scene = _load(args.scene, 1)
        steps = scene.num_steps if args.steps is None else args.steps
        if steps < 1 or args.print_every < 1:
            raise ValueError(f"--steps and --print-every: must be >= 1, got {steps} and {args.print_every}")
        rec = run(scene, steps, args.preset, args.line_search, args.print_every, args.quiet, args.backend, args.device)
    except ValueError as e:
        print(f"sap-demo: error: {e}", file=sys.stderr)
        return 2
    converged = float(np.mean([s & StepStatus.CONVERGED != 0 for s in rec["status"]]))
    print(f"{scene.name}: {steps} steps of {scene.dt:g} s; converged {converged:.1%}; Newton mean "
          f"{np.mean(rec['newton']):.2f} max {max(rec['newton'])}; contacts max {max(rec['contacts'])}")
    wrote = plot(scene, rec, args.out, args.backend)
    if wrote:
        print(f"plot written to {args.out}")
    if args.json:
        print(json.dumps(dict(scene=scene.name, backend=args.backend, steps=steps, converged_fraction=converged,
                              newton_mean=float(np.mean(rec["newton"])), plot=args.out if wrote else None)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

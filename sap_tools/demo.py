"""``sap-demo``: run a built-in scene or a scene file with the SAP solver, print step summaries, plot the run.

    sap-demo                                  # box_stack with sap_ref, writes sap_demo.png
    sap-demo sphere_slide --preset drake --line-search exact_root --steps 500
    sap-demo tests/data/drake/box_corners_slide.json --out box.png
    sap-demo box_stack --backend gpu --device cuda:0     # the same run on sap_gpu
    sap-demo box_stack --approximation lagged            # Hunt–Crossley contact (Drake's default)

Every ``--print-every`` steps a summary line (time, contacts, Newton and line-search iterations,
deepest penetration, kinetic energy); a progress bar runs meanwhile. The plot shows, against
time on a logarithmic axis (contact settles in the first few steps, the run lasts seconds),
each body's height change z − z(0), the total normal contact force (with the bodies' total
weight where every body is free) and the Newton and line-search iterations per step.

Solver settings: a scene file that carries its own (the Drake scenes carry Drake's preset, line
search and tolerances) runs with them; ``--preset``, ``--line-search`` and ``--approximation``
override them. Other
scenes run approx32 with the configuration's defaults. The first output line says which
settings were used and where each came from.
"""

from __future__ import annotations

import json
import sys

import numpy as np

from sap_common.collision_rules import check_hunt_crossley_materials
from sap_common.config import CONTACT_APPROXIMATIONS, SapConfig
from sap_common.model import JointType
from sap_common.state import StepStatus
from sap_ref.collision import CollisionPipeline
from sap_ref.dynamics import mass_matrix
from sap_ref.solver import SolverSAP
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
    plot_path,
    scene_solver_kwargs,
    warp_device,
)
from sap_tools.progress import Progress

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
        gamma_n = self.solver.work.P.gamma.numpy()[0, 2:3 * count:3].astype(np.float64)
        return state, contacts, dict(gamma_n=gamma_n, v1=self.solver.work.v1.numpy()[0],
                                     newton=int(d["newton_iterations"][0]),
                                     line_search=int(d["line_search_iterations"][0]), status=int(d["status"][0]))


def run(scene, steps: int, solver_kwargs: dict, print_every: int, quiet: bool, backend: str = "ref",
        device: str | None = None):
    """Step world 0 of ``scene`` with ``backend`` (``ref`` or ``gpu``) and ``SolverSAP(**solver_kwargs)``;
    return per-step records (and the solver's ``config``)."""
    kw = dict(max_rigid_contact=scene.max_rigid_contact, **solver_kwargs)
    if backend == "gpu":
        gpu = _GpuRun(scene, device, **kw)
        config = gpu.config
    else:
        solver = SolverSAP(scene.sap_model, **kw)
        pipeline = CollisionPipeline(scene.sap_model, scene.max_rigid_contact, solver.config)
        contacts = pipeline.contacts()
        state = scene.state.copy()
        config = solver.config
    rec = dict(t=[], height=[], normal_force=[], ground_force=[], newton=[], line_search=[], contacts=[], status=[],
               energy=[], config=config)
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
            gamma_n = np.asarray(out["gamma_n"][:count])
            on_ground = (contacts.body0[0, :count] == -1) | (contacts.body1[0, :count] == -1)
            force = float(np.sum(gamma_n) / scene.dt) if count else 0.0
            rec["ground_force"].append(float(np.sum(gamma_n[on_ground]) / scene.dt) if count else 0.0)
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
                bar.clear_line()
                print(f"{rec['t'][-1]:8.3f} {count:8d} {rec['newton'][-1]:6d} {rec['line_search'][-1]:4d} "
                      f"{phi:11.4f} {rec['energy'][-1]:10.4f}  {status.name or int(status)}")
            bar.update(n + 1, f"newton {rec['newton'][-1]}")
    return rec


def total_weight(scene) -> float | None:
    """Σ m |g| [N] of world 0's bodies when every body hangs on a FREE joint (then, at rest, the
    contacts with the ground carry exactly that), else None."""
    m = scene.sap_model
    if m.body_count == 0 or not np.all(np.asarray(m.joint_type) == int(JointType.FREE)):
        return None
    return float(np.sum(m.body_mass[:m.body_count]) * np.linalg.norm(m.gravity))


def figure(scene, rec, backend: str = "ref"):
    """The run's figure (matplotlib): three panels over log-scaled time, legends outside the data.

    Contact settles within the first steps while a run lasts seconds, so time is logarithmic
    from the first step to the last; heights are changes z − z(0) [mm], which keeps the few-mm
    settling of a stack visible beside metres of height.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    t = np.array(rec["t"])
    fig, ax = plt.subplots(3, 1, figsize=(9, 8), sharex=True, layout="constrained")
    dz = 1e3 * (np.array(rec["height"]) - scene.state.body_q[0, :, 2])
    for b, name in enumerate(scene.body_names):
        ax[0].plot(t, dz[:, b], label=name)
    ax[0].set_ylabel("height change z − z(0) [mm]")
    ax[1].plot(t, rec["normal_force"], color="tab:red", label="all contacts")
    if np.any(np.array(rec["ground_force"]) != np.array(rec["normal_force"])):
        ax[1].plot(t, rec["ground_force"], color="tab:purple", linestyle="--", label="contacts with the ground")
    weight = total_weight(scene)
    if weight is not None:
        ax[1].axhline(weight, color="0.4", linestyle=":", label=f"weight Σ m g = {weight:.3g} N")
    ax[1].set_ylabel("Σ normal force [N]")
    ax[2].step(t, rec["newton"], where="mid", label="Newton iterations")
    ax[2].step(t, rec["line_search"], where="mid", linestyle="--", label="line-search evaluations")
    ax[2].set_ylabel("per step")
    ax[2].set_xlabel("t [s] (logarithmic)")
    ax[2].set_xscale("log")
    ax[2].set_xlim(t[0], t[-1])
    ax[2].xaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    ax[2].xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:g}"))
    ax[2].xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    for a in ax:
        a.grid(True, which="major", alpha=0.3)
        a.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    cfg = rec["config"]
    fig.suptitle(f"sap-demo: {scene.name} ({'sap_gpu' if backend == 'gpu' else 'sap_ref'}, "
                 f"{cfg.contact_preset_variant}, {cfg.line_search_variant}, dt {scene.dt:g} s)", fontsize=11)
    return fig


def plot(scene, rec, path: str, backend: str = "ref") -> None:
    """Write the run's figure to ``path`` (matplotlib; the format follows the extension)."""
    import matplotlib.pyplot as plt

    fig = figure(scene, rec, backend)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


@entry_point("sap-demo")
def main(argv=None) -> int:
    p = parser("sap-demo", __doc__)
    p.add_argument("scene", nargs="?", default=DEFAULT_SCENE,
                   help=f"built-in scene name (sap-scenes lists them) or JSON scene file (default {DEFAULT_SCENE})")
    p.add_argument("--steps", type=int, default=None, help="steps to run (default: the scene's)")
    p.add_argument("--preset", default=None,
                   help=f"contact_preset_variant: one of {PRESET_CHOICES} (default: the scene file's, else approx32)")
    p.add_argument("--line-search", default=None,
                   help=f"line_search_variant: one of {LINE_SEARCH_CHOICES} (default: the scene file's, else the "
                        "preset's)")
    p.add_argument("--approximation", default=None, choices=CONTACT_APPROXIMATIONS,
                   help="discrete_contact_approximation (default: the scene file's, else sap)")
    p.add_argument("--print-every", type=int, default=50, help="summary line every N steps (default 50)")
    p.add_argument("--out", default="sap_demo.png",
                   help="plot file; its extension picks the format, none = .png (default sap_demo.png)")
    p.add_argument("--backend", default="ref", help="ref (sap_ref, default) or gpu (sap_gpu, Warp)")
    p.add_argument("--device", default=None,
                   help="Warp device for --backend gpu (default: cuda:0 where present, else cpu)")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    try:
        if args.backend not in ("ref", "gpu"):
            raise ValueError(f"--backend: must be one of 'ref', 'gpu', got {args.backend!r}")
        if args.device is not None and args.backend != "gpu":
            raise ValueError("--device: only applies to --backend gpu")
        if args.print_every < 1 or (args.steps is not None and args.steps < 1):
            raise ValueError(f"--steps and --print-every: must be >= 1, got {args.steps} and {args.print_every}")
        check_flags(args.preset, args.line_search)
        out = plot_path("--out", args.out) if _have_matplotlib() else check_out("--out", args.out)
        if args.backend == "gpu":
            warp_device(args.device)
        scene = load_scene_arg(args.scene, 1)
        steps = scene.num_steps if args.steps is None else args.steps
        kwargs, settings = scene_solver_kwargs(scene, args.preset, args.line_search)
        if args.approximation is not None:
            kwargs["discrete_contact_approximation"] = args.approximation
            settings += f"; contact approximation {args.approximation} (--approximation)"
            # a rigid shape cannot take Hunt–Crossley contact: say so before the run, not in it
            check_hunt_crossley_materials(scene.sap_model, SapConfig.from_preset(**kwargs))
    except ValueError as e:
        return fail("sap-demo", e)
    print(settings)
    rec = run(scene, steps, kwargs, args.print_every, args.quiet, args.backend, args.device)
    cfg = rec["config"]
    converged = float(np.mean([s & StepStatus.CONVERGED != 0 for s in rec["status"]]))
    print(f"{scene.name}: {steps} steps of {scene.dt:g} s; converged {converged:.1%}; Newton mean "
          f"{np.mean(rec['newton']):.2f} max {max(rec['newton'])}; contacts max {max(rec['contacts'])}")
    wrote = None
    if _have_matplotlib():
        with atomic_output(out) as tmp:
            plot(scene, rec, tmp, args.backend)
        wrote = out
        print(f"plot written to {out}")
    else:
        print("sap-demo: matplotlib is not installed (pip install -e \".[plot]\"); no plot written", file=sys.stderr)
    if args.json:
        print(json.dumps(dict(scene=scene.name, backend=args.backend, steps=steps, converged_fraction=converged,
                              preset=cfg.contact_preset_variant, line_search=cfg.line_search_variant,
                              approximation=cfg.discrete_contact_approximation,
                              max_iterations=cfg.max_iterations, newton_mean=float(np.mean(rec["newton"])),
                              max_contacts=int(max(rec["contacts"], default=0)), plot=wrote)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

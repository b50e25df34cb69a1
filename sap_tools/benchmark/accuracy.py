"""How far each line search stops from the minimiser of the SAP cost, and at what cost in work.

    sap-benchmark-accuracy                                  # humanoid, 8 worlds × 120 steps, every preset
    sap-benchmark-accuracy --presets approx32 --line-searches monotone_decay exact_root
    sap-benchmark-accuracy --override cost_rel_tol=1e-4     # a candidate setting, on every row

A rollout of the scene with ``sap_ref`` under each preset's default configuration, with the
control noise of ``sap-benchmark`` (same channels, σ and seed, drawn by the same kernel on Warp's
CPU device), keeps every world's SAP problem of every step. Each problem is then solved from the
step's own initial guess (v₀) by every line search under test, with the preset's other settings,
and once more from that answer by the **reference**: ``exact_root`` with a float64 linear solve,
an optimality tolerance 10⁴ times tighter than the default and no cost criterion, which lands on
the minimiser v* to round-off (the cost is strictly convex, so v* is unique). Reported per preset
and line search: Newton iterations and line-search probes per step (mean), and ‖v₁ − v*‖∞ over
the participating DOFs (m/s or rad/s) at the median, 99th and 99.9th percentiles and the maximum.

Every line search solves the same problems (the default's trajectory), so the rows compare the
searches, not trajectories that drift apart. docs/presets.md § Accuracy and work of the line searches
holds the table of a run.
"""

from __future__ import annotations

import dataclasses
import sys
import time

import numpy as np

from sap_common.config import LINE_SEARCH_VARIANTS, PRESETS, SapConfig
from sap_common.state import StepStatus
from sap_tools.cli import entry_point, fail, init_warp, load_scene_arg, parse_override, parser
from sap_tools.progress import Progress

__all__ = ["main", "collect_problems", "measure", "reference_config", "AccuracyRow", "REFERENCE_TIGHTENING"]

# The reference tightens the optimality tolerance ε_r by this factor from the default (1e-6 →
# 1e-10, still above float64's round-off of ∇ℓ): a point that meets it is the minimiser to far
# below the differences the table reports (the searches' own bar is ε_r = 1e-6).
# `reference_not_converged` counts the problems where round-off kept it from the bound (none of
# the humanoid's 960 under any preset).
REFERENCE_TIGHTENING = 1e4
REFERENCE_MAX_ITERATIONS = 200  # the reference starts at the answer; it needs a few iterations, not 200
PERCENTILES = (50.0, 99.0, 99.9)


@dataclasses.dataclass
class AccuracyRow:
    """One preset × line search: work per step and distance of its answers from the minimiser."""

    preset: str
    line_search: str
    problems: int
    newton_mean: float
    probes_mean: float
    probes_per_iteration: float
    distance: dict  # {"p50": …, "p99": …, "p99.9": …, "max": …}
    not_converged: int  # problems the line search's solve stopped without CONVERGED
    reference_not_converged: int  # problems the reference did not solve to its tolerance

    def line(self) -> str:
        d = self.distance
        return (f"| {self.preset} | {self.line_search} | {self.newton_mean:.2f} | {self.probes_mean:.1f} | "
                f"{self.probes_per_iteration:.2f} | {d['p50']:.1e} | {d['p99']:.1e} | {d['p99.9']:.1e} | "
                f"{d['max']:.1e} | {self.not_converged} |")


TABLE_HEAD = ("| preset | line search | Newton iterations per step | probes per step | probes per iteration | "
              "‖v₁ − v*‖∞ median | 99th pct | 99.9th pct | max | not converged |\n"
              "|---|---|---|---|---|---|---|---|---|---|")


def reference_config(config: SapConfig) -> SapConfig:
    """The configuration that solves a problem of ``config`` to its minimiser (see the module docstring)."""
    return config.replace(line_search_variant="exact_root", contact_solve_precision="fp64",
                          contact_linear_solve_precision="fp64",
                          contact_linear_solver="cholesky",
                          optimality_rel_tol=config.optimality_rel_tol / REFERENCE_TIGHTENING,
                          optimality_abs_tol=0.0, cost_abs_tol=0.0, cost_rel_tol=1e-300,
                          max_iterations=REFERENCE_MAX_ITERATIONS)


def collect_problems(scene, preset: str, steps: int, noise_std: float, seed: int, overrides: dict | None = None,
                     progress=None) -> list:
    """``[(SapProblem, v₀)]`` of every world and step of a ``sap_ref`` rollout of ``scene`` under
    ``preset`` (with ``overrides``) and ``sap-benchmark``'s control noise."""
    import warp as wp

    from sap_ref.collision import CollisionPipeline
    from sap_ref.solver import SolverSAP

    from .runs import _Noise, noise_channels

    model = scene.sap_model
    solver = SolverSAP(model, max_rigid_contact=scene.max_rigid_contact, contact_preset_variant=preset,
                       **(overrides or {}))
    pipeline = CollisionPipeline(model, scene.max_rigid_contact, solver.config)
    contacts, state, control = pipeline.contacts(), scene.state.copy(), scene.control.copy()
    channels = noise_channels(scene)
    target = getattr(control, channels.target)
    noise = _Noise(channels, noise_std, seed, model.num_worlds, "cpu")
    base = wp.array(np.asarray(target, dtype=np.float64), dtype=wp.float64, device="cpu")
    drawn = wp.clone(base)
    problems = []
    for n in range(steps):
        pipeline.collide(state, contacts)
        noise.sap(base, drawn)
        noise.advance()
        target[...] = drawn.numpy()
        solver.step(state, state, control, contacts, scene.dt)
        for r in solver.last_results:
            if r.problem is not None and r.solve is not None:
                problems.append((r.problem, r.solve.history[0].v if r.solve.history else r.solve.v))
        if progress is not None:
            progress(n + 1)
    return problems


def measure(problems: list, config: SapConfig) -> AccuracyRow:
    """Solve every ``(problem, v₀)`` with ``config`` (in its ``contact_solve_precision``), then with
    :func:`reference_config` from that answer (in float64: the minimiser of the problem as given)."""
    from sap_ref.contact_solve import solve

    ref_config = reference_config(config)
    dtype = config.dtype("contact_solve_precision")
    newton, probes, dist, bad, ref_bad = [], [], [], 0, 0
    for p, v0 in problems:
        s = solve(p.astype(dtype) if p.dtype != dtype else p, v0, config)
        ref = solve(p.astype(np.float64) if p.dtype != np.float64 else p, s.v, ref_config)
        newton.append(s.iterations)
        probes.append(s.line_search_iterations)
        dist.append(float(np.max(np.abs(s.v - ref.v))) if len(s.v) else 0.0)
        bad += not (s.status & StepStatus.CONVERGED)
        ref_bad += not (ref.status & StepStatus.CONVERGED)
    dist = np.asarray(dist)
    n_it = max(float(np.sum(newton)), 1.0)
    return AccuracyRow(
        preset=config.contact_preset_variant, line_search=config.line_search_variant,
        problems=len(problems), newton_mean=float(np.mean(newton)), probes_mean=float(np.mean(probes)),
        probes_per_iteration=float(np.sum(probes)) / n_it,
        distance={**{f"p{q:g}": float(np.percentile(dist, q)) for q in PERCENTILES}, "max": float(dist.max())},
        not_converged=bad, reference_not_converged=ref_bad)


@entry_point("sap-benchmark-accuracy")
def main(argv=None) -> int:
    from .runs import DEFAULT_NOISE_STD

    prog = "sap-benchmark-accuracy"
    p = parser(prog, __doc__)
    p.add_argument("--scene", default="humanoid", help="scene: built-in name, JSON or MJCF file (default humanoid)")
    p.add_argument("--worlds", type=int, default=8, help="worlds of the rollout (default 8)")
    p.add_argument("--steps", type=int, default=120, help="steps of the rollout (default 120)")
    p.add_argument("--presets", nargs="+", default=list(PRESETS),
                   help=f"presets (default: all; valid: {', '.join(PRESETS)})")
    p.add_argument("--line-searches", nargs="+", default=list(LINE_SEARCH_VARIANTS),
                   help=f"line searches to measure (default: all; valid: {', '.join(LINE_SEARCH_VARIANTS)})")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="a SapConfig knob set on every measured configuration, not the rollout (repeatable)")
    p.add_argument("--noise-std", type=float, default=DEFAULT_NOISE_STD,
                   help=f"σ of sap-benchmark's control noise (default {DEFAULT_NOISE_STD})")
    p.add_argument("--seed", type=int, default=0, help="noise seed (default 0, sap-benchmark's)")
    args = p.parse_args(argv)
    if args.worlds < 1 or args.steps < 1:
        return fail(prog, f"--worlds and --steps: must be >= 1, got {args.worlds} and {args.steps}")
    if not (np.isfinite(args.noise_std) and args.noise_std >= 0):
        return fail(prog, f"--noise-std: must be finite and >= 0, got {args.noise_std}")
    try:
        overrides = dict(parse_override("--override", o) for o in args.override)
        for preset in args.presets:  # every name and value checked before the rollout
            for ls in args.line_searches:
                SapConfig.from_preset(preset, line_search_variant=ls, **overrides)
        scene = load_scene_arg(args.scene, args.worlds)
    except (ValueError, TypeError) as e:
        return fail(prog, e)
    init_warp("cpu")  # the noise kernel runs on Warp's CPU device
    print(f"{scene.name}: {args.worlds} worlds × {args.steps} steps of {scene.dt * 1e3:g} ms, control noise σ "
          f"{args.noise_std:g}, seed {args.seed}; overrides {overrides or 'none'}")
    print(TABLE_HEAD)
    for preset in args.presets:
        t0 = time.perf_counter()
        with Progress(args.steps, f"{preset} rollout") as bar:
            problems = collect_problems(scene, preset, args.steps, args.noise_std, args.seed, progress=bar.update)
        for ls in args.line_searches:
            cfg = SapConfig.from_preset(preset, max_rigid_contact=scene.max_rigid_contact, line_search_variant=ls,
                                        **overrides)
            row = measure(problems, cfg)
            print(row.line() + ("" if not row.reference_not_converged else
                                f"  (reference short of its tolerance on {row.reference_not_converged})"), flush=True)
        print(f"  {preset}: {len(problems)} problems, {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``sap-compare-presets``: Δ_precision, Δ_model and Δ_approximation along a rollout of a scene.

    sap-compare-presets sphere_slide --steps 300 --every 10
    sap-compare-presets tests/data/drake/box_corners_slide.json --reference drake --json
    sap-compare-presets incline_stick_slip --approximations sap lagged similar

The scene is rolled out with the reference preset and the first of ``--approximations`` (the
contact approximations to compare; default: the scene file's, else ``sap``); every ``--every``
steps, under each approximation, the three presets (and approx64 with Drake's weight only) take
one step from the same state, and the velocity differences are recorded: Δ_precision =
‖v(approx64) − v(approx32)‖, Δ_model = ‖v(drake) − v(approx64)‖, weight-only =
‖v(approx64 + diag_delassus) − v(approx64)‖; and, with more than one approximation,
Δ_approximation = ‖v(reference, a) − v(reference, first)‖ for each other approximation a: how
much the contact model itself moves the step, against how much precision and Drake's numerics do
(docs/presets.md § Contact approximation).

How much the presets differ from one state is :func:`preset_deltas` (docs/presets.md), also
for scripts and tests: Δ_precision is the float32 paths against float64 on the same model,
Δ_model Drake's weight, contact point and position map; the weight-only difference isolates a
single knob (``approx64`` with ``contact_weight_mode="diag_delassus"`` changes only the weight
model), so it is the weight's share of Δ_model.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

import numpy as np

from sap_common.config import CONTACT_APPROXIMATIONS
from sap_common.io.scene import LoadedScene
from sap_common.state import SapState
from sap_ref.collision import CollisionPipeline
from sap_ref.solver import SolverSAP
from sap_tools.cli import PRESET_CHOICES, check_flags, entry_point, fail, load_rollout, rollout_parser
from sap_tools.progress import Progress

__all__ = ["PresetDeltas", "step_velocities", "preset_deltas", "approximation_deltas", "main"]


@dataclass
class PresetDeltas:
    """Velocity differences after one step, per world (2-norms over all DOFs, SAP order).

    Attributes:
        precision: ‖v(approx64) − v(approx32)‖, (num_worlds,).
        model: ‖v(drake) − v(approx64)‖, (num_worlds,).
        weight_only: ‖v(approx64 + diag_delassus) − v(approx64)‖, (num_worlds,).
        v: the velocities by configuration name, each (num_worlds, nv).
    """

    precision: np.ndarray
    model: np.ndarray
    weight_only: np.ndarray
    v: dict


def step_velocities(scene: LoadedScene, state: SapState, contact_preset_variant: str, **overrides) -> np.ndarray:
    """v₁ (SAP order, (num_worlds, nv)) after one step of ``scene`` from ``state``."""
    model = scene.sap_model
    solver = SolverSAP(model, max_rigid_contact=scene.max_rigid_contact,
                       contact_preset_variant=contact_preset_variant, **overrides)
    pipeline = CollisionPipeline(model, scene.max_rigid_contact, solver.config)
    contacts = pipeline.contacts()
    pipeline.collide(state, contacts)
    out = state.copy()
    out.joint_qd_order = "sap"
    solver.step(state, out, scene.control, contacts, scene.dt)
    return out.joint_qd.copy()


def preset_deltas(scene: LoadedScene, state: SapState | None = None, **overrides) -> PresetDeltas:
    """Δ_precision, Δ_model and the weight-only difference, one step from ``state``.

    ``overrides`` (e.g. ``line_search_variant``) apply to every configuration alike.
    """
    state = scene.state if state is None else state
    v = {
        "approx32": step_velocities(scene, state, "approx32", **overrides),
        "approx64": step_velocities(scene, state, "approx64", **overrides),
        "drake": step_velocities(scene, state, "drake", **overrides),
        "approx64+diag_delassus": step_velocities(scene, state, "approx64", contact_weight_mode="diag_delassus",
                                                  **overrides),
    }
    norm = lambda a, b: np.linalg.norm(v[a] - v[b], axis=1)  # noqa: E731
    return PresetDeltas(precision=norm("approx64", "approx32"), model=norm("drake", "approx64"),
                        weight_only=norm("approx64+diag_delassus", "approx64"), v=v)


def approximation_deltas(scene: LoadedScene, state: SapState, approximations, preset: str = "drake",
                         **overrides) -> dict:
    """``{a: ‖v(preset, a) − v(preset, approximations[0])‖ per world}`` for each other approximation a,
    one step from ``state`` (``overrides`` apply to every configuration alike)."""
    first, *rest = approximations
    v0 = step_velocities(scene, state, preset, discrete_contact_approximation=first, **overrides)
    return {a: np.linalg.norm(step_velocities(scene, state, preset, discrete_contact_approximation=a, **overrides)
                              - v0, axis=1) for a in rest}


@entry_point("sap-compare-presets")
def main(argv=None) -> int:
    parser = rollout_parser("sap-compare-presets", __doc__, "line_search_variant for every configuration")
    parser.add_argument("--reference", default="drake",
                        help=f"contact_preset_variant of the rollout: one of {PRESET_CHOICES} (default drake)")
    parser.add_argument("--approximations", nargs="+", default=None, metavar="APPROXIMATION",
                        help=f"contact approximations to compare, the first one rolls out (one or more of "
                             f"{', '.join(CONTACT_APPROXIMATIONS)}; default: the scene file's, else sap)")
    args = parser.parse_args(argv)
    try:
        try:
            check_flags(args.reference, args.line_search)
        except ValueError as e:
            raise ValueError(str(e).replace("--preset:", "--reference:")) from None
        scene, overrides = load_rollout(args)
        approximations = args.approximations or [scene.solver_kwargs.get("discrete_contact_approximation", "sap")]
        for a in approximations:
            if a not in CONTACT_APPROXIMATIONS:
                raise ValueError(f"--approximations: {a!r} is not valid; valid: {', '.join(CONTACT_APPROXIMATIONS)}")
        if len(set(approximations)) != len(approximations):
            raise ValueError(f"--approximations: each at most once, got {' '.join(approximations)}")
        if "stiction_tolerance" in scene.solver_kwargs:
            overrides["stiction_tolerance"] = scene.solver_kwargs["stiction_tolerance"]
        solver = SolverSAP(scene.sap_model, max_rigid_contact=scene.max_rigid_contact,
                           contact_preset_variant=args.reference, discrete_contact_approximation=approximations[0],
                           **overrides)
    except ValueError as e:
        return fail("sap-compare-presets", e)
    steps = args.steps or scene.num_steps
    pipeline = CollisionPipeline(scene.sap_model, scene.max_rigid_contact, solver.config)
    contacts = pipeline.contacts()
    state = scene.state.copy()
    rows = []
    first = approximations[0]
    with Progress(steps, f"{scene.name} ({args.reference}, {first})", enabled=not args.quiet) as bar:
        for n in range(steps):
            if n % args.every == 0:
                row = dict(step=n)
                for a in approximations:
                    d = preset_deltas(scene, state, discrete_contact_approximation=a, **overrides)
                    suffix = "" if a == first else f"_{a}"
                    row.update({f"precision{suffix}": float(d.precision[0]), f"model{suffix}": float(d.model[0]),
                                f"weight_only{suffix}": float(d.weight_only[0])})
                for a, delta in approximation_deltas(scene, state, approximations, args.reference,
                                                     **overrides).items():
                    row[f"approximation_{a}"] = float(delta[0])
                rows.append(row)
            pipeline.collide(state, contacts)
            solver.step(state, state, scene.control, contacts, scene.dt)
            bar.update(n + 1, f"contacts {int(contacts.count[0])}")
    keys = [k for k in rows[0] if k != "step"]
    heads = {"precision": "Δ_precision", "model": "Δ_model", "weight_only": "weight only"}

    def head(k):
        if k.startswith("approximation_"):
            return f"Δ {k[len('approximation_'):]}−{first}"
        base, _, a = k.partition("_") if k.startswith(("precision_", "model_")) else (k, "", "")
        if k.startswith("weight_only_"):
            base, a = "weight_only", k[len("weight_only_"):]
        return heads[base] + (f" ({a})" if a else "")

    if len(approximations) > 1:
        print(f"contact approximations: {', '.join(approximations)} (the rollout's: {first}); "
              f"Δ a−{first} = ‖v({args.reference}, a) − v({args.reference}, {first})‖")
    print(f"{'step':>6} " + " ".join(f"{head(k):>{max(12, len(head(k)))}}" for k in keys) + "   [m/s, rad/s]")
    for r in rows:
        print(f"{r['step']:6d} " + " ".join(f"{r[k]:>{max(12, len(head(k)))}.3e}" for k in keys))
    summary = {k: dict(max=max(r[k] for r in rows), mean=float(np.mean([r[k] for r in rows]))) for k in keys}
    print("max:  " + "  ".join(f"{k} {v['max']:.3e}" for k, v in summary.items()))
    if args.json:
        print(json.dumps(dict(scene=scene.name, reference=args.reference, approximations=approximations, steps=steps,
                              every=args.every, rows=rows, summary=summary)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

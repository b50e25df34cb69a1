"""``sap-compare-presets``: Δ_precision and Δ_model along a rollout of a scene.

    sap-compare-presets sphere_slide --steps 300 --every 10
    sap-compare-presets tests/data/drake/box_corners_slide.json --reference drake --json

The scene is rolled out with the reference preset; every ``--every`` steps the three presets
(and approx64 with Drake's weight only) take one step from the same state, and the velocity
differences are recorded: Δ_precision = ‖v(approx64) − v(approx32)‖, Δ_model =
‖v(drake) − v(approx64)‖, weight-only = ‖v(approx64 + diag_delassus) − v(approx64)‖.

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

from sap_common.io.scene import LoadedScene
from sap_common.state import SapState
from sap_ref.collision import CollisionPipeline
from sap_ref.solver import SolverSAP
from sap_tools.cli import PRESET_CHOICES, check_flags, entry_point, fail, load_rollout, rollout_parser
from sap_tools.progress import Progress

__all__ = ["PresetDeltas", "step_velocities", "preset_deltas", "main"]


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


@entry_point("sap-compare-presets")
def main(argv=None) -> int:
    parser = rollout_parser("sap-compare-presets", __doc__, "line_search_variant for every configuration")
    parser.add_argument("--reference", default="drake",
                        help=f"contact_preset_variant of the rollout: one of {PRESET_CHOICES} (default drake)")
    args = parser.parse_args(argv)
    try:
        try:
            check_flags(args.reference, args.line_search)
        except ValueError as e:
            raise ValueError(str(e).replace("--preset:", "--reference:")) from None
        scene, overrides = load_rollout(args)
        solver = SolverSAP(scene.sap_model, max_rigid_contact=scene.max_rigid_contact,
                           contact_preset_variant=args.reference, **overrides)
    except ValueError as e:
        return fail("sap-compare-presets", e)
    steps = args.steps or scene.num_steps
    pipeline = CollisionPipeline(scene.sap_model, scene.max_rigid_contact, solver.config)
    contacts = pipeline.contacts()
    state = scene.state.copy()
    rows = []
    with Progress(steps, f"{scene.name} ({args.reference})", enabled=not args.quiet) as bar:
        for n in range(steps):
            if n % args.every == 0:
                d = preset_deltas(scene, state, **overrides)
                rows.append(dict(step=n, precision=float(d.precision[0]), model=float(d.model[0]),
                                 weight_only=float(d.weight_only[0])))
            pipeline.collide(state, contacts)
            solver.step(state, state, scene.control, contacts, scene.dt)
            bar.update(n + 1, f"contacts {int(contacts.count[0])}")
    print(f"{'step':>6} {'Δ_precision':>12} {'Δ_model':>12} {'weight only':>12}   [m/s, rad/s]")
    for r in rows:
        print(f"{r['step']:6d} {r['precision']:12.3e} {r['model']:12.3e} {r['weight_only']:12.3e}")
    summary = {k: dict(max=max(r[k] for r in rows), mean=float(np.mean([r[k] for r in rows])))
               for k in ("precision", "model", "weight_only")}
    print("max:  " + "  ".join(f"{k} {v['max']:.3e}" for k, v in summary.items()))
    if args.json:
        print(json.dumps(dict(scene=scene.name, reference=args.reference, steps=steps, every=args.every,
                              rows=rows, summary=summary)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

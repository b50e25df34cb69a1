"""How much the presets differ, one step from the same state (docs/presets.md).

    Δ_precision = ‖v(approx64) − v(approx32)‖   (float32 paths vs float64, same model)
    Δ_model     = ‖v(drake) − v(approx64)‖      (Drake's weight, contact point and position map)

``one_factor`` isolates a single knob: ``approx64`` with ``contact_weight_mode="diag_delassus"``
changes only the weight model, so its difference from ``approx64`` is the weight's share of
Δ_model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sap_common.io.scene import LoadedScene
from sap_common.state import SapState

from .collision import CollisionPipeline
from .solver import SolverSAP

__all__ = ["PresetDeltas", "step_velocities", "preset_deltas"]


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

"""Domain randomization draws: per-world parameters around a model's, within its rules.

    values = randomize.draw(model, rng)          # {field: (num_worlds, *shape)}, every world
    for name, v in values.items():
        params.set(name, v, world_mask=fallen)   # only the fallen worlds take their draw

What robot-learning stacks randomize at a reset: friction, body masses (the inertia scaled with
them), joint damping and drive gains. Each draw keeps what the model's per-world rules require
(sap_common.parameters): a zero stays zero (no drive is added, no massless frame gains mass), an
unset (NaN) friction is drawn outright, everything else is scaled by a factor drawn uniformly in
its range. Used by ``sap-benchmark --randomize`` and ``examples/domain_randomization.py``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["RANGES", "draw"]

#: field → (low, high): a friction coefficient drawn in the range; every other field's model value
#: multiplied by a factor drawn in it (the same factor for a body's mass and inertia).
RANGES = {
    "shape_material_mu": (0.4, 1.2),
    "body_mass": (0.8, 1.25),
    "joint_damping": (0.5, 2.0),
    "joint_target_ke": (0.8, 1.25),
    "joint_target_kd": (0.8, 1.25),
}


def draw(model, rng: np.random.Generator, ranges: dict | None = None) -> dict:
    """Per-world values, (num_worlds, *shape) float64, of the fields of ``ranges`` (default
    :data:`RANGES`); ``body_mass`` brings ``body_inertia`` with it, scaled by the same factor."""
    ranges = RANGES if ranges is None else ranges
    W = model.num_worlds
    out = {}
    for name, (lo, hi) in ranges.items():
        if not (np.isfinite(lo) and np.isfinite(hi) and 0.0 <= lo <= hi):
            raise ValueError(f"ranges[{name!r}]: expected finite 0 <= low <= high, got ({lo}, {hi})")
        base = np.asarray(getattr(model, name), dtype=np.float64)
        if name == "shape_material_mu":
            out[name] = rng.uniform(lo, hi, (W, *base.shape))
            continue
        factor = rng.uniform(lo, hi, (W, *base.shape))
        out[name] = base * factor
        if name == "body_mass":
            out["body_inertia"] = np.asarray(model.body_inertia) * factor[:, :, None, None]
    return out

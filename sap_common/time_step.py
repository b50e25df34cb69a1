"""The time step check both solvers run in ``step()``: a ``ValueError`` for a dt that is no time
step, and a warning for one so long that the collision stage cannot see contacts in time.

SAP's step is unconditionally stable: its convex problem has a unique solution for every
dt > 0, so a long step is never rejected. What a long step breaks is collision, which looks
for contacts only at the start of each step: a body that moves farther than its own thickness
in one step can pass through another without a contact ever being reported. The warning uses
the one motion known without a state, a fall from rest under gravity: it is raised when

    ½ |g| dt² > L_min,   i.e.   dt > dt_max = √(2 L_min / |g|),

with L_min the thinnest collision shape on a moving body (sphere or capsule radius, smallest
box half extent; plus the shape's rounding radius). Box stack (0.1 m boxes): dt_max ≈ 0.14 s.
A model without gravity or without shapes on moving bodies has no bound. Limits: a state that
already moves fast (a thrown body) tunnels at smaller steps, which this state-free check cannot
see.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from .enums import ShapeType

__all__ = ["LargeTimeStepWarning", "time_step_bound", "check_time_step"]


class LargeTimeStepWarning(UserWarning):
    """dt is so long that a body falling from rest passes its thinnest shape in one step."""


def _thinnest_moving_shape(model) -> tuple[float, int]:
    """``(L_min [m], shape index)`` over shapes on dynamic bodies (not welded to the world, not
    kinematic); ``(inf, -1)`` if there is none."""
    best, which = math.inf, -1
    for s in range(model.shape_count):
        b = int(model.shape_body[s])
        if b < 0 or model.body_static[b] or model.body_kinematic[b]:  # neither falls
            continue
        t, size = ShapeType(int(model.shape_type[s])), model.shape_size[s]
        if t in (ShapeType.BOX, ShapeType.ELLIPSOID):
            L = float(np.min(size))
        elif t == ShapeType.CYLINDER:
            L = float(min(size[0], size[1]))
        elif t == ShapeType.CONVEX_MESH:
            lo, hi = model.shape_local_bounds[s]  # grown by the rounding radius already
            L = 0.5 * float(np.min(hi - lo))
        else:
            L = float(size[0])
        if t != ShapeType.CONVEX_MESH:
            L += float(model.shape_rounding[s])  # a rounded shape is thicker by its radius
        if L < best:
            best, which = L, s
    return best, which


def time_step_bound(model) -> float:
    """``dt_max = √(2 L_min / |g|)`` [s] (module docstring); ``inf`` without gravity or moving shapes."""
    g = float(np.linalg.norm(model.gravity))
    L, _ = _thinnest_moving_shape(model)
    return math.inf if g == 0.0 or not math.isfinite(L) else math.sqrt(2.0 * L / g)


def check_time_step(model, dt, bound: float | None = None, stacklevel: int = 3) -> float:
    """``float(dt)``: ``ValueError`` unless dt is a finite number > 0 [s]; ``LargeTimeStepWarning``
    when dt exceeds :func:`time_step_bound` (pass ``bound`` to reuse a precomputed one; ``stacklevel``
    as in ``warnings.warn``, counted from this function's caller's caller)."""
    if isinstance(dt, bool) or not isinstance(dt, (int, float, np.integer, np.floating)) or not (
            np.isfinite(dt) and dt > 0):
        raise ValueError(f"dt: must be a finite time step > 0 s, got {dt!r}")
    dt = float(dt)
    bound = time_step_bound(model) if bound is None else bound
    if dt > bound:
        L, s = _thinnest_moving_shape(model)
        fall = 0.5 * float(np.linalg.norm(model.gravity)) * dt * dt
        warnings.warn(
            f"dt = {dt:g} s: a body falling from rest moves ½|g|dt² = {fall:.3g} m in one step, more than the "
            f"thinnest moving shape ({model.shape_name[s]!r}, {L:g} m), so collision can miss contacts and bodies "
            f"can pass through each other; steps up to {bound:.3g} s avoid that (the SAP step itself is stable at "
            f"any dt; see docs/pipeline.md)", LargeTimeStepWarning, stacklevel=stacklevel)
    return dt

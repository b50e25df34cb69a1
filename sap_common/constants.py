"""Named numerical constants shared by ``sap_ref`` and ``sap_gpu``, each with its reason.

Both backends must take the same decisions (which contacts exist, which line-search probe is
accepted, which quaternion is rejected), so every threshold that decides something lives here
once and both packages import it. ``sap_gpu`` never imports ``sap_ref``. NumPy only.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    # collision
    "DEFAULT_NORMAL", "COINCIDENT_DISTANCE", "PARALLEL_TOL", "INTERIOR_DEPTH_MARGIN", "GOLDEN_ITERATIONS",
    "GOLDEN_TIE", "EDGE_AXIS_BIAS", "DEGENERATE_AXIS", "FACE_AXIS_TIE", "CLIP_TOL", "POINT_SEGMENT",
    "PARALLEL_DENOM",
    # constraints and weights
    "SOFT_NORM_EPS", "LIMIT_BETA", "DRIVE_BETA", "LIMIT_WINDOW_FACTOR", "DISTANCE_EPS", "WEIGHT_FLOOR",
    # line searches
    "MONOTONE_ABS_SLOP", "MONOTONE_REL_SLOP", "MONOTONE_ALPHA_MIN", "EXACT_ALPHA_MAX", "EXACT_F_TOL",
    # state and model checks
    "QUAT_NORM_MIN", "QUAT_NORM_MAX", "MASS_MATRIX_RTOL",
    # solver options
    "NEWTON_PATHS", "DEFAULT_NEWTON_PATH",
]

# ----------------------------------------------------------------------------- collision

# Normal used when two sphere centres coincide and no direction is defined (any fixed unit
# vector keeps the result deterministic; +z is "up" in every scene).
DEFAULT_NORMAL = np.array([0.0, 0.0, 1.0])
DEFAULT_NORMAL.setflags(write=False)
# Closer than this [m], two core points "coincide": their difference is rounding noise and its
# direction meaningless, so the routine's fallback normal is used instead.
COINCIDENT_DISTANCE = 1e-12
# Segments whose unit directions' cross product is below this (sin θ ≤ 1e-6) count as parallel.
PARALLEL_TOL = 1e-6
# capsule–box: the segment's interior minimum is a separate contact only when it is deeper than
# both ends by more than this [m] (a capsule lying flat on a face gives just its two ends).
INTERIOR_DEPTH_MARGIN = 1e-6
# Golden-section steps on [0, 1]: 0.618^80 ≈ 2e-17, below float64 resolution.
GOLDEN_ITERATIONS = 80
# capsule–box golden section: values within this [m] count as equal and the search moves toward
# t = 0. Along a segment inside a box the signed distance has flat stretches where the two probes
# differ only by rounding (~1e-17 m on metre-scale shapes); the tolerance, ~100 ulps, makes the
# outcome independent of that rounding (so both backends, which round differently, find the same
# point) and moves the minimum found by at most a few times itself.
GOLDEN_TIE = 1e-14
# box–box [m]: an edge axis must separate by this much more than the best face axis to be used,
# so that rounding in stacks of aligned boxes never flips face contact (4 points) to edge contact (1).
EDGE_AXIS_BIAS = 1e-5
# box–box: |e₀ × e₁| below this (unit edge directions) means parallel edges, no edge–edge axis
# (its direction would be rounding noise; the face axes cover that configuration).
DEGENERATE_AXIS = 1e-6
# box–box [m]: a face axis must separate by more than this to replace an earlier one (box 0 before
# box 1, x before y before z). Parallel faces of two boxes (a stack) tie exactly; their separations
# differ by rounding only, and either choice gives the same points in a different order — the
# tolerance makes the choice, and so the order, independent of that rounding.
FACE_AXIS_TIE = 1e-12
# box–box [m]: a polygon vertex this close to a clipping plane is on it; far below any contact
# feature, far above the rounding (~1e-17 m) of a point's distance to the plane.
CLIP_TOL = 1e-12
# Squared segment length [m²] at or below which a segment is treated as a point (Ericson's ε).
POINT_SEGMENT = 1e-300
# Relative size of Ericson's denominator a·e − b² (= |d₁|²|d₂|² sin²θ) at or below which two
# segments are parallel and s is fixed at 0: sin θ ≤ 1e-6, as PARALLEL_TOL.
PARALLEL_DENOM = 1e-12

# ----------------------------------------------------------------------------- constraints

# N·s: Drake's hard-coded soft-norm ε of the friction cone (docs/formulation.md § Friction cone).
SOFT_NORM_EPS = 1e-7
# Near-rigid threshold β of limit constraints (docs/formulation.md § Regularization; Drake uses 0.1).
LIMIT_BETA = 0.1
# Near-rigid threshold β of PD (drive) constraints (docs/formulation.md § Regularization; Drake uses 0.1).
DRIVE_BETA = 0.1
# Limits are added inside the window q₀ ± 2h·max(|v₀|, |v*|) (docs/formulation.md § Limits).
LIMIT_WINDOW_FACTOR = 2.0
# m: below this anchor distance the direction of a DISTANCE joint's limit is undefined and the
# limit row is skipped for the step.
DISTANCE_EPS = 1e-9
# s/kg: contact weights are w = max(…, 1e-12), which keeps R > 0 for contacts between a moving
# and a static body whose estimate rounds to 0 (docs/formulation.md § Weights).
WEIGHT_FLOOR = 1e-12

# ----------------------------------------------------------------------------- line searches
# (docs/formulation.md § Line searches)

# monotone_decay accepts φ(α) ≤ φ(0) + 1e-14 + 1e-12|φ(0)|: the slop covers the rounding of φ,
# so a direction that cannot decrease φ below rounding is not reported as a failure.
MONOTONE_ABS_SLOP = 1e-14
MONOTONE_REL_SLOP = 1e-12
# Below this step monotone_decay reports a line-search failure for the world.
MONOTONE_ALPHA_MIN = 1e-8
# Drake's exact line search may over-relax to α = 1.5.
EXACT_ALPHA_MAX = 1.5
# Tolerance on f = φ'(α)/(−φ'(0)) of the exact line search (hard-coded in Drake).
EXACT_F_TOL = 1e-8

# ----------------------------------------------------------------------------- state and model checks

# Quaternions read from a state (``joint_q`` of BALL, FREE and DISTANCE joints; ``body_q`` in
# collision) are accepted when finite with QUAT_NORM_MIN ≤ |q| ≤ QUAT_NORM_MAX and normalized
# on read (the rotation is q/|q|); any other quaternion rejects its world (StepStatus
# INVALID_QUATERNION, docs/conventions.md). Why this range:
# * it must be wide: the drake preset's position map (sap_euler, Drake's own) never
#   renormalizes, and |q| grows by √(1 + (h|ω|/2)²) per step — at h|ω| = 0.1 rad per step it
#   takes ~16,000 steps to reach 1e9, at h|ω| = 0.01 about 1.7 million;
# * it must stay where normalizing is exact to a few ulps in every precision: |q|² is a normal
#   number in float32 (the approx32 boundary pose normalizes in float32) for 1e-19 < |q| < 1e19,
#   and in float64 |q|² underflows to 0 below ~1e-154 (a 1e-200 quaternion "has" no norm);
# * outside it a quaternion is no drifted rotation but a corrupted one (zero, uninitialized
#   memory, overflow), and reading it as a rotation would silently invent an orientation.
# The test is done on |q|² = ((x² + y²) + z²) + w² in float64, in that order, in both backends.
QUAT_NORM_MIN = 1e-9
QUAT_NORM_MAX = 1e9
# A tree's mass matrix (armature included) is singular when its smallest eigenvalue is at most
# this times its largest. A singular M from a massless body is exactly singular: its smallest
# eigenvalue is rounding noise, ~1e-16 of the largest; 1e-12 leaves four orders of magnitude
# above that noise and still admits conditioning far beyond any model we know (a humanoid's M
# has a condition number of ~1e4).
MASS_MATRIX_RTOL = 1e-12


# ----------------------------------------------------------------------------- solver options

# SolverSAP's newton_path: how sap_gpu lays the Newton loop on the device. "fused" runs a world's
# whole loop in one block of threads (one launch per step); "staged" runs each stage as its own
# batched kernel. Both compute the same iterates; sap_ref has a single host loop and accepts the
# option (and checks it) only so that code written for one backend runs unchanged on the other.
NEWTON_PATHS = ("fused", "staged")
DEFAULT_NEWTON_PATH = "fused"

"""Named numerical constants shared by ``sap_ref`` and ``sap_gpu``, each with its reason.

Both backends must take the same decisions (which contacts exist, which line-search probe is
accepted, which quaternion is rejected), so every threshold that decides something lives here
once and both packages import it. ``sap_gpu`` never imports ``sap_ref``. NumPy only.
"""

from __future__ import annotations

from types import MappingProxyType

import numpy as np

__all__ = [
    # collision
    "DEFAULT_NORMAL", "COINCIDENT_DISTANCE", "PARALLEL_TOL", "INTERIOR_DEPTH_MARGIN", "GOLDEN_ITERATIONS",
    "GOLDEN_TIE", "EDGE_AXIS_BIAS", "DEGENERATE_AXIS", "FACE_AXIS_TIE", "CLIP_TOL", "POINT_SEGMENT",
    "PARALLEL_DENOM", "FACE_MERGE_TOL", "GJK_MAX_ITERATIONS", "GJK_REL_TOL", "GJK_TOUCH_DISTANCE",
    "EPA_MAX_VERTICES", "EPA_MAX_FACES", "EPA_TOL", "FACE_ALIGNMENT_TOL", "FACE_ALIGNMENT_TIE", "MANIFOLD_MAX_POINTS",
    "MANIFOLD_MERGE_DISTANCE", "MANIFOLD_DEPTH_TIE", "MANIFOLD_AREA_TIE", "CYLINDER_CAP_POLYGON", "ON_FACE_TOL",
    "RAISE_GAP", "RAISE_MAX_ITERATIONS", "ROUNDING_MAX_RATIO",
    "BROAD_PHASE_SLACK", "FLAT_SIMPLEX", "KINK_TOL", "SUPPORT_TIE", "REFINE_MIN_GAIN", "REFINE_ITERATIONS",
    "REFINE_STEP", "REFINE_HALVINGS", "REFINE_ROUNDS", "WITNESS_CLAMP_TOL",
    # constraints and weights
    "SOFT_NORM_EPS", "LIMIT_BETA", "DRIVE_BETA", "LIMIT_WINDOW_FACTOR", "DISTANCE_EPS", "WEIGHT_FLOOR",
    "HC_VELOCITY_GUARD", "HOLONOMIC_BETA", "CONSTRAINT_DISTANCE_MIN", "CONSTRAINT_DISTANCE_MIN_RELATIVE",
    # line searches
    "MONOTONE_ABS_SLOP", "MONOTONE_REL_SLOP", "MONOTONE_ALPHA_MIN", "EXACT_ALPHA_MAX", "EXACT_F_TOL",
    # state and model checks
    "QUAT_NORM_MIN", "QUAT_NORM_MAX", "MASS_MATRIX_RTOL",
    # solver options
    "NEWTON_PATHS", "DEFAULT_NEWTON_PATH", "FUSED_MAX_REGISTERS_RANGE", "FUSED_MAX_REGISTERS_AUTO",
    "FUSED_MAX_REGISTERS_NONE", "FUSED_AUTO_MAX_REGISTERS", "FUSED_HESSIANS", "DEFAULT_FUSED_HESSIAN",
    "FUSED_CHOLESKY_AUTO", "FUSED_CHOLESKYS", "DEFAULT_FUSED_CHOLESKY", "FUSED_AUTO_CHOLESKY",
    # memory
    "FREE_MEMORY_FRACTION", "MEMORY_CHECK_MIN_BYTES", "MEMORY_CHECK_ENV",
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
# point). At a smooth minimum (the segment outside the box) a flat stretch spans ~√(GOLDEN_TIE/f'')
# and a decision can still fall either way, so there the minimiser is then made exact
# (sap_ref.collision_box._refined_outside).
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

# Convex meshes: Qhull's facets whose unit normals agree within this (per component) and whose
# offsets agree within this times the mesh's size are one polygon face. Facets of one planar face
# differ by rounding (~1e-15); distinct faces of real meshes differ far more (a 1e-6 rad crease
# is a crease). A face is what a multi-point contact clips against.
FACE_MERGE_TOL = 1e-9
# GJK (distance between convex cores, docs/design.md § Collision): at most this many support
# steps. Polytope pairs stop exactly after a few; a curved pair converges linearly and reaches
# GJK_REL_TOL in ~10-40 steps; the cap only bounds the cost of a pathological configuration.
GJK_MAX_ITERATIONS = 100
# GJK stops when the duality gap |v|² − v·w is at most this times |v|²: the distance is then
# known to a relative 1e-12 (a few thousand ulps), below any physical scale.
GJK_REL_TOL = 1e-12
# A GJK tetrahedron whose volume |det| is below this times its largest edge cubed is flat: it
# encloses nothing. A curved core makes GJK's support points cluster (they converge), and the
# orientation of a face of nearly coincident points is rounding noise; a sound tetrahedron has
# |det|/edge³ of order 0.1.
FLAT_SIMPLEX = 1e-9
# [m] GJK: cores closer than this overlap or touch; EPA (penetration) takes over. Rounding noise
# of metre-scale coordinates is ~1e-16 m; a gap of 1e-12 m is contact for every purpose.
GJK_TOUCH_DISTANCE = 1e-12
# EPA (penetration depth): polytope capacity. A polytope pair converges exactly within a few
# dozen vertices; a curved pair stops at the cap, its depth then accurate to ~1e-4 of the
# shapes' curvature radius (docs/design.md § Collision). 2V − 4 faces close V vertices.
EPA_MAX_VERTICES = 64
EPA_MAX_FACES = 2 * EPA_MAX_VERTICES
# [m] EPA stops when a new support point extends the nearest face by at most this: the exact
# answer of a polytope pair (which ends at 0 up to rounding, ~1e-17 m), and for a curved pair a
# depth good to ~1e-10 m while staying clear of the rounding regime (~1e-13 m), where a new
# face can be a sliver whose normal rounding turns inward.
EPA_TOL = 1e-10
# EPA on a curved pair stopped by its vertex cap is polished by Newton steps on the separation
# σ(n) (sap_ref.collision_convex.refine_penetration): quadratic convergence from EPA's ~1e-3 rad
# reaches rounding in 3–5 steps; 8 bound the cost.
REFINE_ITERATIONS = 8
# [rad] Central-difference step of the refinement's Hessian: the support map of a curved core is
# smooth on this scale (its error is O(step²) ~ 1e-8 relative, which only slows the last step),
# and it is the length of a fallback gradient step.
REFINE_STEP = 1e-4
# A normal within this of perpendicular to a cylinder's or capsule's axis (|n·â|) is on the kink of
# its support function, where the support is a whole segment (the side line, the core): a normal
# put there by the refinement is perpendicular to rounding (~1e-17); a generic one is not within 1e-12.
KINK_TOL = 1e-12
# Polytope points whose support values along a refined normal agree within this times the shape's
# size are one support set (an edge, a face): the refined normal is good to ~1e-8 rad, so the two
# ends of an edge lying against the other shape differ by ~1e-9 of the size; distinct vertices of a
# generic contact differ by far more.
SUPPORT_TIE = 1e-8
# [m] A witness on a segment (a box's edge, a cylinder's side line) against a face (a cylinder's
# cap, a box's face) is kept to the part of the segment that, moved along the normal by the
# separation, lies on that face's solid core grown by this: where the two are nearly parallel
# (tilted 1e-7 rad) the point of the edge nearest EPA's witness can lie beyond the face (0.56 mm
# beyond a cap's rim, found by the random search). Rounding of a point on the rim is ~1e-17 m.
WITNESS_CLAMP_TOL = 1e-12
# [m] A refinement step (or a move onto a kink) must raise σ by more than this: a smaller gain is
# rounding (~1e-16 m per operation on metre-scale coordinates), and following it would only slide
# the normal along a flat optimum (a face against a rim), moving the witness points off the face.
REFINE_MIN_GAIN = 1e-14
# A refinement step that does not raise σ is halved up to this many times, then refinement stops.
REFINE_HALVINGS = 8
# Rounds of the refinement (Newton steps, then moves onto a kink of a support function or a crossing
# of two and Newton steps along the kink) until a round's moves gain nothing. An optimum is a smooth
# point (reached by the first round's steps), on one kink (its move and steps along it), or on a
# crossing (a second move, from next to the crossing where the steps along one kink stall); one more
# round finds nothing left to gain. 4 bounds the cost.
REFINE_ROUNDS = 4
# A face (of a box, mesh or cylinder cap) is a reference face of a multi-point contact when its
# outward normal is within this of the contact normal (1 − cos θ, θ ≤ 4.5e-5 rad). A polytope's
# contact normal is a face normal to rounding (~1e-15) whenever a face touches; an edge–edge
# normal is not, and gets one point.
FACE_ALIGNMENT_TOL = 1e-9
# A face of shape 1 replaces shape 0's as the reference only when better aligned by more than
# this: parallel faces (a stack) tie, and rounding must not decide the side.
FACE_ALIGNMENT_TIE = 1e-12
# Points of a multi-point (manifold) contact per pair: the deepest, then the three that span the
# largest area of the clipped contact polygon. Four points hold a face against tipping in every
# direction (a quadrilateral around the contact patch); more only add rows to the solve.
MANIFOLD_MAX_POINTS = 4
# [m] A manifold candidate this close to a chosen point (or to the line or triangle they span)
# adds no support and is not chosen.
MANIFOLD_MERGE_DISTANCE = 1e-6
# [m] Manifold candidates whose depths differ by at most this are equally deep: the first in
# enumeration order is the deepest (so rounding does not pick among the corners of a resting face).
MANIFOLD_DEPTH_TIE = 1e-12
# Relative: a later manifold candidate must beat the best distance or area by this fraction to
# replace it (the corners of a square tie exactly; rounding must not choose).
MANIFOLD_AREA_TIE = 1e-9
# A cylinder cap is clipped as this regular polygon inscribed in its rim (vertices on the rim, so
# on the surface); the exact deepest rim point is always a candidate besides.
CYLINDER_CAP_POLYGON = 8
# [m] A height-field witness point this close to its cell triangle is on the terrain surface.
ON_FACE_TOL = 1e-9
# [m] A height field's contact straight up raises the cell triangle from below the shape until it
# touches (Newton's method on GJK's distance, sap_ref.collision_heightfield._deepest_below). It
# aims this far short of the touch and stops within twice it: GJK reports no witness points once
# the cores are within GJK_TOUCH_DISTANCE, and a curved core's distance is known to ~1e-12 m, so
# the aim is ten times that; the witness is then within a few times this of the exact one.
RAISE_GAP = 10 * GJK_TOUCH_DISTANCE
# Newton steps of that raise: a flat touch takes one, a curved one converges quadratically (~5–10);
# the cap only bounds a pathological configuration.
RAISE_MAX_ITERATIONS = 50
# A shape's rounding radius (SapModel.shape_rounding) is at most this many times its core's largest
# half extent. A larger ball around a speck of a core is a sphere (add one): the core then fixes the
# contact normal from features far below the millimetre, where the narrow phase's absolute
# thresholds (COINCIDENT_DISTANCE, GJK_TOUCH_DISTANCE) are no longer small.
ROUNDING_MAX_RATIO = 100.0
# [m] Broad phase: bounding boxes are grown by this beyond the shape and its margin, so that the
# rounding of a rotated box (~1e-16 m) never drops a pair whose narrow phase would report it.
BROAD_PHASE_SLACK = 1e-9

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
# Hunt–Crossley constraint (docs/formulation.md § Hunt–Crossley contact): the velocities where the
# normal impulse's two factors vanish, v_d = 1/(d + g) and v_x = f_e0/(h (k + g)), are formed with
# this guard g added to d [s/m] and to k [N/m], so that d = 0 (no dissipation) or k = 0 (no
# stiffness) make them huge instead of dividing by zero. Drake's SapHuntCrossleyConstraint adds the
# same 1e-20 (matching it keeps the antiderivative N bit for bit). For d or k above 1e-4 the guard
# is below float64 resolution (a relative change of 1e-20/d), so it never alters a real material.
HC_VELOCITY_GUARD = 1e-20
# Near-rigid threshold β of the holonomic constraints (coupler, distance, ball, weld, axis
# alignment; docs/formulation.md § Holonomic constraints): Drake hard-codes 0.1 in each of them.
HOLONOMIC_BETA = 0.1
# A distance constraint's direction p̂ = (p_Q − p_P)/‖p_Q − p_P‖ is taken only while the distance
# is at least CONSTRAINT_DISTANCE_MIN + CONSTRAINT_DISTANCE_MIN_RELATIVE·ℓ₀ [m]; closer, the
# direction is rounding noise and the row is left out of the step (Drake throws there, with
# these two numbers).
CONSTRAINT_DISTANCE_MIN = 1e-7
CONSTRAINT_DISTANCE_MIN_RELATIVE = 1e-2

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

# SapConfig.newton_path: how sap_gpu lays the Newton loop on the device. "fused" runs a world's
# whole loop in one block of threads (one launch per step); "staged" runs each stage as its own
# batched kernel. Both compute the same iterates; sap_ref has a single host loop, the same for
# either, so a configuration written for one backend runs unchanged on the other.
NEWTON_PATHS = ("fused", "staged")
DEFAULT_NEWTON_PATH = "fused"

# SapConfig.fused_max_registers: the caps CUDA accepts for registers per thread. 255 is the
# hardware's most a thread may hold; below 32 the fused kernel's block sums and tile pointers
# alone would spill.
FUSED_MAX_REGISTERS_RANGE = (32, 255)
# SapConfig.fused_max_registers's default: sap_gpu picks the cap per fused kernel
# (FUSED_AUTO_MAX_REGISTERS); and the setting for no cap at all (the compiler's choice). A
# string, not None: None means "not set" to every SapConfig knob.
FUSED_MAX_REGISTERS_AUTO = "auto"
FUSED_MAX_REGISTERS_NONE = "none"
# The caps "auto" gives the fused kernel of a world of one tile (nv ≤ 32) whose H is factored in
# the lanes' registers (fused_cholesky="lanes", the default there), by the linear-solve
# precision; every other fused kernel (the tile Cholesky, H by tiles, worlds past 32 DOFs) is left
# to the compiler. With the compiler's choice that kernel takes 168 registers (fp32 solve) and
# 193 (fp64) on sm_90, so by registers an H100 multiprocessor holds 12 and 10 worlds' blocks;
# capped at 128 and 168, 16 and 12 (spilling 160 and 56 B). On an H100 at 8192 humanoid worlds
# that made the whole step 1.03x (approx32) and 1.07x (drake) faster, at 4096 1.02x and 1.07x; at
# 1024, fewer worlds than the GPU holds at once, 0.98x and 1.01x; on a 81-DOF world factored by
# blocks a cap cost 6-9 % (docs/benchmarks.md § Register caps by default).
FUSED_AUTO_MAX_REGISTERS = MappingProxyType({"fp32": 128, "fp64": 168})

# SapConfig.fused_hessian: how the fused Newton kernel forms H = A + JᵀGJ. "rows": the block's
# lanes take H's rows and write them to global memory, which the tile factorization then loads;
# "tiles": H and −∇ℓ are assembled in the block's shared memory by tile products of J's rows
# (in slabs of 16) and factored and solved there, for worlds of one tile (nv ≤ 32; larger worlds
# form H by rows). Both give H up to the order of its sums. "rows" is the default because it is
# the faster on a GPU: on an H100, "tiles" ran 0.83x its throughput (docs/benchmarks.md).
FUSED_HESSIANS = ("rows", "tiles")
DEFAULT_FUSED_HESSIAN = "rows"

# SapConfig.fused_cholesky: how the fused Newton kernel factors H and solves for Δv, for worlds of
# one tile (nv ≤ 32) whose H is formed by rows. "tile": Warp's tile Cholesky (cuSolverDx on CUDA)
# on a shared-memory tile loaded from H's rows; "lanes": one row of H per lane of the world's
# warp, in registers, eliminated with warp shuffles (sap_gpu/lane_cholesky.py). Both solve the
# same system to rounding. Other worlds (nv > 32, or H formed by tiles) take "tile" whatever this
# says. The default, "auto", takes per device the faster of the two (FUSED_AUTO_CHOLESKY).
FUSED_CHOLESKY_AUTO = "auto"
FUSED_CHOLESKYS = (FUSED_CHOLESKY_AUTO, "tile", "lanes")
DEFAULT_FUSED_CHOLESKY = FUSED_CHOLESKY_AUTO
# What "auto" takes, by device kind. On a GPU "lanes": on an H100 it ran 1.02x, 1.09x and 1.12x
# the throughput of "tile" at 1024, 4096 and 8192 humanoid worlds with approx32 (drake 1.08x,
# 1.14x, 1.15x), and the device tests pass on the GPU with it
# (docs/benchmarks.md § Rolled sums and the register elimination on an H100).
# On Warp's CPU device "tile": a block runs as one lane
# there, which then eliminates all 32 rows itself, through memory instead of shuffles, and the
# humanoid step ran 1.25x (approx32) and 1.39x (drake) faster with "tile" at 64 worlds
# (docs/benchmarks.md § The factorization on the CPU device).
FUSED_AUTO_CHOLESKY = MappingProxyType({"cuda": "lanes", "cpu": "tile"})

# ----------------------------------------------------------------------------- memory

# The share of the free memory of a device (the host's: MemAvailable, a cgroup's or ulimit's room)
# that one solver, collision pipeline, array set or tool run may plan to take; an estimate above it
# is refused before anything is allocated (sap_common.state.check_memory). The estimates count the
# arrays the objects keep; the other 10 % is for what they do not: host copies made while building
# (the initial state, empty contacts), Warp's kernels and launch scratch, Python's objects, the
# allocator's rounding and the other processes of the machine, which a run that plans to fill memory
# to the last byte would hand to the OOM killer.
FREE_MEMORY_FRACTION = 0.9
# Estimates below this many bytes are not checked: reading the free memory would cost more than the
# check could save (every machine that runs Python has 64 MiB to spare), and small batches, the
# tests' and most tools', pay nothing.
MEMORY_CHECK_MIN_BYTES = 64 * 2**20
# The environment variable that turns the memory check off ("0", "off", "false" or "no"): for a
# machine whose reported free memory is not what a run can use (CUDA managed memory that
# oversubscribes the device, a host that swaps).
MEMORY_CHECK_ENV = "SAP_MEMORY_CHECK"

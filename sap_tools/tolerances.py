"""How closely sap_gpu must reproduce sap_ref, stage by stage: the one table of tolerances that
``sap-compare-backends`` judges with and the GPU stage tests (tests/test_gpu_stages.py,
tests/test_gpu_collision.py) assert with.

Each entry says what differs between the two backends and why that bounds the difference. The
relative tolerances apply to the largest entry of the compared quantity, or to 1 where that is
smaller (``|a − b| ≤ rtol · max(1, max|b|)``), unless their comment says otherwise.
"""

from __future__ import annotations

from types import MappingProxyType

import numpy as np

__all__ = ["TOL", "fp32_hessian_tol", "GEOMETRY_TOL", "CURVED_GEOMETRY_TOL", "WITNESS_ROUNDOFF", "normal_tol",
           "DRAKE_MPR_GEOMETRY_TOL",
           "RESIDUAL_GAP_FACTOR", "CONTACT_TIE_ULPS", "contact_tie_bound", "is_contact_tie"]

TOL = MappingProxyType({
    # float64 everywhere, same formulas, different summation order: a few hundred ulps.
    "fp64": 1e-10,
    # fp32 weights (w, R, v̂): one float32 rounding of inputs and a handful of operations.
    "fp32_weights": 2e-6,
    # fp32 free-motion solve: float32 Cholesky, error ≈ κ(A)·ε₃₂ relative to Δv (bounded per case).
    "fp32_solve_factor": 10.0,
    # Float32 boundary pose (use_f64_boundary_pose=False): the two backends' float64 poses differ
    # by an ulp, so one near a float32 rounding boundary may round either way: one float32 ulp
    # (1.2e-7 relative) in a position or rotation entry, times lever arms ≤ 1 m, in J.
    "fp32_pose": 2.4e-7,
    # A float32 sum: each term and partial sum rounds once, ε₃₂ = 1.2e-7 (times the term count).
    # H = A + JᵀGJ under contact_linear_solve_precision fp32 is such a sum, entry by entry: A, then
    # one term per row touching both DOFs, each added in float32 (see fp32_hessian_tol).
    "fp32_sum_term": 1.2e-7,
    # ℓ [J] has no scale of its own when it is near 0 (a step with little constraint work): an
    # absolute floor of 1e-12 J, far below any physical energy of a step, beside fp64 relative.
    "ell_abs": 1e-12,
})

# Collision: float64 geometry on lengths ≤ 1 m through different rotation formulas: a few hundred
# ulps (measured worst over random shape pairs and the scenes: 2e-15).
GEOMETRY_TOL = 1e-12

# Collision of a curved core (cylinder, ellipsoid) through GJK/EPA and its refinement: both backends
# iterate to a tolerance, and their arithmetic (rotation formulas, fused multiply-adds) differs by
# ulps, so a stopping test, or a ridge of the separation function σ(n) where a core meets another
# at an edge or a rim (Newton steps stall there), may be passed one step apart. The depth is
# stationary at the optimum (its error is second order in the normal's), the normal first order,
# and a witness point moves with the normal times the radius. Measured worst over 100 random
# poses of every pair type: φ 7e-9 m, points 9e-7 m, normal 2.3e-5 rad; polytope cores (point,
# segment, box, mesh, prism) and plane pairs end exactly and are held to GEOMETRY_TOL. The points'
# bar is the normal's times CURVED_LEVER: the random search found a 0.29 m sphere on a cylinder
# whose normals differed by 4.8e-5 rad, within their bar, and so its witness by 1.4e-5 m, past
# the 1e-5 m the points had been held to.
CURVED_LEVER = 0.3  # [m] the largest radius or half-size of the shapes compared (the random pairs')
CURVED_GEOMETRY_TOL = MappingProxyType({"phi0": 5e-8, "x0": 2e-4 * CURVED_LEVER, "x1": 2e-4 * CURVED_LEVER,
                                        "normal": 2e-4})

# A contact normal is the direction joining the two witness points (GJK's closest vector when the
# cores are apart), so it carries their rounding divided by their distance d = ‖x₁ − x₀‖. Two
# float64 computations of the same point agree to a few ulps of coordinates ≤ 1 m (twice the
# measured worst of GEOMETRY_TOL's note), so a box a few µm above a height field may turn its
# normal by 1e-12 rad between the backends (the random search found 4.9e-12 at d = 4.0e-6 m,
# where the points agreed to 1e-16 m) without any difference in the geometry. Below d =
# GEOMETRY_TOL float64 does not define the direction at all.
WITNESS_ROUNDOFF = 4e-15  # [m]


def normal_tol(x0, x1, base: float = GEOMETRY_TOL) -> np.ndarray:
    """Per contact: ``base`` plus the witness points' rounding over their distance,
    ``base + WITNESS_ROUNDOFF / max(‖x₁ − x₀‖, GEOMETRY_TOL)`` (see WITNESS_ROUNDOFF)."""
    d = np.linalg.norm(np.asarray(x1, np.float64) - np.asarray(x0, np.float64), axis=-1)
    return base + WITNESS_ROUNDOFF / np.maximum(d, GEOMETRY_TOL)

# Drake's point-contact query hands some shape pairs (sphere–convex mesh, sphere–ellipsoid, and
# every pair of box, capsule, cylinder, ellipsoid and convex mesh but box–box; see drake_uses_mpr
# in sap_tools/validate/diagnose.py) to FCL, which runs libccd's Minkowski Portal Refinement with the tolerance
# Drake sets, 2e-12 m on the portal's advance. Both sides iterate to a tolerance there (this
# project's GJK/EPA with its refinement, CURVED_GEOMETRY_TOL between two float64 implementations
# of it), so φ₀ and the normal of such a pair are held to the same bars as two implementations of
# a curved core, not to round-off. MPR's contact point is not a witness point at all: sap-validate
# judges it apart, see
# docs/validation.md § FCL's MPR pairs
DRAKE_MPR_GEOMETRY_TOL = MappingProxyType({key: CURVED_GEOMETRY_TOL[key] for key in ("phi0", "normal")})

# A PCR (conjugate-residual) solve's recursively updated residual drifts from b − H x by
# ≲ c·k·ε·‖H‖‖x‖ over k iterations (Greenbaum's bound for CG-type recurrences), i.e. ≲ c·k·ε·κ(H)
# relative to ‖b‖; c = 10.
RESIDUAL_GAP_FACTOR = 10.0

# A contact is reported while φ₀ < margin₀ + margin₁. Touching faces (φ₀ = margin exactly, e.g.
# a box resting exactly on another) are decided by round-off: φ₀ = n̂·(x₁ − x₀) comes from two
# witness points, each a rotation and a translation of a shape-frame point (≈ 6 roundings of
# size ε·L for coordinates of size L), then a 3-term dot product; box faces add a clipping step
# of the same order. 64 ulps of L covers that with a margin of ~4, and is still 1e-14 m at L = 1 m:
# a contact this close to the threshold is a tie, found by either backend or neither.
CONTACT_TIE_ULPS = 64


def contact_tie_bound(length_scale: float) -> float:
    """|φ₀ − margin| [m] within which inclusion is decided by round-off, for coordinates of size
    ``length_scale`` [m] (at least 1 m is assumed: the lengths of a scene in metres)."""
    return CONTACT_TIE_ULPS * float(np.finfo(np.float64).eps) * max(1.0, float(length_scale))


def is_contact_tie(phi0: float, margin: float, length_scale: float) -> bool:
    """Whether a contact with signed distance ``phi0`` [m] is included or not by round-off: |φ₀ −
    margin| within :func:`contact_tie_bound` of the coordinates' size ``length_scale`` [m]. Used by
    ``sap-compare-backends`` (two backends' contact sets) and ``sap-validate`` (a backend against a
    recording)."""
    return abs(float(phi0) - float(margin)) <= contact_tie_bound(length_scale)


def fp32_hessian_tol(rows: int) -> float:
    """Relative tolerance of H = A + JᵀGJ (or its diagonal) accumulated in float32 from ``rows``
    constraint rows, against the float64 H, relative to max|H|.

    Each entry is A's plus one term per row, added in float32 in row order. In units of the unit
    roundoff u = ε₃₂/2, (m + 2)·ε₃₂ = (2m + 4)·u: m + 1 for the partial sums, and as many again for
    the float32 products that form each term. With G positive semidefinite every term obeys
    |Jᵢᵀ G Jₖ| ≤ ½(Jᵢᵀ G Jᵢ + Jₖᵀ G Jₖ), and A likewise, so the terms' absolute values sum to at
    most max diag H, and the bound is relative to max|H|. (The random search measured 2.3e-7
    relative with three welds, 18 rows, where one rounding, 6e-8, had been assumed.)"""
    return TOL["fp32_sum_term"] * (rows + 2)

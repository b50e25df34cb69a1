"""Broad phase: which candidate pairs can touch, from world bounding boxes (NumPy, all pairs at once).

Each shape's bounding box in its own frame (``model.shape_local_bounds``: centre c, half extents
e) becomes a world box with centre p + R c and half extents |R| e (|R| element-wise: the box of the
rotated box), grown by the shape's margin and ``BROAD_PHASE_SLACK``. A pair is tested by the
narrow phase when the two boxes overlap on every axis; a plane (half-space n̂·(x − p) ≤ 0) when the
other box reaches below n̂·(x − p) = margin₀ + margin₁ (its lowest point n̂·(c − p) − Σ|n̂ᵢ|eᵢ).

The test is conservative: a pair within margin₀ + margin₁ of each other has boxes (grown by their
margins) that overlap, since the distance between boxes is at most that between the shapes they
hold. So the contacts are exactly those of the narrow phase on every pair, in the same order
(``tests/test_ref_broad_phase.py``). ``sap_gpu.broad_phase`` runs the same test per (world, pair).
"""

from __future__ import annotations

import numpy as np

from sap_common.constants import BROAD_PHASE_SLACK
from sap_common.enums import ShapeType

__all__ = ["world_bounds", "pair_overlap"]


def world_bounds(model, X) -> tuple[np.ndarray, np.ndarray]:
    """``(centre (S, 3), half (S, 3))`` of every shape's world box, grown by its margin and
    ``BROAD_PHASE_SLACK``; X (S, 7) the shapes' world poses. Planes get inf half extents."""
    from sap_common import spatial

    plane = model.shape_type == ShapeType.PLANE
    bounds = np.where(plane[:, None, None], 0.0, model.shape_local_bounds)  # a plane's are infinite
    lo, hi = bounds[:, 0], bounds[:, 1]
    c_local, e_local = 0.5 * (lo + hi), 0.5 * (hi - lo)
    R = spatial.quat_to_matrix(X[:, 3:])
    centre = X[:, :3] + np.einsum("sij,sj->si", R, c_local)
    half = np.einsum("sij,sj->si", np.abs(R), e_local) + (model.shape_margin + BROAD_PHASE_SLACK)[:, None]
    half[plane] = np.inf
    return centre, half


def pair_overlap(model, X) -> np.ndarray:
    """Per candidate pair of ``model.shape_pair``: whether the narrow phase must test it, (P,) bool."""
    pairs = model.shape_pair
    if len(pairs) == 0:
        return np.zeros(0, dtype=bool)
    from sap_common import spatial

    centre, half = world_bounds(model, X)
    a, b = pairs[:, 0], pairs[:, 1]
    plane_a = model.shape_type[a] == ShapeType.PLANE
    plane_b = model.shape_type[b] == ShapeType.PLANE
    boxes = np.all(np.abs(centre[a] - centre[b]) <= half[a] + half[b], axis=1)
    out = boxes.copy()
    for k in np.flatnonzero(plane_a | plane_b):
        p, o = (a[k], b[k]) if plane_a[k] else (b[k], a[k])
        n = spatial.quat_rotate(X[p, 3:], [0.0, 0.0, 1.0])
        lowest = n @ (centre[o] - X[p, :3]) - np.abs(n) @ half[o]
        out[k] = lowest <= model.shape_margin[p] + BROAD_PHASE_SLACK
    return out

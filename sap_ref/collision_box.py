"""The box pairs (NumPy, one pair at a time): plane–box, sphere–box, capsule–box and box–box.

Plane–box takes the 8 corners; sphere–box and capsule–box the box surface point nearest a sphere
centre (:func:`closest_point_on_box`), for a capsule at its end spheres and, when deeper, at the
segment's deepest interior point. ``sap_gpu.collision_box`` holds the same routines for the device.

``box_box`` is the separating-axis test (SAT) over the 15 candidate axes of two boxes — the
3 + 3 face normals and the 9 cross products of their edge directions — followed by contact
generation on the axis of largest separation (least penetration):

* face axis (a face normal of either box; face axes win ties within ``EDGE_AXIS_BIAS`` so that
  resting stacks get face contact): that face is the *reference* face; the face of the other
  box most anti-parallel to it (the *incident* face) is clipped against the reference face's
  four side planes (Sutherland–Hodgman). Every clipped vertex p is a contact with its own depth
  φ = n̂_ref·p − (n̂_ref·c_ref + h_ref): up to 8 points (a quadrilateral cut by 4 half-planes);
* edge axis L = e₀ × e₁: the closest points of the two supporting edges, one contact. When
  those closest points are not interior to both edges (a separated pair whose nearest features
  are not these two edges, or a deep overlap), the edge pair is not a contact feature and the
  best face axis is used instead, so the witness points always stay on the boxes' surfaces.

Same output convention as :mod:`sap_ref.collision` (docs/formulation.md § Contact frame and Jacobian):
``[(x0, x1, normal, phi0)]``,
normal n̂ from box 0 into box 1, x0 on box 0's surface, x1 on box 1's, x1 − x0 = φ₀ n̂.
Penetrating pairs report φ₀ = the SAT penetration depth (negative) on the deepest point, except
where an edge axis wins by less than ``EDGE_AXIS_BIAS``: the face contact used instead has its
deepest point between that face's separation and the SAT depth, within the bias of the latter; a
separated pair reports a lower bound of its distance (the largest SAT separation), which is all
a speculative (margin) contact needs.

Drake: ``QueryObject::ComputePointPairPenetration`` delegates box–box to FCL (one point per
pair); the clipped face manifold is the usual rigid-body-engine extension (ODE ``dBoxBox``,
Bullet ``btBoxBoxDetector``), used here for resting stability.
"""

from __future__ import annotations

import math

import numpy as np

from sap_common import spatial
from sap_common.constants import (
    CLIP_TOL,
    DEGENERATE_AXIS,
    EDGE_AXIS_BIAS,
    FACE_AXIS_TIE,
    GOLDEN_ITERATIONS,
    GOLDEN_TIE,
    INTERIOR_DEPTH_MARGIN,
)

from .collision_primitive import capsule_segment, end_spheres, segment_closest_params, with_position

__all__ = ["closest_point_on_box", "box_signed_distance", "plane_box", "sphere_box", "capsule_box", "box_box",
           "EDGE_AXIS_BIAS", "DEGENERATE_AXIS", "CLIP_TOL", "FACE_AXIS_TIE"]


def closest_point_on_box(Xb, size, p):
    """``(q, n, d)``: the box surface point q nearest to p, the outward unit normal n at q, and
    the signed distance d of p to the box (< 0 inside).

    In the box frame, c = R_WBᵀ(p − p_WB). Outside (some |c_i| > h_i): q = clamp(c, −h, h),
    d = |c − q|, n = (c − q)/d. Inside: the face of least penetration k = argmin(h − |c|)
    (first axis on ties), q = c with q_k = ±h_k, n = ±e_k, d = −(h_k − |c_k|); a centre on the
    mid-plane c_k = 0 takes the + face. Drake: ``SignedDistanceToPoint`` for a box.
    """
    R = spatial.quat_to_matrix(Xb[3:])
    c = R.T @ (np.asarray(p, dtype=np.float64) - Xb[:3])
    h = np.asarray(size, dtype=np.float64)
    outside = np.abs(c) > h
    if np.any(outside):
        q = np.clip(c, -h, h)
        diff = c - q
        d = float(np.linalg.norm(diff))
        return Xb[:3] + R @ q, R @ (diff / d), d
    gap = h - np.abs(c)
    k = int(np.argmin(gap))
    s = 1.0 if c[k] >= 0.0 else -1.0
    q = c.copy()
    q[k] = s * h[k]
    n = np.zeros(3)
    n[k] = s
    return Xb[:3] + R @ q, R @ n, -float(gap[k])


def box_signed_distance(Xb, size, p) -> float:
    """Signed distance of point p to the box (< 0 inside); see :func:`closest_point_on_box`."""
    return closest_point_on_box(Xb, size, p)[2]


def _box_corners(Xb, size_b):
    """The 8 corners R(s ⊙ h) + p, s ∈ {−1, 1}³ with x slowest and z fastest, − before +."""
    signs = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)], dtype=float)
    return spatial.transform_point(np.broadcast_to(Xb, (8, 7)), signs * size_b)


def plane_box(Xp, size_p, Xb, size_b):
    """Plane against each of the box's 8 corners v (in :func:`_box_corners` order):
    φ = n̂·(v − p₀), x0 = v − φ n̂ (its projection on the plane), x1 = v, normal n̂.
    A box resting on a face gets 4 contacts, on an edge 2, on a corner 1.
    """
    n = spatial.quat_rotate(Xp[3:], [0.0, 0.0, 1.0])
    out = []
    for corner in _box_corners(Xb, size_b):
        d = n @ (corner - Xp[:3])
        out.append((corner - d * n, corner, n, d))
    return out


def sphere_box(Xs, size_s, Xb, size_b):
    """Sphere (c, r) against a box: q, n̂_B, d = the box surface point nearest to c, the box's
    outward normal there and c's signed distance (:func:`~sap_ref.collision_box.closest_point_on_box`;
    a centre inside uses the face of least penetration). Normal −n̂_B (sphere into box),
    φ = d − r, x0 = c − r n̂_B, x1 = q. Drake: sphere–box through ``SignedDistanceToPoint``.
    """
    c, r = Xs[:3], size_s[0]
    q, n_box, dist = closest_point_on_box(Xb, size_b, c)
    return [(c - r * n_box, q, -n_box, dist - r)]


def capsule_box(Xc, size_c, Xb, size_b):
    """Capsule (segment p(t) = p₋ + t(p₊ − p₋), radius r) against a box.

    Contacts, in this order: :func:`sphere_box` for each end sphere (p₋, r), (p₊, r); then, only
    if f(t*) < min(f(0), f(1)) − ``INTERIOR_DEPTH_MARGIN``, for the sphere (p(t*), r) at the
    minimizer t* of f(t) = signed distance of p(t) to the box. f is convex (the signed
    distance of a convex set is convex), so golden-section search (``GOLDEN_ITERATIONS``, ties
    within ``GOLDEN_TIE`` resolved toward t = 0) finds t*. A capsule lying flat on a face gets
    its 2 ends, one crossing an edge the crossing point.
    """
    p0, p1 = capsule_segment(Xc, size_c[1])
    out = [c for e in end_spheres(Xc, size_c[1]) for c in sphere_box(with_position(Xc, e), size_c, Xb, size_b)]
    if len(out) == 1:  # a point segment (one end sphere): nothing in between
        return out
    sd = lambda t: box_signed_distance(Xb, size_b, p0 + t * (p1 - p0))  # noqa: E731
    lo, hi = 0.0, 1.0
    g = (math.sqrt(5.0) - 1.0) / 2.0
    x1, x2 = hi - g * (hi - lo), lo + g * (hi - lo)
    f1, f2 = sd(x1), sd(x2)
    for _ in range(GOLDEN_ITERATIONS):
        if f1 <= f2 + GOLDEN_TIE:
            hi, x2, f2 = x2, x1, f1
            x1 = hi - g * (hi - lo)
            f1 = sd(x1)
        else:
            lo, x1, f1 = x1, x2, f2
            x2 = lo + g * (hi - lo)
            f2 = sd(x2)
    t = _refined_outside(Xb, size_b, p0, p1, 0.5 * (lo + hi))
    if sd(t) < min(sd(0.0), sd(1.0)) - INTERIOR_DEPTH_MARGIN:
        out += sphere_box(with_position(Xc, p0 + t * (p1 - p0)), size_c, Xb, size_b)
    return out


def _refined_outside(Xb, size_b, p0, p1, t):
    """The golden-section minimiser ``t`` of the segment's signed distance, made exact where p(t) lies
    outside the box: there f(t)² = Σ (cᵢ(t) − bᵢ)² over the axes clamped at t (cᵢ(t) = aᵢ + t·eᵢ
    in the box frame, bᵢ = ±hᵢ), a quadratic whose minimiser is t* = −Σ(aᵢ − bᵢ)eᵢ / Σeᵢ². Golden
    section finds a smooth minimum only to ~√ε (f is flat to rounding over that span, and the
    ``GOLDEN_TIE`` decisions fall either way in the two backends: points 3e-8 m apart were seen);
    t* is kept when it lies in [0, 1] with the same axes clamped to the same sides, else ``t``.
    Inside the box f is piecewise linear and the search already ends on its kink."""
    R = spatial.quat_to_matrix(Xb[3:])
    a = R.T @ (np.asarray(p0, dtype=np.float64) - Xb[:3])
    e = R.T @ (np.asarray(p1, dtype=np.float64) - np.asarray(p0, dtype=np.float64))
    h = np.asarray(size_b, dtype=np.float64)
    num = den = 0.0
    side = [0, 0, 0]
    for i in range(3):  # in order, as sap_gpu sums
        c = a[i] + t * e[i]
        if abs(c) > h[i]:
            side[i] = 1 if c > 0.0 else -1
            num += (a[i] - side[i] * h[i]) * e[i]
            den += e[i] * e[i]
    if den <= 0.0:
        return t
    ts = -num / den
    if not 0.0 <= ts <= 1.0:
        return t
    for i in range(3):
        c = a[i] + ts * e[i]
        if (0 if abs(c) <= h[i] else (1 if c > 0.0 else -1)) != side[i]:
            return t
    return ts


def _face_polygon(center, R, h, axis, sign):
    """World vertices (4, 3) of the face with outward normal sign·R[:, axis], in cyclic order."""
    i, j = (axis + 1) % 3, (axis + 2) % 3
    fc = center + sign * h[axis] * R[:, axis]
    u, v = h[i] * R[:, i], h[j] * R[:, j]
    return np.array([fc + u + v, fc - u + v, fc - u - v, fc + u - v])


def _clip(poly, n, offset):
    """The part of polygon ``poly`` with n·x ≤ offset (one Sutherland–Hodgman pass).

    A vertex within ``CLIP_TOL`` of the plane counts as on it: kept, and never the end of a cut
    edge (so it is not doubled). Faces of aligned boxes of equal size lie on each other's side
    planes up to rounding; the tolerance keeps the clipped polygon, and its vertex order, the
    same whichever way that rounding goes (sap_gpu rounds differently).
    """
    out = []
    for k in range(len(poly)):
        a, b = poly[k], poly[(k + 1) % len(poly)]
        da, db = n @ a - offset, n @ b - offset
        if da <= CLIP_TOL:
            out.append(a)
        if (da < -CLIP_TOL and db > CLIP_TOL) or (da > CLIP_TOL and db < -CLIP_TOL):  # a true cut
            out.append(a + (b - a) * (da / (da - db)))
    return out


def _face_contact(ref_c, ref_R, ref_h, axis, ref_sign, inc_c, inc_R, inc_h):
    """Incident face clipped to the reference face: ``[(p, depth)]``, p on the incident box.

    Reference face: outward normal n̂_ref = ref_sign·ref_R[:, axis]; depth = n̂_ref·p − (n̂_ref·c + h_axis)
    (< 0 below the face plane). Incident face: the other box's face whose outward normal is most
    anti-parallel to n̂_ref (it holds the other box's support point along −n̂_ref).
    """
    n_ref = ref_sign * ref_R[:, axis]
    dots = inc_R.T @ n_ref
    k = int(np.argmax(np.abs(dots)))
    inc_sign = -1.0 if dots[k] > 0.0 else 1.0
    poly = list(_face_polygon(inc_c, inc_R, inc_h, k, inc_sign))
    for side in ((axis + 1) % 3, (axis + 2) % 3):
        for s in (1.0, -1.0):
            n_side = s * ref_R[:, side]
            poly = _clip(poly, n_side, n_side @ ref_c + ref_h[side])
            if not poly:
                return []
    face_offset = n_ref @ ref_c + ref_h[axis]
    return [(p, float(n_ref @ p - face_offset)) for p in poly]


def _supporting_edge(c, R, h, axis, direction):
    """End points of the box edge parallel to R[:, axis] farthest along ``direction`` (+ on ties)."""
    mid = c.copy()
    for k in range(3):
        if k != axis:
            mid = mid + (-1.0 if direction @ R[:, k] < 0.0 else 1.0) * h[k] * R[:, k]
    return mid - h[axis] * R[:, axis], mid + h[axis] * R[:, axis]


def box_box(X0, size0, X1, size1):
    """Box 0 against box 1: SAT over 15 axes, then face clipping (≤ 8) or edge–edge (1).

    With T = c₁ − c₀ and a unit axis L, the separation along L is
        σ(L) = |T·L| − Σᵢ h₀ᵢ|R₀ᵢ·L| − Σⱼ h₁ⱼ|R₁ⱼ·L|
    (σ < 0: overlap of the projections). The axis of largest σ gives n̂ = ±L oriented along T.
    Face axis: φ of each clipped incident vertex (:func:`_face_contact`); edge axis: φ = n̂·(q − p)
    for the closest points p, q of the supporting edges, x0 = p, x1 = p + φn̂ (= q when p, q are
    interior to both edges, the only case kept — see the module docstring). Ties (within
    ``FACE_AXIS_TIE``): the first face axis (box 0 before box 1, x before y before z); coincident
    centres take the + direction.
    Returns ``[(x0, x1, normal, phi0)]`` with the normal from box 0 into box 1.
    """
    c0, c1 = X0[:3], X1[:3]
    R0, R1 = spatial.quat_to_matrix(X0[3:]), spatial.quat_to_matrix(X1[3:])
    h0, h1 = np.asarray(size0, dtype=np.float64), np.asarray(size1, dtype=np.float64)
    T = c1 - c0

    def separation(L):
        return abs(T @ L) - np.sum(h0 * np.abs(R0.T @ L)) - np.sum(h1 * np.abs(R1.T @ L))

    best_face = None  # (separation, box, axis): a later axis must beat the best by FACE_AXIS_TIE
    for box, R in ((0, R0), (1, R1)):
        for k in range(3):
            s = separation(R[:, k])
            if best_face is None or s > best_face[0] + FACE_AXIS_TIE:
                best_face = (s, box, k)
    best_edge = None
    for i in range(3):
        for j in range(3):
            L = np.cross(R0[:, i], R1[:, j])
            norm = np.linalg.norm(L)
            if norm < DEGENERATE_AXIS:
                continue
            s = separation(L / norm)
            if best_edge is None or s > best_edge[0]:
                best_edge = (s, i, j, L / norm)

    if best_edge is not None and best_edge[0] > best_face[0] + EDGE_AXIS_BIAS:
        _, i, j, L = best_edge
        n = L if L @ T >= 0.0 else -L
        a0, a1 = _supporting_edge(c0, R0, h0, i, n)
        b0, b1 = _supporting_edge(c1, R1, h1, j, -n)
        s, t = segment_closest_params(a0, a1, b0, b1)
        if 0.0 < s < 1.0 and 0.0 < t < 1.0:
            p, q = a0 + s * (a1 - a0), b0 + t * (b1 - b0)
            phi = float(n @ (q - p))
            # q − p ∥ n̂ up to rounding here; x1 = p + φn̂ makes x1 − x0 = φ₀n̂ hold exactly.
            return [(p, p + phi * n, n, phi)]

    _, box, k = best_face
    if box == 0:
        sign = 1.0 if R0[:, k] @ T >= 0.0 else -1.0
        n = sign * R0[:, k]
        return [(p - depth * n, p, n, depth) for p, depth in _face_contact(c0, R0, h0, k, sign, c1, R1, h1)]
    sign = 1.0 if R1[:, k] @ (-T) >= 0.0 else -1.0  # box 1's face looking at box 0
    n = -sign * R1[:, k]
    return [(p, p + depth * n, n, depth) for p, depth in _face_contact(c1, R1, h1, k, sign, c0, R0, h0)]

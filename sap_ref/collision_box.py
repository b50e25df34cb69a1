"""Box geometry for the narrow phase: point queries and box–box contact.

``box_box`` uses the separating-axis test over the 15 candidate axes (3 + 3 face normals,
9 edge–edge cross products). The axis of largest separation (least penetration) gives the
normal; face axes win ties within ``EDGE_AXIS_BIAS`` so that resting stacks use face contact.
Face contact: the incident face of the other box is clipped against the side planes of the
reference face (Sutherland–Hodgman), up to 8 points, each with its own depth. Edge contact:
the closest points of the two supporting edges, one point (x1 on the normal through x0). Same output convention as
``sap_ref.collision``: ``(x0, x1, normal, phi0)`` with the normal from box 0 into box 1.
"""

from __future__ import annotations

import numpy as np

from sap_common import spatial

__all__ = ["segment_closest_points", "closest_point_on_box", "box_signed_distance", "box_box", "EDGE_AXIS_BIAS"]

EDGE_AXIS_BIAS = 1e-5  # m: an edge axis must separate by this much more than the best face axis
DEGENERATE_AXIS = 1e-6  # |u × v| below this: parallel edges, no edge–edge axis


def segment_closest_points(a0, a1, b0, b1):
    """Closest points of two segments (Ericson, Real-Time Collision Detection §5.1.9)."""
    d1, d2, r = a1 - a0, b1 - b0, a0 - b0
    a, e, f = d1 @ d1, d2 @ d2, d2 @ r
    if a <= 1e-300 and e <= 1e-300:
        return a0, b0
    if a <= 1e-300:
        return a0, b0 + np.clip(f / e, 0.0, 1.0) * d2
    c = d1 @ r
    if e <= 1e-300:
        return a0 + np.clip(-c / a, 0.0, 1.0) * d1, b0
    b = d1 @ d2
    denom = a * e - b * b
    s = float(np.clip((b * f - c * e) / denom, 0.0, 1.0)) if denom > 1e-12 * a * e else 0.0
    t = (b * s + f) / e
    if t < 0.0:
        t, s = 0.0, float(np.clip(-c / a, 0.0, 1.0))
    elif t > 1.0:
        t, s = 1.0, float(np.clip((b - c) / a, 0.0, 1.0))
    return a0 + s * d1, b0 + t * d2


def closest_point_on_box(Xb, size, p):
    """``(q, n, d)``: the box surface point q nearest to p, the outward unit normal at q, and
    the signed distance d of p (< 0 inside). Inside, the face of least penetration is used
    (first axis on ties; the + face when p lies on the mid-plane)."""
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
    """Signed distance of point p to the box (< 0 inside)."""
    return closest_point_on_box(Xb, size, p)[2]


def _face_polygon(center, R, h, axis, sign):
    """World vertices (4, 3) of the face of a box with outward normal sign·R[:, axis], in order."""
    i, j = (axis + 1) % 3, (axis + 2) % 3
    fc = center + sign * h[axis] * R[:, axis]
    u, v = h[i] * R[:, i], h[j] * R[:, j]
    return np.array([fc + u + v, fc - u + v, fc - u - v, fc + u - v])


def _clip(poly, n, offset):
    """Keep the part of polygon ``poly`` with n·x ≤ offset (Sutherland–Hodgman)."""
    out = []
    for k in range(len(poly)):
        a, b = poly[k], poly[(k + 1) % len(poly)]
        da, db = n @ a - offset, n @ b - offset
        if da <= 0.0:
            out.append(a)
        if da * db < 0.0:  # strictly on opposite sides: a vertex on the plane is not doubled
            out.append(a + (b - a) * (da / (da - db)))
    return out


def _face_contact(ref_c, ref_R, ref_h, axis, ref_sign, inc_c, inc_R, inc_h):
    """Points of the incident box's face clipped to the reference face: [(p_inc, depth)]."""
    n_ref = ref_sign * ref_R[:, axis]
    # Incident face: the face of the other box whose outward normal is most anti-parallel to n_ref.
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


def box_box(X0, size0, X1, size1):
    """Contacts of box 0 against box 1: ``[(x0, x1, normal, phi0)]``, normal from 0 into 1."""
    c0, c1 = X0[:3], X1[:3]
    R0, R1 = spatial.quat_to_matrix(X0[3:]), spatial.quat_to_matrix(X1[3:])
    h0, h1 = np.asarray(size0, dtype=np.float64), np.asarray(size1, dtype=np.float64)
    T = c1 - c0

    def separation(L):
        r0 = np.sum(h0 * np.abs(R0.T @ L))
        r1 = np.sum(h1 * np.abs(R1.T @ L))
        return abs(T @ L) - r0 - r1

    best_face = max(((separation(R[:, k]), box, k) for box, R in ((0, R0), (1, R1)) for k in range(3)),
                    key=lambda t: t[0])
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
        s, i, j, L = best_edge
        n = L if L @ T >= 0.0 else -L
        # Supporting edges: box 0's edge along its axis i farthest along +n, box 1's along −n.
        def edge(c, R, h, axis, direction):
            mid = c.copy()
            for k in range(3):
                if k != axis:
                    mid = mid + np.sign(direction @ R[:, k] or 1.0) * h[k] * R[:, k]
            return mid - h[axis] * R[:, axis], mid + h[axis] * R[:, axis]

        p0, p1 = segment_closest_points(*edge(c0, R0, h0, i, n), *edge(c1, R1, h1, j, -n))
        phi = float(n @ (p1 - p0))
        # x1 = p1 slid within the contact plane onto the normal through p0, so x1 − x0 = φ n holds
        # exactly; it is p1 itself when the closest points are inside both edges (the usual case).
        return [(p0, p0 + phi * n, n, phi)]

    _, box, k = best_face
    if box == 0:
        sign = 1.0 if R0[:, k] @ T >= 0.0 else -1.0
        n = sign * R0[:, k]
        return [(p - depth * n, p, n, depth) for p, depth in _face_contact(c0, R0, h0, k, sign, c1, R1, h1)]
    sign = 1.0 if R1[:, k] @ (-T) >= 0.0 else -1.0  # box 1's face looking at box 0
    n = -sign * R1[:, k]
    return [(p, p + depth * n, n, depth) for p, depth in _face_contact(c1, R1, h1, k, sign, c0, R0, h0)]

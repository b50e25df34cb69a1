"""Closed forms for the pairs of planes, spheres and capsules (NumPy, one pair at a time).

Plane–sphere, plane–capsule, sphere–sphere, sphere–capsule and capsule–capsule. Each routine is
written for its canonical type order (lower ``ShapeType`` first) and returns
``[(x0, x1, normal, phi0)]`` in the conventions of :mod:`sap_ref.collision` (normal from shape 0
into shape 1, x1 − x0 = φ₀ n̂); :func:`sap_ref.collision.pair_contacts` mirrors them for the other
order. ``sap_gpu.collision_primitive`` holds the same routines for the device.

The segment queries (:func:`segment_closest_params`, the capsule's segment and end spheres) live
here too: the box pairs and GJK/EPA's witnesses reuse them.
"""

from __future__ import annotations

import numpy as np

from sap_common import spatial
from sap_common.constants import COINCIDENT_DISTANCE, DEFAULT_NORMAL, PARALLEL_DENOM, PARALLEL_TOL, POINT_SEGMENT

__all__ = ["plane_sphere", "plane_capsule", "sphere_sphere", "sphere_capsule", "capsule_capsule",
           "segment_closest_params", "segment_closest_points", "capsule_segment", "end_spheres", "closest_on_segment",
           "with_position", "sphere_points"]


def segment_closest_params(a0, a1, b0, b1) -> tuple[float, float]:
    """Parameters ``(s, t) ∈ [0, 1]²`` of the closest points a0 + s(a1 − a0), b0 + t(b1 − b0).

    Ericson, Real-Time Collision Detection §5.1.9: minimize |a(s) − b(t)|² over the unit square;
    for parallel segments s = 0 (then t, then s re-clamped), a deterministic choice.
    """
    d1, d2, r = a1 - a0, b1 - b0, a0 - b0
    a, e, f = d1 @ d1, d2 @ d2, d2 @ r
    if a <= POINT_SEGMENT and e <= POINT_SEGMENT:
        return 0.0, 0.0
    if a <= POINT_SEGMENT:
        return 0.0, float(np.clip(f / e, 0.0, 1.0))
    c = d1 @ r
    if e <= POINT_SEGMENT:
        return float(np.clip(-c / a, 0.0, 1.0)), 0.0
    b = d1 @ d2
    denom = a * e - b * b
    s = float(np.clip((b * f - c * e) / denom, 0.0, 1.0)) if denom > PARALLEL_DENOM * a * e else 0.0
    t = (b * s + f) / e
    if t < 0.0:
        t, s = 0.0, float(np.clip(-c / a, 0.0, 1.0))
    elif t > 1.0:
        t, s = 1.0, float(np.clip((b - c) / a, 0.0, 1.0))
    return s, float(t)


def segment_closest_points(a0, a1, b0, b1):
    """Closest points ``(p, q)`` of segments [a0, a1] and [b0, b1] (see :func:`segment_closest_params`)."""
    s, t = segment_closest_params(a0, a1, b0, b1)
    return a0 + s * (a1 - a0), b0 + t * (b1 - b0)


def _unit(v, fallback=DEFAULT_NORMAL) -> np.ndarray:
    n = np.linalg.norm(v)
    return np.array(fallback, dtype=np.float64) if n < COINCIDENT_DISTANCE else v / n


def _perpendicular(X) -> np.ndarray:
    """A shape frame's x axis: perpendicular to a capsule's segment (used when no normal is defined)."""
    return spatial.quat_rotate(X[3:], [1.0, 0.0, 0.0])


def capsule_segment(X, half_length):
    """World end points (p₋, p₊) = p ∓ R e_z·half_length of a capsule's segment."""
    axis = spatial.quat_rotate(X[3:], [0.0, 0.0, half_length])
    return X[:3] - axis, X[:3] + axis


def end_spheres(X, half_length):
    """Centres of a capsule's end spheres: (p₋, p₊), or (p₋,) when the two are closer than
    ``COINCIDENT_DISTANCE`` (a capsule that is a sphere gives one contact, not two)."""
    p0, p1 = capsule_segment(X, half_length)
    return (p0, p1) if 2.0 * half_length > COINCIDENT_DISTANCE else (p0,)


def closest_on_segment(p0, p1, x):
    """p0 + t(p1 − p0) with t = clamp((x − p0)·d/|d|², 0, 1) (t = 0 for a point segment)."""
    d = p1 - p0
    dd = d @ d
    t = 0.0 if dd == 0.0 else float(np.clip((x - p0) @ d / dd, 0.0, 1.0))
    return p0 + t * d


def with_position(X, p):
    """The pose X moved to position p (same orientation)."""
    return np.concatenate([p, X[3:]])


# ----------------------------------------------------------------------------- pair routines
# Each returns a list of (x0, x1, normal, phi0) for its canonical order (lower ShapeType first).


def plane_sphere(Xp, size_p, Xs, size_s):
    """Plane (half-space n̂·(x − p₀) ≤ 0, n̂ = R e_z) against a sphere (centre c, radius r).

    d = n̂·(c − p₀), φ = d − r, x0 = c − d n̂ (the centre projected on the plane), x1 = c − r n̂,
    normal n̂ (out of the half-space, into the sphere). Drake: the sphere–half-space case of
    ``ComputePointPairPenetration``.
    """
    n = spatial.quat_rotate(Xp[3:], [0.0, 0.0, 1.0])
    c, r = Xs[:3], size_s[0]
    d = n @ (c - Xp[:3])
    return [(c - d * n, c - r * n, n, d - r)]


def plane_capsule(Xp, size_p, Xc, size_c):
    """Plane against the capsule's two end spheres (φ is linear along the segment, so its
    minimum is at an end): each end e gives :func:`plane_sphere` of the sphere (e, r), in the
    order p₋, p₊. A standing capsule gets one contact (the other end is far), a lying one two.
    """
    return [c for e in end_spheres(Xc, size_c[1]) for c in plane_sphere(Xp, size_p, with_position(Xc, e), size_c)]


def sphere_points(c0, r0, c1, r1, fallback=DEFAULT_NORMAL):
    """(x0, x1, n̂, φ) of the spheres (c₀, r₀), (c₁, r₁); ``fallback`` n̂ when the centres coincide."""
    n = _unit(c1 - c0, fallback)
    return (c0 + r0 * n, c1 - r1 * n, n, np.linalg.norm(c1 - c0) - r0 - r1)


def sphere_sphere(X0, size0, X1, size1):
    """Centres c₀, c₁, radii r₀, r₁: n̂ = (c₁ − c₀)/|c₁ − c₀|, φ = |c₁ − c₀| − r₀ − r₁,
    x0 = c₀ + r₀n̂, x1 = c₁ − r₁n̂. Coincident centres (closer than ``COINCIDENT_DISTANCE``):
    n̂ = ``DEFAULT_NORMAL`` (+z). Drake: ``penetration_as_point_pair::Callback`` (sphere–sphere).
    """
    return [sphere_points(X0[:3], size0[0], X1[:3], size1[0])]


def sphere_capsule(Xs, size_s, Xc, size_c):
    """Sphere (c, r) against the sphere (q, r_c) at the capsule segment's point q closest to c:
    q = p₋ + clamp((c − p₋)·d/|d|², 0, 1) d, then :func:`sphere_sphere`. A centre on the segment
    takes n̂ = the capsule frame's x axis (⊥ the segment, so x1 stays on the capsule's surface).
    Drake: sphere–capsule in ``penetration_as_point_pair::Callback``.
    """
    q = closest_on_segment(*capsule_segment(Xc, size_c[1]), Xs[:3])
    return [sphere_points(Xs[:3], size_s[0], q, size_c[0], _perpendicular(Xc))]


def capsule_capsule(X0, size0, X1, size1):
    """Two capsules as spheres at the closest points of their segments (Ericson §5.1.9).

    With the axes û₀, û₁ (the shape frames' z): (nearly) parallel segments
    (|û₀ × û₁| < ``PARALLEL_TOL``) whose projections on û₀ overlap over more than
    ``COINCIDENT_DISTANCE`` give 2 contacts instead, at the ends lo < hi of the overlap:
    p = p₋ + s û₀ for s ∈ {lo, hi}, against the point of segment 1 closest to p (a stable line
    contact). Closest points inside both segments take n̂ = ±(û₀ × û₁)/|û₀ × û₁|, the common
    perpendicular (⊥ both axes, so both witness points stay on their surfaces; q − p would lose its
    direction as the segments cross or turn parallel), pointing along q − p, or from centre 0 to
    centre 1 where the segments cross, with q moved onto p + ((q − p)·n̂)·n̂;
    coincident closest points elsewhere take û₀ × û₁ too, or the capsule-0 frame's x axis when
    the axes are parallel. Drake: capsule–capsule through FCL.
    """
    a0, a1 = capsule_segment(X0, size0[1])
    b0, b1 = capsule_segment(X1, size1[1])
    u0, u1 = spatial.quat_rotate(X0[3:], [0.0, 0.0, 1.0]), spatial.quat_rotate(X1[3:], [0.0, 0.0, 1.0])
    axis_cross = np.cross(u0, u1)
    parallel = np.linalg.norm(axis_cross) < PARALLEL_TOL
    if parallel:
        s0, s1 = sorted(((b0 - a0) @ u0, (b1 - a0) @ u0))
        lo, hi = max(0.0, s0), min(2.0 * size0[1], s1)
        if hi - lo > COINCIDENT_DISTANCE:
            out = []
            for s in (lo, hi):
                pa = a0 + s * u0
                out.append(sphere_points(pa, size0[0], closest_on_segment(b0, b1, pa), size1[0],
                                          _perpendicular(X0)))
            return out
    s, t = segment_closest_params(a0, a1, b0, b1)
    pa, pb = a0 + s * (a1 - a0), b0 + t * (b1 - b0)
    if parallel:
        return [sphere_points(pa, size0[0], pb, size1[0], _perpendicular(X0))]
    m = axis_cross / np.linalg.norm(axis_cross)
    if 0.0 < s < 1.0 and 0.0 < t < 1.0:
        # Both closest points inside their segments: the normal is the common perpendicular ±m̂,
        # exact to rounding, where q − p loses its direction as the segments cross or turn
        # parallel; q is p + ((q − p)·m̂)·m̂ (moved along the segments only by the solve's error).
        # Its sign: that of (q − p)·m̂, or of (c₁ − c₀)·m̂ for segments that cross (|(q − p)·m̂| within
        # COINCIDENT_DISTANCE: rounding), else +m̂; φ = (q − p)·n̂ − r₀ − r₁.
        d = float((pb - pa) @ m)
        side = d if abs(d) > COINCIDENT_DISTANCE else float((X1[:3] - X0[:3]) @ m)
        n = -m if side < 0.0 else m
        pb = pa + d * m
        return [(pa + size0[0] * n, pb - size1[0] * n, n, float((pb - pa) @ n) - size0[0] - size1[0])]
    return [sphere_points(pa, size0[0], pb, size1[0], m)]

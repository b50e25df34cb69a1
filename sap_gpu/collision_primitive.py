"""Device closed forms for the pairs of planes, spheres and capsules: :mod:`sap_ref.collision_primitive`.

Plane–sphere, plane–capsule, sphere–sphere, sphere–capsule and capsule–capsule, each written for
its canonical type order (lower ``ShapeType`` first) and writing its contacts with
:func:`~sap_gpu.collision_support.emit` (``swap`` mirrors them into the pair's own order). Same
formulas, degenerate cases and point order as sap_ref; :func:`primitive_contacts` is the
dispatch that :mod:`sap_gpu.collision`'s primitive kernel calls. No GJK/EPA code is reachable
from here, so a model of these shapes alone compiles none.

The segment queries (:func:`segment_closest_params`) live here too: the box and the general
convex pairs reuse them.
"""

import warp as wp

from sap_common.constants import COINCIDENT_DISTANCE, DEFAULT_NORMAL, PARALLEL_DENOM, PARALLEL_TOL, POINT_SEGMENT
from sap_common.enums import ShapeType

from .collision_support import Scratch, emit

wp.set_module_options({"enable_backward": False})

__all__ = ["primitive_contacts", "segment_closest_params", "plane_sphere", "plane_capsule", "sphere_sphere",
           "sphere_capsule", "capsule_capsule"]

PLANE = wp.constant(int(ShapeType.PLANE))
SPHERE = wp.constant(int(ShapeType.SPHERE))
CAPSULE = wp.constant(int(ShapeType.CAPSULE))

# default_normal() spells out DEFAULT_NORMAL for the kernels; keep the two equal.
assert tuple(DEFAULT_NORMAL) == (0.0, 0.0, 1.0)


@wp.func
def default_normal() -> wp.vec3d:
    """``sap_common.constants.DEFAULT_NORMAL``, used when two centres coincide."""
    return wp.vec3d(wp.float64(0.0), wp.float64(0.0), wp.float64(1.0))


@wp.func
def unit_or(v: wp.vec3d, fallback: wp.vec3d) -> wp.vec3d:
    n = wp.length(v)
    if n < wp.float64(COINCIDENT_DISTANCE):
        return fallback
    return v / n


@wp.func
def frame_x(X: wp.transformd) -> wp.vec3d:
    return wp.quat_rotate(wp.transform_get_rotation(X), wp.vec3d(wp.float64(1.0), wp.float64(0.0), wp.float64(0.0)))


@wp.func
def plane_normal(X: wp.transformd) -> wp.vec3d:
    """A shape frame's z axis: a plane's outward normal, a capsule's axis."""
    return wp.quat_rotate(wp.transform_get_rotation(X), wp.vec3d(wp.float64(0.0), wp.float64(0.0), wp.float64(1.0)))


@wp.func
def segment_end(X: wp.transformd, half_length: wp.float64, sign: wp.float64) -> wp.vec3d:
    axis = wp.quat_rotate(wp.transform_get_rotation(X), wp.vec3d(wp.float64(0.0), wp.float64(0.0), half_length))
    return wp.transform_get_translation(X) + sign * axis


@wp.func
def closest_on_segment(a: wp.vec3d, b: wp.vec3d, x: wp.vec3d) -> wp.vec3d:
    d = b - a
    dd = wp.dot(d, d)
    t = wp.float64(0.0)
    if dd != wp.float64(0.0):
        t = wp.clamp(wp.dot(x - a, d) / dd, wp.float64(0.0), wp.float64(1.0))
    return a + t * d


@wp.func
def segment_closest_params(a0: wp.vec3d, a1: wp.vec3d, b0: wp.vec3d, b1: wp.vec3d):
    """(s, t) of the closest points: Ericson §5.1.9, as sap_ref.collision_primitive.segment_closest_params."""
    d1 = a1 - a0
    d2 = b1 - b0
    r = a0 - b0
    a = wp.dot(d1, d1)
    e = wp.dot(d2, d2)
    f = wp.dot(d2, r)
    tiny = wp.float64(POINT_SEGMENT)
    zero = wp.float64(0.0)
    one = wp.float64(1.0)
    if a <= tiny and e <= tiny:
        return zero, zero
    if a <= tiny:
        return zero, wp.clamp(f / e, zero, one)
    c = wp.dot(d1, r)
    if e <= tiny:
        return wp.clamp(-c / a, zero, one), zero
    b = wp.dot(d1, d2)
    denom = a * e - b * b
    s = zero
    if denom > wp.float64(PARALLEL_DENOM) * a * e:
        s = wp.clamp((b * f - c * e) / denom, zero, one)
    t = (b * s + f) / e
    if t < zero:
        t = zero
        s = wp.clamp(-c / a, zero, one)
    elif t > one:
        t = one
        s = wp.clamp((b - c) / a, zero, one)
    return s, t


@wp.func
def segment_closest_points(a0: wp.vec3d, a1: wp.vec3d, b0: wp.vec3d, b1: wp.vec3d):
    s, t = segment_closest_params(a0, a1, b0, b1)
    return a0 + s * (a1 - a0), b0 + t * (b1 - b0)


@wp.func
def two_ends(half_length: wp.float64) -> int:
    """2 end spheres, or 1 for a capsule shorter than COINCIDENT_DISTANCE (sap_ref.collision_primitive.end_spheres)."""
    if wp.float64(2.0) * half_length > wp.float64(COINCIDENT_DISTANCE):
        return 2
    return 1


@wp.func
def sphere_points(c0: wp.vec3d, r0: wp.float64, c1: wp.vec3d, r1: wp.float64, fallback: wp.vec3d):
    """(x0, x1, n, φ) of two spheres (sap_ref.collision_primitive.sphere_points); ``fallback`` n when
    the centres coincide."""
    n = unit_or(c1 - c0, fallback)
    return c0 + r0 * n, c1 - r1 * n, n, wp.length(c1 - c0) - r0 - r1


# ----------------------------------------------------------------------------- pair routines
# Canonical order (lower ShapeType first); each emits its contacts in sap_ref's order.


@wp.func
def plane_sphere(S: Scratch, world: int, pair: int, swap: int, Xp: wp.transformd, Xs: wp.transformd,
                 size_s: wp.vec3d):
    n = plane_normal(Xp)
    c = wp.transform_get_translation(Xs)
    d = wp.dot(n, c - wp.transform_get_translation(Xp))
    emit(S, world, pair, swap, c - d * n, c - size_s[0] * n, n, d - size_s[0])


@wp.func
def plane_capsule(S: Scratch, world: int, pair: int, swap: int, Xp: wp.transformd, Xc: wp.transformd,
                  size_c: wp.vec3d):
    n = plane_normal(Xp)
    p = wp.transform_get_translation(Xp)
    for e in range(two_ends(size_c[1])):
        sgn = wp.float64(-1.0)
        if e == 1:
            sgn = wp.float64(1.0)
        c = segment_end(Xc, size_c[1], sgn)
        d = wp.dot(n, c - p)
        emit(S, world, pair, swap, c - d * n, c - size_c[0] * n, n, d - size_c[0])


@wp.func
def sphere_sphere(S: Scratch, world: int, pair: int, swap: int, X0: wp.transformd, size0: wp.vec3d,
                  X1: wp.transformd, size1: wp.vec3d):
    x0, x1, n, phi = sphere_points(wp.transform_get_translation(X0), size0[0], wp.transform_get_translation(X1),
                                   size1[0], default_normal())
    emit(S, world, pair, swap, x0, x1, n, phi)


@wp.func
def sphere_capsule(S: Scratch, world: int, pair: int, swap: int, Xs: wp.transformd, size_s: wp.vec3d,
                   Xc: wp.transformd, size_c: wp.vec3d):
    c = wp.transform_get_translation(Xs)
    q = closest_on_segment(segment_end(Xc, size_c[1], wp.float64(-1.0)), segment_end(Xc, size_c[1], wp.float64(1.0)), c)
    x0, x1, n, phi = sphere_points(c, size_s[0], q, size_c[0], frame_x(Xc))
    emit(S, world, pair, swap, x0, x1, n, phi)


@wp.func
def capsule_capsule(S: Scratch, world: int, pair: int, swap: int, X0: wp.transformd, s0: wp.vec3d,
                    X1: wp.transformd, s1: wp.vec3d):
    """Closest points of the segments; 2 contacts at the ends of the overlap of (nearly) parallel ones."""
    zero = wp.float64(0.0)
    coincident = wp.float64(COINCIDENT_DISTANCE)  # set before the branches that use it (sap_gpu.codegen_check)
    a0 = segment_end(X0, s0[1], wp.float64(-1.0))
    a1 = segment_end(X0, s0[1], wp.float64(1.0))
    b0 = segment_end(X1, s1[1], wp.float64(-1.0))
    b1 = segment_end(X1, s1[1], wp.float64(1.0))
    u0 = plane_normal(X0)  # the capsules' axes (shape frames' z)
    u1 = plane_normal(X1)
    axis_cross = wp.cross(u0, u1)
    parallel = wp.length(axis_cross) < wp.float64(PARALLEL_TOL)
    if parallel:
        sa = wp.dot(b0 - a0, u0)
        sb = wp.dot(b1 - a0, u0)
        lo = wp.max(zero, wp.min(sa, sb))
        hi = wp.min(wp.float64(2.0) * s0[1], wp.max(sa, sb))
        if hi - lo > coincident:
            for e in range(2):
                s = lo
                if e == 1:
                    s = hi
                pa = a0 + s * u0
                x0, x1, n, phi = sphere_points(pa, s0[0], closest_on_segment(b0, b1, pa), s1[0], frame_x(X0))
                emit(S, world, pair, swap, x0, x1, n, phi)
            return
    sp, tp = segment_closest_params(a0, a1, b0, b1)
    pa = a0 + sp * (a1 - a0)
    pb = b0 + tp * (b1 - b0)
    fallback = frame_x(X0)
    if not parallel:
        fallback = axis_cross / wp.length(axis_cross)
    if (not parallel) and sp > zero and sp < wp.float64(1.0) and tp > zero and tp < wp.float64(1.0):
        # Inside both segments: the common perpendicular (sap_ref.collision_primitive.capsule_capsule).
        d = wp.dot(pb - pa, fallback)
        side = d
        if wp.abs(d) <= coincident:
            side = wp.dot(wp.transform_get_translation(X1) - wp.transform_get_translation(X0), fallback)
        n = fallback
        if side < zero:
            n = -fallback
        pb = pa + d * fallback
        emit(S, world, pair, swap, pa + s0[0] * n, pb - s1[0] * n, n, wp.dot(pb - pa, n) - s0[0] - s1[0])
    else:
        x0, x1, n, phi = sphere_points(pa, s0[0], pb, s1[0], fallback)
        emit(S, world, pair, swap, x0, x1, n, phi)


@wp.func
def primitive_contacts(S: Scratch, world: int, pair: int, swap: int, t0: int, X0: wp.transformd, s0: wp.vec3d,
                       t1: int, X1: wp.transformd, s1: wp.vec3d):
    """Dispatch one plane/sphere/capsule pair in canonical order (t0 ≤ t1)."""
    if t0 == PLANE:
        if t1 == SPHERE:
            plane_sphere(S, world, pair, swap, X0, X1, s1)
        elif t1 == CAPSULE:
            plane_capsule(S, world, pair, swap, X0, X1, s1)
    elif t0 == SPHERE:
        if t1 == SPHERE:
            sphere_sphere(S, world, pair, swap, X0, s0, X1, s1)
        elif t1 == CAPSULE:
            sphere_capsule(S, world, pair, swap, X0, s0, X1, s1)
    elif t0 == CAPSULE:
        capsule_capsule(S, world, pair, swap, X0, s0, X1, s1)

"""Device box pairs: :mod:`sap_ref.collision_box`, step for step.

Plane–box (the 8 corners), sphere–box (the box surface point nearest the centre), capsule–box (the
end spheres, plus the segment's deepest interior point found by golden-section search) and
box–box (SAT over 15 axes, then the clipped incident face or the edge–edge closest points), each
in its canonical type order and writing its contacts with :func:`~sap_gpu.collision_support.emit`.
:mod:`sap_gpu.collision` runs them in two kernels: :func:`box_contacts` (a plane, sphere or
capsule with a box) and :func:`box_box`. Nothing here reaches GJK/EPA.
"""

import warp as wp

from sap_common.constants import (
    CLIP_TOL,
    DEGENERATE_AXIS,
    EDGE_AXIS_BIAS,
    FACE_AXIS_TIE,
    GOLDEN_ITERATIONS,
    GOLDEN_TIE,
    INTERIOR_DEPTH_MARGIN,
)
from sap_common.enums import ShapeType

from .collision_primitive import plane_normal, segment_closest_params, segment_end, two_ends
from .collision_support import Scratch, box_corner_local, emit

wp.set_module_options({"enable_backward": False})

__all__ = ["box_contacts", "plane_box", "sphere_box", "capsule_box", "box_box"]

PLANE = wp.constant(int(ShapeType.PLANE))
SPHERE = wp.constant(int(ShapeType.SPHERE))
CAPSULE = wp.constant(int(ShapeType.CAPSULE))
mat83d = wp.types.matrix((8, 3), wp.float64)


@wp.func
def box_point_query(Xb: wp.transformd, h: wp.vec3d, p: wp.vec3d):
    """(surface point q, outward normal at q, signed distance of p) — sap_ref.collision_box.closest_point_on_box."""
    q_B = wp.transform_get_rotation(Xb)
    c = wp.quat_rotate_inv(q_B, p - wp.transform_get_translation(Xb))
    outside = int(0)
    for i in range(3):
        if wp.abs(c[i]) > h[i]:
            outside = int(1)
    if outside == 1:
        q = wp.vec3d(wp.clamp(c[0], -h[0], h[0]), wp.clamp(c[1], -h[1], h[1]), wp.clamp(c[2], -h[2], h[2]))
        diff = c - q
        d = wp.length(diff)
        return wp.transform_point(Xb, q), wp.quat_rotate(q_B, diff / d), d
    k = int(0)
    gap = h[0] - wp.abs(c[0])
    for i in range(1, 3):
        g = h[i] - wp.abs(c[i])
        if g < gap:
            gap = g
            k = i
    s = wp.float64(1.0)
    q = c
    n = wp.vec3d(wp.float64(0.0), wp.float64(0.0), wp.float64(0.0))
    for i in range(3):  # unrolled: constant indices keep q and n in registers (q[k] would put them on the stack)
        if i == k:
            if c[i] < wp.float64(0.0):
                s = wp.float64(-1.0)
            q[i] = s * h[i]
            n[i] = s
    return wp.transform_point(Xb, q), wp.quat_rotate(q_B, n), -gap


@wp.func
def sphere_box(S: Scratch, world: int, pair: int, swap: int, c: wp.vec3d, r: wp.float64, Xb: wp.transformd,
               h: wp.vec3d):
    q, n_box, d = box_point_query(Xb, h, c)
    emit(S, world, pair, swap, c - r * n_box, q, -n_box, d - r)


@wp.func
def box_corner(Xb: wp.transformd, h: wp.vec3d, i: int) -> wp.vec3d:
    """Corner i of the box in sap_ref's order (x slowest, z fastest; − before +)."""
    return wp.transform_point(Xb, box_corner_local(h, i))


@wp.func
def plane_box(S: Scratch, world: int, pair: int, swap: int, Xp: wp.transformd, Xb: wp.transformd, h: wp.vec3d):
    """Each of the 8 corners against the plane, in sap_ref's corner order."""
    n = plane_normal(Xp)
    p = wp.transform_get_translation(Xp)
    for i in range(8):
        corner = box_corner(Xb, h, i)
        d = wp.dot(n, corner - p)
        emit(S, world, pair, swap, corner - d * n, corner, n, d)


@wp.func
def side_of(c: wp.float64, h: wp.float64) -> int:
    """0 inside the slab |c| ≤ h, else the side (±1) it is clamped to."""
    side = int(0)
    if wp.abs(c) > h:
        side = int(1)
        if c <= wp.float64(0.0):
            side = int(-1)
    return side


@wp.func
def refined_outside(Xb: wp.transformd, h: wp.vec3d, p0: wp.vec3d, p1: wp.vec3d, t: wp.float64) -> wp.float64:
    """sap_ref.collision_box._refined_outside: the exact minimiser where p(t) is outside the box."""
    q_B = wp.transform_get_rotation(Xb)
    a = wp.quat_rotate_inv(q_B, p0 - wp.transform_get_translation(Xb))
    e = wp.quat_rotate_inv(q_B, p1 - p0)
    num = wp.float64(0.0)
    den = wp.float64(0.0)
    s0 = side_of(a[0] + t * e[0], h[0])
    s1 = side_of(a[1] + t * e[1], h[1])
    s2 = side_of(a[2] + t * e[2], h[2])
    if s0 != 0:
        num += (a[0] - wp.float64(s0) * h[0]) * e[0]
        den += e[0] * e[0]
    if s1 != 0:
        num += (a[1] - wp.float64(s1) * h[1]) * e[1]
        den += e[1] * e[1]
    if s2 != 0:
        num += (a[2] - wp.float64(s2) * h[2]) * e[2]
        den += e[2] * e[2]
    out = t
    if den > wp.float64(0.0):
        ts = -num / den
        if ts >= wp.float64(0.0) and ts <= wp.float64(1.0):
            if (side_of(a[0] + ts * e[0], h[0]) == s0 and side_of(a[1] + ts * e[1], h[1]) == s1
                    and side_of(a[2] + ts * e[2], h[2]) == s2):
                out = ts
    return out


@wp.func
def capsule_box(S: Scratch, world: int, pair: int, swap: int, Xc: wp.transformd, size_c: wp.vec3d,
                Xb: wp.transformd, h: wp.vec3d):
    p0 = segment_end(Xc, size_c[1], wp.float64(-1.0))
    p1 = segment_end(Xc, size_c[1], wp.float64(1.0))
    r = size_c[0]
    sphere_box(S, world, pair, swap, p0, r, Xb, h)
    if two_ends(size_c[1]) == 1:  # a point segment: one end sphere, nothing in between
        return
    sphere_box(S, world, pair, swap, p1, r, Xb, h)
    lo = wp.float64(0.0)
    hi = wp.float64(1.0)
    g = (wp.sqrt(wp.float64(5.0)) - wp.float64(1.0)) / wp.float64(2.0)
    x1 = hi - g * (hi - lo)
    x2 = lo + g * (hi - lo)
    q1, n1, f1 = box_point_query(Xb, h, p0 + x1 * (p1 - p0))
    q2, n2, f2 = box_point_query(Xb, h, p0 + x2 * (p1 - p0))
    for it in range(GOLDEN_ITERATIONS):
        if f1 <= f2 + wp.float64(GOLDEN_TIE):
            hi = x2
            x2 = x1
            f2 = f1
            x1 = hi - g * (hi - lo)
            q1, n1, f1 = box_point_query(Xb, h, p0 + x1 * (p1 - p0))
        else:
            lo = x1
            x1 = x2
            f1 = f2
            x2 = lo + g * (hi - lo)
            q2, n2, f2 = box_point_query(Xb, h, p0 + x2 * (p1 - p0))
    t = refined_outside(Xb, h, p0, p1, wp.float64(0.5) * (lo + hi))
    qt, nt, ft = box_point_query(Xb, h, p0 + t * (p1 - p0))
    qa, na, fa = box_point_query(Xb, h, p0)
    qb, nb, fb = box_point_query(Xb, h, p1)
    if ft < wp.min(fa, fb) - wp.float64(INTERIOR_DEPTH_MARGIN):
        sphere_box(S, world, pair, swap, p0 + t * (p1 - p0), r, Xb, h)


@wp.func
def clip_polygon(poly: mat83d, n_in: int, normal: wp.vec3d, offset: wp.float64):
    """Keep the part of the polygon with n·x ≤ offset (Sutherland–Hodgman with CLIP_TOL, as sap_ref)."""
    out = mat83d()
    m = int(0)
    for k in range(n_in):
        a = wp.vec3d(poly[k, 0], poly[k, 1], poly[k, 2])
        kb = (k + 1) % n_in
        b = wp.vec3d(poly[kb, 0], poly[kb, 1], poly[kb, 2])
        da = wp.dot(normal, a) - offset
        db = wp.dot(normal, b) - offset
        tol = wp.float64(CLIP_TOL)
        if da <= tol and m < 8:
            for i in range(3):
                out[m, i] = a[i]
            m += 1
        if ((da < -tol and db > tol) or (da > tol and db < -tol)) and m < 8:
            p = a + (b - a) * (da / (da - db))
            for i in range(3):
                out[m, i] = p[i]
            m += 1
    return out, m


@wp.func
def face_contact(S: Scratch, world: int, pair: int, swap: int, ref_is_0: int, ref_c: wp.vec3d, ref_R: wp.mat33d,
                 ref_h: wp.vec3d, axis: int, ref_sign: wp.float64, inc_c: wp.vec3d, inc_R: wp.mat33d, inc_h: wp.vec3d):
    n_ref = ref_sign * wp.vec3d(ref_R[0, axis], ref_R[1, axis], ref_R[2, axis])
    dots = wp.transpose(inc_R) * n_ref
    k = int(0)
    for i in range(1, 3):
        if wp.abs(dots[i]) > wp.abs(dots[k]):
            k = i
    inc_sign = wp.float64(1.0)
    if dots[k] > wp.float64(0.0):
        inc_sign = wp.float64(-1.0)
    i1 = (k + 1) % 3
    i2 = (k + 2) % 3
    fc = inc_c + inc_sign * inc_h[k] * wp.vec3d(inc_R[0, k], inc_R[1, k], inc_R[2, k])
    u = inc_h[i1] * wp.vec3d(inc_R[0, i1], inc_R[1, i1], inc_R[2, i1])
    v = inc_h[i2] * wp.vec3d(inc_R[0, i2], inc_R[1, i2], inc_R[2, i2])
    poly = mat83d()
    for c in range(4):
        su = wp.float64(1.0)
        sv = wp.float64(1.0)
        if c == 1 or c == 2:
            su = wp.float64(-1.0)
        if c == 2 or c == 3:
            sv = wp.float64(-1.0)
        p = fc + su * u + sv * v
        for i in range(3):
            poly[c, i] = p[i]
    m = int(4)
    for sidx in range(2):
        side = (axis + 1 + sidx) % 3
        for sgn in range(2):
            s = wp.float64(1.0)
            if sgn == 1:
                s = wp.float64(-1.0)
            n_side = s * wp.vec3d(ref_R[0, side], ref_R[1, side], ref_R[2, side])
            if m > 0:
                poly, m = clip_polygon(poly, m, n_side, wp.dot(n_side, ref_c) + ref_h[side])
    face_offset = wp.dot(n_ref, ref_c) + ref_h[axis]
    for c in range(m):
        p = wp.vec3d(poly[c, 0], poly[c, 1], poly[c, 2])
        depth = wp.dot(n_ref, p) - face_offset
        if ref_is_0 != 0:
            emit(S, world, pair, swap, p - depth * n_ref, p, n_ref, depth)
        else:
            n = -n_ref
            emit(S, world, pair, swap, p, p + depth * n, n, depth)


@wp.func
def box_separation(L: wp.vec3d, T: wp.vec3d, R0: wp.mat33d, h0: wp.vec3d, R1: wp.mat33d, h1: wp.vec3d) -> wp.float64:
    a = wp.transpose(R0) * L
    b = wp.transpose(R1) * L
    r0 = h0[0] * wp.abs(a[0]) + h0[1] * wp.abs(a[1]) + h0[2] * wp.abs(a[2])
    r1 = h1[0] * wp.abs(b[0]) + h1[1] * wp.abs(b[1]) + h1[2] * wp.abs(b[2])
    return wp.abs(wp.dot(T, L)) - r0 - r1


@wp.func
def box_edge(c: wp.vec3d, R: wp.mat33d, h: wp.vec3d, axis: int, direction: wp.vec3d):
    mid = c
    for k in range(3):
        if k != axis:
            col = wp.vec3d(R[0, k], R[1, k], R[2, k])
            s = wp.float64(1.0)
            if wp.dot(direction, col) < wp.float64(0.0):
                s = wp.float64(-1.0)
            mid = mid + s * h[k] * col
    e = h[axis] * wp.vec3d(R[0, axis], R[1, axis], R[2, axis])
    return mid - e, mid + e


@wp.func
def box_box(S: Scratch, world: int, pair: int, swap: int, X0: wp.transformd, h0: wp.vec3d, X1: wp.transformd,
            h1: wp.vec3d):
    """SAT over 15 axes, face clipping or edge–edge, as sap_ref.collision_box.box_box."""
    c0 = wp.transform_get_translation(X0)
    c1 = wp.transform_get_translation(X1)
    R0 = wp.quat_to_matrix(wp.transform_get_rotation(X0))
    R1 = wp.quat_to_matrix(wp.transform_get_rotation(X1))
    T = c1 - c0
    best_face = wp.float64(-1e300)
    face_box = int(0)
    face_k = int(0)
    for box in range(2):
        for k in range(3):
            col = wp.vec3d(R0[0, k], R0[1, k], R0[2, k])
            if box == 1:
                col = wp.vec3d(R1[0, k], R1[1, k], R1[2, k])
            s = box_separation(col, T, R0, h0, R1, h1)
            if s > best_face + wp.float64(FACE_AXIS_TIE):
                best_face = s
                face_box = box
                face_k = k
    best_edge = wp.float64(-1e300)
    have_edge = int(0)
    edge_i = int(0)
    edge_j = int(0)
    edge_L = wp.vec3d(wp.float64(0.0), wp.float64(0.0), wp.float64(0.0))
    for i in range(3):
        for j in range(3):
            L = wp.cross(wp.vec3d(R0[0, i], R0[1, i], R0[2, i]), wp.vec3d(R1[0, j], R1[1, j], R1[2, j]))
            nrm = wp.length(L)
            if nrm < wp.float64(DEGENERATE_AXIS):
                continue
            s = box_separation(L / nrm, T, R0, h0, R1, h1)
            if have_edge == 0 or s > best_edge:
                best_edge = s
                have_edge = int(1)
                edge_i = i
                edge_j = j
                edge_L = L / nrm
    if have_edge == 1 and best_edge > best_face + wp.float64(EDGE_AXIS_BIAS):
        n = edge_L
        if wp.dot(edge_L, T) < wp.float64(0.0):
            n = -edge_L
        a0, a1 = box_edge(c0, R0, h0, edge_i, n)
        b0, b1 = box_edge(c1, R1, h1, edge_j, -n)
        es, et = segment_closest_params(a0, a1, b0, b1)
        zero = wp.float64(0.0)
        one = wp.float64(1.0)
        if es > zero and es < one and et > zero and et < one:  # else not an edge feature: face axis
            p0 = a0 + es * (a1 - a0)
            p1 = b0 + et * (b1 - b0)
            phi = wp.dot(n, p1 - p0)
            emit(S, world, pair, swap, p0, p0 + phi * n, n, phi)
            return
    if face_box == 0:
        col = wp.vec3d(R0[0, face_k], R0[1, face_k], R0[2, face_k])
        sign = wp.float64(1.0)
        if wp.dot(col, T) < wp.float64(0.0):
            sign = wp.float64(-1.0)
        face_contact(S, world, pair, swap, 1, c0, R0, h0, face_k, sign, c1, R1, h1)
    else:
        col = wp.vec3d(R1[0, face_k], R1[1, face_k], R1[2, face_k])
        sign = wp.float64(1.0)
        if wp.dot(col, -T) < wp.float64(0.0):
            sign = wp.float64(-1.0)
        face_contact(S, world, pair, swap, 0, c1, R1, h1, face_k, sign, c0, R0, h0)


@wp.func
def box_contacts(S: Scratch, world: int, pair: int, swap: int, t0: int, X0: wp.transformd, s0: wp.vec3d,
                 X1: wp.transformd, s1: wp.vec3d):
    """Dispatch one pair of a plane, sphere or capsule (t0) with a box (shape 1 in canonical order).
    Box–box has a kernel of its own: its clipped polygons take more registers and stack than
    the other box pairs together."""
    if t0 == PLANE:
        plane_box(S, world, pair, swap, X0, X1, s1)
    elif t0 == SPHERE:
        sphere_box(S, world, pair, swap, wp.transform_get_translation(X0), s0[0], X1, s1)
    elif t0 == CAPSULE:
        capsule_box(S, world, pair, swap, X0, s0, X1, s1)

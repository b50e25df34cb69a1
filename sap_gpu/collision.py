"""Collision on the device: the narrow phase of :mod:`sap_ref.collision`, one thread per (world, pair).

Same pairs (``model.shape_pair``), same broad phase (:mod:`sap_gpu.broad_phase`), same routines
(the primitives here, the general convex pairs, manifolds and height fields in
:mod:`sap_gpu.collision_convex` and :mod:`sap_gpu.collision_manifold`), same conventions
(normal from shape 0 into shape 1, x1 − x0 = φ₀ n̂, reported while φ₀ < margin₀ + margin₁,
Drake's material combination with the solver fallbacks) and the same order.

Layout: pair p owns ``MAX_CONTACTS_PER_PAIR`` slots of a per-world scratch, starting at
``offset[p]`` (a prefix sum over the pairs); the thread of (world, p) writes its contacts there
and their number to ``pair_count[world, p]``, so threads never share a slot. The compaction
(``_select``, one thread per world) then walks the slots in order — pair by pair, each pair's
points in its routine's order: sap_ref's generation order, whatever order the threads ran in.
If more than ``max_rigid_contact`` were generated the deepest are kept (ties by generation
order), in generation order, and the rest counted in ``contacts.overflow``. Nothing is ever
written beyond the capacity.
"""

import numpy as np
import warp as wp

from sap_common.config import SapConfig, collision_pipeline_args
from sap_common.model import SapModel, ShapeType
from sap_common.state import SapContacts, SapState, StepStatus
from sap_common.collision_rules import check_broad_phase, combine_materials, pair_capacity
from sap_common.constants import (CLIP_TOL, COINCIDENT_DISTANCE, DEFAULT_NORMAL, DEGENERATE_AXIS, EDGE_AXIS_BIAS,
                                  EPA_MAX_FACES, EPA_MAX_VERTICES, FACE_AXIS_TIE, GOLDEN_ITERATIONS, GOLDEN_TIE,
                                  INTERIOR_DEPTH_MARGIN, PARALLEL_TOL)

from .arrays import GpuModel
from .broad_phase import pair_overlap, world_bounds
from .collision_convex import segment_closest_params
from .collision_support import Convex, Epa, Geometry, box_corner_local, mat43d, row3, vec4d
from .collision_manifold import convex_manifold, heightfield_contacts, plane_manifold
from .device import get_device
from .kinematics import quat_norm_ok
from .launch import world_block_dim

wp.set_module_options({"enable_backward": False})

__all__ = ["CollisionPipeline"]

PLANE = wp.constant(int(ShapeType.PLANE))
SPHERE = wp.constant(int(ShapeType.SPHERE))
CAPSULE = wp.constant(int(ShapeType.CAPSULE))
BOX = wp.constant(int(ShapeType.BOX))
CYLINDER = wp.constant(int(ShapeType.CYLINDER))
HEIGHTFIELD = wp.constant(int(ShapeType.HEIGHTFIELD))
mat83d = wp.types.matrix((8, 3), wp.float64)
INVALID_QUATERNION = wp.constant(int(StepStatus.INVALID_QUATERNION))


@wp.struct
class Scratch:
    """Generated contacts of every world before capacity selection: pair p's slots are
    ``offset[p] … offset[p] + pair_capacity[p] − 1`` of each world's row."""
    x0: wp.array2d(dtype=wp.vec3d)
    x1: wp.array2d(dtype=wp.vec3d)
    normal: wp.array2d(dtype=wp.vec3d)
    phi: wp.array2d(dtype=wp.float64)
    pair_count: wp.array2d(dtype=int)  # (num_worlds, P): contacts pair p generated
    offset: wp.array(dtype=int)  # (P,): first slot of pair p
    pair_capacity: wp.array(dtype=int)  # (P,): MAX_CONTACTS_PER_PAIR of pair p
    slot_pair: wp.array(dtype=int)  # (slots,): the pair owning each slot
    margin: wp.array(dtype=wp.float64)  # per pair: margin0 + margin1


@wp.func
def emit(S: Scratch, world: int, pair: int, swap: int, x0: wp.vec3d, x1: wp.vec3d, n: wp.vec3d, phi: wp.float64):
    """Record a contact of the canonical order; ``swap`` flips it to the pair's (shape0, shape1) order."""
    if not (phi < S.margin[pair]) or not wp.isfinite(phi):
        return
    j = S.pair_count[world, pair]
    if j >= S.pair_capacity[pair]:  # never reached: MAX_CONTACTS_PER_PAIR bounds every routine
        return
    k = S.offset[pair] + j
    S.phi[world, k] = phi
    if swap != 0:
        S.x0[world, k] = x1
        S.x1[world, k] = x0
        S.normal[world, k] = -n
    else:
        S.x0[world, k] = x0
        S.x1[world, k] = x1
        S.normal[world, k] = n
    S.pair_count[world, pair] = j + 1


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
def segment_closest_points(a0: wp.vec3d, a1: wp.vec3d, b0: wp.vec3d, b1: wp.vec3d):
    s, t = segment_closest_params(a0, a1, b0, b1)
    return a0 + s * (a1 - a0), b0 + t * (b1 - b0)


@wp.func
def two_ends(half_length: wp.float64) -> int:
    """2 end spheres, or 1 for a capsule shorter than COINCIDENT_DISTANCE (sap_ref._end_spheres)."""
    if wp.float64(2.0) * half_length > wp.float64(COINCIDENT_DISTANCE):
        return 2
    return 1


@wp.func
def sphere_sphere(c0: wp.vec3d, r0: wp.float64, c1: wp.vec3d, r1: wp.float64, fallback: wp.vec3d):
    n = unit_or(c1 - c0, fallback)
    return c0 + r0 * n, c1 - r1 * n, n, wp.length(c1 - c0) - r0 - r1


@wp.func
def box_point_query(Xb: wp.transformd, h: wp.vec3d, p: wp.vec3d):
    """(surface point q, outward normal at q, signed distance of p) — sap_ref.closest_point_on_box."""
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
    if c[k] < wp.float64(0.0):
        s = wp.float64(-1.0)
    q = c
    q[k] = s * h[k]
    n = wp.vec3d(wp.float64(0.0), wp.float64(0.0), wp.float64(0.0))
    n[k] = s
    return wp.transform_point(Xb, q), wp.quat_rotate(q_B, n), -gap


@wp.func
def sphere_box(S: Scratch, world: int, pair: int, swap: int, c: wp.vec3d, r: wp.float64, Xb: wp.transformd, h: wp.vec3d):
    q, n_box, d = box_point_query(Xb, h, c)
    emit(S, world, pair, swap, c - r * n_box, q, -n_box, d - r)


@wp.func
def box_corner(Xb: wp.transformd, h: wp.vec3d, i: int) -> wp.vec3d:
    """Corner i of the box in sap_ref's order (x slowest, z fastest; − before +)."""
    return wp.transform_point(Xb, box_corner_local(h, i))


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
    t = wp.float64(0.5) * (lo + hi)
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
def pair_contacts(S: Scratch, world: int, pair: int, swap: int, t0: int, X0: wp.transformd, s0: wp.vec3d, t1: int,
                  X1: wp.transformd, s1: wp.vec3d):
    """Dispatch one pair in canonical order (t0 ≤ t1)."""
    zero = wp.float64(0.0)
    if t0 == PLANE:
        n = plane_normal(X0)
        p = wp.transform_get_translation(X0)
        if t1 == SPHERE:
            c = wp.transform_get_translation(X1)
            d = wp.dot(n, c - p)
            emit(S, world, pair, swap, c - d * n, c - s1[0] * n, n, d - s1[0])
        elif t1 == CAPSULE:
            for e in range(two_ends(s1[1])):
                sgn = wp.float64(-1.0)
                if e == 1:
                    sgn = wp.float64(1.0)
                c = segment_end(X1, s1[1], sgn)
                d = wp.dot(n, c - p)
                emit(S, world, pair, swap, c - d * n, c - s1[0] * n, n, d - s1[0])
        elif t1 == BOX:
            for i in range(8):
                corner = box_corner(X1, s1, i)
                d = wp.dot(n, corner - p)
                emit(S, world, pair, swap, corner - d * n, corner, n, d)
    elif t0 == SPHERE:
        c0 = wp.transform_get_translation(X0)
        if t1 == SPHERE:
            fb = default_normal()
            x0, x1, n, phi = sphere_sphere(c0, s0[0], wp.transform_get_translation(X1), s1[0], fb)
            emit(S, world, pair, swap, x0, x1, n, phi)
        elif t1 == CAPSULE:
            q = closest_on_segment(segment_end(X1, s1[1], wp.float64(-1.0)), segment_end(X1, s1[1], wp.float64(1.0)), c0)
            x0, x1, n, phi = sphere_sphere(c0, s0[0], q, s1[0], frame_x(X1))
            emit(S, world, pair, swap, x0, x1, n, phi)
        elif t1 == BOX:
            sphere_box(S, world, pair, swap, c0, s0[0], X1, s1)
    elif t0 == CAPSULE:
        if t1 == CAPSULE:
            a0 = segment_end(X0, s0[1], wp.float64(-1.0))
            a1 = segment_end(X0, s0[1], wp.float64(1.0))
            b0 = segment_end(X1, s1[1], wp.float64(-1.0))
            b1 = segment_end(X1, s1[1], wp.float64(1.0))
            u0 = plane_normal(X0)  # the capsules' axes (shape frames' z)
            u1 = plane_normal(X1)
            axis_cross = wp.cross(u0, u1)
            parallel = wp.length(axis_cross) < wp.float64(PARALLEL_TOL)
            done = int(0)
            if parallel:
                sa = wp.dot(b0 - a0, u0)
                sb = wp.dot(b1 - a0, u0)
                lo = wp.max(zero, wp.min(sa, sb))
                hi = wp.min(wp.float64(2.0) * s0[1], wp.max(sa, sb))
                if hi - lo > wp.float64(COINCIDENT_DISTANCE):
                    for e in range(2):
                        s = lo
                        if e == 1:
                            s = hi
                        pa = a0 + s * u0
                        x0, x1, n, phi = sphere_sphere(pa, s0[0], closest_on_segment(b0, b1, pa), s1[0],
                                                       frame_x(X0))
                        emit(S, world, pair, swap, x0, x1, n, phi)
                    done = int(1)
            if done == 0:
                pa, pb = segment_closest_points(a0, a1, b0, b1)
                fallback = frame_x(X0)
                if not parallel:
                    fallback = axis_cross / wp.length(axis_cross)
                x0, x1, n, phi = sphere_sphere(pa, s0[0], pb, s1[0], fallback)
                emit(S, world, pair, swap, x0, x1, n, phi)
        elif t1 == BOX:
            capsule_box(S, world, pair, swap, X0, s0, X1, s1)
    elif t0 == BOX:
        box_box(S, world, pair, swap, X0, s0, X1, s1)


@wp.func
def new_shape(G: Geometry, kind: int, X: wp.transformd, size: wp.vec3d, v0: int, v1: int, f0: int, f1: int) -> Convex:
    """The Convex of a shape at world pose X (sap_ref.collision.convex_shape)."""
    c = Convex()
    c.kind = kind
    c.p = wp.transform_get_translation(X)
    c.R = wp.quat_to_matrix(wp.transform_get_rotation(X))
    c.size = size
    c.radius = wp.float64(0.0)
    if kind == SPHERE or kind == CAPSULE:
        c.radius = size[0]
    c.v0 = v0
    c.v1 = v1
    c.f0 = f0
    c.f1 = f1
    return c


@wp.func
def key_less(X1: wp.transformd, s1: wp.vec3d, X0: wp.transformd, s0: wp.vec3d) -> int:
    """sap_ref.collision._canonical_swap: (X1, size1) before (X0, size0), lexicographically."""
    a = wp.transform_get_translation(X1)
    b = wp.transform_get_translation(X0)
    for i in range(3):
        if a[i] < b[i]:
            return 1
        if a[i] > b[i]:
            return 0
    qa = wp.transform_get_rotation(X1)
    qb = wp.transform_get_rotation(X0)
    for i in range(4):
        if qa[i] < qb[i]:
            return 1
        if qa[i] > qb[i]:
            return 0
    for i in range(3):
        if s1[i] < s0[i]:
            return 1
        if s1[i] > s0[i]:
            return 0
    return 0


@wp.func
def emit_all(S: Scratch, world: int, pair: int, swap: int, count: int, X0: mat43d, X1: mat43d, N: mat43d,
             PHI: vec4d):
    for k in range(count):
        emit(S, world, pair, swap, row3(X0, k), row3(X1, k), row3(N, k), PHI[k])


@wp.struct
class ShapeData:
    """Per shape: its mesh's vertex and face ranges, its height field's heights (start, rows,
    columns), its local bounds."""
    v0: wp.array(dtype=int)
    v1: wp.array(dtype=int)
    f0: wp.array(dtype=int)
    f1: wp.array(dtype=int)
    h_start: wp.array(dtype=int)
    h_rows: wp.array(dtype=int)
    h_cols: wp.array(dtype=int)
    lo: wp.array(dtype=wp.vec3d)
    hi: wp.array(dtype=wp.vec3d)


@wp.func
def new_pair(G: Geometry, E: Epa, row: int, D: ShapeData, S: Scratch, world: int, pair: int, swap: int, a: int,
             t0: int, X0: wp.transformd, s0: wp.vec3d, b: int, t1: int, X1: wp.transformd, s1: wp.vec3d):
    """Canonical order t0 ≤ t1 with a new shape type (sap_ref.collision._new_pair)."""
    margin = S.margin[pair]
    B_ = new_shape(G, t1, X1, s1, D.v0[b], D.v1[b], D.f0[b], D.f1[b])
    if t0 == PLANE:
        cnt, CX0, CX1, CN, CPHI = plane_manifold(G, wp.transform_get_translation(X0), plane_normal(X0), B_, margin)
        emit_all(S, world, pair, swap, cnt, CX0, CX1, CN, CPHI)
        return
    A_ = new_shape(G, t0, X0, s0, D.v0[a], D.v1[a], D.f0[a], D.f1[a])
    if t1 == HEIGHTFIELD:
        cnt, CX0, CX1, CN, CPHI = heightfield_contacts(
            G, E, row, A_, D.lo[a], D.hi[a], B_.p, B_.R, s1, D.h_start[b], D.h_rows[b], D.h_cols[b], margin)
        emit_all(S, world, pair, swap, cnt, CX0, CX1, CN, CPHI)
        return
    cnt, CX0, CX1, CN, CPHI = convex_manifold(G, E, row, A_, B_, margin)
    emit_all(S, world, pair, swap, cnt, CX0, CX1, CN, CPHI)


@wp.kernel
def _check_poses(body_count: int, body_q: wp.array2d(dtype=wp.transformd), status_out: wp.array(dtype=int)):
    """INVALID_QUATERNION for a world with a rejected body_q quaternion (docs/conventions.md § Quaternions read from a state), else 0."""
    world = wp.tid()
    status_out[world] = 0
    for b in range(body_count):  # a rejected body_q quaternion: no contacts for this world
        if quat_norm_ok(wp.transform_get_rotation(body_q[world, b])) == 0:
            status_out[world] = INVALID_QUATERNION
            return


@wp.kernel
def _generate(shape_type: wp.array(dtype=int), shape_body: wp.array(dtype=int),
              shape_transform: wp.array(dtype=wp.transformd), shape_size: wp.array(dtype=wp.vec3d),
              shape_margin: wp.array(dtype=wp.float64), shape_pair: wp.array2d(dtype=int),
              pair_epa_row: wp.array(dtype=int), epa_pairs: int, use_broad_phase: int, G: Geometry, D: ShapeData,
              pose: wp.array2d(dtype=wp.transformd), status: wp.array(dtype=int),
              centre: wp.array2d(dtype=wp.vec3d), half: wp.array2d(dtype=wp.vec3d), E: Epa, S: Scratch):
    world, p = wp.tid()
    S.pair_count[world, p] = 0
    if status[world] != 0:
        return
    a = shape_pair[p, 0]
    b = shape_pair[p, 1]
    Xa = pose[world, a]
    Xb = pose[world, b]
    if use_broad_phase != 0 and pair_overlap(shape_type, shape_margin, centre, half, world, a, b, Xa, Xb) == 0:
        return
    ta = shape_type[a]
    tb = shape_type[b]
    swap = int(0)
    if tb < ta:
        swap = int(1)
    elif ta == tb and ta != BOX:
        swap = key_less(Xb, shape_size[b], Xa, shape_size[a])
    i0 = a
    i1 = b
    X0 = Xa
    X1 = Xb
    if swap == 1:
        i0 = b
        i1 = a
        X0 = Xb
        X1 = Xa
    t0 = shape_type[i0]
    t1 = shape_type[i1]
    if t0 >= CYLINDER or t1 >= CYLINDER:
        row = int(0)
        if pair_epa_row[p] >= 0:
            row = world * epa_pairs + pair_epa_row[p]
        new_pair(G, E, row, D, S, world, p, swap, i0, t0, X0, shape_size[i0], i1, t1, X1, shape_size[i1])
    else:
        pair_contacts(S, world, p, swap, t0, X0, shape_size[i0], t1, X1, shape_size[i1])


@wp.kernel
def _select(shape_pair: wp.array2d(dtype=int), shape_body: wp.array(dtype=int),
            shape_margin: wp.array(dtype=wp.float64), pair_mu: wp.array(dtype=wp.float64),
            pair_ke: wp.array(dtype=wp.float64), pair_ke0: wp.array(dtype=wp.float64),
            pair_ke1: wp.array(dtype=wp.float64), pair_tau: wp.array(dtype=wp.float64), capacity: int,
            pairs: int, slots: int, S: Scratch,
            count: wp.array(dtype=int), overflow: wp.array(dtype=int), shape0: wp.array2d(dtype=int),
            shape1: wp.array2d(dtype=int), body0: wp.array2d(dtype=int), body1: wp.array2d(dtype=int),
            x0: wp.array2d(dtype=wp.vec3d), x1: wp.array2d(dtype=wp.vec3d), normal: wp.array2d(dtype=wp.vec3d),
            phi0: wp.array2d(dtype=wp.float64), margin0: wp.array2d(dtype=wp.float64),
            margin1: wp.array2d(dtype=wp.float64), mu: wp.array2d(dtype=wp.float64), ke: wp.array2d(dtype=wp.float64),
            ke0: wp.array2d(dtype=wp.float64), ke1: wp.array2d(dtype=wp.float64), tau_d: wp.array2d(dtype=wp.float64)):
    world = wp.tid()
    zero = wp.float64(0.0)
    for slot in range(capacity):
        shape0[world, slot] = -1
        shape1[world, slot] = -1
        body0[world, slot] = -1
        body1[world, slot] = -1
        x0[world, slot] = wp.vec3d(zero, zero, zero)
        x1[world, slot] = wp.vec3d(zero, zero, zero)
        normal[world, slot] = wp.vec3d(zero, zero, zero)
        phi0[world, slot] = zero
        margin0[world, slot] = zero
        margin1[world, slot] = zero
        mu[world, slot] = zero
        ke[world, slot] = zero
        ke0[world, slot] = zero
        ke1[world, slot] = zero
        tau_d[world, slot] = zero
    n = int(0)
    for p in range(pairs):
        n += S.pair_count[world, p]
    out = int(0)
    for p in range(pairs):  # pair by pair, each pair's slots in order: generation order
        for jj in range(S.pair_count[world, p]):
            i = S.offset[p] + jj
            keep = int(1)
            if n > capacity:  # rank by depth, ties by generation order: keep the `capacity` deepest
                rank = int(0)
                for j in range(slots):
                    pj = S.slot_pair[j]
                    if j - S.offset[pj] < S.pair_count[world, pj]:
                        if S.phi[world, j] < S.phi[world, i] or (S.phi[world, j] == S.phi[world, i] and j < i):
                            rank += 1
                if rank >= capacity:
                    keep = 0
            if keep == 1:
                a = shape_pair[p, 0]
                b = shape_pair[p, 1]
                shape0[world, out] = a
                shape1[world, out] = b
                body0[world, out] = shape_body[a]
                body1[world, out] = shape_body[b]
                x0[world, out] = S.x0[world, i]
                x1[world, out] = S.x1[world, i]
                normal[world, out] = S.normal[world, i]
                phi0[world, out] = S.phi[world, i]
                margin0[world, out] = shape_margin[a]
                margin1[world, out] = shape_margin[b]
                mu[world, out] = pair_mu[p]
                ke[world, out] = pair_ke[p]
                ke0[world, out] = pair_ke0[p]
                ke1[world, out] = pair_ke1[p]
                tau_d[world, out] = pair_tau[p]
                out += 1
    count[world] = out
    overflow[world] = n - out


def _needs_epa(t0: int, t1: int) -> bool:
    """Pairs whose routine can run GJK/EPA: a new shape type, but not against a plane."""
    new = {int(t) for t in (ShapeType.CYLINDER, ShapeType.ELLIPSOID, ShapeType.CONVEX_MESH, ShapeType.HEIGHTFIELD)}
    return (t0 in new or t1 in new) and ShapeType.PLANE not in (t0, t1)


class CollisionPipeline:
    """The narrow phase of :class:`sap_ref.collision.CollisionPipeline`, batched on a Warp device.

    Args:
        model: the model.
        max_rigid_contact: contact slots per world (≥ 0).
        config: supplies the material fallbacks (default ``SapConfig()``).
        device: Warp device.
        broad_phase: ``"aabb"`` (default) or ``"none"``, as in sap_ref; the contacts are the same.
    """

    def __init__(self, model: SapModel, max_rigid_contact: int, config: SapConfig | None = None, device=None,
                 broad_phase: str = "aabb"):
        self.max_rigid_contact, self.config = collision_pipeline_args(model, max_rigid_contact, config)
        self.broad_phase = check_broad_phase(broad_phase)
        self.model = model
        self.device = get_device(device)
        self.m = GpuModel(model, self.device)
        d, W = self.device, model.num_worlds
        P, Sh = len(model.shape_pair), model.shape_count
        mats = np.array([combine_materials(model, int(a), int(b), self.config) for a, b in model.shape_pair],
                        dtype=np.float64).reshape(-1, 5)
        f64 = lambda x: wp.array(np.ascontiguousarray(x, np.float64), dtype=wp.float64, device=d)  # noqa: E731
        i32 = lambda x: wp.array(np.ascontiguousarray(x, np.int32), dtype=int, device=d)  # noqa: E731
        v3 = lambda x: wp.array(np.ascontiguousarray(np.reshape(x, (-1, 3)), np.float64), dtype=wp.vec3d, device=d)  # noqa: E731
        self.pair_mu, self.pair_ke, self.pair_ke0, self.pair_ke1, self.pair_tau = (f64(mats[:, i]) for i in range(5))
        caps = pair_capacity(model)
        offset = np.concatenate([[0], np.cumsum(caps)]).astype(np.int64)
        self.slots = int(offset[-1])
        cap = max(self.slots, 1)
        S = Scratch()
        S.x0, S.x1, S.normal = (wp.zeros((W, cap), dtype=wp.vec3d, device=d) for _ in range(3))
        S.phi = wp.zeros((W, cap), dtype=wp.float64, device=d)
        S.pair_count = wp.zeros((W, max(P, 1)), dtype=int, device=d)
        S.offset = i32(offset[:-1] if P else [0])
        S.pair_capacity = i32(caps if P else [0])
        S.slot_pair = i32(np.repeat(np.arange(P), caps) if P else [0])
        pairs = model.shape_pair
        S.margin = f64(model.shape_margin[pairs[:, 0]] + model.shape_margin[pairs[:, 1]] if P else np.zeros(1))
        self.scratch = S
        # Geometry of meshes and height fields, and per-shape ranges into it.
        G = Geometry()
        G.mesh_vertex = v3(model.mesh_vertex if len(model.mesh_vertex) else np.zeros(3))
        G.mesh_face_vertex_start = i32(model.mesh_face_vertex_start)
        G.mesh_face_vertex = i32(model.mesh_face_vertex if len(model.mesh_face_vertex) else [0])
        G.mesh_face_plane = wp.array(np.ascontiguousarray(model.mesh_face_plane if len(model.mesh_face_plane)
                                                          else np.zeros((1, 4)), np.float64), dtype=wp.vec4d, device=d)
        G.hfield_height = f64(model.hfield_height if len(model.hfield_height) else np.zeros(1))
        self.geometry = G
        Dd = ShapeData()
        src = model.shape_source
        is_mesh = model.shape_type == int(ShapeType.CONVEX_MESH)
        is_hf = model.shape_type == int(ShapeType.HEIGHTFIELD)
        mesh = np.where(is_mesh, src, 0)
        hf = np.where(is_hf, src, 0)
        def pick(values, index, where):  # values[index] where `where`, else 0 (index may be out of range there)
            values = np.asarray(values)
            return np.where(where, values[np.clip(index, 0, max(len(values) - 1, 0))], 0) if len(values) else \
                np.zeros(Sh, np.int64)

        hshape = model.hfield_shape if len(model.hfield_shape) else np.zeros((1, 2), np.int32)
        Dd.v0 = i32(pick(model.mesh_vertex_start, mesh, is_mesh) if Sh else [0])
        Dd.v1 = i32(pick(model.mesh_vertex_start, mesh + 1, is_mesh) if Sh else [0])
        Dd.f0 = i32(pick(model.mesh_face_start, mesh, is_mesh) if Sh else [0])
        Dd.f1 = i32(pick(model.mesh_face_start, mesh + 1, is_mesh) if Sh else [0])
        Dd.h_start = i32(pick(model.hfield_start, hf, is_hf) if Sh else [0])
        Dd.h_rows = i32(pick(hshape[:, 0], hf, is_hf) if Sh else [0])
        Dd.h_cols = i32(pick(hshape[:, 1], hf, is_hf) if Sh else [0])
        bounds = np.where(np.isfinite(model.shape_local_bounds), model.shape_local_bounds, 0.0)  # a plane's: unused
        Dd.lo = v3(bounds[:, 0] if Sh else np.zeros(3))
        Dd.hi = v3(bounds[:, 1] if Sh else np.zeros(3))
        self.shape_data = Dd
        # EPA scratch: one row per (world, pair that can run EPA).
        epa = [p for p in range(P) if _needs_epa(int(model.shape_type[pairs[p, 0]]), int(model.shape_type[pairs[p, 1]]))]
        row = np.full(max(P, 1), -1, np.int32)
        row[epa] = np.arange(len(epa))
        self.pair_epa_row = i32(row)
        self.epa_pairs = len(epa)
        rows = max(W * len(epa), 1)
        E = Epa()
        E.P, E.PA, E.PB = (wp.zeros((rows, EPA_MAX_VERTICES), dtype=wp.vec3d, device=d) for _ in range(3))
        E.face = wp.zeros((rows, EPA_MAX_FACES), dtype=wp.vec3i, device=d)
        E.fn = wp.zeros((rows, EPA_MAX_FACES), dtype=wp.vec3d, device=d)
        E.fd = wp.zeros((rows, EPA_MAX_FACES), dtype=wp.float64, device=d)
        E.alive = wp.zeros((rows, EPA_MAX_FACES), dtype=int, device=d)
        E.visible = wp.zeros((rows, EPA_MAX_FACES), dtype=int, device=d)
        E.horizon = wp.zeros((rows, 3 * EPA_MAX_FACES), dtype=wp.vec2i, device=d)
        self.epa = E
        # Every shape's world pose and (broad phase) world box, (num_worlds, S).
        self.pose = wp.zeros((W, max(Sh, 1)), dtype=wp.transformd, device=d)
        self.centre = wp.zeros((W, max(Sh, 1)), dtype=wp.vec3d, device=d)
        self.half = wp.zeros((W, max(Sh, 1)), dtype=wp.vec3d, device=d)
        # Per world after collide(): StepStatus.INVALID_QUATERNION where a body_q quaternion was
        # rejected (that world got no contacts), else 0. Device array, (num_worlds,).
        self.last_status = wp.zeros(W, dtype=wp.int32, device=d)

    def contacts(self) -> SapContacts:
        """Empty device contacts for this pipeline."""
        from .arrays import contacts

        return contacts(self.model.num_worlds, self.max_rigid_contact, self.device)

    def collide(self, state, contacts: SapContacts) -> None:
        """Fill device ``contacts`` from ``state.body_q`` for every world.

        Body quaternions are normalized on read; a world with a rejected one (not finite, or norm
        outside [QUAT_NORM_MIN, QUAT_NORM_MAX]) gets no contacts and ``last_status[w] =
        INVALID_QUATERNION``, as in sap_ref.
        """
        from .solver import check_device_contacts

        m = self.m
        if not isinstance(state, SapState):
            raise ValueError(f"state: expected a SapState, got {type(state).__name__}")
        if not isinstance(state.body_q, wp.array) or tuple(state.body_q.shape) != (m.num_worlds, m.body_count) \
                or state.body_q.dtype != wp.transformd:
            raise ValueError(f"state.body_q: expected a wp.array of wp.transformd shaped "
                             f"{(m.num_worlds, m.body_count)}")
        check_device_contacts(m, contacts, self.max_rigid_contact)
        W, P = m.num_worlds, len(self.model.shape_pair)
        wp.launch(_check_poses, dim=W, block_dim=world_block_dim(self.device), device=self.device,
                  inputs=[m.body_count, state.body_q], outputs=[self.last_status])
        use_bp = int(self.broad_phase == "aabb")
        world_bounds(self.device, m.shape_type, m.shape_body, m.shape_transform, self.shape_data.lo,
                     self.shape_data.hi, m.shape_margin, state.body_q, self.pose, self.centre, self.half, W,
                     self.model.shape_count)
        if P:
            wp.launch(_generate, dim=(W, P), device=self.device, inputs=[
                m.shape_type, m.shape_body, m.shape_transform, m.shape_size, m.shape_margin, m.shape_pair,
                self.pair_epa_row, self.epa_pairs, use_bp, self.geometry, self.shape_data, self.pose,
                self.last_status, self.centre, self.half, self.epa], outputs=[self.scratch])
        c = contacts
        wp.launch(_select, dim=W, block_dim=world_block_dim(self.device), device=self.device, inputs=[
            m.shape_pair, m.shape_body, m.shape_margin, self.pair_mu, self.pair_ke, self.pair_ke0, self.pair_ke1,
            self.pair_tau, self.max_rigid_contact, P, self.slots if P else 0, self.scratch], outputs=[
            c.count, c.overflow, c.shape0, c.shape1, c.body0, c.body1, c.x0, c.x1, c.normal, c.phi0, c.margin0,
            c.margin1, c.mu, c.ke, c.ke0, c.ke1, c.tau_d])

"""Device pieces every narrow-phase routine shares.

* The contact scratch (:class:`Scratch`) and :func:`emit`: how a pair's thread writes its
  contacts into the pair's own slots (:mod:`sap_gpu.collision` compacts them afterwards).
* The shape record of the general convex pairs (:class:`Convex`), their support functions and the
  closest point on a simplex, used by GJK/EPA (:mod:`sap_gpu.collision_convex`), the manifolds
  (:mod:`sap_gpu.collision_manifold`) and the height fields (:mod:`sap_gpu.collision_heightfield`).
  :mod:`sap_ref.collision_support` holds the same functions for the host, with the same tie rules,
  so the two backends agree to rounding.
"""

import warp as wp

from sap_common.constants import EPA_MAX_FACES, EPA_MAX_VERTICES, FLAT_SIMPLEX
from sap_common.enums import ShapeType

wp.set_module_options({"enable_backward": False})

__all__ = ["Scratch", "emit", "emit_all", "Geometry", "Convex", "Epa", "support", "support_pair",
           "closest_on_simplex", "mat43d", "mat63d", "vec4d"]

SPHERE = wp.constant(int(ShapeType.SPHERE))
CAPSULE = wp.constant(int(ShapeType.CAPSULE))
BOX = wp.constant(int(ShapeType.BOX))
CYLINDER = wp.constant(int(ShapeType.CYLINDER))
ELLIPSOID = wp.constant(int(ShapeType.ELLIPSOID))
CONVEX_MESH = wp.constant(int(ShapeType.CONVEX_MESH))
PRISM = wp.constant(-1)
MAXV = wp.constant(EPA_MAX_VERTICES)
MAXF = wp.constant(EPA_MAX_FACES)

mat43d = wp.types.matrix(shape=(4, 3), dtype=wp.float64)
mat63d = wp.types.matrix(shape=(6, 3), dtype=wp.float64)
vec4d = wp.types.vector(length=4, dtype=wp.float64)


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
    # (num_worlds, P): the margin pair p's routine bounds its candidates by, margin0 + margin1 + ρ_a + ρ_b
    # (sap_ref.collision.pair_contacts: the rounded shapes' margin seen from their cores; margin0 + margin1
    # without rounding)
    margin: wp.array2d(dtype=wp.float64)


@wp.func
def emit(S: Scratch, world: int, pair: int, swap: int, x0: wp.vec3d, x1: wp.vec3d, n: wp.vec3d, phi: wp.float64):
    """Record a contact of the canonical order; ``swap`` flips it to the pair's (shape0, shape1) order."""
    if not (phi < S.margin[world, pair]) or not wp.isfinite(phi):
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


@wp.struct
class Geometry:
    """Mesh and height-field data of the model (the ``mesh_*`` and ``hfield_*`` fields)."""
    mesh_vertex: wp.array(dtype=wp.vec3d)
    mesh_face_vertex_start: wp.array(dtype=int)
    mesh_face_vertex: wp.array(dtype=int)
    mesh_face_plane: wp.array(dtype=wp.vec4d)
    hfield_height: wp.array(dtype=wp.float64)


@wp.struct
class Convex:
    """One shape in the world (sap_ref's ``Convex``): kind (a ShapeType, −1 a height-field prism),
    pose p, R, size, core radius, a mesh's vertex range [v0, v1) and face range [f0, f1) in
    :class:`Geometry`, a prism's six points (local) and its top plane (local)."""
    kind: int
    p: wp.vec3d
    R: wp.mat33d
    size: wp.vec3d
    radius: wp.float64
    v0: int
    v1: int
    f0: int
    f1: int
    prism: mat63d
    top_n: wp.vec3d
    top_d: wp.float64


@wp.struct
class Epa:
    """EPA scratch, one row per thread that can run EPA: polytope points P = a − b with their
    witnesses PA, PB, (rows, EPA_MAX_VERTICES); faces (i, j, k), unit normal, distance, alive flag,
    (rows, EPA_MAX_FACES); the visible list and the horizon edges of one expansion."""
    P: wp.array2d(dtype=wp.vec3d)
    PA: wp.array2d(dtype=wp.vec3d)
    PB: wp.array2d(dtype=wp.vec3d)
    face: wp.array2d(dtype=wp.vec3i)
    fn: wp.array2d(dtype=wp.vec3d)
    fd: wp.array2d(dtype=wp.float64)
    alive: wp.array2d(dtype=int)
    visible: wp.array2d(dtype=int)
    horizon: wp.array2d(dtype=wp.vec2i)


@wp.func
def box_corner_local(h: wp.vec3d, i: int) -> wp.vec3d:
    """Corner i of a box of half extents h in its own frame, in sap_ref's order (x slowest,
    z fastest, − before +)."""
    sx = wp.float64(1.0)
    sy = wp.float64(1.0)
    sz = wp.float64(1.0)
    if i < 4:
        sx = wp.float64(-1.0)
    if (i // 2) % 2 == 0:
        sy = wp.float64(-1.0)
    if i % 2 == 0:
        sz = wp.float64(-1.0)
    return wp.vec3d(sx * h[0], sy * h[1], sz * h[2])


@wp.func
def zero3() -> wp.vec3d:
    return wp.vec3d(wp.float64(0.0), wp.float64(0.0), wp.float64(0.0))


@wp.func
def sgn(x: wp.float64) -> wp.float64:
    """+1 for x ≥ 0 (ties take the + side), −1 otherwise."""
    if x >= wp.float64(0.0):
        return wp.float64(1.0)
    return wp.float64(-1.0)


@wp.func
def row3(m: mat43d, i: int) -> wp.vec3d:
    return wp.vec3d(m[i, 0], m[i, 1], m[i, 2])


@wp.func
def emit_all(S: Scratch, world: int, pair: int, swap: int, count: int, X0: mat43d, X1: mat43d, N: mat43d,
             PHI: vec4d):
    """:func:`emit` the first ``count`` rows of a manifold routine's (X0, X1, N, PHI)."""
    for k in range(count):
        emit(S, world, pair, swap, row3(X0, k), row3(X1, k), row3(N, k), PHI[k])


@wp.func
def prism_point(s: Convex, i: int) -> wp.vec3d:
    return wp.vec3d(s.prism[i, 0], s.prism[i, 1], s.prism[i, 2])


@wp.func
def support_local(G: Geometry, s: Convex, dl: wp.vec3d) -> wp.vec3d:
    """sap_ref.collision_support.support_local."""
    h = s.size
    if s.kind == SPHERE:
        return zero3()
    if s.kind == CAPSULE:
        return wp.vec3d(wp.float64(0.0), wp.float64(0.0), sgn(dl[2]) * h[1])
    if s.kind == BOX:
        return wp.vec3d(sgn(dl[0]) * h[0], sgn(dl[1]) * h[1], sgn(dl[2]) * h[2])
    if s.kind == CYLINDER:
        rho = wp.sqrt(dl[0] * dl[0] + dl[1] * dl[1])
        if rho > wp.float64(0.0):
            return wp.vec3d(h[0] * dl[0] / rho, h[0] * dl[1] / rho, sgn(dl[2]) * h[1])
        return wp.vec3d(h[0], wp.float64(0.0), sgn(dl[2]) * h[1])
    if s.kind == ELLIPSOID:
        ad = wp.cw_mul(h, dl)
        return wp.cw_mul(h, ad) / wp.sqrt(wp.dot(ad, ad))
    if s.kind == PRISM:
        best = prism_point(s, 0)
        bd = wp.dot(best, dl)
        for i in range(1, 6):
            v = prism_point(s, i)
            dv = wp.dot(v, dl)
            if dv > bd:
                best = v
                bd = dv
        return best
    best = G.mesh_vertex[s.v0]
    bd = wp.dot(best, dl)
    for i in range(s.v0 + 1, s.v1):
        v = G.mesh_vertex[i]
        dv = wp.dot(v, dl)
        if dv > bd:
            best = v
            bd = dv
    return best


@wp.func
def support(G: Geometry, s: Convex, d: wp.vec3d) -> wp.vec3d:
    """The core's world point farthest along d: p + R s(Rᵀd)."""
    return s.p + s.R * support_local(G, s, wp.transpose(s.R) * d)


@wp.func
def unit(v: wp.vec3d) -> wp.vec3d:
    return v / wp.sqrt(wp.dot(v, v))


# ----------------------------------------------------------------------------- closest point on a simplex
# Each returns (v, lam, keep, count): v = Σ lam_k W[keep_k] over the first `count` entries.


@wp.func
def closest_segment(W: mat43d, i0: int, i1: int):
    a = row3(W, i0)
    b = row3(W, i1)
    ab = b - a
    den = wp.dot(ab, ab)
    t = wp.float64(0.0)
    if den > wp.float64(0.0):
        t = -wp.dot(a, ab) / den
    one = wp.float64(1.0)
    zero = wp.float64(0.0)
    if t <= zero:
        return a, vec4d(one, zero, zero, zero), wp.vec4i(i0, 0, 0, 0), 1
    if t >= one:
        return b, vec4d(one, zero, zero, zero), wp.vec4i(i1, 0, 0, 0), 1
    return a + t * ab, vec4d(one - t, t, zero, zero), wp.vec4i(i0, i1, 0, 0), 2


@wp.func
def closest_triangle(W: mat43d, i0: int, i1: int, i2: int):
    """Ericson's ClosestPtPointTriangle with p = 0 (sap_ref.collision_support.closest_triangle)."""
    a = row3(W, i0)
    b = row3(W, i1)
    c = row3(W, i2)
    ab = b - a
    ac = c - a
    zero = wp.float64(0.0)
    one = wp.float64(1.0)
    d1 = -wp.dot(ab, a)
    d2 = -wp.dot(ac, a)
    if d1 <= zero and d2 <= zero:
        return a, vec4d(one, zero, zero, zero), wp.vec4i(i0, 0, 0, 0), 1
    d3 = -wp.dot(ab, b)
    d4 = -wp.dot(ac, b)
    if d3 >= zero and d4 <= d3:
        return b, vec4d(one, zero, zero, zero), wp.vec4i(i1, 0, 0, 0), 1
    vc = d1 * d4 - d3 * d2
    if vc <= zero and d1 >= zero and d3 <= zero:
        return closest_segment(W, i0, i1)
    d5 = -wp.dot(ab, c)
    d6 = -wp.dot(ac, c)
    if d6 >= zero and d5 <= d6:
        return c, vec4d(one, zero, zero, zero), wp.vec4i(i2, 0, 0, 0), 1
    vb = d5 * d2 - d1 * d6
    if vb <= zero and d2 >= zero and d6 <= zero:
        return closest_segment(W, i0, i2)
    va = d3 * d6 - d5 * d4
    if va <= zero and (d4 - d3) >= zero and (d5 - d6) >= zero:
        return closest_segment(W, i1, i2)
    den = va + vb + vc
    if not (den > zero):  # a degenerate (flat) triangle: its nearest edge
        v1, lam1, keep1, n1 = closest_segment(W, i0, i1)
        v2, lam2, keep2, n2 = closest_segment(W, i0, i2)
        if wp.dot(v2, v2) < wp.dot(v1, v1):
            v1 = v2
            lam1 = lam2
            keep1 = keep2
            n1 = n2
        v3, lam3, keep3, n3 = closest_segment(W, i1, i2)
        if wp.dot(v3, v3) < wp.dot(v1, v1):
            v1 = v3
            lam1 = lam3
            keep1 = keep3
            n1 = n3
        return v1, lam1, keep1, n1
    bv = vb / den
    bw = vc / den
    return a + ab * bv + ac * bw, vec4d(one - bv - bw, bv, bw, zero), wp.vec4i(i0, i1, i2, 0), 3


@wp.func
def tetra_face(f: int):
    """sap_ref.collision_support.TETRA_FACES[f]: (i, j, k, opposite)."""
    if f == 0:
        return 0, 1, 2, 3
    if f == 1:
        return 0, 1, 3, 2
    if f == 2:
        return 0, 2, 3, 1
    return 1, 2, 3, 0


@wp.func
def closest_tetrahedron(W: mat43d):
    e1 = row3(W, 1) - row3(W, 0)
    e2 = row3(W, 2) - row3(W, 0)
    e3 = row3(W, 3) - row3(W, 0)
    scale = wp.max(wp.max(wp.length(e1), wp.length(e2)), wp.length(e3))
    flat = not (wp.abs(wp.dot(e1, wp.cross(e2, e3))) > wp.float64(FLAT_SIMPLEX) * scale * scale * scale)
    inside = not flat
    have = int(0)
    bv = zero3()
    blam = vec4d()
    bkeep = wp.vec4i()
    bn = int(0)
    for f in range(4):
        i, j, k, o = tetra_face(f)
        a = row3(W, i)
        nrm = wp.cross(row3(W, j) - a, row3(W, k) - a)
        s_origin = -wp.dot(nrm, a)
        s_opposite = wp.dot(nrm, row3(W, o) - a)
        if flat or s_origin * s_opposite < wp.float64(0.0) or s_opposite == wp.float64(0.0):
            inside = False
            v, lam, keep, n = closest_triangle(W, i, j, k)
            if have == 0 or wp.dot(v, v) < wp.dot(bv, bv):
                have = int(1)
                bv = v
                blam = lam
                bkeep = keep
                bn = n
    if inside:
        q = wp.float64(0.25)
        return zero3(), vec4d(q, q, q, q), wp.vec4i(0, 1, 2, 3), 4
    return bv, blam, bkeep, bn


@wp.func
def closest_on_simplex(W: mat43d, n: int):
    if n == 1:
        one = wp.float64(1.0)
        zero = wp.float64(0.0)
        return row3(W, 0), vec4d(one, zero, zero, zero), wp.vec4i(0, 0, 0, 0), 1
    if n == 2:
        return closest_segment(W, 0, 1)
    if n == 3:
        return closest_triangle(W, 0, 1, 2)
    return closest_tetrahedron(W)


@wp.func
def support_pair(G: Geometry, A: Convex, B: Convex, d: wp.vec3d):
    a = support(G, A, d)
    b = support(G, B, -d)
    return a - b, a, b

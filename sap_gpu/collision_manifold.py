"""Device multi-point contacts: :mod:`sap_ref.collision_manifold`, step for step.

Faces are addressed by (shape, face index) and their vertices generated on demand (box faces and
cylinder caps) or read from the model's mesh arrays, so no polygon is ever copied. The clipped
contact polygon is *enumerated* in sap_ref's order ((a) incident vertices, (b) reference vertices,
(c) edge crossings, then the support point and the GJK/EPA witness) once per reduction pass:
pass 1 the deepest, pass 2 the farthest from it, pass 3 the largest triangle, pass 4 the largest
area outside it — the same candidates, scores and tie rules, with no buffer. The height fields
(:mod:`sap_gpu.collision_heightfield`) reduce their prisms' contacts with the same passes.
"""

import math

import warp as wp

from sap_common.constants import (
    CLIP_TOL,
    CYLINDER_CAP_POLYGON,
    FACE_ALIGNMENT_TIE,
    FACE_ALIGNMENT_TOL,
    MANIFOLD_AREA_TIE,
    MANIFOLD_DEPTH_TIE,
    MANIFOLD_MERGE_DISTANCE,
)

from .collision_convex import convex_contact
from .collision_support import (
    BOX,
    CAPSULE,
    CONVEX_MESH,
    CYLINDER,
    PRISM,
    Convex,
    Epa,
    Geometry,
    mat43d,
    support,
    vec4d,
    zero3,
)

wp.set_module_options({"enable_backward": False})

__all__ = ["Feature", "convex_manifold", "plane_manifold"]

TWO_PI = wp.constant(wp.float64(2.0 * math.pi))
HALF_SQRT2 = wp.constant(wp.float64(math.sqrt(0.5)))
POINT = wp.constant(0)
SEGMENT = wp.constant(1)
POLYGON = wp.constant(2)


@wp.func
def ncap() -> int:
    """``CYLINDER_CAP_POLYGON``: vertices of a cylinder cap's polygon."""
    return int(CYLINDER_CAP_POLYGON)


@wp.struct
class Feature:
    """An incident feature: kind POINT (q0), SEGMENT (q0, q1) or POLYGON (face f of its shape,
    outward normal n)."""
    kind: int
    f: int
    q0: wp.vec3d
    q1: wp.vec3d
    n: wp.vec3d


# ----------------------------------------------------------------------------- faces


@wp.func
def face_count(s: Convex) -> int:
    if s.kind == BOX:
        return 6
    if s.kind == CONVEX_MESH:
        return s.f1 - s.f0
    if s.kind == CYLINDER:
        return 2
    if s.kind == PRISM:
        return 1
    return 0


@wp.func
def face_sign(f: int) -> wp.float64:
    if f % 2 == 0:
        return wp.float64(1.0)
    return wp.float64(-1.0)


@wp.func
def face_plane(G: Geometry, s: Convex, f: int):
    """World outward unit normal and offset (n·x = d on the face) of face f."""
    n_l = zero3()
    d_l = wp.float64(0.0)
    if s.kind == BOX:
        n_l[f // 2] = face_sign(f)
        d_l = s.size[f // 2]
    elif s.kind == CONVEX_MESH:
        pl = G.mesh_face_plane[s.f0 + f]
        n_l = wp.vec3d(pl[0], pl[1], pl[2])
        d_l = pl[3]
    elif s.kind == CYLINDER:
        n_l[2] = face_sign(f)
        d_l = s.size[1]
    else:
        n_l = s.top_n
        d_l = s.top_d
    n = s.R * n_l
    return n, d_l + wp.dot(n, s.p)


@wp.func
def face_vertex_count(G: Geometry, s: Convex, f: int) -> int:
    if s.kind == BOX:
        return 4
    if s.kind == CONVEX_MESH:
        return G.mesh_face_vertex_start[s.f0 + f + 1] - G.mesh_face_vertex_start[s.f0 + f]
    if s.kind == CYLINDER:
        return ncap()
    return 3


@wp.func
def face_vertex(G: Geometry, s: Convex, f: int, i: int) -> wp.vec3d:
    """World vertex i of face f (counter-clockwise about its outward normal)."""
    v = zero3()
    if s.kind == BOX:
        ax = f // 2
        sg = face_sign(f)
        k = i
        if sg < wp.float64(0.0):
            k = 3 - i
        su = wp.float64(1.0)
        sv = wp.float64(1.0)
        if k == 1 or k == 2:
            su = wp.float64(-1.0)
        if k == 2 or k == 3:
            sv = wp.float64(-1.0)
        v[ax] = sg * s.size[ax]
        v[(ax + 1) % 3] = su * s.size[(ax + 1) % 3]
        v[(ax + 2) % 3] = sv * s.size[(ax + 2) % 3]
    elif s.kind == CONVEX_MESH:
        v = G.mesh_vertex[G.mesh_face_vertex[G.mesh_face_vertex_start[s.f0 + f] + i]]
    elif s.kind == CYLINDER:
        sg = face_sign(f)
        k = i
        if sg < wp.float64(0.0):
            k = ncap() - 1 - i
        a = TWO_PI * wp.float64(k) / wp.float64(ncap())
        v = wp.vec3d(s.size[0] * wp.cos(a), s.size[0] * wp.sin(a), sg * s.size[1])
    else:
        v = wp.vec3d(s.prism[i, 0], s.prism[i, 1], s.prism[i, 2])
    return s.p + s.R * v


@wp.func
def face_disk(s: Convex, f: int):
    """(is a disk, centre, radius): a cylinder cap is tested as its exact disk."""
    if s.kind == CYLINDER:
        col = wp.vec3d(s.R[0, 2], s.R[1, 2], s.R[2, 2])
        return 1, s.p + face_sign(f) * s.size[1] * col, s.size[0]
    return 0, zero3(), wp.float64(0.0)


@wp.func
def reference_face(G: Geometry, A: Convex, B: Convex, n: wp.vec3d):
    """sap_ref.collision_manifold.reference_face: (found, side, face, n_ref, d_ref)."""
    have = int(0)
    best = wp.float64(0.0)
    side = int(0)
    face = int(0)
    other_side_tie = wp.float64(FACE_ALIGNMENT_TIE)  # set before the branches that use it (sap_gpu.codegen_check)
    for sd in range(2):
        S = A
        direction = n
        if sd == 1:
            S = B
            direction = -n
        for f in range(face_count(S)):
            fn, fd = face_plane(G, S, f)
            align = wp.dot(fn, direction)
            tie = wp.float64(0.0)
            if sd != side:
                tie = other_side_tie
            if have == 0 or align > best + tie:
                have = int(1)
                best = align
                side = sd
                face = f
    if have == 0 or best < wp.float64(1.0) - wp.float64(FACE_ALIGNMENT_TOL):
        return 0, 0, 0, zero3(), wp.float64(0.0)
    S = A
    if side == 1:
        S = B
    n_ref, d_ref = face_plane(G, S, face)
    return 1, side, face, n_ref, d_ref


@wp.func
def incident_feature(G: Geometry, s: Convex, u: wp.vec3d) -> Feature:
    """sap_ref.collision_manifold.incident_feature."""
    feat = Feature()
    feat.kind = POINT
    if s.kind == BOX or s.kind == CONVEX_MESH or s.kind == PRISM:
        best = int(0)
        bn, bd = face_plane(G, s, 0)
        for f in range(1, face_count(s)):
            fn, fd = face_plane(G, s, f)
            if wp.dot(fn, u) > wp.dot(bn, u):
                best = f
                bn = fn
        feat.kind = POLYGON
        feat.f = best
        feat.n = bn
        return feat
    ax = wp.vec3d(s.R[0, 2], s.R[1, 2], s.R[2, 2])
    if s.kind == CYLINDER:
        ul = wp.transpose(s.R) * u
        r = s.size[0]
        hl = s.size[1]
        if wp.abs(ul[2]) >= HALF_SQRT2:
            f = int(1)
            if ul[2] >= wp.float64(0.0):
                f = int(0)
            fn, fd = face_plane(G, s, f)
            feat.kind = POLYGON
            feat.f = f
            feat.n = fn
            return feat
        rho = wp.sqrt(ul[0] * ul[0] + ul[1] * ul[1])
        radial = wp.vec3d(wp.float64(1.0), wp.float64(0.0), wp.float64(0.0))
        if rho > wp.float64(0.0):
            radial = wp.vec3d(ul[0] / rho, ul[1] / rho, wp.float64(0.0))
        z = wp.vec3d(wp.float64(0.0), wp.float64(0.0), hl)
        feat.kind = SEGMENT
        feat.q0 = s.p + s.R * (r * radial - z)
        feat.q1 = s.p + s.R * (r * radial + z)
        return feat
    if s.kind == CAPSULE and wp.abs(wp.dot(ax, u)) < HALF_SQRT2:
        side = u - wp.dot(u, ax) * ax
        side = s.size[0] * side / wp.sqrt(wp.dot(side, side))
        feat.kind = SEGMENT
        feat.q0 = s.p - s.size[1] * ax + side
        feat.q1 = s.p + s.size[1] * ax + side
        return feat
    feat.q0 = support(G, s, u) + s.radius * u
    return feat


@wp.func
def feature_count(G: Geometry, I: Convex, feat: Feature) -> int:
    if feat.kind == POLYGON:
        return face_vertex_count(G, I, feat.f)
    if feat.kind == SEGMENT:
        return 2
    return 1


@wp.func
def feature_point(G: Geometry, I: Convex, feat: Feature, i: int) -> wp.vec3d:
    if feat.kind == POLYGON:
        return face_vertex(G, I, feat.f, i)
    if i == 1:
        return feat.q1
    return feat.q0


# ----------------------------------------------------------------------------- inside tests


@wp.func
def side_plane(a: wp.vec3d, b: wp.vec3d, n: wp.vec3d) -> wp.vec3d:
    """sap_ref._side_planes: (b − a) × n, unit (unnormalized when zero)."""
    m = wp.cross(b - a, n)
    nm = wp.sqrt(wp.dot(m, m))
    if nm > wp.float64(0.0):
        return m / nm
    return m


@wp.func
def inside_face(G: Geometry, S: Convex, f: int, n: wp.vec3d, x: wp.vec3d, skip: int) -> int:
    """x inside every side plane (but ``skip``) of face f of S, about the normal n."""
    k = face_vertex_count(G, S, f)
    for i in range(k):
        if i != skip:
            a = face_vertex(G, S, f, i)
            b = face_vertex(G, S, f, (i + 1) % k)
            if wp.dot(side_plane(a, b, n), x - a) > wp.float64(CLIP_TOL):
                return 0
    return 1


@wp.func
def radial(x: wp.vec3d, centre: wp.vec3d, n: wp.vec3d) -> wp.float64:
    r = x - centre
    r = r - wp.dot(r, n) * n
    return wp.sqrt(wp.dot(r, r))


@wp.func
def inside_ref(G: Geometry, R_: Convex, f: int, n_ref: wp.vec3d, x: wp.vec3d, skip: int) -> int:
    is_disk, dc, dr = face_disk(R_, f)
    if is_disk == 1:
        if radial(x, dc, n_ref) <= dr + wp.float64(CLIP_TOL):
            return 1
        return 0
    return inside_face(G, R_, f, n_ref, x, skip)


# ----------------------------------------------------------------------------- reduction passes


@wp.func
def area(x: wp.vec3d, y: wp.vec3d, z: wp.vec3d) -> wp.float64:
    c = wp.cross(y - x, z - x)
    return wp.float64(0.5) * wp.sqrt(wp.dot(c, c))


@wp.func
def consider(q: wp.vec3d, depth: wp.float64, margin: wp.float64, pass_: int, p1: wp.vec3d, p2: wp.vec3d,
             p3: wp.vec3d, threshold: wp.float64, tri: wp.float64, found: int, best_q: wp.vec3d,
             best_d: wp.float64, best_s: wp.float64):
    """One candidate of sap_ref.reduce_manifold's pass ``pass_`` (0: deepest of all, no margin; 1:
    deepest below the margin; 2–4: distance, triangle, outside area above ``threshold``). Returns the
    new (found, point, depth, score) and whether this candidate became the best."""
    if pass_ == 0:
        if found == 0 or depth < best_d:
            return 1, q, depth, best_s, 1
        return found, best_q, best_d, best_s, 0
    if not (depth < margin):
        return found, best_q, best_d, best_s, 0
    if pass_ == 1:
        if found == 0 or depth < best_d - wp.float64(MANIFOLD_DEPTH_TIE):
            return 1, q, depth, best_s, 1
        return found, best_q, best_d, best_s, 0
    s = wp.float64(0.0)
    if pass_ == 2:
        s = wp.sqrt(wp.dot(q - p1, q - p1))
    elif pass_ == 3:
        s = area(p1, p2, q)
    else:
        s = area(p1, p2, q) + area(p2, p3, q) + area(p3, p1, q) - tri
    bar = threshold
    if found == 1:
        bar = best_s * (wp.float64(1.0) + wp.float64(MANIFOLD_AREA_TIE))
    if s > bar:
        return 1, q, depth, s, 1
    return found, best_q, best_d, best_s, 0


@wp.func
def circle_crossings(qa: wp.vec3d, qb: wp.vec3d, centre: wp.vec3d, r: wp.float64, n: wp.vec3d):
    """sap_ref._circle_crossings: (count, first, second) in order along the segment."""
    pa = qa - centre
    d = qb - qa
    pa = pa - wp.dot(pa, n) * n
    d = d - wp.dot(d, n) * n
    a = wp.dot(d, d)
    b = wp.float64(2.0) * wp.dot(pa, d)
    c = wp.dot(pa, pa) - r * r
    disc = b * b - wp.float64(4.0) * a * c
    cnt = int(0)
    x0 = zero3()
    x1 = zero3()
    if a > wp.float64(0.0) and disc > wp.float64(0.0):
        root = wp.sqrt(disc)
        for k in range(2):
            t = (-b - root) / (wp.float64(2.0) * a)
            if k == 1:
                t = (-b + root) / (wp.float64(2.0) * a)
            if t > wp.float64(0.0) and t < wp.float64(1.0):
                x = qa + t * (qb - qa)
                if cnt == 0:
                    x0 = x
                else:
                    x1 = x
                cnt += 1
    return cnt, x0, x1


@wp.func
def clip_pass(G: Geometry, R_: Convex, f_ref: int, n_ref: wp.vec3d, d_ref: wp.float64, I: Convex, feat: Feature,
              extra: wp.vec3d, witness: wp.vec3d, margin: wp.float64, pass_: int, p1: wp.vec3d, p2: wp.vec3d,
              p3: wp.vec3d, threshold: wp.float64, tri: wp.float64):
    """One pass over sap_ref.clip_candidates(n_ref, face, feature, [extra], disk, [witness])."""
    found = int(0)
    bq = zero3()
    bd = wp.float64(0.0)
    bs = wp.float64(0.0)
    k = feature_count(G, I, feat)
    for i in range(k):  # (a)
        q = feature_point(G, I, feat, i)
        if inside_ref(G, R_, f_ref, n_ref, q, -1) == 1:
            found, bq, bd, bs, took = consider(q, wp.dot(n_ref, q) - d_ref, margin, pass_, p1, p2, p3, threshold, tri,
                                         found, bq, bd, bs)
    if feat.kind == POLYGON:  # (b)
        den = wp.dot(feat.n, n_ref)
        if wp.abs(den) > wp.float64(0.0):
            d_inc = wp.dot(feat.n, feature_point(G, I, feat, 0))
            for i in range(face_vertex_count(G, R_, f_ref)):
                r = face_vertex(G, R_, f_ref, i)
                q = r + ((d_inc - wp.dot(feat.n, r)) / den) * n_ref
                if inside_face(G, I, feat.f, feat.n, q, -1) == 1:
                    found, bq, bd, bs, took = consider(q, wp.dot(n_ref, q) - d_ref, margin, pass_, p1, p2, p3,
                                                       threshold, tri, found, bq, bd, bs)
    if feat.kind != POINT:  # (c)
        edges = int(1)
        if feat.kind == POLYGON:
            edges = k
        is_disk, dc, dr = face_disk(R_, f_ref)
        kr = face_vertex_count(G, R_, f_ref)
        for j in range(edges):
            qa = feature_point(G, I, feat, j)
            qb = feature_point(G, I, feat, (j + 1) % k)
            if is_disk == 1:
                cnt, x0, x1 = circle_crossings(qa, qb, dc, dr, n_ref)
                if cnt >= 1:
                    found, bq, bd, bs, took = consider(x0, wp.dot(n_ref, x0) - d_ref, margin, pass_, p1, p2, p3,
                                                 threshold, tri, found, bq, bd, bs)
                if cnt == 2:
                    found, bq, bd, bs, took = consider(x1, wp.dot(n_ref, x1) - d_ref, margin, pass_, p1, p2, p3,
                                                 threshold, tri, found, bq, bd, bs)
            else:
                for i in range(kr):
                    ra = face_vertex(G, R_, f_ref, i)
                    m = side_plane(ra, face_vertex(G, R_, f_ref, (i + 1) % kr), n_ref)
                    da = wp.dot(m, qa - ra)
                    db = wp.dot(m, qb - ra)
                    tol = wp.float64(CLIP_TOL)
                    if (da < -tol and db > tol) or (da > tol and db < -tol):
                        x = qa + (qb - qa) * (da / (da - db))
                        if inside_ref(G, R_, f_ref, n_ref, x, i) == 1:
                            found, bq, bd, bs, took = consider(x, wp.dot(n_ref, x) - d_ref, margin, pass_, p1, p2, p3,
                                                         threshold, tri, found, bq, bd, bs)
    if inside_ref(G, R_, f_ref, n_ref, extra, -1) == 1:
        found, bq, bd, bs, took = consider(extra, wp.dot(n_ref, extra) - d_ref, margin, pass_, p1, p2, p3, threshold,
                                     tri, found, bq, bd, bs)
    if inside_ref(G, R_, f_ref, n_ref, witness, -1) == 1:
        found, bq, bd, bs, took = consider(witness, wp.dot(n_ref, witness) - d_ref, margin, pass_, p1, p2, p3,
                                     threshold, tri, found, bq, bd, bs)
    return found, bq, bd


@wp.func
def plane_pass(G: Geometry, S: Convex, mode: int, feat: Feature, extra: wp.vec3d, n_ref: wp.vec3d,
               d_ref: wp.float64, margin: wp.float64, pass_: int, p1: wp.vec3d, p2: wp.vec3d, p3: wp.vec3d,
               threshold: wp.float64, tri: wp.float64):
    """One pass over the candidates of sap_ref.plane_manifold: mode 0 a cylinder's feature then its
    support point, 1 every mesh point, 2 the support point only."""
    found = int(0)
    bq = zero3()
    bd = wp.float64(0.0)
    bs = wp.float64(0.0)
    if mode == 1:
        for i in range(S.v0, S.v1):
            q = S.p + S.R * G.mesh_vertex[i]
            found, bq, bd, bs, took = consider(q, wp.dot(n_ref, q) - d_ref, margin, pass_, p1, p2, p3, threshold, tri,
                                         found, bq, bd, bs)
        return found, bq, bd
    if mode == 0:
        for i in range(feature_count(G, S, feat)):
            q = feature_point(G, S, feat, i)
            found, bq, bd, bs, took = consider(q, wp.dot(n_ref, q) - d_ref, margin, pass_, p1, p2, p3, threshold, tri,
                                         found, bq, bd, bs)
    found, bq, bd, bs, took = consider(extra, wp.dot(n_ref, extra) - d_ref, margin, pass_, p1, p2, p3, threshold, tri,
                                 found, bq, bd, bs)
    return found, bq, bd


# ----------------------------------------------------------------------------- manifolds


@wp.func
def contact_of(side: int, n_ref: wp.vec3d, d_ref: wp.float64, q: wp.vec3d):
    """sap_ref._contacts_from for one point: (x0, x1, n, phi)."""
    phi = wp.dot(n_ref, q) - d_ref
    on_ref = q - phi * n_ref
    if side == 0:
        return on_ref, q, n_ref, phi
    return q, on_ref, -n_ref, phi


@wp.func
def set4(X0: mat43d, X1: mat43d, N: mat43d, PHI: vec4d, k: int, x0: wp.vec3d, x1: wp.vec3d, n: wp.vec3d,
         phi: wp.float64):
    X0[k] = x0
    X1[k] = x1
    N[k] = n
    PHI[k] = phi
    return X0, X1, N, PHI


@wp.func
def convex_manifold(G: Geometry, E: Epa, row: int, A: Convex, B: Convex, margin: wp.float64):
    """sap_ref.collision_manifold.convex_manifold: (count, X0, X1, N, PHI), at most 4 contacts."""
    X0 = mat43d()
    X1 = mat43d()
    N = mat43d()
    PHI = vec4d()
    x0, x1, n, phi = convex_contact(G, E, row, A, B)
    found, side, f_ref, n_ref, d_ref = reference_face(G, A, B, n)
    if found == 0:
        X0, X1, N, PHI = set4(X0, X1, N, PHI, 0, x0, x1, n, phi)
        return 1, X0, X1, N, PHI
    R_ = A
    I = B
    witness = x1
    if side == 1:
        R_ = B
        I = A
        witness = x0
    u = -n_ref
    feat = incident_feature(G, I, u)
    extra = support(G, I, u) + I.radius * u
    z = zero3()
    f1, q1, d1 = clip_pass(G, R_, f_ref, n_ref, d_ref, I, feat, extra, witness, margin, 1, z, z, z,
                           wp.float64(0.0), wp.float64(0.0))
    if f1 == 0:
        X0, X1, N, PHI = set4(X0, X1, N, PHI, 0, x0, x1, n, phi)
        return 1, X0, X1, N, PHI
    a, b, c, ph = contact_of(side, n_ref, d_ref, q1)
    X0, X1, N, PHI = set4(X0, X1, N, PHI, 0, a, b, c, ph)
    count = int(1)
    if feat.kind == POINT:  # one touching point (sap_ref: only the deepest is kept)
        return count, X0, X1, N, PHI
    merge = wp.float64(MANIFOLD_MERGE_DISTANCE)
    f2, q2, d2 = clip_pass(G, R_, f_ref, n_ref, d_ref, I, feat, extra, witness, margin, 2, q1, z, z, merge,
                           wp.float64(0.0))
    if f2 == 1:
        a, b, c, ph = contact_of(side, n_ref, d_ref, q2)
        X0, X1, N, PHI = set4(X0, X1, N, PHI, 1, a, b, c, ph)
        count = int(2)
        L = wp.length(q2 - q1)
        thr = wp.float64(0.5) * merge * L
        f3, q3, d3 = clip_pass(G, R_, f_ref, n_ref, d_ref, I, feat, extra, witness, margin, 3, q1, q2, z, thr,
                               wp.float64(0.0))
        if f3 == 1:
            a, b, c, ph = contact_of(side, n_ref, d_ref, q3)
            X0, X1, N, PHI = set4(X0, X1, N, PHI, 2, a, b, c, ph)
            count = int(3)
            tri = area(q1, q2, q3)
            f4, q4, d4 = clip_pass(G, R_, f_ref, n_ref, d_ref, I, feat, extra, witness, margin, 4, q1, q2, q3, thr,
                                   tri)
            if f4 == 1:
                a, b, c, ph = contact_of(side, n_ref, d_ref, q4)
                X0, X1, N, PHI = set4(X0, X1, N, PHI, 3, a, b, c, ph)
                count = int(4)
    return count, X0, X1, N, PHI


@wp.func
def plane_manifold(G: Geometry, p_plane: wp.vec3d, n_plane: wp.vec3d, S: Convex, margin: wp.float64):
    """sap_ref.collision_manifold.plane_manifold: (count, X0, X1, N, PHI), normal of the plane."""
    X0 = mat43d()
    X1 = mat43d()
    N = mat43d()
    PHI = vec4d()
    n_ref = n_plane
    d_ref = wp.dot(n_ref, p_plane)
    u = -n_ref
    extra = support(G, S, u)
    mode = int(0)
    if S.kind == CONVEX_MESH:
        mode = int(1)
    elif S.kind != CYLINDER:
        mode = int(2)
    feat = incident_feature(G, S, u)
    z = zero3()
    zero = wp.float64(0.0)
    f1, q1, d1 = plane_pass(G, S, mode, feat, extra, n_ref, d_ref, margin, 1, z, z, z, zero, zero)
    if f1 == 0:  # nothing within the margin: the deepest point
        f0, q0, d0 = plane_pass(G, S, mode, feat, extra, n_ref, d_ref, margin, 0, z, z, z, zero, zero)
        a, b, c, ph = contact_of(0, n_ref, d_ref, q0)
        X0, X1, N, PHI = set4(X0, X1, N, PHI, 0, a, b, c, ph)
        return 1, X0, X1, N, PHI
    a, b, c, ph = contact_of(0, n_ref, d_ref, q1)
    X0, X1, N, PHI = set4(X0, X1, N, PHI, 0, a, b, c, ph)
    count = int(1)
    merge = wp.float64(MANIFOLD_MERGE_DISTANCE)
    f2, q2, d2 = plane_pass(G, S, mode, feat, extra, n_ref, d_ref, margin, 2, q1, z, z, merge, zero)
    if f2 == 1:
        a, b, c, ph = contact_of(0, n_ref, d_ref, q2)
        X0, X1, N, PHI = set4(X0, X1, N, PHI, 1, a, b, c, ph)
        count = int(2)
        thr = wp.float64(0.5) * merge * wp.length(q2 - q1)
        f3, q3, d3 = plane_pass(G, S, mode, feat, extra, n_ref, d_ref, margin, 3, q1, q2, z, thr, zero)
        if f3 == 1:
            a, b, c, ph = contact_of(0, n_ref, d_ref, q3)
            X0, X1, N, PHI = set4(X0, X1, N, PHI, 2, a, b, c, ph)
            count = int(3)
            f4, q4, d4 = plane_pass(G, S, mode, feat, extra, n_ref, d_ref, margin, 4, q1, q2, q3, thr,
                                    area(q1, q2, q3))
            if f4 == 1:
                a, b, c, ph = contact_of(0, n_ref, d_ref, q4)
                X0, X1, N, PHI = set4(X0, X1, N, PHI, 3, a, b, c, ph)
                count = int(4)
    return count, X0, X1, N, PHI

"""Device height fields: :mod:`sap_ref.collision_heightfield`, step for step.

A convex shape (shape 0 in canonical order) against a height field (shape 1): every cell triangle
under the shape's bounding box is a prism, each prism's manifold comes from GJK/EPA
(:func:`~sap_gpu.collision_manifold.convex_manifold`, or the contact along the triangle's normal
when the terrain witness is on a wall, or straight up from the shape's point deepest below the
triangle within its column when that contact leaves the triangle: the triangle raised until it
touches), and the contacts kept so far plus each prism's are reduced
to 4 as they come: a running reduction of at most 4 + 4 candidates, held in registers, with the
same scores and tie rules as the manifolds.
"""

import warp as wp

from sap_common.constants import MANIFOLD_MERGE_DISTANCE, ON_FACE_TOL, RAISE_GAP, RAISE_MAX_ITERATIONS

from .collision_convex import gjk
from .collision_manifold import area, consider, convex_manifold, set4
from .collision_support import (
    PRISM,
    Convex,
    Epa,
    Geometry,
    closest_triangle,
    mat43d,
    mat63d,
    row3,
    support,
    vec4d,
    zero3,
)

wp.set_module_options({"enable_backward": False})

__all__ = ["heightfield_contacts", "reduce_list"]

mat83d = wp.types.matrix(shape=(8, 3), dtype=wp.float64)
vec8d = wp.types.vector(length=8, dtype=wp.float64)


@wp.func
def list_pass(P: mat83d, D: vec8d, count: int, margin: wp.float64, pass_: int, p1: wp.vec3d, p2: wp.vec3d,
              p3: wp.vec3d, threshold: wp.float64, tri: wp.float64):
    """One reduction pass over a list of candidates: (found, index)."""
    found = int(0)
    bq = zero3()
    bd = wp.float64(0.0)
    bs = wp.float64(0.0)
    best = int(-1)
    for i in range(count):
        q = wp.vec3d(P[i, 0], P[i, 1], P[i, 2])
        found, bq, bd, bs, took = consider(q, D[i], margin, pass_, p1, p2, p3, threshold, tri, found, bq, bd, bs)
        if took == 1:
            best = i
    return found, best


@wp.func
def reduce_list(P: mat83d, D: vec8d, count: int, margin: wp.float64):
    """sap_ref.collision_manifold.reduce_manifold on a list of at most 8: (chosen count, indices)."""
    idx = wp.vec4i(-1, -1, -1, -1)
    z = zero3()
    zero = wp.float64(0.0)
    f1, i1 = list_pass(P, D, count, margin, 1, z, z, z, zero, zero)
    if f1 == 0:
        return 0, idx
    idx[0] = i1
    q1 = wp.vec3d(P[i1, 0], P[i1, 1], P[i1, 2])
    merge = wp.float64(MANIFOLD_MERGE_DISTANCE)
    f2, i2 = list_pass(P, D, count, margin, 2, q1, z, z, merge, zero)
    if f2 == 0:
        return 1, idx
    idx[1] = i2
    q2 = wp.vec3d(P[i2, 0], P[i2, 1], P[i2, 2])
    thr = wp.float64(0.5) * merge * wp.length(q2 - q1)
    f3, i3 = list_pass(P, D, count, margin, 3, q1, q2, z, thr, zero)
    if f3 == 0:
        return 2, idx
    idx[2] = i3
    q3 = wp.vec3d(P[i3, 0], P[i3, 1], P[i3, 2])
    f4, i4 = list_pass(P, D, count, margin, 4, q1, q2, q3, thr, area(q1, q2, q3))
    if f4 == 0:
        return 3, idx
    idx[3] = i4
    return 4, idx


@wp.func
def on_triangle(t0: wp.vec3d, t1: wp.vec3d, t2: wp.vec3d, x: wp.vec3d) -> int:
    T = mat43d()
    T[0] = t0 - x
    T[1] = t1 - x
    T[2] = t2 - x
    v, lam, keep, cnt = closest_triangle(T, 0, 1, 2)
    if wp.sqrt(wp.dot(v, v)) <= wp.float64(ON_FACE_TOL):
        return 1
    return 0


@wp.func(inline=False)
def deepest_below(G: Geometry, S: Convex, prism: Convex, a: wp.vec3d, b: wp.vec3d, c: wp.vec3d, ta: wp.vec3d,
                  tb: wp.vec3d, tc: wp.vec3d):
    """sap_ref.collision_heightfield._deepest_below: the cell triangle (a, b, c in the height
    field's frame; ta, tb, tc in the world's) raised from below the shape by Newton's method on
    GJK's distance until it touches: (1, x0, t), or (0, …) when the shape misses the column.
    ``prism`` is the prism record (its pose is the height field's); kept out of line (GJK)."""
    r = S.radius
    up = wp.vec3d(prism.R[0, 2], prism.R[1, 2], prism.R[2, 2])
    low = wp.dot(up, support(G, S, -up)) - r - wp.max(wp.max(wp.dot(ta, up), wp.dot(tb, up)), wp.dot(tc, up))
    high = wp.dot(up, support(G, S, up)) + r - wp.min(wp.min(wp.dot(ta, up), wp.dot(tb, up)), wp.dot(tc, up))
    t = low - (high - low) - wp.float64(1e-3)
    raised = prism
    gap_target = wp.float64(RAISE_GAP)
    for it in range(RAISE_MAX_ITERATIONS):
        lift = wp.vec3d(wp.float64(0.0), wp.float64(0.0), t)
        M = mat63d()
        M[0] = a + lift
        M[1] = b + lift
        M[2] = c + lift
        M[3] = a + lift
        M[4] = b + lift
        M[5] = c + lift
        raised.prism = M
        overlap, f, wa, wb, n, W, WA, WB = gjk(G, S, raised)
        if overlap != 0:  # rounding took the step past the touch: back off by the gap
            t = t - gap_target
            continue
        gap = f - r - gap_target
        slope = wp.dot(up, wb - wa) / f
        if gap <= gap_target:
            return 1, wa + r * (wb - wa) / f, t
        if not (slope < wp.float64(0.0)):
            return 0, zero3(), t  # the raised triangle passes beside the shape: it misses the column
        t = t - gap / slope
    return 0, zero3(), t


@wp.func
def vertical_contact(G: Geometry, S: Convex, prism: Convex, up: wp.vec3d, n_up: wp.vec3d, a: wp.vec3d, b: wp.vec3d,
                     c: wp.vec3d, ta: wp.vec3d, tb: wp.vec3d, tc: wp.vec3d):
    """sap_ref.collision_heightfield._vertical_contact: (1, x0, x1, s) with x0 the shape's point
    deepest below the triangle within its column and x1 = x0 + s·up on the triangle's plane, s > 0;
    (0, …) otherwise."""
    found, x0, t = deepest_below(G, S, prism, a, b, c, ta, tb, tc)
    s = wp.float64(0.0)
    ok = int(0)
    if found != 0:
        s = wp.dot(n_up, ta - x0) / wp.dot(n_up, up)
        if s > wp.float64(0.0):
            ok = int(1)
    return ok, x0, x0 + s * up, s


@wp.func
def hfield_point(G: Geometry, start: int, ncol: int, nrow: int, hx: wp.float64, hy: wp.float64, i: int,
                 j: int) -> wp.vec3d:
    """sap_common.geometry.hfield_point."""
    return wp.vec3d(-hx + wp.float64(2.0) * hx * wp.float64(j) / wp.float64(ncol - 1),
                    -hy + wp.float64(2.0) * hy * wp.float64(i) / wp.float64(nrow - 1),
                    G.hfield_height[start + i * ncol + j])


@wp.func(inline=False)
def prism_manifold(G: Geometry, E: Epa, row: int, S: Convex, prism: Convex, margin: wp.float64):
    """:func:`~sap_gpu.collision_manifold.convex_manifold` of the shape against one prism, kept out of
    line: inlined into the loop over the cells (GJK/EPA, refinement and four clipping passes), it
    made NVRTC take ~1,100 s to compile this kernel for sm_90 instead of ~95 s."""
    return convex_manifold(G, E, row, S, prism, margin)


@wp.func
def heightfield_contacts(G: Geometry, E: Epa, row: int, S: Convex, lo: wp.vec3d, hi: wp.vec3d, hp: wp.vec3d,
                         hR: wp.mat33d, hsize: wp.vec3d, start: int, nrow: int, ncol: int, margin: wp.float64):
    """sap_ref.collision_heightfield.heightfield_contacts: (count, X0, X1, N, PHI)."""
    hx = hsize[0]
    hy = hsize[1]
    base = hsize[2]
    bmin = wp.vec3d(wp.float64(1e300), wp.float64(1e300), wp.float64(1e300))
    bmax = -bmin
    for ci in range(8):
        corner = wp.vec3d(lo[0], lo[1], lo[2])
        if ci >= 4:
            corner[0] = hi[0]
        if (ci // 2) % 2 == 1:
            corner[1] = hi[1]
        if ci % 2 == 1:
            corner[2] = hi[2]
        x = wp.transpose(hR) * (S.R * corner + S.p - hp)
        for k in range(3):
            bmin[k] = wp.min(bmin[k], x[k])
            bmax[k] = wp.max(bmax[k], x[k])
    for k in range(3):
        bmin[k] = bmin[k] - margin
        bmax[k] = bmax[k] + margin
    dx = wp.float64(2.0) * hx / wp.float64(ncol - 1)
    dy = wp.float64(2.0) * hy / wp.float64(nrow - 1)
    j0 = wp.max(0, int(wp.floor((bmin[0] + hx) / dx)))
    j1 = wp.min(ncol - 1, int(wp.ceil((bmax[0] + hx) / dx)))
    i0 = wp.max(0, int(wp.floor((bmin[1] + hy) / dy)))
    i1 = wp.min(nrow - 1, int(wp.ceil((bmax[1] + hy) / dy)))
    KX0 = mat43d()
    KX1 = mat43d()
    KN = mat43d()
    KPHI = vec4d()
    kept = int(0)
    prism = Convex()
    prism.kind = PRISM
    prism.p = hp
    prism.R = hR
    prism.size = zero3()
    prism.radius = wp.float64(0.0)
    for i in range(i0, i1):
        for j in range(j0, j1):
            for t in range(2):
                a = hfield_point(G, start, ncol, nrow, hx, hy, i, j)
                b = hfield_point(G, start, ncol, nrow, hx, hy, i + 1, j + 1)
                c = hfield_point(G, start, ncol, nrow, hx, hy, i + 1, j)
                if t == 1:
                    b = hfield_point(G, start, ncol, nrow, hx, hy, i, j + 1)
                    c = hfield_point(G, start, ncol, nrow, hx, hy, i + 1, j + 1)
                if wp.max(wp.max(a[2], b[2]), c[2]) + margin < bmin[2]:
                    continue
                nl = wp.cross(b - a, c - a)
                nl = nl / wp.sqrt(wp.dot(nl, nl))
                M = mat63d()
                M[0] = a
                M[1] = b
                M[2] = c
                M[3] = wp.vec3d(a[0], a[1], -base)
                M[4] = wp.vec3d(b[0], b[1], -base)
                M[5] = wp.vec3d(c[0], c[1], -base)
                prism.prism = M
                prism.top_n = nl
                prism.top_d = wp.dot(nl, a)
                ta = hp + hR * a
                tb = hp + hR * b
                tc = hp + hR * c
                cnt, CX0, CX1, CN, CPHI = prism_manifold(G, E, row, S, prism, margin)
                if cnt > 1:  # a manifold's points on the triangle only (sap_ref); with none, the first
                    m = int(0)
                    for k in range(cnt):
                        if on_triangle(ta, tb, tc, row3(CX1, k)) != 0:
                            CX0, CX1, CN, CPHI = set4(CX0, CX1, CN, CPHI, m, row3(CX0, k), row3(CX1, k), row3(CN, k),
                                                      CPHI[k])
                            m += 1
                    cnt = wp.max(m, 1)
                if on_triangle(ta, tb, tc, row3(CX1, 0)) == 0:
                    if CPHI[0] >= wp.float64(0.0):
                        continue
                    n_up = hR * nl
                    q = support(G, S, -n_up) - S.radius * n_up
                    depth = wp.dot(n_up, q - ta)
                    on_plane = q - depth * n_up
                    if on_triangle(ta, tb, tc, on_plane) == 0:
                        # off the triangle (near a crease, or beyond the grid's border): straight up
                        # from the shape's point deepest below the triangle within its column
                        up = wp.vec3d(hR[0, 2], hR[1, 2], hR[2, 2])
                        ok, qz, xz, sz = vertical_contact(G, S, prism, up, n_up, a, b, c, ta, tb, tc)
                        if ok == 0:
                            continue
                        q = qz
                        on_plane = xz
                        n_up = up
                        depth = -sz
                    CX0[0] = q
                    CX1[0] = on_plane
                    CN[0] = -n_up
                    CPHI[0] = depth
                # merge: the kept contacts, then this prism's; reduce to 4
                P = mat83d()
                D = vec8d()
                m = int(0)
                for k in range(kept):
                    P[m] = row3(KX0, k)
                    D[m] = KPHI[k]
                    m += 1
                for k in range(cnt):
                    P[m] = row3(CX0, k)
                    D[m] = CPHI[k]
                    m += 1
                nsel, idx = reduce_list(P, D, m, margin)
                NX0 = mat43d()
                NX1 = mat43d()
                NN = mat43d()
                NPHI = vec4d()
                for k in range(nsel):
                    src = idx[k]
                    if src < kept:
                        NX0, NX1, NN, NPHI = set4(NX0, NX1, NN, NPHI, k, row3(KX0, src), row3(KX1, src),
                                                  row3(KN, src), KPHI[src])
                    else:
                        s2 = src - kept
                        NX0, NX1, NN, NPHI = set4(NX0, NX1, NN, NPHI, k, row3(CX0, s2), row3(CX1, s2),
                                                  row3(CN, s2), CPHI[s2])
                KX0 = NX0
                KX1 = NX1
                KN = NN
                KPHI = NPHI
                kept = nsel
    return kept, KX0, KX1, KN, KPHI

"""Device GJK/EPA for the general convex pairs: :mod:`sap_ref.collision_convex`, step for step.

Same cores and radii, same support functions and tie rules, same GJK (van den Bergen) and EPA
(grown from the nearest face, visibility grown across shared edges, free face slots reused lowest
first, the nearest *triangle* for the witnesses), the same refinement of a curved pair stopped by
the vertex cap and the same witness rule after it. Decisions are taken on the same quantities in
the same order, so the two backends agree to rounding (docs/testing.md § Cross-backend checks).

The shape record, the support functions and the closest point on a simplex are in
:mod:`sap_gpu.collision_support`. EPA keeps its polytope in global scratch (:class:`Epa`), one
row per (world, pair) thread that can need it: ``EPA_MAX_VERTICES`` vertices with their two
witness points and ``EPA_MAX_FACES`` faces per row.
"""

import warp as wp

from sap_common.constants import (
    EPA_TOL,
    GJK_MAX_ITERATIONS,
    GJK_REL_TOL,
    GJK_TOUCH_DISTANCE,
    KINK_TOL,
    REFINE_HALVINGS,
    REFINE_ITERATIONS,
    REFINE_MIN_GAIN,
    REFINE_ROUNDS,
    REFINE_STEP,
    SUPPORT_TIE,
    WITNESS_CLAMP_TOL,
)

from .collision_primitive import segment_closest_params
from .collision_support import (
    BOX,
    CAPSULE,
    CONVEX_MESH,
    CYLINDER,
    ELLIPSOID,
    MAXF,
    MAXV,
    PRISM,
    Convex,
    Epa,
    Geometry,
    box_corner_local,
    closest_on_simplex,
    closest_segment,
    closest_triangle,
    mat43d,
    prism_point,
    row3,
    sgn,
    support,
    support_pair,
    tetra_face,
    unit,
    vec4d,
    zero3,
)

wp.set_module_options({"enable_backward": False})

__all__ = ["gjk", "epa", "convex_contact"]


# ----------------------------------------------------------------------------- GJK


@wp.func
def gjk(G: Geometry, A: Convex, B: Convex):
    """sap_ref.collision_convex.gjk. Returns (overlap, dist, a, b, n, W, WA, WB): the witnesses of a
    separated pair, or the simplex (n points) holding the origin."""
    d = A.p - B.p
    if not (wp.dot(d, d) > wp.float64(0.0)):
        d = wp.vec3d(wp.float64(1.0), wp.float64(0.0), wp.float64(0.0))
    W = mat43d()
    WA = mat43d()
    WB = mat43d()
    w0, a0, b0 = support_pair(G, A, B, d)
    W[0] = w0
    WA[0] = a0
    WB[0] = b0
    n = int(1)
    v = w0
    lam = vec4d(wp.float64(1.0), wp.float64(0.0), wp.float64(0.0), wp.float64(0.0))
    touch = wp.float64(GJK_TOUCH_DISTANCE)
    for it in range(GJK_MAX_ITERATIONS):
        vv = wp.dot(v, v)
        if vv <= touch * touch:
            return 1, wp.float64(0.0), zero3(), zero3(), n, W, WA, WB
        w, a, b = support_pair(G, A, B, -v)
        if vv - wp.dot(v, w) <= wp.float64(GJK_REL_TOL) * vv:
            break
        TW = W
        TA = WA
        TB = WB
        TW[n] = w
        TA[n] = a
        TB[n] = b
        v_new, lam_new, keep, nk = closest_on_simplex(TW, n + 1)
        if nk == 4:
            return 1, wp.float64(0.0), zero3(), zero3(), 4, TW, TA, TB
        if not (wp.dot(v_new, v_new) < vv):
            # no progress (a degenerate simplex): continue from the segment v → w (sap_ref.gjk)
            ha = zero3()
            hb = zero3()
            for k in range(n):
                ha = ha + lam[k] * row3(WA, k)
                hb = hb + lam[k] * row3(WB, k)
            TW = mat43d()
            TA = mat43d()
            TB = mat43d()
            TW[0] = v
            TA[0] = ha
            TB[0] = hb
            TW[1] = w
            TA[1] = a
            TB[1] = b
            v_new, lam_new, keep, nk = closest_segment(TW, 0, 1)
            if not (wp.dot(v_new, v_new) < vv):
                break
        for k in range(nk):
            W[k] = row3(TW, keep[k])
            WA[k] = row3(TA, keep[k])
            WB[k] = row3(TB, keep[k])
        n = nk
        v = v_new
        lam = lam_new
    a = zero3()
    b = zero3()
    for k in range(n):
        a = a + lam[k] * row3(WA, k)
        b = b + lam[k] * row3(WB, k)
    return 0, wp.sqrt(wp.dot(v, v)), a, b, n, W, WA, WB


# ----------------------------------------------------------------------------- EPA


@wp.func
def axis(k: int) -> wp.vec3d:
    e = zero3()
    e[k] = wp.float64(1.0)
    return e


@wp.func
def argmin_abs(u: wp.vec3d) -> int:
    k = int(0)
    for i in range(1, 3):
        if wp.abs(u[i]) < wp.abs(u[k]):
            k = i
    return k


@wp.func
def blow_up(G: Geometry, A: Convex, B: Convex, n: int, W: mat43d, WA: mat43d, WB: mat43d):
    """sap_ref._blow_up: grow a simplex holding the origin to a tetrahedron of D."""
    if n == 1:
        for e in range(3):
            for si in range(2):
                s = wp.float64(1.0)
                if si == 1:
                    s = wp.float64(-1.0)
                w, a, b = support_pair(G, A, B, s * axis(e))
                if n == 1 and wp.length(w - row3(W, 0)) > wp.float64(0.0):
                    W[1] = w
                    WA[1] = a
                    WB[1] = b
                    n = int(2)
            if n == 2:
                break
    if n == 2:
        u = row3(W, 1) - row3(W, 0)
        d = wp.cross(u, axis(argmin_abs(u)))
        for si in range(2):
            s = wp.float64(1.0)
            if si == 1:
                s = wp.float64(-1.0)
            if n == 2:
                w, a, b = support_pair(G, A, B, s * d)
                if wp.length(wp.cross(w - row3(W, 0), u)) > wp.float64(0.0):
                    W[2] = w
                    WA[2] = a
                    WB[2] = b
                    n = int(3)
    if n == 3:
        nrm = wp.cross(row3(W, 1) - row3(W, 0), row3(W, 2) - row3(W, 0))
        for si in range(2):
            s = wp.float64(1.0)
            if si == 1:
                s = wp.float64(-1.0)
            if n == 3:
                w, a, b = support_pair(G, A, B, s * nrm)
                if wp.abs(wp.dot(nrm, w - row3(W, 0))) > wp.float64(0.0):
                    W[3] = w
                    WA[3] = a
                    WB[3] = b
                    n = int(4)
    return n, W, WA, WB


@wp.func
def face_of(E: Epa, row: int, i: int, j: int, k: int):
    """(ok, unit normal, distance) of triangle (i, j, k) of the polytope."""
    pi = E.P[row, i]
    nrm = wp.cross(E.P[row, j] - pi, E.P[row, k] - pi)
    nn = wp.sqrt(wp.dot(nrm, nrm))
    if not (nn > wp.float64(0.0)):
        return 0, zero3(), wp.float64(0.0)
    nrm = nrm / nn
    return 1, nrm, wp.dot(nrm, pi)


@wp.func
def edge_of(f: wp.vec3i, e: int):
    """Directed edge e of face f: (f[e], f[e+1 mod 3])."""
    return f[e], f[(e + 1) % 3]


@wp.func
def neighbour(E: Epa, row: int, nf: int, p: int, q: int) -> int:
    """The alive face slot holding the directed edge (p, q), or −1 (the first in slot order)."""
    for s in range(nf):
        if E.alive[row, s] != 0:
            fv = E.face[row, s]
            if (fv[0] == p and fv[1] == q) or (fv[1] == p and fv[2] == q) or (fv[2] == p and fv[0] == q):
                return s
    return -1


@wp.func
def in_list(E: Epa, row: int, count: int, s: int) -> int:
    for i in range(count):
        if E.visible[row, i] == s:
            return 1
    return 0


@wp.func
def epa(G: Geometry, E: Epa, row: int, A: Convex, B: Convex, n: int, W: mat43d, WA: mat43d, WB: mat43d):
    """sap_ref.collision_convex.epa. Returns (depth, normal, a, b, converged)."""
    n, W, WA, WB = blow_up(G, A, B, n, W, WA, WB)
    if n < 4:
        return wp.float64(0.0), wp.vec3d(wp.float64(0.0), wp.float64(0.0), wp.float64(1.0)), row3(WA, 0), \
            row3(WB, 0), 1
    centre = zero3()
    for k in range(4):
        E.P[row, k] = row3(W, k)
        E.PA[row, k] = row3(WA, k)
        E.PB[row, k] = row3(WB, k)
        centre = centre + row3(W, k)
    centre = centre / wp.float64(4.0)
    nv = int(4)
    nf = int(0)
    for f in range(4):
        i, j, k, o = tetra_face(f)
        ok, nrm, dist = face_of(E, row, i, j, k)
        if ok == 1:
            if wp.dot(nrm, centre - E.P[row, i]) > wp.float64(0.0):
                t = j
                j = k
                k = t
                nrm = -nrm
                dist = -dist
            E.face[row, nf] = wp.vec3i(i, j, k)
            E.fn[row, nf] = nrm
            E.fd[row, nf] = dist
            E.alive[row, nf] = 1
            nf += 1
    best = int(-1)
    best_normal = wp.vec3d(wp.float64(0.0), wp.float64(0.0), wp.float64(1.0))
    converged = int(0)
    for it in range(MAXV):
        best = int(-1)
        alive_count = int(0)
        for s in range(nf):
            if E.alive[row, s] != 0:
                alive_count += 1
                if best < 0 or E.fd[row, s] < E.fd[row, best]:
                    best = s
        if best < 0:
            break
        bn = E.fn[row, best]
        bd = E.fd[row, best]
        best_normal = bn
        w, a, b = support_pair(G, A, B, bn)
        if wp.dot(bn, w) - bd <= wp.float64(EPA_TOL):
            converged = int(1)
            break
        if nv >= MAXV:
            break
        new = nv
        # visible faces, grown breadth first from the best across shared edges
        E.visible[row, 0] = best
        nvis = int(1)
        i = int(0)
        while i < nvis:
            fv = E.face[row, E.visible[row, i]]
            i += 1
            for e in range(3):
                p, q = edge_of(fv, e)
                g = neighbour(E, row, nf, q, p)
                if g >= 0 and in_list(E, row, nvis, g) == 0:
                    gf = E.face[row, g]
                    if wp.dot(E.fn[row, g], w - E.P[row, gf[0]]) > wp.float64(EPA_TOL):
                        E.visible[row, nvis] = g
                        nvis += 1
        nh = int(0)
        for vi in range(nvis):
            fv = E.face[row, E.visible[row, vi]]
            for e in range(3):
                p, q = edge_of(fv, e)
                if in_list(E, row, nvis, neighbour(E, row, nf, q, p)) == 0:
                    E.horizon[row, nh] = wp.vec2i(p, q)
                    nh += 1
        if alive_count - nvis + nh > MAXF:
            break
        E.P[row, new] = w
        sliver = int(0)
        for h in range(nh):
            ed = E.horizon[row, h]
            ok, nrm, dist = face_of(E, row, ed[0], ed[1], new)
            if ok == 0 or dist < bd - wp.float64(EPA_TOL):
                sliver = int(1)
        if sliver == 1:
            converged = int(1)
            break
        E.PA[row, new] = a
        E.PB[row, new] = b
        nv += 1
        for vi in range(nvis):
            E.alive[row, E.visible[row, vi]] = 0
        for h in range(nh):
            ed = E.horizon[row, h]
            ok, nrm, dist = face_of(E, row, ed[0], ed[1], new)
            slot = int(-1)
            for s in range(nf):
                if slot < 0 and E.alive[row, s] == 0:
                    slot = s
            if slot < 0:
                slot = nf
                nf += 1
            E.face[row, slot] = wp.vec3i(ed[0], ed[1], new)
            E.fn[row, slot] = nrm
            E.fd[row, slot] = dist
            E.alive[row, slot] = 1
    # the nearest alive face as a triangle
    have = int(0)
    bv = zero3()
    blam = vec4d()
    bidx = wp.vec4i()
    bcount = int(0)
    for s in range(nf):
        if E.alive[row, s] != 0:
            fv = E.face[row, s]
            T = mat43d()
            T[0] = E.P[row, fv[0]]
            T[1] = E.P[row, fv[1]]
            T[2] = E.P[row, fv[2]]
            v, lam, keep, cnt = closest_triangle(T, 0, 1, 2)
            if have == 0 or wp.dot(v, v) < wp.dot(bv, bv):
                have = int(1)
                bv = v
                blam = lam
                bcount = cnt
                for k in range(cnt):
                    bidx[k] = fv[keep[k]]
    depth = wp.sqrt(wp.dot(bv, bv))
    nrm = bv
    if depth > wp.float64(0.0):
        nrm = bv / depth
    else:
        nrm = best_normal
    a = zero3()
    b = zero3()
    for k in range(bcount):
        a = a + blam[k] * E.PA[row, bidx[k]]
        b = b + blam[k] * E.PB[row, bidx[k]]
    return depth, nrm, a, b, converged


# ----------------------------------------------------------------------------- refinement and result


@wp.func
def separation(G: Geometry, A: Convex, B: Convex, n: wp.vec3d):
    a = support(G, A, n)
    b = support(G, B, -n)
    return wp.dot(n, b - a), a, b


@wp.func
def tangents(n: wp.vec3d):
    t1 = wp.cross(n, axis(argmin_abs(n)))
    t1 = t1 / wp.sqrt(wp.dot(t1, t1))
    return t1, wp.cross(n, t1)


@wp.func
def refine_penetration(G: Geometry, A: Convex, B: Convex, n: wp.vec3d):
    """sap_ref.collision_convex.refine_penetration: (n, sigma, a, b, moved)."""
    n_start = n
    sigma, a, b = separation(G, A, B, n)
    for r in range(REFINE_ROUNDS):
        n, sigma, a, b = newton(G, A, B, n, sigma, a, b)
        n, sigma, a, b, kink_moved = refine_on_kinks(G, A, B, n, sigma, a, b)
        if kink_moved == 0:
            break
    moved = int(0)
    if n[0] != n_start[0] or n[1] != n_start[1] or n[2] != n_start[2]:
        moved = 1
    return n, sigma, a, b, moved


@wp.func
def newton(G: Geometry, A: Convex, B: Convex, n: wp.vec3d, sigma: wp.float64, a: wp.vec3d, b: wp.vec3d):
    """sap_ref.collision_convex._newton: (n, sigma, a, b)."""
    h = wp.float64(REFINE_STEP)
    gain = wp.float64(REFINE_MIN_GAIN)
    for it in range(REFINE_ITERATIONS):
        t1, t2 = tangents(n)
        x = a - b
        g0 = -wp.dot(t1, x)
        g1 = -wp.dot(t2, x)
        if not (g0 * g0 + g1 * g1 > wp.float64(0.0)):
            break
        H00 = wp.float64(0.0)
        H01 = wp.float64(0.0)
        H10 = wp.float64(0.0)
        H11 = wp.float64(0.0)
        for j in range(2):
            tj = t1
            if j == 1:
                tj = t2
            np_ = unit(n + h * tj)
            nm_ = unit(n - h * tj)
            xp = support(G, A, np_) - support(G, B, -np_)
            xm = support(G, A, nm_) - support(G, B, -nm_)
            dx = (xp - xm) / (wp.float64(2.0) * h)
            if j == 0:
                H00 = -wp.dot(t1, dx)
                H10 = -wp.dot(t2, dx)
            else:
                H01 = -wp.dot(t1, dx)
                H11 = -wp.dot(t2, dx)
        off = wp.float64(0.5) * (H01 + H10)
        nx = wp.dot(n, x)
        H00 = wp.float64(0.5) * (H00 + H00) + nx
        H11 = wp.float64(0.5) * (H11 + H11) + nx
        H01 = off
        H10 = off
        det = H00 * H11 - H01 * H10
        th0 = wp.float64(0.0)
        th1 = wp.float64(0.0)
        if H00 < wp.float64(0.0) and det > wp.float64(0.0):
            th0 = -(H11 * g0 - H01 * g1) / det
            th1 = -(H00 * g1 - H10 * g0) / det
        else:
            gn = wp.sqrt(g0 * g0 + g1 * g1)
            th0 = h * g0 / gn
            th1 = h * g1 / gn
        improved = int(0)
        for hv in range(REFINE_HALVINGS):
            if improved == 0:
                trial = unit(n + th0 * t1 + th1 * t2)
                s_new, a_new, b_new = separation(G, A, B, trial)
                if s_new > sigma + gain:
                    n = trial
                    sigma = s_new
                    a = a_new
                    b = b_new
                    improved = 1
                else:
                    th0 = wp.float64(0.5) * th0
                    th1 = wp.float64(0.5) * th1
        if improved == 0:
            break
    return n, sigma, a, b


@wp.func
def axis_of(s: Convex):
    """sap_ref._axis_of: (has a kink axis, the axis)."""
    ax = wp.vec3d(s.R[0, 2], s.R[1, 2], s.R[2, 2])
    if s.kind == CYLINDER or s.kind == CAPSULE:
        return 1, ax
    return 0, ax


@wp.func
def box_point(s: Convex, i: int) -> wp.vec3d:
    """Corner i of a box in sap_ref's order (x slowest, z fastest, − before +)."""
    return box_corner_local(s.size, i)


@wp.func
def polytope_point(G: Geometry, s: Convex, i: int) -> wp.vec3d:
    if s.kind == BOX:
        return box_point(s, i)
    if s.kind == PRISM:
        return prism_point(s, i)
    return G.mesh_vertex[s.v0 + i]


@wp.func
def polytope_count(s: Convex) -> int:
    if s.kind == BOX:
        return 8
    if s.kind == PRISM:
        return 6
    return s.v1 - s.v0


@wp.func
def kink_vertex(G: Geometry, s: Convex, d: wp.vec3d) -> int:
    """The support vertex along d of a convex mesh (support_local's: the first of largest v·d), else 0."""
    if s.kind != CONVEX_MESH:
        return 0
    dl = wp.transpose(s.R) * d
    best = int(0)
    bd = wp.dot(polytope_point(G, s, 0), dl)
    for i in range(1, polytope_count(s)):
        dv = wp.dot(polytope_point(G, s, i), dl)
        if dv > bd:
            best = i
            bd = dv
    return best


@wp.func
def kink_count(G: Geometry, s: Convex, v: int) -> int:
    """How many axes sap_ref._kink_axes gives (v: the support vertex of a convex mesh)."""
    if s.kind == CYLINDER or s.kind == CAPSULE:
        return 1
    if s.kind == BOX:
        return 3
    if s.kind != CONVEX_MESH:
        return 0
    count = int(0)
    for f in range(s.f0, s.f1):
        for p in range(G.mesh_face_vertex_start[f], G.mesh_face_vertex_start[f + 1]):
            if G.mesh_face_vertex[p] == s.v0 + v:
                count += 1
    return count


@wp.func
def kink_axis(G: Geometry, s: Convex, v: int, k: int) -> wp.vec3d:
    """Axis k of sap_ref._kink_axes (v: the support vertex of a convex mesh), world frame."""
    if s.kind == CYLINDER or s.kind == CAPSULE:
        return wp.vec3d(s.R[0, 2], s.R[1, 2], s.R[2, 2])
    if s.kind == BOX:
        return wp.vec3d(s.R[0, k], s.R[1, k], s.R[2, k])
    other = int(0)
    if s.kind == CONVEX_MESH:  # the vertex after v in the k-th face holding it
        seen = int(0)
        for f in range(s.f0, s.f1):
            start = G.mesh_face_vertex_start[f]
            size = G.mesh_face_vertex_start[f + 1] - start
            for p in range(size):
                if G.mesh_face_vertex[start + p] == s.v0 + v:
                    if seen == k:
                        other = G.mesh_face_vertex[start + (p + 1) % size] - s.v0
                    seen += 1
    return unit(s.R * (polytope_point(G, s, other) - polytope_point(G, s, v)))


@wp.func
def pair_kink_axis(G: Geometry, A: Convex, B: Convex, vA: int, vB: int, countA: int, k: int) -> wp.vec3d:
    """Axis k of sap_ref's list _kink_axes(A, n) + _kink_axes(B, −n) (one call site: one copy of kink_axis)."""
    s = A
    v = vA
    i = k
    if k >= countA:
        s = B
        v = vB
        i = k - countA
    return kink_axis(G, s, v, i)


@wp.func
def refine_on_kinks(G: Geometry, A: Convex, B: Convex, n: wp.vec3d, sigma: wp.float64, a: wp.vec3d, b: wp.vec3d):
    """sap_ref.collision_convex._refine_on_kinks: (n, sigma, a, b, moved)."""
    gain = wp.float64(REFINE_MIN_GAIN)
    vA = kink_vertex(G, A, n)
    vB = kink_vertex(G, B, -n)
    countA = kink_count(G, A, vA)
    count = countA + kink_count(G, B, vB)
    n0 = n
    have_kink = int(0)
    moved = int(0)
    kink = zero3()
    for i in range(count):  # onto kink i, then onto its crossing with each later one
        ai = pair_kink_axis(G, A, B, vA, vB, countA, i)
        for j in range(i, count):
            ok = int(0)
            trial = zero3()
            if j == i:
                v = n0 - wp.dot(n0, ai) * ai
                if wp.dot(v, v) > wp.float64(0.0):
                    ok = 1
                    trial = unit(v)
            else:
                cr = wp.cross(ai, pair_kink_axis(G, A, B, vA, vB, countA, j))
                if wp.dot(cr, cr) > wp.float64(0.0):
                    ok = 1
                    trial = unit(cr)
                    if wp.dot(trial, n0) < wp.float64(0.0):
                        trial = -trial
            if ok == 1:
                s_new, a_new, b_new = separation(G, A, B, trial)
                if s_new > sigma + gain:
                    n = trial
                    sigma = s_new
                    a = a_new
                    b = b_new
                    moved = 1
                    have_kink = 0
                    if j == i:
                        have_kink = 1
                        kink = ai
    if have_kink == 0:
        return n, sigma, a, b, moved
    h = wp.float64(REFINE_STEP)
    for it in range(REFINE_ITERATIONS):
        t = wp.cross(kink, n)
        t = t / wp.sqrt(wp.dot(t, t))
        g = -wp.dot(t, a - b)
        if not (g * g > wp.float64(0.0)):
            break
        np_ = unit(n + h * t)
        nm_ = unit(n - h * t)
        xp = support(G, A, np_) - support(G, B, -np_)
        xm = support(G, A, nm_) - support(G, B, -nm_)
        H = -wp.dot(t, (xp - xm) / (wp.float64(2.0) * h)) + wp.dot(n, a - b)
        theta = h
        if g <= wp.float64(0.0):
            theta = -h
        if H < wp.float64(0.0):
            theta = -g / H
        improved = int(0)
        for hv in range(REFINE_HALVINGS):
            if improved == 0:
                trial = unit(n + theta * t)
                s_new, a_new, b_new = separation(G, A, B, trial)
                if s_new > sigma + gain:
                    n = trial
                    sigma = s_new
                    a = a_new
                    b = b_new
                    improved = 1
                else:
                    theta = wp.float64(0.5) * theta
        if improved == 0:
            break
    return n, sigma, a, b, moved


@wp.func
def support_feature(G: Geometry, s: Convex, d: wp.vec3d):
    """sap_ref.collision_convex._support_feature: (kind 0 point / 1 segment / 2 set, e0, e1)."""
    d = d / wp.sqrt(wp.dot(d, d))
    if s.kind == BOX or s.kind == CONVEX_MESH or s.kind == PRISM:
        dl = wp.transpose(s.R) * d
        k = polytope_count(s)
        dmax = wp.dot(polytope_point(G, s, 0), dl)
        scale = wp.float64(0.0)
        for i in range(k):
            v = polytope_point(G, s, i)
            dmax = wp.max(dmax, wp.dot(v, dl))
            scale = wp.max(scale, wp.max(wp.max(wp.abs(v[0]), wp.abs(v[1])), wp.abs(v[2])))
        nt = int(0)
        i0 = int(0)
        i1 = int(0)
        for i in range(k):
            if wp.dot(polytope_point(G, s, i), dl) >= dmax - wp.float64(SUPPORT_TIE) * scale:
                if nt == 0:
                    i0 = i
                elif nt == 1:
                    i1 = i
                nt += 1
        if nt == 1:
            return 0, zero3(), zero3()
        if nt == 2:
            return 1, s.p + s.R * polytope_point(G, s, i0), s.p + s.R * polytope_point(G, s, i1)
        return 2, zero3(), zero3()
    has, ax = axis_of(s)
    if has == 0:
        return 0, zero3(), zero3()
    along = wp.abs(wp.dot(d, ax))
    kink_tol = wp.float64(KINK_TOL)  # set where every use below sees it (sap_gpu.codegen_check)
    if s.kind == CYLINDER and along >= wp.float64(1.0) - kink_tol:
        return 2, zero3(), zero3()
    if along > kink_tol:
        return 0, zero3(), zero3()
    hl = s.size[1]
    centre = s.p
    if s.kind == CYLINDER:
        centre = support(G, s, d) - sgn((wp.transpose(s.R) * d)[2]) * hl * ax
    return 1, centre - hl * ax, centre + hl * ax


@wp.func
def clip_slab(l0: wp.float64, d: wp.float64, h: wp.float64, t0: wp.float64, t1: wp.float64):
    """(ok, t0, t1): the interval [t0, t1] cut to the parameters where l0 + t·d ∈ [−h, h]."""
    if d == wp.float64(0.0):
        if wp.abs(l0) > h:
            return 0, t0, t1
        return 1, t0, t1
    ta = (-h - l0) / d
    tb = (h - l0) / d
    return 1, wp.max(t0, wp.min(ta, tb)), wp.min(t1, wp.max(ta, tb))


@wp.func
def segment_in_core(kind: int, p: wp.vec3d, R: wp.mat33d, size: wp.vec3d, e0: wp.vec3d, e1: wp.vec3d):
    """sap_ref.collision_convex._segment_in_core of the shape (kind, p, R, size): (found, t0, t1)."""
    tol = wp.float64(WITNESS_CLAMP_TOL)  # set where every use below sees it (sap_gpu.codegen_check)
    t0 = wp.float64(0.0)
    t1 = wp.float64(1.0)
    if kind != BOX and kind != CYLINDER:
        return 0, t0, t1
    l0 = wp.transpose(R) * (e0 - p)
    l1 = wp.transpose(R) * (e1 - p)
    d = l1 - l0
    ok = int(1)
    if kind == BOX:
        for k in range(3):
            if ok == 1:
                ok, t0, t1 = clip_slab(l0[k], d[k], size[k] + tol, t0, t1)
    else:
        r = size[0] + tol
        a = d[0] * d[0] + d[1] * d[1]
        b = wp.float64(2.0) * (l0[0] * d[0] + l0[1] * d[1])
        c = l0[0] * l0[0] + l0[1] * l0[1] - r * r
        if a == wp.float64(0.0):
            if c > wp.float64(0.0):
                ok = 0
        else:
            disc = b * b - wp.float64(4.0) * a * c
            if disc < wp.float64(0.0):
                ok = 0
            else:
                root = wp.sqrt(disc)
                t0 = wp.max(t0, (-b - root) / (wp.float64(2.0) * a))
                t1 = wp.min(t1, (-b + root) / (wp.float64(2.0) * a))
        if ok == 1:
            ok, t0, t1 = clip_slab(l0[2], d[2], size[1] + tol, t0, t1)
    if ok == 0 or t0 > t1:
        return 0, t0, t1
    return 1, t0, t1


@wp.func
def clamp_to(t: wp.float64, found: int, t0: wp.float64, t1: wp.float64) -> wp.float64:
    """sap_ref.collision_convex._clamp_to."""
    if found == 0:
        return t
    return wp.min(wp.max(t, t0), t1)


@wp.func
def witnesses(G: Geometry, A: Convex, B: Convex, n: wp.vec3d, sigma: wp.float64, a_s: wp.vec3d, b_s: wp.vec3d,
              a_epa: wp.vec3d, b_epa: wp.vec3d):
    """sap_ref.collision_convex._witnesses."""
    ka, fa0, fa1 = support_feature(G, A, n)
    kb, fb0, fb1 = support_feature(G, B, -n)
    gap_epa = b_epa - a_epa - sigma * n
    if ka == 2 and kb == 2:
        return a_epa, a_epa + sigma * n
    if ka == 1 and kb == 1:
        s, t = segment_closest_params(fa0, fa1, fb0 - sigma * n, fb1 - sigma * n)
        return fa0 + s * (fa1 - fa0), fb0 + t * (fb1 - fb0)
    if ka == 0 and kb == 0:
        gap_s = b_s - a_s - sigma * n
        if wp.dot(gap_epa, gap_epa) < wp.dot(gap_s, gap_s):  # the pair with the smaller gap (sap_ref)
            return a_epa, a_epa + sigma * n
        kb0 = b_s - sigma * n
        ka1 = a_s + sigma * n
        err_b = wp.dot(kb0 - a_epa, kb0 - a_epa) + wp.dot(b_s - b_epa, b_s - b_epa)
        err_a = wp.dot(a_s - a_epa, a_s - a_epa) + wp.dot(ka1 - b_epa, ka1 - b_epa)
        if err_b <= err_a:
            return kb0, b_s
        return a_s, ka1
    if ka == 0:
        if kb == 1:
            q = a_s + sigma * n
            t, u = segment_closest_params(fb0, fb1, q, q)
            gap_a = fb0 + t * (fb1 - fb0) - a_s - sigma * n
            if wp.dot(gap_epa, gap_epa) < wp.dot(gap_a, gap_a):
                return a_epa, a_epa + sigma * n
        return a_s, a_s + sigma * n
    if kb == 0:
        if ka == 1:
            q = b_s - sigma * n
            s, u = segment_closest_params(fa0, fa1, q, q)
            gap_b = b_s - sigma * n - fa0 - s * (fa1 - fa0)
            if wp.dot(gap_epa, gap_epa) < wp.dot(gap_b, gap_b):
                return a_epa, a_epa + sigma * n
        return b_s - sigma * n, b_s
    # One segment against a face or a point: the segment's point nearest EPA's witness on its shape,
    # kept, where the other is a face, to the part that moved by ±σn lies on it (sap_ref). One
    # inlined copy of the clamp for both sides (the kernel's stack).
    e0 = fb0
    e1 = fb1
    w = b_epa
    off = -(sigma * n)
    o_kind = A.kind
    o_p = A.p
    o_R = A.R
    o_size = A.size
    o_set = ka == 2
    if ka == 1:
        e0 = fa0
        e1 = fa1
        w = a_epa
        off = sigma * n
        o_kind = B.kind
        o_p = B.p
        o_R = B.R
        o_size = B.size
        o_set = kb == 2
    s, t = segment_closest_params(e0, e1, w, w)
    if o_set:
        found, t0, t1 = segment_in_core(o_kind, o_p, o_R, o_size, e0 + off, e1 + off)
        s = clamp_to(s, found, t0, t1)
    pe = e0 + s * (e1 - e0)
    if ka == 1:
        return pe, pe + off
    return pe + off, pe


@wp.func
def curved(s: Convex) -> int:
    """sap_ref.collision_convex._curved: a cylinder or ellipsoid core."""
    if s.kind == CYLINDER or s.kind == ELLIPSOID:
        return 1
    return 0


@wp.func
def convex_contact(G: Geometry, E: Epa, row: int, A: Convex, B: Convex):
    """sap_ref.collision_convex.convex_contact: (x0, x1, normal from A into B, phi)."""
    overlap, dist, a, b, n, W, WA, WB = gjk(G, A, B)
    nrm = zero3()
    phi_core = wp.float64(0.0)
    if overlap == 0:
        nrm = (b - a) / dist
        phi_core = dist
    else:
        depth, nrm, a, b, converged = epa(G, E, row, A, B, n, W, WA, WB)
        phi_core = -depth
        if converged == 0 or curved(A) == 1 or curved(B) == 1:
            n_r, sigma, a_s, b_s, moved = refine_penetration(G, A, B, nrm)
            if moved == 1 and (converged == 0 or sigma >= phi_core - wp.float64(EPA_TOL)):
                a, b = witnesses(G, A, B, n_r, sigma, a_s, b_s, a, b)
                nrm = n_r
                phi_core = sigma
    phi = phi_core - A.radius - B.radius
    x0 = a + A.radius * nrm
    x1 = b - B.radius * nrm
    mid = wp.float64(0.5) * (x0 + x1)
    half = wp.float64(0.5) * phi
    return mid - half * nrm, mid + half * nrm, nrm, phi

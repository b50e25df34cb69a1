"""General convex pairs: GJK (distance) and EPA (penetration), readable NumPy.

A shape is handled through its **core** and a **radius**: a sphere is its centre (a point) plus
its radius, a capsule its segment plus its radius, every other convex shape (box, cylinder,
ellipsoid, convex mesh, a height-field prism) is its own core with radius 0. For convex sets
the signed distance of the inflated shapes is the cores' signed distance minus the radii, in
separation and in penetration alike (the support function of a Minkowski sum with a ball is
h(n) + r), with the same normal; so GJK/EPA run on the cores (exact for polytope cores: a point,
a segment, a box, a mesh) and the radii are added at the end.

With D = A − B = {a − b} (the Minkowski difference of the two cores) and its support point
s_D(d) = s_A(d) − s_B(−d):

* **GJK** (Gilbert–Johnson–Keerthi, van den Bergen's formulation) finds the point v of D
  nearest the origin: from a simplex W of support points, v = the point of conv(W) nearest the
  origin (:func:`closest_on_simplex`, barycentric λ), W shrinks to the points carrying v, and
  w = s_D(−v) is added, until the duality gap |v|² − v·w ≤ ``GJK_REL_TOL``·|v|². Separated:
  distance |v|, witness points a = Σλᵢaᵢ, b = Σλᵢbᵢ, normal from A into B n̂ = (b − a)/|b − a|.
  A simplex that encloses the origin, or |v| ≤ ``GJK_TOUCH_DISTANCE``, means overlap.
* **EPA** (expanding polytope) starts from that simplex, blown up to a tetrahedron enclosing
  the origin, and grows a triangulated polytope inside D toward its boundary: the face nearest
  the origin (distance δ, outward normal n) gets the support point w = s_D(n); when
  n·w − δ ≤ ``EPA_TOL`` that face is on D's boundary, else the faces w sees are removed and w
  joined to their horizon. Penetration depth δ, normal from A into B n̂ = n (moving B by δn
  separates the shapes), witness points from the barycentric coordinates of δn in that face.
  Polytope pairs end exactly; a curved pair (ellipsoid, cylinder side) stops at
  ``EPA_MAX_VERTICES`` or when its depth meets ``EPA_TOL`` — with a normal good only to
  ~√(2·EPA_TOL/radius), the depth being stationary in the normal — and is then refined by
  maximizing the separation σ(n) (:func:`refine_penetration`): Newton steps where σ is smooth, and
  moves onto the kinks of the support functions (a box's or mesh's edges, a cylinder's or
  capsule's axis), where the optimum of a curved surface against an edge or a side line lies and
  the Newton steps stall. That fixes the normal to ~1e-8.

Result: ``(x0, x1, normal, phi)`` on the inflated shapes, x0 = a + r_A n̂, x1 = b − r_B n̂, then
made to satisfy x1 − x0 = φn̂ exactly by moving both symmetrically about their midpoint.
Degenerate inputs are deterministic: support ties take the first vertex (or the + side),
ties of nearest faces the first face. The shapes, their support functions and the closest point on
a simplex are in :mod:`sap_ref.collision_support`.
"""

from __future__ import annotations

import math

import numpy as np

from sap_common.constants import (
    EPA_MAX_FACES,
    EPA_MAX_VERTICES,
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
from sap_common.enums import ShapeType

from .collision_primitive import segment_closest_params
from .collision_support import (
    PRISM,
    TETRA_FACES,
    Convex,
    closest_on_simplex,
    closest_triangle,
    sgn,
    support,
    support_pair,
)

__all__ = ["gjk", "epa", "refine_penetration", "convex_contact"]


def gjk(A: Convex, B: Convex):
    """GJK on the cores. Returns ``("separated", dist, a, b)`` with witness points a ∈ A, b ∈ B,
    or ``("overlap", simplex)`` with the simplex [(w, a, b), …] for :func:`epa`."""
    d = A.p - B.p
    if not d @ d > 0.0:
        d = np.array([1.0, 0.0, 0.0])
    simplex = [support_pair(A, B, d)]
    v, lam = simplex[0][0].copy(), np.array([1.0])
    for _ in range(GJK_MAX_ITERATIONS):
        vv = v @ v
        if vv <= GJK_TOUCH_DISTANCE * GJK_TOUCH_DISTANCE:
            return ("overlap", simplex)
        w, a, b = support_pair(A, B, -v)
        if vv - v @ w <= GJK_REL_TOL * vv:
            break
        trial = simplex + [(w, a, b)]
        v_new, lam_new, keep = closest_on_simplex(np.array([s[0] for s in trial]))
        if len(keep) == 4:
            return ("overlap", trial)
        if not v_new @ v_new < vv:
            # No progress: the simplex is degenerate to rounding (a curved core clusters its
            # points). The segment from v (a point of D, with its witnesses) to w always gets
            # closer while the gap is open: continue from it.
            here = (v, sum(l * s[1] for l, s in zip(lam, simplex)), sum(l * s[2] for l, s in zip(lam, simplex)))
            trial = [here, (w, a, b)]
            v_new, lam_new, keep = closest_on_simplex(np.array([here[0], w]))
            if not v_new @ v_new < vv:  # rounding: v is as good as it gets
                break
        simplex, v, lam = [trial[k] for k in keep], v_new, lam_new
    a = sum(l * s[1] for l, s in zip(lam, simplex))
    b = sum(l * s[2] for l, s in zip(lam, simplex))
    return ("separated", math.sqrt(v @ v), a, b)


# ----------------------------------------------------------------------------- EPA

_AXES = np.eye(3)


def _blow_up(A: Convex, B: Convex, simplex):
    """Grow a GJK simplex that holds the origin to a tetrahedron of D (still holding it)."""
    simplex = list(simplex)
    if len(simplex) == 1:
        for e in _AXES:  # a second point: along the first axis that gives a distinct one
            for s in (1.0, -1.0):
                cand = support_pair(A, B, s * e)
                if np.linalg.norm(cand[0] - simplex[0][0]) > 0.0:
                    simplex.append(cand)
                    break
            if len(simplex) == 2:
                break
    if len(simplex) == 2:
        u = simplex[1][0] - simplex[0][0]
        k = int(np.argmin(np.abs(u)))
        d = np.cross(u, _AXES[k])
        for s in (1.0, -1.0):
            cand = support_pair(A, B, s * d)
            if np.linalg.norm(np.cross(cand[0] - simplex[0][0], u)) > 0.0:
                simplex.append(cand)
                break
    if len(simplex) == 3:
        nrm = np.cross(simplex[1][0] - simplex[0][0], simplex[2][0] - simplex[0][0])
        for s in (1.0, -1.0):
            cand = support_pair(A, B, s * nrm)
            if abs(nrm @ (cand[0] - simplex[0][0])) > 0.0:
                simplex.append(cand)
                break
    return simplex


def _face(P, i, j, k):
    """Outward unit normal and distance to the origin of face (i, j, k) of the polytope points P."""
    n = np.cross(P[j] - P[i], P[k] - P[i])
    nn = math.sqrt(n @ n)
    if not nn > 0.0:
        return None
    n = n / nn
    return n, float(n @ P[i])


def epa(A: Convex, B: Convex, simplex):
    """EPA from a GJK simplex holding the origin. Returns ``(depth, n, a, b, converged)``: the
    penetration depth δ ≥ 0 of the cores, the normal from A into B, the witness points on the
    cores, and whether the nearest face met ``EPA_TOL`` (else the vertex cap stopped it)."""
    simplex = _blow_up(A, B, simplex)
    if len(simplex) < 4:  # D is flat: only for degenerate (zero-volume) cores; touching
        w, a, b = simplex[0]
        return 0.0, np.array([0.0, 0.0, 1.0]), a, b, True
    P = [s[0] for s in simplex]
    PA = [s[1] for s in simplex]
    PB = [s[2] for s in simplex]
    faces = []  # [i, j, k, n, dist, alive]
    centre = sum(P) / 4.0
    for i, j, k, _ in TETRA_FACES:
        f = _face(P, i, j, k)
        if f is None:
            continue
        n, dist = f
        if n @ (centre - P[i]) > 0.0:  # orient outward
            j, k = k, j
            n, dist = -n, -dist
        faces.append([i, j, k, n, dist, True])
    best, converged = None, False
    for _ in range(EPA_MAX_VERTICES):
        alive = [f for f in faces if f[5]]
        if not alive:
            break
        best = min(alive, key=lambda f: f[4])  # first face on ties
        w, a, b = support_pair(A, B, best[3])
        if best[3] @ w - best[4] <= EPA_TOL:
            converged = True
            break
        if len(P) >= EPA_MAX_VERTICES:
            break
        new = len(P)
        visible = _visible_faces(faces, best, P, w)
        horizon = [(f[e], f[(e + 1) % 3]) for f in visible for e in range(3)
                   if not any(_neighbour(faces, f[(e + 1) % 3], f[e]) is v for v in visible)]
        if len(alive) - len(visible) + len(horizon) > EPA_MAX_FACES:  # no room: keep the best face so far
            break
        P.append(w)
        added = [(p, q, _face(P, p, q, new)) for p, q in horizon]
        if any(f is None or f[1] < best[4] - EPA_TOL for _, _, f in added):
            converged = True  # w is within rounding of the polytope (a sliver face would point inward)
            break
        PA.append(a)
        PB.append(b)
        for f in visible:
            f[5] = False
        for p, q, (n_new, d_new) in added:
            slot = next((s for s, f in enumerate(faces) if not f[5]), None)
            entry = [p, q, new, n_new, d_new, True]
            if slot is None:
                faces.append(entry)
            else:
                faces[slot] = entry
    # The nearest boundary point: the alive face nearest the origin as a triangle (not as a
    # plane). For a convex polytope the two agree; a sliver face from a slightly non-convex step
    # can have the nearest plane but a foot point outside itself, which would put the witnesses
    # off the surfaces.
    best_v, best_lam, best_idx = None, None, None
    for f in faces:
        if not f[5]:
            continue
        v, lam, keep = closest_triangle(np.array([P[f[0]], P[f[1]], P[f[2]]]), [0, 1, 2])
        if best_v is None or v @ v < best_v @ best_v:
            best_v, best_lam, best_idx = v, lam, [f[k] for k in keep]
    depth = math.sqrt(best_v @ best_v)
    n = best_v / depth if depth > 0.0 else best[3]
    a = sum(l * PA[i] for l, i in zip(best_lam, best_idx))
    b = sum(l * PB[i] for l, i in zip(best_lam, best_idx))
    return depth, n, a, b, converged


def _neighbour(faces, p, q):
    """The alive face holding the directed edge (p, q), or None."""
    for f in faces:
        if f[5] and ((f[0], f[1]) == (p, q) or (f[1], f[2]) == (p, q) or (f[2], f[0]) == (p, q)):
            return f
    return None


def _visible_faces(faces, seed, P, w):
    """The faces w sees (n·(w − p) > EPA_TOL), grown from ``seed`` across shared edges, in
    breadth-first order (edges in face order). Growing from the seed keeps the removed region in
    one piece, so the polytope stays a closed surface even where w is coplanar with some faces
    (flat caps and boxes give many), which a face-by-face test would break."""
    visible = [seed]
    i = 0
    while i < len(visible):
        f = visible[i]
        i += 1
        for e in range(3):
            g = _neighbour(faces, f[(e + 1) % 3], f[e])
            if g is not None and not any(g is v for v in visible) and g[3] @ (w - P[g[0]]) > EPA_TOL:
                visible.append(g)
    return visible


def _separation(A: Convex, B: Convex, n):
    """(σ(n), a, b): the cores' separation along the unit n, σ = n·(s_B(−n) − s_A(n)) (≤ the signed
    distance, equal at its normal), with the two support points."""
    a, b = support(A, n), support(B, -n)
    return float(n @ (b - a)), a, b


def _tangents(n):
    """Two unit vectors completing n to a right-handed orthonormal basis (fixed rule)."""
    k = int(np.argmin(np.abs(n)))
    t1 = np.cross(n, _AXES[k])
    t1 = t1 / math.sqrt(t1 @ t1)
    return t1, np.cross(n, t1)


def refine_penetration(A: Convex, B: Convex, n):
    """Maximize the separation σ(n) over unit normals, from EPA's n (which stopped at its vertex
    cap, ~1e-6 m short on curved cores): the signed distance is max σ(n) and its normal the
    maximizer. σ is smooth except across the kinks of the cores' support functions
    (:func:`_kink_axes`: a box's or mesh's edges, a cylinder's or capsule's axis), where the
    maximum often sits (an edge or a side line against the other shape). So up to
    ``REFINE_ROUNDS`` rounds of: Newton steps on the smooth σ (:func:`_newton`), then moves onto a
    kink or a crossing of two and Newton steps along a kink (:func:`_refine_on_kinks`); the rounds
    stop when the kink moves gain nothing. A round's Newton steps leave a kink the optimum is not
    on; its kink moves reach a crossing that the steps along one kink stalled next to.
    Returns ``(n, σ, a, b, moved)``: a and b the support points at n, moved whether n changed."""
    n_start = n
    sigma, a, b = _separation(A, B, n)
    for _ in range(REFINE_ROUNDS):
        n, sigma, a, b = _newton(A, B, n, sigma, a, b)
        n, sigma, a, b, moved = _refine_on_kinks(A, B, n, sigma, a, b)
        if not moved:
            break
    return n, sigma, a, b, not np.array_equal(n, n_start)


def _newton(A: Convex, B: Convex, n, sigma, a, b):
    """Newton steps on σ(n) where it is smooth. In the tangent basis (t₁, t₂) of n: gradient
    gᵢ = −tᵢ·x, x = s_A(n) − s_B(−n), and Hessian Hᵢⱼ = −tᵢ·∂x/∂θⱼ + δᵢⱼ n·x, ∂x/∂θⱼ by central
    differences (step ``REFINE_STEP``); a step θ = −H⁻¹g (or, where −H is not positive definite,
    a gradient step of length ``REFINE_STEP``) is taken when it raises σ by more than
    ``REFINE_MIN_GAIN``, halved up to ``REFINE_HALVINGS`` times. Within ``REFINE_STEP`` of a kink
    the differences straddle it and the steps stall. Returns ``(n, σ, a, b)``."""
    for _ in range(REFINE_ITERATIONS):
        t1, t2 = _tangents(n)
        x = a - b
        g = np.array([-(t1 @ x), -(t2 @ x)])
        if not g @ g > 0.0:
            break
        H = np.zeros((2, 2))
        for j, tj in enumerate((t1, t2)):
            xp = support(A, _unit(n + REFINE_STEP * tj)) - support(B, -_unit(n + REFINE_STEP * tj))
            xm = support(A, _unit(n - REFINE_STEP * tj)) - support(B, -_unit(n - REFINE_STEP * tj))
            dx = (xp - xm) / (2.0 * REFINE_STEP)
            H[0, j], H[1, j] = -(t1 @ dx), -(t2 @ dx)
        H = 0.5 * (H + H.T) + (n @ x) * np.eye(2)
        det = H[0, 0] * H[1, 1] - H[0, 1] * H[1, 0]
        if H[0, 0] < 0.0 and det > 0.0:  # −H positive definite: the Newton step of a maximum
            theta = -np.array([H[1, 1] * g[0] - H[0, 1] * g[1], H[0, 0] * g[1] - H[1, 0] * g[0]]) / det
        else:
            theta = REFINE_STEP * g / math.sqrt(g @ g)
        improved = False
        for _ in range(REFINE_HALVINGS):
            trial = _unit(n + theta[0] * t1 + theta[1] * t2)
            s_new, a_new, b_new = _separation(A, B, trial)
            if s_new > sigma + REFINE_MIN_GAIN:
                n, sigma, a, b, improved = trial, s_new, a_new, b_new, True
                break
            theta = 0.5 * theta
        if not improved:
            break
    return n, sigma, a, b


def _axis_of(shape: Convex):
    """The axis of a core whose support function has a kink across it (a cylinder's side, a
    capsule's segment: h(d) has a |d·axis| term), else None."""
    return shape.R[:, 2] if shape.kind in (ShapeType.CYLINDER, ShapeType.CAPSULE) else None


def _kink_axes(shape: Convex, d):
    """World unit axes â across whose great circle (d·â = 0) the core's support function h has a
    kink near the direction d, in a fixed order: a cylinder's or capsule's axis (h has a |d·â|
    term); a box's three axes (h = Σᵢ hᵢ|d·Rᵢ|); a convex mesh's edges at its support vertex
    along d (h is smooth inside the normal cone of each vertex and kinks across the cone's sides,
    one per edge at the vertex; a mesh's in face order, each edge as the one leaving the vertex
    in its face). Other cores: none, a height-field prism included: with its edges as kinks the two
    backends' refinements of a deep ellipsoid–prism pair parted (a random search found one 5 mm
    apart), so prisms keep the smooth Newton steps alone until that is understood."""
    if shape.kind in (ShapeType.CYLINDER, ShapeType.CAPSULE):
        return [shape.R[:, 2]]
    if shape.kind == ShapeType.BOX:
        return [shape.R[:, 0], shape.R[:, 1], shape.R[:, 2]]
    if shape.kind != ShapeType.CONVEX_MESH:
        return []
    i = int(np.argmax(shape.verts @ (shape.R.T @ d)))  # support_local's vertex
    others = []
    for _, _, idx in shape.faces:
        idx = [int(v) for v in idx]
        if i in idx:
            others.append(idx[(idx.index(i) + 1) % len(idx)])
    return [_unit(shape.R @ (shape.verts[j] - shape.verts[i])) for j in others]


def _refine_on_kinks(A: Convex, B: Convex, n, sigma, a, b):
    """Where a core's support has a kink (:func:`_kink_axes` of A along n and of B along −n), σ is
    not smooth across n ⊥ axis, and its maximum usually sits on that kink or on the crossing of
    two: a box's or mesh's edge, a cylinder or capsule lying against the other shape, a face
    (the crossing of two of its edges), an edge across a side line. Newton steps stall there
    with the normal tilted by up to ~``REFINE_STEP``. So also try n moved onto each kink i
    (n − (n·â)â, normalized), each followed by its crossings with the later ones (±âᵢ × âⱼ, toward
    n); keep the best σ (a later candidate must beat it by ``REFINE_MIN_GAIN``); then, on a kink,
    Newton along it (rotation about its axis, t = â × n) with the same rules.
    Returns ``(n, σ, a, b, moved)``."""
    axes = _kink_axes(A, n) + _kink_axes(B, -n)
    kink, moved = None, False
    candidates = []
    for i, ax in enumerate(axes):  # onto kink i, then onto its crossing with each later one
        v = n - (n @ ax) * ax
        if v @ v > 0.0:
            candidates.append((_unit(v), ax))
        for other in axes[i + 1:]:
            c = np.cross(ax, other)
            if c @ c > 0.0:
                c = _unit(c)
                candidates.append((c if c @ n >= 0.0 else -c, None))
    for trial, ax in candidates:
        s_new, a_new, b_new = _separation(A, B, trial)
        if s_new > sigma + REFINE_MIN_GAIN:
            n, sigma, a, b, kink, moved = trial, s_new, a_new, b_new, ax, True
    if kink is None:
        return n, sigma, a, b, moved
    for _ in range(REFINE_ITERATIONS):
        t = np.cross(kink, n)
        t = t / math.sqrt(t @ t)
        g = -(t @ (a - b))
        if not g * g > 0.0:
            break
        xp = support(A, _unit(n + REFINE_STEP * t)) - support(B, -_unit(n + REFINE_STEP * t))
        xm = support(A, _unit(n - REFINE_STEP * t)) - support(B, -_unit(n - REFINE_STEP * t))
        H = -(t @ ((xp - xm) / (2.0 * REFINE_STEP))) + n @ (a - b)
        theta = -g / H if H < 0.0 else REFINE_STEP * (1.0 if g > 0.0 else -1.0)
        improved = False
        for _ in range(REFINE_HALVINGS):
            trial = _unit(n + theta * t)
            s_new, a_new, b_new = _separation(A, B, trial)
            if s_new > sigma + REFINE_MIN_GAIN:
                n, sigma, a, b, improved = trial, s_new, a_new, b_new, True
                break
            theta = 0.5 * theta
        if not improved:
            break
    return n, sigma, a, b, moved


def _unit(v):
    return v / math.sqrt(v @ v)


def _support_feature(shape: Convex, d):
    """What the core's support set along d is: ``("point", None)`` when it is one point,
    ``("segment", (e0, e1))`` when it is a segment — a capsule's core or a cylinder's side line
    for d on the kink (|d·axis| ≤ ``KINK_TOL``), a box's or mesh's edge — and ``("set", None)``
    when it is a face (of a box, a mesh, a prism, a cylinder's cap). Polytope points count as tied
    when their support values agree within ``SUPPORT_TIE`` times the shape's size."""
    d = d / math.sqrt(d @ d)
    if shape.kind in (ShapeType.BOX, ShapeType.CONVEX_MESH, PRISM):
        if shape.kind == ShapeType.BOX:
            verts = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)]) * shape.size
        else:
            verts = shape.verts
        dots = verts @ (shape.R.T @ d)
        scale = float(np.max(np.abs(verts)))
        tied = np.flatnonzero(dots >= dots.max() - SUPPORT_TIE * scale)
        if len(tied) == 1:
            return "point", None
        if len(tied) == 2:
            e = shape.p + verts[tied] @ shape.R.T
            return "segment", (e[0], e[1])
        return "set", None
    ax = _axis_of(shape)
    if ax is None:
        return "point", None
    along = abs(d @ ax)
    if shape.kind == ShapeType.CYLINDER and along >= 1.0 - KINK_TOL:
        return "set", None
    if along > KINK_TOL:
        return "point", None
    hl = shape.size[1]
    centre = shape.p
    if shape.kind == ShapeType.CYLINDER:
        centre = support(shape, d) - sgn((shape.R.T @ d)[2]) * hl * ax  # the side line's middle
    return "segment", (centre - hl * ax, centre + hl * ax)


def _segment_in_core(shape: Convex, e0, e1):
    """``(t0, t1)``: the parameters of segment e0–e1 whose points lie in a box's or cylinder's solid
    core grown by ``WITNESS_CLAMP_TOL`` (an interval, as the core is convex), or None where no point
    does or the shape is of another kind."""
    if shape.kind not in (ShapeType.BOX, ShapeType.CYLINDER):
        return None
    l0, l1 = shape.R.T @ (e0 - shape.p), shape.R.T @ (e1 - shape.p)
    d = l1 - l0
    t0, t1 = 0.0, 1.0
    if shape.kind == ShapeType.BOX:
        slabs = [(k, shape.size[k]) for k in range(3)]
    else:
        slabs = [(2, shape.size[1])]
        r = shape.size[0] + WITNESS_CLAMP_TOL
        a = d[0] * d[0] + d[1] * d[1]
        b = 2.0 * (l0[0] * d[0] + l0[1] * d[1])
        c = l0[0] * l0[0] + l0[1] * l0[1] - r * r
        if a == 0.0:
            if c > 0.0:
                return None
        else:
            disc = b * b - 4.0 * a * c
            if disc < 0.0:
                return None
            root = math.sqrt(disc)
            t0, t1 = max(t0, (-b - root) / (2.0 * a)), min(t1, (-b + root) / (2.0 * a))
    for k, h in slabs:
        h = h + WITNESS_CLAMP_TOL
        if d[k] == 0.0:
            if abs(l0[k]) > h:
                return None
            continue
        ta, tb = (-h - l0[k]) / d[k], (h - l0[k]) / d[k]
        t0, t1 = max(t0, min(ta, tb)), min(t1, max(ta, tb))
    return (t0, t1) if t0 <= t1 else None


def _witnesses(A: Convex, B: Convex, n, sigma, a_s, b_s, a_epa, b_epa):
    """Witness points on the cores after a refinement to the normal n with separation σ.

    A single support point (:func:`_support_feature`) is the contact point: it is kept and the
    other witness rebuilt along n, unless EPA's pair is the more consistent with n: of the support
    point's rebuilt witness and EPA's pair, the one with the smaller gap to the other shape (to
    its support point or segment; for EPA's pair |b − a − σn|). Two support points: the rebuilding
    nearer EPA's own witnesses. Two segments
    (side lines, cores): their crossing seen along n (Ericson's closest points of A's segment and
    B's moved by −σn into A's plane). A segment against a face: the segment's point nearest EPA's
    witness (kept to the part of the segment that, moved along n, lies on the face: nearly parallel
    faces put a box's edge beyond a cap's rim). Two faces: EPA's witness on A."""
    (ka, fa), (kb, fb) = _support_feature(A, n), _support_feature(B, -n)
    gap_epa = b_epa - a_epa - sigma * n
    if ka == "set" and kb == "set":
        return a_epa, a_epa + sigma * n
    if ka == "segment" and kb == "segment":
        s, t = segment_closest_params(fa[0], fa[1], fb[0] - sigma * n, fb[1] - sigma * n)
        return fa[0] + s * (fa[1] - fa[0]), fb[0] + t * (fb[1] - fb[0])
    # A witness rebuilt along n lies within its gap (its distance to a known point or segment of
    # the other shape) of that shape. Where a cylinder's cap is nearly parallel to n (tilted by
    # 1e-5 to 3e-3 rad) and its rim meets another rim or an edge, the rim's support point swings
    # along the rim with the normal's last digits (gaps up to 8 cm), while EPA's witnesses stay
    # consistent (gaps ~1e-9 m): a support point is kept only if its gap is the smaller. Against a
    # face (a support set) there is no point of the other shape near the contact to measure a gap
    # to, and the rebuilt witness lands on the face's plane: the support point is kept.
    if ka == "point" and kb == "point":
        gap_s = b_s - a_s - sigma * n
        if gap_epa @ gap_epa < gap_s @ gap_s:
            return a_epa, a_epa + sigma * n
        keep_b = (b_s - sigma * n, b_s)
        keep_a = (a_s, a_s + sigma * n)
        err = lambda w: (w[0] - a_epa) @ (w[0] - a_epa) + (w[1] - b_epa) @ (w[1] - b_epa)  # noqa: E731
        return keep_b if err(keep_b) <= err(keep_a) else keep_a
    if ka == "point":
        if kb == "segment":
            t, _ = segment_closest_params(fb[0], fb[1], a_s + sigma * n, a_s + sigma * n)
            gap_s = fb[0] + t * (fb[1] - fb[0]) - a_s - sigma * n
            if gap_epa @ gap_epa < gap_s @ gap_s:
                return a_epa, a_epa + sigma * n
        return a_s, a_s + sigma * n
    if kb == "point":
        if ka == "segment":
            s, _ = segment_closest_params(fa[0], fa[1], b_s - sigma * n, b_s - sigma * n)
            gap_s = b_s - sigma * n - fa[0] - s * (fa[1] - fa[0])
            if gap_epa @ gap_epa < gap_s @ gap_s:
                return a_epa, a_epa + sigma * n
        return b_s - sigma * n, b_s
    if ka == "segment":
        s, _ = segment_closest_params(fa[0], fa[1], a_epa, a_epa)
        if kb == "set":  # the witness moved onto the other face must stay on it
            s = _clamp_to(s, _segment_in_core(B, fa[0] + sigma * n, fa[1] + sigma * n))
        a = fa[0] + s * (fa[1] - fa[0])
        return a, a + sigma * n
    t, _ = segment_closest_params(fb[0], fb[1], b_epa, b_epa)
    if ka == "set":
        t = _clamp_to(t, _segment_in_core(A, fb[0] - sigma * n, fb[1] - sigma * n))
    b = fb[0] + t * (fb[1] - fb[0])
    return b - sigma * n, b


def _clamp_to(t, interval):
    """t, or the nearest end of ``interval`` when t lies outside it (None: t)."""
    if interval is None:
        return t
    return min(max(t, interval[0]), interval[1])


def _curved(shape: Convex) -> bool:
    """A core with a curved surface (cylinder, ellipsoid): EPA's depth converges, but its normal
    only to about √(2·EPA_TOL/radius) (~5e-5 rad at 0.07 m): the depth is stationary in the
    normal. Their EPA result is always refined; polytope cores (point, segment, box, mesh, prism)
    end exactly."""
    return shape.kind in (ShapeType.CYLINDER, ShapeType.ELLIPSOID)


def convex_contact(A: Convex, B: Convex):
    """Signed distance of two convex shapes with witness points: ``(x0, x1, normal, phi)``, normal
    from A into B, x0 on A's surface, x1 on B's, x1 − x0 = φn̂ (module docstring).

    A refinement that moved the normal (:func:`refine_penetration`) also places the witness points
    (:func:`_witnesses`); otherwise they are EPA's (or GJK's)."""
    result = gjk(A, B)
    if result[0] == "separated":
        _, dist, a, b = result
        n = (b - a) / dist
        phi_core = dist
    else:
        depth, n, a, b, converged = epa(A, B, result[1])
        phi_core = -depth
        if not converged or _curved(A) or _curved(B):  # polish the normal (module docstring)
            n_r, sigma, a_s, b_s, moved = refine_penetration(A, B, n)
            # A converged EPA depth is good to EPA_TOL: keep the refined normal only when its
            # separation agrees (a refinement that stalled on a ridge would make φ worse).
            if moved and (not converged or sigma >= phi_core - EPA_TOL):
                n, phi_core = n_r, sigma
                a, b = _witnesses(A, B, n, sigma, a_s, b_s, a, b)
    phi = phi_core - A.radius - B.radius
    x0, x1 = a + A.radius * n, b - B.radius * n
    mid = 0.5 * (x0 + x1)
    return mid - 0.5 * phi * n, mid + 0.5 * phi * n, n, phi

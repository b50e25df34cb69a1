"""Stage 3 on the device, staged: Newton on ℓ(v) with per-world done flags (docs/formulation.md § Newton loop).

Counterpart of :mod:`sap_ref.contact_solve`. This is ``SolverSAP(newton_path="staged")`` (and
the PCR path); :mod:`sap_gpu.fused_newton` builds the default fused loop from the structs and
functions made here. One iteration for every world still running:

1. ``evaluate``: row velocities vc = J v, terms γ, G, ℓ, the gradient ∇ℓ = A(v − v*) − Jᵀγ,
   Drake's stopping tests over participating DOFs (optimality, then the cost criterion of the
   previous step, then the iteration cap); a world that goes on gets H = A + JᵀGJ (its lower
   triangle, all the Cholesky reads) and −∇ℓ in the linear-solve buffers and is counted in
   ``pending``. It writes only what it uses: γ and G of the rows in use, ℓ_A for the line
   search, H's rows below nv (the padding's identity is written once, at allocation).
2. the batched, masked Cholesky (:mod:`sap_gpu.linear_solve`) gives Δv for pending worlds;
   or, with ``contact_linear_solver="pcr"``, ``evaluate`` stores the factors G and diag(H)
   instead of H and ``newton_pcr`` runs matrix-free PCR on H·p = A·p + Jᵀ(G(J·p)), falling back
   to Δv = −P∇ℓ (flagged ``DIRECTION_FALLBACK``) when the PCR iterate is not a descent direction;
3. ``line_search``: the configured search along Δv, then v ← v + αΔv.

``solve`` loops with ``wp.capture_while`` on the number of pending worlds: no host
synchronization inside a CUDA graph. Non-participating DOFs start at v* with zero gradient, so
their Δv is exactly zero. Kernels are built per (objective scalar, linear-solve scalar, line
search, linear solver) on first use.
"""

from types import SimpleNamespace

import warp as wp

from sap_common.state import StepStatus

from .constraints import make_terms
from .line_search import make_line_search
from .linear_solve import make_pcr, pcr_types

wp.set_module_options({"enable_backward": False})

__all__ = ["NewtonKernels", "newton_kernels"]

CONVERGED = wp.constant(int(StepStatus.CONVERGED))
LINE_SEARCH_FAILURE = wp.constant(int(StepStatus.LINE_SEARCH_FAILURE))
MAX_ITERATIONS = wp.constant(int(StepStatus.MAX_ITERATIONS))
NON_FINITE = wp.constant(int(StepStatus.NON_FINITE))
LINEAR_SOLVE_FAILURE = wp.constant(int(StepStatus.LINEAR_SOLVE_FAILURE))
DIRECTION_FALLBACK = wp.constant(int(StepStatus.DIRECTION_FALLBACK))

_CACHE: dict = {}


class NewtonKernels:
    """The struct types and the kernels of one (T, TL, line search, linear solver) combination.

    ``funcs`` holds the per-row and per-DOF ``wp.func`` s of the objective (and the scalar types
    ``T``, ``TL``, ``V3``, ``M33``, the line-search variant), which the fused Newton kernel of
    :mod:`sap_gpu.fused_newton` is built from.
    """

    def __init__(self, Problem, Newton, PcrWork, evaluate, line_search, finish, newton_pcr, funcs):
        self.Problem, self.Newton, self.PcrWork = Problem, Newton, PcrWork
        self.evaluate, self.line_search, self.finish, self.newton_pcr = evaluate, line_search, finish, newton_pcr
        self.funcs = funcs


def newton_kernels(T, TL, variant: str, solver: str = "cholesky") -> NewtonKernels:
    key = (T, TL, variant, solver)
    if key not in _CACHE:
        _CACHE[key] = _build(T, TL, variant, solver)
    return _CACHE[key]


def _build(T, TL, variant, solver):
    V3 = wp.types.vector(3, T)
    M33 = wp.types.matrix((3, 3), T)
    V3L = wp.types.vector(3, TL)
    PcrWork, M33L = pcr_types(TL)
    matrix_free = solver == "pcr"
    friction_cone, limit_term, drive_term = make_terms(T)

    @wp.struct
    class Problem:
        """One step's SAP problem for every world (float64 inputs, read as T)."""
        nv: int
        n_pad: int
        limit_count: int
        drive_count: int
        h: wp.float64
        A: wp.array3d(dtype=wp.float64)
        v_star: wp.array2d(dtype=wp.float64)
        dof_mask: wp.array2d(dtype=int)
        contact_count: wp.array(dtype=int)
        contact_J: wp.array3d(dtype=wp.float64)
        contact_R: wp.array2d(dtype=wp.vec3d)
        contact_v_hat: wp.array2d(dtype=wp.float64)
        contact_mu: wp.array2d(dtype=wp.float64)
        limit_active: wp.array2d(dtype=int)
        limit_J: wp.array3d(dtype=wp.float64)
        limit_R: wp.array2d(dtype=wp.float64)
        limit_v_hat: wp.array2d(dtype=wp.float64)
        drive_dof: wp.array(dtype=int)
        drive_q0: wp.array2d(dtype=wp.float64)
        drive_Kp: wp.array2d(dtype=wp.float64)
        drive_Kd: wp.array2d(dtype=wp.float64)
        q_target: wp.array2d(dtype=wp.float64)
        v_target: wp.array2d(dtype=wp.float64)
        u0: wp.array2d(dtype=wp.float64)
        effort: wp.array(dtype=wp.float64)
        # Non-zero columns (constraints.row_support): of each contact's 3 rows, of each limit
        # row, of each row of A. Every J and A product below runs over these lists.
        contact_cols: wp.array3d(dtype=int)
        contact_ncols: wp.array2d(dtype=int)
        limit_cols: wp.array3d(dtype=int)
        limit_ncols: wp.array2d(dtype=int)
        A_cols: wp.array3d(dtype=int)
        A_ncols: wp.array2d(dtype=int)
        # Transposed: per DOF, the contacts and active limit rows listing it (the fused loop's lanes).
        dof_contacts: wp.array3d(dtype=int)
        dof_ncontacts: wp.array2d(dtype=int)
        dof_limits: wp.array3d(dtype=int)
        dof_nlimits: wp.array2d(dtype=int)
        # Newton state (objective scalar T)
        v: wp.array2d(dtype=T)
        dv: wp.array2d(dtype=T)
        grad: wp.array2d(dtype=T)
        vc: wp.array2d(dtype=T)
        dvc: wp.array2d(dtype=T)
        dp: wp.array2d(dtype=T)  # A v at the last evaluated v (the stopping test's momentum scale)
        line: wp.array2d(dtype=T)  # per world: ℓ_A(v), Δpᵀ(v − v*), ΔvᵀAΔv
        gamma: wp.array2d(dtype=T)  # per row: γ at the last evaluated v (contacts 3C, limits, drives)
        # G = −∂γ/∂vc of each row at the last evaluated v (stored by evaluate for the assembly of H).
        contact_G: wp.array2d(dtype=M33)
        limit_G: wp.array2d(dtype=T)
        drive_G: wp.array2d(dtype=T)

    @wp.struct
    class Newton:
        """Per-world iteration state and the solver settings."""
        ell: wp.array(dtype=T)
        ell_prev: wp.array(dtype=T)
        alpha_prev: wp.array(dtype=T)
        residual: wp.array(dtype=T)
        scale: wp.array(dtype=T)
        iterations: wp.array(dtype=int)
        ls_iterations: wp.array(dtype=int)
        done: wp.array(dtype=int)
        pending: wp.array(dtype=int)
        status: wp.array(dtype=int)
        count: wp.array(dtype=int)
        max_iterations: int
        ls_max_iterations: int
        abs_tol: T
        rel_tol: T
        cost_abs: T
        cost_rel: T
        rho: T
        armijo_c: T
        slop: T

    @wp.func
    def contact_vc(P: Problem, world: int, c: int, alpha: T) -> V3:
        r = 3 * c
        return V3(P.vc[world, r] + alpha * P.dvc[world, r], P.vc[world, r + 1] + alpha * P.dvc[world, r + 1],
                  P.vc[world, r + 2] + alpha * P.dvc[world, r + 2])

    @wp.func
    def contact_params(P: Problem, world: int, c: int):
        R = P.contact_R[world, c]
        return V3(T(R[0]), T(R[1]), T(R[2])), T(P.contact_v_hat[world, c]), T(P.contact_mu[world, c])

    @wp.func
    def sparse_row_dot(M: wp.array3d(dtype=wp.float64), cols: wp.array3d(dtype=int), ncols: wp.array2d(dtype=int),
                       world: int, row: int, x: wp.array2d(dtype=T)) -> T:
        """M[row] · x over the row's listed non-zero columns (rows of A, limit rows)."""
        s = T(0.0)
        for t in range(ncols[world, row]):
            k = cols[world, row, t]
            s = s + T(M[world, row, k]) * x[world, k]
        return s

    @wp.func
    def A_row_dot(P: Problem, world: int, i: int, x: wp.array2d(dtype=T)) -> T:
        """(A x)_i over the non-zero columns of row i."""
        return sparse_row_dot(P.A, P.A_cols, P.A_ncols, world, i, x)

    @wp.func
    def A_row_dots(P: Problem, world: int, i: int):
        """(A (v − v*))_i and (A v)_i in one pass over the non-zero columns of row i."""
        s = T(0.0)
        sv = T(0.0)
        for t in range(P.A_ncols[world, i]):
            k = P.A_cols[world, i, t]
            a = T(P.A[world, i, k])
            s = s + a * (P.v[world, k] - T(P.v_star[world, k]))
            sv = sv + a * P.v[world, k]
        return s, sv

    @wp.func
    def contact_rows_dot(P: Problem, world: int, c: int, x: wp.array2d(dtype=T)) -> V3:
        """(J_c x) for the 3 rows of contact c, over its non-zero columns."""
        s = V3(T(0.0), T(0.0), T(0.0))
        for t in range(P.contact_ncols[world, c]):
            k = P.contact_cols[world, c, t]
            s = s + V3(T(P.contact_J[world, 3 * c, k]), T(P.contact_J[world, 3 * c + 1, k]),
                       T(P.contact_J[world, 3 * c + 2, k])) * x[world, k]
        return s

    @wp.func
    def limit_row_dot(P: Problem, world: int, r: int, x: wp.array2d(dtype=T)) -> T:
        """J_r x of limit row r over its non-zero columns (0 for an inactive row: empty list)."""
        return sparse_row_dot(P.limit_J, P.limit_cols, P.limit_ncols, world, r, x)

    @wp.func
    def drive_params(P: Problem, world: int, i: int):
        dof = P.drive_dof[i]
        return (T(P.drive_q0[world, i]), T(P.q_target[world, dof]), T(P.v_target[world, dof]),
                T(P.u0[world, dof]), T(P.drive_Kp[world, i]), T(P.drive_Kd[world, i]), T(P.effort[dof]))

    @wp.func
    def phi(P: Problem, world: int, lane: int, alpha: T):
        """ℓ(v + αΔv), dℓ/dα, d²ℓ/dα²: dynamics part from P.line, terms recomputed.

        docs/formulation.md § Line searches.
        """
        ell = P.line[world, 0] + alpha * P.line[world, 1] + T(0.5) * alpha * alpha * P.line[world, 2]
        dell = P.line[world, 1] + alpha * P.line[world, 2]
        d2ell = P.line[world, 2]
        for c in range(P.contact_count[world]):
            R, vh, mu = contact_params(P, world, c)
            g, G, l, mode = friction_cone(contact_vc(P, world, c, alpha), R, vh, mu)
            d = V3(P.dvc[world, 3 * c], P.dvc[world, 3 * c + 1], P.dvc[world, 3 * c + 2])
            ell = ell + l
            dell = dell - wp.dot(d, g)
            d2ell = d2ell + wp.dot(d, G * d)
        o = P.contact_J.shape[1]
        for r in range(P.limit_count):
            if P.limit_active[world, r] != 0:
                vc = P.vc[world, o + r] + alpha * P.dvc[world, o + r]
                gl, Gl, ll = limit_term(vc, T(P.limit_R[world, r]), T(P.limit_v_hat[world, r]))
                ell = ell + ll
                dell = dell - P.dvc[world, o + r] * gl
                d2ell = d2ell + P.dvc[world, o + r] * Gl * P.dvc[world, o + r]
        o2 = o + P.limit_count
        h = T(P.h)
        for i in range(P.drive_count):
            q0, qt, vt, u, Kp, Kd, e = drive_params(P, world, i)
            vcd = P.vc[world, o2 + i] + alpha * P.dvc[world, o2 + i]
            gd, Gd, ld = drive_term(vcd, h, q0, qt, vt, u, Kp, Kd, e)
            ell = ell + ld
            dell = dell - P.dvc[world, o2 + i] * gd
            d2ell = d2ell + P.dvc[world, o2 + i] * Gd * P.dvc[world, o2 + i]
        return ell, dell, d2ell

    search = make_line_search(T, phi, Problem, variant)

    @wp.func
    def contact_row_J(P: Problem, world: int, c: int, k: int) -> V3L:
        return V3L(TL(P.contact_J[world, 3 * c, k]), TL(P.contact_J[world, 3 * c + 1, k]),
                   TL(P.contact_J[world, 3 * c + 2, k]))

    @wp.func
    def store_pcr_terms(P: Problem, S: PcrWork, world: int, rhs: wp.array3d(dtype=TL)):
        """rhs = −∇ℓ; S: G of every row (evaluate's, rounded to TL) and diag(H) = diag(A) + Σ (JᵢᵀGᵢJᵢ)_kk."""
        nv = P.nv
        for i in range(nv):  # the padding rows stay 0 from allocation
            rhs[world, i, 0] = TL(-P.grad[world, i])
            S.diag[world, i] = TL(P.A[world, i, i])
        for c in range(P.contact_count[world]):
            G = P.contact_G[world, c]
            GL = M33L(TL(G[0, 0]), TL(G[0, 1]), TL(G[0, 2]), TL(G[1, 0]), TL(G[1, 1]), TL(G[1, 2]),
                      TL(G[2, 0]), TL(G[2, 1]), TL(G[2, 2]))
            S.contact_G[world, c] = GL
            for t in range(P.contact_ncols[world, c]):
                k = P.contact_cols[world, c, t]
                Jk = contact_row_J(P, world, c, k)
                S.diag[world, k] = S.diag[world, k] + wp.dot(Jk, GL * Jk)
        for r in range(P.limit_count):
            S.limit_G[world, r] = TL(0.0)
            if P.limit_active[world, r] != 0:
                GlL = TL(P.limit_G[world, r])
                S.limit_G[world, r] = GlL
                for t in range(P.limit_ncols[world, r]):
                    k = P.limit_cols[world, r, t]
                    Jl = TL(P.limit_J[world, r, k])
                    S.diag[world, k] = S.diag[world, k] + Jl * GlL * Jl
        for i in range(P.drive_count):
            S.drive_G[world, i] = TL(P.drive_G[world, i])
            dof = P.drive_dof[i]
            S.diag[world, dof] = S.diag[world, dof] + S.drive_G[world, i]

    @wp.func
    def hessian_product(P: Problem, S: PcrWork, world: int, n: int, src: wp.array2d(dtype=TL),
                        dst: wp.array2d(dtype=TL)):
        """dst = A src + Σᵢ Jᵢᵀ(Gᵢ(Jᵢ src)), every factor rounded to TL (sap_ref.hessian_product)."""
        for i in range(P.nv):
            s = TL(0.0)
            for t in range(P.A_ncols[world, i]):
                k = P.A_cols[world, i, t]
                s = s + TL(P.A[world, i, k]) * src[world, k]
            dst[world, i] = s
        for c in range(P.contact_count[world]):
            n = P.contact_ncols[world, c]
            u = V3L(TL(0.0), TL(0.0), TL(0.0))
            for t in range(n):
                k = P.contact_cols[world, c, t]
                u = u + contact_row_J(P, world, c, k) * src[world, k]
            g = S.contact_G[world, c] * u
            for t in range(n):
                k = P.contact_cols[world, c, t]
                dst[world, k] = dst[world, k] + wp.dot(contact_row_J(P, world, c, k), g)
        for r in range(P.limit_count):
            if P.limit_active[world, r] != 0:
                n = P.limit_ncols[world, r]
                ul = TL(0.0)
                for t in range(n):
                    k = P.limit_cols[world, r, t]
                    ul = ul + TL(P.limit_J[world, r, k]) * src[world, k]
                gl = S.limit_G[world, r] * ul
                for t in range(n):
                    k = P.limit_cols[world, r, t]
                    dst[world, k] = dst[world, k] + TL(P.limit_J[world, r, k]) * gl
        for i in range(P.drive_count):
            dof = P.drive_dof[i]
            dst[world, dof] = dst[world, dof] + S.drive_G[world, i] * src[world, dof]

    pcr_iterate = make_pcr(TL, Problem, hessian_product)

    @wp.kernel(enable_backward=False, module="unique")
    def evaluate(P: Problem, N: Newton, S: PcrWork, H: wp.array3d(dtype=TL), rhs: wp.array3d(dtype=TL)):
        world = wp.tid()
        N.pending[world] = 0
        if N.done[world] != 0:
            return
        nv = P.nv
        o = P.contact_J.shape[1]
        o2 = o + P.limit_count
        zero = T(0.0)
        # Row velocities vc = J v.
        for c in range(P.contact_count[world]):
            Jv = contact_rows_dot(P, world, c, P.v)
            for a in range(3):
                P.vc[world, 3 * c + a] = Jv[a]
        for r in range(P.limit_count):
            P.vc[world, o + r] = limit_row_dot(P, world, r, P.v)
        for i in range(P.drive_count):
            P.vc[world, o2 + i] = P.v[world, P.drive_dof[i]]
        # ℓ_A and A(v − v*) into grad, A v (for the momentum scale) into dp: one pass over A.
        ell = zero
        for i in range(nv):
            Adv, Av = A_row_dots(P, world, i)
            P.grad[world, i] = Adv
            P.dp[world, i] = Av
            ell = ell + T(0.5) * (P.v[world, i] - T(P.v_star[world, i])) * Adv
        P.line[world, 0] = ell  # ℓ_A(v): the line search's quadratic part starts here
        # Terms; Jᵀγ is accumulated into dv (scratch here) and subtracted from the gradient. G of
        # every row is kept for H.
        for k in range(nv):
            P.dv[world, k] = zero
        for c in range(P.contact_count[world]):
            R, vh, mu = contact_params(P, world, c)
            g, G, l, mode = friction_cone(contact_vc(P, world, c, zero), R, vh, mu)
            ell = ell + l
            P.contact_G[world, c] = G
            for a in range(3):
                P.gamma[world, 3 * c + a] = g[a]
            for t in range(P.contact_ncols[world, c]):
                k = P.contact_cols[world, c, t]
                P.dv[world, k] = P.dv[world, k] + T(P.contact_J[world, 3 * c, k]) * g[0] + T(
                    P.contact_J[world, 3 * c + 1, k]) * g[1] + T(P.contact_J[world, 3 * c + 2, k]) * g[2]
        for r in range(P.limit_count):
            P.gamma[world, o + r] = zero
            P.limit_G[world, r] = zero
            if P.limit_active[world, r] != 0:
                gl, Gl, ll = limit_term(P.vc[world, o + r], T(P.limit_R[world, r]), T(P.limit_v_hat[world, r]))
                ell = ell + ll
                P.gamma[world, o + r] = gl
                P.limit_G[world, r] = Gl
                for t in range(P.limit_ncols[world, r]):
                    k = P.limit_cols[world, r, t]
                    P.dv[world, k] = P.dv[world, k] + T(P.limit_J[world, r, k]) * gl
        h = T(P.h)
        for i in range(P.drive_count):
            q0, qt, vt, u, Kp, Kd, e = drive_params(P, world, i)
            gd, Gd, ld = drive_term(P.vc[world, o2 + i], h, q0, qt, vt, u, Kp, Kd, e)
            ell = ell + ld
            P.gamma[world, o2 + i] = gd
            P.drive_G[world, i] = Gd
            P.dv[world, P.drive_dof[i]] = P.dv[world, P.drive_dof[i]] + gd
        # Stopping tests over participating DOFs (docs/formulation.md § Stopping criteria): D̃ = diag(A)^(-1/2).
        r2 = zero
        sA = zero
        sJ = zero
        finite = int(1)
        for i in range(nv):
            P.grad[world, i] = P.grad[world, i] - P.dv[world, i]
            if not wp.isfinite(P.grad[world, i]):
                finite = 0
            if P.dof_mask[world, i] != 0:
                d = T(1.0) / wp.sqrt(T(P.A[world, i, i]))
                Av = P.dp[world, i]
                r2 = r2 + d * d * P.grad[world, i] * P.grad[world, i]
                sA = sA + d * d * Av * Av
                sJ = sJ + d * d * P.dv[world, i] * P.dv[world, i]
        if not wp.isfinite(ell):
            finite = 0
        residual = wp.sqrt(r2)
        scale = wp.max(wp.sqrt(sA), wp.sqrt(sJ))
        N.residual[world] = residual
        N.scale[world] = scale
        N.ell[world] = ell
        if finite == 0:
            N.status[world] = N.status[world] | NON_FINITE
            N.done[world] = 1
            return
        cost_reached = int(0)
        if N.iterations[world] > 0:
            e0 = N.ell_prev[world]
            if wp.abs(e0 - ell) < N.cost_abs + N.cost_rel * T(0.5) * (wp.abs(ell) + wp.abs(e0)):
                if N.alpha_prev[world] > T(0.5):
                    cost_reached = 1
        if residual <= N.abs_tol + N.rel_tol * scale or cost_reached == 1:
            N.status[world] = N.status[world] | CONVERGED
            N.done[world] = 1
            return
        if N.iterations[world] == N.max_iterations:
            N.status[world] = N.status[world] | MAX_ITERATIONS
            N.done[world] = 1
            return
        if wp.static(matrix_free):
            # PCR: −∇ℓ, the factors G and diag(H) in TL; H itself is never formed.
            store_pcr_terms(P, S, world, rhs)
            N.pending[world] = 1
            wp.atomic_add(N.count, 0, 1)
            return
        # H = A + Jᵀ G J (lower triangle: the Cholesky reads nothing else; the padding rows and
        # columns hold the identity from allocation), and −∇ℓ, in the linear-solve scalar TL.
        for i in range(nv):
            rhs[world, i, 0] = TL(-P.grad[world, i])
            for k in range(i + 1):
                H[world, i, k] = TL(P.A[world, i, k])
        for c in range(P.contact_count[world]):
            G = P.contact_G[world, c]
            n = P.contact_ncols[world, c]
            for ti in range(n):
                i = P.contact_cols[world, c, ti]
                Ji = V3(T(P.contact_J[world, 3 * c, i]), T(P.contact_J[world, 3 * c + 1, i]),
                        T(P.contact_J[world, 3 * c + 2, i]))
                GJi = wp.transpose(G) * Ji
                for tk in range(ti + 1):  # columns ascend: k ≤ i
                    k = P.contact_cols[world, c, tk]
                    Jk = V3(T(P.contact_J[world, 3 * c, k]), T(P.contact_J[world, 3 * c + 1, k]),
                            T(P.contact_J[world, 3 * c + 2, k]))
                    H[world, i, k] = H[world, i, k] + TL(wp.dot(GJi, Jk))
        for r in range(P.limit_count):
            Gl = P.limit_G[world, r]
            if P.limit_active[world, r] != 0 and Gl != zero:
                n = P.limit_ncols[world, r]
                for ti in range(n):
                    i = P.limit_cols[world, r, ti]
                    for tk in range(ti + 1):
                        k = P.limit_cols[world, r, tk]
                        H[world, i, k] = H[world, i, k] + TL(Gl * T(P.limit_J[world, r, i]) * T(P.limit_J[world, r, k]))
        for i in range(P.drive_count):
            dof = P.drive_dof[i]
            H[world, dof, dof] = H[world, dof, dof] + TL(P.drive_G[world, i])
        N.pending[world] = 1
        wp.atomic_add(N.count, 0, 1)

    @wp.kernel(enable_backward=False, module="unique")
    def line_search(P: Problem, N: Newton, dv_in: wp.array3d(dtype=TL), solve_failed: wp.array(dtype=int)):
        world = wp.tid()
        if N.pending[world] == 0:
            return
        nv = P.nv
        zero = T(0.0)
        if solve_failed[world] != 0:  # a Cholesky pivot that is not finite and > 0
            N.status[world] = N.status[world] | LINEAR_SOLVE_FAILURE
            N.done[world] = 1
            return
        for k in range(nv):
            P.dv[world, k] = T(dv_in[world, k, 0])
            if not wp.isfinite(P.dv[world, k]):
                N.status[world] = N.status[world] | LINEAR_SOLVE_FAILURE
                N.done[world] = 1
                return
        o = P.contact_J.shape[1]
        o2 = o + P.limit_count
        for c in range(P.contact_count[world]):
            Jdv = contact_rows_dot(P, world, c, P.dv)
            for a in range(3):
                P.dvc[world, 3 * c + a] = Jdv[a]
        for r in range(P.limit_count):
            P.dvc[world, o + r] = limit_row_dot(P, world, r, P.dv)
        for i in range(P.drive_count):
            P.dvc[world, o2 + i] = P.dv[world, P.drive_dof[i]]
        slope = zero
        curvature = zero
        dphi0 = zero
        for i in range(nv):
            dp = A_row_dot(P, world, i, P.dv)
            dvs = P.v[world, i] - T(P.v_star[world, i])
            slope = slope + dp * dvs
            curvature = curvature + dp * P.dv[world, i]
            dphi0 = dphi0 + P.grad[world, i] * P.dv[world, i]
        # P.line[world, 0] = ℓ_A(v), the sum evaluate formed at this v.
        P.line[world, 1] = slope
        P.line[world, 2] = curvature
        alpha, evals, failed = search(P, world, 0, N.ell[world], dphi0, N.ls_max_iterations, N.rho, N.armijo_c, N.slop,
                                      N.cost_abs, N.cost_rel)
        N.iterations[world] = N.iterations[world] + 1
        N.ls_iterations[world] = N.ls_iterations[world] + evals
        if failed != 0:
            N.status[world] = N.status[world] | LINE_SEARCH_FAILURE
            N.done[world] = 1
            return
        for k in range(nv):
            P.v[world, k] = P.v[world, k] + alpha * P.dv[world, k]
        N.alpha_prev[world] = alpha
        N.ell_prev[world] = N.ell[world]

    @wp.kernel(enable_backward=False, module="unique")
    def finish(P: Problem, v1_out: wp.array2d(dtype=wp.float64)):
        world = wp.tid()
        for k in range(P.nv):
            if P.dof_mask[world, k] != 0:
                v1_out[world, k] = wp.float64(P.v[world, k])
            else:
                v1_out[world, k] = P.v_star[world, k]

    @wp.kernel(enable_backward=False, module="unique")
    def newton_pcr(P: Problem, N: Newton, S: PcrWork, rhs: wp.array3d(dtype=TL), dv_out: wp.array3d(dtype=TL)):
        """Δv of every pending world by PCR; −P∇ℓ (flagged) if that is not a finite descent direction."""
        world = wp.tid()
        if N.pending[world] == 0:
            return
        nv = P.nv
        for i in range(nv):
            S.pinv[world, i] = TL(1.0) / (S.diag[world, i] + S.regularization)
        k, relative = pcr_iterate(P, S, world, nv, rhs)
        S.iterations[world] = S.iterations[world] + k
        S.residual[world] = wp.max(S.residual[world], relative)
        slope = T(0.0)
        finite = int(1)
        for i in range(nv):
            if not wp.isfinite(S.best[world, i]):
                finite = 0
            slope = slope + P.grad[world, i] * T(S.best[world, i])
        descent = finite == 1 and slope < T(0.0)
        if not descent:
            N.status[world] = N.status[world] | DIRECTION_FALLBACK
        for i in range(dv_out.shape[1]):
            dv_out[world, i, 0] = TL(0.0)
        for i in range(nv):
            if descent:
                dv_out[world, i, 0] = S.best[world, i]
            else:
                dv_out[world, i, 0] = S.pinv[world, i] * rhs[world, i, 0]

    funcs = SimpleNamespace(T=T, TL=TL, V3=V3, M33=M33, variant=variant, contact_params=contact_params,
                            contact_rows_dot=contact_rows_dot, limit_row_dot=limit_row_dot, A_row_dot=A_row_dot,
                            A_row_dots=A_row_dots, drive_params=drive_params, friction_cone=friction_cone,
                            limit_term=limit_term, drive_term=drive_term)
    return NewtonKernels(Problem, Newton, PcrWork, evaluate, line_search, finish, newton_pcr, funcs)

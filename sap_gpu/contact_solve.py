"""Stage 3 on the device, staged: Newton on ℓ(v) with per-world done flags (docs/formulation.md § Newton loop).

Counterpart of :mod:`sap_ref.contact_solve`. This is ``newton_path="staged"`` (and the PCR
path); the default fused loop is :mod:`sap_gpu.contact_solve_fused`. Both are built from the
same structs and per-row functions (:mod:`sap_gpu.contact_problem`); here every function runs
over all of a world's rows in the world's thread. One iteration for every world still running:

1. ``evaluate``: A(v − v*) and ℓ_A, row velocities vc = J v, terms γ, G, ℓ, the gradient
   ∇ℓ = A(v − v*) − Jᵀγ, Drake's stopping tests over participating DOFs (optimality, then the
   cost criterion of the previous step, then the iteration cap); a world that goes on gets
   H = A + JᵀGJ (its lower triangle, all the Cholesky reads) and −∇ℓ in the linear-solve
   buffers and is counted in ``pending``. It writes only what it uses: γ and G of the rows in
   use, ℓ_A for the line search, H's rows below nv (the padding's identity is written once,
   at allocation).
2. the batched, masked Cholesky (:mod:`sap_gpu.linear_solve`) gives Δv for pending worlds;
   or, with ``contact_linear_solver="pcr"``, ``evaluate`` stores the factors G and diag(H)
   instead of H and ``newton_pcr`` runs matrix-free PCR on H·p = A·p + Jᵀ(G(J·p)), falling back
   to Δv = −P∇ℓ (flagged ``DIRECTION_FALLBACK``) when the PCR iterate is not a descent direction;
3. ``line_search``: Δvc = J Δv, the configured search along Δv, then v ← v + αΔv.

The solver loops with ``wp.capture_while`` on the number of pending worlds: no host
synchronization inside a CUDA graph. Non-participating DOFs start at v* with zero gradient, so
their Δv is exactly zero. Kernels are built per (objective scalar, linear-solve scalar, line
search, linear solver) on first use.
"""

import warp as wp

from sap_common.state import StepStatus

from .contact_problem import ROW_END, hessian_functions, row_functions
from .launch import built_once
from .line_search import make_line_search
from .linear_solve import make_pcr, pcr_types

wp.set_module_options({"enable_backward": False})

__all__ = ["NewtonKernels", "newton_kernels"]

LINE_SEARCH_FAILURE = wp.constant(int(StepStatus.LINE_SEARCH_FAILURE))
NON_FINITE = wp.constant(int(StepStatus.NON_FINITE))
LINEAR_SOLVE_FAILURE = wp.constant(int(StepStatus.LINEAR_SOLVE_FAILURE))
DIRECTION_FALLBACK = wp.constant(int(StepStatus.DIRECTION_FALLBACK))

class NewtonKernels:
    """The struct types and the staged kernels of one (T, TL, line search, linear solver) combination."""

    def __init__(self, Problem, Newton, PcrWork, evaluate, line_search, finish, newton_pcr):
        self.Problem, self.Newton, self.PcrWork = Problem, Newton, PcrWork
        self.evaluate, self.line_search, self.finish, self.newton_pcr = evaluate, line_search, finish, newton_pcr


def newton_kernels(plan) -> NewtonKernels:
    """The staged kernels of a :class:`~sap_gpu.plan.NewtonPlan`: its objective and linear-solve
    scalars, line search, linear solver (``"cholesky"`` or ``"pcr"``) and contact approximation
    (``sap``, ``lagged``, ``similar``), built on first use. A fused plan has them too: its
    solver's ``evaluate_at`` and PCR never need them, but the staged ``evaluate`` is the reference
    the tests hold the fused kernel to."""
    return _build(plan.T, plan.TL, plan.line_search, plan.linear_solver, plan.approximation, plan.kinematic)


@built_once()
def _build(T, TL, variant, solver, approximation, kinematic):
    f = row_functions(T, approximation, kinematic)
    hf = hessian_functions(T, TL)
    Problem, Newton = f.Problem, f.Newton
    V3L = wp.types.vector(3, TL)
    PcrWork, M33L = pcr_types(TL)
    matrix_free = solver == "pcr"

    @wp.func
    def phi(P: Problem, world: int, lane: int, alpha: T):
        """φ(α), φ'(α), φ''(α) of one world, every row in this thread."""
        s = f.cost_along_line(P, world, lane, 1, alpha)
        return s[0], s[1], s[2]

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
        for r in range(P.row_start[ROW_END]):
            S.row_G[world, r] = TL(0.0)
            if P.row_active[world, r] != 0:
                GrL = TL(P.row_G[world, r])
                S.row_G[world, r] = GrL
                for t in range(P.row_ncols[world, r]):
                    k = P.row_cols[world, r, t]
                    Jr = TL(P.row_J[world, r, k])
                    S.diag[world, k] = S.diag[world, k] + Jr * GrL * Jr

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
        for r in range(P.row_start[ROW_END]):
            if P.row_active[world, r] != 0:
                n = P.row_ncols[world, r]
                ur = TL(0.0)
                for t in range(n):
                    k = P.row_cols[world, r, t]
                    ur = ur + TL(P.row_J[world, r, k]) * src[world, k]
                gr = S.row_G[world, r] * ur
                for t in range(n):
                    k = P.row_cols[world, r, t]
                    dst[world, k] = dst[world, k] + TL(P.row_J[world, r, k]) * gr

    pcr_iterate = make_pcr(TL, Problem, hessian_product)

    @wp.kernel(enable_backward=False, module="unique")
    def evaluate(P: Problem, N: Newton, S: PcrWork, H: wp.array3d(dtype=TL), rhs: wp.array3d(dtype=TL)):
        world = wp.tid()
        N.pending[world] = 0
        if N.done[world] != 0:
            return
        ell_A = f.momentum_pass(P, world, 0, 1)  # grad = A(v − v*), dp = A v
        P.line[world, 0] = ell_A  # ℓ_A(v): the line search's quadratic part starts here
        ell = f.evaluate_rows(P, world, 0, 1, ell_A)  # vc = J v, γ, G of every row
        r2, sA, sJ, bad = f.gradient_pass(P, world, 0, 1)  # ∇ℓ = A(v − v*) − Jᵀγ, stopping sums
        residual = wp.sqrt(r2)
        scale = wp.max(wp.sqrt(sA), wp.sqrt(sJ))
        N.residual[world] = residual
        N.scale[world] = scale
        N.ell[world] = ell
        if bad != T(0.0) or not wp.isfinite(ell):
            N.status[world] = N.status[world] | NON_FINITE
            N.done[world] = 1
            return
        stop = f.newton_stop(N, N.iterations[world], ell, N.ell_prev[world], N.alpha_prev[world], residual, scale)
        if stop != 0:
            N.status[world] = N.status[world] | stop
            N.done[world] = 1
            return
        if wp.static(matrix_free):
            # PCR: −∇ℓ, the factors G and diag(H) in TL; H itself is never formed.
            store_pcr_terms(P, S, world, rhs)
        else:
            hf.hessian_rows(P, world, 0, 1, H, rhs)  # H = A + JᵀGJ (lower triangle) and −∇ℓ in TL
        N.pending[world] = 1
        wp.atomic_add(N.count, 0, 1)

    @wp.kernel(enable_backward=False, module="unique")
    def line_search(P: Problem, N: Newton, dv_in: wp.array3d(dtype=TL), solve_failed: wp.array(dtype=int)):
        world = wp.tid()
        if N.pending[world] == 0:
            return
        nv = P.nv
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
        f.direction_rows(P, world, 0, 1)  # Δvc = J Δv
        q = f.direction_sums(P, world, 0, 1)
        # P.line[world, 0] = ℓ_A(v), the sum evaluate formed at this v.
        P.line[world, 1] = q[0]
        P.line[world, 2] = q[1]
        alpha, evals, failed = search(P, world, 0, N.ell[world], q[2], N.line_search)
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

    return NewtonKernels(Problem, Newton, PcrWork, evaluate, line_search, finish, newton_pcr)

"""Stage 3, fused: one block of threads per world runs that world's whole Newton loop.

The staged path (:mod:`sap_gpu.contact_solve`) runs one Newton iteration of every world per
trip of a ``wp.capture_while`` (evaluate, Cholesky, line search: about five device operations a
trip) and the batch makes as many trips as its slowest world needs. Here one launch
(``wp.launch_tiled``, :data:`sap_gpu.launch.TILE_BLOCK_DIM` lanes per world) does everything of
a step's stage 3 for a world, from the warm start to v₁:

    v ← v_init
    loop:  evaluate   lanes over DOFs: A(v − v*), A v, ℓ_A;  lanes over rows (contacts, limits,
                      drives): vc = J v, γ, G, ℓᵢ;  lanes over DOFs: ∇ℓ = A(v − v*) − Jᵀγ and the
                      stopping sums;  one block reduction (ℓ, ℓ_A, the three norms, a finite flag)
           stop?      the staged path's tests, in the same order (NON_FINITE, CONVERGED, MAX_ITERATIONS)
           H          lanes over rows of H: row i = A_i + Σ JᵢᵀGJ over the rows touching DOF i,
                      lower triangle only, −∇ℓ alongside
           solve      the block's tile Cholesky factor and solve, pivots checked
                      (blocked_cholesky.single_factor_solve / blocked_factor_solve)
           line search  lanes over rows: Δvc = J Δv;  lanes over DOFs: the slope terms;  block
                      reductions;  then the configured search, whose φ(α) spreads the rows over
                      the lanes and block-sums ℓ, dℓ/dα, d²ℓ/dα²
           v ← v + αΔv
    v₁ ← v on participating DOFs, v* elsewhere

so each world pays for its own iterations only. Every decision is taken from block-reduced
values that all lanes hold bit for bit, so the lanes never diverge around a barrier. Lanes
exchange data through the world's rows of the Problem arrays, with a block barrier between a
write and a read by another lane.

**Equal to the staged path on one lane.** Each lane's partial sums follow the staged kernels'
order (lane 0 starts from the same first term), a row of H adds its terms in the staged
order, and the factorization is the same function; so with one lane per block (Warp's CPU
device without ``wp.config.enable_cpu_blocks``) the fused path gives the staged path's results
bit for bit, and with 32 lanes it differs only by the order of the block sums (last bits, so
iteration counts may occasionally differ by one near a tolerance).

**Padding.** The system is padded to 32 (one tile, one compiled variant for every nv ≤ 32),
beyond that to a multiple of 32 (the blocked factorization in a scratch L).

PCR (``contact_linear_solver="pcr"``) is not fused: each PCR iteration needs several block
barriers around a matrix-free product and the solve runs up to ``pcr_max_iterations`` of them,
and on the CPU device, the only one measured so far, PCR loses to Cholesky by 5–8× (see
docs/benchmarks.md); ``SolverSAP`` runs the staged loop for PCR whatever ``newton_path`` says.
"""

import warp as wp

from sap_common.state import StepStatus

from . import blocked_cholesky
from .blocked_cholesky import block_max_int
from .line_search import make_line_search

wp.set_module_options({"enable_backward": False})

__all__ = ["FUSED_TILE", "fused_size", "fused_newton_kernel"]

FUSED_TILE = 32  # the fused path's Cholesky tile edge (and its padded size for nv ≤ 32)

CONVERGED = wp.constant(int(StepStatus.CONVERGED))
LINE_SEARCH_FAILURE = wp.constant(int(StepStatus.LINE_SEARCH_FAILURE))
MAX_ITERATIONS = wp.constant(int(StepStatus.MAX_ITERATIONS))
NON_FINITE = wp.constant(int(StepStatus.NON_FINITE))
LINEAR_SOLVE_FAILURE = wp.constant(int(StepStatus.LINEAR_SOLVE_FAILURE))

_CACHE: dict = {}


def fused_size(nv: int) -> int:
    """The fused path's padded system size: 32 for nv ≤ 32, else nv rounded up to 32."""
    return FUSED_TILE * max(1, -(-nv // FUSED_TILE))


@wp.func
def block_sync(lane: int):
    """A barrier of the world's block (a cooperative call: a tile value read back)."""
    wp.tile_extract(wp.tile(lane), 0)


def fused_newton_kernel(kk, n: int):
    """The fused Newton kernel for the structs and functions of ``kk`` (a
    :class:`~sap_gpu.contact_solve.NewtonKernels`) and padded size ``n`` (:func:`fused_size`).

    Launch: ``wp.launch_tiled(kernel, dim=[W], block_dim=TILE_BLOCK_DIM, inputs=[P, N,
    evaluate_only, nb, v_init], outputs=[H, rhs, dv, L, v1])`` with H (W, n, n), rhs and dv
    (W, n, 1) in TL (H's padding the identity, rhs's padding 0), L the (W, n, n) scratch of the
    blocked factorization (any array when n = 32), nb = n/32. ``evaluate_only = 1`` evaluates
    ℓ, ∇ℓ, γ and H at ``P.v`` once, as the staged ``evaluate`` does for ``evaluate_at``.
    """
    single = n <= FUSED_TILE
    key = (id(kk), FUSED_TILE if single else "blocked")
    if key in _CACHE:
        return _CACHE[key]
    f = kk.funcs
    T, TL, V3 = f.T, f.TL, f.V3
    Problem, Newton = kk.Problem, kk.Newton
    V6 = wp.types.vector(6, T)
    contact_params, contact_rows_dot, limit_row_dot = f.contact_params, f.contact_rows_dot, f.limit_row_dot
    A_row_dot, A_row_dots, drive_params = f.A_row_dot, f.A_row_dots, f.drive_params
    friction_cone, limit_term, drive_term = f.friction_cone, f.limit_term, f.drive_term
    if single:
        factor_solve = blocked_cholesky.single_factor_solve(FUSED_TILE, 1, TL)
    else:
        factor_solve = blocked_cholesky.blocked_factor_solve(FUSED_TILE, 1, TL)

    @wp.func
    def block_sum3(x: V3) -> V3:
        return wp.tile_extract(wp.tile_sum(wp.tile(x, preserve_type=True)), 0)

    @wp.func
    def block_sum6(x: V6) -> V6:
        return wp.tile_extract(wp.tile_sum(wp.tile(x, preserve_type=True)), 0)

    @wp.func
    def phi(P: Problem, world: int, lane: int, alpha: T):
        """ℓ(v + αΔv), dℓ/dα, d²ℓ/dα²: the staged φ with rows over lanes and block sums."""
        bd = wp.block_dim()
        ell = T(0.0)
        dell = T(0.0)
        d2ell = T(0.0)
        if lane == 0:
            ell = P.line[world, 0] + alpha * P.line[world, 1] + T(0.5) * alpha * alpha * P.line[world, 2]
            dell = P.line[world, 1] + alpha * P.line[world, 2]
            d2ell = P.line[world, 2]
        for c in range(lane, P.contact_count[world], bd):
            R, vh, mu = contact_params(P, world, c)
            r = 3 * c
            vc = V3(P.vc[world, r] + alpha * P.dvc[world, r], P.vc[world, r + 1] + alpha * P.dvc[world, r + 1],
                    P.vc[world, r + 2] + alpha * P.dvc[world, r + 2])
            g, G, l, mode = friction_cone(vc, R, vh, mu)
            d = V3(P.dvc[world, r], P.dvc[world, r + 1], P.dvc[world, r + 2])
            ell = ell + l
            dell = dell - wp.dot(d, g)
            d2ell = d2ell + wp.dot(d, G * d)
        o = P.contact_J.shape[1]
        for r in range(lane, P.limit_count, bd):
            if P.limit_active[world, r] != 0:
                vcl = P.vc[world, o + r] + alpha * P.dvc[world, o + r]
                gl, Gl, ll = limit_term(vcl, T(P.limit_R[world, r]), T(P.limit_v_hat[world, r]))
                ell = ell + ll
                dell = dell - P.dvc[world, o + r] * gl
                d2ell = d2ell + P.dvc[world, o + r] * Gl * P.dvc[world, o + r]
        o2 = o + P.limit_count
        h = T(P.h)
        for i in range(lane, P.drive_count, bd):
            q0, qt, vt, u, Kp, Kd, e = drive_params(P, world, i)
            vcd = P.vc[world, o2 + i] + alpha * P.dvc[world, o2 + i]
            gd, Gd, ld = drive_term(vcd, h, q0, qt, vt, u, Kp, Kd, e)
            ell = ell + ld
            dell = dell - P.dvc[world, o2 + i] * gd
            d2ell = d2ell + P.dvc[world, o2 + i] * Gd * P.dvc[world, o2 + i]
        s = block_sum3(V3(ell, dell, d2ell))
        return s[0], s[1], s[2]

    search = make_line_search(T, phi, Problem, f.variant)

    @wp.func
    def evaluate_rows(P: Problem, world: int, lane: int, ell_start: T) -> T:
        """Lanes over rows: vc = J v, γ, G into the Problem's rows; returns ``ell_start`` + the lane's
        Σ ℓᵢ (added in the staged order after the lane's ℓ_A terms)."""
        bd = wp.block_dim()
        ell = ell_start
        for c in range(lane, P.contact_count[world], bd):
            Jv = contact_rows_dot(P, world, c, P.v)
            R, vh, mu = contact_params(P, world, c)
            g, G, l, mode = friction_cone(Jv, R, vh, mu)
            ell = ell + l
            P.contact_G[world, c] = G
            for a in range(3):
                P.vc[world, 3 * c + a] = Jv[a]
                P.gamma[world, 3 * c + a] = g[a]
        o = P.contact_J.shape[1]
        for r in range(lane, P.limit_count, bd):
            vcl = limit_row_dot(P, world, r, P.v)
            P.vc[world, o + r] = vcl
            P.gamma[world, o + r] = T(0.0)
            P.limit_G[world, r] = T(0.0)
            if P.limit_active[world, r] != 0:
                gl, Gl, ll = limit_term(vcl, T(P.limit_R[world, r]), T(P.limit_v_hat[world, r]))
                ell = ell + ll
                P.gamma[world, o + r] = gl
                P.limit_G[world, r] = Gl
        o2 = o + P.limit_count
        h = T(P.h)
        for i in range(lane, P.drive_count, bd):
            vcd = P.v[world, P.drive_dof[i]]
            P.vc[world, o2 + i] = vcd
            q0, qt, vt, u, Kp, Kd, e = drive_params(P, world, i)
            gd, Gd, ld = drive_term(vcd, h, q0, qt, vt, u, Kp, Kd, e)
            ell = ell + ld
            P.gamma[world, o2 + i] = gd
            P.drive_G[world, i] = Gd
        return ell

    @wp.func
    def jt_gamma(P: Problem, world: int, i: int) -> T:
        """(Jᵀγ)_i: the rows touching DOF i in the staged order (contacts, limits, drives)."""
        s = T(0.0)
        for t in range(P.dof_ncontacts[world, i]):
            r = 3 * P.dof_contacts[world, i, t]
            s = s + T(P.contact_J[world, r, i]) * P.gamma[world, r] + T(P.contact_J[world, r + 1, i]) * P.gamma[
                world, r + 1] + T(P.contact_J[world, r + 2, i]) * P.gamma[world, r + 2]
        o = P.contact_J.shape[1]
        for t in range(P.dof_nlimits[world, i]):
            r = P.dof_limits[world, i, t]
            s = s + T(P.limit_J[world, r, i]) * P.gamma[world, o + r]
        o2 = o + P.limit_count
        for d in range(P.drive_count):
            if P.drive_dof[d] == i:
                s = s + P.gamma[world, o2 + d]
        return s

    @wp.func
    def hessian_row(P: Problem, world: int, i: int, H: wp.array3d(dtype=TL)):
        """Row i of H = A + JᵀGJ up to the diagonal, in TL, each entry's terms in the staged order."""
        for k in range(i + 1):
            H[world, i, k] = TL(P.A[world, i, k])
        for u in range(P.dof_ncontacts[world, i]):
            c = P.dof_contacts[world, i, u]
            r = 3 * c
            Ji = V3(T(P.contact_J[world, r, i]), T(P.contact_J[world, r + 1, i]), T(P.contact_J[world, r + 2, i]))
            GJi = wp.transpose(P.contact_G[world, c]) * Ji
            for t in range(P.contact_ncols[world, c]):
                k = P.contact_cols[world, c, t]
                if k > i:
                    break
                Jk = V3(T(P.contact_J[world, r, k]), T(P.contact_J[world, r + 1, k]), T(P.contact_J[world, r + 2, k]))
                H[world, i, k] = H[world, i, k] + TL(wp.dot(GJi, Jk))
        for u in range(P.dof_nlimits[world, i]):
            r = P.dof_limits[world, i, u]
            Gl = P.limit_G[world, r]
            Jr = P.limit_J[world, r, i]
            if Gl != T(0.0):
                for t in range(P.limit_ncols[world, r]):
                    k = P.limit_cols[world, r, t]
                    if k > i:
                        break
                    H[world, i, k] = H[world, i, k] + TL(Gl * T(Jr) * T(P.limit_J[world, r, k]))
        for d in range(P.drive_count):
            if P.drive_dof[d] == i:
                H[world, i, i] = H[world, i, i] + TL(P.drive_G[world, d])

    @wp.kernel(enable_backward=False, module="unique")
    def fused_newton(P: Problem, N: Newton, evaluate_only: int, nb: int, v_init: wp.array2d(dtype=wp.float64),
                     H: wp.array3d(dtype=TL), rhs: wp.array3d(dtype=TL), dv_out: wp.array3d(dtype=TL),
                     L: wp.array3d(dtype=TL), v1_out: wp.array2d(dtype=wp.float64)):
        world, lane = wp.tid()
        bd = wp.block_dim()
        nv = P.nv
        zero = T(0.0)
        status = N.status[world]
        if evaluate_only == 0:
            for k in range(lane, nv, bd):
                P.v[world, k] = T(v_init[world, k])
            block_sync(lane)
        # A world flagged before stage 3 (non-finite input) takes no Newton iteration.
        running = int(1)
        if N.done[world] != 0 and evaluate_only == 0:
            running = 0
        iterations = int(0)
        ls_iterations = int(0)
        alpha_prev = zero
        ell_prev = zero
        ell = zero
        residual = zero
        scale = zero
        while running != 0:
            # ---- evaluate at v: A(v − v*), A v and ℓ_A over DOFs (one pass over A), then the rows.
            ell_A = zero
            for i in range(lane, nv, bd):
                Adv, Av = A_row_dots(P, world, i)
                P.grad[world, i] = Adv
                P.dp[world, i] = Av
                ell_A = ell_A + T(0.5) * (P.v[world, i] - T(P.v_star[world, i])) * Adv
            ell_lane = evaluate_rows(P, world, lane, ell_A)
            block_sync(lane)  # γ of every row, before Jᵀγ
            r2 = zero
            sA = zero
            sJ = zero
            bad = zero
            for i in range(lane, nv, bd):
                jtg = jt_gamma(P, world, i)
                g = P.grad[world, i] - jtg
                P.grad[world, i] = g
                if not wp.isfinite(g):
                    bad = T(1.0)
                if P.dof_mask[world, i] != 0:
                    d = T(1.0) / wp.sqrt(T(P.A[world, i, i]))
                    Av = P.dp[world, i]
                    r2 = r2 + d * d * g * g
                    sA = sA + d * d * Av * Av
                    sJ = sJ + d * d * jtg * jtg
            s = block_sum6(V6(ell_lane, ell_A, r2, sA, sJ, bad))
            ell = s[0]
            ell_A = s[1]
            residual = wp.sqrt(s[2])
            scale = wp.max(wp.sqrt(s[3]), wp.sqrt(s[4]))
            # ---- stopping tests (docs/formulation.md § Stopping criteria), as the staged evaluate.
            if s[5] != zero or not wp.isfinite(ell):
                status = status | NON_FINITE
                break
            cost_reached = int(0)
            if iterations > 0:
                if wp.abs(ell_prev - ell) < N.cost_abs + N.cost_rel * T(0.5) * (wp.abs(ell) + wp.abs(ell_prev)):
                    if alpha_prev > T(0.5):
                        cost_reached = 1
            if residual <= N.abs_tol + N.rel_tol * scale or cost_reached == 1:
                status = status | CONVERGED
                break
            if iterations == N.max_iterations:
                status = status | MAX_ITERATIONS
                break
            # ---- H = A + JᵀGJ (lower triangle) and −∇ℓ in TL, rows of H over lanes.
            for i in range(lane, nv, bd):
                rhs[world, i, 0] = TL(-P.grad[world, i])
                hessian_row(P, world, i, H)
            if evaluate_only != 0:
                break
            block_sync(lane)  # H and −∇ℓ complete before the tile loads
            failed = int(0)
            if wp.static(single):
                failed = factor_solve(H[world], rhs[world], dv_out[world], lane)
            else:
                failed = factor_solve(H[world], rhs[world], nb, lane, L[world], dv_out[world])
            block_sync(lane)  # Δv stored by the tiles before the lanes read it
            # ---- line search along Δv.
            for k in range(lane, nv, bd):
                dvk = T(dv_out[world, k, 0])
                P.dv[world, k] = dvk
                if not wp.isfinite(dvk):
                    failed = 1
            if block_max_int(failed) != 0:  # a failed pivot or a non-finite Δv
                status = status | LINEAR_SOLVE_FAILURE
                break
            o = P.contact_J.shape[1]
            o2 = o + P.limit_count
            for c in range(lane, P.contact_count[world], bd):
                Jdv = contact_rows_dot(P, world, c, P.dv)
                for a in range(3):
                    P.dvc[world, 3 * c + a] = Jdv[a]
            for r in range(lane, P.limit_count, bd):
                P.dvc[world, o + r] = limit_row_dot(P, world, r, P.dv)
            for i in range(lane, P.drive_count, bd):
                P.dvc[world, o2 + i] = P.dv[world, P.drive_dof[i]]
            slope = zero
            curvature = zero
            dphi0 = zero
            for i in range(lane, nv, bd):
                dp = A_row_dot(P, world, i, P.dv)
                dvs = P.v[world, i] - T(P.v_star[world, i])
                slope = slope + dp * dvs
                curvature = curvature + dp * P.dv[world, i]
                dphi0 = dphi0 + P.grad[world, i] * P.dv[world, i]
            q = block_sum3(V3(slope, curvature, dphi0))  # also the barrier for Δvc
            if lane == 0:
                P.line[world, 0] = ell_A
                P.line[world, 1] = q[0]
                P.line[world, 2] = q[1]
            block_sync(lane)
            alpha, evals, ls_failed = search(P, world, lane, ell, q[2], N.ls_max_iterations, N.rho, N.armijo_c,
                                             N.slop, N.cost_abs, N.cost_rel)
            iterations = iterations + 1
            ls_iterations = ls_iterations + evals
            if ls_failed != 0:
                status = status | LINE_SEARCH_FAILURE
                break
            for k in range(lane, nv, bd):
                P.v[world, k] = P.v[world, k] + alpha * P.dv[world, k]
            alpha_prev = alpha
            ell_prev = ell
            block_sync(lane)  # v complete before the next evaluation
        if evaluate_only == 0:
            block_sync(lane)
            for k in range(lane, nv, bd):  # finish: v₁ = v on participating DOFs, v* elsewhere
                if P.dof_mask[world, k] != 0:
                    v1_out[world, k] = wp.float64(P.v[world, k])
                else:
                    v1_out[world, k] = P.v_star[world, k]
        if lane == 0 and evaluate_only == 0:
            N.iterations[world] = iterations
            N.ls_iterations[world] = ls_iterations
            N.alpha_prev[world] = alpha_prev
        if lane == 0 and running != 0:  # what the staged loop leaves after its last evaluation
            N.ell[world] = ell
            N.residual[world] = residual
            N.scale[world] = scale
            if evaluate_only == 0:
                N.status[world] = status
                N.done[world] = 1
                N.ell_prev[world] = ell_prev

    _CACHE[key] = fused_newton
    return fused_newton

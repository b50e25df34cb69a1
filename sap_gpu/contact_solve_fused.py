"""Stage 3, fused: one block of threads per world runs that world's whole Newton loop.

``newton_path="fused"``, the default. The staged path (:mod:`sap_gpu.contact_solve`) runs one
Newton iteration of every world per trip of a ``wp.capture_while`` (evaluate, Cholesky, line
search: about five device operations a trip) and the batch makes as many trips as its slowest
world needs. Here one launch (``wp.launch_tiled``, :data:`sap_gpu.launch.TILE_BLOCK_DIM` lanes
per world) does everything of a step's stage 3 for a world, from the warm start to v₁:

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

so each world pays for its own iterations only. The evaluation, Hessian rows, direction and
line-search cost are the functions of :mod:`sap_gpu.contact_problem` that the staged kernels
call too, here with the world's rows and DOFs spread over the block's lanes. Every decision is taken from block-reduced
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
from .blocked_cholesky import block_max_int, block_sync
from .contact_problem import hessian_functions, row_functions
from .launch import TILE_BLOCK_DIM, launch_blocks
from .line_search import make_line_search

wp.set_module_options({"enable_backward": False})

__all__ = ["FUSED_TILE", "fused_size", "fused_newton_kernel", "launch_fused"]

FUSED_TILE = 32  # the fused path's Cholesky tile edge (and its padded size for nv ≤ 32)

NON_FINITE = wp.constant(int(StepStatus.NON_FINITE))
LINE_SEARCH_FAILURE = wp.constant(int(StepStatus.LINE_SEARCH_FAILURE))
LINEAR_SOLVE_FAILURE = wp.constant(int(StepStatus.LINEAR_SOLVE_FAILURE))

_CACHE: dict = {}


def fused_size(nv: int) -> int:
    """The fused path's padded system size: 32 for nv ≤ 32, else nv rounded up to 32."""
    return FUSED_TILE * max(1, -(-nv // FUSED_TILE))


def fused_newton_kernel(T, TL, variant: str, n: int, approximation: str = "sap", max_registers: int | None = None):
    """The fused Newton kernel for objective scalar T, linear-solve scalar TL, line search
    ``variant``, padded size ``n`` (:func:`fused_size`) and contact ``approximation`` (``sap``,
    ``lagged``, ``similar``: which contact term the rows evaluate), built on first use.
    ``max_registers`` caps its registers per thread on CUDA (``SapConfig.fused_max_registers``;
    ``None``: the compiler's choice).

    Launch with :func:`launch_fused` (what it runs: ``wp.launch_tiled(kernel, dim=[W], block_dim=32,
    inputs=[P, N, evaluate_only, nb, v_init], outputs=[H, rhs, dv, L, v1])``) with H (W, n, n), rhs and dv
    (W, n, 1) in TL (H's padding the identity, rhs's padding 0), L the (W, n, n) scratch of the
    blocked factorization (any array when n = 32), nb = n/32. ``evaluate_only = 1`` evaluates
    ℓ, ∇ℓ, γ and H at ``P.v`` once, as the staged ``evaluate`` does for ``evaluate_at``.
    """
    single = n <= FUSED_TILE
    key = (T, TL, variant, FUSED_TILE if single else "blocked", approximation, max_registers)
    if key in _CACHE:
        return _CACHE[key]
    f = row_functions(T, approximation)
    hessian_rows = hessian_functions(T, TL).hessian_rows
    Problem, Newton, V3 = f.Problem, f.Newton, f.V3
    V6 = wp.types.vector(6, T)
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
        """φ(α), φ'(α), φ''(α): the rows over the block's lanes, block-summed (every lane gets them)."""
        s = block_sum3(f.cost_along_line(P, world, lane, wp.block_dim(), alpha))
        return s[0], s[1], s[2]

    search = make_line_search(T, phi, Problem, variant)

    @wp.kernel(enable_backward=False, module="unique", cuda_max_registers=max_registers)
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
            ell_A = f.momentum_pass(P, world, lane, bd)
            ell_lane = f.evaluate_rows(P, world, lane, bd, ell_A)
            block_sync(lane)  # γ of every row, before Jᵀγ
            r2, sA, sJ, bad = f.gradient_pass(P, world, lane, bd)
            s = block_sum6(V6(ell_lane, ell_A, r2, sA, sJ, bad))
            ell = s[0]
            ell_A = s[1]
            residual = wp.sqrt(s[2])
            scale = wp.max(wp.sqrt(s[3]), wp.sqrt(s[4]))
            # ---- stopping tests (docs/formulation.md § Stopping criteria), as the staged evaluate.
            if s[5] != zero or not wp.isfinite(ell):
                status = status | NON_FINITE
                break
            stop = f.newton_stop(N, iterations, ell, ell_prev, alpha_prev, residual, scale)
            if stop != 0:
                status = status | stop
                break
            # ---- H = A + JᵀGJ (lower triangle) and −∇ℓ in TL, rows of H over lanes.
            hessian_rows(P, world, lane, bd, H, rhs)
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
            f.direction_rows(P, world, lane, bd)  # Δvc = J Δv
            q = block_sum3(f.direction_sums(P, world, lane, bd))  # also the barrier for Δvc
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


def launch_fused(kernel, P, N, evaluate_only: int, v_init, H, rhs, dv, L, v1, device,
                 block_dim: int = TILE_BLOCK_DIM) -> None:
    """Launch the fused kernel (:func:`fused_newton_kernel`): one block of ``block_dim`` lanes per
    world of ``P``.

    The kernel is correct only that way: its lanes share a world's rows through block barriers
    and reduce with whole-warp operations, so a world must own exactly one block whose size is a
    multiple of 32. :func:`~sap_gpu.launch.launch_blocks` refuses any other block size; here the
    number of blocks must equal the number of worlds of every array the kernel reads and writes
    and the padded size a multiple of :data:`FUSED_TILE` (``ValueError`` otherwise).
    """
    W = P.v.shape[0]
    for name, a in (("v_init", v_init), ("H", H), ("rhs", rhs), ("dv", dv), ("v1", v1)):
        if a.shape[0] != W:
            raise ValueError(f"{name}: {a.shape[0]} worlds, but the problem has {W}; the fused kernel runs one "
                             f"block per world")
    n = H.shape[1]
    if n % FUSED_TILE or H.shape[2] != n or rhs.shape[1] != n or dv.shape[1] != n:
        raise ValueError(f"H, rhs, dv: the fused system is padded to a multiple of {FUSED_TILE} (fused_size), got "
                         f"H {tuple(H.shape)}, rhs {tuple(rhs.shape)}, dv {tuple(dv.shape)}")
    launch_blocks(kernel, num_worlds=W, device=device, inputs=[P, N, int(evaluate_only), n // FUSED_TILE, v_init],
                  outputs=[H, rhs, dv, L, v1], block_dim=block_dim)

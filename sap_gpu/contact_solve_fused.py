"""Stage 3, fused: one block of threads per world runs that world's whole Newton loop.

``newton_path="fused"``, the default. The staged path (:mod:`sap_gpu.contact_solve`) runs one
Newton iteration of every world per trip of a ``wp.capture_while`` (evaluate, Cholesky, line
search: about five device operations a trip) and the batch makes as many trips as its slowest
world needs. Here one launch (``wp.launch_tiled``, :data:`sap_gpu.launch.TILE_BLOCK_DIM` lanes
per world) does everything of a step's stage 3 for a world, from the warm start to v₁:

    v ← v_init
    loop:  evaluate   lanes over DOFs: A(v − v*), A v, ℓ_A;  lanes over rows (contacts, then the
                      scalar rows): vc = J v, γ, G, ℓᵢ;  lanes over DOFs: ∇ℓ = A(v − v*) − Jᵀγ and the
                      stopping sums;  one block reduction (ℓ, ℓ_A, the three norms, a finite flag)
           stop?      the staged path's tests, in the same order (NON_FINITE, CONVERGED, MAX_ITERATIONS)
           H          fused_hessian="rows": lanes over rows of H: row i = A_i + Σ JᵢᵀGJ over the
                      rows touching DOF i, lower triangle only, −∇ℓ alongside;  "tiles" (nv ≤ 32):
                      H and −∇ℓ in shared tiles, JᵀGJ by tile products of slabs of J's rows
                      (_tile_hessian), A from the world's shared tile of it
           solve      the block's tile Cholesky factor and solve, pivots checked
                      (blocked_cholesky.single_factor_solve / blocked_factor_solve; with tiles
                      shared_factor_solve, in place on the shared tiles); fused_cholesky="lanes"
                      (nv ≤ 32, H by rows): lane_cholesky.lane_factor_solve, H's rows in the
                      lanes' registers, eliminated with warp shuffles
           line search  lanes over rows: Δvc = J Δv;  lanes over DOFs: the slope terms;  block
                      reductions;  then the configured search, whose φ(α) spreads the rows over
                      the lanes and block-sums ℓ, dℓ/dα, d²ℓ/dα²
           v ← v + αΔv
    v₁ ← v on participating DOFs, v* elsewhere

so each world pays for its own iterations only. Where H is formed by tiles or factored in the
lanes' registers (worlds of one tile, nv ≤ 32; the default there) the world's A and v* are loaded
into shared tiles once per step, and the evaluation's momentum pass, H's A part and the line
search's slope sums read them there, with Δv from a shared tile too (:func:`_shared_passes`).
The evaluation, Hessian rows, direction and line-search cost are the functions of
:mod:`sap_gpu.contact_problem` that the staged kernels call too, here with the world's rows and
DOFs spread over the block's lanes. Every decision is taken from block-reduced
values that all lanes hold bit for bit, so the lanes never diverge around a barrier. Lanes
exchange data through the world's rows of the Problem arrays, with a block barrier between a
write and a read by another lane.

**Equal to the staged path on one lane** (``fused_hessian="rows"``). Each lane's partial sums
follow the staged kernels' order (lane 0 starts from the same first term), a row of H adds its
terms in the staged order, and the factorization is the same function; so with one lane per
block (Warp's CPU device without ``wp.config.enable_cpu_blocks``) the fused path gives the
staged path's results bit for bit, and with 32 lanes it differs only by the order of the block
sums (last bits, so iteration counts may occasionally differ by one near a tolerance). With
``"tiles"`` H's entries are sums in another order, with J and G J rounded to the linear-solve
precision first: H agrees to its rounding, and the iterates to the solver's tolerance.

**Padding.** The system is padded to 32 (one tile, one compiled variant for every nv ≤ 32),
beyond that to a multiple of 32 (the blocked factorization in a scratch L).

PCR (``contact_linear_solver="pcr"``) is not fused: each PCR iteration needs several block
barriers around a matrix-free product and the solve runs up to ``pcr_max_iterations`` of them,
and on the CPU device, the only one measured so far, PCR loses to Cholesky by 5–8× (see
docs/benchmarks.md); ``SolverSAP`` runs the staged loop for PCR whatever ``newton_path`` says.
"""

import warp as wp

from sap_common.state import StepStatus

from . import blocked_cholesky, lane_cholesky
from .blocked_cholesky import block_max_int, block_sync
from .contact_problem import ROW_END, hessian_functions, row_functions
from .launch import TILE_BLOCK_DIM, built_once, launch_blocks
from .line_search import make_line_search
from .plan import FUSED_TILE, NewtonPlan

wp.set_module_options({"enable_backward": False})

__all__ = ["FUSED_TILE", "SLAB_ROWS", "CONTACTS_PER_SLAB", "fused_newton_kernel", "launch_fused"]

# fused_hessian="tiles": rows of J per slab (the shared tiles J and G J are SLAB_ROWS × 32), and
# contacts per slab (3 rows each: 15 of the slab's 16). 16 rather than 32: less spill and less
# shared memory, so more blocks per multiprocessor (the figures in
# docs/benchmarks.md § Registers behind the code's choices).
SLAB_ROWS = 16
CONTACTS_PER_SLAB = SLAB_ROWS // 3
# fused_hessian="tiles": columns of H per tile product. Each lane of a 32-lane block holds its
# share of the product's output in registers, so a block of 8 columns (8 per lane for 32×8) rather
# than all 32 spills less (the figures in
# docs/benchmarks.md § Registers behind the code's choices).
PRODUCT_COLUMNS = 8
# fused_hessian="tiles": rows per tile load into the shared tiles (through registers: 8 values
# per lane of 32, where a whole-tile load into shared memory would take a tile of its own).
LOAD_ROWS = 8

NON_FINITE = wp.constant(int(StepStatus.NON_FINITE))
LINE_SEARCH_FAILURE = wp.constant(int(StepStatus.LINE_SEARCH_FAILURE))
LINEAR_SOLVE_FAILURE = wp.constant(int(StepStatus.LINEAR_SOLVE_FAILURE))

@built_once()
def _tile_hessian(T, TL):
    """``wp.func (P, world, lane, H, J, GJ, x, slab, rhs)``: H = A + JᵀGJ and x = −∇ℓ assembled in
    the shared tiles H (32, 32) and x (32, 1) (``fused_hessian="tiles"``: nv ≤ 32), with the
    shared tiles J and GJ (32, 32) for the slabs, built once per (T, TL).

    A tile-element store is a block barrier in Warp (every lane must make it), so the lanes never
    write the shared tiles one element at a time: they write what is per-lane work to the world's
    global scratch rows, and cooperative tile loads bring it into shared memory.

    * lanes over columns k write column k of A (in TL; and 1 on the diagonal past A's padded
      size n_pad, so H is the identity on the padding) to the slab and −∇ℓ_k to ``rhs``; tile
      loads bring them into H and x;
    * the rows in slabs of :data:`SLAB_ROWS` (16): lanes over columns k write the slab's J (rows
      0–15 of ``slab``) and G J (rows 16–31; G J in T, rounded to TL), then
      ``tile_matmul(Jᵀ, GJ, H)`` adds the slab.
      Contacts go :data:`CONTACTS_PER_SLAB` to a slab (3 rows each; a contact past the world's
      count enters as zeros); the scalar rows (limits, holonomic constraints, drives) with G ≠ 0
      16 to a slab, in row order, so a world with no such row adds no slab of them.

    The whole of H is formed (both triangles); its entries are the row path's up to the order of
    the sums and the rounding of J and G J to TL. A comes from the world's shared tile of it
    (:func:`_shared_passes`), loaded once per step.
    """
    f = row_functions(T)
    Problem, V3 = f.Problem, f.V3
    ft, S, sr = FUSED_TILE, CONTACTS_PER_SLAB, SLAB_ROWS

    def row_loader(rows: int):
        """``wp.func (dst, src, row0)``: dst (rows × 32, shared) ← src[row0 : row0 + rows], LOAD_ROWS
        rows at a time through registers (no second shared tile; LOAD_ROWS·32/32 values per lane in
        flight). One per tile shape: H's 32 rows, a slab's SLAB_ROWS."""

        @wp.func
        def load_rows(dst: wp.tile(dtype=TL, shape=(rows, ft), storage="shared"), src: wp.array2d(dtype=TL),
                      row0: int):
            for q in range(rows // LOAD_ROWS):
                wp.tile_assign(dst, wp.tile_load(src, shape=(LOAD_ROWS, ft), offset=(row0 + LOAD_ROWS * q, 0)),
                               offset=(LOAD_ROWS * q, 0))
        return load_rows

    load_rows, load_slab_rows = row_loader(ft), row_loader(sr)

    @wp.func
    def add_slab(H: wp.tile(dtype=TL, shape=(ft, ft), storage="shared"),
                 J: wp.tile(dtype=TL, shape=(sr, ft), storage="shared"),
                 GJ: wp.tile(dtype=TL, shape=(sr, ft), storage="shared"), slab: wp.array2d(dtype=TL), lane: int):
        """H += Jᵀ(GJ) for the slab the lanes have just written (a barrier first)."""
        block_sync(lane)
        load_slab_rows(J, slab, 0)
        load_slab_rows(GJ, slab, sr)
        Jt = wp.tile_transpose(J)
        for q in range(ft // PRODUCT_COLUMNS):  # H's columns a block at a time: fewer accumulators per lane
            wp.tile_matmul(Jt, wp.tile_view(GJ, offset=(0, PRODUCT_COLUMNS * q), shape=(sr, PRODUCT_COLUMNS)),
                           wp.tile_view(H, offset=(0, PRODUCT_COLUMNS * q), shape=(ft, PRODUCT_COLUMNS)))

    @wp.func
    def assemble(P: Problem, world: int, lane: int, H: wp.tile(dtype=TL, shape=(ft, ft), storage="shared"),
                 J: wp.tile(dtype=TL, shape=(sr, ft), storage="shared"),
                 GJ: wp.tile(dtype=TL, shape=(sr, ft), storage="shared"),
                 x: wp.tile(dtype=TL, shape=(ft, 1), storage="shared"), slab: wp.array2d(dtype=TL),
                 rhs: wp.array2d(dtype=TL), A: wp.tile(dtype=wp.float64, shape=(ft, ft), storage="shared")):
        bd = wp.block_dim()
        nv = P.nv
        n_pad = P.n_pad
        for k in range(lane, ft, bd):  # lanes over columns: column k of A (+ 1 past n_pad) into the slab, −∇ℓ_k
            xk = TL(0.0)
            dk = TL(0.0)
            if k < nv:
                xk = TL(-P.grad[world, k])
            elif k >= n_pad:  # A holds the identity up to n_pad and nothing beyond
                dk = TL(1.0)
            rhs[k, 0] = xk
            for u in range(ft):
                auk = TL(0.0)
                if u < n_pad and k < n_pad:
                    auk = TL(A[u, k])
                if u == k:
                    auk = auk + dk
                slab[u, k] = auk
        block_sync(lane)
        load_rows(H, slab, 0)
        wp.tile_assign(x, wp.tile_load(rhs, shape=(ft, 1)), offset=(0, 0))
        nc = P.contact_count[world]
        for c0 in range(0, nc, S):
            block_sync(lane)  # the last slab loaded before the lanes overwrite it
            for k in range(lane, ft, bd):
                for u in range(S):
                    c = c0 + u
                    j = V3(T(0.0), T(0.0), T(0.0))
                    g = V3(T(0.0), T(0.0), T(0.0))
                    if c < nc and k < nv:
                        r = 3 * c
                        j = V3(T(P.contact_J[world, r, k]), T(P.contact_J[world, r + 1, k]),
                               T(P.contact_J[world, r + 2, k]))
                        g = P.contact_G[world, c] * j
                    for a in range(3):
                        slab[3 * u + a, k] = TL(j[a])
                        slab[sr + 3 * u + a, k] = TL(g[a])
                for r in range(3 * S, sr):  # a slab of scalar rows may have filled the tail rows
                    slab[r, k] = TL(0.0)
                    slab[sr + r, k] = TL(0.0)
            add_slab(H, J, GJ, slab, lane)
        nl = P.row_start[ROW_END]
        r0 = int(0)
        while r0 < nl:  # the scalar rows with G ≠ 0 only, up to SLAB_ROWS to a slab; every lane scans alike
            r1 = r0
            m = int(0)
            while m < sr and r1 < nl:
                if P.row_G[world, r1] != T(0.0):
                    m = m + 1
                r1 = r1 + 1
            if m > 0:
                block_sync(lane)
                for k in range(lane, ft, bd):
                    u = int(0)
                    for r in range(r0, r1):
                        Gl = P.row_G[world, r]
                        if Gl != T(0.0):
                            jl = T(0.0)
                            if k < nv:
                                jl = T(P.row_J[world, r, k])
                            slab[u, k] = TL(jl)
                            slab[sr + u, k] = TL(Gl * jl)
                            u = u + 1
                    for uu in range(m, sr):
                        slab[uu, k] = TL(0.0)
                        slab[sr + uu, k] = TL(0.0)
                add_slab(H, J, GJ, slab, lane)
            r0 = r1
        block_sync(lane)  # H and x complete

    return assemble


@built_once()
def _shared_passes(T, TL):
    """``(momentum_pass, direction_sums, hessian_rows)`` where H is formed by tiles or factored in
    the lanes' registers (a world of one tile, nv ≤ 32): the row functions'
    (:func:`~sap_gpu.contact_problem.row_functions`) and H's rows by lanes
    (:func:`~sap_gpu.contact_problem.hessian_functions`) with A and v* read from the world's
    shared tiles (A (32, 32) and v* (32,) in float64, loaded once per step) and Δv from the
    shared tile x (in TL), built once per (T, TL). v stays in global memory: a shared tile of it,
    loaded after each update, spilled more
    (docs/benchmarks.md § Registers behind the code's choices).

    The row functions walk each row of A over its listed non-zero columns in ascending order;
    these walk all nv columns of the dense tile in the same order. The terms they add besides are
    products with exact zeros, which leave a finite sum unchanged (with or without a fused
    multiply-add), so the results are the row functions' bit for bit up to the sign of a zero sum.
    """
    f = row_functions(T)
    Problem, V3 = f.Problem, f.V3
    ft = FUSED_TILE

    @wp.func
    def momentum_pass(P: Problem, world: int, lane: int, stride: int,
                      A: wp.tile(dtype=wp.float64, shape=(ft, ft), storage="shared"),
                      v_star: wp.tile(dtype=wp.float64, shape=(ft,), storage="shared")) -> T:
        """row_functions' momentum_pass: grad_i = (A(v − v*))_i, dp_i = (A v)_i; the lane's ℓ_A."""
        ell_A = T(0.0)
        nv = P.nv
        for i in range(lane, nv, stride):
            s = T(0.0)
            sv = T(0.0)
            for k in range(nv):
                a = T(A[i, k])
                vk = P.v[world, k]
                s = s + a * (vk - T(v_star[k]))
                sv = sv + a * vk
            P.grad[world, i] = s
            P.dp[world, i] = sv
            ell_A = ell_A + T(0.5) * (P.v[world, i] - T(v_star[i])) * s
        return ell_A

    @wp.func
    def direction_sums(P: Problem, world: int, lane: int, stride: int,
                       A: wp.tile(dtype=wp.float64, shape=(ft, ft), storage="shared"),
                       v_star: wp.tile(dtype=wp.float64, shape=(ft,), storage="shared"),
                       x: wp.tile(dtype=TL, shape=(ft, 1), storage="shared")) -> V3:
        """row_functions' direction_sums, Δv_k = T(x_k) (what P.dv holds)."""
        slope = T(0.0)
        curvature = T(0.0)
        dphi0 = T(0.0)
        nv = P.nv
        for i in range(lane, nv, stride):
            dp = T(0.0)
            for k in range(nv):
                dp = dp + T(A[i, k]) * T(x[k, 0])
            dvs = P.v[world, i] - T(v_star[i])
            dvi = T(x[i, 0])
            slope = slope + dp * dvs
            curvature = curvature + dp * dvi
            dphi0 = dphi0 + P.grad[world, i] * dvi
        return V3(slope, curvature, dphi0)

    constraint_terms = hessian_functions(T, TL).constraint_terms

    @wp.func
    def hessian_rows(P: Problem, world: int, lane: int, stride: int, H: wp.array3d(dtype=TL),
                     rhs: wp.array3d(dtype=TL), A: wp.tile(dtype=wp.float64, shape=(ft, ft), storage="shared")):
        """hessian_functions' hessian_rows with row i's A part, H[i, k] = TL(A[i, k]) for k ≤ i, from
        the shared tile (the same values)."""
        for i in range(lane, P.nv, stride):
            rhs[world, i, 0] = TL(-P.grad[world, i])
            for k in range(i + 1):
                H[world, i, k] = TL(A[i, k])
            constraint_terms(P, world, i, H)

    return momentum_pass, direction_sums, hessian_rows


def _fused_key(plan: NewtonPlan):
    """What shapes the fused kernel: the scalars, the line search, one tile or blocks, the contact
    approximation and whether its cone reads kinematic bodies' velocities, the register cap, how H
    is formed and factored."""
    return (plan.path, plan.T, plan.TL, plan.line_search, plan.size <= FUSED_TILE, plan.approximation,
            plan.kinematic, plan.max_registers, plan.hessian, plan.factorization)


@built_once(key=_fused_key)
def fused_newton_kernel(plan: NewtonPlan):
    """The fused Newton kernel of a fused :class:`~sap_gpu.plan.NewtonPlan`: objective scalar T and
    linear-solve scalar TL, its line search and contact approximation (which contact term the
    rows evaluate), one tile (size 32) or blocks (a multiple of 32), built on first use.
    ``plan.max_registers`` caps its registers per thread on CUDA (``None``: the compiler's choice).
    ``plan.hessian`` is how H is formed: ``rows`` (lanes over H's rows in global memory, then the
    factorization) or ``tiles`` (:func:`_tile_hessian`: H and −∇ℓ in shared tiles, factored and
    solved there in place). ``plan.factorization`` is how H is factored: ``lanes``
    (:func:`sap_gpu.lane_cholesky.lane_factor_solve`: H's rows in the lanes' registers), ``tile``
    (Warp's tile Cholesky) or ``blocked`` (32 × 32 blocks in a scratch L).

    Launch with :func:`launch_fused` (what it runs: ``wp.launch_tiled(kernel, dim=[W], block_dim=32,
    inputs=[P, N, evaluate_only, nb, v_init], outputs=[H, rhs, dv, L, v1])``) with H (W, n, n), rhs and dv
    (W, n, 1) in TL (H's padding the identity, rhs's padding 0), L the (W, n, n) scratch of the
    blocked factorization (any array when n = 32), nb = n/32. ``evaluate_only = 1`` evaluates
    ℓ, ∇ℓ, γ and H at ``P.v`` once, as the staged ``evaluate`` does for ``evaluate_at``.
    """
    if not plan.fused:
        raise ValueError(f"fused_newton_kernel: the plan's path is {plan.path!r}, not 'fused'")
    T, TL, variant, approximation = plan.T, plan.TL, plan.line_search, plan.approximation
    single = plan.size <= FUSED_TILE
    tiles = plan.hessian == "tiles"
    lanes = plan.factorization == "lanes"
    max_registers = plan.max_registers
    f = row_functions(T, approximation, plan.kinematic)
    hessian_rows = hessian_functions(T, TL).hessian_rows
    Problem, Newton, V3 = f.Problem, f.Newton, f.V3
    V6 = wp.types.vector(6, T)
    if tiles:
        assemble = _tile_hessian(T, TL)
        shared_factor_solve = blocked_cholesky.shared_factor_solve(FUSED_TILE, TL)
    # A, v* and Δv in shared tiles for the step (_shared_passes): where H is formed by tiles or
    # factored in the lanes' registers. Beside Warp's tile Cholesky (its own shared tiles) they cost
    # that kernel registers, so it reads them from global memory
    # (docs/benchmarks.md § Registers behind the code's choices).
    shared = plan.shared_tiles
    if shared:
        momentum_pass_shared, direction_sums_shared, hessian_rows_shared = _shared_passes(T, TL)
    if lanes:
        factor_solve = lane_cholesky.lane_factor_solve(TL)
    elif single:
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

    # tiles: Warp's own cooperative product from shared memory, not cuBLASDx's, whose register
    # fragments spilled more of the fused kernel and whose LTO compile took 4× as long
    # (docs/benchmarks.md § Registers behind the code's choices)
    options = {"enable_mathdx_gemm": False} if tiles else None

    @wp.kernel(enable_backward=False, module="unique", cuda_max_registers=max_registers, module_options=options)
    def fused_newton(P: Problem, N: Newton, evaluate_only: int, nb: int, v_init: wp.array2d(dtype=wp.float64),
                     H: wp.array3d(dtype=TL), rhs: wp.array3d(dtype=TL), dv_out: wp.array3d(dtype=TL),
                     L: wp.array3d(dtype=TL), v1_out: wp.array2d(dtype=wp.float64)):
        world, lane = wp.tid()
        bd = wp.block_dim()
        nv = P.nv
        zero = T(0.0)
        # Loop state that a later stage or the next iteration needs goes to the world's entries of N
        # and P.line as soon as it is known, and is read back where it is used, after a block
        # barrier, instead of being carried in registers across the stages between: the compiler
        # must reload memory after a barrier, so the Hessian, the factorization and the line search
        # run without it in registers. ℓ, the residual and the scale of an evaluation are written
        # at once (they are also what the staged loop leaves after its last evaluation); ℓ_A to
        # P.line[world, 0] for φ(α); the previous ℓ and α after each line search; the status's bits
        # of this call are or-ed in at the end. That takes the kernel's registers and its spill under
        # a cap down
        # (docs/benchmarks.md § Registers behind the code's choices).
        status = int(0)  # the bits this call adds to N.status
        if wp.static(tiles):  # the world's Newton system, in shared memory for the whole step
            Hs = wp.tile_zeros(shape=(FUSED_TILE, FUSED_TILE), dtype=TL, storage="shared")
            Js = wp.tile_zeros(shape=(SLAB_ROWS, FUSED_TILE), dtype=TL, storage="shared")
            GJs = wp.tile_zeros(shape=(SLAB_ROWS, FUSED_TILE), dtype=TL, storage="shared")
        if wp.static(shared):  # Δv, A and v* in shared memory for the whole step
            xs = wp.tile_zeros(shape=(FUSED_TILE, 1), dtype=TL, storage="shared")
            # A and v*, read-only for the step (zeros past their sizes)
            As = wp.tile_load(P.A[world], shape=(FUSED_TILE, FUSED_TILE), storage="shared")
            v_star_s = wp.tile_load(P.v_star[world], shape=(FUSED_TILE,), storage="shared")
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
        ell = zero
        residual = zero
        scale = zero
        while running != 0:
            # ---- evaluate at v: A(v − v*), A v and ℓ_A over DOFs (one pass over A), then the rows.
            ell_A = zero
            if wp.static(shared):
                ell_A = momentum_pass_shared(P, world, lane, bd, As, v_star_s)
            else:
                ell_A = f.momentum_pass(P, world, lane, bd)
            ell_lane = f.evaluate_rows(P, world, lane, bd, ell_A)
            block_sync(lane)  # γ of every row, before Jᵀγ
            r2, sA, sJ, bad = f.gradient_pass(P, world, lane, bd)
            s = block_sum6(V6(ell_lane, ell_A, r2, sA, sJ, bad))
            ell = s[0]
            ell_A = s[1]
            residual = wp.sqrt(s[2])
            scale = wp.max(wp.sqrt(s[3]), wp.sqrt(s[4]))
            if lane == 0:  # read back after a barrier (above)
                N.ell[world] = ell
                N.residual[world] = residual
                N.scale[world] = scale
                P.line[world, 0] = ell_A
            # ---- stopping tests (docs/formulation.md § Stopping criteria), as the staged evaluate.
            if s[5] != zero or not wp.isfinite(ell):
                status = status | NON_FINITE
                break
            stop = f.newton_stop(N, iterations, ell, N.ell_prev[world], N.alpha_prev[world], residual, scale)
            if stop != 0:
                status = status | stop
                break
            failed = int(0)
            if wp.static(tiles):
                # ---- H = A + JᵀGJ and −∇ℓ in shared tiles, by tile products; factor and solve there.
                assemble(P, world, lane, Hs, Js, GJs, xs, L[world], rhs[world], As)
                if evaluate_only != 0:
                    wp.tile_store(H[world], Hs)
                    break
                failed = shared_factor_solve(Hs, xs, L[world], lane)  # the slab's J rows: free now
                for k in range(lane, nv, bd):
                    dvk = T(xs[k, 0])
                    P.dv[world, k] = dvk
                    if not wp.isfinite(dvk):
                        failed = 1
            else:
                # ---- H = A + JᵀGJ (lower triangle) and −∇ℓ in TL, rows of H over lanes.
                if wp.static(shared):
                    hessian_rows_shared(P, world, lane, bd, H, rhs, As)
                else:
                    hessian_rows(P, world, lane, bd, H, rhs)
                if evaluate_only != 0:
                    break
                block_sync(lane)  # H and −∇ℓ complete before the tile loads
                if wp.static(lanes):  # H's rows in the lanes' registers
                    failed = factor_solve(H[world], rhs[world], dv_out[world], nv, lane)
                elif wp.static(single):
                    failed = factor_solve(H[world], rhs[world], dv_out[world], lane)
                else:
                    failed = factor_solve(H[world], rhs[world], nb, lane, L[world], dv_out[world])
                block_sync(lane)  # Δv stored by the tiles before the lanes read it
                if wp.static(shared):
                    wp.tile_assign(xs, wp.tile_load(dv_out[world], shape=(FUSED_TILE, 1)), offset=(0, 0))
                for k in range(lane, nv, bd):
                    dvk = T(dv_out[world, k, 0])
                    P.dv[world, k] = dvk
                    if not wp.isfinite(dvk):
                        failed = 1
            # ---- line search along Δv.
            if block_max_int(failed) != 0:  # a failed pivot or a non-finite Δv
                status = status | LINEAR_SOLVE_FAILURE
                break
            f.direction_rows(P, world, lane, bd)  # Δvc = J Δv
            sums = V3()
            if wp.static(shared):
                sums = direction_sums_shared(P, world, lane, bd, As, v_star_s, xs)
            else:
                sums = f.direction_sums(P, world, lane, bd)
            q = block_sum3(sums)  # also the barrier for Δvc
            if lane == 0:
                P.line[world, 1] = q[0]
                P.line[world, 2] = q[1]
            block_sync(lane)
            alpha, evals, ls_failed = search(P, world, lane, N.ell[world], q[2], N.line_search)
            iterations = iterations + 1
            ls_iterations = ls_iterations + evals
            if ls_failed != 0:
                status = status | LINE_SEARCH_FAILURE
                break
            for k in range(lane, nv, bd):
                P.v[world, k] = P.v[world, k] + alpha * P.dv[world, k]
            if lane == 0:  # newton_stop reads them after the barrier below
                N.alpha_prev[world] = alpha
                N.ell_prev[world] = N.ell[world]
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
            if iterations == 0:  # else the last line search's, written in the loop
                N.alpha_prev[world] = zero
        if lane == 0 and running != 0:  # what the staged loop leaves after its last evaluation (ℓ, residual
            if evaluate_only == 0:      # and scale: written in the loop)
                N.status[world] = N.status[world] | status
                N.done[world] = 1
                if iterations == 0:
                    N.ell_prev[world] = zero

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

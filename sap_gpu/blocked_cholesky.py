"""Batched, masked, multi-right-hand-side Cholesky solves ``A X = B`` with Warp tiles.

One thread block per world (``wp.launch_tiled``); worlds whose ``active`` flag is 0 return at
once (converged worlds cost nothing). Matrices are padded to ``n`` (a multiple of the tile
size ``T``) with the identity on the padding, so the padded solve equals the unpadded one.

* ``n ≤ T``: one tile: ``L = tile_cholesky(A)``, ``X = tile_cholesky_solve(L, B)``.
* ``n > T`` (``nb = n/T`` blocks): right-looking blocked Cholesky into a scratch ``L``:
      L_jj = chol(A_jj − Σ_k<j L_jk L_jkᵀ),  L_ij = (A_ij − Σ_k<j L_ik L_jkᵀ) L_jj⁻ᵀ,
  then block forward (L Y = B) and backward (Lᵀ X = Y) substitution.

Warp's ``tile_cholesky`` is the building block; batching, masking, padding and blocking are
ours. float32 and float64 kernels are compiled on first use and cached: one per (n, nrhs, dtype)
for the single tile, one per (T, nrhs, dtype) for every blocked size.

**Factor check.** Warp's tile Cholesky does not signal failure: on the CPU (Warp's scalar
factorization) a non-SPD matrix gives NaN, the square root of a negative pivot, but on CUDA
(cuSolverDx) the library's failure flag is dropped and what a failed factorization leaves in L
is the library's business: a stored non-positive pivot as in LAPACK, or columns never
touched. So every factorization here checks its result explicitly, in a way that does not
depend on what a failure leaves: each row i of L must have a pivot L_ii that is finite and
> 0 and must reproduce A's diagonal, |Σ_k L_ik² − A_ii| ≤ 8(n + 1)ε·A_ii (a correct factor
meets this by the backward-error bound of Cholesky; a stopped or wrong one misses by O(1)). A
world that fails is reported in ``failed`` (the Newton loop turns it into
``LINEAR_SOLVE_FAILURE``). The factor-and-solve steps
are ``wp.func`` s (:func:`single_factor_solve`, :func:`blocked_factor_solve`) shared with the
fused Newton kernel (:mod:`sap_gpu.contact_solve_fused`), so both paths factor the same way.
"""

import warp as wp

from .launch import TILE_BLOCK_DIM, built_once, launch_blocks

wp.set_module_options({"enable_backward": False})

__all__ = ["padded_size", "TILE", "BLOCK_DIM", "solve", "single_factor_solve", "shared_factor_solve",
           "blocked_factor_solve", "block_max_int", "block_or_int", "block_sum_int", "block_prefix_int", "block_sync"]

TILE = 32  # tile edge: one 32×32 fp64 tile is 8 KiB of shared memory
BLOCK_DIM = TILE_BLOCK_DIM  # threads per world (one warp)


def padded_size(nv: int, tile: int = TILE) -> int:
    """Smallest size ≥ nv that the solver accepts: nv rounded up to 8 within one tile, else to the tile."""
    if nv <= tile:
        return max(8, -(-nv // 8) * 8)
    return -(-nv // tile) * tile


@wp.func
def block_max_int(x: int) -> int:
    """The largest ``x`` over the block's lanes, returned to every lane (a cooperative call)."""
    return wp.tile_extract(wp.tile_max(wp.tile(x)), 0)


@wp.func
def block_or_int(x: int) -> int:
    """The bitwise OR of ``x`` over the block's lanes (e.g. a world's status bits), returned to
    every lane (a cooperative call)."""
    return wp.tile_extract(wp.tile_reduce(wp.bit_or, wp.tile(x)), 0)


@wp.func
def block_sum_int(x: int) -> int:
    """The sum of ``x`` over the block's lanes, returned to every lane (a cooperative call; integers,
    so exact in any order)."""
    return wp.tile_extract(wp.tile_sum(wp.tile(x)), 0)


@wp.func
def block_prefix_int(x: int, lane: int):
    """``(Σ x of the lanes before lane, Σ x of every lane)``: an exclusive prefix sum over the
    block's lanes in lane order and the block's total (a cooperative call; integers, so exact)."""
    inclusive = wp.tile_scan_inclusive(wp.tile(x))
    return wp.tile_extract(inclusive, lane) - x, wp.tile_extract(inclusive, wp.block_dim() - 1)


# The factor check's relative tolerance on |Σ_k L_ik² − A_ii|, in units of (n + 1)·ε: a computed
# Cholesky factor satisfies A + ΔA = L Lᵀ with |ΔA_ii| ≤ γ_{n+1} (L Lᵀ)_ii, γ_{n+1} ≈ (n + 1)ε
# (Higham, Accuracy and Stability of Numerical Algorithms, Thm 10.3), and summing the row adds
# at most as much again; 8 leaves a factor 4 for blocked and library variants of the algorithm.
# A factorization that stopped or went wrong misses A_ii by O(1) relative.
FACTOR_CHECK_EPS_UNITS = 8.0


def _factor_check(dtype):
    eps = {wp.float32: 2.0 ** -23, wp.float64: 2.0 ** -52}[dtype]

    @wp.func
    def bad_factor_row(a_ii: dtype, l_ii: dtype, row_sq: dtype, n: int) -> int:
        """1 unless the pivot L_ii is finite and > 0 and row i of an n×n factor L reproduces A_ii
        (|Σ_k L_ik² − A_ii| ≤ 8(n + 1)ε·A_ii; ``not`` keeps NaN on the failing side)."""
        tol = dtype(FACTOR_CHECK_EPS_UNITS * eps) * dtype(n + 1)
        if l_ii > dtype(0.0) and wp.isfinite(l_ii) and wp.abs(row_sq - a_ii) <= tol * a_ii:
            return 0
        return 1

    return bad_factor_row


def _tile_factor_check(dtype, n: int):
    """``wp.func (A, L, lane) -> bad``: rows i = lane, lane + block, … of the (n, n) factor L (the
    shared tile ``tile_cholesky`` returns: its elements are read without a block barrier, so
    lanes may read different counts) of the matrix A (a 2D array) checked by
    :func:`_factor_check`; 1 if one fails."""
    bad_factor_row = _factor_check(dtype)

    @wp.func
    def check(A: wp.array2d(dtype=dtype), L: wp.tile(dtype=dtype, shape=(n, n), storage="shared"), lane: int) -> int:
        bad = int(0)
        for i in range(lane, n, wp.block_dim()):
            s = dtype(0.0)
            for k in range(i + 1):
                lik = wp.tile_extract(L, i, k)
                s = s + lik * lik
            bad = wp.max(bad, bad_factor_row(A[i, i], wp.tile_extract(L, i, i), s, n))
        return bad

    return check


def _array_factor_check(dtype):
    """``wp.func (A, L, n, lane) -> bad``: :func:`_tile_factor_check` for a factor stored in the 2D
    array L (the blocked factorization's scratch); the caller puts a block barrier between the
    factor's last store and this."""
    bad_factor_row = _factor_check(dtype)

    @wp.func
    def check(A: wp.array2d(dtype=dtype), L: wp.array2d(dtype=dtype), n: int, lane: int) -> int:
        bad = int(0)
        for i in range(lane, n, wp.block_dim()):
            s = dtype(0.0)
            for k in range(i + 1):
                s = s + L[i, k] * L[i, k]
            bad = wp.max(bad, bad_factor_row(A[i, i], L[i, i], s, n))
        return bad

    return check


@wp.func
def block_sync(lane: int):
    """A barrier of the world's block (a cooperative call: a tile value read back)."""
    wp.tile_extract(wp.tile(lane), 0)


@built_once()
def single_factor_solve(n: int, r: int, dtype):
    """``wp.func (A, B, X, lane) -> failed``: X = A⁻¹B for one (n, n) tile, pivots checked.

    A, B, X are one world's 2D slices; every lane of the block must call it. Returns 1 on every
    lane if a pivot failed (X is then meaningless), else 0.
    """
    check = _tile_factor_check(dtype, n)

    @wp.func
    def factor_solve(A: wp.array2d(dtype=dtype), B: wp.array2d(dtype=dtype), X: wp.array2d(dtype=dtype),
                     lane: int) -> int:
        L = wp.tile_cholesky(wp.tile_load(A, shape=(n, n)))
        bad = check(A, L, lane)
        wp.tile_store(X, wp.tile_cholesky_solve(L, wp.tile_load(B, shape=(n, r))))
        return block_max_int(bad)

    return factor_solve


@built_once()
def shared_factor_solve(n: int, dtype):
    """``wp.func (H, x, scratch, lane) -> failed``: x ← H⁻¹x in place for an (n, n) shared tile H
    that the block has just assembled (the fused kernel's ``fused_hessian="tiles"``), pivots
    checked.

    H is overwritten by its Cholesky factor (``tile_cholesky_inplace``: no second n×n tile), so
    each lane first copies the diagonal of its rows to ``scratch[i, i]`` (a 2D array of the world's
    global scratch, at least n × n: a lane reads back only what it wrote, so no barrier, and no
    tile-element store, which would be a barrier of its own), and :func:`_tile_factor_check` reads
    A_ii there. x is (n, 1). Every lane of the block must call it; returns 1 on every lane if a
    pivot failed.
    """
    check = _tile_factor_check(dtype, n)

    @wp.func
    def factor_solve(H: wp.tile(dtype=dtype, shape=(n, n), storage="shared"),
                     x: wp.tile(dtype=dtype, shape=(n, 1), storage="shared"), scratch: wp.array2d(dtype=dtype),
                     lane: int) -> int:
        for i in range(lane, n, wp.block_dim()):
            scratch[i, i] = H[i, i]
        wp.tile_cholesky_inplace(H)
        bad = check(scratch, H, lane)
        wp.tile_cholesky_solve_inplace(H, x)
        return block_max_int(bad)

    return factor_solve


@built_once()
def blocked_factor_solve(t: int, r: int, dtype):
    """``wp.func (A, B, nb, lane, L, X) -> failed``: the blocked Cholesky of the module docstring
    with (t, t) tiles and ``nb`` blocks, factor in the scratch L, pivots of every diagonal block
    checked (returns 1 on every lane if one failed)."""
    check = _array_factor_check(dtype)

    # nb is a runtime argument on purpose: loops with constant bounds are unrolled by Warp, and
    # every unrolled tile temporary takes its own shared memory.
    @wp.func
    def factor_solve(A: wp.array2d(dtype=dtype), B: wp.array2d(dtype=dtype), nb: int, lane: int,
                     L: wp.array2d(dtype=dtype), X: wp.array2d(dtype=dtype)) -> int:
        for j in range(nb):
            Ajj = wp.tile_load(A, shape=(t, t), offset=(j * t, j * t))
            for k in range(j):
                Ljk = wp.tile_load(L, shape=(t, t), offset=(j * t, k * t))
                Ajj = Ajj - wp.tile_matmul(Ljk, wp.tile_transpose(Ljk))
            Ljj = wp.tile_cholesky(Ajj)
            wp.tile_store(L, Ljj, offset=(j * t, j * t))
            for i in range(j + 1, nb):
                Aij = wp.tile_load(A, shape=(t, t), offset=(i * t, j * t))
                for k in range(j):
                    Lik = wp.tile_load(L, shape=(t, t), offset=(i * t, k * t))
                    Ljk2 = wp.tile_load(L, shape=(t, t), offset=(j * t, k * t))
                    Aij = Aij - wp.tile_matmul(Lik, wp.tile_transpose(Ljk2))
                # L_ij L_jjᵀ = A_ij  ⇔  L_jj L_ijᵀ = A_ijᵀ
                Lij_t = wp.tile_lower_solve(Ljj, wp.tile_transpose(Aij))
                wp.tile_store(L, wp.tile_transpose(Lij_t), offset=(i * t, j * t))
        block_sync(lane)  # every block of L stored before the lanes read rows of it
        bad = check(A, L, nb * t, lane)
        for j in range(nb):  # forward: L Y = B
            Yj = wp.tile_load(B, shape=(t, r), offset=(j * t, 0))
            for k in range(j):
                Ljk = wp.tile_load(L, shape=(t, t), offset=(j * t, k * t))
                Yk = wp.tile_load(X, shape=(t, r), offset=(k * t, 0))
                Yj = Yj - wp.tile_matmul(Ljk, Yk)
            Ljj = wp.tile_load(L, shape=(t, t), offset=(j * t, j * t))
            wp.tile_store(X, wp.tile_lower_solve(Ljj, Yj), offset=(j * t, 0))
        for jj in range(nb):  # backward: Lᵀ X = Y
            j = nb - 1 - jj
            Zj = wp.tile_load(X, shape=(t, r), offset=(j * t, 0))
            for i in range(j + 1, nb):
                Lij = wp.tile_load(L, shape=(t, t), offset=(i * t, j * t))
                Xi = wp.tile_load(X, shape=(t, r), offset=(i * t, 0))
                Zj = Zj - wp.tile_matmul(wp.tile_transpose(Lij), Xi)
            Ljj = wp.tile_load(L, shape=(t, t), offset=(j * t, j * t))
            wp.tile_store(X, wp.tile_upper_solve(wp.tile_transpose(Ljj), Zj), offset=(j * t, 0))
        return block_max_int(bad)

    return factor_solve


@built_once()
def _single(n: int, r: int, dtype):
    factor_solve = single_factor_solve(n, r, dtype)

    @wp.kernel(enable_backward=False, module="unique")
    def solve_single(A: wp.array3d(dtype=dtype), B: wp.array3d(dtype=dtype), active: wp.array(dtype=int),
                     report: int, X: wp.array3d(dtype=dtype), failed: wp.array(dtype=int)):
        world, lane = wp.tid()
        if active[world] == 0:
            return
        bad = factor_solve(A[world], B[world], X[world], lane)
        if report != 0 and lane == 0:
            failed[world] = bad

    return solve_single


@built_once()
def _blocked(t: int, r: int, dtype):
    factor_solve = blocked_factor_solve(t, r, dtype)

    @wp.kernel(enable_backward=False, module="unique")
    def solve_blocked(A: wp.array3d(dtype=dtype), B: wp.array3d(dtype=dtype), active: wp.array(dtype=int), nb: int,
                      report: int, L: wp.array3d(dtype=dtype), X: wp.array3d(dtype=dtype),
                      failed: wp.array(dtype=int)):
        world, lane = wp.tid()
        if active[world] == 0:
            return
        bad = factor_solve(A[world], B[world], nb, lane, L[world], X[world])
        if report != 0 and lane == 0:
            failed[world] = bad

    return solve_blocked


def solve(A: wp.array, B: wp.array, X: wp.array, active: wp.array, L_scratch=None,
          tile: int = TILE, failed=None) -> None:
    """Solve ``A[w] X[w] = B[w]`` for every world with ``active[w] != 0``.

    Args:
        A: SPD matrices, (W, n, n), float32 or float64, padded with the identity.
        B: right-hand sides, (W, n, nrhs), same dtype.
        X: solutions, (W, n, nrhs) (may alias nothing else; untouched for inactive worlds).
        active: per-world flags, (W,) int32.
        L_scratch: (W, n, n) factor storage, required when n > tile.
        tile: tile edge T for the blocked path.
        failed: optional (W,) int32 flags: set to 1 for an active world whose factorization had a
            pivot that is not finite and > 0, to 0 for the other active worlds (inactive ones
            are left alone).
    """
    if A.ndim != 3 or A.shape[1] != A.shape[2]:
        raise ValueError(f"A: expected a (W, n, n) array, got shape {A.shape}")
    W, n, _ = A.shape
    if A.dtype not in (wp.float32, wp.float64):
        raise ValueError(f"A: dtype must be float32 or float64, got {A.dtype}")
    if B.ndim != 3 or B.shape[:2] != (W, n):
        raise ValueError(f"B: expected shape ({W}, {n}, nrhs) to match A {A.shape}, got {B.shape}")
    r = B.shape[2]
    if X.shape != B.shape:
        raise ValueError(f"X: expected B's shape {B.shape}, got {X.shape}")
    if A.dtype != B.dtype or A.dtype != X.dtype:
        raise ValueError(f"A, B, X: dtypes must match, got {A.dtype}, {B.dtype}, {X.dtype}")
    if active.shape != (W,) or active.dtype != wp.int32:
        raise ValueError(f"active: expected an int32 array of shape ({W},), got {active.dtype} {active.shape}")
    if any(a.device != A.device for a in (B, X, active)):
        raise ValueError(f"A, B, X, active: must be on one device, A is on {A.device}")
    if failed is not None and (failed.shape != (W,) or failed.dtype != wp.int32 or failed.device != A.device):
        raise ValueError(f"failed: expected an int32 array of shape ({W},) on {A.device}, got {failed.dtype} "
                         f"{failed.shape} on {failed.device}")
    report, flags = (0, active) if failed is None else (1, failed)  # report 0: flags never written
    if n <= tile:
        launch_blocks(_single(n, r, A.dtype), num_worlds=W, device=A.device, inputs=[A, B, active, report],
                      outputs=[X, flags], block_dim=BLOCK_DIM)
        return
    if n % tile:
        raise ValueError(f"A: size {n} must be a multiple of the tile size {tile} (use padded_size)")
    if L_scratch is None or L_scratch.shape != A.shape or L_scratch.dtype != A.dtype:
        raise ValueError("L_scratch: a (W, n, n) array of A's dtype is required when n > tile")
    launch_blocks(_blocked(tile, r, A.dtype), num_worlds=W, device=A.device, inputs=[A, B, active, n // tile, report],
                  outputs=[L_scratch, X, flags], block_dim=BLOCK_DIM)

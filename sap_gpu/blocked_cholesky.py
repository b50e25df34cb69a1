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
for the single tile, one per (T, nrhs, dtype) for every blocked size. A matrix that is not SPD
yields non-finite entries in X, which callers check.
"""

import warp as wp

wp.set_module_options({"enable_backward": False})

__all__ = ["padded_size", "TILE", "BLOCK_DIM", "solve"]

TILE = 32  # tile edge: one 32×32 fp64 tile is 8 KiB of shared memory
BLOCK_DIM = 32  # threads per world (one warp)
_KERNELS: dict = {}


def padded_size(nv: int, tile: int = TILE) -> int:
    """Smallest size ≥ nv that the solver accepts: nv rounded up to 8 within one tile, else to the tile."""
    if nv <= tile:
        return max(8, -(-nv // 8) * 8)
    return -(-nv // tile) * tile


def _single(n: int, r: int, dtype):
    @wp.kernel(enable_backward=False, module="unique")
    def solve_single(A: wp.array3d(dtype=dtype), B: wp.array3d(dtype=dtype), active: wp.array(dtype=int),
                     X: wp.array3d(dtype=dtype)):
        world = wp.tid()
        if active[world] == 0:
            return
        L = wp.tile_cholesky(wp.tile_load(A[world], shape=(n, n)))
        wp.tile_store(X[world], wp.tile_cholesky_solve(L, wp.tile_load(B[world], shape=(n, r))))

    return solve_single


def _blocked(t: int, r: int, dtype):
    # nb is a runtime argument on purpose: loops with constant bounds are unrolled by Warp, and
    # every unrolled tile temporary takes its own shared memory.
    @wp.kernel(enable_backward=False, module="unique")
    def solve_blocked(A: wp.array3d(dtype=dtype), B: wp.array3d(dtype=dtype), active: wp.array(dtype=int), nb: int,
                      L: wp.array3d(dtype=dtype), X: wp.array3d(dtype=dtype)):
        world = wp.tid()
        if active[world] == 0:
            return
        for j in range(nb):
            Ajj = wp.tile_load(A[world], shape=(t, t), offset=(j * t, j * t))
            for k in range(j):
                Ljk = wp.tile_load(L[world], shape=(t, t), offset=(j * t, k * t))
                Ajj = Ajj - wp.tile_matmul(Ljk, wp.tile_transpose(Ljk))
            Ljj = wp.tile_cholesky(Ajj)
            wp.tile_store(L[world], Ljj, offset=(j * t, j * t))
            for i in range(j + 1, nb):
                Aij = wp.tile_load(A[world], shape=(t, t), offset=(i * t, j * t))
                for k in range(j):
                    Lik = wp.tile_load(L[world], shape=(t, t), offset=(i * t, k * t))
                    Ljk2 = wp.tile_load(L[world], shape=(t, t), offset=(j * t, k * t))
                    Aij = Aij - wp.tile_matmul(Lik, wp.tile_transpose(Ljk2))
                # L_ij L_jjᵀ = A_ij  ⇔  L_jj L_ijᵀ = A_ijᵀ
                Lij_t = wp.tile_lower_solve(Ljj, wp.tile_transpose(Aij))
                wp.tile_store(L[world], wp.tile_transpose(Lij_t), offset=(i * t, j * t))
        for j in range(nb):  # forward: L Y = B
            Yj = wp.tile_load(B[world], shape=(t, r), offset=(j * t, 0))
            for k in range(j):
                Ljk = wp.tile_load(L[world], shape=(t, t), offset=(j * t, k * t))
                Yk = wp.tile_load(X[world], shape=(t, r), offset=(k * t, 0))
                Yj = Yj - wp.tile_matmul(Ljk, Yk)
            Ljj = wp.tile_load(L[world], shape=(t, t), offset=(j * t, j * t))
            wp.tile_store(X[world], wp.tile_lower_solve(Ljj, Yj), offset=(j * t, 0))
        for jj in range(nb):  # backward: Lᵀ X = Y
            j = nb - 1 - jj
            Zj = wp.tile_load(X[world], shape=(t, r), offset=(j * t, 0))
            for i in range(j + 1, nb):
                Lij = wp.tile_load(L[world], shape=(t, t), offset=(i * t, j * t))
                Xi = wp.tile_load(X[world], shape=(t, r), offset=(i * t, 0))
                Zj = Zj - wp.tile_matmul(wp.tile_transpose(Lij), Xi)
            Ljj = wp.tile_load(L[world], shape=(t, t), offset=(j * t, j * t))
            wp.tile_store(X[world], wp.tile_upper_solve(wp.tile_transpose(Ljj), Zj), offset=(j * t, 0))

    return solve_blocked


def solve(A: wp.array, B: wp.array, X: wp.array, active: wp.array, L_scratch=None,
          tile: int = TILE) -> None:
    """Solve ``A[w] X[w] = B[w]`` for every world with ``active[w] != 0``.

    Args:
        A: SPD matrices, (W, n, n), float32 or float64, padded with the identity.
        B: right-hand sides, (W, n, nrhs), same dtype.
        X: solutions, (W, n, nrhs) (may alias nothing else; untouched for inactive worlds).
        active: per-world flags, (W,) int32.
        L_scratch: (W, n, n) factor storage, required when n > tile.
        tile: tile edge T for the blocked path.
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
    if n <= tile:
        key = ("single", n, r, A.dtype)
        if key not in _KERNELS:
            _KERNELS[key] = _single(n, r, A.dtype)
        wp.launch_tiled(_KERNELS[key], dim=[W], inputs=[A, B, active], outputs=[X], block_dim=BLOCK_DIM,
                        device=A.device)
        return
    if n % tile:
        raise ValueError(f"A: size {n} must be a multiple of the tile size {tile} (use padded_size)")
    if L_scratch is None or L_scratch.shape != A.shape or L_scratch.dtype != A.dtype:
        raise ValueError("L_scratch: a (W, n, n) array of A's dtype is required when n > tile")
    key = ("blocked", tile, r, A.dtype)
    if key not in _KERNELS:
        _KERNELS[key] = _blocked(tile, r, A.dtype)
    wp.launch_tiled(_KERNELS[key], dim=[W], inputs=[A, B, active, n // tile], outputs=[L_scratch, X],
                    block_dim=BLOCK_DIM, device=A.device)

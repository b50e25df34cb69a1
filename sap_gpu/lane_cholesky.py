"""A world's 32×32 SPD solve held in its block's registers: one row per lane, rows exchanged by
warp shuffles (``SapConfig.fused_cholesky="lanes"``).

The fused Newton kernel (:mod:`sap_gpu.contact_solve_fused`) factors H and solves for Δv once per
Newton iteration of a world, inside a block of 32 lanes that holds one world. Warp's
``tile_cholesky`` (cuSolverDx on CUDA) does that through a shared-memory tile; this is the other
way to lay it out, written for that block shape:

* **Rows in registers.** Lane r loads row r of H (both triangles, from the lower triangle that
  the kernel stores) into 32 registers, and b_r.
* **Elimination** (LDLᵀ, right-looking, no square roots), for k = 0 … m−1: every lane reads the
  pivot d_k = H_kk and b_k from lane k, and each element H_jk (j > k) from lane j, by a warp
  shuffle; lane r > k then updates its row, H_rj ← H_rj − (H_rk/d_k)·H_jk for j > k, and
  b_r ← b_r − (H_rk/d_k)·b_k. Row r then holds row r of the upper factor U = D Lᵀ, and b the
  forward-substituted z = L⁻¹b scaled by D.
* **Back substitution**, j = m−1 … 0: x_j = (z_j − Σ_{i>j} U_ji x_i)/d_j on lane j; lane r < j
  adds U_rj x_j to its sum, with x_j read from lane j by a shuffle.

The steps (k, and j of the back substitution) run as loops; the loops over the 32 columns
inside a step are unrolled, and the step's own column of a lane's row, a register chosen at run
time, is read by a tree of 31 selects on the bits of k (``SAP_AT``; it was a chain of 32 selects
each with its own comparison, twice the instructions). Every register index is then a compile-time
constant, so the rows stay in registers: no shared memory, no local memory, and no barrier but
the warp's own lockstep. Sizes m < 32 skip the steps past m (uniform branches); rows past m are
the identity and their x is 0.

**Why the steps are not unrolled.** Unrolled too, the elimination and solve were 3,241 machine
instructions of sm_90 (52 kB); rolled, 1,240. They execute more instructions rolled (every step
updates all 32 columns under a predicate and selects its column), but on an H100 the fused
kernel's warps spent 41 % of their time waiting for instructions to be fetched, and with the
rolled steps the whole fused step at 8192 humanoid worlds ran 1.08× (approx32) and 1.16×
(drake) the tile Cholesky's speed, where the unrolled steps ran 0.95× and 0.88×
(docs/benchmarks.md § The fused kernel under Nsight Compute).

**Pivots.** A step whose pivot d_k is not finite and > 0 stops the factorization and the call
returns 1 (the LDLᵀ pivot is what LAPACK's potrf takes the square root of: the same test).

**On the CPU device** the same C++ runs with the shuffle replaced by a round trip through the
world's ``b`` (free once it is in registers; restored before the call returns) between block
barriers, so
the 32-lane code is what ``wp.config.enable_cpu_blocks`` tests exercise; with one lane per
block (Warp's CPU default) that lane holds all 32 rows. Results agree with Warp's tile
Cholesky to rounding: the operations are the same Gaussian elimination in another order.
"""

import warp as wp

from .launch import TILE_BLOCK_DIM, built_once, launch_blocks

wp.set_module_options({"enable_backward": False})

__all__ = ["LANES", "lane_factor_solve", "solve"]

LANES = 32  # the system size and the block: one row per lane of one warp


# The snippet, for scalar type SCALAR. Macros keep one algorithm for both devices:
#   SAP_PUT(slot, v): make this lane's values v (one per row it holds) readable by the others;
#   SAP_GET(slot, j): row j's value. On CUDA these are a register and __shfl_sync (one row per
#   lane, so the block must be one warp); on the CPU device the world's b (in registers by then)
#   with block barriers around the writes.
# The elimination is a function of its own that CUDA does not inline (__noinline__): inlined, the
# compiler scheduled it together with the rest of the fused Newton kernel, which then spilled
# (docs/benchmarks.md § Registers behind the code's choices).
# Its arguments are raw pointers and byte strides, so no array struct needs an address.
_SNIPPET = r"""
#if defined(__CUDA_ARCH__)
#define SAP_NOINLINE __noinline__
#else
#define SAP_NOINLINE
#endif
#define SAP_H(i, j) (*(const SCALAR*)((const char*)Hp + (long long)(i) * hs0 + (long long)(j) * hs1))
#define SAP_B(i) (*(SCALAR*)((char*)bp + (long long)(i) * bs0))
#define SAP_X(i) (*(SCALAR*)((char*)xp + (long long)(i) * xs0))
#if defined(__CUDA_ARCH__)
#define SAP_PUT(slot, val) do { slot##_reg = (val)[0]; } while (0)
#define SAP_GET(slot, j) __shfl_sync(0xffffffffu, slot##_reg, (j))
#else
#define SAP_PUT(slot, val) do { WP_TILE_SYNC(); for (int v_ = 0; v_ < VL; ++v_) { \
    const int r_ = lane + v_ * BD; if (r_ < N) SAP_##slot(r_) = (val)[v_]; } WP_TILE_SYNC(); } while (0)
#define SAP_GET(slot, j) SAP_##slot(j)
#define SAP_col(i) SAP_B(i)
#define SAP_rhs(i) SAP_B(i)
#define SAP_sol(i) SAP_B(i)
#endif
// SAP_AT(dst, row, k): dst = row[k] for a run-time k in [0, 32), by a tree of selects on k's five
// bits (31 selects; every index a compile-time constant, so row stays in registers). The same
// code on the CPU device, where it is tested.
#define SAP_AT(dst, row, k) do { const int k_ = (k); SCALAR p_[16]; \
    WP_PRAGMA_UNROLL for (int i_ = 0; i_ < 16; ++i_) p_[i_] = (k_ & 1) ? (row)[2 * i_ + 1] : (row)[2 * i_]; \
    WP_PRAGMA_UNROLL for (int i_ = 0; i_ < 8; ++i_) p_[i_] = (k_ & 2) ? p_[2 * i_ + 1] : p_[2 * i_]; \
    WP_PRAGMA_UNROLL for (int i_ = 0; i_ < 4; ++i_) p_[i_] = (k_ & 4) ? p_[2 * i_ + 1] : p_[2 * i_]; \
    WP_PRAGMA_UNROLL for (int i_ = 0; i_ < 2; ++i_) p_[i_] = (k_ & 8) ? p_[2 * i_ + 1] : p_[2 * i_]; \
    dst = (k_ & 16) ? p_[1] : p_[0]; } while (0)
struct sap_lane_cholesky {
    static SAP_NOINLINE CUDA_CALLABLE int run(const SCALAR* Hp, long long hs0, long long hs1, SCALAR* bp,
                                              long long bs0, SCALAR* xp, long long xs0, int m, int lane)
    {
        constexpr int N = 32;
        constexpr int BD = WP_TILE_BLOCK_DIM;
        constexpr int VL = (N + BD - 1) / BD;  // rows per lane: 1 with 32 lanes
        // One lane holding every row (Warp's CPU default) skips the rows and columns whose update
        // is a no-op (rows ≤ k, rows and columns past m: the same values, less work); with one
        // row per lane the bounds are the compile-time N that unrolling needs.
        constexpr bool ONE = (BD == 1);
        const int vend = ONE ? m : VL;
        const int jend = ONE ? m : N;
#if defined(__CUDA_ARCH__)
        static_assert(BD == N, "lane_factor_solve: one row per lane of a 32-lane block");
        SCALAR col_reg = SCALAR(0), rhs_reg = SCALAR(0), sol_reg = SCALAR(0);
#endif
        SCALAR a[VL][N];  // a[v][j]: row lane + v·BD of H, then of U = D Lᵀ
        SCALAR rb[VL];    // b, then z
        SCALAR dr[VL];    // the row's pivot d_r
        SCALAR acc[VL];   // back substitution: Σ_{j>r} U_rj x_j
        SCALAR xo[VL];    // x_r
        SCALAR put[VL];
#if !defined(__CUDA_ARCH__)
        SCALAR b_in[VL];  // b as given: the scratch rows are restored before the return
#endif
        for (int v = 0; v < VL; ++v) {
            const int r = lane + v * BD;
            WP_PRAGMA_UNROLL
            for (int j = 0; j < N; ++j) {  // both triangles of row r, from the lower one
                SCALAR h = (r == j) ? SCALAR(1) : SCALAR(0);
                if (r < m && j < m)
                    h = (j <= r) ? SAP_H(r, j) : SAP_H(j, r);
                a[v][j] = h;
            }
#if defined(__CUDA_ARCH__)
            rb[v] = (r < m) ? SAP_B(r) : SCALAR(0);
#else
            b_in[v] = (r < N) ? SAP_B(r) : SCALAR(0);
            rb[v] = (r < m) ? b_in[v] : SCALAR(0);
#endif
            dr[v] = SCALAR(1);
            acc[v] = SCALAR(0);
            xo[v] = SCALAR(0);
        }
        int bad = 0;
        WP_PRAGMA_NO_UNROLL
        for (int k = 0; k < N; ++k) {  // elimination; every branch below is the same on all lanes
            if (k >= m)
                break;
            for (int v = 0; v < VL; ++v)
                SAP_AT(put[v], a[v], k);
            SAP_PUT(rhs, rb);
            const SCALAR bk = SAP_GET(rhs, k);
            SAP_PUT(col, put);  // on the CPU device the same scratch row: after every lane's read of b_k
            const SCALAR dk = SAP_GET(col, k);
            if (!(dk > SCALAR(0)) || !wp::isfinite(dk)) {
                bad = 1;
                break;
            }
            const SCALAR inv = SCALAR(1) / dk;
            SCALAR w[VL];
            for (int v = 0; v < VL; ++v) {
                const int r = lane + v * BD;
                w[v] = (r > k) ? put[v] * inv : SCALAR(0);
                if (r == k)
                    dr[v] = dk;
            }
            WP_PRAGMA_UNROLL
            for (int j = ONE ? k + 1 : 0; j < jend; ++j) {
                const SCALAR hj = SAP_GET(col, j);  // H_jk, from row j
                for (int v = ONE ? k + 1 : 0; v < vend; ++v) {
                    const int r = lane + v * BD;
                    a[v][j] = (r > k && j > k) ? a[v][j] - w[v] * hj : a[v][j];
                }
            }
            for (int v = 0; v < VL; ++v) {
                const int r = lane + v * BD;
                rb[v] = (r > k) ? rb[v] - w[v] * bk : rb[v];
            }
        }
        if (bad == 0) {
            SCALAR invd[VL];
            for (int v = 0; v < VL; ++v)
                invd[v] = SCALAR(1) / dr[v];
            WP_PRAGMA_NO_UNROLL
            for (int jj = 0; jj < N; ++jj) {  // back substitution, j = N−1 … 0
                const int j = N - 1 - jj;
                if (j < m) {
                    for (int v = ONE ? j : 0; v < (ONE ? j + 1 : VL); ++v)
                        xo[v] = (rb[v] - acc[v]) * invd[v];  // final on row j
                    SAP_PUT(sol, xo);
                    const SCALAR xj = SAP_GET(sol, j);
                    for (int v = 0; v < (ONE ? j : VL); ++v) {
                        const int r = lane + v * BD;
                        SCALAR arj;
                        SAP_AT(arj, a[v], j);
                        acc[v] = (r < j) ? acc[v] + arj * xj : acc[v];
                    }
                }
            }
            for (int v = 0; v < VL; ++v) {
                const int r = lane + v * BD;
                if (r < N)
                    SAP_X(r) = (r < m) ? xo[v] : SCALAR(0);
            }
        }
#if !defined(__CUDA_ARCH__)
        WP_TILE_SYNC();  // every lane's last read of the scratch rows
        for (int v = 0; v < VL; ++v) {
            const int r = lane + v * BD;
            if (r < N)
                SAP_B(r) = b_in[v];
        }
        WP_TILE_SYNC();
#endif
        return bad;
    }
};
#undef SAP_PUT
#undef SAP_GET
#undef SAP_col
#undef SAP_rhs
#undef SAP_sol
#undef SAP_H
#undef SAP_B
#undef SAP_X
#undef SAP_AT
#undef SAP_NOINLINE
return sap_lane_cholesky::run(H.data, H.strides[0], H.strides[1], b.data, b.strides[0], x.data, x.strides[0], m, lane);
"""


@built_once()
def lane_factor_solve(dtype):
    """``wp.func (H, b, x, m, lane) -> failed``: x = H⁻¹b for the leading m×m block of one world's
    (32, 32) H (lower triangle read; rows past m taken as the identity), b and x (32, 1), by the
    register elimination of the module docstring. Every lane of the world's 32-lane block must
    call it (on the CPU device any block size); returns 1 on every lane if a pivot was not finite
    and > 0 (x is then left unwritten). b is left as it was (on the CPU device it is the lanes'
    scratch during the call)."""
    if dtype not in (wp.float32, wp.float64):
        raise ValueError(f"dtype: must be wp.float32 or wp.float64, got {dtype}")
    scalar = "wp::float32" if dtype == wp.float32 else "wp::float64"

    @wp.func_native(_SNIPPET.replace("SCALAR", scalar))
    def factor_solve(H: wp.array2d(dtype=dtype), b: wp.array2d(dtype=dtype), x: wp.array2d(dtype=dtype),
                     m: int, lane: int) -> int:
        ...

    return factor_solve


@built_once()
def _kernel(dtype):
    factor_solve = lane_factor_solve(dtype)

    @wp.kernel(enable_backward=False, module="unique")
    def solve_lanes(A: wp.array3d(dtype=dtype), B: wp.array3d(dtype=dtype), m: wp.array(dtype=int),
                    X: wp.array3d(dtype=dtype), failed: wp.array(dtype=int)):
        world, lane = wp.tid()
        bad = factor_solve(A[world], B[world], X[world], m[world], lane)
        if lane == 0:
            failed[world] = bad

    return solve_lanes


def solve(A: wp.array, B: wp.array, m: wp.array, X: wp.array, failed: wp.array) -> None:
    """``X[w] = A[w]⁻¹ B[w]`` on the leading ``m[w]`` rows for every world by
    :func:`lane_factor_solve` (A (W, 32, 32), lower triangle read; B, X (W, 32, 1); m (W,) int32
    in 0…32; failed (W,) int32, 1 where a pivot was not finite and > 0). B is left as it was."""
    if A.ndim != 3 or tuple(A.shape[1:]) != (LANES, LANES):
        raise ValueError(f"A: expected a (W, {LANES}, {LANES}) array, got shape {tuple(A.shape)}")
    W = A.shape[0]
    if A.dtype not in (wp.float32, wp.float64):
        raise ValueError(f"A: dtype must be float32 or float64, got {A.dtype.__name__}")
    for name, a in (("B", B), ("X", X)):
        if tuple(a.shape) != (W, LANES, 1) or a.dtype != A.dtype:
            raise ValueError(f"{name}: expected a ({W}, {LANES}, 1) array of {A.dtype.__name__}, got "
                             f"{a.dtype.__name__} {tuple(a.shape)}")
    for name, a in (("m", m), ("failed", failed)):
        if tuple(a.shape) != (W,) or a.dtype != wp.int32:
            raise ValueError(f"{name}: expected an int32 array of shape ({W},), got {a.dtype.__name__} "
                             f"{tuple(a.shape)}")
    if any(a.device != A.device for a in (B, X, m, failed)):
        raise ValueError(f"A, B, m, X, failed: must be on one device, A is on {A.device}")
    sizes = m.numpy()
    if W and (sizes.min() < 0 or sizes.max() > LANES):
        raise ValueError(f"m: values must be in 0..{LANES}, got {sizes.min()}..{sizes.max()}")
    launch_blocks(_kernel(A.dtype), num_worlds=W, device=A.device, inputs=[A, B, m], outputs=[X, failed],
                  block_dim=TILE_BLOCK_DIM)

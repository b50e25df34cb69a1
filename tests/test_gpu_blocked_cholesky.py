"""sap_gpu.blocked_cholesky: batched, masked, multi-RHS tile Cholesky against NumPy.

Sizes cover one tile (padded to 8) and the blocked path (two and three tiles of 32), both
precisions, one and several right-hand sides. Masked worlds must come back untouched, a world
that is not SPD must come back non-finite without touching its neighbours, and bad arguments
are refused before any launch.
"""

import numpy as np
import pytest
import warp as wp
from conftest import cooperative_lanes

from sap_gpu.blocked_cholesky import TILE, padded_size, solve

# Cholesky is backward stable: ‖X − X*‖/‖X*‖ ≲ c·n·κ(A)·ε. The factor c·n is taken generously as
# 4n (both the factorization and the two triangular solves contribute), which still fails by
# orders of magnitude on a wrong block, a wrong transpose or a missing update.
STABILITY_FACTOR_PER_N = 4.0
SENTINEL = 7.25  # what masked worlds' X holds before and must hold after


def _spd(rng, W, n, cond=1e3):
    """W random SPD n×n matrices with condition number ``cond``."""
    out = np.empty((W, n, n))
    for w in range(W):
        Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
        out[w] = (Q * np.geomspace(1.0, 1.0 / cond, n)) @ Q.T
        out[w] = 0.5 * (out[w] + out[w].T)
    return out


def _pad(A, B, npad):
    """Identity on the padding of A, zeros on the padding of B."""
    W, n, _ = A.shape
    Ap = np.zeros((W, npad, npad))
    Ap[:] = np.eye(npad)
    Ap[:, :n, :n] = A
    Bp = np.zeros((W, npad, B.shape[2]))
    Bp[:, :n] = B
    return Ap, Bp


def _run(device, A, B, active, dtype):
    W, n, _ = A.shape
    npy = np.float32 if dtype == wp.float32 else np.float64
    Ad = wp.array(A.astype(npy), dtype=dtype, device=device)
    Bd = wp.array(B.astype(npy), dtype=dtype, device=device)
    Xd = wp.array(np.full(B.shape, SENTINEL, dtype=npy), dtype=dtype, device=device)
    L = wp.zeros((W, n, n), dtype=dtype, device=device) if n > TILE else None
    solve(Ad, Bd, Xd, wp.array(active.astype(np.int32), dtype=wp.int32, device=device), L)
    return Xd.numpy().astype(np.float64)


def test_padded_size():
    assert [padded_size(n) for n in (1, 7, 8, 9, 27, 32, 33, 64, 65)] == [8, 8, 8, 16, 32, 32, 64, 64, 96]
    assert padded_size(20, tile=16) == 32


@pytest.mark.parametrize("nv, nrhs", [(5, 1), (27, 3), (40, 2), (90, 2)])
@pytest.mark.parametrize("dtype", [wp.float32, wp.float64], ids=["fp32", "fp64"])
def test_solves_match_numpy_and_skip_masked_worlds(device, nv, nrhs, dtype):
    rng = np.random.default_rng(nv * 10 + nrhs)
    W, cond = 6, 1e3
    A = _spd(rng, W, nv, cond)
    B = rng.standard_normal((W, nv, nrhs))
    npad = padded_size(nv)
    Ap, Bp = _pad(A, B, npad)
    active = np.array([1, 0, 1, 1, 0, 1])
    X = _run(device, Ap, Bp, active, dtype)
    eps = np.finfo(np.float32 if dtype == wp.float32 else np.float64).eps
    bound = STABILITY_FACTOR_PER_N * npad * cond * eps
    for w in range(W):
        if not active[w]:
            assert np.all(X[w] == SENTINEL), f"world {w} is masked but X changed"
            continue
        ref = np.linalg.solve(A[w], B[w])
        err = np.abs(X[w, :nv] - ref).max() / np.abs(ref).max()
        assert err <= bound, f"world {w}: relative error {err:.2e} > {bound:.2e}"
        assert np.abs(X[w, nv:]).max(initial=0.0) <= bound  # the padding solves to zero


def test_a_non_spd_world_is_non_finite_and_alone(device):
    rng = np.random.default_rng(3)
    for n in (16, 64):  # single tile and blocked
        A = _spd(rng, 3, n, 10.0)
        A[1] = -A[1]
        B = rng.standard_normal((3, n, 1))
        X = _run(device, A, B, np.ones(3), wp.float64)
        assert not np.isfinite(X[1]).all()
        for w in (0, 2):
            np.testing.assert_allclose(X[w], np.linalg.solve(A[w], B[w]), rtol=0, atol=1e-10 * np.abs(X[w]).max())


@pytest.mark.parametrize("lanes", [False, True], ids=["one_lane", "cooperative_lanes"])
@pytest.mark.parametrize("n", [16, 64], ids=["single", "blocked"])
def test_failed_pivots_are_reported_per_world(device, n, lanes):
    """The explicit pivot check (CUDA's tile Cholesky gives no NaN on failure): ``failed`` is 1
    exactly for the worlds whose factorization meets a pivot that is not finite and > 0 (an
    indefinite matrix, a singular one with an exact zero pivot, a NaN entry), 0 for the SPD
    ones, and a masked world's flag is left alone; the SPD worlds' solutions are unaffected."""
    rng = np.random.default_rng(n)
    A = _spd(rng, 6, n, 10.0)
    A[1] = -A[1]  # negative definite: the first pivot is sqrt(< 0)
    A[2] = np.eye(n)
    A[2, n - 2:, n - 2:] = 1.0  # PSD, rank n − 1: the last pivot is sqrt(1 − 1) = 0 exactly
    A[3, n - 1, n - 1] = np.nan
    A[4] = -A[4]  # not SPD, but masked: its flag keeps the sentinel
    B = rng.standard_normal((6, n, 1))
    active = np.array([1, 1, 1, 1, 0, 1], np.int32)
    flags = wp.array(np.full(6, 9, np.int32), dtype=wp.int32, device=device)
    X = wp.zeros((6, n, 1), dtype=wp.float64, device=device)
    L = wp.zeros((6, n, n), dtype=wp.float64, device=device) if n > TILE else None
    with cooperative_lanes(lanes):
        solve(wp.array(A, dtype=wp.float64, device=device), wp.array(B, dtype=wp.float64, device=device), X,
              wp.array(active, dtype=wp.int32, device=device), L, failed=flags)
    np.testing.assert_array_equal(flags.numpy(), [0, 1, 1, 1, 9, 0])
    for w in (0, 5):
        np.testing.assert_allclose(X.numpy()[w], np.linalg.solve(A[w], B[w]), rtol=0,
                                   atol=1e-10 * np.abs(X.numpy()[w]).max())


def test_same_input_gives_bit_identical_worlds(device):
    rng = np.random.default_rng(5)
    A = np.repeat(_spd(rng, 1, 64, 1e4), 4, axis=0)
    B = np.repeat(rng.standard_normal((1, 64, 2)), 4, axis=0)
    X = _run(device, A, B, np.ones(4), wp.float64)
    assert all(np.array_equal(X[0], X[w]) for w in range(1, 4))
    assert np.array_equal(X, _run(device, A, B, np.ones(4), wp.float64))


def test_bad_arguments_are_refused(device):
    def arr(shape, dtype=wp.float64):
        return wp.zeros(shape, dtype=dtype, device=device)

    ok = dict(A=arr((2, 8, 8)), B=arr((2, 8, 1)), X=arr((2, 8, 1)), active=arr(2, wp.int32))
    cases = [
        (dict(A=arr((2, 8, 7))), "A: expected a \\(W, n, n\\)"),
        (dict(A=arr((2, 8, 8), wp.int32)), "A: dtype must be float32 or float64"),
        (dict(B=arr((2, 9, 1))), "B: expected shape"),
        (dict(X=arr((2, 8, 2))), "X: expected B's shape"),
        (dict(B=arr((2, 8, 1), wp.float32)), "dtypes must match"),
        (dict(active=arr(3, wp.int32)), "active: expected an int32"),
        (dict(active=arr(2, wp.float64)), "active: expected an int32"),
    ]
    for change, match in cases:
        with pytest.raises(ValueError, match=match):
            solve(**{**ok, **change})
    with pytest.raises(ValueError, match="multiple of the tile size"):
        solve(arr((1, 40, 40)), arr((1, 40, 1)), arr((1, 40, 1)), arr(1, wp.int32), arr((1, 40, 40)))
    with pytest.raises(ValueError, match="L_scratch"):
        solve(arr((1, 64, 64)), arr((1, 64, 1)), arr((1, 64, 1)), arr(1, wp.int32))
    with pytest.raises(ValueError, match="failed: expected an int32 array of shape \\(2,\\)"):
        solve(**ok, failed=arr(3, wp.int32))


# ---------------------------------------------------------------------------- the factor check

def _stopped_factor(A, j, pivot_stored):
    """What a Cholesky that stops at column j (pivot ≤ 0) can leave: columns < j factored, the rest
    of the lower triangle untouched, and at (j, j) either the non-positive pivot (``"stored"``,
    LAPACK's potrf) or A's own diagonal entry (``"untouched"``)."""
    L = np.tril(A).copy()
    for c in range(j):
        L[c, c] = np.sqrt(L[c, c] - L[c, :c] @ L[c, :c])
        L[c + 1:, c] = (L[c + 1:, c] - L[c + 1:, :c] @ L[c, :c]) / L[c, c]
    if pivot_stored == "stored":
        L[j, j] = A[j, j] - L[j, :j] @ L[j, :j]
    return L


@pytest.mark.parametrize("dtype", [wp.float32, wp.float64])
def test_the_factor_check_catches_a_failed_factor_whatever_it_leaves(device, dtype):
    """On CUDA the tile Cholesky (cuSolverDx) drops its failure flag and need not leave a NaN, so
    the check must not rely on one: it flags a stopped factorization that stored its non-positive
    pivot (LAPACK's way), one that left the failing column untouched (positive diagonal, no NaN:
    what a pivot-sign test alone would miss), and the NaN factor Warp's scalar path leaves; and
    it passes the exact factor of an SPD matrix. Run by the same function the kernels call."""
    from sap_gpu.blocked_cholesky import _array_factor_check, _tile_factor_check

    n = 8
    np_dtype = np.float32 if dtype == wp.float32 else np.float64
    rng = np.random.default_rng(3)
    spd = _spd(rng, 1, n)[0]
    indefinite = spd.copy()
    row = np.linalg.cholesky(spd)[5, :5]
    indefinite[5, 5] = 0.5 * row @ row  # positive, but the pivot A_55 − Σ L_5k² < 0: fails at column 5
    assert np.linalg.eigvalsh(indefinite).min() < 0
    nan_factor = np.linalg.cholesky(spd)
    nan_factor[5:, 5:] = np.nan
    cases = {"exact factor (SPD)": (spd, np.linalg.cholesky(spd), 0),
             "stopped, pivot stored": (indefinite, _stopped_factor(indefinite, 5, "stored"), 1),
             "stopped, column untouched": (indefinite, _stopped_factor(indefinite, 5, "untouched"), 1),
             "NaN factor": (indefinite, nan_factor, 1)}
    assert _stopped_factor(indefinite, 5, "untouched")[5, 5] > 0  # no NaN and a positive pivot
    check_tile, check_array = _tile_factor_check(dtype, n), _array_factor_check(dtype)

    @wp.kernel(enable_backward=False, module="unique")
    def run_check(A: wp.array3d(dtype=dtype), L: wp.array3d(dtype=dtype), bad: wp.array2d(dtype=int)):
        world, lane = wp.tid()  # the single tile's check (L in shared memory), the blocked one's (L in an array)
        wp.atomic_max(bad, world, 0, check_tile(A[world], wp.tile_load(L[world], shape=(n, n), storage="shared"), lane))
        wp.atomic_max(bad, world, 1, check_array(A[world], L[world], n, lane))

    A = np.stack([c[0] for c in cases.values()]).astype(np_dtype)
    L = np.stack([c[1] for c in cases.values()]).astype(np_dtype)
    bad = wp.zeros((len(cases), 2), dtype=int, device=device)
    with cooperative_lanes():
        wp.launch_tiled(run_check, dim=[len(cases)], inputs=[wp.array(A, dtype=dtype, device=device),
                                                             wp.array(L, dtype=dtype, device=device)],
                        outputs=[bad], block_dim=32, device=device)
    got = dict(zip(cases, bad.numpy().tolist()))
    assert got == {k: [c[2], c[2]] for k, c in cases.items()}


def test_block_kernels_refuse_a_block_that_is_not_whole_warps(device):
    """The block kernels reduce over whole warps: a launch with any other block size is refused
    before it runs (sap_gpu.launch.launch_blocks)."""
    from sap_gpu.launch import launch_blocks

    for block in (16, 48, 0, 33):
        with pytest.raises(ValueError, match="block_dim: .* multiple of 32"):
            launch_blocks(None, num_worlds=1, device=device, block_dim=block)
    with pytest.raises(ValueError, match="num_worlds"):
        launch_blocks(None, num_worlds=-1, device=device)

"""sap_gpu.lane_cholesky: a world's 32×32 SPD solve with one row per lane, against its backward
error bound.

Every system size m from 0 to 32 in both precisions, on one lane per block and on 32 cooperative
lanes (the shuffle replaced by the world's scratch rows on the CPU device), with NaN in the
upper triangle (it must never be read) and the padding left to the solver. A world whose pivot is
not finite and > 0 must fail without touching its neighbours, b must come back as it was (the
CPU device's lanes exchange values through it), and bad arguments are refused before any launch.
"""

import numpy as np
import pytest
import warp as wp
from conftest import cooperative_lanes

from sap_gpu.lane_cholesky import LANES, solve

# The backward error of Gaussian elimination without pivoting (LDLᵀ on an SPD matrix): the
# computed x solves (H + ΔH) x = b with |ΔH| ≤ γ_{3m} |L||D||Lᵀ| (Higham, Accuracy and Stability
# of Numerical Algorithms, Thm 9.4 with U = D Lᵀ), γ_k = k·u/(1 − k·u), u the unit roundoff of the
# solve's precision. So |H x − b| ≤ γ_{3m} |L||D||Lᵀ| |x| elementwise; the residual itself is
# formed in float64, within γ_{m+1}(|H||x| + |b|) of exact. A wrong update, a wrong shuffle or a
# missed row misses this by orders of magnitude.
ELIMINATION_ROUNDINGS_PER_ROW = 3
SENTINEL = 7.25  # what x holds before a failed world's solve, and must still hold after


def _gamma(k, u):
    return k * u / (1.0 - k * u)


def _systems(rng, sizes, cond=1e3):
    """One SPD system per size m, as the fused kernel leaves it: the leading m×m block of a 32×32
    H (lower triangle; NaN above the diagonal, garbage on the padding) and b (32, 1) (garbage past m)."""
    W = len(sizes)
    H = np.full((W, LANES, LANES), np.nan)
    b = rng.standard_normal((W, LANES, 1)) * 1e3
    for w, m in enumerate(sizes):
        Q, _ = np.linalg.qr(rng.standard_normal((m, m)))
        S = (Q * np.geomspace(1.0, 1.0 / cond, m)) @ Q.T * 10.0 ** rng.uniform(-2, 2)
        H[w] = np.tril(rng.standard_normal((LANES, LANES)))
        H[w][np.triu_indices(LANES, 1)] = np.nan
        H[w, :m, :m] = np.where(np.tril(np.ones((m, m))) > 0, 0.5 * (S + S.T), np.nan)
    return H, b


def _run(device, H, b, sizes, dtype):
    npy = np.float32 if dtype == wp.float32 else np.float64
    W = len(sizes)
    Hd = wp.array(H.astype(npy), dtype=dtype, device=device)
    bd = wp.array(b.astype(npy), dtype=dtype, device=device)
    xd = wp.array(np.full((W, LANES, 1), SENTINEL, dtype=npy), dtype=dtype, device=device)
    failed = wp.full(W, -1, dtype=wp.int32, device=device)
    solve(Hd, bd, wp.array(np.asarray(sizes, np.int32), dtype=wp.int32, device=device), xd, failed)
    np.testing.assert_array_equal(bd.numpy(), b.astype(npy), err_msg="b changed")  # the CPU device's scratch
    return xd.numpy().astype(np.float64), failed.numpy(), H.astype(npy).astype(np.float64), \
        b.astype(npy).astype(np.float64)


@pytest.mark.parametrize("lanes", [False, True], ids=["one_lane", "32_lanes"])
@pytest.mark.parametrize("dtype", [wp.float32, wp.float64], ids=["fp32", "fp64"])
def test_every_size_solves_within_the_backward_error_bound(device, dtype, lanes):
    rng = np.random.default_rng(5 + lanes)
    sizes = list(range(LANES + 1))
    H, b = _systems(rng, sizes)
    with cooperative_lanes(lanes):
        x, failed, Hr, br = _run(device, H, b, sizes, dtype)
    u = 0.5 * np.finfo(np.float32 if dtype == wp.float32 else np.float64).eps
    u64 = 0.5 * np.finfo(np.float64).eps
    assert np.all(failed == 0), failed
    for w, m in enumerate(sizes):
        assert np.all(x[w, m:, 0] == 0.0), f"m = {m}: x past m is not 0"
        if m == 0:
            continue
        S = np.tril(Hr[w, :m, :m])
        S = S + np.tril(S, -1).T
        Lc = np.linalg.cholesky(S)  # |L||D||Lᵀ| = |Lc||Lcᵀ| for L = Lc D^-1/2, D = diag(Lc)²
        xm, bm = x[w, :m, 0], br[w, :m, 0]
        residual = np.abs(S @ xm - bm)
        bound = _gamma(ELIMINATION_ROUNDINGS_PER_ROW * m, u) * (np.abs(Lc) @ (np.abs(Lc).T @ np.abs(xm))) \
            + _gamma(m + 1, u64) * (np.abs(S) @ np.abs(xm) + np.abs(bm))
        assert np.all(residual <= bound), f"m = {m}: residual beyond the bound by {(residual - bound).max():.3e}"
        ref = np.linalg.solve(S, bm)  # and close to the exact solution (cond ≤ 1e3)
        assert np.abs(xm - ref).max() <= 1e3 * 8 * m * u * np.abs(ref).max() + 1e-300


@pytest.mark.parametrize("lanes", [False, True], ids=["one_lane", "32_lanes"])
@pytest.mark.parametrize("dtype", [wp.float32, wp.float64], ids=["fp32", "fp64"])
def test_a_pivot_that_is_not_finite_and_positive_fails_only_its_world(device, dtype, lanes):
    """A negative diagonal, a zero pivot reached by elimination (a singular 2×2 block), a NaN and an
    infinity below the diagonal: each world fails and keeps its x; the healthy worlds' x equal a
    run without the failing ones bit for bit."""
    rng = np.random.default_rng(11)
    sizes = [27, 27, 27, 27, 27, 27]
    H, b = _systems(rng, sizes)
    H[1, 5, 5] = -1.0
    H[2, 3:5, 3:5] = [[1.0, np.nan], [1.0, 1.0]]  # rows 3, 4 equal on the block: d_4 = 0
    H[2, 3:5, :3] = 0.0
    H[2, 5:27, 3:5] = 0.0
    H[3, 20, 7] = np.nan
    H[4, 9, 2] = np.inf
    with cooperative_lanes(lanes):
        x, failed, _, _ = _run(device, H, b, sizes, dtype)
        keep = [0, 5]
        x_alone, failed_alone, _, _ = _run(device, H[keep], b[keep], [sizes[w] for w in keep], dtype)
    assert failed.tolist() == [0, 1, 1, 1, 1, 0]
    assert np.all(x[1:5] == SENTINEL), "a failed world's x was written"
    assert failed_alone.tolist() == [0, 0]
    np.testing.assert_array_equal(x[keep], x_alone)


def test_bad_arguments_are_refused_before_any_launch(device):
    W = 2
    f32 = dict(dtype=wp.float32, device=device)
    H, b, x = wp.zeros((W, 32, 32), **f32), wp.zeros((W, 32, 1), **f32), wp.zeros((W, 32, 1), **f32)
    m, failed = wp.zeros(W, dtype=wp.int32, device=device), wp.zeros(W, dtype=wp.int32, device=device)
    with pytest.raises(ValueError, match=r"A: expected a \(W, 32, 32\) array, got shape \(2, 16, 16\)"):
        solve(wp.zeros((W, 16, 16), **f32), b, m, x, failed)
    with pytest.raises(ValueError, match="A: dtype must be float32 or float64"):
        solve(wp.zeros((W, 32, 32), dtype=wp.float16, device=device), b, m, x, failed)
    with pytest.raises(ValueError, match=r"B: expected a \(2, 32, 1\) array of float32, got float64"):
        solve(H, wp.zeros((W, 32, 1), dtype=wp.float64, device=device), m, x, failed)
    with pytest.raises(ValueError, match=r"X: expected a \(2, 32, 1\) array"):
        solve(H, b, m, wp.zeros((W, 32, 2), **f32), failed)
    with pytest.raises(ValueError, match=r"m: expected an int32 array of shape \(2,\)"):
        solve(H, b, wp.zeros(3, dtype=wp.int32, device=device), x, failed)
    with pytest.raises(ValueError, match=r"failed: expected an int32 array of shape \(2,\)"):
        solve(H, b, m, x, wp.zeros(W, dtype=wp.float32, device=device))
    with pytest.raises(ValueError, match=r"m: values must be in 0\.\.32"):
        solve(H, b, wp.array([3, 33], dtype=wp.int32, device=device), x, failed)

"""The Newton direction ``H Δv = −∇ℓ`` on the device: Cholesky (docs/formulation.md § Linear solve) or matrix-free PCR.

Counterpart of :mod:`sap_ref.linear_solve`.

* :func:`cholesky_solve`: the batched, masked tile Cholesky of :mod:`sap_gpu.blocked_cholesky`
  at ``contact_linear_solve_precision`` (H and −∇ℓ are assembled directly in that scalar type
  by :mod:`sap_gpu.contact_solve`). A factorization with a pivot that is not finite and > 0 is
  reported per world (CUDA's tile Cholesky gives no NaN on failure), and so is a non-finite
  Δv; the line-search kernel flags either as ``LINEAR_SOLVE_FAILURE``.
* :func:`make_pcr`: the preconditioned conjugate residual iteration of :func:`sap_ref.linear_solve.pcr`
  as a ``wp.func`` running in one world's thread, for any operator ``matvec(ctx, S, world, n,
  src, dst)`` (dst = H src). The per-world reductions are loops in that thread, a world that is
  not pending returns at once, and nothing leaves the device: it can sit inside
  ``wp.capture_while`` and a CUDA graph. :mod:`sap_gpu.contact_solve` gives it the SAP Hessian
  product A·p + Jᵀ(G(J·p)); :func:`pcr` here runs it on dense matrices (the matrix-free
  free-motion solve and the tests against Cholesky).

The work vectors live in a :func:`pcr_work` struct: x, r, z = P r, p, H z, H p, the best iterate,
the Jacobi preconditioner P = (diag(H) + ε_reg)⁻¹, the per-world iteration count and final
relative residual, and the Hessian factors G the SAP product needs (1-entry dummies elsewhere).
"""

import warp as wp

from . import blocked_cholesky
from .launch import built_once, launch_threads

wp.set_module_options({"enable_backward": False})

__all__ = ["cholesky_solve", "pcr_types", "make_pcr", "allocate_pcr_work", "pcr"]



def cholesky_solve(H, rhs, dv, pending, L_scratch, failed) -> None:
    """Launch: ``dv[w] = H[w]⁻¹ rhs[w]`` for every world with ``pending[w] != 0``; ``failed[w]``
    = 1 where a pivot was not finite and > 0 (the explicit check of :mod:`sap_gpu.blocked_cholesky`)."""
    blocked_cholesky.solve(H, rhs, dv, pending, L_scratch, failed=failed)


@built_once()
def pcr_types(TL):
    """``(PcrWork, M33)``: the work struct and 3×3 matrix type of scalar ``TL``."""
    M33 = wp.types.matrix((3, 3), TL)

    @wp.struct
    class PcrWork:
        x: wp.array2d(dtype=TL)
        r: wp.array2d(dtype=TL)
        z: wp.array2d(dtype=TL)
        p: wp.array2d(dtype=TL)
        Hz: wp.array2d(dtype=TL)
        Hp: wp.array2d(dtype=TL)
        best: wp.array2d(dtype=TL)
        pinv: wp.array2d(dtype=TL)
        diag: wp.array2d(dtype=TL)
        contact_G: wp.array2d(dtype=M33)
        row_G: wp.array2d(dtype=TL)  # the scalar rows' G (0 where a row is not in use)
        iterations: wp.array(dtype=int)  # summed over the step's solves
        residual: wp.array(dtype=TL)  # largest final ‖b − Hx‖/‖b‖ of the step's solves
        max_iterations: int
        rtol: TL
        atol: TL
        regularization: TL

    return PcrWork, M33


def allocate_pcr_work(TL, W: int, n: int, config, device, contacts: int = 1, rows: int = 1):
    """A :func:`pcr_types` work struct for W worlds of size n (``contacts`` contact slots, ``rows``
    scalar rows), settings from ``config``."""
    PcrWork, M33 = pcr_types(TL)
    S = PcrWork()
    for name in ("x", "r", "z", "p", "Hz", "Hp", "best", "pinv", "diag"):
        setattr(S, name, wp.zeros((W, n), dtype=TL, device=device))
    S.contact_G = wp.zeros((W, max(contacts, 1)), dtype=M33, device=device)
    S.row_G = wp.zeros((W, max(rows, 1)), dtype=TL, device=device)
    S.iterations = wp.zeros(W, dtype=int, device=device)
    S.residual = wp.zeros(W, dtype=TL, device=device)
    S.max_iterations = config.pcr_max_iterations
    S.rtol, S.atol, S.regularization = TL(config.pcr_rtol), TL(config.pcr_atol), TL(config.pcr_regularization)
    return S


def make_pcr(TL, Ctx, matvec):
    """The PCR ``wp.func`` for context struct ``Ctx`` and operator ``matvec`` (see the module doc).

    ``pcr(ctx, S, world, n, b) -> (iterations, relative_residual)`` solves H x = b[world, :n, 0]
    from x₀ = 0 with the preconditioner already in ``S.pinv``; the iterate with the smallest
    ‖r‖₂ is left in ``S.best`` (x₀ = 0 if none improved on it). Same steps, tests and breakdown
    rule as :func:`sap_ref.linear_solve.pcr`; the relative residual is recomputed as
    ‖b − H x‖₂/‖b‖₂ (1 if x = 0, 0 if b = 0).
    """
    PcrWork, _ = pcr_types(TL)

    @wp.func
    def pcr_iterate(ctx: Ctx, S: PcrWork, world: int, n: int, b: wp.array3d(dtype=TL)):
        zero = TL(0.0)
        b2 = zero
        for i in range(n):
            bi = b[world, i, 0]
            S.x[world, i] = zero
            S.best[world, i] = zero
            S.r[world, i] = bi
            S.z[world, i] = S.pinv[world, i] * bi
            b2 = b2 + bi * bi
        matvec(ctx, S, world, n, S.z, S.Hz)
        rz = zero
        for i in range(n):
            S.p[world, i] = S.z[world, i]
            S.Hp[world, i] = S.Hz[world, i]
            rz = rz + S.z[world, i] * S.Hz[world, i]
        b_norm = wp.sqrt(b2)
        tol = wp.max(S.atol, S.rtol * b_norm)
        r_norm = b_norm
        best = r_norm
        best_k = int(0)
        k = int(0)
        while r_norm > tol and k < S.max_iterations:
            denom = zero
            for i in range(n):
                denom = denom + S.Hp[world, i] * S.pinv[world, i] * S.Hp[world, i]
            if not (wp.isfinite(rz) and wp.isfinite(denom) and rz > zero and denom > zero):
                break
            alpha = rz / denom
            r2 = zero
            for i in range(n):
                S.x[world, i] = S.x[world, i] + alpha * S.p[world, i]
                S.r[world, i] = S.r[world, i] - alpha * S.Hp[world, i]
                S.z[world, i] = S.z[world, i] - alpha * S.pinv[world, i] * S.Hp[world, i]
                r2 = r2 + S.r[world, i] * S.r[world, i]
            k += 1
            r_norm = wp.sqrt(r2)
            if r_norm < best:
                best = r_norm
                best_k = k
                for i in range(n):
                    S.best[world, i] = S.x[world, i]
            if r_norm <= tol:
                break
            matvec(ctx, S, world, n, S.z, S.Hz)
            rz_new = zero
            for i in range(n):
                rz_new = rz_new + S.z[world, i] * S.Hz[world, i]
            beta = rz_new / rz
            rz = rz_new
            for i in range(n):
                S.p[world, i] = S.z[world, i] + beta * S.p[world, i]
                S.Hp[world, i] = S.Hz[world, i] + beta * S.Hp[world, i]
        relative = zero
        if best_k > 0:
            matvec(ctx, S, world, n, S.best, S.Hz)
            t2 = zero
            for i in range(n):
                d = b[world, i, 0] - S.Hz[world, i]
                t2 = t2 + d * d
            relative = wp.sqrt(t2) / b_norm
        elif b_norm > zero:
            relative = TL(1.0)
        return k, relative

    return pcr_iterate


@built_once()
def _dense_kernel(TL):
    """The batched dense PCR kernel of scalar TL: H = A[world] (padding excluded)."""
    PcrWork, _ = pcr_types(TL)

    @wp.struct
    class Dense:
        A: wp.array3d(dtype=TL)

    @wp.func
    def dense_product(ctx: Dense, S: PcrWork, world: int, n: int, src: wp.array2d(dtype=TL),
                      dst: wp.array2d(dtype=TL)):
        for i in range(n):
            s = TL(0.0)
            for k in range(n):
                s = s + ctx.A[world, i, k] * src[world, k]
            dst[world, i] = s

    iterate = make_pcr(TL, Dense, dense_product)

    @wp.kernel(enable_backward=False, module="unique")
    def dense_pcr(ctx: Dense, S: PcrWork, B: wp.array3d(dtype=TL), active: wp.array(dtype=int), n: int,
                  X: wp.array3d(dtype=TL)):
        world = wp.tid()
        if active[world] == 0:
            return
        for i in range(n):
            S.diag[world, i] = ctx.A[world, i, i]
            S.pinv[world, i] = TL(1.0) / (ctx.A[world, i, i] + S.regularization)
        k, relative = iterate(ctx, S, world, n, B)
        S.iterations[world] = S.iterations[world] + k
        S.residual[world] = wp.max(S.residual[world], relative)
        for i in range(X.shape[1]):
            X[world, i, 0] = TL(0.0)
        for i in range(n):
            X[world, i, 0] = S.best[world, i]

    return Dense, dense_pcr


def pcr(A, B, X, active, S, n: int | None = None) -> None:
    """Launch: ``X[w] ≈ A[w]⁻¹ B[w]`` by Jacobi-preconditioned CR for worlds with ``active[w] != 0``.

    Args:
        A: SPD matrices, (W, n_pad, n_pad), float32 or float64 (the solve's precision).
        B: right-hand sides, (W, n_pad, 1), A's dtype.
        X: solutions, (W, n_pad, 1); rows ≥ n are set to 0; untouched for inactive worlds.
        active: per-world flags, (W,) int32.
        S: an :func:`allocate_pcr_work` struct of A's dtype (its settings are used; its
            ``iterations`` and ``residual`` accumulate: zero them to start a count).
        n: the system size inside the padding (default: all of A).
    """
    if A.ndim != 3 or A.shape[1] != A.shape[2]:
        raise ValueError(f"A: expected a (W, n, n) array, got shape {A.shape}")
    W, n_pad, _ = A.shape
    if A.dtype not in (wp.float32, wp.float64):
        raise ValueError(f"A: dtype must be float32 or float64, got {A.dtype}")
    if B.shape != (W, n_pad, 1) or X.shape != B.shape:
        raise ValueError(f"B, X: expected shape ({W}, {n_pad}, 1), got {B.shape} and {X.shape}")
    if B.dtype != A.dtype or X.dtype != A.dtype:
        raise ValueError(f"A, B, X: dtypes must match, got {A.dtype}, {B.dtype}, {X.dtype}")
    if active.shape != (W,) or active.dtype != wp.int32:
        raise ValueError(f"active: expected an int32 array of shape ({W},), got {active.dtype} {active.shape}")
    n = n_pad if n is None else int(n)
    if not 0 <= n <= n_pad:
        raise ValueError(f"n: must lie in [0, {n_pad}], got {n}")
    if S.x.dtype != A.dtype or S.x.shape[0] != W or S.x.shape[1] < n:
        raise ValueError(f"S: expected work vectors of dtype {A.dtype} and shape ({W}, ≥{n}), got "
                         f"{S.x.dtype} {S.x.shape}")
    Dense, kernel = _dense_kernel(A.dtype)
    ctx = Dense()
    ctx.A = A
    launch_threads(kernel, dim=W, device=A.device, inputs=[ctx, S, B, active, n], outputs=[X])

"""The Newton direction ``H Δv = −∇ℓ``: dense Cholesky (docs/formulation.md § Linear solve) or matrix-free PCR.

``precision="fp32"`` really factors and solves in float32 (``contact_linear_solve_precision``):
H and the right-hand side are rounded to float32 and the result is returned in float32.
Drake: ``SapSolver::CalcSearchDirectionData`` with a (supernodal) Cholesky of H.

:func:`pcr` is the preconditioned conjugate residual method for a symmetric positive definite
H that is only available as a product ``p ↦ H p`` (the Axion engine's linear solver, applied to
SAP's primal Newton system). With the Jacobi preconditioner P = (diag(H) + ε_reg)⁻¹ applied
symmetrically it is CR on Ĥ = P^½ H P^½, which minimizes ‖r̂‖₂ = ‖r‖_P = √(rᵀ P r) over the
growing Krylov space: that norm never increases from one iterate to the next (in exact
arithmetic), while the plain ‖r‖₂ the stopping test uses may. So the iterate with the smallest
‖r‖₂ seen is the one returned::

    res = pcr(lambda p: H @ p, b, np.diag(H), PcrSettings(max_iterations=50, rtol=1e-10))
    res.x, res.iterations, res.residual      # residual = ‖b − H x‖₂ / ‖b‖₂ of the returned x
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg

from sap_common.config import SapConfig, precision_dtype

__all__ = ["cholesky_solve", "PcrSettings", "PcrResult", "pcr"]


def cholesky_solve(H: np.ndarray, b: np.ndarray, precision: str = "fp64"):
    """``(x, ok)`` with ``H x = b`` by Cholesky at ``precision``; ``ok`` is False if H is not SPD."""
    dt = precision_dtype(precision)
    H, b = np.asarray(H, dtype=dt), np.asarray(b, dtype=dt)
    if not (np.all(np.isfinite(H)) and np.all(np.isfinite(b))):
        return np.full_like(b, np.nan), False
    try:
        factor = scipy.linalg.cho_factor(H, lower=True, check_finite=False)
    except np.linalg.LinAlgError:
        return np.full_like(b, np.nan), False
    return scipy.linalg.cho_solve(factor, b, check_finite=False), True


@dataclass(frozen=True)
class PcrSettings:
    """Stopping rule and preconditioner of :func:`pcr` (the ``pcr_*`` knobs of SapConfig).

    Stop when ‖r‖₂ ≤ max(atol, rtol·‖b‖₂) or after ``max_iterations`` products with H.
    ``regularization`` is added to diag(H) in the Jacobi preconditioner only.
    """

    max_iterations: int = 200
    rtol: float = 1e-10
    atol: float = 0.0
    regularization: float = 0.0

    @classmethod
    def from_config(cls, config: SapConfig) -> "PcrSettings":
        """The ``pcr_*`` knobs of ``config.linear_solve``."""
        ls = config.linear_solve
        return cls(ls.pcr_max_iterations, ls.pcr_rtol, ls.pcr_atol, ls.pcr_regularization)


@dataclass
class PcrResult:
    """Outcome of :func:`pcr`.

    Attributes:
        x: the returned iterate (smallest ‖r‖₂ seen), (n,), in the solve's dtype.
        iterations: PCR iterations taken (products with H, not counting the final check).
        residual: ‖b − H x‖₂ / ‖b‖₂ of ``x``, recomputed (0 when b = 0).
        converged: the stopping test was met.
        best_iteration: the iteration that produced ``x`` (0: x = 0).
        residual_history: ‖r_k‖₂ of every iterate k = 0 … iterations (recurrence values).
        preconditioned_history: ‖r_k‖_P = √(r_kᵀ P r_k) of every iterate (non-increasing).
    """

    x: np.ndarray
    iterations: int
    residual: float
    converged: bool
    best_iteration: int
    residual_history: np.ndarray
    preconditioned_history: np.ndarray


def pcr(apply, b, diag, settings: PcrSettings = PcrSettings(), precision: str = "fp64") -> PcrResult:
    """Solve ``H x = b`` for SPD H given as ``apply(p) = H p``, from x₀ = 0.

    Args:
        apply: ``p ↦ H p`` in the solve's dtype.
        b: right-hand side, (n,).
        diag: diag(H), (n,), for the Jacobi preconditioner P = (diag + regularization)⁻¹.
        settings: :class:`PcrSettings`.
        precision: ``"fp32"``/``"fp64"``: every vector and scalar of the iteration.

    The iteration (P applied symmetrically, so it is CR on P^½ H P^½)::

        r = b, z = P r, p = z, Hp = Hz = H z
        α = (z·Hz) / (Hp·P Hp);  x += α p;  r −= α Hp;  z −= α P Hp
        β = (z·Hz)_new / (z·Hz);  p = z + β p;  Hp = Hz + β Hp

    A breakdown (a non-positive or non-finite z·Hz or Hp·P Hp: H not SPD in this precision)
    ends the iteration; the best iterate so far is returned.
    """
    dt = np.dtype(precision_dtype(precision))
    b = np.asarray(b, dtype=dt)
    Pinv = dt.type(1.0) / (np.asarray(diag, dtype=dt) + dt.type(settings.regularization))
    x = np.zeros_like(b)
    r = b.copy()
    z = Pinv * r
    Hz = np.asarray(apply(z), dtype=dt)
    p, Hp = z.copy(), Hz.copy()
    rz = z @ Hz
    b_norm = float(np.linalg.norm(b))
    tol = max(settings.atol, settings.rtol * b_norm)
    r_norm = b_norm
    best_x, best_norm, best_k = x.copy(), r_norm, 0
    r_hist, p_hist = [r_norm], [float(np.sqrt(max(r @ z, 0.0)))]
    k = 0
    while r_norm > tol and k < settings.max_iterations:
        q = Pinv * Hp
        denom = Hp @ q
        if not (np.isfinite(rz) and np.isfinite(denom) and rz > 0 and denom > 0):
            break
        alpha = rz / denom
        x = x + alpha * p
        r = r - alpha * Hp
        z = z - alpha * q
        k += 1
        r_norm = float(np.linalg.norm(r))
        r_hist.append(r_norm)
        p_hist.append(float(np.sqrt(max(r @ z, 0.0))))
        if r_norm < best_norm:
            best_x, best_norm, best_k = x.copy(), r_norm, k
        if r_norm <= tol:
            break
        Hz = np.asarray(apply(z), dtype=dt)
        rz_new = z @ Hz
        beta = rz_new / rz
        rz = rz_new
        p = z + beta * p
        Hp = Hz + beta * Hp
    true = float(np.linalg.norm(b - np.asarray(apply(best_x), dtype=dt))) if best_k else b_norm
    return PcrResult(x=best_x, iterations=k, residual=true / b_norm if b_norm > 0 else 0.0,
                     converged=bool(best_norm <= tol), best_iteration=best_k,
                     residual_history=np.array(r_hist), preconditioned_history=np.array(p_hist))

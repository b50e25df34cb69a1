"""The Newton direction ``H Δv = −∇ℓ`` by dense Cholesky (spec §5.2).

``precision="fp32"`` really factors and solves in float32 (``contact_linear_solve_precision``):
H and the right-hand side are rounded to float32 and the result is returned in float32.
Drake: ``SapSolver::CalcSearchDirectionData`` with a (supernodal) Cholesky of H.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg

from sap_common.config import precision_dtype

__all__ = ["cholesky_solve"]


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

"""The Newton direction ``H Δv = −∇ℓ`` on the device (spec §5.2).

Counterpart of :mod:`sap_ref.linear_solve`: the batched, masked tile Cholesky of
:mod:`sap_gpu.blocked_cholesky` at ``contact_linear_solve_precision`` (H and −∇ℓ are assembled
directly in that scalar type by :mod:`sap_gpu.contact_solve`). Worlds that are not pending are
skipped; a factorization that fails shows as non-finite Δv, which the line-search kernel flags.
"""

from . import blocked_cholesky

__all__ = ["cholesky_solve"]


def cholesky_solve(H, rhs, dv, pending, L_scratch) -> None:
    """Launch: ``dv[w] = H[w]⁻¹ rhs[w]`` for every world with ``pending[w] != 0``."""
    blocked_cholesky.solve(H, rhs, dv, pending, L_scratch)

"""Line searches on the device: ``monotone_decay``, ``armijo_decay``, ``exact_root``.

Counterparts of :mod:`sap_ref.line_search` (the same steps and tests, docs/formulation.md § Line searches).
Each is a ``wp.func`` for one world; they call ``phi(P, world, lane, alpha)``, the cost along the
Newton direction and its two derivatives (:func:`sap_gpu.contact_problem.row_functions`'
``cost_along_line``): the staged path (:mod:`sap_gpu.contact_solve`) runs them in the world's
thread (``lane`` 0), the fused path (:mod:`sap_gpu.contact_solve_fused`) on every lane of the
world's block, where ``phi`` spreads the rows over the lanes and returns block sums, so every
lane sees the same values and takes the same branches. Built per scalar type and per φ by
:func:`make_line_search`. Each reads its settings from one struct (:func:`line_search_settings`:
what ``SapConfig.line_search`` holds, and the cost tolerances ``exact_root`` tests) and returns
``(alpha, evaluations, failed)``."""

import warp as wp

from sap_common.constants import EXACT_ALPHA_MAX, EXACT_F_TOL, MONOTONE_ABS_SLOP, MONOTONE_ALPHA_MIN, MONOTONE_REL_SLOP

from .launch import built_once

__all__ = ["make_line_search", "line_search_settings"]


@built_once()
def line_search_settings(T):
    """The ``LineSearchSettings`` struct of scalar T: the line search's settings on the device."""

    @wp.struct
    class LineSearchSettings:
        """``SapConfig.line_search`` (max_iterations, rho, armijo_c, relative_slop as ``slop``) and
        the Newton loop's cost tolerances (``cost_abs``, ``cost_rel``), which ``exact_root`` tests
        before it searches (docs/formulation.md § Line searches)."""
        max_iterations: int
        rho: T
        armijo_c: T
        slop: T
        cost_abs: T
        cost_rel: T

    return LineSearchSettings


def make_line_search(T, phi, P_type, variant: str):
    """The ``wp.func`` of ``variant`` for problem struct ``P_type`` and cost function ``phi``:
    ``search(P, world, lane, phi0, dphi0, settings) -> (alpha, evaluations, failed)``."""
    S = line_search_settings(T)

    @wp.func
    def monotone_decay(P: P_type, world: int, lane: int, phi0: T, dphi0: T, settings: S):
        max_iterations = settings.max_iterations
        threshold = phi0 + T(MONOTONE_ABS_SLOP) + T(MONOTONE_REL_SLOP) * wp.abs(phi0)
        alpha = T(1.0)
        evals = int(0)
        while alpha >= T(MONOTONE_ALPHA_MIN) and evals < max_iterations:
            ell, dell, d2ell = phi(P, world, lane, alpha)
            evals += 1
            if ell <= threshold:
                return alpha, evals, 0
            alpha = alpha * T(0.5)
        return T(0.0), evals, 1

    @wp.func
    def armijo_decay(P: P_type, world: int, lane: int, phi0: T, dphi0: T, settings: S):
        max_iterations = settings.max_iterations
        rho = settings.rho
        armijo_c = settings.armijo_c
        slop = settings.slop
        if not dphi0 < T(0.0):
            return T(0.0), 0, 1
        alpha = T(1.0) / rho
        ell, dell, d2ell = phi(P, world, lane, alpha)
        evals = int(1)
        if dell < T(0.0):
            return alpha, evals, 0
        s = (slop / T(10.0)) * wp.max(T(1.0), T(0.5) * (wp.abs(ell) + wp.abs(phi0)))
        if dell < s:
            return alpha, evals, 0
        alpha_prev = alpha
        ell_prev = ell
        for it in range(max_iterations - 1):
            alpha = rho * alpha
            ell, dell, d2ell = phi(P, world, lane, alpha)
            evals += 1
            if wp.abs((ell - ell_prev) / (alpha - alpha_prev)) < s:
                return alpha, evals, 0
            if ell > ell_prev and ell < phi0 + armijo_c * alpha * dphi0:
                if ell_prev < phi0 + armijo_c * alpha_prev * dphi0:
                    alpha = alpha / rho
                return alpha, evals, 0
            alpha_prev = alpha
            ell_prev = ell
        if ell < phi0 + armijo_c * alpha * dphi0:
            return alpha, evals, 0
        return alpha, evals, 1

    @wp.func
    def exact_root(P: P_type, world: int, lane: int, phi0: T, dphi0: T, settings: S):
        max_iterations = settings.max_iterations
        cost_abs = settings.cost_abs
        cost_rel = settings.cost_rel
        if not dphi0 < T(0.0):
            return T(0.0), 0, 1
        alpha_max = T(EXACT_ALPHA_MAX)
        ell_max, dell_max, d2ell_max = phi(P, world, lane, alpha_max)
        evals = int(1)
        if dell_max <= T(0.0):
            return alpha_max, evals, 0
        if -dphi0 < cost_abs + cost_rel * ell_max:  # Drake compares with ℓ(α_max) (docs/formulation.md § Line searches)
            return T(1.0), evals, 0
        scale = -dphi0
        alpha0 = alpha_max
        if d2ell_max > T(0.0):
            alpha0 = wp.min(-dphi0 / d2ell_max, alpha_max)
        if wp.isnan(alpha0):
            return T(0.0), evals, 1
        x_lo = T(0.0)
        x_hi = alpha_max
        f_hi = dell_max / scale
        x_tol = T(EXACT_F_TOL) * alpha0
        if wp.abs(f_hi) < T(EXACT_F_TOL):
            return x_hi, evals, 0
        x = alpha0
        minus_dx = x_lo - x_hi
        minus_dx_prev = minus_dx
        for it in range(max_iterations):
            ell, dell, d2ell = phi(P, world, lane, x)
            evals += 1
            f = dell / scale
            df = d2ell / scale
            if (f < T(0.0)) != (f_hi < T(0.0)):
                x_lo = x
            else:
                x_hi = x
                f_hi = f
            if wp.abs(f) < T(EXACT_F_TOL):
                return x, evals, 0
            slow = T(2.0) * wp.abs(f) > wp.abs(minus_dx_prev * df)
            minus_dx_prev = minus_dx
            if slow:
                minus_dx = T(0.5) * (x_lo - x_hi)
                x = x_lo - minus_dx
            else:
                minus_dx = f / df
                x = x - minus_dx
                if not (x_lo <= x and x <= x_hi):
                    minus_dx = T(0.5) * (x_lo - x_hi)
                    x = x_lo - minus_dx
            if wp.abs(minus_dx) < x_tol:
                return x, evals, 0
        return x, evals, 1

    return {"monotone_decay": monotone_decay, "armijo_decay": armijo_decay, "exact_root": exact_root}[variant]

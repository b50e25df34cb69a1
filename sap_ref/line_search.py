"""Line searches along the Newton direction: ``monotone_decay``, ``armijo_decay``, ``exact_root``.

Each takes ``phi(α) -> (φ, φ', φ'')``, the cost along ``v + α Δv`` and its first two
derivatives (:func:`sap_ref.contact_solve.cost_along_line`), plus φ(0) and φ'(0),
and returns a :class:`LineSearchResult` (all three: docs/formulation.md § Line searches). ``armijo_decay`` is
Drake's backtracking search and ``exact_root`` Drake's exact search.

The searches read the config's line-search group, ``config.line_search``
(:class:`~sap_common.config.LineSearchSettings`); ``exact_root`` also reads the Newton loop's cost
tolerances (``config.newton.cost_abs_tol``, ``config.newton.cost_rel_tol``)::

    line_search(phi, phi0, dphi0, config.line_search,
                cost_abs_tol=config.newton.cost_abs_tol, cost_rel_tol=config.newton.cost_rel_tol)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from sap_common.config import LINE_SEARCH_VARIANTS, LineSearchSettings
from sap_common.constants import EXACT_ALPHA_MAX, EXACT_F_TOL, MONOTONE_ABS_SLOP, MONOTONE_ALPHA_MIN, MONOTONE_REL_SLOP

__all__ = [
    "LineSearchResult",
    "monotone_decay",
    "armijo_decay",
    "exact_root",
    "line_search",
    "MONOTONE_ABS_SLOP",
    "MONOTONE_REL_SLOP",
    "MONOTONE_ALPHA_MIN",
    "EXACT_ALPHA_MAX",
    "EXACT_F_TOL",
]


Phi = Callable[[float], tuple[float, float, float]]


@dataclass
class LineSearchResult:
    """Outcome of one line search.

    Attributes:
        alpha: the accepted step (0 when the search failed before any acceptable step).
        iterations: evaluations of φ.
        failed: True when the search could not meet its acceptance test.
        probes: every (α, φ(α), φ'(α)) evaluated, in order (for teaching and debugging).
    """

    alpha: float
    iterations: int
    failed: bool = False
    probes: list = field(default_factory=list)


class _Recorder:
    def __init__(self, phi: Phi):
        self.phi, self.probes = phi, []

    def __call__(self, alpha: float):
        value = self.phi(alpha)
        self.probes.append((float(alpha), float(value[0]), float(value[1])))
        return value

    def result(self, alpha: float, failed: bool = False) -> LineSearchResult:
        return LineSearchResult(float(alpha), len(self.probes), failed, self.probes)


def _checked(settings) -> LineSearchSettings:
    # A whole SapConfig would pass for a LineSearchSettings here with the wrong meaning: its
    # max_iterations is the Newton loop's cap, not the line search's.
    if not isinstance(settings, LineSearchSettings):
        raise TypeError(f"settings: expected a LineSearchSettings (config.line_search), got {type(settings).__name__}")
    return settings


def monotone_decay(phi: Phi, phi0: float, dphi0: float, settings: LineSearchSettings) -> LineSearchResult:
    """α = 1, ½, ¼, …: the first α with ``φ(α) ≤ φ(0) + 1e-14 + 1e-12|φ(0)|``.

    Fails when α falls below 1e-8 or after ``settings.max_iterations`` probes.
    """
    max_iterations = _checked(settings).max_iterations
    rec = _Recorder(phi)
    threshold = phi0 + MONOTONE_ABS_SLOP + MONOTONE_REL_SLOP * abs(phi0)
    alpha = 1.0
    while alpha >= MONOTONE_ALPHA_MIN and len(rec.probes) < max_iterations:
        if rec(alpha)[0] <= threshold:
            return rec.result(alpha)
        alpha *= 0.5
    return rec.result(0.0, failed=True)


def armijo_decay(phi: Phi, phi0: float, dphi0: float, settings: LineSearchSettings) -> LineSearchResult:
    """Drake's backtracking search, from α_max = 1/ρ down by factors of ρ (docs/formulation.md § Line searches).

    Accepts α_max at once if φ'(α_max) < 0 or below the slop; otherwise backtracks with the
    Armijo test ``φ(α) < φ(0) + c α φ'(0)``, stopping when the finite-difference slope is below
    the slop or when φ starts rising again (then the better of the last two points).
    """
    settings = _checked(settings)
    rec = _Recorder(phi)
    if not dphi0 < 0.0:
        return rec.result(0.0, failed=True)
    rho, c = settings.rho, settings.armijo_c
    alpha = 1.0 / rho
    ell, dell, _ = rec(alpha)
    if dell < 0.0:
        return rec.result(alpha)
    slop = (settings.relative_slop / 10.0) * max(1.0, 0.5 * (abs(ell) + abs(phi0)))
    if dell < slop:
        return rec.result(alpha)

    def armijo(a, value):
        return value < phi0 + c * a * dphi0

    alpha_prev, ell_prev = alpha, ell
    for _ in range(settings.max_iterations - 1):
        alpha = rho * alpha
        ell = rec(alpha)[0]
        if abs((ell - ell_prev) / (alpha - alpha_prev)) < slop:
            return rec.result(alpha)
        if ell > ell_prev and armijo(alpha, ell):
            if armijo(alpha_prev, ell_prev):
                alpha = alpha / rho  # the previous, lower point
            return rec.result(alpha)
        alpha_prev, ell_prev = alpha, ell
    return rec.result(alpha) if armijo(alpha, ell) else rec.result(alpha, failed=True)


def exact_root(phi: Phi, phi0: float, dphi0: float, settings: LineSearchSettings, *, cost_abs_tol: float,
               cost_rel_tol: float) -> LineSearchResult:
    """Root of φ'(α) on [0, 1.5] by Newton with bisection fallback (docs/formulation.md § Line searches).

    Returns α_max = 1.5 if φ'(α_max) ≤ 0, α = 1 if the slope is negligible, else the root of
    ``f(α) = φ'(α)/(−φ'(0))`` from ``α₀ = min(−φ'(0)/φ''(α_max), α_max)`` (Drake takes φ'' at
    α_max), to |f| < 1e-8 or a step below 1e-8·α₀ (Drake: ``DoNewtonWithBisectionFallback``).
    The slope is negligible below the Newton loop's cost criterion, ``cost_abs_tol + cost_rel_tol·φ(α_max)``.
    """
    max_iterations = _checked(settings).max_iterations
    rec = _Recorder(phi)
    if not dphi0 < 0.0:
        return rec.result(0.0, failed=True)
    alpha_max = EXACT_ALPHA_MAX
    ell_max, dell_max, d2ell_max = rec(alpha_max)
    if dell_max <= 0.0:
        return rec.result(alpha_max)
    # Drake compares with the cost at α_max here (its variable is named ell0; docs/formulation.md § Line searches).
    if -dphi0 < cost_abs_tol + cost_rel_tol * ell_max:
        return rec.result(1.0)
    scale = -dphi0
    alpha0 = min(-dphi0 / d2ell_max, alpha_max) if d2ell_max > 0.0 else alpha_max
    if math.isnan(alpha0):
        return rec.result(0.0, failed=True)
    x_lo, f_lo = 0.0, -1.0
    x_hi, f_hi = alpha_max, dell_max / scale
    x_tol = EXACT_F_TOL * alpha0
    if abs(f_lo) < EXACT_F_TOL:
        return rec.result(x_lo)
    if abs(f_hi) < EXACT_F_TOL:
        return rec.result(x_hi)
    x = alpha0
    minus_dx = x_lo - x_hi
    minus_dx_prev = minus_dx
    for _ in range(max_iterations):
        _, dell, d2ell = rec(x)
        f, df = dell / scale, d2ell / scale
        if math.copysign(1.0, f) != math.copysign(1.0, f_hi):  # signbit: +0.0 counts as positive
            x_lo, f_lo = x, f
        else:
            x_hi, f_hi = x, f
        if abs(f) < EXACT_F_TOL:
            return rec.result(x)
        slow = 2.0 * abs(f) > abs(minus_dx_prev * df)
        minus_dx_prev = minus_dx
        if slow:
            minus_dx = 0.5 * (x_lo - x_hi)
            x = x_lo - minus_dx
        else:
            minus_dx = f / df
            x = x - minus_dx
            if not x_lo <= x <= x_hi:
                minus_dx = 0.5 * (x_lo - x_hi)
                x = x_lo - minus_dx
        if abs(minus_dx) < x_tol:
            return rec.result(x)
    return rec.result(x, failed=True)


_SEARCHES = {"monotone_decay": monotone_decay, "armijo_decay": armijo_decay, "exact_root": exact_root}


def line_search(phi: Phi, phi0: float, dphi0: float, settings: LineSearchSettings, *, cost_abs_tol: float,
                cost_rel_tol: float) -> LineSearchResult:
    """Run ``settings.variant``; the cost tolerances go to ``exact_root``, the one search that reads them."""
    try:
        search = _SEARCHES[_checked(settings).variant]
    except KeyError:
        raise ValueError(f"line_search_variant: {settings.variant!r} is not valid; "
                         f"valid: {', '.join(LINE_SEARCH_VARIANTS)}") from None
    if search is exact_root:
        return exact_root(phi, phi0, dphi0, settings, cost_abs_tol=cost_abs_tol, cost_rel_tol=cost_rel_tol)
    return search(phi, phi0, dphi0, settings)

"""Stage 3: Newton's method on the SAP cost ℓ(v) (docs/formulation.md § Newton loop).

    ℓ(v)  = ½ (v − v*)ᵀ A (v − v*) + Σᵢ ℓᵢ(Jᵢ v)
    ∇ℓ(v) = A (v − v*) − Jᵀ γ(v),        H(v) = A + Jᵀ G(v) J

from the warm start v₀: stop on the optimality criterion ``‖D̃∇ℓ‖ ≤ ε_a + ε_r·max(‖D̃Av‖, ‖D̃Jᵀγ‖)``
(D̃ = diag(A)^(-1/2), participating DOFs only) or on the cost criterion, both tested before
each factorization (so an exact guess takes zero iterations); else ``Δv = −H⁻¹∇ℓ`` and a line
search. Only the DOFs of trees touched by a constraint take part; the others keep v = v*.
ℓ, ∇ℓ and H are evaluated in ``contact_solve_precision``, the Newton system is solved in
``contact_linear_solve_precision``. Drake: ``SapSolver::SolveWithGuessImpl``.

With ``contact_linear_solver="pcr"`` H is never formed: :func:`hessian_product` gives
H·x = A·x + Jᵀ(G(J·x)) and :func:`~sap_ref.linear_solve.pcr` returns an inexact Δv. The line
search needs a descent direction; if ∇ℓ·Δv < 0 fails (or Δv is not finite) the step falls back
to Δv = −P∇ℓ with the Jacobi preconditioner P = (diag(H) + ε_reg)⁻¹, which is always a descent
direction, and the world is flagged ``DIRECTION_FALLBACK``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sap_common.config import SapConfig, precision_dtype
from sap_common.model import SapModel
from sap_common.rows import ROW_KINDS, RowKind
from sap_common.state import StepStatus

from .constraints import (
    DriveConstraints,
    HuntCrossley,
    LimitConstraints,
    ScalarRows,
    friction_cone,
    hunt_crossley,
    scalar_row_terms,
    scalar_rows,
)
from .holonomic import HolonomicRows
from .line_search import LineSearchResult, line_search
from .linear_solve import PcrResult, PcrSettings, cholesky_solve, pcr

__all__ = [
    "SapProblem",
    "Evaluation",
    "NewtonIterate",
    "SolveResult",
    "participating_dofs",
    "make_problem",
    "evaluate",
    "hessian",
    "hessian_product",
    "hessian_diagonal",
    "newton_direction",
    "cost_along_line",
    "stopping_criterion",
    "solve",
]


@dataclass
class SapProblem:
    """One world's SAP problem on its n participating DOFs, in ``dtype``: the contacts, then the
    scalar rows (limits, holonomic constraints, drives: :mod:`sap_common.rows`).

    Attributes:
        dofs: participating DOF indices into the world's velocity vector, (n,).
        A: dynamics matrix, (n, n).
        v_star: free-motion velocity, (n,).
        contact_J, contact_R, contact_v_hat, contact_mu: contact rows, (C, 3, n), (C, 3), (C, 3), (C,);
            R and v̂ are the friction cones' (the ``sap`` approximation).
        rows: the scalar rows (:class:`~sap_ref.constraints.ScalarRows`, J restricted to the
            participating DOFs, J, R, v̂ in ``dtype``), S rows.
        contact_hc: the Hunt–Crossley data of the contacts under ``lagged``/``similar`` (then the
            contacts are Hunt–Crossley constraints and R, v̂ are not read), None under ``sap``.
    """

    dofs: np.ndarray
    A: np.ndarray
    v_star: np.ndarray
    contact_J: np.ndarray
    contact_R: np.ndarray
    contact_v_hat: np.ndarray
    contact_mu: np.ndarray
    rows: ScalarRows
    contact_hc: HuntCrossley | None = None

    @property
    def dtype(self):
        return self.A.dtype

    @property
    def constraint_count(self) -> int:
        return len(self.contact_mu) + len(self.rows)

    def astype(self, dtype) -> "SapProblem":
        """The same problem in ``dtype`` (every array rounded to it; the DOFs and drives kept)."""
        c = lambda x: np.asarray(x, dtype=dtype)  # noqa: E731
        return SapProblem(dofs=self.dofs, A=c(self.A), v_star=c(self.v_star), contact_J=c(self.contact_J),
                          contact_R=c(self.contact_R), contact_v_hat=c(self.contact_v_hat),
                          contact_mu=c(self.contact_mu), rows=self.rows.astype(dtype),
                          contact_hc=None if self.contact_hc is None else self.contact_hc.astype(dtype))


@dataclass
class Evaluation:
    """ℓ, ∇ℓ and every constraint quantity at one v (participating DOFs, ``problem.dtype``).

    Attributes:
        v: the velocity, (n,).
        ell: total cost; ell_A its dynamics part ½(v−v*)ᵀA(v−v*).
        grad: ∇ℓ = A(v − v*) − Jᵀγ, (n,).
        momentum: A v (for the stopping criterion), (n,).
        jt_gamma: Jᵀγ, the generalized constraint impulse, (n,).
        contact_vc, contact_gamma, contact_G, contact_mode: (C, 3), (C, 3), (C, 3, 3), (C,).
        row_vc, row_gamma, row_G: the scalar rows', (S,) each (``problem.rows.rows(kind)`` selects a
            kind's).
    """

    v: np.ndarray
    ell: float
    ell_A: float
    grad: np.ndarray
    momentum: np.ndarray
    jt_gamma: np.ndarray
    contact_vc: np.ndarray
    contact_gamma: np.ndarray
    contact_G: np.ndarray
    contact_mode: np.ndarray
    row_vc: np.ndarray
    row_gamma: np.ndarray
    row_G: np.ndarray


@dataclass
class NewtonIterate:
    """One Newton iteration, for teaching and debugging: the point, its direction and step."""

    v: np.ndarray
    ell: float
    residual: float
    dv: np.ndarray
    alpha: float
    line_search: LineSearchResult
    linear_solve: PcrResult | None = None  # the PCR solve (None with Cholesky)
    fallback: bool = False  # Δv = −P∇ℓ replaced a non-descent PCR direction


@dataclass
class SolveResult:
    """Outcome of :func:`solve` (participating DOFs).

    Attributes:
        v: the solution (last iterate), (n,).
        evaluation: ℓ, ∇ℓ, γ, … at ``v``.
        iterations: Newton iterations (factorizations) taken.
        line_search_iterations: φ evaluations over all line searches.
        status: :class:`StepStatus` bits.
        residual: ‖D̃∇ℓ‖ at ``v``; ``scale`` = max(‖D̃Av‖, ‖D̃Jᵀγ‖).
        history: one :class:`NewtonIterate` per iteration.
        linear_solver_iterations: PCR iterations summed over the Newton iterations (0: Cholesky).
        linear_solver_residual: the largest final ‖b − HΔv‖/‖b‖ of those PCR solves (0: Cholesky).
    """

    v: np.ndarray
    evaluation: Evaluation
    iterations: int
    line_search_iterations: int
    status: StepStatus
    residual: float
    scale: float
    history: list = field(default_factory=list)
    linear_solver_iterations: int = 0
    linear_solver_residual: float = 0.0


def participating_dofs(model: SapModel, *row_blocks: np.ndarray) -> np.ndarray:
    """DOFs of every tree touched by a constraint row (Drake's participating cliques).

    docs/formulation.md § Participating DOFs.
    """
    touched = np.zeros(model.joint_dof_count, dtype=bool)
    for J in row_blocks:
        if J.size:
            touched |= np.any(J.reshape(-1, model.joint_dof_count) != 0.0, axis=0)
    trees = np.unique(model.dof_tree[touched])
    return np.flatnonzero(np.isin(model.dof_tree, trees))


def make_problem(model: SapModel, A, v_star, contact_J, contact_R, contact_v_hat, contact_mu,
                 limits: LimitConstraints, drives: DriveConstraints, precision: str = "fp64",
                 contact_hc: HuntCrossley | None = None, holonomic: HolonomicRows | None = None) -> SapProblem:
    """Restrict everything to the participating DOFs and cast to ``contact_solve_precision``
    (``contact_hc``: the contacts are Hunt–Crossley constraints with this data; ``holonomic``: the
    holonomic constraint rows, none when None). The limit, holonomic and drive rows become the
    problem's scalar rows (:func:`~sap_ref.constraints.scalar_rows`)."""
    dt = precision_dtype(precision)
    if holonomic is None:
        holonomic = HolonomicRows.empty(model.joint_dof_count)
    rows = scalar_rows(limits, holonomic, drives)
    dofs = participating_dofs(model, contact_J, rows.J)
    cast = lambda x: np.asarray(x, dtype=dt)  # noqa: E731
    return SapProblem(
        dofs=dofs, A=cast(A[np.ix_(dofs, dofs)]), v_star=cast(v_star[dofs]),
        contact_J=cast(contact_J[:, :, dofs]), contact_R=cast(contact_R), contact_v_hat=cast(contact_v_hat),
        contact_mu=cast(contact_mu), rows=rows.restricted(dofs).astype(dt),
        contact_hc=None if contact_hc is None else contact_hc.astype(dt),
    )


def _contact_terms(p: SapProblem, contact_vc):
    if p.contact_hc is None:
        return friction_cone(contact_vc, p.contact_R, p.contact_v_hat, p.contact_mu)
    return hunt_crossley(contact_vc, p.contact_mu, p.contact_hc)


def _row_products(rows: ScalarRows, J: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``J x`` of the scalar rows, one product per kind (:meth:`ScalarRows.segments`)."""
    out = np.zeros(len(rows), dtype=np.result_type(J.dtype, x.dtype))
    for _, sl in rows.segments():
        if sl.stop > sl.start:
            out[sl] = J[sl] @ x
    return out


# The order in which sap_ref adds the kinds' terms in every sum over the scalar rows: limits,
# drives, then holonomic rows, the order of its sums before the kinds became one family laid out
# in ROW_KINDS order, kept so that no result of sap_ref changed by a bit with the layout. (sap_gpu
# adds them in layout order; the two differ in the last bits only where a drive and a holonomic
# row share a DOF, far below every tolerance between the backends.)
SUM_ORDER = (RowKind.LIMIT, RowKind.DRIVE, RowKind.HOLONOMIC)
assert sorted(SUM_ORDER) == sorted(ROW_KINDS), "SUM_ORDER must name every kind of ROW_KINDS once"


def _sum_by_kind(rows: ScalarRows, start, term):
    """``start + term(rows of one kind) + term(rows of the next) + …``, left to right in
    ``SUM_ORDER``: how every sum over the scalar rows adds them."""
    segments = dict(rows.segments())
    total = start
    for kind in SUM_ORDER:
        total = total + term(segments[kind])
    return total


def evaluate(p: SapProblem, v: np.ndarray) -> Evaluation:
    """ℓ(v), ∇ℓ(v), γ(v), G(v) (docs/formulation.md § The cost and its derivatives)."""
    v = np.asarray(v, dtype=p.dtype)
    J = p.rows.J
    cvc = np.einsum("cin,n->ci", p.contact_J, v)
    rvc = _row_products(p.rows, J, v)
    cg, cG, cl, mode = _contact_terms(p, cvc)
    rg, rG, rl = scalar_row_terms(rvc, p.rows)
    dv = v - p.v_star
    momentum = p.A @ v
    A_dv = p.A @ dv
    jt_gamma = _sum_by_kind(p.rows, np.einsum("cin,ci->n", p.contact_J, cg), lambda sl: J[sl].T @ rg[sl])
    ell_A = p.dtype.type(0.5) * dv @ A_dv
    return Evaluation(v=v, ell=_sum_by_kind(p.rows, ell_A + cl.sum(), lambda sl: rl[sl].sum()), ell_A=ell_A,
                      grad=A_dv - jt_gamma, momentum=momentum, jt_gamma=jt_gamma, contact_vc=cvc, contact_gamma=cg,
                      contact_G=cG, contact_mode=mode, row_vc=rvc, row_gamma=rg, row_G=rG)


def hessian(p: SapProblem, ev: Evaluation) -> np.ndarray:
    """``H = A + Jᵀ G J`` (SPD when A is SPD and every Gᵢ is PSD)."""
    J = p.rows.J
    return _sum_by_kind(p.rows, p.A + np.einsum("cim,cij,cjn->mn", p.contact_J, ev.contact_G, p.contact_J),
                        lambda sl: J[sl].T @ (ev.row_G[sl][:, None] * J[sl]))


def _linear_solve_terms(p: SapProblem, ev: Evaluation, dtype):
    c = lambda x: np.asarray(x, dtype=dtype)  # noqa: E731
    return c(p.A), c(p.contact_J), c(ev.contact_G), c(p.rows.J), c(ev.row_G)


def hessian_product(p: SapProblem, ev: Evaluation, x: np.ndarray, precision: str = "fp64") -> np.ndarray:
    """``H x = A x + Jᵀ(G(J x))`` without forming H, every factor rounded to ``precision``."""
    A, cJ, cG, rJ, rG = _linear_solve_terms(p, ev, precision_dtype(precision))
    x = np.asarray(x, dtype=A.dtype)
    cvc = np.einsum("cin,n->ci", cJ, x)
    return _sum_by_kind(p.rows, A @ x + np.einsum("cin,ci->n", cJ, np.einsum("cij,cj->ci", cG, cvc)),
                        lambda sl: rJ[sl].T @ (rG[sl] * (rJ[sl] @ x)))


def hessian_diagonal(p: SapProblem, ev: Evaluation, precision: str = "fp64") -> np.ndarray:
    """``diag(H)_k = A_kk + Σ_i (J_iᵀ G_i J_i)_kk`` in ``precision``."""
    A, cJ, cG, rJ, rG = _linear_solve_terms(p, ev, precision_dtype(precision))
    return _sum_by_kind(p.rows, np.diag(A) + np.einsum("cik,cij,cjk->k", cJ, cG, cJ),
                        lambda sl: (rJ[sl] * rJ[sl]).T @ rG[sl])


def newton_direction(p: SapProblem, ev: Evaluation, config: SapConfig):
    """``(Δv, ok, pcr_result, fallback)``: the Newton direction by the configured linear solver.

    Cholesky: ``ok`` is False if H does not factor. PCR: the returned iterate, or −P∇ℓ if that
    is not a finite descent direction (``fallback``); ``ok`` is False only if even −P∇ℓ is not
    finite.
    """
    prec = config.contact_linear_solve_precision
    if config.contact_linear_solver == "cholesky":
        dv, ok = cholesky_solve(hessian(p, ev), -ev.grad, prec)
        return dv.astype(p.dtype), ok, None, False
    settings = PcrSettings.from_config(config)
    diag = hessian_diagonal(p, ev, prec)
    res = pcr(lambda x: hessian_product(p, ev, x, prec), -ev.grad, diag, settings, prec)
    dv = res.x.astype(p.dtype)
    if np.all(np.isfinite(dv)) and ev.grad @ dv < 0:
        return dv, True, res, False
    Pinv = diag.dtype.type(1.0) / (diag + diag.dtype.type(settings.regularization))
    dv = (Pinv * (-ev.grad).astype(diag.dtype)).astype(p.dtype)
    return dv, bool(np.all(np.isfinite(dv))), res, True


def cost_along_line(p: SapProblem, ev: Evaluation, dv: np.ndarray):
    """``phi(α) -> (ℓ(v + αΔv), dℓ/dα, d²ℓ/dα²)`` with the dynamics part from precomputed
    coefficients and the constraint terms recomputed at ``vc + αΔvc`` (docs/formulation.md § Line searches)."""
    dv = np.asarray(dv, dtype=p.dtype)
    dp = p.A @ dv
    d2_A = dv @ dp
    slope_A = dp @ (ev.v - p.v_star)
    c_dvc = np.einsum("cin,n->ci", p.contact_J, dv)
    r_dvc = _row_products(p.rows, p.rows.J, dv)

    def phi(alpha: float):
        a = p.dtype.type(alpha)
        cg, cG, cl, _ = _contact_terms(p, ev.contact_vc + a * c_dvc)
        rg, rG, rl = scalar_row_terms(ev.row_vc + a * r_dvc, p.rows)
        ell = _sum_by_kind(p.rows, ev.ell_A + a * slope_A + p.dtype.type(0.5) * a * a * d2_A + cl.sum(),
                           lambda sl: rl[sl].sum())
        dell = _sum_by_kind(p.rows, slope_A + a * d2_A - np.sum(c_dvc * cg), lambda sl: -(r_dvc[sl] @ rg[sl]))
        d2ell = _sum_by_kind(p.rows, d2_A + np.einsum("ci,cij,cj->", c_dvc, cG, c_dvc),
                             lambda sl: r_dvc[sl] @ (rG[sl] * r_dvc[sl]))
        return float(ell), float(dell), float(d2ell)

    return phi


def stopping_criterion(p: SapProblem, ev: Evaluation, config: SapConfig):
    """``(reached, r, s)``: r = ‖D̃∇ℓ‖, s = max(‖D̃Av‖, ‖D̃Jᵀγ‖), reached if r ≤ ε_a + ε_r s
    (``config.newton``'s optimality tolerances)."""
    newton = config.newton
    d = p.dtype.type(1.0) / np.sqrt(np.diag(p.A))
    r = float(np.linalg.norm(d * ev.grad))
    s = float(max(np.linalg.norm(d * ev.momentum), np.linalg.norm(d * ev.jt_gamma)))
    return r <= newton.optimality_abs_tol + newton.optimality_rel_tol * s, r, s


def solve(p: SapProblem, v_guess: np.ndarray, config: SapConfig) -> SolveResult:
    """Newton iterations from ``v_guess`` (docs/formulation.md § Newton loop); never raises on a failed solve."""
    newton = config.newton
    v = np.asarray(v_guess, dtype=p.dtype).copy()
    ev = evaluate(p, v)
    history, ls_iterations, cost_reached = [], 0, False
    lin_iterations, lin_residual = 0, 0.0
    status = StepStatus(0)
    k = 0
    while True:
        if not (np.isfinite(ev.ell) and np.all(np.isfinite(ev.grad))):
            status |= StepStatus.NON_FINITE
            break
        optimal, r, s = stopping_criterion(p, ev, config)
        if optimal or cost_reached:
            status |= StepStatus.CONVERGED
            break
        if k == newton.max_iterations:
            status |= StepStatus.MAX_ITERATIONS
            break
        dv, ok, lin, fallback = newton_direction(p, ev, config)
        if lin is not None:
            lin_iterations += lin.iterations
            lin_residual = max(lin_residual, lin.residual)
        if fallback:
            status |= StepStatus.DIRECTION_FALLBACK
        if not ok:
            status |= StepStatus.LINEAR_SOLVE_FAILURE
            break
        ls = line_search(cost_along_line(p, ev, dv), float(ev.ell), float(ev.grad @ dv), config.line_search,
                         cost_abs_tol=newton.cost_abs_tol, cost_rel_tol=newton.cost_rel_tol)
        ls_iterations += ls.iterations
        history.append(NewtonIterate(v=v.copy(), ell=float(ev.ell), residual=r, dv=dv, alpha=ls.alpha, line_search=ls,
                                     linear_solve=lin, fallback=fallback))
        k += 1
        if ls.failed:
            status |= StepStatus.LINE_SEARCH_FAILURE
            break
        ell_prev = float(ev.ell)
        v = v + p.dtype.type(ls.alpha) * dv
        ev = evaluate(p, v)
        ell = float(ev.ell)
        # Drake's cost criterion, tested at the top of the next iteration (docs/formulation.md § Stopping criteria).
        cost_reached = (abs(ell_prev - ell)
                        < newton.cost_abs_tol + newton.cost_rel_tol * 0.5 * (abs(ell) + abs(ell_prev))
                        and ls.alpha > 0.5)
    _, r, s = stopping_criterion(p, ev, config) if np.all(np.isfinite(ev.grad)) else (False, np.inf, np.inf)
    return SolveResult(v=v, evaluation=ev, iterations=k, line_search_iterations=ls_iterations, status=status,
                       residual=r, scale=s, history=history, linear_solver_iterations=lin_iterations,
                       linear_solver_residual=lin_residual)

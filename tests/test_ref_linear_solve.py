"""sap_ref.linear_solve.pcr: the matrix-free Newton direction against dense Cholesky.

Random SPD systems (spread eigenvalues, badly scaled rows: what the Jacobi preconditioner is
for) and the SAP Hessians of real scenes. Checked: the stopping rule, agreement with Cholesky
to what the reached residual allows, the non-increasing preconditioned residual ‖r‖_P that CR
minimizes, the best iterate returned at the iteration cap, and the Newton loop's fallback.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sap_common import scenes
from sap_common.state import StepStatus
from sap_ref import contact_solve
from sap_ref.collision import CollisionPipeline
from sap_ref.contact_solve import hessian, hessian_diagonal, hessian_product
from sap_ref.linear_solve import PcrSettings, cholesky_solve, pcr
from sap_ref.solver import SolverSAP
from sap_tools.tolerances import RESIDUAL_GAP_FACTOR  # PCR residual drift (reason there)

EPS64 = np.finfo(np.float64).eps
# ‖r_k‖_P may rise by rounding only: CR's step minimizes it along the new direction exactly in
# exact arithmetic; in float64 the computed norms carry ~ε·κ relative error.
MONOTONE_SLACK_FACTOR = 10.0


@st.composite
def spd_systems(draw, max_n=40):
    """``(H, b)``: H = D Q Λ Qᵀ D with eigenvalues spread over up to 6 decades and a diagonal
    scaling D over up to 4 decades."""
    n = draw(st.integers(1, max_n))
    seed = draw(st.integers(0, 2**32 - 1))
    spread = draw(st.floats(0.0, 6.0))
    scale = draw(st.floats(0.0, 2.0))
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    lam = 10.0 ** rng.uniform(0.0, spread, n)
    D = np.diag(10.0 ** rng.uniform(-scale, scale, n))
    H = D @ (Q * lam) @ Q.T @ D
    H = 0.5 * (H + H.T)
    return H, rng.normal(size=n)


def _solve(H, b, **kw):
    settings_ = PcrSettings(**{"max_iterations": 10 * len(b) + 50, "rtol": 1e-10, **kw})
    return pcr(lambda x: H @ x, b, np.diag(H), settings_)


@settings(max_examples=60, deadline=None)
@given(spd_systems())
def test_pcr_matches_cholesky_on_random_spd_systems(system):
    H, b = system
    res = _solve(H, b)
    x_chol, ok = cholesky_solve(H, b)
    assert ok and res.converged
    kappa = np.linalg.cond(H)
    true = np.linalg.norm(b - H @ res.x) / np.linalg.norm(b)
    assert res.residual == pytest.approx(true, rel=1e-6, abs=1e-300)
    assert true <= 1e-10 + RESIDUAL_GAP_FACTOR * res.iterations * EPS64 * kappa
    # x − x* = H⁻¹ r: the reached residual bounds the distance to the exact solution, and the
    # Cholesky solution carries its own κ·ε error.
    bound = np.linalg.norm(b - H @ res.x) / np.linalg.eigvalsh(H)[0] + 10 * kappa * EPS64 * np.linalg.norm(x_chol)
    assert np.linalg.norm(res.x - x_chol) <= bound * (1 + 1e-8)


@settings(max_examples=60, deadline=None)
@given(spd_systems(), st.integers(1, 60))
def test_preconditioned_residual_never_increases_and_the_best_iterate_is_returned(system, cap):
    H, b = system
    res = _solve(H, b, max_iterations=cap, rtol=0.0)
    hist = res.preconditioned_history
    slack = MONOTONE_SLACK_FACTOR * EPS64 * np.linalg.cond(H) * hist[0]
    assert np.all(np.diff(hist) <= slack), "‖r‖_P rose"
    # The returned iterate is the one with the smallest ‖r‖₂ seen (the first one, on ties).
    assert res.best_iteration == int(np.argmin(res.residual_history))
    assert res.iterations <= cap
    if res.best_iteration:
        again = _solve(H, b, max_iterations=res.best_iteration, rtol=0.0)
        np.testing.assert_array_equal(again.x, res.x)
    else:
        assert not np.any(res.x)


def test_the_best_iterate_not_the_last_is_returned_at_the_cap():
    """A badly scaled system on which ‖r‖₂ rises at step 2 (PCR minimizes ‖r‖_P, not ‖r‖₂)."""
    found = None
    for seed in range(200):
        rng = np.random.default_rng(seed)
        n = 6
        Q, _ = np.linalg.qr(rng.normal(size=(n, n)))
        D = np.diag(10.0 ** rng.uniform(-2, 2, n))
        H = D @ (Q * 10.0 ** rng.uniform(0, 3, n)) @ Q.T @ D
        H = 0.5 * (H + H.T)
        b = rng.normal(size=n)
        full = _solve(H, b, max_iterations=n, rtol=0.0)
        rise = np.flatnonzero(np.diff(full.residual_history) > 0)
        if len(rise) and rise[0] + 1 < len(full.residual_history):
            found = H, b, int(rise[0] + 1)  # the iterate after the first rise
            break
    assert found is not None, "no system with a rising ‖r‖₂ among 200 seeds"
    H, b, cap = found
    res = _solve(H, b, max_iterations=cap, rtol=0.0)
    assert res.iterations == cap and res.best_iteration < cap and not res.converged
    assert res.residual_history[res.best_iteration] == res.residual_history.min()
    assert res.residual == pytest.approx(np.linalg.norm(b - H @ res.x) / np.linalg.norm(b), rel=1e-9)


def test_edge_cases_zero_rhs_float32_and_breakdown():
    H = np.diag([1.0, 4.0, 9.0])
    res = pcr(lambda x: H @ x, np.zeros(3), np.diag(H))
    assert res.iterations == 0 and res.converged and res.residual == 0.0 and not np.any(res.x)
    # float32: every vector is float32, the tolerance reached is float32's.
    rng = np.random.default_rng(3)
    Q, _ = np.linalg.qr(rng.normal(size=(8, 8)))
    H = (Q * np.linspace(1, 50, 8)) @ Q.T
    b = rng.normal(size=8)
    r32 = pcr(lambda x: H.astype(np.float32) @ x, b, np.diag(H), PcrSettings(rtol=1e-6), "fp32")
    assert r32.x.dtype == np.float32 and r32.converged
    np.testing.assert_allclose(r32.x, np.linalg.solve(H, b), rtol=0, atol=1e-4 * np.abs(np.linalg.solve(H, b)).max())
    # An indefinite "H" breaks down (z·Hz ≤ 0): no exception, a finite best iterate.
    bad = np.diag([1.0, -1.0])
    res = pcr(lambda x: bad @ x, np.array([1.0, 1.0]), np.abs(np.diag(bad)))
    assert not res.converged and np.all(np.isfinite(res.x))
    # atol: stops at the first iterate with ‖r‖ ≤ atol.
    full = _solve(H, b)
    atol = full.residual_history[3]
    loose = pcr(lambda x: H @ x, b, np.diag(H), PcrSettings(rtol=0.0, atol=atol))
    assert loose.converged and loose.iterations == int(np.argmax(full.residual_history <= atol)) <= 3


MAX_PROBLEMS = 10


def _scene_problems(name, steps, preset="drake"):
    """(problem, evaluation at v₀) of every step with constraints along a scene's rollout."""
    scene = scenes.get(name)
    solver = SolverSAP(scene.sap_model, max_rigid_contact=scene.max_rigid_contact, contact_preset_variant=preset)
    pipeline = CollisionPipeline(scene.sap_model, scene.max_rigid_contact, solver.config)
    contacts, state = pipeline.contacts(), scene.state.copy()
    out = []
    for _ in range(steps):
        if len(out) == MAX_PROBLEMS:
            break
        pipeline.collide(state, contacts)
        solver.step(state, state, scene.control, contacts, scene.dt)
        r = solver.last_results[0]
        if r.problem is not None and len(r.problem.dofs):
            # The first Newton point has the most constraints active away from their solution.
            v = r.solve.history[0].v if r.solve.history else r.v1[r.problem.dofs]
            out.append((r.problem, contact_solve.evaluate(r.problem, v)))
    return out


SCENE_HESSIANS = [("box_stack", 20), ("arm_push_block", 20), ("pendulum_limit", 2000), ("prismatic_pd", 10)]
if scenes.availability("humanoid")[0]:
    SCENE_HESSIANS.append(("humanoid", 10))


@pytest.mark.parametrize("name,steps", SCENE_HESSIANS)
def test_sap_hessians_matrix_free_product_and_pcr_match_cholesky(name, steps):
    problems = _scene_problems(name, steps)
    assert problems, f"{name}: no constrained step"
    rng = np.random.default_rng(0)
    for p, ev in problems:
        H = hessian(p, ev)
        x = rng.normal(size=len(p.dofs))
        np.testing.assert_allclose(hessian_product(p, ev, x), H @ x, rtol=1e-12, atol=1e-12 * np.abs(H).max())
        np.testing.assert_allclose(hessian_diagonal(p, ev), np.diag(H), rtol=1e-13, atol=0)
        b = -ev.grad
        if not np.any(b):
            continue
        res = pcr(lambda y: hessian_product(p, ev, y), b, hessian_diagonal(p, ev), PcrSettings())
        x_chol, ok = cholesky_solve(H, b)
        assert ok and res.converged, f"{name}: PCR hit its cap ({res.iterations})"
        bound = np.linalg.norm(b - H @ res.x) / np.linalg.eigvalsh(H)[0] \
            + 10 * np.linalg.cond(H) * EPS64 * np.linalg.norm(x_chol)
        assert np.linalg.norm(res.x - x_chol) <= bound * (1 + 1e-8)


def test_newton_falls_back_to_the_preconditioned_gradient_and_flags_it(monkeypatch):
    """A PCR answer that is not a descent direction is replaced by −P∇ℓ; the step still converges."""
    scene = scenes.get("box_stack")
    real = contact_solve.pcr

    calls = []

    def ascent(*args, **kw):  # the first solve of the step comes back pointing uphill
        res = real(*args, **kw)
        if not calls:
            res.x = -res.x
        calls.append(1)
        return res

    monkeypatch.setattr(contact_solve, "pcr", ascent)
    solver = SolverSAP(scene.sap_model, max_rigid_contact=scene.max_rigid_contact, contact_preset_variant="drake",
                       contact_linear_solver="pcr", line_search_variant="exact_root")
    pipeline = CollisionPipeline(scene.sap_model, scene.max_rigid_contact, solver.config)
    contacts = pipeline.contacts()
    state = scene.state.copy()
    monkeypatch.setattr(contact_solve, "pcr", real)
    for _ in range(10):  # into contact
        pipeline.collide(state, contacts)
        solver.step(state, state, scene.control, contacts, scene.dt)
    monkeypatch.setattr(contact_solve, "pcr", ascent)
    state.joint_qd[0] += np.random.default_rng(0).normal(0.0, 0.3, state.joint_qd.shape[1])  # Newton work
    pipeline.collide(state, contacts)
    solver.step(state, state.copy(), scene.control, contacts, scene.dt)
    r = solver.last_results[0]
    status = StepStatus(int(solver.last_status[0]))
    assert StepStatus.DIRECTION_FALLBACK in status and StepStatus.CONVERGED in status
    assert len(r.solve.history) >= 2 and r.solve.history[0].fallback
    assert not any(it.fallback for it in r.solve.history[1:])
    for it in r.solve.history:
        assert np.all(it.dv @ contact_solve.evaluate(r.problem, it.v).grad < 0)
    # Without the fault: no fallback, and diagnostics report the PCR work.
    monkeypatch.setattr(contact_solve, "pcr", real)
    solver.step(state, state.copy(), scene.control, contacts, scene.dt)
    d = solver.diagnostics()
    assert d["status"][0] == StepStatus.CONVERGED
    assert d["linear_solver_iterations"][0] > 0 and 0 < d["linear_solver_residual"][0] <= 1e-9


def _gradient_full(r, nv):
    g = np.zeros(nv)
    if r.problem is not None and r.solve is not None:
        g[r.problem.dofs] = r.solve.evaluation.grad
    return g


def pcr_step_bound(r_chol, r_pcr, nv):
    """``(‖Δv₁‖_A, bound)`` for two solves of one step from the same state.

    ℓ is A-strongly convex, so ‖v − v_opt‖_A ≤ ‖∇ℓ(v)‖_{A⁻¹} for either solver's problem, and
    problems differing only in v* have optima ‖Δv*‖_A apart (∇ℓ shifts by A Δv*). Hence
    ‖v₁ − v₁'‖_A ≤ ‖∇ℓ(v₁)‖_{A⁻¹} + ‖∇ℓ'(v₁')‖_{A⁻¹} + ‖v* − v*'‖_A: the solver tolerance,
    measured, plus the free-motion solve's own difference.
    """
    A = r_chol.free_motion.A
    a_norm = lambda x: float(np.sqrt(max(x @ A @ x, 0.0)))  # noqa: E731
    a_inv_norm = lambda g: float(np.sqrt(max(g @ np.linalg.solve(A, g), 0.0)))  # noqa: E731
    bound = (a_inv_norm(_gradient_full(r_chol, nv)) + a_inv_norm(_gradient_full(r_pcr, nv))
             + a_norm(r_chol.free_motion.v_star - r_pcr.free_motion.v_star))
    return a_norm(r_chol.v1 - r_pcr.v1), bound, a_norm(r_chol.v1)


ANCHORS = ("double_pendulum", "free_spin", "pendulum_limit", "prismatic_pd", "sphere_drop", "sphere_slide",
           "box_corners_slide")
# Rounding in forming the two A-norms (float64, n ≤ 12): far below any tolerance that matters.
STEP_BOUND_SLACK = 1e-12


COMPARED_STEPS = 60  # per anchor, spread over the recording (contact onsets included)


def anchor_states(name):
    """``(scene, [(step, state)])``: Drake's own recorded states at COMPARED_STEPS steps of the
    anchor (taken from the recording, so no long rollout is needed to reach them)."""
    from conftest import DATA

    from sap_common.io import drake_qv_to_joint, load_json, load_recording
    from sap_common.kinematics import body_state

    scene = load_json(DATA / "drake" / f"{name}.json")
    rec = load_recording(scene)
    steps = np.unique(np.linspace(0, scene.num_steps - 1, COMPARED_STEPS).astype(int))
    cc = rec["contact_count"]
    if cc.any():  # and the first steps in contact
        first = int(np.argmax(cc > 0))
        steps = np.union1d(steps, np.arange(first, min(first + 5, scene.num_steps)))
    for extreme in (np.argmin(rec["q"], axis=0), np.argmax(rec["q"], axis=0)):  # limits engage there
        steps = np.union1d(steps, np.clip(extreme.astype(int), 0, scene.num_steps - 1))
    out = []
    for n in steps:
        state = scene.state.copy()
        state.joint_q[0], state.joint_qd[0] = drake_qv_to_joint(scene, rec["q"][n], rec["v"][n])
        state.body_q[:], state.body_qd[:] = body_state(scene.sap_model, state.joint_q, state.joint_qd, "public")
        out.append((int(n), state))
    return scene, out


@pytest.mark.parametrize("name", ANCHORS)
def test_pcr_steps_agree_with_cholesky_on_every_drake_anchor(name):
    """Steps of every Drake anchor, from Drake's recorded states, by both linear solvers (PCR with
    the matrix-free free motion too): v₁ within the strong-convexity bound of the two solves'
    residuals, and PCR converges wherever Cholesky does."""
    scene, states = anchor_states(name)
    mk = lambda **kw: SolverSAP(scene.sap_model, max_rigid_contact=scene.max_rigid_contact,  # noqa: E731
                                **{**scene.solver_kwargs, **kw})
    chol, pcr_solver = mk(), mk(contact_linear_solver="pcr")
    assert pcr_solver.config.matrixfree_representation
    pipeline = CollisionPipeline(scene.sap_model, scene.max_rigid_contact, chol.config)
    contacts = pipeline.contacts()
    nv = scene.sap_model.joint_dof_count
    constrained = 0
    for n, state in states:
        pipeline.collide(state, contacts)
        chol.step(state, state.copy(), scene.control, contacts, scene.dt)
        pcr_solver.step(state, state.copy(), scene.control, contacts, scene.dt)
        assert pcr_solver.last_status[0] == StepStatus.CONVERGED == chol.last_status[0], f"step {n}"
        dv, bound, scale = pcr_step_bound(chol.last_results[0], pcr_solver.last_results[0], nv)
        assert dv <= bound + STEP_BOUND_SLACK * max(1.0, scale), f"step {n}: {dv:.3e} > {bound:.3e}"
        constrained += pcr_solver.last_linear_solver_iterations[0] > 0
    if name not in ("double_pendulum", "free_spin"):  # these two have no constraint at all
        assert constrained > 0, "PCR never ran: the comparison covered only the free motion"

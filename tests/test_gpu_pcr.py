"""sap_gpu PCR: the batched dense solve against sap_ref.linear_solve.pcr and Cholesky, masking
and isolation, and the matrix-free Newton direction inside sap_gpu.SolverSAP.

The device PCR runs the same recurrences as sap_ref's in a different summation order, so the
two agree as closely as the reached residuals allow, not bit for bit.
"""

import numpy as np
import pytest
import warp as wp
from test_ref_linear_solve import ANCHORS, RESIDUAL_GAP_FACTOR, STEP_BOUND_SLACK, anchor_states

import sap_gpu
from sap_common import scenes
from sap_common.config import SapConfig
from sap_common.state import StepStatus
from sap_gpu.linear_solve import allocate_pcr_work, pcr
from sap_ref.linear_solve import PcrSettings
from sap_ref.linear_solve import pcr as ref_pcr

SENTINEL = 3.5  # what a masked world's X holds before and must hold after


def _systems(rng, W, n, spread=3.0, scale=1.5):
    A = np.empty((W, n, n))
    for w in range(W):
        Q, _ = np.linalg.qr(rng.normal(size=(n, n)))
        D = np.diag(10.0 ** rng.uniform(-scale, scale, n))
        A[w] = D @ (Q * 10.0 ** rng.uniform(0, spread, n)) @ Q.T @ D
        A[w] = 0.5 * (A[w] + A[w].T)
    return A, rng.normal(size=(W, n, 1))


def _run(device, A, B, active, dtype, config, n_pad=None):
    W, n, _ = A.shape
    n_pad = n_pad or n
    npy = np.float32 if dtype == wp.float32 else np.float64
    Ap = np.tile(np.eye(n_pad), (W, 1, 1))
    Ap[:, :n, :n] = A
    Bp = np.zeros((W, n_pad, 1))
    Bp[:, :n] = B
    X = wp.array(np.full((W, n_pad, 1), SENTINEL, npy), dtype=dtype, device=device)
    S = allocate_pcr_work(dtype, W, n, config, device)
    pcr(wp.array(Ap.astype(npy), dtype=dtype, device=device), wp.array(Bp.astype(npy), dtype=dtype, device=device), X,
        wp.array(active.astype(np.int32), dtype=wp.int32, device=device), S, n)
    return X.numpy().astype(np.float64), S.iterations.numpy(), S.residual.numpy().astype(np.float64)


@pytest.mark.parametrize("dtype,preset", [(wp.float64, "drake"), (wp.float32, "approx32")], ids=["fp64", "fp32"])
@pytest.mark.parametrize("n", [1, 9, 27, 40])
def test_dense_pcr_matches_sap_ref_and_cholesky(device, dtype, preset, n):
    rng = np.random.default_rng(n)
    W = 6
    A, B = _systems(rng, W, n)
    cfg = SapConfig.from_preset(preset)
    X, iterations, residual = _run(device, A, B, np.ones(W), dtype, cfg, n_pad=n + 3)
    prec = "fp32" if dtype == wp.float32 else "fp64"
    eps = np.finfo(np.float32 if dtype == wp.float32 else np.float64).eps
    for w in range(W):
        Aw = A[w].astype(np.float32).astype(np.float64) if prec == "fp32" else A[w]
        Ad = A[w].astype(np.float32 if prec == "fp32" else np.float64)
        r = ref_pcr(lambda y: Ad @ y, B[w, :, 0], np.diag(A[w]), PcrSettings.from_config(cfg), prec)
        x = X[w, :n, 0]
        assert np.all(X[w, n:, 0] == 0.0), "padding rows"
        true = np.linalg.norm(B[w, :, 0] - Aw @ x) / np.linalg.norm(B[w, :, 0])
        kappa = np.linalg.cond(Aw)
        # The reported residual is the recomputed one (in the solve's precision).
        assert residual[w] == pytest.approx(true, rel=1e-3 if prec == "fp32" else 1e-6, abs=10 * eps * kappa)
        # Both backends reach the tolerance up to the recurrence drift of the precision.
        reach = cfg.pcr_rtol + RESIDUAL_GAP_FACTOR * max(iterations[w], r.iterations) * eps * kappa
        assert true <= reach and r.residual <= reach
        # Close to the exact solution (and so to each other) as those residuals allow.
        exact = np.linalg.solve(Aw, B[w, :, 0])
        lam_min = np.linalg.eigvalsh(Aw)[0]
        norm_b = np.linalg.norm(B[w, :, 0])
        assert (np.linalg.norm(x - exact)
                <= true * norm_b / lam_min * (1 + 1e-6) + 10 * kappa * 1e-16 * np.linalg.norm(exact))
        assert (np.linalg.norm(x - r.x)
                <= (true + r.residual) * norm_b / lam_min * (1 + 1e-3) + 10 * kappa * eps * np.linalg.norm(exact))


def test_dense_pcr_masks_worlds_and_isolates_a_bad_one(device):
    rng = np.random.default_rng(7)
    W, n = 5, 12
    A, B = _systems(rng, W, n)
    cfg = SapConfig.from_preset("drake")
    active = np.array([1, 0, 1, 1, 0])
    X, it, _ = _run(device, A, B, active, wp.float64, cfg)
    assert np.all(X[active == 0] == SENTINEL) and np.all(it[active == 0] == 0)
    bad = A.copy()
    bad[2] = -np.eye(n)  # not SPD: breaks down at once
    bad[3, 0, 0] = np.nan
    Xb, itb, _ = _run(device, bad, B, np.ones(W), wp.float64, cfg)
    for w in (0, 1, 4):
        solo, _, _ = _run(device, A[w:w + 1], B[w:w + 1], np.ones(1), wp.float64, cfg)
        np.testing.assert_array_equal(Xb[w], solo[0])
    assert itb[2] == 0 and np.all(Xb[2] == 0.0)  # breakdown: the best iterate is x₀ = 0


def test_dense_pcr_returns_the_best_iterate_at_the_cap(device):
    """The system of sap_ref's best-iterate test: ‖r‖₂ rises, so the last iterate is not the best."""
    for seed in range(200):
        rng = np.random.default_rng(seed)
        A, B = _systems(rng, 1, 6, spread=3.0, scale=2.0)
        full = ref_pcr(lambda x: A[0] @ x, B[0, :, 0], np.diag(A[0]), PcrSettings(max_iterations=6, rtol=0.0))
        rise = np.flatnonzero(np.diff(full.residual_history) > 0.1 * full.residual_history[1:])
        if len(rise):
            break
    else:
        pytest.fail("no system with a clearly rising ‖r‖₂ among 200 seeds")
    cap = int(rise[0] + 1)
    ref = ref_pcr(lambda x: A[0] @ x, B[0, :, 0], np.diag(A[0]), PcrSettings(max_iterations=cap, rtol=0.0))
    assert ref.best_iteration < cap
    X, it, residual = _run(device, A, B, np.ones(1), wp.float64, SapConfig.from_preset(
        "drake", pcr_max_iterations=cap, pcr_rtol=0.0))
    assert it[0] == cap
    np.testing.assert_allclose(X[0, :, 0], ref.x, rtol=1e-9, atol=1e-12 * np.abs(ref.x).max())
    assert residual[0] == pytest.approx(ref.residual, rel=1e-6)


def test_pcr_is_refused_bad_arguments(device):
    cfg = SapConfig.from_preset("drake")
    A = wp.zeros((2, 4, 4), dtype=wp.float64, device=device)
    B = wp.zeros((2, 4, 1), dtype=wp.float64, device=device)
    act = wp.zeros(2, dtype=wp.int32, device=device)
    S = allocate_pcr_work(wp.float64, 2, 4, cfg, device)
    with pytest.raises(ValueError, match="B, X: expected shape"):
        pcr(A, B, wp.zeros((2, 4, 2), dtype=wp.float64, device=device), act, S)
    with pytest.raises(ValueError, match="A, B, X: dtypes must match"):
        pcr(A, B, wp.zeros((2, 4, 1), dtype=wp.float32, device=device), act, S)
    with pytest.raises(ValueError, match="n: must lie in"):
        pcr(A, B, wp.zeros((2, 4, 1), dtype=wp.float64, device=device), act, S, 5)
    with pytest.raises(ValueError, match="S: expected work vectors"):
        pcr(A, B, wp.zeros((2, 4, 1), dtype=wp.float64, device=device), act, allocate_pcr_work(wp.float32, 2, 4, cfg,
                                                                                              device))


def _rollout(device, name, W, steps, **kw):
    scene = scenes.get(name, num_worlds=W)
    solver = sap_gpu.SolverSAP(scene.sap_model, max_rigid_contact=scene.max_rigid_contact, device=device, **kw)
    pipeline = sap_gpu.CollisionPipeline(scene.sap_model, scene.max_rigid_contact, solver.config, device=device)
    contacts = pipeline.contacts()
    state, control = sap_gpu.to_device(scene.state, device), sap_gpu.to_device(scene.control, device)
    diags = []
    for _ in range(steps):
        pipeline.collide(state, contacts)
        solver.step(state, state, control, contacts, scene.dt)
        diags.append(solver.diagnostics())
    return solver, sap_gpu.to_host(state), diags


@pytest.mark.parametrize("preset", ["approx32", "drake"])
def test_pcr_steps_converge_report_their_work_and_never_form_H(device, preset):
    solver, state, diags = _rollout(device, "box_stack", 2, 15, contact_preset_variant=preset,
                                    contact_linear_solver="pcr")
    assert (solver.work.H.shape == (1, 1, 1) and "L64" not in solver.work.fm_scratch
            and "L32" not in solver.work.fm_scratch)
    assert all(np.all(d["status"] == StepStatus.CONVERGED) for d in diags)
    worked = [d for d in diags if d["newton_iterations"].max() > 0]
    assert worked and all(np.all(d["linear_solver_iterations"] > 0) for d in worked)
    # The reported residual is ‖b − HΔv‖/‖b‖ recomputed: float32 stalls near κ·ε₃₂, float64 meets pcr_rtol
    # (1e-10) up to the recurrence drift.
    assert max(d["linear_solver_residual"].max() for d in worked) <= (1e-3 if preset == "approx32" else 1e-9)
    _, chol, _ = _rollout(device, "box_stack", 2, 15, contact_preset_variant=preset)
    # The two linear solvers reach the same Newton tolerance: the states agree far below the
    # scene's scale (1 cm boxes pressed 1.5 mm); the per-step bound is tested against Drake's anchors.
    np.testing.assert_allclose(state.joint_q, chol.joint_q, rtol=0, atol=1e-6 if preset == "approx32" else 1e-10)


def test_pcr_fallback_matches_sap_ref_world_by_world(device):
    """With a 1-iteration cap PCR directions are poor; whether −P∇ℓ replaces them is decided by
    the same test in both backends, so the flags agree world by world."""
    from sap_ref.collision import CollisionPipeline
    from sap_ref.solver import SolverSAP

    scene = scenes.get("box_stack", num_worlds=3)
    kw = dict(contact_preset_variant="drake", contact_linear_solver="pcr", pcr_max_iterations=1,
              matrixfree_representation=False)
    ref = SolverSAP(scene.sap_model, max_rigid_contact=scene.max_rigid_contact, **kw)
    gpu = sap_gpu.SolverSAP(scene.sap_model, max_rigid_contact=scene.max_rigid_contact, device=device, **kw)
    pipe = CollisionPipeline(scene.sap_model, scene.max_rigid_contact, ref.config)
    contacts, state = pipe.contacts(), scene.state.copy()
    rng = np.random.default_rng(1)
    seen = 0
    for _ in range(12):
        pipe.collide(state, contacts)
        state.joint_qd[:] += rng.normal(0.0, 0.2, state.joint_qd.shape)
        out_ref = state.copy()
        ref.step(state, out_ref, scene.control, contacts, scene.dt)
        out_gpu = sap_gpu.to_device(state, device)
        gpu.step(sap_gpu.to_device(state, device), out_gpu, sap_gpu.to_device(scene.control, device),
                 sap_gpu.to_device(contacts, device), scene.dt)
        flag = int(StepStatus.DIRECTION_FALLBACK)
        np.testing.assert_array_equal(gpu.diagnostics()["status"] & flag, ref.last_status & flag)
        seen += int(np.count_nonzero(ref.last_status & flag))
        state = out_ref
    assert seen > 0, "the 1-iteration cap never produced a fallback: the test exercises nothing"


# Drake's Hunt–Crossley recordings (the scene files carry lagged / similar), PCR included.
HC_ANCHORS = ("box_corners_slide_lagged", "incline_stick_slip_similar")


@pytest.mark.parametrize("name", ANCHORS + HC_ANCHORS)
def test_gpu_pcr_steps_agree_with_sap_ref_cholesky_on_every_drake_anchor(device, name):
    """sap_gpu with PCR (and the matrix-free free motion) against sap_ref with Cholesky, one step
    from each of Drake's recorded states: v₁ within the strong-convexity bound of the two solves'
    residuals plus their v* difference (see test_ref_linear_solve.pcr_step_bound)."""
    from sap_ref.collision import CollisionPipeline
    from sap_ref.solver import SolverSAP

    scene, states = anchor_states(name)
    ref = SolverSAP(scene.sap_model, max_rigid_contact=scene.max_rigid_contact, **scene.solver_kwargs)
    gpu = sap_gpu.SolverSAP(scene.sap_model, max_rigid_contact=scene.max_rigid_contact, device=device,
                            **{**scene.solver_kwargs, "contact_linear_solver": "pcr"})
    pipeline = CollisionPipeline(scene.sap_model, scene.max_rigid_contact, ref.config)
    contacts = pipeline.contacts()
    control = sap_gpu.to_device(scene.control, device)
    nv = scene.sap_model.joint_dof_count
    for n, state in states:
        pipeline.collide(state, contacts)
        ref.step(state, state.copy(), scene.control, contacts, scene.dt)
        out = sap_gpu.to_device(state, device)
        gpu.step(sap_gpu.to_device(state, device), out, control, sap_gpu.to_device(contacts, device), scene.dt)
        assert gpu.diagnostics()["status"][0] == StepStatus.CONVERGED == ref.last_status[0], f"step {n}"
        r = ref.last_results[0]
        A = r.free_motion.A
        v1 = gpu.work.v1.numpy()[0]
        g_gpu = gpu.evaluate_at(v1[None])["grad"][0]
        g_ref = np.zeros(nv)
        g_ref[r.problem.dofs] = r.solve.evaluation.grad
        a_norm = lambda x: float(np.sqrt(max(x @ A @ x, 0.0)))  # noqa: E731
        a_inv = lambda g: float(np.sqrt(max(g @ np.linalg.solve(A, g), 0.0)))  # noqa: E731
        bound = a_inv(g_ref) + a_inv(g_gpu) + a_norm(r.free_motion.v_star - gpu.work.v_star.numpy()[0])
        dv = a_norm(r.v1 - v1)
        assert dv <= bound + STEP_BOUND_SLACK * max(1.0, a_norm(r.v1)), f"step {n}: {dv:.3e} > {bound:.3e}"

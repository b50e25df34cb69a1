"""The fused Newton path against the staged one (sap_gpu.contact_solve_fused; a fast variant is
tested against the plain path it replaces).

``SolverSAP(newton_path="fused")`` runs stage 3 of a world in one block of lanes, ``"staged"``
as one thread per world per kernel. Two kinds of comparison:

* **one lane per block** (Warp's CPU device without cooperative lanes): every lane's partial
  sum starts and runs in the staged kernels' order, each row of H adds its terms in the staged
  order, and both paths factor with the same function, so the two must be *equal*
  (``np.array_equal`` on states, statuses, iteration counts, ℓ, ∇ℓ, γ and H).
* **32 cooperative lanes** (``conftest.cooperative_lanes``): ∇ℓ, γ and H are still formed per
  DOF and per row by one lane each in the staged order, so they stay *equal*; ℓ is a block sum
  of the lanes' partial sums in another order, so it may differ by the rounding of a
  reordered sum (``SUM_ORDER_FACTOR``). Whole steps are compared on the solution: a stopping or
  line-search decision taken near its threshold may differ, so each path's v₁ must be within
  the other's reach by A-strong convexity of ℓ (‖x − y‖_A ≤ ‖∇ℓ(x)‖_{A⁻¹} + ‖∇ℓ(y)‖_{A⁻¹}).
"""

import numpy as np
import pytest
import warp as wp
from conftest import cooperative_lanes
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import random_constrained_models
from test_gpu_sparse_rows import _inputs
from variants import PAIRED_LINE_SEARCH, PRESETS, preset_line_search_params

import sap_gpu
from sap_common import scenes
from sap_common.config import NEWTON_PATHS, SapConfig
from sap_common.state import StepStatus
from sap_gpu.contact_solve_fused import SLAB_ROWS, fused_newton_kernel
from sap_gpu.plan import (
    FUSED_TILE,
    NewtonPlan,
    fused_cholesky_for,
    fused_hessian_for,
    fused_register_cap,
    fused_size,
    resolve_fused_cholesky,
    swept_cholesky,
)

CAP = 16
# A sum of m floating-point terms taken in two orders differs by at most (m − 1)·ε·Σ|terms|
# (each partial sum rounds once); 2 covers the rounding of the terms themselves, which both
# paths compute identically, and of the bound's own arithmetic.
SUM_ORDER_FACTOR = 2.0
# Slack of the strong-convexity comparison: the gradients are evaluated in float64 with their
# own rounding (as tests/test_gpu_stages.py: TOL["fp64"] relative to the velocity scale).
GRAD_ROUNDING = 1e-10
# Shared memory a block may use on the GPUs this targets: the opt-in maximum per block of an
# H100/H200 (sm_90: 227 KiB); one tile for nv ≤ 32 should stay under the 48 KiB default.
SM90_MAX_SHARED_PER_BLOCK = 227 * 1024
DEFAULT_SHARED_PER_BLOCK = 48 * 1024
# The roundings an entry's term of H = A + JᵀGJ may take on either way of forming it, in units of
# the unit roundoff u of TL (see _hessian_rounding_bound): J_i and J_k rounded to TL (2), G J_k or
# Gᵀ J_i formed in T (3: three products, two sums; T is at least as precise as TL), its rounding
# to TL (1), the product of the two factors (1), A's or the term's conversion to TL (1).
HESSIAN_TERM_ROUNDINGS = 8


def _solver(model, device, path, **config):
    """The solver of ``path``; the fused path factors H with the tile Cholesky unless ``config``
    says otherwise: the staged path's factorization, so that one lane reproduces it bit for bit
    (the default register elimination is compared with it below, fused_cholesky="lanes")."""
    if path == "fused":
        config.setdefault("fused_cholesky", "tile")
    return sap_gpu.SolverSAP(model, max_rigid_contact=CAP, device=device, newton_path=path, **config)


def _hessian_rounding_bound(solver):
    """Per world, an entrywise bound on |H_tiles − H_rows| for the problem of ``solver``'s last
    ``evaluate_at`` (the G it left): each way's H_ik is a sum of m + 1 terms, A_ik and one per
    constraint row (m: 3 per contact, and the scalar rows), each term rounded at most
    HESSIAN_TERM_ROUNDINGS times and the sum once per term, in any order; so each way is within
    (m + HESSIAN_TERM_ROUNDINGS)·u·M_ik of the exact H, with M_ik = |A_ik| + Σ_c |J_c,i|ᵀ|G_c||J_c,k| +
    Σ_r |G_r||J_r,i||J_r,k| (the sum of the terms' magnitudes, G elementwise, r over the scalar rows:
    limits, holonomic constraints, drives), and the two ways are within twice that of each other."""
    w, P = solver.work, solver.work.P
    nv = solver.m.nv
    u = 0.5 * np.finfo(np.float32 if w.TL == wp.float32 else np.float64).eps
    A = np.abs(w.A.numpy()[:, :nv, :nv])
    Jc, Gc = np.abs(P.contact_J.numpy()), np.abs(P.contact_G.numpy())
    Jl, Gl = np.abs(P.row_J.numpy()), np.abs(P.row_G.numpy())
    nc, L = P.contact_count.numpy(), solver.work.rows.count
    out = []
    for q in range(len(A)):
        C = int(nc[q])
        J3 = Jc[q, :3 * C].reshape(C, 3, nv)
        M = A[q] + np.einsum("cai,cab,cbk->ik", J3, Gc[q, :C], J3)
        if L:
            M += np.einsum("r,ri,rk->ik", Gl[q, :L], Jl[q, :L], Jl[q, :L])
        m = 3 * C + L
        out.append(2 * (m + HESSIAN_TERM_ROUNDINGS) * u * M)
    return np.array(out)


def _preset_config(preset, **config):
    """``preset`` with its default pair's line search (tests/variants.py), for the tests that sweep
    the presets alone: they compile the kernels the pair's tests compile."""
    return dict(contact_preset_variant=preset, line_search_variant=PAIRED_LINE_SEARCH[preset], **config)


def _step(solver, state, control, contacts, device, dt=1e-3):
    out = sap_gpu.to_device(state, device)
    solver.step(sap_gpu.to_device(state, device), out, sap_gpu.to_device(control, device),
                sap_gpu.to_device(contacts, device), dt)
    return sap_gpu.to_host(out)


def _assert_same_step(a, b, what):
    (sa, oa), (sb, ob) = a, b
    for f in ("joint_q", "joint_qd", "body_q", "body_qd"):
        np.testing.assert_array_equal(getattr(oa, f), getattr(ob, f), err_msg=f"{what}: {f}")
    da, db = sa.diagnostics(), sb.diagnostics()
    for k in ("status", "newton_iterations", "line_search_iterations"):
        np.testing.assert_array_equal(da[k], db[k], err_msg=f"{what}: {k}")


def _a_norm_bound(solver, v_a, v_b):
    """(‖v_a − v_b‖_A, ‖∇ℓ(v_a)‖_{A⁻¹} + ‖∇ℓ(v_b)‖_{A⁻¹}, ‖v_b‖_A) per world over participating DOFs,
    ∇ℓ from ``solver.evaluate_at`` on the last step's problem."""
    nv = solver.m.nv
    A, mask = solver.work.A.numpy()[:, :nv, :nv], solver.work.dof_mask.numpy().astype(bool)
    ga, gb = solver.evaluate_at(v_a)["grad"], solver.evaluate_at(v_b)["grad"]
    out = []
    for w in range(len(A)):
        m = mask[w]
        Aw = A[w][np.ix_(m, m)]
        inv_norm = lambda g: float(np.sqrt(max(g @ np.linalg.solve(Aw, g), 0.0)))  # noqa: E731
        d = (v_a[w] - v_b[w])[m]
        out.append((float(np.sqrt(max(d @ Aw @ d, 0.0))), inv_norm(ga[w][m]) + inv_norm(gb[w][m]),
                    float(np.sqrt(max(v_b[w][m] @ Aw @ v_b[w][m], 0.0)))))
    return out


def _assert_same_solution(solver, v_a, v_b, what):
    """Both velocities solve the solver's last problem: within each other's reach (module doc)."""
    np.testing.assert_array_equal(v_a[~solver.work.dof_mask.numpy().astype(bool)],
                                  v_b[~solver.work.dof_mask.numpy().astype(bool)],
                                  err_msg=f"{what}: v1 = v* off the trees")
    for w, (dist, reach, scale) in enumerate(_a_norm_bound(solver, v_a, v_b)):
        assert dist <= reach * (1 + 1e-9) + GRAD_ROUNDING * max(1.0, scale), \
            f"{what}, world {w}: ‖Δv₁‖_A = {dist:.3e} > {reach:.3e}"


def _ell_order_bound(solver, v, ell):
    """SUM_ORDER_FACTOR·m·ε·Σ|terms| of ℓ at v: ℓ_A's per-DOF terms ½(v − v*)ᵢ(A(v − v*))ᵢ and the
    rows' costs ℓᵢ ≥ 0 (whose absolute sum is ℓ − ℓ_A)."""
    nv = solver.m.nv
    A, v_star = solver.work.A.numpy()[:, :nv, :nv], solver.work.v_star.numpy()
    x = v - v_star
    terms = 0.5 * x * np.einsum("wij,wj->wi", A, x)
    rows = solver.work.P.gamma.shape[1]
    m = nv + rows
    return SUM_ORDER_FACTOR * m * np.finfo(np.float64).eps * (np.abs(terms).sum(1) + np.abs(ell - terms.sum(1)))


# ---------------------------------------------------------------------------- one lane: equal

@pytest.mark.parametrize("preset, line_search", preset_line_search_params())
@settings(max_examples=4)
@given(case=random_constrained_models())
def test_one_lane_fused_equals_staged(device, case, preset, line_search):
    """Random models with every joint type, limits, drives and contacts: one step on each path."""
    if device.is_cuda:
        pytest.skip("a CUDA block always has its 32 lanes (see the cooperative-lane tests)")
    model, state, control, contacts = _inputs(case, device)
    config = dict(contact_preset_variant=preset, line_search_variant=line_search)
    with cooperative_lanes(False):
        runs = []
        for path in ("fused", "staged"):
            solver = _solver(model, device, path, **config)
            runs.append((solver, _step(solver, state, control, contacts, device)))
        _assert_same_step(*runs, f"{preset}/{line_search}")
        v = runs[1][0].work.v1.numpy() + np.linspace(-0.5, 0.5, model.joint_dof_count)[None]
        ea, eb = (s.evaluate_at(v) for s, _ in runs)
    for k, x in ea.items():
        np.testing.assert_array_equal(x, eb[k], err_msg=f"evaluate_at: {k}")


@pytest.mark.parametrize("preset, line_search", preset_line_search_params())
@settings(max_examples=3)
@given(case=random_constrained_models(holonomic=True))
def test_one_lane_fused_equals_staged_with_holonomic_constraints(device, case, preset, line_search):
    """Couplers, distance, ball, weld and axis-alignment rows (the tail of the limit rows, no
    clamp) take the same sums on both paths: equal on one lane."""
    test_one_lane_fused_equals_staged.hypothesis.inner_test(device, case, preset, line_search)


@pytest.mark.parametrize("preset, line_search", preset_line_search_params())
@pytest.mark.parametrize("approximation", ["lagged", "similar"])
@settings(max_examples=2)
@given(case=random_constrained_models(hunt_crossley=True))
def test_one_lane_fused_equals_staged_under_hunt_crossley(device, approximation, case, preset, line_search):
    """The Hunt–Crossley contact term on both paths: equal on one lane, as the friction cone."""
    if device.is_cuda:
        pytest.skip("a CUDA block always has its 32 lanes (see the cooperative-lane tests)")
    model, state, control, contacts = _inputs(case, device)
    config = dict(contact_preset_variant=preset, line_search_variant=line_search,
                  discrete_contact_approximation=approximation)
    with cooperative_lanes(False):
        runs = []
        for path in ("fused", "staged"):
            solver = _solver(model, device, path, **config)
            runs.append((solver, _step(solver, state, control, contacts, device)))
        _assert_same_step(*runs, f"{approximation}/{preset}/{line_search}")
        v = runs[1][0].work.v1.numpy() + np.linspace(-0.5, 0.5, model.joint_dof_count)[None]
        ea, eb = (s.evaluate_at(v) for s, _ in runs)
    for k, x in ea.items():
        np.testing.assert_array_equal(x, eb[k], err_msg=f"evaluate_at: {k}")


# ---------------------------------------------------------------------------- 32 lanes

@pytest.mark.parametrize("preset, line_search", preset_line_search_params())
@settings(max_examples=4)
@given(case=random_constrained_models())
def test_cooperative_lanes_solve_the_staged_problem(device, case, preset, line_search):
    """32 lanes: ∇ℓ, γ, H equal to the staged ones, ℓ up to the sum order, v₁ to the solver tolerance."""
    model, state, control, contacts = _inputs(case, device)
    config = dict(contact_preset_variant=preset, line_search_variant=line_search)
    staged = _solver(model, device, "staged", **config)
    out_s = _step(staged, state, control, contacts, device)
    with cooperative_lanes():
        fused = _solver(model, device, "fused", **config)
        out_f = _step(fused, state, control, contacts, device)
        v = staged.work.v1.numpy() + np.linspace(-0.5, 0.5, model.joint_dof_count)[None]
        ef = fused.evaluate_at(v)
    es = staged.evaluate_at(v)
    for k in ("grad", "H", "H_diag", "contact_gamma", "limit_gamma", "drive_gamma"):
        np.testing.assert_array_equal(ef[k], es[k], err_msg=f"evaluate_at: {k}")
    assert np.all(np.abs(ef["ell"] - es["ell"]) <= _ell_order_bound(staged, v, es["ell"])), "ℓ"
    ds, df = staged.diagnostics(), fused.diagnostics()
    if ds["status"][0] == StepStatus.CONVERGED and df["status"][0] == StepStatus.CONVERGED:
        _assert_same_solution(staged, fused.work.v1.numpy(), staged.work.v1.numpy(), f"{preset}/{line_search}")
    else:  # away from convergence the two must fail the same way
        assert ds["status"][0] == df["status"][0]
    assert np.isfinite(out_f.joint_q).all() == np.isfinite(out_s.joint_q).all()


@pytest.mark.parametrize("preset, line_search", preset_line_search_params())
@pytest.mark.parametrize("approximation", ["lagged", "similar"])
@settings(max_examples=2)
@given(case=random_constrained_models(hunt_crossley=True))
def test_cooperative_lanes_solve_the_staged_problem_under_hunt_crossley(device, approximation, case, preset,
                                                                        line_search):
    """32 lanes under lagged and similar: ∇ℓ, γ, H equal to the staged ones, v₁ to the solver tolerance."""
    model, state, control, contacts = _inputs(case, device)
    config = dict(contact_preset_variant=preset, line_search_variant=line_search,
                  discrete_contact_approximation=approximation)
    staged = _solver(model, device, "staged", **config)
    _step(staged, state, control, contacts, device)
    with cooperative_lanes():
        fused = _solver(model, device, "fused", **config)
        _step(fused, state, control, contacts, device)
        v = staged.work.v1.numpy() + np.linspace(-0.5, 0.5, model.joint_dof_count)[None]
        ef = fused.evaluate_at(v)
    es = staged.evaluate_at(v)
    for k in ("grad", "H", "H_diag", "contact_gamma", "limit_gamma", "drive_gamma"):
        np.testing.assert_array_equal(ef[k], es[k], err_msg=f"evaluate_at: {k}")
    assert np.all(np.abs(ef["ell"] - es["ell"]) <= _ell_order_bound(staged, v, es["ell"])), "ℓ"
    ds, df = staged.diagnostics(), fused.diagnostics()
    if ds["status"][0] == StepStatus.CONVERGED and df["status"][0] == StepStatus.CONVERGED:
        _assert_same_solution(staged, fused.work.v1.numpy(), staged.work.v1.numpy(), f"{approximation}/{preset}")
    else:
        assert ds["status"][0] == df["status"][0]


@pytest.mark.parametrize("name, worlds, steps, hessian, cholesky", [
    ("humanoid", 2, 25, "rows", "tile"), ("humanoid", 2, 25, "tiles", "tile"), ("humanoid", 2, 25, "rows", "lanes"),
    ("humanoid3", 1, 6, "rows", "tile"), ("humanoid3", 1, 6, "tiles", "tile")])
def test_robot_rollout_with_cooperative_lanes(device, name, worlds, steps, hessian, cholesky):
    """A falling humanoid (27 DOFs: one tile, up to 64 contact slots and 42 limit rows spread over
    32 lanes) and three of them (81 DOFs: the blocked factorization): from the same state every
    step, the fused step solves the staged step's problem, with H formed either way and, for one
    tile, factored either way (humanoid3 forms H by rows and factors it by blocks whatever
    fused_hessian and fused_cholesky say: more than one tile)."""
    ok, why = scenes.availability(name)
    if not ok:
        pytest.skip(why)
    scene = scenes.get(name, num_worlds=worlds)
    m = scene.sap_model
    staged = sap_gpu.SolverSAP(m, max_rigid_contact=scene.max_rigid_contact, device=device, newton_path="staged")
    with cooperative_lanes():
        fused = sap_gpu.SolverSAP(m, max_rigid_contact=scene.max_rigid_contact, device=device, newton_path="fused",
                                  fused_hessian=hessian, fused_cholesky=cholesky)
    assert fused.work.H.shape[1] == fused_size(m.joint_dof_count)
    assert fused_cholesky_for(cholesky, hessian, fused.work.H.shape[1]) == cholesky
    tiles = fused_hessian_for(hessian, fused.work.H.shape[1]) == "tiles"
    assert tiles == (hessian == "tiles" and name == "humanoid")
    scratch = max(FUSED_TILE, 2 * SLAB_ROWS)  # tiles: A + diag(d), then J's and G J's slab rows
    assert fused.work.newton_L.shape[1] == {True: scratch, False: fused.work.H.shape[1] if name == "humanoid3"
                                            else 1}[tiles]
    pipe = sap_gpu.CollisionPipeline(m, scene.max_rigid_contact, staged.config, device=device)
    contacts = pipe.contacts()
    state = sap_gpu.to_device(scene.state, device)
    control = scene.control.copy()
    control.joint_f[:] = np.random.default_rng(7).normal(0.0, 5.0, control.joint_f.shape)
    control = sap_gpu.to_device(control, device)
    counts = []
    for n in range(steps):
        pipe.collide(state, contacts)
        counts.append(int(contacts.count.numpy().max()))
        with cooperative_lanes():
            fused.step(state, sap_gpu.to_device(sap_gpu.to_host(state), device), control, contacts, scene.dt)
        staged.step(state, state, control, contacts, scene.dt)
        for s in (staged, fused):
            assert np.all(s.diagnostics()["status"] == StepStatus.CONVERGED), f"step {n}"
        _assert_same_solution(staged, fused.work.v1.numpy(), staged.work.v1.numpy(), f"{name} step {n}")
    assert max(counts) > 0, "the rollout never touched the ground"
    if not tiles:  # H by rows over the lanes (humanoid3: two or three rows per lane) equals the staged rows
        v = staged.work.v1.numpy()
        with cooperative_lanes():
            ef = fused.evaluate_at(v)
        es = staged.evaluate_at(v)
        for k in ("H", "H_diag", "grad"):
            np.testing.assert_array_equal(ef[k], es[k], err_msg=f"{name}: evaluate_at {k}")


def test_one_lane_blocked_factorization_equals_staged(device):
    """nv = 81 (padded to 96): the fused loop factors with the staged blocked function."""
    if device.is_cuda:
        pytest.skip("a CUDA block always has its 32 lanes")
    ok, why = scenes.availability("humanoid3")
    if not ok:
        pytest.skip(why)
    scene = scenes.get("humanoid3", num_worlds=1)
    m = scene.sap_model
    runs = []
    with cooperative_lanes(False):
        for path in ("fused", "staged"):
            solver = sap_gpu.SolverSAP(m, max_rigid_contact=scene.max_rigid_contact, device=device, newton_path=path)
            pipe = sap_gpu.CollisionPipeline(m, scene.max_rigid_contact, solver.config, device=device)
            contacts, state = pipe.contacts(), sap_gpu.to_device(scene.state, device)
            control = sap_gpu.to_device(scene.control, device)
            for _ in range(8):
                pipe.collide(state, contacts)
                solver.step(state, state, control, contacts, scene.dt)
            runs.append((solver, sap_gpu.to_host(state)))
    assert runs[0][0].work.H.shape[1] == 96 and runs[0][0].work.newton_L.shape[1] == 96
    _assert_same_step(*runs, "humanoid3")


def test_float32_objective_on_both_paths(device):
    """contact_solve_precision = fp32 (ℓ, ∇ℓ, the block sums in float32): equal to the staged path
    on one lane (with the staged path's factorization, as ``_solver``); with 32 lanes every step
    converges as the staged one does. monotone_decay, whose cost criterion stops the loop in float32:
    the optimality bound (1e-6 relative) is a few ε₃₂, and before ℓ meets it the Newton direction's
    slope φ'(0) rounds to ≥ 0 in float32, which exact_root reports as a line-search failure."""
    scene, host = _pressed_stack(2)
    runs = {}
    for path, lanes in (("staged", False), ("fused", False), ("fused", True)):
        with cooperative_lanes(lanes):
            fused = dict(fused_cholesky="tile") if path == "fused" else {}
            solver = sap_gpu.SolverSAP(scene.sap_model, max_rigid_contact=16, device=device, newton_path=path,
                                       contact_solve_precision="fp32", line_search_variant="monotone_decay",
                                       **fused)
            assert solver.work.P.v.dtype == wp.float32
            pipe = sap_gpu.CollisionPipeline(scene.sap_model, 16, solver.config, device=device)
            contacts, state = pipe.contacts(), sap_gpu.to_device(host, device)
            control = sap_gpu.to_device(scene.control, device)
            statuses = []
            for _ in range(6):
                pipe.collide(state, contacts)
                solver.step(state, state, control, contacts, 2e-3)
                statuses.append(solver.diagnostics()["status"])
            runs[path, lanes] = (solver, sap_gpu.to_host(state), np.array(statuses))
    assert np.all(runs["staged", False][2] == StepStatus.CONVERGED)
    assert np.all(runs["fused", True][2] == StepStatus.CONVERGED)
    if not device.is_cuda:
        _assert_same_step(runs["fused", False][:2], runs["staged", False][:2], "fp32 objective")


# ---------------------------------------------------------------------------- failures, options

def _pressed_stack(num_worlds):
    from test_gpu_solver import _perturbed_states

    scene = scenes.get("box_stack", num_worlds=num_worlds)
    return scene, _perturbed_states(scene, seed=11)


@pytest.mark.parametrize("path, hessian, cholesky", [(p, "rows", "tile") for p in NEWTON_PATHS]
                         + [("fused", "tiles", "tile"), ("fused", "rows", "lanes")])
def test_a_non_spd_world_is_a_linear_solve_failure_and_leaves_the_others_alone(device, path, hessian, cholesky):
    """World 1's dynamics matrix is made negative definite after stage 2 (A ← −10⁹A): its H
    cannot be factored, so it stops with LINEAR_SOLVE_FAILURE after its first evaluation and
    world 0 gives exactly its untouched result (H formed by rows or, fused, by tiles; factored,
    fused, by the tile Cholesky or in the lanes' registers)."""
    scene, host = _pressed_stack(2)
    m = scene.sap_model

    def run(tamper):
        with cooperative_lanes(path == "fused"):
            extra = {} if path == "staged" else dict(fused_hessian=hessian, fused_cholesky=cholesky)
            solver = sap_gpu.SolverSAP(m, max_rigid_contact=16, device=device, newton_path=path, **extra)
            pipe = sap_gpu.CollisionPipeline(m, 16, solver.config, device=device)
            contacts, state = pipe.contacts(), sap_gpu.to_device(host, device)
            pipe.collide(state, contacts)
            assert contacts.count.numpy().min() >= 3

            def hook(stage):
                if tamper and stage == "constraints":
                    A = solver.work.A.numpy()
                    A[1] *= -1e9
                    solver.work.A.assign(A)

            solver.stage_hook = hook
            solver.step(state, state, sap_gpu.to_device(scene.control, device), contacts, 2e-3)
            return solver.diagnostics(), sap_gpu.to_host(state)

    clean, clean_state = run(False)
    bad, bad_state = run(True)
    assert np.all(clean["status"] == StepStatus.CONVERGED)
    assert bad["status"][1] & StepStatus.LINEAR_SOLVE_FAILURE and not bad["status"][1] & StepStatus.CONVERGED
    assert bad["newton_iterations"][1] == 0
    assert bad["status"][0] == StepStatus.CONVERGED
    for f in ("joint_q", "joint_qd"):
        np.testing.assert_array_equal(getattr(bad_state, f)[0], getattr(clean_state, f)[0], err_msg=f)


def test_pcr_runs_the_staged_loop_on_either_path(device):
    """PCR is not fused: newton_path='fused' with PCR runs the staged loop, so the two are equal."""
    scene, host = _pressed_stack(2)
    runs = []
    for path in NEWTON_PATHS:
        solver = sap_gpu.SolverSAP(scene.sap_model, max_rigid_contact=16, device=device, newton_path=path,
                                   contact_linear_solver="pcr")
        assert solver.newton_path == path and solver.fused is False
        pipe = sap_gpu.CollisionPipeline(scene.sap_model, 16, solver.config, device=device)
        contacts, state = pipe.contacts(), sap_gpu.to_device(host, device)
        control = sap_gpu.to_device(scene.control, device)
        for _ in range(3):
            pipe.collide(state, contacts)
            solver.step(state, state, control, contacts, 2e-3)
        runs.append((solver, sap_gpu.to_host(state)))
    _assert_same_step(*runs, "pcr")


def test_the_fused_kernel_fits_in_shared_memory(device):
    """The fused kernel's shared memory (Warp's count of its tiles, from the module metadata of
    a CPU build: on CUDA the cuSolverDx workspace may add to it) stays within a block's budget:
    one tile (nv ≤ 32, H formed by rows or by tiles) under the 48 KiB default, the blocked
    factorization (nv = 81, padded to 96, float64) under an H100's 227 KiB opt-in maximum. Each
    linear-solve scalar with the line search of a preset that takes it (tests/variants.py: the
    kernels the other tests compile; the line search does not change the shared memory)."""
    cpu = wp.get_device("cpu")
    for TL, preset in ((wp.float32, "approx32"), (wp.float64, "approx64")):
        for nv, budget, hessian in ((27, DEFAULT_SHARED_PER_BLOCK, "rows"), (27, DEFAULT_SHARED_PER_BLOCK, "tiles"),
                                    (81, SM90_MAX_SHARED_PER_BLOCK, "rows")):
            config = SapConfig.from_preset(preset, line_search_variant=PAIRED_LINE_SEARCH[preset],
                                           fused_hessian=hessian, fused_cholesky="tile")
            plan = NewtonPlan.resolve(config, nv, cuda=False)
            assert plan.TL == TL
            n = plan.size
            kernel = fused_newton_kernel(plan)
            meta = kernel.module.load(cpu, block_dim=sap_gpu.launch.TILE_BLOCK_DIM).meta
            (smem,) = [v for k, v in meta.items() if k.endswith("forward_smem_bytes")]
            assert 0 < smem <= budget, f"TL {TL.__name__}, n {n}, {hessian}: {smem} bytes"


# ---------------------------------------------------------------------------- fused_hessian="tiles"

def _tiles_against_rows(device, case, config, lanes):
    """One step of ``case`` on the fused path with H formed by rows and by tiles (same lanes),
    then both evaluated at the same v: everything but H equal (the same code), H within its
    rounding bound, and each step's v₁ within the other's reach."""
    model, state, control, contacts = _inputs(case, device)
    runs = {}
    with cooperative_lanes(lanes):
        for hessian in ("rows", "tiles"):
            solver = _solver(model, device, "fused", fused_hessian=hessian, **config)
            _step(solver, state, control, contacts, device)
            runs[hessian] = solver
        rows, tiles = runs["rows"], runs["tiles"]
        assert tiles.work.newton_L.shape[1:] == (max(FUSED_TILE, 2 * SLAB_ROWS), FUSED_TILE)  # the slab scratch
        v = rows.work.v1.numpy() + np.linspace(-0.5, 0.5, model.joint_dof_count)[None]
        er, et = rows.evaluate_at(v), tiles.evaluate_at(v)
    for k in er:
        if k not in ("H", "H_diag"):
            np.testing.assert_array_equal(et[k], er[k], err_msg=f"evaluate_at: {k}")
    bound = _hessian_rounding_bound(tiles)
    over = np.abs(et["H"] - er["H"]) - bound
    assert np.all(over <= 0), f"H: {np.abs(et['H'] - er['H']).max():.3e} apart, beyond the bound by {over.max():.3e}"
    dr, dt = rows.diagnostics(), tiles.diagnostics()
    if dr["status"][0] == StepStatus.CONVERGED and dt["status"][0] == StepStatus.CONVERGED:
        _assert_same_solution(rows, tiles.work.v1.numpy(), rows.work.v1.numpy(), f"tiles, {config}")
    else:
        assert dr["status"][0] == dt["status"][0]


@settings(max_examples=12)
@given(random_constrained_models(), st.sampled_from(PRESETS), st.booleans())
def test_tile_hessian_is_the_row_hessian_to_its_rounding(device, case, preset, lanes):
    """fused_hessian="tiles" (H by tile products in shared memory) against "rows": random models
    with every joint type, limits, drives and contacts, on one lane and on 32 (each preset with its
    pair's line search: the assembly does not depend on it, and each search is a kernel to compile)."""
    _tiles_against_rows(device, case, _preset_config(preset), lanes)


@settings(max_examples=6)
@given(random_constrained_models(holonomic=True), st.sampled_from(PRESETS), st.booleans())
def test_tile_hessian_with_holonomic_constraints(device, case, preset, lanes):
    """Couplers, distance, ball, weld and axis-alignment rows: dense rows of J in the limit slabs."""
    _tiles_against_rows(device, case, _preset_config(preset), lanes)


@pytest.mark.parametrize("approximation", ["lagged", "similar"])
@settings(max_examples=4)
@given(case=random_constrained_models(hunt_crossley=True), preset=st.sampled_from(PRESETS))
def test_tile_hessian_under_hunt_crossley(device, approximation, case, preset):
    _tiles_against_rows(device, case, _preset_config(preset, discrete_contact_approximation=approximation), True)


def test_tile_hessian_applies_to_one_tile_only():
    """The threshold: a world of one tile (nv ≤ 32) forms H by tiles, a larger one by rows."""
    assert [fused_hessian_for("tiles", fused_size(nv)) for nv in (1, 27, 32, 33, 81)] == \
        ["tiles", "tiles", "tiles", "rows", "rows"]
    assert fused_hessian_for("rows", 32) == "rows"
    with pytest.raises(ValueError, match="fused_hessian: 'dense' is not valid; valid: rows, tiles"):
        fused_hessian_for("dense", 32)


# ---------------------------------------------------------------------------- fused_cholesky="lanes"

@settings(max_examples=10)
@given(random_constrained_models(holonomic=True), st.sampled_from(PRESETS), st.booleans())
def test_lane_cholesky_solves_the_tile_cholesky_problem(device, case, preset, lanes):
    """fused_cholesky="lanes" (H's rows in the lanes' registers) against "tile": random models with
    every joint type, limits, drives, holonomic rows and contacts, on one lane and on 32. Nothing
    but the factorization differs, so the evaluation at a common v is equal bit for bit, and each
    step's v₁ is within the other's reach (the solves agree to rounding, the iterates to the
    solver's tolerance)."""
    model, state, control, contacts = _inputs(case, device)
    runs = {}
    with cooperative_lanes(lanes):
        for cholesky in ("tile", "lanes"):
            solver = _solver(model, device, "fused", fused_cholesky=cholesky, **_preset_config(preset))
            _step(solver, state, control, contacts, device)
            runs[cholesky] = solver
        tile, lane = runs["tile"], runs["lanes"]
        v = tile.work.v1.numpy() + np.linspace(-0.5, 0.5, model.joint_dof_count)[None]
        et, el = tile.evaluate_at(v), lane.evaluate_at(v)
    for k in et:
        np.testing.assert_array_equal(el[k], et[k], err_msg=f"evaluate_at: {k}")
    dt, dl = tile.diagnostics(), lane.diagnostics()
    if dt["status"][0] == StepStatus.CONVERGED and dl["status"][0] == StepStatus.CONVERGED:
        _assert_same_solution(tile, lane.work.v1.numpy(), tile.work.v1.numpy(), f"lanes, {preset}")
    else:
        assert dt["status"][0] == dl["status"][0]


def test_lane_cholesky_applies_to_one_tile_formed_by_rows():
    """The threshold: "lanes" factors a world of one tile (nv ≤ 32) whose H is formed by rows;
    a tile-formed H or a larger world is factored by Warp's tile Cholesky."""
    assert [fused_cholesky_for("lanes", "rows", fused_size(nv)) for nv in (1, 27, 32, 33, 81)] == \
        ["lanes", "lanes", "lanes", "tile", "tile"]
    assert fused_cholesky_for("lanes", "tiles", 32) == "tile"
    assert fused_cholesky_for("tile", "rows", 32) == "tile"
    with pytest.raises(ValueError, match="fused_cholesky: 'lu' is not a factorization; valid: tile, lanes"):
        fused_cholesky_for("lu", "rows", 32)
    with pytest.raises(ValueError, match="'auto' is not a factorization; .* resolves 'auto' for a device"):
        fused_cholesky_for("auto", "rows", 32)


def test_auto_factors_in_the_lanes_registers_on_a_gpu_and_by_tile_on_the_cpu_device():
    """fused_cholesky="auto" (the default) takes per device the faster factorization: "lanes" on a
    GPU (and in a dry run of record_launches, which records what a GPU compiles), "tile" on the CPU
    device, where a block is one lane; "tile" and "lanes" are taken as given everywhere."""
    from sap_gpu.launch import record_launches

    assert [resolve_fused_cholesky(c, cuda) for c in ("auto", "tile", "lanes") for cuda in (True, False)] == \
        ["lanes", "tile", "tile", "tile", "lanes", "lanes"]
    with pytest.raises(ValueError, match="fused_cholesky: 'lu' is not valid; valid: auto, tile, lanes"):
        resolve_fused_cholesky("lu", True)
    scene = scenes.get("box_stack", num_worlds=1)
    kwargs = dict(max_rigid_contact=scene.max_rigid_contact, device="cpu")
    assert sap_gpu.SolverSAP(scene.sap_model, **kwargs).fused_cholesky == "tile"
    assert sap_gpu.SolverSAP(scene.sap_model, **kwargs, fused_cholesky="lanes").fused_cholesky == "lanes"
    with record_launches(dry_run=True):
        assert sap_gpu.SolverSAP(scene.sap_model, **kwargs).fused_cholesky == "lanes"
        assert sap_gpu.SolverSAP(scene.sap_model, **kwargs, fused_cholesky="tile").fused_cholesky == "tile"


def test_the_default_register_cap_is_the_lanes_kernel_s_and_only_cuda_s():
    """fused_max_registers="auto" (the default): 128 registers with a float32 linear solve and 168
    with float64 where H is factored in the lanes' registers, no cap for every other fused kernel;
    "none" no cap; an integer that cap. A solver on the CPU device builds its kernel without a
    cap (there a cap only makes another module to compile); in a dry run of record_launches,
    which records what a GPU compiles (sap-precompile), it takes the cap CUDA takes."""
    from sap_gpu.launch import record_launches

    f32, f64 = "fp32", "fp64"
    assert fused_register_cap("auto", f32, 32, "rows", "lanes") == 128
    assert fused_register_cap("auto", f64, 32, "rows", "lanes") == 168
    assert fused_register_cap("auto", f32, 32, "rows", "tile") is None  # the tile Cholesky
    assert fused_register_cap("auto", f32, 32, "tiles", "lanes") is None  # H formed by tiles
    assert fused_register_cap("auto", f64, 96, "rows", "lanes") is None  # factored by blocks
    assert fused_register_cap("none", f32, 32, "rows", "lanes") is None
    assert fused_register_cap(96, f64, 96, "rows", "tile") == 96
    scene = scenes.get("box_stack", num_worlds=1)
    for preset, cap in (("approx32", 128), ("drake", 168)):
        kwargs = dict(max_rigid_contact=scene.max_rigid_contact, contact_preset_variant=preset, device="cpu")
        assert sap_gpu.SolverSAP(scene.sap_model, **kwargs).fused_max_registers is None
        with record_launches(dry_run=True):
            assert sap_gpu.SolverSAP(scene.sap_model, **kwargs).fused_max_registers == cap
        with record_launches(dry_run=True):
            staged = sap_gpu.SolverSAP(scene.sap_model, **kwargs, newton_path="staged")
        assert staged.fused_max_registers is None and staged.fused_kernel is None


def test_a_sweep_names_the_factorization_only_where_the_default_does_not_take_it():
    """sap-benchmark's and sap-precompile's sweeps: (what the kernel takes, whether the default
    configuration takes it too) for each fused_cholesky and fused_hessian."""
    for cuda, default in ((True, "lanes"), (False, "tile")):  # what "auto" takes on the device
        other = {"lanes": "tile", "tile": "lanes"}[default]
        assert swept_cholesky("auto", "rows", cuda) == (default, True)
        assert swept_cholesky(default, "rows", cuda) == (default, True)
        assert swept_cholesky(other, "rows", cuda) == (other, False)
        for cholesky in ("auto", "lanes", "tile"):  # an H formed by tiles: the tile Cholesky, the default's
            assert swept_cholesky(cholesky, "tiles", cuda) == ("tile", True)

"""sap_gpu against sap_ref stage by stage, from identical inputs (docs/testing.md § Cross-backend checks).

Hypothesis draws builder models (every joint type, limits, drives, spheres, capsules and boxes
over a ground plane) and states; both solvers take one step from the same state with the same
contacts (sap_ref's pipeline; the device pipeline is compared in test_gpu_collision). Compared: A, v*,
contact J, w, R, v̂, the limit, holonomic-constraint and drive rows, then γ, ℓ, ∇ℓ and H at the same v,
and finally the full step: sap_gpu's v₁ must solve sap_ref's problem to the solver tolerance
(docs/testing.md § Comparing solves: solves are compared on optimality and cost, not on iterates).
"""

import os

import numpy as np
import pytest
from conftest import cooperative_lanes
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import random_constrained_models
from variants import preset_line_search_params

import sap_gpu
from sap_common.config import NEWTON_PATHS, SapConfig
from sap_common.constants import HOLONOMIC_BETA
from sap_common.conventions import joint_qd_public_to_sap
from sap_common.model import ConstraintType, JointType
from sap_common.rows import RowKind
from sap_ref.collision import CollisionPipeline
from sap_ref.contact_solve import evaluate, hessian, hessian_diagonal, stopping_criterion
from sap_ref.solver import SolverSAP as RefSolver
from sap_tools.compare_backends import with_device_setup
from sap_tools.tolerances import RESIDUAL_GAP_FACTOR, TOL, fp32_hessian_tol

# The tolerance table (each entry with its reason) is shared with sap-compare-backends.
LINEAR_SOLVERS = ("cholesky", "pcr")
# Roundings of one row's γ relative to |γ| (_grad_roundoff): the longest formulas (the friction
# cone's sliding branch: y = R⁻¹(v̂ − vc), the soft norm of y_t, γ_n, γ_t = μγ_n·y_t/|y_t|; the
# Hunt–Crossley impulse) take about a dozen dependent operations; 16 covers them.
GAMMA_ROUNDINGS = 16


def _close(a, b, rtol, what, scale=None):
    """|a − b| ≤ rtol · max(1, scale), scale defaulting to max|b|."""
    scale = np.abs(b).max(initial=0.0) if scale is None else scale
    err = np.abs(np.asarray(a, float) - np.asarray(b, float)).max(initial=0.0)
    assert err <= rtol * max(scale, 1.0), f"{what}: |Δ| = {err:.3e}, scale {scale:.3e}, rtol {rtol}"


def _close_rel(a, b, rtol, what):
    """Entrywise |a − b| ≤ rtol·|b|: for positive quantities spanning decades (w, R), where a
    max-scaled bound would let a small entry be wrong in every digit."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    err = (np.abs(a - b) / np.maximum(np.abs(b), np.finfo(float).tiny)).max(initial=0.0)
    assert err <= rtol, f"{what}: relative |Δ| = {err:.3e}, rtol {rtol}"


def _setup(case, device, newton_path="staged", **config):
    model, q, qd = case
    state = model.state()
    state.joint_q[0] = q
    state.joint_qd[0] = qd
    from sap_common.kinematics import body_state
    state.body_q[:], state.body_qd[:] = body_state(model, state.joint_q, state.joint_qd, "public")
    cap = 16
    ref = RefSolver(model, max_rigid_contact=cap, **config)
    gpu = sap_gpu.SolverSAP(model, max_rigid_contact=cap, device=device, newton_path=newton_path, **config)
    pipe = CollisionPipeline(model, cap, ref.config)
    contacts = pipe.contacts()
    pipe.collide(state, contacts)
    control = model.control()
    control.joint_target_pos[0] = np.linspace(-0.3, 0.3, model.joint_dof_count)
    control.joint_act[0] = np.linspace(1.0, -1.0, model.joint_dof_count)
    return model, state, control, contacts, ref, gpu


# SAP_STAGE_EXAMPLES (25) examples per run, a third of them per (preset, line search) pair
# (tests/variants.py); SAP_STAGE_EXAMPLES=600 shakes it harder (done before each change lands).
STAGE_EXAMPLES = int(os.environ.get("SAP_STAGE_EXAMPLES", "25"))
PAIRS_PER_RUN = 3


@pytest.mark.parametrize("preset, line_search", preset_line_search_params())
@settings(max_examples=max(1, STAGE_EXAMPLES // PAIRS_PER_RUN))
@given(case=random_constrained_models(), linear_solver=st.sampled_from(LINEAR_SOLVERS),
       newton_path=st.sampled_from(NEWTON_PATHS))
def test_stages_match_sap_ref(device, case, preset, line_search, linear_solver, newton_path):
    """Both Newton paths; the fused one with its 32 cooperative lanes (conftest.cooperative_lanes)."""
    _check_stages(device, case, preset, line_search, linear_solver, newton_path, "sap")


# The Hunt–Crossley approximations on both Newton paths: 9 examples per (approximation, path) per
# run, 3 per pair (SAP_STAGE_EXAMPLES scales them as above), Hunt–Crossley materials (finite
# stiffness, d ≥ 0).
@pytest.mark.parametrize("preset, line_search", preset_line_search_params())
@pytest.mark.parametrize("newton_path", NEWTON_PATHS)
@pytest.mark.parametrize("approximation", ["lagged", "similar"])
@settings(max_examples=max(1, STAGE_EXAMPLES * 2 // 5 // PAIRS_PER_RUN))
@given(case=random_constrained_models(hunt_crossley=True), linear_solver=st.sampled_from(LINEAR_SOLVERS))
def test_hunt_crossley_stages_match_sap_ref(device, approximation, newton_path, case, preset, line_search,
                                            linear_solver):
    """Stage by stage under lagged and similar: the Hunt–Crossley data (fₑ₀, vₙ₀, n₀, ε_s), then γ, ℓ,
    ∇ℓ, H at the same v, then the full step."""
    _check_stages(device, case, preset, line_search, linear_solver, newton_path, approximation)


# Holonomic constraints of every type on random trees, both Newton paths: 9 examples per path per
# run, 3 per pair (SAP_STAGE_EXAMPLES scales them as above). The rows (g₀, J, w, R, v̂), then γ,
# ℓ, ∇ℓ, H at the same v, then the full step, as for every other row.
@pytest.mark.parametrize("preset, line_search", preset_line_search_params())
@pytest.mark.parametrize("newton_path", NEWTON_PATHS)
@settings(max_examples=max(1, STAGE_EXAMPLES * 2 // 5 // PAIRS_PER_RUN))
@given(case=random_constrained_models(holonomic=True), linear_solver=st.sampled_from(LINEAR_SOLVERS),
       sparse=st.booleans())
def test_holonomic_stages_match_sap_ref(device, newton_path, case, preset, line_search, linear_solver, sparse):
    """Stage by stage with couplers, distance (rigid and compliant), ball, weld and axis-alignment
    constraints, dense or sparse rows (docs/formulation.md § Holonomic constraints)."""
    _check_stages(device, case, preset, line_search, linear_solver, newton_path, "sap", sparse_rows=sparse)


def _grad_roundoff(p, ev, v):
    """Per DOF, how far the two backends' Jᵀγ (and so ∇ℓ) may differ by rounding, where the bar
    relative to max|Jᵀγ| does not reach: stiff rows make γ large and their terms cancel.

    * vc_r = J_r·v is computed to within (n + 1)·u·Σ_k|J_rk||v_k| (n terms, u the float64 unit
      roundoff), which moves γ_r by up to |G_r| times that (G = −∂γ/∂vc; 1/R for a stiff row);
    * γ_r itself carries GAMMA_ROUNDINGS roundings relative to |γ_r|, and (Jᵀγ)_i sums m terms
      J_ri·γ_r in another order on each backend: (m + GAMMA_ROUNDINGS)·u·Σ_r|J_ri||γ_r|.

    Twice that for the two backends. The explore run found a weld with R = 3.8e-6 and γ ≈ 2.5e7
    whose rows cancel to |Jᵀγ| ≈ 3: 3.4e-10 apart against a bar of 2.8e-10."""
    u = 0.5 * np.finfo(np.float64).eps
    n = len(v)
    av = np.abs(v)
    rows = [(p.contact_J[c], ev.contact_G[c], ev.contact_gamma[c]) for c in range(len(p.contact_J))]
    rows += [(p.rows.J[r][None], np.array([[ev.row_G[r]]]), ev.row_gamma[r:r + 1]) for r in range(len(p.rows))]
    m = sum(len(g) for _, _, g in rows)
    out = np.zeros(n)
    for J, G, gamma in rows:
        J = np.abs(np.asarray(J, float))
        dvc = (n + 1) * u * (J @ av)
        out += J.T @ (np.abs(np.asarray(G, float)) @ dvc + (m + GAMMA_ROUNDINGS) * u * np.abs(np.asarray(gamma, float)))
    return 2.0 * out


def _check_holonomic_rows(gpu, r, model, state, cfg, jtol):
    """The device's holonomic rows (its scalar rows of that kind) against sap_ref's: the same rows
    taken, J, g₀, R, v̂. Returns the device's (J, R, v̂) of every row."""
    L, E = gpu.work.rows.holonomic_row0, gpu.work.holonomic.rows
    h = r.holonomic
    active = gpu.work.row_active.numpy()[0, L:L + E].astype(bool)
    np.testing.assert_array_equal(active, h.active)
    J = gpu.work.row_J.numpy()[0, L:L + E]
    R = gpu.work.row_R.numpy()[0, L:L + E]
    v_hat = gpu.work.row_v_hat.numpy()[0, L:L + E]
    g0 = gpu.work.holonomic_g0.numpy()[0, :E]
    _close(J[active], h.J[active], jtol, "holonomic J")
    if cfg.use_f64_boundary_pose:
        g0_tol = TOL["fp64"] * max(1.0, np.abs(h.g0).max(initial=0.0))
    else:
        # g₀ from float32 poses that may differ by a float32 ulp per coordinate between the
        # backends (TOL["fp32_pose"]): |Δg₀| ≤ 2 ε₃₂ max(1, |position|) (a point is a position plus
        # a rotated offset, each rounded once).
        g0_tol = 2 * np.finfo(np.float32).eps * max(1.0, np.abs(state.body_q[0, :, :3]).max(initial=0.0))
    err = np.abs(g0 - h.g0)
    allowed = np.full(E, g0_tol)
    flip = np.zeros(E, bool)
    for k in range(model.constraint_count):
        r0, r1 = model.constraint_row_start[k], model.constraint_row_start[k + 1]
        ct = ConstraintType(int(model.constraint_type[k]))
        if ct == ConstraintType.AXIS_ALIGN:
            # The swing θ·(a_P × a_Q)/sin θ: its direction carries the axes' rounding over sin θ,
            # undefined at opposite axes (docs/formulation.md § Holonomic constraints).
            theta = np.linalg.norm(h.g0[r0:r1])
            allowed[r0:r1] = g0_tol * (1.0 + theta / max(np.sin(theta), np.finfo(float).tiny))
        elif ct == ConstraintType.WELD and np.pi - np.linalg.norm(h.g0[r0:r0 + 3]) <= 2.0 * g0_tol:
            # θ·k̂ with k̂'s sign from the quaternion's w: within rounding of θ = π, either sign.
            flip[r0:r0 + 3] = np.abs(g0[r0:r0 + 3] + h.g0[r0:r0 + 3]) < err[r0:r0 + 3]
    err = np.where(flip, np.abs(g0 + h.g0), err)
    assert np.all(err <= allowed), f"holonomic g0: |Δ| {err}, allowed {allowed}"
    # v̂ = −g₀/(h + τ) with τ ≥ 0: float64 poses, the relative bar times the rows' conditioning;
    # float32 poses, |Δv̂| ≤ |Δg₀|/h.
    dv = np.abs(v_hat - np.where(flip, -h.v_hat, h.v_hat))
    if cfg.use_f64_boundary_pose:
        allowed_v = TOL["fp64"] * max(1.0, np.abs(h.v_hat).max(initial=0.0)) * allowed / g0_tol
    else:
        allowed_v = allowed / 1e-3
    assert np.all(dv[active] <= allowed_v[active]), "holonomic v_hat"
    if cfg.use_f64_boundary_pose:
        _close_rel(R[active], h.R[active], TOL["fp64"], "holonomic R")
    else:
        # R = max(R_c, β²/(4π²)·w), w = ‖W‖_F/n with W = J diag(A)⁻¹ Jᵀ: J's entries may differ by
        # δ = jtol·max(1, max|J|), so |ΔW| ≤ δ(|J|a 1ᵀ + 1 aᵀ|J|ᵀ) entrywise (a = 1/diag A, to first
        # order) and |ΔR| ≤ β²/(4π²)·‖that‖_F/n, plus float64 rounding.
        a = 1.0 / np.diag(r.free_motion.A)
        for k in range(model.constraint_count):
            r0, r1 = model.constraint_row_start[k], model.constraint_row_start[k + 1]
            if not h.active[r0]:
                continue
            Jk = np.abs(h.J[r0:r1])
            delta = jtol * max(1.0, Jk.max(initial=0.0))
            dW = delta * ((Jk @ a)[:, None] + (Jk @ a)[None, :])
            bound = HOLONOMIC_BETA**2 / (4 * np.pi**2) * np.linalg.norm(dW) / (r1 - r0)
            assert np.all(np.abs(R[r0:r1] - h.R[r0:r1]) <= bound + TOL["fp64"] * h.R[r0:r1]), "holonomic R (fp32)"
    R = np.where(active, R, 1.0)  # a row left out: sap_ref's stand-in (J = 0, R = 1, v̂ = 0)
    return np.where(active[:, None], J, 0.0), R, np.where(active, v_hat, 0.0)


def _check_stages(device, case, preset, line_search, linear_solver, newton_path, approximation, sparse_rows=True):
    model, state, control, contacts, ref, gpu = _setup(case, device, newton_path, contact_preset_variant=preset,
                                                       line_search_variant=line_search,
                                                       contact_linear_solver=linear_solver,
                                                       discrete_contact_approximation=approximation)
    gpu.sparse_rows = sparse_rows
    out_gpu = sap_gpu.to_device(state, device)
    with cooperative_lanes(newton_path == "fused"):
        gpu.step(sap_gpu.to_device(state, device), out_gpu, sap_gpu.to_device(control, device),
                 sap_gpu.to_device(contacts, device), 1e-3)
    # The device's last cost-criterion inputs (ℓ at v₁, ℓ before the last update, its α), read
    # before evaluate_at below reuses the Newton buffers.
    last = {k: float(getattr(gpu.work.N, k).numpy()[0]) for k in ("ell", "ell_prev", "alpha_prev")}
    out_ref = state.copy()
    ref.step(state, out_ref, control, contacts, 1e-3)
    r, cfg, nv = ref.last_results[0], ref.config, model.joint_dof_count
    # Stage 1: A and v*.
    _close(gpu.work.A.numpy()[0, :nv, :nv], r.free_motion.A, TOL["fp64"], "A")
    dv_ref = r.free_motion.v_star - joint_qd_public_to_sap(model, state.joint_q[0], state.joint_qd[0])
    if cfg.matrixfree_representation:
        # Both backends' PCR reach ‖r‖ ≤ rtol‖b‖ up to the recurrence drift (≤ k·ε·κ, k ≤ the
        # cap), so each Δv is within that residual / λ_min(A) of the exact one.
        A = r.free_motion.A
        eps = np.finfo(cfg.dtype("free_motion_solve_precision")).eps
        reach = cfg.pcr_rtol + RESIDUAL_GAP_FACTOR * cfg.pcr_max_iterations * eps * np.linalg.cond(A)
        bound = 2 * reach * np.linalg.norm(A @ dv_ref) / np.linalg.eigvalsh(A)[0]
        err = np.linalg.norm(gpu.work.v_star.numpy()[0] - r.free_motion.v_star)
        assert err <= bound * (1 + 1e-6) + TOL["fp64"] * max(1.0, np.abs(dv_ref).max()), f"v_star (pcr) {err:.3e}"
    elif cfg.free_motion_solve_precision == "fp64":
        _close(gpu.work.v_star.numpy()[0], r.free_motion.v_star, TOL["fp64"], "v_star")
    else:
        bound = TOL["fp32_solve_factor"] * np.linalg.cond(r.free_motion.A) * np.finfo(np.float32).eps
        _close(gpu.work.v_star.numpy()[0], r.free_motion.v_star, bound * max(1.0, np.abs(dv_ref).max()),
               "v_star (fp32)")
    # Stage 2: contact rows, weights, R, v̂.
    C = int(contacts.count[0])
    jtol = TOL["fp64"] if cfg.use_f64_boundary_pose else TOL["fp32_pose"]
    if C:
        _close(gpu.work.contact_J.numpy()[0, :3 * C], r.contacts.J.reshape(3 * C, nv), jtol, "J")
        wtol = TOL["fp64"] if cfg.sap_contact_weight_precision == "fp64" else TOL["fp32_weights"]
        _close_rel(gpu.work.contact_w.numpy()[0, :C], r.w, wtol, "w")
        _close_rel(gpu.work.contact_R.numpy()[0, :C], r.R, wtol, "R")
        _close(gpu.work.contact_v_hat.numpy()[0, :C], r.v_hat[:, 2], wtol, "v_hat")
    hc = r.hunt_crossley
    if C and hc is not None:  # (k, d, fₑ₀, n₀, ε_s) and vₙ₀ = (J v₀)ₙ, in the weight precision
        data = gpu.work.contact_hc.numpy()[0, :C]
        vn0 = gpu.work.contact_vn0.numpy()[0, :C]
        np.testing.assert_array_equal(data[:, 0], hc.k)
        np.testing.assert_array_equal(data[:, 1], hc.d)
        _close_rel(data[:, 2], hc.fe0, wtol, "fe0")
        # vₙ₀ = J·v₀: J's own tolerance times |J|·|v₀|, then one rounding to the weight precision.
        J_v0 = np.abs(r.contacts.J[:, 2, :]) @ np.abs(joint_qd_public_to_sap(model, state.joint_q[0],
                                                                            state.joint_qd[0]))
        assert np.all(np.abs(vn0 - hc.vn0) <= max(jtol, wtol) * np.maximum(J_v0, 1.0)), "vn0"
        # n₀ = (h fₑ₀)₊(1 − d vₙ₀)₊: fₑ₀'s and vₙ₀'s differences carried through.
        # |fₑ₀|: a contact found inside the margins has fₑ₀ < 0 (and n₀ = 0 in both backends)
        n_scale = 1e-3 * np.abs(hc.fe0) * (1.0 + hc.d * np.abs(hc.vn0))
        dn0 = 1e-3 * np.abs(hc.fe0) * hc.d * np.abs(vn0 - hc.vn0)
        n0_bound = wtol * n_scale + dn0 * (1 + wtol)
        assert np.all(np.abs(data[:, 3] - hc.n0) <= n0_bound), "n0"
        # ε_s = max(v_s, μσw n₀): its own rounding plus μσw times n₀'s bound.
        eps_bound = wtol * hc.eps + r.contacts.mu * cfg.contact_sigma * r.w * n0_bound * (1 + wtol)
        assert np.all(np.abs(data[:, 4] - hc.eps) <= eps_bound), "eps"
    # Limit and drive rows: the same active set, J, R and v̂.
    L = gpu.work.rows.limit_count  # the limit rows are the first scalar rows
    if L:
        active = gpu.work.row_active.numpy()[0, :L].astype(bool)
        assert active.sum() == len(r.limits.R)
        _close(gpu.work.row_J.numpy()[0, :L][active], r.limits.J, jtol, "limit J")
        limit_R = gpu.work.row_R.numpy()[0, :L][active]
        limit_v_hat = gpu.work.row_v_hat.numpy()[0, :L][active]
        if cfg.use_f64_boundary_pose:
            _close_rel(limit_R, r.limits.R, TOL["fp64"], "limit R")
            _close(limit_v_hat, r.limits.v_hat, TOL["fp64"], "limit v_hat")
        else:
            # A distance limit's g₀ comes from float32 poses, which may differ by one float32 ulp per
            # coordinate between the backends (see TOL["fp32_pose"]): |Δg₀| ≤ 2 ε₃₂ max|position|,
            # so |Δv̂| ≤ |Δg₀|/(h + τ); R follows w = Σ J²/A_kk, at most twice J's relative error.
            # Scalar-DOF limits read q directly and stay at float64.
            first = model.joint_qd_start[r.limits.joint]
            distance = model.joint_type[r.limits.joint] == JointType.DISTANCE
            g0_tol = 2 * np.finfo(np.float32).eps * max(1.0, np.abs(state.body_q[0, :, :3]).max())
            tau = model.joint_limit_kd[first] / model.joint_limit_ke[first]
            vtol = np.where(distance, g0_tol / (1e-3 + tau),
                            TOL["fp64"] * max(1.0, np.abs(r.limits.v_hat).max(initial=0.0)))
            assert np.all(np.abs(limit_v_hat - r.limits.v_hat) <= vtol), "limit v_hat (fp32 pose)"
            rtol = np.where(distance, 2 * TOL["fp32_pose"], TOL["fp64"])
            assert np.all(np.abs(limit_R - r.limits.R) <= rtol * np.abs(r.limits.R)), "limit R (fp32 pose)"
    if model.constraint_count:
        hol_J, hol_R, hol_v_hat = _check_holonomic_rows(gpu, r, model, state, cfg, jtol)
    D = gpu.work.rows.drive_count
    if D:
        _close_rel(gpu.work.drive_Kp.numpy()[0, :D], r.drives.Kp, TOL["fp64"], "drive Kp")
        _close_rel(gpu.work.drive_Kd.numpy()[0, :D], r.drives.Kd, TOL["fp64"], "drive Kd")
    # Stage 3 at a fixed v (sap_ref's solution): γ, ℓ, ∇ℓ, H, isolated from stages 1–2 by giving
    # sap_ref's objective the device's v*, J, R and v̂ of contacts and limits (they differ by
    # float32 ulps under approx32).
    dofs = r.problem.dofs
    p = with_device_setup(r.problem, gpu, C, (active, limit_R, limit_v_hat) if L and active.any() else None,
                          (hol_J, hol_R, hol_v_hat) if model.constraint_count else None)
    v = r.v1.copy()
    with cooperative_lanes(newton_path == "fused"):
        ev_gpu = gpu.evaluate_at(v[None])
    ev_ref = evaluate(p, v[dofs])
    # ∇ℓ = A(v − v*) − Jᵀγ cancels near the solution: compare relative to its two terms, plus what
    # rounding moves Jᵀγ by where stiff rows' large γ cancel (_grad_roundoff).
    terms = max(np.abs(ev_ref.jt_gamma).max(initial=0.0), np.abs(ev_ref.grad + ev_ref.jt_gamma).max(initial=0.0))
    err = np.abs(ev_gpu["grad"][0, dofs] - ev_ref.grad)
    allowed = TOL["fp64"] * max(1.0, terms) + _grad_roundoff(p, ev_ref, v[dofs])
    assert np.all(err <= allowed), f"grad: |Δ| = {err.max():.3e}, allowed {allowed[np.argmax(err - allowed)]:.3e}"
    # H (or diag H) in float32 is accumulated term by term: A plus one term per row.
    rows = 3 * C + len(p.rows)
    htol = TOL["fp64"] if cfg.contact_linear_solve_precision == "fp64" else fp32_hessian_tol(rows)
    if cfg.contact_linear_solver == "cholesky":
        _close(ev_gpu["H"][0][np.ix_(dofs, dofs)], hessian(p, ev_ref), htol, "H")
    else:  # PCR never forms H; its preconditioner's diagonal is compared instead
        assert ev_gpu["H"] is None
        if cfg.contact_linear_solve_precision == "fp64":
            _close(ev_gpu["H_diag"][0, dofs], hessian_diagonal(p, ev_ref), TOL["fp64"], "diag H")
        else:
            _close(ev_gpu["H_diag"][0, dofs], hessian_diagonal(p, ev_ref), htol, "diag H")
    assert ev_gpu["ell"][0] == pytest.approx(ev_ref.ell, rel=TOL["fp64"], abs=TOL["ell_abs"])
    if C:
        _close(ev_gpu["contact_gamma"][0, :C], ev_ref.contact_gamma, TOL["fp64"], "contact gamma")
    if model.constraint_count:
        _close(ev_gpu["holonomic_gamma"][0], ev_ref.row_gamma[p.rows.rows(RowKind.HOLONOMIC)], TOL["fp64"],
               "holonomic gamma")
    # Full step: sap_gpu's v₁ solves sap_ref's problem (optimality or cost criterion met) and is
    # as close to sap_ref's v₁ as the two residuals allow, when both converged.
    status = gpu.diagnostics()["status"][0]
    if status == 1 and ref.last_status[0] == 1:
        v_gpu = gpu.work.v1.numpy()[0]
        ev = evaluate(p, v_gpu[dofs])
        ok, res, scale = stopping_criterion(p, ev, cfg)
        # Within the Newton tolerance, or at the same cost to the cost criterion's precision.
        # (ev_ref: sap_ref's v₁ on the same problem p, since p carries the device's inputs.)
        same_cost = abs(ev.ell - ev_ref.ell) <= 10 * (cfg.cost_abs_tol + cfg.cost_rel_tol * abs(ev.ell)) \
            + 1e-9 * max(1.0, abs(ev.ell))
        if not (ok or same_cost):
            # Only where sap_ref, too, stopped on the cost criterion away from optimality: a loose
            # cost criterion (monotone_decay's 5e-3) also fires where Newton's steps stall, and two
            # runs whose float32 solves round differently stall at different points
            # (docs/formulation.md § Stopping criteria; tests/data/monotone_decay_stall.npz is
            # one). Then the device's stop must be that criterion's own, by its last update: ℓ at
            # v₁ as sap_ref evaluates it, the ℓ before, and α > ½.
            assert not stopping_criterion(p, ev_ref, cfg)[0], "sap_ref met optimality; sap_gpu stopped elsewhere"
            assert last["ell"] == pytest.approx(ev.ell, rel=TOL["fp64"], abs=TOL["ell_abs"]), "ℓ at v1"
            assert last["alpha_prev"] > 0.5 and abs(last["ell_prev"] - last["ell"]) < cfg.cost_abs_tol \
                + cfg.cost_rel_tol * 0.5 * (abs(last["ell"]) + abs(last["ell_prev"])), f"no cost-criterion stop: {last}"
        rest = np.setdiff1d(np.arange(nv), dofs)  # non-participating DOFs keep v = v*
        _close(v_gpu[rest], gpu.work.v_star.numpy()[0, rest], 0.0, "v1 = v* off the participating trees")
        # v₁ itself: ℓ = ½‖v − v*‖²_A + (convex terms) is A-strongly convex, so any two velocities
        # satisfy ‖x − y‖_A ≤ ‖∇ℓ(x)‖_{A⁻¹} + ‖∇ℓ(y)‖_{A⁻¹}: the two backends' v₁ may differ only as
        # much as their residual momenta allow (the solver tolerance, measured, not assumed).
        A = np.asarray(p.A, np.float64)
        a_inv_norm = lambda g: float(np.sqrt(max(g @ np.linalg.solve(A, g), 0.0)))  # noqa: E731
        dv = (v_gpu - v)[dofs]
        bound = a_inv_norm(np.asarray(ev.grad, np.float64)) + a_inv_norm(np.asarray(ev_ref.grad, np.float64))
        v_scale = float(np.sqrt(v[dofs] @ A @ v[dofs]))
        assert np.sqrt(dv @ A @ dv) <= bound * (1 + 1e-9) + TOL["fp64"] * max(1.0, v_scale), "v1 differs"


def test_config_knobs_reach_the_kernels(device):
    """approx32 really runs its fp32 paths: float32 Newton system and free-motion buffers."""
    import warp as wp

    from sap_common import scenes

    scene = scenes.get("box_slide")
    s32 = sap_gpu.SolverSAP(scene.sap_model, max_rigid_contact=8, device=device)
    s64 = sap_gpu.SolverSAP(scene.sap_model, max_rigid_contact=8, device=device, contact_preset_variant="approx64")
    assert (s32.work.H.dtype == wp.float32 and s32.work.fm_scratch["A32"].dtype == wp.float32
            and s32.work.T == wp.float64)
    assert s64.work.H.dtype == wp.float64 and "A32" not in s64.work.fm_scratch
    s = sap_gpu.SolverSAP(scene.sap_model, max_rigid_contact=8, device=device, contact_solve_precision="fp32")
    assert s.work.P.v.dtype == wp.float32 and s.work.P.grad.dtype == wp.float32
    assert isinstance(s.config, SapConfig)


_HC_KERNELS = {}


def _hc_kernel(similar: bool):
    """A kernel that evaluates the device's Hunt–Crossley term of each input row (float64)."""
    import warp as wp

    from sap_gpu.constraints import hunt_crossley_term

    if similar in _HC_KERNELS:
        return _HC_KERNELS[similar]
    term = hunt_crossley_term(wp.float64, similar)

    @wp.kernel(enable_backward=False, module="unique")
    def hc_rows(vc: wp.array(dtype=wp.vec3d), p: wp.array2d(dtype=wp.float64), gamma: wp.array(dtype=wp.vec3d),
                G: wp.array(dtype=wp.mat33d), ell: wp.array(dtype=wp.float64), mode: wp.array(dtype=int)):
        i = wp.tid()
        g, Gi, li, m = term(vc[i], p[i, 0], p[i, 1], p[i, 2], p[i, 3], p[i, 4], p[i, 5], p[i, 6])
        gamma[i] = g
        G[i] = Gi
        ell[i] = li
        mode[i] = m

    _HC_KERNELS[similar] = hc_rows
    return hc_rows


@settings(max_examples=20)
@given(st.booleans(), st.lists(st.tuples(st.floats(0.0, 1.5), st.sampled_from([0.0, 1e2, 1e5, 1e7]),
                                         st.sampled_from([0.0, 0.5, 50.0]), st.floats(0.0, 1e-3),
                                         st.floats(0.0, 1.0), st.sampled_from([1e-5, 1e-4, 1e-2]),
                                         st.lists(st.floats(-0.3, 0.3), min_size=3, max_size=3)),
                               min_size=1, max_size=40))
def test_hunt_crossley_term_matches_sap_ref(device, similar, rows):
    """The device's Hunt–Crossley function against sap_ref's, contact by contact: γ, G, ℓ and the
    regime, over stiffnesses and dissipations with 0 (the guarded cases), both variants."""
    import warp as wp

    from sap_ref.constraints import HuntCrossley, hunt_crossley

    h = 1e-3
    mu = np.array([r[0] for r in rows])
    k, d = np.array([r[1] for r in rows]), np.array([r[2] for r in rows])
    fe0 = k * np.array([r[3] for r in rows])
    n0 = h * fe0 * np.array([r[4] for r in rows])
    eps = np.array([r[5] for r in rows])
    vc = np.array([r[6] for r in rows])
    hc = HuntCrossley(similar=similar, h=h, k=k, d=d, fe0=fe0, vn0=np.zeros(len(rows)), n0=n0, eps=eps)
    g_ref, G_ref, ell_ref, mode_ref = hunt_crossley(vc, mu, hc)
    n = len(rows)
    params = np.stack([mu, np.full(n, h), k, d, fe0, n0, eps], axis=1)
    out = [wp.zeros(n, dtype=t, device=device) for t in (wp.vec3d, wp.mat33d, wp.float64, int)]
    wp.launch(_hc_kernel(similar), dim=n, device=device,
              inputs=[wp.array(vc, dtype=wp.vec3d, device=device), wp.array(params, dtype=wp.float64, device=device)],
              outputs=out)
    g, G, ell, mode = (a.numpy() for a in out)
    scale = np.maximum(np.abs(g_ref).max(axis=1), mu * n0)[:, None]
    assert np.all(np.abs(g - g_ref) <= TOL["fp64"] * np.maximum(scale, 1e-30)), "gamma"
    gscale = np.abs(G_ref).max(axis=(1, 2))[:, None, None]
    assert np.all(np.abs(G - G_ref) <= TOL["fp64"] * np.maximum(gscale, 1e-30)), "G"
    np.testing.assert_allclose(ell, ell_ref, rtol=TOL["fp64"], atol=1e-30)
    np.testing.assert_array_equal(mode, mode_ref)

"""sap_gpu against sap_ref stage by stage with per-world parameters (docs/testing.md § Cross-backend checks).

The checks of tests/test_gpu_stages.py and tests/test_gpu_collision.py, run on a batch of WORLDS
worlds whose physical parameters differ (docs/scaling.md § Per-world parameters). Hypothesis draws
a builder model replicated into the batch (every joint type, limits, drives, spheres, capsules and
boxes over a ground plane; holonomic constraints in some examples; Hunt–Crossley materials under
``lagged`` and ``similar``), one state that every world starts from, and per field group of
PARAMETER_FIELDS which worlds take a draw (the others keep the model's values); the values come
from a seeded NumPy generator: masses and inertias, armatures, damping, drive and limit gains
scaled by sap_tools.randomize.draw, the rest moved around the model's within its rules (an unset
material drawn outright). The same values go into sap_ref.WorldParameters and sap_gpu.WorldParameters.

Compared in every world, with the tolerances of tests/test_gpu_stages.py (sap_tools/tolerances.py):

* the two collision pipelines, each reading its parameters: the contact set and every field as
  tests/test_gpu_collision.py compares them, and each contact's margins and combined materials
  (μ, k, k₀, k₁, τ_d, d) equal to sap_common.collision_rules applied to that world's values;
* both solvers stepping from sap_ref's contacts: A, v*, contact J, w, R, v̂ (and the Hunt–Crossley
  data), the limit, holonomic-constraint and drive rows, then γ (contacts, limits, holonomic
  constraints, drives), ℓ, ∇ℓ and H at sap_ref's v₁ of that world, and the full step
  (docs/testing.md § Comparing solves).

Every world starts from the same state, so worlds differ only by their parameters. Where two
worlds' values of a group differ, the quantities that depend on them by construction must differ
between those worlds on both backends by more than the bar they are compared with (A with the
masses; v* with gravity, at all where the free-motion solve is float32 or PCR; each contact's μ,
k, τ_d, d and margins; unclamped drive gains; the v̂ of a limit whose bound moved): a device that
read the model's values, or another world's, fails.
"""

import os

import numpy as np
import pytest
import warp as wp
from conftest import cooperative_lanes
from hypothesis import event, given, settings
from hypothesis import strategies as st
from strategies import random_constrained_models
from test_gpu_collision import assert_same_contacts
from test_gpu_stages import LINEAR_SOLVERS, _check_holonomic_rows, _close, _close_rel, _grad_roundoff
from variants import preset_line_search_params

import sap_gpu
from sap_common.collision_rules import combine_hc_dissipation, combine_materials
from sap_common.config import NEWTON_PATHS
from sap_common.conventions import joint_qd_public_to_sap
from sap_common.kinematics import body_state
from sap_common.model import JointType
from sap_common.parameters import PARAMETER_FIELDS
from sap_common.rows import RowKind
from sap_ref import WorldParameters as RefParameters
from sap_ref.collision import CollisionPipeline as RefPipeline
from sap_ref.contact_solve import evaluate, hessian, hessian_diagonal, stopping_criterion
from sap_ref.parameters import world_slice
from sap_ref.solver import SolverSAP as RefSolver
from sap_tools import randomize
from sap_tools.compare_backends import with_device_setup
from sap_tools.tolerances import GEOMETRY_TOL, RESIDUAL_GAP_FACTOR, TOL, fp32_hessian_tol

WORLDS = 3
CAPACITY = 16  # contact slots per world, as tests/test_gpu_stages.py
DT = 1e-3
APPROXIMATIONS = ("sap", "lagged", "similar")

# The fields drawn together: a group is drawn in the worlds of its Hypothesis mask.
GROUPS = {
    "mass": ("body_mass", "body_inertia"),
    "com": ("body_com",),
    "armature": ("joint_armature",),
    "damping": ("joint_damping",),
    "drive": ("joint_target_ke", "joint_target_kd"),
    "effort": ("joint_effort_limit",),
    "bounds": ("joint_limit_lower", "joint_limit_upper"),
    "limit_gains": ("joint_limit_ke", "joint_limit_kd"),
    "mu": ("shape_material_mu",),
    "ke": ("shape_material_ke",),
    "tau": ("shape_material_tau",),
    "hcd": ("shape_material_hcd",),
    "margin": ("shape_margin",),
    "gravity": ("gravity",),
}
assert sorted(f for fields in GROUPS.values() for f in fields) == sorted(PARAMETER_FIELDS)

# Factors of the fields sap_tools.randomize.draw scales (a zero stays zero: which drives and limits
# exist is the model's), and the friction range it draws outright.
SCALED = {"body_mass": (0.5, 2.0), "joint_armature": (0.5, 2.0), "joint_damping": (0.5, 2.0),
          "joint_target_ke": (0.5, 2.0), "joint_target_kd": (0.5, 2.0), "joint_limit_ke": (0.5, 2.0),
          "joint_limit_kd": (0.5, 2.0), "shape_material_mu": (0.1, 1.2)}


def _draw_values(model, seed: int, masks: dict) -> dict:
    """(num_worlds, *shape) values of every field: the model's, and a draw in the worlds of each
    group's mask. Within the model's rules: masses with their inertias (one factor, and another
    0.8–1.25 on the inertia alone); armature and damping scaled, plus a little on every DOF;
    drive and limit gains scaled (zeros kept); a finite effort limit scaled; COMs moved ≤ 2 cm;
    finite bounds moved ≤ 5 cm or rad (a distance joint's lower bound 0 kept, ordered anyway);
    friction, dissipation time scale and Hunt–Crossley dissipation drawn on every shape; a finite
    or unset stiffness drawn (a rigid one kept); margins 1–10 mm above the model's; gravity scaled
    by 0.5–1.5 and tilted."""
    rng = np.random.default_rng(seed)
    W, B, nv, S = model.num_worlds, model.body_count, model.joint_dof_count, model.shape_count
    drawn = randomize.draw(model, rng, SCALED)
    drawn["body_inertia"] = drawn["body_inertia"] * rng.uniform(0.8, 1.25, (W, B))[:, :, None, None]
    drawn["body_com"] = model.body_com + rng.uniform(-0.02, 0.02, (W, B, 3))
    drawn["joint_armature"] = drawn["joint_armature"] + rng.uniform(0.0, 0.02, (W, nv))
    drawn["joint_damping"] = drawn["joint_damping"] + rng.uniform(0.0, 0.5, (W, nv))
    effort = model.joint_effort_limit
    drawn["joint_effort_limit"] = np.where(np.isinf(effort), effort, effort * rng.uniform(0.5, 2.0, (W, nv)))
    lo, hi = model.joint_limit_lower, model.joint_limit_upper
    distance = np.zeros(nv, bool)
    for j in range(model.joint_count):
        if int(model.joint_type[j]) == int(JointType.DISTANCE):
            distance[int(model.joint_qd_start[j])] = True
    shift = rng.uniform(-0.05, 0.05, (2, W, nv))
    new_lo = np.where(np.isfinite(lo) & ~distance, lo + shift[0], lo)
    new_hi = np.where(np.isfinite(hi), hi + shift[1], hi)
    drawn["joint_limit_lower"], drawn["joint_limit_upper"] = new_lo, np.maximum(new_hi, new_lo)
    ke = model.shape_material_ke
    unset_ke = 10.0 ** rng.uniform(4.0, 6.0, (W, S))
    drawn["shape_material_ke"] = np.where(np.isinf(ke), ke, np.where(np.isnan(ke), unset_ke,
                                                                     ke * rng.uniform(0.5, 2.0, (W, S))))
    drawn["shape_material_tau"] = rng.uniform(0.0, 0.03, (W, S))
    drawn["shape_material_hcd"] = rng.uniform(0.0, 50.0, (W, S))
    drawn["shape_margin"] = model.shape_margin + rng.uniform(1e-3, 1e-2, (W, S))
    drawn["gravity"] = model.gravity * rng.uniform(0.5, 1.5, (W, 1)) + rng.uniform(-2.0, 2.0, (W, 3)) * [1, 1, 0]
    out = {}
    for group, fields in GROUPS.items():
        mask = np.asarray(masks[group], bool)
        for name in fields:
            base = np.asarray(getattr(model, name), dtype=np.float64)
            out[name] = np.broadcast_to(base, (W, *base.shape)).copy()
            out[name][mask] = drawn[name][mask]
    return out


@st.composite
def parameter_cases(draw):
    """``(case, approximation, values)``: a random constrained model of WORLDS worlds with its state,
    the contact approximation (Hunt–Crossley materials under lagged and similar) and per-world
    values of every field (:func:`_draw_values`)."""
    approximation = draw(st.sampled_from(APPROXIMATIONS))
    case = draw(random_constrained_models(num_worlds=WORLDS, hunt_crossley=approximation != "sap",
                                          holonomic=draw(st.booleans())))
    masks = {group: draw(st.lists(st.booleans(), min_size=WORLDS, max_size=WORLDS))
             for group in GROUPS}
    seed = draw(st.integers(0, 2**32 - 1))
    return case, approximation, _draw_values(case[0], seed, masks)


def _setup(case, values, device, newton_path, **config):
    """Both backends' parameters (the same values), solvers and pipelines; the state (every world at
    the drawn coordinates, body poses and twists from its own model: a twist is the COM's) and
    the control."""
    model, q, qd = case
    ref_params, gpu_params = RefParameters(model), sap_gpu.WorldParameters(model, device=device)
    for name, v in values.items():
        ref_params.set(name, v)
        gpu_params.set(name, v)
    state = model.state()
    for w in range(model.num_worlds):
        state.joint_q[w], state.joint_qd[w] = q, qd
        body_q, body_qd = body_state(ref_params.world_model(w), q[None], qd[None], "public")
        state.body_q[w], state.body_qd[w] = body_q[0], body_qd[0]
    ref = RefSolver(model, max_rigid_contact=CAPACITY, parameters=ref_params, **config)
    gpu = sap_gpu.SolverSAP(model, max_rigid_contact=CAPACITY, device=device, newton_path=newton_path,
                            parameters=gpu_params, **config)
    ref_pipe = RefPipeline(model, CAPACITY, ref.config, parameters=ref_params)
    gpu_pipe = sap_gpu.CollisionPipeline(model, CAPACITY, gpu.config, device=device, parameters=gpu_params)
    control = model.control()
    control.joint_target_pos[:] = np.linspace(-0.3, 0.3, model.joint_dof_count)
    # Large enough that some worlds' effort limits clamp it (explicitly, or inside a drive).
    control.joint_act[:] = np.linspace(3.0, -3.0, model.joint_dof_count)
    return model, ref_params, state, control, ref, gpu, ref_pipe, gpu_pipe


# SAP_PARAMETER_STAGE_EXAMPLES (60) examples per run, a third of them per (preset, line search)
# pair (tests/variants.py): ~10 s with Warp's kernel cache warm on a 2-vCPU machine;
# SAP_PARAMETER_STAGE_EXAMPLES=600 shakes it harder.
EXAMPLES = int(os.environ.get("SAP_PARAMETER_STAGE_EXAMPLES", "60"))
PAIRS_PER_RUN = 3


@pytest.mark.parametrize("preset, line_search", preset_line_search_params())
@settings(max_examples=max(1, EXAMPLES // PAIRS_PER_RUN))
@given(drawn=parameter_cases(), linear_solver=st.sampled_from(LINEAR_SOLVERS),
       newton_path=st.sampled_from(NEWTON_PATHS))
def test_stages_match_sap_ref_with_per_world_parameters(device, drawn, preset, line_search, linear_solver,
                                                        newton_path):
    """Collision, then every stage of a step, world by world; then that worlds with different
    values differ where those values must show."""
    case, approximation, values = drawn
    model, ref_params, state, control, ref, gpu, ref_pipe, gpu_pipe = _setup(
        case, values, device, newton_path, contact_preset_variant=preset, line_search_variant=line_search,
        contact_linear_solver=linear_solver, discrete_contact_approximation=approximation)
    W, cfg = model.num_worlds, ref.config
    # Collision: the device's pipeline against sap_ref's, each with its parameters.
    contacts = ref_pipe.contacts()
    ref_pipe.collide(state, contacts)
    dev_contacts = gpu_pipe.contacts()
    gpu_pipe.collide(sap_gpu.to_device(state, device), dev_contacts)
    dev_contacts = sap_gpu.to_host(dev_contacts)
    for w in range(W):
        assert_same_contacts(world_slice(contacts, w), world_slice(dev_contacts, w), f"world {w}:")
        _check_contact_materials(contacts, w, ref_params.world_model(w), cfg)
    # One step of both solvers from sap_ref's contacts.
    out_gpu = sap_gpu.to_device(state, device)
    with cooperative_lanes(newton_path == "fused"):
        gpu.step(sap_gpu.to_device(state, device), out_gpu, sap_gpu.to_device(control, device),
                 sap_gpu.to_device(contacts, device), DT)
    # Read before evaluate_at below reuses the Newton buffers: the last cost-criterion inputs, v₁.
    last = {k: getattr(gpu.work.N, k).numpy().copy() for k in ("ell", "ell_prev", "alpha_prev")}
    v1_gpu = gpu.work.v1.numpy().copy()
    status = gpu.diagnostics()["status"]
    ref.step(state, state.copy(), control, contacts, DT)
    V = np.stack([ref.last_results[w].v1 for w in range(W)])
    with cooperative_lanes(newton_path == "fused"):
        ev_gpu = gpu.evaluate_at(V)
    assert np.array_equal(gpu.work.v1.numpy(), v1_gpu), "evaluate_at changed the step's v1"
    seen = []
    for w in range(W):
        seen.append(_check_world(w, model, ref_params.world_model(w), world_slice(state, w), world_slice(contacts, w),
                                 ref, gpu, ev_gpu, V[w], v1_gpu[w], status[w],
                                 {k: float(a[w]) for k, a in last.items()}))
    told_apart = _check_worlds_differ(model, values, cfg, contacts, dev_contacts, ref, seen)
    # What the examples reach (pytest --hypothesis-show-statistics).
    event(f"approximation {approximation}")
    event(f"worlds with contacts: {int(np.sum(contacts.count > 0))} of {W}")
    event("contact counts differ between worlds" if len(set(contacts.count.tolist())) > 1 else "same contact counts")
    for what in ("limit rows", "drive rows", "a drive at its effort limit", "holonomic rows"):
        if any(s["reached"][what] for s in seen):
            event(f"some world has {what}")
    for what in sorted(told_apart):
        event(f"worlds told apart by {what}")


class _World:
    """World ``w`` of a device object whose arrays have a leading world axis: each ``wp.array``
    attribute's ``numpy()`` is its world-``w`` row as a one-world array (``[w:w + 1]``), every other
    attribute is passed through (objects holding arrays wrapped alike). What the world-0 helpers of
    tests/test_gpu_stages.py and sap_tools.compare_backends read."""

    def __init__(self, obj, w: int):
        self._obj, self._w = obj, w

    def __getattr__(self, name):
        x = getattr(self._obj, name)
        if isinstance(x, wp.array):
            return _WorldArray(x, self._w)
        if isinstance(x, (int, float, str, bool, np.ndarray, np.generic, tuple, list, dict, type(None))) or callable(x):
            return x
        return _World(x, self._w)


class _WorldArray:
    def __init__(self, a, w: int):
        self._a, self._w = a, w

    def numpy(self):
        return self._a.numpy()[self._w:self._w + 1]


def _check_contact_materials(contacts, w, world_model, cfg):
    """Each contact of world ``w`` carries that world's margins and its pair's materials combined
    from that world's shape values (sap_common.collision_rules), exactly."""
    for k in range(int(contacts.count[w])):
        a, b = int(contacts.shape0[w, k]), int(contacts.shape1[w, k])
        mu, ke, ke0, ke1, tau_d = combine_materials(world_model, a, b, cfg)
        got = [contacts.mu[w, k], contacts.ke[w, k], contacts.ke0[w, k], contacts.ke1[w, k], contacts.tau_d[w, k],
               contacts.hcd[w, k], contacts.margin0[w, k], contacts.margin1[w, k]]
        want = [mu, ke, ke0, ke1, tau_d, combine_hc_dissipation(world_model, a, b, cfg),
                world_model.shape_margin[a], world_model.shape_margin[b]]
        assert got == want, f"world {w} contact {k} (shapes {a}, {b}): mu, ke, ke0, ke1, tau_d, hcd, margins " \
                            f"{got} vs {want}"


def _check_world(w, model, model_w, state, contacts, ref, gpu, ev_all, v, v_gpu, status, last):
    """tests/test_gpu_stages.py's stage checks for world ``w`` (``state``, ``contacts``: its one-world
    copies; ``model_w``: its one-world model, whose values sap_ref used; ``ev_all``: the device's
    evaluation at every world's sap_ref v₁, ``v`` world w's; ``v_gpu``, ``status``, ``last``: the
    device's v₁, status and last cost-criterion inputs of world w). Returns the device's and
    sap_ref's values of the quantities :func:`_check_worlds_differ` compares across worlds."""
    view = _World(gpu, w)
    r, cfg, nv = ref.last_results[w], ref.config, model.joint_dof_count
    where = f"world {w}: "
    A_gpu = gpu.work.A.numpy()[w, :nv, :nv]
    # Stage 1: A and v*.
    _close(A_gpu, r.free_motion.A, TOL["fp64"], where + "A")
    v_star = gpu.work.v_star.numpy()[w]
    dv_ref = r.free_motion.v_star - joint_qd_public_to_sap(model_w, state.joint_q[0], state.joint_qd[0])
    if cfg.matrixfree_representation:
        A = r.free_motion.A
        eps = np.finfo(cfg.dtype("free_motion_solve_precision")).eps
        reach = cfg.pcr_rtol + RESIDUAL_GAP_FACTOR * cfg.pcr_max_iterations * eps * np.linalg.cond(A)
        bound = 2 * reach * np.linalg.norm(A @ dv_ref) / np.linalg.eigvalsh(A)[0]
        err = np.linalg.norm(v_star - r.free_motion.v_star)
        assert err <= bound * (1 + 1e-6) + TOL["fp64"] * max(1.0, np.abs(dv_ref).max()), \
            f"{where}v_star (pcr) {err:.3e}"
    elif cfg.free_motion_solve_precision == "fp64":
        _close(v_star, r.free_motion.v_star, TOL["fp64"], where + "v_star")
    else:
        bound = TOL["fp32_solve_factor"] * np.linalg.cond(r.free_motion.A) * np.finfo(np.float32).eps
        _close(v_star, r.free_motion.v_star, bound * max(1.0, np.abs(dv_ref).max()), where + "v_star (fp32)")
    # Stage 2: contact rows, weights, R, v̂.
    C = int(contacts.count[0])
    jtol = TOL["fp64"] if cfg.use_f64_boundary_pose else TOL["fp32_pose"]
    if C:
        _close(gpu.work.contact_J.numpy()[w, :3 * C], r.contacts.J.reshape(3 * C, nv), jtol, where + "J")
        wtol = TOL["fp64"] if cfg.sap_contact_weight_precision == "fp64" else TOL["fp32_weights"]
        _close_rel(gpu.work.contact_w.numpy()[w, :C], r.w, wtol, where + "w")
        _close_rel(gpu.work.contact_R.numpy()[w, :C], r.R, wtol, where + "R")
        _close(gpu.work.contact_v_hat.numpy()[w, :C], r.v_hat[:, 2], wtol, where + "v_hat")
    hc = r.hunt_crossley
    if C and hc is not None:  # (k, d, fₑ₀, n₀, ε_s) and vₙ₀ = (J v₀)ₙ, in the weight precision
        data = gpu.work.contact_hc.numpy()[w, :C]
        vn0 = gpu.work.contact_vn0.numpy()[w, :C]
        np.testing.assert_array_equal(data[:, 0], hc.k, err_msg=where + "hc k")
        np.testing.assert_array_equal(data[:, 1], hc.d, err_msg=where + "hc d")
        _close_rel(data[:, 2], hc.fe0, wtol, where + "fe0")
        J_v0 = np.abs(r.contacts.J[:, 2, :]) @ np.abs(joint_qd_public_to_sap(model_w, state.joint_q[0],
                                                                            state.joint_qd[0]))
        assert np.all(np.abs(vn0 - hc.vn0) <= max(jtol, wtol) * np.maximum(J_v0, 1.0)), where + "vn0"
        # n₀ = (h fₑ₀)₊(1 − d vₙ₀)₊: fₑ₀'s and vₙ₀'s differences carried through. |fₑ₀| where
        # tests/test_gpu_stages.py has fₑ₀: a contact found inside the margins (φ₀ > 0, so
        # fₑ₀ = −kφ₀ < 0 and n₀ = 0 on both) would make that bound negative.
        n_scale = DT * np.abs(hc.fe0) * (1.0 + hc.d * np.abs(hc.vn0))
        dn0 = DT * np.abs(hc.fe0) * hc.d * np.abs(vn0 - hc.vn0)
        n0_bound = wtol * n_scale + dn0 * (1 + wtol)
        assert np.all(np.abs(data[:, 3] - hc.n0) <= n0_bound), where + "n0"
        eps_bound = wtol * hc.eps + r.contacts.mu * cfg.contact_sigma * r.w * n0_bound * (1 + wtol)
        assert np.all(np.abs(data[:, 4] - hc.eps) <= eps_bound), where + "eps"
    # Limit and drive rows: the same active set, J, R and v̂.
    L = gpu.work.rows.limit_count  # the limit rows are the first scalar rows
    active = np.zeros(L, bool)
    limit_R = limit_v_hat = np.zeros(0)
    if L:
        active = gpu.work.row_active.numpy()[w, :L].astype(bool)
        assert active.sum() == len(r.limits.R), where + "limit rows taken"
        _close(gpu.work.row_J.numpy()[w, :L][active], r.limits.J, jtol, where + "limit J")
        limit_R = gpu.work.row_R.numpy()[w, :L][active]
        limit_v_hat = gpu.work.row_v_hat.numpy()[w, :L][active]
        if cfg.use_f64_boundary_pose:
            _close_rel(limit_R, r.limits.R, TOL["fp64"], where + "limit R")
            _close(limit_v_hat, r.limits.v_hat, TOL["fp64"], where + "limit v_hat")
        else:  # tests/test_gpu_stages.py says why: a distance limit's g₀ from float32 poses
            first = model.joint_qd_start[r.limits.joint]
            distance = model.joint_type[r.limits.joint] == JointType.DISTANCE
            g0_tol = 2 * np.finfo(np.float32).eps * max(1.0, np.abs(state.body_q[0, :, :3]).max())
            tau = model_w.joint_limit_kd[first] / model_w.joint_limit_ke[first]
            vtol = np.where(distance, g0_tol / (DT + tau),
                            TOL["fp64"] * max(1.0, np.abs(r.limits.v_hat).max(initial=0.0)))
            assert np.all(np.abs(limit_v_hat - r.limits.v_hat) <= vtol), where + "limit v_hat (fp32 pose)"
            rtol = np.where(distance, 2 * TOL["fp32_pose"], TOL["fp64"])
            assert np.all(np.abs(limit_R - r.limits.R) <= rtol * np.abs(r.limits.R)), where + "limit R (fp32 pose)"
    if model.constraint_count:
        hol_J, hol_R, hol_v_hat = _check_holonomic_rows(view, r, model_w, state, cfg, jtol)
    D = gpu.work.rows.drive_count
    Kp = gpu.work.drive_Kp.numpy()[w, :D]
    Kd = gpu.work.drive_Kd.numpy()[w, :D]
    if D:
        _close_rel(Kp, r.drives.Kp, TOL["fp64"], where + "drive Kp")
        _close_rel(Kd, r.drives.Kd, TOL["fp64"], where + "drive Kd")
    # Stage 3 at sap_ref's v₁ of this world, sap_ref's objective given the device's stage-1–2 results.
    dofs = r.problem.dofs
    p = with_device_setup(r.problem, view, C, (active, limit_R, limit_v_hat) if L and active.any() else None,
                          (hol_J, hol_R, hol_v_hat) if model.constraint_count else None)
    ev_gpu = {k: (None if a is None else a[w]) for k, a in ev_all.items()}
    ev_ref = evaluate(p, v[dofs])
    terms = max(np.abs(ev_ref.jt_gamma).max(initial=0.0), np.abs(ev_ref.grad + ev_ref.jt_gamma).max(initial=0.0))
    err = np.abs(ev_gpu["grad"][dofs] - ev_ref.grad)
    allowed = TOL["fp64"] * max(1.0, terms) + _grad_roundoff(p, ev_ref, v[dofs])
    assert np.all(err <= allowed), \
        f"{where}grad: |Δ| = {err.max():.3e}, allowed {allowed[np.argmax(err - allowed)]:.3e}"
    rows = 3 * C + len(p.rows)
    htol = TOL["fp64"] if cfg.contact_linear_solve_precision == "fp64" else fp32_hessian_tol(rows)
    if cfg.contact_linear_solver == "cholesky":
        _close(ev_gpu["H"][np.ix_(dofs, dofs)], hessian(p, ev_ref), htol, where + "H")
    else:  # PCR never forms H; its preconditioner's diagonal is compared instead
        assert ev_gpu["H"] is None
        dtol = TOL["fp64"] if cfg.contact_linear_solve_precision == "fp64" else htol
        _close(ev_gpu["H_diag"][dofs], hessian_diagonal(p, ev_ref), dtol, where + "diag H")
    assert ev_gpu["ell"] == pytest.approx(ev_ref.ell, rel=TOL["fp64"], abs=TOL["ell_abs"]), where + "ell"
    if C:
        _close(ev_gpu["contact_gamma"][:C], ev_ref.contact_gamma, TOL["fp64"], where + "contact gamma")
    if model.constraint_count:
        _close(ev_gpu["holonomic_gamma"], ev_ref.row_gamma[p.rows.rows(RowKind.HOLONOMIC)], TOL["fp64"],
               where + "holonomic gamma")
    # Beyond tests/test_gpu_stages.py: the limit and drive rows' γ, where the per-world bounds,
    # gains and effort limits act (a drive's γ is clamped to ±h e).
    if L and active.any():
        _close(ev_gpu["limit_gamma"][:L][active], ev_ref.row_gamma[p.rows.rows(RowKind.LIMIT)], TOL["fp64"],
               where + "limit gamma")
    if D:
        _close(ev_gpu["drive_gamma"][:D], ev_ref.row_gamma[p.rows.rows(RowKind.DRIVE)], TOL["fp64"],
               where + "drive gamma")
    # Full step (tests/test_gpu_stages.py says why each bound).
    if status == 1 and ref.last_status[w] == 1:
        ev = evaluate(p, v_gpu[dofs])
        ok, res, scale = stopping_criterion(p, ev, cfg)
        same_cost = abs(ev.ell - ev_ref.ell) <= 10 * (cfg.cost_abs_tol + cfg.cost_rel_tol * abs(ev.ell)) \
            + 1e-9 * max(1.0, abs(ev.ell))
        if not (ok or same_cost):
            assert not stopping_criterion(p, ev_ref, cfg)[0], \
                where + "sap_ref met optimality; sap_gpu stopped elsewhere"
            assert last["ell"] == pytest.approx(ev.ell, rel=TOL["fp64"], abs=TOL["ell_abs"]), where + "ℓ at v1"
            assert last["alpha_prev"] > 0.5 and abs(last["ell_prev"] - last["ell"]) < cfg.cost_abs_tol \
                + cfg.cost_rel_tol * 0.5 * (abs(last["ell"]) + abs(last["ell_prev"])), \
                f"{where}no cost-criterion stop: {last}"
        rest = np.setdiff1d(np.arange(nv), dofs)  # non-participating DOFs keep v = v*
        _close(v_gpu[rest], v_star[rest], 0.0, where + "v1 = v* off the participating trees")
        A = np.asarray(p.A, np.float64)
        a_inv_norm = lambda g: float(np.sqrt(max(g @ np.linalg.solve(A, g), 0.0)))  # noqa: E731
        dv = (v_gpu - v)[dofs]
        bound = a_inv_norm(np.asarray(ev.grad, np.float64)) + a_inv_norm(np.asarray(ev_ref.grad, np.float64))
        v_scale = float(np.sqrt(v[dofs] @ A @ v[dofs]))
        assert np.sqrt(dv @ A @ dv) <= bound * (1 + 1e-9) + TOL["fp64"] * max(1.0, v_scale), where + "v1 differs"
    drive_gamma = ev_ref.row_gamma[p.rows.rows(RowKind.DRIVE)]
    at_effort = bool(D) and bool(np.any(np.abs(drive_gamma) >= DT * r.drives.effort * (1 - 1e-12)))
    reached = {"limit rows": bool(L and active.any()), "drive rows": bool(D),
               "holonomic rows": bool(model.constraint_count), "a drive at its effort limit": at_effort}
    return dict(A=(A_gpu, r.free_motion.A), v_star=(v_star, r.free_motion.v_star), Kp=(Kp, r.drives.Kp),
                Kd=(Kd, r.drives.Kd), limit_v_hat=(limit_v_hat, r.limits.v_hat if L else np.zeros(0)),
                reached=reached)


def _differs(a, b, bar) -> bool:
    return float(np.abs(np.asarray(a, float) - np.asarray(b, float)).max(initial=0.0)) > bar


def _check_worlds_differ(model, values, cfg, contacts, dev_contacts, ref, seen):
    """Where two worlds' values of a group differ, what depends on them by construction differs
    between the two worlds, on both backends, by more than the bar the backends are compared with
    (the module docstring lists what)."""
    W, fired = model.num_worlds, set()
    differ = lambda name, w, u: not np.array_equal(values[name][w], values[name][u], equal_nan=True)  # noqa: E731
    for w in range(W):
        for u in range(w):
            pair = f"worlds {u} and {w}: "
            for backend in (0, 1):  # 0: the device's values, 1: sap_ref's
                who = ("sap_gpu " if backend == 0 else "sap_ref ") + pair
                a, b = seen[w], seen[u]
                if differ("body_mass", w, u):  # every body has mass, one at least moves with a DOF
                    fired.add("A")
                    scale = np.abs(b["A"][backend]).max()
                    assert _differs(a["A"][backend], b["A"][backend], TOL["fp64"] * max(1.0, scale)), \
                        who + "A ignores the masses"
                if differ("gravity", w, u):
                    fired.add("v*")
                    assert not np.array_equal(a["v_star"][backend], b["v_star"][backend]), who + "v* ignores gravity"
                    if cfg.free_motion_solve_precision == "fp64" and not cfg.matrixfree_representation:
                        scale = np.abs(b["v_star"][1]).max(initial=0.0)
                        assert _differs(a["v_star"][backend], b["v_star"][backend], TOL["fp64"] * max(1.0, scale)), \
                            who + "v* ignores gravity"
                _check_drives_differ(model, values, ref, a, b, w, u, backend, who, fired)
                _check_limits_differ(model, values, ref, a, b, w, u, backend, who, fired)
            for c, backend in ((contacts, "sap_ref "), (dev_contacts, "sap_gpu ")):
                _check_contacts_differ(c, values, w, u, backend + pair, fired)
    return fired


def _check_drives_differ(model, values, ref, a, b, w, u, backend, who, fired):
    """A drive whose gains differ and that neither world's near-rigid clamp touched (sap_ref's
    effective gains are the model's) has different Kp or Kd."""
    rw, ru = ref.last_results[w].drives, ref.last_results[u].drives
    if not len(rw.Kp):
        return
    for i, dof in enumerate(rw.dof):
        gains = [(values["joint_target_ke"][x][dof], values["joint_target_kd"][x][dof]) for x in (w, u)]
        unclamped = all(r.Kp[i] == g[0] and r.Kd[i] == g[1] for r, g in zip((rw, ru), gains))
        if unclamped and gains[0] != gains[1]:
            fired.add("drive gains")
            assert _differs(a["Kp"][backend][i], b["Kp"][backend][i], TOL["fp64"] * abs(b["Kp"][1][i])) or \
                _differs(a["Kd"][backend][i], b["Kd"][backend][i], TOL["fp64"] * abs(b["Kd"][1][i])), \
                who + f"drive of DOF {dof} ignores its gains"


def _check_limits_differ(model, values, ref, a, b, w, u, backend, who, fired):
    """A scalar DOF's limit row taken in both worlds, whose bound differs: v̂ = −g₀/(h + τ) with
    g₀ the distance to the bound, so v̂ differs."""
    rw, ru = ref.last_results[w].limits, ref.last_results[u].limits
    rows_u = {(int(j), int(s)): k for k, (j, s) in enumerate(zip(ru.joint, ru.side))}
    for k, (j, s) in enumerate(zip(rw.joint, rw.side)):
        if (int(j), int(s)) not in rows_u or int(model.joint_type[j]) == int(JointType.DISTANCE):
            continue
        m = rows_u[(int(j), int(s))]
        bound = "joint_limit_lower" if s < 0 else "joint_limit_upper"
        dof = int(model.joint_qd_start[j])
        if int(model.joint_qd_start[j + 1]) - dof != 1:
            continue  # a D6 of several DOFs: sap_ref's record does not say which DOF a row limits
        if values[bound][w][dof] != values[bound][u][dof]:
            fired.add("limit v̂")
            scale = max(1.0, abs(b["limit_v_hat"][1][m]))
            assert _differs(a["limit_v_hat"][backend][k], b["limit_v_hat"][backend][m], TOL["fp64"] * scale), \
                who + f"limit of joint {j} ignores its bound"


def _check_contacts_differ(c, values, w, u, who, fired):
    """A shape pair in contact in both worlds: its first contact's μ, k, τ_d, d and margins differ
    where the worlds' values of that material differ (every shape's is drawn; a rigid shape's
    stiffness is kept, so the pair's k is the other shape's)."""
    def first(x):
        out = {}
        for k in range(int(c.count[x])):
            out.setdefault((int(c.shape0[x, k]), int(c.shape1[x, k])), k)
        return out

    fw, fu = first(w), first(u)
    fields = {"shape_material_mu": ("mu",), "shape_material_ke": ("ke",), "shape_material_tau": ("tau_d",),
              "shape_material_hcd": ("hcd",), "shape_margin": ("margin0", "margin1")}
    for pair in sorted(set(fw) & set(fu)):
        for name, record in fields.items():
            shapes = [s for s in pair if not (name == "shape_material_ke" and np.isinf(values[name][w][s]))]
            if shapes and all(not np.array_equal(values[name][w][s], values[name][u][s], equal_nan=True)
                              for s in shapes):
                fired.add(f"contact {name}")
                for f in record:
                    assert _differs(getattr(c, f)[w, fw[pair]], getattr(c, f)[u, fu[pair]], GEOMETRY_TOL), \
                        who + f"{f} of shapes {pair} ignores {name}"

"""SolverSAP with contact: Drake's contact anchors and the spec's physics checklist.

Every checklist test runs over the three line searches × the three presets; the box-sticks test
over the three (preset, line search) pairs of the default run, and the other six under ``-m slow``
(tests/variants.py).
"""

import json

import numpy as np
import pytest
from conftest import ANCHOR_LENGTHS, DATA, anchor_steps
from variants import LINE_SEARCHES, PRESETS, preset_line_search_params

from sap_common import scenes
from sap_common.builder import ModelBuilder, solid_box_inertia
from sap_common.config import SapConfig
from sap_common.io import body_pose_error, load_json, load_recording, recorded_body_indices
from sap_common.state import StepStatus
from sap_ref.collision import CollisionPipeline
from sap_ref.contact_solve import hessian
from sap_ref.solver import SolverSAP

CONTACT_ANCHORS = ("sphere_drop", "sphere_slide", "box_corners_slide", "cylinder_roll", "mesh_rock")
# The required bounds for Drake's contact anchors. Observed with the drake preset: ≤ 1e-15 for the
# sphere scenes and cylinder_roll (the same contact point as Drake's, to rounding); mesh_rock 1.0e-5 m
# and 1.9e-4 rad after 0.8 s: Drake computes the sphere–convex pair with FCL's MPR, whose contact
# point lies 9/22 of the depth (4e-5 to 8e-5 m) from the geometric one, toward the sphere's centre
# (docs/validation.md § FCL's MPR pairs).
CONTACT_POSITION_TOL = 1e-4
CONTACT_ROTATION_TOL = 1e-3


def run_contact_anchor(name, length=None):
    """Step a Drake contact anchor through sap_ref's collision pipeline, its first
    ``anchor_steps(scene, length)`` steps (``None``: all); return (max position error, max
    rotation error, final state)."""
    path = DATA / "drake" / f"{name}.json"
    scene = load_json(path)
    rec = load_recording(scene)
    idx = recorded_body_indices(scene, json.loads(path.read_text())["recording"]["bodies"])
    solver = SolverSAP(scene.sap_model, max_rigid_contact=scene.max_rigid_contact, **scene.solver_kwargs)
    pipeline = CollisionPipeline(scene.sap_model, scene.max_rigid_contact, solver.config)
    contacts = pipeline.contacts()
    state = scene.state.copy()
    worst_p = worst_r = 0.0
    counts = []
    steps = anchor_steps(scene, length)
    for n in range(1, steps + 1):
        pipeline.collide(state, contacts)
        counts.append(int(contacts.count[0]))
        solver.step(state, state, scene.control, contacts, scene.dt)
        assert solver.last_status[0] == StepStatus.CONVERGED
        dp, dr = body_pose_error(state.body_q[0, idx], rec["body_pose_W"][n])
        worst_p, worst_r = max(worst_p, dp), max(worst_r, dr)
    # Same contact counts as Drake's own collision query, step by step.
    np.testing.assert_array_equal(counts, rec["contact_count"][1:steps + 1])
    return worst_p, worst_r, state


@pytest.mark.parametrize("length", ANCHOR_LENGTHS)
@pytest.mark.parametrize("name", CONTACT_ANCHORS)
def test_drake_preset_reproduces_contact_anchors(name, length):
    worst_p, worst_r, _ = run_contact_anchor(name, length)
    assert worst_p <= CONTACT_POSITION_TOL and worst_r <= CONTACT_ROTATION_TOL


def _box_on_plane(mu=0.5, push=0.0, num_worlds=1):
    """A 1 kg cube resting on the ground, pushed horizontally by ``push`` newtons."""
    b = ModelBuilder()
    h = 0.05
    box = b.add_body(1.0, inertia=solid_box_inertia(1.0, h, h, h))
    b.add_joint_free(-1, box, q0=(0, 0, h - 1e-4, 0, 0, 0, 1))
    b.add_ground_plane(mu=mu, ke=1e6, tau=0.01)
    b.add_shape_box(box, hx=h, hy=h, hz=h, mu=mu, ke=1e6, tau=0.01)
    model = b.replicate(num_worlds).finalize()
    control = model.control()
    control.joint_f[:, 0] = push  # public order: [f, τ_C] on the free joint
    return model, control


def _run(model, control, cfg_kwargs, steps, dt=1e-3):
    solver = SolverSAP(model, max_rigid_contact=8, **cfg_kwargs)
    pipeline = CollisionPipeline(model, 8, solver.config)
    contacts = pipeline.contacts()
    state = model.state()
    for _ in range(steps):
        pipeline.collide(state, contacts)
        solver.step(state, state, control, contacts, dt)
        assert solver.last_status[0] & StepStatus.CONVERGED
    return solver, state, contacts


@pytest.mark.parametrize("preset, ls", preset_line_search_params())  # tests/variants.py: 3 pairs, 6 under -m slow
def test_box_sticks_below_mu_m_g_and_slides_above(ls, preset):
    g, mu = 9.81, 0.5
    kw = dict(contact_preset_variant=preset, line_search_variant=ls)
    model, stick = _box_on_plane(mu, push=0.8 * mu * g)
    _, s_stick, _ = _run(model, stick, kw, 300)
    _, slide = _box_on_plane(mu, push=1.2 * mu * g)
    _, s_slide, _ = _run(model, slide, kw, 300)
    # Sticking: regularized friction creeps by O(σ) only; sliding: a = (F − μmg)/m = 0.2 μ g.
    assert abs(s_stick.joint_qd[0, 0]) < 1e-3
    assert s_slide.joint_qd[0, 0] == pytest.approx(0.2 * mu * g * 0.3, rel=0.1)


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("ls", LINE_SEARCHES)
def test_solution_checklist(ls, preset):
    """Momentum balance at the solution, H SPD, cost monotone, exact guess → 0 iterations."""
    scene = scenes.get("box_slide")
    kw = dict(contact_preset_variant=preset, line_search_variant=ls)
    solver = SolverSAP(scene.sap_model, max_rigid_contact=scene.max_rigid_contact, **kw)
    pipeline = CollisionPipeline(scene.sap_model, scene.max_rigid_contact, solver.config)
    contacts = pipeline.contacts()
    state = scene.state.copy()
    for n in range(40):
        pipeline.collide(state, contacts)
        solver.step(state, state, scene.control, contacts, scene.dt)
        r = solver.last_results[0]
        assert r.status & StepStatus.CONVERGED
        p, ev, cfg = r.problem, r.solve.evaluation, solver.config
        if p.constraint_count == 0:
            continue
        d = 1 / np.sqrt(np.diag(p.A))
        residual = np.linalg.norm(d * (p.A @ (ev.v - p.v_star) - ev.jt_gamma))
        if r.solve.residual <= cfg.optimality_abs_tol + cfg.optimality_rel_tol * r.solve.scale:
            assert residual <= cfg.optimality_abs_tol + cfg.optimality_rel_tol * r.solve.scale
        assert np.linalg.eigvalsh(hessian(p, ev))[0] > 0.0
        ells = [it.ell for it in r.solve.history] + [ev.ell]
        for a, b in zip(ells, ells[1:]):
            assert b <= a + 1e-14 + 1e-12 * abs(a) + cfg.line_search_relative_slop * max(1.0, abs(a))
    # Re-solving the last problem from its own answer takes no Newton iteration.
    from sap_ref.contact_solve import solve
    again = solve(r.problem, r.solve.v, solver.config)
    if r.solve.residual <= cfg.optimality_abs_tol + cfg.optimality_rel_tol * r.solve.scale:
        assert again.iterations == 0


def test_contact_overflow_is_flagged():
    scene = scenes.get("box_slide")
    solver = SolverSAP(scene.sap_model, max_rigid_contact=2)
    pipeline = CollisionPipeline(scene.sap_model, 2, solver.config)
    contacts = pipeline.contacts()
    state = scene.state.copy()
    pipeline.collide(state, contacts)
    assert contacts.count[0] == 2 and contacts.overflow[0] == 2  # four corners touch
    solver.step(state, state, scene.control, contacts, scene.dt)
    assert solver.last_status[0] & StepStatus.CONTACT_OVERFLOW
    assert solver.last_truncated_contact_count[0] == 2


def test_one_factor_override_changes_only_the_weight():
    from sap_tools.compare_presets import preset_deltas

    base = SapConfig.from_preset("approx64")
    one = SapConfig.from_preset("approx64", contact_weight_mode="diag_delassus")
    changed = {k for k, v in base.as_dict().items() if one.as_dict()[k] != v}
    assert changed == {"contact_weight_mode"}
    scene = scenes.get("sphere_slide")
    d = preset_deltas(scene)
    # Drake's weight alone moves v: the weight enters R (here compliant normal, tangential σw).
    assert d.weight_only[0] > 0.0 and d.model[0] > 0.0 and d.precision[0] > 0.0
    assert d.precision[0] < 1e-4  # float32 paths: small next to the model difference


@pytest.mark.parametrize("ls", LINE_SEARCHES)
def test_float32_objective_buffers(ls):
    """contact_solve_precision = fp32 (no preset uses it): ℓ, ∇ℓ, H really float32; the box still
    stops; a step that cannot meet the 1e-6 relative tolerance in float32 is flagged, not hidden."""
    scene = scenes.get("box_slide")
    solver = SolverSAP(scene.sap_model, max_rigid_contact=8, contact_solve_precision="fp32",
                       line_search_variant=ls, max_iterations=20)
    pipeline = CollisionPipeline(scene.sap_model, 8, solver.config)
    contacts = pipeline.contacts()
    state = scene.state.copy()
    for _ in range(300):
        pipeline.collide(state, contacts)
        solver.step(state, state, scene.control, contacts, scene.dt)
        status = StepStatus(int(solver.last_status[0]))
        assert status & StepStatus.CONVERGED or status & StepStatus.MAX_ITERATIONS
    r = solver.last_results[0]
    assert r.problem.A.dtype == np.float32 and r.solve.evaluation.grad.dtype == np.float32
    assert np.abs(state.joint_qd[0]).max() < 1e-4  # stopped, as with fp64 (anchor: stops at 0.22 s)


# ----------------------------------------------------------------------------- Hunt–Crossley


def test_lagged_creep_on_an_incline_is_the_regularized_friction_speed():
    """Once stuck on a slope tan θ < μ, a lagged Hunt–Crossley contact creeps at the speed where its
    smooth friction v/√(v² + ε_s²) carries the slope, tan θ/μ (ε_s = v_s here: μσwn₀ < v_s); Drake's
    incline_stick_slip_lagged recording ends at that speed too
    (docs/formulation.md § Hunt–Crossley contact)."""
    scene = scenes.get("incline_stick_slip")
    solver = SolverSAP(scene.sap_model, max_rigid_contact=4, contact_preset_variant="drake",
                       discrete_contact_approximation="lagged")
    pipeline = CollisionPipeline(scene.sap_model, 4, solver.config)
    contacts, state = pipeline.contacts(), scene.state.copy()
    for _ in range(scene.num_steps):
        pipeline.collide(state, contacts)
        solver.step(state, state, scene.control, contacts, scene.dt)
    r = np.tan(0.3) / 0.5
    creep = 1e-4 * r / np.sqrt(1 - r * r)
    speed = np.linalg.norm(state.joint_qd[0, :3])
    assert int(contacts.count[0]) == 4 and speed == pytest.approx(creep, rel=1e-4)
    recorded = load_recording(DATA / "drake" / "incline_stick_slip_lagged.json")["v"][-1, 3:]
    assert np.linalg.norm(recorded) == pytest.approx(creep, rel=1e-4)


@pytest.mark.parametrize("backend", ["ref", "gpu"])
@pytest.mark.parametrize("approximation", ["lagged", "similar"])
def test_hunt_crossley_refuses_a_rigid_shape(backend, approximation, device):
    """k = ∞ has no Hunt–Crossley counterpart (fₑ₀ = k·depth): the solver refuses it when built,
    naming the field and what to do, under lagged and similar only."""
    import sap_gpu

    b = ModelBuilder()
    box = b.add_body(1.0, inertia=solid_box_inertia(1.0, 0.1, 0.1, 0.1))
    b.add_joint_free(-1, box)
    b.add_ground_plane(ke=np.inf, name="floor")
    b.add_shape_sphere(box, radius=0.1)
    m = b.finalize()
    make = (lambda **k: SolverSAP(m, max_rigid_contact=1, **k)) if backend == "ref" else \
        (lambda **k: sap_gpu.SolverSAP(m, max_rigid_contact=1, device=device, **k))
    make(discrete_contact_approximation="sap")
    with pytest.raises(ValueError, match=r"shape_material_ke\[0\] \(floor\): inf \(rigid\) has no Hunt–Crossley "
                                         rf"counterpart; with discrete_contact_approximation '{approximation}'"):
        make(discrete_contact_approximation=approximation)

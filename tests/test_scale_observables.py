"""Contact observables (``SolverSAP.observables`` / ``read_observables()``): sap_gpu against sap_ref,
and both against statics and the momentum balance of a step (docs/scaling.md § Observables).
"""

import numpy as np
import pytest
import warp as wp

import sap_gpu
import sap_ref
from sap_common import ModelBuilder, scenes
from sap_common.builder import solid_box_inertia
from sap_tools.tolerances import TOL

# Statics: a box placed at the depth δ ≈ 5.4e-5 m where its compliant contacts carry its weight,
# at rest. The placement itself rounds: z = 0.1 − δ carries an ulp of 0.1 (1.4e-17 m), 2.6e-13 of
# δ, so the forces can sum to m·g only within that (measured: 1.0e-13 relative, both backends,
# drake and approx64). 1e-12 is that round-off with room, and six orders below the Newton
# tolerance (optimality_rel_tol 1e-6): a force off by a solver residual fails.
STATICS_RTOL = 1e-12
# Momentum balance of a step solved to round-off (optimality tolerance 1e-14, no cost criterion):
# m·(v_C1 − v_C0)/h = m·g + Σ forces on the body, to round-off relative to the weight. The
# velocities are O(1) m/s, divided by h = 1e-3 s: an ulp of 1 m/s (2.2e-16) is 2.2e-13 m/s², and
# the Newton residual at tolerance 1e-14 adds as much (measured: 5.9e-13 of m·g on sap_gpu, 2.2e-13
# on sap_ref). 1e-10 leaves room for the summation order of other machines, four orders below the
# friction forces' own size.
BALANCE_RTOL = 1e-10
TIGHT = dict(optimality_rel_tol=1e-14, optimality_abs_tol=0.0, cost_rel_tol=1e-300, cost_abs_tol=0.0)
G = 9.81


def _run(backend, device, model, state, control, capacity, steps, dt, **kw):
    be, d = (sap_gpu, device) if backend == "gpu" else (sap_ref, None)
    solver = be.SolverSAP(model, max_rigid_contact=capacity, device=d, **kw)
    pipeline = be.CollisionPipeline(model, capacity, solver.config, device=d)
    contacts = pipeline.contacts()
    s, c = be.to_device(state, d), be.to_device(control, d)
    out = []
    for _ in range(steps):
        pipeline.collide(s, contacts)
        solver.step(s, s, c, contacts, dt)
        out.append(solver.read_observables())
    return out, solver


@pytest.mark.parametrize("preset", ["drake", "approx64"])
def test_gpu_observables_match_sap_ref_step_by_step(device, preset):
    """Every observable of every step of a settling three-box stack (box–box and box–plane
    contacts, friction, torques about the box origins) agrees to float64 round-off."""
    scene = scenes.get("box_stack", num_worlds=2)
    state = scene.state.copy()
    state.joint_qd[1, :3] = (0.2, -0.1, 0.0)  # the worlds differ
    kw = dict(contact_preset_variant=preset)
    gpu, _ = _run("gpu", device, scene.sap_model, state, scene.control, 16, 12, scene.dt, **kw)
    ref, _ = _run("ref", device, scene.sap_model, state, scene.control, 16, 12, scene.dt, **kw)
    assert ref[-1]["contact_count"].min() >= 8, "every box must touch"
    for n, (a, b) in enumerate(zip(gpu, ref)):
        assert np.array_equal(a["contact_count"], b["contact_count"]), f"step {n + 1}"
        for k in a:
            scale = max(1.0, float(np.abs(b[k]).max()))
            err = float(np.abs(a[k] - b[k]).max())
            assert err <= TOL["fp64"] * scale, f"step {n + 1} {k}: |Δ| {err:.3g} (scale {scale:.3g})"


def _resting_box(num_worlds=1):
    """A 2 kg box (20 cm cube) on the ground, placed at the depth δ where its four corner contacts
    carry its weight: δ = m·g / Σ kₑ of the combined contact stiffnesses, from the pipeline."""
    m = 2.0
    b = ModelBuilder()
    box = b.add_body(mass=m, inertia=solid_box_inertia(m, 0.1, 0.1, 0.1))
    b.add_joint_free(-1, box, q0=(0.0, 0.0, 0.1, 0.0, 0.0, 0.0, 1.0))
    b.add_ground_plane(mu=0.5)
    b.add_shape_box(box, hx=0.1, hy=0.1, hz=0.1, ke=1e5, tau=0.02)
    model = b.replicate(num_worlds).finalize()
    pipeline = sap_ref.CollisionPipeline(model, 8)
    contacts = pipeline.contacts()
    state = model.state()
    state.joint_q[:, 2] = 0.1 - 1e-6  # touching, for the pipeline to report the four corners
    from sap_common.kinematics import body_state

    state.body_q, state.body_qd = body_state(model, state.joint_q, state.joint_qd, "public")
    pipeline.collide(state, contacts)
    assert int(contacts.count[0]) == 4
    delta = m * G / float(contacts.ke[0, :4].sum())
    state.joint_q[:, 2] = 0.1 - delta
    state.body_q, state.body_qd = body_state(model, state.joint_q, state.joint_qd, "public")
    return model, state, m


@pytest.mark.parametrize("backend", ["gpu", "ref"])
@pytest.mark.parametrize("preset", ["drake", "approx64"])
def test_a_resting_box_s_contact_forces_sum_to_its_weight(device, backend, preset):
    model, state, m = _resting_box()
    obs, solver = _run(backend, device, model, state, model.control(), 8, 20, 1e-3, contact_preset_variant=preset)
    last = obs[-1]
    assert last["contact_count"][0] == 4 and solver.diagnostics()["status"][0] == 1
    total = last["contact_force"][0, :4].sum(axis=0)
    assert abs(total[2] - m * G) <= STATICS_RTOL * m * G, f"Σ f_z − m·g = {total[2] - m * G:.3g} N"
    assert np.abs(total[:2]).max() <= STATICS_RTOL * m * G  # no friction at rest
    assert np.all(last["contact_force"][0, :4, 2] > 0) and not last["contact_force"][0, 4:].any()
    np.testing.assert_allclose(last["contact_normal"][0, :4], np.tile([0.0, 0.0, 1.0], (4, 1)), atol=0)
    # The body sum is the same forces (the box is body 1 of its contacts with the ground, body −1),
    # and the four symmetric corners leave no moment about its centre.
    np.testing.assert_allclose(last["body_contact_force"][0, 0], total, rtol=0, atol=STATICS_RTOL * m * G)
    assert np.abs(last["body_contact_torque"][0, 0]).max() <= STATICS_RTOL * m * G * 0.1
    assert np.abs(last["body_acceleration"][0, 0]).max() <= STATICS_RTOL * G


@pytest.mark.parametrize("backend", ["gpu", "ref"])
def test_a_sliding_box_s_contact_forces_balance_its_momentum_change(device, backend):
    """box_slide (corner spheres, friction, spinning): solved to round-off, each step's contact
    forces plus gravity equal mass times the step's acceleration of the centre of mass (the box's
    COM is its origin, so no lever arm changes between q₀ and q₁)."""
    scene = scenes.get("box_slide")
    m = float(scene.sap_model.body_mass[0])
    obs, _ = _run(backend, device, scene.sap_model, scene.state, scene.control, scene.max_rigid_contact, 8,
                  scene.dt, contact_preset_variant="drake", **TIGHT)
    saw_friction = False
    for n, o in enumerate(obs):
        force = o["contact_force"][0].sum(axis=0)
        saw_friction |= bool(np.abs(force[:2]).max() > 0.1)
        residual = m * o["body_acceleration"][0, 0, :3] - (force + m * np.array([0.0, 0.0, -G]))
        assert np.abs(residual).max() <= BALANCE_RTOL * m * G, f"step {n + 1}: {residual}"
        assert np.array_equal(o["body_contact_force"][0, 0], force) or np.abs(
            o["body_contact_force"][0, 0] - force).max() <= BALANCE_RTOL * m * G
    assert saw_friction, "the box must slide (friction forces) during the checked steps"


def test_observables_are_device_arrays_on_the_solver_s_device(device):
    scene = scenes.get("box_stack", num_worlds=2)
    solver = sap_gpu.SolverSAP(scene.sap_model, max_rigid_contact=16, device=device)
    for name in ("contact_count", "contact_impulse", "contact_force", "contact_point0", "contact_point1",
                 "contact_normal", "body_contact_force", "body_contact_torque", "body_acceleration"):
        a = getattr(solver.observables, name)
        assert isinstance(a, wp.array) and a.device == device and a.shape[0] == 2, name
    assert solver.world_statistics.any_failed.shape == (1,)

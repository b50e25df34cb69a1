"""sap_newton.transfer and sap_newton.SolverSAP: Newton State/Control/Contacts ↔ SAP, and stepping.

Transfers are exact gathers/scatters (float32 → float64 → float32 is lossless); Newton's contacts
give the same SAP contacts as this project's collision; the Newton solver's world ``w`` equals
its solo run; a step makes no array and copies nothing to the host.
"""

import numpy as np
import pytest

newton = pytest.importorskip("newton")
import warp as wp  # noqa: E402
from contact_record import SLOT_FIELDS, poison, unwritten  # noqa: E402
from newton_scenes import mixed_robot_newton  # noqa: E402

import sap_gpu  # noqa: E402
import sap_newton  # noqa: E402
from sap_common.collision_rules import combine_materials  # noqa: E402
from sap_common.parameters import PARAMETER_FIELDS  # noqa: E402
from sap_common.state import SapContacts, StepStatus  # noqa: E402

DT = 2e-3
# A box resting on the ground under SAP's compliant contact sinks m g / Σk; the step leaves a
# residual of the Newton stopping tolerance (5e-3 relative cost) on it.
REST_RTOL = 0.02


def _box_world(builder, z=0.1, vx=0.0):
    builder.default_shape_cfg.ke, builder.default_shape_cfg.kd, builder.default_shape_cfg.mu = 1e5, 1e3, 0.5
    builder.default_shape_cfg.density = 0.0
    body = builder.add_body(mass=1.0, xform=wp.transform((0.0, 0.0, z), wp.quat_identity()),
                            inertia=wp.mat33(np.eye(3) * (2.0 / 3.0 * 0.01)))
    builder.add_shape_box(body, hx=0.1, hy=0.1, hz=0.1)
    builder.add_shape_sphere(body, xform=wp.transform((0.0, 0.0, 0.12), wp.quat_identity()), radius=0.05)
    return body


def box_model(device, num_worlds=1, vx=(0.0,)):
    sub = newton.ModelBuilder()
    _box_world(sub)
    b = newton.ModelBuilder()
    b.default_shape_cfg.ke, b.default_shape_cfg.kd, b.default_shape_cfg.mu = 1e5, 1e3, 0.5
    b.replicate(sub, num_worlds)
    b.add_ground_plane()
    model = b.finalize(device=device)
    qd = model.joint_qd.numpy().reshape(num_worlds, 6)
    qd[:, 0] = np.resize(vx, num_worlds)
    model.joint_qd.assign(qd.ravel())
    return model


def _rollout(model, solver, steps, newton_contacts=False, control=None, each=None):
    """``steps`` steps of ``solver`` (with Newton's collision when ``newton_contacts``, else none
    given); ``each(solver)`` after every step. Returns (joint_q | joint_qd per step, last state)."""
    s0, s1 = model.state(), model.state()
    pipeline = newton.CollisionPipeline(model) if newton_contacts else None
    contacts = pipeline.contacts() if pipeline else None
    traj = []
    for _ in range(steps):
        if pipeline:
            pipeline.collide(s0, contacts)
        solver.step(s0, s1, control, contacts, DT)
        s0, s1 = s1, s0
        traj.append(np.concatenate([s0.joint_q.numpy(), s0.joint_qd.numpy()]))
        if each is not None:
            each(solver)
    return np.array(traj), s0


def _randomize(state, rng):
    for name in ("joint_q", "joint_qd", "body_q", "body_qd", "body_f"):
        a = getattr(state, name)
        a.assign(rng.normal(size=a.numpy().shape).astype(np.float32))


def test_state_transfer_follows_the_maps_and_round_trips_exactly(device):
    model = mixed_robot_newton(device, num_worlds=3)
    mass = model.body_mass.numpy()
    mass[6] *= 1.5
    model.body_mass.assign(mass)
    conv = sap_newton.convert_model(model)
    t = sap_newton.Transfer(conv, model.body_count, model.joint_coord_count, model.joint_dof_count,
                            model.shape_count, device)
    src, dst = model.state(), model.state()
    _randomize(src, np.random.default_rng(0))
    _randomize(dst, np.random.default_rng(1))
    sap = t.states()
    for g, group in enumerate(conv.groups):
        t.state_to_sap(g, src, sap[g])
        host = sap_gpu.to_host(sap[g])
        assert (host.joint_q == src.joint_q.numpy()[group.coord_index]).all()
        assert (host.joint_qd == src.joint_qd.numpy()[group.dof_index]).all()
        for name in ("body_q", "body_qd", "body_f"):
            assert (getattr(host, name) == getattr(src, name).numpy()[group.body_index]).all()
        t.state_from_sap(g, sap[g], dst)
    for name in ("joint_q", "joint_qd", "body_q", "body_qd"):
        assert (getattr(dst, name).numpy() == getattr(src, name).numpy()).all(), name


def test_control_transfer_reads_targets_by_drive_mode(device):
    model = mixed_robot_newton(device)
    conv = sap_newton.convert_model(model)
    t = sap_newton.Transfer(conv, model.body_count, model.joint_coord_count, model.joint_dof_count,
                            model.shape_count, device)
    control = model.control()
    rng = np.random.default_rng(3)
    for name in ("joint_f", "joint_target_q", "joint_target_qd", "joint_act"):
        a = getattr(control, name)
        a.assign(rng.normal(size=a.shape[0]).astype(np.float32))
    (sap,) = t.controls()
    t.control_to_sap(0, control, sap)
    host = sap_gpu.to_host(sap)
    assert (host.joint_f[0] == control.joint_f.numpy()).all()
    assert not host.joint_act.any()  # Newton's joint_act feeds its Actuators, not solvers
    tq, tqd = control.joint_target_q.numpy(), control.joint_target_qd.numpy()
    rev, pri, d6x = 6, 7, 11  # DOFs: revolute (POSITION), prismatic (POSITION_VELOCITY), D6 x (VELOCITY)
    assert host.joint_target_pos[0, rev] == tq[7] and host.joint_target_pos[0, pri] == tq[8]
    assert host.joint_target_vel[0, pri] == tqd[pri] and host.joint_target_vel[0, d6x] == tqd[d6x]
    assert host.joint_target_vel[0, rev] == 0.0 and host.joint_target_pos[0, d6x] == 0.0
    others = np.setdiff1d(np.arange(model.joint_dof_count), [rev, pri])
    assert not host.joint_target_pos[0, others].any()


def _routed_box_contacts(device, routed):
    """Two box worlds (world 1 pressed 2 cm into the ground, tilted): Newton's contacts routed into
    device contacts ``routed`` (2 worlds × 16), and our collision's contacts at the same poses."""
    model = box_model(device, num_worlds=2)
    solver = sap_newton.SolverSAP(model, max_rigid_contact=16, collision="sap")
    state = model.state()
    q = state.joint_q.numpy().reshape(2, 7)
    q[1, :3] = (0.3, -0.2, 0.08)
    q[1, 3:] = np.array([0.05, 0.02, 0.0, 1.0]) / np.linalg.norm([0.05, 0.02, 0.0, 1.0])
    state.joint_q.assign(q.ravel())
    newton.eval_fk(model, state.joint_q, state.joint_qd, state)
    pipeline = newton.CollisionPipeline(model)
    contacts = pipeline.contacts()
    pipeline.collide(state, contacts)
    g = 0
    s_in = solver.sap_state_in[g]
    solver.transfer.state_to_sap(g, state, s_in)
    solver.solvers[g].body_poses(s_in.joint_q, s_in.body_q)
    solver.transfer.contacts_to_sap(g, contacts, s_in.body_q, routed)
    ours = solver.pipelines[g].contacts()
    solver.pipelines[g].collide(s_in, ours)
    return solver, sap_gpu.to_host(routed), sap_gpu.to_host(ours)


def test_newton_contacts_become_the_contacts_of_our_collision(device):
    """Sphere–plane: the same witness points, normal and φ₀; box–plane: Newton's corner contacts
    are among ours (ours add the top corners, within the 0.2 m detection margin)."""
    _, a, b = _routed_box_contacts(device, sap_gpu.contacts(2, 16, device))
    for w in range(2):
        assert a.count[w] > 0 and a.overflow[w] == 0
        for k in range(a.count[w]):
            pair = {int(a.shape0[w, k]), int(a.shape1[w, k])}
            same = [i for i in range(b.count[w]) if {int(b.shape0[w, i]), int(b.shape1[w, i])} == pair]
            assert same, f"world {w}: Newton contact on shapes {pair} has no counterpart"
            # Orient ours like Newton's (shape order may differ) and take the nearest witness pair.
            cand = []
            for i in same:
                flip = int(b.shape0[w, i]) != int(a.shape0[w, k])
                x0, x1 = (b.x1[w, i], b.x0[w, i]) if flip else (b.x0[w, i], b.x1[w, i])
                n = -b.normal[w, i] if flip else b.normal[w, i]
                cand.append((np.linalg.norm(x0 - a.x0[w, k]) + np.linalg.norm(x1 - a.x1[w, k]), x0, x1, n, i))
            _, x0, x1, n, i = min(cand, key=lambda c: c[0])
            np.testing.assert_allclose(a.x0[w, k], x0, atol=1e-6)
            np.testing.assert_allclose(a.x1[w, k], x1, atol=1e-6)
            np.testing.assert_allclose(a.normal[w, k], n, atol=1e-6)
            assert a.phi0[w, k] == pytest.approx(b.phi0[w, i], abs=1e-6)
            for f in ("mu", "ke", "tau_d", "margin0"):
                assert getattr(a, f)[w, k] == pytest.approx(getattr(b, f)[w, i])


def test_newton_contacts_fill_every_field_of_the_record_with_area_zero(device):
    """Every routed slot fully written (none of the sentinels left), a point contact: area 0 and the
    pair's combined k. The transfer leaves the slots past the count alone."""
    routed = sap_gpu.to_device(poison(SapContacts.allocate(2, 16)), device)
    solver, a, _ = _routed_box_contacts(device, routed)
    sap_model, config = solver.conversion.groups[0].sap_model, solver.solvers[0].config
    assert a.count.min() > 0 and a.overflow.max() == 0
    for w in range(2):
        for k in range(int(a.count[w])):
            assert unwritten(a, w, k) == [], (w, k)
            assert a.area[w, k] == 0.0
            assert a.ke[w, k] == combine_materials(sap_model, int(a.shape0[w, k]), int(a.shape1[w, k]), config)[1]
        assert all(unwritten(a, w, k) == list(SLOT_FIELDS) for k in range(int(a.count[w]), 16))


def test_newton_contacts_and_our_collision_give_the_same_motion(device):
    model = box_model(device, num_worlds=2, vx=(2.0, -1.0))
    a, _ = _rollout(model, sap_newton.SolverSAP(model, max_rigid_contact=16), 150, newton_contacts=True)
    b, _ = _rollout(model, sap_newton.SolverSAP(model, max_rigid_contact=16, collision="sap"), 150)
    # Same active contacts (the four bottom corners) on both paths; the speculative ones differ.
    assert np.max(np.abs(a - b)) < 1e-4


def test_box_rests_at_the_compliant_contact_depth(device):
    model = box_model(device)
    solver = sap_newton.SolverSAP(model, max_rigid_contact=16, collision="sap")
    traj, _ = _rollout(model, solver, 200)
    # Four corner contacts in series with the ground: k = 1e5·1e5/2e5 each.
    depth = 1.0 * 9.81 / (4 * 5e4)
    assert 0.1 - traj[-1, 2] == pytest.approx(depth, rel=REST_RTOL)
    assert (solver.diagnostics()["status"] & int(StepStatus.CONVERGED)).all()


@pytest.mark.parametrize("per_world_parameters", (True, False))
def test_world_of_a_mixed_batch_equals_its_solo_run(device, per_world_parameters):
    model = box_model(device, num_worlds=3, vx=(0.5, 1.0, 1.5))
    mass = model.body_mass.numpy()
    mass[1] = 2.0  # world 1 differs: a per-world parameter of the one group, or a group of its own
    model.body_mass.assign(mass)
    solver = sap_newton.SolverSAP(model, max_rigid_contact=16, collision="sap",
                                  per_world_parameters=per_world_parameters)
    assert len(solver.conversion.groups) == (1 if per_world_parameters else 2)
    batch, _ = _rollout(model, solver, 60)
    for w, m in ((1, 2.0), (2, 1.0)):
        solo = box_model(device, vx=((0.5, 1.0, 1.5)[w],))
        solo.body_mass.assign(np.array([m], np.float32))
        run, _ = _rollout(solo, sap_newton.SolverSAP(solo, max_rigid_contact=16, collision="sap"), 60)
        q = batch[:, np.r_[7 * w:7 * w + 7, 21 + 6 * w:21 + 6 * w + 6]]
        assert (q == run).all(), f"world {w}"


@pytest.mark.parametrize("collision", ("newton", "sap"))
def test_per_world_masses_and_friction_run_in_one_solver_as_in_grouped_ones(device, collision):
    """A Newton model whose worlds differ in masses, inertias and friction: one SAP solver reading
    per-world parameters steps every world bit for bit as the one-solver-per-distinct-world
    grouping does (per_world_parameters=False), with Newton's contacts and with SAP's."""
    model = box_model(device, num_worlds=4, vx=(0.5, 1.0, 1.5, 2.0))
    model.body_mass.assign(np.array([1.0, 2.0, 0.5, 1.5], np.float32))
    inertia = model.body_inertia.numpy()
    inertia *= np.array([1.0, 2.0, 0.5, 1.5], np.float32)[:, None, None]
    model.body_inertia.assign(inertia)
    mu = model.shape_material_mu.numpy()
    world_of_shape = model.shape_world.numpy()
    for w, value in enumerate((0.2, 0.5, 0.8, 1.1)):
        mu[world_of_shape == w] = value
    model.shape_material_mu.assign(mu)
    one = sap_newton.SolverSAP(model, max_rigid_contact=16, collision=collision)
    grouped = sap_newton.SolverSAP(model, max_rigid_contact=16, collision=collision, per_world_parameters=False)
    assert len(one.solvers) == 1 and len(grouped.solvers) == 4
    assert sorted(one.conversion.groups[0].parameters) == ["body_inertia", "body_mass", "shape_material_mu"]
    a, _ = _rollout(model, one, 80, newton_contacts=collision == "newton")
    b, _ = _rollout(model, grouped, 80, newton_contacts=collision == "newton")
    assert np.array_equal(a, b)
    assert not np.allclose(a[-1, 0:7], a[-1, 7:14])  # the worlds do differ


def test_position_and_velocity_drives_reach_their_targets(device):
    b = newton.ModelBuilder(gravity=(0.0, 0.0, 0.0))
    slide = b.add_link(mass=1.0, inertia=wp.mat33(np.eye(3) * 0.01))
    spin = b.add_link(mass=1.0, inertia=wp.mat33(np.eye(3) * 0.01))
    b.add_joint_prismatic(-1, slide, axis=(1, 0, 0), target_ke=400.0, target_kd=40.0)  # critically damped
    b.add_joint_revolute(-1, spin, axis=(0, 0, 1), target_kd=50.0, actuator_mode=newton.JointTargetMode.VELOCITY)
    b.add_articulation([0])
    b.add_articulation([1])
    model = b.finalize(device=device)
    control = model.control()
    control.joint_target_q.assign(np.array([0.3, 0.0], np.float32))
    control.joint_target_qd.assign(np.array([0.0, 2.0], np.float32))
    traj, _ = _rollout(model, sap_newton.SolverSAP(model), 500, control=control)  # 1 s: 20 time constants
    assert traj[-1, 0] == pytest.approx(0.3, abs=1e-4)
    assert traj[-1, 3] == pytest.approx(2.0, abs=1e-4)


def test_step_makes_no_array_and_copies_nothing_to_the_host(device, monkeypatch):
    model = box_model(device, num_worlds=2, vx=(1.0, 0.5))
    pipeline = newton.CollisionPipeline(model)
    contacts = pipeline.contacts()
    for collision in ("newton", "sap"):
        solver = sap_newton.SolverSAP(model, max_rigid_contact=16, collision=collision)
        s0, s1, control = model.state(), model.state(), model.control()
        c = contacts if collision == "newton" else None
        pipeline.collide(s0, contacts)
        solver.step(s0, s1, control, c, DT)  # first call builds kernels
        made, copied = [], []
        original_init, original_numpy = wp.array.__init__, wp.array.numpy

        def counting_init(self, *args, **kwargs):
            made.append(kwargs.get("shape"))
            original_init(self, *args, **kwargs)

        def counting_numpy(self):
            copied.append(self.shape)
            return original_numpy(self)

        monkeypatch.setattr(wp.array, "__init__", counting_init)
        monkeypatch.setattr(wp.array, "numpy", counting_numpy)
        solver.step(s1, s0, control, c, DT)
        solver.step(s0, s1, None, c, DT)
        monkeypatch.undo()
        assert made == [] and copied == [], f"{collision}: {len(made)} arrays made, {len(copied)} host copies"


@pytest.mark.gpu
def test_newton_step_captures_in_a_cuda_graph(device):
    if not device.is_cuda:
        pytest.skip("CUDA graph capture needs a CUDA device (run with --device cuda:0)")
    model = box_model(device, num_worlds=4, vx=(1.0, 0.5, 0.0, -0.5))
    solver = sap_newton.SolverSAP(model, max_rigid_contact=16, collision="sap")
    s0, s1, control = model.state(), model.state(), model.control()
    solver.step(s0, s1, control, None, DT)
    with wp.ScopedCapture(device=device) as capture:
        solver.step(s0, s1, control, None, DT)
    wp.capture_launch(capture.graph)
    wp.synchronize_device(device)
    assert np.isfinite(s1.joint_q.numpy()).all()


def test_bad_input_is_named(device):
    model = box_model(device)
    solver = sap_newton.SolverSAP(model, collision="sap")
    s0, s1, control = model.state(), model.state(), model.control()
    with pytest.raises(ValueError, match="dt"):
        solver.step(s0, s1, control, None, 0.0)
    pipeline = newton.CollisionPipeline(model)
    with pytest.raises(ValueError, match="contacts: must be None with collision='sap'"):
        solver.step(s0, s1, control, pipeline.contacts(), DT)
    s1.joint_q = wp.zeros(3, dtype=wp.float32, device=device)
    with pytest.raises(ValueError, match=r"state_out.joint_q: expected shape \(7,\)"):
        solver.step(s0, s1, control, None, DT)
    control.joint_f = wp.zeros(6, dtype=wp.float64, device=device)
    with pytest.raises(ValueError, match="control.joint_f: expected dtype float32"):
        solver.step(s0, model.state(), control, None, DT)
    with pytest.raises(ValueError, match="collision"):
        sap_newton.SolverSAP(model, collision="mujoco")
    with pytest.raises(ValueError, match="max_rigid_contact"):
        sap_newton.SolverSAP(model, max_rigid_contact=-1)
    with pytest.raises(ValueError, match="line_search_variant"):
        sap_newton.SolverSAP(model, line_search_variant="golden")


def test_notify_model_changed_rereads_the_model(device):
    model = box_model(device, vx=(1.0,))
    solver = sap_newton.SolverSAP(model, max_rigid_contact=16, collision="sap")
    mu = model.shape_material_mu.numpy()
    mu[:] = 0.1
    model.shape_material_mu.assign(mu)
    before, _ = _rollout(model, solver, 100)
    solver.notify_model_changed(newton.ModelFlags.SHAPE_PROPERTIES)
    after, _ = _rollout(model, solver, 100)
    assert after[-1, 0] > before[-1, 0] + 0.01  # less friction: the box slides further


def test_contacts_follow_joint_q_not_a_stale_body_q(device):
    """The step integrates joint_q; contacts are built on its poses even when body_q lags behind."""
    model = box_model(device)
    for collision, newton_contacts in (("sap", False), ("newton", True)):
        solver = sap_newton.SolverSAP(model, max_rigid_contact=16, collision=collision)
        state, out = model.state(), model.state()
        q = state.joint_q.numpy()
        q[2] = 0.095  # 5 mm into the ground; body_q still says 0.1 (touching)
        state.joint_q.assign(q)
        contacts = None
        if newton_contacts:  # Newton's pipeline reads body_q: bring it up to date, as Newton programs do
            newton.eval_fk(model, state.joint_q, state.joint_qd, state)
            pipeline = newton.CollisionPipeline(model)
            contacts = pipeline.contacts()
            pipeline.collide(state, contacts)
            state.body_q.assign(model.state().body_q)  # stale again: the step must not use it
        solver.step(state, out, None, contacts, DT)
        # Pushed out at about φ₀/(h + τ_d) = 0.005 / 0.022 m/s (falling would give −g h = −0.02 m/s).
        assert out.joint_qd.numpy()[2] > 0.1, collision
        assert out.body_q.numpy()[0, 2] == pytest.approx(out.joint_q.numpy()[2])


def test_free_body_wrenches_follow_newtons_com_convention(device):
    """Newton's FREE-joint joint_f and body_f are [f, τ about the COM] in world, joint_qd/body_qd
    [v_COM, ω]: a torque about the COM spins a body whose origin is off the COM without moving the
    COM, and a force through the COM translates it without spinning."""
    b = newton.ModelBuilder(gravity=(0.0, 0.0, 0.0))
    inertia = np.diag([0.02, 0.03, 0.04])
    for _ in range(2):
        body = b.add_body(mass=2.0, com=wp.vec3(0.1, 0.05, 0.0), inertia=wp.mat33(inertia))
        # Not colliding: the two overlap, and a step given no contacts runs SAP's collision where there are pairs.
        b.add_shape_sphere(body, radius=0.05, cfg=newton.ModelBuilder.ShapeConfig(density=0.0,
                                                                                  has_shape_collision=False))
    model = b.finalize(device=device)
    solver = sap_newton.SolverSAP(model, contact_preset_variant="approx64")
    s0, s1, control = model.state(), model.state(), model.control()
    joint_f = np.zeros(12, np.float32)
    joint_f[3:6] = (0.0, 0.0, 0.06)  # body 0: torque about its COM (joint_f)
    control.joint_f.assign(joint_f)
    steps, h = 50, DT
    for _ in range(steps):
        s0.body_f.assign(np.array([[0, 0, 0, 0, 0, 0], [0.4, 0, 0, 0, 0, 0]], np.float32))  # body 1: force at COM
        solver.step(s0, s1, control, None, h)
        s0, s1 = s1, s0
    t = steps * h
    qd, body_q = s0.joint_qd.numpy().reshape(2, 6), s0.body_q.numpy()
    com = lambda k: body_q[k, :3] + wp.quat_rotate(wp.quat(*body_q[k, 3:]), wp.vec3(0.1, 0.05, 0.0))  # noqa: E731
    # SAP integrates [ω, v_origin]; the centripetal term m ω×(ω×r) enters explicitly, an O(h ω² |r|)
    # error per step (here ≤ 5e-6 m/s after 50 steps). A wrong convention would be off by ω×r ≈ 0.017 m/s.
    atol = 2e-5
    np.testing.assert_allclose(qd[0], [0, 0, 0, 0, 0, 0.06 / 0.04 * t], atol=atol)  # spins about the COM ...
    np.testing.assert_allclose(np.array(com(0)), [0.1, 0.05, 0.0], atol=atol)  # ... which stays put
    np.testing.assert_allclose(qd[1], [0.4 / 2.0 * t, 0, 0, 0, 0, 0], atol=atol)  # translates, no spin
    np.testing.assert_allclose(s0.body_qd.numpy(), qd, atol=atol)


def test_a_speculative_newton_contact_pushes_once_approached_faster_than_phi0_over_h_plus_tau_d(device):
    """Newton reports every pair closer than its gap (``rigid_gap``, 0.1 m), so contacts reach SAP with
    φ₀ > 0. SAP's Kelvin–Voigt law γ_n/h = (−k·φ − k·τ_d·v_n)₊ (docs/formulation.md § Regularization) pushes
    on one as soon as φ₀ + (h + τ_d)·v_n < 0: a body closes on it no faster than about φ₀/(h + τ_d),
    though it is still φ₀ away (the measured reason Newton's basic_conveyor_forces stalls its boxes
    on the turn, docs/newton.md). A sphere 30 mm from a wall at 0.5 m/s, no gravity, default materials
    (k = 5e5 N/m, τ_d = 0.2 s for the pair): one step leaves it the closed form's speed."""
    b = newton.ModelBuilder(gravity=(0.0, 0.0, 0.0))
    m, r, gap0 = 1.0, 0.1, 0.03
    body = b.add_body(mass=m, inertia=wp.mat33(np.eye(3) * 0.4 * m * r * r))
    b.add_shape_sphere(body, radius=r, cfg=newton.ModelBuilder.ShapeConfig(density=0.0))
    b.add_shape_box(-1, xform=wp.transform((r + gap0 + 0.05, 0.0, 0.0), wp.quat_identity()), hx=0.05, hy=0.5,
                    hz=0.5)
    model = b.finalize(device=device)
    solver = sap_newton.SolverSAP(model, contact_preset_variant="approx64")
    pipeline = newton.CollisionPipeline(model)
    contacts = pipeline.contacts()
    s0, s1 = model.state(), model.state()
    v0 = 0.5
    s0.joint_qd.assign(np.array([v0, 0, 0, 0, 0, 0], np.float32))
    pipeline.collide(s0, contacts)
    assert int(contacts.rigid_contact_count.numpy()[0]) == 1
    solver.step(s0, s1, None, contacts, DT)
    cfg = solver.config
    k, tau = cfg.fallback_stiffness / 2.0, 2.0 * cfg.contact_tau_d
    # One contact through the COM: its normal row sees 1/m; the body_inertia weight w averages the
    # normal (1/m) and two tangents (1/m + r²/I) rows, and R is the larger of its near-rigid floor and
    # the spring-damper's compliance. The impulse γ = (v̂ − v_n)/R with v_n = −v₀ + γ/m gives v_n.
    w = (1.0 / m + 2.0 * (1.0 / m + r * r / (0.4 * m * r * r))) / 3.0
    R = max(cfg.contact_beta ** 2 / (4.0 * np.pi ** 2) * w, 1.0 / (DT * k * (DT + tau)))
    v_hat = -gap0 / (DT + tau)
    v_n = -v0 + (v_hat + v0) / (1.0 + m * R)
    # Newton's float32 state and contact points (a float32 ulp of 0.5 m/s is 6e-8 m/s; measured 7e-8)
    # and the solver's stopping tolerance on one contact: 1e-6 m/s, far below the 0.33 m/s braking.
    vel_atol = 1e-6
    assert s1.joint_qd.numpy()[0] == pytest.approx(-v_n, abs=vel_atol)
    assert -v_n < 0.5 * v0  # braked to a third of its speed while still 30 mm from the wall


# ------------------------------------------------------------------ notify_model_changed: parameters in place

F = newton.ModelFlags
NB, NV, NS = 6, 14, 6  # bodies, DOFs and shapes of one world of mixed_robot_newton


def _edit(array, change):
    """``change`` a host copy of a Newton model array, then write it back (the model's device array)."""
    a = array.numpy()
    change(a)
    array.assign(a)


def _addresses(solver) -> dict:
    """The address of every array a step reads that an in-place notify writes."""
    out = {}
    for g, s in enumerate(solver.solvers):
        for name in (*PARAMETER_FIELDS, "body_inertia_inv"):
            out[g, name] = s.parameters.array(name).ptr
            if solver.pipelines:
                out[g, "pipeline", name] = solver.pipelines[g].parameters.array(name).ptr
        M = solver.transfer.groups[g]
        out[g, "com"], out[g, "margin"] = M.body_com.ptr, M.shape_margin.ptr
        for k, table in enumerate(solver.transfer.pair_materials[g]):
            out[g, "pair", k] = table.ptr
        if solver.pipelines:
            out[g, "pipeline", "pair_mu"] = solver.pipelines[g].pair_mu.ptr
    return out


def _values(solver) -> dict:
    """Every value an in-place notify writes, read back: each group's per-world parameters (the
    inverse inertias too), its transfer tables and its pipeline's pair materials when they are kept
    (one shared row, combined at construction), one row per world."""
    out = {}
    for g, s in enumerate(solver.solvers):
        W = s.model.num_worlds
        for name in (*PARAMETER_FIELDS, "body_inertia_inv"):
            out[g, name] = s.parameters.array(name).numpy()  # a shared row reads back once per world
        M = solver.transfer.groups[g]
        out[g, "com"], out[g, "margin"] = M.body_com.numpy(), M.shape_margin.numpy()
        for k, table in enumerate(solver.transfer.pair_materials[g]):
            out[g, "pair", k] = table.numpy()
        if solver.pipelines and solver.pipelines[g].parameters.shared:  # else combined at every collide
            p = solver.pipelines[g]
            for k, table in enumerate((p.pair_mu, p.pair_ke, p.pair_ke0, p.pair_ke1, p.pair_tau, p.pair_hcd)):
                out[g, "pipeline", k] = table.numpy()
        assert all(v.shape[0] == W for k, v in out.items() if k[0] == g)
    return out


def _assert_same_values(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=str(k))  # NaN (unset) equals NaN


def _objects(solver) -> list:
    return [*solver.solvers, *solver.pipelines, *(p for p in solver.parameters if p is not None), solver.transfer,
            *solver.sap_state_in, *solver.sap_control]


def _per_world_robot(device, num_worlds=3):
    """mixed_robot_newton whose worlds differ in masses, COMs, friction and (with 3 worlds) gaps: one
    group with per-world parameters and per-world tables (pair materials, COMs; margins with 3 worlds)."""
    model = mixed_robot_newton(device, num_worlds=num_worlds)
    shape_world = model.shape_world.numpy()
    _edit(model.body_mass, lambda a: a.__setitem__(NB + 1, a[NB + 1] * 1.5))
    _edit(model.body_com, lambda a: a.__setitem__(((num_worlds - 1) * NB, 0), 0.02))
    _edit(model.shape_material_mu, lambda a: a.__setitem__(shape_world == 1, 0.5))
    _edit(model.shape_gap, lambda a: a.__setitem__(shape_world == 2, 0.05))
    return model


def _change_every_parameter(model, solver, per_world=True):
    """Every per-world parameter of mixed_robot_newton changed (per world, or the same in every world),
    each category notified with its flag; returns the solver objects kept."""
    W = model.world_count
    scale = np.array([1.1, 1.3, 0.8] if per_world else [1.2] * 3, np.float32)[:W]
    shape_world = model.shape_world.numpy()
    kept = _objects(solver)

    def per_body(a, s=scale):
        a.reshape(W, NB, *a.shape[1:])[...] *= s.reshape(W, *([1] * a.ndim))

    _edit(model.body_mass, per_body)
    _edit(model.body_inertia, per_body)
    _edit(model.body_com, lambda a: a.reshape(W, NB, 3).__setitem__((slice(None), 1, 2), -0.1 * scale))
    solver.notify_model_changed(F.BODY_INERTIAL_PROPERTIES)
    for name in ("shape_material_mu", "shape_material_ke", "shape_material_kd", "shape_gap"):
        _edit(getattr(model, name), lambda a: a.__setitem__(shape_world >= 0, a[shape_world >= 0]
                                                             * np.repeat(scale, NS)))
    solver.notify_model_changed(F.SHAPE_PROPERTIES)

    def per_dof(dofs, values):
        def change(a):
            a.reshape(W, NV)[:, dofs] = np.outer(scale, values)
        return change

    _edit(model.joint_target_ke, per_dof([6, 7], [60.0, 150.0]))   # rev (POSITION), pri (POSITION_VELOCITY)
    _edit(model.joint_target_kd, per_dof([6, 7, 11], [3.0, 6.0, 4.0]))  # and the D6's x (VELOCITY)
    _edit(model.joint_limit_lower, per_dof([6, 7], [-0.9, -0.04]))
    _edit(model.joint_limit_upper, per_dof([6, 11], [1.1, 0.08]))
    _edit(model.joint_limit_ke, per_dof([6, 7], [5e4, 1e4]))
    _edit(model.joint_limit_kd, per_dof([6], [30.0]))
    _edit(model.joint_effort_limit, per_dof([6], [20.0]))
    solver.notify_model_changed(F.JOINT_DOF_FORCE_PROPERTIES)
    _edit(model.joint_armature, per_dof([3, 4, 6, 12], [0.01, 0.02, 0.03, 0.004]))  # FREE angular DOFs too
    solver.notify_model_changed(F.JOINT_DOF_INERTIAL_PROPERTIES)
    _edit(model.joint_damping, per_dof([0, 5, 9, 13], [0.1, 0.2, 0.07, 0.3]))
    solver.notify_model_changed(F.JOINT_DOF_PROPERTIES)
    _edit(model.gravity, lambda a: a.__setitem__(slice(0, W), np.outer(scale, [0.5, 0.0, -9.0])))
    solver.notify_model_changed(F.MODEL_PROPERTIES)
    return kept


@pytest.mark.parametrize("collision", ("newton", "sap"))
def test_parameter_changes_are_copied_in_place_and_step_as_a_new_solver(device, collision):
    """Masses, inertias, COMs, friction, contact stiffness and damping, gaps, gains, limits, effort
    limits, armature (a FREE joint's too), damping and gravity changed per world on the Newton model's
    device arrays, each category notified with its flag: the solver keeps every object and array
    (what a captured graph holds) and steps bit for bit as a new SolverSAP of the changed model."""
    model = _per_world_robot(device)
    options = dict(collision=collision, max_rigid_contact=32)  # Newton's 0.1 m gaps report ~25 contacts a world
    solver = sap_newton.SolverSAP(model, **options)
    assert len(solver.solvers) == 1 and solver.parameters[0] is not None
    assert solver.transfer.table_rows(0) == {"body_com": 3, "shape_margin": 3, "materials": 3}
    before, _ = _rollout(model, solver, 12, newton_contacts=collision == "newton")
    addresses = _addresses(solver)
    kept = _change_every_parameter(model, solver)
    assert all(a is b for a, b in zip(_objects(solver), kept)) and _addresses(solver) == addresses
    new = sap_newton.SolverSAP(model, **options)
    _assert_same_values(_values(solver), _values(new))
    after, _ = _rollout(model, solver, 12, newton_contacts=collision == "newton")
    fresh, _ = _rollout(model, new, 12, newton_contacts=collision == "newton")
    assert np.array_equal(after, fresh)
    assert not np.array_equal(after, before)
    assert not solver.diagnostics()["failed"].any()


def test_in_place_copies_follow_the_conversion_options(device):
    """joint_limits="drake" (the near-rigid limit, whatever Newton's limit gains) and
    contact_material="sap" (the solver's fallback stiffness and τ_d): the values copied in place are
    a new solver's of the same options."""
    model = _per_world_robot(device)
    options = dict(joint_limits="drake", contact_material="sap", collision="sap")
    solver = sap_newton.SolverSAP(model, **options)
    kept = _change_every_parameter(model, solver)
    assert all(a is b for a, b in zip(_objects(solver), kept))
    _assert_same_values(_values(solver), _values(sap_newton.SolverSAP(model, **options)))


@pytest.mark.parametrize("collision", ("newton", "sap"))
def test_a_group_of_equal_worlds_keeps_its_one_row_until_its_worlds_differ(device, collision):
    """A group whose worlds are equal reads one shared row: a change that keeps them equal is written
    into that row in place; one that makes them differ rebuilds (the worlds then read per-world
    parameters). With collision="sap" the pipeline of such a group combines its pair materials once,
    when built: a change of friction rebuilds there. Each steps bit for bit as a new solver."""
    model = box_model(device, num_worlds=3, vx=(0.5, 1.0, 1.5))
    solver = sap_newton.SolverSAP(model, max_rigid_contact=16, collision=collision)
    assert solver.parameters == [None]
    new = collision == "newton"

    def as_a_new_solver():
        fresh = sap_newton.SolverSAP(model, max_rigid_contact=16, collision=collision)
        _assert_same_values(_values(solver), _values(fresh))
        a, _ = _rollout(model, solver, 40, newton_contacts=new)
        b, _ = _rollout(model, fresh, 40, newton_contacts=new)
        assert np.array_equal(a, b)
        return a

    before = as_a_new_solver()
    kept, addresses = solver.solvers[0], _addresses(solver)
    _edit(model.body_mass, lambda a: a.__setitem__(slice(None), 2.0))
    _edit(model.gravity, lambda a: a.__setitem__(slice(None), (0.0, 0.0, -5.0)))
    solver.notify_model_changed(F.BODY_INERTIAL_PROPERTIES | F.MODEL_PROPERTIES)
    assert solver.solvers[0] is kept and solver.parameters == [None] and _addresses(solver) == addresses
    assert not np.array_equal(as_a_new_solver(), before)
    _edit(model.shape_material_mu, lambda a: a.__setitem__(slice(None), 0.2))
    solver.notify_model_changed(F.SHAPE_PROPERTIES)
    assert (solver.solvers[0] is kept) == (collision == "newton") and solver.parameters == [None]
    as_a_new_solver()
    kept = solver.solvers[0]
    _edit(model.body_mass, lambda a: a.__setitem__(1, 3.0))  # world 1 alone: the one row cannot hold it
    solver.notify_model_changed(F.BODY_INERTIAL_PROPERTIES)
    assert solver.solvers[0] is not kept and solver.parameters[0] is not None
    as_a_new_solver()


def test_changes_beyond_values_rebuild_as_a_new_solver(device):
    """A limit or a drive's velocity target that disappears (the rows the template lays out), a
    mass that vanishes, a shape whose size changes under SHAPE_PROPERTIES, a table kept once whose
    worlds come apart, and a topology category: each rebuilds, and steps bit for bit as a new solver."""
    model = _per_world_robot(device, num_worlds=2)
    solver = sap_newton.SolverSAP(model, collision="sap")
    assert solver.parameters[0] is not None and solver.transfer.table_rows(0)["shape_margin"] == 1
    P = newton.JointTargetMode.POSITION
    cases = [
        (F.SHAPE_PROPERTIES, model.shape_gap, lambda a: a.__setitem__(3, 0.05)),  # the margins: one row until now
        (F.JOINT_DOF_FORCE_PROPERTIES, model.joint_limit_upper, lambda a: a.__setitem__(NV + 6, 1e10)),  # MAXVAL
        (F.JOINT_DOF_FORCE_PROPERTIES, model.joint_target_mode, lambda a: a.__setitem__(7, int(P))),  # no target_qd
        (F.BODY_INERTIAL_PROPERTIES, model.body_mass, lambda a: a.__setitem__(5, 0.0)),  # the welded l5
        (F.SHAPE_PROPERTIES, model.shape_scale, lambda a: a.__setitem__((0, 0), 0.12)),  # world 0's base sphere
        (F.JOINT_PROPERTIES, model.joint_X_p, lambda a: None),  # nothing changed, but joints are the topology
    ]
    for flags, array, change in cases:
        kept = solver.solvers[0]
        _edit(array, change)
        solver.notify_model_changed(flags)
        assert solver.solvers[0] is not kept, F(flags).name
        a, _ = _rollout(model, solver, 8)
        b, _ = _rollout(model, sap_newton.SolverSAP(model, collision="sap"), 8)
        assert np.array_equal(a, b), F(flags).name
    assert len(solver.solvers) == 2  # world 1 lost a limit: its template is not world 0's any more


def test_a_refused_parameter_value_raises_and_leaves_the_solver_as_it_was(device):
    """A value the conversion refuses (an effort limit of 0 on a driven hinge) fails the device check:
    the notify rebuilds, which raises the conversion's ValueError, and the solver keeps its values."""
    model = mixed_robot_newton(device, num_worlds=2)
    solver = sap_newton.SolverSAP(model, collision="sap")
    kept = solver.solvers[0]
    before, _ = _rollout(model, solver, 5)
    _edit(model.joint_effort_limit, lambda a: a.__setitem__(NV + 6, 0.0))
    with pytest.raises(ValueError, match=r"joint 'rev' \(DOF 20\): joint_effort_limit must be > 0, got 0.0"):
        solver.notify_model_changed(F.JOINT_DOF_FORCE_PROPERTIES)
    assert solver.solvers[0] is kept and not solver.solvers[0].parameters.invalid.numpy().any()
    again, _ = _rollout(model, solver, 5)
    assert np.array_equal(again, before)


# ------------------------------------------------------------------ the one-line swap's defaults
# Newton's examples swap their solver for SolverSAP(model) and nothing else (tests/test_newton_examples.py):
# the default contact slots, materials and a step given no contacts are what such a program gets.


def _free_box(builder, xyz, half=0.1, mass=1.0):
    body = builder.add_body(mass=mass, xform=wp.transform(xyz, wp.quat_identity()),
                            inertia=wp.mat33(np.eye(3) * (2.0 / 3.0 * mass * half * half)))
    builder.add_shape_box(body, hx=half, hy=half, hz=half)
    return body


def _resting_pairs_model(device):
    """One world per resting pile, each pair in the pose of its most contacts: a tower of three boxes,
    a cylinder standing on a box, a capsule lying across another on the ground, a sphere on a box and
    an ellipsoid, all on the ground plane (global)."""
    lying = wp.quat_from_axis_angle(wp.vec3(0.0, 1.0, 0.0), 0.5 * np.pi)
    crossed = wp.quat_from_axis_angle(wp.vec3(1.0, 0.0, 0.0), 0.5 * np.pi)
    inertia = wp.mat33(np.eye(3) * 0.01)
    b = newton.ModelBuilder()
    b.default_shape_cfg.density = 0.0

    def world(fill):
        w = newton.ModelBuilder()
        w.default_shape_cfg.density = 0.0
        fill(w)
        b.add_world(w)

    world(lambda w: [_free_box(w, (0.0, 0.0, 0.1 + 0.2 * k - 0.001 * (k + 1))) for k in range(3)])

    def cylinder_on_box(w):
        _free_box(w, (0.0, 0.0, 0.099))
        c = w.add_body(mass=1.0, xform=wp.transform((0.0, 0.0, 0.297), wp.quat_identity()), inertia=inertia)
        w.add_shape_cylinder(c, radius=0.08, half_height=0.1)

    def capsules(w):
        for k, (z, q) in enumerate(((0.049, lying), (0.147, crossed))):
            c = w.add_body(mass=1.0, xform=wp.transform((0.0, 0.0, z), q), inertia=inertia)
            w.add_shape_capsule(c, radius=0.05, half_height=0.2)

    def sphere_and_ellipsoid(w):
        _free_box(w, (0.0, 0.0, 0.099))
        s = w.add_body(mass=1.0, xform=wp.transform((0.0, 0.0, 0.249), wp.quat_identity()), inertia=inertia)
        w.add_shape_sphere(s, radius=0.05)
        e = w.add_body(mass=1.0, xform=wp.transform((0.5, 0.0, 0.049), wp.quat_identity()), inertia=inertia)
        w.add_shape_ellipsoid(e, rx=0.1, ry=0.08, rz=0.05)

    for fill in (cylinder_on_box, capsules, sphere_and_ellipsoid):
        world(fill)
    b.add_ground_plane()
    return b.finalize(device=device)


def test_default_contact_slots_hold_every_contact_newton_writes(device):
    """max_rigid_contact=None sizes each world for the most contacts its candidate pairs can give
    (sap_newton.default_max_rigid_contact): no Newton contact is dropped. The tower of three boxes
    gets 20 contacts from 6 candidate pairs (4 on each face it rests on, and speculative ones within
    Newton's gap); the old default (one slot per pair, at least 8) kept 8."""
    model = _resting_pairs_model(device)
    pipeline = newton.CollisionPipeline(model)
    contacts = pipeline.contacts()
    state = model.state()
    pipeline.collide(state, contacts)
    n = int(contacts.rigid_contact_count.numpy()[0])
    world = model.shape_world.numpy()[contacts.rigid_contact_shape0.numpy()[:n]]
    world = np.where(world < 0, model.shape_world.numpy()[contacts.rigid_contact_shape1.numpy()[:n]], world)
    written = np.bincount(world, minlength=model.world_count)
    solver = sap_newton.SolverSAP(model)
    slots = {int(w): s.config.max_rigid_contact for g, s in zip(solver.conversion.groups, solver.solvers)
             for w in g.worlds}
    pairs = {int(w): len(g.sap_model.shape_pair) for g in solver.conversion.groups for w in g.worlds}
    assert written[0] > max(pairs[0], 8)  # the tower: 4 on each face it rests on, and speculative ones
    solver.step(state, model.state(), None, contacts, DT)
    diag = solver.diagnostics()
    assert diag["contact_count"].tolist() == written.tolist() and not diag["truncated_contact_count"].any()
    assert all(slots[w] >= written[w] for w in range(model.world_count))
    assert not (diag["status"] & int(StepStatus.CONTACT_OVERFLOW)).any()
    # The rule: per pair the most either narrow phase gives (SAP keeps 8 for a box on a box or a plane).
    assert slots[0] == 6 * 8 and slots == {int(w): sap_newton.default_max_rigid_contact(g.sap_model)
                                           for g in solver.conversion.groups for w in g.worlds}


def test_default_contact_slots_of_a_crowded_world_follow_newton_s_neighbour_bound():
    """30 boxes that can all touch each other (435 box pairs of 8 contacts) and the ground: the pairs
    with the ground count in full (30 · 8), the others up to 20 neighbours per box (30 · 20 · 8 / 2)."""
    b = newton.ModelBuilder()
    b.default_shape_cfg.density = 0.0
    for k in range(30):
        _free_box(b, (0.3 * (k % 6), 0.3 * (k // 6), 0.1))
    b.add_ground_plane()
    m = sap_newton.to_sap_model(b.finalize(device="cpu"))
    assert len(m.shape_pair) == 30 + 435
    assert sap_newton.default_max_rigid_contact(m) == 30 * 8 + 30 * 20 * 8 // 2


def _default_material_box(device, ke=None, kd=None):
    """A 1 kg, 0.2 m box on the ground from a builder that sets no stiffness (ke, kd: set them)."""
    b = newton.ModelBuilder()
    if ke is not None:
        b.default_shape_cfg.ke, b.default_shape_cfg.kd = ke, kd
    b.default_shape_cfg.density = 0.0
    _free_box(b, (0.0, 0.0, 0.1))
    b.add_ground_plane()
    return b.finalize(device=device)


def test_newton_s_default_stiffness_takes_sap_s_and_rests_on_the_surface(device):
    """Newton's builder default ke = 2.5e3 (MuJoCo's default solref as Newton reads it, no stiffness
    in N/m) is unset: k and τ_d are the solver's fallback_stiffness (1e6 N/m) and contact_tau_d, as
    contact_material="sap" gives, so the box rests 0.09 mm deep (SAP's near-rigid regime: a 1 kg box
    on four 5e5 N/m corners oscillates in 4.4 ms, about two steps) where Newton's rigid solvers rest,
    not 1.96 mm (2.5e3 N/m read literally: m g / 4 corners of 1.25e3 N/m). A set ke is still read in
    N/m: 1e4 rests m g / (4 · 5e3) = 0.49 mm deep."""
    model = _default_material_box(device)
    solver = sap_newton.SolverSAP(model)
    traj, _ = _rollout(model, solver, 200, newton_contacts=True)
    assert 0.0 < 0.1 - traj[-1, 2] < 1e-4
    sap, _ = _rollout(model, sap_newton.SolverSAP(model, contact_material="sap"), 200, newton_contacts=True)
    assert np.array_equal(traj, sap)
    m = solver.conversion.groups[0].sap_model
    assert np.isnan(m.shape_material_ke).all() and np.isnan(m.shape_material_tau).all()
    assert (sap_newton.convert.NEWTON_DEFAULT_KE, sap_newton.convert.NEWTON_DEFAULT_KD) == (2.5e3, 100.0)
    model = _default_material_box(device, 1e4, 1e2)
    solver = sap_newton.SolverSAP(model)
    m = solver.conversion.groups[0].sap_model
    np.testing.assert_array_equal(m.shape_material_ke, [1e4, 1e4])
    np.testing.assert_allclose(m.shape_material_tau, [1e-2, 1e-2], rtol=1e-7)
    traj, _ = _rollout(model, solver, 200, newton_contacts=True)
    assert 0.1 - traj[-1, 2] == pytest.approx(9.81 / (4 * 5e3), rel=REST_RTOL)
    # The in-place path (notify_model_changed) follows the same rule, as a new solver reads it.
    model = _default_material_box(device, 1e4, 1e2)
    solver = sap_newton.SolverSAP(model)
    kept = solver.solvers[0]
    _edit(model.shape_material_ke, lambda a: a.__setitem__(slice(None), 2.5e3))
    solver.notify_model_changed(F.SHAPE_PROPERTIES)
    assert solver.solvers[0] is kept
    fresh = sap_newton.SolverSAP(model)  # kept alive: the values of its one shared row are views of its arrays
    _assert_same_values(_values(solver), _values(fresh))
    assert np.isnan(solver.solvers[0].parameters.array("shape_material_ke").numpy()).all()


def test_a_step_given_no_contacts_runs_sap_s_collision(device):
    """collision="newton" (the default) and step(..., contacts=None) on a model with candidate shape
    pairs: the solver collides by itself (as Newton's MuJoCo solver does when given no contacts), bit
    for bit as collision="sap"; a box on the ground stays there (it fell through before). With
    fallback_collision=False, and on a model without candidate pairs, there is no pipeline and no
    contact."""
    model = box_model(device, num_worlds=2, vx=(0.5, -0.5))
    solver = sap_newton.SolverSAP(model, max_rigid_contact=16)
    a, _ = _rollout(model, solver, 100)
    assert a[-1, 2] == pytest.approx(0.1 - 9.81 / (4 * 5e4), rel=1e-3)  # resting, not 0.2 s of free fall
    b, _ = _rollout(model, sap_newton.SolverSAP(model, max_rigid_contact=16, collision="sap"), 100)
    assert np.array_equal(a, b) and len(solver.pipelines) == 1
    assert solver.diagnostics()["contact_count"].min() > 0
    # Given Newton's contacts, the solver uses them (not its own collision).
    c, _ = _rollout(model, solver, 100, newton_contacts=True)
    d, _ = _rollout(model, sap_newton.SolverSAP(model, max_rigid_contact=16), 100, newton_contacts=True)
    assert np.array_equal(c, d) and not np.array_equal(a, c)
    # fallback_collision=False: no pipeline, and a step without contacts has none (the box falls).
    solver = sap_newton.SolverSAP(model, max_rigid_contact=16, fallback_collision=False)
    e, _ = _rollout(model, solver, 100)
    assert solver.pipelines == [] and e[-1, 2] == pytest.approx(0.1 - 0.5 * 9.81 * (100 * DT) ** 2, rel=0.05)
    with pytest.raises(ValueError, match="fallback_collision"):
        sap_newton.SolverSAP(model, fallback_collision="yes")
    b = newton.ModelBuilder(gravity=(0.0, 0.0, -9.81))
    body = b.add_body(mass=1.0, inertia=wp.mat33(np.eye(3) * 0.01))
    b.add_shape_sphere(body, radius=0.05)
    free = b.finalize(device=device)
    solver = sap_newton.SolverSAP(free)
    assert solver.pipelines == []
    traj, _ = _rollout(free, solver, 10)
    assert traj[-1, 2] == pytest.approx(-0.5 * 9.81 * (10 * DT) ** 2, rel=0.2)  # free fall


def test_a_shape_change_reaches_the_collision_of_a_step_given_no_contacts_in_place(device):
    """With collision="newton" the pipeline a step without contacts runs reads per-world parameters of
    its own (a group of equal worlds included), written by notify_model_changed in place: no rebuild,
    and the next steps are a new solver's, bit for bit."""
    model = box_model(device, num_worlds=2, vx=(1.0, 1.0))
    solver = sap_newton.SolverSAP(model, max_rigid_contact=16)
    assert solver.parameters == [None] and not solver.pipelines[0].parameters.shared
    kept, addresses = solver.solvers[0], _addresses(solver)
    _edit(model.shape_material_mu, lambda a: a.__setitem__(slice(None), 0.1))
    solver.notify_model_changed(F.SHAPE_PROPERTIES)
    assert solver.solvers[0] is kept and _addresses(solver) == addresses
    a, _ = _rollout(model, solver, 40)
    b, _ = _rollout(model, sap_newton.SolverSAP(model, max_rigid_contact=16), 40)
    assert np.array_equal(a, b)
    np.testing.assert_array_equal(solver.pipelines[0].parameters.array("shape_material_mu").numpy(),
                                  np.full((2, 3), np.float32(0.1), np.float64))

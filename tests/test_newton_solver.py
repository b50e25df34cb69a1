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


def _rollout(model, solver, steps, newton_contacts=False, control=None):
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
        b.add_shape_sphere(body, radius=0.05, cfg=newton.ModelBuilder.ShapeConfig(density=0.0))
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

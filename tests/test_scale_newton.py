"""sap_newton.SolverSAP and Newton 1.8's solver contract: reset with Newton's mask and flags,
observables (CONTACT_F, BODY_QDD and SAP's BODY_CONTACT_F, WORLD_STATUS), per-world failure flags
on the device, notify_model_changed's flags (docs/newton.md § Solver contract).
"""

import numpy as np
import pytest

newton = pytest.importorskip("newton")
import warp as wp  # noqa: E402
from test_newton_solver import DT, box_model  # noqa: E402

import sap_newton  # noqa: E402
from sap_common.state import StepStatus  # noqa: E402

G = 9.81
# Newton's arrays are float32: a force of ~10 N carries ~1e-6 N of rounding, a sum of a dozen rows
# a dozen of those. 1e-5 relative holds them and is far below any physical difference here.
F32_RTOL = 1e-5


def _settled(device, num_worlds=3, steps=150, collision="newton", kinds=None):
    model = box_model(device, num_worlds=num_worlds, vx=(0.0,) * num_worlds)
    solver = sap_newton.SolverSAP(model, max_rigid_contact=16, collision=collision)
    pipeline = newton.CollisionPipeline(model) if collision == "newton" else None
    contacts = pipeline.contacts() if pipeline else None
    K = solver.ObservableKind
    kinds = kinds if kinds is not None else solver.supported_observables
    obs = solver.observables(kinds, contacts=contacts) if kinds else None
    s0, s1 = model.state(), model.state()
    for _ in range(steps):
        if pipeline:
            pipeline.collide(s0, contacts)
        solver.step(s0, s1, None, contacts, DT, observables=obs)
        s0, s1 = s1, s0
    return model, solver, contacts, obs, s0, K


def test_contact_f_rows_carry_the_weight_on_the_ground_and_match_sap_s_forces(device):
    model, solver, contacts, obs, _, K = _settled(device)
    assert obs.kinds == {K.CONTACT_F, K.BODY_QDD, K.BODY_CONTACT_F, K.WORLD_STATUS}
    n = int(contacts.rigid_contact_count.numpy()[0])
    f = obs.contact_f.numpy()
    assert not f[n:].any() and not f[:n, 3:].any()  # unused rows zero; point contacts have no moment
    shape1 = contacts.rigid_contact_shape1.numpy()[:n]
    shape_world = model.shape_world.numpy()
    mass = model.body_mass.numpy()
    sap_force = solver.solvers[0].read_observables()["contact_force"]
    for w in range(3):
        rows = shape_world[shape1] == w
        total = f[:n][rows, :3].sum(axis=0)  # shape 0 is the ground: the force on it, from world w's box
        assert total[2] == pytest.approx(-mass[w] * G, rel=F32_RTOL)
        # The same forces as sap_gpu's, in Newton's sign (on shape 0's body): row for row summed.
        np.testing.assert_allclose(total, -sap_force[w].sum(axis=0), rtol=0, atol=F32_RTOL * mass[w] * G)
    # BODY_CONTACT_F: the net wrench on each box (f, τ about the COM): its weight, no moment.
    bcf = obs.body_contact_f.numpy()
    np.testing.assert_allclose(bcf[:, :3], np.outer(mass, [0.0, 0.0, G]), rtol=0, atol=F32_RTOL * G)
    assert np.abs(bcf[:, 3:]).max() <= F32_RTOL * G * 0.1
    assert obs.world_status.numpy().tolist() == [int(StepStatus.CONVERGED)] * 3


def test_body_qdd_of_a_falling_box_is_gravity(device):
    model = box_model(device, num_worlds=2, vx=(1.0, 0.0))
    q = model.joint_q.numpy().reshape(2, 7)
    q[:, 2] = 1.0  # high above the ground: free fall
    model.joint_q.assign(q.ravel())
    solver = sap_newton.SolverSAP(model, max_rigid_contact=16, collision="sap")
    obs = solver.observables({solver.ObservableKind.BODY_QDD, solver.ObservableKind.BODY_CONTACT_F})
    s0, s1 = model.state(), model.state()
    solver.step(s0, s1, None, None, DT, observables=obs)
    np.testing.assert_allclose(obs.body_qdd.numpy(), np.tile([0.0, 0.0, -G, 0.0, 0.0, 0.0], (2, 1)), rtol=0,
                               atol=F32_RTOL * G)
    assert not obs.body_contact_f.numpy().any()


def test_contact_f_is_not_offered_with_sap_s_own_collision(device):
    model = box_model(device)
    solver = sap_newton.SolverSAP(model, collision="sap")
    K = solver.ObservableKind
    assert K.CONTACT_F not in solver.supported_observables and K.BODY_CONTACT_F in solver.supported_observables
    with pytest.raises(ValueError, match="contact_f"):
        solver.observables({K.CONTACT_F}, contacts=newton.CollisionPipeline(model).contacts())


def test_reset_follows_newton_s_mask_and_flags_and_leaves_other_worlds_bit_identical(device):
    model = box_model(device, num_worlds=3, vx=(0.5, 1.0, 1.5))
    runs = []
    for do_reset in (False, True):
        solver = sap_newton.SolverSAP(model, max_rigid_contact=16, collision="sap")
        s0, s1 = model.state(), model.state()
        for n in range(40):
            solver.step(s0, s1, None, None, DT)
            s0, s1 = s1, s0
            if do_reset and n == 19:
                before = {k: getattr(s0, k).numpy().copy() for k in ("joint_q", "joint_qd", "body_q", "body_qd")}
                mask = wp.array([False, True, False, False], dtype=wp.bool, device=device)
                solver.reset(s0, mask, newton.StateFlags.JOINT_Q)  # coordinates only
                q, qd = s0.joint_q.numpy().reshape(3, 7), s0.joint_qd.numpy().reshape(3, 6)
                np.testing.assert_array_equal(q[1], model.joint_q.numpy().reshape(3, 7)[1])
                np.testing.assert_array_equal(qd, before["joint_qd"].reshape(3, 6))  # JOINT_QD not asked
                np.testing.assert_array_equal(q[[0, 2]], before["joint_q"].reshape(3, 7)[[0, 2]])
                np.testing.assert_array_equal(s0.body_q.numpy(), before["body_q"])  # BODY_Q not asked
                assert solver.diagnostics()["status"].tolist() == [1, 0, 1]  # world 1's solver state cleared
        runs.append((s0.joint_q.numpy().reshape(3, 7), s0.joint_qd.numpy().reshape(3, 6)))
    (q_a, qd_a), (q_b, qd_b) = runs
    for w in (0, 2):
        assert np.array_equal(q_a[w], q_b[w]) and np.array_equal(qd_a[w], qd_b[w]), f"world {w}"
    assert not np.array_equal(q_a[1], q_b[1])


def test_reset_with_all_flags_restores_the_model_state_of_the_selected_worlds(device):
    model = box_model(device, num_worlds=2, vx=(1.0, -1.0))
    solver = sap_newton.SolverSAP(model, max_rigid_contact=16, collision="sap")
    s0, s1 = model.state(), model.state()
    for _ in range(10):
        solver.step(s0, s1, None, None, DT)
        s0, s1 = s1, s0
    s0.body_f.assign(np.ones((2, 6), np.float32))
    other = {k: getattr(s0, k).numpy().copy() for k in ("joint_q", "joint_qd", "body_q", "body_qd", "body_f")}
    solver.reset(s0, wp.array([True, False, False], dtype=wp.bool, device=device))  # flags None: all
    fresh = model.state()  # the model's defaults, bodies by forward kinematics (box_model edits joint_qd)
    newton.eval_fk(model, model.joint_q, model.joint_qd, fresh)
    for k in ("joint_q", "joint_qd", "body_q", "body_qd"):
        a, init = getattr(s0, k).numpy(), getattr(fresh, k).numpy()
        n = a.shape[0] // 2
        np.testing.assert_allclose(a[:n], init[:n], rtol=0, atol=1e-7, err_msg=k)  # FK in float32
        np.testing.assert_array_equal(a[n:], other[k][n:], err_msg=k)
    assert not s0.body_f.numpy()[0].any() and np.array_equal(s0.body_f.numpy()[1], other["body_f"][1])
    solver.reset(s0)  # None: every world
    np.testing.assert_array_equal(s0.joint_q.numpy(), model.joint_q.numpy())


def test_a_failing_world_shows_on_the_device_flags_until_its_reset(device):
    model = box_model(device, num_worlds=3, vx=(0.0, 0.0, 0.0))
    solver = sap_newton.SolverSAP(model, max_rigid_contact=16, collision="sap")
    obs = solver.observables({solver.ObservableKind.WORLD_STATUS})
    s0, s1, control = model.state(), model.state(), model.control()
    f = control.joint_f.numpy()
    f[6] = np.nan  # world 1's first DOF
    control.joint_f.assign(f)
    solver.step(s0, s1, control, None, DT, observables=obs)
    status = solver.world_status.numpy()
    assert status[1] & StepStatus.NON_FINITE and not (status[[0, 2]] & StepStatus.NON_FINITE).any()
    assert np.array_equal(obs.world_status.numpy(), status)
    assert solver.world_failed.numpy().tolist() == [0, 1, 0] and solver.any_failed.numpy()[0] == 1
    assert solver.diagnostics()["failed"].tolist() == [0, 1, 0]
    solver.reset(s1, wp.array([False, True, False, False], dtype=wp.bool, device=device), newton.StateFlags.NONE)
    assert solver.world_failed.numpy().tolist() == [0, 0, 0] and solver.any_failed.numpy()[0] == 0


def test_bad_reset_and_notify_arguments_are_named(device):
    model = box_model(device, num_worlds=2)
    solver = sap_newton.SolverSAP(model, collision="sap")
    state = model.state()
    with pytest.raises(ValueError, match=r"world_mask: expected Newton's mask, a wp.bool array shaped \(3,\)"):
        solver.reset(state, wp.ones(2, dtype=wp.bool, device=device))
    with pytest.raises(ValueError, match="world_mask"):
        solver.reset(state, wp.ones(3, dtype=wp.int32, device=device))
    with pytest.raises(ValueError, match="state: required"):
        solver.reset(None)
    with pytest.raises(ValueError, match="flags"):
        solver.reset(state, None, -1)
    with pytest.raises(ValueError, match=r"flags: 12345 sets bits that are not newton.StateFlags bits \(0x3000\); "
                                         r"valid: JOINT_Q \(1\), JOINT_QD \(2\)"):
        solver.reset(state, None, 12345)
    with pytest.raises(ValueError, match=r"flags: 16384 sets bits that are not newton.ModelFlags bits \(0x4000\)"):
        solver.notify_model_changed(1 << 14)
    with pytest.raises(ValueError, match="flags: expected newton.ModelFlags"):
        solver.notify_model_changed("shapes")


def test_notify_model_changed_copies_parameters_in_place_and_rebuilds_for_topology(device):
    F = newton.ModelFlags
    assert sap_newton.solver.PARAMETER_MODEL_FLAGS & sap_newton.solver.TOPOLOGY_MODEL_FLAGS == 0
    assert sap_newton.solver.PARAMETER_MODEL_FLAGS | sap_newton.solver.TOPOLOGY_MODEL_FLAGS == \
        sap_newton.solver.CACHED_MODEL_FLAGS
    model = box_model(device)
    solver = sap_newton.SolverSAP(model)
    world_status, kept = solver.world_status, solver.solvers[0]
    solver.notify_model_changed(F.ACTUATOR_PROPERTIES | F.TENDON_PROPERTIES)
    assert solver.solvers[0] is kept  # nothing SAP reads changed: no work
    for flags in (F.BODY_INERTIAL_PROPERTIES, F.JOINT_DOF_PROPERTIES, F.JOINT_DOF_FORCE_PROPERTIES,
                  F.JOINT_DOF_INERTIAL_PROPERTIES, F.SHAPE_PROPERTIES, F.MODEL_PROPERTIES,
                  sap_newton.solver.PARAMETER_MODEL_FLAGS):
        solver.notify_model_changed(flags)
        assert solver.solvers[0] is kept, flags  # parameter values: copied into the same arrays
    for flags in (F.JOINT_PROPERTIES, F.BODY_PROPERTIES, F.JOINT_REFERENCE_POSE_PROPERTIES,
                  F.SHAPE_TYPE_AND_SOURCE, F.CONSTRAINT_PROPERTIES,  # mimic coefficients are couplers
                  F.SHAPE_PROPERTIES | F.JOINT_PROPERTIES):
        solver.notify_model_changed(flags)
        assert solver.solvers[0] is not kept and solver.world_status is world_status, flags  # rebuilt; status kept
        kept = solver.solvers[0]
    solver = sap_newton.SolverSAP(model, collision="sap")
    kept = solver.solvers[0]
    solver.notify_model_changed(F.BODY_INERTIAL_PROPERTIES)
    assert solver.solvers[0] is kept
    solver.notify_model_changed(F.SHAPE_PROPERTIES)  # its pipeline combines the materials of equal worlds once
    assert solver.solvers[0] is not kept
    solver = sap_newton.SolverSAP(model, per_world_parameters=False)
    kept = solver.solvers[0]
    solver.notify_model_changed(F.BODY_INERTIAL_PROPERTIES)
    assert solver.solvers[0] is not kept  # one solver per distinct world: a change always rebuilds


def test_a_parameter_notify_reads_back_one_flag(device, monkeypatch):
    """The in-place path launches kernels and reads back one device flag (whether a rebuild is
    needed); with BODY_INERTIAL_PROPERTIES also the new masses and inertias (NumPy inverts them)."""
    F = newton.ModelFlags
    model = box_model(device, num_worlds=2)
    solver = sap_newton.SolverSAP(model, max_rigid_contact=16)
    solver.notify_model_changed(sap_newton.solver.PARAMETER_MODEL_FLAGS)  # loads the kernels
    kept, copied = solver.solvers[0], []
    original = wp.array.numpy

    def counting_numpy(self):
        copied.append((self.dtype, tuple(self.shape)))
        return original(self)

    monkeypatch.setattr(wp.array, "numpy", counting_numpy)
    solver.notify_model_changed(F.JOINT_DOF_PROPERTIES | F.SHAPE_PROPERTIES | F.MODEL_PROPERTIES)
    assert copied == [(wp.int32, (1,))]
    copied.clear()
    solver.notify_model_changed(F.BODY_INERTIAL_PROPERTIES)
    monkeypatch.undo()
    assert copied == [(wp.int32, (1,)), (wp.float64, (2, 1)), (wp.mat33d, (2, 1))]
    assert solver.solvers[0] is kept


def test_reset_and_observables_allocate_nothing_and_copy_nothing_to_the_host(device, monkeypatch):
    model, solver, contacts, obs, state, K = _settled(device, num_worlds=2, steps=2)
    pipeline = newton.CollisionPipeline(model)
    mask = wp.array([True, False, False], dtype=wp.bool, device=device)
    other = model.state()
    solver.reset(state, mask)  # first call loads the kernels
    made, copied = [], []
    original_init, original_numpy = wp.array.__init__, wp.array.numpy

    def counting_init(self, *args, **kwargs):
        made.append(kwargs.get("shape"))
        original_init(self, *args, **kwargs)

    def counting_numpy(self):
        copied.append(self.shape)
        return original_numpy(self)

    pipeline.collide(state, contacts)  # Newton's pipeline is not under test
    monkeypatch.setattr(wp.array, "__init__", counting_init)
    monkeypatch.setattr(wp.array, "numpy", counting_numpy)
    solver.step(state, other, None, contacts, DT, observables=obs)
    solver.reset(other, mask)
    solver.reset(other, None, newton.StateFlags.JOINT)
    monkeypatch.undo()
    assert made == [] and copied == [], f"{len(made)} arrays made, {len(copied)} host copies"


@pytest.mark.gpu
def test_step_reset_and_observables_capture_in_a_cuda_graph(device):
    if not device.is_cuda:
        pytest.skip("CUDA graph capture needs a CUDA device (run with --device cuda:0); on the CPU device the "
                    "same launches run eagerly in the tests above")
    model, solver, contacts, obs, s0, K = _settled(device, num_worlds=3, steps=2, collision="sap")
    s1 = model.state()
    mask = wp.zeros(4, dtype=wp.bool, device=device)
    solver.reset(s0, mask)
    with wp.ScopedCapture(device=device) as capture:
        solver.step(s0, s1, None, None, DT, observables=obs)
        solver.reset(s1, mask)
    mask.assign(np.array([False, True, False, False]))
    wp.capture_launch(capture.graph)
    np.testing.assert_array_equal(s1.joint_q.numpy().reshape(3, 7)[1], model.joint_q.numpy().reshape(3, 7)[1])
    assert solver.world_failed.numpy().tolist() == [0, 0, 0]


@pytest.mark.gpu
def test_a_graph_captured_before_a_parameter_notify_replays_with_the_new_values(device):
    if not device.is_cuda:
        pytest.skip("CUDA graph capture needs a CUDA device (run with --device cuda:0); on the CPU device "
                    "tests/test_newton_solver.py checks that an in-place notify keeps every array")
    F = newton.ModelFlags
    model = box_model(device, num_worlds=3, vx=(0.5, 1.0, 1.5))
    model.body_mass.assign(np.array([1.0, 2.0, 3.0], np.float32))  # per-world parameters
    solver = sap_newton.SolverSAP(model, max_rigid_contact=16, collision="sap")
    s0, s1 = model.state(), model.state()
    solver.step(s0, s1, None, None, DT)  # loads the kernels
    with wp.ScopedCapture(device=device) as capture:
        solver.step(s0, s1, None, None, DT)
    wp.capture_launch(capture.graph)
    before = s1.joint_q.numpy()
    model.body_mass.assign(np.array([2.0, 0.5, 1.5], np.float32))
    gravity = model.gravity.numpy()
    gravity[:3] = ((0.0, 0.0, -5.0), (1.0, 0.0, -9.81), (0.0, -2.0, -12.0))
    model.gravity.assign(gravity)
    solver.notify_model_changed(F.BODY_INERTIAL_PROPERTIES | F.MODEL_PROPERTIES)
    wp.capture_launch(capture.graph)  # the graph captured before the notify
    out = model.state()
    sap_newton.SolverSAP(model, max_rigid_contact=16, collision="sap").step(s0, out, None, None, DT)
    np.testing.assert_array_equal(s1.joint_q.numpy(), out.joint_q.numpy())
    np.testing.assert_array_equal(s1.joint_qd.numpy(), out.joint_qd.numpy())
    assert not np.array_equal(s1.joint_q.numpy(), before)

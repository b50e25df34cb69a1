"""Kinematic bodies (SapModel.body_kinematic): the model's checks, sap_ref's step, sap_gpu against it.

A conveyor belt (a thin box, kinematic, moving at BELT_SPEED along x on a prismatic or a FREE
joint) carries a box resting on it: friction accelerates the box to the belt's speed, the
momentum of the box balances gravity and the contact impulses, and the belt moves exactly as
prescribed whatever the box pushes (docs/formulation.md § Kinematic bodies).
"""

import json

import numpy as np
import pytest
from conftest import DATA, cooperative_lanes

import sap_gpu
from sap_common import spatial
from sap_common.builder import ModelBuilder, solid_box_inertia
from sap_common.enums import JointType
from sap_common.io import load_json
from sap_common.io.scene import LoadedScene
from sap_ref.collision import CollisionPipeline
from sap_ref.contact_jacobian import split_kinematic
from sap_ref.contact_solve import evaluate
from sap_ref.integration import integrate_positions
from sap_ref.solver import SolverSAP
from sap_tools.compare_backends import with_device_setup
from sap_tools.record.spec import scene_to_spec
from sap_tools.tolerances import TOL

BELT_SPEED = 0.5  # [m/s] along x
DT = 1e-3  # [s]
STEPS = 300  # 0.3 s: friction (μg = 4.9 m/s²) reaches the belt's speed after ~0.1 s, then it sticks
# After sticking, the box's COM velocity approaches the belt's geometrically (the regularized
# friction's stiction creep and the box's rocking, both decaying); observed |v_x − 0.5| after 300
# steps: 2.3e-10 m/s (drake), 1.4e-9 m/s (approx32), the same on both joints. 1e-6 m/s is 0.0002 %
# of the speed.
BELT_SPEED_TOL = 1e-6
# Δp − h·m·g − Σγ − ∇ℓ of the box's linear DOFs over one step: at the returned v the SAP
# gradient is ∇ℓ = A(v − v*) − Jᵀγ, whose linear rows for a body with its COM at its origin are
# exactly this balance; what is left is rounding: observed 1.1e-16 N·s for |Δp| up to 0.63 N·s.
MOMENTUM_ROUNDOFF = 1e-15  # [N·s]
# |∇ℓ| of those rows, the momentum the Newton loop leaves unbalanced when run to a relative
# optimality tolerance of 1e-14 (EXACT_SOLVE; its scale ‖D̃Av‖, ‖D̃Jᵀγ‖ is ~1–10): observed 7.7e-14 N·s.
RESIDUAL_MOMENTUM_TOL = 1e-12  # [N·s]
EXACT_SOLVE = dict(line_search_variant="exact_root", optimality_rel_tol=1e-14, optimality_abs_tol=0.0)


def belt_model(joint: str = "prismatic", num_worlds: int = 1, belt_w=(0.0, 0.0, 0.0)):
    """The conveyor: a kinematic belt (10 kg, 2 × 0.6 × 0.04 m, top face at z = 0) and a 2 kg box
    (0.2 × 0.15 × 0.1 m) touching it with 4 corner spheres, at rest."""
    b = ModelBuilder()
    belt = b.add_body(10.0, inertia=solid_box_inertia(10.0, 1.0, 0.3, 0.02), name="belt", kinematic=True)
    if joint == "prismatic":
        b.add_joint_prismatic(-1, belt, spatial.transform((0, 0, -0.02)), axis=(1, 0, 0), qd0=(BELT_SPEED,),
                              name="belt")
    else:
        b.add_joint_free(-1, belt, q0=(0, 0, -0.02, 0, 0, 0, 1), qd0=(BELT_SPEED, 0, 0, *belt_w), name="belt")
    b.add_shape_box(belt, hx=1.0, hy=0.3, hz=0.02, mu=0.5, ke=1e7, tau=0.01, name="belt")
    b.add_ground_plane(-0.5, mu=0.5, name="ground")  # below the belt: the belt–ground pair is dropped
    hx, hy, hz, r = 0.1, 0.075, 0.05, 0.005
    box = b.add_body(2.0, inertia=solid_box_inertia(2.0, hx, hy, hz), name="box")
    b.add_joint_free(-1, box, q0=(0, 0, hz + r, 0, 0, 0, 1), name="box")
    for sx in (-1, 1):
        for sy in (-1, 1):
            b.add_shape_sphere(box, spatial.transform((sx * hx, sy * hy, -hz)), radius=r, mu=0.5, ke=1e7, tau=0.0)
    return b.replicate(num_worlds).finalize()


def _run(model, steps, preset="drake", each=None, **overrides):
    solver = SolverSAP(model, max_rigid_contact=8, contact_preset_variant=preset, **overrides)
    pipe = CollisionPipeline(model, 8, solver.config)
    contacts, state, control = pipe.contacts(), model.state(), model.control()
    for _ in range(steps):
        pipe.collide(state, contacts)
        before = {f: np.array(getattr(state, f)) for f in ("joint_q", "joint_qd", "body_qd")}
        solver.step(state, state, control, contacts, DT)
        if each is not None:
            each(model, solver, before, state)
    return state


def _run_gpu(model, steps, host_state=None):
    """``_run`` on sap_gpu (the CPU device, default configuration): the final device state."""
    gpu = sap_gpu.SolverSAP(model, max_rigid_contact=8, device="cpu")
    pipe = sap_gpu.CollisionPipeline(model, 8, gpu.config, device="cpu")
    contacts = pipe.contacts()
    state = sap_gpu.to_device(model.state() if host_state is None else host_state, "cpu")
    control = sap_gpu.to_device(model.control(), "cpu")
    for _ in range(steps):
        pipe.collide(state, contacts)
        gpu.step(state, state, control, contacts, DT)
    return state


# ----------------------------------------------------------------------------- the model


def test_model_flags_and_pairs():
    m = belt_model()
    assert "PRISMATIC world -> belt (q 0:1, qd 0:1) kinematic" in m.summary()
    assert m.body_kinematic.tolist() == [True, False]
    assert m.dof_kinematic.tolist() == [True] + [False] * 6
    names = {tuple(m.shape_name[s] for s in p) for p in m.shape_pair}
    assert ("ground", "belt") not in names and ("belt", "ground") not in names  # kinematic–world: dropped
    assert len(m.shape_pair) == 4 + 4  # each corner sphere with the belt and with the ground
    default = m.replace(body_kinematic=None)
    assert not default.body_kinematic.any() and len(default.shape_pair) == 9  # now the belt meets the ground


def test_kinematic_tree_must_be_whole_and_rooted_at_the_world():
    b = ModelBuilder()
    arm = b.add_body(1.0, inertia=(0.1, 0.1, 0.1), name="arm", kinematic=True)
    b.add_joint_revolute(-1, arm, axis=(0, 0, 1), name="shoulder")
    hand = b.add_body(1.0, inertia=(0.1, 0.1, 0.1), name="hand")
    b.add_joint_revolute(arm, hand, axis=(0, 0, 1), name="wrist")
    with pytest.raises(ValueError, match=r"body_kinematic\[0\] \(arm\): body 'hand' of the same kinematic tree "
                                         r"is dynamic"):
        b.finalize()
    b = ModelBuilder()
    arm = b.add_body(1.0, inertia=(0.1, 0.1, 0.1), name="arm")
    b.add_joint_revolute(-1, arm, axis=(0, 0, 1), name="shoulder")
    hand = b.add_body(1.0, inertia=(0.1, 0.1, 0.1), name="hand", kinematic=True)
    b.add_joint_distance(arm, hand, name="hand")
    with pytest.raises(ValueError, match=r"body_kinematic\[1\] \(hand\): the root joint 'hand' of its tree has "
                                         r"body 'arm' as parent"):
        b.finalize()


def test_bad_flags_are_refused():
    m = belt_model()
    with pytest.raises(ValueError, match=r"body_kinematic: expected 2 booleans"):
        m.replace(body_kinematic=[True])
    with pytest.raises(ValueError, match=r"body_kinematic: expected booleans \(0 or 1 when integers\)"):
        m.replace(body_kinematic=[2, 0])
    with pytest.raises(ValueError, match=r"kinematic must be True or False, got 'yes'"):
        ModelBuilder().add_body(1.0, inertia=(1, 1, 1), kinematic="yes")


def test_constraints_on_kinematic_bodies_are_refused():
    b = ModelBuilder()
    belt = b.add_body(1.0, inertia=(0.1, 0.1, 0.1), name="belt", kinematic=True)
    b.add_joint_prismatic(-1, belt, axis=(1, 0, 0), name="belt")
    box = b.add_body(1.0, inertia=(0.1, 0.1, 0.1), name="box")
    b.add_joint_prismatic(-1, box, axis=(1, 0, 0), name="slider")
    b.add_ball(belt, (0, 0, 0), box, (0, 0, 0.1), name="tie")
    with pytest.raises(ValueError, match=r"constraint_body_a\[0\] \(tie\): body 'belt' is kinematic"):
        b.finalize()
    b._constraints.clear()
    b.add_coupler(0, 1, name="gear")
    with pytest.raises(ValueError, match=r"constraint_joint0\[0\] \(gear\): joint 'belt' moves the kinematic body"):
        b.finalize()


def test_json_scene_reads_the_flag():
    spec = json.loads((DATA / "drake" / "pendulum_limit.json").read_text())
    assert load_json(spec).sap_model.body_kinematic.tolist() == [False]
    spec["bodies"][1]["kinematic"] = True
    assert load_json(spec).sap_model.body_kinematic.tolist() == [True]
    spec["bodies"][1]["kinematic"] = "yes"
    with pytest.raises(ValueError, match=r"bodies\[1\]\.kinematic: expected true or false"):
        load_json(spec)


def test_drake_recorder_refuses_kinematic_bodies():
    m = belt_model()
    scene = LoadedScene(name="belt", sap_model=m, state=m.state(), control=m.control(), dt=DT, num_steps=10,
                        max_rigid_contact=8)
    with pytest.raises(ValueError, match=r"scene 'belt': body 'belt': kinematic body has no Drake counterpart"):
        scene_to_spec(scene)


@pytest.mark.parametrize("backend", ["sap_ref", "sap_gpu"])
def test_hunt_crossley_refuses_kinematic_bodies(backend):
    solver = SolverSAP if backend == "sap_ref" else sap_gpu.SolverSAP
    with pytest.raises(ValueError, match=r"body_kinematic\[0\] \(belt\): kinematic bodies are solved with "
                                         r"discrete_contact_approximation 'sap' only"):
        solver(belt_model(), max_rigid_contact=8, discrete_contact_approximation="lagged")


# ----------------------------------------------------------------------------- the step


@pytest.mark.parametrize("preset", ["drake", "approx32"])
@pytest.mark.parametrize("joint", ["prismatic", "free"])
def test_box_reaches_belt_speed(joint, preset):
    """Friction accelerates the box from rest to the belt's speed, then it rides along."""
    m = belt_model(joint)
    state = _run(m, STEPS, preset)
    box = m.body_index("box")
    v_box = state.body_qd[0, box, :3]
    assert abs(v_box[0] - BELT_SPEED) < BELT_SPEED_TOL, v_box
    assert abs(v_box[1]) < BELT_SPEED_TOL


# The relative motion of the two runs below differs by the rounding of 0.5 + x against x:
# observed 1.7e-16 m/s over 60 steps.
GALILEAN_TOL = 1e-14  # [m/s]


def test_moving_belt_is_a_resting_belt_seen_from_a_moving_frame():
    """A box at rest on a belt moving at +0.5 m/s moves relative to the belt exactly as a box
    sliding at −0.5 m/s on a belt at rest (the same SAP problem in the belt's frame): including the
    hop of the convex approximation's sliding contact in the first steps."""
    def box_velocities(model):
        out = []
        _run(model, 60, each=lambda m_, s_, b_, st: out.append(st.body_qd[0, m_.body_index("box"), :3].copy()))
        return np.array(out)

    moving = box_velocities(belt_model()) - [BELT_SPEED, 0.0, 0.0]
    resting_model = belt_model().replace(joint_qd_init=np.r_[0.0, -BELT_SPEED, 0.0, 0.0, 0.0, 0.0, 0.0])
    resting = box_velocities(resting_model)
    assert np.abs(moving - resting).max() < GALILEAN_TOL
    assert resting[0, 2] > 0.1  # the box hops off in both (vz = 0.19 m/s after one step)


def test_momentum_balance_and_prescribed_belt():
    """Each step: the box's Δp = h·m·g + Σ contact impulses (the belt's infinite mass takes the
    reaction), up to the solver's residual ∇ℓ and rounding; the belt's velocity is exactly the
    prescribed one and its pose moved by h·v."""
    balance, residual = [], []

    def check(model, solver, before, state):
        box, belt = model.body_index("box"), model.body_index("belt")
        r = solver.last_results[0]
        dp = model.body_mass[box] * (state.body_qd[0, box, :3] - before["body_qd"][0, box, :3])
        impulse = model.body_mass[box] * model.gravity * DT
        grad = np.zeros(3)
        if len(r.contacts.phi0):
            assert set(r.contacts.body0.tolist()) | set(r.contacts.body1.tolist()) == {belt, box}
            sign = np.where(r.contacts.body1 == box, 1.0, -1.0)
            impulse = impulse + (sign[:, None] * r.contact_impulses_W).sum(axis=0)
            assert model.dof_kinematic[0] and 0 not in r.problem.dofs  # the belt's DOF is no unknown
            linear = model.joint_qd_start[model.body_joint[box]] + 3  # SAP order [ω, v_O]
            grad = np.asarray(r.solve.evaluation.grad, np.float64)[np.searchsorted(r.problem.dofs,
                                                                                   np.arange(linear, linear + 3))]
        balance.append(np.abs(dp - impulse - grad).max())
        residual.append(np.abs(grad).max())
        assert state.joint_qd[0, 0] == BELT_SPEED  # exactly as prescribed
        assert state.joint_q[0, 0] == before["joint_q"][0, 0] + DT * BELT_SPEED
        np.testing.assert_array_equal(state.body_qd[0, belt], [BELT_SPEED, 0, 0, 0, 0, 0])

    _run(belt_model(), 150, each=check, **EXACT_SOLVE)
    assert max(balance) < MOMENTUM_ROUNDOFF, max(balance)
    assert max(residual) < RESIDUAL_MOMENTUM_TOL, max(residual)


def test_free_belt_pose_follows_its_velocity():
    """A spinning FREE kinematic belt (COM at its origin, so its public [v_C, ω] is its twist):
    v₁ = v₀ bit for bit, q₁ by the integrator from v₀ = v₁, whatever the box does on it."""
    m = belt_model("free", belt_w=(0.0, 0.0, 0.3))
    belt_v, belt_q = m.joint_qd_slice(0), m.joint_q_slice(0)

    def check(model, solver, before, state):
        np.testing.assert_array_equal(state.joint_qd[0, belt_v], before["joint_qd"][0, belt_v])
        r = solver.last_results[0]
        q0 = before["joint_q"][0]
        v_sap = r.v1  # SAP order; the belt's part is v₀
        expect = integrate_positions(model, q0, v_sap, v_sap, DT, solver.config.position_integration)
        np.testing.assert_array_equal(state.joint_q[0, belt_q], expect[belt_q])

    state = _run(m, 40, each=check)
    assert JointType(int(m.joint_type[0])) == JointType.FREE
    assert state.joint_q[0, 0] > 0.0195  # moved 40 steps along x (0.02 m at the belt's speed)


@pytest.mark.parametrize("backend", ["sap_ref", "sap_gpu"])
def test_a_kinematic_body_s_mass_does_not_matter(backend):
    """The belt at 10 kg or massless (0 kg, zero inertia: its block of A is the identity either way):
    the same steps, bit for bit."""
    heavy = belt_model()
    light = heavy.replace(body_mass=[0.0, 2.0], body_inertia=np.stack([np.zeros((3, 3)), heavy.body_inertia[1]]))
    assert light.body_mass[0] == 0.0
    finals = []
    for m in (heavy, light):
        if backend == "sap_ref":
            finals.append(_run(m, 40).joint_qd.copy())
            continue
        finals.append(_run_gpu(m, 40).joint_qd.numpy())
    np.testing.assert_array_equal(finals[0], finals[1])
    assert finals[0][0, 0] == BELT_SPEED and finals[0][0, 1] > 0.05  # the belt carries the box along


def test_the_kinematic_kernels_are_not_the_dynamic_model_s():
    """sap_gpu builds the Newton kernels of a kinematic model as a variant of their own: built after
    a model without kinematic bodies on the same configuration, the belt still carries the box (the
    fused kernel's cache key once left the variant out, and the second model reused the first's
    kernel, whose cone never reads J_kin v₀: the box stood still)."""
    belt = belt_model()
    dynamic = belt.replace(body_kinematic=[False, False])
    for m in (dynamic, belt):  # the dynamic model's kernels first, as another test of the run may build them
        gpu = sap_gpu.SolverSAP(m, max_rigid_contact=8, device="cpu")
        assert gpu.plan.kinematic == bool(m.body_kinematic.any())
    qd = _run_gpu(belt, 40).joint_qd.numpy()
    assert qd[0, 0] == BELT_SPEED and qd[0, 1] > 0.05  # the belt carries the box along


def test_gravity_drives_and_limits_do_not_move_a_kinematic_body():
    """A kinematic slider along z under gravity, with a drive and a limit it runs past: its
    velocity stays the prescribed −0.2 m/s."""
    b = ModelBuilder()
    lift = b.add_body(1.0, inertia=(0.1, 0.1, 0.1), name="lift", kinematic=True)
    b.add_joint_prismatic(-1, lift, axis=(0, 0, 1), qd0=(-0.2,), target_ke=100.0, target_kd=10.0,
                          limit_lower=0.0, limit_upper=1.0, name="lift")
    ball = b.add_body(1.0, inertia=(0.1, 0.1, 0.1), name="ball")
    b.add_joint_free(-1, ball, q0=(0, 0, 2, 0, 0, 0, 1), name="ball")
    b.add_shape_sphere(ball, radius=0.1)
    m = b.finalize()
    solver = SolverSAP(m, max_rigid_contact=4, contact_preset_variant="drake")
    state, control = m.state(), m.control()
    control.joint_target_pos[0, 0] = 0.5
    control.joint_act[0, 0] = 50.0
    for _ in range(20):
        solver.step(state, state, control, None, DT)
        assert state.joint_qd[0, 0] == -0.2
        r = solver.last_results[0]
        assert len(r.limits.g0) == 0 and len(r.drives.dof) == 0
    assert state.joint_q[0, 0] == pytest.approx(-0.2 * 20 * DT, rel=1e-12)
    assert state.joint_qd[0, 3] == pytest.approx(-9.81 * 20 * DT, rel=1e-12)  # the ball falls freely


# ----------------------------------------------------------------------------- sap_gpu against sap_ref

GPU_STEPS = 120  # the box lands, slides, hops (the convex approximation's gliding) and sticks
GPU_EVERY = 6  # compared from sap_ref's state every 6th step (each a device step from identical inputs)


@pytest.mark.parametrize("newton_path, linear_solver", [("staged", "cholesky"), ("fused", "cholesky"),
                                                        ("staged", "pcr")])
@pytest.mark.parametrize("preset, joint", [("drake", "free"), ("approx32", "prismatic"), ("approx64", "free")])
def test_sap_gpu_matches_sap_ref(preset, joint, newton_path, linear_solver):
    """From sap_ref's state, sap_gpu's step agrees stage by stage (tests/test_gpu_stages.py's bars):
    v*, J_dyn, J_kin v₀, w, R, v̂ₙ; its v₁ is as close to sap_ref's as the two residuals allow
    (‖Δv‖_A ≤ ‖∇ℓ‖_A⁻¹ of each, on the problem with the device's inputs); the belt's velocity is v₀
    and its pose the same."""
    m = belt_model(joint, belt_w=(0.0, 0.0, 0.3) if joint == "free" else (0.0, 0.0, 0.0))
    kw = dict(max_rigid_contact=8, contact_preset_variant=preset, newton_path=newton_path,
              contact_linear_solver=linear_solver)
    ref, gpu = SolverSAP(m, **kw), sap_gpu.SolverSAP(m, device="cpu", **kw)
    cfg = ref.config
    pipe = CollisionPipeline(m, 8, cfg)
    contacts, state, control = pipe.contacts(), m.state(), m.control()
    jtol = TOL["fp64"] if cfg.use_f64_boundary_pose else TOL["fp32_pose"]
    wtol = TOL["fp64"] if cfg.sap_contact_weight_precision == "fp64" else TOL["fp32_weights"]
    compared_contacts = 0
    for step in range(GPU_STEPS):
        pipe.collide(state, contacts)
        if step % GPU_EVERY:
            ref.step(state, state, control, contacts, DT)
            continue
        out = sap_gpu.to_device(state, "cpu")
        with cooperative_lanes(newton_path == "fused"):
            gpu.step(sap_gpu.to_device(state, "cpu"), out, sap_gpu.to_device(control, "cpu"),
                     sap_gpu.to_device(contacts, "cpu"), DT)
        before = state.copy()
        ref.step(state, state, control, contacts, DT)
        r, w = ref.last_results[0], gpu.work
        assert gpu.diagnostics()["status"][0] == r.status == 1
        v0 = r.free_motion.v_star.copy()  # v* = v₀ on the belt's DOFs
        kin, nv = m.dof_kinematic, m.joint_dof_count
        np.testing.assert_array_equal(w.v_star.numpy()[0, kin], v0[kin])
        np.testing.assert_allclose(w.A.numpy()[0, :nv, :nv], r.free_motion.A, rtol=0, atol=TOL["fp64"])
        np.testing.assert_array_equal(r.free_motion.A[np.ix_(kin, kin)], np.eye(kin.sum()))
        if cfg.free_motion_solve_precision == "fp64":
            np.testing.assert_allclose(w.v_star.numpy()[0], r.free_motion.v_star, rtol=0, atol=TOL["fp64"])
        C = int(contacts.count[0])
        if C:
            compared_contacts += 1
            J_dyn, vc_kin = split_kinematic(m, r.contacts.J, v0)
            np.testing.assert_allclose(w.contact_J.numpy()[0, :3 * C], J_dyn.reshape(3 * C, -1), rtol=0, atol=jtol)
            scale = np.abs(r.contacts.J[:, :, kin]) @ np.abs(v0[kin])
            assert np.all(np.abs(w.contact_vc_kin.numpy()[0, :C] - vc_kin) <= jtol * np.maximum(scale, 1.0))
            np.testing.assert_allclose(w.contact_w.numpy()[0, :C], r.w, rtol=wtol)
            np.testing.assert_allclose(w.contact_R.numpy()[0, :C], r.R, rtol=wtol)
            np.testing.assert_allclose(w.contact_v_hat.numpy()[0, :C], r.v_hat[:, 2], rtol=0, atol=wtol)
        # v₁: both minimize the same strongly convex ℓ to their tolerances (tests/test_gpu_stages.py).
        dofs = r.problem.dofs
        v_gpu = w.v1.numpy()[0]
        np.testing.assert_array_equal(v_gpu[kin], v0[kin])
        if len(dofs):
            p = with_device_setup(r.problem, gpu, C)
            ev, ev_ref = evaluate(p, v_gpu[dofs]), evaluate(p, r.v1[dofs])
            A = np.asarray(p.A, np.float64)
            a_inv = lambda g: float(np.sqrt(max(g @ np.linalg.solve(A, g), 0.0)))  # noqa: E731
            dv = (v_gpu - r.v1)[dofs]
            bound = a_inv(np.asarray(ev.grad, np.float64)) + a_inv(np.asarray(ev_ref.grad, np.float64))
            v_scale = float(np.sqrt(r.v1[dofs] @ A @ r.v1[dofs]))
            assert np.sqrt(dv @ A @ dv) <= bound * (1 + 1e-9) + TOL["fp64"] * max(1.0, v_scale), step
        belt_q = m.joint_q_slice(0)
        np.testing.assert_allclose(out.joint_q.numpy()[0, belt_q], state.joint_q[0, belt_q], rtol=0, atol=TOL["fp64"])
        np.testing.assert_array_equal(out.joint_qd.numpy()[0, m.joint_qd_slice(0)],
                                      before.joint_qd[0, m.joint_qd_slice(0)])
    assert compared_contacts >= 5  # steps compared with the box on the belt (6 of 20: it hops between)


def test_sap_gpu_batch_world_equals_its_solo_run():
    """Three worlds whose belts run at 0.5, −0.2 and 0 m/s (the state's joint_qd): each world of the
    batch steps bit for bit as the same world alone."""
    speeds = (0.5, -0.2, 0.0)

    def run(num_worlds, worlds):
        m = belt_model(num_worlds=num_worlds)
        host = m.state()
        host.joint_qd[:, 0] = [speeds[w] for w in worlds]
        state = _run_gpu(m, 30, host)
        return np.concatenate([state.joint_q.numpy(), state.joint_qd.numpy()], axis=1)

    batch = run(3, (0, 1, 2))
    for w in range(3):
        np.testing.assert_array_equal(batch[w], run(1, (w,))[0])
    assert batch[0, 8] == 0.5 and batch[1, 8] == -0.2 and batch[2, 8] == 0.0  # the belts keep their speeds

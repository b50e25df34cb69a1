"""SAP in Newton against Newton's MuJoCo solver (MuJoCo's C library on the CPU) on the same model.

* Contact-free pendulums: SAP's ``drake`` preset (implicit Euler velocities, q₁ = q₀ + h N v₁,
  implicit joint damping) is the same discrete scheme as MuJoCo's Euler integrator (semi-implicit
  Euler, implicit damping): the float32 states agree to round-off. SAP's ``midpoint`` position
  update (the approx presets) is another first-order scheme: its distance to MuJoCo shrinks
  linearly with dt, and both converge to the exact solution at order 1 (measured by halving dt).
* A box sliding on the ground: the contact models differ (SAP: compliant point contact, k and
  τ_d from Newton's ke, kd, exact Coulomb cone regularized near stiction; MuJoCo: soft
  constraints from solref/solimp with ke, kd read as mass-normalized, pyramidal cone); the test
  states the differences and bounds them (docs/newton.md has the numbers).
* A closed chain: the Newton four-bar, its loop a second parent BALL joint, which SAP closes with
  a near-rigid ball constraint and Newton's MuJoCo solver with a soft ``connect`` equality: both
  keep the loop closed and move the linkage alike, within what their regularizations differ by.
"""

import warnings

import numpy as np
import pytest

newton = pytest.importorskip("newton")
pytest.importorskip("mujoco")
import warp as wp  # noqa: E402
from newton_scenes import fourbar_newton, pendulum_newton  # noqa: E402
from scipy.integrate import solve_ivp  # noqa: E402

import sap_newton  # noqa: E402

G = 9.81
T_END = 0.5  # s of pendulum motion
DTS = (4e-3, 2e-3, 1e-3)
# The drake preset and MuJoCo's Euler run the same arithmetic up to float64 operation order;
# Newton rounds the state to float32 after every step, which absorbs that difference (observed:
# bit-identical states). Bound: a few float32 ulps of the 1-rad, 4-rad/s states, accumulated.
SAME_SCHEME_ATOL = 1e-5
# A first-order error halves with dt: the observed order lies within this of 1 (the next term
# of the error expansion, O(h²), bends the ratio slightly at the largest dt).
ORDER_TOL = 0.15
# Richardson extrapolation 2·x(h/2) − x(h) cancels the O(h) term: what is left is O(h²) (observed
# ≥ 200× below the finest run's error), so it converges to the *exact* solution, not a nearby one.
RICHARDSON_RATIO = 0.01


def _mujoco(model, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Newton's notice that it was built against mujoco 3.17
        return newton.solvers.SolverMuJoCo(model, use_mujoco_cpu=True, **kwargs)


def _run(model, solver, dt, t_end=T_END, contacts=None, record=False):
    s0, s1, control = model.state(), model.state(), model.control()
    traj = []
    for _ in range(int(round(t_end / dt))):
        solver.step(s0, s1, control, contacts, dt)
        s0, s1 = s1, s0
        if record:
            traj.append(np.concatenate([s0.joint_q.numpy(), s0.joint_qd.numpy()]))
    return np.array(traj) if record else np.concatenate([s0.joint_q.numpy(), s0.joint_qd.numpy()])


def _exact_pendulum(q0, t_end=T_END):
    """One rod (mass 1, COM 0.5 m below the hinge, I_yy 0.1 about the COM) swinging about y."""
    inertia = 0.1 + 1.0 * 0.5**2
    f = lambda t, y: [y[1], -1.0 * G * 0.5 * np.sin(y[0]) / inertia]  # noqa: E731
    return solve_ivp(f, (0.0, t_end), [q0, 0.0], rtol=1e-12, atol=1e-12).y[:, -1]


@pytest.mark.parametrize("scene", [dict(links=1), dict(links=2, damping=0.5, armature=0.05)],
                         ids=["pendulum", "damped_double_pendulum"])
@pytest.mark.parametrize("integrator", ["euler", "implicitfast"])
def test_drake_preset_steps_like_mujoco_euler(scene, integrator):
    model = pendulum_newton(**scene)
    sap = sap_newton.SolverSAP(model, contact_preset_variant="drake")
    mujoco = _mujoco(model, integrator=integrator)
    for dt in (4e-3, 1e-3):
        a, b = _run(model, sap, dt), _run(model, mujoco, dt)
        assert np.max(np.abs(a - b)) <= SAME_SCHEME_ATOL, f"dt {dt}: {np.abs(a - b).max()}"
    if scene.get("damping"):  # the damping is really there (both would agree without it too)
        free = pendulum_newton(links=2)
        assert np.max(np.abs(_run(free, sap_newton.SolverSAP(free, contact_preset_variant="drake"), 1e-3)
                             - _run(model, sap, 1e-3))) > 1e-2


def test_midpoint_positions_differ_from_mujoco_at_first_order():
    model = pendulum_newton(links=1, q0=(1.0,))
    exact = _exact_pendulum(1.0)
    sap = sap_newton.SolverSAP(model, contact_preset_variant="approx64")
    mujoco = _mujoco(model, integrator="euler")
    runs = {dt: (_run(model, sap, dt), _run(model, mujoco, dt)) for dt in DTS}
    gap = [np.max(np.abs(a - b)) for a, b in runs.values()]
    err_sap = [np.max(np.abs(a - exact)) for a, _ in runs.values()]
    err_mj = [np.max(np.abs(b - exact)) for _, b in runs.values()]
    for name, e in (("SAP − MuJoCo", gap), ("SAP − exact", err_sap), ("MuJoCo − exact", err_mj)):
        orders = np.log2(np.array(e[:-1]) / np.array(e[1:]))
        print(f"{name}: max |Δ(q, v)| {['%.3e' % x for x in e]} at dt {DTS}; observed order {orders.round(3)}")
        assert np.all(np.abs(orders - 1.0) <= ORDER_TOL), f"{name}: orders {orders}"
    for k, (name, err) in enumerate((("SAP", err_sap), ("MuJoCo", err_mj))):
        rich = 2 * runs[DTS[-1]][k] - runs[DTS[-2]][k]
        rich_err = np.max(np.abs(rich - exact))
        print(f"{name}: Richardson-extrapolated error {rich_err:.2e} (finest run {err[-1]:.2e})")
        assert rich_err <= RICHARDSON_RATIO * err[-1]


def _sliding_box(v0=2.0, mu=0.5, ke=1e5, kd=1e3):
    b = newton.ModelBuilder()
    b.default_shape_cfg.ke, b.default_shape_cfg.kd, b.default_shape_cfg.mu = ke, kd, mu
    b.default_shape_cfg.density = 0.0
    body = b.add_body(mass=1.0, xform=wp.transform((0.0, 0.0, 0.1), wp.quat_identity()),
                      inertia=wp.mat33(np.eye(3) * (2.0 / 3.0 * 0.01)))
    b.add_shape_box(body, hx=0.1, hy=0.1, hz=0.1)
    b.add_ground_plane()
    model = b.finalize(device="cpu")
    qd = model.joint_qd.numpy()
    qd[0] = v0
    model.joint_qd.assign(qd)
    return model


def _slide_metrics(traj, dt):
    x, z, vx = traj[:, 0], traj[:, 2], traj[:, 7]
    stop = int(np.argmax(np.abs(vx) < 0.05))  # first step below 5 cm/s
    return dict(distance=x[-1], stop_time=(stop + 1) * dt, rest_depth=0.1 - z[-1], max_depth=0.1 - z.min(),
                max_tilt=float(np.max(np.linalg.norm(traj[:, 3:6], axis=1))) * 2.0)


def test_sliding_box_against_mujoco_contact():
    """Coulomb says the box stops after v₀²/(2μg) = 0.408 m and v₀/(μg) = 0.408 s."""
    v0, mu, dt = 2.0, 0.5, 2e-3
    model = _sliding_box(v0, mu)
    pipeline = newton.CollisionPipeline(model)
    runs = {
        "sap approx32, Newton contacts": (sap_newton.SolverSAP(model, max_rigid_contact=8), pipeline.contacts()),
        "sap drake, SAP collision": (sap_newton.SolverSAP(model, max_rigid_contact=8, collision="sap",
                                                          contact_preset_variant="drake"), None),
        "mujoco": (_mujoco(model), None),
    }
    metrics = {}
    for name, (solver, contacts) in runs.items():
        if contacts is not None:
            s0, s1, control = model.state(), model.state(), model.control()
            traj = []
            for _ in range(400):
                pipeline.collide(s0, contacts)
                solver.step(s0, s1, control, contacts, dt)
                s0, s1 = s1, s0
                traj.append(np.concatenate([s0.joint_q.numpy(), s0.joint_qd.numpy()]))
            traj = np.array(traj)
        else:
            traj = _run(model, solver, dt, t_end=0.8, record=True)
        metrics[name] = _slide_metrics(traj, dt)
    coulomb_distance, coulomb_time = v0**2 / (2 * mu * G), v0 / (mu * G)
    depth_sap = 1.0 * G / (4 * 1e5 / 2)  # four corners, box and ground springs in series
    print(f"\nCoulomb: distance {coulomb_distance:.4f} m, stop {coulomb_time:.4f} s; SAP rest depth "
          f"m g / Σk = {depth_sap:.2e} m")
    for name, m in metrics.items():
        print(f"{name:32s} " + " ".join(f"{k} {v:.4g}" for k, v in m.items()))
    for name in ("sap approx32, Newton contacts", "sap drake, SAP collision"):
        m = metrics[name]
        assert m["distance"] == pytest.approx(coulomb_distance, rel=0.01)  # regularized stiction only
        assert m["stop_time"] == pytest.approx(coulomb_time, abs=2 * dt + 0.05 / (mu * G))
        assert m["rest_depth"] == pytest.approx(depth_sap, rel=0.05)
    m = metrics["mujoco"]
    # MuJoCo: the same friction law to a few percent (pyramidal cone, soft constraints) ...
    assert m["distance"] == pytest.approx(coulomb_distance, rel=0.05)
    # ... and a contact that is stiff at rest (mass-normalized ke) but sinks further on impact.
    assert m["rest_depth"] < depth_sap and m["max_depth"] > metrics["sap drake, SAP collision"]["max_depth"]


def _closure_gap(model, q) -> float:
    """The largest |g| [m] of ``model``'s constraints at coordinates ``q`` (sap_ref kinematics)."""
    from sap_ref.holonomic import constraint_kinematics
    from sap_ref.kinematics import body_jacobians, forward_kinematics, motion_subspaces

    body_q = forward_kinematics(model, q)
    J_b = body_jacobians(model, q, body_q, motion_subspaces(model, q, body_q))
    return max(float(np.abs(constraint_kinematics(model, k, q, body_q, J_b)[0]).max())
               for k in range(model.constraint_count))


CLOSED_CHAIN_T = 0.4  # s: the four-bar's crank swings 1.6 rad
CLOSED_CHAIN_DT = 2e-3
# SAP's near-rigid ball holds the loop to its compliance R = β²w/(4π²) times the load: measured
# 8.7e-5 m (either loop); the bound is 1/400 of the shortest link (an open loop drifts by links).
SAP_LOOP_GAP = 5e-4
# MuJoCo's connect is a soft constraint (MuJoCo's defaults, which Newton keeps: solref 0.02 s
# critically damped, solimp d from 0.9 to 0.95 over 1 mm): it settles where d·k·r balances
# (1 − d) of the gap's free acceleration a, r ≈ (1 − d)/d · a/k with k = 1/(0.95·0.02 s)² ≈ 2.8e3
# s⁻²: 4e-4 to 1.6e-3 m for a from g to 4g. Measured 4.7e-4 m (ball), 2.8e-4 m (revolute).
MUJOCO_LOOP_GAP = 2e-3
# The soft loop changes the linkage's geometry by about gap/crank = 4.7e-4/0.2 ≈ 2.4e-3 rad and
# the motion drifts by that over the swing. Measured after 0.4 s: 5.5e-3 rad (ball), 8.9e-4 rad
# (revolute); the bound is 1.2 % of the crank's 1.6 rad travel.
CRANK_AGREEMENT = 2e-2
# A free body hung by a connect: MuJoCo's connect carries all of its weight and the swing's
# centripetal load, a = g + v²/L ≈ 27 m/s² at the bottom, r ≈ 1e-3 m by the estimate above, and
# more where the violation leaves solimp's 1 mm width (d falls toward 0.9). Measured 2.9e-3 m.
HOOK_GAP_MUJOCO = 1e-2
# The two runs hold the same point; the bob's positions differ by what the two holds' gaps differ
# by (≤ 2.9e-3 m measured) and its effect on the swing. Measured 7.3e-4 m after 0.4 s.
HOOK_AGREEMENT = 5e-3


def _sap_and_mujoco(model):
    """``(q, gap)``: each solver's ("sap": sap_newton with the drake preset, "mujoco": Newton's
    MuJoCo solver, Euler) SAP-ordered coordinates over CLOSED_CHAIN_T at CLOSED_CHAIN_DT, (N, nq),
    and its largest constraint gap over the run."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        conv = sap_newton.convert_model(model)
    m, coords = conv.sap_model, conv.groups[0].coord_index[0]
    runs = {"sap": sap_newton.SolverSAP(model, contact_preset_variant="drake"),
            "mujoco": _mujoco(model, integrator="euler")}
    qs, gap = {}, {}
    for name, solver in runs.items():
        s0, s1, control = model.state(), model.state(), model.control()
        out = []
        for _ in range(int(round(CLOSED_CHAIN_T / CLOSED_CHAIN_DT))):
            solver.step(s0, s1, control, None, CLOSED_CHAIN_DT)
            s0, s1 = s1, s0
            out.append(s0.joint_q.numpy()[coords].astype(np.float64))
        qs[name] = np.array(out)
        gap[name] = max(_closure_gap(m, q) for q in qs[name])
    return qs, gap

@pytest.mark.parametrize("loop", ["ball", "revolute"])
def test_closed_chain_steps_like_newtons_mujoco_solver(loop):
    """The Newton four-bar (no joint limit: the loop is the only constraint) released at crank
    angle −1 rad, its loop a BALL joint (SAP: a ball; MuJoCo: one connect) or a REVOLUTE one
    (SAP: a ball plus an axis alignment; MuJoCo: two connects along the hinge axis): SAP (drake
    preset) and Newton's MuJoCo solver (Euler, MuJoCo's C library) both keep the loop closed over
    0.4 s, and their crank angles agree to what the two loop regularizations differ by.

    Newton 1.8's MuJoCo solver places a revolute loop joint's connect points on the child from the
    bodies' poses at zero joint coordinates, not from the joint's child frame (a ball loop joint's
    from its child frame): the revolute four-bar is built closed at q = 0 (its hinge frames turned
    by the initial angles), else MuJoCo would hold the loop 0.1 m open."""
    model = fourbar_newton(limit=False, loop=loop, closed_at_zero=loop == "revolute")
    qs, gap = _sap_and_mujoco(model)
    crank = {name: q[:, 0] for name, q in qs.items()}
    diff = np.abs(crank["sap"] - crank["mujoco"])
    print(f"\nloop gap: SAP {gap['sap']:.2e} m, MuJoCo {gap['mujoco']:.2e} m; crank travel "
          f"{crank['sap'][-1] - crank['sap'][0]:.3f} rad (SAP), {crank['mujoco'][-1] - crank['mujoco'][0]:.3f} rad "
          f"(MuJoCo); max |Δcrank| {diff.max():.2e} rad at {CLOSED_CHAIN_DT * (1 + diff.argmax()):.3f} s")
    assert np.ptp(crank["sap"]) > 0.5  # it swung
    assert gap["sap"] <= SAP_LOOP_GAP and gap["mujoco"] <= MUJOCO_LOOP_GAP
    assert diff.max() <= CRANK_AGREEMENT


def test_connect_row_steps_like_newtons_mujoco_solver():
    """A free body hung from the world by a MuJoCo ``connect`` row with no loop joint
    (``newton.solvers.mujoco.add_equality_connect``), released with a sideways push: SAP's ball
    and MuJoCo's connect hold the same point (the gap bounds as for the four-bar) and the body
    swings alike."""
    b = newton.ModelBuilder()
    bob = b.add_link(xform=wp.transform((0.3, 0.0, 1.0), wp.quat_identity()), mass=1.0,
                     inertia=wp.mat33(np.diag([0.01, 0.02, 0.03])))
    b.add_articulation([b.add_joint_free(bob)])
    b.joint_qd[1] = 0.5  # m/s along y
    newton.solvers.mujoco.add_equality_connect(b, bob, -1, anchor=(-0.3, 0.0, 0.0), label="hook")
    model = b.finalize(device="cpu")
    qs, gap = _sap_and_mujoco(model)
    pos = {name: q[:, :3] for name, q in qs.items()}
    diff = np.linalg.norm(pos["sap"] - pos["mujoco"], axis=1)
    print(f"\nhook gap: SAP {gap['sap']:.2e} m, MuJoCo {gap['mujoco']:.2e} m; bob fell "
          f"{1.0 - pos['sap'][-1, 2]:.3f} m; max |Δp| {diff.max():.2e} m")
    assert 1.0 - pos["sap"][-1, 2] > 0.1  # it swung down
    assert gap["sap"] <= SAP_LOOP_GAP and gap["mujoco"] <= HOOK_GAP_MUJOCO
    assert diff.max() <= HOOK_AGREEMENT

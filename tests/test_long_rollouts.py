"""Long rollouts, behind the ``slow`` marker (``pytest -m slow``; docs/testing.md § Markers).

* A three-box stack held for 10,000 steps (20 s): it stays stacked, its energy never rises
  above the release energy and stops changing once it has settled, the boxes stay within
  stated bounds of where they rest, and every step of every world converges. Run by sap_ref
  (the drake preset) and by sap_gpu on the test device (approx32 and drake).
* A large batch of MuJoCo humanoids on sap_gpu, driven by the benchmark's control noise: every
  world-step converges (the benchmark's validity threshold), nothing becomes non-finite, no
  contact is dropped, and worlds given identical inputs stay bit-identical.
* Every step of every Drake recording, one step at a time from the recorded state, on both
  backends: within sap-validate's round-off bar (the default suite checks a subset,
  tests/test_validate.py).
"""

import numpy as np
import pytest
from conftest import DATA, DRAKE_ANCHORS
from test_validate import assert_one_step_passes

import sap_gpu
from sap_common import scenes, spatial
from sap_common.state import StepStatus
from sap_ref.collision import CollisionPipeline
from sap_ref.solver import SolverSAP

pytestmark = pytest.mark.slow

# ---------------------------------------------------------------------------- box stack

STACK_STEPS = 10_000  # 20 s at the scene's h = 2 ms: the stack settles in well under 1 s
# Half of the rollout: by then the stack has been at rest for over 9 s.
SETTLED_FROM = STACK_STEPS // 2
# Horizontal drift of any box from its release position. Settling moves a box by up to 0.2 mm
# (observed); one that slides or topples off moves by centimetres.
XY_DRIFT_TOL = 1e-3  # m
# Horizontal drift over the settled half. Observed ≤ 1e-6 m; a stuck contact creeps only at
# σ·w·|γ_t|, which vanishes without a tangential load.
SETTLED_XY_DRIFT_TOL = 1e-5  # m
# How far a box may sink below its nominal resting height (2i + 1)·h_box while the stack lands:
# observed ≤ 1.1 mm for the top box (compliant contact, k = 5e5 N/m per pair).
SINK_TOL = 2e-3  # m
# Tilt of any box's z axis from the world's. Observed ≤ 1.1e-3 rad; a toppling box exceeds 0.1.
TILT_TOL = 1e-2  # rad
# Energy above the release energy: only round-off may show (float32 stages under approx32).
# A real gain, an unstable contact, is many orders larger.
ENERGY_GAIN_TOL = 1e-7  # J, against E₀ ≈ 2.2 J
# Change of the energy over the settled half (observed ≤ 8e-9 J).
SETTLED_ENERGY_TOL = 1e-7  # J

STACK_RUNS = [("sap_ref", "drake"), ("sap_gpu", "approx32"), ("sap_gpu", "drake")]


def mechanical_energy(model, body_q, body_qd):
    """Kinetic + gravitational energy [J] of every world from body poses and public twists.

    ``body_q (W, B, 7)`` origin poses, ``body_qd (W, B, 6)`` = ``[v_C, ω]`` (world frame).
    """
    R = spatial.quat_to_matrix(body_q[..., 3:])
    com_W = body_q[..., :3] + np.einsum("wbij,bj->wbi", R, model.body_com)
    v, w = body_qd[..., :3], body_qd[..., 3:]
    I_W = np.einsum("wbij,bjk,wblk->wbil", R, model.body_inertia, R)
    kinetic = 0.5 * (model.body_mass * np.sum(v * v, axis=-1) + np.einsum("wbi,wbij,wbj->wb", w, I_W, w))
    potential = -model.body_mass * (com_W @ model.gravity)
    return np.sum(kinetic + potential, axis=1)


def _stack_solver(backend, preset, scene, device):
    m = scene.sap_model
    if backend == "sap_ref":
        solver = SolverSAP(m, max_rigid_contact=scene.max_rigid_contact, contact_preset_variant=preset)
        pipeline = CollisionPipeline(m, scene.max_rigid_contact, solver.config)
        return solver, pipeline, scene.state.copy(), scene.control, lambda s: s
    solver = sap_gpu.SolverSAP(m, max_rigid_contact=scene.max_rigid_contact, contact_preset_variant=preset,
                               device=device)
    pipeline = sap_gpu.CollisionPipeline(m, scene.max_rigid_contact, solver.config, device=device)
    return (solver, pipeline, sap_gpu.to_device(scene.state, device), sap_gpu.to_device(scene.control, device),
            sap_gpu.to_host)


@pytest.mark.parametrize("backend, preset", STACK_RUNS, ids=[f"{b}-{p}" for b, p in STACK_RUNS])
def test_box_stack_stays_stacked_and_never_gains_energy_over_10000_steps(device, backend, preset):
    # sap_ref steps one world at a time (~8 ms each here); sap_gpu gets two identical worlds.
    scene = scenes.get("box_stack", num_worlds=1 if backend == "sap_ref" else 2)
    m = scene.sap_model
    solver, pipeline, state, control, host = _stack_solver(backend, preset, scene, device)
    contacts = pipeline.contacts()
    W, B = m.num_worlds, m.body_count
    half = m.shape_size[[s for s in range(m.shape_count) if m.shape_body[s] == 0][0], 2]
    released = scene.state.body_q.copy()
    energy0 = mechanical_energy(m, released, scene.state.body_qd)
    energy = np.empty((STACK_STEPS, W))
    pos = np.empty((STACK_STEPS, W, B, 3))
    tilt = np.empty((STACK_STEPS, W, B))
    for n in range(STACK_STEPS):
        pipeline.collide(state, contacts)
        solver.step(state, state, control, contacts, scene.dt)
        status = solver.diagnostics()["status"]
        assert np.all(status == StepStatus.CONVERGED), f"step {n + 1}: statuses {StepStatus(int(status.max()))!r}"
        h = host(state)
        energy[n] = mechanical_energy(m, h.body_q, h.body_qd)
        pos[n] = h.body_q[..., :3]
        tilt[n] = np.arccos(np.clip(spatial.quat_to_matrix(h.body_q[..., 3:])[..., 2, 2], -1.0, 1.0))

    rest_z = (2 * np.arange(B) + 1) * half  # boxes of half-size `half` stacked from the ground
    assert np.all(np.isfinite(pos)) and np.all(np.isfinite(energy))
    assert np.abs(pos[..., :2] - released[None, ..., :2]).max() <= XY_DRIFT_TOL
    assert np.abs(pos[SETTLED_FROM:, ..., :2] - pos[SETTLED_FROM, ..., :2]).max() <= SETTLED_XY_DRIFT_TOL
    assert np.all(pos[..., 2] <= released[None, ..., 2]), "a box rose above its release height"
    assert np.all(pos[..., 2] >= rest_z - SINK_TOL), f"lowest z - rest: {(pos[..., 2] - rest_z).min():.3e} m"
    assert np.all(np.diff(pos[-1, :, :, 2], axis=-1) > 2 * half - SINK_TOL), "the boxes are no longer stacked"
    assert tilt.max() <= TILT_TOL
    assert np.max(energy - energy0) <= ENERGY_GAIN_TOL, f"energy gain {np.max(energy - energy0):.3e} J"
    settled = energy[SETTLED_FROM:]
    assert np.ptp(settled, axis=0).max() <= SETTLED_ENERGY_TOL
    if W > 1:  # identical worlds, identical arithmetic
        assert np.array_equal(pos[:, 0], pos[:, 1]) and np.array_equal(energy[:, 0], energy[:, 1])


# ---------------------------------------------------------------------------- humanoid batch

HUMANOID_WORLDS = 512
HUMANOID_STEPS = 300  # 1.5 s at 5 ms: standing, falling and lying on the ground
HUMANOID_GROUPS = 8  # world w gets the inputs of group w % 8: 64 identical worlds per group
INITIAL_VELOCITY_STD = 0.05  # rad/s, m/s: a different start per group


@pytest.mark.parametrize("preset", ["approx32", "drake"])
def test_large_humanoid_batch_converges_and_identical_worlds_stay_bit_identical(device, preset):
    ok, why = scenes.availability("humanoid")
    if not ok:
        pytest.skip(why)
    from sap_tools.benchmark.cli import DEFAULT_NOISE_STD, MIN_CONVERGED_FRACTION, noise_channels

    scene = scenes.get("humanoid", num_worlds=HUMANOID_WORLDS)
    m = scene.sap_model
    cap = scene.max_rigid_contact
    solver = sap_gpu.SolverSAP(m, max_rigid_contact=cap, contact_preset_variant=preset, device=device,
                               **scene.solver_kwargs)
    pipeline = sap_gpu.CollisionPipeline(m, cap, solver.config, device=device)
    contacts = pipeline.contacts()
    group = np.arange(HUMANOID_WORLDS) % HUMANOID_GROUPS
    rng = np.random.default_rng(7)
    start = scene.state.copy()
    start.joint_qd[:] = rng.normal(0.0, INITIAL_VELOCITY_STD, (HUMANOID_GROUPS, m.joint_dof_count))[group]
    state = sap_gpu.to_device(start, device)
    control = sap_gpu.to_device(scene.control, device)
    # The benchmark's inputs: each motor's ctrl ~ N(0, σ), clipped to its range, applied as
    # joint_act = gear·gain·ctrl; drawn per group here so that groups share them exactly.
    ch = noise_channels(scene)
    assert ch.target == "joint_act" and ch.count > 0
    converged = 0
    statuses = np.zeros(HUMANOID_WORLDS, dtype=np.int64)
    most_contacts = 0
    for _ in range(HUMANOID_STEPS):
        u = np.clip(rng.normal(0.0, DEFAULT_NOISE_STD, (HUMANOID_GROUPS, ch.count)), ch.lower, ch.upper)
        act = scene.control.joint_act.copy()
        act[:, ch.dof] += (ch.gain * u)[group]
        control.joint_act.assign(act)
        pipeline.collide(state, contacts)
        solver.step(state, state, control, contacts, scene.dt)
        d = solver.diagnostics()
        converged += int(np.sum(d["status"] == StepStatus.CONVERGED))
        statuses |= d["status"]
        most_contacts = max(most_contacts, int(contacts.count.numpy().max()))
    out = sap_gpu.to_host(state)

    assert converged / (HUMANOID_WORLDS * HUMANOID_STEPS) >= MIN_CONVERGED_FRACTION
    assert not np.any(statuses & (StepStatus.NON_FINITE | StepStatus.CONTACT_OVERFLOW))
    for a in (out.joint_q, out.joint_qd, out.body_q, out.body_qd):
        assert np.all(np.isfinite(a))
    assert 0 < most_contacts <= cap
    firsts = [np.flatnonzero(group == g)[0] for g in range(HUMANOID_GROUPS)]
    for name in ("joint_q", "joint_qd", "body_q", "body_qd"):
        a = getattr(out, name)
        for w in range(HUMANOID_WORLDS):
            assert np.array_equal(a[w], a[firsts[group[w]]]), f"{name}: world {w} differs from its group"
    assert len({out.joint_q[w].tobytes() for w in firsts}) == HUMANOID_GROUPS, "groups with different inputs agree"


# ---------------------------------------------------------------------------- Drake recordings, every step


@pytest.mark.parametrize("backend", ["ref", "gpu"])
@pytest.mark.parametrize("name", [p.stem for p in DRAKE_ANCHORS])
def test_every_step_of_every_drake_recording_passes_one_step_validation(name, backend, device):
    """Every step within the bar; mesh_rock's steps explained by Drake's MPR contact point and within
    the bar with the recording's contact geometry (tests/test_validate.py)."""
    from sap_tools.validate.cli import make_context, one_step

    ctx, _ = make_context(DATA / "drake" / f"{name}.json", backend=backend, device=device)
    assert_one_step_passes(name, one_step(ctx, list(range(ctx.traj.num_steps))))

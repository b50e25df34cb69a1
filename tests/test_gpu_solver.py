"""sap_gpu.SolverSAP end to end: Drake anchors, batch guarantees, statuses and bad input.

The anchors run with the drake preset on the test device (Warp's CPU device in CI) through the
device collision pipeline, under the bounds sap_ref meets (test_ref_solver*.py). The batch tests
assert bit-identity: one thread (or one block) per world, so a world's arithmetic must not depend
on its neighbours, on its index or on the run.
"""

import dataclasses
import json

import numpy as np
import pytest
import warp as wp
from conftest import ANCHOR_LENGTHS, DATA, anchor_steps, cooperative_lanes
from test_ref_solver import CONTACT_FREE_ANCHORS, CONTACT_FREE_POSITION_TOL, CONTACT_FREE_ROTATION_TOL
from test_ref_solver_contact import CONTACT_ANCHORS, CONTACT_POSITION_TOL, CONTACT_ROTATION_TOL

import sap_gpu
import sap_ref
from sap_common import scenes
from sap_common.constants import DEFAULT_NEWTON_PATH, FUSED_AUTO_CHOLESKY, NEWTON_PATHS
from sap_common.io import body_pose_error, load_json, load_recording, recorded_body_indices
from sap_common.state import SapContacts, StepStatus

BATCH_SCENE = "box_stack"  # free bodies, box–box and box–plane contact, several per world
BATCH_STEPS = 8


def _run_anchor(name, device, newton_path, length=None):
    path = DATA / "drake" / f"{name}.json"
    scene = load_json(path)
    rec = load_recording(scene)
    idx = recorded_body_indices(scene, json.loads(path.read_text())["recording"]["bodies"])
    # The fused path factors as a GPU's default does (in the lanes' registers) on every device: the
    # CPU device's default, the tile Cholesky, is the staged path's factorization, which the other
    # parametrization anchors (and tests/test_gpu_fused_newton.py holds the two equal).
    fused = dict(fused_cholesky=FUSED_AUTO_CHOLESKY["cuda"]) if newton_path == "fused" else {}
    solver = sap_gpu.SolverSAP(scene.sap_model, max_rigid_contact=scene.max_rigid_contact, device=device,
                               newton_path=newton_path, **fused, **scene.solver_kwargs)
    pipeline = sap_gpu.CollisionPipeline(scene.sap_model, scene.max_rigid_contact, solver.config, device=device)
    contacts = pipeline.contacts()
    state, control = sap_gpu.to_device(scene.state, device), sap_gpu.to_device(scene.control, device)
    worst_p = worst_r = 0.0
    counts = []
    steps = anchor_steps(scene, length)
    for n in range(1, steps + 1):
        pipeline.collide(state, contacts)
        counts.append(int(contacts.count.numpy()[0]))
        with cooperative_lanes(newton_path == "fused"):
            solver.step(state, state, control, contacts, scene.dt)
        assert solver.diagnostics()["status"][0] == StepStatus.CONVERGED, f"step {n}"
        dp, dr = body_pose_error(state.body_q.numpy()[0, idx], rec["body_pose_W"][n])
        worst_p, worst_r = max(worst_p, dp), max(worst_r, dr)
    if "contact_count" in rec:
        np.testing.assert_array_equal(counts, rec["contact_count"][1:steps + 1])
    return worst_p, worst_r


@pytest.mark.parametrize("length", ANCHOR_LENGTHS)
@pytest.mark.parametrize("newton_path", NEWTON_PATHS)
@pytest.mark.parametrize("name", CONTACT_FREE_ANCHORS + CONTACT_ANCHORS)
def test_drake_preset_reproduces_the_drake_anchors(device, name, newton_path, length):
    """Both Newton paths, the fused one with its 32 cooperative lanes and H factored in their
    registers (a GPU's default)."""
    worst_p, worst_r = _run_anchor(name, device, newton_path, length)
    if name in CONTACT_ANCHORS:
        assert worst_p <= CONTACT_POSITION_TOL and worst_r <= CONTACT_ROTATION_TOL
    else:
        assert worst_p <= CONTACT_FREE_POSITION_TOL and worst_r <= CONTACT_FREE_ROTATION_TOL


# ---------------------------------------------------------------------------- batch guarantees

def _world(obj, w):
    """World ``w`` of a host SapState/SapControl as a one-world object."""
    return dataclasses.replace(obj, **{f.name: getattr(obj, f.name)[w:w + 1].copy() for f in dataclasses.fields(obj)
                                       if isinstance(getattr(obj, f.name), np.ndarray)})


def _perturbed_states(scene, seed):
    """The stack pressed together (every box 1.5 mm lower than the one below it allows, so all
    box–plane and box–box pairs touch) with each world's velocities nudged differently."""
    rng = np.random.default_rng(seed)
    state = scene.state.copy()
    W = scene.sap_model.num_worlds
    for i in range(3):  # FREE joints: (x, y, z, quaternion) per box
        state.joint_q[:, 7 * i + 2] -= 0.0015 * (i + 1)
    state.joint_qd[:] += 0.05 * rng.standard_normal(state.joint_qd.shape)
    from sap_common.kinematics import body_state
    state.body_q[:], state.body_qd[:] = body_state(scene.sap_model, state.joint_q, state.joint_qd, "public")
    assert W == 1 or not np.array_equal(state.joint_qd[0], state.joint_qd[1])
    return state


def _simulate(model, host_state, host_control, device, steps=BATCH_STEPS, capacity=None, preset="approx32",
              newton_path=DEFAULT_NEWTON_PATH, **overrides):
    """Collide + step ``steps`` times; returns (final host state, per-step statuses, contact counts).
    The fused Newton path runs with its 32 cooperative lanes."""
    cap = capacity if capacity is not None else 32
    solver = sap_gpu.SolverSAP(model, max_rigid_contact=cap, contact_preset_variant=preset, device=device,
                               newton_path=newton_path, **overrides)
    pipeline = sap_gpu.CollisionPipeline(model, cap, solver.config, device=device)
    contacts = pipeline.contacts()
    state, control = sap_gpu.to_device(host_state, device), sap_gpu.to_device(host_control, device)
    statuses, counts = [], []
    for _ in range(steps):
        pipeline.collide(state, contacts)
        with cooperative_lanes(newton_path == "fused"):
            solver.step(state, state, control, contacts, 2e-3)
        statuses.append(solver.diagnostics()["status"])
        counts.append((contacts.count.numpy().copy(), contacts.overflow.numpy().copy()))
    return sap_gpu.to_host(state), np.array(statuses), counts


def _assert_state_equal(a, b, what):
    for f in ("joint_q", "joint_qd", "body_q", "body_qd"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f"{what}: {f} differs"


@pytest.mark.parametrize("newton_path", NEWTON_PATHS)
@pytest.mark.parametrize("preset", ["approx32", "approx64", "drake"])
def test_identical_worlds_are_identical_and_runs_repeat(device, preset, newton_path):
    scene = scenes.get(BATCH_SCENE, num_worlds=4)
    state = _perturbed_states(scenes.get(BATCH_SCENE), seed=0)
    batch = dataclasses.replace(scene.state, **{f: np.repeat(getattr(state, f), 4, axis=0)
                                                for f in ("joint_q", "joint_qd", "body_q", "body_qd", "body_f")})
    out, statuses, _ = _simulate(scene.sap_model, batch, scene.control, device, preset=preset, newton_path=newton_path)
    assert np.all(statuses & StepStatus.CONVERGED)
    for w in range(1, 4):
        _assert_state_equal(_world(out, 0), _world(out, w), f"world {w} vs world 0")
    again, statuses2, _ = _simulate(scene.sap_model, batch, scene.control, device, preset=preset,
                                    newton_path=newton_path)
    _assert_state_equal(out, again, "second run")
    assert np.array_equal(statuses, statuses2)


@pytest.mark.parametrize("newton_path", NEWTON_PATHS)
def test_evaluate_at_leaves_the_step_diagnostics_alone(device, newton_path):
    """``evaluate_at`` runs the Newton path's evaluation on the step's buffers and restores the
    loop's status, counts and done flags: the diagnostics read after it are the step's. On the CPU
    device ``.numpy()`` is a view, and the saved counts were once cleared with the live ones."""
    scene = scenes.get(BATCH_SCENE, num_worlds=2)
    solver = sap_gpu.SolverSAP(scene.sap_model, max_rigid_contact=32, device=device, newton_path=newton_path)
    pipeline = sap_gpu.CollisionPipeline(scene.sap_model, 32, solver.config, device=device)
    contacts = pipeline.contacts()
    state = sap_gpu.to_device(_perturbed_states(scene, seed=2), device)
    control = sap_gpu.to_device(scene.control, device)
    pipeline.collide(state, contacts)
    with cooperative_lanes(newton_path == "fused"):
        solver.step(state, state, control, contacts, 2e-3)
        before = solver.diagnostics()
        assert np.all(before["newton_iterations"] > 0) and np.all(before["status"] == StepStatus.CONVERGED)
        solver.evaluate_at(solver.work.v1.numpy() + 0.1)
    after = solver.diagnostics()
    for k, x in before.items():
        np.testing.assert_array_equal(after[k], x, err_msg=k)


@pytest.mark.parametrize("newton_path", NEWTON_PATHS)
def test_a_world_of_a_mixed_batch_equals_its_solo_run(device, newton_path):
    scene = scenes.get(BATCH_SCENE, num_worlds=3)
    state = _perturbed_states(scene, seed=1)
    out, _, _ = _simulate(scene.sap_model, state, scene.control, device, newton_path=newton_path)
    solo_model = scenes.get(BATCH_SCENE).sap_model
    for w in range(3):
        solo, _, _ = _simulate(solo_model, _world(state, w), _world(scene.control, w), device,
                               newton_path=newton_path)
        _assert_state_equal(_world(out, w), solo, f"world {w}")


def test_a_non_finite_world_is_flagged_and_leaves_the_others_alone(device):
    scene = scenes.get(BATCH_SCENE, num_worlds=3)
    state = _perturbed_states(scene, seed=2)
    clean, _, _ = _simulate(scene.sap_model, state, scene.control, device, steps=3)
    bad_control = scene.control.copy()
    bad_control.joint_f[1, 0] = np.nan
    out, statuses, _ = _simulate(scene.sap_model, state, bad_control, device, steps=3)
    assert np.all(statuses[:, 1] & StepStatus.NON_FINITE)
    assert not np.any(statuses[:, [0, 2]] & StepStatus.NON_FINITE)
    for w in (0, 2):
        _assert_state_equal(_world(out, w), _world(clean, w), f"world {w}")
    # The flagged world keeps its state (docs/design.md § Bad input), which stays finite.
    assert np.array_equal(out.joint_q[1], state.joint_q[1]) and np.array_equal(out.joint_qd[1], state.joint_qd[1])


def test_non_finite_state_world_is_flagged(device):
    scene = scenes.get(BATCH_SCENE, num_worlds=2)
    state = _perturbed_states(scene, seed=3)
    state.joint_q[0, 2] = np.inf
    out, statuses, _ = _simulate(scene.sap_model, state, scene.control, device, steps=1)
    assert statuses[0, 0] & StepStatus.NON_FINITE and statuses[0, 1] & StepStatus.CONVERGED
    assert np.isfinite(out.joint_q[1]).all()


def test_contact_overflow_is_counted_and_flagged(device):
    scene = scenes.get(BATCH_SCENE, num_worlds=2)
    state = _perturbed_states(scene, seed=4)
    full, _, full_counts = _simulate(scene.sap_model, state, scene.control, device, steps=2)
    generated = full_counts[0][0]
    assert generated.min() >= 3 and full_counts[0][1].max() == 0, "capacity 32 must hold all, 2 must overflow"
    out, statuses, counts = _simulate(scene.sap_model, state, scene.control, device, steps=2, capacity=2)
    count, overflow = counts[0]
    np.testing.assert_array_equal(count, [2, 2])
    np.testing.assert_array_equal(count + overflow, generated)
    assert np.all(statuses[0] & StepStatus.CONTACT_OVERFLOW)
    assert np.isfinite(out.joint_q).all()


@pytest.mark.parametrize("linear_solver, newton_path", [("cholesky", "staged"), ("pcr", "staged"),
                                                       ("cholesky", "fused")])
def test_step_allocates_nothing(device, monkeypatch, linear_solver, newton_path):
    """Every buffer is made at construction; step() launches and copies only (docs/pipeline.md)."""
    scene = scenes.get(BATCH_SCENE, num_worlds=2)
    solver = sap_gpu.SolverSAP(scene.sap_model, max_rigid_contact=16, device=device,
                               contact_linear_solver=linear_solver, newton_path=newton_path)
    pipeline = sap_gpu.CollisionPipeline(scene.sap_model, 16, solver.config, device=device)
    contacts = pipeline.contacts()
    state, control = sap_gpu.to_device(scene.state, device), sap_gpu.to_device(scene.control, device)
    pipeline.collide(state, contacts)
    solver.step(state, state, control, contacts, 2e-3)  # first call builds (and caches) kernels
    made = []
    original = wp.array.__init__

    def counting_init(self, *args, **kwargs):
        made.append(kwargs.get("shape"))
        original(self, *args, **kwargs)

    monkeypatch.setattr(wp.array, "__init__", counting_init)
    pipeline.collide(state, contacts)
    solver.step(state, state, control, contacts, 2e-3)
    solver.step(state, state, control, None, 2e-3)
    monkeypatch.undo()
    assert made == [], f"step() created {len(made)} arrays"


@pytest.mark.gpu
@pytest.mark.parametrize("linear_solver, newton_path", [("cholesky", "staged"), ("pcr", "staged"),
                                                       ("cholesky", "fused")])
def test_collide_and_step_capture_in_a_cuda_graph(device, linear_solver, newton_path):
    if not device.is_cuda:
        pytest.skip("CUDA graph capture needs a CUDA device (run with --device cuda:0)")
    scene = scenes.get(BATCH_SCENE, num_worlds=8)
    host = _perturbed_states(scene, seed=5)
    solver = sap_gpu.SolverSAP(scene.sap_model, max_rigid_contact=16, device=device,
                               contact_linear_solver=linear_solver, newton_path=newton_path)
    pipeline = sap_gpu.CollisionPipeline(scene.sap_model, 16, solver.config, device=device)
    contacts = pipeline.contacts()
    control = sap_gpu.to_device(scene.control, device)
    eager = sap_gpu.to_device(host, device)
    for _ in range(BATCH_STEPS):
        pipeline.collide(eager, contacts)
        solver.step(eager, eager, control, contacts, 2e-3)
    graphed = sap_gpu.to_device(host, device)
    pipeline.collide(graphed, contacts)  # warm-up: kernels loaded before capture
    solver.step(sap_gpu.to_device(host, device), sap_gpu.to_device(host, device), control, contacts, 2e-3)
    with wp.ScopedCapture(device) as capture:
        pipeline.collide(graphed, contacts)
        solver.step(graphed, graphed, control, contacts, 2e-3)
    for _ in range(BATCH_STEPS):
        wp.capture_launch(capture.graph)
    _assert_state_equal(sap_gpu.to_host(eager), sap_gpu.to_host(graphed), "graph replay vs eager")


# ---------------------------------------------------------------------------- bad input

@pytest.fixture(scope="module")
def small():
    scene = scenes.get("sphere_drop", num_worlds=2)
    return scene


def test_bad_construction_is_refused(device, small):
    m = small.sap_model
    with pytest.raises(ValueError, match="model: expected a SapModel"):
        sap_gpu.SolverSAP("box", max_rigid_contact=4, device=device)
    with pytest.raises(ValueError, match="contact_preset_variant"):
        sap_gpu.SolverSAP(m, max_rigid_contact=4, contact_preset_variant="fast", device=device)
    with pytest.raises(ValueError, match="max_rigid_contact"):
        sap_gpu.SolverSAP(m, max_rigid_contact=-1, device=device)
    with pytest.raises(ValueError, match="line_search_variant"):
        sap_gpu.SolverSAP(m, max_rigid_contact=4, line_search_variant="bisect", device=device)
    with pytest.raises(ValueError, match="max_rigid_contact"):
        sap_gpu.CollisionPipeline(m, -2, device=device)


def test_bad_step_arguments_are_refused_before_any_launch(device, small):
    m = small.sap_model
    solver = sap_gpu.SolverSAP(m, max_rigid_contact=4, device=device)
    state, control = sap_gpu.to_device(small.state, device), sap_gpu.to_device(small.control, device)
    contacts = sap_gpu.contacts(2, 4, device)
    before = state.joint_q.numpy().copy()
    for dt in (0.0, -1e-3, np.nan, np.inf, "1e-3", True):
        with pytest.raises(ValueError, match="dt: must be a finite time step"):
            solver.step(state, state, control, contacts, dt)
    with pytest.raises(ValueError, match="state_in.joint_q: expected a wp.array"):
        solver.step(small.state, state, control, contacts, 1e-3)
    with pytest.raises(ValueError, match="state_out.joint_qd: expected shape"):
        solver.step(state, dataclasses.replace(state, joint_qd=wp.zeros((3, m.joint_dof_count), dtype=wp.float64,
                                                                         device=device)), control, contacts, 1e-3)
    with pytest.raises(ValueError, match="control.joint_act: expected dtype"):
        solver.step(state, state, dataclasses.replace(control, joint_act=wp.zeros(control.joint_act.shape,
                                                                                    dtype=wp.float32,
                                                                                    device=device)), contacts, 1e-3)
    with pytest.raises(ValueError, match="capacity 3 does not match the solver's max_rigid_contact 4"):
        solver.step(state, state, control, sap_gpu.contacts(2, 3, device), 1e-3)
    with pytest.raises(ValueError, match="contacts: expected SapContacts or None"):
        solver.step(state, state, control, "none", 1e-3)
    for args, name in (((None, state, control), "state_in"), ((state, None, control), "state_out"),
                       ((state, state, None), "control")):
        with pytest.raises(ValueError, match=rf"{name}: expected a Sap(State|Control), got NoneType"):
            solver.step(*args, contacts, 1e-3)
    tagged = dataclasses.replace(state)
    tagged.joint_qd_order = "drake"  # set after construction, past SapState's own check
    with pytest.raises(ValueError, match="state_in.joint_qd_order: must be one of"):
        solver.step(tagged, state, control, contacts, 1e-3)
    assert np.array_equal(state.joint_q.numpy(), before)
    assert isinstance(contacts, SapContacts)


@pytest.mark.parametrize("newton_path", NEWTON_PATHS)
def test_stage_hook_sees_every_stage_in_order_and_changes_nothing(device, newton_path):
    """The profiling hook (sap_tools/benchmark/cli.py --breakdown) is called once per stage, in
    pipeline order (the staged path: once per Newton stage per batch iteration; the fused path:
    once for its one launch), and leaves the results bit-identical."""
    scene = scenes.get("box_stack", num_worlds=2)

    def run(hook):
        solver = sap_gpu.SolverSAP(scene.sap_model, max_rigid_contact=scene.max_rigid_contact, device=device,
                                   newton_path=newton_path)
        solver.stage_hook = hook
        pipeline = sap_gpu.CollisionPipeline(scene.sap_model, scene.max_rigid_contact, solver.config, device=device)
        state, control = sap_gpu.to_device(scene.state, device), sap_gpu.to_device(scene.control, device)
        contacts = pipeline.contacts()
        pipeline.collide(state, contacts)
        solver.step(state, state, control, contacts, scene.dt)
        return sap_gpu.to_host(state), solver.diagnostics()

    names = []
    with_hook, d = run(names.append)
    without_hook, _ = run(None)
    np.testing.assert_array_equal(with_hook.joint_q, without_hook.joint_q)
    np.testing.assert_array_equal(with_hook.joint_qd, without_hook.joint_qd)
    head = ["boundary_in", "free_motion", "contact_jacobian", "constraints"]
    assert names[:4] == head and names[-2:] == ["integration", "boundary_out"]
    if newton_path == "fused":
        assert names[4:-2] == ["newton_fused"]
        return
    assert names[-3] == "newton_finish"
    loop = names[4:-3]
    iterations = int(d["newton_iterations"].max())
    # One pass per Newton iteration, plus the last pass that only evaluates and stops.
    assert loop == ["newton_evaluate", "linear_solve", "line_search"] * (iterations + 1)


def test_body_poses_are_the_poses_a_step_leaves(device):
    """``SolverSAP.body_poses`` (both backends) gives the body_q a step writes, bit for bit, from
    joint_q alone; a wrong shape is a ValueError naming the argument."""
    scene = scenes.get("arm_push_block", num_worlds=2)
    m = scene.sap_model
    for backend, kw in ((sap_gpu, {"device": device}), (sap_ref, {})):
        solver = backend.SolverSAP(m, max_rigid_contact=scene.max_rigid_contact, **kw)
        state = backend.to_device(scene.state, *kw.values())
        solver.step(state, state, backend.to_device(scene.control, *kw.values()), None, scene.dt)
        poses = backend.to_device(scene.state, *kw.values()).body_q
        solver.body_poses(state.joint_q, poses)
        host = backend.to_host(state).body_q
        got = poses.numpy().reshape(host.shape) if hasattr(poses, "numpy") else poses
        np.testing.assert_array_equal(got, host, err_msg=backend.__name__)
        with pytest.raises(ValueError, match="joint_q"):
            solver.body_poses(backend.to_device(scene.state, *kw.values()).joint_qd, poses)

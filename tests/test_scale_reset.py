"""Per-world reset (``SolverSAP.reset(state, world_mask)``) in sap_gpu and sap_ref, and the per-world
statistics and failure flags it clears (docs/scaling.md § Reset).

What must hold: a reset leaves every unmasked world bit-identical to a run without it (state,
diagnostics, observables, statistics); a reset world steps on exactly as a new solver would
from the same state; the state's masked worlds get the model's initial state; the reset
allocates nothing and, on CUDA, replays inside a captured graph with whatever mask the device
array holds.
"""

import dataclasses

import numpy as np
import pytest
import warp as wp

import sap_gpu
import sap_ref
from sap_common import scenes
from sap_common.state import FAILURE_BITS, StepStatus

SCENE = "box_stack"
W = 3
STEPS_BEFORE, STEPS_AFTER = 3, 3
MASK = [False, True, False]


def _scene():
    scene = scenes.get(SCENE, num_worlds=W)
    state = scene.state.copy()
    rng = np.random.default_rng(7)
    state.joint_qd = state.joint_qd + rng.normal(0.0, 0.05, state.joint_qd.shape)  # worlds differ
    return scene, state


def _backend(name, device):
    return (sap_gpu, device) if name == "gpu" else (sap_ref, None)


class _Run:
    """A solver, its collision and a state of one backend."""

    def __init__(self, name, device, scene, host_state, **overrides):
        self.be, self.device = _backend(name, device)
        self.solver = self.be.SolverSAP(scene.sap_model, max_rigid_contact=16, device=self.device, **overrides)
        self.pipeline = self.be.CollisionPipeline(scene.sap_model, 16, self.solver.config, device=self.device)
        self.contacts = self.pipeline.contacts()
        self.state = self.be.to_device(host_state, self.device)
        self.control = self.be.to_device(scene.control, self.device)

    def steps(self, n, dt=2e-3):
        for _ in range(n):
            self.pipeline.collide(self.state, self.contacts)
            self.solver.step(self.state, self.state, self.control, self.contacts, dt)

    def mask(self, values):
        if self.be is sap_ref:
            return np.array(values, bool)
        return wp.array(values, dtype=wp.bool, device=self.device)

    def snapshot(self):
        return (self.be.to_host(self.state), self.solver.diagnostics(), self.solver.read_observables(),
                self.solver.statistics())


def _assert_world_equal(a, b, w, what):
    state_a, diag_a, obs_a, stats_a = a
    state_b, diag_b, obs_b, stats_b = b
    for f in ("joint_q", "joint_qd", "body_q", "body_qd", "body_f"):
        assert np.array_equal(getattr(state_a, f)[w], getattr(state_b, f)[w]), f"{what}: world {w} {f}"
    for src_a, src_b in ((diag_a, diag_b), (obs_a, obs_b), (stats_a, stats_b)):
        for k in src_a:
            if k != "any_failed":
                assert np.array_equal(src_a[k][w], src_b[k][w]), f"{what}: world {w} {k}"


@pytest.mark.parametrize("backend", ["gpu", "ref"])
def test_unmasked_worlds_are_bit_identical_and_a_reset_world_steps_like_a_new_solver(device, backend):
    scene, host = _scene()
    plain, reset = _Run(backend, device, scene, host), _Run(backend, device, scene, host)
    plain.steps(STEPS_BEFORE)
    reset.steps(STEPS_BEFORE)
    middle = reset.be.to_host(reset.state)
    reset.solver.reset(None, reset.mask(MASK))  # solver state only: the state is left as it is
    cleared = reset.snapshot()
    assert cleared[3]["steps"].tolist() == [STEPS_BEFORE, 0, STEPS_BEFORE]
    assert cleared[1]["status"][1] == 0 and cleared[2]["contact_count"][1] == 0
    assert not cleared[2]["body_contact_force"][1].any() and not cleared[2]["body_acceleration"][1].any()
    plain.steps(STEPS_AFTER)
    reset.steps(STEPS_AFTER)
    a, b = plain.snapshot(), reset.snapshot()
    for w in (0, 2):
        _assert_world_equal(a, b, w, "unmasked")
    # The reset world: its state, diagnostics and observables are those of the run without the reset
    # (no iterate carries over), its statistics count from the reset.
    fresh = _Run(backend, device, scene, middle)
    fresh.steps(STEPS_AFTER)
    _assert_world_equal(fresh.snapshot(), b, 1, "reset world vs a new solver")
    assert b[3]["steps"].tolist() == [STEPS_BEFORE + STEPS_AFTER, STEPS_AFTER, STEPS_BEFORE + STEPS_AFTER]


@pytest.mark.parametrize("backend", ["gpu", "ref"])
@pytest.mark.parametrize("order", ["public", "sap"])
def test_a_reset_writes_the_initial_state_into_the_masked_worlds_only(device, backend, order):
    scene, host = _scene()
    if order == "sap":  # a state kept in SAP velocity order gets joint_qd_init in SAP order
        from sap_common.conventions import joint_qd_public_to_sap

        host = dataclasses.replace(host, joint_qd=joint_qd_public_to_sap(scene.sap_model, host.joint_q,
                                                                         host.joint_qd), joint_qd_order="sap")
    run = _Run(backend, device, scene, host)
    run.steps(2)
    before = run.be.to_host(run.state)
    run.solver.reset(run.state, run.mask([True, False, True]))
    after = run.be.to_host(run.state)
    init = scene.sap_model.state()
    if order == "sap":
        from sap_common.conventions import joint_qd_public_to_sap

        init.joint_qd = joint_qd_public_to_sap(scene.sap_model, init.joint_q, init.joint_qd)
    for f in ("joint_q", "joint_qd", "body_q", "body_qd", "body_f"):
        assert np.array_equal(getattr(after, f)[[0, 2]], getattr(init, f)[[0, 2]]), f
        assert np.array_equal(getattr(after, f)[1], getattr(before, f)[1]), f


@pytest.mark.parametrize("backend", ["gpu", "ref"])
def test_a_failing_world_is_flagged_until_its_reset(device, backend):
    scene, host = _scene()
    control = scene.control.copy()
    control.joint_f[2, 0] = np.nan  # world 2 fails (NON_FINITE) every step
    run = _Run(backend, device, scene, host)
    run.control = run.be.to_device(control, run.device)
    run.steps(2)
    stats = run.solver.statistics()
    assert stats["failed"].tolist() == [0, 0, 1] and stats["any_failed"]
    assert stats["failed_steps"].tolist() == [0, 0, 2]
    assert stats["status_union"][2] & StepStatus.NON_FINITE and not stats["status_union"][0] & FAILURE_BITS
    run.solver.reset(None, run.mask([False, False, True]))
    stats = run.solver.statistics()
    assert stats["failed"].tolist() == [0, 0, 0] and not stats["any_failed"]
    run.solver.reset(None, run.mask([True, False, False]))  # resetting another world keeps the flag off
    assert not run.solver.statistics()["any_failed"]


@pytest.mark.parametrize("mask_dtype", [wp.bool, wp.int32])
def test_gpu_reset_allocates_nothing_and_accepts_bool_or_int_masks(device, monkeypatch, mask_dtype):
    scene, host = _scene()
    run = _Run("gpu", device, scene, host)
    run.steps(1)
    mask = wp.array(np.array([1, 0, 1]), dtype=mask_dtype, device=device)
    run.solver.reset(run.state, mask)  # the first call loads the kernels
    made = []
    original = wp.array.__init__

    def counting_init(self, *args, **kwargs):
        made.append(kwargs.get("shape"))
        original(self, *args, **kwargs)

    monkeypatch.setattr(wp.array, "__init__", counting_init)
    run.solver.reset(run.state, mask)
    run.solver.reset(None, None)
    monkeypatch.undo()
    assert made == [], f"reset() created {len(made)} arrays"
    assert run.solver.statistics()["steps"].tolist() == [0, 0, 0]


def test_bad_reset_arguments_are_named_before_any_launch(device):
    scene, host = _scene()
    run = _Run("gpu", device, scene, host)
    run.steps(1)
    before = run.solver.statistics()["steps"].copy()
    with pytest.raises(ValueError, match=r"world_mask: expected a wp.array"):
        run.solver.reset(None, np.ones(W, bool))
    with pytest.raises(ValueError, match="world_mask: expected dtype wp.bool or wp.int32"):
        run.solver.reset(None, wp.ones(W, dtype=wp.float32, device=device))
    with pytest.raises(ValueError, match=r"world_mask: expected shape \(3,\)"):
        run.solver.reset(None, wp.ones(W + 1, dtype=wp.bool, device=device))
    with pytest.raises(ValueError, match="state.joint_q: expected a wp.array"):
        run.solver.reset(scene.state, None)
    ref = _Run("ref", None, scene, host)
    with pytest.raises(ValueError, match=r"world_mask: expected a bool or integer array shaped \(3,\)"):
        ref.solver.reset(None, np.ones(W + 1, bool))
    assert np.array_equal(run.solver.statistics()["steps"], before)


@pytest.mark.gpu
def test_gpu_reset_replays_in_a_captured_graph_with_the_mask_of_the_moment(device):
    if not device.is_cuda:
        pytest.skip("CUDA graph capture needs a CUDA device (run with --device cuda:0); on the CPU device the "
                    "same launches run eagerly in the tests above")
    scene, host = _scene()
    eager, graphed = _Run("gpu", device, scene, host), _Run("gpu", device, scene, host)
    eager_mask = wp.zeros(W, dtype=wp.bool, device=device)
    mask = wp.zeros(W, dtype=wp.bool, device=device)
    graphed.steps(1)  # kernels loaded before capture
    graphed.solver.reset(graphed.state, mask)
    graphed.state = sap_gpu.to_device(host, device)
    graphed.solver.reset(None, None)
    with wp.ScopedCapture(device) as capture:
        graphed.solver.reset(graphed.state, mask)
        graphed.steps(1)
    for pattern in ([False, False, False], [False, True, False], [True, False, True], [False, False, False]):
        mask.assign(np.array(pattern))
        eager_mask.assign(np.array(pattern))
        wp.capture_launch(capture.graph)
        eager.solver.reset(eager.state, eager_mask)
        eager.steps(1)
    a, b = eager.snapshot(), graphed.snapshot()
    for w in range(W):
        _assert_world_equal(a, b, w, "graph replay vs eager")

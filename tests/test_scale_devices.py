"""Explicit devices everywhere: no code path of sap_gpu, sap_newton or the tools falls back on Warp's
implicit default device (docs/scaling.md § Many devices).

``conftest.no_default_device`` replaces Warp's default device with a stand-in that fails on any
use, so a launch, an allocation or a copy that was not given its device fails here, on a CPU-only
machine too. With CUDA, the same runs happen with the default set to the *other* real device.
"""

import dataclasses
import json

import numpy as np
import pytest
import warp as wp
from conftest import DATA, no_default_device

import sap_gpu
from sap_common import scenes
from sap_common.constants import NEWTON_PATHS


def _sap_gpu_round(device, newton_path, linear_solver="cholesky"):
    """Everything sap_gpu offers, once: construction, transfers, collision, step, reset, reads."""
    scene = scenes.get("box_stack", num_worlds=2)
    solver = sap_gpu.SolverSAP(scene.sap_model, max_rigid_contact=16, device=device, newton_path=newton_path,
                               contact_linear_solver=linear_solver)
    pipeline = sap_gpu.CollisionPipeline(scene.sap_model, 16, solver.config, device=device)
    contacts = pipeline.contacts()
    state, control = sap_gpu.to_device(scene.state, device), sap_gpu.control(scene.sap_model, device)
    spare = sap_gpu.state(scene.sap_model, device)
    for _ in range(2):
        pipeline.collide(state, contacts)
        solver.step(state, spare, control, contacts, scene.dt)
        state, spare = spare, state
    solver.step(state, state, control, None, scene.dt)
    solver.reset(state, wp.array([True, False], dtype=wp.bool, device=device))
    solver.reset(None, None)
    solver.body_poses(state.joint_q, spare.body_q)
    solver.evaluate_at(np.zeros((2, scene.sap_model.joint_dof_count)))
    out = (sap_gpu.to_host(state), solver.diagnostics(), solver.read_observables(), solver.statistics())
    return out, solver


@pytest.mark.parametrize("newton_path, linear_solver", [(p, "cholesky") for p in NEWTON_PATHS] + [("staged", "pcr")])
def test_sap_gpu_never_reads_warps_default_device(device, newton_path, linear_solver):
    _sap_gpu_round(device, newton_path, linear_solver)  # kernels loaded outside, so only the run is under test
    with no_default_device():
        (state, diag, obs, stats), _ = _sap_gpu_round(device, newton_path, linear_solver)
    assert np.isfinite(state.joint_q).all() and diag["status"].tolist() == [0, 0]


def test_a_solver_built_for_the_default_device_keeps_it_when_the_default_changes(device):
    """``device=None`` resolves Warp's default once, at construction; later calls never read it."""
    scene = scenes.get("sphere_drop", num_worlds=2)
    with wp.ScopedDevice(device):
        solver = sap_gpu.SolverSAP(scene.sap_model, max_rigid_contact=4)
        state, control = sap_gpu.state(scene.sap_model), sap_gpu.control(scene.sap_model)
    assert solver.device == device and state.joint_q.device == device
    with no_default_device():
        solver.step(state, state, control, None, scene.dt)
        solver.reset(state, None)


def test_sap_newton_never_reads_warps_default_device(device):
    newton = pytest.importorskip("newton")
    from test_newton_solver import DT, box_model

    import sap_newton

    model = box_model(device, num_worlds=2)
    pipeline = newton.CollisionPipeline(model)
    contacts = pipeline.contacts()
    s0, s1 = model.state(), model.state()

    def round_trip():
        for collision in ("sap", "newton"):
            solver = sap_newton.SolverSAP(model, max_rigid_contact=16, collision=collision)
            K = solver.ObservableKind
            obs = solver.observables(solver.supported_observables, contacts=contacts)
            c = contacts if collision == "newton" else None
            solver.step(s0, s1, None, c, DT, observables=obs)
            solver.reset(s1, wp.array([True, False, False], dtype=wp.bool, device=device))
            solver.notify_model_changed(newton.ModelFlags.SHAPE_PROPERTIES)
            solver.diagnostics()
            assert K.WORLD_STATUS in obs.kinds

    pipeline.collide(s0, contacts)
    round_trip()
    with no_default_device():
        round_trip()


def test_the_tools_never_read_warps_default_device(device, capsys):
    from sap_tools.benchmark.cli import main as benchmark
    from sap_tools.validate.cli import main as validate

    recording = str(DATA / "drake" / "sphere_drop.json")
    args = [recording, "--backend", "gpu", "--device", str(device), "--steps", "3", "--quiet", "--json"]
    bench = ["sphere_drop", "--num-worlds", "2", "--steps", "2", "--warmup", "1", "--structure-steps", "1",
             "--device", str(device), "--quiet", "--json"]
    assert validate(args) == 0 and benchmark(bench) == 0  # loads the kernels
    capsys.readouterr()
    with no_default_device():
        assert validate(args) == 0
        assert benchmark(bench) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert json.loads(lines[-1])["valid"]


@pytest.mark.gpu
def test_with_the_default_on_another_real_device_everything_stays_on_the_given_one(device):
    """CUDA machines: the default device set to cpu while the solver runs on cuda:0, and the
    default set to cuda:0 while it runs on cpu; every array of the workspace is on the given one."""
    if not wp.is_cuda_available():
        pytest.skip("needs a CUDA device besides the CPU; the no_default_device tests above cover CPU-only machines")
    for run_on, default in (("cuda:0", "cpu"), ("cpu", "cuda:0")):
        d = wp.get_device(run_on)
        with wp.ScopedDevice(default):
            (state, _, _, _), solver = _sap_gpu_round(d, "fused")
        assert np.isfinite(state.joint_q).all()
        for name, value in vars(solver.work).items():
            arrays = [value] if isinstance(value, wp.array) else []
            if hasattr(value, "__dict__") and not isinstance(value, wp.array):
                arrays += [a for a in vars(value).values() if isinstance(a, wp.array)]
            if dataclasses.is_dataclass(value) and not isinstance(value, type):
                arrays += [getattr(value, f.name) for f in dataclasses.fields(value)
                           if isinstance(getattr(value, f.name), wp.array)]
            for a in arrays:
                assert a.device == d, f"work.{name} on {a.device}, the solver runs on {d}"

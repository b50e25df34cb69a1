"""dt checks of both solvers (sap_common.time_step): a ValueError for a dt that is no time step,
a LargeTimeStepWarning when a body falling from rest would pass its thinnest shape in one step,
and no word otherwise (the SAP step itself is stable at any dt)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import sap_gpu
import sap_ref
from sap_common import ModelBuilder, scenes
from sap_common.builder import solid_sphere_inertia
from sap_common.state import StepStatus
from sap_common.time_step import LargeTimeStepWarning, check_time_step, time_step_bound


def _sphere_drop(gravity=(0.0, 0.0, -9.81), radius=0.1):
    b = ModelBuilder(gravity=gravity)
    ball = b.add_body(1.0, inertia=solid_sphere_inertia(1.0, radius), name="ball")
    b.add_joint_free(-1, ball, q0=(0, 0, radius, 0, 0, 0, 1), name="ball")
    b.add_ground_plane(name="ground")
    b.add_shape_sphere(ball, radius=radius, name="ball_sphere")
    return b.finalize()


def test_the_bound_is_the_fall_time_through_the_thinnest_moving_shape():
    assert time_step_bound(_sphere_drop()) == pytest.approx(math.sqrt(2 * 0.1 / 9.81), rel=1e-15)
    assert time_step_bound(_sphere_drop(radius=0.02)) == pytest.approx(math.sqrt(2 * 0.02 / 9.81), rel=1e-15)
    assert time_step_bound(_sphere_drop(gravity=(0.0, 0.0, 0.0))) == math.inf
    box_stack = scenes.get("box_stack").sap_model  # smallest half extent 0.05 m; the ground is static
    assert time_step_bound(box_stack) == pytest.approx(math.sqrt(2 * 0.05 / 9.81), rel=1e-15)
    assert time_step_bound(scenes.get("double_pendulum").sap_model) == math.inf  # no shapes


def _step(package, model, dt):
    solver = package.SolverSAP(model, max_rigid_contact=4, device="cpu")
    pipeline = package.CollisionPipeline(model, 4, solver.config, device="cpu")
    state, control, contacts = package.state(model, "cpu"), package.control(model, "cpu"), pipeline.contacts()
    pipeline.collide(state, contacts)
    solver.step(state, state, control, contacts, dt)
    return package.to_host(state), solver.diagnostics()["status"]


@pytest.mark.parametrize("package", [sap_ref, sap_gpu], ids=["sap_ref", "sap_gpu"])
def test_a_step_of_1000_s_warns_once_per_call_site_and_still_runs(package):
    model = _sphere_drop()
    with pytest.warns(LargeTimeStepWarning, match=r"dt = 1000 s: a body falling from rest moves ½\|g\|dt² = "
                                                   r"4\.9e\+06 m in one step, more than the thinnest moving shape "
                                                   r"\('ball_sphere', 0\.1 m\).*steps up to 0\.143 s") as record:
        state, status = _step(package, model, 1000.0)
    assert record[0].filename == __file__  # points at the caller of step(), not into the package
    assert np.all(np.isfinite(state.joint_q)) and np.all(status & StepStatus.CONVERGED)


@pytest.mark.parametrize("package", [sap_ref, sap_gpu], ids=["sap_ref", "sap_gpu"])
def test_ordinary_steps_and_models_without_gravity_say_nothing(package):
    with warnings.catch_warnings():
        warnings.simplefilter("error", LargeTimeStepWarning)
        _step(package, _sphere_drop(), 1e-3)
        _step(package, _sphere_drop(), 0.14)  # just under the bound
        _step(package, _sphere_drop(gravity=(0.0, 0.0, 0.0)), 10.0)


@pytest.mark.parametrize("package", [sap_ref, sap_gpu], ids=["sap_ref", "sap_gpu"])
@pytest.mark.parametrize("dt", [0.0, -1e-3, math.nan, math.inf, True, "0.001", None])
def test_a_dt_that_is_no_time_step_is_a_value_error(package, dt):
    with pytest.raises(ValueError, match=r"dt: must be a finite time step > 0 s"):
        _step(package, _sphere_drop(), dt)


def test_the_check_returns_a_python_float():
    out = check_time_step(_sphere_drop(), np.float32(0.001))
    assert type(out) is float and out == float(np.float32(0.001))

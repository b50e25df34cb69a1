"""sap_gpu.WorldParameters: per-world parameters on the device (docs/scaling.md § Per-world parameters).

The guarantee: world w of a batch with per-world parameters steps exactly (bit for bit) as a
one-world solver and pipeline of ``model.replace(num_worlds=1, **params.world_fields(w))``; the
parameters are checked on the host before anything is written, and a device write of bad values
flags its world instead of corrupting another.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import warp as wp
from conftest import cooperative_lanes
from hypothesis import given, settings
from hypothesis import strategies as st

import sap_gpu
from sap_common import scenes
from sap_common.parameters import PARAMETER_FIELDS
from sap_common.state import StepStatus

# Scenes with contact, limits and drives (arm_push_block) and with a holonomic constraint and
# contact (rope_box).
SCENES = ("arm_push_block", "rope_box")
WORLDS, STEPS = 16, 200  # a 16-world batch, every step of a 200-step rollout


def draw_parameters(model, num_worlds: int, seed: int) -> dict:
    """Per-world values of every field of PARAMETER_FIELDS around the model's, within its rules and
    its pattern of limits and drives (a positive value scaled by 0.5–2, a zero kept, a finite limit
    moved by up to 0.05 and kept ordered, a shape material drawn where the model leaves it unset)."""
    rng = np.random.default_rng(seed)
    W = num_worlds
    out = {}
    scale = lambda a: a * rng.uniform(0.5, 2.0, (W, *np.shape(a)))  # noqa: E731
    out["body_mass"] = scale(model.body_mass)
    massive = (model.body_mass > 0)[:, None]  # a massless frame keeps its centre of mass
    out["body_com"] = model.body_com + rng.uniform(-0.01, 0.01, (W, *model.body_com.shape)) * massive
    out["body_inertia"] = model.body_inertia * rng.uniform(0.5, 2.0, (W, model.body_count))[:, :, None, None]
    for name in ("joint_armature", "joint_damping", "joint_target_ke", "joint_target_kd", "joint_limit_ke",
                 "joint_limit_kd"):
        out[name] = scale(getattr(model, name))
    out["joint_effort_limit"] = np.where(np.isinf(model.joint_effort_limit), np.inf, scale(model.joint_effort_limit))
    lo, hi = model.joint_limit_lower, model.joint_limit_upper
    shift = rng.uniform(-0.05, 0.05, (W, 2, model.joint_dof_count))
    new_lo = np.where(np.isfinite(lo), lo + shift[:, 0], lo)
    new_hi = np.where(np.isfinite(hi), hi + shift[:, 1], hi)
    both = np.isfinite(new_lo) & np.isfinite(new_hi)
    new_hi = np.where(both, np.maximum(new_hi, new_lo), new_hi)
    out["joint_limit_lower"], out["joint_limit_upper"] = new_lo, new_hi
    S = model.shape_count
    out["shape_material_mu"] = rng.uniform(0.1, 1.5, (W, S))
    ke = model.shape_material_ke
    out["shape_material_ke"] = np.where(np.isfinite(ke), scale(np.where(np.isfinite(ke), ke, 1.0)),
                                        np.where(np.isnan(ke), rng.uniform(1e4, 1e6, (W, S)), ke))
    out["shape_material_tau"] = rng.uniform(0.0, 0.05, (W, S))
    out["shape_material_hcd"] = rng.uniform(0.0, 20.0, (W, S))
    out["shape_margin"] = model.shape_margin + rng.uniform(0.0, 0.005, (W, S))
    out["gravity"] = model.gravity * rng.uniform(0.3, 1.7, (W, 1))
    assert set(out) == set(PARAMETER_FIELDS)
    return out


def _world(obj, w):
    """World ``w`` of a host SapState/SapControl as a one-world object."""
    return dataclasses.replace(obj, **{f.name: getattr(obj, f.name)[w:w + 1].copy() for f in dataclasses.fields(obj)
                                       if isinstance(getattr(obj, f.name), np.ndarray)})


def _rollout(model, state, control, device, steps, dt, capacity, parameters=None):
    """Every step's host joint_q, joint_qd and status of collide + step from host ``state`` (the
    fused Newton loop with its cooperative lanes)."""
    with cooperative_lanes():
        return _rollout_lanes(model, state, control, device, steps, dt, capacity, parameters)


def _rollout_lanes(model, state, control, device, steps, dt, capacity, parameters):
    solver = sap_gpu.SolverSAP(model, max_rigid_contact=capacity, device=device, parameters=parameters)
    pipeline = sap_gpu.CollisionPipeline(model, capacity, solver.config, device=device, parameters=parameters)
    s, c = sap_gpu.to_device(state, device), sap_gpu.to_device(control, device)
    contacts = pipeline.contacts()
    qs, vs, statuses = [], [], []
    for _ in range(steps):
        pipeline.collide(s, contacts)
        solver.step(s, s, c, contacts, dt)
        qs.append(s.joint_q.numpy().copy())
        vs.append(s.joint_qd.numpy().copy())
        statuses.append(solver.last_status.numpy().copy())
    return np.array(qs), np.array(vs), np.array(statuses)


def _batch_equals_solo(device, name, seed, W, steps):
    scene = scenes.get(name, num_worlds=W)
    model = scene.sap_model
    params = sap_gpu.WorldParameters(model, device=device)
    for field, values in draw_parameters(model, W, seed).items():
        params.set(field, values)
    q, v, status = _rollout(model, scene.state, scene.control, device, steps, scene.dt, scene.max_rigid_contact, params)
    assert np.all(np.isfinite(q)) and not np.any(status & int(StepStatus.NON_FINITE))
    assert not np.array_equal(q[-1, 0], q[-1, 1])  # the draws changed the dynamics
    for w in range(W):
        solo = model.replace(num_worlds=1, **params.world_fields(w))
        q1, v1, status1 = _rollout(solo, _world(scene.state, w), _world(scene.control, w), device, steps, scene.dt,
                                   scene.max_rigid_contact)
        for k in range(steps):  # every step, bit for bit
            assert np.array_equal(q1[k, 0], q[k, w]) and np.array_equal(v1[k, 0], v[k, w]), (w, k)
            assert status1[k, 0] == status[k, w], (w, k)


@pytest.mark.parametrize("name", SCENES)
@settings(max_examples=1)
@given(seed=st.integers(0, 2**31 - 1))
def test_a_world_of_a_mixed_batch_steps_as_its_solo_model(device, name, seed):
    _batch_equals_solo(device, name, seed, WORLDS, STEPS)


@pytest.mark.slow
@pytest.mark.parametrize("name", SCENES)
@settings(max_examples=4)
@given(seed=st.integers(0, 2**31 - 1))
def test_a_world_of_a_mixed_batch_steps_as_its_solo_model_more_draws(device, name, seed):
    _batch_equals_solo(device, name, seed, WORLDS, STEPS)


def test_without_parameters_the_shared_values_step_as_before(device):
    """A solver given parameters at the model's values steps as one given none (shared, stride 0)."""
    scene = scenes.get("arm_push_block", num_worlds=3)
    m = scene.sap_model
    a = _rollout(m, scene.state, scene.control, device, 10, scene.dt, scene.max_rigid_contact)
    b = _rollout(m, scene.state, scene.control, device, 10, scene.dt, scene.max_rigid_contact,
                 sap_gpu.WorldParameters(m, device=device))
    for x, y in zip(a, b):
        assert np.array_equal(x, y)


def test_get_and_world_fields_round_trip(device):
    m = scenes.get("arm_push_block", num_worlds=3).sap_model
    params = sap_gpu.WorldParameters(m, device=device)
    for name in PARAMETER_FIELDS:
        assert params.get(name).shape == (3, *np.shape(getattr(m, name)))
        np.testing.assert_array_equal(params.get(name)[1], getattr(m, name))
    mu = np.array([0.1, 0.2, 0.3, 0.4])[:m.shape_count]
    params.set("shape_material_mu", mu, world_mask=np.array([False, True, False]))
    np.testing.assert_array_equal(params.get("shape_material_mu")[1], mu)
    np.testing.assert_array_equal(params.get("shape_material_mu")[0], m.shape_material_mu)
    np.testing.assert_array_equal(params.world_fields(1)["shape_material_mu"], mu)


def test_a_device_write_equals_the_host_write(device):
    """The same values written from the device (masked) and from the host step alike."""
    W = 3
    scene = scenes.get("arm_push_block", num_worlds=W)
    m = scene.sap_model
    values = draw_parameters(m, W, 7)
    mask = np.array([True, False, True])
    host = sap_gpu.WorldParameters(m, device=device)
    dev = sap_gpu.WorldParameters(m, device=device)
    for name in ("shape_material_mu", "joint_damping", "gravity", "body_com", "shape_margin", "joint_target_ke"):
        host.set(name, values[name], world_mask=mask)
        a = dev.array(name)
        dev.set(name, wp.array(values[name], dtype=a.dtype, device=device),
                world_mask=wp.array(mask.astype(np.int32), dtype=wp.int32, device=device))
        np.testing.assert_array_equal(dev.get(name), host.get(name))
    assert not dev.invalid.numpy().any()
    a = _rollout(m, scene.state, scene.control, device, 10, scene.dt, scene.max_rigid_contact, host)
    b = _rollout(m, scene.state, scene.control, device, 10, scene.dt, scene.max_rigid_contact, dev)
    for x, y in zip(a, b):
        assert np.array_equal(x, y)


def test_a_bad_device_write_flags_its_world_only(device):
    """Negative friction written from the device: that world is reported NON_FINITE and left
    unchanged; the others step as a batch without the bad write does."""
    W = 3
    scene = scenes.get("arm_push_block", num_worlds=W)
    m = scene.sap_model
    good = sap_gpu.WorldParameters(m, device=device)
    bad = sap_gpu.WorldParameters(m, device=device)
    mu = np.tile(np.full(m.shape_count, 0.5), (W, 1))
    mu[1, 0] = -1.0
    bad.set("shape_material_mu", wp.array(mu, dtype=wp.float64, device=device))
    np.testing.assert_array_equal(bad.invalid.numpy(), [0, 1, 0])
    mu[1, 0] = 0.5
    good.set("shape_material_mu", mu)
    qa, va, sa = _rollout(m, scene.state, scene.control, device, 5, scene.dt, scene.max_rigid_contact, good)
    qb, vb, sb = _rollout(m, scene.state, scene.control, device, 5, scene.dt, scene.max_rigid_contact, bad)
    assert np.all(sb[:, 1] & int(StepStatus.NON_FINITE))
    np.testing.assert_array_equal(qb[:, 1], np.broadcast_to(scene.state.joint_q[1], qb[:, 1].shape))
    for w in (0, 2):
        assert np.array_equal(qa[:, w], qb[:, w]) and np.array_equal(sa[:, w], sb[:, w])
    # Set again with good values: the world steps again.
    bad.set("shape_material_mu", wp.array(mu, dtype=wp.float64, device=device))
    assert not bad.invalid.numpy().any()


@pytest.mark.parametrize("name, value, words", [
    ("body_mass", -1.0, "body_mass[world 1, body"),
    ("shape_material_mu", -0.5, "shape_material_mu[world 1, shape"),
    ("joint_damping", np.nan, "joint_damping[world 1, DOF"),
    ("gravity", np.inf, "gravity[world 1"),
])
def test_a_bad_host_value_names_field_and_world_and_writes_nothing(device, name, value, words):
    m = scenes.get("arm_push_block", num_worlds=3).sap_model
    params = sap_gpu.WorldParameters(m, device=device)
    before = params.get(name)
    values = before.copy()
    values[1].reshape(-1)[0] = value
    with pytest.raises(ValueError, match=words.replace("[", r"\[")):
        params.set(name, values)
    np.testing.assert_array_equal(params.get(name), before)


def test_bad_arguments_are_refused(device):
    m = scenes.get("arm_push_block", num_worlds=2).sap_model
    params = sap_gpu.WorldParameters(m, device=device)
    with pytest.raises(ValueError, match="name: 'body_density' is not a per-world parameter; valid: body_mass"):
        params.set("body_density", 1.0)
    with pytest.raises(ValueError, match=r"shape_material_mu: expected shape \(4,\)"):
        params.set("shape_material_mu", np.zeros(3))
    with pytest.raises(ValueError, match="shape_material_mu: expected float64 values, got float32"):
        params.set("shape_material_mu", np.zeros(m.shape_count, np.float32))
    with pytest.raises(ValueError, match=r"world_mask: expected a bool or integer array shaped \(2,\)"):
        params.set("shape_material_mu", np.zeros(m.shape_count), world_mask=np.ones(3, bool))
    with pytest.raises(ValueError, match="shape_material_mu: expected a wp.array of float64 shaped"):
        params.set("shape_material_mu", wp.zeros((2, 1), dtype=wp.float64, device=device))
    with pytest.raises(ValueError, match="world_mask: with device values, expected None or a wp.array of int32"):
        params.set("shape_material_mu", wp.zeros((2, m.shape_count), dtype=wp.float64, device=device),
                   world_mask=np.ones(2, bool))
    other = scenes.get("arm_push_block", num_worlds=2).sap_model
    with pytest.raises(ValueError, match="parameters: built for another model"):
        sap_gpu.SolverSAP(other, max_rigid_contact=4, device=device, parameters=params)
    with pytest.raises(ValueError, match="parameters: expected a sap_gpu.WorldParameters or None, got dict"):
        sap_gpu.CollisionPipeline(m, 4, device=device, parameters={})
    solver = sap_gpu.SolverSAP(m, max_rigid_contact=4, device=device)
    with pytest.raises(ValueError, match="set: these are a solver's shared parameters"):
        solver.parameters.set("gravity", np.zeros(3))


def test_a_hunt_crossley_solver_refuses_rigid_shapes_in_the_parameters(device):
    m = scenes.get("arm_push_block", num_worlds=2).sap_model
    params = sap_gpu.WorldParameters(m, device=device)
    ke = np.tile(np.full(m.shape_count, 1e5), (2, 1))
    params.set("shape_material_ke", ke)
    sap_gpu.SolverSAP(m, max_rigid_contact=4, device=device, parameters=params,
                      discrete_contact_approximation="lagged")
    ke[1, int(m.shape_pair[0, 0])] = np.inf
    with pytest.raises(ValueError, match=r"shape_material_ke\[world 1, shape"):
        params.set("shape_material_ke", ke)

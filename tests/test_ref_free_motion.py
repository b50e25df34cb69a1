"""sap_ref.free_motion: A, k, v* (docs/formulation.md § Free motion), the explicit actuation, and the fp32 path."""

import numpy as np
import pytest
from hypothesis import given, settings
from strategies import random_models

from sap_common.builder import ModelBuilder
from sap_common.conventions import joint_qd_public_to_sap
from sap_ref.dynamics import bias_forces
from sap_ref.free_motion import explicit_actuation, free_motion

H = 1e-3


def slider(**kw):
    b = ModelBuilder()
    body = b.add_body(2.0, inertia=(0.1, 0.1, 0.1))
    b.add_joint_prismatic(-1, body, axis=(0, 0, 1), **kw)
    return b.finalize()


def test_free_fall():
    b = ModelBuilder()
    b.add_joint_free(-1, b.add_body(1.0, com=(0.1, 0.2, 0.0), inertia=(0.1, 0.1, 0.1)))
    m = b.finalize()
    fm = free_motion(m, [0, 0, 1, 0, 0, 0, 1.0], np.zeros(6), H)
    np.testing.assert_allclose(fm.v_star, [0, 0, 0, 0, 0, -9.81 * H], atol=1e-15)


def test_damping_is_backward_euler():
    m = slider(damping=50.0)
    fm = free_motion(m, [0.0], [1.0], H)
    # (M + hD)(v* − v₀) = h(−mg − D v₀)  ⇔  (M + hD) v* = M v₀ − h m g.
    assert fm.v_star[0] == pytest.approx((2.0 * 1.0 - H * 2.0 * 9.81) / (2.0 + H * 50.0), rel=1e-14)
    np.testing.assert_allclose(fm.A, [[2.0 + H * 50.0]])


def test_forces_and_explicit_actuation():
    m = slider(effort_limit=10.0)
    fm = free_motion(m, [0.0], [0.0], H, joint_f=[3.0], joint_act=[25.0])
    # joint_act is clamped to ±10 N; joint_f is not.
    assert fm.k[0] == pytest.approx(-2 * 9.81 + 3.0 + 10.0)
    driven = slider(target_ke=100.0, effort_limit=10.0)
    assert explicit_actuation(driven, [25.0])[0] == 0.0  # inside the drive constraint instead
    np.testing.assert_array_equal(explicit_actuation(m, [-25.0]), [-10.0])


@settings(max_examples=50)
@given(random_models(max_bodies=5))
def test_momentum_balance(case):
    model, q, qd = case
    v0 = joint_qd_public_to_sap(model, q, qd)
    fm = free_motion(model, q, v0, H)
    np.testing.assert_allclose(fm.A @ (fm.v_star - v0), H * fm.k, atol=1e-10 * (1 + np.abs(H * fm.k).max()))
    np.testing.assert_allclose(fm.k, -bias_forces(model, q, v0) - model.joint_damping * v0, rtol=1e-14)


@settings(max_examples=50)
@given(random_models(max_bodies=5))
def test_fp32_solve_is_really_float32(case):
    model, q, qd = case
    v0 = joint_qd_public_to_sap(model, q, qd)
    f64 = free_motion(model, q, v0, H, precision="fp64")
    f32 = free_motion(model, q, v0, H, precision="fp32")
    dv64, dv32 = f64.v_star - v0, f32.v_star - v0
    # Rounding A and h·k to float32 (relative 6e-8 each) perturbs Δv by about κ(A)·6e-8.
    bound = 10 * np.linalg.cond(f64.A) * np.finfo(np.float32).eps * np.abs(dv64).max() + 1e-30
    assert np.abs(dv32 - dv64).max() <= bound
    # From rest v* is the float32 increment itself: every entry is a float32 number.
    rest = free_motion(model, q, np.zeros_like(v0), H, precision="fp32").v_star
    np.testing.assert_array_equal(rest.astype(np.float32).astype(np.float64), rest)

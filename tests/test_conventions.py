"""sap_common.conventions: the public ↔ SAP maps (docs/conventions.md), property-tested (≥ 200 examples)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import random_models, vectors

from sap_common import conventions as cv
from sap_common import spatial
from sap_common.builder import ModelBuilder
from sap_common.model import JointType

N = 200
TOL = 1e-12  # a few float64 ulps of O(10) quantities


@settings(max_examples=N)
@given(vectors(3, -2, 2))
def test_P_f_is_inverse_transpose_of_P_v(r):
    np.testing.assert_allclose(cv.P_f(r), np.linalg.inv(cv.P_v(r)).T, atol=TOL)
    np.testing.assert_allclose(cv.P_f(r).T @ cv.P_v(r), np.eye(6), atol=TOL)


@settings(max_examples=N)
@given(vectors(3, -2, 2), vectors(6), vectors(6))
def test_P_v_P_f_meaning_and_power(r, x, w):
    v_C, omega = x[:3], x[3:]
    np.testing.assert_allclose(cv.P_v(r) @ x, np.concatenate([omega, v_C - np.cross(omega, r)]), atol=TOL * 10)
    f, tau_C = w[:3], w[3:]
    np.testing.assert_allclose(cv.P_f(r) @ w, np.concatenate([tau_C + np.cross(r, f), f]), atol=TOL * 10)
    assert (cv.P_f(r) @ w) @ (cv.P_v(r) @ x) == pytest.approx(w @ x, rel=1e-12, abs=1e-10)


def _floating_mask(model):
    m = np.zeros(model.joint_dof_count, dtype=bool)
    for j in range(model.joint_count):
        if model.joint_type[j] in (JointType.FREE, JointType.DISTANCE):
            m[model.joint_qd_slice(j)] = True
    return m


@settings(max_examples=N)
@given(random_models(max_bodies=4), st.data())
def test_joint_arrays_round_trip_and_preserve_power(case, data):
    model, q, qd = case
    f = data.draw(vectors(model.joint_dof_count)) if model.joint_dof_count else np.zeros(0)
    qd_sap = cv.joint_qd_public_to_sap(model, q, qd)
    f_sap = cv.joint_f_public_to_sap(model, q, f)
    np.testing.assert_allclose(cv.joint_qd_sap_to_public(model, q, qd_sap), qd, atol=TOL * 10)
    np.testing.assert_allclose(cv.joint_f_sap_to_public(model, q, f_sap), f, atol=TOL * 10)
    assert f_sap @ qd_sap == pytest.approx(f @ qd, rel=1e-11, abs=1e-9)
    # Only FREE/DISTANCE segments change; every other segment is copied bit for bit.
    other = ~_floating_mask(model)
    assert np.array_equal(qd_sap[other], qd[other]) and np.array_equal(f_sap[other], f[other])


@settings(max_examples=N)
@given(random_models(max_bodies=4), st.data())
def test_body_wrench_round_trip_and_power(case, data):
    from sap_common.kinematics import body_state

    model, q, qd = case
    body_q, body_qd = body_state(model, q, qd, "public")
    F = np.stack([data.draw(vectors(6)) for _ in range(model.body_count)])[None]
    F_sap = cv.body_f_public_to_sap(model, body_q, F)
    np.testing.assert_allclose(cv.body_f_sap_to_public(model, body_q, F_sap), F, atol=TOL * 10)
    V_sap = cv.body_twist_public_to_sap(model, body_q, body_qd)
    np.testing.assert_allclose(cv.body_twist_sap_to_public(model, body_q, V_sap), body_qd, atol=TOL * 10)
    assert np.sum(F_sap * V_sap) == pytest.approx(np.sum(F * body_qd), rel=1e-11, abs=1e-9)


def _one_free_body(com):
    b = ModelBuilder()
    body = b.add_body(1.0, com=com, inertia=(0.1, 0.2, 0.25))
    b.add_joint_free(-1, body)
    return b.finalize()


@settings(max_examples=N)
@given(vectors(3, -0.5, 0.5).filter(lambda c: np.linalg.norm(c) > 1e-2), st.floats(0.1, 3.0), vectors(6, -2, 2))
def test_conversion_uses_current_orientation(com, angle, qd):
    # The same public velocity maps to different SAP velocities when the body has turned,
    # because r = R_WB · com turns with it.
    model = _one_free_body(com)
    axis = np.cross(com, [0.3, 0.5, 0.8])
    axis = axis if np.linalg.norm(axis) > 1e-6 else np.array([1.0, 0.0, 0.0])
    q0 = np.array([0, 0, 0, 0, 0, 0, 1.0])
    q1 = np.concatenate([[0, 0, 0], spatial.quat_from_axis_angle(axis, angle)])
    r1 = spatial.quat_rotate(q1[3:], com)
    expected = np.concatenate([qd[3:], qd[:3] - np.cross(qd[3:], r1)])
    np.testing.assert_allclose(cv.joint_qd_public_to_sap(model, q1, qd), expected, atol=TOL * 10)
    if np.linalg.norm(qd[3:]) > 1e-3:
        assert not np.allclose(cv.joint_qd_public_to_sap(model, q0, qd), cv.joint_qd_public_to_sap(model, q1, qd))


def test_drake_unnormalized_quaternion_is_normalized_for_r():
    model = _one_free_body([0.1, 0.0, 0.0])
    q = np.array([0, 0, 0, 0, 0, 0, 1.0143])  # Drake lets |q| drift (docs/formulation.md § Integration)
    qd = np.array([0, 0, 0, 0, 0, 1.0])  # ω = z
    np.testing.assert_allclose(cv.joint_qd_public_to_sap(model, q, qd), [0, 0, 1, 0, -0.1, 0], atol=1e-15)


def test_batched_and_single_world_agree():
    model = _one_free_body([0.1, -0.2, 0.05]).replicate(3)
    rng = np.random.default_rng(0)
    q = np.concatenate([rng.normal(size=(3, 3)), spatial.quat_normalize(rng.normal(size=(3, 4)))], 1)
    qd = rng.normal(size=(3, 6))
    batched = cv.joint_qd_public_to_sap(model, q, qd)
    for w in range(3):
        np.testing.assert_array_equal(batched[w], cv.joint_qd_public_to_sap(model, q[w], qd[w]))


def test_bad_order_flag_and_shapes():
    with pytest.raises(ValueError, match="joint_qd_order.*'public', 'sap'"):
        cv.check_order("joint_qd_order", "world")
    model = _one_free_body([0, 0, 0])
    with pytest.raises(ValueError, match="joint_qd: expected shape"):
        cv.joint_qd_public_to_sap(model, np.zeros(7), np.zeros(5))
    with pytest.raises(ValueError, match="body_f: expected shape"):
        cv.body_f_public_to_sap(model, np.zeros((1, 7)), np.zeros((2, 6)))


@settings(max_examples=N)
@given(vectors(3, -0.5, 0.5), vectors(4, -1, 1).filter(lambda q: np.linalg.norm(q) > 0.1), vectors(6, -2, 2))
def test_float32_boundary_pose(com, quat, qd):
    """``pose_dtype=float32`` (use_f64_boundary_pose off): r from the float32 pose, still exact round trip."""
    model = _one_free_body(com)
    q = np.concatenate([[0.1, 0.2, 0.3], quat])
    sap64 = cv.joint_qd_public_to_sap(model, q, qd)
    sap32 = cv.joint_qd_public_to_sap(model, q, qd, pose_dtype=np.float32)
    # r differs from the float64 r by float32 rounding of an O(|com|) vector.
    assert (np.abs(sap32 - sap64).max()
            <= 8 * np.finfo(np.float32).eps * (1 + np.abs(qd).max()) * (1 + np.linalg.norm(com)))
    back = cv.joint_qd_sap_to_public(model, q, sap32, pose_dtype=np.float32)
    np.testing.assert_allclose(back, qd, atol=TOL * 10)
    with pytest.raises(ValueError, match="pose_dtype: must be float32 or float64"):
        cv.joint_qd_public_to_sap(model, q, qd, pose_dtype=np.float16)

"""sap_ref.contact_jacobian: frames, Jacobians, weights and regularization.

docs/formulation.md § Contact frame and Jacobian, Weights, Regularization.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from strategies import random_models, unit_vectors

from sap_common.builder import ModelBuilder, solid_sphere_inertia
from sap_common.conventions import joint_qd_public_to_sap
from sap_common.state import SapContacts
from sap_ref.contact_jacobian import (
    body_inertia_weights,
    contact_frames,
    contact_geometry,
    contact_points,
    contact_regularization,
    delassus_weights,
)
from sap_ref.kinematics import body_jacobians, body_velocities, forward_kinematics, point_jacobian


@settings(max_examples=200)
@given(unit_vectors())
def test_frames_are_drakes_right_handed_basis(n):
    R = contact_frames(n[None])[0]
    np.testing.assert_allclose(R @ R.T, np.eye(3), atol=1e-14)
    assert np.linalg.det(R) == pytest.approx(1.0, abs=1e-14)
    np.testing.assert_array_equal(R[:, 2], n)
    i = int(np.argmin(np.abs(n)))
    assert R[i, 0] == 0.0 and R[i, 1] >= 0.0  # MakeFromOneUnitVector: x-axis ⊥ e_i, y-axis along +e_i


def test_frame_of_vertical_normal_matches_drake():
    # u = (0, 0, 1): i = 0 (first smallest), j = 1, k = 2 → x = (0, −1, 0), y = (1, 0, 0).
    np.testing.assert_allclose(contact_frames([[0.0, 0.0, 1.0]])[0], [[0, 1, 0], [-1, 0, 0], [0, 0, 1]])


def test_midpoint_weights():
    x0, x1 = np.zeros((4, 3)), np.ones((4, 3))
    k0, k1 = np.array([1e5, 0.0, np.inf, 3.0]), np.array([1e5, 0.0, 1e6, np.inf])
    p, _ = contact_points(x0, x1, k0, k1, "contact_midpoint")
    # p = α₀x₀ + α₁x₁ with α₀ = k₀/(k₀+k₁): equal → ½, 0/0 → ½, ∞ beats finite.
    np.testing.assert_allclose(p[:, 0], [0.5, 0.5, 0.0, 1.0])
    q0, q1 = contact_points(x0, x1, k0, k1, "witness_point")
    assert np.array_equal(q0, x0) and np.array_equal(q1, x1)
    with pytest.raises(ValueError, match="contact_point_mode"):
        contact_points(x0, x1, k0, k1, "centroid")


def _two_body_contact(model, q, b0, b1, p0, p1, n):
    c = SapContacts.allocate(1, 1)
    c.count[0] = 1
    c.body0[0, 0], c.body1[0, 0] = b0, b1
    c.shape0[0, 0], c.shape1[0, 0] = 0, 0
    c.x0[0, 0], c.x1[0, 0], c.normal[0, 0] = p0, p1, n
    c.ke0[0, 0] = c.ke1[0, 0] = c.ke[0, 0] = 1e6
    return c


@settings(max_examples=100)
@given(random_models(max_bodies=4), unit_vectors())
def test_jacobian_gives_relative_velocity_in_the_contact_frame(case, n):
    model, q, qd = case
    v = joint_qd_public_to_sap(model, q, qd)
    body_q = forward_kinematics(model, q)
    J_b = body_jacobians(model, q, body_q)
    b0, b1 = -1, model.body_count - 1
    p0, p1 = np.array([0.1, 0.2, 0.3]), np.array([0.1, 0.2, 0.29])
    geo = contact_geometry(model, _two_body_contact(model, q, b0, b1, p0, p1, n), 0, body_q, J_b, "witness_point")
    V = body_velocities(model, q, v, body_q)
    v1 = V[b1, 3:] + np.cross(V[b1, :3], p1 - body_q[b1, :3])
    np.testing.assert_allclose(geo.J[0] @ v, geo.R_WC[0].T @ v1, atol=1e-12)
    np.testing.assert_allclose(point_jacobian(model, b1, p1, body_q, J_b) @ v, v1, atol=1e-12)


def _ball():
    b = ModelBuilder()
    ball = b.add_body(1.0, inertia=solid_sphere_inertia(1.0, 0.1))
    b.add_joint_free(-1, ball, q0=(0, 0, 0.1, 0, 0, 0, 1))
    return b.finalize()


def test_sphere_drop_delassus_weight_and_near_rigid_regime():
    """Drake's sphere_drop at rest (anchor README): w = 1.682, R_n = β²w/(4π²) = 0.0426 wins over
    the compliant 0.00995, effective stiffness 1/(h(h+τ)R_n) = 116 753 N/m."""
    m = _ball()
    depth = 84.5e-6  # the resting penetration Drake reaches
    q = np.array([0, 0, 0.1 - depth, 0, 0, 0, 1.0])
    body_q = forward_kinematics(m, q)
    contacts = _two_body_contact(m, q, -1, 0, [0, 0, 0.0], [0, 0, -depth], [0, 0, 1.0])
    geo = contact_geometry(m, contacts, 0, body_q, body_jacobians(m, q, body_q), "contact_midpoint")
    A_diag = np.array([0.004, 0.004, 0.004, 1, 1, 1])
    w = delassus_weights(geo.J, A_diag)
    # W = diag(1 + r²/I, 1 + r²/I, 1) with r the lever arm to the contact point; w = ‖W‖_F / 3.
    r = 0.1 - depth / 2
    assert w[0] == pytest.approx(np.sqrt(2 * (1 + r * r / 0.004) ** 2 + 1) / 3, rel=1e-14)
    assert w[0] == pytest.approx(1.682, abs=1e-3)  # the README quotes 4 digits
    R, v_hat = contact_regularization(w, [5e5], [0.2], [-depth], 1e-3, 1.0, 1e-3)
    assert R[0, 2] == pytest.approx(w[0] / (4 * np.pi**2))  # near-rigid floor wins over 0.00995
    assert 1 / (1e-3 * 5e5 * (1e-3 + 0.2)) == pytest.approx(0.00995, abs=1e-5)
    assert R[0, 0] == R[0, 1] == pytest.approx(1e-3 * w[0])
    assert v_hat[0].tolist() == [0, 0, pytest.approx(depth / 0.201)]
    assert 1 / (1e-3 * 0.201 * R[0, 2]) == pytest.approx(116753, rel=2e-4)  # README rounding of depth


def test_body_inertia_weight_of_a_sphere():
    m = _ball()
    q = m.joint_q_init
    body_q = forward_kinematics(m, q)
    contacts = _two_body_contact(m, q, -1, 0, [0, 0, 0.0], [0, 0, 0.0], [0, 0, 1.0])
    geo = contact_geometry(m, contacts, 0, body_q, body_jacobians(m, q, body_q), "witness_point")
    # ω(c) = 1/m + |r × c|²/I: two tangents with |r × t| = 0.1, the normal with 0 → mean (3.5+3.5+1)/3.
    assert body_inertia_weights(m, geo, body_q)[0] == pytest.approx(8.0 / 3.0, rel=1e-14)
    w32 = body_inertia_weights(m, geo, body_q, "fp32")
    assert w32.dtype == np.float32 and w32[0] == pytest.approx(8.0 / 3.0, rel=1e-6)


def test_rigid_contact_and_compliant_regime():
    R, _ = contact_regularization([1.0, 1.0], [np.inf, 1e3], [0.0, 0.01], [0.0, 0.0], 1e-3, 1.0, 1e-3)
    assert R[0, 2] == pytest.approx(1 / (4 * np.pi**2))  # k = ∞: the near-rigid value
    assert R[1, 2] == pytest.approx(1 / (1e-3 * 1e3 * 0.011))  # soft: the compliant value
    R32, vh32 = contact_regularization([1.0], [1e5], [0.0], [-1e-3], 1e-3, 1.0, 1e-3, "fp32")
    assert R32.dtype == np.float32 and vh32.dtype == np.float32

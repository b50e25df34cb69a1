"""sap_ref.kinematics: Jacobians, motion subspaces and N(q) against finite differences."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import random_models, vectors

from sap_common import spatial
from sap_common.builder import ModelBuilder
from sap_common.conventions import joint_qd_public_to_sap
from sap_ref import kinematics as K

# Float64 products of a handful of rotations and lever arms of O(1) m.
TOL = 1e-12
# Central differences with h = 1e-6 on O(1) poses: truncation O(h²), rounding O(ε/h) ~ 1e-10.
FD_TOL = 2e-7


@settings(max_examples=100)
@given(random_models(max_bodies=6))
def test_body_jacobians_give_body_velocities(case):
    model, q, qd = case
    v = joint_qd_public_to_sap(model, q, qd)
    J = K.body_jacobians(model, q)
    np.testing.assert_allclose(J @ v, K.body_velocities(model, q, v), atol=TOL * 100)


@settings(max_examples=100)
@given(random_models(max_bodies=5))
def test_qdot_map_is_the_time_derivative_of_q(case):
    """Poses along q ± h N(q) v change at the body velocities: N maps qd to q̇ (quaternions too)."""
    model, q, qd = case
    v = joint_qd_public_to_sap(model, q, qd)
    N = K.qdot_map(model, q)
    h = 1e-6
    Xp = K.forward_kinematics(model, q + h * N @ v)
    Xm = K.forward_kinematics(model, q - h * N @ v)
    V = K.body_velocities(model, q, v)
    np.testing.assert_allclose((Xp[:, :3] - Xm[:, :3]) / (2 * h), V[:, 3:], atol=FD_TOL)
    w_fd = spatial.quat_log(spatial.quat_multiply(Xp[:, 3:], spatial.quat_conjugate(Xm[:, 3:]))) / (2 * h)
    np.testing.assert_allclose(w_fd, V[:, :3], atol=FD_TOL)


@settings(max_examples=50)
@given(random_models(max_bodies=4), st.data())
def test_point_jacobian_moves_with_the_body(case, data):
    model, q, qd = case
    v = joint_qd_public_to_sap(model, q, qd)
    body_q = K.forward_kinematics(model, q)
    J = K.body_jacobians(model, q, body_q)
    b = data.draw(st.integers(0, model.body_count - 1))
    offset_B = data.draw(vectors(3, -1, 1))  # a point fixed on body b
    p_W = spatial.transform_point(body_q[b], offset_B)
    h = 1e-6
    N = K.qdot_map(model, q)
    pp = spatial.transform_point(K.forward_kinematics(model, q + h * N @ v)[b], offset_B)
    pm = spatial.transform_point(K.forward_kinematics(model, q - h * N @ v)[b], offset_B)
    np.testing.assert_allclose(K.point_jacobian(model, b, p_W, body_q, J) @ v, (pp - pm) / (2 * h), atol=FD_TOL)
    assert not np.any(K.point_jacobian(model, -1, p_W, body_q, J))


def test_qdot_map_uses_the_unnormalized_quaternion():
    b = ModelBuilder()
    b.add_joint_free(-1, b.add_body(1.0, inertia=(1, 1, 1)))
    m = b.finalize()
    q = np.array([0, 0, 0, 0, 0, 0, 2.0])  # |q| = 2: Drake keeps it unnormalized
    N = K.qdot_map(m, q)
    # q̇_quat = ½ (ω, 0) ⊗ q scales with |q|.
    np.testing.assert_allclose(N[3:7, :3] @ [0, 0, 1.0], [0, 0, 1.0, 0])
    np.testing.assert_array_equal(N[:3, 3:], np.eye(3))


def test_update_body_state_respects_the_order_flag():
    b = ModelBuilder()
    body = b.add_body(1.0, com=(0.1, 0, 0), inertia=(1, 1, 1))
    b.add_joint_free(-1, body)
    m = b.finalize()
    s = m.state()
    s.joint_qd[0] = [0, 0, 0, 0, 0, 1.0]  # public: ω = z, COM at rest
    K.update_body_state(m, s)
    np.testing.assert_allclose(s.body_qd[0, 0], [0, 0, 0, 0, 0, 1.0])
    s.joint_qd_order = "sap"
    s.joint_qd[0] = [0, 0, 1.0, 0, 0, 0]  # sap: ω = z, origin at rest -> COM moves at ω × r
    K.update_body_state(m, s)
    np.testing.assert_allclose(s.body_qd[0, 0], [0, 0.1, 0, 0, 0, 1.0], atol=1e-15)

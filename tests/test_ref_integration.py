"""sap_ref.integration: Drake's sap_euler map and the normalized midpoint map."""

import numpy as np
import pytest

from sap_common import spatial
from sap_common.builder import ModelBuilder
from sap_ref.integration import integrate_positions, midpoint, sap_euler


def free_and_hinge():
    b = ModelBuilder()
    b.add_joint_free(-1, b.add_body(1.0, inertia=(1, 1, 1)))
    b.add_joint_revolute(0, b.add_body(1.0, inertia=(1, 1, 1)), axis=(0, 1, 0))
    b.add_joint_ball(1, b.add_body(1.0, inertia=(1, 1, 1)))
    return b.finalize()


def test_sap_euler_matches_drake_and_lets_the_norm_drift():
    m = free_and_hinge()
    q0 = np.concatenate([[1, 2, 3], spatial.quat_from_axis_angle([0, 0, 1], 0.3), [0.5], [0, 0, 0, 1]])
    w = np.array([0.0, 0.0, 9.0])
    v1 = np.concatenate([w, [1, 0, 0], [2.0], [0, 3.0, 0]])
    h = 0.01
    q1 = sap_euler(m, q0, v1, h)
    np.testing.assert_allclose(q1[:3], [1 + h, 2, 3])
    assert q1[7] == 0.5 + h * 2.0
    # |q| grows by sqrt(1 + (h|ω|/2)²) per step (docs/formulation.md § Integration): the increment is orthogonal to q.
    assert np.linalg.norm(q1[3:7]) == pytest.approx(np.sqrt(1 + (h * 9.0 / 2) ** 2), rel=1e-15)
    np.testing.assert_allclose(q1[3:7], q0[3:7] + h * spatial.quat_derivative(q0[3:7], w), atol=1e-16)


def test_midpoint_uses_the_average_velocity_and_normalizes():
    m = free_and_hinge()
    q0 = np.concatenate([[0, 0, 0], [0, 0, 0, 1], [0.0], [0, 0, 0, 1]])
    v0 = np.concatenate([[0, 0, 1.0], [1, 0, 0], [1.0], [0, 0, 2.0]])
    v1 = np.concatenate([[0, 0, 3.0], [3, 0, 0], [3.0], [0, 0, 4.0]])
    h = 0.1
    q1 = midpoint(m, q0, v0, v1, h)
    np.testing.assert_allclose(q1[:3], [0.2, 0, 0])
    assert q1[7] == pytest.approx(0.2)
    # Rotation by exactly h·ω̄ = 0.2 rad about z (free) and 0.3 rad (ball), unit norm.
    np.testing.assert_allclose(q1[3:7], spatial.quat_from_axis_angle([0, 0, 1], 0.2), atol=1e-15)
    np.testing.assert_allclose(q1[8:12], spatial.quat_from_axis_angle([0, 0, 1], 0.3), atol=1e-15)


def test_mode_dispatch_and_error():
    m = free_and_hinge()
    q0 = m.joint_q_init
    v = np.ones(m.joint_dof_count)
    np.testing.assert_array_equal(integrate_positions(m, q0, v, v, 0.01, "sap_euler"), sap_euler(m, q0, v, 0.01))
    np.testing.assert_array_equal(integrate_positions(m, q0, v, v, 0.01, "midpoint"), midpoint(m, q0, v, v, 0.01))
    with pytest.raises(ValueError, match=r"position_integration: 'rk4' is not valid; valid: midpoint, sap_euler"):
        integrate_positions(m, q0, v, v, 0.01, "rk4")

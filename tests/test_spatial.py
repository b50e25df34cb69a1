"""sap_common.spatial: rotation and transform algebra, property-tested (≥ 200 examples each)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import quaternions, transforms, unit_vectors, vectors

from sap_common import spatial

N = 200  # at least 200 examples per property
# float64 identities of products of a few rotations: ~10 ulps of the values involved.
TOL = 1e-12


@settings(max_examples=N)
@given(quaternions())
def test_rotation_matrix_is_orthonormal(q):
    R = spatial.quat_to_matrix(q)
    np.testing.assert_allclose(R @ R.T, np.eye(3), atol=TOL)
    assert np.linalg.det(R) == pytest.approx(1.0, abs=TOL)


@settings(max_examples=N)
@given(quaternions(unit=False))
def test_quaternion_times_inverse_is_identity(q):
    np.testing.assert_allclose(spatial.quat_multiply(q, spatial.quat_inverse(q)), [0, 0, 0, 1], atol=TOL)
    np.testing.assert_allclose(spatial.quat_multiply(spatial.quat_inverse(q), q), [0, 0, 0, 1], atol=TOL)


@settings(max_examples=N)
@given(quaternions(), quaternions(), vectors())
def test_product_composes_rotations(a, b, v):
    ab = spatial.quat_multiply(a, b)
    np.testing.assert_allclose(spatial.quat_rotate(ab, v), spatial.quat_rotate(a, spatial.quat_rotate(b, v)),
                               atol=TOL * 10)
    np.testing.assert_allclose(spatial.quat_to_matrix(ab), spatial.quat_to_matrix(a) @ spatial.quat_to_matrix(b),
                               atol=TOL)


@settings(max_examples=N)
@given(quaternions(), vectors())
def test_rotate_matches_matrix_and_inverse(q, v):
    np.testing.assert_allclose(spatial.quat_rotate(q, v), spatial.quat_to_matrix(q) @ v, atol=TOL * 10)
    np.testing.assert_allclose(spatial.quat_rotate_inv(q, spatial.quat_rotate(q, v)), v, atol=TOL * 10)


@settings(max_examples=N)
@given(quaternions())
def test_matrix_round_trip(q):
    q2 = spatial.quat_from_matrix(spatial.quat_to_matrix(q))
    assert q2[3] >= 0.0
    # q and −q are one rotation (and both have w = 0 for half turns): compare up to sign.
    assert min(np.abs(q2 - q).max(), np.abs(q2 + q).max()) < TOL


@settings(max_examples=N)
@given(unit_vectors(), st.floats(-3.0, 3.0))
def test_axis_angle_round_trip(axis, angle):
    q = spatial.quat_from_axis_angle(axis, angle)
    a2, t2 = spatial.quat_to_axis_angle(q)
    # (axis, angle) and (-axis, -angle) are one rotation; the map returns angle in [0, π].
    np.testing.assert_allclose(a2 * t2, axis * angle, atol=1e-9)
    np.testing.assert_allclose(spatial.quat_exp(axis * angle), q, atol=TOL)
    np.testing.assert_allclose(spatial.quat_log(q), axis * angle, atol=1e-9)


@settings(max_examples=N)
@given(quaternions(), vectors(3, -5, 5))
def test_exp_increment_matches_derivative(q, w):
    # exp(ω h) ⊗ q = q + h q̇ + O(h²) with q̇ = ½ (ω, 0) ⊗ q.
    h = 1e-6
    q1 = spatial.quat_integrate(q, w, h)
    np.testing.assert_allclose((q1 - q) / h, spatial.quat_derivative(q, w), atol=1e-4)
    np.testing.assert_allclose(spatial.quat_derivative_matrix(q) @ w, spatial.quat_derivative(q, w), atol=TOL)
    # The increment rotates by exactly |ω| h about ω.
    assert spatial.quat_angle_between(q, spatial.quat_integrate(q, w, 0.1)) == pytest.approx(
        min(np.linalg.norm(w) * 0.1, 2 * np.pi - np.linalg.norm(w) * 0.1), abs=1e-9)


@settings(max_examples=N)
@given(transforms(5.0), transforms(5.0), vectors())
def test_compose_and_inverse(X_AB, X_BC, p_C):
    X_AC = spatial.transform_compose(X_AB, X_BC)
    np.testing.assert_allclose(spatial.transform_point(X_AC, p_C),
                               spatial.transform_point(X_AB, spatial.transform_point(X_BC, p_C)), atol=1e-11)
    I = spatial.transform_compose(X_AB, spatial.transform_inverse(X_AB))
    np.testing.assert_allclose(I[:3], 0.0, atol=1e-11)
    assert spatial.quat_angle_between(I[3:], [0, 0, 0, 1]) < 1e-7
    np.testing.assert_allclose(spatial.transform_point(spatial.transform_inverse(X_AB),
                                                       spatial.transform_point(X_AB, p_C)), p_C, atol=1e-11)
    T = spatial.transform_to_matrix(X_AB) @ spatial.transform_to_matrix(X_BC)
    np.testing.assert_allclose(spatial.transform_to_matrix(X_AC), T, atol=1e-11)


@settings(max_examples=N)
@given(vectors(), vectors())
def test_skew_is_cross_product(a, b):
    np.testing.assert_allclose(spatial.skew(a) @ b, np.cross(a, b), atol=TOL * 100)
    np.testing.assert_allclose(spatial.skew(a), -spatial.skew(a).T)


@settings(max_examples=N)
@given(vectors(6), vectors(6), vectors(6))
def test_spatial_cross_products(a, b, f):
    np.testing.assert_allclose(spatial.spatial_cross_motion_matrix(a) @ b, spatial.spatial_cross_motion(a, b),
                               atol=1e-10)
    np.testing.assert_allclose(spatial.spatial_cross_force_matrix(a) @ f, spatial.spatial_cross_force(a, f),
                               atol=1e-10)
    # Duality: the power of a ×_f f against b is minus that of f against a ×ₘ b.
    assert spatial.spatial_cross_force(a, f) @ b == pytest.approx(-f @ spatial.spatial_cross_motion(a, b), abs=1e-8)
    np.testing.assert_allclose(spatial.spatial_cross_motion(a, a), 0.0, atol=1e-10)


@settings(max_examples=N)
@given(quaternions(), vectors(), vectors(6), vectors(6))
def test_adjoints_preserve_power(q, p, V, F):
    R = spatial.quat_to_matrix(q)
    Ad, AdF = spatial.spatial_adjoint(R, p), spatial.spatial_adjoint_force(R, p)
    np.testing.assert_allclose(AdF, np.linalg.inv(Ad).T, atol=1e-10)
    assert (AdF @ F) @ (Ad @ V) == pytest.approx(F @ V, rel=1e-9, abs=1e-9)


@settings(max_examples=N)
@given(st.floats(0.1, 10.0), vectors(3, -1, 1), vectors(3, -3, 3), vectors(3, -3, 3))
def test_spatial_inertia_kinetic_energy(m, c, w, v_O):
    # ½ Vᵀ M V = ½ m |v_C|² + ½ ωᵀ I_C ω with v_C = v_O + ω × c (a box inertia about the COM).
    I_C = np.diag([0.3, 0.4, 0.5]) * m
    M = spatial.spatial_inertia(m, c, I_C)
    V = np.concatenate([w, v_O])
    v_C = v_O + np.cross(w, c)
    assert 0.5 * V @ M @ V == pytest.approx(0.5 * m * v_C @ v_C + 0.5 * w @ I_C @ w, rel=1e-10, abs=1e-12)
    assert np.all(np.linalg.eigvalsh(M) > 0)


def test_rpy_is_space_fixed_xyz():
    r, p, y = 0.3, -0.2, 0.5
    Rx = spatial.quat_to_matrix(spatial.quat_from_axis_angle([1, 0, 0], r))
    Ry = spatial.quat_to_matrix(spatial.quat_from_axis_angle([0, 1, 0], p))
    Rz = spatial.quat_to_matrix(spatial.quat_from_axis_angle([0, 0, 1], y))
    np.testing.assert_allclose(spatial.quat_to_matrix(spatial.quat_from_rpy([r, p, y])), Rz @ Ry @ Rx, atol=1e-15)


def test_batched_shapes_and_identity():
    q = spatial.quat_identity((2, 3))
    assert q.shape == (2, 3, 4)
    assert spatial.transform_identity(5).shape == (5, 7)
    np.testing.assert_allclose(spatial.quat_to_matrix(q), np.broadcast_to(np.eye(3), (2, 3, 3, 3)))
    # Unnormalized quaternions (Drake's drifted state) give the same rotation as normalized ones.
    np.testing.assert_allclose(spatial.quat_to_matrix([0, 0, 0, 1.0143]), np.eye(3))


def test_zero_quaternion_is_rejected():
    with pytest.raises(ValueError, match="quaternion"):
        spatial.quat_normalize([0.0, 0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="axis"):
        spatial.quat_from_axis_angle([0.0, 0.0, 0.0], 1.0)

"""sap_ref.dynamics: CRBA, RNEA and gravity against Drake, the Jacobian form and energy identities.

The comparison with MuJoCo's mj_fullM / qfrc_bias is in test_ref_dynamics_mujoco.py.
"""

import numpy as np
import pytest
from conftest import DRAKE_ANCHORS
from hypothesis import given, settings
from strategies import random_models

from sap_common.builder import ModelBuilder
from sap_common.conventions import joint_qd_public_to_sap
from sap_common.io import drake_qv_to_joint, load_json, load_recording
from sap_ref import dynamics as D
from sap_ref.kinematics import body_jacobians, forward_kinematics, qdot_map

# Required: 1e-10 against Drake's recorded M, C v and τ_g (observed ≤ 3e-15).
DRAKE_DYNAMICS_TOL = 1e-10
# Two float64 evaluations of the same sums in different orders, entries O(1..10).
RTOL = 1e-11


@pytest.mark.parametrize("path", DRAKE_ANCHORS, ids=lambda p: p.stem)
@pytest.mark.parametrize("row", ["0", "final"])
def test_drake_mass_matrix_bias_and_gravity(path, row):
    scene = load_json(path)
    rec = load_recording(scene)
    k = 0 if row == "0" else -1
    q, v = drake_qv_to_joint(scene, rec["q"][k], rec["v"][k], joint_qd_order="sap")
    m = scene.sap_model
    M, g = D.mass_matrix(m, q), D.gravity_forces(m, q)
    Cv = D.bias_forces(m, q, v) + g
    suffix = "0" if row == "0" else "_final"
    np.testing.assert_allclose(M, rec[f"M{suffix}"], atol=DRAKE_DYNAMICS_TOL, rtol=0)
    np.testing.assert_allclose(Cv, rec[f"bias_term{suffix}"], atol=DRAKE_DYNAMICS_TOL, rtol=0)
    np.testing.assert_allclose(g, rec[f"gravity_forces{suffix}"], atol=DRAKE_DYNAMICS_TOL, rtol=0)


@settings(max_examples=100)
@given(random_models(max_bodies=8))
def test_crba_equals_jacobian_form_and_is_spd(case):
    model, q, _ = case
    M = D.mass_matrix(model, q)
    np.testing.assert_allclose(M, D.mass_matrix_jacobian_form(model, q), rtol=RTOL, atol=RTOL * np.abs(M).max())
    np.testing.assert_array_equal(M, M.T)
    assert np.linalg.eigvalsh(M)[0] > 0.0


@settings(max_examples=100)
@given(random_models(max_bodies=6))
def test_gravity_is_the_jacobian_transpose_of_body_weights(case):
    model, q, _ = case
    body_q = forward_kinematics(model, q)
    J = body_jacobians(model, q, body_q)
    from sap_common import spatial
    c = spatial.quat_rotate(body_q[:, 3:], model.body_com)
    f = model.body_mass[:, None] * model.gravity
    W = np.concatenate([np.cross(c, f), f], axis=1)  # weight as a wrench about each origin
    expected = np.einsum("bki,bk->i", J, W)
    np.testing.assert_allclose(D.gravity_forces(model, q), expected, rtol=RTOL, atol=1e-10)
    np.testing.assert_allclose(D.body_wrench_forces(model, q, W), expected, rtol=RTOL, atol=1e-10)


@settings(max_examples=100)
@given(random_models(max_bodies=6))
def test_velocity_terms_satisfy_the_energy_identity(case):
    """vᵀ C(q,v) v = ½ vᵀ Ṁ v, Ṁ along q̇ = N(q) v (kinetic energy changes only by work)."""
    model, q, qd = case
    v = joint_qd_public_to_sap(model, q, qd)
    Cv = D.bias_forces(model, q, v) + D.gravity_forces(model, q)
    h = 1e-6
    N = qdot_map(model, q)
    M_dot = (D.mass_matrix(model, q + h * N @ v) - D.mass_matrix(model, q - h * N @ v)) / (2 * h)
    lhs, rhs = v @ Cv, 0.5 * v @ M_dot @ v
    # Central difference: O(h²) truncation and O(ε/h)·|M||v|² rounding.
    assert lhs == pytest.approx(rhs, abs=1e-6 * (1 + np.abs(M_dot).max() * (v @ v)))


def test_free_body_gyroscopic_bias():
    """A free body spinning about its COM (at the origin): bias = [ω × I ω; 0] − τ_g."""
    b = ModelBuilder(gravity=(0, 0, -9.81))
    I = np.array([[0.2, 0.01, 0.0], [0.01, 0.3, 0.02], [0.0, 0.02, 0.4]])
    b.add_joint_free(-1, b.add_body(2.0, inertia=I))
    m = b.finalize()
    q = np.array([0, 0, 0, 0, 0, 0, 1.0])
    w = np.array([1.0, -2.0, 3.0])
    v = np.concatenate([w, [0.5, 0, 0]])
    np.testing.assert_allclose(D.bias_forces(m, q, v), np.concatenate([np.cross(w, I @ w), [0, 0, 2 * 9.81]]),
                               atol=1e-14)
    M = D.mass_matrix(m, q)
    np.testing.assert_allclose(M[:3, :3], I)
    np.testing.assert_allclose(M[3:, 3:], 2.0 * np.eye(3))


def test_armature_is_on_the_diagonal():
    b = ModelBuilder()
    body = b.add_body(2.0, inertia=(0.1, 0.1, 0.1))
    b.add_joint_prismatic(-1, body, axis=(0, 0, 1), armature=0.4)
    m = b.finalize()
    assert D.mass_matrix(m, [0.0])[0, 0] == pytest.approx(2.4)

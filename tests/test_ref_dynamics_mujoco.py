"""sap_ref.dynamics against MuJoCo: M = mj_fullM and C(q,v)v − τ_g = qfrc_bias.

Velocities differ between MuJoCo and us only by the map of ``mujoco_qvel_to_joint_qd``
(v_ours = P(q) v_mj); kinetic energy and power are invariant, so ``M_mj = Pᵀ M P`` and, because
Ṗ v = 0 for both rotating maps (ω × ω = 0), ``qfrc_bias = Pᵀ (C v − τ_g)``.
"""

import warnings

import mujoco
import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from mjcf_strategies import random_mjcf, random_state

from sap_common import scenes
from sap_common.io import load_mjcf, mujoco_qpos_to_joint_q, mujoco_qvel_to_joint_qd
from sap_ref.dynamics import bias_forces, mass_matrix

# The required bound (observed: ≤ 6e-15 relative on random trees and the humanoid).
MUJOCO_RTOL = 1e-9


def _compare(scene, qpos, qvel):
    m, mj = scene.sap_model, scene.mj_model
    d = mujoco.MjData(mj)
    d.qpos[:], d.qvel[:] = qpos, qvel
    mujoco.mj_forward(mj, d)
    M_mj = np.zeros((mj.nv, mj.nv))
    mujoco.mj_fullM(mj, d, M_mj)
    P = np.stack([mujoco_qvel_to_joint_qd(scene, qpos, e) for e in np.eye(mj.nv)], axis=1)
    q = mujoco_qpos_to_joint_q(scene, qpos)
    M = mass_matrix(m, q)
    b = bias_forces(m, q, mujoco_qvel_to_joint_qd(scene, qpos, qvel))
    np.testing.assert_allclose(P.T @ M @ P, M_mj, atol=MUJOCO_RTOL * np.abs(M_mj).max(), rtol=0)
    np.testing.assert_allclose(P.T @ b, d.qfrc_bias, atol=MUJOCO_RTOL * max(1.0, np.abs(d.qfrc_bias).max()), rtol=0)


@settings(max_examples=150)
@given(random_mjcf(), st.integers(0, 2**32 - 1))
def test_random_trees_match_mujoco(xml, seed):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ball-limit / stiffness notices are not the subject here
        scene = load_mjcf(xml)
    assume(scene.mj_model.nv > 0)
    _compare(scene, *random_state(scene.mj_model, np.random.default_rng(seed)))


def test_humanoid_matches_mujoco_at_100_states():
    scene = scenes.get("humanoid")
    rng = np.random.default_rng(7)
    for _ in range(100):
        _compare(scene, *random_state(scene.mj_model, rng))

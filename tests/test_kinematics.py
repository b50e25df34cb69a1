"""sap_common.kinematics: forward kinematics against Drake's recordings and finite differences."""

import json

import numpy as np
import pytest
from conftest import DRAKE_ANCHORS
from hypothesis import given, settings
from strategies import random_models

from sap_common import spatial
from sap_common.builder import ModelBuilder
from sap_common.conventions import joint_qd_public_to_sap
from sap_common.io import drake_qv_to_joint, load_json, load_recording, recorded_body_indices
from sap_common.kinematics import body_velocities, forward_kinematics, joint_transform
from sap_common.model import JointType

# Drake's generator checks its own recorded poses against the documented joint kinematics to
# ≤ 1e-15; products of a handful of rotations in float64 stay within a few 1e-15 as well.
ANCHOR_POSE_TOL = 1e-12
ANCHOR_VELOCITY_TOL = 1e-12


@pytest.mark.parametrize("path", DRAKE_ANCHORS, ids=lambda p: p.stem)
def test_anchor_trajectory_poses_and_velocities(path):
    """Every recorded row: our FK of Drake's (q, v) equals Drake's body poses and twists."""
    scene = load_json(path)
    rec = load_recording(scene)
    idx = recorded_body_indices(scene, json.loads(path.read_text())["recording"]["bodies"])
    joint_q, joint_qd_sap = drake_qv_to_joint(scene, rec["q"], rec["v"], joint_qd_order="sap")
    body_q = forward_kinematics(scene.sap_model, joint_q)[:, idx]
    dp = np.abs(body_q[..., :3] - rec["body_pose_W"][..., :3]).max()
    dq = spatial.quat_angle_between(body_q[..., 3:], rec["body_pose_W"][..., 3:]).max()
    assert dp < ANCHOR_POSE_TOL and dq < ANCHOR_POSE_TOL
    V = body_velocities(scene.sap_model, joint_q, joint_qd_sap)[:, idx]
    # body_V_W is [w_WB_W, v_WBo_W]: our SAP twist at the body origin.
    assert np.abs(V - rec["body_V_W"]).max() < ANCHOR_VELOCITY_TOL * max(1.0, np.abs(rec["body_V_W"]).max())


def _advance(model, q, qd_sap, h):
    """q(t + h) along the constant joint velocity qd (exact per joint type, for finite differences)."""
    q = q.copy()
    for j in range(model.joint_count):
        jt = JointType(int(model.joint_type[j]))
        qs, vs = model.joint_q_slice(j), model.joint_qd_slice(j)
        if jt == JointType.BALL:
            q[qs] = spatial.quat_integrate(q[qs], qd_sap[vs], h)
        elif jt in (JointType.FREE, JointType.DISTANCE):
            q[qs.start:qs.start + 3] += h * qd_sap[vs.start + 3:vs.start + 6]
            q[qs.start + 3:qs.stop] = spatial.quat_integrate(q[qs.start + 3:qs.stop], qd_sap[vs.start:vs.start + 3], h)
        else:
            q[qs] += h * qd_sap[vs]
    return q


@settings(max_examples=100)
@given(random_models(max_bodies=5))
def test_body_velocities_are_time_derivatives_of_poses(case):
    model, q, qd = case
    qd_sap = joint_qd_public_to_sap(model, q, qd)
    h = 1e-6
    Xp = forward_kinematics(model, _advance(model, q, qd_sap, h))[0]
    Xm = forward_kinematics(model, _advance(model, q, qd_sap, -h))[0]
    V = body_velocities(model, q, qd_sap)[0]
    for b in range(model.body_count):
        v_fd = (Xp[b, :3] - Xm[b, :3]) / (2 * h)
        dq = spatial.quat_multiply(Xp[b, 3:], spatial.quat_conjugate(Xm[b, 3:]))  # R(t+h) R(t-h)ᵀ
        w_fd = spatial.quat_log(dq) / (2 * h)
        # Central differences with h = 1e-6: truncation O(h²) ~ 1e-11, rounding ~ ε/h ~ 1e-10
        # relative to positions and velocities of O(10).
        np.testing.assert_allclose(V[b, 3:], v_fd, atol=2e-7)
        np.testing.assert_allclose(V[b, :3], w_fd, atol=2e-7)


def test_d6_applies_translations_then_rotations_in_sequence():
    b = ModelBuilder()
    body = b.add_body(1.0, inertia=(1, 1, 1))
    b.add_joint_d6(-1, body, linear_axes=[(1, 0, 0), (0, 1, 0)], angular_axes=[(0, 0, 1), (1, 0, 0)])
    model = b.finalize()
    q = np.array([0.3, -0.2, 0.7, 0.4])
    X = joint_transform(model, 0, q)[0]
    np.testing.assert_allclose(X[:3], [0.3, -0.2, 0.0])
    expected = spatial.quat_multiply(spatial.quat_from_axis_angle([0, 0, 1], 0.7),
                                     spatial.quat_from_axis_angle([1, 0, 0], 0.4))
    assert spatial.quat_angle_between(X[3:], expected) < 1e-15


def test_revolute_and_prismatic_frames():
    """X_PC = X_PF X_FM(q) X_CM⁻¹, with the axis the same in F and M."""
    b = ModelBuilder(gravity=(0, 0, 0))
    l1 = b.add_body(1.0, inertia=(1, 1, 1))
    l2 = b.add_body(1.0, inertia=(1, 1, 1))
    b.add_joint_revolute(-1, l1, spatial.transform((0, 0, 1)), spatial.transform((0.5, 0, 0)), axis=(0, 0, 1))
    b.add_joint_prismatic(l1, l2, spatial.transform((1, 0, 0)), axis=(0, 1, 0))
    model = b.finalize()
    body_q = forward_kinematics(model, [np.pi / 2, 0.25])[0]
    # Body 1 origin is 0.5 m from the pivot along its -x, the pivot at (0, 0, 1): turned by 90°.
    np.testing.assert_allclose(body_q[0, :3], [0, -0.5, 1], atol=1e-15)
    # Body 2: 1 m along body 1's x, then 0.25 m along body 1's y, world = rotated by 90°.
    np.testing.assert_allclose(body_q[1, :3], [-0.25, 0.5, 1], atol=1e-15)

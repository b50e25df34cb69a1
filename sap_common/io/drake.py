"""Drake recordings ↔ our coordinates (for scenes loaded from the anchor JSON format).

Drake's q/v per joint (anchor README, "Generalized coordinates per joint type"):

* ``quaternion_floating``: q = ``[qw, qx, qy, qz, x, y, z]`` (unnormalized), v = ``[ω_W, v_WO]``
  → our FREE joint q = ``[x, y, z, qx, qy, qz, qw]`` and SAP-order qd = v unchanged;
* ``revolute``/``prismatic``: copied;
* ``ball_rpy``: q = ``[roll, pitch, yaw]`` with R = Rz(yaw) Ry(pitch) Rx(roll) → quaternion;
  v = ω_FM in F, as our ball joint;
* ``weld``: nothing.
"""

from __future__ import annotations

import numpy as np

from .. import spatial
from ..conventions import check_order, joint_qd_sap_to_public
from .scene import LoadedScene

__all__ = ["drake_qv_to_joint", "load_recording", "recorded_body_indices", "body_pose_error"]


def drake_qv_to_joint(scene: LoadedScene, q, v, joint_qd_order: str = "public"):
    """Drake ``q (…, nq_drake)``, ``v (…, nv_drake)`` → our ``(joint_q, joint_qd)``.

    Rows of a recording can be converted at once (leading axes are kept). Drake's quaternions
    are not unit norm (docs/formulation.md § Integration); they are copied as they are, so Drake's ``sap_euler`` update
    can be followed exactly.
    """
    check_order("joint_qd_order", joint_qd_order)
    if not scene.drake_joints and scene.sap_model.joint_count:
        raise ValueError(f"scene {scene.name!r}: no Drake coordinate map (not loaded from a Drake scene file)")
    model = scene.sap_model
    q, v = np.asarray(q, float), np.asarray(v, float)
    batch = q.shape[:-1]
    joint_q = np.zeros(batch + (model.joint_coord_count,))
    joint_qd = np.zeros(batch + (model.joint_dof_count,))
    for dj in scene.drake_joints:
        qs, vs = model.joint_q_slice(dj.joint), model.joint_qd_slice(dj.joint)
        qj, vj = q[..., dj.q_start:dj.q_start + dj.nq], v[..., dj.v_start:dj.v_start + dj.nv]
        if dj.drake_type == "quaternion_floating":
            joint_q[..., qs] = np.concatenate([qj[..., 4:7], qj[..., 1:4], qj[..., 0:1]], -1)
        elif dj.drake_type == "ball_rpy":
            joint_q[..., qs] = spatial.quat_from_rpy(qj)
        else:
            joint_q[..., qs] = qj
        joint_qd[..., vs] = vj
    if joint_qd_order == "public":
        flat_q = joint_q.reshape(-1, model.joint_coord_count)
        flat_qd = joint_qd.reshape(-1, model.joint_dof_count)
        joint_qd = joint_qd_sap_to_public(model, flat_q, flat_qd).reshape(joint_qd.shape)
    return joint_q, joint_qd


def load_recording(scene_or_path) -> dict:
    """The NPZ arrays recorded beside a Drake scene file, as a dict of arrays."""
    path = scene_or_path.source if isinstance(scene_or_path, LoadedScene) else str(scene_or_path)
    if path is None:
        raise ValueError("scene: has no source file, so no recording")
    if path.endswith(".json"):
        path = path[:-5] + ".npz"
    from .npz import read_npz

    return read_npz(path)


def recorded_body_indices(scene: LoadedScene, recorded_names) -> np.ndarray:
    """Our body index for each body name of a recording's body axis."""
    return np.array([scene.sap_model.body_index(str(n)) for n in recorded_names], dtype=np.int64)


def body_pose_error(body_q, body_pose_W) -> tuple[float, float]:
    """``(max position error [m], max rotation angle error [rad])`` between two pose arrays.

    Both are ``(..., 7)`` = ``[x, y, z, qx, qy, qz, qw]`` in the same body order; the sign of a
    quaternion does not matter (q and −q are one rotation).
    """
    a, b = np.asarray(body_q, float), np.asarray(body_pose_W, float)
    if a.shape != b.shape:
        raise ValueError(f"body_pose_W: shape {b.shape} does not match body_q {a.shape}")
    if a.size == 0:
        return 0.0, 0.0
    dp = float(np.max(np.linalg.norm(a[..., :3] - b[..., :3], axis=-1)))
    dr = float(np.max(spatial.quat_angle_between(a[..., 3:], b[..., 3:])))
    return dp, dr

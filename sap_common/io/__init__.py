"""Scene input: the JSON scene format of the Drake anchors, Drake recordings, MJCF/URDF import
through the ``mujoco`` package (imported lazily: ``sap_common`` works without it)."""

from .drake import body_pose_error, drake_qv_to_joint, load_recording, recorded_body_indices
from .json_scene import load_json
from .mjcf import (
                   MujocoActuator,
                   MujocoJoint,
                   MujocoMap,
                   joint_qd_to_mujoco_qvel,
                   load_mjcf,
                   mujoco_ctrl_to_control,
                   mujoco_pair_filter,
                   mujoco_qpos_to_joint_q,
                   mujoco_qvel_to_joint_qd,
)
from .scene import DrakeJoint, LoadedScene

__all__ = [
    "LoadedScene",
    "DrakeJoint",
    "load_json",
    "load_mjcf",
    "MujocoMap",
    "MujocoJoint",
    "MujocoActuator",
    "mujoco_qpos_to_joint_q",
    "mujoco_qvel_to_joint_qd",
    "joint_qd_to_mujoco_qvel",
    "mujoco_ctrl_to_control",
    "mujoco_pair_filter",
    "drake_qv_to_joint",
    "load_recording",
    "recorded_body_indices",
    "body_pose_error",
]

"""Scene input: the JSON scene format of the Drake anchors, Drake recordings, scene container.

(MJCF/URDF import through the ``mujoco`` package arrives with the dynamics issue.)
"""

from .drake import body_pose_error, drake_qv_to_joint, load_recording, recorded_body_indices
from .json_scene import load_json
from .scene import DrakeJoint, LoadedScene

__all__ = [
    "LoadedScene",
    "DrakeJoint",
    "load_json",
    "drake_qv_to_joint",
    "load_recording",
    "recorded_body_indices",
    "body_pose_error",
]

"""Stages 0 and 5: the public ↔ SAP boundary of a time step (docs/conventions.md, docs/design.md § Bad input).

``read_inputs`` checks the state and control against the model and returns SAP-order arrays
for every world; ``write_state`` stores q₁, v₁ back (``joint_qd`` in the order
``state_out.joint_qd_order`` asks for) and refreshes ``body_q``/``body_qd``. The offset
``r = R_WB · com`` used by the conversion is evaluated from the pose rounded to float32 when
``use_f64_boundary_pose`` is off.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sap_common import conventions as cv
from sap_common import kinematics as _kin
from sap_common.model import SapModel
from sap_common.state import SapControl, SapState, check_control, check_state

from .kinematics import update_body_state

__all__ = ["SapInputs", "read_inputs", "write_state"]


@dataclass
class SapInputs:
    """One step's inputs for every world, SAP order, float64.

    Attributes:
        joint_q: q₀, (num_worlds, nq).
        v0: v₀ [m/s, rad/s], (num_worlds, nv).
        joint_f: generalized forces [N, N·m], (num_worlds, nv).
        body_f: body wrenches ``[τ_O; f]`` at each origin, world [N·m, N], (num_worlds, B, 6).
        joint_act: feed-forward actuation, (num_worlds, nv).
        joint_target_pos / joint_target_vel: drive targets, (num_worlds, nv).
    """

    joint_q: np.ndarray
    v0: np.ndarray
    joint_f: np.ndarray
    body_f: np.ndarray
    joint_act: np.ndarray
    joint_target_pos: np.ndarray
    joint_target_vel: np.ndarray


def _pose_dtype(use_f64_boundary_pose: bool):
    return np.float64 if use_f64_boundary_pose else np.float32


def read_inputs(model: SapModel, state: SapState, control: SapControl, dt: float,
                use_f64_boundary_pose: bool = True) -> SapInputs:
    """Validate and convert one step's inputs to SAP order (``ValueError`` on bad input)."""
    if isinstance(dt, bool) or not isinstance(dt, (int, float, np.integer, np.floating)) or not (
            np.isfinite(dt) and dt > 0):
        raise ValueError(f"dt: must be a finite time step > 0 s, got {dt!r}")
    check_state(model, state, "state_in")
    check_control(model, control, "control")
    pose = _pose_dtype(use_f64_boundary_pose)
    q = np.array(state.joint_q, dtype=np.float64)
    v0 = np.array(state.joint_qd, dtype=np.float64)
    if state.joint_qd_order == "public":
        v0 = cv.joint_qd_public_to_sap(model, q, v0, pose_dtype=pose)
    joint_f = np.array(control.joint_f, dtype=np.float64)
    if control.joint_f_order == "public":
        joint_f = cv.joint_f_public_to_sap(model, q, joint_f, pose_dtype=pose)
    body_f = np.array(state.body_f, dtype=np.float64)
    if state.body_f_order == "public" and np.any(body_f):
        # Poses from q₀ itself, so a state whose body_q was not refreshed still converts right.
        body_f = cv.body_f_public_to_sap(model, _kin.forward_kinematics(model, q), body_f, pose_dtype=pose)
    return SapInputs(joint_q=q, v0=v0, joint_f=joint_f, body_f=body_f,
                     joint_act=np.array(control.joint_act, dtype=np.float64),
                     joint_target_pos=np.array(control.joint_target_pos, dtype=np.float64),
                     joint_target_vel=np.array(control.joint_target_vel, dtype=np.float64))


def write_state(model: SapModel, state_out: SapState, q1: np.ndarray, v1: np.ndarray,
                use_f64_boundary_pose: bool = True) -> None:
    """Store q₁ and v₁ (SAP order) into ``state_out`` and refresh its body poses/velocities."""
    check_state(model, state_out, "state_out")
    state_out.joint_q[...] = q1
    if state_out.joint_qd_order == "public":
        v1 = cv.joint_qd_sap_to_public(model, q1, v1, pose_dtype=_pose_dtype(use_f64_boundary_pose))
    state_out.joint_qd[...] = v1
    update_body_state(model, state_out)

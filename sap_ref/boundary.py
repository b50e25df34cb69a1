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
from sap_common.model import JointType, SapModel
from sap_common.state import SapControl, SapState, check_control, check_state
from sap_common.time_step import check_time_step

__all__ = ["SapInputs", "read_inputs", "write_state"]


@dataclass
class SapInputs:
    """One step's inputs for every world, SAP order, float64.

    Attributes:
        joint_q: q₀, (num_worlds, nq).
        v0: v₀ [m/s, rad/s], (num_worlds, nv). For a world whose quaternions are rejected
            (``quat_ok`` False) the FREE/DISTANCE segments of a public-order input cannot be
            converted and are NaN.
        joint_f: generalized forces [N, N·m], (num_worlds, nv).
        body_f: body wrenches ``[τ_O; f]`` at each origin, world [N·m, N], (num_worlds, B, 6).
        joint_act: feed-forward actuation, (num_worlds, nv).
        joint_target_pos / joint_target_vel: drive targets, (num_worlds, nv).
        quat_ok: whether every quaternion of the world's q₀ is accepted
            (``sap_common.conventions.quaternion_norm_ok``), (num_worlds,) bool.
        finite: whether every input of the world (state_in's joint_q, joint_qd, body_f and every
            control array, as given) is finite, (num_worlds,) bool.
    """

    joint_q: np.ndarray
    v0: np.ndarray
    joint_f: np.ndarray
    body_f: np.ndarray
    joint_act: np.ndarray
    joint_target_pos: np.ndarray
    joint_target_vel: np.ndarray
    quat_ok: np.ndarray
    finite: np.ndarray


def _pose_dtype(use_f64_boundary_pose: bool):
    return np.float64 if use_f64_boundary_pose else np.float32


def _convert_where(ok: np.ndarray, convert, q: np.ndarray, x: np.ndarray, floating: np.ndarray) -> np.ndarray:
    """``convert(q, x)`` for the worlds where ``ok``; elsewhere ``x`` with the ``floating`` columns NaN
    (the public ↔ SAP map needs the body's rotation, which a rejected quaternion does not give)."""
    out = x.copy()
    if np.any(ok):
        out[ok] = convert(q[ok], x[ok])
    out[np.ix_(~ok, floating)] = np.nan
    return out


def _floating_dofs(model: SapModel) -> np.ndarray:
    """The DOF indices of every FREE/DISTANCE joint (those whose order differs between public and SAP)."""
    joints = np.flatnonzero(np.isin(model.joint_type, [int(JointType.FREE), int(JointType.DISTANCE)]))
    return np.array([d for j in joints for d in range(model.joint_qd_start[j], model.joint_qd_start[j + 1])],
                    dtype=np.int64)


def read_inputs(model: SapModel, state: SapState, control: SapControl, dt: float,
                use_f64_boundary_pose: bool = True, dt_bound: float | None = None) -> SapInputs:
    """Validate and convert one step's inputs to SAP order (``ValueError`` on bad input).

    Bad *values* do not raise: a world with a rejected quaternion is marked in ``quat_ok`` and
    its conversions are skipped, so the other worlds convert exactly as in a clean batch.
    """
    check_time_step(model, dt, dt_bound, stacklevel=4)  # the warning points at the caller of step()
    check_state(model, state, "state_in")
    check_control(model, control, "control")
    pose = _pose_dtype(use_f64_boundary_pose)
    q = np.array(state.joint_q, dtype=np.float64)
    ok = cv.joint_quaternions_ok(model, q)
    floating = _floating_dofs(model)
    v0 = np.array(state.joint_qd, dtype=np.float64)
    if state.joint_qd_order == "public":
        v0 = _convert_where(ok, lambda q_, x: cv.joint_qd_public_to_sap(model, q_, x, pose_dtype=pose), q, v0,
                            floating)
    joint_f = np.array(control.joint_f, dtype=np.float64)
    if control.joint_f_order == "public":
        joint_f = _convert_where(ok, lambda q_, x: cv.joint_f_public_to_sap(model, q_, x, pose_dtype=pose), q,
                                 joint_f, floating)
    body_f = np.array(state.body_f, dtype=np.float64)
    if state.body_f_order == "public" and np.any(body_f[ok]):
        # Poses from q₀ itself, so a state whose body_q was not refreshed still converts right.
        body_f[ok] = cv.body_f_public_to_sap(model, _kin.forward_kinematics(model, q[ok]), body_f[ok], pose_dtype=pose)
    return SapInputs(joint_q=q, v0=v0, joint_f=joint_f, body_f=body_f,
                     joint_act=np.array(control.joint_act, dtype=np.float64),
                     joint_target_pos=np.array(control.joint_target_pos, dtype=np.float64),
                     joint_target_vel=np.array(control.joint_target_vel, dtype=np.float64), quat_ok=ok,
                     finite=_finite_worlds(state, control))


def _finite_worlds(state: SapState, control: SapControl) -> np.ndarray:
    """Per world, are all of the step's inputs finite? (num_worlds,) bool."""
    arrays = (state.joint_q, state.joint_qd, state.body_f, control.joint_f, control.joint_act,
              control.joint_target_pos, control.joint_target_vel)
    return np.all([np.isfinite(a).reshape(a.shape[0], -1).all(axis=1) for a in arrays], axis=0)


def write_state(model: SapModel, state_in: SapState, state_out: SapState, q1: np.ndarray, v1: np.ndarray,
                keep: np.ndarray, use_f64_boundary_pose: bool = True) -> None:
    """Store q₁ and v₁ (SAP order) into ``state_out`` and refresh its body poses/velocities.

    Worlds where ``keep`` (flagged NON_FINITE or INVALID_QUATERNION; their q₁, v₁ are q₀, v₀) are
    left unchanged: ``state_in``'s ``joint_q``, ``body_q``, ``body_qd`` and — when the two states
    use the same velocity order — ``joint_qd`` are copied bit for bit (``state_out`` may be
    ``state_in``).
    """
    check_state(model, state_out, "state_out")
    pose = _pose_dtype(use_f64_boundary_pose)
    kept = {f: np.array(getattr(state_in, f)[keep]) for f in ("joint_q", "joint_qd", "body_q", "body_qd")}
    ok = cv.joint_quaternions_ok(model, q1)
    qd = v1
    if state_out.joint_qd_order == "public":
        qd = _convert_where(ok, lambda q_, x: cv.joint_qd_sap_to_public(model, q_, x, pose_dtype=pose), q1, v1,
                            _floating_dofs(model))
    state_out.joint_q[...] = q1
    state_out.joint_qd[...] = qd
    step = ~keep
    if np.any(step):
        body_q, body_qd = _kin.body_state(model, q1[step], qd[step], state_out.joint_qd_order)
        state_out.body_q[step], state_out.body_qd[step] = body_q, body_qd
    state_out.joint_q[keep], state_out.body_q[keep], state_out.body_qd[keep] = (
        kept["joint_q"], kept["body_q"], kept["body_qd"])
    if state_in.joint_qd_order == state_out.joint_qd_order:
        state_out.joint_qd[keep] = kept["joint_qd"]

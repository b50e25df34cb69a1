"""What sap-validate holds one world of a recording to: its rows, its bars and rollout mode
(shared by sap_tools/validate/cli.py and, for ``--one-batch``, sap_tools/validate/batch.py).

The one-step bar (:data:`ONE_STEP_RTOL`), the rollout's sensitivity nudge (:data:`ROLLOUT_EPSILON`),
the :class:`Context` of one world (scene, recorded rows, the implementation under test and the
sap_ref reference) and :func:`rollout` (the free trajectory inside its sensitivity envelope).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from sap_common import spatial
from sap_common.io.trajectory import trajectory_states
from sap_common.model import JointType
from sap_common.state import StepStatus
from sap_tools.validate.backends import recorded_state
from sap_tools.validate.diagnose import drake_uses_mpr

__all__ = ["ONE_STEP_RTOL", "ROLLOUT_EPSILON", "Context", "position_error", "rollout", "world_context"]

# One-step bar. Measured one-step differences of sap_ref from Drake over every step of the seven
# Drake recordings: ≤ 8.6e-15·max(1, |v|) (39 ulps, box_corners_slide, four near-rigid
# contacts) in v and ≤ 1.1e-16 in q. 1e-12 is ~100× that, and six orders below SAP's Newton
# tolerance (relative 1e-6): a step that stopped at another Newton iterate does not pass as
# round-off.
ONE_STEP_RTOL = 1e-12
# Rollout nudge [m/s, rad/s] added to every initial velocity of the sensitivity run: far above
# round-off (1e-16), far below any physical speed of the scenes.
ROLLOUT_EPSILON = 1e-7


@dataclass
class Context:
    """What a validation of one recording by one backend needs (also read by sap_tools/validate/diagnose.py).

    Attributes:
        scene, traj: the scene and the trajectory.
        q_rows, v_rows: recorded coordinates and SAP-order velocities, (N+1, nq), (N+1, nv).
        backend: the implementation under test; reference: sap_ref with the same settings (the
            backend itself when it is sap_ref).
        dt: the recording's time step [s].  one_step_rtol: the one-step bar.
        actuated_dofs: our DOF of each recorded actuator column (Drake recordings), or None.
    """

    scene: object
    traj: object
    q_rows: np.ndarray
    v_rows: np.ndarray
    backend: object
    reference: object
    dt: float
    one_step_rtol: float = ONE_STEP_RTOL
    actuated_dofs: np.ndarray | None = None

    def state(self, n: int):
        return recorded_state(self.scene, self.q_rows[n], self.v_rows[n])

    def errors(self, n: int, v1, q1):
        """``(|Δv|, bar_v, |Δq|, bar_q)`` of a step from row n against row n+1."""
        ev = float(np.abs(v1 - self.v_rows[n + 1]).max(initial=0.0))
        eq = position_error(self.scene.sap_model, q1, self.q_rows[n + 1])
        bar_v = self.one_step_rtol * max(1.0, float(np.abs(self.v_rows[n + 1]).max(initial=0.0)))
        bar_q = self.one_step_rtol * max(1.0, float(np.abs(self.q_rows[n + 1]).max(initial=0.0)))
        return ev, bar_v, eq, bar_q

    def within_bar(self, n: int, v1, q1) -> bool:
        ev, bv, eq, bq = self.errors(n, v1, q1)
        return ev <= bv and eq <= bq


def position_error(model, qa, qb) -> float:
    """Largest coordinate difference [m or rad]: translations and scalar joints entry by entry,
    rotations as the angle between the two quaternions (each normalized; the sign and the
    quaternion's norm, which Drake lets drift, do not count)."""
    qa, qb = np.asarray(qa, np.float64), np.asarray(qb, np.float64)
    err = 0.0
    for j in range(model.joint_count):
        s = model.joint_q_slice(j)
        a, b = qa[s], qb[s]
        jt = JointType(int(model.joint_type[j]))
        if jt in (JointType.FREE, JointType.DISTANCE):
            err = max(err, float(np.abs(a[:3] - b[:3]).max()), float(spatial.quat_angle_between(a[3:], b[3:])))
        elif jt == JointType.BALL:
            err = max(err, float(spatial.quat_angle_between(a, b)))
        elif a.size:
            err = max(err, float(np.abs(a - b).max()))
    return err


def _actuated_dofs(scene, traj):
    """Our DOF of each column of a Drake recording's ``net_actuation`` (by ``input_start``)."""
    if traj.convention != "drake" or traj.scene_path is None:
        return None
    with open(traj.scene_path) as f:
        spec = json.load(f)
    acts = sorted((spec.get("actuation") or {}).get("actuators", []), key=lambda a: int(a.get("input_start", 0)))
    m = scene.sap_model
    return np.array([int(m.joint_qd_start[m.joint_index(a["joint"])]) for a in acts], dtype=np.int64)


# ----------------------------------------------------------------------------- rollout mode


def rollout(ctx: Context, steps: int, *, epsilon=ROLLOUT_EPSILON, progress=None) -> dict:
    """The free trajectory against the recording, with the sensitivity bar (module docstring).
    Step k is the state after k steps (row k), the numbering of every report."""
    model = ctx.scene.sap_model
    s0 = ctx.state(0)
    q_imp, v_imp, status = ctx.backend.rollout(s0, steps, ctx.dt, progress)
    if ctx.backend is ctx.reference:
        q_ref, v_ref = q_imp, v_imp
    else:
        q_ref, v_ref, _ = ctx.reference.rollout(s0, steps, ctx.dt)
    nudged = recorded_state(ctx.scene, ctx.q_rows[0], ctx.v_rows[0] + epsilon)
    q_eps, v_eps, _ = ctx.reference.rollout(nudged, steps, ctx.dt)
    drift_q = np.maximum.accumulate([position_error(model, a, b) for a, b in zip(q_eps, q_ref)])
    drift_v = np.maximum.accumulate(np.abs(v_eps - v_ref).max(axis=1, initial=0.0))
    n = np.arange(steps + 1)
    floor_q = n * ctx.one_step_rtol * np.maximum(1.0, np.abs(ctx.q_rows[:steps + 1]).max(axis=1, initial=0.0))
    floor_v = n * ctx.one_step_rtol * np.maximum(1.0, np.abs(ctx.v_rows[:steps + 1]).max(axis=1, initial=0.0))
    bar_q, bar_v = np.maximum(drift_q, floor_q), np.maximum(drift_v, floor_v)
    err_q = np.array([position_error(model, a, b) for a, b in zip(q_imp, ctx.q_rows[:steps + 1])])
    err_v = np.abs(v_imp - ctx.v_rows[:steps + 1]).max(axis=1, initial=0.0)
    bad = np.flatnonzero((err_q > bar_q) | (err_v > bar_v))
    k = int(np.argmax(np.maximum(err_q / np.maximum(bar_q, 1e-300), err_v / np.maximum(bar_v, 1e-300))))
    failing = [{"step": int(f), "dq": float(err_q[f]), "bar_q": float(bar_q[f]), "dv": float(err_v[f]),
                "bar_v": float(bar_v[f])} for f in bad]
    out = {"steps": int(steps), "epsilon": epsilon, "max_dq": float(err_q.max()), "max_dv": float(err_v.max()),
           "sensitivity_drift_q": float(drift_q[-1]), "sensitivity_drift_v": float(drift_v[-1]),
           "worst_step": k, "worst_dq": float(err_q[k]), "bar_q_there": float(bar_q[k]),
           "worst_dv": float(err_v[k]), "bar_v_there": float(bar_v[k]),
           "not_converged_steps": int(np.sum((status & StepStatus.CONVERGED) == 0)),
           "failing_steps": len(failing), "failing": failing, "first_failing_step": None,
           "verdict": "pass" if bad.size == 0 else "FAIL"}
    if bad.size:
        f = int(bad[0])
        out["first_failing_step"] = f
        out["message"] = (f"the rollout leaves the sensitivity envelope at step {f}: |Δq| {err_q[f]:.3g} (bar "
                          f"{bar_q[f]:.3g}), |Δv| {err_v[f]:.3g} (bar {bar_v[f]:.3g}); one-step mode locates the cause"
                          + _mpr_hint(ctx, f))
    return out


def _mpr_hint(ctx: Context, last_row: int) -> str:
    """A note when the recording's contacts up to ``last_row`` include a pair Drake computes with
    FCL's MPR: there a free rollout follows another contact point by design."""
    c = ctx.traj.contacts
    if ctx.traj.engine != "drake" or not c:
        return ""
    types = ctx.scene.sap_model.shape_type
    for row in range(min(last_row, ctx.traj.num_steps) + 1):
        for k in range(int(c["contact_count"][row])):
            if drake_uses_mpr(types[c["contact_shape0"][row, k]], types[c["contact_shape1"][row, k]]):
                return ("; the recording has contacts on a pair Drake computes with FCL's MPR, whose contact point "
                        "this implementation does not reproduce (docs/validation.md § FCL's MPR pairs)")
    return ""


def world_context(traj, scene, impl, reference) -> Context:
    q_rows, v_rows = trajectory_states(traj, scene)
    return Context(scene, traj, q_rows, v_rows, impl, reference, traj.dt, actuated_dofs=_actuated_dofs(scene, traj))

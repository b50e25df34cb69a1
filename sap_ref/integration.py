"""Stage 4, the position update q₁ = Φ(q₀, v₀, v₁, h) (docs/formulation.md § Integration).

* ``sap_euler`` (the drake preset): ``q₁ = q₀ + h N(q₀) v₁`` for every joint, quaternions
  included and never re-normalized, exactly as Drake's discrete update (|q| drifts upward
  by ``sqrt(1 + (h|ω|/2)²)`` per step; every rotation normalizes it on use).
* ``midpoint``: with ``v̄ = (v₀ + v₁)/2``, scalar coordinates and positions advance by
  ``h v̄``; quaternions by the exponential map ``q₁ = exp(h ω̄) ⊗ q₀``, normalized.

Drake: ``DiscreteUpdateManager::DoCalcDiscreteValues``.
"""

from __future__ import annotations

import numpy as np

from sap_common import spatial
from sap_common.config import POSITION_INTEGRATIONS
from sap_common.model import JointType, SapModel

from .kinematics import qdot_map

__all__ = ["integrate_positions", "sap_euler", "midpoint"]


def sap_euler(model: SapModel, joint_q, v1, dt: float) -> np.ndarray:
    """``q₀ + h N(q₀) v₁`` (v₁ in SAP order)."""
    joint_q = np.asarray(joint_q, dtype=np.float64)
    return joint_q + dt * (qdot_map(model, joint_q) @ np.asarray(v1, dtype=np.float64))


def midpoint(model: SapModel, joint_q, v0, v1, dt: float) -> np.ndarray:
    """Midpoint velocity ``(v₀+v₁)/2``; quaternions by the exponential map, normalized."""
    q = np.array(joint_q, dtype=np.float64)
    v = 0.5 * (np.asarray(v0, dtype=np.float64) + np.asarray(v1, dtype=np.float64))
    for j in range(model.joint_count):
        jt = JointType(int(model.joint_type[j]))
        q0, d0 = int(model.joint_q_start[j]), int(model.joint_qd_start[j])
        if jt == JointType.BALL:
            q[q0:q0 + 4] = spatial.quat_integrate(q[q0:q0 + 4], v[d0:d0 + 3], dt)
        elif jt in (JointType.FREE, JointType.DISTANCE):
            q[q0:q0 + 3] += dt * v[d0 + 3:d0 + 6]
            q[q0 + 3:q0 + 7] = spatial.quat_integrate(q[q0 + 3:q0 + 7], v[d0:d0 + 3], dt)
        else:
            n = int(model.joint_q_start[j + 1]) - q0
            q[q0:q0 + n] += dt * v[d0:d0 + n]
    return q


def integrate_positions(model: SapModel, joint_q, v0, v1, dt: float, mode: str) -> np.ndarray:
    """q₁ by ``mode`` (``position_integration``: ``midpoint`` or ``sap_euler``)."""
    if mode == "sap_euler":
        return sap_euler(model, joint_q, v1, dt)
    if mode == "midpoint":
        return midpoint(model, joint_q, v0, v1, dt)
    raise ValueError(f"position_integration: {mode!r} is not valid; valid: {', '.join(POSITION_INTEGRATIONS)}")

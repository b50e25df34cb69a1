"""What a step leaves besides the state, per world, and the per-world reset (NumPy).

The reference of :mod:`sap_gpu.observables`, with the same names, shapes (vec3d as ``(…, 3)``,
spatial vectors as ``(…, 6)``), units and conventions: γ of a contact is the impulse on body 1
(shape 1's body), −γ the impulse on body 0, force = impulse / h; the force acts on body 1 at
``p1`` and on body 0 at ``p0`` (the points the contact Jacobian measures); the net wrench on a
body is taken about its origin, at the step's start; a body's acceleration is the change of its
public twist ``[v_C; ω]`` over the step divided by h. A world the step rejected (NON_FINITE or
INVALID_QUATERNION) reports no contact and zero wrenches and accelerations.

The statistics count since each world's last reset: steps, Newton and line-search iterations,
the union of the status bits, the steps with a bit of :data:`~sap_common.state.FAILURE_BITS`, the
per-world ``failed`` flag and ``any_failed``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from sap_common.conventions import joint_qd_public_to_sap
from sap_common.model import SapModel
from sap_common.state import FAILURE_BITS, StepStatus

__all__ = ["StepObservables", "WorldStatistics", "OBSERVABLE_NAMES", "STATISTIC_NAMES", "world_observables"]

REJECTED = int(StepStatus.NON_FINITE | StepStatus.INVALID_QUATERNION)
OBSERVABLE_NAMES = ("contact_count", "contact_impulse", "contact_force", "contact_point0", "contact_point1",
                    "contact_normal", "body_contact_force", "body_contact_torque", "body_acceleration")
STATISTIC_NAMES = ("steps", "newton_iterations", "line_search_iterations", "status_union", "failed_steps", "failed")


@dataclass
class StepObservables:
    """The last step's observables of every world (W worlds, C contact slots, B bodies; world frame).

    Attributes:
        contact_count: (W,) int32.  contact_impulse [N·s], contact_force [N], contact_point0,
        contact_point1 [m], contact_normal: (W, C, 3).  body_contact_force [N], body_contact_torque
        [N·m] about the body origin: (W, B, 3).  body_acceleration [m/s², rad/s²]: (W, B, 6),
        ``[a_C; α]``.
    """

    contact_count: np.ndarray
    contact_impulse: np.ndarray
    contact_force: np.ndarray
    contact_point0: np.ndarray
    contact_point1: np.ndarray
    contact_normal: np.ndarray
    body_contact_force: np.ndarray
    body_contact_torque: np.ndarray
    body_acceleration: np.ndarray

    @classmethod
    def zeros(cls, W: int, C: int, B: int) -> StepObservables:
        v3 = lambda n: np.zeros((W, n, 3))  # noqa: E731
        return cls(np.zeros(W, np.int32), v3(C), v3(C), v3(C), v3(C), v3(C), v3(B), v3(B), np.zeros((W, B, 6)))

    def clear(self, mask: np.ndarray) -> None:
        for f in fields(self):
            getattr(self, f.name)[mask] = 0


@dataclass
class WorldStatistics:
    """Per-world counters since each world's last reset, (W,): steps, newton_iterations,
    line_search_iterations, failed_steps (int64), status_union, failed (int32)."""

    steps: np.ndarray
    newton_iterations: np.ndarray
    line_search_iterations: np.ndarray
    status_union: np.ndarray
    failed_steps: np.ndarray
    failed: np.ndarray

    @classmethod
    def zeros(cls, W: int) -> WorldStatistics:
        i64 = lambda: np.zeros(W, np.int64)  # noqa: E731
        return cls(i64(), i64(), i64(), np.zeros(W, np.int32), i64(), np.zeros(W, np.int32))

    def clear(self, mask: np.ndarray) -> None:
        for f in fields(self):
            getattr(self, f.name)[mask] = 0

    def add(self, status: np.ndarray, newton: np.ndarray, line_search: np.ndarray) -> None:
        self.steps += 1
        self.newton_iterations += newton
        self.line_search_iterations += line_search
        self.status_union |= status.astype(np.int32)
        bad = (status & int(FAILURE_BITS)) != 0
        self.failed_steps += bad
        self.failed[bad] = 1

    @property
    def any_failed(self) -> bool:
        return bool(np.any(self.failed))


def world_observables(obs: StepObservables, w: int, result, body_q: np.ndarray, dt: float) -> None:
    """Fill world ``w`` of ``obs`` (contacts and body wrenches) from its step ``result``
    (:class:`~sap_ref.solver.WorldResult`) at the contact stage's body poses ``body_q (B, 7)``."""
    obs.contact_count[w] = 0
    for name in ("contact_impulse", "contact_force", "contact_point0", "contact_point1", "contact_normal",
                 "body_contact_force", "body_contact_torque"):
        getattr(obs, name)[w] = 0.0
    if result.status & REJECTED or result.contacts is None:
        return
    geo = result.contacts
    n = int(geo.R_WC.shape[0])
    obs.contact_count[w] = n
    if n == 0:
        return
    impulse = result.contact_impulses_W
    force = impulse / dt
    obs.contact_impulse[w, :n] = impulse
    obs.contact_force[w, :n] = force
    obs.contact_point0[w, :n] = geo.p0
    obs.contact_point1[w, :n] = geo.p1
    obs.contact_normal[w, :n] = geo.R_WC[:, :, 2]
    body0, body1 = np.asarray(geo.body0), np.asarray(geo.body1)
    for b in range(body_q.shape[0]):
        o = body_q[b, :3]
        f, tau = np.zeros(3), np.zeros(3)
        for c in range(n):  # slot order, as sap_gpu sums them
            if body1[c] == b:
                f = f + force[c]
                tau = tau + np.cross(geo.p1[c] - o, force[c])
            if body0[c] == b:
                f = f - force[c]
                tau = tau - np.cross(geo.p0[c] - o, force[c])
        obs.body_contact_force[w, b] = f
        obs.body_contact_torque[w, b] = tau


def initial_state_into(model: SapModel, state, mask: np.ndarray) -> None:
    """Write the model's initial state (``model.state()``) into the worlds ``mask`` of ``state``,
    ``joint_qd`` in the state's order, ``body_f`` zero."""
    init = model.state()
    qd = init.joint_qd if state.joint_qd_order == "public" else joint_qd_public_to_sap(model, init.joint_q,
                                                                                         init.joint_qd)
    state.joint_q[mask] = init.joint_q[mask]
    state.joint_qd[mask] = qd[mask]
    state.body_q[mask] = init.body_q[mask]
    state.body_qd[mask] = init.body_qd[mask]
    state.body_f[mask] = 0.0

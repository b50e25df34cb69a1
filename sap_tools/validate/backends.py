"""The implementations ``sap-validate`` runs against a recording: one world of ``sap_ref`` or
``sap_gpu``, stepped from host states (one-step mode) or rolled out (rollout mode).

Each backend collides with its own collision pipeline and steps with its own solver, so what
is validated is the whole implementation; the intermediates of the last step stay readable for
the diagnosis (:mod:`sap_tools.validate.diagnose`).
"""

from __future__ import annotations

import numpy as np

from sap_common.kinematics import body_state
from sap_common.state import SapContacts, SapState
from sap_ref.collision import CollisionPipeline
from sap_ref.solver import SolverSAP

__all__ = ["BACKENDS", "RefBackend", "GpuBackend", "make_backend", "recorded_state"]

BACKENDS = ("ref", "gpu")


def recorded_state(scene, joint_q, joint_qd_sap) -> SapState:
    """A one-world SAP-order state at recorded coordinates (body poses by forward kinematics)."""
    state = scene.state.copy()
    state.joint_q = np.asarray(joint_q, np.float64).reshape(1, -1).copy()
    state.joint_qd = np.asarray(joint_qd_sap, np.float64).reshape(1, -1).copy()
    state.joint_qd_order = "sap"
    state.body_q, state.body_qd = body_state(scene.sap_model, state.joint_q, state.joint_qd, "sap")
    return state


class RefBackend:
    """sap_ref on one world.

    Attributes:
        name: ``"sap_ref"``.  solver / pipeline: the sap_ref objects.  scene: the scene.
    """

    name = "sap_ref"

    def __init__(self, scene, solver_kwargs: dict):
        self.scene = scene
        self.solver = SolverSAP(scene.sap_model, max_rigid_contact=scene.max_rigid_contact, **solver_kwargs)
        self.config = self.solver.config
        self.pipeline = CollisionPipeline(scene.sap_model, scene.max_rigid_contact, self.config)
        self._contacts = self.pipeline.contacts()

    def collide(self, state: SapState) -> SapContacts:
        """This backend's contacts at ``state`` (a copy)."""
        self.pipeline.collide(state, self._contacts)
        return self._contacts.copy()

    def step(self, state: SapState, contacts: SapContacts, dt: float):
        """``(v1 SAP order (nv,), q1 (nq,), status)`` of one step from ``state`` with ``contacts``."""
        out = state.copy()
        out.joint_qd_order = "sap"
        self.solver.step(state, out, self.scene.control, contacts, dt)
        return out.joint_qd[0].copy(), out.joint_q[0].copy(), int(self.solver.last_status[0])

    def contact_J(self) -> np.ndarray:
        """Contact Jacobians of the last step, rows (t₁, t₂, n), (C, 3, nv)."""
        r = self.solver.last_results[0]
        return np.zeros((0, 3, self.scene.sap_model.joint_dof_count)) if r.contacts is None else r.contacts.J

    def hunt_crossley(self) -> dict | None:
        """The last step's Hunt–Crossley data ``{fe0, vn0, n0, eps}`` per contact, (C,) each (None
        under the ``sap`` approximation)."""
        hc = self.solver.last_results[0].hunt_crossley
        if hc is None:
            return None
        return {k: np.asarray(getattr(hc, k), np.float64) for k in ("fe0", "vn0", "n0", "eps")}

    def rollout(self, state: SapState, steps: int, dt: float, on_step=None):
        """Free run of ``steps`` steps: ``(joint_q (steps+1, nq), joint_qd SAP (steps+1, nv), statuses)``."""
        s = state.copy()
        s.joint_qd_order = "sap"
        qs, vs, status = [s.joint_q[0].copy()], [s.joint_qd[0].copy()], []
        for n in range(steps):
            self.pipeline.collide(s, self._contacts)
            self.solver.step(s, s, self.scene.control, self._contacts, dt)
            qs.append(s.joint_q[0].copy())
            vs.append(s.joint_qd[0].copy())
            status.append(int(self.solver.last_status[0]))
            if on_step:
                on_step(n + 1)
        return np.array(qs), np.array(vs), np.array(status)


class GpuBackend:
    """sap_gpu on one world of a Warp device (``"cpu"`` works everywhere)."""

    name = "sap_gpu"

    def __init__(self, scene, solver_kwargs: dict, device="cpu"):
        import sap_gpu

        self._gpu = sap_gpu
        self.scene, self.device = scene, device
        C = scene.max_rigid_contact
        self.solver = sap_gpu.SolverSAP(scene.sap_model, max_rigid_contact=C, device=device, **solver_kwargs)
        self.config = self.solver.config
        self.pipeline = sap_gpu.CollisionPipeline(scene.sap_model, C, self.config, device=device)
        self._contacts = self.pipeline.contacts()
        self._control = sap_gpu.to_device(scene.control, device)
        self._last_contacts = None

    def collide(self, state: SapState) -> SapContacts:
        self.pipeline.collide(self._gpu.to_device(state, self.device), self._contacts)
        return self._gpu.to_host(self._contacts)

    def step(self, state: SapState, contacts: SapContacts, dt: float):
        g = self._gpu
        out = g.to_device(state, self.device)
        out.joint_qd_order = "sap"
        self._last_contacts = contacts
        self.solver.step(g.to_device(state, self.device), out, self._control, g.to_device(contacts, self.device), dt)
        host = g.to_host(out)
        return host.joint_qd[0].copy(), host.joint_q[0].copy(), int(self.solver.diagnostics()["status"][0])

    def contact_J(self) -> np.ndarray:
        C = 0 if self._last_contacts is None else int(self._last_contacts.count[0])
        nv = self.scene.sap_model.joint_dof_count
        return self.solver.work.contact_J.numpy()[0, :3 * C].reshape(C, 3, nv)

    def hunt_crossley(self) -> dict | None:
        """As :meth:`RefBackend.hunt_crossley`, from the device's ``contact_hc`` and ``contact_vn0``."""
        if self.config.discrete_contact_approximation == "sap":
            return None
        C = 0 if self._last_contacts is None else int(self._last_contacts.count[0])
        data = self.solver.work.contact_hc.numpy()[0, :C]
        return {"fe0": data[:, 2].copy(), "vn0": self.solver.work.contact_vn0.numpy()[0, :C].copy(),
                "n0": data[:, 3].copy(), "eps": data[:, 4].copy()}

    def rollout(self, state: SapState, steps: int, dt: float, on_step=None):
        g = self._gpu
        s0 = state.copy()
        s0.joint_qd_order = "sap"
        s = g.to_device(s0, self.device)
        qs, vs, status = [s0.joint_q[0].copy()], [s0.joint_qd[0].copy()], []
        for n in range(steps):
            self.pipeline.collide(s, self._contacts)
            self.solver.step(s, s, self._control, self._contacts, dt)
            host = g.to_host(s)
            qs.append(host.joint_q[0].copy())
            vs.append(host.joint_qd[0].copy())
            status.append(int(self.solver.diagnostics()["status"][0]))
            if on_step:
                on_step(n + 1)
        return np.array(qs), np.array(vs), np.array(status)


def make_backend(name: str, scene, solver_kwargs: dict, device="cpu"):
    """``RefBackend`` (``"ref"``) or ``GpuBackend`` (``"gpu"``); ``ValueError`` naming ``--backend``."""
    if name == "ref":
        return RefBackend(scene, solver_kwargs)
    if name == "gpu":
        return GpuBackend(scene, solver_kwargs, device)
    raise ValueError(f"--backend: {name!r} is not one of ref, gpu, both")

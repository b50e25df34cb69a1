"""``SolverSAP`` for Newton: this project's SAP time step behind Newton's solver interface.

A Newton program switches to SAP by changing the line that builds its solver::

    solver = newton.solvers.SolverMuJoCo(model)          # before
    solver = sap_newton.SolverSAP(model)                 # after
    ...
    solver.step(state_0, state_1, control, contacts, dt)  # unchanged

Each step reads Newton's ``State``/``Control`` (and ``Contacts``), runs one
:class:`sap_gpu.SolverSAP` per group of identical worlds on the model's device, and writes
``joint_q``, ``joint_qd``, ``body_q`` and ``body_qd`` of ``state_out`` — so Newton's viewers,
sensors and selection API see the SAP simulation. Everything is allocated at construction; a
step launches Warp kernels only (no host synchronization), like ``sap_gpu``.

Contacts (``collision=``):

* ``"newton"`` (default): ``step`` takes the ``newton.Contacts`` the program fills with its own
  ``CollisionPipeline`` (``None``: no contact), converted per world (:mod:`sap_newton.transfer`);
* ``"sap"``: the solver runs this project's collision (:class:`sap_gpu.CollisionPipeline`) on the
  poses of ``state_in.joint_q``; ``step``'s ``contacts`` must then be ``None``.
"""

from __future__ import annotations

import newton
import numpy as np

import sap_gpu
from sap_common.config import SapConfig

from .convert import convert_model
from .transfer import Transfer

__all__ = ["SolverSAP", "COLLISION_SOURCES", "MAX_RIGID_CONTACT_MIN", "MAX_RIGID_CONTACT_CAP"]

COLLISION_SOURCES = ("newton", "sap")
# Default contact slots per world: one per candidate shape pair, within these bounds (as
# sap_common.io.load_mjcf); a pair can give several contacts (a box on a plane gives four), so
# scenes that rest on many faces pass max_rigid_contact explicitly.
MAX_RIGID_CONTACT_MIN = 8
MAX_RIGID_CONTACT_CAP = 64


class SolverSAP(newton.solvers.SolverBase):
    """Drake's SAP contact solver (this project's ``sap_gpu``) as a Newton solver.

    Args:
        model: the finalized ``newton.Model`` (all its worlds; see :mod:`sap_newton.convert` for
            what is mapped and what is refused).
        max_rigid_contact: contact slots per world (default: the candidate shape pairs of the
            world, clamped to [8, 64]).
        contact_preset_variant: ``"approx32"`` (default), ``"approx64"`` or ``"drake"``.
        collision: ``"newton"`` (step takes Newton contacts) or ``"sap"`` (the solver collides).
        contact_material, joint_limits, skip_unsupported_shapes: model conversion options
            (:func:`sap_newton.convert_model`).
        **overrides: any :class:`~sap_common.config.SapConfig` knob (line search, tolerances, …).

    After :meth:`step`, :meth:`diagnostics` gives per-world status bits (``StepStatus``),
    Newton iterations and dropped contacts, indexed by Newton world.
    """

    def __init__(self, model, *, max_rigid_contact: int | None = None, contact_preset_variant: str = "approx32",
                 collision: str = "newton", contact_material: str = "newton", joint_limits: str = "newton",
                 skip_unsupported_shapes: bool = False, **overrides):
        if not isinstance(model, newton.Model):
            raise ValueError(f"model: expected a newton.Model, got {type(model).__name__}")
        if collision not in COLLISION_SOURCES:
            raise ValueError(f"collision: must be one of {', '.join(map(repr, COLLISION_SOURCES))}, "
                             f"got {collision!r}")
        if max_rigid_contact is not None and (isinstance(max_rigid_contact, bool) or not isinstance(
                max_rigid_contact, (int, np.integer)) or max_rigid_contact < 0):
            raise ValueError(f"max_rigid_contact: must be an integer >= 0 or None, got {max_rigid_contact!r}")
        super().__init__(model)
        self.collision = collision
        self._options = dict(max_rigid_contact=max_rigid_contact, contact_preset_variant=contact_preset_variant,
                             contact_material=contact_material, joint_limits=joint_limits,
                             skip_unsupported_shapes=skip_unsupported_shapes, overrides=dict(overrides))
        # Validate the configuration once, before converting (a bad knob is named first).
        self.config = SapConfig.from_preset(contact_preset_variant, max_rigid_contact=max_rigid_contact or 0,
                                            **overrides)
        self._build()

    def _build(self) -> None:
        o, model = self._options, self.model
        self.conversion = conv = convert_model(model, contact_material=o["contact_material"],
                                               joint_limits=o["joint_limits"],
                                               skip_unsupported_shapes=o["skip_unsupported_shapes"])
        d = model.device
        self.solvers, self.pipelines = [], []
        for g in conv.groups:
            C = o["max_rigid_contact"]
            if C is None:
                C = int(np.clip(len(g.sap_model.shape_pair), MAX_RIGID_CONTACT_MIN, MAX_RIGID_CONTACT_CAP))
            self.solvers.append(sap_gpu.SolverSAP(g.sap_model, max_rigid_contact=C,
                                                  contact_preset_variant=o["contact_preset_variant"], device=d,
                                                  **o["overrides"]))
            if self.collision == "sap":
                self.pipelines.append(sap_gpu.CollisionPipeline(g.sap_model, C, self.solvers[-1].config, device=d))
        self.transfer = Transfer(conv, int(model.body_count), int(model.joint_coord_count),
                                 int(model.joint_dof_count), int(model.shape_count), d, self.solvers[0].config)
        self.sap_state_in, self.sap_state_out = self.transfer.states(), self.transfer.states()
        self.sap_control = self.transfer.controls()
        self.sap_contacts = [sap_gpu.contacts(g.sap_model.num_worlds, s.config.max_rigid_contact, d)
                             for g, s in zip(conv.groups, self.solvers)]
        self._contacts_used = False
        self._model_control = model.control(clone_variables=False)

    # ------------------------------------------------------------------ Newton interface

    def step(self, state_in, state_out, control, contacts, dt: float, *, observables=None) -> None:
        """Advance every world by ``dt``: Newton ``state_in`` → ``state_out`` (may be the same object).

        ``control=None`` uses the model's control values (Newton's convention); ``contacts`` is a
        ``newton.Contacts`` or ``None`` with ``collision="newton"``, and must be ``None`` with
        ``collision="sap"``.
        """
        self.validate_observables(observables, contacts)
        if isinstance(dt, bool) or not isinstance(dt, (int, float, np.integer, np.floating)) or not (
                np.isfinite(dt) and dt > 0):
            raise ValueError(f"dt: must be a finite time step > 0 s, got {dt!r}")
        control = self._model_control if control is None else control
        self.transfer.check_state(state_in, "state_in")
        self.transfer.check_state(state_out, "state_out")
        self.transfer.check_control(control)
        if self.collision == "sap" and contacts is not None:
            raise ValueError("contacts: must be None with collision='sap' (the solver runs its own collision); "
                             "pass Newton contacts with collision='newton'")
        if contacts is not None:
            if not isinstance(contacts, newton.Contacts):
                raise ValueError(f"contacts: expected a newton.Contacts or None, got {type(contacts).__name__}")
            if contacts.device != self.model.device:
                raise ValueError(f"contacts: on device {contacts.device}, the model is on {self.model.device}")
            self._require_unreduced_contacts(contacts)
        self._contacts_used = self.collision == "sap" or contacts is not None
        for g, solver in enumerate(self.solvers):
            s_in, s_out = self.sap_state_in[g], self.sap_state_out[g]
            self.transfer.state_to_sap(g, state_in, s_in)
            # Poses from joint_q (the reduced coordinates are what the step integrates).
            solver.body_poses(s_in.joint_q, s_in.body_q)
            self.transfer.control_to_sap(g, control, self.sap_control[g])
            sap_contacts = None
            if self.collision == "sap":
                sap_contacts = self.sap_contacts[g]
                self.pipelines[g].collide(s_in, sap_contacts)
            elif contacts is not None:
                sap_contacts = self.sap_contacts[g]
                self.transfer.contacts_to_sap(g, contacts, s_in.body_q, sap_contacts)
            solver.step(s_in, s_out, self.sap_control[g], sap_contacts, dt)
            self.transfer.state_from_sap(g, s_out, state_out)

    def notify_model_changed(self, flags) -> None:
        """Re-read the Newton model (any property) and rebuild the SAP solvers (host work, allocates)."""
        self._build()

    # ------------------------------------------------------------------ diagnostics

    def diagnostics(self) -> dict:
        """NumPy arrays over Newton worlds: ``status`` (StepStatus bits), ``newton_iterations``,
        ``line_search_iterations``, ``truncated_contact_count`` of the last step, and ``contact_count``
        (contacts the last step saw per world)."""
        W = self.conversion.world_count
        out = {k: np.zeros(W, np.int64) for k in ("status", "newton_iterations", "line_search_iterations",
                                                  "truncated_contact_count", "contact_count")}
        for g, solver, contacts in zip(self.conversion.groups, self.solvers, self.sap_contacts):
            diag = solver.diagnostics()
            for k in ("status", "newton_iterations", "line_search_iterations", "truncated_contact_count"):
                out[k][g.worlds] = diag[k]
            if self._contacts_used:
                out["contact_count"][g.worlds] = contacts.count.numpy()
        return out

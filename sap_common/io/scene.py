"""LoadedScene: a model with its initial state, control and run settings."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from ..model import SapModel
from ..state import SapControl, SapState

__all__ = ["LoadedScene", "DrakeJoint"]


@dataclass(frozen=True)
class DrakeJoint:
    """Where one of our joints sits in a Drake ``(q, v)`` vector (Drake-recorded scenes).

    Attributes:
        joint: our joint index.
        drake_type: Drake's joint type (``quaternion_floating``, ``revolute``, ``prismatic``,
            ``ball_rpy``, ``weld``).
        q_start, nq, v_start, nv: the slice of Drake's q and v.
    """

    joint: int
    drake_type: str
    q_start: int
    nq: int
    v_start: int
    nv: int


@dataclass
class LoadedScene:
    """Everything needed to run a scene.

    Attributes:
        name: scene name.
        sap_model: the model (``num_worlds`` worlds).
        state: initial state, public order, (num_worlds, …) arrays.
        control: control inputs, public order, (num_worlds, …) arrays.
        dt: time step [s].
        num_steps: steps of the reference run.
        max_rigid_contact: contact slots per world this scene needs.
        solver_kwargs: keyword arguments for ``SolverSAP`` (preset, line search, tolerances)
            that reproduce the scene's reference run; empty = library defaults.
        body_names: body names, in body index order.
        description: one paragraph on what the scene shows.
        source: the file it was read from, if any.
        drake_joints: coordinate map to Drake's ``(q, v)`` (Drake-recorded scenes only).
        mj_model: the compiled ``mujoco.MjModel`` (MJCF/URDF scenes only).
        mujoco_map: coordinate and actuator map to MuJoCo (MJCF/URDF scenes only).
    """

    name: str
    sap_model: SapModel
    state: SapState
    control: SapControl
    dt: float
    num_steps: int
    max_rigid_contact: int
    solver_kwargs: dict = field(default_factory=dict)
    body_names: tuple = ()
    description: str = ""
    source: str | None = None
    drake_joints: tuple = ()
    mj_model: object | None = None
    mujoco_map: object | None = None

    def replicate(self, num_worlds: int) -> "LoadedScene":
        """The same scene with ``num_worlds`` worlds (world 0's state/control tiled)."""
        tile = lambda a: np.repeat(a[:1], num_worlds, axis=0)  # noqa: E731
        model = self.sap_model.replicate(num_worlds)
        state = dataclasses.replace(
            self.state, **{f: tile(getattr(self.state, f))
                           for f in ("joint_q", "joint_qd", "body_q", "body_qd", "body_f")})
        control = dataclasses.replace(
            self.control, **{f: tile(getattr(self.control, f))
                             for f in ("joint_f", "joint_target_pos", "joint_target_vel", "joint_act")})
        return dataclasses.replace(self, sap_model=model, state=state, control=control,
                                   solver_kwargs=dict(self.solver_kwargs))

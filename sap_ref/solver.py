"""The sap_ref time step (DESIGN §2).

Until the contact solve lands, this module provides the time step of a model without
constraints (no contacts, limits or drives), where SAP's answer is the free motion itself:
``v₁ = v*`` and ``q₁ = Φ(q₀, v₀, v₁, h)``. The full ``SolverSAP`` builds on the same stage
functions.
"""

from __future__ import annotations

import numpy as np

from sap_common.config import SapConfig
from sap_common.model import SapModel
from sap_common.state import SapControl, SapState

from . import boundary
from .free_motion import driven_dofs, free_motion
from .integration import integrate_positions

__all__ = ["step_unconstrained"]


def step_unconstrained(model: SapModel, state_in: SapState, state_out: SapState, control: SapControl,
                       dt: float, config: SapConfig | None = None) -> None:
    """One step of a constraint-free model: v₁ = v*, q₁ = Φ(q₀, v₀, v₁, h), every world.

    ``state_out`` may be ``state_in``. Raises ``ValueError`` if the model has position limits or
    drives (those are SAP constraints and need the contact solve).
    """
    config = config or SapConfig()
    limited = np.isfinite(model.joint_limit_lower) | np.isfinite(model.joint_limit_upper)
    if np.any(limited) or np.any(driven_dofs(model)):
        raise ValueError(
            "model: has joint limits or drives, which are SAP constraints; step_unconstrained "
            "handles constraint-free models only"
        )
    x = boundary.read_inputs(model, state_in, control, dt, config.use_f64_boundary_pose)
    q1, v1 = np.empty_like(x.joint_q), np.empty_like(x.v0)
    for w in range(model.num_worlds):
        fm = free_motion(model, x.joint_q[w], x.v0[w], dt, precision=config.free_motion_solve_precision,
                         joint_f=x.joint_f[w], body_f=x.body_f[w], joint_act=x.joint_act[w])
        v1[w] = fm.v_star
        q1[w] = integrate_positions(model, x.joint_q[w], x.v0[w], v1[w], dt, config.position_integration)
    boundary.write_state(model, state_out, q1, v1, config.use_f64_boundary_pose)

"""Check your own implementation with ``sap-validate``: write a trajectory file from a script.

This script stands in for "your kernels": it steps the built-in ``pendulum_limit`` scene (a
rod on a hinge, gravity, joint damping) with a hand-written semi-implicit Euler step of the same
equations SAP solves when no constraint is active,

    (M + h D) (v₁ − v₀) = h (τ_g(q₀) − D v₀),    q₁ = q₀ + h v₁,

with M and τ_g written out for this one-DOF pendulum instead of computed by ``sap_ref``. It
writes the trajectory in the minimal format (``sap_common.io.trajectory``) and, run as a script,
validates it:

    python examples/user_trajectory.py pendulum.npz
    sap-validate pendulum.npz --mode both

300 steps keep the pendulum away from its joint limits (a limit row would need SAP's limit
constraint, which this step leaves out).
"""

from __future__ import annotations

import math
import sys

import numpy as np

from sap_common import scenes
from sap_common.io.trajectory import write_trajectory

STEPS = 300


def my_step(q, v, h, m, I_yy, l_c, damping, g):
    """One step of a rod on a hinge about y: M = I_yy + m l_c², τ_g = −m g l_c sin q (the COM hangs
    l_c below the hinge), joint damping implicit."""
    M = I_yy + m * l_c * l_c
    tau_g = -m * g * l_c * math.sin(q)
    v1 = v + h * (tau_g - damping * v) / (M + h * damping)
    return q + h * v1, v1


def write(path: str) -> str:
    scene = scenes.get("pendulum_limit")  # read only for its parameters and initial state
    model = scene.sap_model
    m, l_c = float(model.body_mass[0]), -float(model.body_com[0, 2])
    I_yy, damping, g = float(model.body_inertia[0, 1, 1]), float(model.joint_damping[0]), -float(model.gravity[2])
    q, v = float(scene.state.joint_q[0, 0]), float(scene.state.joint_qd[0, 0])
    qs, vs = [[q]], [[v]]
    for _ in range(STEPS):
        q, v = my_step(q, v, scene.dt, m, I_yy, l_c, damping, g)
        qs.append([q])
        vs.append([v])
    return write_trajectory(path, scene="pendulum_limit", dt=scene.dt, q=np.array(qs), v=np.array(vs),
                            convention="public", engine="examples/user_trajectory.py")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    path = write(argv[0] if argv else "pendulum.npz")
    print(f"wrote {path}")
    from sap_tools.validate.cli import main as validate

    return validate([path, "--mode", "both", "--quiet"])


if __name__ == "__main__":
    sys.exit(main())

"""Stage 1, free motion: the dynamics matrix A and the free-motion velocity v* (docs/formulation.md § Free motion).

    A = M(q₀) + h·diag(D)                     (M includes the armature)
    A (v* − v₀) = h · k,   k = τ_g − C(q₀, v₀) v₀ − D v₀ + joint_f + Σ_b J_bᵀ body_f_b + u_explicit

With ``pcr`` settings (``matrixfree_representation``) A is not factored: Δv = v* − v₀ comes from
:func:`~sap_ref.linear_solve.pcr` on products A·p, Jacobi-preconditioned by diag(A).

Joint damping is explicit in k (−D v₀) and implicit in A (+h D): backward Euler on damping.
``u_explicit`` is ``joint_act`` on DOFs without a drive, clamped to the effort limit; on a
driven DOF the actuation goes inside the drive constraint instead (docs/formulation.md § Drives).
Drake: ``SapDriver::CalcLinearDynamicsMatrix``, ``CalcFreeMotionVelocities``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg

from sap_common.config import precision_dtype
from sap_common.model import SapModel

from .dynamics import bias_forces, body_wrench_forces, mass_matrix
from .kinematics import forward_kinematics, motion_subspaces
from .linear_solve import PcrSettings, pcr

__all__ = ["FreeMotion", "driven_dofs", "explicit_actuation", "dynamics_matrix", "free_motion"]


@dataclass
class FreeMotion:
    """Result of stage 1 for one world (SAP order, float64 arrays).

    Attributes:
        M: mass matrix with armature [kg, kg·m²], (nv, nv).
        A: dynamics matrix M + h·diag(D), (nv, nv).
        k: non-constraint forces at (q₀, v₀) [N, N·m], (nv,).
        v_star: free-motion velocity [m/s, rad/s], (nv,).
    """

    M: np.ndarray
    A: np.ndarray
    k: np.ndarray
    v_star: np.ndarray


def driven_dofs(model: SapModel) -> np.ndarray:
    """``(nv,) bool``: DOFs with a drive (``target_ke > 0`` or ``target_kd > 0``); a kinematic
    body's DOFs have none (their velocity is prescribed)."""
    return ((model.joint_target_ke > 0.0) | (model.joint_target_kd > 0.0)) & ~model.dof_kinematic


def explicit_actuation(model: SapModel, joint_act: np.ndarray) -> np.ndarray:
    """``joint_act`` on undriven DOFs, clamped to ``±joint_effort_limit``; 0 on driven DOFs."""
    u = np.clip(np.asarray(joint_act, dtype=np.float64), -model.joint_effort_limit, model.joint_effort_limit)
    return np.where(driven_dofs(model), 0.0, u)


def dynamics_matrix(model: SapModel, M: np.ndarray, dt: float) -> np.ndarray:
    """``A = M + h·diag(D)``."""
    return M + dt * np.diag(model.joint_damping)


def free_motion(model: SapModel, joint_q, v0, dt: float, *, precision: str = "fp64", joint_f=None,
                body_f=None, joint_act=None, body_q=None, pcr_settings: PcrSettings | None = None) -> FreeMotion:
    """A, k and v* of one world. All velocity/force inputs in SAP order.

    Args:
        model: the model.
        joint_q: q₀, (nq,).
        v0: v₀, (nv,).
        dt: time step h [s].
        precision: ``"fp64"``, or ``"fp32"``: A and h·k are rounded to float32 and the
            Cholesky solve runs in float32; then ``v* = v₀ + cast₆₄(Δv₃₂)``
            (``free_motion_solve_precision``).
        joint_f: generalized forces, (nv,) or None.
        body_f: body wrenches ``[τ_O; f]`` at each body origin, world, (B, 6) or None.
        joint_act: feed-forward actuation per DOF, (nv,) or None.
        body_q: body poses if already computed, (B, 7).
        pcr_settings: solve with PCR on A·p products at ``precision`` instead of Cholesky.

    Returns:
        :class:`FreeMotion` with M, A, k, v_star. A kinematic body's DOFs (``model.dof_kinematic``)
        keep their prescribed velocity, ``v* = v₀``, and k = 0 there: no force moves them. Their
        block of A is the identity (a kinematic tree is a tree of its own, so A has no other entry
        in those rows and columns): never used, and regular whatever the body's mass, 0 included.
    """
    joint_q = np.asarray(joint_q, dtype=np.float64)
    v0 = np.asarray(v0, dtype=np.float64)
    body_q = forward_kinematics(model, joint_q) if body_q is None else body_q
    S = motion_subspaces(model, joint_q, body_q)
    M = mass_matrix(model, joint_q, body_q, S)
    A = dynamics_matrix(model, M, dt)
    kinematic = model.dof_kinematic
    if np.any(kinematic):
        A[kinematic, :] = 0.0
        A[:, kinematic] = 0.0
        A[kinematic, kinematic] = 1.0
    k = -bias_forces(model, joint_q, v0, body_q, S) - model.joint_damping * v0
    if joint_f is not None:
        k = k + np.asarray(joint_f, dtype=np.float64)
    if body_f is not None and np.any(body_f):
        k = k + body_wrench_forces(model, joint_q, body_f, body_q, S)
    if joint_act is not None:
        k = k + explicit_actuation(model, joint_act)
    if np.any(kinematic):
        k = np.where(kinematic, 0.0, k)
    dtype = precision_dtype(precision)
    A_p, rhs = A.astype(dtype), (dt * k).astype(dtype)
    if not len(rhs):
        dv = rhs
    elif pcr_settings is not None:
        dv = pcr(lambda x: A_p @ x, rhs, np.diag(A_p), pcr_settings, precision).x
    else:
        dv = scipy.linalg.cho_solve(scipy.linalg.cho_factor(A_p, lower=True), rhs)
    v_star = v0 + dv.astype(np.float64)
    if np.any(kinematic):
        v_star = np.where(kinematic, v0, v_star)
    return FreeMotion(M=M, A=A, k=k, v_star=v_star)

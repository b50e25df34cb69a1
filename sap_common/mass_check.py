"""Is the model's mass matrix positive definite? Checked once, when a model is constructed.

Both solvers factor A = M(q) + h·diag(D) (armature on M's diagonal); a singular M — a free body
of mass 0, a prismatic joint driving a massless body — gives no free-motion velocity at all
(sap_ref: a failed Cholesky; sap_gpu: a NaN world). :func:`check_mass_matrix` rejects such a
model with a ``ValueError`` naming the body and joint, in two parts:

1. **Structural (every configuration).** Let the *composite* of a joint be its child body plus
   every body welded to it by FIXED joints. If every joint with DOFs has a composite of mass
   > 0, or armature > 0 on each of its DOFs, M(q) is positive definite at *every* q: a body of
   mass > 0 has a positive definite inertia (the model checks that), so qdᵀM qd = 0 forces each
   such composite's twist to vanish, and walking the tree from the roots each joint's DOFs then
   vanish too (a joint's motion subspace has full column rank). Most models stop here.
2. **Numerical (at ``joint_q_init``).** Otherwise — some joint moves only massless bodies, e.g.
   the massless intermediate links of a multi-hinge MJCF body — each tree holding such a joint
   has its block of M + diag(armature) evaluated at ``joint_q_init`` (M = Σ_b J_bᵀ M_b J_b from
   body Jacobians) and is rejected when its smallest eigenvalue is at most
   ``MASS_MATRIX_RTOL`` times its largest. A massless link is fine where its massive
   descendants move along all of its DOFs (three hinges with independent axes ending in a
   massive body); it is not where they cannot (a massless leaf, a hinge coaxial with the next).

Limits: part 2 holds at the reference configuration only. A model with massless links that is
positive definite there can still become singular elsewhere (hinge axes of a massless gimbal
that line up); a solver step at such a configuration reports the world as failed
(``LINEAR_SOLVE_FAILURE`` or ``NON_FINITE``) instead of raising.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from . import kinematics, spatial
from .constants import MASS_MATRIX_RTOL
from .enums import JointType

if TYPE_CHECKING:  # annotations only: model imports this module
    from .model import SapModel

__all__ = ["check_mass_matrix", "composite_masses", "mass_matrix_at"]

# A null direction of M involves a DOF whose component is above this fraction of the largest one.
_NULL_COMPONENT = 1e-3


def composite_masses(model: "SapModel") -> np.ndarray:
    """Mass of each body plus every body welded to it by FIXED joints below it [kg], (B,)."""
    mass = np.array(model.body_mass, dtype=np.float64)
    for j in model.joint_order[::-1]:  # children first
        p = int(model.joint_parent[j])
        if int(model.joint_type[j]) == JointType.FIXED and p >= 0:
            mass[p] += mass[int(model.joint_child[j])]
    return mass


def mass_matrix_at(model: "SapModel", joint_q) -> np.ndarray:
    """``M(q) + diag(armature)`` (nv, nv) of one world from body Jacobians: Σ_b J_bᵀ M_b J_b.

    J_b (6, nv) maps SAP-order velocities to body b's twist ``[ω; v_O]`` at its origin; M_b is its
    spatial inertia about the origin in world axes.
    """
    nv = model.joint_dof_count
    q = np.asarray(joint_q, dtype=np.float64).reshape(1, -1)
    body_q = kinematics.forward_kinematics(model, q)
    V = kinematics.body_velocities(model, np.repeat(q, nv, 0), np.eye(nv), np.repeat(body_q, nv, 0))  # (nv, B, 6)
    R = spatial.quat_to_matrix(body_q[0, :, 3:])
    com_W = np.einsum("bij,bj->bi", R, model.body_com)
    I_W = R @ model.body_inertia @ np.swapaxes(R, -1, -2)
    Mb = spatial.spatial_inertia(model.body_mass, com_W, I_W)
    M = np.einsum("kbi,bij,lbj->kl", V, Mb, V)
    M = 0.5 * (M + M.T)
    M[np.diag_indices_from(M)] += model.joint_armature
    return M


def check_mass_matrix(model: "SapModel") -> None:
    """Raise ``ValueError`` naming the body and joint if M + armature is singular (module docstring)."""
    comp = composite_masses(model)
    suspect = []  # joints with DOFs that move only massless bodies and have no armature on some DOF
    for j in range(model.joint_count):
        dofs = model.joint_qd_slice(j)
        c = int(model.joint_child[j])
        if model.body_kinematic[c]:  # its mass is never used: its block of A is the identity (sap_ref.free_motion)
            continue
        if dofs.stop > dofs.start and comp[c] <= 0.0 and not np.all(model.joint_armature[dofs] > 0.0):
            suspect.append(j)
    if not suspect:
        return
    M = mass_matrix_at(model, model.joint_q_init)
    for tree in sorted({int(model.body_tree[int(model.joint_child[j])]) for j in suspect}):
        dofs = np.flatnonzero(model.dof_tree == tree)
        ev, U = np.linalg.eigh(M[np.ix_(dofs, dofs)])
        if ev[0] > MASS_MATRIX_RTOL * ev[-1]:
            continue
        u = np.abs(U[:, 0])
        null_dofs = set(dofs[u > _NULL_COMPONENT * u.max()].tolist())
        culprits = [j for j in suspect if
                    null_dofs & set(range(int(model.joint_qd_start[j]), int(model.joint_qd_start[j + 1])))]
        culprits = culprits or [j for j in suspect if int(model.body_tree[int(model.joint_child[j])]) == tree]
        j = culprits[0]
        c = int(model.joint_child[j])
        names = ", ".join(f"{model.joint_name[k]!r} ({JointType(int(model.joint_type[k])).name}, DOFs "
                          f"{int(model.joint_qd_start[k])}:{int(model.joint_qd_start[k + 1])})" for k in culprits)
        raise ValueError(
            f"body_mass[{c}] ({model.body_name[c]}): the mass matrix is singular — joint(s) {names} move only "
            f"massless bodies (mass {model.body_mass[c]:g} kg, with welded children {comp[c]:g} kg) along "
            f"directions no massive body follows (smallest eigenvalue {ev[0]:.3g} of M + armature at "
            f"joint_q_init, largest {ev[-1]:.3g}). Give the body a mass > 0 and an inertia, armature > 0 on "
            f"those DOFs, or a massive child that moves with it along every DOF"
        )

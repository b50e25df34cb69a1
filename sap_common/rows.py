"""The scalar constraint rows: every SAP constraint of the step besides the contacts, as one family.

A contact is a block of three rows (t₁, t₂, n) with a 3×3 term. Every other constraint of the
step is made of *scalar rows*: row r has a Jacobian row J_r (so its velocity is vc_r = J_r v), an
impulse γ_r(vc_r), its derivative G_r = −∂γ_r/∂vc_r ≥ 0 and a cost ℓ_r
(docs/formulation.md § The cost and its derivatives). What differs between the kinds is only the term γ_r, G_r, ℓ_r and
the parameters it reads; the Newton loop's passes (J v, Jᵀγ, JᵀGJ, φ(α)) treat every scalar
row alike. Both backends lay a world's scalar rows out the same way, kind after kind in the
order of :data:`ROW_KINDS` and, within a kind, in the order of the model (limits joint by joint,
lower side first; holonomic constraints by index, their rows in order; drives by DOF):

==========  ===============================================  ==============================
kind        term (y = (v̂ − vc)/R unless said)                  parameters per row
==========  ===============================================  ==============================
LIMIT       one-sided: γ = max(0, y), G = 1/R where y > 0     R, v̂ (and whether the limit is
                                                              inside its window this step)
HOLONOMIC   bilateral: γ = y, G = 1/R                          R, v̂
DRIVE       PD toward targets, clamped to the effort limit:   q₀, q_d, v_d, u₀, Kp, Kd, e
            γ = h·clamp(−Kp(q₀ + h vc − q_d) − Kd(vc − v_d)
            + u₀, ±e), G = h(hKp + Kd) inside the clamp
==========  ===============================================  ==============================

The sums over rows (ℓ, Jᵀγ, H = A + JᵀGJ, φ(α)) add the contacts' terms first, then the scalar
rows in this order. sap_ref evaluates each kind's rows as one array and adds the kinds one after
the other (a kind that a world lacks adds nothing, so adding a kind never changes the sums of a
model without it); sap_gpu walks the rows term by term, each loop with its term fixed when the
kernel is built (kinds that share a term, limits and holonomic rows, share a loop).

Adding a kind: a member here (and its place in :data:`ROW_KINDS`), its rows in
:func:`scalar_row_layout`, one term function and one set-up stage per backend; every file is
listed in docs/pipeline.md § Adding a constraint kind

Drake: every one of these is a ``SapConstraint`` (``SapLimitConstraint``,
``SapHolonomicConstraint`` and its couplers, distance, ball and weld constraints,
``SapPdControllerConstraint``) with a one-dimensional constraint function.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from .enums import JointType

__all__ = ["RowKind", "ROW_KINDS", "WINDOWED_KINDS", "ScalarRowLayout", "scalar_row_layout", "driven_dofs",
           "limit_slots"]


class RowKind(enum.IntEnum):
    """The kind of a scalar constraint row (its term; see the module docstring)."""

    LIMIT = 0
    HOLONOMIC = 1
    DRIVE = 2


# The order of the kinds in every world's scalar rows (and in every sum over them). It is the order
# of the kinds' values, so that ``ScalarRowLayout.start`` can be indexed by kind.
ROW_KINDS = (RowKind.LIMIT, RowKind.HOLONOMIC, RowKind.DRIVE)


# The kinds whose rows may be out of use in a step: a limit row outside its window (docs/formulation.md
# § Limits); a pass over the rows tests these rows' flag. A drive row is in use every step. A
# holonomic row that cannot be formed (a distance constraint whose points meet) has J = 0, R = 1,
# v̂ = 0 in sap_ref, so no impulse; sap_gpu marks it not in use, which its loop over the limit term's
# rows (limits and holonomic rows together) tests anyway.
WINDOWED_KINDS = frozenset({RowKind.LIMIT})


def driven_dofs(model) -> np.ndarray:
    """The DOFs with a PD drive (``joint_target_ke > 0`` or ``joint_target_kd > 0``), ascending (int32);
    a kinematic body's DOFs have none (their velocity is prescribed)."""
    driven = ((model.joint_target_ke > 0.0) | (model.joint_target_kd > 0.0)) & ~model.dof_kinematic
    return np.flatnonzero(driven).astype(np.int32)


def limit_slots(model) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(kind, index, side)`` of every limit row the model can have (int32 each): ``kind`` 0 a DOF's
    limit (``index`` the DOF), 1 a distance joint's (``index`` the joint); ``side`` −1 lower, +1
    upper. Joint by joint, lower side first: the order sap_ref builds the rows in. A limit with
    ``joint_limit_ke ≤ 0`` or an infinite bound (a distance joint: a lower bound ≤ 0) has no row, and
    neither has a kinematic body's joint."""
    kind, index, side = [], [], []
    for j in range(model.joint_count):
        jt = JointType(int(model.joint_type[j]))
        d0 = int(model.joint_qd_start[j])
        if model.body_kinematic[model.joint_child[j]]:
            continue
        if jt in (JointType.PRISMATIC, JointType.REVOLUTE, JointType.D6):
            for dof in range(d0, int(model.joint_qd_start[j + 1])):
                if model.joint_limit_ke[dof] <= 0.0:
                    continue
                for s, bound in ((-1, model.joint_limit_lower[dof]), (1, model.joint_limit_upper[dof])):
                    if np.isfinite(bound):
                        kind.append(0), index.append(dof), side.append(s)
        elif jt == JointType.DISTANCE and model.joint_limit_ke[d0] > 0.0:
            if model.joint_limit_lower[d0] > 0.0:
                kind.append(1), index.append(j), side.append(-1)
            if np.isfinite(model.joint_limit_upper[d0]):
                kind.append(1), index.append(j), side.append(1)
    return tuple(np.asarray(x, dtype=np.int32) for x in (kind, index, side))


@dataclass(frozen=True)
class ScalarRowLayout:
    """Every scalar row a world of the model can have, in the order of :data:`ROW_KINDS`.

    sap_gpu allocates one slot per row (a limit row outside its window is inactive that step);
    sap_ref keeps the active rows only, in the same order.

    Attributes:
        kind: the kind of each row, (S,) int32.
        start: the first row of each kind, indexed by :class:`RowKind` (last entry: S), (len(ROW_KINDS) + 1,).
        limit_kind, limit_index, limit_side: the limit rows (:func:`limit_slots`), (L,) each.
        holonomic_rows: the holonomic constraints' rows (``model.constraint_row_count``), E.
        drive_dof: the DOF of each drive row (:func:`driven_dofs`), (D,).
    """

    kind: np.ndarray
    start: np.ndarray
    limit_kind: np.ndarray
    limit_index: np.ndarray
    limit_side: np.ndarray
    holonomic_rows: int
    drive_dof: np.ndarray

    @property
    def count(self) -> int:
        """S, the number of scalar rows."""
        return int(self.start[-1])

    def rows(self, kind: RowKind) -> range:
        """The rows of ``kind``."""
        return range(int(self.start[kind]), int(self.start[kind + 1]))


def scalar_row_layout(model) -> ScalarRowLayout:
    """The scalar rows of one world of ``model`` (:class:`ScalarRowLayout`)."""
    limit_kind, limit_index, limit_side = limit_slots(model)
    drive_dof = driven_dofs(model)
    counts = {RowKind.LIMIT: len(limit_kind), RowKind.HOLONOMIC: int(model.constraint_row_count),
              RowKind.DRIVE: len(drive_dof)}
    start = np.concatenate([[0], np.cumsum([counts[k] for k in ROW_KINDS])]).astype(np.int32)
    kind = np.concatenate([np.full(counts[k], int(k), np.int32) for k in ROW_KINDS]).astype(np.int32)
    return ScalarRowLayout(kind=kind, start=start, limit_kind=limit_kind, limit_index=limit_index,
                           limit_side=limit_side, holonomic_rows=counts[RowKind.HOLONOMIC], drive_dof=drive_dof)

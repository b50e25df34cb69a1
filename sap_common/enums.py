"""The model's enumerations: joint and shape types (no dependencies, imported by every module
that needs them, so that ``model``, ``conventions``, ``kinematics`` and ``state`` need not import
each other in a circle)."""

from __future__ import annotations

import enum

__all__ = ["JointType", "ShapeType", "ConstraintType", "CONSTRAINT_ROWS"]


class JointType(enum.IntEnum):
    """Joint types (values match Newton's ``JointType``)."""

    PRISMATIC = 0
    REVOLUTE = 1
    BALL = 2
    FIXED = 3
    FREE = 4
    DISTANCE = 5
    D6 = 6


class ShapeType(enum.IntEnum):
    """Collision shape types.

    Sizes (``shape_size``) per type:

    * PLANE: the half-space z ≤ 0 of the shape frame (outward normal +z); size unused (0).
    * SPHERE: ``(radius, 0, 0)``.
    * CAPSULE: ``(radius, half_length, 0)``, segment along the shape frame's z axis.
    * BOX: ``(hx, hy, hz)`` half extents, centred on the shape frame.
    * CYLINDER: ``(radius, half_length, 0)``, axis along the shape frame's z axis, flat caps at
      z = ±half_length.
    * ELLIPSOID: ``(a, b, c)`` semi-axes along the shape frame's x, y, z axes.
    * CONVEX_MESH: the convex hull of a point set given in the shape frame (the model's
      ``mesh_*`` arrays, ``shape_source`` = its mesh index); size unused (zeros).
    * HEIGHTFIELD: ``(hx, hy, base)``: a grid of heights over x ∈ [−hx, hx], y ∈ [−hy, hy] of the
      shape frame, solid down to z = −base (the model's ``hfield_*`` arrays, ``shape_source`` = its
      height-field index); world-attached only, like a plane.

    Every type but PLANE and HEIGHTFIELD may carry a rounding radius (``SapModel.shape_rounding``):
    the shape above is then the core, swept by a ball of that radius.
    """

    PLANE = 0
    SPHERE = 1
    CAPSULE = 2
    BOX = 3
    CYLINDER = 4
    ELLIPSOID = 5
    CONVEX_MESH = 6
    HEIGHTFIELD = 7


class ConstraintType(enum.IntEnum):
    """Holonomic (equality) constraint types; docs/formulation.md § Holonomic constraints.

    * COUPLER: q₀ = ρ·q₁ + Δq between two single-DOF joints (Drake's coupler), 1 row.
    * DISTANCE: ‖p_Q − p_P‖ = ℓ₀ between a point P of body A and a point Q of body B, with a
      stiffness k (∞ = rigid) and a damping c (Drake's distance constraint), 1 row.
    * BALL: point P of body A coincides with point Q of body B (Drake's ball constraint), 3 rows.
    * WELD: frame P of body A coincides with frame Q of body B (Drake's weld constraint), 6 rows.
    * AXIS_ALIGN: the axis â of frame P (on A) stays parallel to the axis â of frame Q (on B),
      2 rows; with a BALL it closes a loop through a revolute joint (not a Drake constraint).
    """

    COUPLER = 0
    DISTANCE = 1
    BALL = 2
    WELD = 3
    AXIS_ALIGN = 4


# Scalar rows of each constraint type.
CONSTRAINT_ROWS = {ConstraintType.COUPLER: 1, ConstraintType.DISTANCE: 1, ConstraintType.BALL: 3,
                   ConstraintType.WELD: 6, ConstraintType.AXIS_ALIGN: 2}

"""The model's enumerations: joint and shape types (no dependencies, imported by every module
that needs them, so that ``model``, ``conventions``, ``kinematics`` and ``state`` need not import
each other in a circle)."""

from __future__ import annotations

import enum

__all__ = ["JointType", "ShapeType"]


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
    """Collision shape types. Sizes (``shape_size``) per type:

    * PLANE: the half-space z ≤ 0 of the shape frame (outward normal +z); size unused (0).
    * SPHERE: ``(radius, 0, 0)``.
    * CAPSULE: ``(radius, half_length, 0)``, segment along the shape frame's z axis.
    * BOX: ``(hx, hy, hz)`` half extents, centred on the shape frame.
    """

    PLANE = 0
    SPHERE = 1
    CAPSULE = 2
    BOX = 3

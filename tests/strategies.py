"""Hypothesis strategies shared by the test modules: vectors, rotations, random models.

``random_models()`` draws kinematic trees from the builder with every joint type, random
frames, axes, COMs and full inertias, plus random coordinates and velocities. Later stages
(dynamics, the GPU cross-checks) reuse it.
"""

from __future__ import annotations

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from sap_common import spatial
from sap_common.builder import ModelBuilder
from sap_common.model import ConstraintType, JointType

finite = st.floats(-10.0, 10.0, allow_nan=False, allow_infinity=False)


def vectors(n: int = 3, lo: float = -10.0, hi: float = 10.0):
    return st.lists(st.floats(lo, hi, allow_nan=False, allow_infinity=False), min_size=n, max_size=n).map(
        lambda v: np.array(v, dtype=np.float64)
    )


def unit_vectors():
    return vectors(3, -1.0, 1.0).filter(lambda v: np.linalg.norm(v) > 1e-3).map(lambda v: v / np.linalg.norm(v))


def quaternions(unit: bool = True):
    """Quaternions [x, y, z, w]; unit ones by default, else with norm in [0.5, 2]."""
    base = vectors(4, -1.0, 1.0).filter(lambda q: np.linalg.norm(q) > 1e-3).map(spatial.quat_normalize)
    if unit:
        return base
    return st.tuples(base, st.floats(0.5, 2.0)).map(lambda t: t[0] * t[1])


def transforms(max_offset: float = 1.0):
    return st.tuples(vectors(3, -max_offset, max_offset), quaternions()).map(lambda t: spatial.transform(*t))


def inertias(mass: float):
    """Full body-frame inertias: physical principal moments rotated by a random rotation."""

    def make(args):
        a, b, c, q = args
        # Principal moments of a box with these half sides: always satisfies the triangle rule.
        d = np.diag([b * b + c * c, a * a + c * c, a * a + b * b]) * mass / 3.0
        R = spatial.quat_to_matrix(q)
        return R @ d @ R.T

    side = st.floats(0.05, 0.5)
    return st.tuples(side, side, side, quaternions()).map(make)


JOINT_TYPES = (JointType.PRISMATIC, JointType.REVOLUTE, JointType.BALL, JointType.FIXED,
               JointType.FREE, JointType.DISTANCE, JointType.D6)


def _draw_joint_q(draw, model, position: float, scalar: float) -> np.ndarray:
    """Random coordinates: unit quaternions for BALL, positions in ±``position`` plus a unit
    quaternion for FREE/DISTANCE, values in ±``scalar`` for every other coordinate."""
    q = np.zeros(model.joint_coord_count)
    for j in range(model.joint_count):
        jt = JointType(int(model.joint_type[j]))
        sl = model.joint_q_slice(j)
        if jt == JointType.BALL:
            q[sl] = draw(quaternions())
        elif jt in (JointType.FREE, JointType.DISTANCE):
            q[sl] = np.concatenate([draw(vectors(3, -position, position)), draw(quaternions())])
        elif sl.stop > sl.start:
            q[sl] = draw(vectors(sl.stop - sl.start, -scalar, scalar))
    return q


@st.composite
def random_models(draw, max_bodies: int = 6, joint_types=JOINT_TYPES, num_worlds: int = 1, min_dofs: int = 1):
    """``(model, joint_q, joint_qd_public)`` for a random tree (one world) with ≥ ``min_dofs`` DOFs."""
    n = draw(st.integers(1, max_bodies))
    b = ModelBuilder(gravity=draw(vectors(3, -10, 10)))
    for i in range(n):
        mass = draw(st.floats(0.1, 5.0))
        b.add_body(mass, com=draw(vectors(3, -0.3, 0.3)), inertia=draw(inertias(mass)))
    for i in range(n):
        jt = draw(st.sampled_from(joint_types))
        parent = draw(st.integers(-1, i - 1))
        if jt == JointType.FREE:
            parent = -1
        xp, xc = draw(transforms(0.5)), draw(transforms(0.5))
        if jt == JointType.PRISMATIC:
            b.add_joint_prismatic(parent, i, xp, xc, draw(unit_vectors()))
        elif jt == JointType.REVOLUTE:
            b.add_joint_revolute(parent, i, xp, xc, draw(unit_vectors()))
        elif jt == JointType.BALL:
            b.add_joint_ball(parent, i, xp, xc)
        elif jt == JointType.FIXED:
            b.add_joint_fixed(parent, i, xp, xc)
        elif jt == JointType.FREE:
            b.add_joint_free(-1, i)
        elif jt == JointType.DISTANCE:
            b.add_joint_distance(parent, i, xp, xc)
        else:
            nl = draw(st.integers(0, 3))
            na = draw(st.integers(0 if nl else 1, 3))
            # Orthonormal frames guarantee independent axes.
            Rl, Ra = spatial.quat_to_matrix(draw(quaternions())), spatial.quat_to_matrix(draw(quaternions()))
            b.add_joint_d6(parent, i, xp, xc, linear_axes=list(Rl.T[:nl]), angular_axes=list(Ra.T[:na]))
    model = b.replicate(num_worlds).finalize()
    assume(model.joint_dof_count >= min_dofs)
    q = _draw_joint_q(draw, model, 2.0, 2.0)
    qd = draw(vectors(model.joint_dof_count, -3.0, 3.0)) if model.joint_dof_count else np.zeros(0)
    return model, q, qd


@st.composite
def random_constrained_models(draw, max_bodies: int = 5, num_worlds: int = 1, hunt_crossley: bool = False,
                              holonomic: bool = False):
    """``(model, joint_q, joint_qd_public)``: a random tree whose scalar DOFs may carry limits and PD
    drives, with a sphere, capsule or box on every body and a ground plane (so states below z = 0
    make contacts). Every joint type appears. ``hunt_crossley``: materials for the Hunt–Crossley
    approximations — a finite ground stiffness, Hunt–Crossley dissipations (0 included) on the
    ground and on some shapes. ``holonomic``: also 1–4 holonomic constraints of random types
    (:func:`add_random_holonomic`)."""
    n = draw(st.integers(1, max_bodies))
    b = ModelBuilder(gravity=(0.0, 0.0, -9.81))
    for i in range(n):
        mass = draw(st.floats(0.2, 3.0))
        b.add_body(mass, com=draw(vectors(3, -0.1, 0.1)), inertia=draw(inertias(mass)))
    scalar_joints = []  # single-DOF joints (a coupler's)
    for i in range(n):
        jt = draw(st.sampled_from(JOINT_TYPES))
        parent = -1 if jt == JointType.FREE else draw(st.integers(-1, i - 1))
        if jt in (JointType.PRISMATIC, JointType.REVOLUTE):
            scalar_joints.append(i)
        xp, xc = draw(transforms(0.3)), draw(transforms(0.2))
        scalar = dict(
            limit_lower=draw(st.one_of(st.just(-np.inf), st.floats(-1.0, -0.05))),
            limit_upper=draw(st.one_of(st.just(np.inf), st.floats(0.05, 1.0))),
            target_ke=draw(st.one_of(st.just(0.0), st.floats(1.0, 1e4))),
            target_kd=draw(st.one_of(st.just(0.0), st.floats(0.1, 100.0))),
            effort_limit=draw(st.one_of(st.just(np.inf), st.floats(1.0, 50.0))),
            armature=draw(st.floats(0.0, 0.05)), damping=draw(st.floats(0.0, 1.0)),
        )
        if jt == JointType.PRISMATIC:
            b.add_joint_prismatic(parent, i, xp, xc, draw(unit_vectors()), **scalar)
        elif jt == JointType.REVOLUTE:
            b.add_joint_revolute(parent, i, xp, xc, draw(unit_vectors()), **scalar)
        elif jt == JointType.BALL:
            b.add_joint_ball(parent, i, xp, xc, damping=scalar["damping"])
        elif jt == JointType.FIXED:
            b.add_joint_fixed(parent, i, xp, xc)
        elif jt == JointType.FREE:
            b.add_joint_free(-1, i)
        elif jt == JointType.DISTANCE:
            b.add_joint_distance(parent, i, xp, xc, limit_upper=draw(st.floats(0.3, 1.0)))
        else:
            nl = draw(st.integers(0, 2))
            Rl, Ra = spatial.quat_to_matrix(draw(quaternions())), spatial.quat_to_matrix(draw(quaternions()))
            b.add_joint_d6(parent, i, xp, xc, linear_axes=list(Rl.T[:nl]), angular_axes=list(Ra.T[:2 - nl + 1]),
                           **scalar)
    if hunt_crossley:
        b.add_ground_plane(mu=draw(st.floats(0.1, 1.0)), ke=draw(st.sampled_from([1e4, 1e5, 1e6])), tau=0.01,
                           hcd=draw(st.sampled_from([0.0, 5.0, 50.0])))
    else:
        b.add_ground_plane(mu=draw(st.floats(0.1, 1.0)), ke=draw(st.sampled_from([1e4, 1e5, 1e6, np.inf])), tau=0.01)
    for i in range(n):
        kind = draw(st.sampled_from(["sphere", "capsule", "box"]))
        material = dict(hcd=draw(st.one_of(st.none(), st.floats(0.0, 100.0)))) if hunt_crossley else {}
        if kind == "sphere":
            b.add_shape_sphere(i, radius=draw(st.floats(0.05, 0.2)), **material)
        elif kind == "capsule":
            b.add_shape_capsule(i, draw(transforms(0.05)), radius=draw(st.floats(0.03, 0.15)),
                                half_length=draw(st.floats(0.0, 0.2)), **material)
        else:
            hx, hy, hz = draw(vectors(3, 0.03, 0.15))
            b.add_shape_box(i, draw(transforms(0.05)), hx=hx, hy=hy, hz=hz, **material)
    if holonomic:
        add_random_holonomic(draw, b, st.integers(1, 4), scalar_joints)
    try:
        model = b.replicate(num_worlds).finalize()
    except ValueError as e:  # a drawn constraint between two bodies welded to the world
        assume("welded to it" not in str(e))
        raise
    q = _draw_joint_q(draw, model, 0.3, 0.9)
    qd = draw(vectors(model.joint_dof_count, -2.0, 2.0)) if model.joint_dof_count else np.zeros(0)
    assume(model.joint_dof_count >= 1)
    return model, q, qd


def add_random_holonomic(draw, b: ModelBuilder, count, scalar: list) -> None:
    """Add ``count`` (a strategy) random holonomic constraints of every :class:`ConstraintType` to
    ``b``: couplers between two of the single-DOF joints ``scalar`` (when there are two), distance
    constraints (rigid or compliant), ball constraints (some anchored at the initial state),
    welds and axis alignments, between two random bodies or a body and the world."""
    nb = b.body_count
    for _ in range(draw(count)):
        types = [ConstraintType.DISTANCE, ConstraintType.BALL, ConstraintType.WELD, ConstraintType.AXIS_ALIGN]
        if len(scalar) >= 2:
            types.append(ConstraintType.COUPLER)
        ct = draw(st.sampled_from(types))
        if ct == ConstraintType.COUPLER:
            j0, j1 = draw(st.lists(st.sampled_from(scalar), min_size=2, max_size=2, unique=True))
            b.add_coupler(j0, j1, draw(st.floats(-2.0, 2.0)), draw(st.floats(-0.5, 0.5)))
            continue
        a = draw(st.integers(-1, nb - 1))
        c = draw(st.integers(-1, nb - 1).filter(lambda x: x != a))
        if ct == ConstraintType.DISTANCE:
            stiffness = draw(st.one_of(st.just(np.inf), st.floats(10.0, 1e5)))
            b.add_distance(a, draw(vectors(3, -0.2, 0.2)), c, draw(vectors(3, -0.2, 0.2)), draw(st.floats(0.1, 1.0)),
                           stiffness, draw(st.floats(0.0, 50.0)) if np.isfinite(stiffness) else 0.0)
        elif ct == ConstraintType.BALL:
            b.add_ball(a, draw(vectors(3, -0.2, 0.2)), c, draw(st.one_of(st.none(), vectors(3, -0.2, 0.2))))
        elif ct == ConstraintType.WELD:
            b.add_weld(a, draw(transforms(0.2)), c, draw(transforms(0.2)))
        else:
            b.add_axis_alignment(a, draw(transforms(0.2)), c, draw(transforms(0.2)), draw(unit_vectors()))

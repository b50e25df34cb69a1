"""Hypothesis strategies for random MJCF kinematic trees and their states (MuJoCo cross-checks).

``random_mjcf()`` draws 1–12 bodies in a random tree: free joints on some top-level bodies,
otherwise 0–3 joints among hinge, slide and ball, sometimes sharing one anchor with the slides
first (→ one D6 of ours) and sometimes not (→ a chain of our joints), random body frames,
joint anchors and axes, COMs, full inertias (rotated box-like principal moments), armature,
damping, hinge/slide ``ref`` and ranges, and gravity. ``geoms=True`` adds spheres, capsules and
boxes with random collision bitmasks, a ground plane, ``<exclude>`` pairs and sometimes a
disabled parent filter. Every drawn model compiles in MuJoCo.

``mujoco_state(m)`` draws ``(qpos, qvel)`` for a compiled ``MjModel``; ``random_state(m, rng)``
is the same from a NumPy generator (for loops over many states).
"""

from __future__ import annotations

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

_FREE, _BALL = 0, 1  # mujoco.mjtJoint
_FREE_POS_RANGE = 1.0  # [m] free-body positions drawn in ±this
_JOINT_RANGE = 1.5  # [rad or m] hinge/slide offsets from qpos0 drawn in ±this
_QVEL_RANGE = 3.0  # [rad/s or m/s] velocities drawn in ±this


def _fmt(v) -> str:
    return " ".join(f"{x:.6g}" for x in np.atleast_1d(v))


def _rotation(q_wxyz):
    w, x, y, z = q_wxyz
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


def _unit(v):
    return v / np.linalg.norm(v)


def _geoms(rng, i) -> list:
    """0–2 collision geoms of body ``i`` (no mass: the body's <inertial> is explicit)."""
    lines = []
    for k in range(int(rng.integers(0, 3))):
        kind = str(rng.choice(["sphere", "capsule", "box"]))
        size = {"sphere": rng.uniform(0.02, 0.2, 1), "capsule": rng.uniform(0.02, 0.2, 2),
                "box": rng.uniform(0.02, 0.2, 3)}[kind]
        # Mostly the default masks (1, 1); sometimes other bits, so some pairs fail the test.
        contype, conaffinity = (1, 1) if rng.random() < 0.6 else (int(rng.integers(0, 4)), int(rng.integers(0, 4)))
        lines.append(f'<geom name="g{i}_{k}" type="{kind}" size="{_fmt(size)}" pos="{_fmt(rng.uniform(-0.2, 0.2, 3))}" '
                     f'quat="{_fmt(_unit(rng.normal(size=4)))}" contype="{contype}" conaffinity="{conaffinity}"/>')
    return lines


@st.composite
def random_mjcf(draw, max_bodies: int = 12, geoms: bool = False):
    """An MJCF string: bodies, joints and inertials (and collision geoms if ``geoms``).

    Args:
        draw: Hypothesis's draw function (supplied by ``@st.composite``).
        max_bodies: 1 to this many bodies.
        geoms: add collision geoms, a ground plane, ``<exclude>`` pairs and sometimes
            ``<flag filterparent="disable"/>``.
    """
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = draw(st.integers(1, max_bodies))
    parent = [-1] + [int(rng.integers(-1, i)) for i in range(1, n)]
    children = {i: [k for k in range(n) if parent[k] == i] for i in range(-1, n)}

    def joints(i, top_level) -> list:
        arm, damp = rng.uniform(0, 0.1), rng.uniform(0, 0.5)
        if top_level and rng.random() < 0.3:
            return [f'<freejoint name="j{i}_free"/>']
        k = int(rng.integers(0, 4))
        shared = rng.random() < 0.5
        anchor = rng.uniform(-0.2, 0.2, 3)
        kinds = list(rng.choice(["hinge", "slide", "ball"], k))
        kinds = [t if t != "ball" or kinds.index("ball") == c else "hinge"  # MuJoCo: ≤ 6 DOFs a body
                 for c, t in enumerate(kinds)]
        if rng.random() < 0.5:  # slides first half of the time (a D6 candidate)
            kinds = sorted(kinds, key=lambda t: t != "slide")
        kinds = sorted(kinds, key=lambda t: t == "ball")  # MuJoCo: no rotation after a ball
        lines = []
        for c, kind in enumerate(kinds):
            pos = anchor if shared else rng.uniform(-0.2, 0.2, 3)
            extra = f' axis="{_fmt(_unit(rng.normal(size=3)))}"' if kind != "ball" else ""
            if kind != "ball" and rng.random() < 0.3:
                extra += f' ref="{rng.uniform(-0.5, 0.5):.6g}"'
            if rng.random() < 0.3:  # a ball range is a cone angle (dropped by the importer)
                lo, hi = (0.0, rng.uniform(0.1, 1.0)) if kind == "ball" else np.sort(rng.uniform(-1.0, 1.0, 2))
                extra += f' limited="true" range="{lo:.6g} {hi:.6g}"'
            lines.append(f'<joint name="j{i}_{c}" type="{kind}" pos="{_fmt(pos)}"{extra} '
                         f'armature="{arm:.6g}" damping="{damp:.6g}"/>')
        return lines

    def body(i, top_level) -> str:
        mass = rng.uniform(0.2, 3.0)
        sides = rng.uniform(0.05, 0.4, 3)
        d = mass / 3.0 * np.array([sides[1] ** 2 + sides[2] ** 2, sides[0] ** 2 + sides[2] ** 2,
                                   sides[0] ** 2 + sides[1] ** 2])
        R = _rotation(_unit(rng.normal(size=4)))
        inertia = R @ np.diag(d) @ R.T
        full = [inertia[0, 0], inertia[1, 1], inertia[2, 2], inertia[0, 1], inertia[0, 2], inertia[1, 2]]
        lines = [f'<body name="b{i}" pos="{_fmt(rng.uniform(-0.5, 0.5, 3))}" quat="{_fmt(_unit(rng.normal(size=4)))}">',
                 f'<inertial pos="{_fmt(rng.uniform(-0.2, 0.2, 3))}" mass="{mass:.6g}" fullinertia="{_fmt(full)}"/>']
        lines += joints(i, top_level)
        if geoms:
            lines += _geoms(rng, i)
        lines += [body(c, False) for c in children[i]]
        lines.append("</body>")
        return "\n".join(lines)

    gravity = rng.uniform(-10, 10, 3)
    world = "\n".join(body(i, True) for i in children[-1])
    head, contact = f'<option gravity="{_fmt(gravity)}"/>', ""
    if geoms:
        world = '<geom name="ground" type="plane" size="5 5 0.1"/>\n' + world
        if rng.random() < 0.3:
            head = f'<option gravity="{_fmt(gravity)}"><flag filterparent="disable"/></option>'
        excluded = {tuple(sorted(rng.choice(n, 2, replace=False))) for _ in range(int(rng.integers(0, 3)))} \
            if n > 1 else set()
        contact = "".join(f'<exclude body1="b{a}" body2="b{b}"/>' for a, b in sorted(excluded))
        contact = f"<contact>{contact}</contact>"
    return f'<mujoco>{head}<compiler angle="radian"/><worldbody>{world}</worldbody>{contact}</mujoco>'


def _unit_quaternion(draw) -> np.ndarray:
    q = np.array(draw(st.lists(st.floats(-1.0, 1.0), min_size=4, max_size=4)))
    assume(np.linalg.norm(q) > 0.1)
    return q / np.linalg.norm(q)


@st.composite
def mujoco_state(draw, m):
    """``(qpos, qvel)`` for a compiled MjModel ``m``.

    Unit quaternions (wxyz) for ball and free joints, free positions in ±1 m, hinge/slide
    coordinates ``qpos0 ± 1.5``, velocities in ±3.
    """
    qpos = np.array(m.qpos0, dtype=np.float64)
    for j in range(m.njnt):
        a, t = int(m.jnt_qposadr[j]), int(m.jnt_type[j])
        if t == _FREE:
            qpos[a:a + 3] = draw(st.lists(st.floats(-_FREE_POS_RANGE, _FREE_POS_RANGE), min_size=3, max_size=3))
            qpos[a + 3:a + 7] = _unit_quaternion(draw)
        elif t == _BALL:
            qpos[a:a + 4] = _unit_quaternion(draw)
        else:
            qpos[a] += draw(st.floats(-_JOINT_RANGE, _JOINT_RANGE))
    qvel = draw(st.lists(st.floats(-_QVEL_RANGE, _QVEL_RANGE), min_size=m.nv, max_size=m.nv))
    return qpos, np.array(qvel, dtype=np.float64)


def random_state(m, rng):
    """Random ``(qpos, qvel)`` for a compiled MjModel from a NumPy generator (as :func:`mujoco_state`,
    but velocities standard normal)."""
    qpos = np.array(m.qpos0, dtype=np.float64)
    for j in range(m.njnt):
        a, t = int(m.jnt_qposadr[j]), int(m.jnt_type[j])
        if t == _FREE:
            qpos[a:a + 3] = rng.uniform(-_FREE_POS_RANGE, _FREE_POS_RANGE, 3)
            qpos[a + 3:a + 7] = _unit(rng.normal(size=4))
        elif t == _BALL:
            qpos[a:a + 4] = _unit(rng.normal(size=4))
        else:
            qpos[a] += rng.uniform(-_JOINT_RANGE, _JOINT_RANGE)
    return qpos, rng.normal(size=m.nv)

"""Hypothesis strategies for random MJCF kinematic trees and states (MuJoCo cross-checks).

``random_mjcf()`` draws 1–12 bodies in a random tree: free joints on some top-level bodies,
otherwise 0–3 joints among hinge, slide and ball, sometimes sharing one anchor (→ our D6) and
sometimes not (→ a chain of our joints), random body frames, joint anchors and axes, COMs,
full inertias, armature, damping, hinge/slide ``ref`` and gravity.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st


def _fmt(v) -> str:
    return " ".join(f"{x:.6g}" for x in np.atleast_1d(v))


def _rotation(q_wxyz):
    w, x, y, z = q_wxyz
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


@st.composite
def random_mjcf(draw, max_bodies: int = 12):
    """An MJCF string (bodies, joints, inertials; no geoms)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = draw(st.integers(1, max_bodies))
    parent = [-1] + [int(rng.integers(-1, i)) for i in range(1, n)]
    children = {i: [k for k in range(n) if parent[k] == i] for i in range(-1, n)}

    def unit(v):
        return v / np.linalg.norm(v)

    def body(i, top_level):
        q = unit(rng.normal(size=4))
        m = rng.uniform(0.2, 3.0)
        sides = rng.uniform(0.05, 0.4, 3)
        d = m / 3.0 * np.array([sides[1] ** 2 + sides[2] ** 2, sides[0] ** 2 + sides[2] ** 2,
                                sides[0] ** 2 + sides[1] ** 2])
        R = _rotation(unit(rng.normal(size=4)))
        I = R @ np.diag(d) @ R.T
        full = [I[0, 0], I[1, 1], I[2, 2], I[0, 1], I[0, 2], I[1, 2]]
        lines = [f'<body name="b{i}" pos="{_fmt(rng.uniform(-0.5, 0.5, 3))}" quat="{_fmt(q)}">',
                 f'<inertial pos="{_fmt(rng.uniform(-0.2, 0.2, 3))}" mass="{m:.6g}" fullinertia="{_fmt(full)}"/>']
        arm, damp = rng.uniform(0, 0.1), rng.uniform(0, 0.5)
        if top_level and rng.random() < 0.3:
            lines.append(f'<freejoint name="j{i}_free"/>')
        else:
            k = int(rng.integers(0, 4))
            shared = rng.random() < 0.5
            anchor = rng.uniform(-0.2, 0.2, 3)
            kinds = list(rng.choice(["hinge", "slide", "ball"], k))
            kinds = [t if t != "ball" or kinds.index("ball") == c else "hinge"  # MuJoCo: ≤ 6 DOFs a body
                     for c, t in enumerate(kinds)]
            if rng.random() < 0.5:  # slides first half of the time (a D6 candidate)
                kinds = sorted(kinds, key=lambda t: t != "slide")
            kinds = sorted(kinds, key=lambda t: t == "ball")  # MuJoCo: no rotation after a ball
            for c, kind in enumerate(kinds):
                pos = anchor if shared else rng.uniform(-0.2, 0.2, 3)
                extra = f' axis="{_fmt(unit(rng.normal(size=3)))}"' if kind != "ball" else ""
                if kind != "ball" and rng.random() < 0.3:
                    extra += f' ref="{rng.uniform(-0.5, 0.5):.6g}"'
                lines.append(f'<joint name="j{i}_{c}" type="{kind}" pos="{_fmt(pos)}"{extra} '
                             f'armature="{arm:.6g}" damping="{damp:.6g}"/>')
        for ch in children[i]:
            lines.append(body(ch, False))
        lines.append("</body>")
        return "\n".join(lines)

    gravity = rng.uniform(-10, 10, 3)
    world = "\n".join(body(i, True) for i in children[-1])
    return (f'<mujoco><option gravity="{_fmt(gravity)}"/><compiler angle="radian"/>'
            f"<worldbody>{world}</worldbody></mujoco>")


def random_state(m, rng):
    """Random (qpos, qvel) for a compiled MjModel: unit quaternions for ball and free joints."""
    qpos = np.array(m.qpos0, dtype=float)
    for j in range(m.njnt):
        a, t = int(m.jnt_qposadr[j]), int(m.jnt_type[j])
        if t == 0:  # free
            qpos[a:a + 3] = rng.uniform(-1, 1, 3)
            qpos[a + 3:a + 7] = rng.normal(size=4)
            qpos[a + 3:a + 7] /= np.linalg.norm(qpos[a + 3:a + 7])
        elif t == 1:  # ball
            qpos[a:a + 4] = rng.normal(size=4)
            qpos[a:a + 4] /= np.linalg.norm(qpos[a:a + 4])
        else:
            qpos[a] += rng.uniform(-1.5, 1.5)
    return qpos, rng.normal(size=m.nv)

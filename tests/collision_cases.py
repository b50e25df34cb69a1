"""Shared pieces of the collision tests of the new shape types: shape sizes, two convex meshes, and
a MuJoCo oracle (the same two geoms in an MJCF model, imported through ``load_mjcf``, compared with
MuJoCo's own ``mj_geomDistance``).

Every pair type is built as an MJCF model of two mocap-free bodies (free joints) so that the
importer maps it (geom frames, MuJoCo's recentred mesh vertices) and both MuJoCo and our pipelines
collide the very same geometry: our state is MuJoCo's body poses.
"""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np

from sap_common.enums import ShapeType

P, S, C, B = ShapeType.PLANE, ShapeType.SPHERE, ShapeType.CAPSULE, ShapeType.BOX
CY, E, M, H = ShapeType.CYLINDER, ShapeType.ELLIPSOID, ShapeType.CONVEX_MESH, ShapeType.HEIGHTFIELD
NEW = (CY, E, M, H)
CONVEX = (S, C, B, CY, E, M)
# Every pair type with a new shape, canonical order (lower type first).
NEW_PAIR_TYPES = sorted({(min(a, b), max(a, b)) for a in (P,) + CONVEX + (H,) for b in CONVEX + (H,)
                         if (a in NEW or b in NEW) and not (a == P and b == H) and not (a == H and b == H)})

# A convex "gem": an irregular polyhedron with triangles, quadrilaterals and a hexagonal top.
GEM = np.array([[0.09, 0.0, 0.03], [0.045, 0.078, 0.03], [-0.045, 0.078, 0.03], [-0.09, 0.0, 0.03],
                [-0.045, -0.078, 0.03], [0.045, -0.078, 0.03], [0.06, 0.0, -0.05], [-0.03, 0.052, -0.05],
                [-0.03, -0.052, -0.05], [0.0, 0.0, 0.07]])
# A cube of half size 0.06 (a mesh, so its faces are the hull's quadrilaterals).
CUBE = np.array([[x, y, z] for x in (-0.06, 0.06) for y in (-0.06, 0.06) for z in (-0.06, 0.06)])
MESHES = {"gem": GEM, "cube": CUBE}
# Height field: 6 × 7 heights (rows along y) over ±0.3 × ±0.35, a bump and a slope.
HF_ROWS, HF_COLS, HF_SIZE = 6, 7, (0.35, 0.3, 0.02, 0.1)  # MuJoCo's size: hx, hy, top, base
HF_ELEVATION = np.array([[(0.3 + 0.4 * math.sin(1.3 * i + 0.7 * j) ** 2) for j in range(HF_COLS)]
                         for i in range(HF_ROWS)])
# A planar ramp on the same grid (no creases): where a polytope's lowest vertex is the only overlap.
RAMP_ELEVATION = np.array([[0.2 + 0.05 * i + 0.08 * j for j in range(HF_COLS)] for i in range(HF_ROWS)])
TERRAINS = {"terrain": HF_ELEVATION, "ramp": RAMP_ELEVATION}


def _fmt(a) -> str:
    return " ".join(f"{float(v):.17g}" for v in np.ravel(a))


def geom_xml(t, size, mesh="gem", margin=0.0) -> str:
    """The MJCF geom of one shape (size: our shape size; the mesh, or the height field, is named)."""
    m = f' margin="{margin:.17g}"'
    if t == P:
        return f'type="plane" size="1 1 0.1"{m}'
    if t == S:
        return f'type="sphere" size="{size[0]:.17g}"{m}'
    if t in (C, CY):
        return f'type="{"capsule" if t == C else "cylinder"}" size="{size[0]:.17g} {size[1]:.17g}"{m}'
    if t in (B, E):
        return f'type="{"box" if t == B else "ellipsoid"}" size="{_fmt(size)}"{m}'
    if t == M:
        return f'type="mesh" mesh="{mesh}"{m}'
    return f'type="hfield" hfield="{mesh}"{m}'


def pair_xml(t0, size0, t1, size1, mesh0="gem", mesh1="cube", margin=0.0) -> str:
    """Two shapes, each on a free body (a plane or height field on the world), as MJCF; ``mesh0``/
    ``mesh1`` name a mesh (``MESHES``) or, for a height field, a terrain (``TERRAINS``)."""
    assets = "".join(f'<mesh name="{n}" vertex="{_fmt(v)}"/>' for n, v in MESHES.items())
    assets += "".join(f'<hfield name="{n}" nrow="{HF_ROWS}" ncol="{HF_COLS}" size="{_fmt(HF_SIZE)}" '
                      f'elevation="{_fmt(e)}"/>' for n, e in TERRAINS.items())
    bodies = []
    for k, (t, size, mesh) in enumerate(((t0, size0, mesh0), (t1, size1, mesh1))):
        g = geom_xml(t, size, mesh, margin)
        bodies.append(f'<geom name="g{k}" {g}/>' if t in (P, H) else
                      f'<body name="b{k}"><freejoint/><geom name="g{k}" {g}/></body>')
    return (f'<mujoco><option ccd_tolerance="1e-12" ccd_iterations="1000"/><asset>{assets}</asset>'
            f'<worldbody>{"".join(bodies)}</worldbody></mujoco>')


@functools.lru_cache(maxsize=64)
def pair_scene(t0, size0, t1, size1, mesh0="gem", mesh1="cube", margin=0.0):
    """``load_mjcf`` of :func:`pair_xml` (cached; sizes as tuples)."""
    from sap_common.io import load_mjcf

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return load_mjcf(pair_xml(t0, size0, t1, size1, mesh0, mesh1, margin))


def mujoco_pose(scene, qpos):
    """MuJoCo's data after ``mj_kinematics`` at qpos, and our state with the same body poses."""
    import mujoco

    m = scene.mj_model
    d = mujoco.MjData(m)
    d.qpos[:] = qpos
    mujoco.mj_kinematics(m, d)
    state = scene.sap_model.state()
    for mj_body, ours in enumerate(scene.mujoco_map.body):
        if ours >= 0:
            w, x, y, z = d.xquat[mj_body]
            state.body_q[0, ours] = [*d.xpos[mj_body], x, y, z, w]
    return d, state


def mujoco_distance(scene, d, g0=0, g1=1, distmax=10.0):
    """MuJoCo's signed distance of geoms g0, g1 and its witness points (on g0, on g1)."""
    import mujoco

    fromto = np.zeros(6)
    dist = mujoco.mj_geomDistance(scene.mj_model, d, g0, g1, distmax, fromto)
    return float(dist), fromto[:3].copy(), fromto[3:].copy()


def random_qpos(scene, rng, spread=0.12):
    """Random positions within ±spread and random orientations of every free body."""
    q = np.array(scene.mj_model.qpos0, dtype=np.float64)
    for j in range(scene.mj_model.njnt):
        a = int(scene.mj_model.jnt_qposadr[j])
        q[a:a + 3] = rng.uniform(-spread, spread, 3)
        quat = rng.normal(size=4)
        q[a + 3:a + 7] = quat / np.linalg.norm(quat)
    return q

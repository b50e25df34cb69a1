"""Scenes built twice — with Newton's ModelBuilder and with this project's — for the sap_newton tests.

Each Newton scene has a twin made with :class:`sap_common.builder.ModelBuilder` from the same
numbers, so a converted Newton model can be compared with ours field by field.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import warp as wp

from sap_common.builder import ModelBuilder

# Numbers shared by both builders.
BASE_POSE = (0.1, -0.2, 1.0, *np.array([0.1, 0.2, 0.3, 0.9]) / np.linalg.norm([0.1, 0.2, 0.3, 0.9]))
REV_XP = (0.2, 0.0, 0.0, 0.0, 0.0, math.sin(math.pi / 12), math.cos(math.pi / 12))  # 30° about z
REV_XC = (0.0, 0.0, 0.1, 0.0, 0.0, 0.0, 1.0)
BALL_XP = (-0.2, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0)
D6_XP = (0.0, 0.15, 0.05, math.sin(0.2), 0.0, 0.0, math.cos(0.2))


def _wt(X):
    return wp.transform(wp.vec3(*X[:3]), wp.quat(*X[3:]))


def mixed_robot_newton(device="cpu", num_worlds: int = 1):
    """A floating base with a driven, limited hinge, a slider, a ball, a D6 (1 linear + 2 angular
    axes) and a welded body; sphere, capsule, box, cylinder and ellipsoid shapes; an infinite
    ground plane."""
    import newton

    def robot(b):
        b.default_shape_cfg.density = 0.0  # masses come from the bodies, as in our builder
        b.default_shape_cfg.ke, b.default_shape_cfg.kd, b.default_shape_cfg.mu = 2e4, 200.0, 0.8
        base = b.add_link(xform=_wt(BASE_POSE), mass=2.0, com=wp.vec3(0.01, 0.0, 0.02),
                          inertia=wp.mat33(np.diag([0.02, 0.03, 0.04])), label="base")
        l1 = b.add_link(mass=0.5, com=wp.vec3(0.0, 0.0, -0.1), inertia=wp.mat33(np.diag([0.004, 0.004, 0.001])),
                        label="l1")
        l2 = b.add_link(mass=0.3, inertia=wp.mat33(np.diag([0.001, 0.002, 0.003])), label="l2")
        l3 = b.add_link(mass=0.4, com=wp.vec3(0.0, 0.0, -0.05), inertia=wp.mat33(np.diag([0.003, 0.003, 0.002])),
                        label="l3")
        l4 = b.add_link(mass=0.6, inertia=wp.mat33(np.diag([0.002, 0.003, 0.004])), label="l4")
        l5 = b.add_link(mass=0.2, com=wp.vec3(0.05, 0.0, 0.0), inertia=wp.mat33(np.diag([0.001, 0.001, 0.001])),
                        label="l5")
        joints = [b.add_joint_free(base, label="root")]
        joints.append(b.add_joint_revolute(base, l1, parent_xform=_wt(REV_XP), child_xform=_wt(REV_XC),
                                           axis=(0.0, 1.0, 0.0), limit_lower=-1.0, limit_upper=1.2, limit_ke=1e5,
                                           limit_kd=50.0, target_ke=40.0, target_kd=2.0, effort_limit=25.0,
                                           armature=0.01, damping=0.1, label="rev"))
        joints.append(b.add_joint_prismatic(l1, l2, parent_xform=_wt((0, 0, -0.2, 0, 0, 0, 1)), axis=(0.0, 0.0, 1.0),
                                            limit_lower=-0.05, limit_upper=0.05, limit_ke=2e4, limit_kd=20.0,
                                            target_ke=100.0, target_kd=5.0, actuator_mode=newton.JointTargetMode.
                                            POSITION_VELOCITY, label="pri"))
        joints.append(b.add_joint_ball(base, l3, parent_xform=_wt(BALL_XP), armature=0.02, damping=0.05,
                                       label="ball"))
        cfg = newton.ModelBuilder.JointDofConfig
        joints.append(b.add_joint_d6(base, l4, parent_xform=_wt(D6_XP), linear_axes=[
            cfg(axis=(1.0, 0.0, 0.0), limit_lower=-0.1, limit_upper=0.1, target_kd=3.0,
                actuator_mode=newton.JointTargetMode.VELOCITY)], angular_axes=[
            cfg(axis=(0.0, 1.0, 0.0), armature=0.005), cfg(axis=(0.0, 0.0, 1.0), damping=0.2)], label="d6"))
        joints.append(b.add_joint_fixed(l4, l5, parent_xform=_wt((0.1, 0, 0, 0, 0, 0, 1)), label="weld"))
        b.add_articulation(joints)
        b.add_shape_sphere(base, radius=0.1, label="s_base")
        b.add_shape_capsule(l1, xform=_wt((0, 0, -0.1, 0, 0, 0, 1)), radius=0.03, half_height=0.08, label="s_l1")
        b.add_shape_box(l3, xform=_wt((0, 0, -0.05, 0, 0, 0, 1)), hx=0.04, hy=0.05, hz=0.06, label="s_l3")
        b.add_shape_sphere(l5, radius=0.04, label="s_l5")
        b.add_shape_cylinder(l2, xform=_wt((0, 0, -0.03, 0, 0, 0, 1)), radius=0.03, half_height=0.02, label="s_l2")
        b.add_shape_ellipsoid(l4, xform=_wt((0.02, 0, 0, 0, 0, 0, 1)), rx=0.03, ry=0.04, rz=0.05, label="s_l4")

    b = newton.ModelBuilder()
    if num_worlds == 1:
        robot(b)
    else:
        sub = newton.ModelBuilder()
        robot(sub)
        b.replicate(sub, num_worlds)
    b.default_shape_cfg.ke, b.default_shape_cfg.kd, b.default_shape_cfg.mu = 2e4, 200.0, 0.8
    b.add_ground_plane()
    return b.finalize(device=device)


def mixed_robot_sap(num_worlds: int = 1):
    """The twin of :func:`mixed_robot_newton` through our builder (Newton's default limit gains
    on the joints it leaves at default)."""
    mat = dict(mu=0.8, ke=2e4, tau=200.0 / 2e4, margin=0.1)  # Newton's default gap is 0.1 m
    b = ModelBuilder()
    b.add_ground_plane(**mat)
    base = b.add_body(2.0, com=(0.01, 0.0, 0.02), inertia=(0.02, 0.03, 0.04))
    l1 = b.add_body(0.5, com=(0.0, 0.0, -0.1), inertia=(0.004, 0.004, 0.001))
    l2 = b.add_body(0.3, inertia=(0.001, 0.002, 0.003))
    l3 = b.add_body(0.4, com=(0.0, 0.0, -0.05), inertia=(0.003, 0.003, 0.002))
    l4 = b.add_body(0.6, inertia=(0.002, 0.003, 0.004))
    l5 = b.add_body(0.2, com=(0.05, 0.0, 0.0), inertia=(0.001, 0.001, 0.001))
    b.add_joint_free(-1, base, q0=BASE_POSE)
    b.add_joint_revolute(base, l1, parent_xform=REV_XP, child_xform=REV_XC, axis=(0, 1, 0), limit_lower=-1.0,
                         limit_upper=1.2, limit_ke=1e5, limit_kd=50.0, target_ke=40.0, target_kd=2.0,
                         effort_limit=25.0, armature=0.01, damping=0.1)
    b.add_joint_prismatic(l1, l2, parent_xform=(0, 0, -0.2, 0, 0, 0, 1), axis=(0, 0, 1), limit_lower=-0.05,
                          limit_upper=0.05, limit_ke=2e4, limit_kd=20.0, target_ke=100.0, target_kd=5.0,
                          effort_limit=1e6)
    b.add_joint_ball(base, l3, parent_xform=BALL_XP, armature=0.02, damping=0.05)
    b.add_joint_d6(base, l4, parent_xform=D6_XP, linear_axes=[(1, 0, 0)], angular_axes=[(0, 1, 0), (0, 0, 1)],
                   limit_lower=[-0.1, -math.inf, -math.inf], limit_upper=[0.1, math.inf, math.inf],
                   limit_ke=1e4, limit_kd=10.0, target_kd=[3.0, 0.0, 0.0], armature=[0.0, 0.005, 0.0],
                   damping=[0.0, 0.0, 0.2], effort_limit=1e6)
    b.add_joint_fixed(l4, l5, parent_xform=(0.1, 0, 0, 0, 0, 0, 1))
    b.add_shape_sphere(base, radius=0.1, **mat)
    b.add_shape_capsule(l1, xform=(0, 0, -0.1, 0, 0, 0, 1), radius=0.03, half_length=0.08, **mat)
    b.add_shape_box(l3, xform=(0, 0, -0.05, 0, 0, 0, 1), hx=0.04, hy=0.05, hz=0.06, **mat)
    b.add_shape_sphere(l5, radius=0.04, **mat)
    b.add_shape_cylinder(l2, xform=(0, 0, -0.03, 0, 0, 0, 1), radius=0.03, half_length=0.02, **mat)
    b.add_shape_ellipsoid(l4, xform=(0.02, 0, 0, 0, 0, 0, 1), a=0.03, b=0.04, c=0.05, **mat)
    return b.replicate(num_worlds).finalize()


def pendulum_newton(device="cpu", links: int = 1, q0=(1.0, -0.5), damping: float = 0.0, armature: float = 0.0):
    """A chain of ``links`` hinged rods (about y, 0.5 m COM offset), contact-free, released from ``q0``."""
    import newton

    b = newton.ModelBuilder()
    joints, parent = [], -1
    for i in range(links):
        link = b.add_link(mass=1.0, com=wp.vec3(0.0, 0.0, -0.5), inertia=wp.mat33(np.diag([0.1, 0.1, 1e-3])))
        X = wp.transform(wp.vec3(0.0, 0.0, 2.0 if parent < 0 else -1.0), wp.quat_identity())
        joints.append(b.add_joint_revolute(parent, link, parent_xform=X, axis=(0.0, 1.0, 0.0), damping=damping,
                                           armature=armature))
        parent = link
    b.add_articulation(joints)
    for i in range(links):
        b.joint_q[i] = q0[i]
    return b.finalize(device=device)


# An MJCF robot whose every joint Newton's importer maps exactly: a free base, a slide and a hinge
# on one anchor (one D6 both ways), a ball, a tilted hinge and a welded body; inertias from geoms.
PROBE_MJCF = """
<mujoco model="probe">
  <worldbody>
    <geom name="floor" type="plane" size="0 0 1"/>
    <body name="base" pos="0 0 1">
      <freejoint name="root"/>
      <geom name="torso" type="box" size="0.2 0.1 0.05" mass="4"/>
      <body name="arm" pos="0.2 0 0">
        <joint name="slide_x" type="slide" axis="1 0 0" range="-0.1 0.1"/>
        <joint name="hinge_y" type="hinge" axis="0 1 0" range="-1 1" damping="0.3" armature="0.02"/>
        <geom name="arm" type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="1"/>
        <body name="hand" pos="0.3 0 0">
          <joint name="wrist" type="ball" damping="0.1"/>
          <geom name="hand" type="sphere" size="0.05" mass="0.5"/>
        </body>
      </body>
      <body name="leg" pos="-0.2 0 -0.05" euler="0 0.3 0">
        <joint name="hip" type="hinge" axis="0 1 0.3" range="-0.5 0.5"/>
        <geom name="leg" type="capsule" fromto="0 0 0 0 0 -0.4" size="0.04"/>
        <body name="foot" pos="0 0 -0.4">
          <geom name="foot" type="box" size="0.08 0.04 0.02"/>
        </body>
      </body>
    </body>
  </worldbody>
</mujoco>
"""


def fourbar_newton(device="cpu", limit: bool = True, loop: str = "ball", closed_at_zero: bool = False):
    """The built-in ``fourbar`` scene built with Newton's ModelBuilder: crank and coupler one
    articulation, the rocker another, the loop closed by a second parent joint of the rocker
    (outside the articulations; ``loop`` "ball" or "revolute", a hinge about y) at the coupler's
    far end and the rocker's tip; released at crank angle −1 rad. ``limit=False`` leaves out the
    rocker's lower limit. ``closed_at_zero=True`` turns the hinges' parent frames by the initial
    angles and starts at zero joint coordinates (the same motion; the loop is then closed at
    q = 0, which Newton 1.8's MuJoCo solver needs of a revolute loop joint)."""
    import newton

    from sap_common.builder import rod_inertia
    from sap_common.scenes import _fourbar_points

    a_len, b_len, c_len, d_len, z0, h = 0.2, 0.45, 0.35, 0.4, 1.0, 2e-3
    b = newton.ModelBuilder()
    links = [b.add_link(mass=m, com=wp.vec3(length / 2, 0.0, 0.0), inertia=wp.mat33(rod_inertia(m, length, axis=0)),
                        label=name) for m, length, name in ((0.5, a_len, "crank"), (1.0, b_len, "coupler"),
                                                             (0.7, c_len, "rocker"))]
    at = lambda x, z=0.0, th=0.0: wp.transform((x, 0, z), wp.quat_from_axis_angle(wp.vec3(0, 1, 0), th))  # noqa: E731
    hinge = dict(axis=(0, 1, 0), damping=0.02)
    th = _fourbar_points(a_len, b_len, c_len, d_len, -1.0)
    turn = th if closed_at_zero else (0.0, 0.0, 0.0)
    rocker_limit = dict(limit_lower=-2.1 - turn[2], limit_upper=math.pi - turn[2], limit_ke=1e12,
                        limit_kd=1e12 * h) if limit else {}
    j0 = b.add_joint_revolute(-1, links[0], parent_xform=at(0, z0, turn[0]), label="crank_hinge", **hinge)
    j1 = b.add_joint_revolute(links[0], links[1], parent_xform=at(a_len, 0, turn[1]), label="coupler_hinge", **hinge)
    j2 = b.add_joint_revolute(-1, links[2], parent_xform=at(d_len, z0, turn[2]), label="rocker_hinge",
                              **rocker_limit, **hinge)
    b.add_articulation([j0, j1])
    b.add_articulation([j2])
    add_loop = {"ball": b.add_joint_ball, "revolute": lambda **k: b.add_joint_revolute(axis=(0, 1, 0), **k)}[loop]
    add_loop(parent=links[1], child=links[2], parent_xform=at(b_len), child_xform=at(c_len), label="loop")
    for j, q in enumerate(th):
        b.joint_q[j] = q - turn[j]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return b.finalize(device=device)


def geared_pair_newton(device="cpu"):
    """The built-in ``geared_pair`` scene built with Newton's ModelBuilder: the output gear's hinge
    mimics the motor's, q_output = 0.1 − 0.5·q_motor (a coupler); the motor a VELOCITY drive
    (kd 5 N·m·s, effort limit 2 N·m); released 0.02 rad off the gear law."""
    import newton

    r_in, r_out, m_in, m_out, ratio, offset, q_in0 = 0.1, 0.2, 0.3, 1.0, -0.5, 0.1, 0.3
    disk = lambda m, r: np.diag([m * r * r / 4, m * r * r / 2, m * r * r / 4])  # noqa: E731 (axis y)
    com = np.array([0.15 * 0.5 / (m_out + 0.5), 0.0, 0.0])  # disk plus a 0.5 kg point mass at x = 0.15 m
    I_out = disk(m_out, r_out) + np.diag([0.0, 0.5 * 0.15**2, 0.5 * 0.15**2]) - (m_out + 0.5) * np.diag(
        [0.0, com[0] ** 2, com[0] ** 2])
    b = newton.ModelBuilder()
    gin = b.add_link(mass=m_in, inertia=wp.mat33(disk(m_in, r_in)), label="motor_gear")
    gout = b.add_link(mass=m_out + 0.5, com=wp.vec3(*com), inertia=wp.mat33(I_out), label="output_gear")
    motor = b.add_joint_revolute(-1, gin, parent_xform=wp.transform((0, 0, 1.0), wp.quat_identity()), axis=(0, 1, 0),
                                 target_kd=5.0, effort_limit=2.0, armature=2e-3, damping=0.01,
                                 actuator_mode=newton.JointTargetMode.VELOCITY, label="motor")
    output = b.add_joint_revolute(-1, gout, parent_xform=wp.transform((r_in + r_out, 0, 1.0), wp.quat_identity()),
                                  axis=(0, 1, 0), damping=0.01, label="output")
    b.add_articulation([motor, output])  # a mimic pair shares one articulation
    b.set_joint_mimic(output, motor, coeffs=(offset, ratio))
    b.joint_q[motor], b.joint_q[output] = q_in0, ratio * q_in0 + offset + 0.02
    return b.finalize(device=device)


def weld_drop_newton(device="cpu"):
    """The built-in ``weld_drop`` scene's bodies, free joints and weld built with Newton's
    ModelBuilder: each sphere on its own FREE joint (one articulation each), the weld a FIXED joint
    from the left body's frame P to the right body's frame Q outside the articulations (a loop
    joint); the spheres with the scene's μ, ke and kd = τ·ke."""
    import newton

    from sap_common import spatial

    ra, rb, ma, mb = 0.05, 0.04, 0.5, 0.3
    X_AP = spatial.transform((0.1, 0.0, 0.0), spatial.quat_from_rpy((0.3, 0.0, 0.2)))
    X_BQ = spatial.transform((-0.1, 0.0, 0.0), spatial.quat_from_rpy((0.0, -0.4, 0.1)))
    X_WA = spatial.transform((0.0, 0.0, 0.4), spatial.quat_from_rpy((0.2, 0.5, -0.3)))
    X_WB = spatial.transform_compose(spatial.transform_compose(X_WA, X_AP), spatial.transform_inverse(X_BQ))
    b = newton.ModelBuilder()
    b.default_shape_cfg.density = 0.0
    b.default_shape_cfg.mu, b.default_shape_cfg.ke, b.default_shape_cfg.kd = 0.6, 1e5, 1e5 * 0.01
    left = b.add_link(xform=_wt(X_WA), mass=ma, inertia=wp.mat33(np.diag([0.4, 0.45, 0.5]) * ma * ra * ra),
                      label="left")
    right = b.add_link(xform=_wt(X_WB), mass=mb, inertia=wp.mat33(np.eye(3) * 0.4 * mb * rb * rb), label="right")
    b.add_articulation([b.add_joint_free(left, label="left")])
    b.add_articulation([b.add_joint_free(right, label="right")])
    b.add_joint_fixed(left, right, parent_xform=_wt(X_AP), child_xform=_wt(X_BQ), label="weld")
    b.add_shape_sphere(left, radius=ra, label="left_sphere")
    b.add_shape_sphere(right, radius=rb, label="right_sphere")
    b.add_ground_plane()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return b.finalize(device=device)

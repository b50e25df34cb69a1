"""The scene library used by tests, tools, docs and benchmarks (docs/design.md § Scenes).

``get(name, num_worlds=1)`` returns a :class:`~sap_common.io.LoadedScene`. Scenes that share
a name with a Drake anchor (sphere_drop, sphere_slide, box_slide ≈ box_corners_slide,
pendulum_limit, double_pendulum, prismatic_pd, free_spin, cylinder_roll, mesh_rock) are built with the
:class:`~sap_common.builder.ModelBuilder` to the same specification, so the anchor's JSON
and the builder describe the same model (a test holds them equal). Materials a scene leaves
unset take the solver's fallbacks (Drake's SceneGraph defaults: k = 1e6 N/m, τ_d = 0.1 s,
μ = 0.5 per shape; Hunt–Crossley d = 50 s/m). ``incline_stick_slip`` is recorded by Drake under its
Hunt–Crossley approximations (``tests/data/drake/incline_stick_slip_lagged.json``, ``…_similar``).
``solver_kwargs`` is empty: scenes run with the library defaults unless a caller chooses
otherwise. Robots come from MJCF through MuJoCo: ``humanoid`` (the model that ships with
``mujoco-warp``), ``humanoid3`` (three of them in one world, nv = 81, the large-system benchmark
model), ``mesh_quadruped`` (a quadruped colliding through convex meshes,
cylinders, capsules and an ellipsoid, whose MJCF file ships in ``sap_common/data``) and ``ant``
(gymnasium's, when gymnasium is installed); their joint stiffness (MuJoCo passive springs) has no
counterpart here and is dropped.
"""

from __future__ import annotations

import importlib.util
import math
import os
import warnings
from typing import Callable

import numpy as np

from . import spatial
from .builder import (
    ModelBuilder,
    rod_inertia,
    solid_box_inertia,
    solid_capsule_inertia,
    solid_sphere_inertia,
)
from .conventions import check_num_worlds
from .io.scene import LoadedScene

__all__ = ["get", "names", "describe", "availability"]


def _scene(name, builder, dt, num_steps, max_rigid_contact, description, num_worlds,
           control: Callable | None = None) -> LoadedScene:
    model = builder.replicate(num_worlds).finalize()
    ctrl = model.control()
    if control is not None:
        control(model, ctrl)
    return LoadedScene(
        name=name, sap_model=model, state=model.state(), control=ctrl, dt=dt,
        num_steps=num_steps, max_rigid_contact=max_rigid_contact, solver_kwargs={},
        body_names=model.body_name, description=description,
    )


def _sphere_drop(num_worlds):
    b = ModelBuilder()
    ball = b.add_body(1.0, inertia=solid_sphere_inertia(1.0, 0.1), name="ball")
    b.add_joint_free(-1, ball, q0=(0, 0, 0.5, 0, 0, 0, 1), name="ball")
    b.add_ground_plane(name="ground")
    b.add_shape_sphere(ball, radius=0.1, name="ball_sphere")
    return _scene("sphere_drop", b, 1e-3, 2000, 1,
                  "Solid sphere (R 0.1 m, 1 kg) dropped from 0.5 m onto the ground, every contact "
                  "property at the solver fallbacks (Drake's defaults): near-rigid contact, no bounce.",
                  num_worlds)


def _sphere_slide(num_worlds):
    b = ModelBuilder()
    ball = b.add_body(1.0, inertia=solid_sphere_inertia(1.0, 0.1), name="ball")
    z0 = 0.1 - 1.0 * 9.81 / 5e4  # static penetration m g / k_combined
    b.add_joint_free(-1, ball, q0=(0, 0, z0, 0, 0, 0, 1), qd0=(2.0, 0, 0, 0, -10.0, 3.0), name="ball")
    b.add_ground_plane(mu=0.3, ke=1e5, tau=0.0, name="ground")
    b.add_shape_sphere(ball, radius=0.1, mu=0.6, ke=1e5, tau=0.02, name="ball_sphere")
    return _scene("sphere_slide", b, 1e-3, 2000, 1,
                  "Sphere sliding at 2 m/s with back-spin -10 rad/s and vertical spin 3 rad/s "
                  "(combined μ 0.4, k 5e4 N/m, τ_d 0.02 s): slides, hops (SAP gliding), then rolls.",
                  num_worlds)


def _box_slide(num_worlds):
    b = ModelBuilder()
    hx, hy, hz = 0.1, 0.075, 0.05
    box = b.add_body(2.0, inertia=solid_box_inertia(2.0, hx, hy, hz), name="box")
    b.add_joint_free(-1, box, q0=(0, 0, 0.055, 0, 0, 0, 1), qd0=(1.0, 0.3, 0, 0, 0, 1.5), name="box")
    b.add_ground_plane(mu=0.5, ke=1e7, tau=0.01, name="ground")
    k = 0
    for sx in (-1, 1):
        for sy in (-1, 1):
            for sz in (-1, 1):
                b.add_shape_sphere(box, spatial.transform((sx * hx, sy * hy, sz * hz)), radius=0.005,
                                   mu=0.5, ke=1e7, tau=0.0, name=f"box_corner{k}")
                k += 1
    return _scene("box_slide", b, 1e-3, 1500, 8,
                  "Box (2 kg, 0.2×0.15×0.1 m) whose collision geometry is 8 corner spheres, pushed "
                  "at (1, 0.3) m/s with yaw rate 1.5 rad/s on stiff ground: slides, stops, sticks.",
                  num_worlds)


def _incline_stick_slip(num_worlds):
    # A box on an incline whose friction holds it (tan θ = 0.31 < μ = 0.5), pushed down the slope:
    # it slides, decelerates at g(μ cos θ − sin θ) = 1.8 m/s², stops after ~0.28 s and sticks. Its
    # collision geometry is the 4 bottom corner spheres (one point each, as Drake's point contact
    # reports them). The stiffnesses differ (ground 4e5, corners 1e5 N/m) and so do the
    # Hunt–Crossley dissipations (20 and 5 s/m): the pair's d is 0.8·5 + 0.2·20 = 8 s/m, not the
    # mean 12.5 (docs/formulation.md § Material combination). How far it creeps once stuck is what
    # the contact approximations disagree on (docs/presets.md § Contact approximation).
    b = ModelBuilder()
    theta, hx, hy, hz, r, m = 0.3, 0.1, 0.075, 0.05, 0.005, 2.0
    q_incline = spatial.quat_from_axis_angle((0, 1, 0), theta)
    b.add_shape_plane(-1, spatial.transform((0, 0, 0), q_incline), mu=0.5, ke=4e5, tau=0.01, hcd=20.0,
                      name="incline")
    box = b.add_body(m, inertia=solid_box_inertia(m, hx, hy, hz), name="box")
    k_pair = 4e5 * 1e5 / (4e5 + 1e5)
    depth = m * 9.81 * math.cos(theta) / 4 / k_pair  # the static penetration of each corner
    n = spatial.quat_to_matrix(q_incline) @ np.array([0.0, 0.0, 1.0])
    down = spatial.quat_to_matrix(q_incline) @ np.array([1.0, 0.0, 0.0])  # down the slope
    p0 = (hz + r - depth) * n
    b.add_joint_free(-1, box, q0=(*p0, *q_incline), qd0=(*(0.5 * down), 0, 0, 0), name="box")
    for sx in (-1, 1):
        for sy in (-1, 1):
            b.add_shape_sphere(box, spatial.transform((sx * hx, sy * hy, -hz)), radius=r, mu=0.5, ke=1e5,
                               tau=0.01, hcd=5.0, name=f"corner_{'m' if sx < 0 else 'p'}{'m' if sy < 0 else 'p'}")
    return _scene("incline_stick_slip", b, 1e-3, 600, 4,
                  "Box (2 kg) on a 0.3 rad incline (μ 0.5 holds it) on its 4 bottom corner spheres, pushed "
                  "down the slope at 0.5 m/s: slides, stops after ~0.28 s, sticks (the creep once stuck is what "
                  "the contact approximations differ on). Unequal stiffnesses and Hunt–Crossley dissipations.",
                  num_worlds)


def _box_stack(num_worlds):
    b = ModelBuilder()
    b.add_ground_plane(mu=0.6, name="ground")
    h, gap = 0.05, 1e-3
    for i in range(3):
        body = b.add_body(0.5, inertia=solid_box_inertia(0.5, h, h, h), name=f"box{i}")
        # Slight yaw and offset per level so the stack is not perfectly symmetric.
        q = spatial.quat_from_axis_angle((0, 0, 1), 0.05 * i)
        b.add_joint_free(-1, body, q0=(0.004 * i, 0, h + i * (2 * h + gap), *q), name=f"box{i}")
        b.add_shape_box(body, hx=h, hy=h, hz=h, mu=0.6, name=f"box{i}_shape")
    return _scene("box_stack", b, 2e-3, 1000, 32,
                  "Three 10 cm cubes (0.5 kg each) released 1 mm apart in a stack on the ground: "
                  "box–plane and box–box contact, the stack must settle and stay.",
                  num_worlds)


def _pendulum_limit(num_worlds):
    b = ModelBuilder()
    rod = b.add_body(1.0, com=(0, 0, -0.5), inertia=rod_inertia(1.0, 1.0), name="pendulum")
    b.add_joint_revolute(-1, rod, spatial.transform((0, 0, 1.0)), axis=(0, 1, 0), limit_lower=-0.5,
                         limit_upper=0.9, damping=0.02, q0=0.8, name="hinge")
    return _scene("pendulum_limit", b, 1e-3, 2000, 0,
                  "Rod pendulum (1 kg, COM 0.5 m below the pivot) released at 0.8 rad; stops on its "
                  "lower limit -0.5 rad (SAP limit constraint, k 1e12, τ = 1 ms = h).",
                  num_worlds)


def _double_pendulum(num_worlds):
    b = ModelBuilder()
    link1 = b.add_body(1.0, com=(0, 0, -0.5), inertia=(0.09, 0.085, 0.01), name="link1")
    # link2: principal moments (0.04, 0.035, 0.006), axes rotated by rpy (0.1, -0.2, 0.3).
    R = spatial.quat_to_matrix(spatial.quat_from_rpy((0.1, -0.2, 0.3)))
    I2 = R @ np.diag([0.04, 0.035, 0.006]) @ R.T
    link2 = b.add_body(0.7, com=(0.05, 0, -0.4), inertia=I2, name="link2")
    b.add_joint_revolute(-1, link1, spatial.transform((0, 0, 2.5)), axis=(0, 1, 0), q0=1.0, name="joint1")
    b.add_joint_revolute(link1, link2, spatial.transform((0, 0, -1.0)), axis=(0, 0.6, 0.8), q0=0.5,
                         qd0=2.0, name="joint2")
    return _scene("double_pendulum", b, 1e-3, 3000, 0,
                  "3-D double pendulum (second axis (0, 0.6, 0.8), full inertia), no contact and no "
                  "damping: mass matrix and Coriolis terms.",
                  num_worlds)


def _prismatic_pd(num_worlds):
    b = ModelBuilder()
    slider = b.add_body(2.0, inertia=solid_box_inertia(2.0, 0.05, 0.05, 0.05), name="slider")
    b.add_joint_prismatic(-1, slider, axis=(0, 0, 1), target_ke=400.0, target_kd=40.0, effort_limit=60.0,
                          armature=0.4, damping=2.0, name="slide")

    def control(model, ctrl):
        ctrl.joint_target_pos[:, 0] = 0.5

    return _scene("prismatic_pd", b, 1e-2, 200, 0,
                  "Vertical 2 kg slider driven by a PD drive (400 N/m, 40 N·s/m, effort limit 60 N) to "
                  "0.5 m under gravity: saturates first, settles at 0.5 - m g / Kp.",
                  num_worlds, control)


def _free_spin(num_worlds):
    b = ModelBuilder(gravity=(0, 0, 0))
    R_BP = spatial.quat_to_matrix(spatial.quat_from_rpy((0.2, -0.1, 0.3)))  # principal axes in B
    I = R_BP @ np.diag([0.02, 0.035, 0.05]) @ R_BP.T
    com = np.array([0.03, -0.02, 0.01])
    body = b.add_body(1.5, com=com, inertia=I, name="spinner")
    q_WB = spatial.quat_from_rpy((0.3, -0.2, 0.5))
    R_WP = spatial.quat_to_matrix(q_WB) @ R_BP
    w = R_WP @ np.array([0.05, 6.0, 0.05])  # 6 rad/s about the intermediate axis, perturbed
    b.add_joint_free(-1, body, q0=(0, 0, 1.0, *q_WB), qd0=(0.2, 0, 0.1, *w), name="spinner")
    return _scene("free_spin", b, 1e-3, 3000, 0,
                  "Asymmetric free body in zero gravity spun about its intermediate principal axis: "
                  "the Dzhanibekov flip (gyroscopic terms, quaternion integration).",
                  num_worlds)


def _ball_joint_pendulum(num_worlds):
    b = ModelBuilder()
    r, hl = 0.04, 0.25
    link = b.add_body(1.0, com=(0, 0, -0.35), inertia=solid_capsule_inertia(1.0, r, hl), name="link")
    q0 = spatial.quat_from_axis_angle((1, 0, 0), 0.6)
    b.add_joint_ball(-1, link, spatial.transform((0, 0, 1.5)), q0=q0, qd0=(0, 0, 3.0), damping=0.01,
                     name="ball")
    b.add_shape_capsule(link, spatial.transform((0, 0, -0.35)), radius=r, half_length=hl, name="link_capsule")
    return _scene("ball_joint_pendulum", b, 1e-3, 2000, 0,
                  "Capsule pendulum on a ball joint, tilted 0.6 rad and spun about the vertical: "
                  "a conical pendulum (quaternion joint kinematics, no contact).",
                  num_worlds)


def _sphere_on_sphere(num_worlds):
    b = ModelBuilder()
    b.add_ground_plane(name="ground")
    b.add_shape_sphere(-1, spatial.transform((0, 0, 0.5)), radius=0.5, name="dome")
    ball = b.add_body(0.5, inertia=solid_sphere_inertia(0.5, 0.1), name="ball")
    b.add_joint_free(-1, ball, q0=(0.02, 0, 1.0995, 0, 0, 0, 1), name="ball")  # 0.17 mm into the dome
    b.add_shape_sphere(ball, radius=0.1, name="ball_sphere")
    return _scene("sphere_on_sphere", b, 1e-3, 2000, 2,
                  "A ball resting slightly off the top of a fixed sphere: sphere–sphere contact; it "
                  "rolls off and lands on the ground (sphere–plane).",
                  num_worlds)


def _cylinder_roll(num_worlds):
    # A wheel rolling tilted on its rim touches the ground in one point (the rim's lowest point),
    # which is what Drake's point contact reports for any cylinder–half-space pair; standing on a
    # cap or lying on its side it would touch along a face or a line, where this project reports
    # several points and Drake one (docs/validation.md). The tilt (0.35 rad from upright) keeps it
    # on the rim for the whole run.
    b = ModelBuilder()
    r, half_length, tilt, m = 0.1, 0.02, 0.35, 1.0
    i_axis, i_diameter = 0.5 * m * r * r, m * (3 * r * r + (2 * half_length) ** 2) / 12
    wheel = b.add_body(m, inertia=np.diag([i_diameter, i_diameter, i_axis]), name="wheel")
    q = spatial.quat_from_axis_angle(np.array([1.0, 0.0, 0.0]), math.pi / 2 - tilt)  # axis tilted from horizontal
    z0 = r * math.cos(tilt) + half_length * math.sin(tilt) - 1e-4  # the lowest rim point 0.1 mm in
    w_W = spatial.quat_to_matrix(q) @ np.array([0.0, 0.0, -10.0])  # spinning about its axis
    b.add_joint_free(-1, wheel, q0=(0, 0, z0, *q), qd0=(1.0, 0, 0, *w_W), name="wheel")
    b.add_ground_plane(mu=0.5, ke=1e5, tau=0.01, name="ground")
    b.add_shape_cylinder(wheel, radius=r, half_length=half_length, mu=0.5, ke=1e5, tau=0.01, name="wheel_cylinder")
    return _scene("cylinder_roll", b, 4e-3, 200, 1,
                  "A wheel (cylinder R 0.1 m, 4 cm wide, 1 kg) tilted 0.35 rad, pushed at 1 m/s with a "
                  "spin of 10 rad/s about its axis: it rolls and curves on one rim point (cylinder–plane).",
                  num_worlds)


def _slider_push(num_worlds):
    # Contact, a joint limit and a PD drive in one small scene that Drake records (sphere–sphere and
    # sphere–half-space point contact, Drake's limit gains k = 1e12, τ = h): the scene whose Drake
    # recordings with other masses, frictions, gains, stiffnesses and gravity hold per-world
    # parameters to Drake (tests/data/drake/slider_push.json and the four beside it).
    b = ModelBuilder()
    b.add_ground_plane(mu=0.4, ke=1e5, tau=0.01, name="ground")
    pusher = b.add_body(1.0, inertia=solid_sphere_inertia(1.0, 0.05), name="pusher")
    b.add_joint_prismatic(-1, pusher, spatial.transform((-0.35, 0.0, 0.1)), axis=(1, 0, 0), limit_lower=-0.05,
                          limit_upper=0.3, target_ke=300.0, target_kd=30.0, effort_limit=40.0, armature=0.05,
                          damping=1.0, name="slide")
    b.add_shape_sphere(pusher, radius=0.05, mu=0.6, ke=1e5, tau=0.01, name="pusher_sphere")
    m, r = 0.5, 0.1
    ball = b.add_body(m, inertia=solid_sphere_inertia(m, r), name="ball")
    z0 = r - m * 9.81 / 5e4  # the static penetration m g / k_combined
    b.add_joint_free(-1, ball, q0=(0, 0, z0, 0, 0, 0, 1), name="ball")
    b.add_shape_sphere(ball, radius=r, mu=0.5, ke=1e5, tau=0.01, name="ball_sphere")

    def control(model, ctrl):
        ctrl.joint_target_pos[:, 0] = 0.45  # beyond the upper limit: the drive saturates, then presses on it

    return _scene("slider_push", b, 1e-3, 800, 2,
                  "A 1 kg sphere on a horizontal slider, PD-driven (300 N/m, 30 N·s/m, effort limit 40 N) "
                  "towards a target past its upper limit, strikes a 0.5 kg ball resting on the ground and "
                  "stops on the limit; the ball slides, then rolls (contact, a limit and a drive at once).",
                  num_worlds, control)


# The unit cube's 8 corners, half size 0.05 m: the convex mesh of mesh_rock.
_MESH_CUBE = np.array([[x, y, z] for x in (-0.05, 0.05) for y in (-0.05, 0.05) for z in (-0.05, 0.05)])


def _mesh_rock(num_worlds):
    # A flat face on a sphere touches in one point (the sphere's point under the face), for Drake's
    # point contact as for this project's sphere–mesh pair; on the ground the face would get 4
    # points here and 1 in Drake (docs/validation.md). A cube on a dome is stable (its centre of
    # mass, 5 cm above the face, is below the dome's radius): it rocks about its rest pose.
    b = ModelBuilder()
    h, m, R = 0.05, 1.0, 0.5
    b.add_shape_sphere(-1, spatial.transform((0, 0, 0)), radius=R, mu=0.8, ke=1e5, tau=0.01, name="dome")
    cube = b.add_body(m, inertia=solid_box_inertia(m, h, h, h), name="cube")
    tilt = 0.06  # [rad] small enough that the contact rolls over the face, never reaching an edge
    q = spatial.quat_from_axis_angle(np.array([1.0, 0.0, 0.0]), tilt)
    u = np.array([0.0, -math.sin(tilt), math.cos(tilt)])  # the face centre touches the dome at R u, 0.1 mm in
    b.add_joint_free(-1, cube, q0=(*((R + h - 1e-4) * u), *q), name="cube")
    b.add_shape_convex_mesh(cube, vertices=_MESH_CUBE, mu=0.8, ke=1e5, tau=0.01, name="cube_mesh")
    return _scene("mesh_rock", b, 4e-3, 200, 1,
                  "A convex-mesh cube (half size 5 cm, 1 kg) resting on a fixed sphere (R 0.5 m) 0.06 rad off its "
                  "top, touching in one point of its face (sphere–mesh): it rocks slowly (period ~6 s).",
                  num_worlds)


def _arm_push_block(num_worlds):
    b = ModelBuilder()
    b.add_ground_plane(mu=0.5, name="ground")
    r, l1, l2 = 0.03, 0.4, 0.3
    link1 = b.add_body(1.0, com=(l1 / 2, 0, 0), inertia=rod_inertia(1.0, l1, axis=0), name="link1")
    link2 = b.add_body(0.7, com=(l2 / 2, 0, 0), inertia=rod_inertia(0.7, l2, axis=0), name="link2")
    gains = dict(target_ke=200.0, target_kd=20.0, effort_limit=50.0, armature=0.01, damping=0.1)
    b.add_joint_revolute(-1, link1, spatial.transform((0, 0, 0.06)), axis=(0, 0, 1), q0=-0.3,
                         limit_lower=-math.pi, limit_upper=math.pi, name="shoulder", **gains)
    b.add_joint_revolute(link1, link2, spatial.transform((l1, 0, 0)), axis=(0, 0, 1), limit_lower=-2.5,
                         limit_upper=2.5, name="elbow", **gains)
    along_x = spatial.quat_from_axis_angle((0, 1, 0), math.pi / 2)
    b.add_shape_capsule(link1, spatial.transform((l1 / 2, 0, 0), along_x), radius=r, half_length=l1 / 2,
                        name="link1_capsule")
    b.add_shape_capsule(link2, spatial.transform((l2 / 2, 0, 0), along_x), radius=r, half_length=l2 / 2,
                        name="link2_capsule")
    h = 0.05
    block = b.add_body(0.5, inertia=solid_box_inertia(0.5, h, h, h), name="block")
    b.add_joint_free(-1, block, q0=(0.55, 0.2, h, 0, 0, 0, 1), name="block")
    b.add_shape_box(block, hx=h, hy=h, hz=h, mu=0.5, name="block_shape")

    def control(model, ctrl):
        ctrl.joint_target_pos[:, 0] = 0.8  # sweep the shoulder through the block

    return _scene("arm_push_block", b, 2e-3, 1500, 16,
                  "Two-link arm (revolute about z, capsule links, PD drives with effort limits) "
                  "sweeping across the table and pushing a free 10 cm block (capsule–box, box–plane).",
                  num_worlds, control)


# ----------------------------------------------------------------------------- holonomic constraints
# One scene per constraint type, each where the constraint carries load (docs/formulation.md
# § Holonomic constraints). Each can be recorded by Drake (sap-record): no
# constraint touches the world body itself (pydrake 1.51.1 crashes on one), the anchors are
# bodies welded to the world.


def _geared_pair(num_worlds):
    # Two gears in a vertical plane, axes along y, meshing 0.3 m apart: the output gear (R 0.2 m)
    # turns at -1/2 the motor gear's (R 0.1 m) rate, q_out = -0.5·q_in + 0.1. A velocity-controlled
    # motor (PD on the input joint: Kd only, 3 rad/s, effort limit 2 N·m, rotor inertia) drives
    # the pair; the output gear carries an unbalanced 0.5 kg mass 0.15 m off its axis, so gravity
    # loads the motor through the coupler and the motor saturates while lifting it. The pair starts
    # 0.02 rad off the gear law: the first steps close it.
    b = ModelBuilder()
    r_in, r_out, m_in, m_out = 0.1, 0.2, 0.3, 1.0
    disk = lambda m, r: np.diag([m * r * r / 4, m * r * r / 2, m * r * r / 4])  # noqa: E731 (axis y)
    gin = b.add_body(m_in, inertia=disk(m_in, r_in), name="motor_gear")
    com = np.array([0.15 * 0.5 / (m_out + 0.5), 0.0, 0.0])  # disk plus a 0.5 kg point mass at x = 0.15 m
    I_out = disk(m_out, r_out) + np.diag([0.0, 0.5 * 0.15**2, 0.5 * 0.15**2]) - (m_out + 0.5) * np.diag(
        [0.0, com[0] ** 2, com[0] ** 2])
    gout = b.add_body(m_out + 0.5, com=com, inertia=I_out, name="output_gear")
    ratio, offset, q_in0 = -r_in / r_out, 0.1, 0.3
    b.add_joint_revolute(-1, gin, spatial.transform((0, 0, 1.0)), axis=(0, 1, 0), q0=q_in0, target_kd=5.0,
                         effort_limit=2.0, armature=2e-3, damping=0.01, name="motor")
    j_out = b.add_joint_revolute(-1, gout, spatial.transform((r_in + r_out, 0, 1.0)), axis=(0, 1, 0),
                                 q0=ratio * q_in0 + offset + 0.02, damping=0.01, name="output")
    b.add_coupler(j_out, 0, ratio, offset, name="gear_mesh")

    def control(model, ctrl):
        ctrl.joint_target_vel[:, 0] = 3.0

    return _scene("geared_pair", b, 2e-3, 750, 0,
                  "Two meshing gears (coupler q_out = -0.5·q_in + 0.1) driven by one velocity-controlled motor "
                  "(3 rad/s, effort limit 2 N·m) against an unbalanced 0.5 kg mass on the output gear; starts 0.02 "
                  "rad off the gear law.", num_worlds, control)


def _rope_box(num_worlds):
    # A 1 kg box hangs from a fixed anchor by a 1.115 m rope: a distance constraint of finite
    # stiffness (5e3 N/m, 20 N·s/m; it also pushes, unlike a real rope) from the anchor to the
    # box's top. Released 0.7 rad off the vertical it swings down; at the bottom of the swing the
    # rope is 2 cm too long for the ground, so the box's corner spheres hit the ground and slide
    # while the rope compresses.
    b = ModelBuilder()
    hx, hy, hz, r, m, L, theta = 0.1, 0.075, 0.05, 0.005, 1.0, 1.115, 0.7
    anchor = b.add_body(0.1, inertia=solid_sphere_inertia(0.1, 0.02), name="anchor")
    b.add_joint_fixed(-1, anchor, spatial.transform((0, 0, 1.2)), name="anchor_weld")
    box = b.add_body(m, inertia=solid_box_inertia(m, hx, hy, hz), name="box")
    q = spatial.quat_from_axis_angle((0, 1, 0), -theta)  # hanging along the rope, tilted with it
    top = np.array([0.0, 0.0, 1.2]) + L * np.array([math.sin(theta), 0.0, -math.cos(theta)])
    p0 = top - spatial.quat_to_matrix(q) @ np.array([0.0, 0.0, hz])
    b.add_joint_free(-1, box, q0=(*p0, *q), name="box")
    b.add_distance(anchor, (0, 0, 0), box, (0, 0, hz), L, stiffness=5e3, damping=20.0, name="rope")
    b.add_ground_plane(mu=0.4, ke=1e5, tau=0.01, name="ground")
    k = 0
    for sx in (-1, 1):
        for sy in (-1, 1):
            for sz in (-1, 1):
                b.add_shape_sphere(box, spatial.transform((sx * hx, sy * hy, sz * hz)), radius=r, mu=0.4, ke=1e5,
                                   tau=0.01, name=f"box_corner{k}")
                k += 1
    return _scene("rope_box", b, 1e-3, 1000, 8,
                  "A 1 kg box on a 1.115 m rope (distance constraint, k 5e3 N/m, c 20 N·s/m) from a fixed anchor, "
                  "released 0.7 rad off the vertical: it swings down and its corner spheres hit the ground at the "
                  "bottom of the swing.", num_worlds)


def _fourbar_points(a, b, c, d, theta1):
    """Joint angles (crank, coupler relative to crank, rocker) of a planar four-bar in the x–z plane
    (rotations about +y) whose loop closes, for crank angle ``theta1``: crank a from (0, 0), rocker c
    from (d, 0), coupler b between their tips (the elbow-up branch)."""
    A = a * np.array([math.cos(theta1), -math.sin(theta1)])  # (x, z) of the crank tip
    O2 = np.array([d, 0.0])
    e = O2 - A
    dist = float(np.linalg.norm(e))
    along = (b * b - c * c + dist * dist) / (2 * dist)
    h = math.sqrt(b * b - along * along)
    B = A + along * e / dist + h * np.array([-e[1], e[0]]) / dist
    phi2 = math.atan2(-(B - A)[1], (B - A)[0])  # absolute angle of the coupler (rotation about +y)
    phi3 = math.atan2(-(B - O2)[1], (B - O2)[0])
    return theta1, phi2 - theta1, phi3


def _fourbar(num_worlds):
    # A planar four-bar (crank 0.2 m, coupler 0.45 m, rocker 0.35 m, ground 0.4 m) in the x–z
    # plane: crank and coupler form one tree, the rocker another, and a ball constraint joins the
    # coupler's far end to the rocker's tip (three rows, one of them redundant with the parallel
    # hinges). Released from rest, it falls until the rocker meets its lower limit (-2.1 rad),
    # where the limit holds the whole linkage.
    b = ModelBuilder()
    a_len, b_len, c_len, d_len, z0 = 0.2, 0.45, 0.35, 0.4, 1.0
    th1, th2, th3 = _fourbar_points(a_len, b_len, c_len, d_len, -1.0)
    crank = b.add_body(0.5, com=(a_len / 2, 0, 0), inertia=rod_inertia(0.5, a_len, axis=0), name="crank")
    coupler = b.add_body(1.0, com=(b_len / 2, 0, 0), inertia=rod_inertia(1.0, b_len, axis=0), name="coupler")
    rocker = b.add_body(0.7, com=(c_len / 2, 0, 0), inertia=rod_inertia(0.7, c_len, axis=0), name="rocker")
    h = 2e-3
    limit = dict(limit_ke=1e12, limit_kd=1e12 * h)  # Drake's limit constraint: k = 1e12, τ = h
    b.add_joint_revolute(-1, crank, spatial.transform((0, 0, z0)), axis=(0, 1, 0), q0=th1, damping=0.02,
                         name="crank_hinge")
    b.add_joint_revolute(crank, coupler, spatial.transform((a_len, 0, 0)), axis=(0, 1, 0), q0=th2, damping=0.02,
                         name="coupler_hinge")
    b.add_joint_revolute(-1, rocker, spatial.transform((d_len, 0, z0)), axis=(0, 1, 0), q0=th3, damping=0.02,
                         limit_lower=-2.1, limit_upper=math.pi, name="rocker_hinge", **limit)
    b.add_ball(coupler, (b_len, 0, 0), rocker, (c_len, 0, 0), name="loop")
    return _scene("fourbar", b, h, 750, 0,
                  "Planar four-bar (crank 0.2, coupler 0.45, rocker 0.35, ground 0.4 m) closed by a ball constraint "
                  "between the coupler and the rocker; it falls until the rocker's lower limit (-2.1 rad) holds it.",
                  num_worlds)


def _weld_drop(num_worlds):
    # Two free spheres of different sizes and masses (R 5 and 4 cm, 0.5 and 0.3 kg, the first with
    # an unequal inertia) welded 0.2 m apart through frames turned against each other, dropped
    # from 0.4 m spinning at (2, 6, 9) rad/s: the weld holds the pair rigid through the landing
    # and the rolling on the ground.
    b = ModelBuilder()
    ra, rb, ma, mb = 0.05, 0.04, 0.5, 0.3
    A = b.add_body(ma, inertia=np.diag([0.4 * ma * ra * ra, 0.45 * ma * ra * ra, 0.5 * ma * ra * ra]), name="left")
    B = b.add_body(mb, inertia=solid_sphere_inertia(mb, rb), name="right")
    X_AP = spatial.transform((0.1, 0.0, 0.0), spatial.quat_from_rpy((0.3, 0.0, 0.2)))
    X_BQ = spatial.transform((-0.1, 0.0, 0.0), spatial.quat_from_rpy((0.0, -0.4, 0.1)))
    X_WA = spatial.transform((0.0, 0.0, 0.4), spatial.quat_from_rpy((0.2, 0.5, -0.3)))
    X_WB = spatial.transform_compose(spatial.transform_compose(X_WA, X_AP), spatial.transform_inverse(X_BQ))
    w = np.array([2.0, 6.0, 9.0])
    v_A = np.array([0.3, 0.0, 0.0])  # velocity of A's origin (its centre of mass)
    v_B = v_A + np.cross(w, X_WB[:3] - X_WA[:3])
    b.add_joint_free(-1, A, q0=X_WA, qd0=(*v_A, *w), name="left")
    b.add_joint_free(-1, B, q0=X_WB, qd0=(*v_B, *w), name="right")
    b.add_weld(A, X_AP, B, X_BQ, name="weld")
    b.add_ground_plane(mu=0.6, ke=1e5, tau=0.01, name="ground")
    b.add_shape_sphere(A, radius=ra, mu=0.6, ke=1e5, tau=0.01, name="left_sphere")
    b.add_shape_sphere(B, radius=rb, mu=0.6, ke=1e5, tau=0.01, name="right_sphere")
    b.add_collision_filter_pair(1, 2)  # the welded spheres never touch
    return _scene("weld_drop", b, 1e-3, 1000, 2,
                  "Two free spheres (R 5 and 4 cm, 0.5 and 0.3 kg) welded 0.2 m apart through turned frames, dropped "
                  "from 0.4 m spinning at (2, 6, 9) rad/s: the weld keeps the pair rigid through the bounces and the "
                  "rolling on the ground.", num_worlds)


# Shapes of every collidable type on a body, for scenes that exercise every pair family of the
# collision (the collision benchmark's pile, the broad-phase test): sizes up to 0.05 m.
_GEM = np.array([[0.045, 0.0, 0.015], [0.0225, 0.039, 0.015], [-0.0225, 0.039, 0.015], [-0.045, 0.0, 0.015],
                 [-0.0225, -0.039, 0.015], [0.0225, -0.039, 0.015], [0.03, 0.0, -0.025], [-0.015, 0.026, -0.025],
                 [-0.015, -0.026, -0.025], [0.0, 0.0, 0.035]])
_SMALL_CUBE = np.array([[x, y, z] for x in (-0.04, 0.04) for y in (-0.04, 0.04) for z in (-0.04, 0.04)])
SHAPE_TYPES_CYCLE = 7  # add_shape_of_every_type's index cycles through this many shapes


def add_shape_of_every_type(b: ModelBuilder, body: int, index: int) -> int:
    """Add shape ``index % SHAPE_TYPES_CYCLE`` of a cycle through every type a body can carry to
    ``body``: a sphere, a capsule, a box, a cylinder, an ellipsoid, a convex mesh (a gem) and a mesh
    cube, sizes up to 0.05 m. Returns the shape's index."""
    adders = (lambda: b.add_shape_sphere(body, radius=0.05),
              lambda: b.add_shape_capsule(body, radius=0.035, half_length=0.04),
              lambda: b.add_shape_box(body, None, 0.05, 0.04, 0.03),
              lambda: b.add_shape_cylinder(body, radius=0.045, half_length=0.035),
              lambda: b.add_shape_ellipsoid(body, None, 0.05, 0.035, 0.04),
              lambda: b.add_shape_convex_mesh(body, vertices=_GEM),
              lambda: b.add_shape_convex_mesh(body, vertices=_SMALL_CUBE))
    return adders[index % SHAPE_TYPES_CYCLE]()


def _package_file(package: str, relative: str, hint: str) -> str:
    """A data file shipped inside an installed package, found without importing the package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"scene name: this scene needs the {package!r} package ({hint})")
    path = os.path.join(spec.submodule_search_locations[0], relative)
    if not os.path.exists(path):
        raise ValueError(f"scene name: {path} is missing from the installed {package!r} package")
    return path


def _mjcf_scene(name, path, num_worlds, description):
    if importlib.util.find_spec("mujoco") is None:
        raise ValueError(f"scene name: {name!r} needs the 'mujoco' package (pip install mujoco)")
    from .io.mjcf import load_mjcf

    with warnings.catch_warnings():  # documented above: MuJoCo's passive joint springs are dropped
        warnings.filterwarnings("ignore", message="load_mjcf: joint stiffness")
        scene = load_mjcf(path, num_worlds=num_worlds)
    scene.name, scene.description = name, description
    return scene


def _humanoid(num_worlds):
    path = _package_file("mujoco_warp", "test_data/humanoid/humanoid.xml", "pip install mujoco-warp")
    return _mjcf_scene("humanoid", path, num_worlds,
                       "MuJoCo's humanoid (27 DOFs, capsule limbs, 21 motors) from the mujoco-warp wheel, "
                       "standing above the ground plane.")


# humanoid3: the humanoids stand this far apart along y [m]. A humanoid's widest point (its elbow
# capsules) is 0.37 m either side of its torso, so 1.5 m leaves 0.76 m between neighbours: no
# contact at the start, while a sideways fall (a humanoid is 1.5 m tall) can reach a neighbour.
HUMANOID3_SPACING = 1.5
# Contact slots per world of humanoid3 (load_mjcf's cap, as for one humanoid). A fallen humanoid
# touches the ground at most 15 times (sap-benchmark humanoid: 16 worlds × 1000 steps of 5 ms with
# control noise σ 0.1), so three need ≤ 45 plus any between them; the benchmark reports any that
# are dropped (truncated).
HUMANOID3_MAX_RIGID_CONTACT = 64


def _humanoid3_xml(path: str) -> str:
    """An MJCF string that attaches the humanoid of ``path`` three times (prefixes h0_, h1_, h2_).

    The options and visual settings repeat the humanoid's own, so MuJoCo's attach has no
    conflicts to report (it keeps the parent's values, which are then the same)."""
    frames = "".join(f'    <frame pos="0 {(i - 1) * HUMANOID3_SPACING:g} 0">'
                     f'<attach model="humanoid" body="torso" prefix="h{i}_"/></frame>\n' for i in range(3))
    return (f'<mujoco model="humanoid3">\n'
            f'  <option timestep="0.005" iterations="10" ls_iterations="20"><flag eulerdamp="disable"/></option>\n'
            f'  <visual><map force="0.1" zfar="30"/></visual>\n'
            f'  <asset><model name="humanoid" file="{path}"/></asset>\n'
            f'  <worldbody>\n'
            f'    <geom name="floor" size="0 0 .05" type="plane" condim="3"/>\n'
            f'{frames}  </worldbody>\n</mujoco>\n')


def _humanoid3(num_worlds):
    path = _package_file("mujoco_warp", "test_data/humanoid/humanoid.xml", "pip install mujoco-warp")
    scene = _mjcf_scene("humanoid3", _humanoid3_xml(path), num_worlds,
                        f"Three of MuJoCo's humanoids side by side ({HUMANOID3_SPACING:g} m apart along y) in one "
                        f"world: 81 DOFs in three trees, 63 motors; the large-system benchmark model.")
    scene.max_rigid_contact = HUMANOID3_MAX_RIGID_CONTACT
    return scene


def _mesh_quadruped(num_worlds):
    path = os.path.join(os.path.dirname(__file__), "data", "mesh_quadruped.xml")
    return _mjcf_scene("mesh_quadruped", path, num_worlds,
                       "A quadruped whose collision geometry is what real robot models use: a convex-mesh "
                       "chassis and feet, cylinder thighs, capsule shins and an ellipsoid head (14 DOFs, 8 "
                       "position actuators), standing on the ground plane; its MJCF file ships with the "
                       "package (sap_common/data/mesh_quadruped.xml).")


def _ant(num_worlds):
    path = _package_file("gymnasium", "envs/mujoco/assets/ant.xml", "pip install gymnasium")
    return _mjcf_scene("ant", path, num_worlds, "Gymnasium's ant (a torso on four two-joint legs).")


_SCENES: dict[str, Callable[[int], LoadedScene]] = {
    "sphere_drop": _sphere_drop,
    "sphere_slide": _sphere_slide,
    "box_slide": _box_slide,
    "box_stack": _box_stack,
    "incline_stick_slip": _incline_stick_slip,
    "pendulum_limit": _pendulum_limit,
    "double_pendulum": _double_pendulum,
    "prismatic_pd": _prismatic_pd,
    "free_spin": _free_spin,
    "ball_joint_pendulum": _ball_joint_pendulum,
    "sphere_on_sphere": _sphere_on_sphere,
    "arm_push_block": _arm_push_block,
    "cylinder_roll": _cylinder_roll,
    "mesh_rock": _mesh_rock,
    "geared_pair": _geared_pair,
    "rope_box": _rope_box,
    "fourbar": _fourbar,
    "weld_drop": _weld_drop,
    "slider_push": _slider_push,
    "humanoid": _humanoid,
    "humanoid3": _humanoid3,
    "mesh_quadruped": _mesh_quadruped,
    "ant": _ant,
}


def names() -> tuple[str, ...]:
    """Names of every built-in scene."""
    return tuple(_SCENES)


# Scenes that need an optional package: scene name -> (package, install hint).
_REQUIRES = {"humanoid": ("mujoco_warp", "pip install mujoco-warp"), "mesh_quadruped": ("mujoco", "pip install mujoco"),
             "humanoid3": ("mujoco_warp", "pip install mujoco-warp"), "ant": ("gymnasium", "pip install gymnasium")}


def availability(name: str) -> tuple[bool, str]:
    """``(True, "")`` if scene ``name`` can be built here, else ``(False, reason)``."""
    need = _REQUIRES.get(name)
    if need is None:
        return True, ""
    if importlib.util.find_spec("mujoco") is None:
        return False, "needs the 'mujoco' package (pip install mujoco)"
    if importlib.util.find_spec(need[0]) is None:
        return False, f"needs the {need[0]!r} package ({need[1]})"
    return True, ""


def get(name: str, num_worlds: int = 1) -> LoadedScene:
    """Build scene ``name`` with ``num_worlds`` worlds (``ValueError`` listing the names if unknown)."""
    key = str(name).strip().lower().replace("-", "_")
    if key not in _SCENES:
        raise ValueError(f"scene name: {name!r} is not a built-in scene; valid: {', '.join(_SCENES)}")
    return _SCENES[key](check_num_worlds(num_worlds))


def describe(name: str) -> str:
    """One paragraph on scene ``name``."""
    return get(name).description

"""sap_common.io.mjcf: MJCF/URDF import, the MuJoCo coordinate maps, filters and actuators."""

import math
import warnings

import mujoco
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from sap_common import scenes, spatial
from sap_common.io import (joint_qd_to_mujoco_qvel, load_mjcf, mujoco_ctrl_to_control, mujoco_qpos_to_joint_q,
                           mujoco_qvel_to_joint_qd)
from sap_common.kinematics import body_velocities, forward_kinematics
from sap_common.model import JointType, ShapeType
from mjcf_strategies import random_mjcf, random_state

TOL = 1e-10  # float64 kinematics of O(1) m trees (observed ≤ 2e-15)


def _load(xml):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_mjcf(xml)


def _same_rotation(q_xyzw, q_wxyz):
    q_mj = np.array([q_wxyz[1], q_wxyz[2], q_wxyz[3], q_wxyz[0]])
    return min(np.abs(q_xyzw - q_mj).max(), np.abs(q_xyzw + q_mj).max())


@settings(max_examples=100)
@given(random_mjcf(), st.integers(0, 2**32 - 1))
def test_forward_kinematics_and_velocities_match_mujoco(xml, seed):
    scene = _load(xml)
    mj, m = scene.mj_model, scene.sap_model
    assume(mj.nv > 0)
    d = mujoco.MjData(mj)
    d.qpos[:], d.qvel[:] = random_state(mj, np.random.default_rng(seed))
    mujoco.mj_forward(mj, d)
    q = mujoco_qpos_to_joint_q(scene, d.qpos)
    v = mujoco_qvel_to_joint_qd(scene, d.qpos, d.qvel)
    body_q = forward_kinematics(m, q)[0]
    V = body_velocities(m, q, v)[0]
    res = np.zeros(6)
    for i in range(1, mj.nbody):
        b = scene.mujoco_map.body[i]
        assert np.abs(body_q[b, :3] - d.xpos[i]).max() < TOL
        assert _same_rotation(body_q[b, 3:], d.xquat[i]) < TOL
        # MuJoCo's body velocity [ω; v] is centred at the COM (xipos), world orientation.
        mujoco.mj_objectVelocity(mj, d, mujoco.mjtObj.mjOBJ_BODY, i, res, 0)
        v_C = V[b, 3:] + np.cross(V[b, :3], d.xipos[i] - body_q[b, :3])
        np.testing.assert_allclose(np.concatenate([V[b, :3], v_C]), res, atol=TOL * max(1.0, np.abs(res).max()))
    np.testing.assert_allclose(joint_qd_to_mujoco_qvel(scene, d.qpos, v), d.qvel, atol=TOL)


def test_velocity_map_by_hand():
    xml = """<mujoco><worldbody><body name="a" pos="0 0 1"><freejoint/><inertial pos="0 0 0" mass="1" diaginertia="1 1 1"/>
             <body name="b" pos="0.5 0 0"><joint name="ball" type="ball"/><inertial pos="0 0 0" mass="1" diaginertia="1 1 1"/>
             </body></body></worldbody></mujoco>"""
    scene = _load(xml)
    q_WB = spatial.quat_from_axis_angle([0, 0, 1], math.pi / 2)  # body turned 90° about z
    qpos = np.array([1, 2, 3, q_WB[3], *q_WB[:3], 1, 0, 0, 0.0])
    qvel = np.array([0.1, 0.2, 0.3, 1.0, 0, 0, 0, 2.0, 0])
    qd = mujoco_qvel_to_joint_qd(scene, qpos, qvel)
    # Free: ω_body (1, 0, 0) is (0, 1, 0) in world; v unchanged. Ball (identity): ω_M = ω_F.
    np.testing.assert_allclose(qd[:6], [0, 1, 0, 0.1, 0.2, 0.3], atol=1e-15)
    np.testing.assert_allclose(qd[6:], [0, 2, 0])
    np.testing.assert_allclose(mujoco_qpos_to_joint_q(scene, qpos)[3:7], q_WB)


def test_humanoid():
    scene = scenes.get("humanoid")
    mj, m = scene.mj_model, scene.sap_model
    assert (m.joint_coord_count, m.joint_dof_count) == (mj.nq, mj.nv) == (28, 27)
    # 16 bodies + one massless frame per foot (their two ankle joints have different anchors).
    assert m.body_count == 18 and sum(1 for n in m.body_name if "/" in n) == 2
    assert JointType.D6 in set(m.joint_type.tolist())  # hips, abdomen, shoulders share anchors
    assert scene.dt == 0.005 and len(scene.mujoco_map.actuators) == 21
    # Candidate pairs: exactly MuJoCo's broad-phase filter.
    mj_pairs = set()
    geoms = {s: mujoco.mj_name2id(mj, mujoco.mjtObj.mjOBJ_GEOM, n) for s, n in enumerate(m.shape_name)}
    from sap_common.io.mjcf import _mujoco_keeps
    for a in range(m.shape_count):
        for b in range(a + 1, m.shape_count):
            static = [mj.body_weldid[mj.geom_bodyid[geoms[s]]] == 0 for s in (a, b)]
            if not all(static) and _mujoco_keeps(mj, geoms[a], geoms[b]):
                mj_pairs.add((a, b))
    assert {tuple(p) for p in m.shape_pair.tolist()} == mj_pairs
    # Motors: gear·ctrl with effort limit |ctrlrange|·gear (hip_y has gear 120).
    k = mujoco.mj_name2id(mj, mujoco.mjtObj.mjOBJ_ACTUATOR, "hip_y_right")
    act = next(a for a in scene.mujoco_map.actuators if a.mj_actuator == k)
    assert act.kind == "motor" and act.gear == 120 and m.joint_effort_limit[act.dof] == 120
    control = m.control()
    ctrl = np.zeros(mj.nu)
    ctrl[k] = 0.5
    mujoco_ctrl_to_control(scene, ctrl[None], control)
    assert control.joint_act[0, act.dof] == 60.0 and np.count_nonzero(control.joint_act) == 1
    with pytest.warns(UserWarning, match="joint stiffness"):
        load_mjcf(scene.source)


def test_actuator_kinds():
    xml = """<mujoco><compiler angle="radian"/><worldbody><body><inertial pos="0 0 0" mass="1" diaginertia="1 1 1"/>
        <joint name="h" type="hinge" axis="0 1 0" ref="0.2"/>
        <body pos="0 0 -1"><inertial pos="0 0 0" mass="1" diaginertia="1 1 1"/><joint name="s" type="slide" axis="1 0 0"/>
        <body pos="0 0 -1"><inertial pos="0 0 0" mass="1" diaginertia="1 1 1"/><joint name="h2" type="hinge"/>
        </body></body></body></worldbody>
        <actuator><position joint="h" kp="100" kv="5" gear="2" forcerange="-3 3" forcelimited="true"/>
        <velocity joint="s" kv="7" gear="3"/><motor joint="h2" gear="4" ctrlrange="-1 2" ctrllimited="true"/></actuator></mujoco>"""
    scene = _load(xml)
    m = scene.sap_model
    assert m.joint_target_ke.tolist() == [400.0, 0.0, 0.0] and m.joint_target_kd.tolist() == [20.0, 63.0, 0.0]
    assert m.joint_effort_limit.tolist() == [6.0, math.inf, 8.0]
    control = m.control()
    mujoco_ctrl_to_control(scene, np.array([[1.0, 6.0, 0.5]]), control)
    assert control.joint_target_pos[0, 0] == pytest.approx(1.0 / 2 - 0.2)  # ctrl/gear − ref
    assert control.joint_target_vel[0, 1] == 2.0 and control.joint_act[0, 2] == 2.0


def test_limits_shapes_and_fixed_bodies():
    xml = """<mujoco><worldbody><geom type="plane" size="1 1 1"/>
        <body name="post" pos="0 0 1"><geom type="box" size=".1 .1 .1"/>
          <body name="arm"><joint name="j" type="hinge" axis="0 0 1" range="-30 60" limited="true" ref="10"/>
            <inertial pos="0 0 0" mass="1" diaginertia="1 1 1"/>
            <geom type="capsule" fromto="0 0 0 0.5 0 0" size=".05" friction="0.7 0.1 0.1" margin="0.01"/>
            <geom type="cylinder" size=".05 .1"/>
            <body name="tip" pos="0.5 0 0"><geom type="sphere" size=".06"/></body></body></body></worldbody></mujoco>"""
    with pytest.warns(UserWarning, match="cylinder|plane/sphere/capsule/box"):
        scene = load_mjcf(xml)
    m = scene.sap_model
    # Degrees in MJCF, ref 10°: our limits are range − ref in radians.
    assert m.joint_limit_lower[0] == pytest.approx(math.radians(-40))
    assert m.joint_limit_upper[0] == pytest.approx(math.radians(50))
    types = dict(zip(m.shape_name, m.shape_type.tolist()))
    assert types["geom0"] == ShapeType.PLANE and ShapeType.CAPSULE in types.values() and len(types) == 4
    cap = m.shape_type.tolist().index(ShapeType.CAPSULE)
    assert m.shape_material_mu[cap] == 0.7 and m.shape_margin[cap] == 0.01 and m.shape_size[cap, 1] == pytest.approx(0.25)
    post_box = m.shape_type.tolist().index(ShapeType.BOX)
    assert m.shape_body[post_box] == -1  # a welded (static) body's geoms go to the world
    assert m.body_static[m.body_index("post")] and not m.body_static[m.body_index("tip")]
    assert np.isnan(m.shape_material_ke).all()  # MuJoCo's solref is not mapped: solver fallbacks


def test_urdf():
    urdf = """<robot name="r"><link name="base"/>
      <link name="l1"><inertial><origin xyz="0 0 0.25"/><mass value="1"/><inertia ixx="0.02" iyy="0.02" izz="0.001" ixy="0" ixz="0" iyz="0"/></inertial>
        <collision><geometry><box size="0.1 0.1 0.5"/></geometry></collision></link>
      <link name="l2"><inertial><origin xyz="0 0 0"/><mass value="0.5"/><inertia ixx="0.01" iyy="0.01" izz="0.01" ixy="0" ixz="0" iyz="0"/></inertial>
        <collision><geometry><sphere radius="0.05"/></geometry></collision></link>
      <joint name="j1" type="revolute"><parent link="base"/><child link="l1"/><origin xyz="0 0 0.1"/><axis xyz="0 1 0"/>
        <limit lower="-1" upper="1" effort="10" velocity="1"/></joint>
      <joint name="j2" type="prismatic"><parent link="l1"/><child link="l2"/><origin xyz="0 0 0.5"/><axis xyz="0 0 1"/>
        <limit lower="0" upper="0.2" effort="10" velocity="1"/></joint></robot>"""
    scene = _load(urdf)
    m, mj = scene.sap_model, scene.mj_model
    assert m.joint_type.tolist() == [JointType.REVOLUTE, JointType.PRISMATIC]
    assert (m.joint_limit_lower.tolist(), m.joint_limit_upper.tolist()) == ([-1.0, 0.0], [1.0, 0.2])
    d = mujoco.MjData(mj)
    d.qpos[:] = [0.4, 0.1]
    mujoco.mj_kinematics(mj, d)
    body_q = forward_kinematics(m, mujoco_qpos_to_joint_q(scene, d.qpos))[0]
    for i in range(1, mj.nbody):
        np.testing.assert_allclose(body_q[scene.mujoco_map.body[i], :3], d.xpos[i], atol=TOL)


@pytest.mark.parametrize("xml,match", [
    ("""<mujoco><worldbody><body><inertial pos="0 0 0" mass="1" diaginertia="1 1 1"/><joint type="hinge"/>
        <geom type="plane" size="1 1 1"/></body></worldbody></mujoco>""", r"plane only allowed in static bodies"),
    ("<mujoco><worldbody><body></mujoco>", r"path_or_xml: MuJoCo could not compile the XML"),
    ("/no/such/file.xml", r"path_or_xml: no such file"),
])
def test_bad_input(xml, match):
    with pytest.raises(ValueError, match=match):
        load_mjcf(xml)
    with pytest.raises(ValueError, match=r"path_or_xml: expected a file path or an XML string"):
        load_mjcf(3)


def test_ant_scene_needs_gymnasium():
    import importlib.util

    if importlib.util.find_spec("gymnasium") is None:
        with pytest.raises(ValueError, match=r"needs the 'gymnasium' package \(pip install gymnasium\)"):
            scenes.get("ant")
        pytest.skip("gymnasium is not installed (not a dependency): the ant scene cannot be built here")
    scene = scenes.get("ant")
    assert scene.sap_model.joint_dof_count == scene.mj_model.nv

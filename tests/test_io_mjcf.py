"""sap_common.io.mjcf: MJCF/URDF import, the MuJoCo coordinate maps, filters and actuators."""

import dataclasses
import importlib.util
import math
import os
import warnings

import mujoco
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from mjcf_strategies import mujoco_state, random_mjcf, random_state

from sap_common import conventions, scenes, spatial
from sap_common.io import (
    joint_qd_to_mujoco_qvel,
    load_mjcf,
    mujoco_ctrl_to_control,
    mujoco_pair_filter,
    mujoco_qpos_to_joint_q,
    mujoco_qvel_to_joint_qd,
)
from sap_common.io import mjcf as mjcf_module
from sap_common.kinematics import body_velocities, forward_kinematics
from sap_common.model import JointType, ShapeType

TOL = 1e-10  # float64 kinematics of O(1) m trees (observed ≤ 3e-15)
EXACT = 1e-15  # a map that only permutes, copies or rotates once (a few ulps)
CONTACT_MARGIN = 100.0  # [m] margin that makes MuJoCo report a contact for every candidate pair
PROPERTY = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _load(xml, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_mjcf(xml, **kwargs)


def _same_rotation(q_xyzw, q_wxyz) -> float:
    q_mj = np.array([q_wxyz[1], q_wxyz[2], q_wxyz[3], q_wxyz[0]])
    return min(np.abs(q_xyzw - q_mj).max(), np.abs(q_xyzw + q_mj).max())


def _mujoco_data(scene, qpos, qvel=None):
    d = mujoco.MjData(scene.mj_model)
    d.qpos[:] = qpos
    if qvel is not None:
        d.qvel[:] = qvel
    mujoco.mj_forward(scene.mj_model, d)
    return d


def _assert_fk_matches(scene, d):
    body_q = forward_kinematics(scene.sap_model, mujoco_qpos_to_joint_q(scene, d.qpos))[0]
    for i in range(1, scene.mj_model.nbody):
        b = scene.mujoco_map.body[i]
        assert np.abs(body_q[b, :3] - d.xpos[i]).max() < TOL, f"body {i} position"
        assert _same_rotation(body_q[b, 3:], d.xquat[i]) < TOL, f"body {i} rotation"


def _mujoco_contact_pairs(spec: "mujoco.MjSpec", shape_of) -> set:
    """Our shape pairs of every geom pair MuJoCo reports at qpos0 with a huge margin (its real
    collision filter, not our reimplementation). Boxes become spheres first: the filter ignores
    geom types, and MuJoCo's box–box test does not honour a huge margin."""
    for g in spec.geoms:
        g.margin = CONTACT_MARGIN
        if g.type == mujoco.mjtGeom.mjGEOM_BOX:
            g.type, g.size = mujoco.mjtGeom.mjGEOM_SPHERE, [0.1, 0, 0]
    m = spec.compile()
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    pairs = {tuple(sorted((shape_of[c.geom1], shape_of[c.geom2]))) for c in d.contact}
    return {p for p in pairs if min(p) >= 0}


def test_enum_constants_match_mujoco():
    # The module hard-codes MuJoCo's enum values so that it imports without mujoco.
    J, G, D, O = mujoco.mjtJoint, mujoco.mjtGeom, mujoco.mjtDisableBit, mujoco.mjtObj
    assert (mjcf_module._FREE, mjcf_module._BALL, mjcf_module._SLIDE, mjcf_module._HINGE) == (
        J.mjJNT_FREE, J.mjJNT_BALL, J.mjJNT_SLIDE, J.mjJNT_HINGE)
    assert (mjcf_module._GEOM_PLANE, mjcf_module._GEOM_SPHERE, mjcf_module._GEOM_CAPSULE, mjcf_module._GEOM_BOX) == (
        G.mjGEOM_PLANE, G.mjGEOM_SPHERE, G.mjGEOM_CAPSULE, G.mjGEOM_BOX)
    assert {k: int(getattr(G, f"mjGEOM_{v.upper()}")) for k, v in mjcf_module._GEOM_NAMES.items()} == {
        k: k for k in mjcf_module._GEOM_NAMES}
    assert (mjcf_module._TRN_JOINT, mjcf_module._DYN_NONE, mjcf_module._GAIN_FIXED, mjcf_module._BIAS_NONE,
            mjcf_module._BIAS_AFFINE) == (mujoco.mjtTrn.mjTRN_JOINT, mujoco.mjtDyn.mjDYN_NONE,
                                          mujoco.mjtGain.mjGAIN_FIXED, mujoco.mjtBias.mjBIAS_NONE,
                                          mujoco.mjtBias.mjBIAS_AFFINE)
    for name in ("BODY", "JOINT", "GEOM", "TENDON", "ACTUATOR", "EQUALITY"):
        assert getattr(mjcf_module, f"_OBJ_{name}") == getattr(O, f"mjOBJ_{name}")
    for name in ("CONSTRAINT", "LIMIT", "CONTACT", "SPRING", "DAMPER", "GRAVITY", "CLAMPCTRL", "FILTERPARENT",
                 "ACTUATION"):
        assert getattr(mjcf_module, f"_DSBL_{name}") == getattr(D, f"mjDSBL_{name}")


# ----------------------------------------------------------------------------- random trees


@PROPERTY
@given(random_mjcf(), st.data())
def test_forward_kinematics_matches_mujoco(xml, data):
    scene = _load(xml)
    qpos, qvel = data.draw(mujoco_state(scene.mj_model))
    _assert_fk_matches(scene, _mujoco_data(scene, qpos, qvel))


@PROPERTY
@given(random_mjcf(), st.data())
def test_body_velocities_match_mujoco(xml, data):
    scene = _load(xml)
    mj, m = scene.mj_model, scene.sap_model
    assume(mj.nv > 0)
    qpos, qvel = data.draw(mujoco_state(mj))
    d = _mujoco_data(scene, qpos, qvel)
    q, v = mujoco_qpos_to_joint_q(scene, qpos), mujoco_qvel_to_joint_qd(scene, qpos, qvel)
    body_q = forward_kinematics(m, q)[0]
    V = body_velocities(m, q, v)[0]
    res = np.zeros(6)
    for i in range(1, mj.nbody):
        b = scene.mujoco_map.body[i]
        # mj_objectVelocity(body, world orientation) is [ω; v] at the body's COM (xipos).
        mujoco.mj_objectVelocity(mj, d, mujoco.mjtObj.mjOBJ_BODY, i, res, 0)
        v_C = V[b, 3:] + np.cross(V[b, :3], d.xipos[i] - body_q[b, :3])
        np.testing.assert_allclose(np.concatenate([V[b, :3], v_C]), res, atol=TOL * max(1.0, np.abs(res).max()), rtol=0)


@PROPERTY
@given(random_mjcf(), st.data())
def test_velocity_map_round_trip(xml, data):
    scene = _load(xml)
    assume(scene.mj_model.nv > 0)
    qpos, qvel = data.draw(mujoco_state(scene.mj_model))
    for order in ("sap", "public"):
        qd = mujoco_qvel_to_joint_qd(scene, qpos, qvel, order=order)
        np.testing.assert_allclose(joint_qd_to_mujoco_qvel(scene, qpos, qd, order=order), qvel, atol=TOL, rtol=0)
    q = mujoco_qpos_to_joint_q(scene, qpos)
    sap = mujoco_qvel_to_joint_qd(scene, qpos, qvel)
    np.testing.assert_allclose(mujoco_qvel_to_joint_qd(scene, qpos, qvel, order="public"),
                               conventions.joint_qd_sap_to_public(scene.sap_model, q, sap), atol=EXACT)


@settings(max_examples=50, deadline=None)
@given(random_mjcf())
def test_joint_parameters_match_mujoco(xml):
    scene = _load(xml)
    mj, m = scene.mj_model, scene.sap_model
    for jm in scene.mujoco_map.joints:
        j, d, i = jm.mj_joint, jm.dofadr, jm.qd_index
        if jm.mj_type in (mjcf_module._HINGE, mjcf_module._SLIDE):
            assert m.joint_armature[i] == mj.dof_armature[d] and m.joint_damping[i] == mj.dof_damping[d]
            lo, hi = (mj.jnt_range[j] - jm.qpos0) if mj.jnt_limited[j] else (-math.inf, math.inf)
            assert (m.joint_limit_lower[i], m.joint_limit_upper[i]) == (lo, hi)
        elif jm.mj_type == mjcf_module._FREE:  # MuJoCo [v, ω] -> ours [ω, v]
            np.testing.assert_array_equal(m.joint_armature[i:i + 6], np.roll(mj.dof_armature[d:d + 6], 3))
    assert scene.dt == mj.opt.timestep and np.array_equal(m.gravity, mj.opt.gravity)
    assert m.joint_coord_count == mj.nq and m.joint_dof_count == mj.nv
    assert sum(m.body_mass) == pytest.approx(sum(mj.body_mass), abs=EXACT * mj.nbody)
    np.testing.assert_allclose(scene.state.joint_q[0], mujoco_qpos_to_joint_q(scene, mj.qpos0), atol=EXACT)


@settings(max_examples=40, deadline=None)
@given(random_mjcf(geoms=True))
def test_candidate_pairs_match_mujoco(xml):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scene = load_mjcf(xml)
    mj, m = scene.mj_model, scene.sap_model
    ours = {tuple(p) for p in m.shape_pair.tolist()}
    reported = _mujoco_contact_pairs(mujoco.MjSpec.from_string(xml), scene.mujoco_map.shape)
    assert ours <= reported
    if mj.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_FILTERPARENT:
        # Our joint-adjacency rule drops parent-child pairs MuJoCo then tests: each one is named.
        text = " ".join(str(w.message) for w in caught)
        for s, t in reported - ours:
            assert str((m.shape_name[s], m.shape_name[t])) in text
    else:
        assert ours == reported
    geoms = [g for g in range(mj.ngeom) if scene.mujoco_map.shape[g] >= 0]
    keep = mujoco_pair_filter(mj, geoms)
    static = [mj.body_weldid[mj.geom_bodyid[g]] == 0 for g in geoms]
    assert reported == {(s, t) for s in range(len(geoms)) for t in range(s + 1, len(geoms))
                        if keep[s, t] and not (static[s] and static[t])}


def test_maps_take_batches():
    scene = _load(_TWO_BODY)
    rng = np.random.default_rng(3)
    states = [random_state(scene.mj_model, rng) for _ in range(6)]
    qpos = np.array([s[0] for s in states]).reshape(2, 3, -1)
    qvel = np.array([s[1] for s in states]).reshape(2, 3, -1)
    q, qd = mujoco_qpos_to_joint_q(scene, qpos), mujoco_qvel_to_joint_qd(scene, qpos, qvel)
    assert q.shape == (2, 3, scene.sap_model.joint_coord_count) and qd.shape == (2, 3, scene.sap_model.joint_dof_count)
    for k, (p, v) in enumerate(states):
        np.testing.assert_array_equal(q.reshape(6, -1)[k], mujoco_qpos_to_joint_q(scene, p))
        np.testing.assert_array_equal(qd.reshape(6, -1)[k], mujoco_qvel_to_joint_qd(scene, p, v))
    np.testing.assert_allclose(joint_qd_to_mujoco_qvel(scene, qpos, qd), qvel, atol=TOL)


# ----------------------------------------------------------------------------- maps by hand

_TWO_BODY = """<mujoco><worldbody><body name="a" pos="0 0 1"><freejoint name="free"/>
    <inertial pos="0.2 0 0" mass="1" diaginertia="1 1 1"/>
    <body name="b" pos="0.5 0 0"><joint name="ball" type="ball"/><inertial pos="0 0 0" mass="1" diaginertia="1 1 1"/>
    </body></body></worldbody></mujoco>"""


def test_velocity_map_by_hand():
    scene = _load(_TWO_BODY)
    q_WB = spatial.quat_from_axis_angle([0, 0, 1], math.pi / 2)  # body a turned 90° about z
    q_FM = spatial.quat_from_axis_angle([1, 0, 0], math.pi / 2)  # b turned 90° about x relative to a
    qpos = np.array([1, 2, 3, q_WB[3], *q_WB[:3], q_FM[3], *q_FM[:3]])
    qvel = np.array([0.1, 0.2, 0.3, 1.0, 0, 0, 0, 2.0, 0])
    q = mujoco_qpos_to_joint_q(scene, qpos)
    np.testing.assert_allclose(q, [1, 2, 3, *q_WB, *q_FM], atol=EXACT)
    qd = mujoco_qvel_to_joint_qd(scene, qpos, qvel)
    # Free: ω_B = (1, 0, 0) is (0, 1, 0) in world; v_O copied. Ball: ω_M = (0, 2, 0) is (0, 0, 2) in F.
    np.testing.assert_allclose(qd, [0, 1, 0, 0.1, 0.2, 0.3, 0, 0, 2], atol=EXACT)
    # Public order: [v_C, ω] with r_OC = R_WB (0.2, 0, 0) = (0, 0.2, 0): v_C = v_O + ω × r = v_O.
    pub = mujoco_qvel_to_joint_qd(scene, qpos, qvel, order="public")
    np.testing.assert_allclose(pub, [0.1, 0.2, 0.3, 0, 1, 0, 0, 0, 2], atol=EXACT)
    qvel2 = qvel.copy()
    qvel2[3:6] = [0, 0, 1.0]  # ω_B = z = ω_W: v_C = v_O + (0, 0, 1) × (0, 0.2, 0) = v_O − (0.2, 0, 0)
    pub2 = mujoco_qvel_to_joint_qd(scene, qpos, qvel2, order="public")
    np.testing.assert_allclose(pub2[:6], [-0.1, 0.2, 0.3, 0, 0, 1], atol=EXACT)
    np.testing.assert_allclose(joint_qd_to_mujoco_qvel(scene, qpos, pub2, order="public"), qvel2, atol=EXACT)


def test_maps_reject_bad_input():
    scene = _load(_TWO_BODY)
    with pytest.raises(ValueError, match=r"qpos: expected shape \(\.\.\., 11\)"):
        mujoco_qpos_to_joint_q(scene, np.zeros(10))
    with pytest.raises(ValueError, match=r"qvel: expected shape \(\.\.\., 9\)"):
        mujoco_qvel_to_joint_qd(scene, np.zeros(11), np.zeros(8))
    with pytest.raises(ValueError, match=r"order: must be one of"):
        mujoco_qvel_to_joint_qd(scene, np.zeros(11), np.zeros(9), order="mujoco")
    with pytest.raises(ValueError, match=r"loaded: scene 'sphere_drop' has no MuJoCo map"):
        mujoco_qpos_to_joint_q(scenes.get("sphere_drop"), np.zeros(7))


# ----------------------------------------------------------------------------- the humanoid


def test_humanoid():
    with pytest.warns(UserWarning, match=r"load_mjcf: joint stiffness .*'abdomen_z'"):
        scene = load_mjcf(scenes.get("humanoid").source)
    mj, m = scene.mj_model, scene.sap_model
    assert (mj.nbody, mj.njnt, mj.nq, mj.nv, mj.ngeom, mj.nu) == (17, 22, 28, 27, 20, 21)
    assert (m.joint_coord_count, m.joint_dof_count, m.shape_count) == (28, 27, 20)
    # 16 bodies + one massless frame per foot (the two ankle joints have different anchors).
    assert m.body_count == 18 and [n for n in m.body_name if "/" in n] == ["foot_right/ankle_y_right",
                                                                           "foot_left/ankle_y_left"]
    d6 = [m.joint_name[j] for j in range(m.joint_count) if m.joint_type[j] == JointType.D6]
    assert d6 == ["abdomen_z+abdomen_y", "hip_x_right+hip_z_right+hip_y_right", "hip_x_left+hip_z_left+hip_y_left",
                  "shoulder1_right+shoulder2_right", "shoulder1_left+shoulder2_left"]
    assert scene.dt == 0.005 and len(scene.mujoco_map.actuators) == 21
    assert math.isclose(sum(m.body_mass), sum(mj.body_mass), rel_tol=EXACT)
    # FK at qpos0 (the loaded initial state) and at random states.
    _assert_fk_matches(scene, _mujoco_data(scene, mj.qpos0))
    np.testing.assert_allclose(scene.state.body_q[0], forward_kinematics(m, scene.state.joint_q)[0], atol=EXACT)
    rng = np.random.default_rng(11)
    for _ in range(20):
        _assert_fk_matches(scene, _mujoco_data(scene, *random_state(mj, rng)))
    # Candidate pairs: exactly the pairs MuJoCo's collision pipeline tests.
    pairs = {tuple(p) for p in m.shape_pair.tolist()}
    assert pairs == _mujoco_contact_pairs(mujoco.MjSpec.from_file(scene.source), scene.mujoco_map.shape)
    assert len(pairs) == 161 and scene.max_rigid_contact == 64
    # Motors: joint_act = gear·ctrl, effort limit |ctrlrange|·gear (hip_y has gear 120, ctrl ±1).
    assert {a.kind for a in scene.mujoco_map.actuators} == {"motor"}
    for a in scene.mujoco_map.actuators:
        assert m.joint_effort_limit[a.dof] == abs(mj.actuator_gear[a.mj_actuator, 0])
    assert np.count_nonzero(m.joint_target_ke) == 0 and np.count_nonzero(m.joint_target_kd) == 0
    k = mujoco.mj_name2id(mj, mujoco.mjtObj.mjOBJ_ACTUATOR, "hip_y_right")
    act = next(a for a in scene.mujoco_map.actuators if a.mj_actuator == k)
    hip = m.joint_name.index("hip_x_right+hip_z_right+hip_y_right")
    assert act.gear == 120 and act.dof == m.joint_qd_start[hip] + 2  # the D6's third axis
    ctrl = np.zeros(mj.nu)
    ctrl[k] = 0.5
    control = mujoco_ctrl_to_control(scene, ctrl, m.control())
    assert control.joint_act[0, act.dof] == 60.0 and np.count_nonzero(control.joint_act) == 1
    # Generalized motor forces equal MuJoCo's qfrc_actuator, DOF by DOF.
    d = mujoco.MjData(mj)
    d.ctrl[:] = rng.uniform(-1.5, 1.5, mj.nu)  # beyond ±1: MuJoCo clamps, so do we
    mujoco.mj_forward(mj, d)
    act_ours = mujoco_ctrl_to_control(scene, d.ctrl, m.control()).joint_act[0]
    for a in scene.mujoco_map.actuators:
        assert act_ours[a.dof] == pytest.approx(d.qfrc_actuator[mj.jnt_dofadr[mj.actuator_trnid[a.mj_actuator, 0]]],
                                                abs=TOL)
    assert np.count_nonzero(act_ours) == 21


def test_humanoid_scene_batches():
    scene = scenes.get("humanoid", num_worlds=3)
    assert scene.name == "humanoid" and scene.sap_model.num_worlds == 3 and scene.mj_model.nv == 27
    again = scene.replicate(2)
    assert again.sap_model.num_worlds == 2 and again.mujoco_map is scene.mujoco_map and again.mj_model is scene.mj_model
    ctrl = np.ones((2, 21))
    ctrl[1] = -1
    control = mujoco_ctrl_to_control(again, ctrl, again.control)
    assert np.array_equal(control.joint_act[0], -control.joint_act[1])


def test_ant_scene_needs_gymnasium():
    if importlib.util.find_spec("gymnasium") is None:
        with pytest.raises(ValueError, match=r"needs the 'gymnasium' package \(pip install gymnasium\)"):
            scenes.get("ant")
        pytest.skip("gymnasium is not installed (not a dependency): the ant scene cannot be built here")
    scene = scenes.get("ant")
    assert scene.sap_model.joint_dof_count == scene.mj_model.nv
    _assert_fk_matches(scene, _mujoco_data(scene, scene.mj_model.qpos0))


# ----------------------------------------------------------------------------- small models

_ACTUATED = """<mujoco><compiler angle="radian"/>{option}<worldbody>
    <body><inertial pos="0 0 0" mass="1" diaginertia="1 1 1"/>
    <joint name="h" type="hinge" axis="0 1 0" ref="0.2" damping="0.5"/>
    <body pos="0 0 -1"><inertial pos="0 0 0" mass="1" diaginertia="1 1 1"/><joint name="s" type="slide" axis="1 0 0"/>
    <body pos="0 0 -1"><inertial pos="0 0 0" mass="1" diaginertia="1 1 1"/>
      <joint name="h2" type="hinge" armature="0.1" actuatorfrcrange="-5 5" actuatorfrclimited="true"/>
    <body pos="0 0 -1"><inertial pos="0 0 0" mass="1" diaginertia="1 1 1"/><joint name="h3" type="hinge"/>
    </body></body></body></body></worldbody>
    <actuator><position joint="h" kp="100" kv="5" gear="2" forcerange="-3 3" forcelimited="true"/>
    <velocity joint="s" kv="7" gear="3"/>
    <motor joint="h2" gear="4" ctrlrange="-1 2" ctrllimited="true" armature="0.5" damping="0.25"/>
    <intvelocity joint="h3" kp="10" actrange="-1 1"/></actuator></mujoco>"""


def test_actuator_kinds():
    with pytest.warns(UserWarning, match=r"actuators other than .* are skipped: \['actuator3'\]"):
        scene = load_mjcf(_ACTUATED.format(option=""))
    m = scene.sap_model
    assert [a.kind for a in scene.mujoco_map.actuators] == ["position", "velocity", "motor"]
    assert m.joint_target_ke.tolist() == [400.0, 0.0, 0.0, 0.0]  # kp·gear²
    assert m.joint_target_kd.tolist() == [20.0, 63.0, 0.0, 0.0]  # kv·gear²
    # position: |forcerange|·gear; motor: min(|ctrlrange|·gear = 8, actuatorfrcrange 5).
    assert m.joint_effort_limit.tolist() == [6.0, math.inf, 5.0, math.inf]
    # Actuator armature/damping reach the joint through gear²: 0.1 + 16·0.5, 16·0.25.
    assert m.joint_armature[2] == pytest.approx(8.1) and m.joint_damping.tolist() == [0.5, 0.0, 4.0, 0.0]
    control = mujoco_ctrl_to_control(scene, np.array([[1.0, 6.0, 0.5, 0.3]]), m.control())
    assert control.joint_target_pos[0, 0] == pytest.approx(1.0 / 2 - 0.2)  # ctrl/gear − ref
    assert control.joint_target_vel[0, 1] == 2.0 and control.joint_act[0, 2] == 2.0
    assert control.joint_act[0, 3] == 0.0  # the skipped actuator leaves its DOF alone
    control = mujoco_ctrl_to_control(scene, np.array([0.0, 0.0, 3.0, 0.0]), m.control())
    assert control.joint_act[0, 2] == 8.0  # ctrl clamped to ctrlrange [-1, 2] like MuJoCo
    # The same drive forces as MuJoCo's actuators at a random state (before our effort clamp).
    d = mujoco.MjData(scene.mj_model)
    d.qpos[:], d.qvel[:], d.ctrl[:] = [0.3, -0.2, 0.1, 0.0], [0.4, 0.5, 0.0, 0.0], [0.01, 0.2, 0.5, 0.0]
    mujoco.mj_forward(scene.mj_model, d)
    control = mujoco_ctrl_to_control(scene, d.ctrl, m.control())
    q, qd = mujoco_qpos_to_joint_q(scene, d.qpos), mujoco_qvel_to_joint_qd(scene, d.qpos, d.qvel)
    tau = (m.joint_target_ke * (control.joint_target_pos[0] - q)
           + m.joint_target_kd * (control.joint_target_vel[0] - qd) + control.joint_act[0])
    np.testing.assert_allclose(np.clip(tau, -m.joint_effort_limit, m.joint_effort_limit), d.qfrc_actuator, atol=TOL)
    with pytest.raises(ValueError, match=r"ctrl: expected shape \(4,\) or \(1, 4\)"):
        mujoco_ctrl_to_control(scene, np.zeros((2, 4)), m.control())


def test_disable_flags():
    flags = '<option><flag gravity="disable" limit="disable" damper="disable" clampctrl="disable"/></option>'
    scene = _load(_ACTUATED.format(option=flags).replace('type="slide"', 'type="slide" range="-1 1" limited="true"'))
    m = scene.sap_model
    assert np.all(m.gravity == 0) and np.all(m.joint_damping == 0) and np.all(np.isinf(m.joint_limit_upper))
    assert m.joint_effort_limit[2] == 5.0  # no ctrl clamp: only the joint's actuatorfrcrange limits the motor
    assert mujoco_ctrl_to_control(scene, np.array([0.0, 0.0, 3.0, 0.0]), m.control()).joint_act[0, 2] == 12.0
    with pytest.warns(UserWarning, match=r"actuation is disabled .* all 4 actuators skipped"):
        scene = load_mjcf(_ACTUATED.format(option='<option><flag actuation="disable"/></option>'))
    assert scene.mujoco_map.actuators == () and np.all(scene.sap_model.joint_target_ke == 0)
    xml = """<mujoco>{}<worldbody><geom type="plane" size="1 1 1"/><body><freejoint/><geom size=".1"/>
        <body pos="0 0 .3"><joint type="hinge"/><geom name="child" size=".1"/></body></body></worldbody></mujoco>"""
    assert len(_load(xml.format("")).sap_model.shape_pair) == 2  # plane–parent and plane–child
    assert len(_load(xml.format('<option><flag contact="disable"/></option>')).sap_model.shape_pair) == 0
    with pytest.warns(UserWarning, match=r"pairs MuJoCo tests but our filters drop .*'geom1', 'child'"):
        load_mjcf(xml.format('<option><flag filterparent="disable"/></option>'))


def test_exclude_and_bitmasks():
    xml = """<mujoco><worldbody>
        <body name="a"><freejoint/><geom name="ga" size=".1"/></body>
        <body name="b"><freejoint/><geom name="gb" size=".1"/></body>
        <body name="c"><freejoint/><geom name="gc" size=".1" contype="2" conaffinity="2"/>
          <geom name="gc2" size=".1" pos="0 0 .5" contype="2" conaffinity="1"/></body></worldbody>
        <contact><exclude body1="b" body2="a"/></contact></mujoco>"""
    scene = _load(xml)
    m = scene.sap_model
    names = {(m.shape_name[a], m.shape_name[b]) for a, b in m.shape_pair}
    # a–b excluded; gc shares no bit with ga/gb; gc2's conaffinity 1 meets their contype 1.
    assert names == {("ga", "gc2"), ("gb", "gc2")}


def test_limits_shapes_and_fixed_bodies():
    xml = """<mujoco><worldbody><geom type="plane" size="1 1 1"/>
        <body name="post" pos="0 0 1" euler="0 0 30"><geom type="box" size=".1 .2 .3" pos=".1 0 0"/>
          <body name="arm"><joint name="j" type="hinge" axis="0 0 1" range="-30 60" limited="true" ref="10"/>
            <inertial pos="0 0 0" mass="1" diaginertia="1 1 1"/>
            <geom type="capsule" fromto="0 0 0 0.5 0 0" size=".05" friction="0.7 0.1 0.1" margin="0.01"/>
            <geom name="can" type="sdf" size=".05 .1"/>
            <body name="tip" pos="0.5 0 0"><geom type="sphere" size=".06"/></body></body></body></worldbody></mujoco>"""
    xml = xml.replace('<geom name="can" type="sdf" size=".05 .1"/>', "")  # (SDF geoms need a plugin)
    scene = load_mjcf(xml)
    m, mj = scene.sap_model, scene.mj_model
    # Degrees in MJCF, ref 10°: our limits are range − ref in radians.
    assert m.joint_limit_lower[0] == pytest.approx(math.radians(-40))
    assert m.joint_limit_upper[0] == pytest.approx(math.radians(50))
    types = dict(zip(m.shape_name, m.shape_type.tolist()))
    assert len(types) == 4 and types["geom0"] == ShapeType.PLANE
    cap = m.shape_type.tolist().index(ShapeType.CAPSULE)
    assert m.shape_material_mu[cap] == 0.7 and m.shape_margin[cap] == 0.01
    assert m.shape_size[cap, 1] == pytest.approx(0.25)
    box = m.shape_type.tolist().index(ShapeType.BOX)
    assert m.shape_body[box] == -1  # a welded (static) body's geoms go to the world, at their world pose
    d = _mujoco_data(scene, mj.qpos0)
    np.testing.assert_allclose(m.shape_transform[box, :3], d.geom_xpos[1], atol=TOL)
    R_WG = spatial.quat_to_matrix(m.shape_transform[box, 3:])
    np.testing.assert_allclose(R_WG, d.geom_xmat[1].reshape(3, 3), atol=TOL)
    assert m.body_static[m.body_index("post")] and not m.body_static[m.body_index("tip")]
    assert np.isnan(m.shape_material_ke).all() and np.isnan(m.shape_material_tau).all()  # solver fallbacks


_URDF = """<robot name="r"><link name="base"><collision><geometry><cylinder radius="0.1" length="0.05"/></geometry>
    </collision></link>
  <link name="l1"><inertial><origin xyz="0 0 0.25"/><mass value="1"/>
      <inertia ixx="0.02" iyy="0.02" izz="0.001" ixy="0" ixz="0" iyz="0"/></inertial>
    <collision><origin xyz="0 0 0.25"/><geometry><box size="0.1 0.1 0.5"/></geometry></collision></link>
  <link name="l2"><inertial><origin xyz="0 0 0"/><mass value="0.5"/>
      <inertia ixx="0.01" iyy="0.01" izz="0.01" ixy="0" ixz="0" iyz="0"/></inertial>
    <collision><geometry><sphere radius="0.05"/></geometry></collision></link>
  <joint name="j1" type="revolute"><parent link="base"/><child link="l1"/><origin xyz="0 0 0.1" rpy="0.3 0 0"/>
    <axis xyz="0 1 0"/><limit lower="-1" upper="1" effort="10" velocity="1"/></joint>
  <joint name="j2" type="prismatic"><parent link="l1"/><child link="l2"/><origin xyz="0 0 0.5"/><axis xyz="0 0 1"/>
    <limit lower="0" upper="0.2" effort="10" velocity="1"/></joint></robot>"""


def test_urdf(tmp_path):
    path = tmp_path / "arm.urdf"
    path.write_text(_URDF)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every geometry maps: nothing dropped
        scene = load_mjcf(path)
    m = scene.sap_model
    assert scene.name == "arm" and scene.source == str(path) and "URDF" in scene.description
    assert m.joint_type.tolist() == [JointType.REVOLUTE, JointType.PRISMATIC]
    assert (m.joint_limit_lower.tolist(), m.joint_limit_upper.tolist()) == ([-1.0, 0.0], [1.0, 0.2])
    assert sorted(ShapeType(t).name for t in m.shape_type) == ["BOX", "CYLINDER", "SPHERE"]
    cyl = m.shape_type.tolist().index(ShapeType.CYLINDER)
    assert m.shape_size[cyl, :2] == pytest.approx([0.1, 0.025]) and m.shape_body[cyl] == -1  # the fixed base
    for qpos in ([0.0, 0.0], [0.4, 0.1], [-0.9, 0.2]):
        _assert_fk_matches(scene, _mujoco_data(scene, qpos))


@pytest.mark.parametrize("xml,match", [
    ("""<mujoco><worldbody><body><inertial pos="0 0 0" mass="1" diaginertia="1 1 1"/><joint type="hinge"/>
        <geom type="plane" size="1 1 1"/></body></worldbody></mujoco>""",
     r"path_or_xml: MuJoCo could not compile the XML .*plane only allowed in static bodies"),
    ("""<mujoco><worldbody><body><joint type="hinge"/><geom size=".1"/>
        <body><freejoint/><geom size=".1"/></body></body></worldbody></mujoco>""",
     r"path_or_xml: MuJoCo could not compile the XML .*free joint can only be used on top level"),
    ("<mujoco><worldbody><body></mujoco>", r"path_or_xml: MuJoCo could not compile the XML"),
    ("/no/such/file.xml", r"path_or_xml: no such file"),
    (3, r"path_or_xml: expected a file path or an XML string, got int"),
    ("""<mujoco><option timestep="0"/><worldbody><body><joint type="hinge"/><geom size=".1"/></body>
        </worldbody></mujoco>""", r"path_or_xml: the XML: option timestep: must be a finite time step > 0 s, got 0"),
])
def test_bad_input(xml, match):
    with pytest.raises(ValueError, match=match):
        load_mjcf(xml)


@pytest.mark.parametrize("num_worlds", [0, -2, 1.5, True, "4"])
def test_bad_num_worlds_is_named_before_the_model_is_read(num_worlds):
    with pytest.raises(ValueError, match=r"^num_worlds: must be an integer >= 1, got "):
        _load(_TWO_BODY, num_worlds=num_worlds)
    with pytest.raises(ValueError, match=r"^num_worlds: must be an integer >= 1, got "):
        load_mjcf("/no/such/file.xml", num_worlds=num_worlds)  # before the file: the argument is what is wrong


def test_unmapped_features_warn():
    xml = """<mujoco><option density="1.2"/><worldbody><body name="a"><freejoint/><geom name="ga" size=".1"/>
          <site name="s1"/></body>
        <body name="b" gravcomp="1"><joint name="h" type="hinge" frictionloss="0.1"/>
          <geom name="gb" size=".1" gap=".01"/>
          <site name="s2"/></body></worldbody>
        <tendon><spatial name="rope"><site site="s1"/><site site="s2"/></spatial></tendon>
        <equality><connect name="link" body1="a" body2="b" anchor="0 0 0"/></equality>
        <contact><pair geom1="ga" geom2="gb"/></contact></mujoco>"""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scene = load_mjcf(xml)
    text = "\n".join(str(w.message) for w in caught)
    for expected in ("tendons are ignored: ['rope']", "joint friction loss is ignored: ['h']",
                     "gravity compensation is ignored: ['b']", "fluid forces", "geom gap is ignored: ['gb']",
                     "explicit <contact><pair> elements are ignored (1)"):
        assert expected in text
    assert all(str(w.message).startswith("load_mjcf: ") for w in caught)
    assert "equality" not in text  # the connect maps to a ball constraint (test_holonomic_mjcf_*)
    assert scene.sap_model.joint_dof_count == 7 and scene.sap_model.constraint_count == 1


def test_ball_limits_and_stiffness_are_dropped_with_a_warning():
    xml = """<mujoco><worldbody><body><inertial pos="0 0 0" mass="1" diaginertia="1 1 1"/>
        <joint name="cone" type="ball" range="0 30" limited="true"/>
        <body pos="0 0 -1"><inertial pos="0 0 0" mass="1" diaginertia="1 1 1"/>
          <joint name="spring" type="hinge" stiffness="3"/></body></body></worldbody></mujoco>"""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scene = load_mjcf(xml)
    text = " ".join(str(w.message) for w in caught)
    assert "ball-joint cone limits are not supported and were dropped: ['cone']" in text
    assert "joint stiffness (passive springs) has no counterpart and is ignored: ['spring']" in text
    assert scene.sap_model.joint_type.tolist() == [JointType.BALL, JointType.REVOLUTE]


def test_loaded_scene_fields():
    scene = _load(_TWO_BODY, num_worlds=2)
    assert dataclasses.asdict(scene.mujoco_map)["nq"] == 11 and scene.mujoco_map.body == (-1, 0, 1)
    assert scene.num_steps == 1000 and scene.solver_kwargs == {} and scene.source is None and scene.name == "mjcf"
    assert scene.max_rigid_contact == 8  # no shapes: the minimum
    assert scene.body_names == ("a", "b") and scene.state.joint_q.shape == (2, 11)
    assert scene.state.joint_qd_order == "public" and not np.any(scene.state.joint_qd)


_SHAPES_XML = """<mujoco><asset>
    <mesh name="wedge" vertex="0 0 0  .2 0 0  0 .1 0  0 0 .1  .2 .1 0  .05 .05 .02"/>
    <hfield name="hills" nrow="3" ncol="4" size=".6 .4 .05 .02" elevation="0 .5 1 .5  .2 .3 .4 .5  1 0 0 1"/>
  </asset><worldbody>
    <geom name="terrain" type="hfield" hfield="hills" pos="0 0 -.1" euler="0 0 20"/>
    <body name="b" pos="0 0 .3"><freejoint/>
      <geom name="cyl" type="cylinder" size=".05 .1" pos=".1 0 0" euler="30 0 0" margin=".002"/>
      <geom name="ell" type="ellipsoid" size=".03 .04 .05" pos="0 .2 0"/>
      <geom name="mesh" type="mesh" mesh="wedge" pos="0 0 .1"/></body>
  </worldbody></mujoco>"""


def test_cylinder_ellipsoid_mesh_and_height_field_are_mapped():
    """Each geom becomes its shape with MuJoCo's size, frame and data: the mesh's compiled vertices
    in MuJoCo's (recentred) geom frame, the height field's heights data·size[2] and base size[3]."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scene = load_mjcf(_SHAPES_XML)
    m, mj = scene.sap_model, scene.mj_model
    d = _mujoco_data(scene, mj.qpos0)
    by_name = {n: i for i, n in enumerate(m.shape_name)}
    assert [ShapeType(int(m.shape_type[by_name[n]])).name for n in ("terrain", "cyl", "ell", "mesh")] == \
        ["HEIGHTFIELD", "CYLINDER", "ELLIPSOID", "CONVEX_MESH"]
    cyl, ell, mesh, hf = (by_name[n] for n in ("cyl", "ell", "mesh", "terrain"))
    assert m.shape_size[cyl, :2].tolist() == [0.05, 0.1] and m.shape_margin[cyl] == 0.002
    assert m.shape_size[ell].tolist() == pytest.approx([0.03, 0.04, 0.05])
    g = mujoco.mj_name2id(mj, mujoco.mjtObj.mjOBJ_GEOM, "mesh")
    verts = m.mesh_vertex[m.mesh_vertex_start[m.shape_source[mesh]]:m.mesh_vertex_start[m.shape_source[mesh] + 1]]
    mj_verts = np.array(mj.mesh_vert[mj.mesh_vertadr[0]:mj.mesh_vertadr[0] + mj.mesh_vertnum[0]], dtype=np.float64)
    assert len(verts) == 5  # the hull's extreme points: the interior point (.05, .05, .02) is not one
    assert all(any(np.array_equal(v, w) for w in mj_verts) for v in verts)
    # Our mesh frame is MuJoCo's geom frame: the vertices land on MuJoCo's world points.
    X = spatial.transform_compose(scene.state.body_q[0, m.shape_body[mesh]], m.shape_transform[mesh])
    world = spatial.transform_point(np.broadcast_to(X, (len(verts), 7)), verts)
    mj_world = d.geom_xpos[g] + mj_verts @ d.geom_xmat[g].reshape(3, 3).T
    assert all(np.abs(mj_world - w).sum(axis=1).min() < TOL for w in world)
    assert m.shape_body[hf] == -1 and m.shape_size[hf].tolist() == pytest.approx([0.6, 0.4, 0.02])
    heights = m.hfield_height[m.hfield_start[0]:m.hfield_start[1]].reshape(m.hfield_shape[0])
    np.testing.assert_allclose(heights, np.array(mj.hfield_data).reshape(3, 4) * 0.05, rtol=0, atol=1e-8)
    np.testing.assert_allclose(m.shape_transform[hf, :3], [0, 0, -0.1], atol=TOL)


def test_a_height_field_on_a_moving_body_is_an_error():
    xml = _SHAPES_XML.replace('<geom name="mesh"', '<geom name="bad" type="hfield" hfield="hills"/><geom name="mesh"')
    with pytest.raises(ValueError, match=r"geom_type: height field geom 'bad' sits on a moving body"):
        load_mjcf(xml)


def test_mesh_quadruped_loads_every_geometry_and_stands():
    """The shipped mesh-collision robot: every geom mapped (no warning), its feet on the ground."""
    from sap_common import scenes
    from sap_ref.collision import CollisionPipeline

    path = os.path.join(os.path.dirname(scenes.__file__), "data", "mesh_quadruped.xml")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scene = load_mjcf(path)
    m = scene.sap_model
    assert m.shape_count == scene.mj_model.ngeom and min(scene.mujoco_map.shape) >= 0
    counts = {t.name: int(np.sum(m.shape_type == t)) for t in ShapeType}
    assert counts == {"PLANE": 1, "SPHERE": 0, "CAPSULE": 4, "BOX": 0, "CYLINDER": 4, "ELLIPSOID": 1,
                      "CONVEX_MESH": 5, "HEIGHTFIELD": 0}
    from sap_common.kinematics import forward_kinematics

    state = scene.state.copy()
    q = state.joint_q[0].copy()
    q[2] -= 0.0051  # lower the robot 0.1 mm into the ground (it starts 5 mm above it)
    state.body_q[:] = forward_kinematics(m, q)
    pipe = CollisionPipeline(m, scene.max_rigid_contact)
    c = pipe.contacts()
    pipe.collide(state, c)
    feet = {m.shape_index(f"{leg}_foot") for leg in ("fl", "fr", "hl", "hr")}
    touching = [(int(c.shape0[0, k]), int(c.shape1[0, k])) for k in range(int(c.count[0]))]
    assert len(touching) == 16 and {b for _, b in touching} == feet  # 4 corners of each sole
    assert np.all(c.phi0[0, :16] < 0) and np.all(c.phi0[0, :16] > -2e-4)


_HC_XML = """<mujoco><custom>{numerics}</custom><worldbody><geom name="floor" type="plane" size="1 1 1"/>
    <body name="a" pos="0 0 .2"><freejoint/><geom name="ball" size=".1"/><geom name="cap" type="capsule"
    fromto="0 0 0 .1 0 0" size=".05"/></body></worldbody></mujoco>"""


def test_hunt_crossley_dissipation_comes_from_custom_numeric_data():
    """Nothing of a geom maps to d (MuJoCo's solref damps its own soft constraint): without custom
    data d stays unset (the solver's fallback, 50 s/m); a ``hunt_crossley_dissipation`` numeric sets
    every geom's, ``hunt_crossley_dissipation:GEOM`` one geom's (and wins)."""
    m = _load(_HC_XML.format(numerics="")).sap_model
    assert np.all(np.isnan(m.shape_material_hcd))
    m = _load(_HC_XML.format(numerics='<numeric name="hunt_crossley_dissipation" data="20"/>'
                                      '<numeric name="hunt_crossley_dissipation:ball" data="5"/>')).sap_model
    d = dict(zip(m.shape_name, m.shape_material_hcd))
    assert d == {"floor": 20.0, "ball": 5.0, "cap": 20.0}


@pytest.mark.parametrize("numerics, match", [
    ('<numeric name="hunt_crossley_dissipation" data="-1"/>', r"custom numeric 'hunt_crossley_dissipation': data "
                                                              r"must be one finite number >= 0 \[s/m\]"),
    ('<numeric name="hunt_crossley_dissipation" data="1 2"/>', r"must be one finite number >= 0"),
    ('<numeric name="hunt_crossley_dissipation:wheel" data="3"/>', r"no geom named 'wheel'"),
])
def test_bad_hunt_crossley_custom_data_is_refused(numerics, match):
    with pytest.raises(ValueError, match=match):
        _load(_HC_XML.format(numerics=numerics))

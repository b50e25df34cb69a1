"""sap_common.scenes: every scene builds, batches, and the anchor mirrors equal Drake's files."""

import numpy as np
import pytest
from conftest import DATA

from sap_common import scenes
from sap_common.config import SapConfig
from sap_common.io import load_json
from sap_common.state import check_control, check_state

# Builder scene name -> the Drake anchor it mirrors.
MIRRORS = {
    "sphere_drop": "sphere_drop", "sphere_slide": "sphere_slide", "box_slide": "box_corners_slide",
    "pendulum_limit": "pendulum_limit", "double_pendulum": "double_pendulum",
    "prismatic_pd": "prismatic_pd", "free_spin": "free_spin", "cylinder_roll": "cylinder_roll",
    "mesh_rock": "mesh_rock",
}
DOCUMENTED_SCENES = ("sphere_drop", "sphere_slide", "box_slide", "box_stack", "pendulum_limit", "double_pendulum",
                 "prismatic_pd", "free_spin", "ball_joint_pendulum", "sphere_on_sphere", "arm_push_block",
                 "cylinder_roll", "mesh_rock", "mesh_quadruped")
# Products of a few rotations and inertia rotations, float64.
MIRROR_TOL = 1e-12


def test_library_has_the_documented_scenes():  # docs/design.md § Scenes
    assert set(DOCUMENTED_SCENES) <= set(scenes.names())


@pytest.mark.parametrize("name", scenes.names())
@pytest.mark.parametrize("num_worlds", [1, 3])
def test_scene_builds_batched(name, num_worlds):
    ok, reason = scenes.availability(name)
    if not ok:  # only 'ant' (gymnasium is not a dependency): an unavailable scene is skipped with a reason
        pytest.skip(f"scene {name!r} {reason}")
    s = scenes.get(name, num_worlds=num_worlds)
    m = s.sap_model
    assert m.num_worlds == num_worlds and s.name == name and s.description
    check_state(m, s.state)
    check_control(m, s.control)
    assert s.state.joint_qd_order == "public" and s.control.joint_f_order == "public"
    assert all(np.all(np.isfinite(getattr(s.state, f))) for f in ("joint_q", "joint_qd", "body_q", "body_qd"))
    assert np.all(s.state.joint_q == s.state.joint_q[:1])  # identical worlds
    assert s.dt > 0 and s.num_steps > 0 and s.max_rigid_contact >= 0
    assert m.joint_dof_count >= 1  # SolverSAP needs an articulated DOF
    SapConfig.from_preset(**{"contact_preset_variant": "approx32", **s.solver_kwargs})


def _resolved_material(m, name, fallback):
    v = getattr(m, name).copy()
    v[np.isnan(v)] = fallback
    return v


@pytest.mark.parametrize("name", MIRRORS)
def test_mirror_equals_drake_anchor(name):
    ours = scenes.get(name)
    ref = load_json(DATA / "drake" / f"{MIRRORS[name]}.json")
    a, b = ours.sap_model, ref.sap_model
    assert (ours.dt, ours.num_steps) == (ref.dt, ref.num_steps)
    assert a.body_name == b.body_name and a.joint_name == b.joint_name and a.shape_name == b.shape_name
    for f in ("body_mass", "body_com", "body_inertia", "joint_X_p", "joint_X_c", "joint_axis", "joint_armature",
              "joint_damping", "joint_target_ke", "joint_target_kd", "joint_effort_limit", "joint_limit_lower",
              "joint_limit_upper", "shape_transform", "shape_size", "gravity", "mesh_vertex", "mesh_vertex_start"):
        np.testing.assert_allclose(getattr(a, f), getattr(b, f), atol=MIRROR_TOL, rtol=0, err_msg=f)
    np.testing.assert_array_equal(a.joint_type, b.joint_type)
    np.testing.assert_array_equal(a.shape_type, b.shape_type)
    np.testing.assert_array_equal(a.shape_pair, b.shape_pair)
    limited = np.isfinite(a.joint_limit_lower) | np.isfinite(a.joint_limit_upper)
    np.testing.assert_array_equal(a.joint_limit_ke[limited], b.joint_limit_ke[limited])
    np.testing.assert_array_equal(a.joint_limit_kd[limited], b.joint_limit_kd[limited])
    # Unset materials take the solver fallbacks, which are Drake's SceneGraph defaults.
    cfg = SapConfig()
    for f, fb in (("shape_material_mu", cfg.fallback_mu), ("shape_material_ke", cfg.fallback_stiffness),
                  ("shape_material_tau", cfg.contact_tau_d)):
        np.testing.assert_array_equal(_resolved_material(a, f, fb), _resolved_material(b, f, fb), err_msg=f)
    for f in ("joint_q", "joint_qd", "body_q", "body_qd"):
        np.testing.assert_allclose(getattr(ours.state, f), getattr(ref.state, f), atol=MIRROR_TOL, rtol=0, err_msg=f)
    for f in ("joint_target_pos", "joint_target_vel", "joint_act"):
        np.testing.assert_array_equal(getattr(ours.control, f), getattr(ref.control, f), err_msg=f)


def test_unknown_scene_lists_the_names():
    with pytest.raises(ValueError, match=r"scene name: 'humanoidz' is not a built-in scene; valid: sphere_drop, "):
        scenes.get("humanoidz")
    with pytest.raises(ValueError, match=r"num_worlds: must be an integer >= 1"):
        scenes.get("sphere_drop", num_worlds=0)
    assert scenes.get("Box-Stack").name == "box_stack"
    assert "Three 10 cm cubes" in scenes.describe("box_stack")


def test_humanoid3_is_three_humanoids_side_by_side_in_one_world():
    ok, reason = scenes.availability("humanoid3")
    if not ok:
        pytest.skip(f"scene 'humanoid3' {reason}")
    import mujoco

    from sap_common.scenes import HUMANOID3_SPACING

    one, three = scenes.get("humanoid"), scenes.get("humanoid3")
    m1, m3 = one.sap_model, three.sap_model
    assert m3.joint_dof_count == 3 * m1.joint_dof_count == 81 and m3.tree_count == 3
    assert (m3.body_count, m3.shape_count - 1) == (3 * m1.body_count, 3 * (m1.shape_count - 1))  # one floor
    assert len(three.mujoco_map.actuators) == 63 and three.mj_model.nv == 81 and three.dt == one.dt == 0.005
    # Each humanoid is the single one, moved by (0, (i - 1) · spacing, 0); the same masses and inertias.
    B = m1.body_count
    for i in range(3):
        offset = np.array([0.0, (i - 1) * HUMANOID3_SPACING, 0.0])
        np.testing.assert_allclose(three.state.body_q[0, i * B:(i + 1) * B, :3], one.state.body_q[0, :, :3] + offset,
                                   atol=MIRROR_TOL, rtol=0)
        np.testing.assert_allclose(m3.body_mass[i * B:(i + 1) * B], m1.body_mass, rtol=0, atol=0)
        assert m3.body_name[i * B] == f"h{i}_torso"
    # Their y extents (capsule end caps and spheres) are more than half a metre apart at the start.
    mj = three.mj_model
    data = mujoco.MjData(mj)
    mujoco.mj_kinematics(mj, data)
    lo, hi = np.full(3, np.inf), np.full(3, -np.inf)
    for g in range(mj.ngeom):
        name = mujoco.mj_id2name(mj, mujoco.mjtObj.mjOBJ_GEOM, g)
        if name == "floor":
            continue
        k, r = int(name[1]), mj.geom_size[g, 0]
        half = mj.geom_size[g, 1] if mj.geom_type[g] == mujoco.mjtGeom.mjGEOM_CAPSULE else 0.0
        ys = data.geom_xpos[g, 1] + np.array([-1, 1]) * half * data.geom_xmat[g].reshape(3, 3)[1, 2]
        lo[k], hi[k] = min(lo[k], ys.min() - r), max(hi[k], ys.max() + r)
    assert np.all(lo[1:] - hi[:-1] > 0.5)

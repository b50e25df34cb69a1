"""sap-record: scene specifications (no pydrake), the field-by-field comparison of recordings, and —
with pydrake 1.51.1 installed — the regeneration of every committed Drake recording.

The regeneration tests skip without pydrake (CI has none): ``pip install -e ".[drake]"`` runs them.
"""

import json
import os
import shutil

import numpy as np
import pytest
from conftest import DATA, DRAKE_ANCHORS

from sap_common import scenes
from sap_common.builder import ModelBuilder, solid_box_inertia
from sap_common.io import LoadedScene
from sap_tools.record.cli import CHECK_RTOL, DERIVED_ARRAYS, REFERENCE_DIR, compare_recordings, main
from sap_tools.record.drake import pydrake_available
from sap_tools.record.spec import NO_DRAKE_COUNTERPART, scene_to_spec

HAVE_PYDRAKE, WHY_NOT = pydrake_available()
needs_pydrake = pytest.mark.skipif(not HAVE_PYDRAKE, reason=f"needs pydrake 1.51.1: {WHY_NOT}")


# ----------------------------------------------------------------------------- specifications (no pydrake)


def test_builtin_scenes_that_drake_can_express_convert():
    spec = scene_to_spec(scenes.get("sphere_slide"))
    ball = spec["geometries"][1]
    assert [j["type"] for j in spec["joints"]] == ["quaternion_floating"]
    assert spec["joints"][0]["initial_q"] == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, pytest.approx(0.1 - 9.81 / 5e4)]
    assert spec["joints"][0]["initial_v"] == [0.0, -10.0, 3.0, 2.0, 0.0, 0.0]  # Drake's [ω, v_O]
    assert ball["point_contact_stiffness"] == 1e5 and ball["relaxation_time"] == 0.02
    assert ball["dynamic_friction"] == ball["static_friction"] == 0.6
    drop = scene_to_spec(scenes.get("sphere_drop"))
    assert "point_contact_stiffness" not in drop["geometries"][0]  # unset: SceneGraph's defaults
    pd = scene_to_spec(scenes.get("prismatic_pd"))
    (a,) = pd["actuation"]["actuators"]
    assert a["pd_gains"] == {"p": 400.0, "d": 40.0} and a["rotor_inertia"] == 0.4 and a["effort_limit"] == 60.0
    assert pd["actuation"]["desired_state_input"]["xd"] == [0.5, 0.0]


def _one_body(**joint):
    b = ModelBuilder()
    body = b.add_body(1.0, inertia=solid_box_inertia(1.0, 0.1, 0.1, 0.1), name="box")
    return b, body


def _scene(builder, name="x", **control) -> LoadedScene:
    model = builder.finalize()
    ctrl = model.control()
    for k, v in control.items():
        getattr(ctrl, k)[:] = v
    return LoadedScene(name=name, sap_model=model, state=model.state(), control=ctrl, dt=1e-3, num_steps=10,
                       max_rigid_contact=4)


def _refusal(scene, feature):
    with pytest.raises(ValueError) as e:
        scene_to_spec(scene)
    assert f"{feature} has no Drake counterpart" in str(e.value) and NO_DRAKE_COUNTERPART[feature] in str(e.value)


def test_features_without_a_drake_counterpart_are_refused_by_name():
    _refusal(scenes.get("ball_joint_pendulum"), "BALL joint")
    _refusal(scenes.get("box_stack"), "BOX shape contact")
    b, body = _one_body()
    b.add_joint_d6(-1, body, linear_axes=[(1, 0, 0)], angular_axes=[(0, 0, 1)])
    _refusal(_scene(b), "D6 joint")
    b, body = _one_body()
    b.add_joint_free(-1, body, damping=0.1)
    _refusal(_scene(b), "FREE joint with armature or damping")
    b, body = _one_body()
    b.add_joint_free(-1, body)
    b.add_shape_capsule(body, radius=0.05, half_length=0.1)
    _refusal(_scene(b), "CAPSULE shape")
    b, body = _one_body()
    b.add_joint_free(-1, body)
    b.add_shape_sphere(body, radius=0.05, margin=1e-3)
    _refusal(_scene(b), "shape margin")
    b, body = _one_body()
    b.add_joint_free(-1, body)
    b.add_shape_sphere(body, radius=0.05, ke=float("inf"))
    _refusal(_scene(b), "rigid contact (ke = inf)")
    b, body = _one_body()
    b.add_joint_revolute(-1, body, axis=(0, 1, 0), limit_lower=-1, limit_upper=1, limit_ke=1e4, limit_kd=10.0)
    _refusal(_scene(b), "joint limit gains other than Drake's")
    b, body = _one_body()
    b.add_joint_revolute(-1, body, axis=(0, 1, 0), limit_lower=-1, limit_upper=1)  # 1e12 and τ = 1 ms = dt: Drake's
    assert scene_to_spec(_scene(b))["joints"][0]["position_lower_limits"] == [-1.0]
    b, body = _one_body()
    b.add_joint_free(-1, body)
    _refusal(_scene(b, joint_f=1.0), "joint_f / body_f")
    b, body = _one_body()
    b.add_joint_prismatic(-1, body, axis=(0, 0, 1), effort_limit=1.0)
    _refusal(_scene(b, joint_act=2.0), "joint_act beyond the effort limit on an undriven DOF")


def test_record_cli_refuses_before_any_simulation(capsys):
    if not HAVE_PYDRAKE:
        assert main(["sphere_drop"]) == 2
        assert "pydrake" in capsys.readouterr().err
        return
    assert main(["ball_joint_pendulum", "--out", "/tmp"]) == 2
    assert "BALL joint has no Drake counterpart" in capsys.readouterr().err


def test_record_cli_usage_errors(capsys):
    assert main([]) == 2
    assert main(["--check"]) == 2
    assert main(["--reference", "sphere_drop"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(e.startswith("sap-record: error: ") for e in err)
    assert [e[len("sap-record: error: "):].split(":")[0] for e in err] == ["scenes", "--check", "--reference"]


# ----------------------------------------------------------------------------- comparison (no pydrake)


@pytest.fixture
def copy_of(tmp_path):
    def copy(name):
        for ext in ("json", "npz"):
            shutil.copy(DATA / "drake" / f"{name}.{ext}", tmp_path / f"{name}.{ext}")
        return tmp_path / f"{name}.json"
    return copy


def test_a_recording_compares_equal_to_itself(copy_of):
    c = compare_recordings(str(copy_of("sphere_slide")), str(DATA / "drake" / "sphere_slide.json"))
    assert c["ok"] and c["fields"] == [] and c["arrays"] == [] and c["npz_bytes_identical"]


def test_comparison_catches_a_changed_array_bit(copy_of):
    path = copy_of("sphere_slide")
    with np.load(path.with_suffix(".npz")) as f:
        arrays = {k: f[k] for k in f.files}
    arrays["q"][1000, 4] = np.nextafter(arrays["q"][1000, 4], 1.0)  # one ulp
    np.savez_compressed(path.with_suffix(".npz"), **arrays)
    c = compare_recordings(str(path), str(DATA / "drake" / "sphere_slide.json"))
    assert not c["ok"] and [a["array"] for a in c["arrays"]] == ["q"] and not c["npz_bytes_identical"]


@pytest.mark.parametrize("array, change, ok", [
    ("dynamics_residual", 3.5e-18, True),  # the recorder's NumPy sum on another CPU: its last bits
    ("contact_hc_fe0", 1e-15, True),
    ("dynamics_residual", 1e-9, False),  # far beyond any rounding
    ("v", 3.5e-18, False),  # read from Drake: bit for bit
])
def test_the_recorders_own_arrays_compare_to_their_rounding(tmp_path, array, change, ok):
    for ext in ("json", "npz"):
        shutil.copy(DATA / "drake" / f"sphere_slide_lagged.{ext}", tmp_path / f"sphere_slide_lagged.{ext}")
    path = tmp_path / "sphere_slide_lagged.json"
    with np.load(path.with_suffix(".npz")) as f:
        arrays = {k: f[k] for k in f.files}
    arrays[array][500, 0] += change
    np.savez_compressed(path.with_suffix(".npz"), **arrays)
    c = compare_recordings(str(path), str(DATA / "drake" / "sphere_slide_lagged.json"))
    assert c["ok"] == ok and [a["array"] for a in c["arrays"]] == [array], c["arrays"]
    assert c["arrays"][0]["derived"] == (array in DERIVED_ARRAYS)


@pytest.mark.parametrize("field, change, ok", [
    (("performance", "wall_time_per_step_s"), 1.0, True),  # run-dependent: skipped
    (("generator",), "somewhere/else.py", True),
    (("checks", "final_vx"), 1e-13, True),  # a recomputed summary: within CHECK_RTOL
    (("checks", "final_vx"), 1e-9, False),
    (("bodies", 1, "mass"), 1e-15, False),  # the model: exact
    (("description",), "changed", False),
])
def test_comparison_tolerates_only_run_fields_and_round_off_in_summaries(copy_of, field, change, ok):
    path = copy_of("sphere_slide")
    doc = json.loads(path.read_text())
    target = doc
    for k in field[:-1]:
        target = target[k]
    target[field[-1]] = target[field[-1]] + change if isinstance(change, float) else change
    path.write_text(json.dumps(doc, indent=1) + "\n")
    c = compare_recordings(str(path), str(DATA / "drake" / "sphere_slide.json"))
    assert c["ok"] == ok, c["fields"]
    assert CHECK_RTOL == 1e-12


# ----------------------------------------------------------------------------- Drake (pydrake 1.51.1)


@needs_pydrake
@pytest.mark.parametrize("path", DRAKE_ANCHORS, ids=lambda p: p.stem)
def test_sap_record_regenerates_every_committed_scene(tmp_path, path):
    """Arrays identical (the recorder's derived ones within CHECK_RTOL); JSON identical except the
    run's own fields (generator, paths, versions, timing) and recomputed summaries within
    CHECK_RTOL·max(1, |x|) (measured ≤ 1.1e-15·max(1, |x|))."""
    from sap_tools.record.cli import record_drake

    json_path, npz_path = record_drake(str(path), str(tmp_path))
    c = compare_recordings(json_path, str(path))
    # every array read from Drake bit for bit; the recorder's own (DERIVED_ARRAYS) to their rounding
    assert c["ok"] and all(a["derived"] for a in c["arrays"]), c
    # every remaining difference is a recomputed summary number, at round-off: ≤ 2e-15·max(1, |x|)
    assert all(f["kind"] == "number" and f["diff"] <= 2e-15 / CHECK_RTOL * f["tolerance"] for f in c["fields"]), \
        c["fields"]


@needs_pydrake
def test_recording_twice_gives_identical_files(tmp_path):
    from sap_tools.record.cli import record_drake

    for d in ("a", "b"):
        os.mkdir(tmp_path / d)
        record_drake("sphere_slide", str(tmp_path / d), steps=50)  # lagged, the plant's default
    for name in ("sphere_slide_lagged.json", "sphere_slide_lagged.npz", "index.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


# The scene library's versions of the committed scenes (sap_common.scenes builds them to the same
# specification). Five reproduce the committed arrays bit for bit; double_pendulum and free_spin
# enter Drake with inertias (and free_spin's initial quaternion and velocity) that this project's
# rotation formulas round differently from the committed file's — 1e-17 in the inertias, 1e-15 in
# free_spin's ω — and their motions amplify that (measured: ≤ 8.5e-14 in q, 2.5e-13 in v).
LIBRARY_SCENES = {"sphere_drop": ("sphere_drop", 0.0), "sphere_slide": ("sphere_slide", 0.0),
                  "box_slide": ("box_corners_slide", 0.0), "pendulum_limit": ("pendulum_limit", 0.0),
                  "prismatic_pd": ("prismatic_pd", 0.0), "double_pendulum": ("double_pendulum", 1e-12),
                  "free_spin": ("free_spin", 1e-11), "cylinder_roll": ("cylinder_roll", 0.0),
                  "mesh_rock": ("mesh_rock", 0.0)}


@needs_pydrake
@pytest.mark.parametrize("name", LIBRARY_SCENES)
def test_the_scene_library_regenerates_the_committed_trajectories(tmp_path, name):
    from sap_common.io import load_recording
    from sap_tools.record.cli import record_drake

    committed, tol = LIBRARY_SCENES[name]
    json_path, _ = record_drake(name, str(tmp_path), approximation="sap")  # the committed files' approximation
    new, old = load_recording(json_path), load_recording(REFERENCE_DIR + f"/{committed}.json")
    for key in ("q", "v", "body_pose_W", "contact_count", "contact_f_Bc_W", "net_actuation"):
        assert new[key].shape == old[key].shape
        assert np.abs(new[key] - old[key]).max(initial=0.0) <= tol, key


@needs_pydrake
def test_recorded_builtin_scene_validates(tmp_path):
    """sphere_on_sphere (world-fixed dome, sphere–sphere then sphere–plane contact) recorded by Drake
    and validated one step at a time by sap_ref."""
    from sap_tools.record.cli import record_drake
    from sap_tools.validate.cli import validate

    json_path, _ = record_drake("sphere_on_sphere", str(tmp_path), steps=600)
    assert json_path.endswith("sphere_on_sphere_lagged.json")  # the plant's default approximation
    r = validate(json_path, every=5)
    assert r["verdict"] == "pass" and r["one_step"]["failing_steps"] == 0, r["one_step"]


@needs_pydrake
@pytest.mark.parametrize("approximation, drake_name", [("lagged", "kLagged"), ("similar", "kSimilar"),
                                                       ("sap", "kSap")])
def test_record_under_each_approximation(tmp_path, approximation, drake_name):
    """--approximation sets the plant's discrete contact approximation and names the recording;
    the file carries it (plant, sap_internals), d per geometry and per pair where it is used, and
    the per-contact Hunt–Crossley data that reproduce the recorded impulses (self-checks)."""
    from sap_common.config import SapConfig
    from sap_common.io import load_json, load_recording
    from sap_tools.record.checks import HC_CHECK_KEYS, SELF_CHECK_LIMIT
    from sap_tools.record.cli import record_drake

    json_path, npz_path = record_drake("incline_stick_slip", str(tmp_path), steps=40, approximation=approximation)
    name = "incline_stick_slip" + ("" if approximation == "sap" else f"_{approximation}")
    assert json_path.endswith(f"{name}.json")
    doc = json.loads(open(json_path).read())
    assert doc["plant"]["discrete_contact_approximation"] == drake_name
    contact = next(k for k in doc["sap_internals"] if k.startswith("contact_constraint"))
    assert ("SapHuntCrossleyConstraint" in contact) == (approximation != "sap")
    assert SapConfig.from_preset(**load_json(json_path).solver_kwargs).discrete_contact_approximation == approximation
    arrays = load_recording(json_path)
    checks = doc["convention_self_checks (all must be ~1e-12 or less)"]
    if approximation == "sap":
        assert "contact_hc_fe0" not in arrays and not set(HC_CHECK_KEYS) & set(checks)
        return
    assert [p["hunt_crossley_dissipation_combined"] for p in doc["collision_candidate_pairs"]] == [8.0] * 4
    assert doc["geometries"][0]["hunt_crossley_dissipation"] == 20.0
    assert doc["geometries"][0]["property_source"]["hunt_crossley_dissipation"] == "explicit"
    assert all(checks[k] <= SELF_CHECK_LIMIT for k in HC_CHECK_KEYS)
    n = arrays["contact_count"]
    fe0, n0, eps = arrays["contact_hc_fe0"], arrays["contact_hc_n0"], arrays["contact_hc_eps"]
    assert np.all(fe0[1:, :4][n[1:] == 4] > 0) and np.all(eps[1:, :4][n[1:] == 4] >= 1e-4)
    assert np.all(n0 >= 0)


def test_approximation_flag_errors(capsys):
    assert main(["--reference", "--approximation", "lagged"]) == 2
    assert "--approximation: --reference re-records" in capsys.readouterr().err
    assert main(["ball.xml", "--engine", "mujoco", "--approximation", "lagged"]) == 2
    assert "--approximation: a Drake setting" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["sphere_drop", "--approximation", "tamsi"])
    assert "invalid choice: 'tamsi'" in capsys.readouterr().err


def test_recording_names_and_hydroelastic_refusal():
    from sap_tools.record.spec import check_spec, recording_name, with_approximation

    assert recording_name("sphere_slide", "lagged") == "sphere_slide_lagged"
    assert recording_name("sphere_slide_lagged", "similar") == "sphere_slide_similar"
    assert recording_name("sphere_slide_similar", "sap") == "sphere_slide"
    spec = with_approximation(scene_to_spec(scenes.get("sphere_slide")), "similar")
    assert spec["plant"]["discrete_contact_approximation"] == "kSimilar" and spec["scene"] == "sphere_slide_similar"
    with pytest.raises(ValueError, match=r"plant\.contact_model: 'kHydroelasticWithFallback' is not supported; "
                                         r"valid: kPoint \(this project implements point contact only"):
        check_spec({**spec, "plant": {**spec["plant"], "contact_model": "kHydroelasticWithFallback"}})
    with pytest.raises(ValueError, match=r"plant\.discrete_contact_approximation: 'lagged' is not valid; valid: "
                                         r"kSap, kLagged, kSimilar"):
        check_spec({**spec, "plant": {**spec["plant"], "discrete_contact_approximation": "lagged"}})


def test_record_cli_writes_a_mujoco_trajectory(tmp_path, capsys):
    pytest.importorskip("mujoco")
    from sap_common.io.trajectory import load_trajectory

    xml = tmp_path / "ball.xml"
    xml.write_text('<mujoco><worldbody><geom type="plane" size="1 1 .1"/><body pos="0 0 .2"><freejoint/>'
                   '<geom type="sphere" size=".1" mass="1"/></body></worldbody></mujoco>')
    assert main([str(xml), "--engine", "mujoco", "--steps", "20", "--out", str(tmp_path)]) == 0
    t = load_trajectory(tmp_path / "ball.mujoco.npz")
    assert (t.convention, t.engine, t.num_steps, t.scene) == ("mujoco", "mujoco", 20, "ball.xml")
    assert main([str(tmp_path / "ball.xml"), "--out", str(tmp_path)]) == 2  # Drake records no MJCF
    assert "--engine mujoco" in capsys.readouterr().err

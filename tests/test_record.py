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
    b.add_shape_sphere(body, radius=0.05, rounding=1e-3)
    _refusal(_scene(b), "rounded shape")
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


# ----------------------------------------------------------------------------- hand-written scene files (no pydrake)


def _mutated(tmp_path, base, change, name=None, folder=None):
    """A copy of the committed scene file ``base`` changed by ``change(doc)``, written as
    ``<folder>/<name>.json`` (default: ``<tmp_path>/<base>.json``)."""
    doc = json.loads((DATA / "drake" / f"{base}.json").read_text())
    change(doc)
    folder = tmp_path if folder is None else folder
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name or base}.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def _set(*keys_value):
    """``doc[k0][k1]... = value``, or ``del`` it when value is the ``DELETE`` marker."""
    *keys, value = keys_value

    def change(doc):
        target = doc
        for k in keys[:-1]:
            target = target[k]
        if value is DELETE:
            del target[keys[-1]]
        else:
            target[keys[-1]] = value
    return change


DELETE = object()

# (committed scene, change, field named in the message, what the message says). The first four
# once failed inside the recorder: a KeyError, Drake's C++ assertion text, a KeyError and a RuntimeError.
BAD_SCENE_FILES = {
    "constraint_on_unknown_body": ("rope_box", _set("constraints", 0, "body_A", "nobody"),
                                   "constraints[0].body_A", "unknown body 'nobody'; bodies: world, anchor, box"),
    "negative_mass": ("sphere_slide", _set("bodies", 1, "mass", -1.0),
                      "bodies[1].mass", "expected a finite number >= 0 [kg], got -1.0"),
    "joint_frame_without_name": ("pendulum_limit", _set("joints", 0, "frame_on_parent_F", "name", DELETE),
                                 "joints[0].frame_on_parent_F.name", "missing; expected the frame's name"),
    "free_joint_not_named_after_its_body": ("sphere_slide", _set("joints", 0, "name", "floater"),
                                            "joints[0].name", "after the body; expected 'ball', got 'floater'"),
    # what else Drake needs beyond the loader's checks
    "child_frame_without_name": ("pendulum_limit", _set("joints", 0, "frame_on_child_M", "name", DELETE),
                                 "joints[0].frame_on_child_M.name", "missing"),
    "offset_frame_named_after_a_body": ("pendulum_limit", _set("joints", 0, "frame_on_parent_F", "name", "world"),
                                        "joints[0].frame_on_parent_F.name", "give this frame a name of its own"),
    "frame_name_used_twice": ("double_pendulum", _set("joints", 1, "frame_on_parent_F", "name", "j1_parent"),
                              "joints[1].frame_on_parent_F.name", "'j1_parent' is used twice"),
    "floating_joint_not_auto_added": ("sphere_slide", _set("joints", 0, "auto_added_for_free_body", False),
                                      "joints[0].auto_added_for_free_body", "expected true"),
    "world_body_named_otherwise": ("pendulum_limit", lambda d: (d["bodies"][0].update(name="ground"),
                                                                d["joints"][0].update(parent_body="ground")),
                                   "bodies[0].name", "Drake's world body (index 0) is named 'world', got 'ground'"),
    "massless_welded_body": ("rope_box", _set("bodies", 1, "mass", 0.0), "bodies[1].mass", "mass > 0 kg"),
    "body_indices_with_a_gap": ("sphere_slide", lambda d: (d["bodies"][1].update(index=2),
                                                           d["geometries"][1].update(body_index=2)),
                                "bodies", "expected the indices 0 to 1 (world = 0), got [0, 2]"),
    "geometry_without_name": ("sphere_slide", _set("geometries", 1, "name", DELETE), "geometries[1].name", "missing"),
    "geometry_index_not_its_position": ("sphere_slide", lambda d: (d["geometries"][0].update(index=1),
                                                                   d["geometries"][1].update(index=0)),
                                        "geometries[0].index", "expected 0, got 1"),
    "geometry_body_not_its_body_index": ("sphere_slide", _set("geometries", 1, "body", "world"),
                                         "geometries[1].body", "is not body_index 1's name 'ball'"),
    "static_below_dynamic_friction": ("sphere_slide", _set("geometries", 1, "static_friction", 0.1),
                                      "geometries[1].static_friction", "static friction >= the dynamic friction 0.6"),
    "default_marked_property_with_other_value": (
        "sphere_slide", _set("geometries", 1, "property_source", "point_contact_stiffness", "scene_graph_default"),
        "geometries[1].point_contact_stiffness", "is not SceneGraph's default 1000000.0"),
    "convex_shape_without_faces": ("mesh_rock", _set("geometries", 1, "shape", "faces", DELETE),
                                   "geometries[1].shape.faces", "missing; expected the hull's faces"),
    "box_shape": ("sphere_slide", _set("geometries", 1, "shape", {"type": "box", "size": [0.1, 0.1, 0.1]}),
                  "geometries[1].shape.type", "BOX shape contact has no Drake counterpart"),
    "actuator_without_name": ("prismatic_pd", _set("actuation", "actuators", 0, "name", DELETE),
                              "actuation.actuators[0].name", "missing"),
    "desired_state_of_wrong_length": ("prismatic_pd", _set("actuation", "desired_state_input", "xd", [0.5]),
                                      "actuation.desired_state_input.xd", "expected 2·nu = 2 finite numbers"),
    "feedforward_of_wrong_length": ("prismatic_pd", _set("actuation", "feedforward_actuation_u_ff", [0.0, 1.0]),
                                    "actuation.feedforward_actuation_u_ff", "expected nu = 1 numbers"),
    "initial_q_of_wrong_length": ("pendulum_limit", _set("joints", 0, "initial_q", [0.1, 0.2]),
                                  "joints[0].initial_q", "expected a list of 1 finite numbers"),
    "initial_q_not_the_state": ("pendulum_limit", _set("joints", 0, "initial_q", [0.3]),
                                "joints[0].initial_q", "[0.3] differs from state.q0[0:1] = [0.8]"),
    "ball_rpy_damping_not_one_number": ("double_pendulum", lambda d: d["joints"][0].update(
        type="ball_rpy", nq=3, nv=3, q_start=0, v_start=0, initial_q=[0.0, 0.0, 0.0], initial_v=[0.0, 0.0, 0.0],
        damping=[0.1, 0.2, 0.3], position_lower_limits=["-inf"] * 3, position_upper_limits=["inf"] * 3)
        or d["joints"][1].update(q_start=3, v_start=3) or d.pop("state"),
        "joints[0].damping", "expected 3 equal numbers, got [0.1, 0.2, 0.3]"),
    "constraint_on_the_world_body": ("rope_box", _set("constraints", 0, "body_A", "world"),
                                     "constraints[0].body_A", "the world body: pydrake 1.51.1 crashes"),
}


@pytest.mark.parametrize("case", BAD_SCENE_FILES)
def test_a_bad_scene_file_is_one_line_naming_the_file_and_field(tmp_path, capsys, case):
    """Checked by the loader and by what Drake needs besides, before pydrake is looked for: the
    same line with and without pydrake, never a KeyError, Drake's C++ assertion or a RuntimeError."""
    base, change, field, what = BAD_SCENE_FILES[case]
    path = _mutated(tmp_path / "in", base, change)
    assert main([str(path), "--out", str(tmp_path), "--steps", "3"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"sap-record: error: {path}: {field}: ") and what in line, line
    assert not list(tmp_path.glob("*.npz"))


def test_every_committed_scene_file_is_recordable_as_it_is():
    """The checks pass every committed file and change none of them (so --reference records them
    as before)."""
    from sap_tools.record.scene_file import read_scene_file

    for path in DRAKE_ANCHORS:
        assert read_scene_file(str(path)) == json.loads(path.read_text()), path.name


def test_a_scene_file_without_a_scene_key_is_named_after_its_file(tmp_path):
    """As load_json names it: <stem> (then _lagged / _similar), not 'scene' for every such file."""
    from sap_common.io import load_json
    from sap_tools.record.cli import _spec

    a = _mutated(tmp_path, "sphere_slide", _set("scene", DELETE), name="ball_a")
    b = _mutated(tmp_path, "rope_box", _set("scene", DELETE), name="rope_b")
    assert load_json(a).name == "ball_a" and _spec(str(a))["scene"] == "ball_a"  # kSap: the scene's own name
    assert _spec(str(a), "lagged")["scene"] == "ball_a_lagged" and _spec(str(b), "lagged")["scene"] == "rope_b_lagged"
    c = _mutated(tmp_path, "sphere_slide", lambda d: (d.pop("scene"), d["plant"].pop("discrete_contact_approximation")),
                 name="ball_c")
    assert _spec(str(c))["scene"] == "ball_c_lagged"  # no approximation in the file: the plant's default
    d = _mutated(tmp_path, "sphere_slide", _set("scene", DELETE), name="index")
    with pytest.raises(ValueError, match=r"index\.json: scene \(the file's name\): 'index' names the recording's"):
        _spec(str(d))


def test_joints_initial_state_comes_from_the_state_as_the_loader_reads_it(tmp_path):
    from sap_tools.record.cli import _spec

    path = _mutated(tmp_path, "pendulum_limit", lambda d: [j.pop("initial_q") for j in d["joints"]])
    assert _spec(str(path))["joints"][0]["initial_q"] == [0.8]  # state.q0, not Drake's default 0


def _committed_recording(folder, name="sphere_slide"):
    folder.mkdir(parents=True, exist_ok=True)
    for ext in ("json", "npz"):
        shutil.copy(DATA / "drake" / f"{name}.{ext}", folder / f"{name}.{ext}")
    return {ext: (folder / f"{name}.{ext}").read_bytes() for ext in ("json", "npz")}


def test_a_different_recording_of_the_same_name_is_not_overwritten(tmp_path, capsys):
    """Refused before any simulation (and before pydrake is looked for), the files untouched; the
    message names the first field that differs."""
    out = tmp_path / "out"
    before = _committed_recording(out)
    other = _mutated(tmp_path / "mine", "sphere_slide", lambda d: (d.pop("scene"), d["bodies"][1].update(mass=2.0)))
    assert main([str(other), "--out", str(out)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"sap-record: error: --out: '{out / 'sphere_slide.json'}' holds a different recording of "
                           "'sphere_slide' (bodies.ball.mass: 2.0 here, 1.0 there); --force overwrites it"), line
    assert main([str(DATA / "drake" / "sphere_slide.json"), "--out", str(out), "--steps", "50"]) == 2  # other length
    assert "(num_steps: 50 here, 2000 there)" in capsys.readouterr().err
    assert {ext: (out / f"sphere_slide.{ext}").read_bytes() for ext in ("json", "npz")} == before
    (out / "sphere_slide.npz").unlink()  # a JSON alone is not a recording (a scene written by hand, say)
    assert main([str(DATA / "drake" / "sphere_slide.json"), "--out", str(out)]) == 2
    assert "exists without 'sphere_slide.npz' beside it" in capsys.readouterr().err
    if not HAVE_PYDRAKE:  # --force passes the refusal and reaches the pydrake check
        assert main([str(other), "--out", str(out), "--force"]) == 2
        assert "--engine drake: pydrake" in capsys.readouterr().err


def test_two_scenes_of_one_run_with_one_name_are_refused(tmp_path, capsys):
    """Two hand-written files without a 'scene' key were once both written as
    scene_lagged.*; now each is named after its file, and two files of the same name differ."""
    a = _mutated(tmp_path / "a", "sphere_slide", _set("scene", DELETE), name="ball")
    b = _mutated(tmp_path / "b", "sphere_slide", lambda d: (d.pop("scene"), d["bodies"][1].update(mass=2.0)),
                 name="ball")
    assert main([str(a), str(b), "--out", str(tmp_path), "--approximation", "lagged"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"sap-record: error: scenes: '{a}' and '{b}' would both be recorded as "
                           f"'{tmp_path / 'ball_lagged.json'}'"), line
    assert "bodies.ball.mass" in line


def test_the_same_recording_is_rewritten_without_force():
    """--reference rewrites its own files; a built-in scene's spec is the same recording as its
    committed recording (numbers read back from Drake within 1e-12·max(1, |x|))."""
    from sap_tools.record.cli import _check_overwrites, _reference_scenes, _spec
    from sap_tools.record.overwrite import check_overwrite, first_difference, recording_identity

    scenes = _reference_scenes()
    _check_overwrites(scenes, [_spec(s) for s in scenes], REFERENCE_DIR, None, False)
    for name in ("rope_box", "geared_pair", "fourbar", "weld_drop", "slider_push", "cylinder_roll", "mesh_rock"):
        doc = json.loads((DATA / "drake" / f"{name}.json").read_text())
        check_overwrite(_spec(name, "sap"), REFERENCE_DIR, doc["recording"]["num_steps"])
    with pytest.raises(ValueError, match=r"holds a different recording of 'rope_box' \(num_steps: 1000 here, 550"):
        check_overwrite(_spec("rope_box", "sap"), REFERENCE_DIR)
    # a value and the same value read back from Drake differ in the last bits at most
    spec = _spec("rope_box", "sap")
    assert spec["bodies"][1]["inertia_about_com_B"][0][0] == 1.6000000000000003e-05
    nudged = json.loads(json.dumps(spec))
    nudged["bodies"][1]["inertia_about_com_B"][0][0] = 1.7e-05
    assert first_difference(recording_identity(nudged), recording_identity(spec)) == \
        "bodies.anchor.inertia_about_com_B[0][0]: 1.7e-05 here, 1.6000000000000003e-05 there"


def test_force_errors(capsys):
    assert main(["--reference", "--check", "--force"]) == 2
    assert main(["ball.xml", "--engine", "mujoco", "--force"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(e.startswith("sap-record: error: --force: ") for e in err)


@needs_pydrake
def test_rerecording_into_the_same_folder_needs_force_only_for_a_different_recording(tmp_path, capsys):
    mine = _mutated(tmp_path / "mine", "sphere_slide", _set("scene", DELETE), name="my_ball")
    out = str(tmp_path)
    assert main([str(mine), "--out", out, "--steps", "20"]) == 0  # named after the file (kSap: no suffix)
    first = (tmp_path / "my_ball.npz").read_bytes()
    assert main([str(mine), "--out", out, "--steps", "20"]) == 0  # the same recording: rewritten
    assert (tmp_path / "my_ball.npz").read_bytes() == first
    assert main([str(mine), "--out", out, "--steps", "30"]) == 2  # a different one: refused, untouched
    assert (tmp_path / "my_ball.npz").read_bytes() == first
    assert main([str(mine), "--out", out, "--steps", "30", "--force"]) == 0
    assert json.loads((tmp_path / "my_ball.json").read_text())["recording"]["num_steps"] == 30
    assert "holds a different recording of 'my_ball' (num_steps: 30 here, 20 there)" in capsys.readouterr().err

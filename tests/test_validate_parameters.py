"""Per-world parameters held to Drake (docs/validation.md § Recordings with other parameters):
recordings of one scene with different parameters (``sap-record --set``) pass as the worlds of ONE
batched run with one ``WorldParameters``, on both backends, with the one-step bar of a single
recording; the parameters matter (the batch with one world's parameters everywhere fails); and
``sap-record --set`` / ``sap-validate --one-batch`` refuse what they cannot do with one line.
"""

import json
import re
import shutil

import numpy as np
import pytest
from conftest import DATA

from sap_tools.record.cli import main as record
from sap_tools.record.cli import parse_parameter_sets
from sap_tools.validate import batch as B
from sap_tools.validate.cli import main as validate

# The committed recordings of slider_push: world k of the batch is RECORDINGS[k].
VARIANTS = ("slider_push", "slider_push_friction", "slider_push_gains", "slider_push_masses",
            "slider_push_stiffness_gravity")
RECORDINGS = [DATA / "drake" / f"{n}.json" for n in VARIANTS]
# What the recordings vary: every field set with `sap-record --set` (docs/validation.md).
VARIED = {"body_com", "body_inertia", "body_mass", "gravity", "joint_armature", "joint_damping", "joint_effort_limit",
          "joint_limit_upper", "joint_target_kd", "joint_target_ke", "shape_material_ke", "shape_material_mu",
          "shape_material_tau"}
EVERY = 10  # one-step rows of the default run: every EVERY-th, plus the onsets below (all under -m slow)


def _rows(batch):
    """Every EVERY-th row and the rows around the events of slider_push's variants: the strike (first
    pusher–ball contact), the limit reached, the drive saturating; taken from every recording."""
    N = batch.contexts[0].traj.num_steps
    rows = set(range(0, N, EVERY))
    for ctx in batch.contexts:
        c, x = ctx.traj.contacts, ctx.traj.extra
        onsets = [int(np.argmax(c["contact_count"] > 1)) - 1]  # the second contact: pusher on ball
        residual = np.abs(x["dynamics_residual"]) > 1e-4  # a limit impulse (docs of the recording format)
        if residual.any():
            onsets.append(int(np.argmax(residual.any(axis=1))) - 1)
        for n in onsets:
            rows |= set(range(max(n - 2, 0), min(n + 5, N)))
    return sorted(rows)


@pytest.fixture(scope="module")
def batch():
    return B.load_batch(RECORDINGS)


def test_the_batch_carries_the_varied_fields_per_world(batch):
    assert set(batch.values) == VARIED
    assert batch.model.num_worlds == len(VARIANTS)
    for name, v in batch.values.items():
        assert v.shape[0] == len(VARIANTS)
        for w, ctx in enumerate(batch.contexts):
            np.testing.assert_array_equal(v[w], getattr(ctx.scene.sap_model, name), err_msg=f"{name} world {w}")


def _assert_every_world_passes(reports):
    for name, r in zip(VARIANTS, reports):
        assert r["verdict"] == "pass" and r["not_converged_steps"] == 0, (name, r["failing"][:3])
        assert r["worst_error_over_bar"] <= 1.0 and r["failing_steps"] == 0, name


@pytest.mark.parametrize("backend", ["ref", "gpu"])
def test_drake_recordings_with_other_parameters_pass_as_one_batch(batch, backend, device):
    _assert_every_world_passes(B.batch_one_step(batch, backend, device, _rows(batch)))


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["ref", "gpu"])
def test_every_step_of_every_world_passes_and_the_batched_rollout_stays_in_its_envelopes(batch, backend, device):
    _assert_every_world_passes(B.batch_one_step(batch, backend, device))
    for name, r in zip(VARIANTS, B.batch_rollout(batch, backend, device)):
        assert r["verdict"] == "pass" and r["not_converged_steps"] == 0, (name, r.get("message"))


@pytest.mark.parametrize("backend", ["ref", "gpu"])
def test_the_parameters_matter(batch, backend, device):
    """World 0's parameters in every world: each other world misses its recording by far more than
    the bar (so the passing batch above reads every world's own parameters), world 0 still passes."""
    first = {name: np.broadcast_to(v[:1], v.shape).copy() for name, v in batch.values.items()}
    reports = B.batch_one_step(batch, backend, device, _rows(batch), values=first)
    assert reports[0]["verdict"] == "pass"
    for name, r in zip(VARIANTS[1:], reports[1:]):
        assert r["verdict"] == "FAIL" and r["worst_error_over_bar"] > 1e3, (name, r["worst_error_over_bar"])


def test_the_cli_validates_one_batch_and_reports_each_world(capsys):
    rc = validate([str(p) for p in RECORDINGS] + ["--one-batch", "--steps", "40", "--quiet", "--json"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "5 recordings of slider_push as one batch (40 steps of 0.001 s) with sap_ref" in out
    for w, name in enumerate(VARIANTS):
        assert f"world {w} ({DATA / 'drake' / name}.json): pass" in out
    assert "per-world parameters: " + ", ".join(sorted(VARIED)) in out


@pytest.mark.parametrize("argv, message", [
    (["sphere_slide"], "--one-batch: give at least two recordings of one scene, got 1"),
    (["slider_push", "sphere_slide"], "sphere_slide.json: 2000 steps of 0.001 s, the first recording 800 of 0.001 s"),
    (["slider_push", "slider_push_gains", "--junit", "x.xml"], "--junit: not with --one-batch"),
    (["slider_push", "slider_push_gains", "--strict"], "--strict: not with --one-batch"),
    (["slider_push", "slider_push_lagged"], None),
])
def test_the_cli_refuses_what_one_batch_cannot_hold(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = [str(DATA / "drake" / f"{a}.json") if not a.startswith("-") and not a.endswith(".xml") else a
            for a in argv]
    if message is None:  # a recording that is not committed: named as a file that does not exist
        assert validate(args + ["--one-batch"]) == 2
        assert "slider_push_lagged.json" in capsys.readouterr().err
        return
    assert validate(args + ["--one-batch"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert re.search(message, err), err


def test_a_recording_of_another_scene_is_refused_naming_the_field(tmp_path):
    """The ball 1 cm larger: not a per-world parameter (a shape's size is the model's), so not one batch."""
    spec = json.loads((DATA / "drake" / "slider_push_friction.json").read_text())
    ball = next(g for g in spec["geometries"] if g["name"] == "ball_sphere")
    ball["shape"]["radius"] = 0.11
    (tmp_path / "bigger_ball.json").write_text(json.dumps(spec))
    shutil.copy(DATA / "drake" / "slider_push_friction.npz", tmp_path / "bigger_ball.npz")
    with pytest.raises(ValueError, match=r"bigger_ball.json: shape_size differs from .*slider_push.json's, and it is "
                                         r"not a per-world parameter \(valid: body_mass"):
        B.load_batch([RECORDINGS[0], tmp_path / "bigger_ball.json"])


@pytest.mark.parametrize("items, name, message", [
    (["body_mass"], "x", "--set: expected FIELD=VALUE"),
    (["joint_type=[1]"], "x", "--set: name: 'joint_type' is not a per-world parameter; valid: body_mass"),
    (["body_mass=[1, oops]"], "x", "--set: body_mass: '\\[1, oops\\]' is not a JSON number or list of numbers"),
    (["body_mass=[1, 2]", "body_mass=[3, 4]"], "x", "--set: body_mass given twice"),
    (["body_mass=[1, 2]"], None, "--name: a recording with --set needs its own name"),
    (["body_mass=[1, 2]"], "a b", "--name: letters, digits, '_' and '-' only"),
])
def test_record_set_refuses_bad_items(items, name, message):
    with pytest.raises(ValueError, match=message):
        parse_parameter_sets(items, name)


def test_record_set_parses_json_values_with_infinity():
    fields = parse_parameter_sets(["joint_effort_limit=[60, Infinity]", "gravity=[0, 0, -7]"], "g7")
    np.testing.assert_array_equal(fields["joint_effort_limit"], [60.0, np.inf])
    assert fields["gravity"].dtype == np.float64


@pytest.mark.parametrize("argv, message", [
    (["slider_push", "--set", "body_mass=[1, 2, 3]", "--name", "x"],
     "--set: body_mass: expected shape (2,) (scene 'slider_push'), got (3,)"),
    (["slider_push", "--set", "body_mass=[1, -2]", "--name", "x"], "body_mass"),
    (["sphere_slide", "slider_push", "--set", "body_mass=[1, 2]", "--name", "x"], "--set/--name: record one"),
    (["slider_push", "--set", "body_mass=[1, 2]", "--name", "x", "--engine", "mujoco"], "--set/--name: record one"),
])
def test_record_set_is_checked_before_any_simulation(argv, message, capsys, tmp_path):
    assert record(argv + ["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not list(tmp_path.iterdir())

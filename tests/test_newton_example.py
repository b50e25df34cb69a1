"""examples/newton_robot_fall.py runs headless on the CPU and writes a Newton recording of the fall."""

import importlib.util
import pathlib
import subprocess
import sys

import numpy as np
import pytest

newton = pytest.importorskip("newton")

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "newton_robot_fall.py"
FRAMES = 60  # 1 s at 60 frames/s: dropped from 0.6 m, the robot lands and tips over


def _example_module():
    spec = importlib.util.spec_from_file_location("newton_robot_fall", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # ~40 s on two cores: the default run covers the conversion and the solver in test_newton_*.py
def test_example_records_the_robot_falling(tmp_path):
    out = tmp_path / "robot_fall.json"
    run = subprocess.run([sys.executable, str(EXAMPLE), "--viewer", "file", "--out", str(out),
                          "--num-frames", str(FRAMES), "--device", "cpu"],
                         capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "status [1]" in run.stdout, run.stdout  # the last step converged
    assert out.exists() and out.stat().st_size > 0
    # Newton's own file viewer loads the recording back, frame by frame.
    viewer = newton.viewer.ViewerFile(str(out))
    viewer.load_recording()
    assert viewer.get_frame_count() == FRAMES + 1 and viewer.has_model()
    model = _example_module().build_robot(device="cpu")
    state = model.state()
    torso = model.body_label.index("torso")
    heights = []
    for frame in range(FRAMES + 1):
        viewer.load_state(state, frame)
        body_q = state.body_q.numpy()
        assert np.isfinite(body_q).all()
        heights.append(body_q[torso, 2])
    assert heights[0] == pytest.approx(0.6)
    assert 0.0 < heights[-1] < 0.3  # on the ground, not through it
    assert min(heights) > -0.01


def test_example_rejects_bad_arguments():
    with pytest.raises(SystemExit):
        _example_module().main(["--num-frames", "0"])


def test_an_unwritable_out_is_refused_before_the_run(tmp_path, monkeypatch, capsys):
    module = _example_module()
    monkeypatch.setattr(module, "build_robot", lambda *a, **k: pytest.fail("the run started before --out was checked"))
    for bad, message in ((tmp_path / "no_such_dir" / "x.json", "the directory"), (tmp_path, "is a directory")):
        with pytest.raises(SystemExit) as e:
            module.main(["--out", str(bad), "--device", "cpu"])
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert e.value.code == 2 and err.startswith("newton_robot_fall.py: error: --out: ") and message in err, err
    kept = tmp_path / "kept.json"
    kept.write_text("old")
    monkeypatch.setattr(module, "build_robot", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("stop here")))
    with pytest.raises(RuntimeError, match="stop here"):
        module.main(["--out", str(kept), "--device", "cpu"])
    assert kept.read_text() == "old"  # checked by opening it for appending, not by truncating it


def test_example_without_out_writes_into_a_temporary_folder_not_the_working_directory(tmp_path, monkeypatch, capsys):
    # In this process, with this project's collision (the slow test above runs the script as a
    # command, with Newton's): a subprocess and Newton's convex narrow phase, which no other test of
    # the default run takes, cost ~45 s on two cores with an empty kernel cache.
    monkeypatch.chdir(tmp_path)
    assert _example_module().main(["--viewer", "file", "--num-frames", "1", "--device", "cpu",
                                   "--collision", "sap"]) == 0
    stdout = capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []  # nothing in the working directory
    (line,) = [ln for ln in stdout.splitlines() if ln.startswith("recording: ")]
    path = pathlib.Path(line[len("recording: "):])
    assert path.is_file() and path.stat().st_size > 0 and path.parent.name.startswith("sap-newton-example-")
    import shutil

    shutil.rmtree(path.parent)


def test_newton_docs_limits_agree_with_the_mapping_table_and_the_code():
    """docs/newton.md names the shape types the conversion maps, in its table and in § Limits alike:
    the table has a row for every ``newton.GeoType`` (mapped, refused, or not a collision shape), its
    mapped rows are the conversion's types, and § Limits lists the same as converted."""
    import re

    from sap_newton import convert

    docs = (EXAMPLE.parents[1] / "docs" / "newton.md").read_text(encoding="utf-8")
    limits = " ".join(docs.split("## Limits", 1)[1].split("\n## ", 1)[0].split())
    mapped = {newton.GeoType(t).name for t in convert._NEWTON_SHAPES}
    rows = {}  # GeoType name -> what the table's row says SAP does
    for line in docs.splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if len(cells) == 2 and re.fullmatch(r"[A-Z_]+(, [A-Z_]+)*", cells[0]):
            rows.update({name: cells[1] for name in cells[0].split(", ")})
    assert set(rows) == {g.name for g in newton.GeoType}
    said_mapped = {name for name, what in rows.items() if not what.startswith(("refused", "not "))}
    assert said_mapped == mapped
    converted = re.search(r"Of Newton's collision shapes, (.+?) are converted as they are, a MESH as its convex hull",
                          limits).group(1)
    assert set(re.findall(r"\b[A-Z_]{3,}\b", converted)) | {"MESH"} == mapped
    for name in set(rows) - mapped - {"GAUSSIAN", "NONE"}:
        assert re.search(rf"\b{name}\b is refused", limits), name

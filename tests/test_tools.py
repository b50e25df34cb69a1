"""tools.scenes (the sap-scenes command)."""

import json

from tools.scenes import main
from conftest import DATA


def test_lists_every_scene(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    for name in ("sphere_drop", "box_stack", "arm_push_block"):
        assert name in out


def test_describes_a_scene_and_prints_json_last(capsys):
    assert main(["box_stack", "--num-worlds", "4", "--json"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert "scene box_stack" in lines[0]
    row = json.loads(lines[-1])
    assert row["num_worlds"] == 4 and row["bodies"] == 3 and row["nv"] == 18


def test_reads_a_json_scene_file(capsys):
    assert main([str(DATA / "drake" / "prismatic_pd.json")]) == 0
    assert "PRISMATIC world -> slider" in capsys.readouterr().out


def test_bad_name_is_an_error(capsys):
    assert main(["nope"]) == 2
    assert "valid: sphere_drop" in capsys.readouterr().err


def test_demo_runs_and_plots(tmp_path, capsys):
    from tools.demo import main as demo

    out = tmp_path / "demo.png"
    assert demo(["sphere_drop", "--steps", "30", "--quiet", "--out", str(out), "--json"]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert row["scene"] == "sphere_drop" and row["converged_fraction"] == 1.0
    assert out.stat().st_size > 1000
    assert demo(["nope", "--quiet"]) == 2


def test_compare_presets_reports_deltas(capsys):
    from tools.compare_presets import main as compare

    assert compare(["sphere_slide", "--steps", "3", "--every", "2", "--quiet", "--json"]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert len(row["rows"]) == 2 and row["summary"]["model"]["max"] > row["summary"]["precision"]["max"] > 0

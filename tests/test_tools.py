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


def test_demo_on_sap_gpu_prints_what_sap_ref_prints(tmp_path, capsys, device):
    from tools.demo import main as demo

    args = ["box_stack", "--steps", "40", "--print-every", "20", "--quiet", "--preset", "approx64"]
    assert demo(args + ["--out", str(tmp_path / "ref.png")]) == 0
    ref = capsys.readouterr().out.splitlines()
    assert demo(args + ["--backend", "gpu", "--device", str(device), "--out", str(tmp_path / "gpu.png")]) == 0
    gpu = capsys.readouterr().out.splitlines()
    # The summary lines (contacts, iterations, min φ to 0.1 µm, KE to 0.1 mJ, status) agree.
    assert ref[:-1] == gpu[:-1] and len(ref) >= 4
    assert demo(["box_stack", "--backend", "cuda"]) == 2
    assert "--backend: must be one of" in capsys.readouterr().err
    assert demo(["box_stack", "--device", "cpu"]) == 2


def test_compare_presets_reports_deltas(capsys):
    from tools.compare_presets import main as compare

    assert compare(["sphere_slide", "--steps", "3", "--every", "2", "--quiet", "--json"]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert len(row["rows"]) == 2 and row["summary"]["model"]["max"] > row["summary"]["precision"]["max"] > 0


def test_compare_backends_reports_every_stage(capsys):
    from tools.compare_backends import main as compare

    assert compare(["box_stack", "--steps", "12", "--every", "11", "--quiet", "--json", "--preset", "approx64"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    row = json.loads(lines[-1])
    assert row["compared"] == 2 and "max |ref − gpu|" in lines[1]
    stages = row["stages"]
    assert {"contact_count", "phi0", "A", "v_star", "J", "w", "R", "v_hat", "gamma", "ell", "grad", "H", "v1"} <= set(stages)
    assert stages["contact_count"]["max_abs_diff"] == 0 and stages["contact_count"]["ref_scale"] > 0
    # approx64 is float64 throughout: every stage before the Newton iterates agrees to rounding.
    for key in ("phi0", "A", "v_star", "J", "w", "R", "gamma", "H"):
        assert stages[key]["max_abs_diff"] <= 1e-10 * max(1.0, stages[key]["ref_scale"]), key
    assert compare(["box_stack", "--device", "tpu", "--quiet"]) == 2
    assert "--device" in capsys.readouterr().err

"""sap_tools.scenes, sap_tools.demo, sap_tools.compare_presets (sap-scenes, sap-demo, sap-compare-presets)."""

import json
import os

import numpy as np
import pytest
from conftest import DATA, DRAKE_ANCHORS

from sap_common import scenes
from sap_tools.scenes import main


def test_lists_every_scene_and_the_drake_scene_files(capsys):
    assert main(["--json"]) == 0
    out = capsys.readouterr().out
    for name in ("sphere_drop", "box_stack", "arm_push_block"):
        assert name in out
    # What --help promises: the Drake scene files, by a path sap-demo accepts.
    listed = json.loads(out.strip().splitlines()[-1])["scene_files"]
    assert [os.path.basename(r["name"]) for r in listed] == [p.name for p in DRAKE_ANCHORS]
    for r in listed:
        assert r["name"] in out and os.path.samefile(r["name"], DATA / "drake" / os.path.basename(r["name"]))
    assert next(r for r in listed if r["name"].endswith("prismatic_pd.json"))["dt"] == 0.01


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
    from sap_tools.demo import main as demo

    out = tmp_path / "demo.png"
    assert demo(["sphere_drop", "--steps", "30", "--quiet", "--out", str(out), "--json"]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert row["scene"] == "sphere_drop" and row["converged_fraction"] == 1.0
    assert out.stat().st_size > 1000
    assert demo(["nope", "--quiet"]) == 2


def test_demo_runs_the_mesh_collision_robot_from_its_mjcf_file(tmp_path, capsys):
    """The quadruped whose feet and chassis are convex meshes (sap_common/data/mesh_quadruped.xml):
    it falls the 5 mm it starts above the ground and stands on its 16 sole corners."""
    import os

    from sap_common import scenes

    path = os.path.join(os.path.dirname(scenes.__file__), "data", "mesh_quadruped.xml")
    lines, row = _demo_json(capsys, [path, "--steps", "60", "--out", str(tmp_path / "robot.png")])
    assert row["scene"] == "mesh_quadruped" and row["converged_fraction"] == 1.0
    assert row["max_contacts"] == 16


def _demo_json(capsys, argv):
    from sap_tools.demo import main as demo

    assert demo(argv + ["--quiet", "--json"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    return lines, json.loads(lines[-1])


def test_demo_approximation_flag_runs_hunt_crossley_and_refuses_a_rigid_shape_before_the_run(tmp_path, capsys,
                                                                                              monkeypatch):
    import dataclasses

    import sap_tools.demo as demo

    out = ["--steps", "3", "--out", str(tmp_path / "d.png")]
    lines, row = _demo_json(capsys, ["box_stack", "--approximation", "lagged"] + out)
    assert row["approximation"] == "lagged" and lines[0].endswith("contact approximation lagged (--approximation)")
    _, row = _demo_json(capsys, ["box_stack"] + out)
    assert row["approximation"] == "sap"
    scene = scenes.get("box_stack")
    ke = np.full(scene.sap_model.shape_count, np.inf)
    rigid = dataclasses.replace(scene, sap_model=scene.sap_model.replace(shape_material_ke=ke))
    monkeypatch.setattr(demo, "load_scene_arg", lambda name, num_worlds: rigid)
    monkeypatch.setattr(demo, "run", lambda *a, **k: pytest.fail("the run started before the check"))
    assert demo.main(["box_stack", "--approximation", "similar"] + out) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("sap-demo: error: shape_material_ke[") and "inf (rigid)" in err[0]


def test_demo_runs_a_scene_file_with_its_own_settings_flags_override(tmp_path, capsys):
    scene = str(DATA / "drake" / "prismatic_pd.json")  # Drake's settings: drake preset, exact line search
    out = ["--steps", "3", "--out", str(tmp_path / "d.png")]
    lines, row = _demo_json(capsys, [scene] + out)
    assert (row["preset"], row["line_search"], row["max_iterations"]) == ("drake", "exact_root", 100)
    assert lines[0].startswith("solver: preset drake (scene file); line search exact_root (scene file)")
    lines, row = _demo_json(capsys, [scene, "--preset", "approx64"] + out)
    assert (row["preset"], row["line_search"]) == ("approx64", "exact_root")
    assert lines[0].startswith("solver: preset approx64 (--preset); line search exact_root (scene file)")
    _, row = _demo_json(capsys, [scene, "--line-search", "armijo_decay"] + out)
    assert (row["preset"], row["line_search"]) == ("drake", "armijo_decay")
    lines, row = _demo_json(capsys, ["box_stack"] + out)  # a built-in scene: approx32 and its defaults
    assert (row["preset"], row["line_search"]) == ("approx32", "exact_root")
    assert lines[0] == "solver: preset approx32 (default)"


def test_demo_figure_log_time_height_changes_and_legends_outside_the_data(capsys):
    pytest.importorskip("matplotlib", reason="the demo's figure needs matplotlib (the 'plot' extra)")
    import matplotlib.pyplot as plt

    from sap_common import scenes
    from sap_tools.demo import figure, run

    scene = scenes.get("box_stack")
    rec = run(scene, 30, {"contact_preset_variant": "approx32"}, 100, True)
    fig = figure(scene, rec)
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        axes = fig.axes
        assert len(axes) == 3
        t = np.array(rec["t"])
        for ax in axes:  # settling happens in the first steps of a long run: time is logarithmic
            assert ax.get_xscale() == "log"
            assert ax.get_xlim() == pytest.approx((t[0], t[-1]))
        # Heights are changes z − z(0) in mm (box2 settles a few mm; absolute heights hide it).
        lines = axes[0].get_lines()
        assert [line.get_label() for line in lines] == list(scene.body_names)
        dz = 1e3 * (np.array(rec["height"]) - scene.state.body_q[0, :, 2])
        np.testing.assert_allclose(lines[2].get_ydata(), dz[:, 2])
        assert "z(0)" in axes[0].get_ylabel() and "[mm]" in axes[0].get_ylabel()
        # The weight line: Σ m g of three 0.5 kg boxes, which the ground contacts carry at rest.
        weight = [line for line in axes[1].get_lines() if line.get_label().startswith("weight")]
        assert len(weight) == 1 and weight[0].get_ydata()[0] == pytest.approx(1.5 * 9.81)
        # Every legend sits outside every axes' data area and inside the figure.
        figure_box = fig.bbox
        for ax in axes:
            legend = ax.get_legend()
            assert legend is not None
            box = legend.get_window_extent(renderer)
            for other in axes:
                assert not box.overlaps(other.get_window_extent(renderer)), (ax.get_ylabel(), other.get_ylabel())
            assert box.x0 >= figure_box.x0 and box.x1 <= figure_box.x1 and box.y0 >= figure_box.y0
    finally:
        plt.close(fig)


def test_demo_on_sap_gpu_prints_what_sap_ref_prints(tmp_path, capsys, device):
    from sap_tools.demo import main as demo

    args = ["box_stack", "--steps", "40", "--print-every", "20", "--quiet", "--preset", "approx64"]
    assert demo(args + ["--out", str(tmp_path / "ref.png")]) == 0
    ref = capsys.readouterr().out.splitlines()
    assert demo(args + ["--backend", "gpu", "--device", str(device), "--out", str(tmp_path / "gpu.png")]) == 0
    gpu = capsys.readouterr().out.splitlines()
    # The summary lines (contacts, iterations, min φ to 0.1 µm, KE to 0.1 mJ, status) agree.
    assert ref[:-1] == gpu[:-1] and len(ref) >= 5
    assert demo(["box_stack", "--backend", "cuda"]) == 2
    assert "--backend: must be one of" in capsys.readouterr().err
    assert demo(["box_stack", "--device", "cpu"]) == 2


def test_compare_presets_reports_deltas(capsys):
    from sap_tools.compare_presets import main as compare

    assert compare(["sphere_slide", "--steps", "3", "--every", "2", "--quiet", "--json"]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert len(row["rows"]) == 2 and row["summary"]["model"]["max"] > row["summary"]["precision"]["max"] > 0


def test_compare_presets_takes_the_approximation_as_a_dimension(capsys):
    from sap_tools.compare_presets import main as compare

    assert compare(["incline_stick_slip", "--steps", "3", "--every", "2", "--quiet", "--json",
                    "--approximations", "sap", "lagged", "similar"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    row = json.loads(lines[-1])
    assert row["approximations"] == ["sap", "lagged", "similar"] and len(row["rows"]) == 2
    s = row["summary"]
    assert {"precision_lagged", "model_similar", "approximation_lagged", "approximation_similar"} <= set(s)
    # The contact model moves the first step (sliding on four corners) far more than precision does.
    assert s["approximation_lagged"]["max"] > 100 * s["precision_lagged"]["max"] > 0
    assert "Δ lagged−sap" in " ".join(lines)
    assert compare(["incline_stick_slip", "--approximations", "tamsi", "--quiet"]) == 2
    assert "--approximations: 'tamsi' is not valid; valid: sap, lagged, similar" in capsys.readouterr().err


def test_compare_backends_reports_every_stage(capsys):
    from sap_tools.compare_backends import main as compare

    assert compare(["box_stack", "--steps", "12", "--every", "11", "--quiet", "--json", "--preset", "approx64"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    row = json.loads(lines[-1])
    assert row["compared"] == 2 and "max |ref − gpu|" in lines[2] and row["passed"]
    stages = row["stages"]
    assert {"contact_count", "phi0", "A", "v_star", "J", "w", "R", "v_hat", "gamma", "ell", "grad", "H",
            "v1"} <= set(stages)
    assert stages["contact_count"]["max_abs_diff"] == 0 and stages["contact_count"]["ref_scale"] > 0
    # approx64 is float64 throughout: every stage before the Newton iterates agrees to rounding.
    for key in ("phi0", "A", "v_star", "J", "w", "R", "gamma", "H"):
        assert stages[key]["max_abs_diff"] <= 1e-10 * max(1.0, stages[key]["ref_scale"]), key
    assert compare(["box_stack", "--device", "tpu", "--quiet"]) == 2
    assert "--device" in capsys.readouterr().err


def test_benchmark_collision_times_both_modes_on_the_same_pile(capsys, device):
    from sap_tools.benchmark.collision import main as bench

    assert bench(["--shapes", "100", "--num-worlds", "2", "--repeats", "1", "--skip-ref", "--device", str(device),
                  "--json"]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert row["shapes"] == 100 and row["candidate_pairs"] > 4000 and row["gpu_same_contacts"] is True
    assert 0 < row["tested_pairs_mean"] < 0.2 * row["candidate_pairs"] and row["gpu_ms_aabb"] > 0
    assert bench(["--shapes", "10"]) == 2 and "at least 100 shapes" in capsys.readouterr().err

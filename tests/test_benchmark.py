"""sap_tools.benchmark.cli and sap_tools.benchmark.plot (sap-benchmark, sap-plot-benchmark): smoke runs on the
test device, the device control noise, the iteration percentile, and flag errors."""

import importlib.util
import json
import math

import numpy as np
import pytest
import warp as wp

import sap_tools.benchmark.cli as bench
import sap_tools.benchmark.runs as bench_runs
from sap_common import scenes
from sap_tools.benchmark.cli import main, noise_channels, percentile_from_histogram
from sap_tools.benchmark.measure import breakdown_table, kernel_times

# sphere_drop with one Newton iteration per step: the most steps of its impact that may need more.
# One on Warp's CPU device, three on an H200; more would mean a step away from the impact failed.
IMPACT_CAPPED_STEPS_MAX = 4

# Keys every run reports (docs/benchmarks.md § Method).
RUN_KEYS = {"valid", "world_steps_per_s", "ms_per_step", "num_worlds", "preset", "device", "realtime_factor",
            "gpu_memory_mib", "newton_mean", "newton_p95", "line_search_mean", "line_search_p95",
            "contacts_per_world_mean", "converged_fraction", "capped_steps", "world_steps", "truncated_contacts",
            "graph", "invalid_reason"}
SOLVER_STAGES = {
    "staged": ("boundary_in", "free_motion", "contact_jacobian", "constraints", "newton_evaluate", "linear_solve",
               "line_search", "newton_finish", "integration", "boundary_out"),
    "fused": ("boundary_in", "free_motion", "contact_jacobian", "constraints", "newton_fused", "integration",
              "boundary_out")}
# Sample-moment tolerance of the noise test: 4 standard errors of a 20000-sample std estimate.
NOISE_SAMPLES = 20000
NOISE_STD_TOL = 4.0 / np.sqrt(2 * NOISE_SAMPLES)
HAVE_MJWARP = importlib.util.find_spec("mujoco_warp") is not None and importlib.util.find_spec("mujoco") is not None


def _last_json(capsys):
    out = capsys.readouterr().out.strip().splitlines()
    return out, json.loads(out[-1])


def test_smoke_run_is_valid_and_reports_every_key(capsys, device):
    assert main(["sphere_drop", "--num-worlds", "4", "--steps", "5", "--warmup", "2", "--device", str(device),
                 "--json", "--quiet"]) == 0
    lines, row = _last_json(capsys)
    assert RUN_KEYS <= set(row) and row["valid"] is True and row["num_worlds"] == 4 and row["preset"] == "approx32"
    assert row["device"] == str(device) and row["world_steps_per_s"] > 0 and row["converged_fraction"] == 1.0
    assert row["ms_per_step"] == pytest.approx(1e3 * 4 / row["world_steps_per_s"])
    assert row["realtime_factor"] == pytest.approx(row["dt"] * 1e3 / row["ms_per_step"])
    assert len(row["runs"]) == 1 and RUN_KEYS <= set(row["runs"][0])
    assert any(line.startswith("approx32") for line in lines)
    assert (row["gpu_memory_mib"] is None) == (not wp.get_device(device).is_cuda)


def test_mesh_collision_robot_runs_from_its_mjcf_file(capsys, device):
    import os

    from sap_common import scenes

    path = os.path.join(os.path.dirname(scenes.__file__), "data", "mesh_quadruped.xml")
    assert main([path, "--num-worlds", "2", "--steps", "40", "--warmup", "2", "--device", str(device),
                 "--json", "--quiet"]) == 0
    _, row = _last_json(capsys)
    assert row["scene"] == "mesh_quadruped" and row["valid"] is True and row["converged_fraction"] == 1.0
    assert row["world_steps_per_s"] > 0 and row["contacts_per_world_mean"] > 0  # it lands on its mesh feet


@pytest.mark.parametrize("newton_path", ["staged", "fused"])
def test_breakdown_names_every_stage_and_sums_to_the_total(capsys, device, newton_path):
    assert main(["box_stack", "--num-worlds", "2", "--steps", "3", "--warmup", "1", "--breakdown",
                 "--breakdown-steps", "2", "--newton-path", newton_path, "--device", str(device), "--json",
                 "--quiet"]) == 0
    lines, row = _last_json(capsys)
    b = row["breakdown"]
    names = [s["stage"] for s in b["stages"]]
    assert names == ["collision", "control_noise", *SOLVER_STAGES[newton_path], "statistics"]
    assert sum(s["percent"] for s in b["stages"]) == pytest.approx(100.0)
    assert sum(s["ms_per_step"] for s in b["stages"]) == pytest.approx(b["ms_per_step"])
    newton = next(s for s in b["stages"] if s["stage"] == SOLVER_STAGES[newton_path][4])
    if newton_path == "staged":
        assert newton["calls_per_step"] >= 1  # one call per batched Newton iteration
    else:
        assert newton["calls_per_step"] == 1  # the whole loop of every world in one launch
    assert any("dominant stage:" in line for line in lines)
    assert (b["kernels"] is None) == (not device.is_cuda)  # each kernel's device time: CUDA only
    if device.is_cuda:
        assert "fused_newton" in [k["kernel"] for k in b["kernels"]] or newton_path == "staged"
        assert sum(k["percent"] for k in b["kernels"]) == pytest.approx(100.0)


def test_kernel_times_sum_per_kernel_under_its_own_name():
    activities = [("forward kernel fused_newton_kernel__locals__fused_newton_fcb8c202", 3.0),
                  ("forward kernel _integrate_0a1b2c3d", 0.5), ("forward kernel _integrate_0a1b2c3d", 0.25),
                  ("memset device", 0.25)]
    rows = kernel_times(activities, steps=2)
    assert [(r["kernel"], r["ms_per_step"], r["calls_per_step"]) for r in rows] == [
        ("fused_newton", 1.5, 0.5), ("_integrate", 0.375, 1.0), ("memset device", 0.125, 0.5)]
    assert sum(r["percent"] for r in rows) == pytest.approx(100.0)
    stage = dict(stage="newton_loop", ms_per_step=3.0, percent=100.0, calls_per_step=1.0)
    row = dict(label="approx32", num_worlds=8, breakdown=dict(steps=2, ms_per_step=3.0, stages=[stage], kernels=rows))
    lines = breakdown_table(row).splitlines()
    assert lines[3] == "  dominant stage: newton_loop (100.0 %)"
    assert lines[4].startswith("kernels: approx32 x8, the same steps, 2.000 ms/step of device time")
    assert [line.split()[0] for line in lines[6:]] == ["fused_newton", "_integrate", "memset"]


def test_sweep_writes_results_that_plot(tmp_path, capsys, device):
    out = tmp_path / "results.json"
    assert main(["sphere_drop", "--num-worlds", "2,3", "--preset", "approx32", "drake", "--steps", "3",
                 "--warmup", "1", "--device", str(device), "--out", str(out), "--json", "--quiet"]) == 0
    _, result = _last_json(capsys)
    runs = result["runs"]
    assert [(r["num_worlds"], r["preset"]) for r in runs] == [(2, "approx32"), (2, "drake"), (3, "approx32"),
                                                              (3, "drake")]
    assert result["valid"] is True and all(RUN_KEYS <= set(r) for r in runs)
    assert "world_steps_per_s" not in result  # a sweep keeps per-run numbers in "runs" only
    assert json.loads(out.read_text())["runs"] == runs
    pytest.importorskip("matplotlib", reason="sap-plot-benchmark needs matplotlib (the 'plot' extra)")
    from sap_tools.benchmark.plot import main as plot_main
    from sap_tools.benchmark.plot import series

    png = tmp_path / "sweep.png"
    assert plot_main([str(out), "--out", str(png)]) == 0
    assert png.stat().st_size > 1000
    assert set(series(runs)) == {"sap_gpu approx32", "sap_gpu drake"}
    assert plot_main([str(tmp_path / "missing.json")]) == 2


def test_control_noise_is_normal_clamped_and_the_same_for_both_backends(device):
    """Channel k of world w gets u = clamp(σ n, lo, hi): sap_gpu writes base + gain·u into its DOF,
    MuJoCo Warp's ctrl kernel writes u; the draws are N(0, σ), differ between steps and repeat per seed."""
    ch = bench_runs.NoiseChannels(key=np.array([2, 0], np.int32), num_keys=3, dof=np.array([1, 3], np.int32),
                             gain=np.array([40.0, 1.0]), lower=np.array([-1.0, -np.inf]),
                             upper=np.array([1.0, np.inf]), target="joint_act", units="ctrl")
    W, sigma = NOISE_SAMPLES, 0.5
    noise = bench_runs._Noise(ch, sigma, seed=7, num_worlds=W, device=device)
    base = wp.array(np.full((W, 4), 3.0), dtype=wp.float64, device=device)
    out = wp.clone(base)  # as in SapRun: the control array itself, base a copy of it
    ctrl = wp.zeros((W, 3), dtype=wp.float32, device=device)
    noise.sap(base, out)
    noise.ctrl(ctrl)
    joint, u = out.numpy(), ctrl.numpy().astype(np.float64)
    np.testing.assert_array_equal(joint[:, [0, 2]], 3.0)  # DOFs without a channel keep their value
    np.testing.assert_array_equal(u[:, 1], 0.0)  # a key without a channel stays 0
    np.testing.assert_allclose(joint[:, 1], 3.0 + 40.0 * u[:, 2], rtol=0, atol=1e-12)
    np.testing.assert_allclose(joint[:, 3], 3.0 + u[:, 0], rtol=0, atol=1e-12)
    assert np.abs(u[:, 2]).max() <= 1.0 and np.abs(u[:, 2]).max() == 1.0  # clamped at the ctrlrange
    assert abs(u[:, 0].mean()) < 4 * sigma / np.sqrt(W)
    assert abs(u[:, 0].std() / sigma - 1.0) < NOISE_STD_TOL
    assert abs(np.corrcoef(u[:, 0], u[:, 2])[0, 1]) < 4 / np.sqrt(W)  # channels independent
    noise.advance()
    noise.ctrl(ctrl)
    assert np.all(ctrl.numpy()[:, 0] != u[:, 0].astype(np.float32))  # a new step draws anew
    again = wp.zeros((W, 3), dtype=wp.float32, device=device)
    bench_runs._Noise(ch, sigma, seed=7, num_worlds=W, device=device).ctrl(again)
    np.testing.assert_array_equal(again.numpy(), u.astype(np.float32))  # same seed, same step: same draws


@pytest.mark.skipif(not HAVE_MJWARP, reason="the humanoid needs mujoco and mujoco-warp (the 'test' extra)")
def test_humanoid_noise_channels_are_its_21_motors():
    ch = noise_channels(scenes.get("humanoid"))
    assert ch.count == 21 and ch.num_keys == 21 and ch.target == "joint_act" and ch.units == "MuJoCo ctrl"
    assert sorted(ch.key) == list(range(21)) and ch.gain.max() == 120.0  # hip_y: gear 120
    np.testing.assert_array_equal(ch.lower, -1.0)
    np.testing.assert_array_equal(ch.upper, 1.0)
    plain = noise_channels(scenes.get("box_stack"))
    assert plain.count == 18 and plain.target == "joint_f" and np.all(np.isinf(plain.upper))


def test_percentile_from_histogram():
    # 100 samples: 90 with count 2, 6 with count 3, 4 with count 7 -> the 95th is 3.
    hist = np.zeros((2, 10), np.int32)
    hist[0, 2], hist[1, 2], hist[0, 3], hist[1, 7] = 50, 40, 6, 4
    assert percentile_from_histogram(hist) == 3
    assert percentile_from_histogram(hist, 96) == 3 and percentile_from_histogram(hist, 97) == 7
    assert percentile_from_histogram(np.zeros((3, 4))) == 0


@pytest.mark.slow  # ~25 s on two cores: MuJoCo Warp's kernels compile on the CPU first
@pytest.mark.skipif(not HAVE_MJWARP, reason="--vs-mjwarp needs mujoco and mujoco-warp (the 'test' extra)")
def test_vs_mjwarp_runs_both_on_the_same_noise(capsys, device):
    assert main(["humanoid", "--num-worlds", "2", "--steps", "3", "--warmup", "1", "--vs-mjwarp",
                 "--mjwarp-nconmax", "24", "--mjwarp-njmax", "64", "--device", str(device), "--json", "--quiet"]) == 0
    lines, row = _last_json(capsys)
    sap, mj = row["runs"]
    assert sap["backend"] == "sap_gpu" and mj["backend"] == "mujoco_warp" and mj["valid"] and sap["valid"]
    assert row["ratio"] == pytest.approx(sap["world_steps_per_s"] / mj["world_steps_per_s"])
    assert any(line.startswith("ratio sap_gpu/mjwarp (approx32, 2 worlds)") for line in lines)
    # After one step each, MuJoCo Warp's ctrl is sap_gpu's joint_act / (gear·gain), motor by motor.
    scene = scenes.get("humanoid", 2)
    ch = noise_channels(scene)
    sap_run = bench.SapRun(scene, "approx32", {}, wp.get_device(device), scene.dt, ch, 0.1, 3)
    mj_run = bench.MjwarpRun(scene, wp.get_device(device), scene.dt, ch, 0.1, 3, 24, 64)
    sap_run.step()
    mj_run.step()
    act, ctrl = sap_run.control.joint_act.numpy(), mj_run.d.ctrl.numpy()
    assert np.abs(ctrl).max() > 0
    np.testing.assert_allclose(act[:, ch.dof] / ch.gain, ctrl[:, ch.key], rtol=1e-6, atol=0)


def test_bad_flags_are_errors_before_any_kernel_runs(capsys, monkeypatch):
    def no_run(*a, **k):
        raise AssertionError("a run was built before the flags were checked")

    monkeypatch.setattr(bench, "SapRun", no_run)
    monkeypatch.setattr(bench, "MjwarpRun", no_run)
    cases = [(["--num-worlds", "0"], "--num-worlds: expected integers >= 1"),
             (["--num-worlds", "4,x"], "--num-worlds: expected integers >= 1, got 'x'"),
             (["--steps", "0"], "--steps: must be >= 1"),
             (["--warmup", "0"], "--warmup: must be >= 1"),
             (["--structure-steps", "0"], "--structure-steps: must be >= 1"),
             (["--preset", "approx33"], "--preset: contact_preset_variant: 'approx33' is not valid; valid: approx32"),
             (["--line-search", "newton"], "--line-search: line_search_variant: 'newton' is not valid; valid: "),
             (["--line-search", "exact_root", "newton"], "--line-search: line_search_variant: 'newton' is not valid"),
             (["--override", "rho"], "--override: expected KEY=VALUE (a SapConfig knob), got 'rho'"),
             (["--override", "rho=2"], "--override: rho: must be finite and in (0.0, 1.0), got 2"),
             (["--override", "nope=1"], "--override: unknown SapConfig knob(s) nope; valid: "),
             (["--override", "line_search_variant=exact"],
              "--override: line_search_variant has its own flag, --line-search; set it there"),
             (["--dt", "-1"], "--dt: must be a finite time step > 0 s"),
             (["--noise-std", "nan"], "--noise-std: must be finite and >= 0"),
             (["--max-rigid-contact", "-1"], "--max-rigid-contact: must be >= 0"),
             (["--mjwarp-njmax", "64"], "--mjwarp-njmax: needs --vs-mjwarp"),
             (["--device", "tpu"], "--device 'tpu': no such Warp device here; available: "),
             (["--vs-mjwarp"], "--vs-mjwarp: needs an MJCF scene"),
             (["--fused-max-registers", "20"],
              "--fused-max-registers: auto, none or an integer from 32 to 255, got '20'"),
             (["--fused-max-registers", "none,x"],
              "--fused-max-registers: auto, none or an integer from 32 to 255, got 'x'")]
    for flags, message in cases:
        assert main(["sphere_drop", "--quiet", *flags]) == 2, flags
        assert message in capsys.readouterr().err, flags
    assert main(["nope", "--quiet"]) == 2
    assert "scene name: 'nope' is not a built-in scene" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # argparse: names the flag and the choices
        main(["sphere_drop", "--linear-solver", "lu"])
    assert e.value.code == 2
    assert "--linear-solver: invalid choice: 'lu' (choose from" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["sphere_drop", "--newton-path", "graph"])
    assert e.value.code == 2
    assert "--newton-path: invalid choice: 'graph' (choose from" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["sphere_drop", "--fused-hessian", "dense"])
    assert e.value.code == 2
    assert "--fused-hessian: invalid choice: 'dense' (choose from" in capsys.readouterr().err


def test_linear_solver_sweep_runs_both_solvers_in_one_process(capsys, device):
    assert main(["box_stack", "--num-worlds", "2", "--steps", "4", "--warmup", "2", "--linear-solver", "cholesky",
                 "pcr", "--device", str(device), "--json", "--quiet"]) == 0
    lines, result = _last_json(capsys)
    assert result["valid"] is True
    assert [(r["label"], r["linear_solver"]) for r in result["runs"]] == [("approx32/cholesky", "cholesky"),
                                                                          ("approx32/pcr", "pcr")]
    assert any(line.startswith("approx32/pcr") for line in lines)


def test_line_search_sweep_and_an_override_reach_every_run(capsys, monkeypatch, device):
    """--line-search with two values is two runs, labelled by their line search; --override sets
    its knobs on each run's solver."""
    configs = []

    class Recorded(bench.SapRun):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            configs.append(self.solver.config)

    monkeypatch.setattr(bench, "SapRun", Recorded)
    assert main(["box_stack", "--num-worlds", "2", "--steps", "3", "--warmup", "1", "--line-search", "exact_root",
                 "monotone_decay", "--override", "optimality_rel_tol=1e-9", "--override", "cost_rel_tol=1e-4",
                 "--device", str(device), "--json", "--quiet"]) == 0
    lines, result = _last_json(capsys)
    assert [(r["label"], r["line_search"]) for r in result["runs"]] == [("approx32/exact_root", "exact_root"),
                                                                        ("approx32/monotone_decay", "monotone_decay")]
    for r in result["runs"]:  # a probe per pass: what a batched search would change
        assert r["probes_per_iteration"] == pytest.approx(r["line_search_mean"] / max(r["newton_mean"], 1e-300))
        assert f"{r['probes_per_iteration']:.2f} line-search probes per Newton iteration" in "\n".join(lines)
    assert [(c.line_search_variant, c.optimality_rel_tol, c.cost_rel_tol) for c in configs] == [
        ("exact_root", 1e-9, 1e-4), ("monotone_decay", 1e-9, 1e-4)]
    assert "optimality_rel_tol 1e-09, cost_rel_tol 0.0001" in lines[0]


def test_newton_path_sweep_counts_launches_and_trips(capsys, device):
    """--newton-path fused staged: both in one process with the same iterations (on one CPU lane
    the two are equal), the speed-up printed, and the structure counted: the fused path issues one
    Newton launch per step and passes through the loop once; the staged path passes once per
    iteration of its slowest world plus the pass that only finds every world done, each pass
    several launches."""
    assert main(["box_stack", "--num-worlds", "3", "--steps", "4", "--warmup", "2", "--newton-path", "fused",
                 "staged", "--structure-steps", "3", "--device", str(device), "--json", "--quiet"]) == 0
    lines, result = _last_json(capsys)
    fused, staged = result["runs"]
    assert (fused["label"], staged["label"]) == ("approx32/fused", "approx32/staged")
    assert (fused["newton_path"], staged["newton_path"]) == ("fused", "staged")
    if not wp.get_device(device).is_cuda:
        for key in ("newton_mean", "line_search_mean", "newton_mean_structure", "newton_max_structure"):
            assert fused[key] == staged[key], key
    assert fused["newton_launches_per_step"] == 1 and fused["newton_trips_per_step"] == 1
    assert staged["newton_trips_per_step"] == pytest.approx(staged["newton_max_structure"] + 1)
    assert staged["newton_launches_per_step"] >= 4 * staged["newton_trips_per_step"]
    assert fused["launches_per_step"] == pytest.approx(
        staged["launches_per_step"] - staged["newton_launches_per_step"] + 1)
    (q,) = result["newton_path_speedups"]
    assert q["speedup"] == pytest.approx(fused["world_steps_per_s"] / staged["world_steps_per_s"])
    assert any(line.startswith("speed-up fused/staged Newton path (approx32/cholesky/sparse, 3 worlds): ")
               for line in lines)
    assert any(line.startswith("structure: approx32/staged x3: ") for line in lines)


def test_each_scene_is_compared_with_itself(capsys, device):
    """Two scenes, both Newton paths: each fused/staged speed-up divides the same scene's runs, and
    its line names the scene (they were keyed by world count alone, so a scene's fused run was
    divided by the last scene's staged run)."""
    assert main(["sphere_drop", "box_slide", "--num-worlds", "2", "--steps", "3", "--warmup", "1", "--newton-path",
                 "fused", "staged", "--structure-steps", "1", "--device", str(device), "--json", "--quiet"]) == 0
    lines, result = _last_json(capsys)
    runs = {(r["scene"], r["newton_path"]): r for r in result["runs"]}
    assert len(runs) == 4
    speedups = result["newton_path_speedups"]
    assert sorted(q["scene"] for q in speedups) == ["box_slide", "sphere_drop"]
    for q in speedups:
        fused, staged = runs[(q["scene"], "fused")], runs[(q["scene"], "staged")]
        assert q["speedup"] == pytest.approx(fused["world_steps_per_s"] / staged["world_steps_per_s"])
        assert any(line.startswith(f"speed-up fused/staged Newton path ({q['scene']}: approx32/cholesky/sparse, "
                                   "2 worlds): ") for line in lines), q["scene"]


def test_rows_sweep_reports_the_sparse_over_dense_speedup(capsys, device):
    """--rows sparse dense: both paths in one process, the same iterations, and the ratio printed."""
    assert main(["box_stack", "--num-worlds", "2", "--steps", "4", "--warmup", "2", "--rows", "sparse", "dense",
                 "--device", str(device), "--json", "--quiet"]) == 0
    lines, result = _last_json(capsys)
    assert result["valid"] is True
    runs = result["runs"]
    assert [(r["label"], r["rows"]) for r in runs] == [("approx32/sparse", "sparse"), ("approx32/dense", "dense")]
    # The two paths compute the same sums, so the same iterations (statistics over every step).
    for key in ("newton_mean", "line_search_mean", "contacts_per_world_mean"):
        assert runs[0][key] == runs[1][key], key
    (q,) = result["sparse_speedups"]
    assert q["speedup"] == pytest.approx(runs[0]["world_steps_per_s"] / runs[1]["world_steps_per_s"])
    assert any(line.startswith("speed-up sparse/dense rows (approx32/cholesky, 2 worlds): ") for line in lines)


@pytest.mark.parametrize("capacity", [0, 3])
def test_truncated_contacts_make_a_run_invalid(capsys, device, capacity):
    """box_stack needs 16 contact slots: 0 or 3 drop contacts, so the run is invalid, with the reason."""
    assert main(["box_stack", "--num-worlds", "2", "--steps", "4", "--warmup", "1", "--max-rigid-contact",
                 str(capacity), "--device", str(device), "--json", "--quiet"]) == 0
    lines, row = _last_json(capsys)
    assert row["truncated_contacts"] > 0 and row["valid"] is False and row["runs"][0]["valid"] is False
    assert f"contacts truncated for lack of slots (max_rigid_contact {capacity}" in row["invalid_reason"]
    assert any(line.startswith("approx32") and "NO: " in line and "truncated" in line for line in lines)


def test_a_rare_capped_step_keeps_a_run_valid_a_frequent_one_does_not(capsys, device):
    """sphere_drop, one world, no noise, Newton capped at 1 iteration: only the impact needs more.
    On Warp's CPU device that is one step (step 287); on an H200 it was three (286–288), because the
    steps beside it meet the optimality bound after one iteration by a float32 round-off margin:
    residual 1.17e-6 against a bound of 2.64e-6 at step 286 on the CPU device (6.4e-6 on the H200),
    1.97e-8 against 2.12e-8 at step 288 (2.17e-8 on the H200). So the test counts the impact's c capped
    steps first: in 400 steps they are more than one in a thousand (invalid); in 1000·c + 200 steps,
    with the sphere at rest after the impact and no other step capped, they are fewer (valid), and
    the cap is reported. The tile Cholesky (the CPU device's default, set so that a GPU runs it too):
    with the register elimination (a GPU's default) the impact's first iteration also meets the
    bound, by the same kind of margin, and no step is capped. monotone_decay: with exact_root's exact
    step the impact's one iteration meets the bound as well."""
    args = ["sphere_drop", "--num-worlds", "1", "--warmup", "1", "--max-iterations", "1", "--noise-std", "0",
            "--fused-cholesky", "tile", "--line-search", "monotone_decay", "--device", str(device), "--json", "--quiet"]
    assert main(args + ["--steps", "400"]) == 0
    _, row = _last_json(capsys)
    c = row["capped_steps"]
    assert 1 <= c <= IMPACT_CAPPED_STEPS_MAX and row["valid"] is False, c
    assert (f"converged fraction {(400 - c) / 400:.4%} < 99.9% ({c} of 400 world-steps capped)"
            in row["invalid_reason"])
    n = 1000 * c + 200
    assert main(args + ["--steps", str(n)]) == 0
    lines, row = _last_json(capsys)
    assert row["capped_steps"] == c and row["world_steps"] == n
    assert row["converged_fraction"] == pytest.approx((n - c) / n) and row["converged_fraction"] < 1.0
    assert row["valid"] is True and row["invalid_reason"] is None
    head = next(line for line in lines if line.startswith("run "))
    shown = f" {math.floor((n - c) / n * 1e5) / 1e3:.3f}% "  # the table rounds down
    assert "capped" in head and any(line.startswith("approx32") and shown in line for line in lines)


def test_validity_threshold_and_reasons():
    base = dict(backend="sap_gpu", non_finite_worlds=0, non_finite_steps=0, truncated_contacts=0,
                converged_fraction=1.0, capped_steps=0, world_steps=10**6, max_rigid_contact=8)
    assert bench.validity(base) == (True, None)
    assert 0.99 < bench.MIN_CONVERGED_FRACTION < 1.0
    at = dict(base, converged_fraction=bench.MIN_CONVERGED_FRACTION)
    assert bench.validity(at)[0] is True
    below = dict(base, converged_fraction=np.nextafter(bench.MIN_CONVERGED_FRACTION, 0.0))
    assert bench.validity(below)[0] is False
    valid, reason = bench.validity(dict(base, non_finite_steps=2, truncated_contacts=5, non_finite_worlds=1))
    assert not valid and reason.split("; ")[0] == "1 worlds end with a non-finite state"
    assert "2 world-steps flagged NON_FINITE" in reason and "5 contacts truncated" in reason
    # MuJoCo Warp: its own iteration cap is its design; capacity overflow is not.
    mj = dict(backend="mujoco_warp", non_finite_worlds=0, converged_fraction=0.5, overflow_worlds=0,
              overflow_flags=[])
    assert bench.validity(mj) == (True, None)
    assert bench.validity(dict(mj, overflow_worlds=3, overflow_flags=["NEFC"]))[0] is False


def test_register_cap_speedups_divide_by_the_same_run_without_a_cap():
    """Each capped run is divided by the uncapped run of its own scene, world count and configuration."""
    from sap_tools.benchmark.measure import register_cap_speedups

    def row(scene, W, cap, rate, path="fused"):
        return dict(backend="sap_gpu", scene=scene, num_worlds=W, preset="approx32", linear_solver="cholesky",
                    rows="sparse", newton_path=path, fused_max_registers=cap, world_steps_per_s=rate,
                    label="approx32" + (f"/reg{cap}" if cap else ""))

    rows = [row("a", 4, "none", 100.0), row("a", 4, 128, 150.0), row("a", 4, "auto", 120.0),
            row("a", 8, None, 400.0), row("a", 8, 128, 200.0),  # None: uncapped, in files from before "auto"
            row("b", 4, 128, 1.0),  # no uncapped run of b: no speed-up
            dict(backend="mujoco_warp", scene="a", num_worlds=4, world_steps_per_s=50.0)]
    out = register_cap_speedups(rows)
    assert [(q["scene"], q["num_worlds"], q["fused_max_registers"], q["speedup"]) for q in out] == [
        ("a", 4, 128, 1.5), ("a", 4, "auto", 1.2), ("a", 8, 128, 0.5)]


@pytest.mark.parametrize("where, default", [("cuda:0", "lanes"), ("cpu", "tile")])
def test_hessian_speedups_divide_by_the_same_run_forming_h_by_rows(where, default):
    """Each tiles run is divided by the rows run of its own scene, world count and configuration,
    and the fused/staged speed-up compares the staged run with the fused run that forms H by rows
    (each factored as the benchmark records it: an H formed by tiles by the tile Cholesky, one
    formed by rows the way the default takes on the run's device)."""
    from sap_tools.benchmark.measure import hessian_speedups, path_speedups

    def row(scene, W, hessian, rate, path="fused"):
        return dict(backend="sap_gpu", scene=scene, num_worlds=W, preset="approx32", linear_solver="cholesky",
                    rows="sparse", newton_path=path, fused_max_registers="auto", fused_hessian=hessian,
                    fused_cholesky="tile" if hessian == "tiles" else default,
                    world_steps_per_s=rate, cpu_seconds=1.0, device=where,
                    label="approx32" + ("/tiles" if hessian == "tiles" else ""))

    rows = [row("a", 4, "rows", 100.0), row("a", 4, "tiles", 150.0), row("a", 8, "rows", 400.0),
            row("a", 8, "tiles", 200.0), row("b", 4, "tiles", 1.0),  # no rows run of b: no speed-up
            row("a", 4, "rows", 50.0, path="staged"),
            dict(backend="mujoco_warp", scene="a", num_worlds=4, world_steps_per_s=50.0)]
    assert [(q["scene"], q["num_worlds"], q["speedup"]) for q in hessian_speedups(rows)] == [
        ("a", 4, 1.5), ("a", 8, 0.5)]
    assert [(q["num_worlds"], q["speedup"]) for q in path_speedups(rows)] == [(4, 2.0)]


def test_fused_hessian_sweep_runs_both_in_one_process(capsys, device):
    """--fused-hessian rows tiles: both runs labelled, with the speed-up of tiles over rows printed;
    the staged path (no fused kernel) runs once."""
    assert main(["box_stack", "--num-worlds", "2", "--steps", "3", "--warmup", "1", "--fused-hessian", "rows",
                 "tiles", "--newton-path", "fused", "staged", "--structure-steps", "1", "--device", str(device),
                 "--json", "--quiet"]) == 0
    lines, result = _last_json(capsys)
    assert result["valid"] is True
    assert [(r["label"], r["fused_hessian"]) for r in result["runs"]] == [
        ("approx32/fused", "rows"), ("approx32/fused/tiles", "tiles"), ("approx32/staged", "rows")]
    (q,) = result["fused_hessian_speedups"]
    rows_run, tiles_run = result["runs"][:2]
    assert q["speedup"] == pytest.approx(tiles_run["world_steps_per_s"] / rows_run["world_steps_per_s"])
    assert any(line.startswith("speed-up fused_hessian tiles/rows (approx32/fused/tiles, 2 worlds): ")
               for line in lines)
    assert len(result["newton_path_speedups"]) == 1


def test_cholesky_speedups_divide_by_the_same_run_with_the_tile_cholesky():
    """Each lanes run is divided by the tile run of its own scene, world count and configuration;
    the fused path and the tile-formed H are compared with the default factorization of the run's
    device (lanes on a GPU), so a run the default does not take never stands in for a plain one."""
    from sap_tools.benchmark.measure import cholesky_speedups, hessian_speedups, path_speedups

    def row(scene, W, cholesky, rate, path="fused", hessian="rows", where="cuda:0"):
        return dict(backend="sap_gpu", scene=scene, num_worlds=W, preset="approx32", linear_solver="cholesky",
                    rows="sparse", newton_path=path, fused_max_registers="auto", fused_hessian=hessian,
                    fused_cholesky=cholesky, world_steps_per_s=rate, cpu_seconds=1.0, device=where,
                    label="approx32" + ("/tile" if cholesky == "tile" and hessian == "rows" else ""))

    rows = [row("a", 4, "lanes", 150.0), row("a", 4, "tile", 100.0), row("a", 8, "tile", 400.0),
            row("a", 8, "lanes", 200.0), row("b", 4, "lanes", 1.0),  # no tile run of b: no speed-up
            row("a", 4, "lanes", 50.0, path="staged"), row("a", 4, "tile", 300.0, hessian="tiles")]
    assert [(q["scene"], q["num_worlds"], q["speedup"]) for q in cholesky_speedups(rows)] == [
        ("a", 4, 1.5), ("a", 8, 0.5)]
    assert [(q["num_worlds"], q["speedup"]) for q in path_speedups(rows)] == [(4, 3.0)]
    assert [(q["num_worlds"], q["speedup"]) for q in hessian_speedups(rows)] == [(4, 2.0)]
    # On the CPU device the default factors by tile: the tile run is the plain one.
    cpu = [row("a", 4, "lanes", 150.0, where="cpu"), row("a", 4, "tile", 100.0, where="cpu"),
           row("a", 4, "tile", 50.0, path="staged", where="cpu"),
           row("a", 4, "tile", 300.0, hessian="tiles", where="cpu")]
    assert [q["speedup"] for q in cholesky_speedups(cpu)] == [1.5]
    assert [q["speedup"] for q in path_speedups(cpu)] == [2.0]
    assert [q["speedup"] for q in hessian_speedups(cpu)] == [3.0]


def test_fused_cholesky_sweep_runs_both_in_one_process(capsys, device):
    """--fused-cholesky tile lanes: both runs, the one the device's default does not take labelled
    (/tile on a GPU, /lanes on the CPU device), with the speed-up of lanes over tile printed; the
    staged path and the tile-formed H (which lanes do not factor: one run, not labelled) run once
    each."""
    default = "lanes" if device.is_cuda else "tile"
    label = {c: "approx32/fused" + ("" if c == default else f"/{c}") for c in ("tile", "lanes")}
    assert main(["box_stack", "--num-worlds", "2", "--steps", "3", "--warmup", "1", "--fused-cholesky", "tile",
                 "lanes", "--fused-hessian", "rows", "tiles", "--newton-path", "fused", "staged",
                 "--structure-steps", "1", "--device", str(device), "--json", "--quiet"]) == 0
    lines, result = _last_json(capsys)
    assert result["valid"] is True
    assert [(r["label"], r["fused_hessian"], r["fused_cholesky"]) for r in result["runs"]] == [
        (label["tile"], "rows", "tile"), (label["lanes"], "rows", "lanes"),
        ("approx32/fused/tiles", "tiles", "tile"), ("approx32/staged", "rows", default)]
    (q,) = result["fused_cholesky_speedups"]
    tile_run, lanes_run = result["runs"][:2]
    assert q["speedup"] == pytest.approx(lanes_run["world_steps_per_s"] / tile_run["world_steps_per_s"])
    assert any(line.startswith(f"speed-up fused_cholesky lanes/tile ({label['lanes']}, 2 worlds): ")
               for line in lines)
    assert len(result["fused_hessian_speedups"]) == 1 and len(result["newton_path_speedups"]) == 1


def test_a_tile_formed_hessian_runs_under_the_default_factorization(capsys, device):
    """--fused-hessian rows tiles with the default fused_cholesky (auto: lanes on a GPU, which an H
    formed by tiles does not take; tile on the CPU device): the tiles run still runs, factored by
    tile, against the default; the header says what the default takes on this device."""
    assert main(["box_stack", "--num-worlds", "2", "--steps", "2", "--warmup", "1", "--fused-hessian", "rows",
                 "tiles", "--structure-steps", "1", "--device", str(device), "--json", "--quiet"]) == 0
    lines, result = _last_json(capsys)
    default = "lanes" if device.is_cuda else "tile"
    assert lines[0].startswith("sap-benchmark: box_stack ") and lines[0].endswith(f", fused_cholesky auto = {default}")
    assert [(r["label"], r["fused_hessian"], r["fused_cholesky"]) for r in result["runs"]] == [
        ("approx32", "rows", default), ("approx32/tiles", "tiles", "tile")]
    (q,) = result["fused_hessian_speedups"]
    assert q["speedup"] == pytest.approx(result["runs"][1]["world_steps_per_s"]
                                         / result["runs"][0]["world_steps_per_s"])


@pytest.mark.slow
def test_register_cap_sweep_runs_the_same_iterations(capsys, device):
    """--fused-max-registers none 64 auto: the runs in one process, labelled, each with the cap it
    compiled (``register_cap``: on CUDA auto's is 128 for approx32; on the CPU device none, where a
    cap means nothing) and the same Newton and line-search iterations (a register cap changes
    where values live, not the arithmetic), and each capped run's speed-up over the uncapped one
    printed."""
    assert main(["sphere_drop", "--num-worlds", "2", "--steps", "4", "--warmup", "1", "--fused-max-registers", "none",
                 "64", "auto", "--structure-steps", "1", "--device", str(device), "--json", "--quiet"]) == 0
    lines, result = _last_json(capsys)
    plain, capped, auto = result["runs"]
    assert (plain["label"], capped["label"], auto["label"]) == ("approx32/nocap", "approx32/reg64", "approx32")
    assert (plain["fused_max_registers"], capped["fused_max_registers"], auto["fused_max_registers"]) == (
        "none", 64, "auto")
    caps = (None, 64, 128) if device.is_cuda else (None, None, None)
    assert (plain["register_cap"], capped["register_cap"], auto["register_cap"]) == caps
    for key in ("newton_mean", "line_search_mean", "newton_mean_structure", "newton_max_structure"):
        assert plain[key] == capped[key] == auto[key], key
    q64, qauto = result["register_cap_speedups"]
    assert q64["speedup"] == pytest.approx(capped["world_steps_per_s"] / plain["world_steps_per_s"])
    assert qauto["speedup"] == pytest.approx(auto["world_steps_per_s"] / plain["world_steps_per_s"])
    assert any(line.startswith("speed-up register cap 64/none (approx32/reg64, 2 worlds): ") for line in lines)
    assert any(line.startswith("speed-up register cap auto/none (approx32, 2 worlds): ") for line in lines)


def test_randomize_measures_each_run_with_and_without_per_world_parameters(capsys, monkeypatch, device):
    """--randomize: each sap_gpu run twice in one process, the second labelled /randomized with a
    sap_gpu.WorldParameters (drawn by sap_tools.randomize.draw with --seed) that the solver and the
    pipeline both read; its throughput and its ratio to the plain run reported."""
    from sap_tools import randomize

    built = []

    class Recorded(bench.SapRun):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            built.append((self.solver.parameters, self.pipeline.parameters))

    monkeypatch.setattr(bench, "SapRun", Recorded)
    assert main(["sphere_drop", "--num-worlds", "3", "--steps", "3", "--warmup", "1", "--randomize", "--seed", "7",
                 "--structure-steps", "1", "--device", str(device), "--json", "--quiet"]) == 0
    lines, result = _last_json(capsys)
    plain, rand = result["runs"]
    assert (plain["label"], plain["randomized"], rand["label"], rand["randomized"]) == (
        "approx32", False, "approx32/randomized", True)
    assert result["valid"] is True and plain["valid"] and rand["valid"]
    # What the randomized solver read differs between worlds in the drawn fields (sphere_drop: no joint gains).
    assert plain["randomized_fields"] == []
    assert rand["randomized_fields"] == ["body_mass", "body_inertia", "shape_material_mu"]
    (q,) = result["randomized_ratios"]
    assert q["label"] == "approx32/randomized" and q["plain_label"] == "approx32" and q["num_worlds"] == 3
    assert q["ratio"] > 0 and q["ratio"] == pytest.approx(rand["world_steps_per_s"] / plain["world_steps_per_s"])
    assert (q["cpu_ratio"] is None) == device.is_cuda
    assert result["label"] == "approx32" and result["randomized_ratio"] == q["ratio"]  # the plain run on top
    assert any(line.startswith("approx32/randomized ") for line in lines)
    assert any(line.startswith("ratio randomized/plain (approx32/randomized, 3 worlds): ") for line in lines)
    (p0, c0), (p1, c1) = built
    assert p0.shared and c0.shared  # the plain run: the model's values, one row seen by every world
    assert p1 is c1 and not p1.shared  # the randomized run: one WorldParameters, read by both
    drawn = randomize.draw(p1.model, np.random.default_rng(7))
    for name, values in drawn.items():
        np.testing.assert_array_equal(p1.get(name), values if name != "body_inertia" else 0.5 * (
            values + np.swapaxes(values, -1, -2)), err_msg=name)


def test_randomize_pairs_each_configuration_and_leaves_mujoco_warp_alone():
    """The sweep --randomize makes: each sap_gpu run followed by its randomized twin, speed-ups
    between runs of one kind only; MuJoCo Warp (--vs-mjwarp) once, not randomized."""
    from sap_tools.benchmark.measure import path_speedups, randomized_ratios

    args = bench._parser().parse_args(["humanoid", "--newton-path", "fused", "staged", "--randomize"])
    args.fused_max_registers = ["auto"]
    args.vs_mjwarp = True
    specs = bench._run_specs(args, ["humanoid"], [4], ["approx32"], {}, False)
    assert [(s["label"], s["extra"]["randomized"]) for s in specs] == [
        ("approx32/fused", False), ("approx32/fused/randomized", True), ("approx32/staged", False),
        ("approx32/staged/randomized", True), ("mujoco_warp", False)]
    assert [s.get("randomize") for s in specs] == [False, True, False, True, None]

    def row(label, rate, cpu=1.0):
        path = label.split("/")[1]
        return dict(backend="sap_gpu", scene="humanoid", num_worlds=4, preset="approx32", linear_solver="cholesky",
                    rows="sparse", newton_path=path, fused_max_registers="auto", fused_hessian="rows",
                    fused_cholesky="tile", device="cpu", label=label, randomized=label.endswith("/randomized"),
                    world_steps_per_s=rate, cpu_seconds=cpu)

    rows = [row("approx32/fused", 100.0), row("approx32/fused/randomized", 90.0, 2.0), row("approx32/staged", 50.0),
            row("approx32/staged/randomized", 60.0), dict(backend="mujoco_warp", scene="humanoid", num_worlds=4,
                                                          world_steps_per_s=10.0, label="mujoco_warp")]
    assert [(q["label"], q["ratio"], q["cpu_ratio"]) for q in randomized_ratios(rows)] == [
        ("approx32/fused/randomized", 0.9, 0.5), ("approx32/staged/randomized", 1.2, 1.0)]
    assert [(q["randomized"], q["speedup"]) for q in path_speedups(rows)] == [(False, 2.0), (True, 1.5)]


def test_randomize_refuses_draws_that_break_the_model_before_any_run(capsys, monkeypatch):
    def no_run(*a, **k):
        raise AssertionError("a run was built before --randomize's draws were checked")

    def bad_draw(model, rng, ranges=None):
        return {"body_mass": -np.ones((model.num_worlds, model.body_count))}

    monkeypatch.setattr(bench, "SapRun", no_run)
    monkeypatch.setattr(bench.randomize, "draw", bad_draw)
    assert main(["sphere_drop", "--randomize", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "--randomize: sphere_drop: the drawn values break the model's rules: body_mass[world 0, body 0" in err

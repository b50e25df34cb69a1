"""The scaling examples: examples/multi_device.py (one process per device, results gathered),
examples/newton_policy_loop.py (act, step, read contact forces, reset the fallen worlds) and
examples/domain_randomization.py (reset the fallen worlds with redrawn per-world parameters)."""

import importlib.util
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


def _module(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_two_processes_gather_the_one_process_run_bit_for_bit():
    """Five worlds over two CPU worker processes (3 + 2) against all five in this process."""
    md = _module("multi_device")
    split = md.run("box_stack", 5, ["cpu", "cpu"], steps=15, seed=3)
    local = md.run_local("box_stack", 5, "cpu", steps=15, seed=3)
    for k in md.RESULT_FIELDS:
        assert np.array_equal(split[k], local[k]), k
    assert not np.array_equal(local["joint_q"][0], local["joint_q"][1])  # the worlds differ
    assert np.all(local["status"] & 1)


@pytest.mark.parametrize("argv, message", [
    (["--devices", "cpu", "cuda:99"], "--devices 'cuda:99'"),
    (["--scene", "no_such_scene"], "scene name: 'no_such_scene' is not a built-in scene"),
    (["--out", "/no/such/dir/run.npz"], "--out: the directory '/no/such/dir' of '/no/such/dir/run.npz' does not exist"),
])
def test_bad_arguments_are_one_line_errors_before_any_worker(argv, message, capsys, monkeypatch):
    md = _module("multi_device")
    monkeypatch.setattr(md, "run", lambda *a, **k: pytest.fail("a worker started before the arguments were checked"))
    with pytest.raises(SystemExit) as e:
        md.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("multi_device.py: error: ") and message in err, err


def test_a_failed_worker_is_one_error_and_exit_1(capsys, monkeypatch):
    md = _module("multi_device")

    def failing(*a, **k):
        raise RuntimeError("the worker on cpu failed (exit 1):\nits log")

    monkeypatch.setattr(md, "run", failing)
    assert md.main(["--num-worlds", "2", "--steps", "1"]) == 1
    assert capsys.readouterr().err.startswith("multi_device.py: error: the worker on cpu failed (exit 1)")


def test_gather_refuses_missing_or_repeated_worlds():
    md = _module("multi_device")
    shard = {"world": np.array([0, 1]), **{k: np.zeros((2, 1)) for k in md.RESULT_FIELDS}}
    with pytest.raises(ValueError, match="shards: expected each of the 3 worlds once"):
        md.gather([shard], 3)
    with pytest.raises(ValueError, match="shards"):
        md.gather([shard, shard], 4)


def test_policy_loop_resets_the_fallen_worlds_only():
    pytest.importorskip("newton")
    out = _module("newton_policy_loop").run(num_worlds=4, iterations=30, device="cpu")
    assert out["finite"] and not out["any_failed"]
    assert out["resets"][0] == 0 and out["resets"][2] == 0  # standing worlds are never reset
    assert out["resets"][1] >= 1 and out["resets"][3] >= 1  # the rolled ones fall and start over
    assert out["reward"][0] > out["reward"][1]


def _domain_randomization(tmp_path, *flags):
    """examples/domain_randomization.py run as a script on the CPU device: its exit status, output
    and --out summary."""
    out = tmp_path / "dr.json"
    run = subprocess.run([sys.executable, str(EXAMPLES / "domain_randomization.py"), "--device", "cpu",
                          "--num-worlds", "4", "--out", str(out), *flags], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout, json.loads(out.read_text())


def test_domain_randomization_redraws_the_parameters_of_the_reset_worlds(tmp_path):
    """Episodes of 20 steps, a reset batch every 5: each world is reset three times in 60 steps and
    its parameters, written from device values under the reset mask, are no longer its first draw."""
    stdout, out = _domain_randomization(tmp_path, "--steps", "60", "--reset-every", "5", "--max-episode", "20")
    assert out["resets"] == [3, 3, 3, 3] and out["timeouts"] == [3, 3, 3, 3], out
    assert out["mean_episode_length"] == 20.0 and out["mode"].startswith("eager launches")
    assert all(out["parameters_changed"]) and out["invalid_parameters"] == 0 and out["finite"]
    assert all(a != b for a, b in zip(out["total_mass_initial"], out["total_mass_final"]))
    assert all(a != b for a, b in zip(out["friction_mean_initial"], out["friction_mean_final"]))
    assert "step 60/60: 12 resets so far" in stdout and "parameters redrawn in 4 worlds" in stdout, stdout


def test_domain_randomization_leaves_the_worlds_it_does_not_reset_alone(tmp_path):
    """No world falls (below 0 m) or times out in 20 steps: the reset batches redraw and write under
    an all-zero mask, and every world keeps its first parameters."""
    stdout, out = _domain_randomization(tmp_path, "--steps", "20", "--reset-every", "5", "--fall-height", "0")
    assert out["resets"] == [0, 0, 0, 0] and out["mean_episode_length"] is None, out
    assert not any(out["parameters_changed"]) and out["invalid_parameters"] == 0
    assert out["total_mass_initial"] == out["total_mass_final"]
    assert "0 resets so far" in stdout


@pytest.mark.parametrize("argv, message", [
    (["--num-worlds", "0"], "--num-worlds: expected an integer >= 1, got 0"),
    (["--steps", "-3"], "--steps: expected an integer >= 1, got -3"),
    (["--fall-height", "nan"], "--fall-height: expected a finite height"),
    (["--device", "cuda:99"], "--device"),
    (["--out", "/no/such/dir/dr.json"], "--out: the directory '/no/such/dir' of '/no/such/dir/dr.json' does not exist"),
])
def test_domain_randomization_bad_arguments_are_one_line_errors(argv, message, capsys, monkeypatch):
    dr = _module("domain_randomization")
    monkeypatch.setattr(dr, "run", lambda *a, **k: pytest.fail("the run started before the arguments were checked"))
    with pytest.raises(SystemExit) as e:
        dr.main(["--device", "cpu", *argv])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("domain_randomization.py: error: ") and message in err[0], err


def test_domain_randomization_bad_flag_exits_2_as_a_script():
    run = subprocess.run([sys.executable, str(EXAMPLES / "domain_randomization.py"), "--num-worlds", "0"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.strip() == ("domain_randomization.py: error: --num-worlds: expected an integer >= 1, got 0 "
                                  "(see domain_randomization.py --help)"), run.stderr

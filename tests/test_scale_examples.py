"""The scaling examples: examples/multi_device.py (one process per device, results gathered) and
examples/newton_policy_loop.py (act, step, read contact forces, reset the fallen worlds)."""

import importlib.util
import pathlib

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

"""``sap-validate --ray`` and ``sap-benchmark --ray`` on a local two-CPU Ray instance: the same
reports as the local run (docs/scaling.md § Ray). One Ray instance serves the module."""

import json
import re

import pytest
from conftest import DATA

ray = pytest.importorskip("ray")

from sap_tools.benchmark.cli import main as benchmark  # noqa: E402
from sap_tools.validate.cli import main as validate  # noqa: E402

# What depends on the wall clock (or the memory pool) and nothing else.
TIMING_KEYS = {"wall_s", "world_steps_per_s", "ms_per_step", "realtime_factor", "gpu_memory_mib", "seconds",
               "cpu_seconds"}


@pytest.fixture(scope="module")
def ray_cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def _without_timing(x):
    if isinstance(x, dict):
        return {k: _without_timing(v) for k, v in x.items() if k not in TIMING_KEYS}
    if isinstance(x, list):
        return [_without_timing(v) for v in x]
    return x


def _last_json(capsys):
    out = capsys.readouterr().out
    return out, json.loads(out.strip().splitlines()[-1])


def test_validate_on_ray_gives_the_local_reports(ray_cluster, capsys, tmp_path, device):
    recordings = [str(DATA / "drake" / "sphere_slide.json"), str(DATA / "drake" / "pendulum_limit.json")]
    common = [*recordings, "--backend", "both", "--device", str(device), "--mode", "both", "--steps", "6",
              "--quiet", "--json"]
    assert validate([*common, "--junit", str(tmp_path / "local.xml")]) == 0
    local_text, local = _last_json(capsys)
    assert validate([*common, "--junit", str(tmp_path / "ray.xml"), "--ray", ray_cluster]) == 0
    ray_text, on_ray = _last_json(capsys)
    assert len(on_ray["reports"]) == 4 and on_ray["verdict"] == "pass"
    assert _without_timing(on_ray) == _without_timing(local)  # every number, bit for bit (JSON round trip)
    strip = lambda s: re.sub(r'time="[0-9.]+"', "", s)  # noqa: E731
    assert strip((tmp_path / "ray.xml").read_text()) == strip((tmp_path / "local.xml").read_text())
    assert ray_text.splitlines()[:-1] == local_text.splitlines()[:-1]  # the text report, line for line


def test_benchmark_sweep_on_ray_gives_the_local_runs(ray_cluster, capsys, device):
    args = ["box_stack", "sphere_drop", "--num-worlds", "2", "3", "--preset", "approx32", "drake", "--steps", "3",
            "--warmup", "1", "--structure-steps", "1", "--device", str(device), "--quiet", "--json"]
    assert benchmark(args) == 0
    _, local = _last_json(capsys)
    assert benchmark([*args, "--ray", ray_cluster]) == 0
    _, on_ray = _last_json(capsys)
    assert len(on_ray["runs"]) == 8 and on_ray["valid"]
    assert [(r["scene"], r["num_worlds"], r["label"]) for r in on_ray["runs"]] == [
        (r["scene"], r["num_worlds"], r["label"]) for r in local["runs"]]
    assert _without_timing(on_ray) == _without_timing(local)
    assert any(r["newton_mean"] > 0 for r in on_ray["runs"])  # runs that solved contacts


def test_ray_errors_are_one_line_usage_errors(ray_cluster, capsys, tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not an npz")
    assert validate([str(bad), "--ray", ray_cluster, "--quiet"]) == 2  # checked before any task
    assert "sap-validate: error:" in capsys.readouterr().err

"""``sap-validate --ray`` and ``sap-benchmark --ray`` on a local two-CPU Ray instance: the same
reports as the local run (docs/scaling.md § Ray). One Ray instance serves the module; the tests of
addresses where no cluster answers run the tools as processes of their own (a fresh Ray import,
as on the command line) and need no instance."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

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


# Where the tool runs as a process of its own: a deadline well past what the tool may take, so that a
# tool that hangs (Ray retrying for minutes, as before the bound) fails the test instead of the run.
TOOL_DEADLINE_S = 30


def _tool(tool: str, args: list, env: dict | None = None, prelude: str = "") -> tuple[int, str, float]:
    """``tool`` (sap-validate or sap-benchmark) run as ``python -c`` in a session of its own; its exit
    status, stderr and wall time. Asserts that it ended within :data:`TOOL_DEADLINE_S` and that no
    process of its session (a Ray process it started) outlives it."""
    module = {"sap-validate": "sap_tools.validate.cli", "sap-benchmark": "sap_tools.benchmark.cli"}[tool]
    code = f"{prelude}import sys; from {module} import main; sys.exit(main(sys.argv[1:]))"
    base = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "SAP_RAY_CONNECT_TIMEOUT_S")}
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, env={**base, **(env or {})})
    try:
        _, err = proc.communicate(timeout=TOOL_DEADLINE_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"{tool} {' '.join(args)}: still running after {TOOL_DEADLINE_S} s")
    wall = time.monotonic() - t0
    with pytest.raises(ProcessLookupError):  # nothing of its process group left running
        os.killpg(proc.pid, 0)
    return proc.returncode, err, wall


def _one_line_error(tool: str, err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{tool}: error: --ray: "), err
    return lines[0]


def test_ray_address_where_nothing_listens_fails_at_once():
    """Port 1 of this machine refuses connections: a one-line usage error naming the address, what
    was tried and what to do, within the connect limit (Ray itself retries for ~14 minutes)."""
    recording = str(DATA / "drake" / "sphere_slide.json")
    rc, err, wall = _tool("sap-validate", [recording, "--ray", "127.0.0.1:1", "--quiet"])
    line = _one_line_error("sap-validate", err)
    assert rc == 2 and wall < TOOL_DEADLINE_S
    assert "no Ray cluster answers at 127.0.0.1:1" in line and ("refused" in line or "no answer within" in line)
    assert "SAP_RAY_CONNECT_TIMEOUT_S=10 s" in line and "ray start --head" in line
    # the same from RAY_ADDRESS under a bare --ray, in the other tool that takes --ray
    rc, err, _ = _tool("sap-benchmark", ["box_stack", "--num-worlds", "2", "--steps", "2", "--ray"],
                       env={"RAY_ADDRESS": "127.0.0.1:1"})
    assert rc == 2 and "no Ray cluster answers at 127.0.0.1:1 (from RAY_ADDRESS)" in err.strip().splitlines()[-1]
    assert "Traceback" not in err


def test_ray_address_that_accepts_but_never_answers_fails_within_the_limit():
    """A port that accepts TCP connections and then says nothing (not a Ray GCS: a wrong port, a
    head that hangs): Ray's own connection attempt is bounded by SAP_RAY_CONNECT_TIMEOUT_S (2 s
    here; Ray's settings have whole seconds, one attempt is at least ~4 s)."""
    with socket.create_server(("", 0), backlog=16) as silent:  # Ray connects to this machine's IP, not 127.0.0.1
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        recording = str(DATA / "drake" / "sphere_slide.json")
        rc, err, wall = _tool("sap-validate", [recording, "--ray", address, "--quiet"],
                              env={"SAP_RAY_CONNECT_TIMEOUT_S": "2"})
    line = _one_line_error("sap-validate", err)
    assert rc == 2 and wall < 20, (wall, line)
    assert f"{address} accepts connections, but Ray did not connect" in line
    assert "SAP_RAY_CONNECT_TIMEOUT_S=2 s" in line and "GCS port" in line
    gave_up = float(re.search(r"gave up after (\d+) s", line).group(1))
    assert gave_up <= 6


def test_ray_client_address_without_the_client_extra_names_it():
    """``ray://`` is Ray Client, which the minimal ``pip install ray`` lacks (its ``grpc``): the
    error names the ``ray[client]`` extra, before any connection (grpc hidden here, installed or not)."""
    recording = str(DATA / "drake" / "sphere_slide.json")
    rc, err, _ = _tool("sap-validate", [recording, "--ray", "ray://127.0.0.1:10001", "--quiet"],
                       prelude="import sys; sys.modules['grpc'] = None; ")
    line = _one_line_error("sap-validate", err)
    assert rc == 2 and "ray://127.0.0.1:10001 is a Ray Client address" in line
    assert 'pip install "ray[client]"' in line


def test_ray_connect_limit_setting_is_checked(monkeypatch, capsys):
    from sap_tools.fanout import connect_timeout

    monkeypatch.setenv("SAP_RAY_CONNECT_TIMEOUT_S", "soon")
    assert validate([str(DATA / "drake" / "sphere_slide.json"), "--ray", "127.0.0.1:1", "--quiet"]) == 2
    assert "SAP_RAY_CONNECT_TIMEOUT_S: must be a number of seconds > 0, got 'soon'" in capsys.readouterr().err
    monkeypatch.setenv("SAP_RAY_CONNECT_TIMEOUT_S", "2.5")
    assert connect_timeout() == 2.5


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

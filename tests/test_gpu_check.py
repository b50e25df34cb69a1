"""scripts/gpu_check.sh, the prepared GPU check, run on the CPU as far as a CPU can run it.

``run --smoke`` takes the GPU run's steps (the humanoid benchmark against MuJoCo Warp, the
per-world-parameter benchmark and example, the device tests) on the CPU device at tiny sizes and
must leave every file of its folder; ``prepare`` (all CPU work: NVRTC for sm_90 and the device
tests on the CPU) must fill a kernel cache with the humanoid step's sm_90 files. Both are slow; the usage check is not.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"


def _run(*args, env=None, timeout=900):
    full = {**os.environ, "PYTHON": sys.executable, **(env or {})}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=full, timeout=timeout,
                          cwd=ROOT)


def test_a_wrong_call_prints_the_usage_and_exits_2():
    for args in ([], ["fly"], ["run"], ["run", "out", "", "--fast"]):
        run = _run(*args)
        assert run.returncode == 2 and "scripts/gpu_check.sh prepare CACHE" in run.stderr, args


@pytest.mark.slow
def test_the_smoke_run_leaves_every_file_of_a_gpu_run(tmp_path):
    run = _run("run", str(tmp_path / "out"), "", "--smoke")
    assert run.returncode == 0, run.stdout + run.stderr
    out = tmp_path / "out"
    assert {p.name for p in out.iterdir()} == {"env.txt", "pytest.log", "pytest.xml", "benchmark.log",
                                               "benchmark.json", "summary.txt", "randomize.log", "randomize.json",
                                               "domain_randomization.log", "domain_randomization.json"}
    result = json.loads((out / "benchmark.json").read_text())
    assert {r["backend"] for r in result["runs"]} == {"sap_gpu", "mujoco_warp"}
    # the default sweep: each preset with each line search (the default, exact_root, and
    # monotone_decay) under the default register caps, factoring by the lanes' registers (a GPU's
    # default; the smoke run is on the CPU device, whose default factors by tile, so the runs carry
    # the label /lanes)
    assert sorted(r["label"] for r in result["runs"] if r["backend"] == "sap_gpu") == [
        "approx32/exact_root/lanes", "approx32/monotone_decay/lanes", "drake/exact_root/lanes",
        "drake/monotone_decay/lanes"]
    assert {(r["preset"], r["line_search"]) for r in result["runs"] if r["backend"] == "sap_gpu"} == {
        (p, ls) for p in ("approx32", "drake") for ls in ("exact_root", "monotone_decay")}
    summary = (out / "summary.txt").read_text()
    assert "pytest: exit 0" in summary and "ncu: no profile (CPU device)" in summary
    assert "randomize: exit 0" in summary and "domain_randomization.py: exit 0" in summary
    randomized = json.loads((out / "randomize.json").read_text())
    assert any(r["label"].endswith("/randomized") for r in randomized["runs"])


@pytest.mark.slow
def test_prepare_fills_a_kernel_cache_for_sm90(tmp_path):
    cache = tmp_path / "cache"
    run = _run("prepare", str(cache), env={"GPU_CHECK_TESTS": "tests/test_gpu_launch.py"}, timeout=1800)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    cubins = list(cache.rglob("*.sm90.cubin"))
    names = " ".join(p.name for p in cubins)
    assert "fused_newton" in names and "mujoco_warp" in names and "sap_gpu.kinematics" in names


def test_precompile_arch_refuses_xdist_workers():
    """--precompile-arch compiles the launches of the process that ran the tests; under xdist the
    workers' compile would go unseen (it did: "0 sap_gpu variants"), so the run is refused at once."""
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--precompile-arch", "90",
                          "-n", "2", "tests/test_gpu_launch.py"], capture_output=True, text=True, cwd=ROOT,
                         timeout=300)
    assert run.returncode == 4, run.stdout[-2000:] + run.stderr[-2000:]
    assert "--precompile-arch: run without pytest-xdist (-n)" in run.stderr


def test_the_stage_cost_variants_repeat_exactly_one_stage(tmp_path):
    """scripts/fused_stage_costs.py: each copy of the fused kernel differs from the checkout's by its
    stage's whole lines once more, after a block barrier at their indentation, and is valid Python
    (a kernel edit that moves or re-indents those lines fails here)."""
    import ast
    import importlib.util

    spec = importlib.util.spec_from_file_location("fused_stage_costs", ROOT / "scripts" / "fused_stage_costs.py")
    fsc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fsc)
    original = fsc.FUSED.read_text()
    made = fsc.make_variants(tmp_path)
    assert sorted(made) == ["chol2", "eval2", "hess2", "lchol2", "ls2"]
    for name, folder in made.items():
        text = (folder / "sap_gpu" / "contact_solve_fused.py").read_text()
        lines = fsc.STAGES[name]
        indent = lines[:len(lines) - len(lines.lstrip(" "))]
        assert original.count("\n" + lines) == 1, name
        assert text == original.replace("\n" + lines, "\n" + lines + indent + "block_sync(lane)\n" + lines), name
        ast.parse(text)
    row = ("approx32              2          1,018     1.964      2.55        -      5.50/7     16.25/25      7.50"
           "      100%       0      0    no      48.0    1.0  yes")
    assert fsc.ms_per_step(row) == {"approx32": 1.964}

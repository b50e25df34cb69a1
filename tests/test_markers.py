"""The marker commands (docs/testing.md § Markers) select what they promise, never nothing.

pytest exits with status 5 when a command selects no test, which CI counts as a failure. The
project's ``addopts`` carry ``-m 'not slow and not cuda_compile'``; a ``-m`` on the command line
replaces it (the last ``-m`` wins), so ``pytest -m slow`` selects the slow tests, ``pytest -m
cuda_compile`` the CUDA compiles, and plain ``pytest`` leaves both out. These tests run the real
commands in a subprocess, as a user would.
"""

import functools
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
SLOW_MODULE = "tests/test_long_rollouts.py"  # every test in it carries the slow marker (others have some)
CUDA_COMPILE_MODULE = "tests/test_gpu_precompile.py"  # holds the cuda_compile tests (and quick ones)
# Collection imports Warp, MuJoCo and every test module; a 2-core CI machine needs ~10 s.
COMMAND_TIMEOUT = 600  # s


def _pytest(*args):
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}  # the config as shipped
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=COMMAND_TIMEOUT)


def _collected(*args):
    run = _pytest("--collect-only", "-q", *args)
    assert run.returncode == 0, (f"pytest {' '.join(args)} --collect-only: exit {run.returncode}\n"
                                 f"{run.stdout}\n{run.stderr}")
    return {line.strip() for line in run.stdout.splitlines() if "::" in line}


@functools.lru_cache(maxsize=1)
def _every_test():
    return frozenset(_collected("-m", "slow or not slow"))


def test_pytest_m_slow_selects_the_long_checks():
    slow = _collected("-m", "slow")
    assert len(slow) >= 1
    assert {t for t in _every_test() if t.startswith(SLOW_MODULE + "::")} <= slow


def test_plain_pytest_selects_everything_but_the_slow_and_cuda_compile_tests():
    default = _collected()
    assert len(default) >= 1
    cuda_compile = _collected("-m", "cuda_compile")
    assert cuda_compile and all(t.startswith(CUDA_COMPILE_MODULE + "::") for t in cuda_compile)
    assert default == _every_test() - _collected("-m", "slow") - cuda_compile


def test_pytest_m_gpu_runs_the_gpu_tests_and_skips_them_with_a_reason_without_cuda():
    run = _pytest("-m", "gpu", "-q", "-rs")
    assert run.returncode == 0, f"pytest -m gpu: exit {run.returncode}\n{run.stdout}\n{run.stderr}"
    summary = run.stdout.strip().splitlines()[-1]
    assert "passed" in summary or "skipped" in summary, summary
    device = os.environ.get("SAP_TEST_DEVICE", "cpu")
    if not device.startswith("cuda"):
        assert "passed" not in summary and "failed" not in summary, summary
        reasons = [line for line in run.stdout.splitlines() if line.startswith("SKIPPED")]
        assert reasons and all("CUDA" in line for line in reasons), "\n".join(reasons)

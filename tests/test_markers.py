"""The marker commands (docs/testing.md § Markers) select what they promise, never nothing.

pytest exits with status 5 when a command selects no test, which CI counts as a failure. The
project's ``addopts`` carry ``-m 'not slow and not cuda_compile'``; a ``-m`` on the command line
replaces it (the last ``-m`` wins), so ``pytest -m slow`` selects the slow tests, ``pytest -m
cuda_compile`` the CUDA compiles, and plain ``pytest`` leaves both out. These tests run the real
commands in a subprocess, as a user would: on a sample of modules that holds every kind of test
(quick, slow and cuda_compile ones) in the default run, and on the whole suite under ``slow``
(each whole-suite collection imports every test module, ~20-90 s on a loaded 2-core machine).
"""

import functools
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SLOW_MODULE = "tests/test_long_rollouts.py"  # every test in it carries the slow marker (others have some)
CUDA_COMPILE_MODULE = "tests/test_gpu_precompile.py"  # holds the cuda_compile tests (and quick ones)
# Modules with quick, slow and cuda_compile tests between them: what the selection rules act on.
SAMPLE = (SLOW_MODULE, CUDA_COMPILE_MODULE, "tests/test_collision_properties.py")
# The sample (default run) and the whole suite (slow: every test module imported per collection).
SCOPES = [pytest.param(SAMPLE, id="sample"), pytest.param((), id="suite", marks=pytest.mark.slow)]
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


@functools.lru_cache(maxsize=None)
def _every_test(scope):
    return frozenset(_collected("-m", "slow or not slow", *scope))


@pytest.mark.parametrize("scope", SCOPES)
def test_pytest_m_slow_selects_the_long_checks(scope):
    slow = _collected("-m", "slow", *scope)
    assert len(slow) >= 1
    assert {t for t in _every_test(scope) if t.startswith(SLOW_MODULE + "::")} <= slow


@pytest.mark.parametrize("scope", SCOPES)
def test_plain_pytest_selects_everything_but_the_slow_and_cuda_compile_tests(scope):
    default = _collected(*scope)
    assert len(default) >= 1
    cuda_compile = _collected("-m", "cuda_compile", *scope)
    assert cuda_compile and all(t.startswith(CUDA_COMPILE_MODULE + "::") for t in cuda_compile)
    slow = _collected("-m", "slow", *scope)
    assert default == _every_test(scope) - slow - cuda_compile
    assert default and slow - cuda_compile  # the sample really holds all three kinds


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


def test_the_repeatable_profile_draws_no_literals_harvested_from_the_code():
    """Derandomized examples must not depend on which project modules a worker imported first."""
    from hypothesis.internal.conjecture import providers

    import sap_common.constants  # noqa: F401  (a module of literals, loaded now)

    if os.environ.get("HYPOTHESIS_PROFILE", "repeatable") == "explore":
        pytest.skip("the explore profile keeps the harvest on purpose")
    if not hasattr(providers, "_get_local_constants"):
        pytest.skip("this Hypothesis harvests no literals")
    assert len(providers._get_local_constants()) == 0


def test_the_default_pairs_take_every_preset_and_every_line_search_once():
    """tests/variants.py: the default run's (preset, line search) pairs are a diagonal of the
    product, and -m slow takes every other pair."""
    from variants import DEFAULT_PAIRS, LINE_SEARCHES, PRESETS, preset_line_search_params

    presets, searches = zip(*DEFAULT_PAIRS)
    assert sorted(presets) == sorted(PRESETS) and sorted(searches) == sorted(LINE_SEARCHES)
    params = preset_line_search_params()
    assert len({tuple(p.values) for p in params}) == len(params) == len(PRESETS) * len(LINE_SEARCHES)
    slow = {tuple(p.values) for p in params if any(m.name == "slow" for m in p.marks)}
    assert slow == {tuple(p.values) for p in params} - set(DEFAULT_PAIRS)

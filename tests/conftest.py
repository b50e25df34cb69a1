"""Test configuration: Hypothesis profiles and shared fixtures.

Hypothesis profiles (``HYPOTHESIS_PROFILE``): ``repeatable`` (the default: derandomized, so
README's ``pytest`` and CI's run draw the same examples every time and a failure reproduces) and
``explore`` (new random examples every run, remembered in Hypothesis's example database when
they fail: the random search that ``.ci/run`` runs on purpose; see
docs/testing.md § Hypothesis profiles). Neither has a deadline: CI machines are slow and shared,
and timing is not what these tests check.
"""

from __future__ import annotations

import contextlib
import os
import pathlib

import pytest
from hypothesis import HealthCheck, settings

PROFILES = ("repeatable", "explore", "ci")  # "ci": the earlier name of "repeatable", kept for scripts that set it
for _name in ("repeatable", "ci"):
    settings.register_profile(_name, deadline=None, derandomize=True, print_blob=True,
                              suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("explore", deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow])
_profile = os.environ.get("HYPOTHESIS_PROFILE", "repeatable")
if _profile not in PROFILES:
    raise pytest.UsageError(f"HYPOTHESIS_PROFILE: {_profile!r} is not a profile of this suite; valid: "
                            f"{', '.join(PROFILES)}")
settings.load_profile(_profile)


def _without_local_constants() -> None:
    """Derandomized draws that depend on the test alone. Hypothesis (6.131 and later) also draws
    literals it harvests from the project's modules loaded so far in the process, so the examples
    of a derandomized test would change with the modules a worker happened to import first (the
    pytest-xdist schedule) and with any constant edited anywhere. The repeatable profile draws
    without them; ``explore`` keeps them (they find edge cases)."""
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:  # pragma: no cover - an older Hypothesis without the harvest
        return
    if hasattr(providers, "_get_local_constants") and hasattr(providers, "Constants"):
        empty = providers.Constants()
        providers._get_local_constants = lambda: empty


if _profile != "explore":
    _without_local_constants()

DATA = pathlib.Path(__file__).parent / "data"


def pytest_addoption(parser):
    parser.addoption("--device", default=os.environ.get("SAP_TEST_DEVICE", "cpu"),
                     help="Warp device for the sap_gpu tests: cpu (default, CI) or cuda:0; env SAP_TEST_DEVICE")
    parser.addoption("--precompile-arch", type=int, default=None,
                     help="record the sap_gpu kernels the run launches and, at its end, compile each for this SM "
                          "architecture (e.g. 90) into Warp's kernel cache: a cache for a GPU run of the same tests "
                          "(scripts/gpu_check.sh)")
    parser.addoption("--cuda-output", default=None, choices=("cubin", "ptx"),
                     help="what Warp compiles CUDA modules to (wp.config.cuda_output; default: Warp's choice). "
                          "cubin loads the files sap-precompile and --precompile-arch write")
    parser.addoption("--warp-optimization-level", type=int, default=None, choices=(0, 1, 2, 3),
                     help="compile every Warp module at this optimization level (wp.config.optimization_level; "
                          "default: Warp's, 3). 0 runs the kernels as written, with nothing folded away: "
                          "undefined behaviour that an optimizer hides shows there (docs/testing.md § Markers)")


def pytest_configure(config):
    if config.getoption("--cuda-output"):
        import warp as wp

        wp.config.cuda_output = config.getoption("--cuda-output")
    if config.getoption("--warp-optimization-level") is not None:
        import warp as wp

        wp.config.optimization_level = config.getoption("--warp-optimization-level")
    arch = config.getoption("--precompile-arch")
    if arch is not None:
        if getattr(config.option, "numprocesses", None) or hasattr(config, "workerinput"):
            # The launches are recorded, and compiled at the end, in the process that runs the
            # tests; under pytest-xdist that is each worker, whose end-of-run output is lost.
            raise pytest.UsageError("--precompile-arch: run without pytest-xdist (-n): the launches it compiles "
                                    "are recorded in one process")
        from sap_gpu.launch import record_launches

        config._sap_precompile = (arch, record_launches(dry_run=False))
        config._sap_precompile_record = config._sap_precompile[1].__enter__()


def pytest_collection_modifyitems(config, items):
    """Every test that takes the ``device`` fixture is marked ``device``: the tests a GPU run needs
    (``pytest --device cuda:0 -m "device and not slow"``, scripts/gpu_check.sh)."""
    for item in items:
        if "device" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.device)


def pytest_unconfigure(config):
    """With --precompile-arch: compile every recorded (module, block size) variant for the GPU."""
    if not hasattr(config, "_sap_precompile"):
        return
    arch, context = config._sap_precompile
    context.__exit__(None, None, None)
    from sap_gpu.precompile import compile_variant

    record = config._sap_precompile_record
    total, failed = 0.0, []
    for (name, block_dim), module in record.variants.items():
        try:
            total += compile_variant(module, block_dim, arch).seconds
        except Exception as e:  # report every module that does not compile, not just the first
            failed.append(f"{name} (block {block_dim}): {' '.join(str(e).split())[:300]}")
    print(f"\n--precompile-arch {arch}: {len(record.variants)} sap_gpu variants, {total:.1f} s of compiling, "
          f"{len(failed)} failed" + "".join(f"\n  FAILED {f}" for f in failed))


@pytest.fixture(scope="session")
def device(request):
    """The Warp device the sap_gpu tests run on (``--device`` / ``SAP_TEST_DEVICE``)."""
    from sap_gpu.device import get_device

    try:
        return get_device(request.config.getoption("--device"), "--device")
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None
DRAKE_ANCHORS = sorted(p for p in (DATA / "drake").glob("*.json") if p.name != "index.json")

# How much of a Drake recording an anchor test follows. The default run steps the first
# ANCHOR_DEFAULT_STEPS steps of each recording (all of a shorter one): every event of the
# recordings happens there (the last change of a contact count is at step 286, pendulum_limit
# reaches its stop at step 610 and turns back at 622; test_ref_solver.py checks this from the
# data), and the rest is the same motion drifting on. The whole recording, the long-horizon
# drift, runs under ``slow``: the 3,000-step pendulums alone take ~50 s on sap_ref.
ANCHOR_DEFAULT_STEPS = 800
ANCHOR_LENGTHS = [pytest.param(ANCHOR_DEFAULT_STEPS, id=f"first_{ANCHOR_DEFAULT_STEPS}_steps"),
                  pytest.param(None, id="whole_recording", marks=pytest.mark.slow)]


def anchor_steps(scene, length) -> int:
    """Steps of ``scene``'s recording an anchor test takes for ``length`` (an ANCHOR_LENGTHS value)."""
    return scene.num_steps if length is None else min(int(length), scene.num_steps)


@pytest.fixture(scope="session")
def drake_anchor_paths():
    assert DRAKE_ANCHORS, f"no Drake anchors under {DATA / 'drake'}"
    return DRAKE_ANCHORS


@contextlib.contextmanager
def cooperative_lanes(enabled: bool = True):
    """Run block-per-world (tile) kernels on Warp's CPU device with all their lanes.

    Warp runs a tile kernel's block on one lane on the CPU unless ``wp.config.enable_cpu_blocks``
    is set; with it, the block's lanes run as cooperative fibers that switch at every block
    barrier, so the lane-strided loops, block reductions and barriers of the fused Newton loop
    really run (a missing barrier shows as a read of data another lane has not written yet). No
    effect on CUDA, where blocks always have their lanes. Restores the previous setting.
    """
    import warp as wp

    saved = wp.config.enable_cpu_blocks
    wp.config.enable_cpu_blocks = bool(enabled) or saved
    try:
        yield
    finally:
        wp.config.enable_cpu_blocks = saved


class _NoDefaultDevice:
    """Stands in for Warp's default device: any use of it fails the test, naming the culprit."""

    def __getattr__(self, name):
        raise AssertionError(f"Warp's default device was used (attribute {name!r}): a code path did not pass its "
                             "device explicitly")

    def __repr__(self):
        return "<no default device>"


@contextlib.contextmanager
def no_default_device():
    """While the block runs, Warp has no usable default device: ``wp.get_device()`` and every Warp
    call given no device get a stand-in that fails on use. A code path that falls back to the
    implicit default (the ``cuda:0`` of a multi-GPU process) fails here even on a CPU-only machine.
    Restores the default device afterwards."""
    import warp as wp

    wp.init()
    runtime = wp._src.context.runtime
    saved = runtime.default_device
    runtime.default_device = _NoDefaultDevice()
    try:
        yield
    finally:
        runtime.default_device = saved

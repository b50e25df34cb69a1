"""Test configuration: Hypothesis profiles and shared fixtures.

``HYPOTHESIS_PROFILE=ci`` (set by ``.ci/run``) derandomizes Hypothesis so CI is repeatable;
the default profile explores new examples on every run. Neither has a deadline: CI machines
are slow and shared, and timing is not what these tests check.
"""

from __future__ import annotations

import contextlib
import os
import pathlib

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("default", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

DATA = pathlib.Path(__file__).parent / "data"


def pytest_addoption(parser):
    parser.addoption("--device", default=os.environ.get("SAP_TEST_DEVICE", "cpu"),
                     help="Warp device for the sap_gpu tests: cpu (default, CI) or cuda:0; env SAP_TEST_DEVICE")


@pytest.fixture(scope="session")
def device(request):
    """The Warp device the sap_gpu tests run on (``--device`` / ``SAP_TEST_DEVICE``)."""
    from sap_gpu.device import get_device

    try:
        return get_device(request.config.getoption("--device"), "--device")
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None
DRAKE_ANCHORS = sorted(p for p in (DATA / "drake").glob("*.json") if p.name != "index.json")


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

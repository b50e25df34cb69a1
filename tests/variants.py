"""The solver configurations the sap_gpu tests sweep, and the share the default run takes.

Each contact preset (its scalar types) with each line search is a kernel of its own: a fused
Newton kernel per (preset, line search, contact approximation, lanes per block) and a staged
line-search and evaluation kernel per (preset, line search, approximation), 2-4 s of compiling
each on the CPU device. Drawing the pair at random from the 3 × 3 product made the default run
compile most of the 9 pairs for every test that draws it. So the tests take the pair as a
parameter instead: the default run takes three pairs, in which every preset and every line
search appears once (the diagonal below), and ``pytest -m slow`` the other six, with as many
examples each (docs/testing.md § Markers). The code of a preset (the scalar types, the weights,
the contact points) and the code of a line search are independent of each other in both Newton
paths, so the diagonal runs every piece of either; the slow run checks every combination.
"""

import itertools

import pytest

from sap_common import config

PRESETS = tuple(config.PRESETS)
LINE_SEARCHES = config.LINE_SEARCH_VARIANTS
# Each preset with one line search and each line search with one preset
# (tests/test_markers.py checks that they cover both). The library's default configuration
# (approx32, exact_root) is one of them: the tests that take no pair run it, so its kernels are
# compiled for them anyway.
DEFAULT_PAIRS = (("approx32", "exact_root"), ("approx64", "monotone_decay"), ("drake", "armijo_decay"))
# The line search a test that sweeps the presets alone takes with each: its default pair's, so
# that it compiles the kernels the pair's tests compile.
PAIRED_LINE_SEARCH = dict(DEFAULT_PAIRS)


def preset_line_search_params():
    """``pytest.param(preset, line_search)`` for every pair; the pairs off the diagonal are slow."""
    return [pytest.param(p, ls, id=f"{p}-{ls}", marks=() if (p, ls) in DEFAULT_PAIRS else pytest.mark.slow)
            for p, ls in itertools.product(PRESETS, LINE_SEARCHES)]

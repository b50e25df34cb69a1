"""``sap-benchmark``, ``sap-benchmark-collision``, ``sap-benchmark-accuracy`` and ``sap-plot-benchmark``.

:mod:`~sap_tools.benchmark.cli` is the command line of ``sap-benchmark`` (also
``python -m sap_tools.benchmark``), :mod:`~sap_tools.benchmark.runs` the runs it times and
:mod:`~sap_tools.benchmark.measure` their timing, structure counts, validity and report tables,
:mod:`~sap_tools.benchmark.traffic` their memory traffic (``--structure``);
:mod:`~sap_tools.benchmark.collision` is ``sap-benchmark-collision``,
:mod:`~sap_tools.benchmark.accuracy` is ``sap-benchmark-accuracy`` (how far each line search stops from
the minimiser) and
:mod:`~sap_tools.benchmark.plot` is ``sap-plot-benchmark``.

The public names of the runs and their measurement are importable from here, for scripts
(``from sap_tools.benchmark import SapRun, time_run``). Each is loaded on first use, so importing
the package, as ``sap-plot-benchmark`` does, does not load Warp.
"""

from __future__ import annotations

import importlib

# Name → the module of this package that defines it.
_EXPORTS = {
    "main": "cli",
    "load_scene": "runs", "noise_channels": "runs", "percentile_from_histogram": "runs", "SapRun": "runs",
    "MjwarpRun": "runs", "DEFAULT_NOISE_STD": "runs",
    "time_run": "measure", "breakdown": "measure", "structure": "measure", "validity": "measure",
    "MIN_CONVERGED_FRACTION": "measure", "newton_traffic": "traffic", "setup_traffic": "traffic",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))

"""Command-line tools: the demo, scene inspection, benchmarks, backend and preset comparisons,
step inspection and the viewer, recording scenes with Drake or MuJoCo and validating
implementations against recordings.

Each ``sap-*`` command is the ``main`` of one module (pyproject.toml, ``[project.scripts]``).
The commands made of several modules are sub-packages: :mod:`sap_tools.benchmark`,
:mod:`sap_tools.record`, :mod:`sap_tools.validate` and :mod:`sap_tools.view`, each with its
command line in ``cli.py``. The modules at this level are one command each or shared by several
(:mod:`sap_tools.cli`, :mod:`sap_tools.progress`, :mod:`sap_tools.tolerances`, …)."""

from sap_common._version import __version__ as __version__

"""``python -m sap_tools.benchmark``: the same as ``sap-benchmark``."""

import sys

from sap_tools.benchmark.cli import main

sys.exit(main())

"""``python -m sap_tools.record``: the same as ``sap-record``."""

import sys

from sap_tools.record.cli import main

sys.exit(main())

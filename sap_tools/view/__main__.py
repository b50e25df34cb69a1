"""``python -m sap_tools.view``: the same as ``sap-view`` (the browser tests start it this way)."""

import sys

from sap_tools.view.cli import main

sys.exit(main())

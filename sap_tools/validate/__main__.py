"""``python -m sap_tools.validate``: the same as ``sap-validate``."""

import sys

from sap_tools.validate.cli import main

sys.exit(main())

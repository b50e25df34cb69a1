"""The version of the ``sap-contact`` distribution, the one source of every package's ``__version__``.

Read from the installed distribution's metadata (``importlib.metadata``), which pip writes from
pyproject.toml. A source checkout used without installing it reads pyproject.toml beside the
packages; anything else gets ``0+unknown``.
"""

from __future__ import annotations

import os

__all__ = ["__version__", "DISTRIBUTION"]

DISTRIBUTION = "sap-contact"
_PYPROJECT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pyproject.toml")


def _version(distribution: str = DISTRIBUTION, pyproject: str = _PYPROJECT) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        pass
    try:
        import tomllib

        with open(pyproject, "rb") as f:
            project = tomllib.load(f).get("project", {})
        if project.get("name") == distribution and isinstance(project.get("version"), str):
            return project["version"]
    except (OSError, ValueError):
        pass
    return "0+unknown"


__version__ = _version()

"""The repository passes ``ruff check`` with the configuration in pyproject.toml ([tool.ruff])."""

from __future__ import annotations

import importlib.util
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_ruff_check_passes():
    if importlib.util.find_spec("ruff") is None:
        pytest.skip("ruff is not installed (pip install ruff, or the project's [test] extra)")
    run = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"ruff check . failed (exit {run.returncode}):\n{run.stdout}{run.stderr}"

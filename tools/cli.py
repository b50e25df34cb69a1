"""Shared command-line pieces of the rollout tools (``sap-compare-presets``, ``sap-compare-backends``)."""

from __future__ import annotations

import argparse

from tools.scenes import _load

__all__ = ["rollout_parser", "load_rollout", "warp_device"]


def rollout_parser(prog: str, doc: str, line_search_help: str) -> argparse.ArgumentParser:
    """A parser with the arguments every rollout comparison takes: scene, --steps, --every,
    --line-search, --json, --quiet. The caller adds its own before parsing."""
    parser = argparse.ArgumentParser(prog=prog, description=doc.split("\n")[0])
    parser.add_argument("scene", help="built-in scene name or JSON scene file")
    parser.add_argument("--steps", type=int, default=None, help="rollout length (default: the scene's)")
    parser.add_argument("--every", type=int, default=10, help="compare every N steps (default 10)")
    parser.add_argument("--line-search", default=None, help=line_search_help)
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def load_rollout(args):
    """``(scene, overrides)`` from parsed rollout arguments; ``ValueError`` naming a bad flag."""
    scene = _load(args.scene, 1)
    if args.steps is not None and args.steps < 1:
        raise ValueError(f"--steps: must be >= 1, got {args.steps}")
    if args.every < 1:
        raise ValueError(f"--every: must be >= 1, got {args.every}")
    return scene, ({} if args.line_search is None else {"line_search_variant": args.line_search})


def warp_device(name):
    """The Warp device called ``name`` (None: Warp's default), or ``ValueError`` naming --device
    and listing the devices here (``sap_gpu.device.get_device``, the one device check)."""
    from sap_gpu.device import get_device

    return get_device(name, "--device")

"""Shared command-line pieces of the tools: the parser, one-line errors, early checks of files.

Every tool reports a usage error the same way, before any work: one line
``tool: error: message`` on stderr and exit status 2 (argparse's convention, without the
usage block). Flags are checked first, then the scene and the output path, then the run starts.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import sys

from sap_common.config import LINE_SEARCH_VARIANTS, LINEAR_SOLVERS, PRESETS

__all__ = ["Parser", "parser", "quiet_warp", "plain", "fail", "check_out", "plot_path", "load_scene_arg", "scene_solver_kwargs", "check_flags",
           "rollout_parser", "load_rollout", "warp_device", "PRESET_CHOICES", "LINE_SEARCH_CHOICES",
           "LINEAR_SOLVER_CHOICES"]

# Choices listed in --help, read from sap_common.config (the one place that defines them).
PRESET_CHOICES = ", ".join(PRESETS)
LINE_SEARCH_CHOICES = ", ".join(LINE_SEARCH_VARIANTS)
LINEAR_SOLVER_CHOICES = ", ".join(LINEAR_SOLVERS)


class Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors are one line, ``prog: error: message``, exit status 2.

    Parsing a tool's command line is where the tool becomes the application, so that is where it
    makes the one Warp setting an application makes (:func:`quiet_warp`), unless built with
    ``uses_warp=False``.
    """

    uses_warp = True

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_args(self, args=None, namespace=None):
        parsed = super().parse_args(args, namespace)
        if self.uses_warp:
            quiet_warp()
        return parsed


def quiet_warp() -> None:
    """Keep Warp's INFO messages (a line per module it loads or compiles) out of a tool's output,
    where they would mix with reports and JSON. The command-line tools are applications and make
    this choice for themselves; importing sap_gpu as a library changes no Warp setting."""
    import warp as wp

    if wp.config.log_level < wp.LOG_WARNING:
        wp.config.log_level = wp.LOG_WARNING


def plain(text: str) -> str:
    """Docstring text without reStructuredText markup (for ``--help``): ````x```` → x,
    ``:role:`~a.b.C``` → C, ```x``` → x."""
    text = re.sub(r":\w+:`~?(?:[\w.]*\.)?([^`]+)`", r"\1", text)
    text = re.sub(r"``([^`]+)``", r"\1", text)
    return re.sub(r"`([^`]+)`", r"\1", text)


def parser(prog: str, doc: str, uses_warp: bool = True) -> Parser:
    """A :class:`Parser` whose description is the docstring's first line and whose epilog lists
    the docstring's example commands (its indented lines starting with ``prog``). A tool that never
    runs Warp passes ``uses_warp=False`` (its parsing then leaves Warp unimported)."""
    lines = doc.strip().splitlines()
    summary = plain(lines[0].split(":", 1)[1].strip() if lines[0].startswith("``") else lines[0])
    if "_" not in summary.split(" ", 1)[0]:  # "sap_gpu ..." keeps its spelling
        summary = summary[:1].upper() + summary[1:]
    examples, more = [], False
    for line in lines[1:]:
        stripped = line.strip()
        if stripped.startswith(prog) or (more and line.startswith("        ")):
            examples.append(("      " if more else "  ") + plain(stripped))
            more = stripped.endswith("\\")
        else:
            more = False
    epilog = "examples:\n" + "\n".join(examples) if examples else None
    p = Parser(prog=prog, description=summary, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.uses_warp = uses_warp
    return p


def fail(prog: str, message) -> int:
    """Print ``prog: error: message`` as one line on stderr; return the exit status 2."""
    text = " ".join(str(message).split())  # one line, whatever the message held
    print(f"{prog}: error: {text}", file=sys.stderr)
    return 2


def check_out(flag: str, path: str) -> str:
    """``path`` if a file can be written there: its directory exists and is writable, and the path
    is not a directory; else ``ValueError`` naming ``flag``. Checked before any work."""
    if os.path.isdir(path):
        raise ValueError(f"{flag}: {path!r} is a directory; give a file name")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"{flag}: the directory {os.path.dirname(path) or '.'!r} of {path!r} does not exist")
    if not os.access(folder, os.W_OK):
        raise ValueError(f"{flag}: the directory {os.path.dirname(path) or '.'!r} of {path!r} is not writable")
    return path


def plot_path(flag: str, path: str) -> str:
    """The file a plot is written to: ``path`` itself when its extension is a format matplotlib
    writes, ``path + ".png"`` when it has none; ``ValueError`` for another extension, or a
    directory that cannot take the file. Needs matplotlib."""
    from matplotlib.backend_bases import FigureCanvasBase

    check_out(flag, path)  # the name as given: not a directory, in a directory that exists
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    formats = FigureCanvasBase.get_supported_filetypes()
    if not ext:
        path += ".png"
    elif ext not in formats:
        raise ValueError(f"{flag}: matplotlib cannot write {ext!r} files; use one of {', '.join(sorted(formats))}")
    return check_out(flag, path)


def load_scene_arg(name: str, num_worlds: int):
    """A built-in scene, a JSON scene file or (``.xml``/``.urdf``) an MJCF/URDF file; ``ValueError``
    naming the scene argument when the name is unknown or the file is missing or unreadable."""
    from sap_common import scenes
    from sap_common.io import load_json

    looks_like_file = name.lower().endswith((".json", ".xml", ".urdf")) or os.sep in name or "/" in name
    if not (looks_like_file or os.path.exists(name)):
        return scenes.get(name, num_worlds=num_worlds)
    if not os.path.exists(name):
        raise ValueError(f"scene file: {name!r} does not exist")
    if os.path.isdir(name):
        raise ValueError(f"scene file: {name!r} is a directory")
    try:
        if name.lower().endswith((".xml", ".urdf")):
            from sap_common.io import load_mjcf

            return load_mjcf(name, num_worlds=num_worlds)
        return load_json(name, num_worlds=num_worlds)
    except OSError as e:
        raise ValueError(f"scene file: cannot read {name!r} ({e.strerror or e})") from None


def scene_solver_kwargs(scene, preset: str | None, line_search: str | None,
                        default_preset: str = "approx32") -> tuple[dict, str]:
    """Solver settings of a run: the scene file's own (a Drake scene carries Drake's preset, line
    search and tolerances) as defaults, ``--preset`` / ``--line-search`` over them,
    ``default_preset`` where neither says. Returns ``(kwargs for SolverSAP, a line saying where each came from)``.

    A ``line_search_max_iterations`` of the file belongs to the file's line search: it is dropped
    when ``--line-search`` picks another one.
    """
    kwargs = dict(scene.solver_kwargs)
    source = "scene file" if kwargs else "default"
    notes = []
    if preset is not None:
        kwargs["contact_preset_variant"] = preset
    kwargs.setdefault("contact_preset_variant", default_preset)
    notes.append(f"preset {kwargs['contact_preset_variant']} ({'--preset' if preset is not None else source})")
    if line_search is not None:
        if kwargs.get("line_search_variant") != line_search:
            kwargs.pop("line_search_max_iterations", None)
        kwargs["line_search_variant"] = line_search
    if "line_search_variant" in kwargs:
        notes.append(f"line search {kwargs['line_search_variant']} "
                     f"({'--line-search' if line_search is not None else source})")
    others = sorted(set(kwargs) - {"contact_preset_variant", "line_search_variant"})
    if others:
        notes.append(f"{', '.join(others)} from the scene file")
    return kwargs, "solver: " + "; ".join(notes)


def check_flags(preset: str | None, line_search: str | None) -> None:
    """``ValueError`` naming ``--preset`` or ``--line-search`` when SapConfig rejects its value."""
    from sap_common.config import SapConfig

    try:
        SapConfig.from_preset(preset or "approx32")
    except ValueError as e:
        raise ValueError(f"--preset: {e}") from None
    if line_search is not None:
        try:
            SapConfig.from_preset(preset or "approx32", line_search_variant=line_search)
        except ValueError as e:
            raise ValueError(f"--line-search: {e}") from None


def rollout_parser(prog: str, doc: str, line_search_help: str) -> Parser:
    """A parser with the arguments every rollout comparison takes: scene, --steps, --every,
    --line-search, --json, --quiet. The caller adds its own before parsing."""
    p = parser(prog, doc)
    p.add_argument("scene", help="built-in scene name or JSON scene file")
    p.add_argument("--steps", type=int, default=None, help="rollout length (default: the scene's)")
    p.add_argument("--every", type=int, default=10, help="compare every N steps (default 10)")
    p.add_argument("--line-search", default=None, help=f"{line_search_help}: one of {LINE_SEARCH_CHOICES}")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def load_rollout(args):
    """``(scene, overrides)`` from parsed rollout arguments; ``ValueError`` naming a bad flag."""
    if args.steps is not None and args.steps < 1:
        raise ValueError(f"--steps: must be >= 1, got {args.steps}")
    if args.every < 1:
        raise ValueError(f"--every: must be >= 1, got {args.every}")
    scene = load_scene_arg(args.scene, 1)
    return scene, ({} if args.line_search is None else {"line_search_variant": args.line_search})


def warp_device(name):
    """The Warp device called ``name`` (None: Warp's default), or ``ValueError`` naming --device
    and listing the devices here (``sap_gpu.device.get_device``, the one device check)."""
    from sap_gpu.device import get_device

    return get_device(name, "--device")


def cpu_model() -> str:
    """This machine's CPU model name (from /proc/cpuinfo where there is one), for reports."""
    model = platform.processor() or platform.machine() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), model)
    except OSError:
        pass
    return model

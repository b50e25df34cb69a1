"""Shared command-line pieces of the tools: the parser, one-line errors, early checks of files,
atomic outputs and Ctrl-C.

Every tool reports a usage error the same way, before any work: one line
``tool: error: message`` on stderr and exit status 2 (argparse's convention, without the
usage block). Flags are checked first, then the scene and the output path, then the run starts.

Every file a tool writes is written atomically (:func:`atomic_output`): into a temporary file
beside it, renamed over the target only when complete, so an interrupted run leaves an existing
file as it was and never a truncated one. Every tool's ``main`` is wrapped by :func:`entry_point`:
Ctrl-C prints one line naming what was not written and exits with status 130.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import platform
import re
import sys
import tempfile

from sap_common._version import __version__
from sap_common.config import LINE_SEARCH_VARIANTS, LINEAR_SOLVERS, PRESETS

__all__ = ["Parser", "parser", "quiet_warp", "init_warp", "plain", "fail", "check_out", "check_out_dir",
           "atomic_output", "entry_point", "INTERRUPTED_STATUS", "plot_path", "load_scene_arg", "scene_solver_kwargs",
           "check_flags", "rollout_parser", "load_rollout", "warp_device", "check_run_memory", "PRESET_CHOICES",
           "LINE_SEARCH_CHOICES", "LINEAR_SOLVER_CHOICES", "register_caps", "register_cap_label"]

# Exit status after Ctrl-C: 128 + SIGINT, the shell's convention for a process stopped by SIGINT.
INTERRUPTED_STATUS = 130
# What Warp's native library prints on stderr when it initializes on a machine without the CUDA
# driver (Warp has no setting that silences it).
CUDA_DRIVER_WARNING = "Warp CUDA warning: Could not find or load the NVIDIA CUDA driver"

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
    p.add_argument("--version", action="version", version=f"{prog} (sap-contact) {__version__}",
                   help="print the version and exit")
    return p


def parse_override(flag: str, text: str) -> tuple[str, object]:
    """``KEY=VALUE`` of a tool's ``flag`` (``--override``) → ``(key, value)``, the value an int, a
    float, ``true``/``false`` or else the string; ``ValueError`` naming ``flag`` when there is no
    ``=`` or no key. The key and value are checked by ``SapConfig``, where they are used."""
    key, sep, value = str(text).partition("=")
    if not sep or not key.strip():
        raise ValueError(f"{flag}: expected KEY=VALUE (a SapConfig knob), got {text!r}")
    value = value.strip()
    for cast in (int, float):
        try:
            return key.strip(), cast(value)
        except ValueError:
            pass
    return key.strip(), {"true": True, "false": False}.get(value.lower(), value)


def fail(prog: str, message) -> int:
    """Print ``prog: error: message`` as one line on stderr; return the exit status 2."""
    text = " ".join(str(message).split())  # one line, whatever the message held
    print(f"{prog}: error: {text}", file=sys.stderr)
    return 2


def check_out(flag: str, path: str) -> str:
    """``path`` if a file can be written there, checked by creating one: its directory exists,
    the path is not a directory, and a file can be created beside it (a read-only file system
    or ``/sys`` fail here, not after the run). Else ``ValueError`` naming ``flag``. Checked
    before any work; the path is then one the interrupt message names when the run is stopped
    before it is written (:func:`entry_point`)."""
    _check_writable(flag, path)
    _OUTPUTS.planned.append(path)
    return path


def _check_writable(flag: str, path: str) -> None:
    if os.path.isdir(path):
        raise ValueError(f"{flag}: {path!r} is a directory; give a file name")
    folder = os.path.dirname(os.path.abspath(path))
    shown = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        raise ValueError(f"{flag}: the directory {shown!r} of {path!r} does not exist")
    if not os.access(folder, os.W_OK):
        raise ValueError(f"{flag}: the directory {shown!r} of {path!r} is not writable")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise ValueError(f"{flag}: {path!r} exists and is read-only")
    _probe(flag, folder, f"in {shown!r} for {path!r}")


def _probe(flag: str, folder: str, where: str) -> None:
    """Create and remove a file in ``folder``: ``ValueError`` naming ``flag`` if that fails."""
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".sap-write-check.", suffix=".probe")
    except OSError as e:
        raise ValueError(f"{flag}: cannot create a file {where} ({e.strerror or e})") from None
    os.close(fd)
    os.unlink(probe)


def check_out_dir(flag: str, path: str, create: bool = False) -> str:
    """``path`` as an output folder in which a file can be created (checked by creating one): an
    existing directory or, with ``create``, one made now (with its parents). Else ``ValueError``
    naming ``flag``. Checked before any work."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"{flag}: {path!r} exists and is not a directory")
    if not os.path.isdir(path):
        if not create:
            raise ValueError(f"{flag}: the folder {path!r} does not exist")
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as e:
            raise ValueError(f"{flag}: cannot create the folder {path!r} ({e.strerror or e})") from None
    if not os.access(path, os.W_OK):
        raise ValueError(f"{flag}: the folder {path!r} is not writable")
    _probe(flag, os.path.abspath(path), f"in the folder {path!r}")
    return path


class _Outputs:
    """The outputs of the running tool: planned (checked by :func:`check_out`) and written."""

    def __init__(self):
        self.planned, self.written = [], []

    def reset(self):
        self.planned, self.written = [], []

    def unwritten(self) -> list[str]:
        done = {os.path.abspath(p) for p in self.written}
        return list(dict.fromkeys(p for p in self.planned if os.path.abspath(p) not in done))


_OUTPUTS = _Outputs()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_output(path: str):
    """Write ``path`` atomically: yields a temporary file name beside it (same directory, same
    extension, so writers that choose a format by the extension still do), renamed over ``path``
    when the block ends normally. If the block raises (an error, Ctrl-C), the temporary file is
    removed and an existing ``path`` is left as it was: a reader never sees a partial file.

    The file gets the permissions a new file would get (or those of the file it replaces)."""
    path = os.fspath(path)
    folder, name = os.path.split(os.path.abspath(path))
    ext = os.path.splitext(name)[1]
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=f".partial{ext}")
    os.close(fd)
    try:
        yield tmp
        mode = os.stat(path).st_mode & 0o7777 if os.path.exists(path) else 0o666 & ~_umask()
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _OUTPUTS.written.append(path)


# Exit status of a tool whose stdout was closed by its reader (128 + SIGPIPE, as a shell reports it).
BROKEN_PIPE_STATUS = 141


def entry_point(prog: str):
    """Decorator of a tool's ``main(argv=None) -> int``: Ctrl-C (``KeyboardInterrupt``) ends it
    with one line on stderr, ``prog: interrupted (Ctrl-C)`` and the outputs not written, and
    exit status :data:`INTERRUPTED_STATUS` (130), instead of a traceback; a closed stdout
    (``| head``) ends it quietly with :data:`BROKEN_PIPE_STATUS` (141). Outputs written with
    :func:`atomic_output` are complete or absent (an existing file keeps its old content)."""
    def wrap(main):
        @functools.wraps(main)
        def run(argv=None) -> int:
            _OUTPUTS.reset()
            try:
                status = main(argv)
                sys.stdout.flush()  # a closed pipe is reported here, not at the interpreter's exit
                return status
            except KeyboardInterrupt:
                missing = _OUTPUTS.unwritten()
                note = (f"; not written: {', '.join(missing)} (an existing file keeps its old content)"
                        if missing else "")
                sys.stdout.flush()
                print(f"{prog}: interrupted (Ctrl-C){note}", file=sys.stderr, flush=True)
                return INTERRUPTED_STATUS
            except BrokenPipeError:
                # The reader of stdout went away (``sap-scenes | head``): the rest of the output
                # has nowhere to go. Point stdout at /dev/null so the interpreter's final flush
                # does not raise again, and end quietly with the status of a closed pipe.
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
                return BROKEN_PIPE_STATUS
        return run
    return wrap


def plot_path(flag: str, path: str) -> str:
    """The file a plot is written to: ``path`` itself when its extension is a format matplotlib
    writes, ``path + ".png"`` when it has none; ``ValueError`` for another extension, or a
    directory that cannot take the file. Needs matplotlib."""
    from matplotlib.backend_bases import FigureCanvasBase

    _check_writable(flag, path)  # the name as given: not a directory, in a directory that exists
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    formats = FigureCanvasBase.get_supported_filetypes()
    if not ext:
        path += ".png"
    elif ext not in formats:
        raise ValueError(f"{flag}: matplotlib cannot write {ext!r} files; use one of {', '.join(sorted(formats))}")
    return check_out(flag, path)


def load_scene_arg(name: str, num_worlds: int, check_memory: bool = True):
    """A built-in scene, a JSON scene file or (``.xml``/``.urdf``) an MJCF/URDF file; ``ValueError``
    naming the scene argument when the name is unknown or the file is missing or unreadable.

    With ``check_memory`` and more than one world, the scene is first loaded with one world and the
    host arrays of ``num_worlds`` (its initial state and control) estimated: ``ValueError`` naming
    ``--num-worlds`` when they would not fit in the host's available memory, before they are built
    (:func:`check_run_memory`)."""
    if check_memory and isinstance(num_worlds, int) and not isinstance(num_worlds, bool) and num_worlds > 1:
        check_scene_memory(_load_scene(name, 1), num_worlds)
    return _load_scene(name, num_worlds)


def check_scene_memory(one, num_worlds: int) -> None:
    """``ValueError`` naming ``--num-worlds`` when ``num_worlds`` worlds of the scene ``one`` (loaded
    with one world) would not fit their initial state and control in the host's available memory
    (:func:`check_run_memory`)."""
    from sap_common.state import control_memory, state_memory

    m = one.sap_model
    check_run_memory(state_memory(m, num_worlds, "state (host)") + control_memory(m, num_worlds, "control (host)"),
                     None, "the scene's initial state and control", f"{num_worlds} worlds of {one.name}")


def _load_scene(name: str, num_worlds: int):
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


def check_run_memory(estimate, device, what: str, subject: str, capacity: int | None = None,
                     flag: str = "--num-worlds", capacity_flag: str = "--max-rigid-contact") -> None:
    """``ValueError`` starting ``flag:`` (the tools' one-line error) when a run's memory estimate
    (a ``sap_common.state.MemoryEstimate``) does not fit, checked before the run builds anything
    (docs/scaling.md § Memory). The parts whose name says ``host`` live in host memory, the others on
    ``device`` (a ``wp.Device``; None: the host). On the CPU device, or with no device, every part
    is checked against the host's available memory; on a CUDA device the device parts against its
    free memory and the host parts against the host's. ``subject`` says what was asked for
    (``"N worlds of humanoid"``), ``what`` what would allocate it."""
    from sap_common.state import MemoryEstimate, available_host_memory, check_memory

    W = estimate.num_worlds
    subject = f"{flag}: {subject}" + ("" if capacity is None else
                                      f" with {capacity} contact slot{'' if capacity == 1 else 's'}")
    kw = dict(capacity=capacity, subject=subject, capacity_flag=capacity_flag)
    if device is None or not device.is_cuda:
        check_memory(estimate, available_host_memory, what, where="the host" if device is None else f"device {device}",
                     **kw)
        return
    from sap_gpu.device import free_memory

    host = MemoryEstimate(W, tuple(p for p in estimate.parts if "host" in p.name))
    on_device = MemoryEstimate(W, tuple(p for p in estimate.parts if "host" not in p.name))
    check_memory(on_device, lambda: free_memory(device), what, where=f"device {device}", **kw)
    check_memory(host, available_host_memory, what, where="the host", **kw)


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


def register_caps(flag: str, values) -> list[int | str | None]:
    """The values of a ``--fused-max-registers`` sweep: ``auto`` (SapConfig's default: sap_gpu's
    cap per kernel), ``none`` (the compiler's choice) or an integer SapConfig.fused_max_registers
    accepts, each once, in order; ``ValueError`` naming ``flag`` otherwise."""
    from sap_common.config import SapConfig
    from sap_common.constants import FUSED_MAX_REGISTERS_AUTO, FUSED_MAX_REGISTERS_NONE, FUSED_MAX_REGISTERS_RANGE

    lo, hi = FUSED_MAX_REGISTERS_RANGE
    out = []
    for v in values:
        for item in str(v).split(","):
            item = item.strip().lower()
            if not item:
                continue
            try:
                cap = item if item in (FUSED_MAX_REGISTERS_AUTO, FUSED_MAX_REGISTERS_NONE) else int(item)
                SapConfig(fused_max_registers=cap)
            except ValueError:
                raise ValueError(f"{flag}: auto, none or an integer from {lo} to {hi}, got {item!r}") from None
            if cap not in out:
                out.append(cap)
    if not out:
        raise ValueError(f"{flag}: give at least one value (auto, none or {lo}..{hi})")
    return out


def register_cap_label(cap) -> str:
    """The run-label suffix of a ``--fused-max-registers`` value: ``""`` for ``auto`` (the
    default), ``/nocap`` for ``none`` (the compiler's choice), ``/reg<N>`` for a cap N."""
    from sap_common.constants import FUSED_MAX_REGISTERS_AUTO, FUSED_MAX_REGISTERS_NONE

    return {FUSED_MAX_REGISTERS_AUTO: "", FUSED_MAX_REGISTERS_NONE: "/nocap"}.get(cap, f"/reg{cap}")


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


def init_warp(device=None) -> None:
    """Initialize Warp for a tool that will run on ``device`` (a name; None: Warp's default).

    On a machine without the CUDA driver, Warp's native initialization prints
    ``Warp CUDA warning: Could not find or load the NVIDIA CUDA driver ...`` on stderr, which
    no Warp setting silences. When the device asked for is not a CUDA device the line is noise,
    so the tool initializes Warp itself with that one line filtered out of its stderr (every
    other line Warp prints passes). Asked for a CUDA device, the warning is the explanation
    and is left alone. Warp's settings are not touched; ``wp.init()`` of an initialized Warp does nothing."""
    import warp as wp

    if isinstance(device, str) and device.startswith("cuda"):
        wp.init()
        return
    with _native_stderr_without(CUDA_DRIVER_WARNING):
        wp.init()


@contextlib.contextmanager
def _native_stderr_without(prefix: str):
    """While the block runs, what is written to file descriptor 2 (native code included) goes to a
    temporary file; afterwards every line of it that does not start with ``prefix`` is written to
    stderr."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no file descriptor 2 (an embedded interpreter): nothing to filter
        yield
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            kept = [line for line in tmp.read().decode(errors="replace").splitlines(keepends=True)
                    if not line.startswith(prefix)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


def warp_device(name):
    """The Warp device called ``name``, or ``ValueError`` naming --device and listing the devices
    here (``sap_gpu.device.get_device``, the one device check). None picks one explicitly:
    ``cuda:0`` where a CUDA device exists, else ``cpu`` (never whatever Warp's default device was
    set to). Warp is initialized first by :func:`init_warp` (no CUDA-driver warning unless a CUDA
    device is asked for)."""
    init_warp(name)
    import warp as wp

    from sap_gpu.device import get_device

    if name is None:
        name = "cuda:0" if wp.is_cuda_available() else "cpu"
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

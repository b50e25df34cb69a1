"""sap_tools.cli and the conventions every command-line tool shares: one-line errors with exit status
2 before any work, --out checked first, missing scene files named, --help in plain text listing
the choices from sap_common.config."""

import json
import os
import re

import pytest
from conftest import DATA

import sap_tools.benchmark.accuracy
import sap_tools.benchmark.cli
import sap_tools.benchmark.collision
import sap_tools.benchmark.plot
import sap_tools.compare_backends
import sap_tools.compare_presets
import sap_tools.demo
import sap_tools.inspector
import sap_tools.precompile
import sap_tools.record.cli
import sap_tools.scenes
import sap_tools.validate.cli
import sap_tools.view.cli
from sap_common.config import LINE_SEARCH_VARIANTS, PRESETS
from sap_tools.cli import check_out, parser, plain, plot_path, scene_solver_kwargs

MAINS = {"sap-demo": sap_tools.demo.main, "sap-scenes": sap_tools.scenes.main,
         "sap-compare-presets": sap_tools.compare_presets.main, "sap-compare-backends": sap_tools.compare_backends.main,
         "sap-benchmark": sap_tools.benchmark.cli.main, "sap-plot-benchmark": sap_tools.benchmark.plot.main,
         "sap-inspect": sap_tools.inspector.main, "sap-view": sap_tools.view.cli.main,
         "sap-record": sap_tools.record.cli.main, "sap-validate": sap_tools.validate.cli.main,
         "sap-benchmark-collision": sap_tools.benchmark.collision.main, "sap-precompile": sap_tools.precompile.main,
         "sap-benchmark-accuracy": sap_tools.benchmark.accuracy.main}
# Tools with a preset / line-search flag: (flag, the choices its help must list).
CHOICE_FLAGS = {"sap-demo": ("--preset", "--line-search"), "sap-compare-presets": ("--reference", "--line-search"),
                "sap-compare-backends": ("--preset", "--line-search"), "sap-benchmark": ("--preset", "--line-search"),
                "sap-inspect": ("--preset", "--line-search"), "sap-view": ("--preset", "--line-search"),
                "sap-validate": ("--preset", "--line-search")}


def _no_work(monkeypatch):
    """Make every tool's work fail loudly, so an error must come before it."""
    def boom(*a, **k):
        raise AssertionError("work started before the arguments were checked")

    monkeypatch.setattr(sap_tools.demo, "run", boom)
    monkeypatch.setattr(sap_tools.compare_presets, "SolverSAP", boom)
    monkeypatch.setattr(sap_tools.compare_backends, "SolverSAP", boom)
    monkeypatch.setattr(sap_tools.benchmark.cli, "SapRun", boom)
    monkeypatch.setattr(sap_tools.benchmark.cli, "MjwarpRun", boom)
    monkeypatch.setattr(sap_tools.benchmark.plot, "plot", boom)


def _error(capsys, prog, main, argv) -> str:
    """Run a tool expecting a usage error: exit status 2 and exactly one line 'prog: error: …'."""
    try:
        status = main(argv)
    except SystemExit as e:  # argparse's own errors exit
        status = e.code
    err = capsys.readouterr().err
    assert status == 2, (prog, argv, err)
    lines = [line for line in err.splitlines() if line.strip() and "Warp CUDA warning" not in line]
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), (prog, argv, err)
    return lines[0]


@pytest.mark.parametrize("prog", MAINS)
def test_help_is_plain_text_and_lists_the_choices(capsys, prog):
    with pytest.raises(SystemExit) as e:
        MAINS[prog](["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "`" not in out and ":data:" not in out and ":func:" not in out, out
    assert "examples:" in out and re.search(rf"^  {prog}\b", out, re.M)
    text = " ".join(out.split())  # argparse wraps lines
    for flag in CHOICE_FLAGS.get(prog, ()):
        assert flag in text
    if prog in CHOICE_FLAGS:
        assert all(p in text for p in PRESETS) and all(v in text for v in LINE_SEARCH_VARIANTS), text


@pytest.mark.parametrize("prog", ["sap-demo", "sap-scenes", "sap-compare-presets", "sap-compare-backends",
                                  "sap-benchmark", "sap-view"])
def test_a_missing_scene_file_is_a_one_line_error(capsys, monkeypatch, tmp_path, prog):
    _no_work(monkeypatch)
    missing = str(tmp_path / "nope.json")
    line = _error(capsys, prog, MAINS[prog], [missing])
    assert f"scene file: {missing!r} does not exist" in line
    line = _error(capsys, prog, MAINS[prog], [str(tmp_path)])  # a directory is not a scene file
    assert "is a directory" in line
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"plant": {"time_step": 1e-3}, "bodies": [], "joints": []}))
    line = _error(capsys, prog, MAINS[prog], [str(bad)])  # a malformed file: its path inside named
    assert f"{bad}: bodies: expected a non-empty list" in line
    line = _error(capsys, prog, MAINS[prog], [str(tmp_path / "model.xml")])  # MJCF files too
    assert "model.xml' does not exist" in line


@pytest.mark.parametrize("prog,argv", [("sap-demo", ["box_stack"]), ("sap-benchmark", ["sphere_drop"]),
                                       ("sap-plot-benchmark", [str(DATA / "drake" / "index.json")])])
def test_out_into_a_missing_directory_fails_before_any_work(capsys, monkeypatch, tmp_path, prog, argv):
    _no_work(monkeypatch)
    out = str(tmp_path / "no" / "such" / "dir" / "result.png")
    line = _error(capsys, prog, MAINS[prog], argv + ["--out", out])
    assert line.startswith(f"{prog}: error: --out: the directory ") and "does not exist" in line
    line = _error(capsys, prog, MAINS[prog], argv + ["--out", str(tmp_path)])
    assert "is a directory" in line


@pytest.mark.parametrize("prog,argv,message", [
    ("sap-demo", ["--preset", "approx33"],
     "--preset: contact_preset_variant: 'approx33' is not valid; valid: approx32"),
    ("sap-demo", ["--line-search", "newton"], "--line-search: line_search_variant: 'newton' is not valid"),
    ("sap-demo", ["--steps", "0"], "--steps and --print-every: must be >= 1"),
    ("sap-demo", ["--out", "plot.txt"], "--out: matplotlib cannot write 'txt' files; use one of"),
    ("sap-demo", ["--steps", "x"], "argument --steps: invalid int value: 'x'"),
    ("sap-scenes", ["--num-worlds", "0"], "--num-worlds: must be >= 1"),
    ("sap-scenes", ["box_stack", "--bogus"], "unrecognized arguments: --bogus"),
    ("sap-compare-presets", ["box_stack", "--reference", "fast"], "--reference: contact_preset_variant: 'fast'"),
    ("sap-compare-presets", ["box_stack", "--every", "0"], "--every: must be >= 1"),
    ("sap-compare-backends", ["box_stack", "--device", "tpu"], "--device 'tpu': no such Warp device here; available: "),
    ("sap-compare-backends", ["box_stack", "--preset", "fast"], "--preset: contact_preset_variant: 'fast'"),
    ("sap-benchmark", ["sphere_drop", "--max-iterations", "0"], "--max-iterations: max_iterations"),
    ("sap-benchmark", ["sphere_drop", "--linear-solver", "lu"], "argument --linear-solver: invalid choice: 'lu'"),
    ("sap-plot-benchmark", [str(DATA / "drake" / "index.json"), "--out", "x.doc"], "--out: matplotlib cannot write"),
    ("sap-validate", [str(DATA / "drake" / "sphere_drop.json"), "--preset", "fast"],
     "--preset: contact_preset_variant"),
    ("sap-validate", [str(DATA / "drake" / "sphere_drop.json"), "--mode", "rollout", "--epsilon", "0"],
     "--epsilon: must be a finite"),
    ("sap-validate", [str(DATA / "drake" / "sphere_drop.json"), "--epsilon", "1e-6"],
     "--epsilon: the sensitivity nudge of rollout mode, and --mode one-step runs no rollout"),
    ("sap-validate", [str(DATA / "drake" / "sphere_drop.json"), "--mode", "rollout", "--every", "5"],
     "--every: applies to one-step mode, and --mode rollout runs the rollout only"),
    ("sap-validate", [str(DATA / "drake" / "sphere_drop.json"), "--mode", "rollout", "--strict"],
     "--strict: applies to one-step mode"),
    ("sap-validate", [str(DATA / "drake" / "index.json")], "index.json: missing required field 'format'"),
    ("sap-record", ["sphere_drop", "--steps", "0"], "--steps: must be >= 1"),
    ("sap-record", ["sphere_drop", "--engine", "bullet"], "argument --engine: invalid choice: 'bullet'"),
])
def test_bad_flags_are_one_line_errors_before_any_work(capsys, monkeypatch, prog, argv, message):
    _no_work(monkeypatch)
    assert message in _error(capsys, prog, MAINS[prog], argv)


MALFORMED_RESULTS = {
    "not JSON": ("{runs: oops", "holds no sap-benchmark JSON object"),
    "a list": ("[1, 2]", "holds no sap-benchmark JSON object"),
    "runs not a list": (json.dumps({"runs": 5}), "runs: expected a non-empty list of runs"),
    "runs empty": (json.dumps({"runs": []}), "runs: expected a non-empty list of runs"),
    "run a string": (json.dumps({"runs": ["fast"]}), "runs[0]: expected a run object, got str"),
    "num_worlds a string": (json.dumps({"runs": [{"label": "a", "num_worlds": "8", "world_steps_per_s": 1.0,
                                                  "valid": True}]}), "runs[0].num_worlds: expected an integer >= 1"),
    "throughput zero": (json.dumps({"runs": [{"label": "a", "num_worlds": 8, "world_steps_per_s": 0,
                                              "valid": True}]}),
                        "runs[0].world_steps_per_s: expected a finite number > 0"),
    "valid missing": (json.dumps({"runs": [{"label": "a", "num_worlds": 8, "world_steps_per_s": 3.0}]}),
                      "runs[0].valid: missing; expected true or false"),
    "label a number": (json.dumps({"label": 3, "num_worlds": 8, "world_steps_per_s": 3.0, "valid": True}),
                       "runs[0].label: expected a string, got 3"),
}


@pytest.mark.parametrize("case", list(MALFORMED_RESULTS))
def test_malformed_benchmark_json_is_a_one_line_error(capsys, monkeypatch, tmp_path, case):
    _no_work(monkeypatch)
    text, message = MALFORMED_RESULTS[case]
    path = tmp_path / "results.json"
    path.write_text(text)
    line = _error(capsys, "sap-plot-benchmark", MAINS["sap-plot-benchmark"], [str(path), "--out",
                                                                              str(tmp_path / "p.png")])
    assert str(path) in line and message in line, line


def test_out_without_extension_writes_png_and_says_so(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    assert plot_path("--out", str(tmp_path / "noext")) == str(tmp_path / "noext.png")
    assert plot_path("--out", str(tmp_path / "fig.svg")) == str(tmp_path / "fig.svg")
    with pytest.raises(ValueError, match=r"--out: matplotlib cannot write 'json' files"):
        plot_path("--out", str(tmp_path / "fig.json"))
    assert sap_tools.demo.main(["sphere_drop", "--steps", "2", "--quiet", "--out", str(tmp_path / "noext"),
                                "--json"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert (f"plot written to {tmp_path / 'noext.png'}" in out
            and json.loads(out[-1])["plot"] == str(tmp_path / "noext.png"))
    assert (tmp_path / "noext.png").stat().st_size > 1000 and not (tmp_path / "noext").exists()


def test_check_out_and_plain():
    assert check_out("--out", "relative.json") == "relative.json"  # the working directory exists
    with pytest.raises(ValueError, match=r"--x: the directory 'missing' of 'missing/a.json' does not exist"):
        check_out("--x", "missing/a.json")
    assert plain("``sap-demo`` runs :class:`~sap_ref.solver.SolverSAP` with `x` and :data:`MIN`") == \
        "sap-demo runs SolverSAP with x and MIN"
    p = parser("tool", "``tool``: does things.\n\n    tool a b   # first\n    tool c \\\n        --d\n\nProse ``x``.\n")
    assert p.description == "Does things." and p.epilog == "examples:\n  tool a b   # first\n  tool c \\\n      --d"


class _Scene:
    def __init__(self, kwargs):
        self.solver_kwargs = kwargs


def test_scene_solver_settings_are_defaults_that_flags_override():
    drake = dict(contact_preset_variant="drake", line_search_variant="exact_root", line_search_max_iterations=100,
                 max_iterations=100)
    kw, note = scene_solver_kwargs(_Scene(drake), None, None)
    assert kw == drake and "preset drake (scene file)" in note and "line search exact_root (scene file)" in note
    kw, note = scene_solver_kwargs(_Scene(drake), "approx32", None)
    assert kw["contact_preset_variant"] == "approx32" and kw["line_search_variant"] == "exact_root"
    assert "preset approx32 (--preset)" in note
    # The file's exact-line-search cap belongs to its line search: dropped with another one.
    kw, _ = scene_solver_kwargs(_Scene(drake), None, "armijo_decay")
    assert kw["line_search_variant"] == "armijo_decay" and "line_search_max_iterations" not in kw
    kw, note = scene_solver_kwargs(_Scene({}), None, None)
    assert kw == {"contact_preset_variant": "approx32"} and note == "solver: preset approx32 (default)"
    assert scene_solver_kwargs(_Scene({}), None, None, default_preset="drake")[0]["contact_preset_variant"] == "drake"


def test_console_scripts_are_these_mains():
    """pyproject's [project.scripts] name exactly the tools tested here."""
    text = (DATA.parent.parent / "pyproject.toml").read_text()
    scripts = dict(re.findall(r'^(sap-[\w-]+) = "([\w.:]+)"', text, re.M))
    assert set(scripts) == set(MAINS)
    for prog, target in scripts.items():
        module, func = target.split(":")
        assert MAINS[prog].__module__ == module and MAINS[prog].__name__ == func
    assert os.path.basename(sap_tools.scenes.DRAKE_SCENE_DIR) == "drake"


# ----------------------------------------------------------------------------- --version, Ctrl-C, outputs


def test_every_tool_prints_the_distributions_version(capsys):
    """One version: the installed distribution's (pyproject.toml's), in every package and every tool."""
    import importlib.metadata
    import tomllib

    import sap_common
    import sap_gpu
    import sap_newton
    import sap_ref
    import sap_tools

    project = tomllib.loads((DATA.parent.parent / "pyproject.toml").read_text())["project"]
    version = importlib.metadata.version("sap-contact")
    assert version == project["version"]
    assert {m.__version__ for m in (sap_common, sap_gpu, sap_newton, sap_ref, sap_tools)} == {version}
    for prog, main in MAINS.items():
        with pytest.raises(SystemExit) as e:
            main(["--version"])
        assert e.value.code == 0
        assert capsys.readouterr().out == f"{prog} (sap-contact) {version}\n"


def test_version_falls_back_to_pyproject_then_unknown(tmp_path):
    from sap_common import _version

    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "not-installed-dist"\nversion = "9.8.7"\n')
    assert _version._version("not-installed-dist", str(pyproject)) == "9.8.7"  # a checkout used without installing
    assert _version._version("not-installed-dist", str(tmp_path / "missing.toml")) == "0+unknown"
    assert _version._version("another-dist", str(pyproject)) == "0+unknown"  # another project's pyproject


@pytest.mark.parametrize("prog", MAINS)
def test_ctrl_c_is_one_line_and_exit_status_130(capsys, monkeypatch, prog):
    def interrupted(self, args=None, namespace=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(sap_tools.cli.Parser, "parse_args", interrupted)
    assert MAINS[prog]([]) == sap_tools.cli.INTERRUPTED_STATUS == 130
    err = capsys.readouterr().err
    assert err == f"{prog}: interrupted (Ctrl-C)\n", err


@pytest.mark.parametrize("existing", [True, False])
def test_an_interrupted_output_is_not_written(capsys, monkeypatch, tmp_path, existing):
    """Ctrl-C while sap-demo writes its plot: an existing file keeps its content, a new one does not
    appear half written, no temporary file stays behind, and the one line names the file."""
    out = tmp_path / "plot.png"
    if existing:
        out.write_bytes(b"the old plot")

    def half_written(scene, rec, path, backend="ref"):
        with open(path, "wb") as f:
            f.write(b"\x89PNG half")
        raise KeyboardInterrupt

    monkeypatch.setattr(sap_tools.demo, "plot", half_written)
    assert sap_tools.demo.main(["sphere_drop", "--steps", "2", "--quiet", "--out", str(out)]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"sap-demo: interrupted (Ctrl-C); not written: {out} (an existing file keeps its old content)"]
    assert sorted(os.listdir(tmp_path)) == (["plot.png"] if existing else [])
    if existing:
        assert out.read_bytes() == b"the old plot"


def test_ctrl_c_in_a_running_tool_ends_it_with_one_line(tmp_path):
    """A real SIGINT to a tool in the middle of a long rollout: status 130, one line, no traceback,
    the existing output untouched."""
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "plot.png"
    out.write_bytes(b"the old plot")
    # The tool starts with SIGINT delivered and handled as from a terminal. A test run started as
    # a background job (`pytest ... &` from a script) has SIGINT ignored, and a child inherits
    # that and its parent thread's blocked signals; Python does not install its Ctrl-C handler in
    # a process that starts with SIGINT ignored, and a blocked SIGINT never arrives (one CI run
    # of the whole suite saw the tool run on for 120 s after the signal). So the child unblocks
    # SIGINT and installs Python's handler itself before it runs the tool.
    start = ("import runpy, signal, sys; signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT}); "
             "signal.signal(signal.SIGINT, signal.default_int_handler); sys.argv = ['sap-demo', *sys.argv[1:]]; "
             "runpy.run_module('sap_tools.demo', run_name='__main__')")
    proc = subprocess.Popen([sys.executable, "-c", start, "box_stack", "--steps", "1000000", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=DATA.parent.parent)
    try:
        assert proc.stdout.readline().startswith("solver:")  # the run has started
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    lines = [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith("box_stack [")]
    assert lines == [f"sap-demo: interrupted (Ctrl-C); not written: {out} (an existing file keeps its old content)"]
    assert out.read_bytes() == b"the old plot" and os.listdir(tmp_path) == ["plot.png"]


def test_a_closed_stdout_ends_a_tool_quietly():
    """``sap-scenes | head``: the reader closes the pipe before the listing is written. The tool ends
    with the closed pipe's status (141) and nothing on stderr, not a BrokenPipeError traceback (the
    old code printed one, from the table's print or from the interpreter's last flush)."""
    import subprocess
    import sys

    from sap_tools.cli import BROKEN_PIPE_STATUS

    proc = subprocess.Popen([sys.executable, "-c", "import sys; from sap_tools.scenes import main; sys.exit(main())"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=DATA.parent.parent)
    proc.stdout.close()  # the reader is gone before the first line
    stderr = proc.communicate(timeout=120)[1]
    assert proc.returncode == BROKEN_PIPE_STATUS, stderr
    assert stderr == ""


def test_atomic_output_renames_when_complete_and_removes_what_failed(tmp_path):
    from sap_tools.cli import atomic_output

    target = tmp_path / "a.json"
    with atomic_output(str(target)) as tmp:
        assert os.path.dirname(tmp) == str(tmp_path) and tmp.endswith(".json") and os.path.basename(tmp)[0] == "."
        with open(tmp, "w") as f:
            f.write("new")
        assert not target.exists()  # nothing at the target until the block ends
    assert target.read_text() == "new" and os.listdir(tmp_path) == ["a.json"]
    mask = os.umask(0)
    os.umask(mask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~mask  # a new file's mode, not mkstemp's 0600
    with pytest.raises(RuntimeError):
        with atomic_output(str(target)) as tmp:
            with open(tmp, "w") as f:
                f.write("partial")
            raise RuntimeError("the writer failed")
    assert target.read_text() == "new" and os.listdir(tmp_path) == ["a.json"]


UNWRITABLE = "/sys/sap_out_check.png"  # sysfs takes no new files, whoever asks (root included)


@pytest.mark.skipif(not os.path.isdir("/sys"), reason="no /sys on this machine")
@pytest.mark.parametrize("prog,argv,flag", [
    ("sap-demo", ["box_stack", "--out", UNWRITABLE], "--out"),
    ("sap-benchmark", ["sphere_drop", "--out", UNWRITABLE[:-4] + ".json"], "--out"),
    ("sap-plot-benchmark", [str(DATA / "drake" / "index.json"), "--out", UNWRITABLE], "--out"),
    ("sap-inspect", ["box_stack", "--step", "5", "--out", UNWRITABLE[:-4] + ".html"], "--out"),
    ("sap-validate", [str(DATA / "drake" / "sphere_drop.json"), "--junit", UNWRITABLE[:-4] + ".xml"], "--junit"),
    ("sap-view", ["box_stack", "--video", UNWRITABLE[:-4] + ".gif"], "--video"),
    ("sap-record", ["sphere_drop", "--engine", "mujoco", "--out", "/sys"], "--out"),
    ("sap-precompile", ["sphere_drop", "--out", "/sys/sap_cache"], "--out"),
])
def test_an_unwritable_output_fails_before_any_work(capsys, monkeypatch, prog, argv, flag):
    """Found by creating a file there, before the run (os.access says yes to root, even in /sys)."""
    _no_work(monkeypatch)
    if prog == "sap-view":
        pytest.importorskip("imageio")
    line = _error(capsys, prog, MAINS[prog], argv)
    assert line.startswith(f"{prog}: error: {flag}: "), line
    assert "cannot create" in line or "not writable" in line, line
    assert not os.path.exists(UNWRITABLE)


def test_check_out_leaves_nothing_behind(tmp_path):
    check_out("--out", str(tmp_path / "x.json"))
    assert os.listdir(tmp_path) == []
    with pytest.raises(ValueError, match=r"--out: the folder .* does not exist"):
        sap_tools.cli.check_out_dir("--out", str(tmp_path / "no" / "dir"))
    assert sap_tools.cli.check_out_dir("--out", str(tmp_path / "new"), create=True) == str(tmp_path / "new")
    assert os.listdir(tmp_path / "new") == []


def test_the_cuda_driver_warning_is_filtered_for_a_cpu_device(capfd):
    """Warp's native init prints a CUDA-driver warning where there is no driver; the tools drop that
    one line when the device asked for is not CUDA, and keep every other line of stderr."""
    import subprocess
    import sys

    raw = subprocess.run([sys.executable, "-c", "import warp; warp.init()"], capture_output=True, text=True)
    if sap_tools.cli.CUDA_DRIVER_WARNING not in raw.stderr:
        pytest.skip("Warp prints no CUDA-driver warning here (a CUDA driver is installed)")
    # Warp's settings are left alone (wp.init() itself fills in kernel_cache_dir).
    code = ("import warp as wp\n"
            "snap = lambda: {k: repr(getattr(wp.config, k)) for k in dir(wp.config) if not k.startswith('_')\n"
            "                and k != 'kernel_cache_dir'}\n"
            "before = snap()\nfrom sap_tools.cli import warp_device\nprint(warp_device(DEVICE), before == snap())\n")
    ours = subprocess.run([sys.executable, "-c", code.replace("DEVICE", "'cpu'")], capture_output=True, text=True)
    assert ours.stdout.splitlines()[-1] == "cpu True" and "CUDA" not in ours.stderr, ours.stderr
    asked = subprocess.run([sys.executable, "-c", code.replace("DEVICE", "'cuda:0'")], capture_output=True, text=True)
    assert sap_tools.cli.CUDA_DRIVER_WARNING in asked.stderr  # asked for CUDA: the warning explains the error
    assert "--device 'cuda:0': no CUDA device here; available: cpu" in asked.stderr
    with sap_tools.cli._native_stderr_without(sap_tools.cli.CUDA_DRIVER_WARNING):
        os.write(2, b"kept line\n" + sap_tools.cli.CUDA_DRIVER_WARNING.encode() + b". GPU execution ...\n")
    err = capfd.readouterr().err
    assert err == "kept line\n"

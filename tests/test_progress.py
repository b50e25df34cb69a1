"""sap_tools.progress: redraws in place on a terminal, writes a few whole lines into a log."""

import io

from sap_tools.progress import LOG_INTERVAL_S, LOG_LINES, Progress


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_log_gets_a_few_whole_lines():
    log = io.StringIO()
    with Progress(1000, "run", stream=log) as bar:
        for k in range(1, 1001):
            bar.update(k, f"step {k}")
    text = log.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert len(lines) == LOG_LINES and lines[-1].startswith("run [") and "1000/1000" in lines[-1]
    assert [line.split("] ")[1].split()[0] for line in lines] == ["250/1000", "500/1000", "750/1000", "1000/1000"]


def test_a_terminal_redraws_in_place():
    tty = _Terminal()
    with Progress(10, "run", stream=tty) as bar:
        for k in range(1, 11):
            bar.update(k)
            bar.clear_line()
    text = tty.getvalue()
    assert text.count("\r") >= 20 and text.endswith("\n") and text.count("\n") == 1


def test_quiet_writes_nothing():
    for stream in (io.StringIO(), _Terminal()):
        with Progress(10, "run", stream=stream, enabled=False) as bar:
            bar.update(5)
            bar.clear_line()
        assert stream.getvalue() == ""


def test_a_tool_run_into_a_log_writes_a_few_lines(tmp_path, capsys):
    """sap-demo's progress bar, with stderr captured (not a terminal): at most LOG_LINES lines."""
    from sap_tools.demo import main

    assert main(["sphere_drop", "--steps", "40", "--print-every", "10", "--out", str(tmp_path / "d.png")]) == 0
    err = capsys.readouterr().err
    bar_lines = [line for line in err.splitlines() if line.startswith("sphere_drop [")]
    assert 1 <= len(bar_lines) <= LOG_LINES and "\r" not in err


def test_a_long_run_in_a_log_writes_a_line_at_least_every_interval(monkeypatch):
    """A run of hours shows in a log long before its first quarter: a line per LOG_INTERVAL_S."""
    import sap_tools.progress as progress

    clock = [0.0]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: clock[0])
    log = io.StringIO()
    with Progress(1_000_000, "rollout", stream=log) as bar:
        for k in range(1, 1001):  # the first 0.1 % of the run, one update per second
            clock[0] += 1.0
            bar.update(k)
    lines = log.getvalue().splitlines()
    assert len(lines) == 1000 // LOG_INTERVAL_S == 16 and "\r" not in log.getvalue()
    assert lines[0].split("] ")[1].startswith(f"{int(LOG_INTERVAL_S)}/1000000")

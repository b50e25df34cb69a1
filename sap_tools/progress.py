r"""A dependency-free progress bar for the command-line tools (writes to stderr).

On a terminal the bar redraws itself in place (``\r``). When the stream is not a terminal (a
log file, a pipe, CI) redrawing would write every update as text, so the bar writes whole lines
there: one each time another quarter of the work is done (:data:`LOG_LINES` over a run), and
one whenever :data:`LOG_INTERVAL_S` seconds have passed since the last line, so that a long run
shows in a log that it is alive and how far it got.
"""

from __future__ import annotations

import sys
import time

__all__ = ["Progress", "LOG_LINES", "LOG_INTERVAL_S"]

# Lines written into a log (non-terminal stream) over a whole run: at 25, 50, 75 and 100 %.
LOG_LINES = 4
# ... and one more whenever this many seconds have passed since the last line: a run of hours
# writes a line every minute, a run of seconds only its quarters.
LOG_INTERVAL_S = 60.0


class Progress:
    """``with Progress(total, "label") as bar: bar.update(k, "text")`` draws ``label [####   ] k/total``.

    Args:
        total: units of work.
        label: text before the bar.
        width: characters of the bar.
        stream: where to write (default ``sys.stderr``).
        enabled: False writes nothing (``--quiet``).
        interactive: redraw in place; default: whether ``stream`` is a terminal.
        log_interval: not interactive: the longest time [s] between two lines (default
            :data:`LOG_INTERVAL_S`).
    """

    def __init__(self, total: int, label: str = "", width: int = 30, stream=None, enabled: bool = True,
                 interactive: bool | None = None, log_interval: float = LOG_INTERVAL_S):
        self.total, self.label, self.width = max(int(total), 1), label, width
        self.stream = stream or sys.stderr
        self.enabled = enabled
        if interactive is None:
            isatty = getattr(self.stream, "isatty", None)
            interactive = bool(isatty and isatty())
        self.interactive = interactive
        self.start = time.perf_counter()
        self.log_interval = log_interval
        self._logged = 0  # quarters written so far (non-interactive)
        self._last_line = self.start  # when the last log line was written

    def _line(self, done: int, frac: float, text: str) -> str:
        filled = int(round(frac * self.width))
        elapsed = time.perf_counter() - self.start
        eta = elapsed / frac - elapsed if frac > 0 else 0.0
        return (f"{self.label} [{'#' * filled}{' ' * (self.width - filled)}] {done}/{self.total} "
                f"{elapsed:6.1f}s eta {eta:5.1f}s {text}")

    def update(self, done: int, text: str = "") -> None:
        if not self.enabled:
            return
        frac = min(max(done / self.total, 0.0), 1.0)
        if self.interactive:
            self.stream.write("\r" + self._line(done, frac, text))
        else:
            quarter = int(frac * LOG_LINES)
            now = time.perf_counter()
            if quarter <= self._logged and now - self._last_line < self.log_interval:
                return
            self._logged, self._last_line = max(quarter, self._logged), now
            self.stream.write(self._line(done, frac, text).rstrip() + "\n")
        self.stream.flush()

    def clear_line(self) -> None:
        """Return to the start of the line (before printing between redraws); nothing in a log."""
        if self.enabled and self.interactive:
            self.stream.write("\r")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.enabled and self.interactive:
            self.stream.write("\n")
            self.stream.flush()
        return False

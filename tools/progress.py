"""A dependency-free progress bar for the command-line tools (writes to stderr)."""

from __future__ import annotations

import sys
import time


class Progress:
    """``with Progress(total, "label") as bar: bar.update(k, "text")`` draws ``label [####   ] k/total``."""

    def __init__(self, total: int, label: str = "", width: int = 30, stream=None, enabled: bool = True):
        self.total, self.label, self.width = max(int(total), 1), label, width
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.start = time.perf_counter()

    def update(self, done: int, text: str = "") -> None:
        if not self.enabled:
            return
        frac = min(max(done / self.total, 0.0), 1.0)
        filled = int(round(frac * self.width))
        elapsed = time.perf_counter() - self.start
        eta = elapsed / frac - elapsed if frac > 0 else 0.0
        self.stream.write(f"\r{self.label} [{'#' * filled}{' ' * (self.width - filled)}] {done}/{self.total} "
                          f"{elapsed:6.1f}s eta {eta:5.1f}s {text}")
        self.stream.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()
        return False

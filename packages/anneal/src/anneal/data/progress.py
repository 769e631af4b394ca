"""Download progress: a redrawn bar on a terminal, a line every 10% anywhere else."""

from __future__ import annotations

import time
from typing import TextIO

from anneal.data.cache import human_size

BAR_WIDTH = 24
REDRAW_S = 0.1


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or not a real stream
        return False


class Reporter:
    """Reports one asset's download to `stream` (None: silent)."""

    def __init__(self, stream: TextIO | None, label: str) -> None:
        self.stream, self.label = stream, label
        self.tty = stream is not None and _isatty(stream)
        self.total = self.start_done = self.done = 0
        self.t0 = self.last_draw = 0.0
        self.next_pct = 10
        self._bar_shown = False

    def _write(self, text: str) -> None:
        assert self.stream is not None
        self.stream.write(text)
        self.stream.flush()

    def note(self, message: str) -> None:
        """One line (e.g. `resuming at 40%`), kept apart from the bar."""
        if self.stream is None:
            return
        if self._bar_shown:
            self._write("\r\033[K")
            self._bar_shown = False
        self._write(f"{self.label}: {message}\n")

    def start(self, total: int, done: int = 0) -> None:
        self.total, self.start_done, self.done = total, done, done
        self.t0 = self.last_draw = time.monotonic()
        self.next_pct = (done * 100 // total // 10 + 1) * 10 if total else 100
        if self.tty:
            self._draw()

    def update(self, done: int) -> None:
        self.done = done
        if self.stream is None or not self.total:
            return
        if self.tty:
            now = time.monotonic()
            if now - self.last_draw >= REDRAW_S or done >= self.total:
                self.last_draw = now
                self._draw()
            return
        pct = done * 100 // self.total
        if pct >= self.next_pct:
            self._write(f"{self.label}: {pct:3d}%  {human_size(done)} of {human_size(self.total)}\n")
            self.next_pct = (pct // 10 + 1) * 10

    def finish(self) -> None:
        if self.tty and self._bar_shown:
            self._draw()
            self._write("\n")
            self._bar_shown = False

    def _draw(self) -> None:
        frac = min(self.done / self.total, 1.0) if self.total else 1.0
        filled = int(frac * BAR_WIDTH)
        encoding = (getattr(self.stream, "encoding", None) or "").lower()
        full, empty = ("█", "░") if encoding.startswith("utf") else ("#", "-")
        elapsed = max(time.monotonic() - self.t0, 1e-6)
        rate = (self.done - self.start_done) / elapsed
        left = int((self.total - self.done) / rate) if rate > 0 else 0
        eta = f"ETA {left // 60}:{left % 60:02d}" if rate > 0 and self.done < self.total else ""
        self._write(
            f"\r\033[K{self.label} {full * filled}{empty * (BAR_WIDTH - filled)} {frac:4.0%}  "
            f"{human_size(self.done)}/{human_size(self.total)}  {human_size(rate)}/s  {eta}"
        )
        self._bar_shown = True

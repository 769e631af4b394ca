"""Download progress: rich's progress bar on a terminal, a plain line every 10% anywhere else.

rich draws and redraws the bar (size, rate, time left); a log or a pipe gets whole lines
instead, which rich's bar would not give it (it draws a non-terminal only when it stops).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, TextIO

from anneal.data.cache import human_size

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

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
        self.total = self.done = 0
        self.last_draw = 0.0
        self.next_pct = 10
        self._bar: Progress | None = None
        self._task: TaskID | None = None

    def _write(self, text: str) -> None:
        assert self.stream is not None
        self.stream.write(text)
        self.stream.flush()

    def note(self, message: str) -> None:
        """One line (e.g. `resuming at 40%`), kept apart from the bar."""
        if self.stream is None:
            return
        if self._bar is not None:
            self._bar.console.print(f"{self.label}: {message}", markup=False, highlight=False)  # above the bar
            return
        self._write(f"{self.label}: {message}\n")

    def start(self, total: int, done: int = 0) -> None:
        self.total, self.done = total, done
        self.last_draw = time.monotonic()
        self.next_pct = (done * 100 // total // 10 + 1) * 10 if total else 100
        if self.tty:
            self._start_bar()

    def _start_bar(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TaskProgressColumn,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        console = Console(file=self.stream, force_terminal=True, highlight=False)
        # redrawn by update() (at most every REDRAW_S), not by a thread of rich's: nothing runs behind the download
        self._bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=console,
            auto_refresh=False,
            transient=False,
            redirect_stdout=False,  # the bar is this stream's alone: other output is not captured behind it
            redirect_stderr=False,
        )
        self._task = self._bar.add_task(self.label, total=self.total, completed=self.done)
        self._bar.start()
        self._bar.refresh()

    def update(self, done: int) -> None:
        self.done = done
        if self.stream is None or not self.total:
            return
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=done)
            now = time.monotonic()
            if now - self.last_draw >= REDRAW_S or done >= self.total:
                self.last_draw = now
                self._bar.refresh()
            return
        if self.tty:
            return
        pct = done * 100 // self.total
        if pct >= self.next_pct:
            self._write(f"{self.label}: {pct:3d}%  {human_size(done)} of {human_size(self.total)}\n")
            self.next_pct = (pct // 10 + 1) * 10

    def finish(self) -> None:
        """End the bar (its last state stays on screen); safe to call more than once."""
        bar, self._bar = self._bar, None
        if bar is not None:
            bar.refresh()
            bar.stop()

"""The live terminal dashboard of `anneal train` (rich Live, the loss chart drawn by uniplot).

    ╭─ anneal train mlp ───────────────────────────────────────────────────────────╮
    │ device cpu  params 4,417  preset small  batch 256                            │
    │ ━━━━━━━━━╸━━━━━━  230/500   46%  812.0 steps/s  ETA 0:00:01  elapsed 0:00:01 │
    │ ┌──────────── loss (log scale) ────────────┐                                 │
    │ │▀▚▄▄ ...                                   │ 1                              │
    │ step 230  loss 0.0123  val 0.0130  lr 1.0e-02  1.2 ms/step                   │
    │ compiler  14 kernels/step, 3 of 20 fused across the seam                     │
    │ schedule cache 2 hits / 1 misses  jit 228 replays  24 programs compiled      │
    ╰──────────────────────────────────────────────────────────────────────────────╯

It is an observer of the loop (anneal_cli.loop): it only records numbers as they come;
rich redraws it a few times a second from its own thread. Every line is one terminal row (cut with an
ellipsis, never wrapped) and the panel leaves room below it for the run's summary, so 80x24 shows it whole
and 60x20 still reads; no ETA until two steps have run (the first one compiles).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from anneal_cli.loop import StepLog

PANEL_ROWS = 12
SUMMARY_ROWS = 4


def _row(text: Text) -> Text:
    """One terminal row: cut with an ellipsis when narrow, never wrapped."""
    text.no_wrap, text.overflow = True, "ellipsis"
    return text


def fmt_duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-:--:--"
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


@dataclass(frozen=True)
class SeamStats:
    """How the kernels of one forward+backward step split: computed once, from the real schedule."""

    kernels: int
    fused: int  # kernels holding nodes of both the forward and the backward pass


def seam_stats(trainer: Any, device: str) -> SeamStats | None:
    """Schedules the trainer's forward+backward graph once (anneal.introspect.kernel_rows); None without graph()."""
    graph = getattr(trainer, "graph", None)
    if not callable(graph):
        return None
    from anneal.introspect import kernel_rows

    step = graph(True)
    rows = kernel_rows(step.forward, step.backward, device)
    return SeamStats(len(rows), sum(r.phase == "forward+backward" for r in rows))


class CompilerStats:
    """Kernels per step, schedule-cache hits/misses, programs compiled and JIT replays, from the device's runner.

    An observer of the loop: it counts the kernels each trainer.step ran (evaluation excluded). Counters are
    shown as deltas since training started."""

    def __init__(self, device: str, trainer: Any, seam: SeamStats | None) -> None:
        from anneal.realize import runner

        self.runner = runner(device)
        self.jit = getattr(trainer, "jit", None)
        self.seam = seam
        sched = self.runner.scheduler.stats
        self._base = (sched.hits, sched.misses, self.runner.stats.programs_compiled)
        self._k0 = 0
        self.kernels_per_step: int | None = None

    @classmethod
    def maybe(cls, device: str, trainer: Any, seam: SeamStats | None) -> CompilerStats | None:
        try:
            return cls(device, trainer, seam)
        except Exception:  # a backend without a runner (a test double): no compiler statistics
            return None

    def before_step(self, i: int) -> None:
        self._k0 = self.runner.stats.kernels_run

    def after_step(self, done: int, loss: float) -> None:
        self.kernels_per_step = self.runner.stats.kernels_run - self._k0

    def text(self) -> Text:
        sched = self.runner.scheduler.stats
        hits, misses = sched.hits - self._base[0], sched.misses - self._base[1]
        compiled = self.runner.stats.programs_compiled - self._base[2]
        t = Text()
        kps = "-" if self.kernels_per_step is None else str(self.kernels_per_step)
        t.append(kps, "bold")
        t.append(" kernels/step")
        if self.seam is not None:
            t.append(", ")
            t.append(str(self.seam.fused), "bold")
            t.append(f" of {self.seam.kernels} fused across the seam")
        t.append("\nschedule cache ")
        t.append(f"{hits}", "bold green")
        t.append(" hits / ")
        t.append(f"{misses}", "bold yellow")
        t.append(" misses  ")
        replays = getattr(self.jit, "replays", None)
        if replays is not None:
            t.append("jit ")
            t.append(str(replays), "bold green")
            t.append(" replays  ")
        t.append(f"{compiled} programs compiled")
        return t


class LossChart:
    """The loss curve, sized to the space rich gives it; log scale once the loss spans a decade."""

    def __init__(self, dashboard: Dashboard, height: int) -> None:
        self.dash = dashboard
        self.height = height

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        import uniplot

        train, val = self.dash.series()
        if len(train) < 2:
            yield Text("loss chart: waiting for the first steps…", style="dim")
            return
        losses = [y for _, y in train] + [y for _, y in val]
        log = min(losses) > 0 and max(losses) / min(losses) >= 10
        ys, xs, labels, lines = [[y for _, y in train]], [[x for x, _ in train]], ["train loss"], [True]
        if val:
            ys.append([y for _, y in val])
            xs.append([x for x, _ in val])
            labels.append("val loss")
            lines.append(len(val) > 1)
        plot_options = {
            "lines": lines,
            "height": self.height,
            "width": max(20, options.max_width - 12),  # the y labels take the rest
            "legend_labels": labels,
            "y_as_log": log,
            "x_min": self.dash.first_step,
            "x_max": self.dash.steps,
            "x_gridlines": [],
            "y_gridlines": [],
            "title": "loss (log scale)" if log else "loss",
            "color": True,
        }
        try:
            text = str(uniplot.plot_to_string(ys, xs, **plot_options))
        except Exception as exc:  # the chart is a view: never let it stop a run
            yield Text(f"loss chart unavailable: {type(exc).__name__}: {exc}", style="dim")
            return
        yield Text.from_ansi(text.rstrip("\n"))


class Dashboard:
    """The live view of one run; use as a context manager around the loop, and as one of its observers."""

    def __init__(
        self,
        console: Console,
        *,
        model: str,
        device: str,
        steps: int,
        start: int = 0,
        settings: Iterable[tuple[str, Any]] = (),
        parameters: int | None = None,
        history: Iterable[tuple[int, float, float | None]] = (),
        compiler: CompilerStats | None = None,
        clock: Callable[[], float] = time.perf_counter,
        refresh_per_second: float = 4,
    ) -> None:
        self.console, self.model, self.device = console, model, device
        self.steps, self.start, self.done = steps, start, start
        self.settings = list(settings)
        self.parameters = parameters
        self.compiler = compiler
        self.clock = clock
        self._lock = threading.Lock()
        self._train: list[tuple[int, float]] = []
        self._val: list[tuple[int, float]] = []
        for step, loss, val in history:
            self._train.append((step, loss))
            if val is not None:
                self._val.append((step, val))
        self.first_step = self._train[0][0] if self._train else start + 1
        self.last: StepLog | None = None
        self.loss: float | None = None
        self.t0 = clock()
        # (time, step) after each step of this process: the first step (compiling) only starts the window
        self._recent: deque[tuple[float, int]] = deque(maxlen=64)
        # The panel's rows besides the chart's plot: borders 2, header, progress, numbers, compiler 2, and the
        # chart's title, frame 2, x labels, legend; and the summary printed below it (3 rows with the prompt).
        summary = SUMMARY_ROWS if console.size.width >= 80 else SUMMARY_ROWS + 2  # its lines wrap when narrow
        self.chart_height = max(2, min(16, console.size.height - PANEL_ROWS - summary))
        self.live = Live(self, console=console, refresh_per_second=refresh_per_second, transient=False)
        self.finished_at: float | None = None

    # ---- the loop's observer ----
    def after_step(self, done: int, loss: float) -> None:
        with self._lock:
            self.done, self.loss = done, loss
            self._train.append((done, loss))
            self._recent.append((self.clock(), done))

    def after_eval(self, done: int, val: float) -> None:
        with self._lock:
            self._val.append((done, val))

    def logged(self, record: StepLog) -> None:
        self.last = record

    # ---- live ----
    def __enter__(self) -> Dashboard:
        self.live.start(refresh=True)
        return self

    def __exit__(self, *exc: object) -> None:
        self.finished_at = self.clock()
        self.live.stop()  # the last frame stays on the screen

    def series(self) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
        with self._lock:
            return list(self._train), list(self._val)

    def rate(self) -> float | None:
        """Steps per second over the recent steps (the first, compiling steps drop out of the window)."""
        with self._lock:
            if len(self._recent) < 2:
                return None
            (t_a, s_a), (t_b, s_b) = self._recent[0], self._recent[-1]
        return (s_b - s_a) / (t_b - t_a) if s_b > s_a and t_b > t_a else None

    # ---- rendering ----
    def header(self) -> Text:
        t = Text()  # the model is the panel's title
        t.append("device ", "dim")
        t.append(self.device, "bold")
        if self.parameters is not None:
            t.append("  params ", "dim")
            t.append(f"{self.parameters:,}", "bold")
        for k, v in self.settings:
            t.append(f"  {k} ", "dim")
            t.append(str(v))
        return _row(t)

    def progress(self, width: int = 80) -> Table:
        done, total = self.done, self.steps
        rate = self.rate()
        elapsed = (self.finished_at or self.clock()) - self.t0
        eta = 0.0 if done >= total else (None if rate is None else (total - done) / rate)
        grid = Table.grid(padding=(0, 1), expand=True)
        grid.add_column(ratio=1, min_width=4)
        grid.add_column(no_wrap=True, overflow="ellipsis")
        info = Text()
        info.append(f"{done}/{total}", "bold")
        info.append(f"  {100 * done / max(total, 1):3.0f}%")
        info.append(f"  {rate:,.1f} steps/s" if rate is not None else "  - steps/s")
        if eta is not None:  # none until two steps ran: the first one's compile time says nothing of the rest
            info.append(f"  ETA {fmt_duration(eta)}")
        if width >= 76:  # narrower, the bar needs the room
            info.append(f"  elapsed {fmt_duration(elapsed)}")
        grid.add_row(ProgressBar(total=max(total, 1), completed=done), _row(info))
        return grid

    def numbers(self) -> Text:
        t = Text()
        rec = self.last
        t.append("step ", "dim")
        t.append(f"{self.done}")
        if self.loss is not None:
            t.append("  loss ", "dim")
            t.append(f"{self.loss:.4f}", "bold blue")
        with self._lock:
            val = self._val[-1] if self._val else None
        if val is not None:
            t.append("  val ", "dim")
            t.append(f"{val[1]:.4f}", "bold magenta")
            if val[0] != self.done:
                t.append(f" (step {val[0]})", "dim")
        if rec is not None and rec.lr is not None:
            t.append("  lr ", "dim")
            t.append(f"{rec.lr:.1e}")
        if rec is not None:
            t.append(f"  {rec.ms_per_step:.1f} ms/step", "dim")
        return _row(t)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        chart = LossChart(self, self.chart_height)
        parts: list[Any] = [self.header(), self.progress(options.max_width), chart, self.numbers()]
        if self.compiler is not None:
            first, second = self.compiler.text().split("\n")
            parts += [_row(Text("compiler  ", "dim") + first), _row(second)]
        yield Panel(Group(*parts), title=f"anneal train {self.model}", title_align="left", border_style="blue")

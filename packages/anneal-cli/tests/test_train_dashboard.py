"""The live dashboard of `anneal train`: rendered to a string, through the CLI, and on a real terminal (tmux)."""

from __future__ import annotations

import io
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from rich.console import Console
from rich.text import Text

from anneal_cli import loop, train
from anneal_cli.dashboard import CompilerStats, Dashboard, fmt_duration, seam_stats
from anneal_cli.main import AnnealGroup
from anneal_ir.plugins import Plugins


class Halving:
    """Loss halves each step; validation loss is 10% above it; the lr decays."""

    def __init__(self) -> None:
        self.loss = 1.0

    def step(self, i: int) -> float:
        self.loss /= 2
        return self.loss

    def evaluate(self) -> float:
        return self.loss * 1.1

    def lr(self) -> float:
        return 0.1 / (1 + self.loss)


def render(console: Console, dash: Dashboard) -> str:
    console.print(dash)
    file = console.file
    assert isinstance(file, io.StringIO)
    return file.getvalue()


def test_dashboard_shows_header_progress_chart_and_numbers() -> None:
    console = Console(file=io.StringIO(), force_terminal=True, color_system=None, width=100, height=40)
    dash = Dashboard(console, model="halving", device="cpu", steps=20, settings=[("batch", 8)], parameters=12345,
                     refresh_per_second=50)  # fmt: skip
    with dash:
        loop.run(Halving(), 20, log_every=5, eval_every=5, emit=lambda r: None, observers=[dash])
    assert dash.done == 20 and len(dash.series()[0]) == 20 and [s for s, _ in dash.series()[1]] == [5, 10, 15, 20]
    text = render(Console(file=io.StringIO(), width=100, height=40, color_system=None), dash)
    assert "anneal train halving" in text
    assert "device cpu  params 12,345  batch 8" in text  # the model is the title
    assert "20/20  100%" in text and "steps/s" in text and "ETA 0:00:00" in text
    assert "loss (log scale)" in text  # the loss fell by more than a decade
    assert "train loss" in text and "val loss" in text  # the legend of the two series
    chart = [ln for ln in text.splitlines() if "│ │" in ln or "│ ┌" in ln]
    assert len(chart) >= 5  # a real chart: a box of rows
    assert f"loss {0.5**20:.4f}" in text and f"val {1.1 * 0.5**20:.4f}  lr" in text  # (step N) only when older
    assert "lr 1.0e-01" in text


def test_chart_waits_for_two_points_and_history_seeds_it() -> None:
    console = Console(file=io.StringIO(), width=80, height=30, color_system=None)
    empty = Dashboard(console, model="m", device="cpu", steps=10)
    assert "waiting for the first steps" in render(console, empty)
    resumed = Dashboard(console, model="m", device="cpu", steps=10, start=4,
                        history=[(1, 4.0, None), (2, 3.0, 3.5), (3, 2.0, None), (4, 1.0, 1.5)])  # fmt: skip
    text = render(Console(file=io.StringIO(), width=80, height=30, color_system=None), resumed)
    assert "4/10" in text and "train loss" in text and "val loss" in text
    assert "loss (log scale)" not in text  # 4 -> 1 is less than a decade: linear


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_no_eta_until_two_steps_ran() -> None:
    clock = Clock()
    dash = Dashboard(Console(file=io.StringIO(), width=80, height=24), model="m", device="cpu", steps=100,
                     clock=clock)  # fmt: skip
    clock.now = 30.0  # the first step compiles: 30 s, which says nothing of the other 99
    dash.after_step(1, 1.0)
    assert dash.rate() is None and "ETA" not in render(Console(file=io.StringIO(), width=80, height=24), dash)
    clock.now = 30.5
    dash.after_step(2, 0.5)
    text = render(Console(file=io.StringIO(), width=80, height=24), dash)
    assert dash.rate() == 2.0 and f"ETA {fmt_duration(98 / 2.0)}" in text


class Compiler:
    """CompilerStats' two lines, as long as a real run's."""

    def text(self) -> Text:
        return Text("33 kernels/step, 7 of 11 fused across the seam\n"
                    "schedule cache 10 hits / 2 misses  jit 2998 replays  24 programs compiled")  # fmt: skip


@pytest.mark.parametrize(("width", "height", "room"), [(80, 24, 4), (60, 20, 6)])
def test_every_line_is_one_row_and_the_summary_has_room(width: int, height: int, room: int) -> None:
    console = Console(file=io.StringIO(), width=width, height=height, color_system=None)
    settings = [("preset", "tiny"), ("batch", 128), ("lr", 0.01), ("seed", 0)]
    dash = Dashboard(console, model="mlp", device="cpu", steps=3000, settings=settings, parameters=1185,
                     compiler=Compiler(), refresh_per_second=50)  # type: ignore[arg-type]  # a stand-in  # fmt: skip
    with dash:
        loop.run(Halving(), 300, log_every=100, eval_every=100, emit=lambda r: None, observers=[dash])
    lines = render(Console(file=io.StringIO(), width=width, height=height, color_system=None), dash).splitlines()
    assert len(lines) <= height - room  # the panel, and below it the run's summary lines and the prompt
    assert all(len(line) <= width for line in lines)
    body = lines[1:-1]
    assert all(line.startswith("│") and line.endswith("│") for line in body)  # no row spilled onto the next
    text = "\n".join(lines)
    assert "ETA" in text and "steps/s" in text and "step 300  loss" in text and "fused across the seam" in text
    if width >= 80:
        assert "…" not in text  # at 80 columns nothing is cut either
        assert "device cpu  params 1,185  preset tiny  batch 128  lr 0.01  seed 0" in text


def test_fmt_duration() -> None:
    assert fmt_duration(0) == "0:00:00" and fmt_duration(3725.4) == "1:02:05" and fmt_duration(None) == "-:--:--"


def test_compiler_stats_from_the_real_runner() -> None:
    from anneal_models import mlp

    trainer = mlp.build({**mlp.DEFAULTS, **mlp.PRESETS["tiny"]}, "cpu")
    seam = seam_stats(trainer, "cpu")
    assert seam is not None and 0 < seam.fused <= seam.kernels
    stats = CompilerStats(device="cpu", trainer=trainer, seam=seam)
    loop.run(trainer, 5, log_every=5, eval_every=5, emit=lambda r: None, observers=[stats])
    assert stats.kernels_per_step is not None and stats.kernels_per_step > 0
    text = stats.text().plain
    assert f"{stats.kernels_per_step} kernels/step" in text
    assert f"kernels/step, {seam.fused} of {seam.kernels} fused across the seam" in text
    assert "jit 3 replays" in text and "hits /" in text and "misses" in text


def test_the_cli_draws_the_dashboard_on_a_terminal(
    cli: AnnealGroup, runner: CliRunner, test_plugins: Plugins, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(train, "wants_dashboard", lambda plain, as_json: not (plain or as_json))
    result = runner.invoke(cli, ["train", "fit", "--device", "fake", "--steps", "6"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "anneal train fit" in out and "6/6" in out and "train loss" in out
    assert "step 6/6  loss" not in out  # no plain lines
    assert "trained fit to step 6/6" in out and out.rstrip().endswith("finished on fake")
    plain = runner.invoke(cli, ["train", "fit", "--device", "fake", "--steps", "6", "--plain"])
    assert "step 6/6  loss 0.0156" in plain.stdout and "anneal train fit" not in plain.stdout


def test_not_a_terminal_means_plain_lines(cli: AnnealGroup, runner: CliRunner, test_plugins: Plugins) -> None:
    assert not train.wants_dashboard(False, False)  # CliRunner's stdout is not a terminal
    result = runner.invoke(cli, ["train", "fit", "--device", "fake", "--steps", "2"])
    assert result.stdout.splitlines()[1].startswith("step 1/2  loss 0.5000  lr 1.0e-01")


# ---- a real terminal ----


@pytest.fixture
def tmux() -> Iterator[Any]:
    if shutil.which("tmux") is None:  # a real terminal is part of the test: fail, never skip
        pytest.fail("tmux is missing (scripts/system-deps.sh installs it)")
    server = f"anneal-test-{os.getpid()}-{time.monotonic_ns()}"  # one per test: a server may still be going

    def run(*args: str) -> str:
        done = subprocess.run(["tmux", "-L", server, *args], capture_output=True, text=True, timeout=10)
        return done.stdout

    run.server = server  # type: ignore[attr-defined]
    yield run
    subprocess.run(["tmux", "-L", server, "kill-server"], capture_output=True, timeout=10)


def train_on_a_terminal(tmux: Any, width: int, height: int) -> tuple[str, str]:
    """`anneal train mlp --preset tiny` in a tmux pane of width x height: (the last screen, a frame mid-run)."""
    command = [sys.executable, "-m", "anneal_cli.main", "train", "mlp", "--preset", "tiny", "--device", "cpu"]
    script = f'{shlex.join(command)}; echo "[exit $?]"; sleep 60'
    env = {**os.environ, "XDG_RUNTIME_DIR": os.environ.get("XDG_RUNTIME_DIR", "/tmp")}
    env.pop("ANNEAL_DEBUG", None)
    subprocess.run(["tmux", "-L", tmux.server, "new-session", "-d", "-x", str(width), "-y",
                    str(height), "sh", "-c", script], env=env, check=True, timeout=10)  # fmt: skip
    screen, mid = "", ""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        screen = tmux("capture-pane", "-p")
        if "[exit" in screen:
            break
        if "/200" in screen and "200/200" not in screen:
            mid = screen  # a frame while training
        time.sleep(0.2)
    return screen, mid


def test_at_80_by_24_the_whole_panel_and_the_summary_stay_on_screen(tmux: Any) -> None:
    screen, _ = train_on_a_terminal(tmux, 80, 24)
    lines = screen.rstrip("\n").splitlines()
    assert "[exit 0]" in screen, screen
    top = next(i for i, line in enumerate(lines) if line.startswith("╭"))
    bottom = next(i for i, line in enumerate(lines) if line.startswith("╰"))
    assert top == 0 and "anneal train mlp" in lines[0], screen  # nothing scrolled off the top
    assert all(line.startswith("│") and line.rstrip().endswith("│") for line in lines[top + 1 : bottom]), screen
    assert "…" not in screen and "trained mlp to step 200/200" in lines[bottom + 1]
    assert lines[bottom + 2].startswith("mlp: eval loss")


def test_dashboard_on_a_real_terminal(tmux: Any) -> None:
    screen, mid = train_on_a_terminal(tmux, 120, 40)
    assert "[exit 0]" in screen, screen
    assert screen.count("anneal train mlp") == 1, screen  # one panel, redrawn in place
    assert "device cpu  params 1,185  preset tiny  batch 128  lr 0.01  seed 0" in screen
    assert "200/200  100%" in screen and "steps/s" in screen and "ETA 0:00:00" in screen
    assert "loss (log scale)" in screen and "train loss" in screen and "val loss" in screen
    assert sum(ln.count("▀") + ln.count("▄") + ln.count("▖") + ln.count("▝") for ln in screen.splitlines()) > 40
    assert "kernels/step" in screen and "fused across the seam" in screen and "replays" in screen
    assert "step 200  loss" in screen and "lr 1.0e-02" in screen
    assert "trained mlp to step 200/200" in screen
    assert "mlp: eval loss" in screen and "of initial; target < 3%" in screen  # the final line
    assert "step  20/200" not in screen  # no plain lines on a terminal
    if mid:
        assert "anneal train mlp" in mid and "steps/s" in mid

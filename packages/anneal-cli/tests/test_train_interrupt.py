"""`anneal train`, issue 19: Ctrl-C saves the last completed step and says how to resume (exit 130), --resume
keeps the run's plan unless a flag changes it (and says which), and non-finite floats are usage errors."""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from anneal import registry
from anneal_cli import runs, train
from anneal_cli.main import AnnealGroup
from anneal_ir.plugins import Plugins, hookimpl, load_plugins
from anneal_ir.settings import Settings

MLP = ["train", "mlp", "--preset", "tiny", "--device", "cpu"]


def records(result: Any) -> list[dict]:
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


# ------------------------------------------------------------------------------ Ctrl-C, for real


def test_ctrl_c_saves_the_last_step_and_prints_the_resume_command(
    cli: AnnealGroup, runner: CliRunner, tmp_path: Path
) -> None:
    """A real `anneal train` process gets SIGINT after its first logged step: it finishes the step in progress,
    checkpoints it atomically, prints the command to resume and exits 130; that command continues the run."""
    out = tmp_path / "run"
    env = {**os.environ, "XDG_RUNTIME_DIR": os.environ.get("XDG_RUNTIME_DIR", "/tmp/xdg"), "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "anneal_cli.main", *MLP, "--steps", "1000000", "--log-every", "1", "--plain",
           "--out", str(out)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 120
        for line in proc.stdout:
            if line.startswith("step "):
                break
            assert time.monotonic() < deadline, "no step was logged"
        else:
            pytest.fail(f"the run ended before a step was logged: {proc.stderr.read() if proc.stderr else ''}")
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    last = stderr.strip().splitlines()[-1]
    found = re.fullmatch(r"interrupted at step (\d+); resume with (.+)", last)
    assert found, stderr
    done, command = int(found.group(1)), found.group(2)
    assert shlex.split(command) == ["anneal", "train", "mlp", "--resume", str(out), "--device", "cpu"]
    assert "Traceback" not in stderr and "Aborted" not in stderr
    # the checkpoint holds exactly the steps done, and loss.csv agrees with it
    _, info = runs.load_checkpoint(out / runs.CHECKPOINT)
    assert int(info["anneal.step"]) == done >= 1
    rows = list(csv.reader((out / runs.LOSSES).read_text().splitlines()))
    assert [int(r[0]) for r in rows[1:]] == list(range(1, done + 1))
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary file left behind
    logged = [ln for ln in [line, *stdout.splitlines()] if ln.startswith("step ")]
    assert int(logged[-1].split()[1].split("/")[0]) <= done  # what was logged, no more, was saved

    # the printed command continues from there, exactly as an uninterrupted run would
    more = records(runner.invoke(cli, [*shlex.split(command)[1:], "--steps", str(done + 3), "--log-every", "1",
                                       "--json"]))  # fmt: skip
    assert [r["step"] for r in more] == [done + 1, done + 2, done + 3]
    whole = records(runner.invoke(cli, [*MLP, "--steps", str(done + 3), "--log-every", "1", "--json"]))
    assert [r["loss"] for r in more] == [r["loss"] for r in whole[done:]]


def test_the_first_ctrl_c_waits_for_the_step_and_the_second_stops_at_once() -> None:
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # as on a terminal (a background job of a
    try:  # shell starts with SIGINT ignored)
        with train.stop_at_step_boundary() as stop:
            assert not stop()
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)  # the handler runs between bytecodes of the main thread
            assert stop()
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    finally:
        signal.signal(signal.SIGINT, before)


# ------------------------------------------------------------------------------ in process, with a test plugin


class Counter:
    """A trainer with a state (the steps done and a running sum) that can SIGINT itself during a step."""

    def __init__(self, config: dict[str, Any], device: str) -> None:
        # steps derived from epochs when the configuration leaves them open, as vit's and resnet9's trainers do
        self.config = {**config, "steps": config.get("steps") or 3 * int(config["epochs"])}
        self.total, self.steps = 0.0, 0
        self.interrupt_at: int | None = config.get("interrupt_at")

    def step(self, i: int) -> float:
        assert i == self.steps, "a step ran twice or was skipped"
        if self.interrupt_at == i + 1:
            signal.raise_signal(signal.SIGINT)  # Ctrl-C during this step: it still completes
        self.total += i + 1
        self.steps += 1
        return 1.0 / (i + 1)

    def state_dict(self) -> dict[str, Any]:
        return {"total": np.array([self.total]), "steps": np.array([self.steps])}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.total, self.steps = float(state["total"].numpy()[0]), int(state["steps"].numpy()[0])


class CounterPlugin:
    @hookimpl
    def register_backends(self, register: Callable[..., None]) -> None:
        register("fake", object, summary="a fake backend")

    @hookimpl
    def register_models(self, register: Callable[..., None]) -> None:
        defaults = {"steps": None, "epochs": 2, "lr": 0.1, "seed": 0, "interrupt_at": None}
        register("counter", build=Counter, defaults=defaults, presets={"tiny": {"epochs": 1}})


@pytest.fixture
def counter() -> Plugins:
    allowed = Settings(load_plugins=frozenset({"counter", "anneal-cpu"}))  # the cpu backend reads checkpoints
    plugins = load_plugins(allowed, extra=[("counter", CounterPlugin())], stream=None)
    registry.reset(using=plugins)
    return plugins


COUNTER = ["train", "counter", "--device", "fake", "--plain"]


def test_ctrl_c_in_a_step_saves_that_step(
    cli: AnnealGroup, runner: CliRunner, counter: Plugins, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    result = runner.invoke(cli, [*COUNTER, "--steps", "10", "--set", "interrupt_at=4", "--out", str(out)])
    assert result.exit_code == 130, result.output
    assert "stopping after this step to save it (Ctrl-C again to stop at once, without saving)" in result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"interrupted at step 4; resume with anneal train counter --resume {out} --device fake"
    )
    state, info = runs.load_checkpoint(out / runs.CHECKPOINT)
    assert info["anneal.step"] == "4" and float(state["total"].numpy()[0]) == 1 + 2 + 3 + 4
    assert "step 5/" not in result.stdout


def test_ctrl_c_without_a_run_folder_says_nothing_was_saved(
    cli: AnnealGroup, runner: CliRunner, counter: Plugins
) -> None:
    result = runner.invoke(cli, [*COUNTER, "--steps", "10", "--set", "interrupt_at=2"])
    assert result.exit_code == 130
    assert result.stderr.splitlines()[-1] == (
        "interrupted at step 2; nothing saved (train with --out DIR to make a run resumable)"
    )


def test_resume_keeps_the_plan_and_says_so(
    cli: AnnealGroup, runner: CliRunner, counter: Plugins, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    stopped = runner.invoke(cli, [*COUNTER, "--steps", "8", "--lr", "0.5", "--set", "interrupt_at=3", "--out",
                                  str(out)])  # fmt: skip
    assert stopped.exit_code == 130
    # the plan was 8 steps at lr 0.5: resuming without flags keeps it, and says so
    rest = runner.invoke(cli, ["train", "counter", "--device", "fake", "--plain", "--resume", str(out)])
    assert rest.exit_code == 0, rest.output
    assert f"resuming {out} at step 3 of 8; keeping the run's plan (steps 8, lr 0.5, seed 0, epochs 2)\n" in rest.stdout
    assert "step 8/8" in rest.stdout
    assert runs.load_checkpoint(out / runs.CHECKPOINT)[1]["anneal.step"] == "8"


def test_resume_says_what_a_flag_changed(cli: AnnealGroup, runner: CliRunner, counter: Plugins, tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert runner.invoke(cli, [*COUNTER, "--steps", "2", "--lr", "0.5", "--out", str(out)]).exit_code == 0
    more = runner.invoke(cli, ["train", "counter", "--device", "fake", "--plain", "--resume", str(out), "--steps",
                               "4", "--lr", "0.25"])  # fmt: skip
    assert more.exit_code == 0, more.output
    line = next(ln for ln in more.stdout.splitlines() if ln.startswith("resuming "))
    assert line == (
        f"resuming {out} at step 2 of 4; changed by the flags given now: steps 2 -> 4, lr 0.5 -> 0.25; "
        "kept from the run: seed 0, epochs 2"
    )


def test_resume_derives_steps_again_when_a_flag_changes_what_they_came_from(
    cli: AnnealGroup, runner: CliRunner, counter: Plugins, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    first = runner.invoke(cli, [*COUNTER, "--preset", "tiny", "--out", str(out)])  # 1 epoch: 3 steps
    assert first.exit_code == 0 and "step 3/3" in first.stdout, first.output
    assert json.loads((out / runs.CONFIG).read_text())["derived"] == ["steps"]
    same = runner.invoke(cli, ["train", "counter", "--device", "fake", "--plain", "--resume", str(out)])
    assert "already at step 3 of 3" in same.stdout  # nothing changed: the plan is kept
    more = runner.invoke(cli, ["train", "counter", "--device", "fake", "--plain", "--resume", str(out), "--set",
                               "epochs=2"])  # fmt: skip
    assert more.exit_code == 0, more.output
    assert "changed by the flags given now: steps 3 -> 6, epochs 1 -> 2" in more.stdout
    assert "step 6/6" in more.stdout


# ------------------------------------------------------------------------------ non-finite floats


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--lr", "nan"], "Invalid value for '--lr': 'nan' is not a finite number"),
        (["--lr", "inf"], "Invalid value for '--lr': 'inf' is not a finite number"),
        (["--lr", "Infinity"], "Invalid value for '--lr': 'Infinity' is not a finite number"),
        (["--comm-timeout", "inf"], "Invalid value for '--comm-timeout': 'inf' is not a finite number"),
        (["--comm-timeout", "nan"], "Invalid value for '--comm-timeout': 'nan' is not a finite number"),
        (["--set", "lr=NaN"], "Invalid value for --set: 'lr=NaN': lr must be a finite number"),
        (["--set", "lr=-Infinity"], "Invalid value for --set: 'lr=-Infinity': lr must be a finite number"),
        (["--set", "lr=inf"], "Invalid value for --set: 'lr=inf': lr must be a finite number"),
    ],
)
def test_non_finite_floats_are_usage_errors(
    cli: AnnealGroup, runner: CliRunner, counter: Plugins, tmp_path: Path, args: list[str], message: str
) -> None:
    out = tmp_path / "run"
    result = runner.invoke(cli, [*COUNTER, "--out", str(out), *args])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and "Usage: " in result.stderr
    assert not out.exists()


def test_run_folders_write_through_the_shared_atomic_helper() -> None:
    from anneal import files
    from anneal.nn import state
    from anneal_models import grid

    assert runs.atomic_write is files.atomic_write is state.atomic_write is grid.atomic_write

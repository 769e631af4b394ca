"""`anneal train` with an in-process plugin's model and backend."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from anneal_cli import loop
from anneal_cli.main import AnnealGroup
from anneal_ir.plugins import Plugins


def test_plain_lines(cli: AnnealGroup, runner: CliRunner, test_plugins: Plugins) -> None:
    result = runner.invoke(cli, ["train", "fit", "--device", "fake", "--steps", "4", "--log-every", "2", "--lr", "0.5"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "model fit  device fake  preset small  steps 4  batch 4  lr 0.5  seed 0"
    assert lines[1].startswith("step 2/4  loss 0.2500  lr 5.0e-01  ") and lines[1].endswith(" ms/step")
    assert lines[2].startswith("step 4/4  loss 0.0625  ")
    assert lines[3] == "finished on fake"


def test_json_lines_and_config_layers(cli: AnnealGroup, runner: CliRunner, test_plugins: Plugins) -> None:
    result = runner.invoke(cli, ["train", "fit", "--device", "fake", "--preset", "tiny", "--json"])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]  # stdout holds only the records
    assert [r["step"] for r in records] == [1, 2, 3, 4]  # tiny preset: 4 steps, logged every step
    assert records[-1]["loss"] == 1 / 16 and records[-1]["lr"] == 0.1
    assert "model fit  device fake  preset tiny" in result.stderr


def test_nan_loss_exits_1_naming_the_step(cli: AnnealGroup, runner: CliRunner, test_plugins: Plugins) -> None:
    plugins = test_plugins
    plugins.models["fit"].defaults["nan_at"] = 3
    result = runner.invoke(cli, ["train", "fit", "--device", "fake"])
    assert result.exit_code == 1
    assert result.stderr == "anneal: error: loss is nan at step 3; training stopped\n"


def test_unknown_model_lists_the_known_ones(cli: AnnealGroup, runner: CliRunner, test_plugins: Plugins) -> None:
    result = runner.invoke(cli, ["train", "nope"])
    assert result.exit_code == 2
    assert "unknown model 'nope'; known models: fit" in result.stderr


def test_unknown_device_and_missing_preset_are_usage_errors(
    cli: AnnealGroup, runner: CliRunner, test_plugins: Plugins
) -> None:
    result = runner.invoke(cli, ["train", "fit", "--device", "nope"])
    assert result.exit_code == 2
    assert "unknown device 'nope'; registered backends: fake, down" in result.stderr
    result = runner.invoke(cli, ["train", "fit", "--device", "fake", "--preset", "full"])
    assert result.exit_code == 2
    assert "model 'fit' has no preset 'full' (its presets: tiny, small)" in result.stderr


def test_unavailable_device_is_a_one_line_runtime_error(
    cli: AnnealGroup, runner: CliRunner, test_plugins: Plugins
) -> None:
    result = runner.invoke(cli, ["train", "fit", "--device", "down"])
    assert result.exit_code == 1
    assert result.stderr == "anneal: error: device 'down' is not available: no such hardware; install it\n"


def test_failures_are_one_line_unless_debugging(
    cli: AnnealGroup, runner: CliRunner, test_plugins: Plugins, monkeypatch: pytest.MonkeyPatch
) -> None:
    test_plugins.models["fit"].defaults["explode"] = True
    result = runner.invoke(cli, ["train", "fit", "--device", "fake"])
    assert result.exit_code == 1
    assert result.stderr == "anneal: error: ValueError: bad config (ANNEAL_DEBUG=1 shows the traceback)\n"
    monkeypatch.setenv("ANNEAL_DEBUG", "1")
    result = runner.invoke(cli, ["train", "fit", "--device", "fake"])
    assert isinstance(result.exception, ValueError)  # raised through: Python prints the traceback


def test_loop_logs_every_n_and_the_last_step() -> None:
    class Constant:
        def step(self, i: int) -> float:
            return 1.0

    seen: list[int] = []
    ticks = iter(range(100))
    logs = loop.run(Constant(), 7, log_every=3, emit=lambda r: seen.append(r.step), clock=lambda: float(next(ticks)))
    assert seen == [3, 6, 7]
    assert [r.ms_per_step for r in logs] == [1000 / 3, 1000 / 3, 1000.0]  # one clock tick per log
    assert loop.default_log_every(100) == 10 and loop.default_log_every(3) == 1


def test_loop_stops_on_infinite_loss() -> None:
    class Diverging:
        def step(self, i: int) -> float:
            return float("inf") if i == 4 else 1.0

    with pytest.raises(loop.NonFiniteLoss, match="loss is inf at step 5"):
        loop.run(Diverging(), 10, log_every=1, emit=lambda r: None)

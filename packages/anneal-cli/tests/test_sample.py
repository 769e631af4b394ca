"""`anneal sample`: generation from a run folder written by `anneal train --out`."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from anneal_cli.main import AnnealGroup


def test_sample_from_a_trained_run(cli: AnnealGroup, runner: CliRunner, tmp_path: Path, offline_data: None) -> None:
    run = tmp_path / "run"
    trained = runner.invoke(cli, ["train", "nanogpt", "--preset", "tiny", "--steps", "6", "--device", "cpu",
                                  "--plain", "--out", str(run)])  # fmt: skip
    assert trained.exit_code == 0, trained.output
    args = ["sample", "nanogpt", "--checkpoint", str(run), "--device", "cpu", "--max-tokens", "24", "--prompt", "KING"]
    first, again = runner.invoke(cli, [*args, "--seed", "3"]), runner.invoke(cli, [*args, "--seed", "3"])
    assert first.exit_code == 0, first.output
    assert first.stdout == again.stdout  # seeded: reproducible
    assert first.stdout.startswith("KING") and len(first.stdout) == len("KING") + 24 + 1  # + the final newline
    greedy = runner.invoke(cli, [*args[:3], str(run / "checkpoint.safetensors"), *args[4:], "--greedy"])
    assert greedy.exit_code == 0, greedy.output


def test_sample_needs_a_generating_model(cli: AnnealGroup, runner: CliRunner, tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert runner.invoke(cli, ["train", "mlp", "--preset", "tiny", "--steps", "2", "--device", "cpu", "--plain",
                               "--out", str(run)]).exit_code == 0  # fmt: skip
    result = runner.invoke(cli, ["sample", "mlp", "--checkpoint", str(run), "--device", "cpu"])
    assert result.exit_code == 2 and "does not generate" in result.output
    wrong = runner.invoke(cli, ["sample", "conv", "--checkpoint", str(run), "--device", "cpu"])
    assert wrong.exit_code == 1 and "is a run of model 'mlp'" in wrong.output

"""`anneal train --out / --resume`: run folders, exact resumption, and every bad input (issue 6).

The real mlp model on the CPU backend with a few steps of its tiny preset, so each run takes a second.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from anneal_cli import runs
from anneal_cli.main import AnnealGroup
from anneal_ir.plugins import Plugins

MLP = ["train", "mlp", "--preset", "tiny", "--device", "cpu"]


def records(result: Result) -> list[dict]:
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def one_error_line(result: Result, code: int = 1) -> str:
    assert result.exit_code == code, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("anneal: error: "), result.stderr
    return lines[0]


def test_out_writes_a_run_folder(cli: AnnealGroup, runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "run"
    recs = records(runner.invoke(cli, [*MLP, "--steps", "8", "--eval-every", "4", "--log-every", "2", "--json",
                                       "--out", str(out)]))  # fmt: skip
    assert [r["step"] for r in recs] == [2, 4, 6, 8]
    assert [r["val"] is not None for r in recs] == [False, True, False, True]  # val where evaluated
    assert recs[-1]["lr"] == 0.01
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint.safetensors", "config.json", "loss.csv",
                                                     "summary.txt"]  # fmt: skip
    assert (out / "summary.txt").read_text().startswith("mlp: eval loss ")
    meta = json.loads((out / "config.json").read_text())
    assert meta["model"] == "mlp" and meta["device"] == "cpu" and meta["format"] == 1
    assert meta["config"]["steps"] == 8 and meta["config"]["hidden"] == 32 and meta["config"]["preset"] == "tiny"
    lines = (out / "loss.csv").read_text().splitlines()
    assert lines[0] == "step,loss,val" and len(lines) == 9  # every step
    assert lines[4].startswith("4,") and not lines[4].endswith(",") and lines[3].endswith(",")
    assert float(lines[8].split(",")[1]) == recs[-1]["loss"]
    state, info = runs.load_checkpoint(out / "checkpoint.safetensors")
    assert info["anneal.model"] == "mlp" and info["anneal.step"] == "8"
    assert "model.l1.weight" in state and "optim.state.0.exp_avg" in state and "trainer.steps" in state
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary file left behind


def test_resume_continues_exactly(cli: AnnealGroup, runner: CliRunner, tmp_path: Path) -> None:
    whole = records(runner.invoke(cli, [*MLP, "--steps", "12", "--log-every", "1", "--json", "--out",
                                        str(tmp_path / "a")]))  # fmt: skip
    part = tmp_path / "b"
    records(runner.invoke(cli, [*MLP, "--steps", "5", "--json", "--out", str(part)]))
    result = runner.invoke(cli, ["train", "mlp", "--device", "cpu", "--resume", str(part), "--steps", "12",
                                 "--log-every", "1", "--json"])  # fmt: skip
    rest = records(result)
    assert f"resuming {part} at step 5" in result.stderr
    assert [r["step"] for r in rest] == list(range(6, 13))
    # parameters, Adam moments and bias corrections, and the data stream all continue: bit for bit
    assert [r["loss"] for r in rest] == [r["loss"] for r in whole[5:]]
    assert [r["val"] for r in rest if r["val"] is not None] == [r["val"] for r in whole[5:] if r["val"] is not None]
    a, b = (p / "loss.csv" for p in (tmp_path / "a", part))
    assert [ln.split(",")[:2] for ln in b.read_text().splitlines()] == [
        ln.split(",")[:2] for ln in a.read_text().splitlines()
    ]
    assert json.loads((part / "config.json").read_text())["config"]["steps"] == 12
    assert (part / "summary.txt").read_text() == (tmp_path / "a" / "summary.txt").read_text()  # the whole run's
    # a finished run has nothing left to do; --out elsewhere branches it into a new folder
    done = runner.invoke(cli, ["train", "mlp", "--device", "cpu", "--resume", str(part), "--plain"])
    assert done.exit_code == 0 and "already at step 12 of 12" in done.output
    branch = tmp_path / "c"
    more = records(runner.invoke(cli, ["train", "mlp", "--device", "cpu", "--resume", str(part), "--out",
                                       str(branch), "--steps", "14", "--json"]))  # fmt: skip
    assert [r["step"] for r in more] == [13, 14]
    assert len((branch / "loss.csv").read_text().splitlines()) == 1 + 14
    assert runs.load_checkpoint(part / "checkpoint.safetensors")[1]["anneal.step"] == "12"  # untouched


def test_a_resumed_run_summarizes_the_whole_run(
    cli: AnnealGroup, runner: CliRunner, tmp_path: Path, offline_data: None
) -> None:
    """The end-of-run summary (first train loss, val loss by step) is the same whether or not the run
    was resumed halfway: it reads the earlier steps from loss.csv."""
    args = ["train", "nanogpt", "--preset", "tiny", "--device", "cpu", "--eval-every", "2", "--plain"]
    whole = runner.invoke(cli, [*args, "--steps", "6", "--out", str(tmp_path / "a")])
    part = tmp_path / "b"
    first = runner.invoke(cli, [*args, "--steps", "4", "--out", str(part)])
    rest = runner.invoke(cli, ["train", "nanogpt", "--device", "cpu", "--resume", str(part), "--steps", "6", "--plain"])
    assert whole.exit_code == first.exit_code == rest.exit_code == 0, rest.output
    summary = (part / "summary.txt").read_text()
    assert summary == (tmp_path / "a" / "summary.txt").read_text()
    assert "val loss by step: 2: " in summary


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from anneal import registry
    from anneal_cli.main import build_cli

    registry.reset()
    out = tmp_path_factory.mktemp("saved") / "run"
    result = CliRunner().invoke(build_cli(), [*MLP, "--steps", "3", "--plain", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def copy_run(saved_run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(saved_run, tmp_path / "copy"))


def test_resume_refuses_another_models_run(cli: AnnealGroup, runner: CliRunner, saved_run: Path) -> None:
    line = one_error_line(runner.invoke(cli, ["train", "conv", "--device", "cpu", "--resume", str(saved_run)]))
    assert line == f"anneal: error: {saved_run} is a run of model 'mlp', not 'conv'"


def test_resume_refuses_a_checkpoint_written_by_another_model(
    cli: AnnealGroup, runner: CliRunner, saved_run: Path, tmp_path: Path
) -> None:
    conv = tmp_path / "conv"
    assert runner.invoke(cli, ["train", "conv", "--preset", "tiny", "--device", "cpu", "--steps", "1", "--out",
                               str(conv)]).exit_code == 0  # fmt: skip
    run = copy_run(saved_run, tmp_path)
    shutil.copy(conv / "checkpoint.safetensors", run / "checkpoint.safetensors")
    line = one_error_line(runner.invoke(cli, ["train", "mlp", "--device", "cpu", "--resume", str(run)]))
    assert "was written by model 'conv', not 'mlp'" in line


def test_resume_refuses_a_checkpoint_that_does_not_fit(
    cli: AnnealGroup, runner: CliRunner, saved_run: Path, tmp_path: Path
) -> None:
    run = copy_run(saved_run, tmp_path)
    meta = json.loads((run / "config.json").read_text())
    meta["config"]["hidden"] = 16  # the checkpoint holds 32-wide layers
    (run / "config.json").write_text(json.dumps(meta))
    line = one_error_line(runner.invoke(cli, ["train", "mlp", "--device", "cpu", "--resume", str(run)]))
    assert "does not fit this mlp model" in line and "size mismatch for l1.weight" in line
    assert json.loads((run / "config.json").read_text())["config"]["hidden"] == 16  # nothing rewritten


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "garbage"])
def test_resume_refuses_a_corrupt_checkpoint(
    cli: AnnealGroup, runner: CliRunner, saved_run: Path, tmp_path: Path, damage: str
) -> None:
    run = copy_run(saved_run, tmp_path)
    ckpt = run / "checkpoint.safetensors"
    data = bytearray(ckpt.read_bytes())
    if damage == "flip":
        data[-5] ^= 0x10  # inside a tensor: only the checksum notices
    elif damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "empty":
        data = bytearray()
    else:
        data = bytearray(b"not a safetensors file at all")
    ckpt.write_bytes(bytes(data))
    line = one_error_line(runner.invoke(cli, ["train", "mlp", "--device", "cpu", "--resume", str(run)]))
    assert line.startswith(f"anneal: error: checkpoint {ckpt} is corrupt")
    assert ckpt.read_bytes() == bytes(data)  # left as it was, for the user to look at


def test_resume_needs_a_run_folder(cli: AnnealGroup, runner: CliRunner, tmp_path: Path, saved_run: Path) -> None:
    line = one_error_line(runner.invoke(cli, ["train", "mlp", "--resume", str(tmp_path)]))
    assert line == f"anneal: error: {tmp_path} is not an anneal run folder (it has no config.json)"
    missing = runner.invoke(cli, ["train", "mlp", "--resume", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "does not exist" in missing.stderr
    run = copy_run(saved_run, tmp_path)
    (run / "checkpoint.safetensors").unlink()
    line = one_error_line(runner.invoke(cli, ["train", "mlp", "--device", "cpu", "--resume", str(run)]))
    assert line == f"anneal: error: {run} has no checkpoint.safetensors to resume from"
    preset = runner.invoke(cli, ["train", "mlp", "--device", "cpu", "--resume", str(saved_run), "--preset", "small"])
    assert preset.exit_code == 2 and "with its preset 'tiny'; drop --preset small" in preset.stderr


def test_out_refuses_a_folder_in_use(cli: AnnealGroup, runner: CliRunner, saved_run: Path) -> None:
    before = sorted(p.name for p in saved_run.iterdir())
    result = runner.invoke(cli, [*MLP, "--out", str(saved_run)])
    assert result.exit_code == 2 and f"{saved_run} exists and is not an empty folder" in result.stderr
    assert sorted(p.name for p in saved_run.iterdir()) == before


@pytest.mark.parametrize(
    "args,message",
    [
        (["--preset", "nope"], "Invalid value for '--preset': 'nope' is not one of 'tiny', 'small', 'full'."),
        (["--batch", "0"], "Invalid value for '--batch': 0 is not in the range x>=1."),
        (["--steps", "-1"], "Invalid value for '--steps': -1 is not in the range x>=1."),
        (["--eval-every", "0"], "Invalid value for '--eval-every': 0 is not in the range x>=1."),
        (["--lr", "0"], "Invalid value for '--lr': 0.0 is not in the range x>0."),
    ],
)
def test_bad_flags_are_usage_errors(
    cli: AnnealGroup, runner: CliRunner, test_plugins: Plugins, tmp_path: Path, args: list[str], message: str
) -> None:
    out = tmp_path / "run"
    result = runner.invoke(cli, ["train", "fit", "--device", "fake", "--out", str(out), *args])
    assert result.exit_code == 2
    assert message in result.stderr and "Usage: " in result.stderr
    assert not out.exists()


def test_a_run_that_fails_during_setup_leaves_no_folder(
    cli: AnnealGroup, runner: CliRunner, test_plugins: Plugins, tmp_path: Path
) -> None:
    test_plugins.models["fit"].defaults["explode"] = True  # build() raises
    out = tmp_path / "deep" / "run"
    result = runner.invoke(cli, ["train", "fit", "--device", "fake", "--out", str(out)])
    assert one_error_line(result) == "anneal: error: ValueError: bad config (ANNEAL_DEBUG=1 shows the traceback)"
    assert not out.exists()


def test_nan_keeps_the_folder_with_the_steps_that_ran(
    cli: AnnealGroup, runner: CliRunner, test_plugins: Plugins, tmp_path: Path
) -> None:
    test_plugins.models["fit"].defaults["nan_at"] = 3
    out = tmp_path / "run"
    result = runner.invoke(cli, ["train", "fit", "--device", "fake", "--out", str(out)])
    assert one_error_line(result) == "anneal: error: loss is nan at step 3; training stopped"
    assert (out / "loss.csv").read_text() == "step,loss\n1,0.5\n2,0.25\n"
    assert json.loads((out / "config.json").read_text())["model"] == "fit"


def test_dynmlp_any_batch_without_recompiling(cli: AnnealGroup, runner: CliRunner) -> None:
    """`anneal train dynmlp --batch 7` and `--batch 300`: every step after the jit capture, whatever its size,
    runs on kernels compiled before it; the second run (same process) compiles nothing at all."""
    import re

    reports = []
    for batch in ("7", "300"):
        result = runner.invoke(cli, ["train", "dynmlp", "--preset", "tiny", "--device", "cpu", "--plain",
                                     "--steps", "30", "--batch", batch])  # fmt: skip
        assert result.exit_code == 0, result.output
        found = re.search(r"(\d+) batch sizes in \[(\d+), (\d+)\].* (\d+) kernels compiled until the jit capture "
                          r"\(step 2\) and (\d+) after it", result.stdout)  # fmt: skip
        assert found, result.stdout
        reports.append([int(g) for g in found.groups()])
    (sizes7, lo7, hi7, until7, after7), (sizes300, lo300, hi300, until300, after300) = reports
    assert hi7 <= 7 and lo300 >= 150 and sizes300 > 10
    assert after7 == 0  # (until7 counts only what this process had not compiled before)
    assert until300 == 0 and after300 == 0

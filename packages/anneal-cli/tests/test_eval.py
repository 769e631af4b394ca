"""Classifiers through the CLI: `anneal train resnet9|vit` (--dataset, summary.json, --resume) and `anneal eval`.

The real resnet9 on the pinned digits (a private offline cache), tiny preset, on the CPU backend.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from anneal_cli.main import AnnealGroup, build_cli

R9 = ["train", "resnet9", "--preset", "tiny", "--device", "cpu", "--plain"]


def ok(result: Result) -> Result:
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One epoch of resnet9 tiny on digits, in a run folder (shared by the tests below)."""
    from anneal import registry

    out = tmp_path_factory.mktemp("r9") / "run"
    with pytest.MonkeyPatch.context() as mp:
        cache = tmp_path_factory.mktemp("cache")
        from anneal.data.testing import shared_data_dir

        (cache / "data" / "digits").mkdir(parents=True)
        (cache / "data" / "digits" / "digits.csv.gz").write_bytes(
            (shared_data_dir(__file__) / "digits" / "digits.csv.gz").read_bytes()
        )
        mp.setenv("ANNEAL_CACHE_DIR", str(cache))
        mp.setenv("ANNEAL_OFFLINE", "1")
        registry.reset()
        result = CliRunner().invoke(build_cli(), [*R9, "--steps", "30", "--out", str(out)])
        registry.reset()
    ok(result)
    assert "test accuracy" in result.output and "class  images  accuracy" in result.output
    return out


def test_training_writes_the_accuracy_report(run: Path) -> None:
    report = json.loads((run / "summary.json").read_text())
    assert report["model"] == "resnet9" and report["dataset"] == "digits" and report["steps"] == 30
    assert report["epochs"] == 1 and len(report["per_class"]) == 10
    assert [h["step"] for h in report["history"]] == [30]  # evaluated after each epoch
    assert f"test accuracy {100 * report['accuracy']:.2f}%" in (run / "summary.txt").read_text()
    config = json.loads((run / "config.json").read_text())["config"]
    assert config["steps"] == 30 and config["dataset"] == "digits" and config["batch"] == 50


def test_eval_reports_the_saved_runs_accuracy(cli: AnnealGroup, runner: CliRunner, run: Path,
                                              offline_data: None) -> None:  # fmt: skip
    text = ok(runner.invoke(cli, ["eval", "resnet9", "--checkpoint", str(run), "--device", "cpu"])).output
    report = json.loads((run / "summary.json").read_text())
    assert f"test accuracy {100 * report['accuracy']:.2f}% (297 images)" in text
    as_json = json.loads(ok(runner.invoke(cli, ["eval", "resnet9", "--checkpoint", str(run / "checkpoint.safetensors"),
                                                "--device", "cpu", "--json"])).stdout)  # fmt: skip
    assert as_json["accuracy"] == report["accuracy"] and as_json["per_class"] == report["per_class"]


def test_eval_refuses_what_does_not_fit(cli: AnnealGroup, runner: CliRunner, run: Path, offline_data: None) -> None:
    other = runner.invoke(cli, ["eval", "vit", "--checkpoint", str(run), "--device", "cpu"])
    assert other.exit_code == 1 and "is a run of model 'resnet9', not 'vit'" in other.output
    text = runner.invoke(cli, ["eval", "nanogpt", "--checkpoint", str(run)])
    assert text.exit_code == 1 and "not 'nanogpt'" in text.output
    unknown = runner.invoke(cli, ["eval", "resnet9", "--checkpoint", str(run), "--dataset", "tinyshakespeare"])
    assert unknown.exit_code == 2 and "trains on digits, cifar10, synthetic10" in unknown.output
    # synthetic10 images are 3x32x32: the digits model's stem does not take them
    shape = runner.invoke(cli, ["eval", "resnet9", "--checkpoint", str(run), "--dataset", "synthetic10",
                                "--device", "cpu"])  # fmt: skip
    assert shape.exit_code == 1 and "trained on digits, which synthetic10 does not match" in shape.output
    assert len(shape.stderr.splitlines()) == 1


def test_dataset_flag_is_checked(cli: AnnealGroup, runner: CliRunner, offline_data: None) -> None:
    wrong = runner.invoke(cli, ["train", "vit", "--dataset", "tinyshakespeare"])
    assert wrong.exit_code == 2 and "'tinyshakespeare' is not an image set for it" in wrong.output
    none = runner.invoke(cli, ["train", "mlp", "--dataset", "digits"])
    assert none.exit_code == 2 and "takes no --dataset" in none.output
    typo = runner.invoke(cli, ["train", "resnet9", "--dataset", "cifar"])
    assert typo.exit_code == 2 and "'cifar' is not one of them" in typo.output


def test_a_classifier_run_resumes(cli: AnnealGroup, runner: CliRunner, tmp_path: Path, offline_data: None) -> None:
    ok(runner.invoke(cli, [*R9, "--steps", "2", "--out", str(tmp_path / "r")]))
    ok(runner.invoke(cli, ["train", "resnet9", "--device", "cpu", "--plain", "--resume", str(tmp_path / "r"),
                           "--steps", "4"]))  # fmt: skip
    rows = (tmp_path / "r" / "loss.csv").read_text().splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == ["1", "2", "3", "4"]
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["steps"] == 4

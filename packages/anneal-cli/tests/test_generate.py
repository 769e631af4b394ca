"""The image generators through the CLI: `anneal train dit|diffusion|meanflow` (sample grids in the run
folder), `anneal sample ... --out grid.png`, `anneal score RUN`, `anneal kernels meanflow --set jvp=false`,
and the sampling arguments a model cannot take (exit 2)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from PIL import Image

from anneal_cli.main import AnnealGroup


def ok(result: Result) -> Result:
    assert result.exit_code == 0, result.output
    return result


def train(cli: AnnealGroup, runner: CliRunner, model: str, out: Path, *extra: str) -> Path:
    ok(runner.invoke(cli, ["train", model, "--preset", "tiny", "--device", "cpu", "--plain", "--out", str(out),
                           *extra]))  # fmt: skip
    return out


def test_dit_run_writes_grids_and_samples_by_seed(cli: AnnealGroup, runner: CliRunner, tmp_path: Path,
                                                  offline_data: None) -> None:  # fmt: skip
    run = train(cli, runner, "dit", tmp_path / "run", "--steps", "6", "--eval-every", "3")
    grids = sorted(p.name for p in (run / "samples").iterdir())
    assert grids == ["step_000003.png", "step_000006.png"]
    assert "step 6  loss" in (run / "summary.txt").read_text()
    args = ["sample", "dit", "--checkpoint", str(run), "--device", "cpu", "--steps", "3", "--per-row", "2"]
    first, again, other = tmp_path / "a.png", tmp_path / "b.png", tmp_path / "c.png"
    ok(runner.invoke(cli, [*args, "--seed", "1", "--out", str(first)]))
    ok(runner.invoke(cli, [*args, "--seed", "1", "--out", str(again)]))
    ok(runner.invoke(cli, [*args, "--seed", "2", "--out", str(other)]))
    assert first.read_bytes() == again.read_bytes() != other.read_bytes()
    with Image.open(first) as png:
        assert png.format == "PNG" and png.height > 10 * 8 * 4  # a row per class
    seven = tmp_path / "sub" / "seven.png"
    ok(runner.invoke(cli, [*args, "--class", "7", "--cfg", "3", "--out", str(seven)]))
    with Image.open(seven) as png:
        assert png.height < 2 * 8 * 4


def test_sampling_arguments_a_model_cannot_take_exit_2(cli: AnnealGroup, runner: CliRunner, tmp_path: Path,
                                                       offline_data: None) -> None:  # fmt: skip
    dit_run = train(cli, runner, "dit", tmp_path / "dit", "--steps", "2")
    diffusion_run = train(cli, runner, "diffusion", tmp_path / "diffusion", "--steps", "2")
    out = tmp_path / "x.png"
    cases = [
        (["dit", "--checkpoint", str(dit_run), "--class", "12"], "--class 12 is out of range: dit was trained on 10"),
        (["diffusion", "--checkpoint", str(diffusion_run), "--cfg", "2"], "classifier-free guidance (--cfg) needs"),
        (["dit", "--checkpoint", str(dit_run), "--steps", "0"], "--steps must be at least 1, got 0"),
        (["dit", "--checkpoint", str(dit_run), "--steps", "5000"], "between 1 and the model's 100 diffusion steps"),
        (["dit", "--checkpoint", str(dit_run), "--prompt", "hi"], "dit generates images: --prompt do not apply"),
    ]
    for args, message in cases:
        result = runner.invoke(cli, ["sample", *args, "--device", "cpu", "--out", str(out)])
        assert result.exit_code == 2 and message in " ".join(result.output.split()), (args, result.output)
    no_out = runner.invoke(cli, ["sample", "dit", "--checkpoint", str(dit_run), "--device", "cpu"])
    assert no_out.exit_code == 2 and "pass --out FILE.png" in no_out.output
    assert not out.exists()


def test_score_prints_the_digits_scores(cli: AnnealGroup, runner: CliRunner, tmp_path: Path,
                                        offline_data: None) -> None:  # fmt: skip
    run = train(cli, runner, "meanflow", tmp_path / "run", "--steps", "3")
    text = ok(runner.invoke(cli, ["score", str(run), "--samples", "40", "--device", "cpu"])).output
    assert "meanflow at step 3, 40 samples" in text and re.search(r"FD-resnet9-digits \d+\.\d\d", text)
    report = json.loads(ok(runner.invoke(cli, ["score", str(run), "--samples", "40", "--device", "cpu",
                                               "--json"])).output)  # fmt: skip
    assert report["samples"] == 40 and 0 <= report["accuracy"] <= 1 and sum(report["histogram"]) == pytest.approx(1)
    again = json.loads(ok(runner.invoke(cli, ["score", str(run), "--samples", "40", "--device", "cpu",
                                              "--json"])).output)  # fmt: skip
    assert again == report  # seeded


def test_score_needs_a_digits_generator(cli: AnnealGroup, runner: CliRunner, tmp_path: Path,
                                        offline_data: None) -> None:  # fmt: skip
    run = train(cli, runner, "diffusion", tmp_path / "run", "--steps", "2")
    result = runner.invoke(cli, ["score", str(run), "--device", "cpu"])
    assert result.exit_code == 2 and "trained on synthetic8" in result.output
    mlp = train(cli, runner, "mlp", tmp_path / "mlp", "--steps", "2")
    result = runner.invoke(cli, ["score", str(mlp), "--device", "cpu"])
    assert result.exit_code == 2 and "does not generate images" in result.output


def test_kernels_of_meanflow_with_and_without_the_jvp(cli: AnnealGroup, runner: CliRunner,
                                                      offline_data: None) -> None:  # fmt: skip
    def count(*extra: str) -> int:
        text = ok(runner.invoke(cli, ["kernels", "meanflow", "--preset", "tiny", "--device", "cpu", "--backward",
                                      "--no-source", *extra])).output  # fmt: skip
        found = re.search(r"(\d+) kernels on cpu", text)
        assert found, text
        return int(found.group(1))

    with_jvp, without = count(), count("--set", "jvp=false")
    assert with_jvp > without
    bad = runner.invoke(cli, ["kernels", "meanflow", "--preset", "tiny", "--device", "cpu", "--set", "jpv=false"])
    assert bad.exit_code == 2 and "has no setting 'jpv'" in bad.output

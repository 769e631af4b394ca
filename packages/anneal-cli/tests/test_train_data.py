"""Offline or behind a firewall (issue 19): `anneal train --data` and `--mirror`, what a failed download says,
and `anneal download`/`cache` showing only the assets an installed model reads."""

from __future__ import annotations

import shutil
import socket
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from anneal import data, registry
from anneal.data.testing import allow_loopback_only, shared_data_dir
from anneal_cli.main import AnnealGroup
from anneal_ir.plugins import Plugins, hookimpl, load_plugins
from anneal_ir.settings import Settings

SHARED = shared_data_dir(__file__)
TEXT = SHARED / "tinyshakespeare" / "input.txt"
NANOGPT = ["train", "nanogpt", "--preset", "tiny", "--device", "cpu", "--steps", "1", "--plain"]


@pytest.fixture(autouse=True)
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh cache with nothing in it, and no route off this machine."""
    allow_loopback_only(monkeypatch)
    monkeypatch.setenv("ANNEAL_CACHE_DIR", str(tmp_path / "cache"))
    for var in ("ANNEAL_OFFLINE", "ANNEAL_MIRROR", "ANNEAL_DEBUG"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path / "cache" / "data"


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# ------------------------------------------------------------------------------ --data


def test_data_file_trains_offline_without_the_cache(
    cli: AnnealGroup, runner: CliRunner, empty_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANNEAL_OFFLINE", "1")
    result = runner.invoke(cli, [*NANOGPT, "--data", str(TEXT)])
    assert result.exit_code == 0, result.output
    assert "step 1/1  loss " in result.stdout
    assert not empty_cache.exists()  # read where it is: nothing downloaded or copied


def test_a_wrong_data_file_says_so(cli: AnnealGroup, runner: CliRunner, tmp_path: Path) -> None:
    wrong = tmp_path / "input.txt"
    wrong.write_bytes(TEXT.read_bytes()[:-1] + b"?")
    result = runner.invoke(cli, [*NANOGPT, "--data", str(wrong)])
    assert result.exit_code == 2, result.output
    assert f"Invalid value for --data: tinyshakespeare: {wrong} is not the pinned input.txt: sha256 " in result.stderr
    assert data.ASSETS["tinyshakespeare"].sha256 in result.stderr


def test_data_a_model_cannot_take(cli: AnnealGroup, runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(cli, ["train", "mlp", "--preset", "tiny", "--device", "cpu", "--data", str(TEXT)])
    assert result.exit_code == 2
    assert "Invalid value for --data: model 'mlp' takes no --data: it reads no dataset file" in result.stderr
    result = runner.invoke(cli, [*NANOGPT, "--data", str(SHARED / "digits")])
    assert result.exit_code == 2
    assert "holds none of the files this run reads: tinyshakespeare (tinyshakespeare/input.txt)" in result.stderr
    vit = runner.invoke(cli, ["train", "vit", "--device", "cpu", "--dataset", "synthetic10", "--data", str(SHARED)])
    assert vit.exit_code == 2 and "takes no --data: its dataset 'synthetic10' is generated" in vit.stderr


# ------------------------------------------------------------------------------ failing on the network


def test_a_download_that_fails_says_where_to_put_the_file(
    cli: AnnealGroup, runner: CliRunner, empty_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANNEAL_MIRROR", closed_port_url())
    monkeypatch.setattr("anneal.data.download.RETRY_DELAY_S", 0.0)
    result = runner.invoke(cli, NANOGPT)
    assert result.exit_code == 1, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("anneal: error: tinyshakespeare: downloading "), result.stderr
    assert f"put input.txt (sha256 86c4e6aa9db7c042…) at {empty_cache / 'tinyshakespeare' / 'input.txt'}" in lines[0]
    for named in ("--data", "ANNEAL_MIRROR", "`anneal download tinyshakespeare`"):
        assert named in lines[0]
    assert "ANNEAL_DEBUG" not in lines[0]  # an expected failure, not a crash


# ------------------------------------------------------------------------------ --mirror


def test_mirror_folder_for_train(
    cli: AnnealGroup, runner: CliRunner, empty_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANNEAL_OFFLINE", "1")  # a folder is no network
    result = runner.invoke(cli, [*NANOGPT, "--mirror", SHARED.as_uri()])
    assert result.exit_code == 0, result.output
    assert (empty_cache / "tinyshakespeare" / "input.txt").read_bytes() == TEXT.read_bytes()


@pytest.mark.parametrize("form", ["file-url", "folder"])
def test_mirror_forms_for_download(cli: AnnealGroup, runner: CliRunner, empty_cache: Path, form: str) -> None:
    mirror = SHARED.as_uri() if form == "file-url" else str(SHARED)
    result = runner.invoke(cli, ["download", "gpt2-vocab", "digits", "--mirror", mirror])
    assert result.exit_code == 0, result.output
    assert (empty_cache / "digits" / "digits.csv.gz").read_bytes() == (SHARED / "digits" / "digits.csv.gz").read_bytes()


def test_bad_mirrors(cli: AnnealGroup, runner: CliRunner, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for command in (["download", "digits"], NANOGPT):
        result = runner.invoke(cli, [*command, "--mirror", "ftp://mirror.example/data"])
        assert result.exit_code == 2
        assert "Invalid value for --mirror: the mirror 'ftp://mirror.example/data' is a ftp:// URL" in result.stderr
    result = runner.invoke(cli, ["download", "digits", "--mirror", str(tmp_path / "nope")])
    assert result.exit_code == 2 and f"the mirror folder {tmp_path / 'nope'} does not exist" in result.stderr
    monkeypatch.setenv("ANNEAL_MIRROR", "ftp://mirror.example/data")
    for command in (["download", "digits"], NANOGPT):
        result = runner.invoke(cli, command)
        assert result.exit_code == 1
        assert result.stderr.startswith("anneal: error: ANNEAL_MIRROR: the mirror 'ftp://mirror.example/data' is a")


# ------------------------------------------------------------------------------ sample and score read the run's data


def test_a_run_trained_offline_with_data_samples_and_scores_offline(
    cli: AnnealGroup, runner: CliRunner, empty_cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`anneal sample` and `anneal score` take --data and --mirror as `anneal train` does; without them a missing
    file's message names the command's own --data."""
    monkeypatch.setenv("ANNEAL_OFFLINE", "1")
    run = tmp_path / "gpt"
    assert runner.invoke(cli, [*NANOGPT, "--data", str(TEXT), "--out", str(run)]).exit_code == 0
    args = ["sample", "nanogpt", "--checkpoint", str(run), "--device", "cpu", "--max-tokens", "8", "--prompt", "A"]
    missing = runner.invoke(cli, args)
    assert missing.exit_code == 1 and len(missing.stderr.splitlines()) == 1, missing.output
    assert "or pass `anneal sample --data PATH`, or set ANNEAL_MIRROR" in missing.stderr
    assert "anneal train" not in missing.stderr
    given = runner.invoke(cli, [*args, "--data", str(TEXT)])
    assert given.exit_code == 0, given.output
    assert not (empty_cache / "tinyshakespeare").exists()  # --data: read where it is, not copied
    assert runner.invoke(cli, [*args, "--mirror", str(SHARED)]).stdout == given.stdout
    wrong = runner.invoke(cli, [*args, "--data", str(SHARED / "digits")])
    assert wrong.exit_code == 2 and "Invalid value for --data" in wrong.stderr

    digits = tmp_path / "meanflow"
    trained = runner.invoke(cli, ["train", "meanflow", "--preset", "tiny", "--steps", "1", "--device", "cpu",
                                  "--plain", "--data", str(SHARED / "digits"), "--out", str(digits)])  # fmt: skip
    assert trained.exit_code == 0, trained.output
    score = ["score", str(digits), "--samples", "20", "--device", "cpu", "--json"]
    scored = runner.invoke(cli, [*score, "--data", str(SHARED / "digits")])
    assert scored.exit_code == 0 and '"samples": 20' in scored.stdout, scored.output
    assert runner.invoke(cli, score).stdout == scored.stdout  # the scorer ships its real images: no data needed
    wrong = runner.invoke(cli, [*score, "--data", str(TEXT)])
    assert wrong.exit_code == 2 and "Invalid value for --data" in wrong.stderr


# ------------------------------------------------------------------------------ only what an installed model reads


class TextOnly:
    """A plugin with one model named like a text model: only tinyshakespeare is for it."""

    @hookimpl
    def register_models(self, register: Callable[..., None]) -> None:
        register("nanogpt", build=lambda config, device: None, defaults={"steps": 1}, presets={})


def only(plugin: object, name: str) -> Plugins:
    plugins = load_plugins(Settings(load_plugins=frozenset({name})), extra=[(name, plugin)], stream=None)
    registry.reset(using=plugins)
    return plugins


def test_download_and_cache_show_what_installed_models_read(
    cli: AnnealGroup, runner: CliRunner, empty_cache: Path
) -> None:
    only(TextOnly(), "text-only")
    listed = runner.invoke(cli, ["cache"])
    assert listed.exit_code == 0, listed.output
    assert [ln.split()[0] for ln in listed.stdout.splitlines()[2:-1]] == ["tinyshakespeare"]
    refused = runner.invoke(cli, ["download", "gpt2-vocab"])
    assert refused.exit_code == 2
    assert "'gpt2-vocab' is read by no installed model (it is for gpt2); choose from: tinyshakespeare, all" in (
        refused.stderr
    )
    unknown = runner.invoke(cli, ["download", "nope"])
    assert unknown.exit_code == 2 and "unknown asset 'nope'; choose from: tinyshakespeare, all" in unknown.stderr
    result = runner.invoke(cli, ["download", "all", "--mirror", str(SHARED)])
    assert result.exit_code == 0, result.output
    assert [ln.split()[0] for ln in result.stdout.splitlines()] == ["tinyshakespeare"]
    # files of a model that is not installed can still be cleared
    shutil.copytree(SHARED / "gpt2", empty_cache / "gpt2")
    cleared = runner.invoke(cli, ["cache", "--clear", "gpt2-vocab"])
    assert cleared.exit_code == 0 and cleared.stdout == f"removed {empty_cache / 'gpt2' / 'vocab.json'}\n"


def test_no_installed_model_reads_an_asset(
    cli: AnnealGroup, runner: CliRunner, test_plugins: Plugins, empty_cache: Path
) -> None:
    listed = runner.invoke(cli, ["cache"])
    assert listed.exit_code == 0
    assert listed.stdout == "no installed model reads a pinned asset (is anneal-models installed? `anneal plugins`)\n"
    refused = runner.invoke(cli, ["download", "all"])
    assert refused.exit_code == 2 and "no installed model reads a pinned asset" in refused.stderr

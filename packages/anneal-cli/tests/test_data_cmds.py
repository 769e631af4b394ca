"""`anneal download` and `anneal cache` against a loopback HTTP server serving ../shared/data/."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from anneal import data
from anneal.data.testing import LoopbackServer, allow_loopback_only, shared_data_dir
from anneal_cli.main import AnnealGroup

SHARED = shared_data_dir(__file__)  # fails collection with a clear message when ../shared is missing
TS_BYTES = (SHARED / "tinyshakespeare" / "input.txt").read_bytes()
# Small generated stand-ins for the assets too large to serve in a test.
WEIGHTS = b"weights" + bytes(range(256)) * 4
CIFAR = bytes(range(256)) * 12


def _stand_in(name: str, content: bytes) -> data.Asset:
    real = data.ASSETS[name]
    return data.Asset(name, real.url, len(content), hashlib.sha256(content).hexdigest(), real.filename,
                      users=real.users)  # fmt: skip


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    allow_loopback_only(monkeypatch)
    monkeypatch.setitem(data.ASSETS, "gpt2-weights", _stand_in("gpt2-weights", WEIGHTS))
    monkeypatch.setitem(data.ASSETS, "cifar10", _stand_in("cifar10", CIFAR))


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    files = {data.ASSETS["gpt2-weights"].filename: WEIGHTS, data.ASSETS["cifar10"].filename: CIFAR}
    with LoopbackServer(SHARED, files=files) as srv:
        yield srv


@pytest.fixture
def cache_dir(tmp_path: Path, server: LoopbackServer, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ANNEAL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("ANNEAL_MIRROR", server.url)
    monkeypatch.delenv("ANNEAL_OFFLINE", raising=False)
    monkeypatch.delenv("ANNEAL_DEBUG", raising=False)
    return tmp_path / "data"


def test_the_commands_are_registered(cli: AnnealGroup, runner: CliRunner) -> None:
    result = runner.invoke(cli, ["--help"])
    assert result.exit_code == 0
    assert "download" in result.output and "cache" in result.output


def test_download_one_asset(cli: AnnealGroup, runner: CliRunner, cache_dir: Path, server: LoopbackServer) -> None:
    result = runner.invoke(cli, ["download", "tinyshakespeare"])
    assert result.exit_code == 0, result.output
    path = cache_dir / "tinyshakespeare" / "input.txt"
    assert path.read_bytes() == TS_BYTES
    assert result.stdout.split() == ["tinyshakespeare", "downloaded", "1.1", "MB", str(path)]
    assert "tinyshakespeare: 100%" in result.stderr  # progress lines: not a terminal
    again = runner.invoke(cli, ["download", "tinyshakespeare"])
    assert again.exit_code == 0 and again.stdout.split()[:2] == ["tinyshakespeare", "cached"]
    assert len(server.requests) == 1


def test_download_all_and_a_group(cli: AnnealGroup, runner: CliRunner, cache_dir: Path) -> None:
    result = runner.invoke(cli, ["download", "gpt2"])
    assert result.exit_code == 0, result.output
    assert [line.split()[0] for line in result.stdout.splitlines()] == ["gpt2-weights", "gpt2-vocab", "gpt2-merges"]
    result = runner.invoke(cli, ["download", "all"])
    assert result.exit_code == 0, result.output
    states = {line.split()[0]: line.split()[1] for line in result.stdout.splitlines()}
    assert states == {
        "tinyshakespeare": "downloaded",
        "gpt2-weights": "cached",
        "gpt2-vocab": "cached",
        "gpt2-merges": "cached",
        "digits": "downloaded",
        "cifar10": "downloaded",
    }
    assert (cache_dir / "cifar10" / "cifar-10-binary.tar.gz").read_bytes() == CIFAR
    assert (cache_dir / "digits" / "digits.csv.gz").read_bytes() == (SHARED / "digits" / "digits.csv.gz").read_bytes()
    assert (cache_dir / "gpt2" / "merges.txt").read_bytes() == (SHARED / "gpt2" / "merges.txt").read_bytes()


def test_download_with_the_mirror_flag(
    cli: AnnealGroup, runner: CliRunner, cache_dir: Path, server: LoopbackServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANNEAL_MIRROR", "http://127.0.0.1:9/none")
    result = runner.invoke(cli, ["download", "--mirror", server.url, "gpt2-vocab"])
    assert result.exit_code == 0, result.output


def test_unknown_asset_is_a_usage_error(cli: AnnealGroup, runner: CliRunner, cache_dir: Path) -> None:
    result = runner.invoke(cli, ["download", "tinyshakespeare", "imagenet"])
    assert result.exit_code == 2
    assert "unknown asset 'imagenet'; choose from: tinyshakespeare, gpt2-weights, gpt2-vocab" in result.stderr
    assert "gpt2, all" in result.stderr
    assert not (cache_dir / "tinyshakespeare").exists()  # nothing downloaded before the check
    assert runner.invoke(cli, ["download"]).exit_code == 2
    assert runner.invoke(cli, ["cache", "--clear", "imagenet"]).exit_code == 2


def test_offline_download_fails_in_one_line(
    cli: AnnealGroup, runner: CliRunner, cache_dir: Path, server: LoopbackServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANNEAL_OFFLINE", "1")
    result = runner.invoke(cli, ["download", "tinyshakespeare"])
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("anneal: error: tinyshakespeare: input.txt is not in the cache")
    assert str(cache_dir / "tinyshakespeare" / "input.txt") in lines[0]
    assert "`anneal download tinyshakespeare`" in lines[0]
    assert server.requests == []


def test_a_bad_download_fails_in_one_line(
    cli: AnnealGroup, runner: CliRunner, cache_dir: Path, server: LoopbackServer
) -> None:
    server.files["tinyshakespeare/input.txt"] = TS_BYTES[:-10] + b"0123456789"
    result = runner.invoke(cli, ["download", "tinyshakespeare"])
    assert result.exit_code == 1
    error = [line for line in result.stderr.splitlines() if line.startswith("anneal: error:")]
    assert len(error) == 1 and "sha256 mismatch" in error[0] and "deleted the partial download" in error[0]
    assert "Traceback" not in result.output
    assert list((cache_dir / "tinyshakespeare").iterdir()) == [cache_dir / "tinyshakespeare" / "input.txt.lock"]


def _states(output: str) -> dict[str, str]:
    return {line.split()[0]: line.split()[1] for line in output.splitlines()[2:] if line and not line.startswith("`")}


def test_cache_lists_states(cli: AnnealGroup, runner: CliRunner, cache_dir: Path) -> None:
    result = runner.invoke(cli, ["cache"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == f"cache: {cache_dir} (from ANNEAL_CACHE_DIR)"
    assert result.stdout.splitlines()[1].split() == ["ASSET", "STATE", "SIZE", "PATH"]
    assert set(_states(result.stdout).values()) == {"missing"}
    assert runner.invoke(cli, ["download", "tinyshakespeare", "gpt2-vocab", "gpt2-merges"]).exit_code == 0
    (cache_dir / "gpt2" / "merges.txt").write_bytes(b"truncated")  # wrong size: corrupt even without --verify
    vocab = cache_dir / "gpt2" / "vocab.json"
    vocab.write_bytes(vocab.read_bytes()[:-1] + b"!")  # right size, wrong content: only --verify sees it
    (cache_dir / "cifar10").mkdir()
    (cache_dir / "cifar10" / "cifar-10-binary.tar.gz.part").write_bytes(CIFAR[:1000])
    result = runner.invoke(cli, ["cache"])
    assert result.exit_code == 0, result.output
    assert _states(result.stdout) == {
        "tinyshakespeare": "ok",
        "gpt2-weights": "missing",
        "gpt2-vocab": "ok",
        "gpt2-merges": "corrupt",
        "digits": "missing",
        "cifar10": "partial",
    }
    assert "1.0 kB of 3.1 kB" in result.stdout and "(9 bytes, expected 456,318)" in result.stdout
    verified = runner.invoke(cli, ["cache", "--verify"])
    assert verified.exit_code == 1
    assert _states(verified.stdout)["gpt2-vocab"] == "corrupt"
    assert verified.stderr.strip() == (
        "anneal: error: corrupt in the cache: gpt2-vocab, gpt2-merges; `anneal download <asset>` downloads them again"
    )
    report = json.loads(runner.invoke(cli, ["cache", "--json"]).stdout)
    ts = next(e for e in report["assets"] if e["name"] == "tinyshakespeare")
    assert ts["state"] == "ok" and ts["size"] == ts["expected_size"] == 1_115_394 and not ts["verified"]
    # download fetches the corrupt ones again, then everything verifies
    assert runner.invoke(cli, ["download", "all"]).exit_code == 0
    final = runner.invoke(cli, ["cache", "--verify"])
    assert final.exit_code == 0 and set(_states(final.stdout).values()) == {"ok"}


def test_cache_clear(cli: AnnealGroup, runner: CliRunner, cache_dir: Path) -> None:
    assert runner.invoke(cli, ["download", "tinyshakespeare", "gpt2"]).exit_code == 0
    result = runner.invoke(cli, ["cache", "--clear", "tinyshakespeare"])
    assert result.exit_code == 0 and result.stdout == f"removed {cache_dir / 'tinyshakespeare' / 'input.txt'}\n"
    states = _states(runner.invoke(cli, ["cache"]).stdout)
    assert states["tinyshakespeare"] == "missing" and states["gpt2-vocab"] == "ok"
    result = runner.invoke(cli, ["cache", "--clear"])
    assert result.exit_code == 0 and len(result.stdout.splitlines()) == 3
    assert set(_states(runner.invoke(cli, ["cache"]).stdout).values()) == {"missing"}
    result = runner.invoke(cli, ["cache", "--clear"])
    assert result.exit_code == 0 and result.stdout == f"nothing to remove in {cache_dir}\n"

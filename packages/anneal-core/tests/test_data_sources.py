"""anneal.data, issue 19: libraries instead of hand-written parts, and data without the network.

urllib3's Retry (through a requests HTTPAdapter), filelock and rich's sizes, checked against the
loopback server; then the sources other than the pinned URL: a mirror folder or file:/// URL, the
user's own files (`anneal train --data`), and what a failed download says to do without a network.
"""

from __future__ import annotations

import hashlib
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from anneal import data
from anneal.data import cache as data_cache
from anneal.data import download as data_download
from anneal.data.testing import LoopbackServer, allow_loopback_only, shared_data_dir
from anneal_ir.settings import Settings

SHARED = shared_data_dir(__file__)
TS = data.ASSETS["tinyshakespeare"]
TS_BYTES = (SHARED / TS.filename).read_bytes()


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    allow_loopback_only(monkeypatch)
    monkeypatch.setattr(data_download, "RETRY_DELAY_S", 0.0)


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer(SHARED) as srv:
        yield srv


@pytest.fixture
def cache(tmp_path: Path) -> Settings:
    return Settings(cache_dir=str(tmp_path / "cache"))


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # nothing listens there once the socket is closed


# ------------------------------------------------------------------------------ libraries


def test_sizes_are_richs_decimal_units() -> None:
    from rich.filesize import decimal

    for n in (0, 1, 999, 57_523, 1_115_394, 548_105_171, 170_052_171):
        assert data.human_size(n) == decimal(n)
    assert data.human_size(500) == "500 bytes" and data.human_size(1_115_394) == "1.1 MB"


def test_5xx_answers_are_retried_by_urllib3(cache: Settings, server: LoopbackServer) -> None:
    server.errors = [503, 502]  # a hand-written loop gave up on the first answer that was not 200/206
    path = data.fetch("tinyshakespeare", settings=cache, base_url=server.url, progress=False)
    assert path.read_bytes() == TS_BYTES
    assert [r.status for r in server.requests] == [503, 502, 200]


def test_the_session_mounts_urllib3_retry() -> None:
    from urllib3.util.retry import Retry

    with data_download._session() as session:
        for prefix in ("http://", "https://"):
            retry = session.get_adapter(prefix + "example.invalid").max_retries
            assert isinstance(retry, Retry)
            assert (retry.connect, retry.read, retry.status) == (data_download.RETRIES,) * 3
            assert 503 in retry.status_forcelist and retry.respect_retry_after_header


def test_the_lock_is_filelocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import filelock

    made: list[str] = []

    class Recording(filelock.FileLock):  # type: ignore[misc, valid-type]
        def __init__(self, path: str | Path, *args: object, **kwargs: object) -> None:
            made.append(str(path))
            super().__init__(path, *args, **kwargs)

    monkeypatch.setattr(filelock, "FileLock", Recording)
    lock = tmp_path / "x.lock"
    with data_cache.file_lock(lock):
        # a second lock on the same file, in the same process, is refused: filelock's per-instance lock
        with pytest.raises(data.CacheBusyError, match="busy!"):
            with data_cache.file_lock(lock, wait=False, busy_message="busy!"):
                pass
    assert made == [str(lock), str(lock)]
    with data_cache.file_lock(lock, wait=False):  # released: free again
        pass


# ------------------------------------------------------------------------------ failing on the network


def test_a_network_failure_says_what_to_do_without_the_network(cache: Settings) -> None:
    with pytest.raises(data.DownloadError) as info:
        data.fetch("tinyshakespeare", settings=cache, base_url=closed_port_url(), progress=False)
    message = str(info.value)
    assert "\n" not in message
    assert f"failed {data_download.RETRIES + 1} times, the last: NewConnectionError:" in message
    assert "Connection refused" in message and "object at 0x" not in message
    assert f"put input.txt (sha256 {TS.sha256[:16]}…) at {data.asset_path(TS, cache)}" in message
    for named in ("--data", "ANNEAL_MIRROR", "`anneal download tinyshakespeare`"):
        assert named in message


def test_an_http_error_says_it_too(cache: Settings, server: LoopbackServer) -> None:
    server.status = 403  # a firewall's answer
    with pytest.raises(data.DownloadError, match=r"HTTP 403 Forbidden from http://.*--data.*ANNEAL_MIRROR"):
        data.fetch("tinyshakespeare", settings=cache, base_url=server.url, progress=False)


def test_offline_names_data_and_the_mirror(cache: Settings) -> None:
    offline = Settings(cache_dir=cache.cache_dir, offline=True)
    with pytest.raises(data.OfflineError, match=r"`anneal train --data PATH`.*ANNEAL_MIRROR"):
        data.fetch("tinyshakespeare", settings=offline)


# ------------------------------------------------------------------------------ mirrors


@pytest.mark.parametrize("form", ["folder", "file-url"])
def test_a_mirror_folder_is_copied_from_even_offline(cache: Settings, form: str) -> None:
    mirror = str(SHARED) if form == "folder" else SHARED.as_uri()
    assert mirror.startswith("file:///") or form == "folder"
    offline = Settings(cache_dir=cache.cache_dir, offline=True, mirror=mirror)
    path = data.fetch("tinyshakespeare", settings=offline, progress=False)
    assert path == data.asset_path(TS, cache) and path.read_bytes() == TS_BYTES
    assert not data_cache.part_path(path).exists()


def test_a_mirror_folder_holding_the_file_itself(cache: Settings) -> None:
    path = data.fetch("gpt2-vocab", settings=cache, base_url=str(SHARED / "gpt2"), progress=False)
    assert path.read_bytes() == (SHARED / "gpt2" / "vocab.json").read_bytes()


def test_a_mirror_folder_with_a_wrong_or_no_file(cache: Settings, tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    (mirror / "tinyshakespeare").mkdir(parents=True)
    (mirror / "tinyshakespeare" / "input.txt").write_bytes(TS_BYTES[:-1] + b"?")
    with pytest.raises(data.IntegrityError, match=r"sha256 mismatch: .*mirror/tinyshakespeare/input.txt gave"):
        data.fetch("tinyshakespeare", settings=cache, base_url=str(mirror), progress=False)
    assert not data.asset_path(TS, cache).exists()
    with pytest.raises(data.DownloadError, match=r"the mirror folder .*mirror has no digits/digits.csv.gz"):
        data.fetch("digits", settings=cache, base_url=str(mirror), progress=False)


def test_mirror_forms(tmp_path: Path) -> None:
    assert data.mirror_source("https://h.example/m") == "https://h.example/m"
    assert data.mirror_source(tmp_path.as_uri()) == tmp_path
    assert data.mirror_source(str(tmp_path)) == tmp_path
    for bad, why in (("ftp://h/x", "is a ftp:// URL"), ("file://host/x", "names a host"),
                     ("http:///x", "has no host"), (str(tmp_path / "nope"), "does not exist")):  # fmt: skip
        with pytest.raises(data.MirrorError, match=why):
            data.mirror_source(bad)


def test_sources_mirror_applies_to_fetch(cache: Settings, server: LoopbackServer) -> None:
    with data.sources(mirror=server.url):
        assert data.fetch("gpt2-merges", settings=cache, progress=False).is_file()
    assert len(server.requests) == 1


# ------------------------------------------------------------------------------ the user's own files


def test_given_files_are_verified_and_used_in_place(cache: Settings, tmp_path: Path) -> None:
    mine = tmp_path / "shakespeare.txt"
    mine.write_bytes(TS_BYTES)
    with data.sources(files={"tinyshakespeare": mine}):
        assert data.fetch("tinyshakespeare", settings=Settings(cache_dir=cache.cache_dir, offline=True)) == mine
    assert not data.asset_path(TS, cache).exists()  # never copied into the cache
    mine.write_bytes(TS_BYTES[:-1] + b"?")
    with data.sources(files={"tinyshakespeare": mine}):
        with pytest.raises(data.IntegrityError, match=r"shakespeare.txt \(given with --data\) is not the pinned"):
            data.fetch("tinyshakespeare", settings=cache)
    with pytest.raises(data.OfflineError):  # outside the block the cache is used again
        data.fetch("tinyshakespeare", settings=Settings(cache_dir=cache.cache_dir, offline=True))


def test_local_files_of_a_file_and_of_folders(tmp_path: Path) -> None:
    text = [data.ASSETS["tinyshakespeare"]]
    gpt2 = data.needed_by("gpt2")
    assert [a.name for a in gpt2] == ["tinyshakespeare", "gpt2-weights", "gpt2-vocab", "gpt2-merges"]
    assert data.local_files(SHARED / TS.filename, text) == {"tinyshakespeare": SHARED / TS.filename}
    assert data.local_files(SHARED, gpt2) == {  # a folder laid out like the cache: what it has
        "tinyshakespeare": SHARED / TS.filename,
        "gpt2-vocab": SHARED / "gpt2" / "vocab.json",
        "gpt2-merges": SHARED / "gpt2" / "merges.txt",
    }
    assert data.local_files(SHARED / "gpt2", gpt2) == {  # a folder of the files themselves
        "gpt2-vocab": SHARED / "gpt2" / "vocab.json",
        "gpt2-merges": SHARED / "gpt2" / "merges.txt",
    }
    assert data.local_files(SHARED / "gpt2" / "merges.txt", gpt2) == {"gpt2-merges": SHARED / "gpt2" / "merges.txt"}
    wrong = tmp_path / "input.txt"
    wrong.write_text("not shakespeare")
    with pytest.raises(data.IntegrityError, match=r"input.txt is not the pinned input.txt: 15 bytes, expected"):
        data.local_files(wrong, text)
    with pytest.raises(data.DataError, match=r"holds none of the files this run reads: tinyshakespeare"):
        data.local_files(SHARED / "digits", text)
    other = tmp_path / "notes.md"
    other.write_text("x")
    with pytest.raises(data.DataError, match=r"notes.md is none of the files this run reads"):
        data.local_files(other, gpt2)


def test_which_assets_matter() -> None:
    assert [a.name for a in data.needed_by("vit", "digits")] == ["digits"]
    assert data.needed_by("vit", "synthetic10") == [] and data.needed_by("mlp") == []
    assert [a.name for a in data.used(["nanogpt"])] == ["tinyshakespeare"]
    assert [a.name for a in data.used(["gpt2", "digits"])] == ["tinyshakespeare", "gpt2-weights", "gpt2-vocab",
                                                              "gpt2-merges", "digits"]  # fmt: skip
    assert data.used([]) == []
    assert all(a.users for a in data.ASSETS.values())  # every pinned file is read by something
    assert hashlib.sha256(TS_BYTES).hexdigest() == TS.sha256

"""anneal.data: the real download code against a loopback HTTP server (127.0.0.1 only).

The server serves ../shared/data/ (byte-identical copies of the pinned tinyshakespeare and
GPT-2 vocab/merges), corrupted and truncated variants of them, and small generated files
standing in for assets too large to serve (GPT-2 weights, CIFAR-10).
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from anneal import data
from anneal.data import cache as data_cache
from anneal.data import download as data_download
from anneal.data.testing import LoopbackServer, Served, allow_loopback_only, shared_data_dir
from anneal_ir.settings import Settings

SHARED = shared_data_dir(__file__)  # fails collection with a clear message when ../shared is missing
TS = data.ASSETS["tinyshakespeare"]
TS_URL = "/" + TS.filename
TS_BYTES = (SHARED / "tinyshakespeare" / "input.txt").read_bytes()
FAKE_BYTES = bytes(range(256)) * 800  # 204,800 bytes
FAKE = data.Asset("fake", "https://example.invalid/fake.bin", len(FAKE_BYTES), "", "fake/fake.bin", "generated")
FAKE = data.Asset(FAKE.name, FAKE.url, FAKE.size, hashlib.sha256(FAKE_BYTES).hexdigest(), FAKE.filename)


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy, and any connection to a host other than 127.0.0.1 fails the test."""
    allow_loopback_only(monkeypatch)
    monkeypatch.setattr(data_download, "RETRY_DELAY_S", 0.0)
    monkeypatch.setitem(data.ASSETS, "fake", FAKE)


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer(SHARED, files={FAKE.filename: FAKE_BYTES}) as srv:
        yield srv


@pytest.fixture
def settings(tmp_path: Path, server: LoopbackServer) -> Settings:
    return Settings(cache_dir=str(tmp_path / "cache"), mirror=server.url)


def part_of(path: Path) -> Path:
    return path.with_name(path.name + ".part")


# ------------------------------------------------------------------------------ the table


def test_the_shared_copies_are_the_pinned_files() -> None:
    for asset in (data.ASSETS[n] for n in ("tinyshakespeare", "gpt2-vocab", "gpt2-merges", "digits")):
        content = (SHARED / asset.filename).read_bytes()
        assert len(content) == asset.size
        assert hashlib.sha256(content).hexdigest() == asset.sha256


def test_the_table_matches_product_md() -> None:
    product = (SHARED.parent / "PRODUCT.md").read_text()
    rows = re.findall(r"^\| ([^|]+?) \| ([^|]+?) \| ([\d,]+) \| ([0-9a-f]{64}) \|$", product, re.M)
    assert len(rows) == 6
    by_name = {"tinyshakespeare": "tinyshakespeare", "gpt2 weights": "gpt2-weights", "gpt2 vocab": "gpt2-vocab"}
    by_name |= {"gpt2 merges": "gpt2-merges", "digits": "digits", "CIFAR-10 (binary)": "cifar10"}
    for label, url, size, sha in rows:
        asset = data.ASSETS[by_name[label]]
        assert (asset.size, asset.sha256) == (int(size.replace(",", "")), sha)
        if url.startswith("https://"):
            assert asset.url == url
        else:  # "…/<commit>/vocab.json (same repo)"
            assert asset.url.startswith("https://huggingface.co/openai-community/gpt2/resolve/")
            assert asset.url.endswith(url.removesuffix(" (same repo)").lstrip("…"))
    assert all(a.url.startswith("https://") for n, a in data.ASSETS.items() if n != "fake")


def test_names_groups_and_unknown() -> None:
    assert [a.name for a in data.resolve(["gpt2"])] == ["gpt2-weights", "gpt2-vocab", "gpt2-merges"]
    assert len(data.resolve(["all"])) == len(data.ASSETS)
    assert [a.name for a in data.resolve(["gpt2-vocab", "tinyshakespeare", "gpt2-vocab"])] == [
        "tinyshakespeare",
        "gpt2-vocab",
    ]
    with pytest.raises(data.UnknownAssetError, match="unknown asset 'nope'; known assets: tinyshakespeare"):
        data.fetch("nope", settings=Settings(offline=True))
    assert data.source_url(TS) == TS.url
    assert data.source_url(TS, "http://h/m/") == "http://h/m/tinyshakespeare/input.txt"


def test_cache_location(tmp_path: Path) -> None:
    assert data.cache_root(Settings(cache_dir=str(tmp_path))) == (tmp_path, "ANNEAL_CACHE_DIR")
    from_env = Settings.from_env({"XDG_CACHE_HOME": str(tmp_path), "ANNEAL_CACHE_DIR": ""})
    assert data.cache_root(from_env) == (tmp_path / "anneal", "XDG_CACHE_HOME")
    assert data.cache_root(Settings(xdg_cache_home="relative/ignored")) == (
        Path.home() / ".cache" / "anneal",
        "default",
    )
    assert data.cache_root(Settings.from_env({})) == (Path.home() / ".cache" / "anneal", "default")
    both = Settings.from_env({"XDG_CACHE_HOME": "/x", "ANNEAL_CACHE_DIR": str(tmp_path)})
    assert data.asset_path("tinyshakespeare", both) == tmp_path / "data" / "tinyshakespeare" / "input.txt"
    assert Settings.from_env({"ANNEAL_MIRROR": "http://m"}).mirror == "http://m"


# ------------------------------------------------------------------------------ downloads


def test_fresh_download_then_cache_hit(settings: Settings, server: LoopbackServer) -> None:
    path = data.fetch("tinyshakespeare", settings=settings, progress=False)
    assert path == data.asset_path("tinyshakespeare", settings)
    assert path.read_bytes() == TS_BYTES
    assert server.gets(TS_URL) == [Served(TS_URL, None, 200, TS.size)]
    assert not part_of(path).exists()
    assert data.fetch("tinyshakespeare", settings=settings, progress=False) == path
    assert len(server.requests) == 1  # the second call never touched the network


def test_mirror_from_the_environment(tmp_path: Path, server: LoopbackServer) -> None:
    env = {"ANNEAL_CACHE_DIR": str(tmp_path), "ANNEAL_MIRROR": server.url + "/"}
    path = data.fetch("gpt2-merges", settings=Settings.from_env(env), progress=False)
    assert path == tmp_path / "data" / "gpt2" / "merges.txt"
    assert path.read_bytes() == (SHARED / "gpt2" / "merges.txt").read_bytes()


def test_base_url_overrides_the_mirror_setting(tmp_path: Path, server: LoopbackServer) -> None:
    dead = Settings(cache_dir=str(tmp_path), mirror="http://127.0.0.1:9/nothing")
    path = data.fetch("gpt2-vocab", settings=dead, base_url=server.url, progress=False)
    assert path.read_bytes() == (SHARED / "gpt2" / "vocab.json").read_bytes()


def test_resume_from_a_partial_download(
    settings: Settings, server: LoopbackServer, capsys: pytest.CaptureFixture
) -> None:
    path = data.asset_path("tinyshakespeare", settings)
    path.parent.mkdir(parents=True)
    part_of(path).write_bytes(TS_BYTES[:400_000])
    assert data.status("tinyshakespeare", settings).state == "partial"
    assert data.fetch("tinyshakespeare", settings=settings) == path
    assert path.read_bytes() == TS_BYTES
    assert server.gets(TS_URL) == [Served(TS_URL, "bytes=400000-", 206, TS.size - 400_000)]
    assert "resuming input.txt.part at 35% (400,000 bytes)" in capsys.readouterr().err


def test_a_server_that_ignores_range_restarts_the_download(
    settings: Settings, server: LoopbackServer, capsys: pytest.CaptureFixture
) -> None:
    server.honour_range = False
    path = data.asset_path("tinyshakespeare", settings)
    path.parent.mkdir(parents=True)
    part_of(path).write_bytes(TS_BYTES[:400_000])
    data.fetch("tinyshakespeare", settings=settings)
    assert path.read_bytes() == TS_BYTES
    assert server.gets(TS_URL) == [Served(TS_URL, "bytes=400000-", 200, TS.size)]
    assert "the server ignored the Range request; restarting from byte 0" in capsys.readouterr().err


def test_a_dropped_connection_is_resumed(settings: Settings, server: LoopbackServer) -> None:
    # whole 64 KiB chunks, so that what reached the part is exactly what the server sent
    server.drops, server.drop_after = 2, 4 * 65536
    path = data.fetch("tinyshakespeare", settings=settings, progress=False)
    assert path.read_bytes() == TS_BYTES
    assert [(r.range, r.status, r.sent) for r in server.gets(TS_URL)] == [
        (None, 200, 262_144),
        ("bytes=262144-", 206, 262_144),
        ("bytes=524288-", 206, TS.size - 524_288),
    ]


def test_a_connection_that_keeps_failing_keeps_the_part(settings: Settings, server: LoopbackServer) -> None:
    server.drops, server.drop_after = 100, 65536
    with pytest.raises(
        data.DownloadError,
        match=r"failed 4 times, the last: ChunkedEncodingError: .*input.txt.part \(262,144 bytes\) is kept and resumes",
    ):
        data.fetch("tinyshakespeare", settings=settings, progress=False)
    assert len(server.requests) == data_download.RETRIES + 1
    server.drops = 0
    assert data.fetch("tinyshakespeare", settings=settings, progress=False).read_bytes() == TS_BYTES
    assert server.requests[-1].range == "bytes=262144-"


def test_a_complete_part_is_verified_without_a_request(settings: Settings, server: LoopbackServer) -> None:
    path = data.asset_path("tinyshakespeare", settings)
    path.parent.mkdir(parents=True)
    part_of(path).write_bytes(TS_BYTES)
    assert data.fetch("tinyshakespeare", settings=settings, progress=False).read_bytes() == TS_BYTES
    assert server.requests == []


@pytest.mark.parametrize(
    ("variant", "message"),
    [
        (TS_BYTES[:1000] + b"X" + TS_BYTES[1001:], "sha256 mismatch: .* gave [0-9a-f]{64}, expected 86c4e6aa"),
        (TS_BYTES[:-1000], "size mismatch: .* gave 1,114,394 bytes, expected 1,115,394"),
        (TS_BYTES + b"more", "size mismatch: the server sent more than the expected 1,115,394 bytes"),
    ],
    ids=["sha", "short", "long"],
)
def test_a_mismatch_deletes_the_part_and_says_so(
    settings: Settings, server: LoopbackServer, variant: bytes, message: str
) -> None:
    server.files[TS.filename] = variant
    path = data.asset_path("tinyshakespeare", settings)
    with pytest.raises(data.IntegrityError, match=message) as info:
        data.fetch("tinyshakespeare", settings=settings, progress=False)
    assert f"deleted the partial download {part_of(path)}" in str(info.value)
    assert not path.exists() and not part_of(path).exists()


def test_a_corrupt_partial_is_caught_after_resuming(settings: Settings, server: LoopbackServer) -> None:
    path = data.asset_path("tinyshakespeare", settings)
    path.parent.mkdir(parents=True)
    part_of(path).write_bytes(b"#" * 400_000)  # right length for a prefix, wrong bytes
    with pytest.raises(data.IntegrityError, match="sha256 mismatch"):
        data.fetch("tinyshakespeare", settings=settings, progress=False)
    assert server.requests[0].range == "bytes=400000-" and not part_of(path).exists()
    assert data.fetch("tinyshakespeare", settings=settings, progress=False).read_bytes() == TS_BYTES


def test_a_part_the_server_cannot_resume_starts_over(
    settings: Settings, server: LoopbackServer, capsys: pytest.CaptureFixture
) -> None:
    server.files[FAKE.filename] = FAKE_BYTES[:1000]  # the server has a shorter (truncated) file
    path = data.asset_path("fake", settings)
    path.parent.mkdir(parents=True)
    part_of(path).write_bytes(FAKE_BYTES[:5000])
    with pytest.raises(data.IntegrityError, match="size mismatch: .* gave 1,000 bytes, expected 204,800"):
        data.fetch("fake", settings=settings)
    assert [(r.range, r.status) for r in server.requests] == [("bytes=5000-", 416), (None, 200)]
    assert "refused to resume at byte 5,000 (HTTP 416); starting over" in capsys.readouterr().err


def test_a_part_longer_than_the_asset_is_discarded(settings: Settings, server: LoopbackServer) -> None:
    path = data.asset_path("fake", settings)
    path.parent.mkdir(parents=True)
    part_of(path).write_bytes(FAKE_BYTES + b"junk")
    assert data.fetch("fake", settings=settings, progress=False).read_bytes() == FAKE_BYTES
    assert [r.range for r in server.requests] == [None]


def test_http_errors(settings: Settings, server: LoopbackServer) -> None:
    server.status = 503
    with pytest.raises(data.DownloadError, match=r"fake: HTTP 503 Service Unavailable from http://127\.0\.0\.1:\d+/"):
        data.fetch("fake", settings=settings, progress=False)
    server.status = None
    del server.files[FAKE.filename]
    with pytest.raises(data.DownloadError, match="HTTP 404"):
        data.fetch("fake", settings=settings, progress=False)


def test_a_corrupted_cache_file_is_fetched_again(
    settings: Settings, server: LoopbackServer, capsys: pytest.CaptureFixture
) -> None:
    path = data.fetch("tinyshakespeare", settings=settings, progress=False)
    path.write_bytes(TS_BYTES[:-1] + b"?")  # same size, wrong content
    assert data.status("tinyshakespeare", settings).state == "ok"  # sizes alone cannot tell
    assert data.status("tinyshakespeare", settings, verify=True).state == "corrupt"
    assert data.fetch("tinyshakespeare", settings=settings).read_bytes() == TS_BYTES
    assert f"the cached file {path} is corrupt (sha256 " in capsys.readouterr().err
    path.write_bytes(b"short")
    assert data.status("tinyshakespeare", settings).state == "corrupt"
    assert data.fetch("tinyshakespeare", settings=settings).read_bytes() == TS_BYTES
    assert "is corrupt (5 bytes, expected 1,115,394)" in capsys.readouterr().err
    assert len(server.requests) == 3


# ------------------------------------------------------------------------------ offline


def test_offline_without_the_file_names_it_and_the_fix(tmp_path: Path, server: LoopbackServer) -> None:
    s = Settings.from_env({"ANNEAL_OFFLINE": "1", "ANNEAL_CACHE_DIR": str(tmp_path), "ANNEAL_MIRROR": server.url})
    path = tmp_path / "data" / "tinyshakespeare" / "input.txt"
    with pytest.raises(data.OfflineError) as info:
        data.fetch("tinyshakespeare", settings=s)
    message = str(info.value)
    assert "input.txt is not in the cache" in message
    assert f"expected at {path}" in message
    assert "`anneal download tinyshakespeare`" in message and "ANNEAL_OFFLINE" in message
    assert server.requests == [] and not path.parent.exists()


def test_offline_with_the_file_and_with_a_corrupt_one(settings: Settings, server: LoopbackServer) -> None:
    path = data.fetch("tinyshakespeare", settings=settings, progress=False)
    offline = Settings(cache_dir=settings.cache_dir, offline=True, mirror=server.url)
    assert data.fetch("tinyshakespeare", settings=offline) == path
    path.write_bytes(TS_BYTES[:-1] + b"?")
    with pytest.raises(data.OfflineError, match=r"input.txt is corrupt \(sha256 .*`anneal download tinyshakespeare`"):
        data.fetch("tinyshakespeare", settings=offline)
    part_of(path).write_bytes(b"x")
    path.unlink()
    with pytest.raises(data.OfflineError, match=r"not in the cache \(a partial download is there\)"):
        data.fetch("tinyshakespeare", settings=offline)
    assert len(server.requests) == 1


# ------------------------------------------------------------------------------ concurrency


def _wait_for(cond: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_concurrent_fetches_in_threads_are_serialized(settings: Settings, server: LoopbackServer) -> None:
    server.delay_s = 0.02  # 4 chunks of 64 KiB: the first download takes ~0.1 s
    path = data.asset_path("fake", settings)
    outs = [io.StringIO(), io.StringIO()]
    results: list[Path] = []

    def run(i: int) -> None:
        results.append(data.fetch("fake", settings=settings, progress=outs[i]))

    first = threading.Thread(target=run, args=(0,))
    first.start()
    _wait_for(lambda: part_of(path).exists())  # the first holds the lock and is downloading
    second = threading.Thread(target=run, args=(1,))
    second.start()
    first.join(10)
    second.join(10)
    assert results == [path, path] and path.read_bytes() == FAKE_BYTES
    assert len(server.requests) == 1
    assert "waiting for another download to finish" in outs[1].getvalue()
    assert "downloading" not in outs[1].getvalue()


def test_concurrent_fetches_in_processes_are_serialized(tmp_path: Path, server: LoopbackServer) -> None:
    """Two processes: both block on the lock this test holds; released, one downloads, the other waits."""
    server.delay_s = 0.03
    env = {**os.environ, "ANNEAL_CACHE_DIR": str(tmp_path), "ANNEAL_MIRROR": server.url, "NO_PROXY": "127.0.0.1"}
    code = (
        "from anneal import data; "
        f"data.ASSETS['fake'] = data.Asset('fake', 'x', {FAKE.size}, {FAKE.sha256!r}, {FAKE.filename!r}); "
        "print(data.fetch('fake'))"
    )
    path = tmp_path / "data" / "fake" / "fake.bin"
    errs: list[list[str]] = [[], []]
    waiting = [threading.Event(), threading.Event()]

    def read(i: int, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            errs[i].append(line)
            if "waiting for another download to finish" in line:
                waiting[i].set()

    with data_cache.file_lock(data_cache.lock_path(path)):
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            for _ in range(2)
        ]
        readers = [threading.Thread(target=read, args=(i, p)) for i, p in enumerate(procs)]
        for r in readers:
            r.start()
        for event in waiting:
            assert event.wait(60), errs
        assert server.requests == []
    outs = [p.stdout.read() if p.stdout else "" for p in procs]
    for p in procs:
        p.wait(60)
    for r in readers:
        r.join(10)
    assert [p.returncode for p in procs] == [0, 0], errs
    assert [out.strip() for out in outs] == [str(path), str(path)]
    assert path.read_bytes() == FAKE_BYTES
    assert len(server.requests) == 1
    assert sum("downloading 204.8 kB" in "".join(e) for e in errs) == 1


# ------------------------------------------------------------------------------ progress


def test_progress_lines_when_not_a_tty(settings: Settings, capsys: pytest.CaptureFixture) -> None:
    data.fetch("tinyshakespeare", settings=settings)
    err = capsys.readouterr().err
    assert "\r" not in err
    percents = [int(p) for p in re.findall(r"^tinyshakespeare: +(\d+)%  ", err, re.M)]
    assert 8 <= len(percents) <= 10 and percents == sorted(percents) and percents[-1] == 100
    assert all(b // 10 > a // 10 for a, b in zip(percents, percents[1:]))  # one line per 10% step at most
    assert err.splitlines()[0].startswith("tinyshakespeare: downloading 1.1 MB from http://127.0.0.1:")
    assert err.splitlines()[-1].endswith(f"sha256 verified: {data.asset_path('tinyshakespeare', settings)}")


class FakeTTY(io.StringIO):
    encoding = "utf-8"

    def isatty(self) -> bool:
        return True


def test_a_bar_on_a_tty(settings: Settings, server: LoopbackServer, monkeypatch: pytest.MonkeyPatch) -> None:
    from anneal.data import progress

    monkeypatch.setattr(progress, "REDRAW_S", 0.0)
    out = FakeTTY()
    data.fetch("fake", settings=settings, progress=out)
    text = out.getvalue()
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)  # rich's colours and cursor codes
    # rich.progress: its bar, percentage, DownloadColumn (rich's decimal sizes) and speed, redrawn in place
    assert "\r\x1b[2K" in text and "━" * 10 in plain
    assert re.search(r"fake ━+ +100% 204\.8/204\.8 kB [\d.]+ [kMG]?B/s", plain), plain
    assert re.search(r"fake ━+ +0% 0\.0/204\.8 kB", plain), plain  # drawn before the first byte arrives
    assert "%" not in text.split("\n")[0]  # the first line is the note, the bar starts after it
    assert text.endswith(f"sha256 verified: {data.asset_path('fake', settings)}\n")


def test_quiet(settings: Settings, capsys: pytest.CaptureFixture) -> None:
    data.fetch("fake", settings=settings, progress=False)
    assert capsys.readouterr() == ("", "")


# ------------------------------------------------------------------------------ cache state


def test_status_and_clear(settings: Settings, server: LoopbackServer) -> None:
    assert data.status("fake", settings).state == "missing"
    path = data.fetch("fake", settings=settings, progress=False)
    st = data.status("fake", settings, verify=True)
    assert (st.state, st.size, st.verified, st.path) == ("ok", FAKE.size, True, path)
    part_of(path).write_bytes(b"123")
    assert data.clear("fake", settings) == [path, part_of(path)]
    assert data.status("fake", settings).state == "missing"
    assert data.clear("fake", settings) == []
    part_of(path).write_bytes(b"123")
    st = data.status("fake", settings)
    assert (st.state, st.size, st.path) == ("partial", 3, part_of(path))


def test_clear_refuses_while_a_download_holds_the_lock(settings: Settings) -> None:
    path = data.asset_path("fake", settings)
    path.parent.mkdir(parents=True)
    part_of(path).write_bytes(b"123")
    with data_cache.file_lock(data_cache.lock_path(path)):
        with pytest.raises(data.CacheBusyError, match="fake is being downloaded by another process"):
            data.clear("fake", settings)
    assert part_of(path).exists()

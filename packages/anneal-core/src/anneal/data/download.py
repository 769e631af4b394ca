"""`fetch(name)`: the verified local file of a pinned asset, downloading it when needed.

The download streams to `<file>.part` while hashing, resumes an existing part with a Range
request (a server that answers 200 instead of 206 restarts it), checks size and sha256, and
moves the part into place atomically (`anneal.files.commit`); a mismatch deletes the part and
says so. Connecting, and answers 429/5xx, are retried by urllib3's `Retry` (with backoff,
honouring Retry-After) through a requests `HTTPAdapter`; a body cut off mid-stream (which
`Retry` cannot see: it is read after the response returned) is resumed here with a Range
request. A lock file (`<file>.lock`, the `filelock` package) serializes concurrent runs: the
second waits, then finds the file. `ANNEAL_OFFLINE=1` never touches the network.

Sources other than the pinned URL: a mirror (`ANNEAL_MIRROR`, `base_url`, `sources(mirror=)`)
is an http(s) URL, a `file:///` URL or a plain folder, laid out like the cache (a folder is
copied from, also offline); `sources(files=)` names files the user already has (`anneal train
--data`): they are verified and used where they are, never copied.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlparse
from urllib.request import url2pathname

from anneal.data.assets import Asset, get_asset, source_url
from anneal.data.cache import (
    asset_path,
    check_file,
    file_lock,
    human_size,
    lock_path,
    part_path,
    remember_hash,
)
from anneal.data.errors import DataError, DownloadError, IntegrityError, MirrorError, OfflineError
from anneal.data.progress import Reporter
from anneal.files import commit
from anneal_ir.settings import Settings

CHUNK = 1 << 16
RETRIES = 3  # urllib3 retries of a connection or a 429/5xx answer; also resumptions of a body cut off mid-stream
RETRY_DELAY_S = 0.5  # urllib3's backoff factor: 0.5 s, 1 s, 2 s between tries
RETRY_STATUS = (429, 500, 502, 503, 504)
TIMEOUT_S = 30.0  # connect and per-read timeout

# What this process was told besides the settings (anneal train --data / --mirror): see `sources`.
_files: dict[str, Path] = {}
_mirror: list[str] = []


@contextlib.contextmanager
def sources(*, files: Mapping[str, Path] | None = None, mirror: str | None = None) -> Iterator[None]:
    """For the block, `fetch(name)` returns `files[name]` (the user's own copy, verified, used in place) and
    downloads other assets from `mirror` (over ANNEAL_MIRROR; `fetch(base_url=)` still wins)."""
    saved_files, saved_mirror = dict(_files), list(_mirror)
    _files.update(files or {})
    if mirror:
        _mirror[:] = [mirror]
    try:
        yield
    finally:
        _files.clear()
        _files.update(saved_files)
        _mirror[:] = saved_mirror


def mirror_source(mirror: str) -> str | Path:
    """What a mirror setting names: an http(s) base URL (returned as given) or a local folder (a Path), from
    `http(s)://...`, `file:///...` or a folder path. `MirrorError` for anything else, or a folder that is not there."""
    parsed = urlparse(mirror)
    if parsed.scheme in ("http", "https"):
        if not parsed.netloc:
            raise MirrorError(
                f"the mirror {mirror!r} has no host; give http(s)://HOST/PATH, file:///FOLDER or a folder"
            )
        return mirror
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise MirrorError(f"the mirror {mirror!r} names a host; a file URL is file:///FOLDER (three slashes)")
        folder = Path(url2pathname(parsed.path))
    elif len(parsed.scheme) <= 1:  # a plain path (a one-letter "scheme" is a Windows drive)
        folder = Path(mirror).expanduser()
    else:
        raise MirrorError(
            f"the mirror {mirror!r} is a {parsed.scheme}:// URL; give http(s)://HOST/PATH, file:///FOLDER or a folder"
        )
    if not folder.is_dir():
        raise MirrorError(f"the mirror folder {folder} does not exist (or is not a folder)")
    return folder


def fetch(
    name: str,
    *,
    settings: Settings | None = None,
    progress: bool | TextIO | None = None,
    base_url: str | None = None,
) -> Path:
    """The local path of pinned asset `name` (e.g. "tinyshakespeare"), verified by sha256.

    Downloads it into the cache when it is missing or corrupt. `settings` defaults to
    `Settings.from_env()` (cache folder, `ANNEAL_OFFLINE`, `ANNEAL_MIRROR`). `progress`: None
    or True reports on stderr (a bar on a terminal, a line every 10% otherwise), a stream
    reports there, False is silent. `base_url` downloads `<base_url>/<asset.filename>`
    instead of the pinned URL (a mirror laid out like the cache: http(s)://, file:/// or a
    folder; overrides ANNEAL_MIRROR). Raises `OfflineError`, `IntegrityError`, `DownloadError`,
    `MirrorError` (all `DataError`s).
    """
    asset = get_asset(name)
    given = _files.get(name)
    if given is not None:
        return verify_file(asset, given, "given with --data")
    s = Settings.from_env() if settings is None else settings
    path = asset_path(asset, s)
    state, why = check_file(path, asset)
    if state == "ok":
        return path
    mirror = base_url or (_mirror[0] if _mirror else None) or s.mirror
    where = mirror_source(mirror) if mirror else None
    if s.offline and not isinstance(where, Path):  # a mirror folder is no network: offline may copy from it
        raise _offline_error(asset, path, state, why)
    stream = sys.stderr if progress is None or progress is True else (None if progress is False else progress)
    report = Reporter(stream, asset.name)
    with file_lock(
        lock_path(path), on_busy=lambda: report.note(f"waiting for another download to finish ({lock_path(path)})")
    ):
        state, why = check_file(path, asset)  # another process may have fetched it meanwhile
        if state == "ok":
            return path
        if state == "corrupt":
            report.note(f"the cached file {path} is corrupt ({why}); downloading it again")
            path.unlink()
        try:
            if isinstance(where, Path):
                _copy(asset, where, part_path(path), report)
            else:
                _download(asset, source_url(asset, where), part_path(path), path, report)
        finally:
            report.finish()  # a bar left on the terminal ends its line before any error
        commit(part_path(path), path)
        remember_hash(path, asset.sha256)
    report.note(f"{human_size(asset.size)}, sha256 verified: {path}")
    return path


def verify_file(asset: Asset, path: Path, how: str = "") -> Path:
    """`path` when it is the pinned file of `asset` (size and sha256), else `IntegrityError` saying what it is."""
    state, why = check_file(path, asset)
    if state == "missing":
        raise IntegrityError(f"{asset.name}: {path}{f' ({how})' if how else ''} does not exist")
    if state != "ok":
        raise IntegrityError(
            f"{asset.name}: {path}{f' ({how})' if how else ''} is not the pinned {Path(asset.filename).name}: {why} "
            f"(sha256 {asset.sha256}, {asset.size:,} bytes)"
        )
    return path


def local_files(path: Path, assets: Sequence[Asset]) -> dict[str, Path]:
    """Which of `assets` (the files a model reads) the user's `path` holds, each verified: {asset name: file}.

    A file is the one asset it can be: the only one, else the one of its file name, else of its size. A folder
    holds an asset at its place in the cache's layout (`tinyshakespeare/input.txt`) or under its file name
    (`input.txt`). A file that is not the pinned one is an `IntegrityError`; a path that holds none of them is a
    `DataError` naming what was looked for."""
    wanted = ", ".join(f"{a.name} ({a.filename})" for a in assets)
    if path.is_dir():
        found: dict[str, Path] = {}
        for asset in assets:
            for candidate in (path.joinpath(*asset.filename.split("/")), path / Path(asset.filename).name):
                if candidate.is_file():
                    found[asset.name] = verify_file(asset, candidate)
                    break
        if not found:
            raise DataError(f"the folder {path} holds none of the files this run reads: {wanted}")
        return found
    if len(assets) == 1:
        asset = assets[0]
    else:
        by_name = [a for a in assets if Path(a.filename).name == path.name]
        by_size = [a for a in assets if a.size == path.stat().st_size]
        match = by_name or by_size
        if not match:
            raise DataError(f"{path} is none of the files this run reads ({wanted}); pass the file of one, "
                            "or a folder holding them")  # fmt: skip
        asset = match[0]
    return {asset.name: verify_file(asset, path)}


def without_network(asset: Asset, path: Path) -> str:
    """The ways to provide `asset` without reaching its URL: where the file goes, --data, ANNEAL_MIRROR, download."""
    return (
        f"without network access, put {Path(asset.filename).name} (sha256 {asset.sha256[:16]}…) at {path}, "
        f"or pass `anneal train --data PATH` (the file, or a folder holding it), or set ANNEAL_MIRROR to a folder "
        f"or URL laid out like the cache, or run `anneal download {asset.name}` where the network is reachable"
    )


def _offline_error(asset: Asset, path: Path, state: str, why: str) -> OfflineError:
    fix = (
        f"run `anneal download {asset.name}` where the network is reachable (without ANNEAL_OFFLINE), or pass "
        f"`anneal train --data PATH`, or set ANNEAL_MIRROR to a folder laid out like the cache"
    )
    if state == "corrupt":
        return OfflineError(
            f"{asset.name}: the cached file {path} is corrupt ({why}) and ANNEAL_OFFLINE=1 forbids downloading "
            f"it again; {fix}"
        )
    partial = " (a partial download is there)" if part_path(path).exists() else ""
    return OfflineError(
        f"{asset.name}: {Path(asset.filename).name} is not in the cache{partial} and ANNEAL_OFFLINE=1 forbids "
        f"downloading it; expected at {path}; {fix}"
    )


def _hash_part(part: Path) -> tuple[hashlib._Hash, int]:
    digest = hashlib.sha256()
    size = 0
    with open(part, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return digest, size


def _range_start(response: Any) -> int | None:
    match = re.match(r"bytes (\d+)-", response.headers.get("Content-Range", ""))
    return int(match.group(1)) if match else None


def _session() -> Any:
    """A requests Session whose connections retry through urllib3's `Retry`: connection errors, read timeouts
    and 429/5xx answers, with exponential backoff (RETRY_DELAY_S, 2x, 4x) and Retry-After honoured."""
    import requests  # type: ignore[import-untyped, unused-ignore]
    from requests.adapters import HTTPAdapter  # type: ignore[import-untyped, unused-ignore]
    from urllib3.util.retry import Retry

    retry = Retry(
        total=None,  # each kind counts on its own: redirects (a CDN's) must not use up the retries
        connect=RETRIES,
        read=RETRIES,
        status=RETRIES,
        other=RETRIES,
        redirect=10,
        allowed_methods=frozenset({"GET"}),
        status_forcelist=RETRY_STATUS,
        backoff_factor=RETRY_DELAY_S,
        raise_on_status=False,  # the last answer comes back, and is reported with its status below
        respect_retry_after_header=True,
    )
    session = requests.Session()
    adapter = HTTPAdapter(max_retries=retry)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def _download(asset: Asset, url: str, part: Path, path: Path, report: Reporter) -> None:
    """Stream `url` into `part` (resuming it) and verify size and sha256; leaves a good part."""
    import requests  # type: ignore[import-untyped, unused-ignore]

    cut_off = 0  # bodies that broke off mid-stream; each resumes where the part ends
    with _session() as session:
        while True:
            digest, have = _hash_part(part) if part.exists() else (hashlib.sha256(), 0)
            if have > asset.size:
                report.note(f"discarding {part}: {have:,} bytes, more than the expected {asset.size:,}")
                part.unlink()
                continue
            if have == asset.size:
                break  # complete part from an interrupted run: only verification is left
            # identity: resuming a compressed representation by byte offset would corrupt it
            headers = {"Accept-Encoding": "identity"}
            if have:
                headers["Range"] = f"bytes={have}-"
            kept = f"; the partial file {part} ({have:,} bytes) is kept and resumes next time" if have else ""
            try:
                response = session.get(url, headers=headers, stream=True, timeout=TIMEOUT_S)
            except (requests.ConnectionError, requests.Timeout) as exc:  # urllib3 has retried it already
                raise DownloadError(
                    f"{asset.name}: downloading {url} failed {RETRIES + 1} times, the last: {_reason(exc)}{kept}; "
                    + without_network(asset, path)
                ) from exc
            try:
                with response:
                    if have and response.status_code == 416:  # the part is not a prefix the server knows
                        report.note(f"the server refused to resume at byte {have:,} (HTTP 416); starting over")
                        part.unlink()
                        continue
                    if response.status_code not in (200, 206):
                        raise DownloadError(
                            f"{asset.name}: HTTP {response.status_code} {response.reason} from {url}"
                            + (f"; the partial file {part} is kept" if have else "")
                            + f"; {without_network(asset, path)}"
                        )
                    start = 0 if response.status_code == 200 else _range_start(response)
                    if have and start == 0:
                        report.note(f"the server ignored the Range request; restarting from byte 0 ({url})")
                        digest, have = hashlib.sha256(), 0
                    elif start != have:
                        raise DownloadError(
                            f"{asset.name}: the server sent bytes from {start} when asked for {have} ({url})"
                        )
                    elif have:
                        report.note(f"resuming {part.name} at {have * 100 // asset.size}% ({have:,} bytes)")
                    else:
                        report.note(f"downloading {human_size(asset.size)} from {url}")
                    report.start(asset.size, have)
                    have = _stream(response.iter_content(CHUNK), part, "ab" if have else "wb", digest, have,
                                   asset, report, "the server")  # fmt: skip
            except (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError) as exc:
                cut_off += 1
                report.finish()
                if cut_off > RETRIES:
                    have = part.stat().st_size if part.exists() else 0
                    kept = f"; the partial file {part} ({have:,} bytes) is kept and resumes next time" if have else ""
                    raise DownloadError(
                        f"{asset.name}: downloading {url} failed {cut_off} times, the last: {_reason(exc)}{kept}; "
                        + without_network(asset, path)
                    ) from exc
                report.note(f"{_reason(exc)}; resuming ({cut_off}/{RETRIES})")
                time.sleep(RETRY_DELAY_S * cut_off)
                continue
            report.finish()
            break
    _verify(asset, url, part, digest)


def _copy(asset: Asset, folder: Path, part: Path, report: Reporter) -> None:
    """Copy `asset` from a mirror folder (laid out like the cache, or holding the file itself) into `part`."""
    candidates = [folder.joinpath(*asset.filename.split("/")), folder / Path(asset.filename).name]
    source = next((c for c in candidates if c.is_file()), None)
    if source is None:
        raise DownloadError(
            f"{asset.name}: the mirror folder {folder} has no {asset.filename} (looked for "
            f"{' and '.join(str(c) for c in dict.fromkeys(candidates))})"
        )
    report.note(f"copying {human_size(asset.size)} from {source}")
    report.start(asset.size)
    digest = hashlib.sha256()
    with open(source, "rb") as f:
        _stream(iter(lambda: f.read(1 << 20), b""), part, "wb", digest, 0, asset, report, str(source))
    report.finish()
    _verify(asset, str(source), part, digest)


def _verify(asset: Asset, source: str, part: Path, digest: Any) -> None:
    """The part's size and sha256 against the table; a mismatch deletes it and says so."""
    size = part.stat().st_size
    if size != asset.size:
        part.unlink()
        raise IntegrityError(
            f"{asset.name}: size mismatch: {source} gave {size:,} bytes, expected {asset.size:,}; "
            f"deleted the partial download {part}"
        )
    got = digest.hexdigest()
    if got != asset.sha256:
        part.unlink()
        raise IntegrityError(
            f"{asset.name}: sha256 mismatch: {source} gave {got}, expected {asset.sha256}; "
            f"deleted the partial download {part}"
        )


def _reason(exc: BaseException) -> str:
    """The innermost cause of a requests error, in one short line (not urllib3's whole MaxRetryError)."""
    cause: BaseException = exc
    inner = getattr(exc.args[0], "reason", None) if exc.args else None  # requests wraps urllib3's MaxRetryError
    if isinstance(inner, BaseException):
        cause = inner
    text = re.sub(r"<[\w.]+ object at 0x[0-9a-f]+>:? ?", "", " ".join(str(cause).split()))
    return f"{type(cause).__name__}: {text[:160]}{'…' if len(text) > 160 else ''}"


def _stream(
    chunks: Iterator[bytes] | Any,
    part: Path,
    mode: str,
    digest: Any,
    have: int,
    asset: Asset,
    report: Reporter,
    sender: str,
) -> int:
    """Append `chunks` to `part`, hashing; stop with IntegrityError as soon as it is too long."""
    with open(part, mode) as f:
        for chunk in chunks:
            if have + len(chunk) > asset.size:
                f.close()
                part.unlink()
                raise IntegrityError(
                    f"{asset.name}: size mismatch: {sender} sent more than the expected {asset.size:,} bytes; "
                    f"deleted the partial download {part}"
                )
            f.write(chunk)
            digest.update(chunk)
            have += len(chunk)
            report.update(have)
        f.flush()  # fsynced by anneal.files.commit when it moves the part into place
    return have

"""`fetch(name)`: the verified local file of a pinned asset, downloading it when needed.

The download streams to `<file>.part` while hashing, resumes an existing part with a Range
request (a server that answers 200 instead of 206 restarts it), checks size and sha256, and
moves the part into place with `os.replace`; a mismatch deletes the part and says so. A lock
file (`<file>.lock`, flock) serializes concurrent runs: the second waits, then finds the file.
`ANNEAL_OFFLINE=1` never touches the network.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, TextIO

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
from anneal.data.errors import DownloadError, IntegrityError, OfflineError
from anneal.data.progress import Reporter
from anneal_ir.settings import Settings

CHUNK = 1 << 16
RETRIES = 3  # reconnections after a dropped connection; each resumes where the part ends
RETRY_DELAY_S = 0.5
TIMEOUT_S = 30.0  # connect and per-read timeout


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
    instead of the pinned URL (a mirror laid out like the cache; overrides ANNEAL_MIRROR).
    Raises `OfflineError`, `IntegrityError`, `DownloadError` (all `DataError`s).
    """
    s = Settings.from_env() if settings is None else settings
    asset = get_asset(name)
    path = asset_path(asset, s)
    state, why = check_file(path, asset)
    if state == "ok":
        return path
    if s.offline:
        raise _offline_error(asset, path, state, why)
    stream = sys.stderr if progress is None or progress is True else (None if progress is False else progress)
    report = Reporter(stream, asset.name)
    url = source_url(asset, base_url or s.mirror)
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
            _download(asset, url, part_path(path), report)
        finally:
            report.finish()  # a bar left on the terminal ends its line before any error
        os.replace(part_path(path), path)
        remember_hash(path, asset.sha256)
    report.note(f"{human_size(asset.size)}, sha256 verified: {path}")
    return path


def _offline_error(asset: Asset, path: Path, state: str, why: str) -> OfflineError:
    fix = f"run `anneal download {asset.name}` where the network is reachable (without ANNEAL_OFFLINE)"
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


def _download(asset: Asset, url: str, part: Path, report: Reporter) -> None:
    """Stream `url` into `part` (resuming it) and verify size and sha256; leaves a good part."""
    import requests  # type: ignore[import-untyped, unused-ignore]

    failures = 0
    with requests.Session() as session:
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
            try:
                with session.get(url, headers=headers, stream=True, timeout=TIMEOUT_S) as response:
                    if have and response.status_code == 416:  # the part is not a prefix the server knows
                        report.note(f"the server refused to resume at byte {have:,} (HTTP 416); starting over")
                        part.unlink()
                        continue
                    if response.status_code not in (200, 206):
                        raise DownloadError(
                            f"{asset.name}: HTTP {response.status_code} {response.reason} from {url}"
                            + (f"; the partial file {part} is kept" if have else "")
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
                    have = _stream(response, part, "ab" if have else "wb", digest, have, asset, report)
            except (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError) as exc:
                failures += 1
                report.finish()
                if failures > RETRIES:
                    have = part.stat().st_size if part.exists() else 0
                    kept = f"; the partial file {part} ({have:,} bytes) is kept and resumes next time" if have else ""
                    raise DownloadError(
                        f"{asset.name}: downloading {url} failed {failures} times, the last: {_reason(exc)}{kept}"
                    ) from exc
                report.note(f"{_reason(exc)}; retrying ({failures}/{RETRIES})")
                time.sleep(RETRY_DELAY_S * failures)
                continue
            report.finish()
            break
    size = part.stat().st_size
    if size != asset.size:
        part.unlink()
        raise IntegrityError(
            f"{asset.name}: size mismatch: {url} gave {size:,} bytes, expected {asset.size:,}; "
            f"deleted the partial download {part}"
        )
    got = digest.hexdigest()
    if got != asset.sha256:
        part.unlink()
        raise IntegrityError(
            f"{asset.name}: sha256 mismatch: {url} gave {got}, expected {asset.sha256}; "
            f"deleted the partial download {part}"
        )


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:160]}{'…' if len(text) > 160 else ''}"


def _stream(
    response: Any, part: Path, mode: str, digest: hashlib._Hash, have: int, asset: Asset, report: Reporter
) -> int:
    """Append the body to `part`, hashing; stop with IntegrityError as soon as it is too long."""
    with open(part, mode) as f:
        for chunk in response.iter_content(CHUNK):
            if have + len(chunk) > asset.size:
                f.close()
                part.unlink()
                raise IntegrityError(
                    f"{asset.name}: size mismatch: the server sent more than the expected {asset.size:,} bytes; "
                    f"deleted the partial download {part}"
                )
            f.write(chunk)
            digest.update(chunk)
            have += len(chunk)
            report.update(have)
        f.flush()
        os.fsync(f.fileno())
    return have

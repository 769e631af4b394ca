"""The data cache on disk: where files live, their state, hashing, locking, clearing.

Location: `ANNEAL_CACHE_DIR`, else `$XDG_CACHE_HOME/anneal`, else `~/.cache/anneal` (all read
through `anneal_ir.settings.Settings`); pinned files live in its `data/` folder, at each
asset's `filename`, beside `<file>.part` (a download in progress) and `<file>.lock`.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from anneal.data.assets import Asset, get_asset
from anneal.data.errors import CacheBusyError
from anneal_ir.settings import Settings

HASH_CHUNK = 1 << 20


def cache_root(settings: Settings | None = None) -> tuple[Path, str]:
    """The anneal cache folder and which setting chose it (`ANNEAL_CACHE_DIR`, `XDG_CACHE_HOME`, `default`)."""
    return (Settings.from_env() if settings is None else settings).cache_root()


def data_dir(settings: Settings | None = None) -> Path:
    """The folder that holds the pinned files (`<cache>/data`)."""
    return cache_root(settings)[0] / "data"


def _asset(asset: Asset | str) -> Asset:
    return get_asset(asset) if isinstance(asset, str) else asset


def asset_path(asset: Asset | str, settings: Settings | None = None) -> Path:
    """Where the verified file of `asset` lives (whether or not it is there yet)."""
    return data_dir(settings).joinpath(*_asset(asset).filename.split("/"))


def part_path(path: Path) -> Path:
    return path.with_name(path.name + ".part")


def lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


# ---------------------------------------------------------------------------- hashing

# Files already hashed in this process, keyed by what a rewrite would change: a file is
# rehashed once per process (about 1 GB/s), not on every fetch.
_verified: dict[tuple[str, int, int, int, int], str] = {}
_verified_guard = threading.Lock()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _stat_key(path: Path) -> tuple[str, int, int, int, int]:
    st = path.stat()
    return (str(path), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def file_sha256(path: Path) -> str:
    """sha256 of `path`, remembered for this process until the file changes."""
    key = _stat_key(path)
    with _verified_guard:
        known = _verified.get(key)
    if known is None:
        known = sha256_file(path)
        with _verified_guard:
            _verified[key] = known
    return known


def remember_hash(path: Path, sha256: str) -> None:
    """Record a hash computed while writing `path` (the download hashed it as it streamed)."""
    with _verified_guard:
        _verified[_stat_key(path)] = sha256


def check_file(path: Path, asset: Asset, *, rehash: bool = True) -> tuple[str, str]:
    """(`ok`|`missing`|`corrupt`, why) for the cached file; `rehash=False` compares sizes only."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return "missing", "not downloaded"
    if size != asset.size:
        return "corrupt", f"{size:,} bytes, expected {asset.size:,}"
    if rehash:
        got = file_sha256(path)
        if got != asset.sha256:
            return "corrupt", f"sha256 {got[:12]}…, expected {asset.sha256[:12]}…"
    return "ok", ""


# ---------------------------------------------------------------------------- locking


@contextmanager
def file_lock(
    path: Path, *, wait: bool = True, on_busy: Callable[[], None] | None = None, busy_message: str = ""
) -> Iterator[None]:
    """Hold an exclusive lock on `path` (created if needed) for the block, through `filelock`.

    Each call opens its own lock (flock on Unix, msvcrt on Windows), so two threads of one process exclude each
    other as well as two processes do. When another holder has it: `on_busy()` is called and the lock awaited,
    or with `wait=False`, `CacheBusyError(busy_message)` is raised.
    """
    import filelock  # here, not at the top: it takes 0.1 s to import and most commands never lock

    path.parent.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(path, mode=0o644)
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        if not wait:
            raise CacheBusyError(busy_message or f"{path} is locked by another process") from None
        if on_busy is not None:
            on_busy()
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


# ---------------------------------------------------------------------------- state


@dataclass(frozen=True)
class AssetStatus:
    """What the cache holds for one asset."""

    asset: Asset
    path: Path
    state: str  # ok | missing | partial | corrupt
    size: int  # bytes on disk (the .part's size when partial)
    detail: str  # why corrupt, or how far a partial download got
    verified: bool  # True when the sha256 was checked (else `ok` means the size matches)


def status(asset: Asset | str, settings: Settings | None = None, *, verify: bool = False) -> AssetStatus:
    """The state of `asset` in the cache; `verify=True` rehashes the file (sha256)."""
    a = _asset(asset)
    path = asset_path(a, settings)
    state, why = check_file(path, a, rehash=verify)
    if state == "missing":
        part = part_path(path)
        if part.exists():
            have = part.stat().st_size
            return AssetStatus(a, part, "partial", have, f"{have:,} of {a.size:,} bytes; resumes", False)
        return AssetStatus(a, path, "missing", 0, why, False)
    return AssetStatus(a, path, state, path.stat().st_size, why, verify)


def clear(asset: Asset | str, settings: Settings | None = None) -> list[Path]:
    """Delete the cached file of `asset` and any partial download; returns what was removed.

    Raises `CacheBusyError` when a download of it is running in another process. The lock
    file itself stays (deleting it could let two processes lock different files).
    """
    a = _asset(asset)
    path = asset_path(a, settings)
    removed: list[Path] = []
    if not path.exists() and not part_path(path).exists():
        return removed
    busy = f"{a.name} is being downloaded by another process ({lock_path(path)} is locked); try again later"
    with file_lock(lock_path(path), wait=False, busy_message=busy):
        for p in (path, part_path(path)):
            try:
                p.unlink()
                removed.append(p)
            except FileNotFoundError:
                pass
    return removed


def human_size(n: float) -> str:
    """Bytes in decimal units, as rich shows them: 456.3 kB, 1.1 MB, 548.1 MB (rich.filesize.decimal)."""
    from rich.filesize import decimal

    return decimal(int(n), precision=1)

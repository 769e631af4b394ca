"""Atomic writes: the one helper behind every file and folder anneal writes in place of another.

A file is written to a temporary name in the target's own folder (a rename across filesystems
is a copy, not atomic), flushed and fsynced, renamed over the target with `os.replace`, and
the folder is fsynced so the rename itself survives a crash. On any error, KeyboardInterrupt
included, the temporary file is removed and the old target is left as it was: a reader sees
the old content or the new, never half of it.

    from anneal.files import atomic_write, atomic_open, atomic_folder, commit
    atomic_write(path, data)                  # bytes
    with atomic_open(path) as f: f.write(...)  # streamed
    with atomic_folder(path) as tmp: ...       # fill tmp; it becomes path
    commit(part, path)                         # a temporary file of the caller's (a download's .part)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = ["atomic_folder", "atomic_open", "atomic_write", "commit", "fsync_dir"]

DEFAULT_MODE = 0o644  # what open() gives under the usual umask; mkstemp's 0600 would hide a checkpoint


def fsync_dir(folder: str | os.PathLike[str]) -> None:
    """Persist a folder's entries (a rename or a new file in it); a no-op where folders cannot be fsynced."""
    with contextlib.suppress(OSError):  # Windows and some network filesystems refuse to open or fsync a folder
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _fsync_file(path: str | os.PathLike[str]) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def commit(tmp: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
    """Move the finished temporary file `tmp` (in `target`'s folder) over `target`: fsync it, `os.replace`,
    fsync the folder. `tmp` is the caller's to clean up if this raises (a download keeps its part to resume)."""
    _fsync_file(tmp)
    os.replace(tmp, target)
    fsync_dir(os.path.dirname(os.path.abspath(target)))


def _mode_for(target: str) -> int:
    try:
        return os.stat(target).st_mode & 0o777  # replacing a file keeps its permissions
    except FileNotFoundError:
        return DEFAULT_MODE


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """A binary file to write; when the block ends without an error it replaces `path` atomically, otherwise it
    is deleted and `path` is untouched."""
    target = os.path.abspath(os.fspath(path))
    folder = os.path.dirname(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())  # the data is on disk before the rename makes it visible
        os.chmod(tmp, _mode_for(target))
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(folder)


def atomic_write(path: str | os.PathLike[str], data: bytes) -> None:
    """Write `data` to `path` atomically (a temporary file in the same folder, fsync, rename, folder fsync)."""
    with atomic_open(path) as f:
        f.write(data)


@contextlib.contextmanager
def atomic_folder(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary folder beside `path` to fill; when the block ends without an error its files are fsynced and it
    is renamed to `path` (an existing folder there is replaced), otherwise it is removed and `path` is untouched."""
    target = Path(os.path.abspath(os.fspath(path)))
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    old: Path | None = None
    try:
        yield tmp
        for entry in tmp.rglob("*"):
            if entry.is_file():
                _fsync_file(entry)
        fsync_dir(tmp)
        if target.exists():  # os.replace cannot replace a folder that has files: move it aside first
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
            os.replace(target, old / target.name)
        try:
            os.replace(tmp, target)
        except BaseException:
            if old is not None:  # put the old folder back rather than leave nothing
                os.replace(old / target.name, target)
            raise
        fsync_dir(target.parent)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

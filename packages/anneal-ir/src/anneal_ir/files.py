"""Atomic writes for the packages below anneal-core: the backends' on-disk caches (compiled kernels, BEAM's
chosen opts, C libraries).

A file is written to a temporary name in the target's own folder (a rename across filesystems is a copy, not
atomic), flushed and fsynced, renamed over the target with `os.replace`, and the folder is fsynced so the rename
itself survives a crash. On any error, KeyboardInterrupt included, the temporary file is removed and the old
target is left as it was: a reader (another process sharing the cache) sees the old content or the new, never
half of it. `anneal.files` re-exports it, with atomic folders, for what anneal-core and above write (checkpoints,
downloads).

    from anneal_ir.files import atomic_write, commit
    atomic_write(path, data)   # bytes
    commit(tmp, path)          # a finished temporary file of the caller's (a compiler's output)
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from typing import BinaryIO

__all__ = ["atomic_open", "atomic_write", "commit", "fsync_dir"]

DEFAULT_MODE = 0o644  # what open() gives under the usual umask; mkstemp's 0600 would hide the file from others


def fsync_dir(folder: str | os.PathLike[str]) -> None:
    """Persist a folder's entries (a rename or a new file in it); a no-op where folders cannot be fsynced."""
    with contextlib.suppress(OSError):  # Windows and some network filesystems refuse to open or fsync a folder
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def commit(tmp: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
    """Move the finished temporary file `tmp` (in `target`'s folder) over `target`: fsync it, `os.replace`,
    fsync the folder. `tmp` is the caller's to clean up if this raises."""
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
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

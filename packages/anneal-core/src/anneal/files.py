"""Atomic writes: the one helper behind every file and folder anneal writes in place of another.

A file is written to a temporary name in the target's own folder (a rename across filesystems
is a copy, not atomic), flushed and fsynced, renamed over the target with `os.replace`, and
the folder is fsynced so the rename itself survives a crash. On any error, KeyboardInterrupt
included, the temporary file is removed and the old target is left as it was: a reader sees
the old content or the new, never half of it.

    from anneal.files import atomic_write, atomic_open, atomic_folder, commit  # all but atomic_folder: anneal_ir's
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

from anneal_ir.files import atomic_open, atomic_write, commit, fsync_dir  # one helper for every package

__all__ = ["atomic_folder", "atomic_open", "atomic_write", "commit", "fsync_dir"]


def _fsync_file(path: str | os.PathLike[str]) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


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

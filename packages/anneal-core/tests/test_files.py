"""anneal.files: the one atomic-write helper behind checkpoints, run folders, downloads and extracted folders."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from anneal import files


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_checkpoints_use_the_one_helper() -> None:
    from anneal.nn import state

    assert state.atomic_write is files.atomic_write  # anneal-cli's tests check its run folders


def test_write_fsyncs_the_file_and_its_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    target = tmp_path / "a.bin"
    files.atomic_write(target, b"new")
    assert target.read_bytes() == b"new"
    assert synced == ["file", "dir"]  # the data before the rename, the rename after it
    assert stat.S_IMODE(target.stat().st_mode) == 0o644  # not mkstemp's private 0600
    target.chmod(0o600)
    files.atomic_write(target, b"again")
    assert stat.S_IMODE(target.stat().st_mode) == 0o600  # a replaced file keeps its mode
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("error", [OSError("disk full"), KeyboardInterrupt()], ids=["error", "ctrl-c"])
def test_an_error_mid_write_keeps_the_old_file_and_removes_the_temporary(tmp_path: Path, error: BaseException) -> None:
    target = tmp_path / "checkpoint.safetensors"
    target.write_bytes(b"old")
    with pytest.raises(type(error)):
        with files.atomic_open(target) as f:
            f.write(b"half of the new")
            raise error
    assert target.read_bytes() == b"old"
    assert leftovers(tmp_path) == []


def test_a_failed_rename_removes_the_temporary(tmp_path: Path) -> None:
    target = tmp_path / "taken"
    target.mkdir()
    (target / "x").write_text("a folder cannot be replaced by a file")
    with pytest.raises(OSError):
        files.atomic_write(target, b"data")
    assert leftovers(tmp_path) == [] and (target / "x").exists()


def test_commit_moves_a_finished_part(tmp_path: Path) -> None:
    part, target = tmp_path / "f.part", tmp_path / "f"
    part.write_bytes(b"done")
    files.commit(part, target)
    assert target.read_bytes() == b"done" and not part.exists()


def test_atomic_folder(tmp_path: Path) -> None:
    target = tmp_path / "extracted"
    with files.atomic_folder(target) as tmp:
        assert tmp.parent == tmp_path and not target.exists()
        (tmp / "a.bin").write_bytes(b"1")
    assert (target / "a.bin").read_bytes() == b"1"
    with files.atomic_folder(target) as tmp:  # an existing folder is replaced whole
        (tmp / "b.bin").write_bytes(b"2")
    assert sorted(p.name for p in target.iterdir()) == ["b.bin"]
    with pytest.raises(KeyboardInterrupt):
        with files.atomic_folder(target) as tmp:
            (tmp / "c.bin").write_bytes(b"3")
            raise KeyboardInterrupt
    assert sorted(p.name for p in target.iterdir()) == ["b.bin"]  # untouched
    assert leftovers(tmp_path) == []

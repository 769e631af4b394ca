"""The backends' caches write through one atomic-write helper (anneal_ir.files): a temporary file beside the
target, fsync, rename, folder fsync, and nothing left behind on an error."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest

from anneal_ir import files

ROOT = Path(__file__).resolve().parents[1]
CACHES = [
    ROOT / "packages/anneal-wgpu/src/anneal_wgpu/kernel_cache.py",
    ROOT / "packages/anneal-wgpu/src/anneal_wgpu/beam.py",
    ROOT / "packages/anneal-cpu/src/anneal_cpu/compiler.py",
]


@pytest.mark.parametrize("source", CACHES, ids=[p.name for p in CACHES])
def test_the_caches_write_through_the_shared_helper(source: Path) -> None:
    tree = ast.parse(source.read_text())
    calls = {f"{n.func.value.id}.{n.func.attr}" for n in ast.walk(tree) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)}  # fmt: skip
    assert not calls & {"os.replace", "os.rename", "tempfile.mkstemp", "os.fdopen"}  # no hand-written rename
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "anneal_ir.files"
                for a in n.names}  # fmt: skip
    assert imported & {"atomic_write", "commit"}


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "cache.json"
    files.atomic_write(target, b"old")
    assert target.read_bytes() == b"old" and target.stat().st_mode & 0o777 == 0o644

    def fail(*args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        files.atomic_write(target, b"new")
    assert target.read_bytes() == b"old" and sorted(tmp_path.iterdir()) == [target]
    monkeypatch.undo()
    with pytest.raises(KeyboardInterrupt), files.atomic_open(target) as f:
        f.write(b"half")
        raise KeyboardInterrupt
    assert target.read_bytes() == b"old" and sorted(tmp_path.iterdir()) == [target]


def test_the_beam_cache_survives_a_failed_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from anneal_wgpu.beam import BeamCache

    path = tmp_path / "beam" / "cache.json"
    cache = BeamCache(path)
    cache.put("a", ())
    assert json.loads(path.read_text()) == {"a": {"opts": []}}

    def fail(*args: object) -> None:
        raise OSError("read-only")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="read-only"):
        cache.put("b", ())
    assert json.loads(path.read_text()) == {"a": {"opts": []}} and os.listdir(path.parent) == ["cache.json"]


def test_a_compiled_library_is_committed(tmp_path: Path) -> None:
    from anneal_cpu.compiler import Compiler, find_compiler

    command = find_compiler(None)
    if command is None:
        pytest.skip("no C compiler")
    compiler = Compiler(command, tmp_path / "cpu")
    lib = compiler.load("int answer(void) { return 42; }")
    assert lib.answer() == 42
    assert [p.suffix for p in (tmp_path / "cpu").iterdir()] == [".so"]  # the build folder is gone

"""Rendered kernels on disk, so a second process skips the lowering (its first step starts sooner).

A kernel is keyed by its content hash, its opts, f16 and the version of the code that renders it
(a hash of the lowering's and the renderer's own sources: editing either invalidates every entry).
Entries are written atomically; a damaged or foreign entry only costs a new render.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

from anneal_ir import UOp, dtypes
from anneal_ir.files import atomic_write
from anneal_schedule.opt import Opt
from anneal_schedule.store import source_version
from anneal_wgpu.render import Kernel


@functools.cache
def code_version() -> str:
    import anneal_schedule.analysis
    import anneal_schedule.decompose
    import anneal_schedule.lower
    import anneal_schedule.opt
    import anneal_wgpu.render

    return source_version(anneal_schedule.analysis, anneal_schedule.opt, anneal_schedule.lower,
                          anneal_schedule.decompose, anneal_wgpu.render)  # fmt: skip


class KernelCache:
    def __init__(self, folder: Path):
        self.folder = folder

    def _path(self, ast: UOp, opts: tuple[Opt, ...], f16: bool) -> Path:
        key = hashlib.sha256(f"{code_version()}|{ast.key.hex()}|{opts!r}|{f16}".encode()).hexdigest()
        return self.folder / f"{key}.json"

    def get(self, ast: UOp, opts: tuple[Opt, ...], f16: bool) -> Kernel | None:
        try:
            d = json.loads(self._path(ast, opts, f16).read_text())
            bindings = tuple((int(a), dtypes.from_any(t), bool(w)) for a, t, w in d["bindings"])
            return Kernel(d["name"], d["source"], bindings, int(d["groups"]), int(d["workgroup"]), d["strategy"],
                          tuple(d["variables"]))  # fmt: skip
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def put(self, ast: UOp, opts: tuple[Opt, ...], f16: bool, kernel: Kernel) -> None:
        if not isinstance(kernel.groups, int):  # a workgroup count over Variables: rendered again each process
            return
        d = {"name": kernel.name, "source": kernel.source, "groups": kernel.groups, "workgroup": kernel.workgroup,
             "strategy": kernel.strategy, "variables": list(kernel.variables),
             "bindings": [[a, t.name, w] for a, t, w in kernel.bindings]}  # fmt: skip
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            atomic_write(self._path(ast, opts, f16), json.dumps(d).encode())
        except OSError:  # a read-only cache: kernels are just rendered again
            pass

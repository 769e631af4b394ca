"""Schedules on disk, so a second process running the same step skips scheduling (its first step starts sooner).

An entry is keyed by its graph's content hash, the scheduler's limits and the version of the code that schedules
(a hash of anneal_ir's and anneal_schedule's sources: editing either invalidates every entry). It holds the
kernels' ASTs and the tensor-level nodes each computes, as one flattened graph; loaded, they are the same
(hash-consed) nodes as the caller's own graph. Entries are written atomically and checked against their sha256
when read; a damaged or foreign entry only costs scheduling again. Nothing is evicted: removing the folder
is always safe. A graph with Variables is not stored: its sizes are nodes that do not flatten.
"""

from __future__ import annotations

import functools
import hashlib
import pickle
from pathlib import Path
from types import ModuleType
from typing import Any

from anneal_ir import Ops, UOp, dtypes
from anneal_ir.files import atomic_write
from anneal_ir.uop import flatten, unflatten
from anneal_schedule.schedule import Kernel, Schedule

FORMAT = 2  # of an entry's layout, below: the sha256 of the pickled entry, then the entry
DIGEST = 32


def source_version(*modules: ModuleType) -> str:
    """A hash of the modules' source files (a package stands for every module in its folder)."""
    h = hashlib.sha256()
    for module in modules:
        path = Path(module.__file__ or "")
        files = sorted(path.parent.glob("*.py")) if path.name == "__init__.py" else [path]
        for f in files:
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


@functools.cache
def code_version() -> str:
    import anneal_ir
    import anneal_schedule

    return source_version(anneal_ir, anneal_schedule)


class ScheduleStore:
    def __init__(self, folder: Path):
        self.folder = folder

    def _path(self, key: bytes, limits: tuple[int, int]) -> Path:
        name = hashlib.sha256(f"{FORMAT}|{code_version()}|{key.hex()}|{limits}".encode()).hexdigest()
        return self.folder / f"{name}.pickle"

    def get(self, key: bytes, limits: tuple[int, int]) -> Schedule | None:
        """The stored schedule of the graph with this key, scheduled under limits (max_buffers, parallel)."""
        try:
            data = self._path(key, limits).read_bytes()
            digest, payload = data[:DIGEST], data[DIGEST:]
            if hashlib.sha256(payload).digest() != digest:
                return None
            return _schedule(pickle.loads(payload))
        except Exception:  # noqa: BLE001 - any entry that does not load is scheduled again, never an error
            return None

    def put(self, key: bytes, limits: tuple[int, int], sched: Schedule) -> None:
        if sched.variables or not all(isinstance(size, int) for size, _ in sched.buffers):
            return
        try:
            data = pickle.dumps(_entry(sched), protocol=pickle.HIGHEST_PROTOCOL)
        except (ValueError, pickle.PicklingError):  # a node whose arg holds a node: scheduled again next time
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            atomic_write(self._path(key, limits), hashlib.sha256(data).digest() + data)
        except OSError:  # a read-only cache: scheduled again
            pass


def _entry(sched: Schedule) -> dict[str, Any]:
    """sched with its graphs as one flattened SINK: the kernels' ASTs, then each kernel's nodes in turn."""
    nodes = [tuple(k.nodes) for k in sched.kernels]
    sources = tuple(k.ast for k in sched.kernels) + tuple(n for ns in nodes for n in ns)
    return {
        "graph": flatten(UOp(Ops.SINK, dtypes.void, sources)),
        "kernels": [(k.name, k.slots, len(ns)) for k, ns in zip(sched.kernels, nodes, strict=True)],
        "n_inputs": sched.n_inputs,
        "buffers": sched.buffers,
        "outputs": sched.outputs,
        "physical": sched.physical,
    }


def _schedule(entry: dict[str, Any]) -> Schedule:
    sources = unflatten(entry["graph"]).src
    kernels = []
    at = len(entry["kernels"])
    for i, (name, slots, count) in enumerate(entry["kernels"]):
        kernels.append(Kernel(name, sources[i], tuple(slots), frozenset(sources[at : at + count])))
        at += count
    if at != len(sources):
        raise ValueError("schedule store: the entry's node counts do not add up")
    return Schedule(tuple(kernels), entry["n_inputs"], tuple(entry["buffers"]), tuple(entry["outputs"]),
                    tuple(entry["physical"]))  # fmt: skip

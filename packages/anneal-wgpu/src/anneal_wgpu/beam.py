"""ANNEAL_BEAM: time a kernel's candidate strategies on the device and keep the fastest.

Each candidate's output is checked against the heuristic's before it may win, and the
winner is cached on disk (per adapter and kernel content hash), so the search runs once.
Kernels that read their own output (in-place updates) are never searched: running them
repeatedly would change the result.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from anneal_ir import Ops, UOp
from anneal_ir.files import atomic_write
from anneal_schedule.heuristic import candidate_opts
from anneal_schedule.opt import Opt

if TYPE_CHECKING:
    from anneal_wgpu.runtime import GPUBuffer, WebGPUBackend, WebGPUProgram


def reads_own_output(ast: UOp) -> bool:
    out = ast.src[0].src[0]
    return any(n.op is Ops.LOAD and n.src[0] is out for n in ast.toposort())


class BeamCache:
    """Winners on disk: {"<adapter>|<kernel key>": {"opts": [[op, axis, amount], ...]}}. Entries of another
    form (an older cache's strategy labels) are ignored: the kernel is searched again."""

    def __init__(self, path: Path):
        self.path = path
        self.entries: dict[str, Any] = {}
        if path.exists():
            try:
                self.entries = json.loads(path.read_text())
            except (OSError, ValueError):
                self.entries = {}  # a damaged cache only costs a new search

    def get(self, key: str, ast: UOp) -> tuple[Opt, ...] | None:
        found = self.entries.get(key)
        if not isinstance(found, dict) or not isinstance(found.get("opts"), list):
            return None
        try:
            return tuple(Opt.from_data(o) for o in found["opts"])
        except (KeyError, TypeError, ValueError):
            return None

    def put(self, key: str, opts: tuple[Opt, ...]) -> None:
        self.entries[key] = {"opts": [o.as_data() for o in opts]}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, json.dumps(self.entries).encode())


def agrees(got: np.ndarray, reference: np.ndarray) -> bool:
    """Equal up to float rounding: another summation order (a tree instead of a loop) moves a sum of
    many terms by a few ulps of its largest terms, so the tolerance scales with the output's size."""
    if reference.dtype.kind != "f" or not reference.size:
        return bool(np.array_equal(got, reference))
    finite = np.abs(reference[np.isfinite(reference)])
    scale = float(finite.max()) if finite.size else 1.0
    return bool(np.allclose(got, reference, rtol=1e-3, atol=1e-5 + 1e-4 * scale, equal_nan=True))


def _time(backend: WebGPUBackend, prog: WebGPUProgram, buffers: list[GPUBuffer], reps: int) -> float:
    """Seconds per run: the best of reps GPU timestamps where the adapter has them, else the wall time
    of reps runs between two synchronizations (which a host round trip inflates for short kernels)."""
    backend.run(prog, buffers, {})
    backend.synchronize()
    if backend.start_timing():
        for _ in range(reps):
            backend.run(prog, buffers, {})
        return min(backend.stop_timing())
    t0 = time.perf_counter()
    for _ in range(reps):
        backend.run(prog, buffers, {})
    backend.synchronize()
    return (time.perf_counter() - t0) / reps


def search(backend: WebGPUBackend, prog: WebGPUProgram, ast: UOp, buffers: list[GPUBuffer],
           width: int) -> tuple[Opt, ...]:  # fmt: skip
    """Time up to ``width`` candidates (the heuristic's first); return the fastest correct one."""
    out = buffers[0]
    candidates = candidate_opts(ast, backend.limits)[: max(width, 1)]
    backend.run(prog, buffers, {})
    reference = backend.copy_out(out, out.size, out.dtype)
    best, best_time = candidates[0], _time(backend, prog, buffers, 3)
    backend.render_ahead([(prog.name, ast, opts) for opts in candidates[1:]])  # lowered and compiled at once
    for opts in candidates[1:]:
        try:
            trial = backend.build(prog.name, ast, opts)
        except Exception:  # a candidate the device refuses is just not a candidate
            continue
        backend.run(trial, buffers, {})
        got = backend.copy_out(out, out.size, out.dtype)
        if not agrees(got, reference):
            continue
        elapsed = _time(backend, trial, buffers, 3)
        if elapsed < best_time:
            best, best_time = opts, elapsed
    return best

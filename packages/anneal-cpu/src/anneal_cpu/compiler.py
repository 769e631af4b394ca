"""Compile C stages with the system C compiler into a shared library, cached on disk by content.

The compiler is ``cc`` (or ANNEAL_CPU_CC); without one the numpy renderer runs every kernel.
Libraries live in ``<cache>/cpu-kernels/<sha256 of source and flags>.so``, written under a
temporary name and renamed into place, so concurrent runs never load half a file.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

# -ffp-contract=off: no fused multiply-adds, so every float op rounds as numpy's does (a value recomputed
# in another kernel compares equal, as max's gradient needs)
FLAGS = ("-O3", "-march=native", "-fwrapv", "-fno-math-errno", "-ffp-contract=off", "-fopenmp-simd", "-fPIC",
         "-shared")  # fmt: skip


class CompileError(RuntimeError):
    """The C compiler refused a rendered kernel (a bug in the renderer: the message has the source)."""


def find_compiler(setting: str | None) -> str | None:
    """The compiler command: ANNEAL_CPU_CC if set ("numpy" turns C off), else cc, gcc or clang."""
    if setting == "numpy":
        return None
    if setting:
        found = shutil.which(setting)
        if found is None:
            raise CompileError(f"ANNEAL_CPU_CC={setting!r} is not an executable on PATH (or use 'numpy')")
        return found
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name)
        if found:
            return found
    return None


class Compiler:
    def __init__(self, command: str, cache_dir: Path):
        self.command, self.cache_dir = command, cache_dir
        self.compiled = 0  # libraries built by this process (cache misses)

    def load(self, source: str) -> ctypes.CDLL:
        key = hashlib.sha256("\0".join((self.command, *FLAGS, source)).encode()).hexdigest()[:32]
        lib = self.cache_dir / f"{key}.so"
        if not lib.exists():
            self.build(source, lib)
        return ctypes.CDLL(str(lib))

    def build(self, source: str, lib: Path) -> None:
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self.cache_dir) as tmp:
            c_file, so_file = Path(tmp) / "kernel.c", Path(tmp) / "kernel.so"
            c_file.write_text(source)
            done = subprocess.run([self.command, *FLAGS, "-o", str(so_file), str(c_file), "-lm"],
                                  capture_output=True, text=True)  # fmt: skip
            if done.returncode != 0:
                raise CompileError(f"{self.command} failed on a rendered kernel:\n{done.stderr}\n{source}")
            os.replace(so_file, lib)
        self.compiled += 1


_addresses: dict[int, tuple[weakref.ref, int]] = {}  # id(array) -> (the array, its data address)


def address(a: np.ndarray) -> int:
    """a's data address, remembered per live array: reading ``a.ctypes.data`` costs ~2 us, and a step
    passes the same buffers to hundreds of kernels."""
    found = _addresses.get(id(a))
    if found is not None and found[0]() is a:
        return found[1]
    addr = a.ctypes.data
    if len(_addresses) > 65536:
        _addresses.clear()
    _addresses[id(a)] = (weakref.ref(a), addr)
    return addr


def pointers(size: int, *arrays: np.ndarray) -> ctypes.Array:
    """A kernel's pointer table (the ``void**`` its C stages take): the buffers first, room for temps."""
    table = (ctypes.c_void_p * size)()
    for i, a in enumerate(arrays):
        table[i] = address(a)
    return table


class StageRunner:
    """Calls a C stage, splitting its outermost loop over threads when the stage is big enough
    (ctypes releases the GIL, so the threads run in parallel). Handing work to a thread costs tens of
    microseconds: below ~2^20 loop iterations one thread was faster (nanogpt small: 74 ms/step with one
    thread, 99 ms splitting stages from 2^16 iterations on, 2 cores)."""

    def __init__(self, threads: int, min_work: int = 1 << 20):
        self.threads, self.min_work = max(1, threads), min_work
        self.pool = ThreadPoolExecutor(self.threads - 1, "anneal-cpu") if self.threads > 1 else None

    def __call__(self, stage: Any, table: Any, values: Any, outer: int, work: int) -> None:
        parts = min(self.threads, outer)
        if self.pool is None or parts < 2 or work < self.min_work:
            stage(table, values, 0, outer)
            return
        bounds = [outer * i // parts for i in range(parts + 1)]
        futures = [self.pool.submit(stage, table, values, bounds[i], bounds[i + 1]) for i in range(1, parts)]
        stage(table, values, bounds[0], bounds[1])
        for f in futures:
            f.result()


def var_values(values: dict[str, int], names: tuple[str, ...]) -> ctypes.Array:
    return (ctypes.c_int64 * len(names))(*(values[n] for n in names))

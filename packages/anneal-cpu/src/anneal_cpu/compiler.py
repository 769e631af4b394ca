"""Compile C stages with the system C compiler into a shared library, cached on disk by content.

The compiler is ``cc`` (or ANNEAL_CPU_CC); without one the numpy renderer runs every kernel.
Libraries live in ``<cache>/cpu-kernels/<sha256 of source and flags>.so``, written under a
temporary name and committed into place (anneal_ir.files: fsync, rename, folder fsync), so concurrent runs
never load half a file.
"""

from __future__ import annotations

import ctypes
import hashlib
import shutil
import subprocess
import tempfile
import weakref
from pathlib import Path

import numpy as np

from anneal_ir.files import commit

# -ffp-contract=off: no fused multiply-adds, so every float op rounds as numpy's does (a value recomputed
# in another kernel compares equal, as max's gradient needs). -fno-trapping-math: no kernel reads the
# floating-point exception flags, so a select between two computed floats (a sign, the NaN-propagating max,
# exp2's clamps) may compute both and blend; without it GCC keeps each as a branch and leaves the loop scalar
# (the GELU's backward ran 10x slower). Values are unchanged: nothing is reassociated or assumed finite.
FLAGS = ("-O3", "-march=native", "-fwrapv", "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=off",
         "-fopenmp-simd", "-fPIC", "-shared")  # fmt: skip


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

    def load(self, source: str, extra: tuple[str, ...] = ()) -> ctypes.CDLL:
        flags = (*FLAGS, *extra)
        key = hashlib.sha256("\0".join((self.command, *flags, source)).encode()).hexdigest()[:32]
        lib = self.cache_dir / f"{key}.so"
        if not lib.exists():
            self.build(source, lib, flags)
        return ctypes.CDLL(str(lib))

    def build(self, source: str, lib: Path, flags: tuple[str, ...] = FLAGS) -> None:
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self.cache_dir) as tmp:
            c_file, so_file = Path(tmp) / "kernel.c", Path(tmp) / "kernel.so"
            c_file.write_text(source)
            done = subprocess.run([self.command, *flags, "-o", str(so_file), str(c_file), "-lm"],
                                  capture_output=True, text=True)  # fmt: skip
            if done.returncode != 0:
                raise CompileError(f"{self.command} failed on a rendered kernel:\n{done.stderr}\n{source}")
            commit(so_file, lib)  # fsynced before the rename: another process may load it at once
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


def var_values(values: dict[str, int], names: tuple[str, ...]) -> ctypes.Array:
    return (ctypes.c_int64 * len(names))(*(values[n] for n in names))

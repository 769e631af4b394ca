"""The cpu backend's threads and BLAS: one OpenMP pool (runtime.c) that runs the C stages and the
contractions, calling numpy's own BLAS (OpenBLAS's cblas_sgemm) from its threads.

Why one pool: on few cores, numpy's BLAS threads and a second pool for the stages spin against each
other (nanogpt small on 2 cores: several times slower than either alone).
"""

from __future__ import annotations

import ctypes
import math
import os
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from anneal_cpu.compiler import CompileError, Compiler
from anneal_cpu.contract import einsum_axes, gemm_plan, numpy_contract, summed

RUNTIME_SOURCE = (Path(__file__).parent / "runtime.c").read_text()
_RUNTIMES: weakref.WeakSet[Runtime] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """OpenMP's thread pool does not survive fork(): a forked child (multiprocessing's default on Linux)
    runs the stages and contractions on its one thread, as PyTorch does, rather than wait forever for
    pool threads that do not exist there."""
    for runtime in list(_RUNTIMES):
        runtime.threads = 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Runtime:
    """The backend's one thread pool (runtime.c, OpenMP): runs a C stage, splitting its outer loop over
    threads when it has at least ``min_work`` loop iterations, and multiplies matrices through numpy's own
    BLAS (its cblas_sgemm), split over the same threads. One pool, so BLAS threads and stage threads never
    spin against each other: nanogpt small on 2 cores went from 77 ms/step (BLAS and stages on one thread;
    two pools were slower still) to about 42. Handing a stage to the pool costs a few microseconds, so
    smaller stages run on the calling thread."""

    def __init__(self, compiler: Compiler, threads: int, min_work: int = 1 << 14, min_flops: int = 1 << 18):
        self.threads, self.min_work, self.min_flops = max(1, threads), min_work, min_flops
        try:
            self.lib = compiler.load(RUNTIME_SOURCE, ("-fopenmp",))
        except CompileError:  # a compiler without OpenMP (Apple clang): the same code, on one thread
            self.lib, self.threads = compiler.load(RUNTIME_SOURCE), 1
        self.parallel = self.lib.anneal_parallel
        self.parallel.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
        self.parallel.restype = None
        self.gemm = self.lib.anneal_gemm
        operand: list[Any] = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64]  # data, transposed, leading dimension
        self.gemm.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_void_p, *[ctypes.c_int64] * 3,
                              *operand, *operand, ctypes.c_void_p, *[ctypes.c_int64] * 3]  # fmt: skip
        self.gemm.restype = None
        self.addresses: dict[int, tuple[Any, int]] = {}  # id(stage function) -> (it, its address)
        self.blas = numpy_blas(single_threaded=self.threads > 1)
        if self.blas is not None and not self._blas_agrees():
            self.blas = None
        _RUNTIMES.add(self)

    # ---- stages ----
    def __call__(self, stage: Any, table: Any, values: Any, outer: int, work: int) -> None:
        parts = min(self.threads, outer)
        if parts < 2 or work < self.min_work:
            stage(table, values, 0, outer)
            return
        found = self.addresses.get(id(stage))
        if found is None or found[0] is not stage:
            found = self.addresses[id(stage)] = (stage, ctypes.cast(stage, ctypes.c_void_p).value or 0)
        self.parallel(found[1], table, values, outer, parts)

    # ---- contractions ----
    def contract(self, a: np.ndarray, sa: str, b: np.ndarray, sb: str, so: str) -> np.ndarray:
        """einsum(f"{sa},{sb}->{so}", a, b) for float32 through cblas_sgemm on the pool, reading both
        operands in place (contract.gemm_plan); other dtypes, or no BLAS found, by numpy."""
        if self.blas is None or a.dtype != np.float32 or b.dtype != np.float32:
            return numpy_contract(a, sa, b, sb, so)
        axes = einsum_axes(sa, sb, so)
        a, b = summed(a, b, axes)
        plan = gemm_plan(axes.sa, axes.sb, so, a.shape, elements(a.strides), b.shape, elements(b.strides))
        size = math.prod(plan.out_shape)
        if not self.blas.fits(max(a.size, b.size, size)):
            return numpy_contract(a, axes.sa, b, axes.sb, so)
        if size == 0 or plan.k == 0:  # nothing to compute, or sums of nothing
            return np.zeros(plan.out_shape, np.float32).transpose(plan.out_order)
        if plan.a_copy is not None:
            a = np.ascontiguousarray(a.transpose(plan.a_copy))
        if plan.b_copy is not None:
            b = np.ascontiguousarray(b.transpose(plan.b_copy))
        out = np.empty(plan.out_shape, np.float32)
        count = len(plan.offsets)
        threads = self.threads if count * plan.m * plan.n * plan.k >= self.min_flops else 1
        split = threads if count < threads else 1  # enough matrices: whole ones per thread; else cut rows
        self.gemm(self.blas.sgemm, self.blas.ilp64, count, plan.offsets.ctypes.data, plan.m, plan.n, plan.k,
                  a.ctypes.data, plan.ta, plan.lda, b.ctypes.data, plan.tb, plan.ldb, out.ctypes.data, plan.ldc,
                  split, threads)  # fmt: skip
        return out.transpose(plan.out_order)

    def matmul(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        """left (batch, m, k) @ right (batch, k, n)."""
        return self.contract(left, "zmk", right, "zkn", "zmn")

    def _blas_agrees(self) -> bool:
        """The found sgemm, called as contract calls it, gives numpy's product (else it is not used)."""
        rng = np.random.default_rng(0)
        a, b = rng.standard_normal((2, 5, 7), np.float32), rng.standard_normal((2, 3, 7), np.float32)
        got = self.matmul(a, b.transpose(0, 2, 1))
        return bool(np.allclose(got, np.matmul(a, b.transpose(0, 2, 1)), rtol=1e-5, atol=1e-5))


def elements(strides: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(s // 4 for s in strides)  # float32


@dataclass(frozen=True)
class Blas:
    sgemm: int  # the address of cblas_sgemm
    ilp64: bool  # its integers are 64-bit

    def fits(self, size: int) -> bool:
        return self.ilp64 or size < 2**31


def numpy_blas(single_threaded: bool) -> Blas | None:
    """numpy's BLAS, when it is OpenBLAS (numpy's wheels on Linux): its cblas_sgemm, found among the
    libraries this process has loaded. With ``single_threaded`` its own threads are set to one, since
    Runtime calls it from its pool (a process-wide change: numpy's matmul runs on one thread too)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:  # not Linux: numpy's matmul does the contractions
        return None
    found = {ln.split()[-1] for ln in maps.splitlines() if "openblas" in ln.rsplit("/", 1)[-1]}
    paths = sorted(found, key=lambda path: ("numpy" not in path, path))  # numpy's own copy first
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix, suffix in (("scipy_", "64_"), ("", "64_"), ("", "")):
            try:
                sgemm = getattr(lib, f"{prefix}cblas_sgemm{suffix}")
                config = getattr(lib, f"{prefix}openblas_get_config{suffix}")
                set_threads = getattr(lib, f"{prefix}openblas_set_num_threads{suffix}")
            except AttributeError:
                continue
            config.restype = ctypes.c_char_p
            ilp64 = suffix == "64_" or b"USE64BITINT" in (config() or b"")
            if single_threaded:
                set_threads(ctypes.c_int(1))
            return Blas(ctypes.cast(sgemm, ctypes.c_void_p).value or 0, ilp64)
    return None

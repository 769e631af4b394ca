"""The cpu backend's threads and BLAS: one OpenMP pool (runtime.c) that runs the C stages and the
contractions, calling numpy's own BLAS (OpenBLAS's cblas_sgemm) from its threads.

Why one pool: on few cores, numpy's BLAS threads and a second pool for the stages spin against each
other (nanogpt small on 2 cores: several times slower than either alone).
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import numpy as np

from anneal_cpu.compiler import CompileError, Compiler

RUNTIME_SOURCE = (Path(__file__).parent / "runtime.c").read_text()


class Runtime:
    """The backend's one thread pool (runtime.c, OpenMP): runs a C stage, splitting its outer loop over
    threads when it has at least ``min_work`` loop iterations, and multiplies matrices through numpy's own
    BLAS (its cblas_sgemm), split over the same threads. One pool, so BLAS threads and stage threads never
    spin against each other: nanogpt small on 2 cores went from 77 ms/step (BLAS and stages on one thread;
    two pools were slower still) to about 50. Handing a stage to the pool costs a few microseconds, so
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
        operand: list[Any] = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_int64]  # data, stride, trans, ld
        self.gemm.argtypes = [ctypes.c_void_p, ctypes.c_int, *[ctypes.c_int64] * 4, *operand, *operand,
                              ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]  # fmt: skip
        self.gemm.restype = None
        self.addresses: dict[int, tuple[Any, int]] = {}  # id(stage function) -> (it, its address)
        self.blas = numpy_blas(single_threaded=self.threads > 1)
        if self.blas is not None and not self._blas_agrees():
            self.blas = None

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
    def matmul(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        """left (batch, m, k) @ right (batch, k, n), each a strided view: through cblas_sgemm without a
        copy when each matrix has a unit stride (or is its transpose), else np.matmul."""
        if self.blas is None or left.dtype != np.float32 or right.dtype != np.float32:
            return numpy_matmul(left, right)
        batch, m, k = left.shape
        n = right.shape[2]
        if not self.blas.fits(max(batch * m * n, m * k, k * n)):
            return numpy_matmul(left, right)
        if batch * m * n * k == 0:  # nothing to read: an empty product, or sums of nothing (zeros)
            return np.zeros((batch, m, n), np.float32)
        out = np.empty((batch, m, n), np.float32)
        if (a := blas_operand(left)) is None:
            left = np.ascontiguousarray(left)
            a = blas_operand(left)
        if (b := blas_operand(right)) is None:
            right = np.ascontiguousarray(right)
            b = blas_operand(right)
        assert a is not None and b is not None
        threads = self.threads if batch * m * n * k >= self.min_flops else 1
        split = threads if batch < threads else 1  # enough matrices: one per piece; else cut rows
        self.gemm(self.blas.sgemm, self.blas.ilp64, batch, m, n, k, left.ctypes.data, *a, right.ctypes.data, *b,
                  out.ctypes.data, split, threads)  # fmt: skip
        return out

    def _blas_agrees(self) -> bool:
        """The found sgemm, called as matmul calls it, gives numpy's product (else it is not used)."""
        rng = np.random.default_rng(0)
        a, b = rng.standard_normal((2, 5, 7), np.float32), rng.standard_normal((2, 3, 7), np.float32)
        got = self.matmul(a, b.transpose(0, 2, 1))
        return bool(np.allclose(got, np.matmul(a, b.transpose(0, 2, 1)), rtol=1e-5, atol=1e-5))


def blas_operand(x: np.ndarray) -> tuple[int, int, int] | None:
    """(batch stride, transposed, leading dimension) in elements of a (batch, rows, cols) float32 view:
    row-major rows of unit stride, or the transpose of such a matrix. None when BLAS cannot read it
    (no unit stride, overlapping or reversed rows): it is copied first."""
    batch, rows, cols = x.shape
    sb, sr, sc = (s // x.itemsize for s in x.strides)
    sb = sb if batch > 1 else 0  # the stride of an axis of size 1 is never used
    if sb < 0:
        return None
    if cols == 1 or sc == 1:
        if rows == 1 or sr >= cols:
            return sb, 0, max(sr if rows > 1 else cols, 1)
    if rows == 1 or sr == 1:
        if cols == 1 or sc >= rows:
            return sb, 1, max(sc if cols > 1 else rows, 1)
    return None


class Blas:
    def __init__(self, sgemm: int, ilp64: bool):
        self.sgemm, self.ilp64 = sgemm, ilp64

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
    paths = sorted({ln.split()[-1] for ln in maps.splitlines() if "openblas" in ln.rsplit("/", 1)[-1]})
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


def numpy_matmul(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """left (batch, m, k) @ right (batch, k, n) by np.matmul, which reaches BLAS for a strided 2-D pair
    but only for contiguous stacks."""
    if left.shape[0] == 1:
        return np.matmul(left[0], right[0])[None]
    return np.matmul(np.ascontiguousarray(left), np.ascontiguousarray(right))

"""The numpy backend: memory is numpy bytes, programs are rendered Python functions."""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from anneal_cpu.compiler import Compiler, find_compiler, pointers, var_values
from anneal_cpu.contract import numpy_contract
from anneal_cpu.render import render
from anneal_cpu.render_c import loop_iterations, render_c
from anneal_cpu.runtime import Runtime
from anneal_ir import DType, UOp
from anneal_ir.settings import Settings
from anneal_schedule.backend import DoneRead, Limits


def _idiv(a: Any, b: Any) -> Any:
    """Integer division truncating toward zero (C, WGSL), not numpy's floor."""
    q = np.floor_divide(a, b)
    return q + ((q < 0) & (q * b != a))


def _cast(x: Any, dtype: Any) -> Any:
    return np.asarray(x).astype(dtype)


_EXP2_POLY = tuple(np.float32(c) for c in (0.6931471805599453, 0.2402265069591007, 0.05550410866482158,
                                            0.009618129107628477, 0.0013333558146428443, 1.5403530393381608e-4,
                                            1.525273380405984e-5))  # fmt: skip


def _exp2(x: Any) -> Any:
    """2^x for float32 exactly as the C path computes it (render_c's exp2_f32: the same float32
    operations in the same order), so a value recomputed by one path equals the other's bit for bit
    (max's gradient compares them). Other dtypes: np.exp2."""
    x = np.asarray(x)
    if x.dtype != np.float32:
        return np.exp2(x)
    xc = np.clip(x, np.float32(-127), np.float32(127.49))
    n = np.rint(xc)
    f = xc - n
    p = _EXP2_POLY[6]
    for c in reversed(_EXP2_POLY[:6]):
        p = c + f * p
    p = np.float32(1) + f * p
    scale = ((n.astype(np.int32) + 127) << 23).view(np.float32)
    r = p * scale
    r = np.where(x >= np.float32(128), np.float32(np.inf), r)
    return np.where(np.isnan(x), x, r)


def _bf16_to_f32(bits: Any) -> Any:
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


def _f32_to_bf16(x: Any) -> Any:
    """Round to nearest even, keep the top 16 bits (as torch does)."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def _round_bf16(x: Any) -> Any:
    return _bf16_to_f32(_f32_to_bf16(x))


def _view(buf: np.ndarray, offset: int, shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    """A strided view of a flat buffer (the ndarray constructor: ten times cheaper than as_strided)."""
    return np.ndarray(shape, buf.dtype, buf, offset * buf.itemsize, strides)


_NAMESPACE = {
    "np": np,
    "_idiv": _idiv,
    "_cast": _cast,
    "_view": _view,
    "_bf16_to_f32": _bf16_to_f32,
    "_f32_to_bf16": _f32_to_bf16,
    "_round_bf16": _round_bf16,
    "_exp2": _exp2,
    "_ptrs": pointers,
    "_vars": var_values,
}


@dataclass
class CPUProgram:
    name: str
    source: str
    fn: Any
    compiled: bool = False  # True: C stages (and BLAS); False: numpy only

    @property
    def opts(self) -> str:  # the CPU's loops are its own: no opts, only which form the kernel took
        return "none (C stages, BLAS contractions)" if self.compiled else "none (numpy)"


def usable_cores() -> int:
    affinity = getattr(os, "sched_getaffinity", None)  # Linux: the cores this process may run on
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


class CPUBackend:
    name = "cpu"
    limits = Limits()

    def __init__(self, settings: Settings | None = None) -> None:
        settings = settings or Settings.from_env()
        command = find_compiler(settings.cpu_cc)
        self.compiler = Compiler(command, settings.cache_root()[0] / "cpu-kernels") if command else None
        self.c_min = settings.cpu_c_min
        threads = settings.cpu_threads or usable_cores()
        self.runtime = Runtime(self.compiler, threads) if self.compiler is not None else None
        # both renderers' contractions go one way (BLAS via the runtime's pool when there is one), so a
        # product recomputed by another kernel is bit-identical to the first
        self.contract = self.runtime.contract if self.runtime else numpy_contract

    def allocate(self, size: int, dtype: DType) -> np.ndarray:
        return np.empty(max(size, 1), dtype=dtype.np)

    def copy_in(self, handle: np.ndarray, data: np.ndarray) -> None:
        handle[: data.size] = data

    def copy_out(self, handle: np.ndarray, size: int, dtype: DType) -> np.ndarray:
        return handle[:size].copy()

    def copy_out_async(self, reads: list[tuple[np.ndarray, int, DType]]) -> DoneRead:
        """The WebGPU backend's asynchronous read, here complete at once: a kernel has finished when run() returns."""
        return DoneRead([self.copy_out(handle, size, dtype) for handle, size, dtype in reads])

    def compile(self, name: str, ast: UOp) -> CPUProgram:
        namespace = dict(_NAMESPACE, _contract=self.contract)
        rendered = render_c(name, ast) if self.compiler is not None and loop_iterations(ast) >= self.c_min else None
        if rendered is not None and self.compiler is not None:
            glue, c_source, stages = rendered
            lib = self.compiler.load(c_source)
            for stage in stages:
                fn = getattr(lib, stage)
                fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
                fn.restype = None
                namespace[stage] = fn
            namespace["_run"] = self.runtime
            exec(compile(glue, f"<anneal kernel {name}>", "exec"), namespace)  # the rendered kernel is our own code
            return CPUProgram(name, f"{glue}\n/* C stages */\n{c_source}", namespace[name], compiled=True)
        source = render(name, ast)
        exec(compile(source, f"<anneal kernel {name}>", "exec"), namespace)
        return CPUProgram(name, source, namespace[name])

    def run(self, program: CPUProgram, buffers: list[np.ndarray], var_values: dict[str, int]) -> None:
        with np.errstate(all="ignore"):
            program.fn(*buffers, var_values)

    def synchronize(self) -> None:
        pass

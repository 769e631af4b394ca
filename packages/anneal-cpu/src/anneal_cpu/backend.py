"""The numpy backend: memory is numpy bytes, programs are rendered Python functions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from anneal_cpu.render import render
from anneal_ir import Ops, UOp
from anneal_schedule.backend import Limits


def _idiv(a: Any, b: Any) -> Any:
    """Integer division truncating toward zero (C, WGSL), not numpy's floor."""
    q = np.floor_divide(a, b)
    return q + ((q < 0) & (q * b != a))


def _cast(x: Any, dtype: Any) -> Any:
    return np.asarray(x).astype(dtype)


_NAMESPACE = {"np": np, "as_strided": as_strided, "_idiv": _idiv, "_cast": _cast}


@dataclass
class CPUProgram:
    name: str
    source: str
    fn: Any
    arg_dtypes: tuple[np.dtype, ...]


class CPUBackend:
    name = "cpu"
    limits = Limits()

    def allocate(self, nbytes: int) -> np.ndarray:
        return np.empty(max(8, -(-nbytes // 8) * 8), dtype=np.uint8)  # whole float64s: views of any dtype work

    def copy_in(self, handle: np.ndarray, data: np.ndarray) -> None:
        handle[: data.nbytes] = np.frombuffer(np.ascontiguousarray(data).tobytes(), dtype=np.uint8)

    def copy_out(self, handle: np.ndarray, nbytes: int) -> np.ndarray:
        return handle[:nbytes].copy()

    def compile(self, name: str, ast: UOp) -> CPUProgram:
        source = render(name, ast)
        namespace = dict(_NAMESPACE)
        exec(compile(source, f"<anneal kernel {name}>", "exec"), namespace)  # the rendered kernel is our own code
        globs = sorted({n.arg: n.dtype for n in ast.toposort() if n.op is Ops.DEFINE_GLOBAL}.items())
        return CPUProgram(name, source, namespace[name], tuple(d.np for _, d in globs))

    def run(self, program: CPUProgram, buffers: list[np.ndarray], var_values: dict[str, int]) -> None:
        views = [b.view(dt) for b, dt in zip(buffers, program.arg_dtypes)]
        with np.errstate(all="ignore"):
            program.fn(*views, var_values)

    def synchronize(self) -> None:
        pass

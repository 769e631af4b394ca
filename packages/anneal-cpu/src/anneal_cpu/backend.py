"""The numpy backend: memory is numpy bytes, programs are rendered Python functions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from anneal_cpu.render import render
from anneal_ir import DType, UOp
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


class CPUBackend:
    name = "cpu"
    limits = Limits()

    def allocate(self, size: int, dtype: DType) -> np.ndarray:
        return np.empty(max(size, 1), dtype=dtype.np)

    def copy_in(self, handle: np.ndarray, data: np.ndarray) -> None:
        handle[: data.size] = data

    def copy_out(self, handle: np.ndarray, size: int, dtype: DType) -> np.ndarray:
        return handle[:size].copy()

    def compile(self, name: str, ast: UOp) -> CPUProgram:
        source = render(name, ast)
        namespace = dict(_NAMESPACE)
        exec(compile(source, f"<anneal kernel {name}>", "exec"), namespace)  # the rendered kernel is our own code
        return CPUProgram(name, source, namespace[name])

    def run(self, program: CPUProgram, buffers: list[np.ndarray], var_values: dict[str, int]) -> None:
        with np.errstate(all="ignore"):
            program.fn(*buffers, var_values)

    def synchronize(self) -> None:
        pass

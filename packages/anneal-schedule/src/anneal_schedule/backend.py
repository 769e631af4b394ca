"""The Backend protocol and device limits: what a backend gives the scheduler."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from anneal_ir import DType, UOp


@dataclass(frozen=True)
class Limits:
    """What the scheduler and optimizer must respect; a backend reads these from its device."""

    max_buffers: int = 1 << 30  # storage buffers one kernel may bind
    max_workgroup_size: tuple[int, int, int] = (1, 1, 1)
    max_workgroup_invocations: int = 1
    max_shared_memory: int = 0
    max_workgroups_per_dim: int = 1 << 31
    max_binding_size: int = 1 << 62
    f16: bool = True
    parallel: int = 0  # workgroups that fill the device: reductions with fewer are split (anneal_schedule.split)


@runtime_checkable
class Program(Protocol):
    name: str
    source: str


@runtime_checkable
class Backend(Protocol):
    name: str
    limits: Limits

    def allocate(self, size: int, dtype: DType) -> Any:
        """Memory for size elements; a backend may store a dtype wider (e.g. bool as u32 in WGSL)."""
        ...

    def copy_in(self, handle: Any, data: np.ndarray) -> None:
        """Write a flat array of the buffer's dtype (numpy storage dtype, see DType.numpy)."""
        ...

    def copy_out(self, handle: Any, size: int, dtype: DType) -> np.ndarray:
        """Read size elements back as a flat numpy array of the storage dtype."""
        ...

    def compile(self, name: str, ast: UOp) -> Program: ...

    def run(self, program: Program, buffers: list[Any], var_values: dict[str, int]) -> None: ...

    def synchronize(self) -> None: ...


# Optional: ``prepare(kernels)`` gets the (name, ast) of every kernel a schedule will compile, before the
# first is compiled (the WebGPU backend renders them in parallel); ``flush_soon()`` starts the device on the
# runs recorded so far without waiting, or soon (the Runner calls it after each schedule); for
# ANNEAL_DEBUG=2, ``start_timing() -> bool`` (False: no device timestamps) and ``stop_timing() ->
# list[float]``, the device seconds of each run() since start_timing, in order; ``copy_out_many(reads)``, several
# buffers in one round trip; ``copy_out_async(reads)``, a read behind the runs so far that does not wait
# (``ready()``, ``result()``: a data-parallel step's gradient buckets).


@dataclass
class DoneRead:
    """A read finished when it was started: a backend's copy_out_async that has nothing to wait for (the cpu's),
    and read_async on a backend without one."""

    arrays: list[np.ndarray]

    def ready(self) -> bool:
        return True

    def result(self) -> list[np.ndarray]:
        return self.arrays

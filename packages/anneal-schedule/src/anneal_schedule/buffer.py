"""Buffer: device memory behind a BUFFER node. Allocated on first use, freed with the object."""

from __future__ import annotations

import itertools
import weakref
from typing import Any

import numpy as np

from anneal_ir import DType, Ops, UOp
from anneal_schedule.backend import Backend

_ids = itertools.count()


class Buffer:
    """``size`` elements of ``dtype`` on ``device`` (a registered backend's name).

    Buffers compare by identity, so a BUFFER UOp names one piece of memory; ``content_key``
    is what persistent caches see instead (never the identity).
    """

    __slots__ = ("device", "backend", "size", "dtype", "handle", "uid", "__weakref__")

    def __init__(self, device: str, backend: Backend, size: int, dtype: DType):
        self.device, self.backend, self.size, self.dtype = device, backend, size, dtype
        self.handle: Any = None
        self.uid = next(_ids)

    def __repr__(self) -> str:
        return f"Buffer<{self.device}:{self.uid} {self.dtype.name}[{self.size}]>"

    def content_key(self) -> str:
        return f"Buffer({self.device},{self.dtype.name},{self.size})"

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def ensure(self) -> Any:
        if self.handle is None:
            self.handle = self.backend.allocate(self.size, self.dtype)
            free = getattr(self.backend, "free", None)
            if free is not None:
                # Give the memory back to the backend's pool when this Buffer dies. A finalizer, not
                # __del__: it holds the handle, so the handle cannot be finalized before it is pooled.
                weakref.finalize(self, free, self.handle)
        return self.handle

    def copy_in(self, data: np.ndarray) -> Buffer:
        flat = np.ascontiguousarray(data, dtype=self.dtype.np).reshape(-1)
        assert flat.size == self.size, f"copy_in of {flat.size} elements into a buffer of {self.size}"
        self.backend.copy_in(self.ensure(), flat)
        return self

    def view(self, shape: tuple[Any, ...], binds: tuple[UOp, ...] = ()) -> UOp:
        """The BUFFER node of this memory, reshaped to shape (a leaf of a tensor graph). A symbolic
        shape views a prefix; ``binds`` carry its Variables' values (BIND nodes)."""
        base = UOp(Ops.BUFFER, self.dtype, (), self)
        return base if shape == (self.size,) else UOp(Ops.RESHAPE, self.dtype, (base, *binds), shape)

    def numpy(self) -> np.ndarray:
        return self.backend.copy_out(self.ensure(), self.size, self.dtype)


def read_many(buffers: list[Buffer]) -> list[np.ndarray]:
    """The contents of buffers of one device, in one round trip where the backend offers `copy_out_many` (a GPU
    read waits for the queue once, not once per buffer)."""
    if not buffers:
        return []
    backend = buffers[0].backend
    many = getattr(backend, "copy_out_many", None)
    if many is None or len(buffers) == 1:
        return [b.numpy() for b in buffers]
    return list(many([(b.ensure(), b.size, b.dtype) for b in buffers]))

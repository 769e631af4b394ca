"""Data types and PyTorch's promotion rules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True, eq=True)
class DType:
    name: str
    itemsize: int
    kind: str  # "b" bool, "i" signed int, "u" unsigned int, "f" float
    numpy: str  # numpy storage dtype (bfloat16 is stored as uint16 bits)

    def __repr__(self) -> str:
        return f"dtypes.{self.name}"

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_int(self) -> bool:
        return self.kind in "iu"

    @property
    def is_unsigned(self) -> bool:
        return self.kind == "u"

    @property
    def bits(self) -> int:
        return self.itemsize * 8

    @property
    def np(self) -> np.dtype:
        return np.dtype(self.numpy)

    def __reduce__(self) -> tuple:
        # unpickled as the table's own object: code compares dtypes with `is`
        return _named, (self.name,)


class dtypes:
    """The dtype table, named like torch's."""

    void = DType("void", 0, "v", "V0")  # for ops that make no value (STORE, SINK, RANGE ends)
    bool = DType("bool", 1, "b", "bool")
    int8 = DType("int8", 1, "i", "int8")
    int16 = DType("int16", 2, "i", "int16")
    int32 = DType("int32", 4, "i", "int32")
    int64 = DType("int64", 8, "i", "int64")
    uint8 = DType("uint8", 1, "u", "uint8")
    uint16 = DType("uint16", 2, "u", "uint16")
    uint32 = DType("uint32", 4, "u", "uint32")
    uint64 = DType("uint64", 8, "u", "uint64")
    float16 = DType("float16", 2, "f", "float16")
    bfloat16 = DType("bfloat16", 2, "f", "uint16")
    float32 = DType("float32", 4, "f", "float32")
    float64 = DType("float64", 8, "f", "float64")
    # aliases
    half, float, double, long, int = float16, float32, float64, int64, int32

    default_float = float32
    default_int = int64
    index = int64  # index arithmetic in kernel ASTs

    @staticmethod
    def all() -> tuple[DType, ...]:
        return ALL_DTYPES

    @staticmethod
    def from_any(x: Any) -> DType:
        """A DType from a DType, a name, a numpy dtype, or a torch-like object with .name."""
        if isinstance(x, DType):
            return x
        if isinstance(x, str):
            if x in BY_NAME:
                return BY_NAME[x]
            raise TypeError(f"unknown dtype {x!r}; known: {', '.join(BY_NAME)}")
        npd = np.dtype(x)
        for d in ALL_DTYPES:
            if d is not dtypes.bfloat16 and d.np == npd:
                return d
        raise TypeError(f"numpy dtype {npd} has no anneal dtype")


ALL_DTYPES: tuple[DType, ...] = (
    dtypes.bool, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64,
    dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64,
    dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64,
)  # fmt: skip
BY_NAME = {d.name: d for d in ALL_DTYPES} | {
    "half": dtypes.float16,
    "float": dtypes.float32,
    "double": dtypes.float64,
    "long": dtypes.int64,
    "int": dtypes.int32,
}


def _named(name: str) -> DType:
    return dtypes.void if name == "void" else BY_NAME[name]


def _category(d: DType) -> int:
    return {"v": -1, "b": 0, "u": 1, "i": 1, "f": 2}[d.kind]


def promote_types(a: DType, b: DType) -> DType:
    """torch.promote_types: the smallest dtype both fit in (within a category, the larger)."""
    if a == b:
        return a
    ca, cb = _category(a), _category(b)
    if ca != cb:
        return a if ca > cb else b
    if a.is_float:
        if {a, b} == {dtypes.float16, dtypes.bfloat16}:
            return dtypes.float32
        return a if a.itemsize > b.itemsize else b
    if a.kind == b.kind:
        return a if a.itemsize > b.itemsize else b
    signed, unsigned = (a, b) if a.kind == "i" else (b, a)
    if signed.itemsize > unsigned.itemsize:
        return signed
    # uint8 with int8 -> int16 as torch; uint64 with any signed has no home: int64 like numpy-ish torch
    return {1: dtypes.int16, 2: dtypes.int32, 4: dtypes.int64}.get(unsigned.itemsize, dtypes.int64)


def scalar_dtype(x: Any) -> DType:
    """The dtype a Python scalar gets on its own (torch.tensor(x).dtype)."""
    if isinstance(x, bool):
        return dtypes.bool
    if isinstance(x, int):
        return dtypes.default_int
    return dtypes.default_float


def result_type_with_scalar(t: DType, x: Any) -> DType:
    """A tensor of dtype t combined with a Python scalar x: the scalar never widens t
    within its category, but an int tensor with a float scalar becomes the default float."""
    s = scalar_dtype(x)
    if _category(s) > _category(t):
        return dtypes.default_float if s.is_float else s
    return t

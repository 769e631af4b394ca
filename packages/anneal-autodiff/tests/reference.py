"""A direct numpy interpreter of tensor-level UOps: the oracle for the rule tests here."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from anneal_ir import Ops, UOp, dtypes


class Data:
    """A BUFFER's payload in these tests: the array itself (flat)."""

    def __init__(self, array: np.ndarray):
        self.array = array.reshape(-1)
        self.size = self.array.size


def leaf(array: np.ndarray) -> UOp:
    base = UOp(Ops.BUFFER, dtypes.from_any(array.dtype), (), Data(array))
    return UOp(Ops.RESHAPE, base.dtype, (base,), array.shape)


_ALU = {
    Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.MAX: np.maximum, Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal,
    Ops.CMPEQ: np.equal, Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.SIN: np.sin, Ops.SQRT: np.sqrt,
    Ops.RECIPROCAL: np.reciprocal, Ops.NEG: np.negative, Ops.TRUNC: np.trunc,
    Ops.ERF: np.vectorize(math.erf),
}  # fmt: skip


def evaluate(root: UOp, replace: dict[UOp, np.ndarray] | None = None) -> np.ndarray:
    values: dict[UOp, Any] = dict(replace or {})
    for u in root.toposort():
        if u in values:
            continue
        s = [values[x] for x in u.src]
        op = u.op
        if op is Ops.BUFFER:
            v = u.arg.array
        elif op is Ops.CONST:
            v = np.array(u.arg, dtype=u.dtype.np)
        elif op is Ops.RESHAPE:
            v = np.reshape(s[0], u.arg)
        elif op is Ops.PERMUTE:
            v = np.transpose(s[0], u.arg)
        elif op is Ops.EXPAND:
            v = np.broadcast_to(s[0], u.arg)
        elif op is Ops.PAD:
            v = np.pad(s[0], u.arg)
        elif op is Ops.SHRINK:
            v = s[0][tuple(slice(b, e) for b, e in u.arg)]
        elif op is Ops.FLIP:
            v = np.flip(s[0], u.arg)
        elif op is Ops.REDUCE_AXIS:
            fn = np.sum if u.arg[0] is Ops.ADD else np.max
            v = fn(s[0], axis=u.arg[1], keepdims=True)
        elif op is Ops.CAST:
            v = s[0].astype(u.dtype.np)
        elif op is Ops.WHERE:
            v = np.where(s[0], s[1], s[2])
        elif op in (Ops.CONTIGUOUS, Ops.DETACH):
            v = s[0]
        else:
            v = _ALU[op](*s)
        values[u] = np.asarray(v, dtype=u.dtype.np)
    return values[root]

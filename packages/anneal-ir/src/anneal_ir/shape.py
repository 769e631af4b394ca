"""Shape inference for tensor-level UOps (kernel-level nodes have no shape: None)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from anneal_ir.ops import GroupOp, Ops

if TYPE_CHECKING:
    from anneal_ir.uop import Shape, UOp


def _same_as_first(u: UOp) -> Shape | None:
    return u.src[0].shape


def _permute(u: UOp) -> Shape | None:
    s = u.src[0].shape
    assert s is not None
    return tuple(s[i] for i in u.arg)


def _pad(u: UOp) -> Shape | None:
    s = u.src[0].shape
    assert s is not None
    from anneal_ir.sint import sadd

    return tuple(sadd(d, b + a) for d, (b, a) in zip(s, u.arg))


def _shrink(u: UOp) -> Shape | None:
    from anneal_ir.sint import sadd

    return tuple(sadd(e, -b) for b, e in u.arg)


def _reduce(u: UOp) -> Shape | None:
    s = u.src[0].shape
    assert s is not None
    return tuple(1 if i in u.arg[1] else d for i, d in enumerate(s))


def _elementwise(u: UOp) -> Shape | None:
    shapes = [s.shape for s in u.src if s.shape is not None and not (s.op is Ops.CONST and s.shape == ())]
    return shapes[0] if shapes else (() if all(s.shape == () for s in u.src) else None)


_RULES = {
    Ops.BUFFER: lambda u: (u.arg.size,),
    Ops.CONST: lambda u: (),
    Ops.DEFINE_VAR: lambda u: (),
    Ops.BIND: lambda u: (),
    Ops.IOTA: lambda u: (u.arg,),
    Ops.RESHAPE: lambda u: u.arg,
    Ops.EXPAND: lambda u: u.arg,
    Ops.PERMUTE: _permute,
    Ops.PAD: _pad,
    Ops.SHRINK: _shrink,
    Ops.FLIP: _same_as_first,
    Ops.REDUCE_AXIS: _reduce,
    Ops.CONTIGUOUS: _same_as_first,
    Ops.DETACH: _same_as_first,
    Ops.CUSTOM_VJP: _same_as_first,
    Ops.ASSIGN: _same_as_first,
    Ops.REALIZED: _same_as_first,
    Ops.COPY: _same_as_first,
}


def infer_shape(u: UOp) -> Shape | None:
    if u.op in _RULES:
        return _RULES[u.op](u)
    if u.op in GroupOp.Elementwise:
        return _elementwise(u)
    return None

"""Small builders of tensor-level UOps (shapes kept explicit, constants broadcast to shape)."""

from __future__ import annotations

import math

from anneal_ir import Ops, UOp
from anneal_ir.uop import Shape


def full(shape: Shape, like: UOp, value: float) -> UOp:
    u = UOp.const(like.dtype, value)
    if not shape:
        return u
    return UOp(Ops.EXPAND, like.dtype, (UOp(Ops.RESHAPE, like.dtype, (u,), (1,) * len(shape)),), shape)


def shape_of(u: UOp) -> Shape:
    assert u.shape is not None, f"{u.op} has no shape"
    return u.shape


def scalar(like: UOp, value: float) -> UOp:
    return full(shape_of(like), like, value)


def reshape(u: UOp, shape: Shape) -> UOp:
    return u if shape_of(u) == shape else UOp(Ops.RESHAPE, u.dtype, (u,), shape)


def expand(u: UOp, shape: Shape) -> UOp:
    return u if shape_of(u) == shape else UOp(Ops.EXPAND, u.dtype, (u,), shape)


def sum_to(g: UOp, shape: Shape) -> UOp:
    """Sum g over the axes where shape has 1 and g does not (un-broadcast, keeping dims)."""
    axes = tuple(i for i, (s, d) in enumerate(zip(shape, shape_of(g))) if s == 1 and d != 1)
    return UOp(Ops.REDUCE_AXIS, g.dtype, (g,), (Ops.ADD, axes)) if axes else g


def alu(op: Ops, *src: UOp) -> UOp:
    return src[0].alu(op, *src[1:])


def mul(a: UOp, b: UOp) -> UOp:
    return a.alu(Ops.MUL, b)


def add(a: UOp, b: UOp) -> UOp:
    return a.alu(Ops.ADD, b)


def neg(a: UOp) -> UOp:
    return a.alu(Ops.NEG)


def recip(a: UOp) -> UOp:
    return a.alu(Ops.RECIPROCAL)


def where(c: UOp, a: UOp, b: UOp) -> UOp:
    return UOp(Ops.WHERE, a.dtype, (c, a, b))


def cos(a: UOp) -> UOp:
    return add(scalar(a, math.pi / 2), neg(a)).alu(Ops.SIN)


def erf_slope(x: UOp) -> UOp:
    """d erf(x) / dx = 2/sqrt(pi) * exp(-x^2), with exp as exp2."""
    exp = mul(neg(mul(x, x)), scalar(x, 1 / math.log(2))).alu(Ops.EXP2)
    return mul(exp, scalar(x, 2 / math.sqrt(math.pi)))


def max_mask(src: UOp, ret: UOp) -> UOp:
    """For a max-reduction: 1/count on the elements equal to the max (ties share), else 0."""
    axes = ret.arg[1]
    hit = expand(ret, shape_of(src)).alu(Ops.CMPEQ, src).cast(src.dtype)
    count = UOp(Ops.REDUCE_AXIS, src.dtype, (hit,), (Ops.ADD, axes))
    return mul(hit, expand(recip(count), shape_of(src)))


def inverse_permutation(perm: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(sorted(range(len(perm)), key=lambda i: perm[i]))

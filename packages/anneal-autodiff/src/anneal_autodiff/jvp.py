"""Forward mode: one tangent (Jacobian-vector) rule per op, as a pattern table.

A rule receives the node (``ret``) and the tangents of its sources (``ctx``, None where a
tangent is zero) and returns the node's tangent. Tangents are ordinary UOps in the same
graph, so a loss that contains a JVP can itself be differentiated in reverse mode.
"""

from __future__ import annotations

import math

from anneal_autodiff.build import add, cos, erf_slope, max_mask, mul, neg, recip, scalar, shape_of, where
from anneal_ir import Ops, PatternMatcher, UOp, UPat
from anneal_ir.trace import derive

Tangents = tuple[UOp | None, ...]


def _zero_if_none(t: UOp | None, like: UOp) -> UOp:
    return t if t is not None else scalar(like, 0.0)


def add_jvp(ctx: Tangents, ret: UOp) -> UOp:
    ta, tb = ctx
    if ta is None or tb is None:
        return ta if tb is None else tb  # type: ignore[return-value]
    return add(ta, tb)


def mul_jvp(ctx: Tangents, ret: UOp) -> UOp:
    (a, b), (ta, tb) = ret.src, ctx
    parts = [mul(ta, b) if ta is not None else None, mul(a, tb) if tb is not None else None]
    kept = [p for p in parts if p is not None]
    return kept[0] if len(kept) == 1 else add(kept[0], kept[1])


def neg_jvp(ctx: Tangents, ret: UOp) -> UOp:
    return neg(ctx[0])  # type: ignore[arg-type]


def max_jvp(ctx: Tangents, ret: UOp) -> UOp:
    a, b = ret.src
    ta, tb = _zero_if_none(ctx[0], ret), _zero_if_none(ctx[1], ret)
    share_b = add(a.alu(Ops.CMPLT, b).cast(ret.dtype), mul(a.alu(Ops.CMPEQ, b).cast(ret.dtype), scalar(ret, 0.5)))
    return add(mul(ta, add(scalar(ret, 1.0), neg(share_b))), mul(tb, share_b))


def exp2_jvp(ctx: Tangents, ret: UOp) -> UOp:
    return mul(mul(ctx[0], ret), scalar(ret, math.log(2)))  # type: ignore[arg-type]


def log2_jvp(ctx: Tangents, ret: UOp) -> UOp:
    (a,) = ret.src
    return mul(ctx[0], recip(mul(a, scalar(a, math.log(2)))))  # type: ignore[arg-type]


def sin_jvp(ctx: Tangents, ret: UOp) -> UOp:
    return mul(ctx[0], cos(ret.src[0]))  # type: ignore[arg-type]


def erf_jvp(ctx: Tangents, ret: UOp) -> UOp:
    return mul(ctx[0], erf_slope(ret.src[0]))  # type: ignore[arg-type]


def sqrt_jvp(ctx: Tangents, ret: UOp) -> UOp:
    return mul(ctx[0], recip(mul(ret, scalar(ret, 2.0))))  # type: ignore[arg-type]


def reciprocal_jvp(ctx: Tangents, ret: UOp) -> UOp:
    return neg(mul(ctx[0], mul(ret, ret)))  # type: ignore[arg-type]


def zero_jvp(ctx: Tangents, ret: UOp) -> UOp | None:
    return None  # piecewise constant or integer-valued: no tangent


def where_jvp(ctx: Tangents, ret: UOp) -> UOp:
    c = ret.src[0]
    return where(c, _zero_if_none(ctx[1], ret), _zero_if_none(ctx[2], ret))


def cast_jvp(ctx: Tangents, ret: UOp) -> UOp | None:
    return ctx[0].cast(ret.dtype) if ret.dtype.is_float else None  # type: ignore[union-attr]


def same_op_jvp(ctx: Tangents, ret: UOp) -> UOp:
    """Movement ops, sum-reductions and CONTIGUOUS are linear: apply the same op to the tangent."""
    t = ctx[0]
    assert t is not None
    return UOp(ret.op, t.dtype, (t,), ret.arg)


def reduce_jvp(ctx: Tangents, ret: UOp) -> UOp:
    if ret.arg[0] is Ops.ADD:
        return same_op_jvp(ctx, ret)
    src, t = ret.src[0], ctx[0]
    assert t is not None
    return UOp(Ops.REDUCE_AXIS, t.dtype, (mul(t, max_mask(src, ret)),), (Ops.ADD, ret.arg[1]))


def value_jvp(ctx: Tangents, ret: UOp) -> UOp | None:
    return ctx[0]  # a composite with its own reverse rule: forward mode runs through the graph of its value


def realized_jvp(ctx: Tangents, ret: UOp) -> UOp | None:
    return ctx[1]  # the tangent of the graph that computed the value


jvp_rules = PatternMatcher([
    (UPat(Ops.ADD, name="ret"), add_jvp),
    (UPat(Ops.MUL, name="ret"), mul_jvp),
    (UPat(Ops.NEG, name="ret"), neg_jvp),
    (UPat(Ops.MAX, name="ret"), max_jvp),
    (UPat(Ops.EXP2, name="ret"), exp2_jvp),
    (UPat(Ops.LOG2, name="ret"), log2_jvp),
    (UPat(Ops.SIN, name="ret"), sin_jvp),
    (UPat(Ops.SQRT, name="ret"), sqrt_jvp),
    (UPat(Ops.ERF, name="ret"), erf_jvp),
    (UPat(Ops.RECIPROCAL, name="ret"), reciprocal_jvp),
    (UPat((Ops.TRUNC, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.IDIV, Ops.MOD, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL,
           Ops.SHR, Ops.BITCAST, Ops.DETACH, Ops.THREEFRY), name="ret"), zero_jvp),
    (UPat(Ops.WHERE, name="ret"), where_jvp),
    (UPat(Ops.CAST, name="ret"), cast_jvp),
    (UPat((Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP, Ops.CONTIGUOUS, Ops.COPY),
          name="ret"), same_op_jvp),
    (UPat(Ops.REALIZED, name="ret"), realized_jvp),
    (UPat(Ops.CUSTOM_VJP, name="ret"), value_jvp),
    (UPat(Ops.REDUCE_AXIS, name="ret"), reduce_jvp),
], name="jvp")  # fmt: skip


def jvp_rule(ret: UOp, tangents: Tangents) -> UOp | None:
    """ret's tangent from its sources' tangents (None: zero)."""
    found = jvp_rules.first_match(ret)
    if found is None:
        raise NotImplementedError(f"no tangent rule for {ret.op.name}")
    rule, store = found
    return rule.fn(ctx=tangents, **store)


def compute_tangents(outputs: list[UOp], tangents: dict[UOp, UOp]) -> list[UOp | None]:
    """Push the given input tangents forward through the graph of outputs (None = zero)."""
    known: dict[UOp, UOp | None] = dict(tangents)
    sink_order = UOp(Ops.SINK, src=tuple(outputs)).toposort()
    for node in sink_order:
        if node in known or not node.src or node.op is Ops.SINK:
            continue
        src_t = tuple(known.get(s) for s in node.src)
        known[node] = None if all(t is None for t in src_t) else derive(node, "jvp", jvp_rule, node, src_t)
    for out in outputs:
        t = known.get(out)
        assert t is None or shape_of(t) == shape_of(out), f"tangent shape {t.shape} != {out.shape} for {out.op}"
    return [known.get(o) for o in outputs]

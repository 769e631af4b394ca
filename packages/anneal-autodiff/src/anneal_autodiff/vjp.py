"""Reverse mode: one vector-Jacobian rule per op, as a pattern table.

A rule receives the output's gradient (``ctx``) and the node (``ret``) and returns one
gradient per source, or None for a source that gets no gradient (comparisons, integer
ops, indices). Gradients are ordinary tensor-level UOps: the scheduler fuses them with
the forward graph like anything else.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, cast

from anneal_autodiff.build import (
    add,
    cos,
    erf_slope,
    expand,
    full,
    inverse_permutation,
    max_mask,
    mul,
    neg,
    recip,
    reshape,
    scalar,
    shape_of,
    sum_to,
    where,
)
from anneal_ir import Ops, PatternMatcher, UOp, UPat
from anneal_ir.trace import derive

Grads = tuple[UOp | None, ...]


def add_vjp(ctx: UOp, ret: UOp) -> Grads:
    return ctx, ctx


def mul_vjp(ctx: UOp, ret: UOp) -> Grads:
    a, b = ret.src
    return mul(ctx, b), mul(ctx, a)


def neg_vjp(ctx: UOp, ret: UOp) -> Grads:
    return (neg(ctx),)


def max_vjp(ctx: UOp, ret: UOp) -> Grads:
    a, b = ret.src
    # ties split the gradient evenly, as torch.maximum does
    share = add(a.alu(Ops.CMPLT, b).cast(ctx.dtype), mul(a.alu(Ops.CMPEQ, b).cast(ctx.dtype), scalar(ctx, 0.5)))
    to_b = mul(ctx, share)
    return add(ctx, neg(to_b)), to_b


def exp2_vjp(ctx: UOp, ret: UOp) -> Grads:
    return (mul(mul(ctx, ret), scalar(ret, math.log(2))),)


def log2_vjp(ctx: UOp, ret: UOp) -> Grads:
    (a,) = ret.src
    return (mul(ctx, recip(mul(a, scalar(a, math.log(2))))),)


def sin_vjp(ctx: UOp, ret: UOp) -> Grads:
    return (mul(ctx, cos(ret.src[0])),)


def erf_vjp(ctx: UOp, ret: UOp) -> Grads:
    return (mul(ctx, erf_slope(ret.src[0])),)


def sqrt_vjp(ctx: UOp, ret: UOp) -> Grads:
    return (mul(ctx, recip(mul(ret, scalar(ret, 2.0)))),)


def reciprocal_vjp(ctx: UOp, ret: UOp) -> Grads:
    return (neg(mul(ctx, mul(ret, ret))),)


def trunc_vjp(ctx: UOp, ret: UOp) -> Grads:
    return (scalar(ctx, 0.0),)  # piecewise constant: zero almost everywhere, as torch


def where_vjp(ctx: UOp, ret: UOp) -> Grads:
    c = ret.src[0]
    zero = scalar(ctx, 0.0)
    return None, where(c, ctx, zero), where(c, zero, ctx)


def cast_vjp(ctx: UOp, ret: UOp) -> Grads:
    src = ret.src[0]
    return (ctx.cast(src.dtype) if src.dtype.is_float else None,)


def no_gradient(ctx: UOp, ret: UOp) -> Grads:
    return tuple(None for _ in ret.src)


def reshape_vjp(ctx: UOp, ret: UOp) -> Grads:
    return (reshape(ctx, shape_of(ret.src[0])),)


def permute_vjp(ctx: UOp, ret: UOp) -> Grads:
    return (UOp(Ops.PERMUTE, ctx.dtype, (ctx,), inverse_permutation(ret.arg)),)


def expand_vjp(ctx: UOp, ret: UOp) -> Grads:
    return (sum_to(ctx, shape_of(ret.src[0])),)


def pad_vjp(ctx: UOp, ret: UOp) -> Grads:
    src_shape = shape_of(ret.src[0])
    return (UOp(Ops.SHRINK, ctx.dtype, (ctx,), tuple((b, b + s) for (b, _), s in zip(ret.arg, src_shape))),)


def shrink_vjp(ctx: UOp, ret: UOp) -> Grads:
    src_shape = shape_of(ret.src[0])
    return (UOp(Ops.PAD, ctx.dtype, (ctx,), tuple((b, s - e) for (b, e), s in zip(ret.arg, src_shape))),)


def flip_vjp(ctx: UOp, ret: UOp) -> Grads:
    return (UOp(Ops.FLIP, ctx.dtype, (ctx,), ret.arg),)


def reduce_vjp(ctx: UOp, ret: UOp) -> Grads:
    src = ret.src[0]
    spread = expand(ctx, shape_of(src))
    if ret.arg[0] is Ops.ADD:
        return (spread,)
    return (mul(spread, max_mask(src, ret)),)  # max: to the maxima, ties share


def identity_vjp(ctx: UOp, ret: UOp) -> Grads:
    return (ctx,)


def detach_vjp(ctx: UOp, ret: UOp) -> Grads:
    return (None,)


def custom_vjp(ctx: UOp, ret: UOp) -> Grads:
    """A composite with its own rule: the primals' gradients from it, none through the graph of its value."""
    return None, *ret.arg.vjp(ctx, ret.src[1:])


def realized_vjp(ctx: UOp, ret: UOp) -> Grads:
    return None, ctx  # the buffer holds the value; the graph that computed it carries the gradient


def copy_vjp(ctx: UOp, ret: UOp) -> Grads:
    src_device, dst_device = ret.arg
    return (UOp(Ops.COPY, ctx.dtype, (ctx,), (dst_device, src_device)),)  # back where the value came from


# PatternMatcher types its rules as rewrites (returning a node); these return Grads, read back by vjp_rule
_vjp_table: list[tuple[UPat, Callable[..., Any]]] = [
    (UPat(Ops.ADD, name="ret"), add_vjp),
    (UPat(Ops.MUL, name="ret"), mul_vjp),
    (UPat(Ops.NEG, name="ret"), neg_vjp),
    (UPat(Ops.MAX, name="ret"), max_vjp),
    (UPat(Ops.EXP2, name="ret"), exp2_vjp),
    (UPat(Ops.LOG2, name="ret"), log2_vjp),
    (UPat(Ops.SIN, name="ret"), sin_vjp),
    (UPat(Ops.SQRT, name="ret"), sqrt_vjp),
    (UPat(Ops.ERF, name="ret"), erf_vjp),
    (UPat(Ops.RECIPROCAL, name="ret"), reciprocal_vjp),
    (UPat(Ops.TRUNC, name="ret"), trunc_vjp),
    (UPat(Ops.WHERE, name="ret"), where_vjp),
    (UPat(Ops.CAST, name="ret"), cast_vjp),
    (UPat((Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.IDIV, Ops.MOD, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR,
           Ops.BITCAST, Ops.THREEFRY), name="ret"), no_gradient),
    (UPat(Ops.RESHAPE, name="ret"), reshape_vjp),
    (UPat(Ops.PERMUTE, name="ret"), permute_vjp),
    (UPat(Ops.EXPAND, name="ret"), expand_vjp),
    (UPat(Ops.PAD, name="ret"), pad_vjp),
    (UPat(Ops.SHRINK, name="ret"), shrink_vjp),
    (UPat(Ops.FLIP, name="ret"), flip_vjp),
    (UPat(Ops.REDUCE_AXIS, name="ret"), reduce_vjp),
    (UPat(Ops.CONTIGUOUS, name="ret"), identity_vjp),
    (UPat(Ops.DETACH, name="ret"), detach_vjp),
    (UPat(Ops.CUSTOM_VJP, name="ret"), custom_vjp),
    (UPat(Ops.REALIZED, name="ret"), realized_vjp),
    (UPat(Ops.COPY, name="ret"), copy_vjp),
]  # fmt: skip
vjp_rules = PatternMatcher(_vjp_table, name="vjp")


def vjp_rule(ret: UOp, grad: UOp) -> Grads:
    """The gradients of ret's sources, given ret's gradient."""
    found = vjp_rules.first_match(ret)
    if found is None:
        raise NotImplementedError(f"no gradient rule for {ret.op.name}")
    rule, store = found
    return cast(Grads, rule.fn(ctx=grad, **store))  # a rule of this table returns Grads, not a node


def compute_gradient(root: UOp, root_grad: UOp, targets: set[UOp]) -> dict[UOp, UOp]:
    """Gradients of root (seeded with root_grad) with respect to each reachable target."""
    order = root.toposort()
    on_path: set[UOp] = set()
    for node in order:  # sources first: a node leads to a target if it is one or a source does
        if node in targets or any(s in on_path for s in node.src):
            on_path.add(node)
    grads: dict[UOp, UOp] = {root: root_grad}
    for node in reversed(order):
        g = grads.get(node)
        if g is None or node not in on_path or not node.src:
            continue
        # derive: a compile trace (anneal viz) files the gradient under the module that built node
        for src, sg in zip(node.src, derive(node, "backward", vjp_rule, node, g)):
            if sg is None or src not in on_path:
                continue
            grads[src] = sg if src not in grads else derive(src, "backward", add, grads[src], sg)
    return {t: grads[t] for t in targets if t in grads}


def zeros_like(u: UOp) -> UOp:
    return full(shape_of(u), u, 0.0)

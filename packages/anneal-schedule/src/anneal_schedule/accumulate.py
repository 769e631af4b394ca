"""Sums of half-precision values accumulate in float32, as torch's do (its CPU and CUDA matmuls and sums).

A float16 accumulator loses a digit per tenfold of the reduction's length: a 512-long matmul gradient came out
ten times less precise than torch's. A sum of products keeps its product form (each factor widened: a float16
product is exact in float32), so the contraction is still found and tiled; the result is rounded once.
"""

from __future__ import annotations

from anneal_ir import DType, Ops, UOp, dtypes, graph_rewrite
from anneal_ir.pattern import PatternMatcher, UPat

NARROW = (dtypes.float16, dtypes.bfloat16)


def _widened_product(red: UOp, a: UOp, b: UOp) -> UOp | None:
    """sum_k a*b in half -> half(sum_k float(a) * float(b))."""
    if red.arg is not Ops.ADD or red.dtype not in NARROW:
        return None
    product = a.cast(dtypes.float32).alu(Ops.MUL, b.cast(dtypes.float32))
    return _narrowed(red, product, red.dtype)


def _widened_sum(red: UOp, x: UOp) -> UOp | None:
    """sum_k x in half -> half(sum_k float(x))."""
    if red.arg is not Ops.ADD or red.dtype not in NARROW or x.op is Ops.MUL:
        return None
    return _narrowed(red, x.cast(dtypes.float32), red.dtype)


def _narrowed(red: UOp, body: UOp, dtype: DType) -> UOp:
    return UOp(Ops.REDUCE, dtypes.float32, (body, *red.src[1:]), Ops.ADD).cast(dtype)


wide_accumulators = PatternMatcher([
    (UPat(Ops.REDUCE, src=(UPat(Ops.MUL, src=(UPat.var("a"), UPat.var("b"))),), allow_any_len=True, name="red"),
     _widened_product),
    (UPat(Ops.REDUCE, src=(UPat.var("x"),), allow_any_len=True, name="red"), _widened_sum),
], "wide_accumulators")  # fmt: skip


def accumulate_wide(ast: UOp) -> UOp:
    """ast with every half-precision sum accumulated in float32 (ast itself when it has none)."""
    if not any(n.op is Ops.REDUCE and n.dtype in NARROW for n in ast.toposort()):
        return ast
    return graph_rewrite(ast, wide_accumulators, name="wide_accumulators")

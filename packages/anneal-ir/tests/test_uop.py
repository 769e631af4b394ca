"""UOp: hash-consing, content keys, construction helpers, toposort, and value bounds."""

from __future__ import annotations

import gc
import math
import pickle
import weakref

import pytest

from anneal_ir import Ops, UOp, dtypes
from anneal_ir.bounds import dtype_bounds
from anneal_ir.uop import UOpMeta, _arg_key

I64, I32, I8, B, F32 = dtypes.int64, dtypes.int32, dtypes.int8, dtypes.bool, dtypes.float32


def var(name: str, lo: int, hi: int, dtype: object = I64) -> UOp:
    return UOp(Ops.DEFINE_VAR, dtype, (), (name, lo, hi))  # type: ignore[arg-type]


def rng(end: int, axis: int = 0) -> UOp:
    return UOp(Ops.RANGE, I64, (UOp.const(I64, end),), (axis, "loop"))


# ---- hash-consing ----


def test_equal_nodes_are_the_same_object() -> None:
    x = var("x", 0, 9)
    assert var("x", 0, 9) is x
    assert x + 1 is x + 1
    assert UOp(Ops.ADD, I64, (x, UOp.const(I64, 1))) is x + 1
    assert var("x", 0, 10) is not x
    assert UOp.const(I32, 1) is not UOp.const(I64, 1)  # dtype is part of identity


def test_const_args_keep_their_type() -> None:
    assert UOp.const(B, True) is not UOp.const(I64, 1)
    assert UOp.const(F32, 0.0) is not UOp.const(F32, -0.0)  # floats by their bits
    nan = UOp.const(F32, math.nan)
    assert UOp.const(F32, math.nan) is nan  # a NaN constant is found again
    assert UOp.const(I64, 3.7).arg == 3 and UOp.const(F32, 2).arg == 2.0  # cast_value to the dtype
    assert UOp.const(B, 5).arg is True


def test_dead_nodes_are_freed() -> None:
    gc.collect()  # garbage of earlier tests, collected mid-test, would skew the counts below
    before = len(UOpMeta._live)
    nodes = [var(f"tmp{i}", 0, i) * 3 for i in range(50)]
    refs = [weakref.ref(n) for n in nodes]
    assert all(UOpMeta._live.get(k) is n for n in nodes for k in [(n.op, n.dtype, n.src, _arg_key(n.arg))])
    del nodes
    gc.collect()
    assert all(r() is None for r in refs)  # the table held them weakly
    assert len(UOpMeta._live) <= before + 5


def test_pickle_returns_the_live_node() -> None:
    e = var("x", 0, 9) * 4 + rng(3)
    assert pickle.loads(pickle.dumps(e)) is e


def test_replace() -> None:
    x = var("x", 0, 9)
    e = x + 1
    assert e.replace(op=Ops.MUL) is x * 1
    assert e.replace(src=(x, x)) is x + x
    assert e.replace() is e


# ---- content key ----


def test_key_is_structural() -> None:
    x = var("x", 0, 9)
    assert (x + 1).key == (x + 1).key
    assert (x + 1).key != (x + 2).key
    assert (x + 1).key != (x * 1).key
    assert UOp.const(F32, 0.0).key != UOp.const(F32, -0.0).key
    assert len((x + 1).key) == 32


# ---- helpers ----


def test_operator_helpers() -> None:
    x, y = var("x", 0, 9), var("y", 0, 9)
    assert (x - y).op is Ops.ADD and (x - y).src[1] is y * -1  # subtraction is x + y*-1
    assert (-x).op is Ops.MUL  # ints negate by multiplying with -1
    f = UOp(Ops.DEFINE_VAR, F32, (), ("f", 0, 1))
    assert (-f).op is Ops.NEG
    assert (x < y).dtype == B and x.ne(y).dtype == B and x.eq(y).dtype == B
    assert (2 + x).src[0].op is Ops.CONST and (3 * x).src[0].op is Ops.CONST
    w = (x < 5).where(x, 0)
    assert w.op is Ops.WHERE and w.dtype == I64 and w.src[2] is UOp.const(I64, 0)
    assert x.cast(I64) is x and x.cast(I32).op is Ops.CAST


def test_toposort_sources_first_and_deep() -> None:
    x = var("x", 0, 9)
    e = (x + 1) * (x + 1)
    order = e.toposort()
    assert order[-1] is e and order.index(x) < order.index(x + 1)
    assert len(order) == len(set(order)) == 4
    deep = x
    for _ in range(5000):  # no recursion limit
        deep = deep + 1
    assert len(deep.toposort()) == 5000 + 2
    assert list(deep.walk())[-1] is deep


def test_pretty_prints_every_node_once() -> None:
    x = var("x", 0, 9)
    text = repr(x * 2 + 1)
    assert "DEFINE_VAR" in text and text.count("\n") == 4


# ---- bounds ----


def test_leaf_bounds() -> None:
    assert (var("x", -3, 7).vmin, var("x", -3, 7).vmax) == (-3, 7)
    assert (rng(5).vmin, rng(5).vmax) == (0, 4)
    assert (UOp.const(I64, 4).vmin, UOp.const(I64, 4).vmax) == (4, 4)
    assert dtype_bounds(I8) == (-128, 127) and dtype_bounds(dtypes.uint8) == (0, 255)
    assert dtype_bounds(B) == (False, True) and dtype_bounds(F32) == (-math.inf, math.inf)


@pytest.mark.parametrize(
    "expr,lo,hi",
    [
        (var("x", -3, 7) + var("y", 1, 2), -2, 9),
        (var("x", -3, 7) * -2, -14, 6),
        (var("x", -3, 7) * var("y", -2, 5), -15, 35),
        (-var("x", -3, 7), -7, 3),
        (var("x", -3, 7).maximum(var("y", 0, 2)), 0, 7),
        (var("x", 0, 9) // 4, 0, 2),
        (var("x", -9, 9) // 4, -2, 2),  # truncation toward zero
        (var("x", -9, -5) // 4, -2, -1),
        (var("x", 0, 3) % 8, 0, 3),
        (var("x", 0, 30) % 8, 0, 7),
        (var("x", -30, 30) % 8, -7, 7),  # sign of the dividend
        (var("x", -30, 0) % 8, -7, 0),
        ((var("x", 0, 9) < 5).where(var("x", 0, 9), UOp.const(I64, 20)), 0, 20),
        (var("x", 0, 9).cast(I32), 0, 9),
    ],
)
def test_alu_bounds(expr: UOp, lo: int, hi: int) -> None:
    assert (expr.vmin, expr.vmax) == (lo, hi)


def test_comparison_bounds() -> None:
    x = var("x", 0, 9)
    assert ((x < 10).vmin, (x < 10).vmax) == (True, True)
    assert ((x < 0).vmin, (x < 0).vmax) == (False, False)
    assert ((x < 5).vmin, (x < 5).vmax) == (False, True)
    assert (x.ne(20).vmin, x.eq(20).vmax) == (True, False)
    both = (x < 10).logical_and(x < 20)
    assert (both.vmin, both.vmax) == (True, True)


def test_bounds_say_nothing_where_it_may_wrap() -> None:
    v = var("v", 0, 100, I8)
    assert ((v * 2).vmin, (v * 2).vmax) == (-128, 127)
    assert ((v + 100).vmin, (v + 100).vmax) == (-128, 127)
    assert ((v + 27).vmin, (v + 27).vmax) == (27, 127)


def test_division_bounds_are_exact_for_big_int64() -> None:
    big = -(2**62) - 1
    d = var("x", big, big) // 3
    assert d.vmin == d.vmax == -((2**62 + 1) // 3)  # no float rounding in the truncation


def test_float_division_bounds_do_not_crash() -> None:
    f = UOp(Ops.LOAD, F32, (UOp(Ops.DEFINE_GLOBAL, F32, (), 0), UOp.const(I64, 0)))
    two = UOp.const(F32, 2.0)
    assert (f.alu(Ops.IDIV, two).vmin, f.alu(Ops.MOD, two).vmax) == (-math.inf, math.inf)


def test_a_pickled_graph_comes_back_as_the_same_nodes_and_dtypes() -> None:
    from anneal_ir.uop import flatten, unflatten

    x = UOp(Ops.DEFINE_GLOBAL, dtypes.bfloat16, (), 0)
    root = UOp(Ops.SINK, dtypes.void, (UOp(Ops.CAST, dtypes.float32, (x,)),))
    back = pickle.loads(pickle.dumps(flatten(root)))
    assert back[0][1] is dtypes.bfloat16 and back[-1][1] is dtypes.void  # the table's objects: `is` holds
    assert unflatten(back) is root

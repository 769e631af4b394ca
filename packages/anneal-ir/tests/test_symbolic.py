"""Symbolic simplification: rule families, then property tests against a reference evaluator."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anneal_ir import DType, Ops, UOp, dtypes
from anneal_ir.bounds import dtype_bounds
from anneal_ir.pattern import graph_rewrite
from anneal_ir.symbolic import (
    c_mod,
    exec_alu,
    simplify,
    simplify_valid,
    symbolic_simple,
    trunc_div,
    uop_given_valid,
    wrap_int,
)

I64, I32, I8, B = dtypes.int64, dtypes.int32, dtypes.int8, dtypes.bool


# ---------------------------------------------------------------------------------------------
# helpers: builders, a printer and the reference evaluator (C semantics: truncating division)
# ---------------------------------------------------------------------------------------------


def c(v: Any, dtype: DType = I64) -> UOp:
    return UOp.const(dtype, v)


def rng(end: int, axis: int, dtype: DType = I64) -> UOp:
    return UOp(Ops.RANGE, dtype, (UOp.const(dtype, end),), (axis, "loop"))


def var(name: str, lo: int, hi: int, dtype: DType = I64) -> UOp:
    return UOp(Ops.DEFINE_VAR, dtype, (), (name, lo, hi))


def NOT(x: UOp) -> UOp:  # noqa: N802
    return x.ne(True)


def nodes(u: UOp) -> int:
    return len(u.toposort())


_SYM = {Ops.ADD: "+", Ops.MUL: "*", Ops.IDIV: "//", Ops.MOD: "%", Ops.CMPLT: "<", Ops.CMPNE: "!=",
        Ops.CMPEQ: "==", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^"}  # fmt: skip


def show(u: UOp) -> str:
    """Infix text of an expression (tests compare against it for readability)."""
    if u.op is Ops.CONST:
        return repr(u.arg)
    if u.op is Ops.RANGE:
        return f"r{u.arg[0]}"
    if u.op is Ops.DEFINE_VAR:
        return str(u.arg[0])
    if u.op in _SYM:
        return f"({show(u.src[0])}{_SYM[u.op]}{show(u.src[1])})"
    return f"{u.op.name.lower()}({','.join(show(s) for s in u.src)})"


def _bits_wrap(v: int, dtype: DType) -> int:
    bits = dtype.bits
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >= 1 << (bits - 1) else v


def tdiv(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def evaluate(root: UOp, env: dict[UOp, int]) -> Any:
    """Reference semantics of int/bool index math: wrapping ints, C division and remainder."""
    vals: dict[UOp, Any] = {}
    for n in root.toposort():
        s: list[Any] = [vals[x] for x in n.src]
        if n.op is Ops.CONST:
            v: Any = n.arg
        elif n.op in (Ops.DEFINE_VAR, Ops.RANGE):
            v = env[n]
        elif n.op is Ops.ADD:
            v = s[0] + s[1]
        elif n.op is Ops.MUL:
            v = s[0] * s[1]
        elif n.op is Ops.NEG:
            v = -s[0]
        elif n.op is Ops.IDIV:
            v = tdiv(s[0], s[1])
        elif n.op is Ops.MOD:
            v = s[0] - s[1] * tdiv(s[0], s[1])
        elif n.op is Ops.MAX:
            v = max(s[0], s[1])
        elif n.op is Ops.CMPLT:
            v = s[0] < s[1]
        elif n.op is Ops.CMPNE:
            v = s[0] != s[1]
        elif n.op is Ops.CMPEQ:
            v = s[0] == s[1]
        elif n.op is Ops.AND:
            v = s[0] & s[1]
        elif n.op is Ops.OR:
            v = s[0] | s[1]
        elif n.op is Ops.XOR:
            v = s[0] ^ s[1]
        elif n.op is Ops.WHERE:
            v = s[1] if s[0] else s[2]
        elif n.op is Ops.CAST:
            v = int(s[0])
        elif n.op is Ops.LOAD:
            v = None
        else:
            raise NotImplementedError(n.op)
        if n.dtype == B:
            v = bool(v)
        elif n.dtype.is_int:
            v = _bits_wrap(int(v), n.dtype)
        vals[n] = v
    return vals[root]


def leaves(u: UOp) -> list[UOp]:
    return [n for n in u.toposort() if n.op in (Ops.DEFINE_VAR, Ops.RANGE)]


def leaf_range(u: UOp) -> tuple[int, int]:
    return (u.arg[1], u.arg[2]) if u.op is Ops.DEFINE_VAR else (0, u.src[0].arg - 1)


def assert_same(a: UOp, b: UOp, envs: list[dict[UOp, int]]) -> None:
    for env in envs:
        where = {show(k): v for k, v in env.items()}
        assert evaluate(a, env) == evaluate(b, env), f"{show(a)} != {show(b)} at {where}"


def all_envs(u: UOp, limit: int = 4000) -> list[dict[UOp, int]]:
    """Every assignment of u's variables (for small domains)."""
    ls = leaves(u)
    domains = [range(leaf_range(x)[0], leaf_range(x)[1] + 1) for x in ls]
    assert math.prod(len(d) for d in domains) <= limit
    return [dict(zip(ls, vs)) for vs in itertools.product(*domains)]


def check(before: UOp, expected: str | None = None) -> UOp:
    """Simplify, compare against every assignment, and optionally against the expected text."""
    after = simplify(before)
    assert_same(before, after, all_envs(before))
    if expected is not None:
        assert show(after) == expected
    return after


r0, r1, r2 = rng(8, 0), rng(4, 1), rng(3, 2)
x = var("x", 0, 9)
y = var("y", -5, 5)
n = var("n", -9, 0)
w = var("w", -40, 40)
neg = var("neg", -5, -1)


# ---------------------------------------------------------------------------------------------
# device arithmetic helpers
# ---------------------------------------------------------------------------------------------


def test_trunc_div_and_c_mod() -> None:
    assert [trunc_div(a, b) for a, b in ((7, 2), (-7, 2), (7, -2), (-7, -2))] == [3, -3, -3, 3]
    assert [c_mod(a, b) for a, b in ((7, 2), (-7, 2), (7, -2), (-7, -2))] == [1, -1, 1, -1]
    big = -(2**62) - 1
    assert trunc_div(big, 3) == -((2**62 + 1) // 3)  # no float rounding


def test_wrap_int() -> None:
    assert wrap_int(2**31, I32) == -(2**31)
    assert wrap_int(-1, dtypes.uint8) == 255
    assert wrap_int(300, I8) == 44
    assert wrap_int(2**63, I64) == -(2**63)


# ---------------------------------------------------------------------------------------------
# constant folding
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expr,value",
    [
        (c(2**31 - 1, I32) + c(1, I32), -(2**31)),  # wraps like the device
        (c(100, I8) * c(3, I8), 44),
        (c(-7) // c(2), -3),  # truncation, not floor
        (c(-7) % c(2), -1),  # sign of the dividend
        (c(7) % c(-2), 1),
        (c(-(2**31), I32) // c(-1, I32), -(2**31)),  # the one overflowing division wraps
        (c(5).maximum(c(-3)), 5),
        (-c(5), -5),
        (c(3) < c(4), True),
        (c(3).ne(c(3)), False),
        (c(3).eq(c(3)), True),
        (c(6).alu(Ops.AND, c(3)), 2),
        (c(6).alu(Ops.OR, c(3)), 7),
        (c(6).alu(Ops.XOR, c(3)), 5),
        (c(1, I32).alu(Ops.SHL, c(31, I32)), -(2**31)),
        (c(-8, I32).alu(Ops.SHR, c(1, I32)), -4),
        (c(True, B).logical_and(c(False, B)), False),
        (c(True, B).alu(Ops.OR, c(False, B)), True),
        (c(True, B).where(c(3), c(4)), 3),
        (c(False, B).where(c(3), c(4)), 4),
        (c(300).cast(I8), 44),
        (c(True, B).cast(I32), 1),
        (c(-2.7, dtypes.float32).cast(I32), -2),
        (c(3).cast(B), True),
    ],
)
def test_constant_folding(expr: UOp, value: Any) -> None:
    out = graph_rewrite(expr, symbolic_simple)
    assert out.op is Ops.CONST and out.arg == value and type(out.arg) is type(value)


def test_float_folding_rounds_to_the_dtype() -> None:
    out = simplify(c(0.1, dtypes.float32) + c(0.2, dtypes.float32))
    assert out.op is Ops.CONST and out.arg == float(np_f32(0.1) + np_f32(0.2))
    assert simplify(c(4.0, dtypes.float32).alu(Ops.SQRT)).arg == 2.0
    assert simplify(c(1.0, dtypes.float32) < c(2.0, dtypes.float32)).arg is True


def np_f32(v: float) -> Any:
    import numpy as np

    return np.float32(v)


@pytest.mark.parametrize(
    "expr",
    [
        c(1) // c(0),  # division by zero is the device's business
        c(1) % c(0),
        c(1, I32).alu(Ops.SHL, c(32, I32)),  # over-wide shift: C and WGSL disagree
        c(0.0, dtypes.float32).alu(Ops.RECIPROCAL),  # inf from finite: no literal in WGSL
        c(-1.0, dtypes.float32).alu(Ops.LOG2),  # nan from finite
        c(1e30, dtypes.float32).cast(I32),  # out of range float -> int
        c(1.5, dtypes.bfloat16) + c(1.0, dtypes.bfloat16),  # bfloat16 is never folded
    ],
)
def test_no_fold(expr: UOp) -> None:
    assert simplify(expr) is expr


def test_exec_alu_direct() -> None:
    assert exec_alu(Ops.IDIV, I64, [-9, 4], I64) == -2
    assert exec_alu(Ops.MOD, I64, [-9, 4], I64) == -1
    assert exec_alu(Ops.ADD, dtypes.uint8, [250, 10], dtypes.uint8) == 4
    assert exec_alu(Ops.CMPLT, B, [False, True], B) is True
    assert exec_alu(Ops.MUL, dtypes.float16, [300.0, 300.0], dtypes.float16) is None  # overflows to inf


# ---------------------------------------------------------------------------------------------
# identities and bounds folding (symbolic_simple)
# ---------------------------------------------------------------------------------------------


def test_identities() -> None:
    s = symbolic_simple
    f = var("f", 0, 1, dtypes.float32)
    b = x < 5
    assert graph_rewrite(x + 0, s) is x
    assert graph_rewrite(c(0) + x, s) is x
    assert graph_rewrite(x * 1, s) is x
    assert graph_rewrite(f * 1.0, s) is f
    assert graph_rewrite(x * 0, s) is c(0)
    assert graph_rewrite(f * 0.0, s) is not c(0.0, dtypes.float32)  # inf * 0 is nan
    assert graph_rewrite(y // 1, s) is y
    assert show(graph_rewrite(y // -1, s)) == "(y*-1)"
    assert graph_rewrite(y % 1, s) is c(0)
    assert graph_rewrite(y % -1, s) is c(0)
    assert graph_rewrite(f.alu(Ops.NEG).alu(Ops.NEG), s) is f
    minus_y = -y
    assert graph_rewrite(-minus_y, s) is y
    assert graph_rewrite(y - y, s) is c(0)
    assert graph_rewrite(y.maximum(y), s) is y
    assert graph_rewrite(b.logical_and(True), s) is b
    assert graph_rewrite(b.logical_and(False), s) is c(False, B)
    assert graph_rewrite(b.alu(Ops.OR, c(True, B)), s) is c(True, B)
    assert graph_rewrite(b.alu(Ops.OR, c(False, B)), s) is b
    assert graph_rewrite(b.logical_and(b), s) is b
    assert graph_rewrite(NOT(NOT(b)), s) is b
    assert graph_rewrite(b.ne(False), s) is b
    assert graph_rewrite(b.eq(True), s) is b


def test_where_identities() -> None:
    s = symbolic_simple
    b = y < 2
    assert graph_rewrite(c(True, B).where(x, y), s) is x
    assert graph_rewrite(c(False, B).where(x, y), s) is y
    assert graph_rewrite(b.where(x, x), s) is x
    assert graph_rewrite(b.where(c(True, B), c(False, B)), s) is b
    assert graph_rewrite(NOT(b).where(x, y), s) is b.where(y, x)


def test_self_comparisons() -> None:
    f = var("f", 0, 1, dtypes.float32)
    assert simplify(y < y) is c(False, B)
    assert simplify(y.ne(y)) is c(False, B)
    assert simplify(y.eq(y)) is c(True, B)
    assert simplify(f.ne(f)) is f.ne(f)  # NaN != NaN


def test_bounds_folding() -> None:
    assert simplify(r0 < 10) is c(True, B)
    assert simplify(r0 < 0) is c(False, B)
    assert simplify(r0.ne(-1)) is c(True, B)
    assert simplify(r0.eq(9)) is c(False, B)
    assert simplify(r1 // 4) is c(0)
    assert simplify(y.maximum(c(-6))) is y
    assert simplify(r0.maximum(r1 + 7)) is r1 + 7
    one = rng(1, 5)
    assert simplify(one * 7 + x) is x  # an ALU of a size-1 range is 0
    assert simplify(one) is one  # but the RANGE itself is structure: never replaced


# ---------------------------------------------------------------------------------------------
# sums and products
# ---------------------------------------------------------------------------------------------


def test_canonical_sums_meet() -> None:
    assert simplify(c(3) + x) is simplify(x + 3)
    assert simplify(y + x) is simplify(x + y)
    assert simplify((x + 1) + (y + 2)) is simplify(y + x + 3)
    assert simplify(x * 3 * y) is simplify(y * (x * 3))
    assert simplify(x.maximum(y)) is simplify(y.maximum(x))
    assert simplify(x.ne(y)) is simplify(y.ne(x))
    assert simplify(c(4).ne(x)) is simplify(x.ne(4))


def test_term_combining() -> None:
    check(x * 2 + x * 3, "(x*5)")
    check((x + 1) + 2, "(x+3)")
    check(x + y + x * 4 + 7 - y, "((x*5)+7)")
    check(x * 3 - x * 3 + 2, "2")
    check((x + 2) * 4, "((x*4)+8)")
    check(-(x + y), "((x*-1)+(y*-1))")
    check(x.alu(Ops.NEG) + x, "0")
    check((x * 2) * 3, "(x*6)")


def test_sum_of_div_and_mod() -> None:
    check((x // 3) * 3 + x % 3, "x")
    check((y // 3) * 3 + y % 3, "y")  # the C identity holds for negatives too
    check(((x // 4) * 4 + x % 4) * 2 + 1, "((x*2)+1)")
    check(x % 4 * 5 + (x // 4) * 20, "(x*5)")
    check(((x // 4) % 3) * 4 + x % 4, "x")  # x in [0, 9]: x % 12 is x
    z = var("z", -30, 30)
    check(((z // 4) % 3) * 4 + z % 4, "(z%12)")


def test_wrapping_products_still_combine() -> None:
    v = var("v", -100, 100, I8)
    check(v * 100 + v * 100, None)  # exact in wrapping arithmetic: compares value by value


# ---------------------------------------------------------------------------------------------
# division and remainder
# ---------------------------------------------------------------------------------------------


def test_typical_index_expressions() -> None:
    e = (r0 * 4 + r1) // 4
    assert simplify(e) is r0 and nodes(simplify(e)) < nodes(e)
    e = (r0 * 4 + r1) % 4
    assert simplify(e) is r1
    flat = r0 * 12 + r1 * 3 + r2
    assert simplify(flat // 3 % 4) is r1
    assert simplify(flat // 12) is r0
    assert simplify(flat % 12 // 3) is r1
    assert simplify(flat % 3) is r2
    assert simplify((flat // 3) // 4) is r0
    assert simplify((r0 * 4 + r1) // 4 * 4 + (r0 * 4 + r1) % 4) is simplify(r0 * 4 + r1)
    e = x // 3 * 3 + x % 3
    assert simplify(e) is x and nodes(e) == 6 and nodes(simplify(e)) == 1


@pytest.mark.parametrize(
    "expr,expected",
    [
        ((r0 * 8 + r1 * 2) // 4, "((r0*2)+(r1//2))"),  # split: multiples of c out, the rest divided
        ((r0 * 8 + r1 * 2) % 4, "((r1%2)*2)"),  # gcd of the remainder and the divisor
        ((r0 * 6 + r1) % 4, "(((r0*2)+r1)%4)"),  # (x + c*k) % c
        ((r1 + 4) % 4, "r1"),
        ((r1 + 5) % 4, "((r1+1)%4)"),
        ((r0 * 4 + 3 - r1) // 4, "r0"),  # remainders taken as the nearest ones: 3 - r1 in [0, 4)
        ((r0 * 4 + 3 - r1) % 4, "((r1*-1)+3)"),
        ((x * 5) // 5, "x"),
        ((y * 5) // 5, "y"),  # exact division: any sign
        ((y * 6 + 3) // 3, "((y*2)+1)"),
        ((y * 5) % 5, "0"),
        (y // -2, "((y//2)*-1)"),  # divisors made positive
        (y % -2, "(y%2)"),
        ((w // 2) // 3, "(w//6)"),  # nested division, any sign
        ((y // 2) // 3, "0"),  # |y| <= 5
        ((w % 6) % 3, "(w%3)"),
        (x % 10, "x"),  # 0 <= x < c
        (x // 10, "0"),
        (y % 6, "y"),  # -c < y < c: trunc quotient 0
        ((n * 4 - 3) // 4, "n"),  # non-positive dividend: mirrored, -((-x) // c)
        ((n * 4 - 3) % 4, "-3"),
        ((n - 3) // 4, "((n+-3)//4)"),
        ((r1 * 2 + 1) % (r1 + 9), "((r1*2)+1)"),  # variable divisor, bounds
        ((r0 * 4 + r1) % (r1 + 9), None),
        ((x * neg) // neg, "x"),  # neg is never 0
        ((x * neg) % neg, "0"),
        ((x * (r1 + 1)) // (r1 + 1), "x"),
        ((x * (r1 + 1)) % (r1 + 1), "0"),
        (((r0 * 3 + r1) % 6) % 3, None),
        ((r0 % 8 + r1 * 8) % 4, "(r0%4)"),  # (y % m) % c with c | m
        ((r1 + 5) // 4, "(((r1+1)//4)+1)"),  # a constant's quotient moves out of a sum of positive terms
        ((r1 - 8) // 4, "((r1+-8)//4)"),  # ... but not out of a mirrored (negative) one
    ],
)
def test_div_mod_folding(expr: UOp, expected: str | None) -> None:
    check(expr, expected)


def test_div_not_folded_when_sign_unknown() -> None:
    # (y*4 + r)//4 is y + r//4 only for a non-negative sum: -4+1 truncates to 0, not -1
    e = (y * 4 + r1) // 4
    out = check(e)
    assert out.op is Ops.IDIV or any(u.op is Ops.IDIV for u in out.toposort())
    check((y * 4 + r1) % 4)


def test_no_fold_when_it_may_wrap() -> None:
    v = var("v", 0, 3, I8)
    e = (v * 64) // 64  # v*64 reaches 192: wraps in int8
    assert simplify(e) is not v
    assert_same(e, simplify(e), all_envs(e))
    w = var("w", 0, 1, I8)
    assert simplify((w * 64) // 64) is w  # 64 fits


# ---------------------------------------------------------------------------------------------
# comparisons
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expr,expected",
    [
        (x + 1 < 5, "(x<4)"),
        (c(-1) < r0 - 2, "(1<r0)"),
        (r0 * -1 < -3, "(3<r0)"),
        (x * 4 + r1 * 8 < 12, "((x+(r1*2))<3)"),
        (x * 4 < 10, "(x<3)"),
        (c(10) < x * 4, "(2<x)"),
        (x // 3 < 2, "(x<6)"),
        (y // 3 < 0, "(y<-2)"),
        ((x + 2).eq(5), "(x==3)"),
        ((x * 2).eq(5), "False"),
        ((x * 2).ne(5), "True"),
        ((y * -3).eq(6), "(y==-2)"),
        (r0 < r0 + 1, None),
    ],
)
def test_comparisons(expr: UOp, expected: str | None) -> None:
    check(expr, expected)


# ---------------------------------------------------------------------------------------------
# gates
# ---------------------------------------------------------------------------------------------


def test_simplify_valid_drops_implied_clauses() -> None:
    assert simplify_valid((x < 5).logical_and(x < 7)) is (x < 5)
    assert simplify_valid((x < 3).logical_and(c(5) < x)) is c(False, B)
    g = (c(0) < y).logical_and(y < 4).logical_and(y < 9)
    assert show(simplify_valid(g)) == "((0<y)&(y<4))"
    assert simplify_valid(x < 5) is (x < 5)
    # a clause implied through arithmetic on a bounded expression
    assert show(simplify_valid((r0 < 2).logical_and(r0 * 4 + r1 < 12))) == "(r0<2)"


def test_gate_rules_in_simplify() -> None:
    check((x < 5).logical_and(x < 7).logical_and(x < 6), "(x<5)")
    check(NOT(x < 3).logical_and(x < 2), "False")
    check((r0 < 3).logical_and(c(1) < r0).logical_and(r1 < 2), None)
    assert check((x < 5).logical_and(y < 1).logical_and(x < 9)) is simplify((y < 1).logical_and(x < 5))


def test_index_under_gate() -> None:
    z = var("z", 0, 9)
    e = (z < 5).where(z % 5, c(0))
    assert show(check(e)) == "where((z<5),z,0)"
    assert show(uop_given_valid(z < 5, z % 5 + (z + 5) // 5)) == "(z+1)"
    e = (z < 5).where(c(0), (z - 5) % 5)  # the false branch knows z >= 5
    assert show(check(e)) == "where((z<5),0,(z+-5))"
    e = NOT(z < 2).logical_and(z < 6).where((z - 2) // 4, c(-1))
    assert show(check(e)) == "where(((z<6)&((z<2)!=True)),0,-1)"


def test_load_index_under_its_valid() -> None:
    buf = UOp(Ops.DEFINE_GLOBAL, dtypes.float32, (), 0)
    j = r0 - 1
    valid = (c(-1) < j).logical_and(j < 4)
    load = UOp(Ops.LOAD, dtypes.float32, (buf, (j + 4) % 4, valid))
    out = simplify(load)
    assert out.op is Ops.LOAD and show(out.src[1]) == "(r0+-1)"
    assert not any(u.op is Ops.DEFINE_VAR for u in out.toposort())  # the stand-in variables are gone


def test_gate_knowledge_never_reaches_into_loads() -> None:
    # where(valid, LOAD(buf, j, valid), 7): both branches run on every lane (numpy, WGSL select), so the
    # LOAD must keep its own valid even though the outer where already implies it
    buf = UOp(Ops.DEFINE_GLOBAL, I64, (), 0)
    j = r0 - 1
    valid = (c(-1) < j).logical_and(j < 4)
    e = valid.where(UOp(Ops.LOAD, I64, (buf, j, valid)), c(7))
    out = simplify(e)
    (load,) = [u for u in out.toposort() if u.op is Ops.LOAD]
    assert len(load.src) == 3 and load.src[2] is out.src[0] and out.src[0].op is Ops.AND
    gather = UOp(Ops.LOAD, I64, (buf, UOp(Ops.LOAD, I64, (buf, j, valid)), valid))
    inner = [u for u in simplify(gather).toposort() if u.op is Ops.LOAD and u is not simplify(gather)]
    assert inner and inner[0].src[2].op is Ops.AND  # an index that loads keeps its inner guard
    nested = valid.where(valid.where(j, c(0)), c(7))
    assert simplify(nested) is simplify(valid.where(j, c(7)))


def test_a_where_around_its_own_gated_load_is_the_load() -> None:
    # a padded window: where(valid, LOAD(buf, j, valid), 0) reads 0 where valid fails, with or without the where;
    # a where on a clause of the load's gate too, but not a where on another condition, to another value, or -0.0
    buf = UOp(Ops.DEFINE_GLOBAL, dtypes.float32, (), 0)
    j = r0 - 1
    low, high = c(-1) < j, j < 4
    load = UOp(Ops.LOAD, dtypes.float32, (buf, j, low.logical_and(high)))
    zero = UOp.const(dtypes.float32, 0.0)
    assert simplify(low.logical_and(high).where(load, zero)) is simplify(load)
    assert simplify(high.where(load, zero)) is simplify(load)
    for kept in ((r0 < 3).where(load, zero), high.where(load, UOp.const(dtypes.float32, 1.0)),
                 high.where(load, UOp.const(dtypes.float32, -0.0))):  # fmt: skip
        assert simplify(kept).op is Ops.WHERE


def test_kernel_shaped_graph() -> None:
    # what the scheduler hands over: SINK(STORE(out, idx, f(LOAD(in, idx')))) with float math untouched
    g_in = UOp(Ops.DEFINE_GLOBAL, dtypes.float32, (), 1)
    g_out = UOp(Ops.DEFINE_GLOBAL, dtypes.float32, (), 0)
    flat = r0 * 4 + r1
    ld = UOp(Ops.LOAD, dtypes.float32, (g_in, (flat // 4) * 4 + flat % 4))
    val = ld * 2.0 + 1.0
    st = UOp(Ops.STORE, dtypes.void, (g_out, flat, val))
    sink = UOp(Ops.SINK, dtypes.void, (st,))
    out = simplify(sink)
    new_ld = out.src[0].src[2].src[0].src[0]
    assert new_ld.op is Ops.LOAD and new_ld.src[1] is simplify(flat)
    assert out.src[0].src[2].src[1].arg == 1.0  # float math left as written


# ---------------------------------------------------------------------------------------------
# property tests: random expression trees, evaluated before and after
# ---------------------------------------------------------------------------------------------


@st.composite
def cases(draw: Any, dtype: DType = I64, max_depth: int = 4) -> tuple[UOp, list[dict[UOp, int]]]:
    leaves_: list[UOp] = []
    for i in range(draw(st.integers(1, 3))):
        lo = draw(st.integers(-12, 12)) if draw(st.booleans()) else draw(st.integers(0, 12))
        hi = lo + draw(st.integers(0, 14))
        leaves_.append(var(f"v{i}", lo, hi, dtype))
    for i in range(draw(st.integers(0, 3))):
        leaves_.append(rng(draw(st.integers(1, 12)), i, dtype))
    cnst = st.integers(-6, 16)

    def leaf() -> UOp:
        if draw(st.integers(0, 4)) == 0:
            return UOp.const(dtype, draw(cnst))
        return draw(st.sampled_from(leaves_))

    def cond(depth: int) -> UOp:
        kind = draw(st.sampled_from(["lt", "lt", "ltc", "gtc", "ne", "eq", "eqc", "nec", "and", "not", "or"]))
        if kind == "and" and depth > 0:
            return cond(depth - 1).logical_and(cond(depth - 1))
        if kind == "or" and depth > 0:
            return cond(depth - 1).alu(Ops.OR, cond(depth - 1))
        if kind == "not" and depth > 0:
            return cond(depth - 1).ne(True)
        a = expr(max(depth - 1, 0))
        if kind == "ltc":
            return a < UOp.const(dtype, draw(cnst))
        if kind == "gtc":
            return UOp.const(dtype, draw(cnst)) < a
        if kind in ("eqc", "nec"):
            k = UOp.const(dtype, draw(cnst))
            return a.eq(k) if kind == "eqc" else a.ne(k)
        b = expr(max(depth - 1, 0))
        return a.ne(b) if kind == "ne" else a.eq(b) if kind == "eq" else a < b

    def expr(depth: int) -> UOp:
        if depth == 0 or draw(st.integers(0, 5)) == 0:
            return leaf()
        kind = draw(st.sampled_from(["add", "add", "sub", "mulc", "mulc", "mulv", "div", "div", "mod", "mod",
                                     "max", "where", "neg"]))  # fmt: skip
        a = expr(depth - 1)
        if kind == "add":
            return a + expr(depth - 1)
        if kind == "sub":
            return a - expr(depth - 1)
        if kind == "mulc":
            return a * UOp.const(dtype, draw(st.integers(-4, 8)))
        if kind == "mulv":
            return a * draw(st.sampled_from(leaves_))
        if kind in ("div", "mod"):
            d = draw(st.integers(1, 9)) * (-1 if draw(st.integers(0, 5)) == 0 else 1)
            return a // UOp.const(dtype, d) if kind == "div" else a % UOp.const(dtype, d)
        if kind == "max":
            return a.maximum(expr(depth - 1))
        if kind == "where":
            return cond(depth - 1).where(a, expr(depth - 1))
        return a.alu(Ops.NEG)

    root = cond(max_depth) if draw(st.integers(0, 4)) == 0 else expr(max_depth)
    used = leaves(root)
    envs = []
    for _ in range(6):
        env = {}
        for u in used:
            lo, hi = leaf_range(u)
            env[u] = draw(st.one_of(st.just(lo), st.just(hi), st.integers(lo, hi)))
        envs.append(env)
    return root, envs


def _check_property(case: tuple[UOp, list[dict[UOp, int]]]) -> None:
    root, envs = case
    out = simplify(root)
    assert out.dtype == root.dtype
    assert not any(u.op is Ops.DEFINE_VAR and u.arg[0].startswith("__") for u in out.toposort())
    assert_same(root, out, envs)
    assert simplify(out) is out  # a fixed point: canonical forms are stable


_PROP = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_PROP
@given(cases(I64))
def test_property_int64(case: tuple[UOp, list[dict[UOp, int]]]) -> None:
    _check_property(case)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(I32))
def test_property_int32(case: tuple[UOp, list[dict[UOp, int]]]) -> None:
    _check_property(case)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(I8, max_depth=3))
def test_property_int8_wrapping(case: tuple[UOp, list[dict[UOp, int]]]) -> None:
    # int8 overflows all the time here: rules must stay exact under wrapping or stay out
    _check_property(case)


@st.composite
def reshapes(draw: Any) -> tuple[UOp, list[dict[UOp, int]]]:
    """What rangeify makes of reshapes/permutes/pads: a flat index of strided ranges, re-split by
    // and %, recombined with strides, shifted, compared."""
    ranges = [rng(draw(st.integers(1, 6)), i) for i in range(draw(st.integers(1, 3)))]
    e: UOp = UOp.const(I64, draw(st.integers(-3, 3)))
    for r in ranges:
        e = e + r * draw(st.sampled_from([1, 2, 3, 4, 6, 8, 12]))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["div", "mod", "split", "mul", "add", "flip"]))
        k = draw(st.sampled_from([1, 2, 3, 4, 6, 8]))
        if kind == "div":
            e = e // k
        elif kind == "mod":
            e = e % k
        elif kind == "split":
            e = (e // k) * draw(st.sampled_from([k, 1, 2 * k])) + e % k
        elif kind == "mul":
            e = e * k
        elif kind == "add":
            e = e + draw(st.sampled_from(ranges)) * draw(st.integers(-2, 3)) + draw(st.integers(-4, 4))
        else:
            e = UOp.const(I64, draw(st.integers(0, 20))) - e
    if draw(st.booleans()):
        e = (UOp.const(I64, draw(st.integers(-3, 3))) < e).logical_and(e < draw(st.integers(0, 30))).where(e, 0)
    envs = [dict(zip(ranges, vs)) for vs in itertools.product(*[range(r.src[0].arg) for r in ranges])]
    return e, envs


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reshapes())
def test_property_reshape_indices(case: tuple[UOp, list[dict[UOp, int]]]) -> None:
    _check_property(case)


@st.composite
def gated(draw: Any) -> tuple[UOp, UOp, list[dict[UOp, int]]]:
    z = var("z", draw(st.integers(-6, 3)), draw(st.integers(4, 20)))
    r = rng(draw(st.integers(1, 9)), 0)
    terms = [z, r]
    clauses = []
    for _ in range(draw(st.integers(1, 4))):
        t = draw(st.sampled_from(terms)) * draw(st.sampled_from([1, 1, 2, -1])) + draw(st.integers(-4, 4))
        k = UOp.const(I64, draw(st.integers(-3, 12)))
        kind = draw(st.sampled_from(["lt", "gt", "nlt"]))
        clauses.append(t < k if kind == "lt" else k < t if kind == "gt" else (t < k).ne(True))
    valid = clauses[0]
    for cl in clauses[1:]:
        valid = valid.logical_and(cl)
    idx = (z * draw(st.integers(1, 4)) + r + draw(st.integers(-3, 6))) % draw(st.integers(1, 8))
    idx = idx + (z + draw(st.integers(0, 6))) // draw(st.integers(1, 6))
    envs = [{z: zz, r: rr} for zz in range(z.arg[1], z.arg[2] + 1) for rr in range(r.src[0].arg)]
    return valid, idx, envs


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gated())
def test_property_gates(case: tuple[UOp, UOp, list[dict[UOp, int]]]) -> None:
    valid, idx, envs = case
    buf = UOp(Ops.DEFINE_GLOBAL, dtypes.float32, (), 0)
    out_valid = simplify_valid(valid)
    new_idx = uop_given_valid(valid, idx)
    where = simplify(valid.where(idx, UOp.const(I64, -1)))
    load = simplify(UOp(Ops.LOAD, dtypes.float32, (buf, idx, valid)))
    for env in envs:
        ok = evaluate(valid, env)
        assert evaluate(out_valid, env) == ok
        assert evaluate(where, env) == (evaluate(idx, env) if ok else -1)
        if load.op is Ops.LOAD and len(load.src) == 3:
            assert evaluate(load.src[2], env) == ok
            if ok:
                assert evaluate(new_idx, env) == evaluate(idx, env)
                assert evaluate(load.src[1], env) == evaluate(idx, env)


def test_dtype_bounds_helper_is_what_rules_trust() -> None:
    # sanity for the no-wrap proof the signed rules rely on
    assert dtype_bounds(I8) == (-128, 127)
    v = var("v", 0, 100, I8)
    assert (v * 2).vmin == -128  # may wrap: bounds say nothing


def test_resplit_of_a_flattened_index_folds() -> None:
    """(r0*65 + r2) // 4160 with r2 < 65 is r0 // 64: an embedding's one-hot index re-split (a nanogpt kernel)."""
    r0, r2 = rng(768, 0), rng(65, 2)
    assert simplify((r0 % 64) + ((r0 * 65 + r2) // 4160) * 64) is r0
    assert simplify((r0 * 65 + r2) // 4160) is simplify(r0 // 64)
    mod = simplify((r0 * 65 + r2) % 4160)
    assert mod is simplify((r0 % 64) * 65 + r2)


def test_a_staged_tile_element_shares_its_row_index() -> None:
    """A tile's invocation l stages elements l, l + 128, l + 256, ... of a 64-row tile: each one's row is l's, so
    the constant leaves the quotient and the remainders around it fold to the first element's expressions (one
    bounds check for all eight of a convolution's window loads, not one each)."""
    lane = rng(128, 5)
    for j in range(1, 8):
        assert simplify(((lane + 128 * j) // 8) % 8 // 2) is simplify((lane // 8) % 8 // 2)
        assert simplify((lane + 128 * j) % 64) is simplify(lane % 64)
        assert simplify((lane + 128 * j) // 64) is simplify(lane // 64 + 2 * j)

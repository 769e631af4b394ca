"""Symbolic simplification of integer index math, as rewrite rules.

Two matchers, both plain ``PatternMatcher`` tables of small named functions:

- ``symbolic_simple``: constant folding of every ALU op (and CAST) on constants, the algebraic
  identities (x+0, x*1, x*0, x//1, x%1, --x, x-x, boolean and/or with a constant, where with a
  constant or equal branches), and folding of any int/bool node whose bounds collapse to a
  single value (this is also how comparisons get decided by interval analysis).
- ``symbolic``: ``symbolic_simple`` plus canonical forms (flat sums with combined terms and the
  constant last, flat products, sorted operands of commutative ops), div/mod folding,
  comparison folding and gate (valid) simplification.

``simplify(u)`` runs ``symbolic`` over a whole graph (one memoized walk).

Semantics (as in C and WGSL, *not* Python):

- ``IDIV`` truncates toward zero: ``-7 // 2 == -3``.
- ``MOD`` is the C remainder; it takes the sign of the dividend: ``-7 % 2 == -1``. The identity
  ``x == (x // c) * c + x % c`` holds for every sign.
- Integer ops wrap at the dtype's width (two's complement). Constant folding wraps the same way,
  and never folds a division by zero, an over-wide shift, or a float result that would turn
  infinite or NaN from finite inputs (renderers cannot spell those as literals).
- Rules that are exact in wrapping arithmetic (sums, products, the div/mod identity above) apply to
  every integer dtype. Rules that depend on order or sign (div/mod folding, comparisons) apply to
  signed dtypes only, and only where bounds.py proves the expression does not wrap: bounds.py
  answers the dtype's full range for anything that may wrap, so "vmin >= 0" or a range narrower
  than the dtype is such a proof.
- Float math is only constant-folded and simplified by exact identities; it is never reassociated.

Canonical integer forms (so that equal expressions meet as the same hash-consed node):

- a sum is a left-leaning ADD chain of terms ``base`` or ``base * coef`` (coef a non-zero, non-one
  constant), bases sorted by ``_order_key`` (variables by name, ranges by axis, then by op), and the
  constant, if any, last; multiplications by a constant are distributed over sums, NEG becomes
  ``x * -1``;
- a product is a left-leaning MUL chain of sorted non-constant factors with the constant last;
- the constant operand of MAX/CMPNE/CMPEQ/XOR goes right; AND/OR chains of bools are flat,
  deduplicated and sorted;
- a comparison of a sum with a constant has the constant moved right, the coefficients divided by
  their gcd, and the leading coefficients positive (``c < x`` is kept as is: there is no CMPGT).
"""

from __future__ import annotations

import itertools
import math
import operator
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from anneal_ir.bounds import dtype_bounds
from anneal_ir.dtype import DType, dtypes
from anneal_ir.ops import GroupOp, Ops
from anneal_ir.pattern import PatternMatcher, UPat, graph_rewrite
from anneal_ir.uop import UOp, arg_repr

__all__ = [
    "c_mod",
    "exec_alu",
    "simplify",
    "simplify_valid",
    "symbolic",
    "symbolic_simple",
    "trunc_div",
    "uop_given_valid",
    "wrap_int",
]

SINTS: tuple[DType, ...] = (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64)
UINTS: tuple[DType, ...] = (dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64)
INTS: tuple[DType, ...] = SINTS + UINTS
INTS_BOOL: tuple[DType, ...] = INTS + (dtypes.bool,)

# ---------------------------------------------------------------------------------------------
# integer arithmetic as the device does it
# ---------------------------------------------------------------------------------------------


def wrap_int(value: int, dtype: DType) -> int:
    """value reduced to dtype's width: two's complement for signed dtypes, modulo for unsigned."""
    bits = dtype.bits
    value &= (1 << bits) - 1
    if dtype.kind == "i" and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


def trunc_div(a: int, b: int) -> int:
    """Integer division truncating toward zero (C, WGSL), exact for any size (no floats)."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def c_mod(a: int, b: int) -> int:
    """The C remainder: a - b * trunc_div(a, b); takes the sign of a."""
    return a - b * trunc_div(a, b)


def _iconst(dtype: DType, value: int) -> UOp:
    return UOp.const(dtype, wrap_int(value, dtype))


def _bconst(value: bool) -> UOp:
    return UOp.const(dtypes.bool, value)


def _fits(dtype: DType, *values: int) -> bool:
    lo, hi = dtype_bounds(dtype)
    return all(lo <= v <= hi for v in values)


def _no_wrap(u: UOp) -> bool:
    """bounds.py proves u never wraps: it answers the dtype's full range for anything that may."""
    lo, hi = dtype_bounds(u.dtype)
    return bool(u.vmin > lo or u.vmax < hi)


# ---------------------------------------------------------------------------------------------
# constant evaluation
# ---------------------------------------------------------------------------------------------

_INT_BINARY: dict[Ops, Callable[[int, int], Any]] = {
    Ops.ADD: operator.add, Ops.MUL: operator.mul, Ops.MAX: max,
    Ops.AND: operator.and_, Ops.OR: operator.or_, Ops.XOR: operator.xor,
    Ops.CMPLT: operator.lt, Ops.CMPNE: operator.ne, Ops.CMPEQ: operator.eq,
}  # fmt: skip
_BOOL_BINARY: dict[Ops, Callable[[bool, bool], bool]] = {
    Ops.AND: operator.and_, Ops.OR: operator.or_, Ops.XOR: operator.xor, Ops.MAX: operator.or_,
    Ops.CMPNE: operator.ne, Ops.CMPEQ: operator.eq, Ops.CMPLT: operator.lt,
}  # fmt: skip
_FLOAT_FNS: dict[Ops, Callable[..., Any]] = {
    Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.MAX: np.maximum, Ops.NEG: np.negative,
    Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.SIN: np.sin, Ops.SQRT: np.sqrt,
    Ops.RECIPROCAL: np.reciprocal, Ops.TRUNC: np.trunc,
    Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal, Ops.CMPEQ: np.equal,
}  # fmt: skip


def _exec_bool(op: Ops, args: list[Any]) -> bool | None:
    fn = _BOOL_BINARY.get(op)
    return None if fn is None else bool(fn(bool(args[0]), bool(args[1])))


def _exec_int(op: Ops, dtype: DType, src_dtype: DType, args: list[Any]) -> int | bool | None:
    vals = [wrap_int(int(a), src_dtype) for a in args]
    if op is Ops.NEG:
        return wrap_int(-vals[0], dtype)
    if len(vals) != 2:
        return None
    a, b = vals
    if op in (Ops.IDIV, Ops.MOD):
        if b == 0:  # undefined on the device: leave it to run (and fail) there
            return None
        return wrap_int(trunc_div(a, b) if op is Ops.IDIV else c_mod(a, b), dtype)
    if op in (Ops.SHL, Ops.SHR):
        if not 0 <= b < src_dtype.bits:  # over-wide shifts differ between C and WGSL: don't guess
            return None
        return wrap_int(a << b, dtype) if op is Ops.SHL else a >> b  # a >= 0 for unsigned: logical
    fn = _INT_BINARY.get(op)
    if fn is None:
        return None
    out = fn(a, b)
    return out if isinstance(out, bool) else wrap_int(out, dtype)


def _exec_float(op: Ops, dtype: DType, src_dtype: DType, args: list[Any]) -> float | bool | None:
    fn = _FLOAT_FNS.get(op)
    if fn is None:
        return None
    with np.errstate(all="ignore"):
        out = fn(*[src_dtype.np.type(a) for a in args])
        if op in GroupOp.Comparison:
            return bool(out)
        value = float(dtype.np.type(out))
    if not math.isfinite(value) and all(math.isfinite(float(a)) for a in args):
        return None  # inf/nan made from finite constants: keep the op (no literal for it in WGSL)
    return value


def _cast_const(value: Any, src: DType, dst: DType) -> Any:
    if dst.kind == "b":
        return bool(value)
    if dst.is_int:
        if not src.is_float:
            return wrap_int(int(value), dst)
        if not math.isfinite(value):
            return None
        t = math.trunc(value)
        return t if _fits(dst, t) else None  # out-of-range float->int saturates in WGSL, UB in C
    if dst.is_float:
        with np.errstate(all="ignore"):
            out = float(dst.np.type(value))
        return out if math.isfinite(out) or not math.isfinite(float(value)) else None
    return None


def exec_alu(op: Ops, dtype: DType, args: list[Any], src_dtype: DType) -> Any:
    """The value of ``op`` on constant ``args`` (of ``src_dtype``) as a ``dtype`` result, or None
    where it must not be folded. Ints wrap; IDIV/MOD truncate (C); bfloat16 is never folded."""
    if dtypes.bfloat16 in (dtype, src_dtype):
        return None
    if op is Ops.WHERE:
        return args[1] if args[0] else args[2]
    if op is Ops.CAST:
        return _cast_const(args[0], src_dtype, dtype)
    if src_dtype.kind == "b":
        return _exec_bool(op, args)
    if src_dtype.is_int:
        return _exec_int(op, dtype, src_dtype, args)
    if src_dtype.is_float:
        return _exec_float(op, dtype, src_dtype, args)
    return None


# ---------------------------------------------------------------------------------------------
# canonical order, sums and products
# ---------------------------------------------------------------------------------------------

_RANK = {Ops.DEFINE_VAR: 0, Ops.RANGE: 1, Ops.CONST: 3}


def _sortable(arg: Any) -> tuple:
    if isinstance(arg, (bool, int)):
        return (0, int(arg), "")
    if isinstance(arg, float):
        return (0, math.inf, "nan") if math.isnan(arg) else (0, arg, "")
    if isinstance(arg, str):
        return (1, 0, arg)
    if isinstance(arg, tuple):
        return (2, tuple(_sortable(a) for a in arg))
    return (3, 0, arg_repr(arg))


_ORDER_KEYS: weakref.WeakKeyDictionary[UOp, tuple] = weakref.WeakKeyDictionary()


def _order_key(u: UOp) -> tuple:
    """Deterministic total order of operands: variables (by name) and ranges (by axis) first,
    then other nodes by op, constants last; the content hash breaks ties. Cached per node (the
    key holds no UOp, so the cache never keeps one alive)."""
    found = _ORDER_KEYS.get(u)
    if found is None:
        found = _ORDER_KEYS[u] = (_RANK.get(u.op, 2), u.op.value, _sortable(u.arg), u.key)
    return found


def _sum_terms(x: UOp) -> tuple[dict[UOp, int], int]:
    """x as {base: coefficient} plus a constant, looking through ADD, NEG and MUL by a constant."""
    coefs: dict[UOp, int] = {}
    const = 0
    stack: list[tuple[UOp, int]] = [(x, 1)]
    while stack:
        u, k = stack.pop()
        if u.op is Ops.CONST:
            const += k * int(u.arg)
        elif u.op is Ops.ADD:
            stack.extend((s, k) for s in u.src)
        elif u.op is Ops.NEG:
            stack.append((u.src[0], -k))
        elif u.op is Ops.MUL and u.src[1].op is Ops.CONST:
            stack.append((u.src[0], k * int(u.src[1].arg)))
        elif u.op is Ops.MUL and u.src[0].op is Ops.CONST:
            stack.append((u.src[1], k * int(u.src[0].arg)))
        else:
            coefs[u] = coefs.get(u, 0) + k
    return coefs, const


def _add_scaled(coefs: dict[UOp, int], x: UOp, k: int) -> int:
    """coefs += k * x (in place); returns k times x's constant part."""
    inner, const = _sum_terms(x)
    for b, v in inner.items():
        coefs[b] = coefs.get(b, 0) + k * v
    return k * const


def _sum_items(coefs: dict[UOp, int], const: int, dtype: DType) -> tuple[list[tuple[UOp, int]], int]:
    items = [(b, wrap_int(k, dtype)) for b, k in coefs.items()]
    items = sorted((bk for bk in items if bk[1] != 0), key=lambda bk: _order_key(bk[0]))
    return items, wrap_int(const, dtype)


def _is_term(u: UOp, b: UOp, k: int) -> bool:
    return u is b if k == 1 else (u.op is Ops.MUL and u.src[0] is b and u.src[1].op is Ops.CONST and u.src[1].arg == k)


def _already_built(x: UOp, items: list[tuple[UOp, int]], const: int) -> bool:
    """Is x exactly what _build_sum would build? (Checked without building: the common case.)"""
    node = x
    if const != 0:
        if node.op is not Ops.ADD or node.src[1].op is not Ops.CONST or node.src[1].arg != const:
            return False
        node = node.src[0]
    if not items:
        return node.op is Ops.CONST and node.arg == 0 and const == 0
    for b, k in reversed(items[1:]):
        if node.op is not Ops.ADD or not _is_term(node.src[1], b, k):
            return False
        node = node.src[0]
    return _is_term(node, *items[0])


def _build_sum(coefs: dict[UOp, int], const: int, dtype: DType) -> UOp:
    """The canonical sum: sorted terms, coefficients wrapped to dtype, zero terms dropped, constant last."""
    items, const = _sum_items(coefs, const, dtype)
    return _build_items(items, const, dtype)


def _build_items(items: list[tuple[UOp, int]], const: int, dtype: DType) -> UOp:
    out: UOp | None = None
    for b, k in items:
        term = b if k == 1 else UOp(Ops.MUL, dtype, (b, _iconst(dtype, k)))
        out = term if out is None else UOp(Ops.ADD, dtype, (out, term))
    if out is None:
        return _iconst(dtype, const)
    return out if const == 0 else UOp(Ops.ADD, dtype, (out, _iconst(dtype, const)))


def _sum_bounds(coefs: dict[UOp, int], const: int) -> tuple[int, int]:
    lo = hi = const
    for b, k in coefs.items():
        ends = (k * int(b.vmin), k * int(b.vmax))
        lo += min(ends)
        hi += max(ends)
    return lo, hi


def _scaled(coefs: dict[UOp, int], f: Callable[[int], int]) -> dict[UOp, int]:
    return {b: f(k) for b, k in coefs.items()}


def _negate(x: UOp) -> UOp:
    return UOp(Ops.MUL, x.dtype, (x, _iconst(x.dtype, -1)))


def _chain(op: Ops, dtype: DType, items: list[UOp]) -> UOp | None:
    out: UOp | None = None
    for it in items:
        out = it if out is None else UOp(op, dtype, (out, it))
    return out


def _flatten(x: UOp, op: Ops) -> list[UOp]:
    """The operands of a chain of ``op`` (same dtype) rooted at x, left to right, without repeats."""
    out: list[UOp] = []
    stack = [x]
    while stack:
        u = stack.pop()
        if u.op is op and u.dtype == x.dtype:
            stack.extend(reversed(u.src))
        else:
            out.append(u)
    return list(dict.fromkeys(out))


def _node_count(u: UOp) -> int:
    return len(u.toposort())


# ---------------------------------------------------------------------------------------------
# symbolic_simple: folding and identities
# ---------------------------------------------------------------------------------------------


def _const_equal_to(value: int) -> Callable[[UOp], bool]:
    def check(u: UOp) -> bool:
        return not isinstance(u.arg, bool) and u.arg == value

    return check


_ZERO = UPat(Ops.CONST, custom=_const_equal_to(0))
_ONE = UPat(Ops.CONST, custom=_const_equal_to(1))
_MINUS_ONE = UPat(Ops.CONST, custom=_const_equal_to(-1))
_TRUE = UPat.const(True, dtypes.bool)
_FALSE = UPat.const(False, dtypes.bool)
_NOT_C = UPat(Ops.CMPNE, src=[UPat.var("c", dtypes.bool), _TRUE])  # logical not, as Tensor.logical_not builds it
_INNER_WHERE_A = UPat(Ops.WHERE, src=(UPat.var("c"), UPat.var("a"), UPat()))  # where(c, a, _) under a where on c
_INNER_WHERE_D = UPat(Ops.WHERE, src=(UPat.var("c"), UPat(), UPat.var("d")))


def _all_sources_const(u: UOp) -> bool:
    return all(s.op is Ops.CONST for s in u.src)  # a custom check: fails fast on the common case


def _fold_constants(x: UOp) -> UOp | None:
    """Every source is a constant: evaluate like the device would (wrapping, truncating)."""
    src_dtype = x.src[1].dtype if x.op is Ops.WHERE else x.src[0].dtype
    value = exec_alu(x.op, x.dtype, [s.arg for s in x.src], src_dtype)
    return None if value is None else UOp.const(x.dtype, value)


def _fold_by_bounds(x: UOp) -> UOp | None:
    """Interval analysis pins the value: x < 10 with x in [0, 8) is True, r % 4 with r in [0,1) is 0.
    Only ALU/CAST nodes: RANGE and DEFINE_VAR are structure (loops, kernel arguments)."""
    if any(s.dtype.is_float for s in x.src):  # float bounds ignore rounding and NaN: don't decide on them
        return None
    return UOp.const(x.dtype, x.vmin) if x.vmin == x.vmax else None


def _self(x: UOp) -> UOp:
    return x


def _zero_like(z: UOp) -> UOp:
    return z.const_like(0)


def _x_minus_x(x: UOp) -> UOp:
    return x.const_like(0)


def _times_zero(z: UOp) -> UOp:
    return z.const_like(0)


def _neg_neg(x: UOp) -> UOp:
    return x


def _neg_int(x: UOp) -> UOp:
    return _negate(x)


def _true(x: UOp) -> UOp:
    return _bconst(True)


def _false(x: UOp) -> UOp:
    return _bconst(False)


def _where_const(c: UOp, a: UOp, b: UOp) -> UOp:
    return a if c.arg else b


def _where_same_cond_true(c: UOp, a: UOp, d: UOp) -> UOp:
    """where(c, where(c, a, b), d) -> where(c, a, d): the inner false branch is never chosen."""
    return UOp(Ops.WHERE, a.dtype, (c, a, d))


def _where_same_cond_false(c: UOp, a: UOp, d: UOp) -> UOp:
    """where(c, a, where(c, b, d)) -> where(c, a, d)."""
    return UOp(Ops.WHERE, a.dtype, (c, a, d))


def _where_not(c: UOp, a: UOp, b: UOp) -> UOp:
    """where(!c, a, b) -> where(c, b, a): one canonical polarity for gates."""
    return UOp(Ops.WHERE, a.dtype, (c, b, a))


symbolic_simple = PatternMatcher(
    [
        # constants in, constant out
        (UPat(GroupOp.ALU | {Ops.CAST}, custom=_all_sources_const, name="x"), _fold_constants),
        # an int/bool whose bounds are one value is that value (decides comparisons too)
        (UPat(GroupOp.ALU | {Ops.CAST}, dtype=INTS_BOOL, name="x"), _fold_by_bounds),
        # additive / multiplicative identities (x+0 is exact for floats except for -0.0 + 0.0)
        (UPat(Ops.ADD, src=[UPat.var("x"), _ZERO]), _self),
        (UPat(Ops.MUL, src=[UPat.var("x"), _ONE]), _self),
        (UPat(Ops.MUL, dtype=INTS, src=[UPat(), _ZERO], name="z"), _times_zero),  # not floats: inf*0 is nan
        (UPat(Ops.IDIV, dtype=INTS, src=(UPat.var("x"), _ONE)), _self),
        (UPat(Ops.IDIV, dtype=SINTS, src=(UPat.var("x"), _MINUS_ONE)), _neg_int),
        (UPat(Ops.MOD, dtype=INTS, src=(UPat(), _ONE), name="z"), _zero_like),
        (UPat(Ops.MOD, dtype=SINTS, src=(UPat(), _MINUS_ONE), name="z"), _zero_like),
        # --x -> x, in both spellings of negation
        (UPat(Ops.NEG, src=(UPat(Ops.NEG, src=(UPat.var("x"),)),)), _self),
        (UPat(Ops.MUL, dtype=INTS, src=[UPat(Ops.MUL, src=[UPat.var("x"), _MINUS_ONE]), _MINUS_ONE]), _neg_neg),
        # x - x -> 0 (x - y is built as x + y*-1)
        (UPat(Ops.ADD, dtype=INTS, src=[UPat.var("x"), UPat(Ops.MUL, src=(UPat.var("x"), _MINUS_ONE))]), _x_minus_x),
        # boolean algebra with constants, idempotence
        (UPat(Ops.AND, dtype=dtypes.bool, src=[UPat.var("x"), _TRUE]), _self),
        (UPat(Ops.AND, dtype=dtypes.bool, src=[UPat(), UPat(Ops.CONST, dtypes.bool, arg=False, name="x")]), _self),
        (UPat(Ops.OR, dtype=dtypes.bool, src=[UPat(), UPat(Ops.CONST, dtypes.bool, arg=True, name="x")]), _self),
        (UPat(Ops.OR, dtype=dtypes.bool, src=[UPat.var("x"), _FALSE]), _self),
        (UPat((Ops.XOR, Ops.OR), dtype=INTS, src=[UPat.var("x"), _ZERO]), _self),
        (UPat(Ops.AND, dtype=INTS, src=[UPat(), _ZERO], name="z"), _zero_like),
        (UPat(Ops.XOR, dtype=dtypes.bool, src=[UPat.var("x"), _FALSE]), _self),
        (UPat((Ops.AND, Ops.OR, Ops.MAX), src=(UPat.var("x"), UPat.var("x"))), _self),
        # logical not is x != True; !!x -> x, x != False -> x, x == True -> x
        (UPat(Ops.CMPNE, src=[UPat(Ops.CMPNE, src=[UPat.var("x", dtypes.bool), _TRUE]), _TRUE]), _self),
        (UPat(Ops.CMPNE, src=[UPat.var("x", dtypes.bool), _FALSE]), _self),
        (UPat(Ops.CMPEQ, src=[UPat.var("x", dtypes.bool), _TRUE]), _self),
        # where with a known condition, equal branches, or a bool select of True/False
        (UPat(Ops.WHERE, src=(UPat(Ops.CONST, name="c"), UPat.var("a"), UPat.var("b"))), _where_const),
        (UPat(Ops.WHERE, src=(UPat(), UPat.var("x"), UPat.var("x"))), _self),
        (UPat(Ops.WHERE, src=(UPat.var("x"), _TRUE, _FALSE)), _self),
        (UPat(Ops.WHERE, src=(_NOT_C, UPat.var("a"), UPat.var("b"))), _where_not),
        (UPat(Ops.WHERE, src=(UPat.var("c"), _INNER_WHERE_A, UPat.var("d"))), _where_same_cond_true),
        (UPat(Ops.WHERE, src=(UPat.var("c"), UPat.var("a"), _INNER_WHERE_D)), _where_same_cond_false),
        # a value compared with itself (x != x is True for a float NaN, so ints only there)
        (UPat(Ops.CMPLT, src=(UPat.var("x"), UPat.var("x"))), _false),
        (UPat(Ops.CMPNE, src=(UPat.var("x", INTS_BOOL), UPat.var("x"))), _false),
        (UPat(Ops.CMPEQ, src=(UPat.var("x", INTS_BOOL), UPat.var("x"))), _true),
    ],
    "symbolic_simple",
)


# ---------------------------------------------------------------------------------------------
# sums and products
# ---------------------------------------------------------------------------------------------


def _find_mod_of_div(coefs: dict[UOp, int], a: UOp, c: UOp, k: int, dtype: DType) -> UOp | None:
    """A term ((a // c) % c2) * (k*c) with c2 > 0, partner of (a % c) * k."""
    for n, v in coefs.items():
        inner = n.src[0] if n.op is Ops.MOD else None
        if inner is None or inner.op is not Ops.IDIV or inner.src[0] is not a or inner.src[1] is not c:
            continue
        c2 = n.src[1]
        if c2.op is Ops.CONST and c2.arg > 0 and wrap_int(v, dtype) == wrap_int(k * c.arg, dtype):
            return n
    return None


def _merge_div_mod(coefs: dict[UOp, int], const: int, dtype: DType) -> int:
    """In place: (a//c)*c*k + (a%c)*k -> a*k (the definition of the C remainder: any sign, and exact
    in wrapping arithmetic), and ((a//c1)%c2)*c1*k + (a%c1)*k -> (a%(c1*c2))*k (trunc div/mod are odd
    functions, so the non-negative proof carries over). Returns the new constant."""
    progress = True
    while progress:
        progress = False
        for m in list(coefs):
            if m not in coefs or m.op is not Ops.MOD or m.src[1].op is not Ops.CONST or m.src[1].arg == 0:
                continue
            a, c = m.src
            k = coefs[m]
            whole = next((d for d in coefs if d.op is Ops.IDIV and d.src[0] is a and d.src[1] is c), None)
            if whole is not None and wrap_int(coefs[whole], dtype) == wrap_int(k * c.arg, dtype):
                del coefs[m], coefs[whole]
                const += _add_scaled(coefs, a, k)
                progress = True
                continue
            if c.arg <= 0:
                continue
            n = _find_mod_of_div(coefs, a, c, k, dtype)
            if n is not None and _fits(dtype, c.arg * n.src[1].arg):
                del coefs[m], coefs[n]
                merged = UOp(Ops.MOD, dtype, (a, _iconst(dtype, c.arg * n.src[1].arg)))
                coefs[merged] = coefs.get(merged, 0) + k
                progress = True
    return const


def _fold_sum(x: UOp) -> UOp | None:
    """Flatten an int sum, combine like terms (x*2 + x*3 -> x*5, x - x -> 0), fold constants
    ((x+1)+2 -> x+3, 1+x -> x+1), merge (a//c)*c + a%c -> a, and rebuild it canonically."""
    coefs, const = _sum_terms(x)
    const = _merge_div_mod(coefs, const, x.dtype)
    items, const = _sum_items(coefs, const, x.dtype)
    if _already_built(x, items, const):
        return None
    return _build_items(items, const, x.dtype)


# index math multiplies a few factors; a product of more is data (a power by repeated squaring, x = x * x, whose
# flattened tree doubles with every square): left as it is
_MAX_PRODUCT_NODES = 256


def _fold_product(x: UOp) -> UOp | None:
    """Flatten an int product: multiply its constants, sort its factors, and distribute a constant
    over a sum ((a + 2) * 4 -> a*4 + 8) so that sums stay flat for term combining and div/mod."""
    factors: list[UOp] = []
    const = 1
    stack = [x]
    visited = 0
    while stack:
        u = stack.pop()
        visited += 1
        if visited > _MAX_PRODUCT_NODES:  # a shared operand flattens to exponentially many factors
            return None
        if u.op is Ops.MUL and u.dtype == x.dtype:
            stack.extend(u.src)
        elif u.op is Ops.NEG:
            const = -const
            stack.append(u.src[0])
        elif u.op is Ops.CONST:
            const *= int(u.arg)
        else:
            factors.append(u)
    const = wrap_int(const, x.dtype)
    if const == 0 or not factors:
        return _iconst(x.dtype, const)
    if len(factors) == 1 and factors[0].op is Ops.ADD and const != 1:
        coefs, c0 = _sum_terms(factors[0])
        return _build_sum(_scaled(coefs, lambda k: k * const), c0 * const, x.dtype)
    out = _chain(Ops.MUL, x.dtype, sorted(factors, key=_order_key))
    assert out is not None
    if const != 1:
        out = UOp(Ops.MUL, x.dtype, (out, _iconst(x.dtype, const)))
    return None if out is x else out


def _sort_operands(x: UOp) -> UOp | None:
    """Commutative ops get their operands in canonical order (constants right) so x!=y meets y!=x."""
    a, b = x.src
    return x.replace(src=(b, a)) if _order_key(b) < _order_key(a) else None


def _max_by_bounds(x: UOp, y: UOp) -> UOp | None:
    """max(x, y) is x where x can never be below y."""
    if x.vmin >= y.vmax:
        return x
    if y.vmin >= x.vmax:
        return y
    return None


# ---------------------------------------------------------------------------------------------
# division and remainder
# ---------------------------------------------------------------------------------------------


def _div_by_negative(x: UOp, c: UOp) -> UOp | None:
    """x // -c == -(x // c) under truncation, so divisors are positive from here on."""
    if c.arg >= 0 or not _fits(x.dtype, -c.arg):
        return None
    return _negate(UOp(Ops.IDIV, x.dtype, (x, _iconst(x.dtype, -c.arg))))


def _mod_by_negative(x: UOp, c: UOp) -> UOp | None:
    """x % -c == x % c: the C remainder follows the dividend's sign, not the divisor's."""
    if c.arg >= 0 or not _fits(x.dtype, -c.arg):
        return None
    return UOp(Ops.MOD, x.dtype, (x, _iconst(x.dtype, -c.arg)))


def _div_of_div(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
    """(x // c1) // c2 -> x // (c1*c2): true for truncation and floor alike, any sign of x."""
    if c1.arg <= 0 or c2.arg <= 0 or not _fits(x.dtype, c1.arg * c2.arg):
        return None
    return UOp(Ops.IDIV, x.dtype, (x, _iconst(x.dtype, c1.arg * c2.arg)))


def _mod_of_mod(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
    """(x % c1) % c2 -> x % c2 when c2 divides c1: |x| mod c1 keeps |x| mod c2, the sign stays x's."""
    if c1.arg <= 0 or c2.arg <= 0 or c1.arg % c2.arg != 0:
        return None
    return UOp(Ops.MOD, x.dtype, (x, c2))


def _nonzero_sign(y: UOp) -> bool:
    return bool(y.vmin > 0 or y.vmax < 0)


def _div_of_product(m: UOp, x: UOp, y: UOp) -> UOp | None:
    """(x*y) // y -> x when y is never 0 and x*y does not wrap (the division is exact)."""
    return x if _nonzero_sign(y) and _no_wrap(m) else None


def _mod_of_product(m: UOp, x: UOp, y: UOp) -> UOp | None:
    """(x*y) % y -> 0 under the same conditions."""
    return m.const_like(0) if _nonzero_sign(y) and _no_wrap(m) else None


def _mod_by_bounds(x: UOp, y: UOp) -> UOp | None:
    """x % y -> x - q*y when the truncated quotient is the same q over all of x's and y's bounds
    (q == 0 gives x % c -> x for 0 <= x < c, and also for -c < x <= 0)."""
    if y.vmin <= 0:
        return None
    qs = {trunc_div(int(a), int(b)) for a in (x.vmin, x.vmax) for b in (y.vmin, y.vmax)}
    if len(qs) != 1:
        return None
    q = qs.pop()
    return x if q == 0 else x + UOp(Ops.MUL, x.dtype, (y, _iconst(x.dtype, -q)))


def _pick_rem(k: int, c: int, nearest: bool) -> int:
    r = k % c
    return r - c if nearest and r > c // 2 else r


def _fold_nonneg(coefs: dict[UOp, int], const: int, c: int, op: Ops, dtype: DType) -> UOp | None:
    """x // c or x % c for x = sum(coefs) + const >= 0 (so truncation is floor), c > 0.

    Write each coefficient k = q*c + r. Then x = c*Q + R with Q = sum(q*v), R = sum(r*v) + const, and
    - if R's bounds lie in one bucket [j*c, (j+1)*c): x // c = Q + j, x % c = R - j*c (full fold);
    - else if R >= 0: x // c = Q + R // c and x % c = R % c (the split), after also dividing R and
      c by the gcd g of c and the remainders: R = g*R' + (const % g), R // c = R' // (c/g),
      R % c = g * (R' % (c/g)) + const % g.
    Inside a remainder, a term (y % m)*k with c | m, k > 0, y >= 0 becomes y*k: that adds a
    non-negative multiple of c, so the sum stays >= 0 and its remainder is unchanged."""
    changed = False
    if op is Ops.MOD:
        for b in list(coefs):
            k, m = coefs[b], b.src[1] if b.op is Ops.MOD else None
            if m is not None and m.op is Ops.CONST and m.arg > 0 and m.arg % c == 0 and k > 0 and b.src[0].vmin >= 0:
                del coefs[b]
                const += _add_scaled(coefs, b.src[0], k)
                changed = True
    for nearest in (False, True):
        rem = {b: _pick_rem(k, c, nearest) for b, k in coefs.items()}
        lo, hi = _sum_bounds(rem, const)
        if lo // c == hi // c:
            j = lo // c
            if op is Ops.IDIV:
                return _build_sum({b: (k - rem[b]) // c for b, k in coefs.items()}, j, dtype)
            return _build_sum(rem, const - j * c, dtype)
    nested = _nested_div_mod(coefs, const, c, op, dtype)
    if nested is not None:
        return nested
    rem = _scaled(coefs, lambda k: k % c)
    quo = _scaled(coefs, lambda k: k // c)
    rc, qc = const % c, const // c
    g = math.gcd(c, *rem.values())
    # progress: a multiple of c moves out of the division (a negative coefficient with a remainder
    # would only trade its sign for a bigger remainder), the divisor shrinks, or the constant does. A constant
    # moved out of a quotient of positive terms lets the remainders around it fold: ((l + 128) // 8) % 2 is
    # (l // 8) % 2, so a tile's staged loads share one bounds check instead of computing one each
    moved = any(q != 0 and (k > 0 or rem[b] == 0) for (b, k), q in zip(coefs.items(), quo.values()))
    positive = all(k > 0 for k in coefs.values())
    progress = changed or g > 1 or moved or (qc != 0 and (op is Ops.MOD or positive))
    if _sum_bounds(rem, rc)[0] < 0 or not progress:
        return UOp(op, dtype, (_build_sum(coefs, const, dtype), _iconst(dtype, c))) if changed else None
    small = _build_sum(_scaled(rem, lambda r: r // g), rc // g, dtype)
    cg = _iconst(dtype, c // g)
    if op is Ops.IDIV:
        quotient = _build_sum(quo, qc, dtype)
        if not _no_wrap(quotient):
            return None
        return quotient + UOp(Ops.IDIV, dtype, (small, cg))
    return UOp(Ops.MOD, dtype, (small, cg)) * g + rc % g


def _nested_div_mod(coefs: dict[UOp, int], const: int, c: int, op: Ops, dtype: DType) -> UOp | None:
    """x = k*A + B with k | c, A >= 0 and 0 <= B < k:  x // c = A // (c/k),  x % c = (A % (c/k))*k + B.

    A re-split of a flattened index: (r0*65 + r2) // 4160 with r2 < 65 is r0 // 64."""
    for k in sorted({v for v in coefs.values() if v > 1}, reverse=True):
        if k >= c or c % k:
            continue
        outer = {b: v // k for b, v in coefs.items() if v % k == 0}
        inner = {b: v for b, v in coefs.items() if v % k}
        lo, hi = _sum_bounds(inner, const)
        if lo < 0 or hi >= k:
            continue
        a = _build_sum(outer, 0, dtype)
        if a.vmin < 0:
            continue
        d = _iconst(dtype, c // k)
        if op is Ops.IDIV:
            return UOp(Ops.IDIV, dtype, (a, d))
        return UOp(Ops.MOD, dtype, (a, d)) * k + _build_sum(inner, const, dtype)
    return None


def _div_mod_const(d: UOp) -> UOp | None:
    """x // c and x % c for a constant c > 0 (see _fold_nonneg); exact division for any sign."""
    x, cu = d.src
    c = int(cu.arg)
    if c <= 0 or not _no_wrap(x):
        return None
    coefs, const = _sum_terms(x)
    if not coefs:
        return None
    if const % c == 0 and all(k % c == 0 for k in coefs.values()):  # every term divisible: exact
        if d.op is Ops.MOD:
            return d.const_like(0)
        return _build_sum(_scaled(coefs, lambda k: k // c), const // c, d.dtype)
    out: UOp | None = None
    if x.vmin >= 0:
        out = _fold_nonneg(dict(coefs), const, c, d.op, d.dtype)
    elif x.vmax <= 0 and _fits(d.dtype, -int(x.vmin)):  # truncation is odd: x op c == -((-x) op c)
        inner = _fold_nonneg(_scaled(coefs, operator.neg), -const, c, d.op, d.dtype)
        out = None if inner is None else _negate(inner)
    if out is None or out.op is Ops.CONST:
        return out
    return out if _no_wrap(out) else None


# ---------------------------------------------------------------------------------------------
# comparisons
# ---------------------------------------------------------------------------------------------


def _lt_div(x: UOp, d: UOp, c: UOp) -> UOp | None:
    """x // d < c  <->  x < c*d (c > 0), x < (c-1)*d + 1 (c <= 0), for d > 0 under truncation."""
    if d.arg <= 0:
        return None
    bound = c.arg * d.arg if c.arg > 0 else (c.arg - 1) * d.arg + 1
    return UOp(Ops.CMPLT, dtypes.bool, (x, _iconst(x.dtype, bound))) if _fits(x.dtype, bound) else None


def _linear(x: UOp) -> tuple[dict[UOp, int], int, int] | None:
    """(coefs, const, gcd of coefs) of a non-wrapping, non-constant int sum."""
    if x.op is Ops.CONST or not _no_wrap(x):
        return None
    coefs, const = _sum_terms(x)
    if not coefs:
        return None
    return coefs, const, math.gcd(*coefs.values())


def _reduced(coefs: dict[UOp, int], g: int, flip: bool, dtype: DType) -> UOp | None:
    s = _build_sum(_scaled(coefs, lambda k: (-k if flip else k) // g), 0, dtype)
    return s if _no_wrap(s) else None


def _against_const(x: UOp, c: UOp) -> tuple[UOp | None, int, int, bool] | None:
    """sum + k0 compared with c: the reduced sum S = sum/g (negated when every term is negative, flip),
    c - k0 and g. S is None when building it could wrap."""
    lin = _linear(x)
    if lin is None:
        return None
    coefs, k0, g = lin
    flip = all(k < 0 for k in coefs.values())
    return _reduced(coefs, g, flip, x.dtype), int(c.arg) - k0, g, flip


def _lt_const(n: UOp) -> UOp | None:
    """sum + k0 < c  ->  S < ceil((c-k0)/g) with S = sum/g; an all-negative sum flips to c' < -S."""
    x, cu = n.src
    found = _against_const(x, cu)
    if found is None:
        return None
    s, rhs, g, flip = found
    bound = (-rhs) // g if flip else -((-rhs) // g)  # floor(-rhs/g) resp. ceil(rhs/g)
    if s is None or not _fits(x.dtype, bound):
        return None
    cb = _iconst(x.dtype, bound)
    out = UOp(Ops.CMPLT, dtypes.bool, (cb, s) if flip else (s, cb))
    return None if out is n else out


def _gt_const(n: UOp) -> UOp | None:
    """c < sum + k0  ->  floor((c-k0)/g) < S; an all-negative sum flips to -S < ceil((k0-c)/g)."""
    cu, x = n.src
    found = _against_const(x, cu)
    if found is None:
        return None
    s, rhs, g, flip = found
    bound = -(rhs // g) if flip else rhs // g
    if s is None or not _fits(x.dtype, bound):
        return None
    cb = _iconst(x.dtype, bound)
    out = UOp(Ops.CMPLT, dtypes.bool, (s, cb) if flip else (cb, s))
    return None if out is n else out


def _eq_const(n: UOp) -> UOp | None:
    """sum + k0 ==/!= c  ->  S ==/!= (c-k0)/g, or a constant when g does not divide c-k0."""
    x, cu = n.src
    found = _against_const(x, cu)
    if found is None:
        return None
    s, rhs, g, flip = found
    if rhs % g != 0:
        return _bconst(n.op is Ops.CMPNE)
    bound = -rhs // g if flip else rhs // g
    if s is None or not _fits(x.dtype, bound):
        return None
    out = UOp(n.op, dtypes.bool, (s, _iconst(x.dtype, bound)))
    return None if out is n else out


# ---------------------------------------------------------------------------------------------
# gates (valid): AND-chains of comparisons
# ---------------------------------------------------------------------------------------------

Clause = tuple[UOp, int | None, int | None]  # expr, lower bound, upper bound (inclusive)
_FRESH = itertools.count()


def _unwrap_not(c: UOp) -> tuple[UOp, bool]:
    """(y, True) for !y spelled y != True, y == False or y ^ True; else (c, False)."""
    if c.op in (Ops.CMPNE, Ops.CMPEQ, Ops.XOR) and c.src[0].dtype == dtypes.bool and c.src[1].op is Ops.CONST:
        if c.src[1].arg is (c.op is not Ops.CMPEQ):
            return c.src[0], True
    return c, False


def _parse_clause(c: UOp) -> Clause | None:
    """A bound on an int expression from one clause: e < k, k < e, !(e < k), !(k < e), e == k."""
    inner, negated = _unwrap_not(c)
    if inner.op not in (Ops.CMPLT, Ops.CMPEQ) or not inner.src[0].dtype.is_int:
        return None
    a, b = inner.src
    lo: int | None
    hi: int | None
    if inner.op is Ops.CMPEQ:
        if negated or b.op is not Ops.CONST or a.op is Ops.CONST:
            return None
        e, lo, hi = a, int(b.arg), int(b.arg)
    elif b.op is Ops.CONST and a.op is not Ops.CONST:  # e < k: e <= k-1 (negated: e >= k)
        e, lo, hi = a, (int(b.arg) if negated else None), (None if negated else int(b.arg) - 1)
    elif a.op is Ops.CONST and b.op is not Ops.CONST:  # k < e: e >= k+1 (negated: e <= k)
        e, lo, hi = b, (None if negated else int(a.arg) + 1), (int(a.arg) if negated else None)
    else:
        return None
    if e.op is Ops.MUL and e.src[1].op is Ops.CONST and e.src[1].arg == -1:  # -y <= h  <->  y >= -h
        e, lo, hi = e.src[0], (None if hi is None else -hi), (None if lo is None else -lo)
    return e, lo, hi


def _negated_clause(cl: Clause) -> Clause | None:
    e, lo, hi = cl
    if lo is not None and hi is not None:  # not (lo <= e <= hi) is two intervals: no single bound
        return None
    return (e, hi + 1, None) if hi is not None else (e, None, None if lo is None else lo - 1)


def _constraints(clauses: list[Clause]) -> dict[UOp, tuple[int, int]] | None:
    """Intersect the bounds per expression (starting from its own); None if they contradict."""
    out: dict[UOp, tuple[int, int]] = {}
    for e, lo, hi in clauses:
        cur_lo, cur_hi = out.get(e, (int(e.vmin), int(e.vmax)))
        cur_lo = cur_lo if lo is None else max(cur_lo, lo)
        cur_hi = cur_hi if hi is None else min(cur_hi, hi)
        if cur_lo > cur_hi:
            return None
        out[e] = (cur_lo, cur_hi)
    return out


def _replace_from_ctx(ctx: dict[UOp, UOp], x: UOp) -> UOp | None:
    return ctx.get(x)


_SUBSTITUTE = PatternMatcher([(UPat(name="x"), _replace_from_ctx)], "substitute")


def _substitute(u: UOp, mapping: dict[UOp, UOp]) -> UOp:
    # node first (bottom_up): the largest constrained expression wins over its parts
    return graph_rewrite(u, _SUBSTITUTE, ctx=mapping, bottom_up=True, name="substitute")


def _with_fakes(u: UOp, cons: dict[UOp, tuple[int, int]]) -> tuple[UOp, dict[UOp, UOp]] | None:
    """u with each constrained expression replaced by a fresh variable of the tighter bounds (a
    constant where the bounds are one value); the map back. None if nothing tightens u."""
    present = set(u.toposort())
    fwd: dict[UOp, UOp] = {}
    back: dict[UOp, UOp] = {}
    for e, (lo, hi) in cons.items():
        if e not in present or (lo <= e.vmin and hi >= e.vmax):
            continue
        if lo == hi:
            fwd[e] = _iconst(e.dtype, lo)
            continue
        v = UOp(Ops.DEFINE_VAR, e.dtype, (), (f"__valid{next(_FRESH)}", lo, hi))  # unique: never meets a real one
        fwd[e], back[v] = v, e
    if not fwd:
        return None
    return _substitute(u, fwd), back


def _simplify_given(u: UOp, cons: dict[UOp, tuple[int, int]]) -> UOp:
    faked = _with_fakes(u, cons)
    if faked is None:
        return u
    sub, back = faked
    out = simplify(sub)
    return _substitute(out, back) if back else out


def _decide(clause: UOp, cons: dict[UOp, tuple[int, int]]) -> bool | None:
    """True/False if the clause is decided by the constraints (by bounds), else None."""
    faked = _with_fakes(clause, cons)
    if faked is None:
        return None
    sub = faked[0]
    return bool(sub.vmin) if sub.vmin == sub.vmax else None


def _prune_clauses(clauses: list[UOp]) -> list[UOp] | None:
    """Drop each clause the remaining others imply; None if they cannot all hold."""
    parsed = [_parse_clause(c) for c in clauses]
    if sum(p is not None for p in parsed) < 1 or len(clauses) < 2:
        return clauses
    keep = list(range(len(clauses)))
    for i in range(len(clauses)):
        others: list[Clause] = []
        for j in keep:
            found = parsed[j]
            if j != i and found is not None:
                others.append(found)
        if not others:
            continue
        cons = _constraints(others)
        if cons is None:
            return None
        verdict = _decide(clauses[i], cons)
        if verdict is False:
            return None
        if verdict is True:
            keep.remove(i)
    return [clauses[i] for i in keep]


def simplify_valid(valid: UOp) -> UOp:
    """A gate (an AND-chain of comparisons) without the clauses the other clauses imply, e.g.
    (x < 5) & (x < 10) -> x < 5; False if the clauses contradict ((x < 3) & (5 < x))."""
    clauses = _flatten(valid, Ops.AND) if valid.dtype == dtypes.bool else [valid]
    kept = _prune_clauses(clauses)
    if kept is None:
        return _bconst(False)
    if len(kept) == len(clauses):
        return valid
    return _chain(Ops.AND, dtypes.bool, kept) or _bconst(True)


def uop_given_valid(valid: UOp, u: UOp) -> UOp:
    """u simplified where valid holds (an index under its gate): each expression the gate bounds is
    replaced by a fresh variable with those bounds, the result simplified, and the variables put
    back. where(x < 5, x % 5, 0) with x in [0, 10) -> where(x < 5, x, 0)."""
    parsed = [p for p in (_parse_clause(c) for c in _flatten(valid, Ops.AND)) if p is not None]
    cons = _constraints(parsed)
    if not parsed or cons is None:  # a gate that never holds: u is never used, leave it
        return u
    return _simplify_given(u, cons)


def bounds_given_valid(valid: UOp, u: UOp) -> tuple[Any, Any]:
    """(vmin, vmax) of u where valid holds: the bounds of u with each expression the gate bounds replaced by a
    variable of the tighter bounds. A gate that never holds gives (0, 0): nothing is accessed under it."""
    parsed = [p for p in (_parse_clause(c) for c in _flatten(valid, Ops.AND)) if p is not None]
    cons = _constraints(parsed)
    if cons is None:
        return 0, 0
    faked = _with_fakes(u, cons) if parsed else None
    if faked is None:
        return u.vmin, u.vmax
    sub = simplify(faked[0])
    return sub.vmin, sub.vmax


def _fold_and(x: UOp) -> UOp | None:
    """Flat, deduplicated, sorted AND-chain of bools, clauses implied by others dropped."""
    clauses = [c for c in _flatten(x, Ops.AND) if not (c.op is Ops.CONST and c.arg is True)]
    if any(c.op is Ops.CONST and c.arg is False for c in clauses):
        return _bconst(False)
    kept = _prune_clauses(clauses)
    if kept is None:
        return _bconst(False)
    out = _chain(Ops.AND, dtypes.bool, sorted(kept, key=_order_key)) or _bconst(True)
    return None if out is x else out


def _fold_or(x: UOp) -> UOp | None:
    """Flat, deduplicated, sorted OR-chain of bools."""
    terms = [c for c in _flatten(x, Ops.OR) if not (c.op is Ops.CONST and c.arg is False)]
    if any(c.op is Ops.CONST and c.arg is True for c in terms):
        return _bconst(True)
    out = _chain(Ops.OR, dtypes.bool, sorted(terms, key=_order_key)) or _bconst(False)
    return None if out is x else out


_INDEX_OPS = GroupOp.ALU | {Ops.CONST, Ops.DEFINE_VAR, Ops.RANGE, Ops.CAST}


def _is_index_math(u: UOp) -> bool:
    """Only arithmetic on constants, variables and ranges below u. Gate knowledge is applied to such
    expressions only: both sides of a where are evaluated on every lane (numpy, WGSL select), so a
    LOAD under a gate must keep its own valid and index, or the lanes the gate rejects read out of
    bounds."""
    return all(n.op in _INDEX_OPS for n in u.toposort())


_BOUND_SENSITIVE = frozenset({Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.WHERE})


def _gate_can_help(u: UOp) -> bool:
    """Cheap filter before the (costly) simplification under a gate: tighter bounds change nothing
    in a canonical sum, only in ops that fold by bounds (div/mod/max/compare/where)."""
    return any(n.op in _BOUND_SENSITIVE for n in u.toposort())


def _smaller(new: UOp, old: UOp) -> bool:
    # accept a gate rewrite only if it shrinks the expression: guarantees the rewrite terminates
    return new is not old and _node_count(new) < _node_count(old)


def _where_under_gate(x: UOp) -> UOp | None:
    """Int branches of where(gate, a, b): a simplified knowing gate holds, b knowing it does not
    (when the gate is a single clause)."""
    c, a, b = x.src
    if not a.dtype.is_int or c.op is Ops.CONST:
        return None
    new_a = uop_given_valid(c, a) if _is_index_math(a) and _gate_can_help(a) else a
    new_a = new_a if _smaller(new_a, a) else a
    new_b = b
    single = _parse_clause(c)
    negated = None if single is None else _negated_clause(single)
    cons = None if negated is None else _constraints([negated])
    if cons is not None and _is_index_math(b) and _gate_can_help(b):
        candidate = _simplify_given(b, cons)
        new_b = candidate if _smaller(candidate, b) else b
    if new_a is a and new_b is b:
        return None
    return UOp(Ops.WHERE, x.dtype, (c, new_a, new_b))


def _load_under_gate(x: UOp) -> UOp | None:
    """LOAD(buf, idx, valid): the index only matters where valid holds."""
    buf, idx, valid = x.src
    if not _is_index_math(idx) or not _gate_can_help(idx):  # a gather: the inner LOAD keeps its guard
        return None
    new_idx = uop_given_valid(valid, idx)
    return x.replace(src=(buf, new_idx, valid)) if _smaller(new_idx, idx) else None


def _where_of_its_gated_load(c: UOp, x: UOp, z: UOp) -> UOp | None:
    """where(c, LOAD(buf, idx, valid), 0) -> the LOAD, where c is a clause of valid: the load reads 0 wherever c
    fails already (a padded window's element was selected twice, once in its load and once around it)."""
    if z.arg != 0 or (isinstance(z.arg, float) and math.copysign(1.0, z.arg) < 0):  # -0.0 is not what LOAD reads
        return None
    clauses = set(_flatten(x.src[2], Ops.AND))
    return x if set(_flatten(c, Ops.AND)) <= clauses else None


# ---------------------------------------------------------------------------------------------
# the matcher
# ---------------------------------------------------------------------------------------------


class _MemoMatcher(PatternMatcher):
    """A PatternMatcher that remembers, per node, what its rules made of it (across graph_rewrite
    calls: kernels share most of their index math). Sound because these rules are a function of
    the node alone (no ctx); leak-free because a rewrite never contains the node it replaces, so a
    cached value never keeps its weak key alive."""

    def __init__(self, rules: list[tuple[UPat, Callable[..., UOp | None]]], name: str = "rules"):
        super().__init__(rules, name)
        self._memo: weakref.WeakKeyDictionary[UOp, UOp | None] = weakref.WeakKeyDictionary()

    def rewrite(self, u: UOp, ctx: Any = None) -> UOp | None:
        if ctx is not None:
            return super().rewrite(u, ctx)
        if u in self._memo:
            return self._memo[u]
        out = super().rewrite(u)
        self._memo[u] = out
        return out


_SINT = UPat.var(dtype=SINTS)
_GATED_LOAD = UPat(Ops.LOAD, src=(UPat(), UPat(), UPat()), name="x")
_X_TIMES_Y = UPat(Ops.MUL, dtype=SINTS, src=[UPat.var("x"), UPat.var("y")], name="m")
_C = UPat.cvar

# int rules of symbolic_simple that the canonical sum/product rules below already cover: trying them on
# every node first would only cost time
_SUBSUMED = frozenset({_x_minus_x, _times_zero, _neg_neg})

symbolic = _MemoMatcher(
    [(r.pattern, r.fn) for r in symbolic_simple.rules if r.fn not in _SUBSUMED]
    + [
        # canonical sums and products (ints only: float addition is not associative)
        (UPat(Ops.NEG, dtype=INTS, src=(UPat.var("x"),)), _neg_int),
        (UPat(Ops.ADD, dtype=INTS, name="x"), _fold_sum),
        (UPat(Ops.MUL, dtype=INTS, name="x"), _fold_product),
        (UPat((Ops.MAX, Ops.CMPNE, Ops.CMPEQ, Ops.XOR), src=(UPat(dtype=INTS_BOOL), UPat()), name="x"), _sort_operands),
        (UPat((Ops.AND, Ops.OR), dtype=INTS, name="x"), _sort_operands),
        (UPat(Ops.MAX, dtype=INTS, src=(UPat.var("x"), UPat.var("y"))), _max_by_bounds),
        # division and remainder (signed: order and sign are what these rules reason about)
        (UPat(Ops.IDIV, src=(UPat.var("x", SINTS), _C("c"))), _div_by_negative),
        (UPat(Ops.MOD, src=(UPat.var("x", SINTS), _C("c"))), _mod_by_negative),
        (UPat(Ops.IDIV, src=(UPat(Ops.IDIV, src=(UPat.var("x", SINTS), _C("c1"))), _C("c2"))), _div_of_div),
        (UPat(Ops.MOD, src=(UPat(Ops.MOD, src=(UPat.var("x", SINTS), _C("c1"))), _C("c2"))), _mod_of_mod),
        (UPat(Ops.IDIV, src=(_X_TIMES_Y, UPat.var("y"))), _div_of_product),
        (UPat(Ops.MOD, src=(_X_TIMES_Y, UPat.var("y"))), _mod_of_product),
        (UPat(Ops.MOD, src=(UPat.var("x", SINTS), UPat.var("y"))), _mod_by_bounds),
        (UPat((Ops.IDIV, Ops.MOD), src=(_SINT, UPat(Ops.CONST)), name="d"), _div_mod_const),
        # comparisons with a constant
        (UPat(Ops.CMPLT, src=(UPat(Ops.IDIV, src=(UPat.var("x", SINTS), _C("d"))), _C("c"))), _lt_div),
        (UPat(Ops.CMPLT, src=(_SINT, UPat(Ops.CONST)), name="n"), _lt_const),
        (UPat(Ops.CMPLT, src=(UPat(Ops.CONST), _SINT), name="n"), _gt_const),
        (UPat((Ops.CMPNE, Ops.CMPEQ), src=(_SINT, UPat(Ops.CONST)), name="n"), _eq_const),
        # gates
        (UPat(Ops.AND, dtype=dtypes.bool, name="x"), _fold_and),
        (UPat(Ops.OR, dtype=dtypes.bool, name="x"), _fold_or),
        (UPat(Ops.WHERE, src=(UPat(dtype=dtypes.bool), UPat(), UPat()), name="x"), _where_under_gate),
        (UPat(Ops.LOAD, src=(UPat(), UPat(), UPat()), name="x"), _load_under_gate),
        (UPat(Ops.WHERE, src=(UPat.var("c"), _GATED_LOAD, UPat(Ops.CONST, name="z"))), _where_of_its_gated_load),
    ],
    "symbolic",
)


def simplify(u: UOp) -> UOp:
    """u with its integer index math simplified by ``symbolic`` (one memoized graph walk)."""
    return graph_rewrite(u, symbolic, name="symbolic")

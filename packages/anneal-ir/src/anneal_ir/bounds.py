"""Value bounds (vmin, vmax) by interval arithmetic: what symbolic rules fold with."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from anneal_ir.dtype import DType
from anneal_ir.ops import Ops

if TYPE_CHECKING:
    from anneal_ir.uop import UOp

Bounds = tuple[Any, Any]


def dtype_bounds(d: DType) -> Bounds:
    if d.kind == "b":
        return False, True
    if d.is_int:
        if d.is_unsigned:
            return 0, 2**d.bits - 1
        return -(2 ** (d.bits - 1)), 2 ** (d.bits - 1) - 1
    return -math.inf, math.inf


def _corners(a: UOp, b: UOp, f: Any) -> Bounds:
    vals = [f(x, y) for x in (a.vmin, a.vmax) for y in (b.vmin, b.vmax)]
    return min(vals), max(vals)


def _idiv(u: UOp) -> Bounds | None:
    a, b = u.src
    if not u.dtype.is_int:  # float bounds may be inf (int(inf) raises); truncation below is for ints
        return None
    if b.vmin > 0 and a.vmin >= 0:  # non-negative: C-style truncation equals floor
        return a.vmin // b.vmax, a.vmax // b.vmin
    if b.vmin > 0:
        vals = [-(-x // y) if x < 0 else x // y for x in (a.vmin, a.vmax) for y in (b.vmin, b.vmax)]  # exact trunc
        return min(vals), max(vals)
    return None


def _mod(u: UOp) -> Bounds | None:
    a, b = u.src
    if not u.dtype.is_int:  # a float remainder is not an integer: b.vmax - 1 is no bound for it
        return None
    if b.vmin > 0 and a.vmin >= 0:
        return (a.vmin, a.vmax) if a.vmax < b.vmin else (0, b.vmax - 1)
    if b.vmin > 0:
        return -(b.vmax - 1) if a.vmin < 0 else 0, b.vmax - 1 if a.vmax > 0 else 0
    return None


def _cmplt(u: UOp) -> Bounds:
    a, b = u.src
    if a.vmax < b.vmin:
        return True, True
    if a.vmin >= b.vmax:
        return False, False
    return False, True


def _cmpne(u: UOp) -> Bounds:
    a, b = u.src
    if a.vmax < b.vmin or a.vmin > b.vmax:
        return True, True
    if a.vmin == a.vmax == b.vmin == b.vmax:
        return False, False
    return False, True


def _cmpeq(u: UOp) -> Bounds:
    lo, hi = _cmpne(u)
    return not hi, not lo


def _where(u: UOp) -> Bounds:
    c, a, b = u.src
    if c.vmin == c.vmax:
        return (a.vmin, a.vmax) if c.vmin else (b.vmin, b.vmax)
    return min(a.vmin, b.vmin), max(a.vmax, b.vmax)


def _and(u: UOp) -> Bounds | None:
    a, b = u.src
    if u.dtype.kind == "b":
        return a.vmin and b.vmin, a.vmax and b.vmax
    return None


def _or(u: UOp) -> Bounds | None:
    a, b = u.src
    if u.dtype.kind == "b":
        return a.vmin or b.vmin, a.vmax or b.vmax
    return None


_RULES = {
    Ops.CONST: lambda u: (u.arg, u.arg),
    Ops.DEFINE_VAR: lambda u: (u.arg[1], u.arg[2]),
    Ops.BIND: lambda u: (u.src[1].arg, u.src[1].arg),
    Ops.RANGE: lambda u: (0, u.src[0].vmax - 1),
    Ops.SPECIAL: lambda u: (0, u.arg[1] - 1),
    Ops.ADD: lambda u: (u.src[0].vmin + u.src[1].vmin, u.src[0].vmax + u.src[1].vmax),
    Ops.MUL: lambda u: _corners(u.src[0], u.src[1], lambda x, y: 0 if 0 in (x, y) else x * y),
    Ops.NEG: lambda u: (-u.src[0].vmax, -u.src[0].vmin),
    Ops.MAX: lambda u: (max(u.src[0].vmin, u.src[1].vmin), max(u.src[0].vmax, u.src[1].vmax)),
    Ops.IDIV: _idiv,
    Ops.MOD: _mod,
    Ops.CMPLT: _cmplt,
    Ops.CMPNE: _cmpne,
    Ops.CMPEQ: _cmpeq,
    Ops.WHERE: _where,
    Ops.AND: _and,
    Ops.OR: _or,
    Ops.CAST: lambda u: (u.src[0].vmin, u.src[0].vmax) if u.dtype.is_int and u.src[0].dtype.is_int else None,
}


def bounds(u: UOp) -> Bounds:
    """(vmin, vmax) of u; the dtype's full range where nothing tighter is known."""
    rule = _RULES.get(u.op)
    found = rule(u) if rule is not None else None
    if found is None:
        return dtype_bounds(u.dtype)
    lo, hi = found
    dlo, dhi = dtype_bounds(u.dtype)
    if u.dtype.kind == "b":
        return bool(lo), bool(hi)
    if u.dtype.is_int and (lo < dlo or hi > dhi):  # may wrap: say nothing
        return dlo, dhi
    return lo, hi

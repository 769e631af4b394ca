"""Symbolic sizes: a dim is an ``int`` or an int64 UOp over Variables (DEFINE_VAR).

A Variable is a named, bounded integer (``Variable("batch", 1, 512)``). A shape may hold it
(or a product of it) where a size is only known per call; the value for one call travels
in the graph as ``BIND(var, value)``. Products are kept in the simplifier's canonical form,
so equal sizes meet as the same hash-consed node and ``==`` between dims is identity.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from anneal_ir.dtype import dtypes
from anneal_ir.ops import Ops
from anneal_ir.uop import UOp

sint = int | UOp
SIZE = dtypes.int64


class UnboundVariableError(ValueError):
    """A graph uses a Variable no BIND in it gives a value to."""


def Variable(name: str, lo: int, hi: int) -> UOp:  # noqa: N802 - a constructor, as tinygrad's Variable
    """A named integer known to lie in [lo, hi]; ``.bind(value)`` gives it a value for one call."""
    if not (isinstance(name, str) and name.isidentifier()):
        raise ValueError(f"Variable: the name must be an identifier, got {name!r}")
    if not (isinstance(lo, int) and isinstance(hi, int)) or not 0 <= lo <= hi:
        raise ValueError(f"Variable {name!r}: bounds must be ints with 0 <= lo <= hi, got [{lo}, {hi}]")
    return UOp(Ops.DEFINE_VAR, SIZE, (), (name, lo, hi))


def bind(var: UOp, value: int) -> UOp:
    """``BIND(var, value)``: the variable's value for one call (checked against its bounds)."""
    if var.op is not Ops.DEFINE_VAR:
        raise TypeError(f"bind: only a Variable can be bound, not {var.op.name}")
    name, lo, hi = var.arg
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"Variable {name!r}: value {value!r} is outside its bounds [{lo}, {hi}]")
    return UOp(Ops.BIND, SIZE, (var, UOp.const(SIZE, value)))


def is_symbolic(x: Any) -> bool:
    return isinstance(x, UOp)


def as_size(x: sint) -> UOp:
    return x if isinstance(x, UOp) else UOp.const(SIZE, x)


def _from_uop(u: UOp) -> sint:
    from anneal_ir.symbolic import simplify

    out = simplify(u)
    return int(out.arg) if out.op is Ops.CONST else out


def smul(a: sint, b: sint) -> sint:
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    if a == 1 or b == 0:
        return b
    if b == 1 or a == 0:
        return a
    return _from_uop(as_size(a) * as_size(b))


def sadd(a: sint, b: sint) -> sint:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    return _from_uop(as_size(a) + as_size(b))


def sdiv(a: sint, b: sint) -> sint:
    """a // b for sizes (exact when b divides a, as in reshape's -1)."""
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    return _from_uop(as_size(a) // as_size(b))


def sprod(dims: Iterable[sint]) -> sint:
    out: sint = 1
    for d in dims:
        out = smul(out, d)
    return out


def variables(x: Any) -> list[UOp]:
    """The Variables (DEFINE_VAR) in a size or a shape, by name."""
    items = x if isinstance(x, tuple) else (x,)
    found = {n for d in items if isinstance(d, UOp) for n in d.toposort() if n.op is Ops.DEFINE_VAR}
    return sorted(found, key=lambda v: v.arg[0])


def resolve(x: sint, values: Mapping[str, int]) -> int:
    """A size's value, given each Variable's value by name."""
    if isinstance(x, int):
        return x
    from anneal_ir.symbolic import exec_alu

    vals: dict[UOp, int] = {}
    for n in x.toposort():
        if n.op is Ops.CONST:
            vals[n] = n.arg
        elif n.op is Ops.DEFINE_VAR:
            if n.arg[0] not in values:
                raise UnboundVariableError(f"Variable {n.arg[0]!r} has no value here: bind it, e.g. "
                                           f"x.reshape(var.bind(n), ...)")  # fmt: skip
            vals[n] = values[n.arg[0]]
        elif n.op is Ops.BIND:
            vals[n] = n.src[1].arg
        else:
            vals[n] = exec_alu(n.op, n.dtype, [vals[s] for s in n.src], n.src[0].dtype)
    return int(vals[x])


def resolve_shape(shape: tuple[sint, ...], values: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(resolve(d, values) for d in shape)


def upper(x: sint) -> int:
    """The largest value a size can take (what memory is allocated for)."""
    return x if isinstance(x, int) else int(x.vmax)


def render_size(x: sint) -> str:
    """A size as people write it: ``batch``, ``batch*4``, ``batch+1``."""
    if isinstance(x, int):
        return str(x)
    if x.op is Ops.CONST:
        return str(x.arg)
    if x.op is Ops.DEFINE_VAR:
        return str(x.arg[0])
    if x.op is Ops.BIND:
        return f"{x.src[0].arg[0]}={x.src[1].arg}"
    sym = {Ops.ADD: "+", Ops.MUL: "*", Ops.IDIV: "//", Ops.MOD: "%", Ops.MAX: " max "}
    if x.op in sym:
        return sym[x.op].join(render_size(s) for s in x.src)
    return f"{x.op.name.lower()}({', '.join(render_size(s) for s in x.src)})"


def size_code(x: sint, div: str = "/") -> str:
    """A size as code: an int, or an expression over the kernel's Variables (``v_<name>``) in the
    syntax C, WGSL and Python share (``div`` is ``/`` or Python's ``//``: sizes are never negative, so
    truncating and flooring agree)."""
    if isinstance(x, int):
        return str(x)
    if x.op is Ops.CONST:
        return str(int(x.arg))
    if x.op is Ops.DEFINE_VAR:
        return f"v_{x.arg[0]}"
    ops = {Ops.ADD: "+", Ops.MUL: "*", Ops.IDIV: div, Ops.MOD: "%"}
    if x.op in ops:
        return "(" + f" {ops[x.op]} ".join(size_code(s, div) for s in x.src) + ")"
    if x.op is Ops.MAX:
        return f"max({size_code(x.src[0], div)}, {size_code(x.src[1], div)})"
    raise NotImplementedError(f"a symbolic size with {x.op.name} cannot be rendered")


def render_shape(shape: tuple[sint, ...]) -> str:
    inner = ", ".join(render_size(d) for d in shape)
    return f"({inner},)" if len(shape) == 1 else f"({inner})"


def record_bind(values: dict[str, int], bind_node: UOp) -> None:
    """Add a BIND's value to values; a second, different value for one Variable is an error."""
    name, value = bind_node.src[0].arg[0], bind_node.src[1].arg
    if values.setdefault(name, value) != value:
        raise ValueError(f"Variable {name!r} is bound to both {values[name]} and {value} in one graph; "
                         "give each call one value")  # fmt: skip


def bound_values(root: UOp) -> dict[str, int]:
    """Every Variable's value from the BINDs under root; two different values are an error."""
    out: dict[str, int] = {}
    for n in root.toposort():
        if n.op is Ops.BIND:
            record_bind(out, n)
    return out

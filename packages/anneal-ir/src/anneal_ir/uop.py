"""UOp: the one immutable, hash-consed node type of every stage of the compiler.

Building a UOp equal to a live one returns the live one, so equality is identity and
graphs are deduplicated for free. The table holds weak references: a graph nobody uses
is freed. Shape and value bounds are derived and cached on first use; ``key`` is a
content hash for persistent caches.
"""

from __future__ import annotations

import hashlib
import math
import struct
import weakref
from collections.abc import Iterator
from functools import cached_property
from typing import Any

from anneal_ir.dtype import DType, dtypes
from anneal_ir.ops import GroupOp, Ops
from anneal_ir.trace import current_trace

Shape = tuple[Any, ...]  # of sizes: an int, or an int64 UOp over Variables (anneal_ir.sint)


def _arg_key(arg: Any) -> Any:
    """Hash-consing key of an arg: floats by their bits, so 0.0 and -0.0 stay apart and a
    NaN constant is found again."""
    if isinstance(arg, float):
        return ("f", struct.pack("<d", arg))
    if isinstance(arg, tuple):
        return tuple(_arg_key(a) for a in arg)
    return (type(arg), arg)


class UOpMeta(type):
    _live: weakref.WeakValueDictionary[tuple, UOp] = weakref.WeakValueDictionary()

    def __call__(cls, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None) -> UOp:
        key = (op, dtype, src, _arg_key(arg))
        if (found := UOpMeta._live.get(key)) is not None:
            return found
        node = super().__call__(op, dtype, src, arg)
        UOpMeta._live[key] = node
        if (trace := current_trace.get()) is not None:
            trace.created(node)
        return node


class UOp(metaclass=UOpMeta):
    __slots__ = ("op", "dtype", "src", "arg", "__weakref__", "__dict__")

    def __init__(self, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None):
        self.op, self.dtype, self.src, self.arg = op, dtype, src, arg

    def __reduce__(self) -> tuple:
        return UOp, (self.op, self.dtype, self.src, self.arg)

    def __repr__(self) -> str:
        if self.op is Ops.DEFINE_VAR and self.dtype == dtypes.int64:  # a Variable, as the user made it
            return f"Variable({self.arg[0]!r}, {self.arg[1]}, {self.arg[2]})"
        return pretty(self)

    def replace(self, **kwargs: Any) -> UOp:
        fields = {"op": self.op, "dtype": self.dtype, "src": self.src, "arg": self.arg} | kwargs
        return UOp(fields["op"], fields["dtype"], fields["src"], fields["arg"])

    # ---- construction helpers ----
    @staticmethod
    def const(dtype: DType, value: Any) -> UOp:
        return UOp(Ops.CONST, dtype, (), cast_value(value, dtype))

    def const_like(self, value: Any) -> UOp:
        return UOp.const(self.dtype, value)

    def alu(self, op: Ops, *src: UOp) -> UOp:
        out = dtypes.bool if op in GroupOp.Comparison else self.dtype
        return UOp(op, out, (self, *src))

    def _operand(self, x: UOp | int | float | bool) -> UOp:
        return x if isinstance(x, UOp) else self.const_like(x)

    def __add__(self, x: Any) -> UOp:
        return self.alu(Ops.ADD, self._operand(x))

    def __radd__(self, x: Any) -> UOp:
        return self._operand(x).alu(Ops.ADD, self)

    def __mul__(self, x: Any) -> UOp:
        return self.alu(Ops.MUL, self._operand(x))

    def __rmul__(self, x: Any) -> UOp:
        return self._operand(x).alu(Ops.MUL, self)

    def __sub__(self, x: Any) -> UOp:
        return self + (-self._operand(x))

    def __neg__(self) -> UOp:
        return self.alu(Ops.NEG) if not self.dtype.is_int else self * -1

    def __floordiv__(self, x: Any) -> UOp:
        return self.alu(Ops.IDIV, self._operand(x))

    def __mod__(self, x: Any) -> UOp:
        return self.alu(Ops.MOD, self._operand(x))

    def __lt__(self, x: Any) -> UOp:
        return self.alu(Ops.CMPLT, self._operand(x))

    def ne(self, x: Any) -> UOp:
        return self.alu(Ops.CMPNE, self._operand(x))

    def eq(self, x: Any) -> UOp:
        return self.alu(Ops.CMPEQ, self._operand(x))

    def maximum(self, x: Any) -> UOp:
        return self.alu(Ops.MAX, self._operand(x))

    def logical_and(self, x: Any) -> UOp:
        return self.alu(Ops.AND, self._operand(x))

    def where(self, a: Any, b: Any) -> UOp:
        a = a if isinstance(a, UOp) else b.const_like(a)
        b = b if isinstance(b, UOp) else a.const_like(b)
        return UOp(Ops.WHERE, a.dtype, (self, a, b))

    def bind(self, value: int) -> UOp:
        """A Variable's value for one call: ``x.reshape(batch.bind(len(data)), 784)``."""
        from anneal_ir.sint import bind

        return bind(self, value)

    def cast(self, dtype: DType) -> UOp:
        return self if dtype == self.dtype else UOp(Ops.CAST, dtype, (self,))

    # ---- derived, cached properties ----
    def _sources_first(self, attr: str, compute: Any) -> None:
        """Fill a cached property for every source first, without recursion: graphs can be deep."""
        if all(attr in s.__dict__ for s in self.src):
            return
        # sources before users, walking only the nodes that lack it (a full toposort per new node is quadratic)
        seen: set[UOp] = set()
        stack: list[tuple[UOp, bool]] = [(s, False) for s in self.src if attr not in s.__dict__]
        while stack:
            node, done = stack.pop()
            if done:
                node.__dict__[attr] = compute(node)
                continue
            if node in seen:
                continue
            seen.add(node)
            stack.append((node, True))
            stack.extend((s, False) for s in node.src if attr not in s.__dict__ and s not in seen)

    @cached_property
    def key(self) -> bytes:
        """Content hash: same structure and args -> same key, in any process."""
        self._sources_first("key", _content_key)
        return _content_key(self)

    @cached_property
    def shape(self) -> Shape | None:
        from anneal_ir.shape import infer_shape

        self._sources_first("shape", infer_shape)
        return infer_shape(self)

    @cached_property
    def size(self) -> Any:
        assert self.shape is not None, f"{self.op} has no shape"
        if all(isinstance(d, int) for d in self.shape):
            return math.prod(self.shape)
        from anneal_ir.sint import sprod

        return sprod(self.shape)

    @cached_property
    def bounds(self) -> tuple[Any, Any]:
        from anneal_ir.bounds import bounds

        self._sources_first("bounds", bounds)
        return bounds(self)

    @property
    def vmin(self) -> int | float | bool:
        return self.bounds[0]

    @property
    def vmax(self) -> int | float | bool:
        return self.bounds[1]

    def toposort(self) -> list[UOp]:
        """Every node under self, sources before users (iterative: graphs can be deep)."""
        seen: set[UOp] = set()
        order: list[UOp] = []
        stack: list[tuple[UOp, bool]] = [(self, False)]
        while stack:
            node, done = stack.pop()
            if done:
                order.append(node)
                continue
            if node in seen:
                continue
            seen.add(node)
            stack.append((node, True))
            stack.extend((s, False) for s in reversed(node.src) if s not in seen)
        return order

    def walk(self) -> Iterator[UOp]:
        yield from self.toposort()


def flatten(root: UOp) -> list[tuple[Ops, DType, tuple[int, ...], Any]]:
    """root as a list of (op, dtype, source positions, arg), sources first: a graph of any depth in a form
    pickle takes (it recurses once per nested node). Args holding nodes are not supported."""
    order = root.toposort()
    pos = {n: i for i, n in enumerate(order)}
    out = []
    for n in order:
        if isinstance(n.arg, UOp) or (isinstance(n.arg, tuple) and any(isinstance(a, UOp) for a in n.arg)):
            raise ValueError(f"flatten: {n.op.name} has a node in its arg")
        out.append((n.op, n.dtype, tuple(pos[s] for s in n.src), n.arg))
    return out


def unflatten(nodes: list[tuple[Ops, DType, tuple[int, ...], Any]]) -> UOp:
    """The graph flatten() listed (its last node is the root)."""
    built: list[UOp] = []
    for op, dtype, src, arg in nodes:
        built.append(UOp(op, dtype, tuple(built[i] for i in src), arg))
    return built[-1]


def _content_key(u: UOp) -> bytes:
    h = hashlib.sha256(f"{u.op.name}|{u.dtype.name}|{arg_repr(u.arg)}".encode())
    for s in u.src:
        h.update(s.key)
    return h.digest()


def cast_value(value: Any, dtype: DType) -> Any:
    """A Python value as it would be stored in dtype (used for CONST args)."""
    if dtype.kind == "b":
        return bool(value)
    if dtype.is_int:
        return int(value)
    if dtype.is_float:
        return float(value)
    return value


def arg_repr(arg: Any) -> str:
    if isinstance(arg, float):
        return struct.pack("<d", arg).hex()
    if isinstance(arg, tuple):
        return "(" + ",".join(arg_repr(a) for a in arg) + ")"
    if isinstance(arg, Ops):
        return arg.name
    if isinstance(arg, UOp):  # a symbolic size in a shape
        return arg.key.hex()
    if hasattr(arg, "content_key"):
        return arg.content_key()
    return repr(arg)


def pretty(root: UOp, limit: int = 60) -> str:
    """One line per node, sources by number: readable for graphs of any depth."""
    nodes = root.toposort()
    ids = {n: i for i, n in enumerate(nodes)}
    lines = []
    for n in nodes[-limit:]:
        srcs = ",".join(f"%{ids[s]}" for s in n.src)
        arg = "" if n.arg is None else f" {n.arg!r}"
        lines.append(f"%{ids[n]} = {n.op.name} {n.dtype.name} ({srcs}){arg}")
    if len(nodes) > limit:
        lines.insert(0, f"... {len(nodes) - limit} more nodes")
    return "\n".join(lines)

"""Rewrites as data: UPat patterns, PatternMatcher tables and graph_rewrite.

A rule is (UPat, function). The function receives the pattern's named bindings as keyword
arguments (and ``ctx`` if it asks for it) and returns a replacement UOp, or None to pass.
A src given as a tuple matches in order; given as a list it matches in any order
(commutative matching).
"""

from __future__ import annotations

import inspect
import itertools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from anneal_ir.dtype import DType
from anneal_ir.ops import Ops
from anneal_ir.trace import current_trace
from anneal_ir.uop import UOp

_ANY = object()


class UPat:
    __slots__ = ("ops", "dtypes", "src", "arg", "name", "allow_any_len", "custom")

    def __init__(
        self,
        op: Ops | Iterable[Ops] | None = None,
        dtype: DType | Iterable[DType] | None = None,
        src: tuple[UPat, ...] | list[UPat] | UPat | None = None,
        arg: Any = _ANY,
        name: str | None = None,
        allow_any_len: bool = False,
        custom: Callable[[UOp], bool] | None = None,
    ):
        self.ops = None if op is None else (frozenset((op,)) if isinstance(op, Ops) else frozenset(op))
        self.dtypes = None if dtype is None else (frozenset((dtype,)) if isinstance(dtype, DType) else frozenset(dtype))
        self.src = src
        self.arg, self.name, self.allow_any_len, self.custom = arg, name, allow_any_len, custom

    def __repr__(self) -> str:
        ops = "any" if self.ops is None else "|".join(sorted(o.name for o in self.ops))
        name = f" name={self.name}" if self.name else ""
        arg = "" if self.arg is _ANY else f" arg={self.arg!r}"
        src = "" if self.src is None else f" src={self.src!r}"
        return f"UPat({ops}{name}{arg}{src})"

    # ---- constructors that read like the rules they build ----
    @staticmethod
    def var(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat:
        return UPat(dtype=dtype, name=name)

    @staticmethod
    def cvar(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat:
        return UPat(Ops.CONST, dtype=dtype, name=name)

    @staticmethod
    def const(value: Any, dtype: DType | Iterable[DType] | None = None) -> UPat:
        return UPat(Ops.CONST, dtype=dtype, arg=value)

    @staticmethod
    def alu(op: Ops, *src: UPat, name: str | None = None, commutative: bool = False) -> UPat:
        return UPat(op, src=list(src) if commutative else tuple(src), name=name)

    # ---- matching ----
    def _orderings(self) -> Iterable[tuple[UPat, ...]]:
        if isinstance(self.src, list):
            return itertools.permutations(self.src)
        if isinstance(self.src, UPat):
            return ()
        return (self.src,)  # type: ignore[return-value]

    def match(self, u: UOp, store: dict[str, UOp]) -> list[dict[str, UOp]]:
        if self.ops is not None and u.op not in self.ops:
            return []
        if self.dtypes is not None and u.dtype not in self.dtypes:
            return []
        if self.arg is not _ANY and not _arg_equal(self.arg, u.arg):
            return []
        if self.custom is not None and not self.custom(u):
            return []
        if self.name is not None:
            if self.name in store and store[self.name] is not u:
                return []
            store = {**store, self.name: u}
        if self.src is None:
            return [store]
        if isinstance(self.src, UPat):  # every source matches the same pattern
            stores = [store]
            for s in u.src:
                stores = [m for st in stores for m in self.src.match(s, st)]
            return stores
        found: list[dict[str, UOp]] = []
        for order in self._orderings():
            if len(order) != len(u.src) and not (self.allow_any_len and len(order) <= len(u.src)):
                continue
            stores = [store]
            for p, s in zip(order, u.src):
                stores = [m for st in stores for m in p.match(s, st)]
                if not stores:
                    break
            found.extend(stores)
        return found


def _arg_equal(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b if isinstance(a, (int, float, bool)) else a == b


@dataclass(frozen=True)
class Rule:
    pattern: UPat
    fn: Callable[..., UOp | None]
    wants_ctx: bool
    name: str = ""  # "table.function", as a trace reports it


class PatternMatcher:
    """A rule table, indexed by the root op of each pattern."""

    def __init__(self, rules: list[tuple[UPat, Callable[..., UOp | None]]], name: str = "rules"):
        self.name = name
        self.rules = [_rule(p, f, name) for p, f in rules]
        self._index()

    @classmethod
    def _of_rules(cls, rules: list[Rule], name: str) -> PatternMatcher:
        pm = cls.__new__(cls)
        pm.name, pm.rules = name, rules
        pm._index()
        return pm

    def _index(self) -> None:
        self.by_op: dict[Ops, list[Rule]] = {}
        self.any_op: list[Rule] = []
        for r in self.rules:
            if r.pattern.ops is None:
                self.any_op.append(r)
            else:
                for op in r.pattern.ops:
                    self.by_op.setdefault(op, []).append(r)
        # keep table order within each op, wildcard rules last
        for op in list(self.by_op):
            self.by_op[op] = self.by_op[op] + self.any_op

    def __add__(self, other: PatternMatcher) -> PatternMatcher:
        return PatternMatcher._of_rules(self.rules + other.rules, f"{self.name}+{other.name}")

    def rules_for(self, op: Ops) -> list[Rule]:
        return self.by_op.get(op, self.any_op)

    def first_match(self, u: UOp) -> tuple[Rule, dict[str, UOp]] | None:
        """The first rule whose pattern matches u, with its bindings (for tables whose rules return
        something other than a replacement node, such as autodiff's)."""
        for rule in self.rules_for(u.op):
            for store in rule.pattern.match(u, {}):
                return rule, store
        return None

    def rewrite(self, u: UOp, ctx: Any = None) -> UOp | None:
        found = self.apply(u, ctx)
        return None if found is None else found[0]

    def apply(self, u: UOp, ctx: Any = None) -> tuple[UOp, Rule] | None:
        """The first rule's replacement of u, and the rule (None: no rule changes u)."""
        for rule in self.rules_for(u.op):
            for store in rule.pattern.match(u, {}):
                out = rule.fn(ctx=ctx, **store) if rule.wants_ctx else rule.fn(**store)
                if out is not None and out is not u:
                    return out, rule
        return None


def _rule(pattern: UPat, fn: Callable[..., UOp | None], table: str) -> Rule:
    return Rule(pattern, fn, "ctx" in inspect.signature(fn).parameters, f"{table}.{getattr(fn, '__name__', 'rule')}")


def graph_rewrite(
    root: UOp, matcher: PatternMatcher, ctx: Any = None, bottom_up: bool = False, name: str | None = None
) -> UOp:
    """Rewrite every node under root to a fixed point, memoized, without recursion.

    Default order: a node's sources are rewritten first, then the node itself. With
    ``bottom_up=True`` a node is rewritten before its sources are visited (useful when a
    rule wants to see the original subgraph), and again after they change.
    """
    start = time.perf_counter()
    trace = current_trace.get()
    record = trace.begin_pass(name or matcher.name, root) if trace is not None else None
    done: dict[UOp, UOp] = {}
    # stack entries: (node, stage, target); stage 0 = visit, 1 = sources done, 2 = alias to target
    stack: list[tuple[UOp, int, UOp | None]] = [(root, 0, None)]
    while stack:
        node, stage, target = stack.pop()
        if node in done:
            continue
        if stage == 2:
            assert target is not None
            if target not in done:  # target still being worked on: come back later
                stack.append((node, 2, target))
                stack.append((target, 0, None))
                continue
            done[node] = done[target]
            continue
        if stage == 0:
            if bottom_up:
                found = matcher.apply(node, ctx)
                if found is not None:
                    new = found[0]
                    if trace is not None:
                        trace.fired(record, found[1].name, node, new)
                    stack.append((node, 2, new))
                    stack.append((new, 0, None))
                    continue
            stack.append((node, 1, None))
            stack.extend((s, 0, None) for s in reversed(node.src) if s not in done)
            continue
        new_src = tuple(done[s] for s in node.src)
        rebuilt = node if all(a is b for a, b in zip(new_src, node.src)) else node.replace(src=new_src)
        if trace is not None and rebuilt is not node:
            trace.rebuilt(node, rebuilt)
        if rebuilt is not node and rebuilt in done:
            done[node] = done[rebuilt]
            continue
        found = matcher.apply(rebuilt, ctx)
        if found is None:
            done[node] = rebuilt
            if rebuilt is not node:
                done[rebuilt] = rebuilt
        else:
            new = found[0]
            if trace is not None:
                trace.fired(record, found[1].name, rebuilt, new)
            stack.append((node, 2, new))
            stack.append((new, 0, None))
    if record is not None:
        record.root_out, record.seconds = done[root], time.perf_counter() - start
    return done[root]

"""Kernel opts: transformations of a kernel's ranges, as data (tinygrad's Opt / apply_opt).

A scheduled kernel has ranges of two kinds: "global" (the output's) and "reduce" (closed by a
REDUCE). An opt splits one range r of extent E into an outer part, which keeps r's id and kind,
and an inner part of ``amount`` values and a new kind:

    r = outer * amount + inner          (outer has ceil(E / amount) values)

A split that does not divide E guards what it adds: loads are gated and the store (or the
reduction's term) is dropped where outer * amount + inner >= E. The kinds an opt makes:

=========  ============  ================================================================
opt        splits        the inner part
=========  ============  ================================================================
LOCAL      global        runs across a workgroup's invocations
UPCAST     global        is unrolled: one invocation computes every value (a register tile)
VECTOR     any           is four lanes of one vec4 value (amount 4)
UNROLL     reduce        is unrolled inside the reduction's loop
GROUP      reduce        is shared among the workgroup's invocations, combined in workgroup memory
LOOP       global        (no split) the whole range is iterated inside each invocation
MERGE      all globals   (no split) they become one range, the flat index; ``amount`` k > 0 puts range k - 1
                         innermost (neighbouring invocations step along it), 0 keeps their order
JOIN       two globals   (no split) range ``axis`` and range ``amount`` (its inner neighbour) become one
                         range with axis's id: a tile's rows may span both (a small image's y and x)
STAGE      --            the contraction's operand ``axis`` (0: a, 1: b) is computed once per
                         element of its tile into workgroup memory, then read from there
INNER      unroll        (of reduce range ``axis``) the outer part becomes a loop inside the staged
                         tile's step: TK-deep tiles without unrolling all TK values
SKIP       --            (after STAGE and INNER) a step whose staged tile of operand ``axis`` is all zeros
                         leaves out its multiply-adds: a one-hot operand (an embedding's gradient
                         over a vocabulary) is zero in most steps of most tiles
=========  ============  ================================================================

An opt names its range by id (``RANGE.arg[0]``): opts made for a kernel replay on it exactly, so
a list of opts is what the heuristic picks, BEAM searches and caches. ``apply_opts`` returns the
transformed kernel; ``anneal_schedule.lower`` turns it into a program.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum, auto
from typing import Any

from anneal_ir import Ops, UOp, dtypes
from anneal_schedule.analysis import affine, const_extent, identity, kind, ranges_of
from anneal_schedule.simplify import simplify_kernel

INDEX = dtypes.int64


class OptOps(Enum):
    LOCAL = auto()
    UPCAST = auto()
    VECTOR = auto()
    UNROLL = auto()
    GROUP = auto()
    LOOP = auto()
    MERGE = auto()
    JOIN = auto()
    STAGE = auto()
    INNER = auto()
    SKIP = auto()


@dataclass(frozen=True)
class Opt:
    op: OptOps
    axis: int = 0  # the range's id (STAGE: the operand, 0 or 1; MERGE: unused)
    # the split's size (JOIN: the inner range's id; MERGE: 1 + the id of the range put innermost, 0: none)
    amount: int = 0

    def __repr__(self) -> str:
        return f"{self.op.name}({self.axis}{f', {self.amount}' if self.amount else ''})"

    def as_data(self) -> list[Any]:
        return [self.op.name, self.axis, self.amount]

    @staticmethod
    def from_data(d: list[Any]) -> Opt:
        return Opt(OptOps[d[0]], int(d[1]), int(d[2]))


class OptError(ValueError):
    """An opt that does not apply to the kernel (no such range, wrong kind, too large)."""


_SPLITS = {
    OptOps.LOCAL: (("global",), "local"),
    OptOps.UPCAST: (("global",), "upcast"),
    OptOps.VECTOR: (("global", "local", "loop", "reduce", "group"), "vector"),
    OptOps.UNROLL: (("reduce",), "unroll"),
    OptOps.GROUP: (("reduce",), "group"),
}


def origin(r: UOp) -> int:
    """The id of the range as scheduled that r is a part of."""
    return int(r.arg[2]) if len(r.arg) > 2 else int(r.arg[0])


def stride(r: UOp) -> int:
    """r's step inside the range it was split from (1 for a range as scheduled)."""
    return int(r.arg[3]) if len(r.arg) > 3 else 1


def make_range(end: Any, rid: int, kind_: str, origin_: int, stride_: int) -> UOp:
    end_u = end if isinstance(end, UOp) else UOp.const(INDEX, end)
    return UOp(Ops.RANGE, INDEX, (end_u,), (rid, kind_, origin_, stride_))


def _ranges(ast: UOp) -> list[UOp]:
    return sorted((n for n in ast.toposort() if n.op is Ops.RANGE), key=lambda r: r.arg[0])


def _find(ast: UOp, rid: int) -> UOp:
    for r in _ranges(ast):
        if r.arg[0] == rid:
            return r
    raise OptError(f"no range {rid} in the kernel")


def _gate(ast: UOp, old: UOp, parts: tuple[UOp, ...], expr: UOp, guard: UOp | None) -> UOp:
    """ast with range old replaced by expr over parts: a REDUCE over old reduces over the parts, and a guard
    (where expr runs past old's extent) gates every load, the store and the reduction's terms."""
    deps = ranges_of(ast)
    done: dict[UOp, UOp] = {old: expr}
    for n in ast.toposort():
        if n in done:
            continue
        src = tuple(done.get(s, s) for s in n.src)
        if n.op is Ops.REDUCE and old in n.src[1:]:
            ranges: list[UOp] = []
            for s in n.src[1:]:
                ranges.extend(parts if s is old else (done.get(s, s),))
            value = src[0] if guard is None else _guarded_term(n, src[0], guard)
            done[n] = n.replace(src=(value, *ranges))
            continue
        if guard is not None and old in deps[n] and n.op in (Ops.LOAD, Ops.STORE):
            gate = src[2] if n.op is Ops.LOAD and len(src) == 3 else src[3] if len(src) == 4 else None
            gate = guard if gate is None else gate.logical_and(guard)
            src = (*src[:2], gate) if n.op is Ops.LOAD else (*src[:3], gate)
        done[n] = n if src == n.src else n.replace(src=src)
    return done[ast]


def _guarded_term(red: UOp, value: UOp, guard: UOp) -> UOp:
    """A reduction's term where the guard holds, the reduction's identity elsewhere. A sum of products guards each
    factor instead: where(g, a * b, 0) == where(g, a, 0) * where(g, b, 0) exactly (a select drops an inf or NaN), and
    a staged tile then holds the zeros, so the multiply-add in the inner loop needs no select."""
    if red.arg is Ops.ADD and value.op is Ops.MUL:
        a, b = value.src
        return UOp(Ops.MUL, value.dtype, (guard.where(a, a.const_like(0)), guard.where(b, b.const_like(0))))
    return UOp(Ops.WHERE, red.dtype, (guard, value, identity(red)))


def _split(ast: UOp, opt: Opt) -> UOp:
    kinds, new_kind = _SPLITS[opt.op]
    r = _find(ast, opt.axis)
    if kind(r) not in kinds:
        raise OptError(f"{opt!r}: range {opt.axis} is {kind(r)}, the opt splits {'/'.join(kinds)} ranges")
    return split_range(ast, r, 4 if opt.op is OptOps.VECTOR else opt.amount, kind(r), new_kind, opt)


def _inner(ast: UOp, opt: Opt) -> UOp:
    """The unrolled part of reduce range opt.axis becomes a loop of its own (kind inner: it belongs to a staged
    tile, so a step of it reads the tile the outer step filled) around amount unrolled values."""
    r = _find(ast, opt.axis)
    unrolled = [u for u in _ranges(ast) if kind(u) == "unroll" and origin(u) == origin(r)]
    if kind(r) != "reduce" or len(unrolled) != 1:
        raise OptError(f"{opt!r}: range {opt.axis} is not a reduce range with one unrolled part")
    return split_range(ast, unrolled[0], opt.amount, "inner", "unroll", opt)


def split_range(ast: UOp, r: UOp, amount: int, outer_kind: str, new_kind: str, opt: Opt) -> UOp:
    """r = outer * amount + inner: the outer part keeps r's id (and takes outer_kind), the inner one is new."""
    end = const_extent(r)
    if amount < 2:
        raise OptError(f"{opt!r}: an amount of at least 2 is needed")
    if opt.op is OptOps.VECTOR and end is None:
        raise OptError(f"{opt!r}: vec4 lanes need a constant extent, got {r.src[0]}")
    if end is None and opt.op not in (OptOps.LOCAL, OptOps.GROUP):
        raise OptError(f"{opt!r}: range {r.arg[0]} has a symbolic extent (only LOCAL and GROUP split one)")
    if end is not None and amount > end and opt.op not in (OptOps.LOCAL, OptOps.GROUP):
        raise OptError(f"{opt!r}: range {r.arg[0]} has only {end} values")
    new_id = max(x.arg[0] for x in _ranges(ast)) + 1
    outer_n: Any = -(-end // amount) if end is not None else simplify_kernel((r.src[0] + (amount - 1)) // amount)
    outer = make_range(outer_n, r.arg[0], outer_kind, origin(r), stride(r) * amount)
    inner = make_range(amount, new_id, new_kind, origin(r), stride(r))
    single = isinstance(outer_n, int) and outer_n == 1
    expr = inner if single else outer * amount + inner
    guard = None if end is not None and end % amount == 0 else expr < r.src[0]
    parts = (inner,) if single else (outer, inner)
    return _gate(ast, r, parts, expr, guard)


def _loop(ast: UOp, opt: Opt) -> UOp:
    r = _find(ast, opt.axis)
    if kind(r) != "global":
        raise OptError(f"{opt!r}: range {opt.axis} is {kind(r)}, LOOP takes a global range")
    looped = make_range(r.src[0], r.arg[0], "loop", origin(r), stride(r))
    return _gate(ast, r, (looped,), looped, None)


def _merge(ast: UOp, opt_inner: int | None = None) -> UOp:
    """Every global range becomes part of one flat index: range i is flat // stride_i % extent_i."""
    globals_ = [r for r in _ranges(ast) if kind(r) == "global"]
    if len(globals_) < 2:
        return ast
    if opt_inner is not None:
        inner = [r for r in globals_ if r.arg[0] == opt_inner]
        if not inner:
            raise OptError(f"MERGE: no global range {opt_inner} to put innermost")
        globals_ = [r for r in globals_ if r is not inner[0]] + inner
    ends = [r.src[0] for r in globals_]
    total = ends[0]
    for e in ends[1:]:
        total = total * e
    first = min(r.arg[0] for r in globals_)  # the flat index keeps the first id: later opts name it so
    flat = make_range(simplify_kernel(total), first, "global", first, 1)
    mapping: dict[UOp, UOp] = {}
    step: UOp | int = 1
    for r, e in zip(reversed(globals_), reversed(ends)):
        q = flat if isinstance(step, int) and step == 1 else flat // step
        mapping[r] = q if r is globals_[0] else q % e
        step = e if isinstance(step, int) and step == 1 else step * e
    return substitute(ast, mapping)


def _join(ast: UOp, opt: Opt) -> UOp:
    """Global ranges a (outer) and b (inner) become one range j of extent E_a * E_b: a = j // E_b, b = j % E_b."""
    a, b = _find(ast, opt.axis), _find(ast, opt.amount)
    if a is b or kind(a) != "global" or kind(b) != "global":
        raise OptError(f"{opt!r}: JOIN takes two different global ranges")
    ea, eb = const_extent(a), const_extent(b)
    if ea is None or eb is None:
        raise OptError(f"{opt!r}: JOIN needs constant extents")
    joined = make_range(ea * eb, a.arg[0], "global", a.arg[0], 1)
    return substitute(ast, {a: joined // eb, b: joined % eb})


def _stage(ast: UOp, opt: Opt) -> UOp:
    """Replace operand opt.axis of the kernel's contraction by a read of its tile in workgroup memory.

    The tile is the operand's value for every combination of its ranges that vary within one
    workgroup and one step of the reduction's loop (local, upcast, vector, unroll, inner); the lowering
    fills it cooperatively, before the reads, once per step of the loops around it."""
    reds = [n for n in ast.toposort() if n.op is Ops.REDUCE and n.arg is Ops.ADD]
    contraction = [r for r in reds if _product(r) is not None]
    if len(contraction) != 1:
        raise OptError(f"{opt!r}: the kernel has no single contraction to stage")
    red = contraction[0]
    product = _product(red)
    assert product is not None
    if opt.axis not in (0, 1):
        raise OptError(f"{opt!r}: the operand is 0 (a) or 1 (b)")
    operand = product.src[opt.axis]
    deps = ranges_of(ast)
    tile = _tile_order(
        operand, [r for r in deps[operand] if kind(r) in ("local", "upcast", "vector", "unroll", "inner")]
    )
    if any(kind(r) == "group" for r in deps[operand]):
        raise OptError(f"{opt!r}: an operand that varies across a reduction's group cannot be staged")
    if not tile:
        raise OptError(f"{opt!r}: the operand is the same for the whole workgroup: nothing to stage")
    size = math.prod(int(r.src[0].arg) for r in tile)
    slot = sum(1 for n in ast.toposort() if n.op is Ops.DEFINE_LOCAL)
    buf = UOp(Ops.DEFINE_LOCAL, operand.dtype, (operand, *tile), (slot, size))
    index: UOp | None = None
    for r in tile:
        index = r if index is None else index * int(r.src[0].arg) + r
    assert index is not None
    return substitute(ast, {operand: UOp(Ops.LOAD, operand.dtype, (buf, index))})


def _skip(ast: UOp, opt: Opt) -> UOp:
    """Mark operand opt.axis's staged tile (its DEFINE_LOCAL's arg gains "skip"): the lowering leaves out the
    multiply-adds of a step where the tile holds only zeros. A zero tile adds nothing (its products are zeros, or
    NaN where the other operand is not finite: an index_add, as torch computes an embedding's gradient, never
    reads those rows either)."""
    reds = [n for n in ast.toposort() if n.op is Ops.REDUCE and n.arg is Ops.ADD and _product(n) is not None]
    if len(reds) != 1 or opt.axis not in (0, 1):
        raise OptError(f"{opt!r}: the kernel has no single contraction with an operand {opt.axis}")
    product = _product(reds[0])
    assert product is not None
    read = product.src[opt.axis]
    if read.op is not Ops.LOAD or read.src[0].op is not Ops.DEFINE_LOCAL:
        raise OptError(f"{opt!r}: operand {opt.axis} is not staged (STAGE({opt.axis}) first)")
    if not any(kind(r) == "inner" for r in reds[0].src[1:]):
        raise OptError(f"{opt!r}: the reduction has no inner loop to leave out (INNER first)")
    tile = read.src[0]
    return substitute(ast, {tile: tile.replace(arg=(*tile.arg[:2], "skip"))})


def _tile_order(operand: UOp, ranges: list[UOp]) -> list[UOp]:
    """A tile's layout: the parts of each range as scheduled together, outer parts first; the range whose
    elements are contiguous in memory (a vector range's, else one the operand's loads step through by 1)
    goes last, so the tile is filled, and read, four neighbours at a time."""
    groups: dict[int, list[UOp]] = {}
    for r in ranges:
        groups.setdefault(origin(r), []).append(r)
    # each range weighs the tile elements of the loads that step through memory by 1 along it: a layer norm's
    # input (64 x 32 elements of a tile) outweighs its per-row statistics (32), also read one apart, along k
    weight: dict[int, int] = {}
    memo: dict = {}
    for n in operand.toposort():
        if n.op is Ops.LOAD and n.src[0].op is Ops.DEFINE_GLOBAL:
            aff = affine(n.src[1], memo)
            if aff is not None:
                size = math.prod(int(r.src[0].arg) for r in aff[0] if r in ranges)
                for r, c in aff[0].items():
                    if abs(c) == 1 and r in ranges:
                        weight[origin(r)] = weight.get(origin(r), 0) + size

    def last(o: int) -> tuple[bool, int]:
        return any(kind(r) == "vector" for r in groups[o]), weight.get(o, 0)

    order = sorted(groups, key=lambda o: (last(o), o))
    return [r for o in order for r in sorted(groups[o], key=lambda r: -stride(r))]


def _product(red: UOp) -> UOp | None:
    """The MUL a sum reduces (under the guard of a split that does not divide), or None."""
    v = red.src[0]
    if v.op is Ops.WHERE and v.src[2].op is Ops.CONST:
        v = v.src[1]
    return v if v.op is Ops.MUL else None


def apply_opt(ast: UOp, opt: Opt, simplify: bool = True) -> UOp:
    if opt.op in _SPLITS:
        out = _split(ast, opt)
    elif opt.op is OptOps.LOOP:
        out = _loop(ast, opt)
    elif opt.op is OptOps.MERGE:
        out = _merge(ast, opt.amount - 1 if opt.amount else None)
    elif opt.op is OptOps.JOIN:
        out = _join(ast, opt)
    elif opt.op is OptOps.STAGE:
        out = _stage(ast, opt)
    elif opt.op is OptOps.INNER:
        out = _inner(ast, opt)
    elif opt.op is OptOps.SKIP:
        out = _skip(ast, opt)
    else:  # pragma: no cover - every OptOps member is handled above
        raise OptError(f"unknown opt {opt!r}")
    return simplify_kernel(out) if simplify else out


def apply_opts(ast: UOp, opts: tuple[Opt, ...] | list[Opt], simplify: bool = True) -> UOp:
    """ast under every opt, in order, simplified once at the end (raises OptError where one does not apply)."""
    for opt in opts:
        ast = apply_opt(ast, opt, simplify=False)
    return simplify_kernel(ast) if opts and simplify else ast


def substitute(root: UOp, mapping: dict[UOp, UOp]) -> UOp:
    """root with each node in mapping replaced (sources first, unchanged nodes kept as they are)."""
    done: dict[UOp, UOp] = dict(mapping)
    for n in root.toposort():
        if n not in done:
            src = tuple(done.get(x, x) for x in n.src)
            done[n] = n if src == n.src else n.replace(src=src)
    return done[root]

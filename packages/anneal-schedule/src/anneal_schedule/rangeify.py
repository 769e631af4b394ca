"""Rangeify: turn a tensor-level graph into kernel ASTs of loops over RANGEs.

Every realize point (an output, a CONTIGUOUS, a reduction used more than once, or broadcast
back where its reader's kernel could not compute it once per row) becomes one kernel:
``STORE(out, index(ranges), value)``. The value is the tensor graph re-expressed at an
index: movement ops never copy, they rewrite the index (reshape = flatten + re-split,
permute = reorder, expand = 0, shrink = offset, flip = mirror, pad = offset plus a validity
gate). Elementwise chains fuse into their consumer; a reduction read once, element for
element, fuses too, and so does one read through a broadcast by a row kernel (opt.py);
anything else that is read is loaded from the buffer of an earlier kernel.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from anneal_ir import GroupOp, Ops, UOp, dtypes
from anneal_ir.sint import as_size, sadd, sint, smul
from anneal_ir.uop import Shape

INDEX = dtypes.int64
Index = tuple[UOp, ...]


def iconst(v: int) -> UOp:
    return UOp.const(INDEX, v)


def strides_of(shape: Shape) -> tuple[sint, ...]:
    out: list[sint] = []
    acc: sint = 1
    for d in reversed(shape):
        out.append(acc)
        acc = smul(acc, d)
    return tuple(reversed(out))


def flat_index(idx: Index, shape: Shape) -> UOp:
    terms = [i if st == 1 else i * st for i, st, d in zip(idx, strides_of(shape), shape) if d != 1]
    acc = terms[0] if terms else iconst(0)
    for t in terms[1:]:
        acc = acc + t
    return acc


def split_index(flat: UOp, shape: Shape) -> Index:
    out = []
    total: sint = 1
    for d in shape:
        total = smul(total, d)
    for st, d in zip(strides_of(shape), shape):
        if d == 1:
            out.append(iconst(0))
            continue
        q = flat if st == 1 else flat // st
        out.append(q if smul(st, d) == total else q % d)  # the leading dim needs no modulo: flat < total
    return tuple(out)


def _drop_ones(shape: Shape) -> list[int]:
    return [i for i, d in enumerate(shape) if d != 1]


def and_valid(a: UOp | None, b: UOp | None) -> UOp | None:
    if a is None:
        return b
    if b is None:
        return a
    return a.logical_and(b)


# ---- movement ops as index rewrites: (node, index of the output) -> (index of the source, extra valid) ----


def _reshape(u: UOp, idx: Index) -> tuple[Index, UOp | None]:
    src_shape = u.src[0].shape
    assert src_shape is not None
    if src_shape == u.arg:
        return idx, None
    src_keep, dst_keep = _drop_ones(src_shape), _drop_ones(u.arg)
    if [src_shape[i] for i in src_keep] == [u.arg[i] for i in dst_keep]:  # only size-1 dims come or go
        out = [iconst(0)] * len(src_shape)
        for s_i, d_i in zip(src_keep, dst_keep):
            out[s_i] = idx[d_i]
        return tuple(out), None
    return split_index(flat_index(idx, u.arg), src_shape), None


def _permute(u: UOp, idx: Index) -> tuple[Index, UOp | None]:
    out: list[UOp] = [iconst(0)] * len(idx)
    for i, p in enumerate(u.arg):
        out[p] = idx[i]
    return tuple(out), None


def _expand(u: UOp, idx: Index) -> tuple[Index, UOp | None]:
    src_shape = u.src[0].shape
    assert src_shape is not None
    return tuple(iconst(0) if s == 1 and d != 1 else i for i, s, d in zip(idx, src_shape, u.arg)), None


def _shrink(u: UOp, idx: Index) -> tuple[Index, UOp | None]:
    return tuple(i + b if b else i for i, (b, _) in zip(idx, u.arg)), None


def _flip(u: UOp, idx: Index) -> tuple[Index, UOp | None]:
    shape = u.shape
    assert shape is not None
    return tuple(as_size(sadd(d, -1)) - i if a in u.arg else i for a, (i, d) in enumerate(zip(idx, shape))), None


def _pad(u: UOp, idx: Index) -> tuple[Index, UOp | None]:
    src_shape = u.src[0].shape
    assert src_shape is not None
    out, valid = [], None
    for i, (b, a), d in zip(idx, u.arg, src_shape):
        if b == 0 and a == 0:
            out.append(i)
            continue
        j = i - b if b else i
        out.append(j)
        clause = iconst(-1) < j if b > 0 else None  # j >= 0
        if a > 0:
            clause = and_valid(clause, j < d)
        valid = and_valid(valid, clause)
    return tuple(out), valid


MOVEMENT: dict[Ops, Callable[[UOp, Index], tuple[Index, UOp | None]]] = {
    Ops.RESHAPE: _reshape,
    Ops.PERMUTE: _permute,
    Ops.EXPAND: _expand,
    Ops.SHRINK: _shrink,
    Ops.FLIP: _flip,
    Ops.PAD: _pad,
}


def broadcasts(u: UOp) -> bool:
    """Does this movement op read some source element more than once?"""
    if u.op is Ops.EXPAND:
        src_shape = u.src[0].shape
        assert src_shape is not None
        return any(s != d for s, d in zip(src_shape, u.arg))
    return False


@dataclass
class KernelBuilder:
    """Builds one kernel's AST; ``materialized(node)`` names where an earlier kernel left it."""

    root: UOp
    materialized: Callable[[UOp], int | None]  # node -> schedule slot, or None if not (yet) a buffer
    # (node, read through a broadcast, a reduction read inside a sum of this kernel) -> why it needs a kernel of its own
    must_realize: Callable[[UOp, bool, bool], str | None]
    slots: list[int] = field(default_factory=list)  # DEFINE_GLOBAL i reads/writes schedule slot slots[i]
    n_ranges: int = 0
    memo: dict[tuple, UOp] = field(default_factory=dict)
    fused: set[UOp] = field(default_factory=set)  # tensor-level nodes computed inside this kernel
    reduce_at: dict[UOp, Index] = field(default_factory=dict)  # where each fused reduction is read
    broadcast_reduces: set[UOp] = field(default_factory=set)  # fused reductions read through a broadcast
    ast: UOp | None = None  # the built kernel, once build() succeeded

    def glob(self, slot: int, dtype: object) -> UOp:
        if slot not in self.slots:
            self.slots.append(slot)
        return UOp(Ops.DEFINE_GLOBAL, dtype, (), self.slots.index(slot))  # type: ignore[arg-type]

    def new_range(self, end: sint, kind: str) -> UOp:
        r = UOp(Ops.RANGE, INDEX, (as_size(end),), (self.n_ranges, kind))
        self.n_ranges += 1
        return r

    def build(self, out_slot: int) -> UOp:
        shape = self.root.shape
        assert shape is not None
        out = self.glob(out_slot, self.root.dtype)  # argument 0 is always the output
        idx = tuple(iconst(0) if d == 1 else self.new_range(d, "global") for d in shape)
        value = self.lower(self.root, idx, None, False, is_root=True)
        store = UOp(Ops.STORE, dtypes.void, (out, flat_index(idx, shape), value))
        return UOp(Ops.SINK, dtypes.void, (store,))

    def load(self, slot: int, node: UOp, idx: Index, valid: UOp | None) -> UOp:
        shape = node.shape
        assert shape is not None
        buf = self.glob(slot, node.dtype)
        index = flat_index(idx, shape)
        return UOp(Ops.LOAD, node.dtype, (buf, index) if valid is None else (buf, index, valid))

    def lower(self, u: UOp, idx: Index, valid: UOp | None, through_broadcast: bool, is_root: bool = False) -> UOp:
        key = (u, idx, valid, through_broadcast, is_root)
        if key not in self.memo:
            self.memo[key] = self._lower(u, idx, valid, through_broadcast, is_root)
        return self.memo[key]

    def _lower(self, u: UOp, idx: Index, valid: UOp | None, bc: bool, is_root: bool) -> UOp:
        if not is_root or u.op is Ops.BUFFER:  # a buffer is always read, even as the whole value
            slot = self.materialized(u)
            if slot is not None:
                return self.load(slot, u, idx, valid)
            # read inside a sum of this kernel: asked of reductions only, whose fusion alone depends on it
            why = self.must_realize(u, bc, u.op is Ops.REDUCE_AXIS and _moves_with_reduce(idx))
            if why is not None:
                raise NeedsRealize(u, why)
        self.fused.add(u)
        if u.op is Ops.CONST:
            return u
        if u.op is Ops.DEFINE_VAR:
            return u
        if u.op is Ops.IOTA:
            return idx[0]
        if u.op in MOVEMENT:
            src_idx, extra = MOVEMENT[u.op](u, idx)
            new_valid = and_valid(valid, extra)
            inner = self.lower(u.src[0], src_idx, new_valid, bc or broadcasts(u))
            return inner if extra is None else extra.where(inner, inner.const_like(0))
        if u.op in (Ops.CONTIGUOUS, Ops.DETACH):
            return self.lower(u.src[0], idx, valid, bc)
        if u.op is Ops.REDUCE_AXIS:
            if self.reduce_at.setdefault(u, idx) != idx and not is_root:
                raise NeedsRealize(u, "a reduction read at two different indices: computed once")
            if not is_root and recomputed_inside_reduction(u, idx, valid):
                raise NeedsRealize(u, "a reduction inside a reduction over overlapping windows: would run per tap")
            if bc:
                self.broadcast_reduces.add(u)
            op, axes = u.arg
            src_shape = u.src[0].shape
            assert src_shape is not None
            ranges = []
            reduce_idx = list(idx)
            for a in axes:
                if src_shape[a] == 1:
                    reduce_idx[a] = iconst(0)
                    continue
                r = self.new_range(src_shape[a], "reduce")
                ranges.append(r)
                reduce_idx[a] = r
            value = self.lower(u.src[0], tuple(reduce_idx), valid, True)
            return UOp(Ops.REDUCE, u.dtype, (value, *ranges), op) if ranges else value
        if u.op in GroupOp.Elementwise:
            return u.replace(src=tuple(self.lower(s, idx, valid, bc) for s in u.src))
        raise NotImplementedError(f"rangeify: no rule for {u.op}")


def _moves_with_reduce(idx: Index) -> bool:
    """Does an index vary with a reduction's range (the node is read inside a sum of this kernel)?"""
    return any(n.op is Ops.RANGE and n.arg[1] == "reduce" for e in idx for n in e.toposort())


def recomputed_inside_reduction(u: UOp, idx: Index, valid: UOp | None) -> bool:
    """Would the reduction u, read at idx, compute some of its elements more than once? Only when idx moves
    with an enclosing reduction's range (a reader that sums over u's elements) and the ranges it moves with
    visit more points than u has elements (overlapping windows: each tap recomputes the whole inner sum).
    A row statistic read inside a contraction over another axis is not: its index ignores that range."""
    ranges = {n for e in (*idx, *((valid,) if valid is not None else ())) for n in e.toposort() if n.op is Ops.RANGE}
    if not any(r.arg[1] == "reduce" for r in ranges):
        return False
    ends = [r.src[0] for r in ranges]
    if not all(e.op is Ops.CONST for e in ends) or not all(isinstance(s, int) for s in u.shape or ()):
        return False  # symbolic sizes: keep the fused form
    points = math.prod(int(e.arg) for e in ends)
    return points > math.prod(u.shape or ())


class NeedsRealize(Exception):
    """Raised while building a kernel: this node must be materialized first."""

    def __init__(self, node: UOp, reason: str):
        super().__init__(f"{node.op.name}: {reason}")
        self.node, self.reason = node, reason

"""Split reductions: a long reduction with few outputs becomes two, so a device has enough to run.

A sum over K elements for each of a few outputs leaves most of a GPU idle: a gradient norm is one
output (one workgroup for ten million elements), a weight gradient X^T dY summed over batch and
time has a few hundred thousand outputs, fewer tiles than the GPU has cores. The rewrite (a rule of
the tensor graph, before kernels are formed) sums S slices of K/S elements each into a small buffer
(a CONTIGUOUS: S times the outputs, S times the parallelism), then sums the S partial results:

    sum_k x[..., k]  ->  sum_s (sum_j x[..., s * K/S + j])

The partial sums are laid out slice by slice (S x outputs): each slice's kernel writes a whole output as an
unsplit one would, and the second sum reads the S values of an output one output apart.

For a contraction the partial sums are a batched contraction (split-K), tiled like any other. S is
the smallest power of two giving the device ``parallel`` outputs (tiles of ``TILE`` outputs for a
contraction), while every slice keeps at least ``MIN_SLICE`` elements; it divides K, except for a sum of
products of at least ``RAGGED_MIN`` elements, whose factors are padded with zeros to S slices.
Reductions reading fewer than ``MIN_WORK`` elements are left alone. A backend that gains
nothing (the CPU runs its own threads over a reduction) asks for none.
"""

from __future__ import annotations

import math

from anneal_ir import GroupOp, Ops, PatternMatcher, UOp, UPat, graph_rewrite
from anneal_ir.sint import as_size
from anneal_ir.symbolic import simplify
from anneal_schedule.rangeify import INDEX, MOVEMENT, Index

MIN_SLICE = 256  # elements a partial sum keeps at least
MIN_WORK = 1 << 16  # elements a reduction reads before a second kernel is worth launching
TILE = 8192  # outputs of one workgroup of a tiled contraction (a 64 x 128 tile)
RAGGED_MIN = 8192  # a sum of products this long may be split where S does not divide it (a slice pads < 1/16 of it)


def _plan(x: UOp, parallel: int) -> int:
    """The number of slices for reduction x (1: leave it)."""
    src = x.src[0]
    shape = src.shape
    if shape is None or not all(isinstance(d, int) for d in shape):
        return 1
    axes = x.arg[1]
    k = math.prod(shape[a] for a in axes)
    outputs = math.prod(d for i, d in enumerate(shape) if i not in axes)
    if _gathers(src, axes):
        return 1  # a sum over a one-hot's classes is a load in its kernel (anneal_schedule.gather): nothing to split
    units = max(1, outputs // TILE) if _product(src) else outputs  # workgroups the kernel would have
    if units >= parallel or k < 2 * MIN_SLICE or outputs * k < MIN_WORK:
        return 1
    # a long sum of products may end in a ragged slice (GPT-2's head: 50257 tokens): its factors are padded
    ragged = x.arg[0] is Ops.ADD and src.op is Ops.MUL and k >= RAGGED_MIN
    s = 1
    while units * s < parallel and (ragged or k % (2 * s) == 0) and k // (2 * s) >= MIN_SLICE:
        s *= 2
    return s


def _gathers(u: UOp, axes: tuple[int, ...]) -> bool:
    """Is u a product with a factor (under movement ops) that is a comparison for equality as a number or a select,
    summed over the classes it compares with (an embedding's one-hot: the gather rule turns that sum into a load
    once the kernel is formed)? Not when the sum runs over what it compares (the embedding's gradient: a sum over
    tokens, which may be split like any other)."""
    if u.op is not Ops.MUL or u.shape is None or not all(isinstance(d, int) for d in u.shape):
        return False
    idx = tuple(UOp(Ops.RANGE, INDEX, (as_size(d),), (i, "reduce" if i in axes else "global")) for i, d in
                enumerate(u.shape))  # fmt: skip
    reduced = {r for i, r in enumerate(idx) if i in axes}
    for f in u.src:
        f, at = _through_views(f, idx)
        cmp = f.src[0] if f.op in (Ops.CAST, Ops.WHERE) else None
        if cmp is None or cmp.op is not Ops.CMPEQ:
            continue
        data = [s for s in cmp.src if any(n.op is Ops.BUFFER for n in s.toposort())]
        return not any(_read_along(s, at) & reduced for s in data)  # the classes are what is reduced
    return False


def _through_views(u: UOp, idx: Index) -> tuple[UOp, Index]:
    """u under its movement ops, and the index it is read at (a pad's or a shrink's bounds aside: which ranges an
    index reads along is all that is asked of it)."""
    while u.op in MOVEMENT:
        idx, _ = MOVEMENT[u.op](u, idx)
        u = u.src[0]
    return u, idx


def _read_along(u: UOp, idx: Index) -> set[UOp]:
    """The ranges of idx that the buffers under u are read along (every range of idx where u is not elementwise
    over views of buffers)."""
    if u.op is Ops.BUFFER:  # simplified: a reshape's flat index names ranges it does not vary with, (t * C + c) // C
        return {n for e in idx for n in simplify(e).toposort() if n.op is Ops.RANGE}
    if u.op in (Ops.CONST, Ops.IOTA, Ops.DEFINE_VAR):
        return set()
    if u.op in MOVEMENT:
        v, at = _through_views(u, idx)
        return _read_along(v, at)
    if u.op in GroupOp.Elementwise:
        return set().union(*(_read_along(s, idx) for s in u.src))
    return {n for e in idx for n in e.toposort() if n.op is Ops.RANGE}


def _product(u: UOp) -> bool:
    """Is u a product, under movement ops (the factors of a contraction, or its partial sums)?"""
    while u.op in (Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND):
        u = u.src[0]
    return u.op is Ops.MUL


def _split(ctx: int, x: UOp) -> UOp | None:
    s = _plan(x, ctx)
    if s == 1:
        return None
    op, axes = x.arg
    src = x.src[0]
    shape = src.shape
    assert shape is not None
    kept = [i for i in range(len(shape)) if i not in axes]
    k = math.prod(shape[a] for a in axes)
    out_dims = tuple(shape[i] for i in kept)
    n = len(out_dims)
    padded = s * -(-k // s)

    def moved(u: UOp) -> UOp:
        """u with the reduced axes last, as one of padded elements (zeros past k)."""
        if list(axes) != list(range(len(kept), len(shape))):
            u = UOp(Ops.PERMUTE, u.dtype, (u,), (*kept, *axes))
        if padded == k:
            return u
        flat = UOp(Ops.RESHAPE, u.dtype, (u,), (*out_dims, k))
        return UOp(Ops.PAD, u.dtype, (flat,), (*((0, 0),) * n, (0, padded - k)))

    # a ragged split pads each factor of the product, so the kernel stays a contraction (gated loads, no gated sum)
    whole = moved(src) if padded == k else UOp(Ops.MUL, src.dtype, tuple(moved(f) for f in src.src))
    sliced = UOp(Ops.RESHAPE, src.dtype, (whole,), (*out_dims, s, padded // s))
    # the slices outermost: each partial sum is a whole output, written as the final one is (vec4 along its rows)
    first = UOp(Ops.PERMUTE, src.dtype, (sliced,), (n, *range(n), n + 1))
    partial = UOp(Ops.CONTIGUOUS, x.dtype, (UOp(Ops.REDUCE_AXIS, x.dtype, (first,), (op, (n + 1,))),))
    total = UOp(Ops.REDUCE_AXIS, x.dtype, (partial,), (op, (0,)))
    return UOp(Ops.RESHAPE, x.dtype, (total,), x.shape)


_splits = PatternMatcher([(UPat(Ops.REDUCE_AXIS, name="x"), _split)], "split_reductions")


def split_reductions(sink: UOp, parallel: int) -> UOp:
    """sink with each long reduction of few outputs split in two (parallel: outputs the device wants; 0: none)."""
    if parallel <= 0:
        return sink
    return graph_rewrite(sink, _splits, ctx=parallel, name="split_reductions")

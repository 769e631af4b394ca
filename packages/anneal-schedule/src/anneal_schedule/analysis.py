"""What a kernel AST is: the ranges each node varies with, its contraction, its row structure.

These are read-only questions about a kernel (SINK of STOREs over RANGEs); the scheduler asks
some of them while fusing (``fusable_reductions``), the optimizer asks them to pick opts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from anneal_ir import Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite


def ranges_of(ast: UOp) -> dict[UOp, frozenset[UOp]]:
    """For every node, the RANGEs it varies with (a REDUCE closes its own)."""
    out: dict[UOp, frozenset[UOp]] = {}
    for n in ast.toposort():
        if n.op is Ops.RANGE:
            out[n] = frozenset({n})
        elif n.op is Ops.REDUCE:
            out[n] = out[n.src[0]] - frozenset(n.src[1:])
        else:
            out[n] = frozenset().union(*(out[s] for s in n.src))
    return out


_NOT_FLOPS = frozenset({Ops.CAST, Ops.BITCAST, Ops.LOAD, Ops.STORE, Ops.CONST, Ops.RANGE, Ops.DEFINE_GLOBAL,
                        Ops.DEFINE_VAR, Ops.SINK})  # fmt: skip


def flops(ast: UOp) -> int:
    """Float operations a kernel performs: every float ALU node once per point of the ranges it varies with (a
    reduction's combine once per point of its operand's), symbolic extents at their upper bound. A matmul's
    M x N x K multiplies and adds give 2MNK; index arithmetic (integers) is not counted."""
    deps = ranges_of(ast)
    total = 0
    for n in ast.toposort():
        if n.op in _NOT_FLOPS or not n.dtype.is_float:
            continue
        points = deps[n.src[0]] if n.op is Ops.REDUCE else deps[n]
        total += math.prod(extent(r) for r in points)
    return total


Affine = tuple[dict[UOp, int], int]


def affine(u: UOp, memo: dict[UOp, Affine | None] | None = None) -> Affine | None:
    """An index as sum(coefficient * term) + offset: terms are ranges, or any node that is not an add, a
    multiply by a constant or a negation (a division, the workgroup index...)."""
    memo = {} if memo is None else memo
    if u in memo:
        return memo[u]
    out: Affine | None = None
    if u.op is Ops.CONST:
        out = ({}, int(u.arg)) if isinstance(u.arg, int) and not isinstance(u.arg, bool) else None
    elif u.op is Ops.ADD:
        a, b = affine(u.src[0], memo), affine(u.src[1], memo)
        if a is not None and b is not None:
            coeffs = dict(a[0])
            for k, v in b[0].items():
                coeffs[k] = coeffs.get(k, 0) + v
            out = {k: v for k, v in coeffs.items() if v}, a[1] + b[1]
    elif u.op is Ops.MUL and any(s.op is Ops.CONST for s in u.src):
        x, c = (u.src[0], u.src[1]) if u.src[1].op is Ops.CONST else (u.src[1], u.src[0])
        inner = affine(x, memo)
        if inner is not None:
            factor = int(c.arg)
            out = {r: v * factor for r, v in inner[0].items() if v * factor}, inner[1] * factor
    elif u.op is Ops.NEG:
        inner = affine(u.src[0], memo)
        out = None if inner is None else ({r: -v for r, v in inner[0].items()}, -inner[1])
    elif u.dtype.is_int:
        out = {u: 1}, 0
    memo[u] = out
    return out


def nodes_below(root: UOp, descend: Callable[[UOp], bool]) -> list[UOp]:
    """root and the nodes under it, not looking below a node for which descend is False (root excepted)."""
    out, seen, stack = [], set(), [root]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        out.append(n)
        if n is root or descend(n):
            stack.extend(n.src)
    return out


def identity(red: UOp) -> UOp:
    """The value a reduction starts from (and what a guarded term of it contributes)."""
    if red.arg is Ops.ADD:
        return UOp.const(red.dtype, 0)
    if red.dtype.is_float:
        return UOp.const(red.dtype, -math.inf)
    if red.dtype == dtypes.bool:
        return UOp.const(red.dtype, False)
    return UOp.const(red.dtype, -(2 ** (8 * red.dtype.itemsize - 1)) if not red.dtype.is_unsigned else 0)


def kind(r: UOp) -> str:
    """A range's kind: "global" or "reduce" as scheduled; opts add local, upcast, loop, unroll, group, vector."""
    return str(r.arg[1])


def extent(r: UOp) -> int:
    """A range's extent for the heuristics (a symbolic one at its upper bound)."""
    return int(r.src[0].vmax)


def const_extent(r: UOp) -> int | None:
    return int(r.src[0].arg) if r.src[0].op is Ops.CONST else None


def global_ranges(deps: dict[UOp, frozenset[UOp]]) -> list[UOp]:
    """The kernel's output ranges, outermost first (the last one is the store's innermost dimension)."""
    return sorted((n for n in deps if n.op is Ops.RANGE and kind(n) == "global"), key=lambda r: r.arg[0])


@dataclass(frozen=True)
class Contraction:
    """The parts of a matmul-like kernel: a sum over k of a product of a (rows m) and b (columns n)."""

    reduce: UOp  # the REDUCE(ADD) node
    k: tuple[UOp, ...]  # its ranges (several: a reduction over batch and time; a convolution's c, kh, kw)
    a: UOp  # factor depending on m (and k), not on n
    b: UOp  # factor depending on n (and k), not on m
    m: tuple[UOp, ...]  # output ranges only a varies with (a convolution's batch, height, width), outer first
    n: tuple[UOp, ...]  # output ranges only b varies with, outer first


def find_contraction(ast: UOp, deps: dict[UOp, frozenset[UOp]]) -> Contraction | None:
    reduces = [n for n in ast.toposort() if n.op is Ops.REDUCE]
    if len(reduces) != 1:
        return None
    red = reduces[0]
    if red.arg is not Ops.ADD or red.src[0].op is not Ops.MUL:
        return None
    k = tuple(red.src[1:])
    a, b = red.src[0].src
    if not all(r in deps[a] and r in deps[b] for r in k):
        return None
    da, db = deps[a] - set(k), deps[b] - set(k)
    only_a = sorted((r for r in da - db if kind(r) == "global"), key=lambda r: r.arg[0])
    only_b = sorted((r for r in db - da if kind(r) == "global"), key=lambda r: r.arg[0])
    if not only_a or not only_b:
        return None
    return Contraction(red, k, a, b, tuple(only_a), tuple(only_b))


def _is_data(u: UOp) -> bool:
    return any(n.op is Ops.LOAD for n in u.toposort())


def one_hot(operand: UOp, deps: dict[UOp, frozenset[UOp]]) -> UOp | None:
    """The output range a contraction's operand is a one-hot along, or None: the operand is (r == a loaded
    value) as a number, zero unless the comparison holds (under any guards that select zero). An embedding's
    gradient is the contraction of such an operand over a vocabulary of tokens with the upstream gradient."""
    v = operand
    while v.op is Ops.WHERE and v.src[2].op is Ops.CONST and v.src[2].arg == 0:
        v = v.src[1]
    if v.op is Ops.CAST and v.src[0].op is Ops.CMPEQ:
        cmp = v.src[0]
    elif v.op is Ops.WHERE and v.src[0].op is Ops.CMPEQ and v.src[2].op is Ops.CONST and v.src[2].arg == 0:
        cmp = v.src[0]
    else:
        return None
    x, y = cmp.src
    if _is_data(y) and not _is_data(x):
        index, data = x, y
    elif _is_data(x) and not _is_data(y):
        index, data = y, x
    else:
        return None
    ranges = [r for r in deps[index] if kind(r) == "global" and r not in deps[data]]
    return max(ranges, key=extent) if ranges else None


def masked_along(operand: UOp, deps: dict[UOp, frozenset[UOp]], c: Contraction) -> bool:
    """Does the operand select by a comparison of positions alone, one of them along the contraction's k and one
    along its rows or columns (a causal mask: key position > query position)? Such an operand is zero (exp of
    -inf, or the select's zero) in the steps of k past a tile's last row: half of a causal attention's tiles."""
    ks, outputs = set(c.k), set(c.m) | set(c.n)
    for n in operand.toposort():
        if n.op is Ops.WHERE and n.src[0].op in (Ops.CMPLT, Ops.CMPNE) and not _is_data(n.src[0]):
            ranges = deps[n.src[0]]
            if ranges & ks and ranges & outputs:
                return True
    return False


@dataclass(frozen=True)
class RowKernel:
    """A kernel whose reductions all depend on the same strict subset of its global ranges (the rows)."""

    rows: tuple[UOp, ...]  # global ranges the reductions depend on: one workgroup per combination
    inner: tuple[UOp, ...]  # the other global ranges: the workgroup's invocations stride over them
    reduces: tuple[UOp, ...]  # the reductions computed once per workgroup (outside any other reduction's loop)


def top_reduces(ast: UOp, deps: dict[UOp, frozenset[UOp]]) -> list[UOp]:
    """The REDUCEs outside every other reduction's loop (they depend on global ranges only), in order."""
    g = frozenset(global_ranges(deps))
    return [n for n in ast.toposort() if n.op is Ops.REDUCE and deps[n] <= g]


def row_kernel(ast: UOp, deps: dict[UOp, frozenset[UOp]] | None = None) -> RowKernel | None:
    """The rows/inner split of a kernel that reads its reductions through a broadcast (softmax in one
    kernel: the row max and the row sum depend on the row only, the output on the row and the column)."""
    deps = deps if deps is not None else ranges_of(ast)
    globals_ = global_ranges(deps)
    top = top_reduces(ast, deps)
    if not top:
        return None
    rows = deps[top[0]]
    if any(deps[t] != rows for t in top) or rows == frozenset(globals_):
        return None
    return RowKernel(tuple(r for r in globals_ if r in rows), tuple(r for r in globals_ if r not in rows), tuple(top))


ROW_KERNEL_MIN_ROWS = 32  # fewer rows than this leave a GPU idle: fuse only small kernels then
ROW_KERNEL_SMALL = 65536  # output elements of a kernel small enough to fuse regardless
# elements of one row a workgroup computes at most: batch norm's rows (a channel over batch x height x width, 524,288
# at 512 x 32 x 32) left 128 workgroups to write 67M outputs (10 ms where a flat kernel after a small reduction
# kernel takes a fraction of one)
ROW_KERNEL_MAX_ROW = 16384


def fusable_reductions(ast: UOp) -> bool:
    """May a kernel that reads a reduction through a broadcast keep it fused? (the scheduler asks)

    Yes when every reduction varies with every output element (nothing is recomputed), or when it
    is a row kernel whose reductions each run once per workgroup: they read data of their own row
    only (never a whole matmul operand again for every row), the innermost output range is not a
    row range (the row's elements are contiguous), there are enough rows to fill a device, and a
    row is short enough for one workgroup (ROW_KERNEL_MAX_ROW). Never when a long reduction would be
    computed again for outputs that share its value (``recomputed``)."""
    deps = ranges_of(ast)
    globals_ = global_ranges(deps)
    g = frozenset(globals_)
    reduces = [n for n in deps if n.op is Ops.REDUCE]
    if any(recomputed(n, deps, g) for n in reduces):
        return False
    if all(g <= deps[n] for n in reduces):
        return True
    rk = row_kernel(ast, deps)
    if rk is None or globals_[-1] in rk.rows:
        return False
    rows = frozenset(rk.rows)
    if not all(rows <= deps[n] for n in reduces):  # a nested reduction must not be recomputed per row either
        return False
    for t in rk.reduces:
        for n in t.src[0].toposort():
            if n.op is Ops.LOAD and not deps[n] <= g and not rows <= deps[n]:
                return False
    n_rows = total = 1
    for r in globals_:
        total *= extent(r)
        n_rows *= extent(r) if r in rows else 1
    if total <= ROW_KERNEL_SMALL:
        return True
    return n_rows >= ROW_KERNEL_MIN_ROWS and total // n_rows <= ROW_KERNEL_MAX_ROW


RECOMPUTE_REDUCTION_MIN = 64  # a reduction shorter than this (a pooling window's count) is cheaper recomputed


def _halved(u: UOp, deps: dict[UOp, frozenset[UOp]], g: frozenset[UOp]) -> bool:
    """Is u an integer division by a constant > 1 of an index of output ranges only (y // 2)?"""
    d = u.src[1]
    return u.op is Ops.IDIV and d.op is Ops.CONST and int(d.arg) > 1 and deps[u.src[0]] <= g


def recomputed(red: UOp, deps: dict[UOp, frozenset[UOp]], g: frozenset[UOp]) -> bool:
    """Would a long reduction be computed several times over for the same value? True when it varies with some
    output range only through divisions (read at y // 2 by a 2x upsample or a pool's gradient): every output
    sharing a quotient computes the whole reduction again, so it had better be a kernel of its own."""
    if math.prod(extent(r) for r in red.src[1:]) < RECOMPUTE_REDUCTION_MIN:
        return False
    direct: dict[UOp, frozenset[UOp]] = {}  # the output ranges a node varies with other than through a division
    for n in red.src[0].toposort():
        if n.op is Ops.RANGE:
            direct[n] = frozenset({n}) & g
        elif n.op is Ops.IDIV and _halved(n, deps, g):
            direct[n] = frozenset()
        else:
            direct[n] = frozenset().union(*(direct[s] for s in n.src))
    return bool((deps[red] & g) - direct[red.src[0]])


def vectorizable(r: UOp) -> bool:
    """Can a range be split into quads (vec4 lanes)? Its extent must be a constant multiple of 4."""
    e = const_extent(r)
    return e is not None and e % 4 == 0 and e > 0


# ---- one contraction where the graph wrote several ----


def _is_zero(u: UOp) -> bool:
    return u.op is Ops.CONST and u.arg == 0


def _sum_of_sum(outer: UOp, inner: UOp) -> UOp | None:
    """sum_a sum_b v -> sum_{a,b} v."""
    if outer.arg is not Ops.ADD or inner.arg is not Ops.ADD:
        return None
    return UOp(Ops.REDUCE, outer.dtype, (inner.src[0], *outer.src[1:], *inner.src[1:]), Ops.ADD)


def _sum_of_gated_sum(outer: UOp, gate: UOp, inner: UOp, zero: UOp) -> UOp | None:
    """sum_a where(g, sum_b v, 0) -> sum_{a,b} where(g, v, 0) (g cannot vary with b: the inner sum closed it).
    Not when g reads b at all, as relu(x @ w) does through the inner sum itself: the merged sum would bind b
    around a sum that binds it again."""
    if outer.arg is not Ops.ADD or inner.arg is not Ops.ADD or not _is_zero(zero):
        return None
    if set(inner.src[1:]) & set(gate.toposort()):
        return None
    gated = UOp(Ops.WHERE, inner.dtype, (gate, inner.src[0], zero))
    return UOp(Ops.REDUCE, outer.dtype, (gated, *outer.src[1:], *inner.src[1:]), Ops.ADD)


def _gates_together(g1: UOp, g2: UOp, x: UOp, z1: UOp, z2: UOp) -> UOp | None:
    """where(g1, where(g2, x, 0), 0) -> where(g1 & g2, x, 0)."""
    if not (_is_zero(z1) and _is_zero(z2)):
        return None
    return UOp(Ops.WHERE, x.dtype, (g1.logical_and(g2), x, z1))


def _gated_product(red: UOp, gate: UOp, a: UOp, b: UOp, zero: UOp) -> UOp | None:
    """sum where(g, a * b, 0) -> sum where(g, a, 0) * where(g, b, 0): a contraction again, the gate in each
    factor (in both, so a factor that is inf where the gate is false still gives 0, not NaN)."""
    if red.arg is not Ops.ADD or not _is_zero(zero):
        return None
    ga = UOp(Ops.WHERE, a.dtype, (gate, a, zero))
    gb = UOp(Ops.WHERE, b.dtype, (gate, b, zero))
    return red.replace(src=(ga.alu(Ops.MUL, gb), *red.src[1:]))


_GATED = UPat(Ops.WHERE, src=(UPat.var("gate"), UPat(Ops.REDUCE, name="inner"), UPat.cvar("zero")))
contraction_form = PatternMatcher(
    [
        (UPat(Ops.REDUCE, src=(UPat(Ops.REDUCE, name="inner"),), allow_any_len=True, name="outer"), _sum_of_sum),
        (UPat(Ops.REDUCE, src=(_GATED,), allow_any_len=True, name="outer"), _sum_of_gated_sum),
        (
            UPat(
                Ops.WHERE,
                src=(
                    UPat.var("g1"),
                    UPat(Ops.WHERE, src=(UPat.var("g2"), UPat.var("x"), UPat.cvar("z2"))),
                    UPat.cvar("z1"),
                ),
            ),
            _gates_together,
        ),  # fmt: skip
        (
            UPat(
                Ops.REDUCE,
                src=(
                    UPat(
                        Ops.WHERE,
                        src=(UPat.var("gate"), UPat(Ops.MUL, src=(UPat.var("a"), UPat.var("b"))), UPat.cvar("zero")),
                    ),
                ),
                allow_any_len=True,
                name="red",
            ),
            _gated_product,
        ),  # fmt: skip
    ],
    "contraction_form",
)


def canonical(ast: UOp) -> UOp:
    """A kernel with nested and gated sums of products written as one contraction (a convolution's input
    gradient is a sum over window positions of a sum over channels: one sum over both, tiled like a matmul)."""
    return graph_rewrite(ast, contraction_form, name="contraction_form")

"""A sum over a one-hot select is a load: sum over r of where(r == e, v, 0) is v at r = e.

Embedding lookups, `gather` and cross entropy's picked logit are one-hot reductions in the graph (no
data-dependent indexing, so they fuse and differentiate like any other sum). Where the index e does not vary with
the summed range r, one of the n terms is nonzero: the kernel loads that one (a gather) instead of summing all n,
as tinygrad folds its arange reductions. GPT-2's token embedding was a 4096 x 768 x 50257 contraction (25 ms on
an H200) and its picked logits a 206M-element sum in one workgroup (110 ms).

The sum gave 0 for an e outside [0, n), and so does the load: it is gated by 0 <= e < n, and its index is clamped
into [0, n) so that it never reads outside its buffer (`anneal.bounds` raises for such an index anyway).
"""

from __future__ import annotations

from anneal_ir import Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite
from anneal_schedule.opt import substitute
from anneal_schedule.simplify import simplify_kernel


def _clauses(cond: UOp) -> list[UOp]:
    """The AND-ed clauses of a gate."""
    if cond.op is Ops.AND and cond.dtype == dtypes.bool:
        return _clauses(cond.src[0]) + _clauses(cond.src[1])
    return [cond]


def _varies_with(u: UOp, r: UOp) -> bool:
    return any(n is r for n in u.toposort())


def _terms(u: UOp) -> list[UOp]:
    return _terms(u.src[0]) + _terms(u.src[1]) if u.op is Ops.ADD else [u]


def _index_equal_to(clause: UOp, r: UOp) -> UOp | None:
    """The r at which clause holds, where clause is r + c == e (either way round; a split reduction's index is
    its slice's offset plus r) and neither c nor e varies with r: e - c."""
    if clause.op is not Ops.CMPEQ or not r.dtype.is_int:
        return None
    for side, e in (clause.src, clause.src[::-1]):
        terms = _terms(side)
        if any(t is r for t in terms) and not _varies_with(e, r):
            rest = [t for t in terms if t is not r]
            if any(_varies_with(t, r) for t in rest) or e.dtype != r.dtype:
                return None
            for t in rest:
                e = e - t
            return e
    return None


def _select(value: UOp) -> tuple[UOp, UOp] | None:
    """(condition, v) of where(condition, v, 0) or of v * float(condition), also under a negation or a product (zero
    stays zero: cross entropy's gradient sums -where(target == r, -1/n, 0) over the classes r)."""
    if value.op is Ops.WHERE and value.src[2].op is Ops.CONST and value.src[2].arg == 0:
        return value.src[0], value.src[1]
    if value.op is Ops.NEG:
        inner = _select(value.src[0])
        return None if inner is None else (inner[0], -inner[1])
    if value.op is Ops.MUL:
        for mask, v in (value.src, value.src[::-1]):
            if mask.op is Ops.CAST and mask.src[0].dtype == dtypes.bool:
                return mask.src[0], v
        for factor, other in (value.src, value.src[::-1]):
            inner = _select(factor)
            if inner is not None:
                return inner[0], inner[1] * other
    return None


def _clamped(e: UOp, n: UOp) -> UOp:
    """e moved into [0, n): the remainder, then the negative ones to 0 (bounds [0, n - 1] for any e)."""
    return (e % n).maximum(e.const_like(0))


def fold_one_hot_sum(x: UOp) -> UOp | None:
    """REDUCE(ADD) over r of where(r + c == e & rest, v, 0) -> where(0 <= e - c < n & rest, v, 0) at r = e - c."""
    value, ranges = x.src[0], x.src[1:]
    select = _select(value)
    if select is None:
        return None
    cond, v = select
    clauses = _clauses(cond)
    for r in ranges:
        for clause in clauses:
            e = _index_equal_to(clause, r)
            if e is None:
                continue
            n = r.src[0]
            at = {r: _clamped(e, n)}
            gate = (e.const_like(-1) < e).logical_and(e < n)
            for other in clauses:
                if other is not clause:
                    gate = gate.logical_and(substitute(other, at))
            body = gate.where(substitute(v, at), x.const_like(0))
            rest = tuple(q for q in ranges if q is not r)
            return x.replace(src=(body, *rest)) if rest else body
    return None


one_hot_sums = PatternMatcher([(UPat(Ops.REDUCE, arg=Ops.ADD, name="x"), fold_one_hot_sum)], "one_hot_sums")


def fold_gathers(ast: UOp) -> UOp:
    """A simplified kernel with each sum over a one-hot select replaced by a load of its one nonzero term (then
    simplified again). It must be simplified first: only then is the one-hot's arange the range itself."""
    folded = graph_rewrite(ast, one_hot_sums, name="one_hot_sums")
    return ast if folded is ast else simplify_kernel(folded)

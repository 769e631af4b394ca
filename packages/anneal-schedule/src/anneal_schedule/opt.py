"""The kernel optimizer: which parallel strategy a kernel gets, as data a renderer follows.

Three strategies, each a way of splitting the kernel's ranges over the device:

* ``flat``: one invocation per output element (global ranges folded into one index),
  ``local`` invocations per workgroup. Elementwise kernels and small reductions. With
  ``width`` 4 an invocation computes four neighbouring elements of the innermost output
  range as WGSL vec4 values (vec4 loads and stores where the index is contiguous and
  16-byte aligned).
* ``group``: one workgroup per *row*: the global ranges the kernel's reductions depend on.
  Its invocations split each reduction range and combine partial results in workgroup
  memory (a tree), keeping every result for the whole workgroup; then they stride over the
  remaining global ranges (the row's elements) and store. Row reductions (sum, max) and
  "row kernels" (``row_kernel``): a reduction read through a broadcast, fused with its
  reader, as in a one-kernel softmax or layernorm.
* ``tile``: a matmul-like kernel (a sum over k of a product of two operands, one not
  depending on n, the other not on m) computes TM x TN output tiles per workgroup, staging
  TK-deep slices of both operands in workgroup memory; each invocation accumulates an
  RM x RN register tile (upcast). The rest of the expression (bias, activation) runs as an
  epilogue on the accumulators.

``choose_opts`` is the hand-written heuristic; it reads the device limits, never constants
of one GPU. ``candidate_opts`` lists what a BEAM search times. A row kernel never gets
``flat`` (nor ``tile``): that would recompute its reductions once per output element.
"""

from __future__ import annotations

from dataclasses import dataclass

from anneal_ir import Ops, UOp
from anneal_schedule.backend import Limits


@dataclass(frozen=True)
class Contraction:
    """The parts of a matmul-like kernel."""

    reduce: UOp  # the REDUCE(ADD) node
    k: tuple[UOp, ...]  # its ranges (several: a reduction over batch and time), flattened in order
    a: UOp  # factor depending on m (and k), not on n
    b: UOp  # factor depending on n (and k), not on m
    m: UOp  # global range of the output rows
    n: UOp  # global range of the output columns


@dataclass(frozen=True)
class KernelOpts:
    strategy: str  # "flat", "group" or "tile"
    local: int  # invocations per workgroup
    tile: tuple[int, int, int] = (0, 0, 0)  # TM, TN, TK (strategy "tile")
    upcast: tuple[int, int] = (1, 1)  # RM, RN register tile per invocation (strategy "tile")
    contraction: Contraction | None = None
    width: int = 1  # 4: vec4 values along the innermost range ("flat"), vec4 shared-memory tiles ("tile")


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


def _end(r: UOp) -> int:
    """A range's extent for the heuristics (a symbolic one at its upper bound)."""
    return int(r.src[0].vmax)


def find_contraction(ast: UOp, deps: dict[UOp, frozenset[UOp]]) -> Contraction | None:
    reduces = [n for n in ast.toposort() if n.op is Ops.REDUCE]
    if len(reduces) != 1:
        return None
    red = reduces[0]
    if red.arg is not Ops.ADD or red.src[0].op is not Ops.MUL:
        return None
    k = tuple(red.src[1:])
    a, b = red.src[0].src
    da, db = deps[a] - set(k), deps[b] - set(k)
    if not all(r in deps[a] and r in deps[b] for r in k):
        return None
    only_a, only_b = sorted(da - db, key=_end), sorted(db - da, key=_end)
    if not only_a or not only_b:
        return None
    return Contraction(red, k, a, b, only_a[-1], only_b[-1])


def global_ranges(deps: dict[UOp, frozenset[UOp]]) -> list[UOp]:
    """The kernel's output ranges, outermost first (the last one is the store's innermost dimension)."""
    return sorted((n for n in deps if n.op is Ops.RANGE and n.arg[1] == "global"), key=lambda r: r.arg[0])


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


def fusable_reductions(ast: UOp) -> bool:
    """May a kernel that reads a reduction through a broadcast keep it fused? (the scheduler asks)

    Yes when every reduction varies with every output element (nothing is recomputed), or when it
    is a row kernel whose reductions each run once per workgroup: they read data of their own row
    only (never a whole matmul operand again for every row), the innermost output range is not a
    row range (the row's elements are contiguous), and there are enough rows to fill a device."""
    deps = ranges_of(ast)
    globals_ = global_ranges(deps)
    g = frozenset(globals_)
    reduces = [n for n in deps if n.op is Ops.REDUCE]
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
        total *= _end(r)
        n_rows *= _end(r) if r in rows else 1
    return n_rows >= ROW_KERNEL_MIN_ROWS or total <= ROW_KERNEL_SMALL


MAX_ROW_QUADS = 8  # quads of a row an invocation keeps in registers (render_row_cached)


def single_extent(rk: RowKernel) -> int | None:
    """The extent shared by a row kernel's passes when each reduction and the stores run over one range,
    all of one constant extent (softmax, layernorm over the last axis): then each invocation can keep its
    part of the row in registers across the passes."""
    if len(rk.inner) != 1 or any(len(t.src) != 2 for t in rk.reduces):
        return None
    extents = {r.src[0] for r in (rk.inner[0], *(t.src[1] for t in rk.reduces))}
    if len(extents) != 1:
        return None
    (end,) = extents
    return int(end.arg) if end.op is Ops.CONST else None


def vectorizable(r: UOp) -> bool:
    """Can a range be split into quads (vec4 lanes)? Its extent must be a constant multiple of 4."""
    return r.src[0].op is Ops.CONST and int(r.src[0].arg) % 4 == 0 and int(r.src[0].arg) > 0


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def tile_vectorizable(c: Contraction) -> bool:
    """The vec4 tile kernel needs one k range and k, n extents that are constant multiples of 4."""
    return len(c.k) == 1 and vectorizable(c.k[0]) and vectorizable(c.n)


def choose_opts(ast: UOp, limits: Limits) -> KernelOpts:
    """The heuristic: tile big contractions, group row kernels and big row reductions, flat for the rest."""
    local = min(256, limits.max_workgroup_invocations, limits.max_workgroup_size[0])
    deps = ranges_of(ast)
    globals_ = global_ranges(deps)
    outputs = 1
    for r in globals_:
        outputs *= _end(r)
    rk = row_kernel(ast, deps)
    if rk is not None:  # never flat: that would compute the row's reductions once per element
        work = 1
        for r in rk.inner:
            work *= _end(r)
        for red in rk.reduces:
            size = 1
            for r in red.src[1:]:
                size *= _end(r)
            work = max(work, size)
        largest = min(1024, limits.max_workgroup_invocations, limits.max_workgroup_size[0])
        extent = single_extent(rk)
        if extent is not None:  # the row in registers (4 to 8 quads per invocation if the row allows)
            fits = [n for n in (1024, 512, 256, 128, 64, 32) if n <= largest and extent % (4 * n) == 0]
            fits = [n for n in fits if extent // (4 * n) <= MAX_ROW_QUADS]
            if fits:
                return KernelOpts("group", next((n for n in fits if extent // (4 * n) >= 4), fits[0]), width=4)
        # about four quads (16 elements) per invocation and pass: 512 invocations for a row of 8192 (measured
        # on an H200: 0.089 ms against 0.107 with 256), 64 for a row of 128
        return KernelOpts("group", min(largest, 512, max(64, _pow2_at_least(work // 16))), width=4)
    c = find_contraction(ast, deps)
    k_size = 1
    for r in c.k if c is not None else ():
        k_size *= _end(r)
    if c is not None and _end(c.m) >= 32 and _end(c.n) >= 32 and k_size >= 16:
        big = _end(c.m) >= 128 and _end(c.n) >= 128 and outputs >= (1 << 20)
        tm = tn = 128 if big else 64
        if tile_vectorizable(c):
            # vec4 shared-memory tiles, 8x4 outputs per invocation; on an H200 (4096^3) 64x128x32 ran at 32.5
            # TFLOP/s, 128x128x16 with 8x8 at 30.9, the best scalar tile at 15 (benchmarks/RESULTS.md)
            for tm_, tn_, tk in ((64, 128, 32), (64, 128, 16), (64, 64, 16)) if big else ((64, 64, 16), (32, 64, 16)):
                threads = (tm_ // 8) * (tn_ // 4)
                if threads <= limits.max_workgroup_invocations and (tm_ + tn_) * tk * 4 <= limits.max_shared_memory:
                    return KernelOpts("tile", threads, (tm_, tn_, tk), (8, 4), c, width=4)
        # TK=32 measured slower on an H200; for 128x128 tiles BEAM preferred an 8x4 register tile (512
        # invocations) to 8x8 (256) there: benchmarks/RESULTS.md
        tk, rm, rn = 16, tm // 16, tn // 16
        if tm == 128 and limits.max_workgroup_invocations >= 512:
            rn = 4
        shared = (tm + 1 + tn) * tk * 4
        if (tm // rm) * (tn // rn) <= limits.max_workgroup_invocations and shared <= limits.max_shared_memory:
            return KernelOpts("tile", (tm // rm) * (tn // rn), (tm, tn, tk), (rm, rn), c)
    reduces = [n for n in deps if n.op is Ops.REDUCE]
    if reduces and limits.max_shared_memory >= local * 4 * len(reduces):
        longest = 0
        for red in reduces:
            size = 1
            for r in red.src[1:]:
                size *= _end(r)
            longest = max(longest, size)
        if longest >= 128 and outputs <= 65536:  # few outputs, long reductions: share each across a workgroup
            return KernelOpts("group", local, width=4)
    # vec4 along the innermost output range: for elementwise kernels, and reductions with outputs to spare
    wide = bool(globals_) and vectorizable(globals_[-1]) and (not reduces or outputs >= (1 << 18))
    return KernelOpts("flat", local, width=4 if wide else 1)


def candidate_opts(ast: UOp, limits: Limits) -> list[KernelOpts]:
    """The heuristic's choice first, then the variants a BEAM search times on the device."""
    first = choose_opts(ast, limits)
    out = [first]
    max_local = min(limits.max_workgroup_invocations, limits.max_workgroup_size[0])
    locals_ = [n for n in (64, 128, 256, 512, 1024) if n <= max_local]
    deps = ranges_of(ast)
    if row_kernel(ast, deps) is not None:  # only group: flat would recompute the reductions per element
        locals_ = [n for n in (32, *locals_) if n <= max_local]
        out += [KernelOpts("group", n, width=w) for w in (4, 1) for n in locals_ if limits.max_shared_memory >= n * 4]
        return _unique(out)
    c = find_contraction(ast, deps)
    if c is not None and first.strategy == "tile":
        for tm, tn in ((64, 64), (128, 128), (128, 64), (64, 128), (32, 64)):
            for tk in (8, 16, 32):
                for rm, rn in ((4, 4), (8, 8), (8, 4), (4, 8)):
                    threads = (tm // rm) * (tn // rn)
                    if threads > max_local or threads < 32:
                        continue
                    if tile_vectorizable(c) and (tm + tn) * tk * 4 <= limits.max_shared_memory:
                        out.append(KernelOpts("tile", threads, (tm, tn, tk), (rm, rn), c, width=4))
                    if (tm + 1 + tn) * tk * 4 <= limits.max_shared_memory:
                        out.append(KernelOpts("tile", threads, (tm, tn, tk), (rm, rn), c))
    if first.strategy == "group" or any(n.op is Ops.REDUCE for n in deps):
        out += [KernelOpts("group", n, width=4) for n in locals_ if limits.max_shared_memory >= n * 4]
    globals_ = global_ranges(deps)
    widths = (4, 1) if globals_ and vectorizable(globals_[-1]) else (1,)
    out += [KernelOpts("flat", n, width=w) for w in widths for n in locals_]
    return _unique(out)


def _unique(opts: list[KernelOpts]) -> list[KernelOpts]:
    unique: list[KernelOpts] = []
    for o in opts:
        if o not in unique:
            unique.append(o)
    return unique

"""Which opts a kernel gets: the hand-written heuristic, and the candidates a BEAM search times.

Every choice is a list of ``Opt`` (anneal_schedule.opt), read from the device's limits, never from
constants of one GPU. The shapes of kernel it knows:

* a **contraction** (a sum over k of a product of a, varying with rows m, and b, with columns n)
  is tiled: each workgroup computes TM x TN outputs, each invocation an RM x RN register tile
  (LOCAL + UPCAST on a row and a column range, the columns as vec4 lanes where they allow), the
  innermost k range is unrolled TK deep and both operands are staged in workgroup memory one k
  step at a time (STAGE), whatever elementwise work they carry: a convolution's windows, a GELU's
  backward, a layer norm's recomputation are computed once per staged element;
* a **row kernel** (reductions read through a broadcast: softmax, layer norm) gets a workgroup
  per row: the row's elements over the invocations (LOCAL, vec4 lanes), each reduction GROUPed
  across them; a row short enough is kept in registers across the passes (UPCAST and UNROLL by
  the same split, so every pass reads the same loads);
* **few outputs and long reductions**: each reduction GROUPed over a workgroup per output; sums down
  columns (the loads side by side along an output range, far apart along the sum) get a workgroup of 32
  neighbouring outputs instead (LOCAL), each sum GROUPed 8 ways across it;
* everything else is **flat**: the output ranges MERGEd into one index, split over invocations
  (LOCAL), four neighbours per invocation as vec4 lanes where the innermost range allows; a short
  output range that the reductions' largest load does not vary with is computed whole by each
  invocation (UPCAST), so that load is read once for all its values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from anneal_ir import Ops, UOp, trace
from anneal_schedule.analysis import (
    Contraction,
    affine,
    const_extent,
    extent,
    find_contraction,
    global_ranges,
    masked_along,
    one_hot,
    ranges_of,
    row_kernel,
    vectorizable,
)
from anneal_schedule.backend import Limits
from anneal_schedule.opt import Opt, OptError, OptOps, apply_opts

MAX_ROW_QUADS = 8  # quads of a row an invocation keeps in registers
SPARSE_TILES = 8  # a one-hot skips zero tiles along a range this many tiles long (GPT-2's 50257 tokens: 393)


def _pow2_at_most(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def max_local(limits: Limits) -> int:
    return min(limits.max_workgroup_invocations, limits.max_workgroup_size[0])


def _read_along(ast: UOp, deps: dict[UOp, frozenset[UOp]], globals_: list[UOp]) -> UOp | None:
    """The output range a reduction kernel's reads and writes are contiguous along (the range of unit stride in the
    loads and stores that touch the most elements), where it is not already the innermost: neighbouring
    invocations should step along it. A batch norm's statistics over a channels-last image read 128 channels side
    by side, but their outputs were laid out channels first: invocations stepping along the batch read 512 KB apart
    (8.2 ms instead of 0.1)."""
    weight: dict[UOp, int] = {}
    for n in ast.toposort():
        # the stores count as the loads do: a max pool's NaN check read its per-channel statistics along the
        # channels, but its image (and its output) along x, 1024 words apart channel to channel (0.39 ms, 4x its
        # memory time on an H100)
        if n.op in (Ops.LOAD, Ops.STORE) and n.src[0].op is Ops.DEFINE_GLOBAL:
            aff = affine(n.src[1])
            if aff is None:
                continue
            points = math.prod(extent(r) for r in deps[n] | {r for r in aff[0] if r.op is Ops.RANGE})
            for r in globals_:
                if aff[0].get(r) == 1:
                    weight[r] = weight.get(r, 0) + points
    if not weight:
        return None
    best = max(globals_, key=lambda r: (weight.get(r, 0), r.arg[0]))
    return None if best is globals_[-1] or weight.get(best, 0) <= weight.get(globals_[-1], 0) else best


MAX_SHARED_UPCAST = 4  # outputs of a small range one invocation computes from the same loads


def _largest_load(reduces: list[UOp], deps: dict[UOp, frozenset[UOp]]) -> UOp | None:
    """Of the global loads inside these reductions, the one that reads the most elements (None: there are none)."""
    loads = [n for red in reduces for n in red.src[0].toposort()
             if n.op is Ops.LOAD and n.src[0].op is Ops.DEFINE_GLOBAL]  # fmt: skip
    return max(loads, key=lambda n: math.prod(extent(r) for r in deps[n])) if loads else None


def _shared_across(ast: UOp, deps: dict[UOp, frozenset[UOp]], candidates: list[UOp]) -> UOp | None:
    """A short output range (2 to MAX_SHARED_UPCAST values) that the reductions' largest load does not vary with:
    one invocation computing all its outputs reads that load once for them. A 3-channel image's input gradient
    read the 64-channel upstream gradient once per input channel (its 9 windows, 27 times over)."""
    largest = _largest_load([n for n in ast.toposort() if n.op is Ops.REDUCE], deps)
    if largest is None:
        return None
    short = [r for r in candidates if 2 <= (const_extent(r) or 0) <= MAX_SHARED_UPCAST and r not in deps[largest]]
    return short[0] if short else None


def _unit_stride(u: UOp, r: UOp) -> bool:
    """Does every load under u that varies with range r read memory one element apart along it?"""
    steps = [affine(n.src[1]) for n in u.toposort() if n.op is Ops.LOAD and n.src[0].op is Ops.DEFINE_GLOBAL]
    varying = [a for a in steps if a is None or r in a[0]]
    return bool(varying) and all(a is not None and abs(a[0][r]) == 1 for a in varying)


def _dot_products(ast: UOp, deps: dict[UOp, frozenset[UOp]], globals_: list[UOp], reduces: list[UOp]) -> bool:
    """Are the kernel's reductions read along memory while no output range is (so flat kernels read apart)?"""
    top = [red for red in reduces if deps[red] <= frozenset(globals_)]
    return (bool(top) and all(_unit_stride(red.src[0], red.src[-1]) for red in top)
            and not any(_unit_stride(ast, r) for r in globals_))  # fmt: skip


def flat_opts(ast: UOp, limits: Limits, local: int = 256, vec: bool = True, unroll: int = 1) -> tuple[Opt, ...]:
    """One invocation per output (four with vec4 lanes), the output ranges merged into one index; each reduction's
    innermost range unrolled `unroll` deep (loads in flight at once)."""
    deps = ranges_of(ast)
    globals_ = global_ranges(deps)
    reduces = [n for n in deps if n.op is Ops.REDUCE]
    outputs = math.prod(extent(r) for r in globals_) if globals_ else 1
    opts: list[Opt] = []
    along = _read_along(ast, deps, globals_) if reduces and len(globals_) > 1 else None
    inner = along if along is not None else globals_[-1] if globals_ else None
    shared = _shared_across(ast, deps, [r for r in globals_ if r is not inner]) if reduces else None
    if shared is not None:
        opts.append(Opt(OptOps.UPCAST, shared.arg[0], extent(shared)))
        outputs //= extent(shared)
    wide = vec and inner is not None and vectorizable(inner) and (not reduces or outputs >= (1 << 18))
    if wide and inner is not None and not (len(globals_) == 1 and extent(globals_[0]) == 4):
        opts.append(Opt(OptOps.VECTOR, inner.arg[0]))
        outputs //= 4
    if unroll > 1 and globals_:
        # reductions with no reduction inside (the lowering does not unroll around a nested one)
        top = [n for n in ast.toposort() if n.op is Ops.REDUCE and deps[n] <= frozenset(globals_)
               and not any(m.op is Ops.REDUCE for m in n.src[0].toposort())]  # fmt: skip
        for r in dict.fromkeys(red.src[-1] for red in top):
            if const_extent(r) is not None and extent(r) % unroll == 0 and extent(r) >= 4 * unroll:
                opts.append(Opt(OptOps.UNROLL, r.arg[0], unroll))
    placed = [r for r in globals_ if r is not shared]  # an UPCAST whole leaves no range of its id
    if len(placed) > 1:
        opts.append(Opt(OptOps.MERGE, 0, along.arg[0] + 1 if along is not None else 0))
    if placed and outputs >= 2:
        opts.append(Opt(OptOps.LOCAL, placed[0].arg[0], min(local, max_local(limits), _pow2_at_least(outputs))))
    return tuple(opts)


def group_size(length: int, largest: int) -> int:
    """Invocations sharing one reduction of length: a quad (4 elements) each at least, 64 to largest. On an H200
    the split-K partial sums of layer-norm gradients (256 long) ran 2x faster on 64 invocations with vec4 loads
    than on 256 with one element each (RESULTS.md, session 16)."""
    n = 64
    while n * 2 <= largest and n * 2 * 4 <= length:
        n *= 2
    return min(n, largest)


def group_opts(ast: UOp, local: int, vec: bool = True) -> tuple[Opt, ...]:
    """A workgroup per output: each top reduction split across the invocations."""
    deps = ranges_of(ast)
    opts: list[Opt] = []
    g = frozenset(global_ranges(deps))
    for red in (n for n in ast.toposort() if n.op is Ops.REDUCE and deps[n] <= g):
        r = red.src[-1]
        if vec and vectorizable(r) and extent(r) >= 4 * local:
            opts.append(Opt(OptOps.VECTOR, r.arg[0]))
        opts.append(Opt(OptOps.GROUP, r.arg[0], local))
    return tuple(opts)


COLUMN_LANES = 32  # neighbouring outputs of a column sum's workgroup: 128 bytes of each row it reads


def _column_range(ast: UOp, deps: dict[UOp, frozenset[UOp]], globals_: list[UOp]) -> UOp | None:
    """The output range that the largest load of every reduction reads side by side while its reduced range
    reads far apart (sums down columns: a layer norm's weight gradient over 16384 rows of 384 channels), where
    it has COLUMN_LANES values or a multiple of them."""
    top = [red for red in ast.toposort() if red.op is Ops.REDUCE and deps[red] <= frozenset(globals_)]
    largest = _largest_load(top, deps)
    if largest is None:
        return None
    aff = affine(largest.src[1])
    if aff is None or any(abs(aff[0].get(red.src[-1], 0)) <= 1 for red in top):
        return None
    along = [r for r in globals_ if aff[0].get(r) == 1 and (const_extent(r) or 0) % COLUMN_LANES == 0]
    return along[0] if along else None


def column_opts(ast: UOp, along: UOp, lanes: int = COLUMN_LANES, group: int = 8) -> tuple[Opt, ...]:
    """A workgroup of `lanes` neighbouring outputs along `along`, each reduction grouped `group` ways across
    them: every load of the workgroup reads `lanes` consecutive words of `group` rows, where a workgroup per output
    (group_opts) reads one word of each of its rows."""
    deps = ranges_of(ast)
    g = frozenset(global_ranges(deps))
    opts = [Opt(OptOps.LOCAL, along.arg[0], lanes)]
    for red in (n for n in ast.toposort() if n.op is Ops.REDUCE and deps[n] <= g):
        opts.append(Opt(OptOps.GROUP, red.src[-1].arg[0], group))
    return tuple(opts)


def _short_joins(ranges: Sequence[UOp], enough: int, adjacent: bool) -> list[Opt]:
    """JOINs of ranges, innermost first, while the innermost (joined) range has fewer than `enough` values; with
    `adjacent`, only ranges whose ids are neighbours (adjacent in the output)."""
    joins: list[Opt] = []
    ends = [(r.arg[0], const_extent(r)) for r in ranges]
    while len(ends) > 1:
        (outer, eo), (short, es) = ends[-2], ends[-1]
        if eo is None or es is None or es >= enough or (adjacent and outer != short - 1):
            break
        joins.append(Opt(OptOps.JOIN, outer, short))
        ends[-2:] = [(outer, eo * es)]
    return joins


def row_opts(ast: UOp, limits: Limits, local: int | None = None, vec: bool = True,
             cached: bool = True) -> tuple[Opt, ...] | None:  # fmt: skip
    """A workgroup per row: the row's elements over the invocations, each reduction grouped across them."""
    deps = ranges_of(ast)
    rk = row_kernel(ast, deps)
    if rk is None:
        return None
    largest = min(1024, max_local(limits))
    # a row whose innermost range is shorter than a workgroup is joined with its outer ranges: a 4x4 image's x alone
    # left 4 of 512 invocations working through a batch norm's channel of 8192 elements (ResNet-9's last layer, 1.8 ms
    # a kernel on an H100); the row's ranges need not be adjacent in the output (the channel sits between them)
    joins = tuple(_short_joins(rk.inner, largest, adjacent=False))
    if joins:
        ast = apply_opts(ast, joins)
        deps = ranges_of(ast)
        rk = row_kernel(ast, deps)
        if rk is None:
            return None
    inner = list(rk.inner)
    last = inner[-1]
    work = max([math.prod(extent(r) for r in inner), *(math.prod(extent(r) for r in t.src[1:]) for t in rk.reduces)])
    simple = len(inner) == 1 and all(len(t.src) == 2 for t in rk.reduces)
    ends = {const_extent(r) for r in (last, *(t.src[1] for t in rk.reduces))} if simple else set()
    single = ends.pop() if len(ends) == 1 else None
    # (a range of exactly four values would be all lanes: nothing left for the later splits to name)
    lanes = vec and all(vectorizable(r) and extent(r) > 4 for r in (last, *(t.src[-1] for t in rk.reduces)))
    if local is None:
        # about four quads (16 elements) per invocation and pass: 512 invocations for a row of 8192 (measured
        # on an H200: 0.089 ms against 0.107 with 256), 64 for a row of 128
        local = min(largest, 512, max(64, _pow2_at_least(work // 16)))
        if cached and lanes and single is not None:  # the row in registers, 4 to 8 quads per invocation
            fits = [n for n in (1024, 512, 256, 128, 64, 32) if n <= largest and single % (4 * n) == 0]
            fits = [n for n in fits if single // (4 * n) <= MAX_ROW_QUADS]
            if fits:
                local = next((n for n in fits if single // (4 * n) >= 4), fits[0])
    opts: list[Opt] = list(joins)
    quads = single // (4 * local) if lanes and single is not None and single % (4 * local) == 0 else None
    keep = cached and quads is not None and quads <= MAX_ROW_QUADS
    for r in inner[:-1]:
        opts.append(Opt(OptOps.LOOP, r.arg[0]))
    if lanes:
        opts.append(Opt(OptOps.VECTOR, last.arg[0]))
    opts.append(Opt(OptOps.LOCAL, last.arg[0], local))
    remaining = -(-extent(last) // ((4 if lanes else 1) * local))
    if keep and quads is not None and quads > 1:
        opts.append(Opt(OptOps.UPCAST, last.arg[0], quads))
    elif not keep and remaining > 1:
        opts.append(Opt(OptOps.LOOP, last.arg[0]))
    for red in rk.reduces:
        r = red.src[-1]
        if lanes:
            opts.append(Opt(OptOps.VECTOR, r.arg[0]))
        opts.append(Opt(OptOps.GROUP, r.arg[0], local))
        if keep and quads is not None and quads > 1:
            opts.append(Opt(OptOps.UNROLL, r.arg[0], quads))
    return tuple(opts)


def _contiguous_along(operand: UOp, r: UOp) -> bool:
    """Does operand read memory one element apart along r (in every load that varies with r)?"""
    loads = [n for n in operand.toposort() if n.op is Ops.LOAD and n.src[0].op is Ops.DEFINE_GLOBAL]
    steps = [affine(n.src[1]) for n in loads]
    varying = [a for a in steps if a is not None and r in a[0]]
    return bool(varying) and all(a[0][r] == 1 for a in varying)


# k values of a staged step unrolled in one piece: on an H100 a hand-written 64x128 tile ran 4096^3 at 38.2 TFLOP/s
# with its 16-deep step unrolled whole, 32.6 as a loop of four (benchmarks/wgsl_matmul_ceiling.py, RESULTS.md)
UNROLLED_K = 16


def _tile_depth(k: UOp, tk: int) -> int:
    """The k step of a tile: tk, or a smaller multiple of 4 dividing k's extent (no ragged last step), leaving at
    least two steps (a k of exactly tk would be unrolled whole, leaving no loop for INNER to split)."""
    e = extent(k)
    for d in (tk, tk // 2, tk // 4):
        if d >= 4 and e % d == 0 and e // d >= 2:
            return d
    return min(tk, e)


def tile_opts(c: Contraction, limits: Limits, tm: int, tn: int, tk: int, rm: int, rn: int,
              vec: bool = True, piece: int = UNROLLED_K) -> tuple[Opt, ...] | None:  # fmt: skip
    """TM x TN outputs per workgroup, RM x RN per invocation, TK-deep k steps, both operands staged.

    An invocation's rows are strided (row l + i * TM/RM), so neighbouring invocations read neighbouring
    words of a tile, unless the first operand is contiguous along its rows (a transposed X^T): then each
    invocation owns RM consecutive rows, read four at a time. A k step is unrolled `piece` values at a time (a
    loop of pieces where it is deeper); a step that may skip a sparse operand's zero tiles, four at a time."""
    m, n, k = c.m[-1], c.n[-1], c.k[-1]
    # columns as vec4 lanes: a ragged extent (GPT-2's 50257 tokens) too, its last quad guarded lane by lane
    lanes = vec and rn % 4 == 0 and (vectorizable(n) or (const_extent(n) or 0) >= tn)
    threads = (tm // rm) * (tn // rn)
    shared = (tm + tn) * tk * 4
    if threads > max_local(limits) or shared > limits.max_shared_memory or threads < 1:
        return None
    opts: list[Opt] = []
    if lanes:
        opts.append(Opt(OptOps.VECTOR, n.arg[0]))
        opts.append(Opt(OptOps.LOCAL, n.arg[0], tn // rn))
        if rn // 4 > 1:
            opts.append(Opt(OptOps.UPCAST, n.arg[0], rn // 4))
    else:
        opts.append(Opt(OptOps.LOCAL, n.arg[0], tn // rn))
        if rn > 1:
            opts.append(Opt(OptOps.UPCAST, n.arg[0], rn))
    rows = [Opt(OptOps.LOCAL, m.arg[0], tm // rm)] + ([Opt(OptOps.UPCAST, m.arg[0], rm)] if rm > 1 else [])
    opts += list(reversed(rows)) if rm % 4 == 0 and _contiguous_along(c.a, m) else rows
    depth = _tile_depth(k, tk) if const_extent(k) is not None else 1
    stepped = depth > 1 and extent(k) > 1
    sparse = [axis for axis in (0, 1) if _sparse(c, axis, tm if axis == 0 else tn)] if stepped else []
    piece = 4 if sparse else piece  # SKIP leaves out the loop of pieces
    inner = stepped and depth > piece and depth % piece == 0
    if stepped:
        opts.append(Opt(OptOps.UNROLL, k.arg[0], depth))
        if inner:
            opts.append(Opt(OptOps.INNER, k.arg[0], piece))
    opts += [Opt(OptOps.STAGE, 0), Opt(OptOps.STAGE, 1)]
    if inner:
        opts += [Opt(OptOps.SKIP, axis) for axis in sparse]
    return tuple(opts)


def _sparse(c: Contraction, axis: int, tile: int) -> bool:
    """Are many of operand axis's staged tiles zero: a one-hot along a range of at least SPARSE_TILES tiles, or an
    operand masked by positions along k (a causal attention's probabilities and their gradients)?"""
    operand = c.a if axis == 0 else c.b
    deps = ranges_of(operand)
    r = one_hot(operand, deps)
    return (r is not None and extent(r) >= SPARSE_TILES * tile) or masked_along(operand, deps, c)


TILE_ROWS = 128  # a big tile's rows (or columns): a short output range is joined with its neighbours to reach them


def join_opts(c: Contraction) -> tuple[Opt, ...]:
    """JOIN a short innermost row (column) range with the ranges outside it, adjacent in the output, until a
    tile's worth: a 16x16 image's y and x become 256 rows of one tile, where x alone leaves a tile a quarter full."""
    return tuple(_short_joins(c.m, TILE_ROWS, adjacent=True) + _short_joins(c.n, TILE_ROWS, adjacent=True))


def joined_contraction(ast: UOp) -> tuple[tuple[Opt, ...], Contraction] | None:
    """The kernel's contraction after join_opts: the JOINs, and the contraction the tiles are made for."""
    c = find_contraction(ast, ranges_of(ast))
    if c is None:
        return None
    joins = join_opts(c)
    if not joins:
        return joins, c
    joined = apply_opts(ast, joins)
    c2 = find_contraction(joined, ranges_of(joined))
    return (joins, c2) if c2 is not None else ((), c)


def contraction_opts(ast: UOp, limits: Limits) -> tuple[Opt, ...] | None:
    found_c = joined_contraction(ast)
    if found_c is None:
        return None
    joins, c = found_c
    m, n = c.m[-1], c.n[-1]
    k_size = math.prod(extent(r) for r in c.k)
    if min(extent(m), extent(n)) < 16 or k_size < 16 or any(const_extent(r) is None for r in (m, n)):
        return None
    outputs = math.prod(extent(r) for r in global_ranges(ranges_of(ast)))
    big = extent(m) >= 128 and extent(n) >= 128 and outputs >= (1 << 20)
    # on an H200, 64x128 with an 8x8 register tile (two vec4s of columns, 128 invocations) was first or second of
    # 135 candidates for 4096^3 and nanogpt's linear layers, 5-13% ahead of the 8x4 tile (RESULTS.md, session 16);
    # 16 deep and unrolled whole, the hand-written tile was fastest on an H100 (UNROLLED_K); 32-wide tiles for
    # narrow operands (the 27 columns of a 3-channel convolution's weight gradient)
    tiles = (
        ((64, 128, 16, 8, 8), (64, 128, 16, 8, 4), (64, 64, 16, 4, 4))
        if big
        else ((64, 64, 16, 4, 4), (32, 64, 16, 4, 4), (64, 32, 16, 4, 4), (32, 32, 16, 4, 4))
    )
    if any(o.axis in {r.arg[0] for r in c.m} for o in joins) and extent(n) >= 64:
        # a convolution's window rows (JOINed y and x): on an H200 32x64x8 with an 8x8 register tile, 32 invocations,
        # was the fastest of 99-135 candidates for the ResNet-9 layers' input gradients, 2.5-4x the 64x64x16 tile
        tiles = ((32, 64, 8, 8, 8), *tiles)
    for tm, tn, tk, rm, rn in tiles:
        found = tile_opts(c, limits, tm, tn, tk, rm, rn)
        if found is not None and _applies(ast, joins + found):
            return joins + found
    return None


def _applies(ast: UOp, opts: tuple[Opt, ...]) -> bool:
    try:
        apply_opts(ast, opts, simplify=False)  # whether each opt applies, not the simplified kernel
    except OptError:
        return False
    return True


def choose_opts(ast: UOp, limits: Limits) -> tuple[Opt, ...]:
    """The heuristic: tile contractions, a workgroup per row for row kernels and per output for long
    reductions with few outputs, flat for the rest. A compile trace records which and why."""
    form, why, opts = _choose(ast, limits)
    trace.event("opts", None, form=form, why=why, opts=", ".join(map(str, opts)))
    return opts


def _choose(ast: UOp, limits: Limits) -> tuple[str, str, tuple[Opt, ...]]:
    row = row_opts(ast, limits)
    if row is not None:
        return "row", "a row kernel: one workgroup per row", row
    tiled = contraction_opts(ast, limits)
    if tiled is not None:
        return "tile", "a contraction: tiled in workgroup memory and registers", tiled
    deps = ranges_of(ast)
    globals_ = global_ranges(deps)
    outputs = math.prod(extent(r) for r in globals_) if globals_ else 1
    reduces = [n for n in deps if n.op is Ops.REDUCE]
    local = min(256, max_local(limits))
    if reduces and limits.max_shared_memory >= local * 4 * len({r.dtype for r in reduces}):  # trees share arrays
        longest = max(math.prod(extent(r) for r in red.src[1:]) for red in reduces)
        if longest >= 128 and outputs <= 65536:  # few outputs, long reductions: share each across a workgroup
            column = _column_range(ast, deps, globals_)
            # (32 columns a workgroup leave fewer workgroups: where they would not fill the device, a workgroup per
            # output, each reading one word of a row, keeps more loads in flight)
            if column is not None and max_local(limits) >= 256 and outputs // COLUMN_LANES >= limits.parallel // 2:
                why = f"{outputs} outputs of {longest}-long sums down columns: {COLUMN_LANES} columns per workgroup"
                return "columns", why, column_opts(ast, column, COLUMN_LANES, 256 // COLUMN_LANES)
            why = f"{outputs} outputs of {longest}-long reductions: one workgroup each"
            return "group", why, group_opts(ast, group_size(longest, local))
        if longest >= 128 and _dot_products(ast, deps, globals_, reduces):
            # many long dot products along memory (a language model's head, one token: 50257 rows of 768): one
            # output per invocation would read a row each, far apart; a workgroup per output reads side by side
            why = f"{outputs} outputs, each a {longest}-long reduction read contiguously: one workgroup each"
            return "group", why, group_opts(ast, group_size(longest, local))
    # a long reduction per output: four loads of each invocation in flight (an H200 sweep: 0.075 ms against 0.124
    # for a batch norm's channel sums, RESULTS.md)
    unroll = 4 if reduces and max(extent(red.src[-1]) for red in reduces) >= 64 else 1
    return "flat", "one thread per output", flat_opts(ast, limits, local, unroll=unroll)


def candidate_opts(ast: UOp, limits: Limits) -> list[tuple[Opt, ...]]:
    """The heuristic's choice first, then the variants a BEAM search times on the device."""
    first = choose_opts(ast, limits)
    out = [first]
    largest = max_local(limits)
    locals_ = [n for n in (64, 128, 256, 512, 1024) if n <= largest]
    deps = ranges_of(ast)
    if row_kernel(ast, deps) is not None:  # only rows: flat would recompute the reductions per element
        for n in (32, *locals_):
            for vec in (True, False):
                for cached in (True, False):
                    found = row_opts(ast, limits, n, vec, cached)
                    if found is not None:
                        out.append(found)
        return _unique([o for o in out if _applies(ast, o)])
    found_c = joined_contraction(ast)
    if found_c is not None and any(o.op is OptOps.STAGE for o in first):
        joins, c = found_c
        for tm, tn in ((64, 64), (128, 128), (128, 64), (64, 128), (32, 64)):
            for tk in (8, 16, 32):
                for rm, rn in ((4, 4), (8, 8), (8, 4), (4, 8), (16, 8), (8, 16)):
                    if (tm // rm) * (tn // rn) < 32:
                        continue
                    for vec, piece in ((True, UNROLLED_K), (False, UNROLLED_K), (True, 4)):
                        found = tile_opts(c, limits, tm, tn, tk, rm, rn, vec, piece)
                        if found is not None:
                            out.append(joins + found)
    if any(n.op is Ops.REDUCE for n in deps):
        out += [group_opts(ast, n) for n in locals_ if limits.max_shared_memory >= n * 4]
        column = _column_range(ast, deps, global_ranges(deps))
        if column is not None:
            out += [column_opts(ast, column, lanes, n // lanes) for lanes in (16, 32) for n in (128, 256, 512)
                    if n <= largest and extent(column) % lanes == 0]  # fmt: skip
    out += [flat_opts(ast, limits, n, vec) for vec in (True, False) for n in locals_]
    if any(n.op is Ops.REDUCE for n in deps):  # long reductions: several loads of each invocation in flight
        out += [flat_opts(ast, limits, n, True, unroll) for n in (128, 256) if n <= largest for unroll in (2, 4, 8)]
    return _unique([o for o in out if _applies(ast, o)])


def _unique(opts: list[tuple[Opt, ...]]) -> list[tuple[Opt, ...]]:
    unique: list[tuple[Opt, ...]] = []
    for o in opts:
        if o not in unique:
            unique.append(o)
    return unique

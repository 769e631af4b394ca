"""Schedule: from output UOps to an ordered list of kernels over numbered buffer slots.

Scheduling is a pure function of graph structure. Input buffers are replaced by numbered
slots first, so the same step on new data is a cache hit; the cached Schedule is then
bound to this call's buffers.
"""

from __future__ import annotations

import functools
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from anneal_ir import DType, GroupOp, Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite, trace
from anneal_ir.sint import record_bind, render_size, sint, variables
from anneal_schedule.analysis import fusable_reductions
from anneal_schedule.gather import fold_gathers
from anneal_schedule.heuristic import TILE_ROWS
from anneal_schedule.rangeify import MOVEMENT, KernelBuilder, NeedsRealize, broadcasts
from anneal_schedule.simplify import simplify_kernel
from anneal_schedule.split import split_reductions

if TYPE_CHECKING:
    from anneal_schedule.store import ScheduleStore


@dataclass(frozen=True)
class Slot:
    """Stands for the i-th input buffer while scheduling (so the schedule is data-independent)."""

    index: int
    size: sint  # symbolic when the buffer is read through a view of symbolic shape
    dtype: DType

    def content_key(self) -> str:
        size = self.size if isinstance(self.size, int) else self.size.key.hex()
        return f"Slot({self.index},{size},{self.dtype.name})"

    def describe(self) -> str:
        return f"Slot({self.index},{render_size(self.size)},{self.dtype.name})"


@dataclass(frozen=True)
class Kernel:
    name: str
    ast: UOp  # SINK(STORE(DEFINE_GLOBAL 0, index, value))
    slots: tuple[int, ...]  # schedule slot of each DEFINE_GLOBAL, in argument order
    nodes: frozenset[UOp]  # the tensor-level nodes computed inside this kernel (of the normalized graph)

    @property
    def fused_ops(self) -> int:
        return sum(1 for n in self.nodes if n.op not in (Ops.CONST, Ops.DEFINE_VAR))


@dataclass(frozen=True)
class Schedule:
    kernels: tuple[Kernel, ...]
    n_inputs: int
    buffers: tuple[tuple[sint, DType], ...]  # (size, dtype) of slots n_inputs, ...; allocated at the size's upper bound
    outputs: tuple[int, ...]  # slot holding each requested output
    physical: tuple[int, ...]  # memory plan: slot n_inputs+k lives in physical buffer physical[k]
    variables: tuple[str, ...] = ()  # the Variables its kernels read: each call must give their values


@dataclass
class ScheduleStats:
    hits: int = 0
    misses: int = 0
    loaded: int = 0  # of the misses, how many the store had


def normalize(outputs: list[UOp]) -> tuple[UOp, list[Any]]:
    """Replace every BUFFER's arg with a numbered Slot, in toposort order.

    Returns the normalized SINK and the original Buffer objects in slot order."""
    sink, buffers, _ = normalize_bound(outputs)
    return sink, buffers


def _value_of(x: UOp) -> UOp:
    return x.src[0]


_values_only = PatternMatcher([(UPat(Ops.CUSTOM_VJP, name="x"), _value_of)], "values_only")


def normalize_bound(outputs: list[UOp]) -> tuple[UOp, list[Any], dict[str, int]]:
    """normalize, and also replace every BIND with its Variable: the schedule of a symbolic
    graph is the same for every value. Returns the values bound, by Variable name."""
    sink = UOp(Ops.SINK, dtypes.void, tuple(outputs))
    nodes = sink.toposort()
    if any(n.op is Ops.CUSTOM_VJP for n in nodes):  # a gradient rule matters to autodiff only
        sink = graph_rewrite(sink, _values_only, name="values_only")
        nodes = sink.toposort()
    symbolic_size = {n.src[0]: n.size for n in nodes
                     if n.op is Ops.RESHAPE and n.src[0].op is Ops.BUFFER and not isinstance(n.size, int)}  # fmt: skip
    buffers: list[Any] = []
    mapping: dict[UOp, UOp] = {}
    values: dict[str, int] = {}
    for node in nodes:
        if node.op is Ops.BUFFER and node not in mapping:
            size = symbolic_size.get(node, node.arg.size)
            mapping[node] = UOp(Ops.BUFFER, node.dtype, (), Slot(len(buffers), size, node.dtype))
            buffers.append(node.arg)
        elif node.op is Ops.BIND:
            record_bind(values, node)
            mapping[node] = node.src[0]
    if not mapping:
        return sink, buffers, values
    return substitute(sink, mapping), buffers, values


def substitute(root: UOp, mapping: dict[UOp, UOp]) -> UOp:
    from anneal_ir.pattern import PatternMatcher, UPat

    pm = PatternMatcher([(UPat(tuple(sorted({k.op for k in mapping}, key=lambda o: o.value)), name="x"),
                          lambda x: mapping.get(x))], "substitute")  # fmt: skip
    return graph_rewrite(root, pm, name="substitute")


def _consumers(sink: UOp) -> Counter[UOp]:
    count: Counter[UOp] = Counter()
    for node in sink.toposort():
        for s in set(node.src):
            count[s] += 1
    return count


@dataclass
class Scheduler:
    """Creates schedules and caches them by the content hash of the normalized graph: in memory, and in a store on
    disk (when given) for those that took a while to build, so that the next process finds them."""

    max_buffers: int = 1 << 30
    parallel: int = 0  # the device's Limits.parallel: reductions with fewer workgroups are split
    cache_size: int = 256
    cache: OrderedDict[bytes, Schedule] = field(default_factory=OrderedDict)
    stats: ScheduleStats = field(default_factory=ScheduleStats)
    store: ScheduleStore | None = None
    store_after_s: float = 0.05  # an eager op's schedule takes less to build than to write and read back

    def schedule(self, outputs: list[UOp]) -> tuple[Schedule, list[Any]]:
        sched, inputs, _ = self.schedule_bound(outputs)
        return sched, inputs

    def schedule_bound(self, outputs: list[UOp]) -> tuple[Schedule, list[Any], dict[str, int]]:
        """schedule, plus the values the graph binds its Variables to (the schedule has none)."""
        sink, inputs, values = normalize_bound(outputs)
        key = sink.key
        if key in self.cache:
            self.cache.move_to_end(key)
            self.stats.hits += 1
            return self.cache[key], inputs, values
        self.stats.misses += 1
        limits = (self.max_buffers, self.parallel)
        store = self.store if trace.current_trace.get() is None else None  # a trace records the scheduling itself
        sched = store.get(key, limits) if store is not None else None
        if sched is not None:
            self.stats.loaded += 1
        else:
            start = time.perf_counter()
            split = split_reductions(sink, self.parallel)
            trace.event("schedule", split)  # the graph the kernels are cut from
            sched = build_schedule(split, len(inputs), self.max_buffers)
            if store is not None and time.perf_counter() - start >= self.store_after_s:
                store.put(key, limits, sched)
        self.cache[key] = sched
        if len(self.cache) > self.cache_size:
            self.cache.popitem(last=False)
        return sched, inputs, values


class ScheduleError(RuntimeError):
    """A graph the scheduler cannot order safely; the message says what to change."""


def _assign_target(u: UOp) -> UOp:
    """The BUFFER an ASSIGN writes into (its target must be a plain view of a whole buffer)."""
    target = u.src[0]
    base = target.src[0] if target.op is Ops.RESHAPE else target
    if base.op is not Ops.BUFFER or base.arg.size != (u.size if u.shape else 1):
        raise ScheduleError("assign: the target must be a realized tensor (a whole buffer), not a view of one")
    return base


def build_schedule(sink: UOp, n_inputs: int, max_buffers: int = 1 << 30) -> Schedule:
    if max_buffers < 2:
        raise ScheduleError(f"a backend that binds {max_buffers} buffer(s) per kernel cannot run kernels")
    consumers = _consumers(sink)
    parents: dict[UOp, list[UOp]] = {}
    position: dict[UOp, int] = {}  # each node's place in a topological order: sources first
    for node in sink.toposort():
        position[node] = len(position)
        for src in set(node.src):
            parents.setdefault(src, []).append(node)
    split: set[UOp] = set()  # fused nodes given their own kernel to respect max_buffers
    unfused: set[UOp] = set()  # reductions read through a broadcast that their reader's kernel cannot keep
    slot_of: dict[UOp, int] = {}
    buffers: list[tuple[sint, DType]] = []
    kernels: list[Kernel] = []
    assigned: set[int] = set()  # input slots already overwritten by an ASSIGN kernel
    pending: set[UOp] = set()  # assigns being realized (to catch cycles)
    for node in sink.toposort():
        if node.op is Ops.BUFFER:
            slot_of[node] = node.arg.index

    def must_realize(u: UOp, through_broadcast: bool, inside_reduction: bool, root: UOp) -> str | None:
        """Why u needs a kernel of its own rather than being computed inside root's (None: it doesn't)."""
        if u.op in (Ops.CONTIGUOUS, Ops.ASSIGN):
            return f"{u.op.name.lower()}: asked for"
        if u in split:
            return "split off: the reader's kernel would bind too many buffers"
        if u.op is Ops.REDUCE_AXIS:  # read through a broadcast: fused unless the kernel cannot keep it
            if through_broadcast and u in unfused:
                return "a reduction read through a broadcast that the reader's kernel cannot keep"
            if through_broadcast and _trivial(u):
                return "a reduction over size-1 axes read through a broadcast"
            if through_broadcast or inside_reduction or root not in position:  # (not in it: an assign's staged copy)
                return f"a reduction read by {consumers[u]} nodes" if consumers[u] > 1 else None
            # read at the kernel's own index: fused (its readers are the kernel's epilogue) where no other kernel
            # reads it, however many nodes of this one do (a GELU's backward reads its upstream gradient twice)
            if _private(u, root, parents, position):
                return None
            return "a reduction read outside this kernel too: computed once"
        if u.op not in GroupOp.ALU or u.dtype == dtypes.bool:
            return None  # (not a mask: its readers each recompute it, a dropout mask is never a buffer)
        return computed_once(u)

    @functools.cache  # asked once per reader of u in every kernel built: decided once per schedule
    def computed_once(u: UOp) -> str | None:
        """Why the elementwise chain u is computed once rather than inside each reader (a property of u alone)."""
        if consumers[u] > 1 and _expensive(u):
            # an expensive elementwise chain read by several consumers is computed once, not in each of them
            return f"over {RECOMPUTE_LIMIT} ALU ops read by {consumers[u]} nodes: computed once"
        tiles = _staged_tiles(u, parents)
        if tiles > STAGED_TILES_MAX and _expensive(u, 2):
            # a prologue is computed once per tile of the other operand: GPT-2's final layer norm, staged by the head's
            # logits over 50257 columns, was computed 393 times per element (12.7 ms instead of about 8)
            return f"staged by a contraction over {tiles} column tiles: computed once, a buffer"
        if (_expensive(u, STAGED_RECOMPUTE_LIMIT) and _staged_again(u, parents)
                and _epilogue(u, parents, position)):  # fmt: skip
            # the contractions that stage it would compute it once per tile of their other operand; as the epilogue
            # of the contraction it reads, it is stored instead of that contraction's output (no more memory)
            return (
                f"over {STAGED_RECOMPUTE_LIMIT} ALU ops staged again by contractions: computed once, the epilogue "
                "of the contraction it reads"
            )
        return None

    def materialized(u: UOp) -> int | None:
        slot = slot_of.get(u)
        if u.op is Ops.BUFFER and slot in assigned:
            raise ScheduleError(f"a kernel reads the old value of input {slot} after an assign overwrote it; "
                                "realize the reader first")  # fmt: skip
        return slot

    def build(root: UOp, out_slot: Callable[[], int]) -> KernelBuilder:
        """Build root's kernel; whatever it needs first is realized (and numbered) before it."""
        while True:
            builder = KernelBuilder(root, materialized, lambda u, bc, inside: must_realize(u, bc, inside, root))
            try:
                builder.ast = builder.build(out_slot())
            except NeedsRealize as need:
                trace.event("realize", need.node, reason=need.reason)
                realize(need.node)
                continue
            if builder.broadcast_reduces:
                shared = _shared(root, builder, parents)  # another kernel would compute them again
                if shared or not fusable_reductions(builder.ast):
                    unfused.update(shared or builder.broadcast_reduces)  # their own kernel, as before row kernels
                    why = "read outside this kernel too" if shared else "this kernel's reductions cannot be fused"
                    for r in shared or builder.broadcast_reduces:
                        trace.event("unfuse", r, reason=why)
                    continue
            if len(builder.slots) <= max_buffers:
                return builder
            heaviest = _heaviest_input(root, builder, slot_of, max_buffers)
            trace.event(
                "split", heaviest, reason=f"its reader's kernel binds {len(builder.slots)} > {max_buffers} buffers"
            )
            split.add(heaviest)

    def emit(builder: KernelBuilder) -> None:
        assert builder.ast is not None
        name = f"k{len(kernels)}"
        with trace.working_on(name):
            ast, slots = drop_unused_arguments(fold_gathers(simplify_kernel(builder.ast)), builder.slots)
        kernels.append(Kernel(name, ast, slots, frozenset(builder.fused)))

    def realize(root: UOp) -> int:
        """Schedule the kernel computing root (and first whatever it needs); returns its slot."""
        if root.op is Ops.ASSIGN:
            return realize_assign(root)
        builder = build(root, lambda: n_inputs + len(buffers))
        out_slot = n_inputs + len(buffers)
        buffers.append((root.size if root.shape else 1, root.dtype))
        emit(builder)
        slot_of[root] = out_slot
        return out_slot

    assigns = [n for n in sink.toposort() if n.op is Ops.ASSIGN]

    def realize_assign(root: UOp) -> int:
        """Write the value into the target's own buffer (in place, as optimizers need)."""
        out_slot = slot_of[_assign_target(root)]
        pending.add(root)
        for other in assigns:  # whoever still needs the old contents goes first
            if other is not root and other not in slot_of and out_slot in _old_value_reads(other, slot_of):
                if other in pending:
                    raise ScheduleError("two assigns each read what the other overwrites; realize one of them first")
                realize_assign(other)
        pending.discard(root)
        value = root.src[1]
        builder = build(value, lambda: out_slot)
        assert builder.ast is not None
        if _reads_elsewhere(builder.ast, out_slot):  # it would read what it already overwrote: stage it
            staged = UOp(Ops.CONTIGUOUS, value.dtype, (value,))
            realize(staged)
            copy = UOp(Ops.DETACH, value.dtype, (staged,))  # a plain copy of the staged value
            builder = build(copy, lambda: out_slot)
        emit(builder)
        assigned.add(out_slot)
        slot_of[root] = out_slot
        return out_slot

    # plain outputs first: they may read values an assign is about to overwrite
    order = sorted(range(len(sink.src)), key=lambda i: sink.src[i].op is Ops.ASSIGN)
    slots: dict[int, int] = {}
    for i in order:
        out = sink.src[i]
        if out not in slot_of:
            trace.event("realize", out, reason="an output of the step")
        slots[i] = slot_of[out] if out in slot_of else realize(out)
    outputs = [slots[i] for i in range(len(sink.src))]
    used = variables(tuple(n for k in kernels for n in k.ast.toposort() if n.op is Ops.DEFINE_VAR))
    return Schedule(tuple(kernels), n_inputs, tuple(buffers), tuple(outputs),
                    plan_memory(kernels, n_inputs, buffers, set(outputs)), tuple(v.arg[0] for v in used))  # fmt: skip


def _shared(root: UOp, builder: KernelBuilder, parents: dict[UOp, list[UOp]]) -> set[UOp]:
    """The reductions read through a broadcast that this kernel would not be alone to compute: some node
    between one and the kernel's root (its stored value) is also read outside the kernel."""
    out: set[UOp] = set()
    for r in builder.broadcast_reduces:
        stack, seen = [r], set()
        while stack and r not in out:
            n = stack.pop()
            if n in seen or n is root:
                continue
            seen.add(n)
            for p in parents.get(n, []):
                if p not in builder.fused:
                    out.add(r)
                    break
                stack.append(p)
    return out


def _private(u: UOp, root: UOp, parents: dict[UOp, list[UOp]], position: dict[UOp, int]) -> bool:
    """Does every path from u to the graph's outputs pass through root (only root's kernel would compute u)? A node
    after root in topological order is not under root: a path reaching one has left root's graph."""
    if root not in position:
        return False
    stack, seen = [u], set()
    while stack:
        n = stack.pop()
        if n is root or n in seen:
            continue
        seen.add(n)
        users = parents.get(n, [])
        if not users or any(position[p] > position[root] for p in users):
            return False
        stack.extend(users)
    return True


def _readers(u: UOp, parents: dict[UOp, list[UOp]]) -> set[tuple[UOp, int]]:
    """The nodes that read u through movement ops only (views of it), each with how many times over the view repeats
    each element of u (the product of the dimensions its expands broadcast; 1 where none does)."""
    out: set[tuple[UOp, int]] = set()
    stack, seen = [(u, 1)], set()
    while stack:
        n, repeats = stack.pop()
        if (n, repeats) in seen:
            continue
        seen.add((n, repeats))
        for p in parents.get(n, []):
            if p.op in MOVEMENT:
                stack.append((p, repeats * _repeats(p)))
            else:
                out.add((p, repeats))
    return out


def _repeats(u: UOp) -> int:
    """How many times over an expand reads each element of its source (1 for other movement ops; symbolic sizes
    count as 1)."""
    if not broadcasts(u):
        return 1
    src = u.src[0].shape
    assert src is not None
    out = 1
    for s, d in zip(src, u.arg):
        if s != d and isinstance(d, int):
            out *= d
    return out


def _staged_again(u: UOp, parents: dict[UOp, list[UOp]]) -> bool:
    """Would the contractions that read u compute it again and again? u is several nodes' operand, and some sum of
    products reads it broadcast over more than one tile's columns (TILE_ROWS): a tiled kernel computes a staged
    operand once per element of every tile, once per tile of the other operand."""
    return len(_readers(u, parents)) > 1 and _staged_tiles(u, parents) > 1


def _staged_tiles(u: UOp, parents: dict[UOp, list[UOp]]) -> int:
    """Tiles of TILE_ROWS columns that a contraction reading u broadcasts it over (the most of any reader; 0: none):
    how many times over a tiled kernel staging u computes each of its elements."""
    return max((-(-repeats // TILE_ROWS) for r, repeats in _readers(u, parents)
                if r.op is Ops.MUL and any(q.op is Ops.REDUCE_AXIS and q.arg[0] is Ops.ADD
                                           for q, _ in _readers(r, parents))), default=0)  # fmt: skip


def _epilogue(u: UOp, parents: dict[UOp, list[UOp]], position: dict[UOp, int]) -> bool:
    """Does u read, elementwise, a reduction that only u's kernel would compute (so u can be its epilogue)?"""
    stack, seen = [u], set()
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        for s in n.src:
            if s.op is Ops.REDUCE_AXIS and _private(s, u, parents, position):
                return True
            if s.op in GroupOp.ALU or (s.op in MOVEMENT and not broadcasts(s)):
                stack.append(s)
    return False


def _trivial(u: UOp) -> bool:
    """A reduction over size-1 axes only: a copy. Read through a broadcast, it stays its own kernel, as
    before row kernels: fused, WGSL compilers may fold x - mean(x) to 0 (they may assume finite math),
    where an inf or NaN must come out (var over one element)."""
    shape = u.src[0].shape
    assert shape is not None
    return all(shape[a] == 1 for a in u.arg[1])


RECOMPUTE_LIMIT = 24  # ALU ops an elementwise chain may have and still be recomputed by each reader
# ... and still be recomputed by each reader when one of them is a contraction staging it, once per tile of the other
# operand: a GELU's backward (14) was computed six times per element in nanogpt's MLP gradients
STAGED_RECOMPUTE_LIMIT = 8
# column tiles over which a contraction may recompute a staged elementwise chain of a few ops: past them, it is a
# buffer (a layer norm staged over 9 tiles, bench_gpu.py's `layernorm+linear` case, runs at 1.02x torch)
STAGED_TILES_MAX = 32
# ALU ops a primitive expanded late stands for (anneal_schedule.decompose): a random draw is 20 Threefry rounds
# (~100 integer ops), erf a short polynomial. Counted as one op, a dropout's output was recomputed inside every
# contraction that reads it, once per staged element of every tile (nanogpt's split-K weight gradients).
LATE_COST = {Ops.THREEFRY: 100, Ops.ERF: 12}


def _expensive(u: UOp, limit: int = RECOMPUTE_LIMIT) -> bool:
    """Does computing u inside a reader's kernel take more than limit distinct ALU ops?"""
    seen: set[UOp] = set()
    stack, count = [u], 0
    while stack:
        n = stack.pop()
        if n in seen or n.op in (Ops.BUFFER, Ops.REDUCE_AXIS, Ops.CONTIGUOUS, Ops.ASSIGN, Ops.CONST):
            continue  # read from memory (or a constant): never recomputed by a reader
        seen.add(n)
        count += LATE_COST.get(n.op, int(n.op in GroupOp.ALU))
        if count > limit:
            return True
        stack.extend(n.src)
    return False


def _old_value_reads(assign: UOp, slot_of: dict[UOp, int]) -> set[int]:
    """The input slots whose current (old) contents this assign's value still has to read.

    The walk stops at what is already computed (its buffer is read instead) and at other
    assigns (reading one sees its new value)."""
    reads: set[int] = set()
    stack, seen = [assign.src[1]], set()
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op is Ops.BUFFER:
            reads.add(n.arg.index)
        elif n.op is not Ops.ASSIGN and n not in slot_of:
            stack.extend(n.src)
    return reads


def _heaviest_input(root: UOp, builder: KernelBuilder, slot_of: dict[UOp, int], max_buffers: int) -> UOp:
    """A fused node to compute in a kernel of its own, so that root's kernel binds fewer buffers.

    Picks the fused node reading the most distinct buffers that still fits in one kernel."""
    reads: dict[UOp, frozenset[int]] = {}
    for n in root.toposort():
        if n in slot_of:
            reads[n] = frozenset({slot_of[n]})
        else:
            reads[n] = frozenset().union(*(reads[s] for s in n.src))
    candidates = [n for n in builder.fused if n is not root and n.src and 1 < len(reads[n]) < max_buffers]
    if not candidates:
        raise ScheduleError(f"a kernel needs {len(builder.slots)} buffers but the device binds at most {max_buffers}")
    return max(candidates, key=lambda n: (len(reads[n]), -len(n.toposort())))


def drop_unused_arguments(ast: UOp, slots: list[int]) -> tuple[UOp, tuple[int, ...]]:
    """Simplification can fold away every load of an input (x < x): renumber what is left."""
    used = sorted({n.arg for n in ast.toposort() if n.op is Ops.DEFINE_GLOBAL})
    if used == list(range(len(slots))):
        return ast, tuple(slots)
    # Through temporary (negative) numbers: substitute rewrites to a fixed point, so mapping 3 -> 2 and 2 -> 1
    # at once would carry 3 on to 1 (two inputs merged into one).
    globals_ = [n for n in ast.toposort() if n.op is Ops.DEFINE_GLOBAL]
    parked = substitute(ast, {n: n.replace(arg=-1 - used.index(n.arg)) for n in globals_})
    final = {n.replace(arg=-1 - used.index(n.arg)): n.replace(arg=used.index(n.arg)) for n in globals_}
    return substitute(parked, final), tuple(slots[i] for i in used)


def _reads_elsewhere(ast: UOp, slot_arg: int) -> bool:
    """Does the kernel load its own output buffer at an index other than the one it stores to?"""
    store = ast.src[0]
    out_glob, out_index = store.src[0], store.src[1]
    return any(n.op is Ops.LOAD and n.src[0] is out_glob and n.src[1] is not out_index for n in ast.toposort())


def plan_memory(
    kernels: list[Kernel], n_inputs: int, buffers: list[tuple[sint, DType]], keep: set[int]
) -> tuple[int, ...]:
    """Greedy reuse: an intermediate's buffer is free for kernels after its last reader."""
    last_use: dict[int, int] = {}
    for k, kern in enumerate(kernels):
        for s in kern.slots:
            last_use[s] = k
    physical: list[int] = []
    free: list[tuple[tuple[sint, DType], int]] = []  # ((size, dtype), physical id)
    n_physical = 0
    freed_after: dict[int, list[int]] = {}
    owner: dict[int, int] = {}
    writer = {kern.slots[0]: k for k, kern in enumerate(kernels)}
    for j, (size, dtype) in enumerate(buffers):
        slot = n_inputs + j
        k = writer.get(slot, -1)
        # release everything whose last reader finished before this kernel
        for done_k in sorted(list(freed_after)):
            if done_k < k:
                for s in freed_after.pop(done_k):
                    free.append((buffers[s - n_inputs], owner[s]))
        # only an identical (size, dtype) is reused: backends may store dtypes at different widths
        match = next((f for f in free if f[0] == (size, dtype)), None) if slot not in keep else None
        if match is not None:
            free.remove(match)
            pid = match[1]
        else:
            pid = n_physical
            n_physical += 1
        owner[slot] = pid
        physical.append(pid)
        if slot not in keep:
            freed_after.setdefault(last_use.get(slot, k), []).append(slot)
    return tuple(physical)

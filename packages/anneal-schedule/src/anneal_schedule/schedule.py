"""Schedule: from output UOps to an ordered list of kernels over numbered buffer slots.

Scheduling is a pure function of graph structure. Input buffers are replaced by numbered
slots first, so the same step on new data is a cache hit; the cached Schedule is then
bound to this call's buffers.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Any

from anneal_ir import DType, Ops, UOp, dtypes, graph_rewrite
from anneal_schedule.rangeify import KernelBuilder, NeedsRealize
from anneal_schedule.simplify import simplify_kernel


@dataclass(frozen=True)
class Slot:
    """Stands for the i-th input buffer while scheduling (so the schedule is data-independent)."""

    index: int
    size: int
    dtype: DType

    def content_key(self) -> str:
        return f"Slot({self.index},{self.size},{self.dtype.name})"


@dataclass(frozen=True)
class Kernel:
    name: str
    ast: UOp  # SINK(STORE(DEFINE_GLOBAL 0, index, value))
    slots: tuple[int, ...]  # schedule slot of each DEFINE_GLOBAL, in argument order
    fused_ops: int  # tensor-level nodes computed inside this kernel


@dataclass(frozen=True)
class Schedule:
    kernels: tuple[Kernel, ...]
    n_inputs: int
    buffers: tuple[tuple[int, DType], ...]  # (size, dtype) of slots n_inputs, n_inputs+1, ...
    outputs: tuple[int, ...]  # slot holding each requested output
    physical: tuple[int, ...]  # memory plan: slot n_inputs+k lives in physical buffer physical[k]


@dataclass
class ScheduleStats:
    hits: int = 0
    misses: int = 0


def normalize(outputs: list[UOp]) -> tuple[UOp, list[Any]]:
    """Replace every BUFFER's arg with a numbered Slot, in toposort order.

    Returns the normalized SINK and the original Buffer objects in slot order."""
    sink = UOp(Ops.SINK, dtypes.void, tuple(outputs))
    buffers: list[Any] = []
    mapping: dict[UOp, UOp] = {}
    for node in sink.toposort():
        if node.op is Ops.BUFFER and node not in mapping:
            mapping[node] = UOp(Ops.BUFFER, node.dtype, (), Slot(len(buffers), node.arg.size, node.dtype))
            buffers.append(node.arg)
    if not mapping:
        return sink, buffers
    return substitute(sink, mapping), buffers


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
    """Creates schedules and caches them by the content hash of the normalized graph."""

    max_buffers: int = 1 << 30
    cache_size: int = 256
    cache: OrderedDict[bytes, Schedule] = field(default_factory=OrderedDict)
    stats: ScheduleStats = field(default_factory=ScheduleStats)

    def schedule(self, outputs: list[UOp]) -> tuple[Schedule, list[Any]]:
        sink, inputs = normalize(outputs)
        key = sink.key
        if key in self.cache:
            self.cache.move_to_end(key)
            self.stats.hits += 1
            return self.cache[key], inputs
        self.stats.misses += 1
        sched = build_schedule(sink, len(inputs))
        self.cache[key] = sched
        if len(self.cache) > self.cache_size:
            self.cache.popitem(last=False)
        return sched, inputs


def build_schedule(sink: UOp, n_inputs: int) -> Schedule:
    consumers = _consumers(sink)
    slot_of: dict[UOp, int] = {}
    buffers: list[tuple[int, DType]] = []
    kernels: list[Kernel] = []
    for node in sink.toposort():
        if node.op is Ops.BUFFER:
            slot_of[node] = node.arg.index

    def must_realize(u: UOp, through_broadcast: bool) -> bool:
        if u.op is Ops.CONTIGUOUS:
            return True
        if u.op is Ops.REDUCE_AXIS:
            return through_broadcast or consumers[u] > 1
        return False

    def realize(root: UOp) -> int:
        """Schedule the kernel computing root (and first whatever it needs); returns its slot."""
        while True:
            builder = KernelBuilder(root, slot_of.get, must_realize)
            out_slot = n_inputs + len(buffers)
            try:
                ast = builder.build(out_slot)
            except NeedsRealize as need:
                realize(need.node)
                continue
            break
        assert root.shape is not None
        size = 1
        for d in root.shape:
            size *= d
        buffers.append((size, root.dtype))
        ast = simplify_kernel(ast)
        kernels.append(Kernel(f"k{len(kernels)}", ast, tuple(builder.slots), len(builder.fused)))
        slot_of[root] = out_slot
        return out_slot

    outputs = [slot_of[out] if out in slot_of else realize(out) for out in sink.src]
    return Schedule(tuple(kernels), n_inputs, tuple(buffers), tuple(outputs),
                    plan_memory(kernels, n_inputs, buffers, set(outputs)))  # fmt: skip


def plan_memory(kernels: list[Kernel], n_inputs: int, buffers: list[tuple[int, DType]], keep: set[int]) -> tuple[int, ...]:
    """Greedy reuse: an intermediate's memory is free for kernels after its last reader."""
    last_use: dict[int, int] = {}
    for k, kern in enumerate(kernels):
        for s in kern.slots:
            last_use[s] = k
    physical: list[int] = []
    free: list[tuple[int, int]] = []  # (nbytes, physical id)
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
                    free.append((buffers[s - n_inputs][0] * buffers[s - n_inputs][1].itemsize, owner[s]))
        nbytes = size * dtype.itemsize
        match = next((f for f in free if f[0] == nbytes), None) if slot not in keep else None
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

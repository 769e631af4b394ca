"""Realization: one Runner per device, and what a graph stands for once it is computed.

``realize(device, uops)`` computes graphs on a device. Three kinds of node are resolved before
the scheduler sees the graph (it never sees them):

- REALIZED(view, graph): a value computed earlier; it reads the view's buffer (the graph is kept
  for autodiff only);
- COPY(value): a value on another device; it is computed there and its buffer copied here;
- any graph computed before: after a realize, each computed UOp maps (per device, weakly) to its
  buffer, so tensors sharing a computed subgraph read it instead of recomputing it.

A buffer overwritten in place (ASSIGN) makes the map forget every graph that read it or lived in
it: a graph built after the write, equal to one built before, is recomputed, never read stale.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from anneal.registry import get_backend
from anneal_ir import Ops, Settings, UOp, graph_rewrite
from anneal_ir.pattern import PatternMatcher, UPat
from anneal_ir.sint import bind, bound_values, variables
from anneal_schedule.backend import DoneRead
from anneal_schedule.buffer import Buffer, read_many
from anneal_schedule.runner import HostStep, Runner
from anneal_schedule.schedule import Scheduler
from anneal_schedule.store import ScheduleStore

if TYPE_CHECKING:
    from anneal.tensor import Tensor

# per device: a graph of constants has no device of its own, so the same UOp may be computed on several
_realized: dict[str, weakref.WeakKeyDictionary[UOp, UOp]] = {}
# buffer -> the realized graphs whose value read it or lives in it (forgotten when it is overwritten)
_dependents: weakref.WeakKeyDictionary[Buffer, weakref.WeakSet[UOp]] = weakref.WeakKeyDictionary()


@functools.cache
def runner(device: str) -> Runner:
    name, backend = get_backend(device)
    settings = Settings.from_env()
    store = ScheduleStore(settings.cache_root()[0] / "schedules")
    return Runner(name, backend, Scheduler(store=store), debug=settings.debug)  # type: ignore[arg-type]


def buffer_view(buf: Buffer, shape: tuple[Any, ...], values: dict[str, int] | None = None) -> UOp:
    """buf viewed as shape; a symbolic shape binds its Variables to values (this call's)."""
    binds = tuple(bind(v, (values or {})[v.arg[0]]) for v in variables(shape))
    return buf.view(shape, binds)


def plain_view(u: UOp) -> UOp:
    """The buffer view a realized value reads (u itself when it is not a REALIZED node)."""
    return u.src[0] if u.op is Ops.REALIZED else u


def as_buffer(u: UOp) -> Buffer | None:
    """The Buffer behind u when u is a plain (contiguous, same-size) view of one, or a realized value."""
    u = plain_view(u)
    if u.op is Ops.RESHAPE and u.src[0].op is Ops.BUFFER:
        u = u.src[0]
    return u.arg if u.op is Ops.BUFFER else None


def buffers_read(u: UOp) -> set[Buffer]:
    """The buffers u's value depends on; a REALIZED value depends on its own buffer only."""
    seen: set[UOp] = set()
    found: set[Buffer] = set()
    stack = [u]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op is Ops.BUFFER:
            found.add(n.arg)
        stack.extend(n.src[:1] if n.op is Ops.REALIZED else n.src)
    return found


def _remember(device: str, u: UOp, view: UOp, reads: set[Buffer]) -> None:
    _realized.setdefault(device, weakref.WeakKeyDictionary())[u] = view
    for b in reads:
        _dependents.setdefault(b, weakref.WeakSet()).add(u)


def _forget_readers(buf: Buffer) -> None:
    for u in list(_dependents.pop(buf, ())):
        for done in _realized.values():
            done.pop(u, None)


@dataclass
class _Resolve:
    device: str
    done: weakref.WeakKeyDictionary[UOp, UOp]


def _read_realized(x: UOp) -> UOp:
    return x.src[0]


def _copy_across(ctx: _Resolve, x: UOp) -> UOp:
    """Compute the value on its own device, then copy its buffer into a new one on this device."""
    src_device, dst_device = x.arg
    assert dst_device == ctx.device, f"a copy to {dst_device} realized on {ctx.device}"
    if runner(src_device).recording is not None or runner(dst_device).recording is not None:
        raise RuntimeError("jit: a copy between devices inside a jitted function cannot be replayed; "
                           "move the data with .to() outside the function")  # fmt: skip
    (view,) = realize(src_device, [x.src[0]])
    view = plain_view(view)
    src = as_buffer(view)
    assert src is not None
    dst = Buffer(dst_device, runner(dst_device).backend, src.size, src.dtype).copy_in(src.numpy())
    base = UOp(Ops.BUFFER, src.dtype, (), dst)
    moved = base if view.op is Ops.BUFFER else view.replace(src=(base, *view.src[1:]))
    _remember(dst_device, x, moved, buffers_read(x) | {dst})
    return moved


def _use_realized(ctx: _Resolve, x: UOp) -> UOp | None:
    return ctx.done.get(x)


# bottom-up: a node found here is replaced before its sources are visited (a REALIZED node's graph never is)
_resolve = PatternMatcher([
    (UPat(Ops.REALIZED, name="x"), _read_realized),
    (UPat(Ops.COPY, name="x"), _copy_across),
    (UPat(name="x"), _use_realized),
], "resolve_realized")  # fmt: skip


def realize(device: str, uops: list[UOp], host_steps: Sequence[tuple[HostStep, Sequence[int]]] = ()) -> list[UOp]:
    """Compute uops on device; returns the buffer view that now stands for each. host_steps: host code to run in
    the schedule, each as soon as the uops it waits for (indices into uops, computed by this schedule) are."""
    from anneal import bounds, random

    todo_index = [i for i, u in enumerate(uops) if as_buffer(u) is None]
    todo = [uops[i] for i in todo_index]
    # the generator's counter advances with the first schedule after draws; index checks go with the next one
    writes = random.pending_writes(device) + bounds.pending_writes(device)
    output = {i: j for j, i in enumerate(todo_index)}  # the schedule computes todo first: output j is todo[j]
    for step, indices in host_steps:
        if not all(i in output for i in indices):
            raise ValueError(f"host step {step.name!r} waits for a value computed before this schedule; a host "
                             "step follows the kernels that compute what it reads")  # fmt: skip
    if not todo and not writes:
        return uops
    done = _realized.setdefault(device, weakref.WeakKeyDictionary())
    sink = UOp(Ops.SINK, src=(*todo, *writes))
    sink = graph_rewrite(sink, _resolve, ctx=_Resolve(device, done), bottom_up=True, name="resolve_realized")
    run = runner(device)
    sched, inputs, bound = run.scheduler.schedule_bound(list(sink.src))
    bufs = run.execute(sched, inputs, bound, [(step, [output[i] for i in indices]) for step, indices in host_steps])
    values = bound_values(sink) if any(variables(u.shape) for u in todo) else {}
    overwritten = {as_buffer(u.src[0]) for u in (*todo, *writes) if u.op is Ops.ASSIGN}
    for target in overwritten:
        assert target is not None
        _forget_readers(target)
    # a schedule that overwrites any of its inputs leaves nothing to remember: its values may read the old
    # contents (the scheduler's inputs are per schedule, not per output, so this errs on the safe side)
    remember = not overwritten & set(inputs)
    views = {}
    for u, buf in zip(todo, bufs):
        assert u.shape is not None
        views[u] = buffer_view(buf, u.shape, values)
        if remember and u.op is not Ops.ASSIGN:
            _remember(device, u, views[u], {*inputs, buf})
    return [views.get(u, u) for u in uops]


# ---- tensors ----

# Lazy tensors derived from trainable state: values computed from a parameter or a gradient, and pending
# in-place writes (a BatchNorm's running statistics). A write into a buffer first computes those still
# reading its old contents, in the same schedule: a loss or a gradient norm read after optimizer.step() is
# the one the step was taken on, as in PyTorch, where it was computed before the step. Views (movement ops
# over a buffer) are left alone: like torch's views they read the buffer as it is when read.
# Keyed by id(): a Tensor's == is elementwise, so it cannot sit in a (Weak)Set.
_waiting: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()
_VIEW_OPS = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.SHRINK, Ops.FLIP, Ops.BIND, Ops.DEFINE_VAR,
                       Ops.CONST})  # fmt: skip


def wait_for_writes(t: Tensor) -> None:
    """Mark t as derived from trainable state: computed before any buffer it reads is overwritten in place."""
    _waiting[id(t)] = t


def waits_for_writes(t: Tensor) -> bool:
    return _waiting.get(id(t)) is t


def _is_view(u: UOp) -> bool:
    return all(n.op in _VIEW_OPS or n.op is Ops.BUFFER for n in u.toposort())


def _readers_of(device: str, targets: set[Buffer], chosen: list[Tensor]) -> list[Tensor]:
    ids = {id(t) for t in chosen}
    found = []
    for t in list(_waiting.values()):
        if t.device != device or id(t) in ids or as_buffer(t.uop) is not None:
            continue
        if t.uop.op is Ops.ASSIGN or (buffers_read(t.uop) & targets and not _is_view(t.uop)):
            found.append(t)  # every pending write goes with the first schedule that writes in place
    return found


def settled(t: Tensor, view: UOp) -> UOp:
    """What t holds once computed into view: the view, or REALIZED(view, graph) when autodiff may still need
    the graph (t requires grad, or a forward-mode derivative is being taken). An in-place write keeps values,
    not history (as torch's updates under no_grad)."""
    from anneal import autograd

    u = t.uop
    if view is u or u.op is Ops.ASSIGN or not autograd.keeps_history(t):
        return view
    return UOp(Ops.REALIZED, u.dtype, (view, u))


def realize_all(tensors: Sequence[Tensor], host_steps: Sequence[tuple[HostStep, Sequence[int]]] = ()) -> None:
    """Compute every tensor, one schedule per device; each then reads its result buffer. In-place writes
    among them first pull in every waiting tensor that still reads the old contents of their targets.
    host_steps: host code run inside the schedules, each right after the kernels that compute the tensors it waits
    for (indices into tensors, all on one device; anneal_schedule.runner.HostStep)."""
    by_device: dict[str, list[int]] = {}
    for i, t in enumerate(tensors):
        by_device.setdefault(t.device, []).append(i)
    for step, indices in host_steps:
        if len({tensors[i].device for i in indices}) != 1:
            raise ValueError(f"host step {step.name!r} waits for tensors on several devices (or none)")
    for device, chosen in by_device.items():
        ts = [tensors[i] for i in chosen]
        targets = {as_buffer(t.uop.src[0]) for t in ts if t.uop.op is Ops.ASSIGN}
        readers = _readers_of(device, {b for b in targets if b is not None}, ts) if targets else []
        ts = readers + ts  # read before the writes
        at = {i: len(readers) + j for j, i in enumerate(chosen)}
        steps = [(step, [at[i] for i in indices]) for step, indices in host_steps if indices[0] in at]
        for t, view in zip(ts, realize(device, [t.uop for t in ts], steps)):
            t.uop = settled(t, view)


def read_async(buffers: Sequence[Buffer]) -> Any:
    """A read of buffers (of one device) under way, for a host step that must not wait for the rest of its schedule:
    the backend's copy_out_async where it has one (WebGPU: copies recorded at this point of the command stream, mapped
    asynchronously; the cpu: done at once), else a read done now. ready() says whether result() returns at once."""
    start = getattr(buffers[0].backend, "copy_out_async", None)
    if start is not None:
        return start([(b.ensure(), b.size, b.dtype) for b in buffers])
    return DoneRead(read_many(list(buffers)))


def run_host_step(device: str, step: HostStep, tensors: Sequence[Tensor]) -> None:
    """Run step now on the buffers of tensors (realized first), between schedules: inside anneal.jit it is recorded
    and every replay runs it again at this point of the step."""
    realize_all(tensors)
    buffers = [as_buffer(t.uop) for t in tensors]
    if any(b is None for b in buffers):
        raise ValueError(f"host step {step.name!r}: its tensors must each be a whole buffer (not a view of one)")
    runner(device).host(step, [b for b in buffers if b is not None])

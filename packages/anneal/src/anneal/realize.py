"""Realization: one Runner per device, and the map from computed graphs to their buffers.

After a graph is computed, its UOp maps to a view of the result buffer, so every tensor
that shares that subgraph reads the buffer instead of recomputing it. The map holds its
keys weakly: it lives only as long as the graph does.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

from anneal.registry import get_backend
from anneal_ir import Ops, Settings, UOp, graph_rewrite
from anneal_ir.pattern import PatternMatcher, UPat
from anneal_ir.sint import bind, bound_values, variables
from anneal_schedule.buffer import Buffer
from anneal_schedule.runner import Runner

# per device: a graph of constants has no device of its own, so the same UOp may be computed on several
_realized: dict[str, weakref.WeakKeyDictionary[UOp, UOp]] = {}


@functools.cache
def runner(device: str) -> Runner:
    name, backend = get_backend(device)
    return Runner(name, backend, debug=Settings.from_env().debug)  # type: ignore[arg-type]


def buffer_view(buf: Buffer, shape: tuple[Any, ...], values: dict[str, int] | None = None) -> UOp:
    """buf viewed as shape; a symbolic shape binds its Variables to values (this call's)."""
    binds = tuple(bind(v, (values or {})[v.arg[0]]) for v in variables(shape))
    return buf.view(shape, binds)


def as_buffer(u: UOp) -> Buffer | None:
    """The Buffer behind u when u is a plain (contiguous, same-size) view of one."""
    if u.op is Ops.RESHAPE and u.src[0].op is Ops.BUFFER:
        u = u.src[0]
    return u.arg if u.op is Ops.BUFFER else None


def _use_realized(x: UOp, ctx: weakref.WeakKeyDictionary[UOp, UOp]) -> UOp | None:
    return ctx.get(x)


_substitute_realized = PatternMatcher([(UPat(name="x"), _use_realized)], "use_realized")


def realize(device: str, uops: list[UOp]) -> list[UOp]:
    """Compute uops on device; returns the buffer view that now stands for each."""
    todo = [u for u in uops if as_buffer(u) is None]
    if not todo:
        return uops
    sink = UOp(Ops.SINK, src=tuple(todo))
    done = _realized.setdefault(device, weakref.WeakKeyDictionary())
    if done:
        sink = graph_rewrite(sink, _substitute_realized, ctx=done, bottom_up=True, name="use_realized")
    bufs = runner(device).realize(list(sink.src))
    values = bound_values(sink) if any(variables(u.shape) for u in todo) else {}
    views = {}
    for u, buf in zip(todo, bufs):
        assert u.shape is not None
        views[u] = buffer_view(buf, u.shape, values)
        if u.op is not Ops.ASSIGN:  # an assigned buffer changes again later: never stands for this graph
            done[u] = views[u]
    return [views.get(u, u) for u in uops]

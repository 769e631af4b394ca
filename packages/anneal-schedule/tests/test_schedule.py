"""Scheduling helpers, unit by unit."""

from __future__ import annotations

from anneal_ir import Ops, UOp, dtypes
from anneal_schedule.schedule import drop_unused_arguments


def _global(i: int) -> UOp:
    return UOp(Ops.DEFINE_GLOBAL, dtypes.float32, (), i)


def test_dropping_an_unused_argument_keeps_the_others_apart() -> None:
    # inputs 2 and 3 move down to 1 and 2: renumbered at once, 3 -> 2 -> 1 would merge two inputs into one
    ast = UOp(Ops.SINK, src=(_global(0), _global(2), _global(3)))
    out, slots = drop_unused_arguments(ast, [10, 11, 12, 13])
    assert slots == (10, 12, 13)
    assert sorted(n.arg for n in out.toposort() if n.op is Ops.DEFINE_GLOBAL) == [0, 1, 2]
    assert [s.arg for s in out.src] == [0, 1, 2]  # each keeps its place


def test_nothing_to_drop_is_the_same_kernel() -> None:
    ast = UOp(Ops.SINK, src=(_global(0), _global(1)))
    assert drop_unused_arguments(ast, [4, 5]) == (ast, (4, 5))

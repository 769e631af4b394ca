"""Schedules on disk: a stored schedule loads as it was built; other limits, damaged entries, symbolic graphs and
traced scheduling all schedule again."""

from __future__ import annotations

from pathlib import Path

import pytest

from anneal_ir import CompileTrace, Ops, UOp, dtypes
from anneal_ir.sint import Variable
from anneal_schedule.buffer import Buffer
from anneal_schedule.schedule import Schedule, Scheduler
from anneal_schedule.store import ScheduleStore

F32 = dtypes.float32


class NoBackend:
    """Scheduling never touches memory."""


def buf(*shape: int) -> UOp:
    size = 1
    for s in shape:
        size *= s
    return Buffer("cpu", NoBackend(), size, F32).view(shape)  # type: ignore[arg-type]


def step_graph() -> list[UOp]:
    """Two outputs over reductions read back through broadcasts: several kernels, each fusing several nodes."""
    x, w = buf(16, 32), buf(32)
    h = x * UOp(Ops.EXPAND, F32, (UOp(Ops.RESHAPE, F32, (w,), (1, 32)),), (16, 32))
    total = UOp(Ops.REDUCE_AXIS, F32, (h,), (Ops.ADD, (1,)))
    centred = h - UOp(Ops.EXPAND, F32, (total,), (16, 32))
    peak = UOp(Ops.REDUCE_AXIS, F32, (centred.alu(Ops.EXP2),), (Ops.MAX, (0,)))
    return [centred, peak]


def scheduler(folder: Path, **kwargs: object) -> Scheduler:
    return Scheduler(store=ScheduleStore(folder), store_after_s=0.0, **kwargs)  # type: ignore[arg-type]


def schedule(sc: Scheduler) -> Schedule:
    return sc.schedule(step_graph())[0]


def test_a_stored_schedule_loads_as_it_was_built(tmp_path: Path) -> None:
    built = schedule(scheduler(tmp_path))
    assert len(built.kernels) > 1 and max(k.fused_ops for k in built.kernels) > 1
    again = scheduler(tmp_path)  # a new process's scheduler: nothing in memory
    loaded = schedule(again)
    assert (again.stats.misses, again.stats.loaded) == (1, 1)
    assert loaded is not built and loaded == built  # the same kernels, ASTs, slots, nodes and memory plan


def test_other_limits_schedule_again(tmp_path: Path) -> None:
    schedule(scheduler(tmp_path, max_buffers=8))
    other = scheduler(tmp_path, max_buffers=3)
    schedule(other)
    assert other.stats.loaded == 0


@pytest.mark.parametrize("damage", ["truncated", "a byte flipped"])
def test_a_damaged_entry_is_scheduled_again_and_replaced(tmp_path: Path, damage: str) -> None:
    built = schedule(scheduler(tmp_path))
    (entry,) = tmp_path.iterdir()
    data = bytearray(entry.read_bytes())
    if damage == "truncated":
        del data[100:]
    else:
        data[len(data) // 2] ^= 0x10  # may still unpickle: the entry's digest catches it
    entry.write_bytes(bytes(data))
    damaged = scheduler(tmp_path)
    assert schedule(damaged) == built and damaged.stats.loaded == 0
    healed = scheduler(tmp_path)
    assert schedule(healed) == built and healed.stats.loaded == 1


def test_quick_schedules_and_symbolic_graphs_are_not_stored(tmp_path: Path) -> None:
    sc = scheduler(tmp_path)
    sc.store_after_s = 60.0
    schedule(sc)
    batch = Variable("batch", 1, 100)
    data = Buffer("cpu", NoBackend(), 21, F32)  # type: ignore[arg-type]
    symbolic = scheduler(tmp_path)
    symbolic.schedule([data.view((batch, 3), (batch.bind(7),)) * 2])
    assert list(tmp_path.iterdir()) == []


def test_a_trace_sees_the_scheduling_not_the_store(tmp_path: Path) -> None:
    schedule(scheduler(tmp_path))
    traced = scheduler(tmp_path)
    with CompileTrace().active() as trace:
        schedule(traced)
    assert traced.stats.loaded == 0 and any(e.kind == "schedule" for e in trace.events)

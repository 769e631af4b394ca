"""A graph over a Variable schedules once: BINDs become the Variable, values come back separately."""

from __future__ import annotations

from anneal_ir import Ops, UOp, dtypes
from anneal_ir.sint import Variable, smul
from anneal_schedule.buffer import Buffer
from anneal_schedule.schedule import Scheduler, Slot, normalize_bound


class NoBackend:
    """Scheduling never touches memory."""


def view(n: int, batch: UOp) -> UOp:
    buf = Buffer("cpu", NoBackend(), n * 3, dtypes.float32)  # type: ignore[arg-type]
    return buf.view((batch, 3), (batch.bind(n),))


def test_values_leave_the_graph_and_sizes_stay_symbolic() -> None:
    batch = Variable("batch", 1, 100)
    out = view(7, batch) * 2
    sink, inputs, values = normalize_bound([out])
    assert values == {"batch": 7} and len(inputs) == 1
    assert not any(n.op is Ops.BIND for n in sink.toposort())
    (slot,) = [n.arg for n in sink.toposort() if n.op is Ops.BUFFER]
    assert isinstance(slot, Slot) and slot.size is smul(batch, 3)
    assert slot.describe() == "Slot(0,batch*3,float32)"


def test_every_value_is_one_cache_entry_with_symbolic_buffers() -> None:
    batch = Variable("batch", 1, 100)
    sched = Scheduler()
    first = sched.schedule_bound([(view(7, batch) * 2).alu(Ops.EXP2)])
    second = sched.schedule_bound([(view(90, batch) * 2).alu(Ops.EXP2)])
    assert sched.stats.hits == 1 and sched.stats.misses == 1
    assert first[0] is second[0] and (first[2], second[2]) == ({"batch": 7}, {"batch": 90})
    assert first[0].variables == ("batch",)
    ((size, _dtype),) = first[0].buffers
    assert size is smul(batch, 3)
    ends = [n.src[0] for k in first[0].kernels for n in k.ast.toposort() if n.op is Ops.RANGE]
    assert batch in ends

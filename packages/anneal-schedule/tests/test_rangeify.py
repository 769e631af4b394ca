"""Scheduling hand-built tensor graphs: kernel counts, index math, slots, memory plan."""

from __future__ import annotations

from anneal_ir import Ops, UOp, dtypes
from anneal_schedule.analysis import row_kernel
from anneal_schedule.schedule import Scheduler, Slot, build_schedule, normalize

F32 = dtypes.float32


class FakeBuffer:
    """Just enough of a Buffer for scheduling (scheduling never touches memory)."""

    def __init__(self, size: int):
        self.size = size


def buf(*shape: int) -> UOp:
    size = 1
    for s in shape:
        size *= s
    base = UOp(Ops.BUFFER, F32, (), FakeBuffer(size))
    return UOp(Ops.RESHAPE, F32, (base,), shape)


def reduce_sum(x: UOp, axes: tuple[int, ...]) -> UOp:
    return UOp(Ops.REDUCE_AXIS, x.dtype, (x,), (Ops.ADD, axes))


def sched(*outs: UOp):
    sink, inputs = normalize(list(outs))
    return build_schedule(sink, len(inputs)), inputs


def test_normalize_numbers_inputs_in_order() -> None:
    a, b = buf(2, 3), buf(2, 3)
    sink, inputs = normalize([a + b])
    slots = [n.arg for n in sink.toposort() if n.op is Ops.BUFFER]
    assert [s.index for s in slots] == [0, 1]
    assert all(isinstance(s, Slot) for s in slots)
    assert [i.size for i in inputs] == [6, 6]


def test_same_structure_same_key() -> None:
    s1, _ = normalize([buf(4, 4) + buf(4, 4)])
    s2, _ = normalize([buf(4, 4) + buf(4, 4)])
    assert s1.key == s2.key


def test_elementwise_fuses_into_one_kernel() -> None:
    a, b = buf(4, 4), buf(4, 4)
    out = (a + b) * a
    s, _ = sched(out)
    assert len(s.kernels) == 1
    k = s.kernels[0]
    assert k.slots[0] == s.outputs[0] and set(k.slots[1:]) == {0, 1}


def test_reduce_broadcast_back_along_rows_fuses_into_a_row_kernel() -> None:
    a = buf(64, 8)
    total = reduce_sum(a, (1,))  # (64, 1): read back along the contiguous axis, once per row
    out = a + UOp(Ops.EXPAND, F32, (total,), (64, 8))
    s, _ = sched(out)
    assert len(s.kernels) == 1
    rk = row_kernel(s.kernels[0].ast)
    assert rk is not None and [r.arg[0] for r in rk.rows] == [0] and [r.arg[0] for r in rk.inner] == [1]


def test_reduce_broadcast_back_materializes_when_no_row_kernel_fits() -> None:
    a = buf(2048, 64)
    total = reduce_sum(a, (0,))  # (1, 64): a column sum read back along rows: the rows are not contiguous
    out = a + UOp(Ops.EXPAND, F32, (total,), (2048, 64))
    s, _ = sched(out)
    assert len(s.kernels) == 2
    assert s.kernels[0].slots[0] in s.kernels[1].slots[1:]  # the second kernel reads the first one's output
    b = buf(1, 1 << 17)
    whole = reduce_sum(b, (1,))  # one long row broadcast back: one workgroup would do it all
    s, _ = sched(b + UOp(Ops.EXPAND, F32, (whole,), (1, 1 << 17)))
    assert len(s.kernels) == 2
    c = buf(128, 1 << 15)  # batch norm's rows: 128 channels of 32,768 elements, too long for one workgroup each
    stats = reduce_sum(c, (1,))
    s, _ = sched(c + UOp(Ops.EXPAND, F32, (stats,), (128, 1 << 15)))
    assert len(s.kernels) == 2
    d = buf(128, 1 << 14)  # 16,384: still a row kernel
    s, _ = sched(d + UOp(Ops.EXPAND, F32, (reduce_sum(d, (1,)),), (128, 1 << 14)))
    assert len(s.kernels) == 1


def test_matmul_read_through_a_broadcast_is_not_recomputed_per_row() -> None:
    x, w, c = buf(64, 32), buf(32, 48), buf(64, 48, 16)
    xe = UOp(Ops.EXPAND, F32, (UOp(Ops.RESHAPE, F32, (x,), (64, 1, 32)),), (64, 48, 32))
    we = UOp(
        Ops.EXPAND, F32, (UOp(Ops.RESHAPE, F32, (UOp(Ops.PERMUTE, F32, (w,), (1, 0)),), (1, 48, 32)),), (64, 48, 32)
    )
    mm = reduce_sum(xe * we, (2,))  # (64, 48, 1)
    out = c + UOp(Ops.EXPAND, F32, (mm,), (64, 48, 16))  # each matmul output read 16 times
    s, _ = sched(out)
    assert len(s.kernels) == 2  # a row kernel would read a whole column of w again for every row


def upsampled(x: UOp, n: int) -> UOp:
    """x (h, w) read at (y // 2, x // 2) of an (2h, 2w) output, as a 2x nearest upsample (or a 2x2 pool's
    gradient) reads it."""
    h, w = x.shape  # type: ignore[misc]
    wide = UOp(Ops.EXPAND, F32, (UOp(Ops.RESHAPE, F32, (x,), (h, 1, w, 1)),), (h, n, w, n))
    return UOp(Ops.RESHAPE, F32, (wide,), (h * n, w * n))


def test_a_long_reduction_read_at_halved_indices_gets_its_own_kernel() -> None:
    """Each output of the matmul would be recomputed for 4 outputs of its reader (it varies with y and x only
    through y // 2 and x // 2): ResNet-9's 4608-long input gradient fused into a max-pool gradient ran 4x its work,
    flat. A short one (a 2x2 window's count) stays fused."""
    x, w = buf(16, 64), buf(64, 16)
    xe = UOp(Ops.EXPAND, F32, (UOp(Ops.RESHAPE, F32, (x,), (16, 1, 64)),), (16, 16, 64))
    we = UOp(Ops.EXPAND, F32, (UOp(Ops.RESHAPE, F32, (UOp(Ops.PERMUTE, F32, (w,), (1, 0)),), (1, 16, 64)),),
             (16, 16, 64))  # fmt: skip
    mm = UOp(Ops.RESHAPE, F32, (reduce_sum(xe * we, (2,)),), (16, 16))
    s, _ = sched(upsampled(mm, 2) * buf(32, 32))
    assert len(s.kernels) == 2
    short = UOp(Ops.RESHAPE, F32, (reduce_sum(buf(16, 16, 4), (2,)),), (16, 16))
    s, _ = sched(upsampled(short, 2) * buf(32, 32))
    assert len(s.kernels) == 1


def test_permute_becomes_index_math_not_a_copy() -> None:
    a = buf(3, 5)
    out = UOp(Ops.PERMUTE, F32, (a,), (1, 0)) + 1.0
    s, _ = sched(out)
    assert len(s.kernels) == 1
    ops = {n.op for n in s.kernels[0].ast.toposort()}
    assert Ops.RANGE in ops and Ops.LOAD in ops and Ops.STORE in ops


def test_pad_is_a_gated_load() -> None:
    a = buf(3)
    out = UOp(Ops.PAD, F32, (a,), ((1, 2),))
    s, _ = sched(out)
    loads = [n for n in s.kernels[0].ast.toposort() if n.op is Ops.LOAD]
    assert len(loads) == 1 and len(loads[0].src) == 3  # (buffer, index, valid)


def test_memory_plan_reuses_dead_intermediates() -> None:
    x = buf(16, 16)
    h = x
    for _ in range(4):  # each reduce is broadcast back: one intermediate per step
        r = reduce_sum(h, (1,))
        h = h + UOp(Ops.EXPAND, F32, (r,), (16, 16))
        h = UOp(Ops.CONTIGUOUS, F32, (h,))
    s, _ = sched(h)
    assert len(set(s.physical)) < len(s.buffers)  # some memory is shared
    out_phys = s.physical[s.outputs[0] - s.n_inputs]
    assert sum(1 for p in s.physical if p == out_phys) == 1  # outputs are never shared


def test_scheduler_cache_hits_on_same_structure() -> None:
    sc = Scheduler()
    sc.schedule([buf(2, 2) + buf(2, 2)])
    sc.schedule([buf(2, 2) + buf(2, 2)])
    assert (sc.stats.misses, sc.stats.hits) == (1, 1)


def test_max_buffers_splits_a_wide_kernel() -> None:
    xs = [buf(8) for _ in range(7)]
    total = xs[0]
    for x in xs[1:]:
        total = total + x
    sink, inputs = normalize([total])
    wide = build_schedule(sink, len(inputs))
    assert len(wide.kernels) == 1 and len(wide.kernels[0].slots) == 8
    narrow = build_schedule(sink, len(inputs), max_buffers=4)
    assert len(narrow.kernels) > 1
    assert all(len(k.slots) <= 4 for k in narrow.kernels)

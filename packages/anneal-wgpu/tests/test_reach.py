"""Kernels run without the shader compiler's bounds checks only where their reach is proved (anneal_wgpu.reach),
and bind a checked pipeline to buffers shorter than that."""

from __future__ import annotations

import numpy as np

from anneal_ir import Ops, UOp, dtypes
from anneal_ir.settings import Settings
from anneal_schedule.runner import Runner
from anneal_wgpu.reach import fits, reach

F32, I64 = dtypes.float32, dtypes.int64


def _glob(slot: int, dtype: object = F32) -> UOp:
    return UOp(Ops.DEFINE_GLOBAL, dtype, (), slot)


def _range(n: int, rid: int) -> UOp:
    return UOp(Ops.RANGE, I64, (UOp.const(I64, n),), (rid, "global"))


def _kernel(load: UOp, out_index: UOp) -> UOp:
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (_glob(0), out_index, load)),))


def test_the_reach_of_each_buffer_is_its_largest_index() -> None:
    i, j = _range(8, 0), _range(16, 1)
    load = UOp(Ops.LOAD, F32, (_glob(1), j * 8 + i))  # a transposed read
    assert reach(_kernel(load, i * 16 + j)) == {0: 127, 1: 127}


def test_a_gated_read_reaches_only_where_its_gate_holds() -> None:
    i, j = _range(128, 0), _range(64, 1)
    gate = i < 32  # a padded operand: rows past 32 are zeros, never read
    load = UOp(Ops.LOAD, F32, (_glob(1), i * 64 + j, gate))
    assert reach(_kernel(load, i * 64 + j)) == {0: 128 * 64 - 1, 1: 32 * 64 - 1}


def test_an_index_read_from_memory_is_not_proved() -> None:
    i = _range(8, 0)
    idx = UOp(Ops.LOAD, I64, (_glob(2, I64), i))  # unclamped: any value the buffer holds
    load = UOp(Ops.LOAD, F32, (_glob(1), idx))
    assert reach(_kernel(load, i)) is None


def test_fits_compares_reach_with_capacity() -> None:
    assert fits({0: 63, 1: 7}, {0: 64, 1: 8})
    assert not fits({0: 63, 1: 8}, {0: 64, 1: 8})


def _double(runner: Runner, n: int) -> UOp:
    from anneal_schedule.buffer import Buffer

    buf = Buffer("webgpu", runner.backend, n, F32).copy_in(np.arange(n, dtype=np.float32))
    return buf.view((n,)) * 2.0


def test_a_proved_kernel_is_unchecked_and_a_short_buffer_gets_a_checked_pipeline(adapter: object) -> None:
    from anneal_wgpu.runtime import WebGPUBackend

    runner = Runner("webgpu", WebGPUBackend())
    (out,) = runner.realize([_double(runner, 64)])
    np.testing.assert_array_equal(out.numpy(), np.arange(64) * 2.0)
    (prog,) = runner.programs.values()
    assert prog.reach == {0: 63, 1: 63} and prog.checked is None
    backend = runner.backend
    short = backend.allocate(16, F32)  # shorter than the kernel reaches: bound to a pipeline with checks
    pipeline, _ = backend._bind_group(prog, [short, short])
    assert prog.checked is not None and pipeline is prog.checked[0]


def test_anneal_wgpu_checks_keeps_every_check(adapter: object) -> None:
    from anneal_wgpu.runtime import WebGPUBackend

    runner = Runner("webgpu", WebGPUBackend(Settings(wgpu_checks=True)))
    (out,) = runner.realize([_double(runner, 32)])
    np.testing.assert_array_equal(out.numpy(), np.arange(32) * 2.0)
    assert all(p.reach is None for p in runner.programs.values())

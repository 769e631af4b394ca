"""copy_out_async: a read recorded in the command stream that the host does not wait for."""

from __future__ import annotations

import time

import numpy as np
import pytest

from anneal_ir import Ops, UOp, dtypes
from anneal_schedule.buffer import Buffer
from anneal_schedule.runner import Runner

F32 = dtypes.float32


@pytest.fixture(scope="module")
def runner(adapter: object) -> Runner:
    from anneal_wgpu.runtime import WebGPUBackend

    return Runner("webgpu", WebGPUBackend())


def test_an_async_read_returns_what_the_dispatches_recorded_before_it_wrote(runner: Runner) -> None:
    a = np.arange(4096, dtype=np.float32)
    x = Buffer("webgpu", runner.backend, a.size, F32).copy_in(a)
    (doubled,) = runner.realize([x.view((a.size,)) * 2.0])
    pending = runner.backend.copy_out_async([(doubled.ensure(), doubled.size, F32), (x.ensure(), x.size, F32)])
    # recorded after the read: overwrites what it read, which the read must not see
    zero = UOp(Ops.ASSIGN, F32, (doubled.view((a.size,)), doubled.view((a.size,)) * 0.0))
    runner.realize([zero])
    deadline = time.monotonic() + 60
    while not pending.ready():  # completes on wgpu's polling thread, without a wait on this one
        assert time.monotonic() < deadline, "the map never completed"
        time.sleep(0.001)
    got, same = pending.result()
    np.testing.assert_array_equal(got, a * 2)
    np.testing.assert_array_equal(same, a)
    assert pending.result() is pending.result()  # read once
    np.testing.assert_array_equal(doubled.numpy(), np.zeros_like(a))


def test_result_waits_for_a_read_not_yet_ready(runner: Runner) -> None:
    a = np.linspace(-1, 1, 1000, dtype=np.float32)
    x = Buffer("webgpu", runner.backend, a.size, F32).copy_in(a)
    (squared,) = runner.realize([x.view((a.size,)) * x.view((a.size,))])
    (got,) = runner.backend.copy_out_async([(squared.ensure(), squared.size, F32)]).result()
    np.testing.assert_array_equal(got, a * a)

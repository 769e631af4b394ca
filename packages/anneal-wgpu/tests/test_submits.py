"""When recorded dispatches are submitted: an idle GPU gets its first ones after a few, then batches grow."""

from __future__ import annotations

import numpy as np
import pytest

from anneal_ir import dtypes
from anneal_schedule.buffer import Buffer
from anneal_schedule.runner import Runner

F32 = dtypes.float32


@pytest.fixture(scope="module")
def runner(adapter: object) -> Runner:
    from anneal_wgpu.runtime import WebGPUBackend

    return Runner("webgpu", WebGPUBackend())


def test_after_a_wait_the_first_dispatches_go_soon_then_in_doubling_batches(runner: Runner) -> None:
    from anneal_wgpu.runtime import SUBMIT_EVERY, SUBMIT_FIRST

    backend = runner.backend
    a = np.arange(256, dtype=np.float32)
    x = Buffer("webgpu", backend, a.size, F32).copy_in(a)
    (kern,) = runner.scheduler.schedule([x.view((a.size,)) + 1.0])[0].kernels
    out = Buffer("webgpu", backend, a.size, F32)
    prog, buffers = runner.program(kern.name, kern.ast), [out.ensure(), x.ensure()]
    backend.run(prog, buffers, {})
    np.testing.assert_array_equal(out.numpy(), a + 1)  # a read: the host waited, the GPU is idle
    submitted: list[int] = []
    flush = backend.flush

    def counting_flush() -> None:
        submitted.append(backend.recorded)
        flush()

    backend.flush = counting_flush  # type: ignore[method-assign]
    try:
        batches = [SUBMIT_FIRST * 2**i for i in range(8) if SUBMIT_FIRST * 2**i < SUBMIT_EVERY] + [SUBMIT_EVERY] * 2
        for _ in range(sum(batches)):
            backend.run(prog, buffers, {})
        assert submitted == batches
        backend.synchronize()  # another wait: the next dispatches go soon again
        submitted.clear()
        for _ in range(SUBMIT_FIRST):
            backend.run(prog, buffers, {})
        assert submitted == [SUBMIT_FIRST]
    finally:
        del backend.flush
    np.testing.assert_array_equal(out.numpy(), a + 1)

"""The render pool's worker processes give the kernels a serial render gives, each in its job's place, though
they take the costliest jobs first and each worker the next job as soon as it is free."""

from __future__ import annotations

import numpy as np

from anneal_ir import Ops, UOp, dtypes
from anneal_schedule.buffer import Buffer
from anneal_schedule.runner import Runner
from anneal_wgpu.render import render_wgsl
from anneal_wgpu.render_pool import RenderPool


def test_the_pool_renders_what_a_serial_render_does_in_job_order(adapter: object) -> None:
    from anneal_wgpu.runtime import WebGPUBackend

    runner = Runner("webgpu", WebGPUBackend())
    data = np.random.default_rng(0).standard_normal((96, 80)).astype(np.float32)
    x = Buffer("webgpu", runner.backend, data.size, dtypes.float32).copy_in(data).view(data.shape)
    # a tiled product, a row kernel and elementwise work: jobs of very different cost
    a, b = (UOp(Ops.EXPAND, x.dtype, (UOp(Ops.RESHAPE, x.dtype, (x,), shape),), (96, 96, 80))
            for shape in ((96, 1, 80), (1, 96, 80)))  # fmt: skip
    square = UOp(Ops.REDUCE_AXIS, x.dtype, (a * b,), (Ops.ADD, (2,)))
    rows = UOp(Ops.REDUCE_AXIS, x.dtype, (x.alu(Ops.EXP2),), (Ops.MAX, (1,)))
    sched, _ = runner.scheduler.schedule([square, rows, x * 3.0 + 1.0])
    jobs = [(k.name, *runner.backend.plan(k.ast)[:2], False) for k in sched.kernels]
    assert len(jobs) >= 3
    pool = RenderPool(2)
    try:
        pooled = pool.render(jobs)  # type: ignore[arg-type]
    finally:
        pool.close()
    serial = [render_wgsl(name, ast, f16, opts) for name, ast, opts, f16 in jobs]
    assert [k.source if k else None for k in pooled] == [k.source for k in serial]

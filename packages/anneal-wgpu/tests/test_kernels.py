"""WGSL kernels run on the adapter, checked against numpy; rendering rules checked as text."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from anneal_ir import Ops, UOp, dtypes
from anneal_schedule.buffer import Buffer
from anneal_schedule.runner import Runner
from anneal_schedule.schedule import build_schedule, normalize
from anneal_wgpu.render import RenderError, literal, render_wgsl

F32 = dtypes.float32
rng = np.random.default_rng(0)


@pytest.fixture(scope="module")
def runner(adapter: object) -> Runner:
    from anneal_wgpu.runtime import WebGPUBackend

    return Runner("webgpu", WebGPUBackend())


def tensor(runner: Runner, data: np.ndarray, dtype: object = None) -> UOp:
    dt = dtype or dtypes.from_any(data.dtype)
    return Buffer("webgpu", runner.backend, data.size, dt).copy_in(data).view(data.shape)


def run(runner: Runner, out: UOp) -> np.ndarray:
    (buf,) = runner.realize([out])
    assert out.shape is not None
    return buf.numpy().reshape(out.shape)


def expand(u: UOp, shape: tuple[int, ...], via: tuple[int, ...]) -> UOp:
    return UOp(Ops.EXPAND, u.dtype, (UOp(Ops.RESHAPE, u.dtype, (u,), via),), shape)


def matmul(a: UOp, b: UOp) -> UOp:
    (n, k), (_, m) = a.shape, b.shape  # type: ignore[misc]
    a3 = expand(a, (n, m, k), (n, 1, k))
    b3 = expand(UOp(Ops.PERMUTE, F32, (b,), (1, 0)), (n, m, k), (1, m, k))
    r = UOp(Ops.REDUCE_AXIS, F32, (a3 * b3,), (Ops.ADD, (2,)))
    return UOp(Ops.RESHAPE, F32, (r,), (n, m))


def test_matmul_bias_relu(runner: Runner) -> None:
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((9, 13), (13, 5), (5,)))
    bias = expand(tensor(runner, c), (9, 5), (1, 5))
    mm = matmul(tensor(runner, a), tensor(runner, b)) + bias
    zero = expand(UOp.const(F32, 0.0), (9, 5), (1, 1))
    out = UOp(Ops.WHERE, F32, (zero < mm, mm, zero))
    np.testing.assert_allclose(run(runner, out), np.maximum(a @ b + c, 0), rtol=1e-5, atol=1e-5)


def test_max_reduce_flip_pad(runner: Runner) -> None:
    a = rng.standard_normal((6, 4)).astype(np.float32)
    x = tensor(runner, a)
    mx = UOp(Ops.REDUCE_AXIS, F32, (UOp(Ops.FLIP, F32, (x,), (0,)),), (Ops.MAX, (0,)))
    np.testing.assert_allclose(run(runner, mx), a.max(0, keepdims=True))
    padded = UOp(Ops.PAD, F32, (x,), ((1, 0), (2, 1)))
    np.testing.assert_allclose(run(runner, padded), np.pad(a, ((1, 0), (2, 1))))


def test_bool_and_int64_storage_round_trip(runner: Runner) -> None:
    a = rng.integers(-50, 50, size=(17,)).astype(np.int64)
    x = tensor(runner, a)
    pos = x.const_like(0) < x
    np.testing.assert_array_equal(run(runner, pos), a > 0)
    np.testing.assert_array_equal(run(runner, x * 3 + 1), a * 3 + 1)
    flags = tensor(runner, a % 2 == 0)
    np.testing.assert_array_equal(run(runner, flags.alu(Ops.XOR, pos)), (a % 2 == 0) ^ (a > 0))


def test_int_division_truncates(runner: Runner) -> None:
    a = np.array([7, -7, 7, -7], dtype=np.int32)
    b = np.array([2, 2, -2, -2], dtype=np.int32)
    x, y = tensor(runner, a), tensor(runner, b)
    np.testing.assert_array_equal(run(runner, x.alu(Ops.IDIV, y)), np.trunc(a / b).astype(np.int32))
    np.testing.assert_array_equal(run(runner, x.alu(Ops.MOD, y)), np.fmod(a, b))


def test_transcendentals(runner: Runner) -> None:
    a = rng.uniform(0.1, 3.0, size=(64,)).astype(np.float32)
    x = tensor(runner, a)
    for op, ref in ((Ops.EXP2, np.exp2), (Ops.LOG2, np.log2), (Ops.SIN, np.sin), (Ops.SQRT, np.sqrt),
                    (Ops.RECIPROCAL, np.reciprocal)):  # fmt: skip
        np.testing.assert_allclose(run(runner, x.alu(op)), ref(a), rtol=1e-5, atol=1e-6, err_msg=op.name)


def test_pipelines_are_cached(runner: Runner) -> None:
    a = rng.standard_normal(8).astype(np.float32)
    before = runner.stats.programs_compiled
    for _ in range(3):
        run(runner, tensor(runner, a) * 2.0 + 1.0)
    assert runner.stats.programs_compiled == before + 1


def test_literals() -> None:
    assert literal(math.inf, F32, False) == "f32(bitcast<f32>(2139095040u))"
    assert literal(True, dtypes.bool, False) == "true"
    assert literal(-(2**31), dtypes.int32, False) == "i32(-2147483647 - 1)"
    assert literal(5, dtypes.uint8, False) == "5u"


class _Big:
    size = 3 * 2**30


def test_index_overflow_is_refused_at_compile_time() -> None:
    base = UOp(Ops.BUFFER, F32, (), _Big())
    out = UOp(Ops.RESHAPE, F32, (base,), (3, 2**30)) + 1.0
    sink, inputs = normalize([out])
    sched = build_schedule(sink, len(inputs))
    with pytest.raises(RenderError, match="does not fit in i32"):
        render_wgsl("k0", sched.kernels[0].ast)


def test_synchronize_waits_for_submitted_work(runner: Runner) -> None:
    a = rng.standard_normal(1000).astype(np.float32)
    (buf,) = runner.realize([tensor(runner, a) * 3.0])
    runner.backend.synchronize()  # must return (and not raise) with work in flight
    np.testing.assert_allclose(buf.numpy(), a * 3.0, rtol=1e-6)


def test_beam_search_picks_a_correct_candidate_and_caches_it(adapter: object, tmp_path: object) -> None:
    from anneal_ir.settings import Settings
    from anneal_wgpu.runtime import WebGPUBackend

    settings = Settings(beam=6, cache_dir=str(tmp_path))
    searching = Runner("webgpu", WebGPUBackend(settings))
    a, b = rng.standard_normal((40, 48)).astype(np.float32), rng.standard_normal((48, 36)).astype(np.float32)
    out = run(searching, matmul(tensor(searching, a), tensor(searching, b)))
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)
    cache = tmp_path / "beam.json"  # type: ignore[operator]
    assert cache.exists() and len(json.loads(cache.read_text())) == 1
    cached = Runner("webgpu", WebGPUBackend(settings))  # a new process would load the winner, not search
    prog = cached.backend.compile("k0", next(iter(searching.programs.values())).ast)
    assert prog.tuned and prog.kernel.strategy == next(iter(searching.programs.values())).kernel.strategy


def test_debug_timing_uses_gpu_timestamps(adapter: object, capsys: pytest.CaptureFixture[str]) -> None:
    from anneal_wgpu.runtime import WebGPUBackend

    backend = WebGPUBackend()
    timed = Runner("webgpu", backend, debug=2)
    a = rng.standard_normal((64, 48)).astype(np.float32)
    x = tensor(timed, a)
    out = run(timed, UOp(Ops.REDUCE_AXIS, F32, (x * 2.0,), (Ops.ADD, (1,))) + 1.0)
    np.testing.assert_allclose(out, (a * 2).sum(1, keepdims=True) + 1, rtol=1e-5, atol=1e-5)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("*** webgpu")]
    assert lines, "ANNEAL_DEBUG=2 prints a line per kernel"
    clock = "gpu" if "timestamp-query" in adapter.features else "wall"  # type: ignore[attr-defined]
    assert all(f" us {clock}" in ln for ln in lines)
    # the rate of the kernel's float operations (64 x 48 multiplies and adds, 64 adds of 1) and its opts
    (line,) = [ln for ln in lines if "GROUP(" in ln or "LOCAL(" in ln]
    us = float(line.split(" us ")[0].split()[-1])
    tflops = float(line.split(" TFLOP/s")[0].split()[-1])
    assert tflops == pytest.approx((2 * 64 * 48 + 64) / (us * 1e-6) / 1e12, rel=0.01), line
    if backend.timestamps:  # two runs of a compiled kernel: two GPU times, no host round trip between them
        (buf,) = timed.realize([x * 3.0])
        prog = next(p for p in timed.programs.values() if len(p.kernel.bindings) == 2 and "3.0" in p.source)
        assert backend.start_timing()
        for _ in range(2):
            backend.run(prog, [buf.ensure(), x.src[0].arg.ensure()], {})
        times = backend.stop_timing()
        assert len(times) == 2 and all(0 < t < 10 for t in times), times


def test_dispatch_folds_into_two_dimensions_evenly(adapter: object) -> None:
    import dataclasses

    from anneal_wgpu.runtime import WebGPUBackend

    backend = WebGPUBackend()
    backend.limits = dataclasses.replace(backend.limits, max_workgroups_per_dim=7)
    folded = Runner("webgpu", backend)
    a = rng.standard_normal(20 * 256 * 4 + 12).astype(np.float32)  # vec4: 5123 invocations, 21 workgroups: 7 x 3
    np.testing.assert_allclose(run(folded, tensor(folded, a) * 2.0 + 1.0), a * 2 + 1, rtol=1e-6)
    b = rng.standard_normal((41, 257)).astype(np.float32)  # scalar: 10537 invocations, 42 workgroups: 7 x 6
    np.testing.assert_allclose(run(folded, tensor(folded, b) - 3.0), b - 3, rtol=1e-6)


def test_a_long_reduction_with_few_outputs_is_split(runner: Runner) -> None:
    """A sum of 2^20 elements (one output) runs as partial sums, then their sum: two kernels, same value."""
    a = rng.standard_normal(1 << 20).astype(np.float32)
    total = UOp(Ops.REDUCE_AXIS, F32, (tensor(runner, a),), (Ops.ADD, (0,)))
    assert len(runner.scheduler.schedule([total])[0].kernels) == 2
    np.testing.assert_allclose(run(runner, total), [a.astype(np.float64).sum()], rtol=1e-4)
    x, y = rng.standard_normal((8192, 48)).astype(np.float32), rng.standard_normal((8192, 40)).astype(np.float32)
    xt = UOp(Ops.PERMUTE, F32, (tensor(runner, x),), (1, 0))  # a weight gradient x^T y: few outputs, long k
    grad = matmul(xt, tensor(runner, y))
    assert len(runner.scheduler.schedule([grad])[0].kernels) == 2  # split-K: partial contractions, then a sum
    np.testing.assert_allclose(run(runner, grad), x.T @ y, rtol=1e-3, atol=1e-2)


def test_rendered_kernels_are_cached_on_disk(adapter: object, tmp_path: object) -> None:
    """A second backend (a second process) finds the rendered kernel instead of lowering it again."""
    import anneal_wgpu.runtime as rt
    from anneal_ir.settings import Settings

    a, b = rng.standard_normal((40, 48)).astype(np.float32), rng.standard_normal((48, 36)).astype(np.float32)
    first = Runner("webgpu", rt.WebGPUBackend(Settings(cache_dir=str(tmp_path))))
    out = matmul(tensor(first, a), tensor(first, b))
    np.testing.assert_allclose(run(first, out), a @ b, rtol=1e-4, atol=1e-4)
    assert list((tmp_path / "wgsl").glob("*.json"))  # type: ignore[operator]
    second = rt.WebGPUBackend(Settings(cache_dir=str(tmp_path)))
    calls: list[str] = []
    real = rt.render_wgsl
    try:
        rt.render_wgsl = lambda *args, **kw: calls.append("render") or real(*args, **kw)  # type: ignore[assignment]
        prog = second.compile("k0", next(iter(first.programs.values())).ast)
    finally:
        rt.render_wgsl = real  # type: ignore[assignment]
    assert calls == [] and prog.source == next(iter(first.programs.values())).source


def test_kernels_rendered_in_parallel_match_the_serial_render(adapter: object, tmp_path: object) -> None:
    from anneal_ir.settings import Settings
    from anneal_schedule.analysis import canonical
    from anneal_schedule.heuristic import choose_opts
    from anneal_wgpu.runtime import WebGPUBackend

    backend = WebGPUBackend(Settings(cache_dir=str(tmp_path)))
    shapes = [((24, 32), (32, 20)), ((40, 48), (48, 36)), ((64, 16), (16, 64)), ((8, 8), (8, 8))]
    outs = [
        matmul(
            tensor(Runner("webgpu", backend), rng.standard_normal(s).astype(np.float32)),
            tensor(Runner("webgpu", backend), rng.standard_normal(t).astype(np.float32)),
        )
        for s, t in shapes
    ]
    kernels = [k for o in outs for k in Runner("webgpu", backend).scheduler.schedule([o])[0].kernels]
    backend.prepare([(k.name, k.ast) for k in kernels])
    for k in kernels:
        ast = canonical(k.ast)
        opts = choose_opts(ast, backend.limits)
        cached = backend.kernel_cache.get(ast, opts, backend.f16)
        assert cached is not None and cached.source == render_wgsl(k.name, ast, backend.f16, opts).source.replace(
            f"// {k.name} ", f"// {cached.name} ")  # fmt: skip
    # their pipelines were created ahead, several at once; compiling takes them, and they compute the products
    assert len(backend.ready_pipelines) == len({k.ast.key for k in kernels})
    runner = Runner("webgpu", backend)
    a, b = rng.standard_normal((40, 48)).astype(np.float32), rng.standard_normal((48, 36)).astype(np.float32)
    np.testing.assert_allclose(run(runner, matmul(tensor(runner, a), tensor(runner, b))), a @ b, rtol=1e-4, atol=1e-4)
    assert len(backend.ready_pipelines) == len({k.ast.key for k in kernels}) - 1

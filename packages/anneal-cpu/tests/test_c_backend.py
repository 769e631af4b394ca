"""The C path of the cpu backend against numpy: hand-built graphs, every kernel compiled to C.

The op, gradient and JVP suites of the anneal package run on this path too (nox session
``cpu-c``); these cases pin what only C could get wrong: integer edge cases, NaN rules,
accumulation precision, the stage split around BLAS, layouts and the on-disk cache.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from anneal_cpu.backend import CPUBackend
from anneal_cpu.render_c import render_c
from anneal_ir import DType, Ops, UOp, dtypes
from anneal_ir.settings import Settings
from anneal_ir.sint import Variable
from anneal_schedule.buffer import Buffer
from anneal_schedule.runner import Runner

F32, I32, I64 = dtypes.float32, dtypes.int32, dtypes.int64
rng = np.random.default_rng(0)


@pytest.fixture()
def c_runner(tmp_path: Path) -> Runner:
    return Runner("cpu", CPUBackend(Settings(cpu_c_min=0, cache_dir=str(tmp_path))))


def tensor(runner: Runner, data: np.ndarray) -> UOp:
    return Buffer("cpu", runner.backend, data.size, dtypes.from_any(data.dtype)).copy_in(data).view(data.shape)


def run(runner: Runner, out: UOp, values: dict[str, int] | None = None) -> np.ndarray:
    (buf,) = runner.realize([out], values)
    assert out.shape is not None
    shape = tuple(values[d.arg[0]] if isinstance(d, UOp) else d for d in out.shape) if values else out.shape
    return buf.numpy()[: int(np.prod(shape))].reshape(shape)


def all_compiled(runner: Runner) -> bool:
    return all(p.compiled for p in runner.programs.values())


def reduce(x: UOp, op: Ops, axes: tuple[int, ...]) -> UOp:
    return UOp(Ops.REDUCE_AXIS, x.dtype, (x,), (op, axes))


def expand(x: UOp, shape: tuple[int, ...]) -> UOp:
    return UOp(Ops.EXPAND, x.dtype, (x,), shape)


def c_stages(source: str) -> str:
    """The C half of a compiled kernel's source (after the Python glue)."""
    return source.split("/* C stages */", 1)[1]


def test_integer_edge_cases_match_numpy_semantics(c_runner: Runner) -> None:
    a = np.array([7, -7, 5, np.iinfo(np.int32).min, 0, 9], np.int32)
    b = np.array([2, 2, 0, -1, 0, -4], np.int32)
    x, y = tensor(c_runner, a), tensor(c_runner, b)
    div = run(c_runner, x.alu(Ops.IDIV, y))
    mod = run(c_runner, x.alu(Ops.MOD, y))
    np.testing.assert_array_equal(div, [3, -3, 0, np.iinfo(np.int32).min, 0, -2])  # C truncation; x/0 = 0
    np.testing.assert_array_equal(mod, [1, -1, 0, 0, 0, 1])
    big = tensor(c_runner, np.array([2**31 - 1, 5], np.int32))
    np.testing.assert_array_equal(run(c_runner, big + big.const_like(1)), [-(2**31), 6])  # wraps
    s = tensor(c_runner, np.array([1, -8, 3], np.int32))
    sh = tensor(c_runner, np.array([31, 1, 40], np.int32))
    np.testing.assert_array_equal(run(c_runner, s.alu(Ops.SHL, sh)), [-(2**31), -16, 0])
    np.testing.assert_array_equal(run(c_runner, s.alu(Ops.SHR, sh)), [0, -4, 0])
    assert all_compiled(c_runner)


def test_nan_rules_and_special_floats(c_runner: Runner) -> None:
    a = np.array([np.nan, 1.0, -np.inf, 3.0, np.inf, -0.0], np.float32)
    b = np.array([0.0, np.nan, 2.0, -np.inf, np.nan, 0.0], np.float32)
    x, y = tensor(c_runner, a), tensor(c_runner, b)
    np.testing.assert_array_equal(run(c_runner, x.maximum(y)), np.maximum(a, b))
    np.testing.assert_array_equal(run(c_runner, reduce(x, Ops.MAX, (0,))), [np.nan])
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(run(c_runner, x.alu(Ops.EXP2)), np.exp2(a), rtol=2e-7)
        np.testing.assert_allclose(run(c_runner, x.alu(Ops.SQRT)), np.sqrt(a))


def test_exp2_and_erf_are_accurate_over_their_range(c_runner: Runner) -> None:
    a = np.concatenate([np.linspace(-125, 127, 20001, dtype=np.float32), [-200.0, 200.0, 0.5, -0.5]]).astype(np.float32)
    x = tensor(c_runner, a)
    with np.errstate(over="ignore"):
        np.testing.assert_allclose(run(c_runner, x.alu(Ops.EXP2)), np.exp2(a), rtol=3e-7)
    e = np.linspace(-6, 6, 4001, dtype=np.float32)
    from math import erf

    got = run(c_runner, tensor(c_runner, e).alu(Ops.ERF))
    np.testing.assert_allclose(got, [erf(v) for v in e], atol=5e-7)  # the formula: 1.5e-7, plus float32 rounding


def test_long_float32_sums_are_accurate(c_runner: Runner) -> None:
    a = rng.random(1 << 20).astype(np.float32) + 1000  # naive float32 accumulation would drift by ~1e-3
    out = run(c_runner, reduce(tensor(c_runner, a), Ops.ADD, (0,)))
    np.testing.assert_allclose(out, [a.astype(np.float64).sum()], rtol=1e-7)


def test_contraction_with_prologue_and_epilogue_goes_through_blas(c_runner: Runner) -> None:
    a = rng.standard_normal((48, 32)).astype(np.float32)
    b = rng.standard_normal((32, 40)).astype(np.float32)
    bias = rng.standard_normal(40).astype(np.float32)
    x, w, c = tensor(c_runner, a), tensor(c_runner, b), tensor(c_runner, bias)
    xe = expand(UOp(Ops.RESHAPE, F32, (x.alu(Ops.EXP2),), (48, 1, 32)), (48, 40, 32))
    wt = UOp(Ops.PERMUTE, F32, (w,), (1, 0))
    we = expand(UOp(Ops.RESHAPE, F32, (wt,), (1, 40, 32)), (48, 40, 32))
    mm = UOp(Ops.RESHAPE, F32, (reduce(xe * we, Ops.ADD, (2,)),), (48, 40))
    out = (mm + expand(UOp(Ops.RESHAPE, F32, (c,), (1, 40)), (48, 40))).maximum(mm.const_like(0.0))
    np.testing.assert_allclose(run(c_runner, out), np.maximum(np.exp2(a) @ b + bias, 0), rtol=1e-5, atol=1e-4)
    (prog,) = c_runner.programs.values()
    assert prog.compiled and "_contract(" in prog.source and "void " in prog.source
    assert "acc" not in c_stages(prog.source)  # the stages read the product: no loop over k


def test_a_plain_matmul_is_one_blas_call_and_a_copy(c_runner: Runner) -> None:
    """The stored value is the contraction itself: the store stage reads BLAS's result, it sums nothing."""
    a, b = rng.standard_normal((48, 32)).astype(np.float32), rng.standard_normal((32, 40)).astype(np.float32)
    xe = expand(UOp(Ops.RESHAPE, F32, (tensor(c_runner, a),), (48, 1, 32)), (48, 40, 32))
    we = expand(UOp(Ops.RESHAPE, F32, (UOp(Ops.PERMUTE, F32, (tensor(c_runner, b),), (1, 0)),), (1, 40, 32)),
                (48, 40, 32))  # fmt: skip
    np.testing.assert_allclose(run(c_runner, reduce(xe * we, Ops.ADD, (2,))).reshape(48, 40), a @ b, rtol=1e-5,
                               atol=1e-5)  # fmt: skip
    (prog,) = c_runner.programs.values()
    assert prog.compiled and prog.source.count("_contract(") == 1 and "acc" not in c_stages(prog.source)


def test_nested_reductions_are_hoisted_not_recomputed(c_runner: Runner) -> None:
    """A variance (a reduction reading a mean) per row: the mean is computed once per row."""
    a = rng.standard_normal((16, 300)).astype(np.float32)
    x = tensor(c_runner, a)
    mean = reduce(x, Ops.ADD, (1,)) * (1 / 300)
    centered = x - expand(mean, (16, 300))
    var = reduce(centered * centered, Ops.ADD, (1,))
    np.testing.assert_allclose(run(c_runner, var).reshape(16), ((a - a.mean(1, keepdims=True)) ** 2).sum(1),
                               rtol=1e-5)  # fmt: skip
    assert all_compiled(c_runner)


def test_gated_loads_and_casts(c_runner: Runner) -> None:
    a = rng.standard_normal((5, 3)).astype(np.float32)
    x = tensor(c_runner, a)
    padded = UOp(Ops.PAD, F32, (x,), ((1, 2), (0, 1)))
    as_int = padded.cast(I32).cast(dtypes.bool).cast(F32)
    np.testing.assert_allclose(run(c_runner, padded), np.pad(a, ((1, 2), (0, 1))))
    np.testing.assert_array_equal(run(c_runner, as_int), np.pad(a, ((1, 2), (0, 1))).astype(np.int32) != 0)
    bits = run(c_runner, UOp(Ops.BITCAST, I32, (x,)))
    np.testing.assert_array_equal(bits, a.view(np.int32))


def test_symbolic_sizes_read_the_variables(c_runner: Runner) -> None:
    n = Variable("n", 1, 64)
    data = rng.standard_normal(10 * 3).astype(np.float32)
    buf = Buffer("cpu", c_runner.backend, data.size, F32).copy_in(data)
    x = buf.view((n, 3), (n.bind(10),))
    out = reduce(x * 2.0, Ops.ADD, (0,))
    np.testing.assert_allclose(run(c_runner, out).reshape(3), (data.reshape(10, 3) * 2).sum(0), rtol=1e-6)
    (prog,) = c_runner.programs.values()
    assert prog.compiled and "v_n" in prog.source


def test_unsupported_dtypes_fall_back_to_numpy(c_runner: Runner) -> None:
    a = rng.standard_normal(8).astype(np.float16)
    x = tensor(c_runner, a)
    np.testing.assert_allclose(run(c_runner, x * 2.0), a * 2)
    assert not all_compiled(c_runner)
    (prog,) = c_runner.programs.values()
    assert render_c(prog.name, next(iter(c_runner.scheduler.cache.values())).kernels[0].ast) is None


def test_libraries_are_cached_on_disk(tmp_path: Path) -> None:
    def compile_once() -> CPUBackend:
        backend = CPUBackend(Settings(cpu_c_min=0, cache_dir=str(tmp_path)))
        r = Runner("cpu", backend)
        a = np.arange(12, dtype=np.float32)
        np.testing.assert_allclose(run(r, tensor(r, a) * 3.0), a * 3)
        return backend

    first, second = compile_once(), compile_once()
    assert first.compiler is not None and second.compiler is not None
    assert first.compiler.compiled == 2 and second.compiler.compiled == 0  # the runtime (thread pool), the kernel
    assert len(list((tmp_path / "cpu-kernels").glob("*.so"))) == 2


def test_small_kernels_stay_numpy_by_default(tmp_path: Path) -> None:
    r = Runner("cpu", CPUBackend(Settings(cache_dir=str(tmp_path))))
    small, big = np.ones(10, np.float32), np.ones(1 << 14, np.float32)
    run(r, tensor(r, small) * 2.0)
    run(r, tensor(r, big) * 2.0)
    assert sorted(p.compiled for p in r.programs.values()) == [False, True]


def test_numpy_only_setting(tmp_path: Path) -> None:
    backend = CPUBackend(Settings(cpu_cc="numpy", cpu_c_min=0, cache_dir=str(tmp_path)))
    assert backend.compiler is None
    r = Runner("cpu", backend)
    np.testing.assert_allclose(run(r, tensor(r, np.ones(5000, np.float32)) + 1.0), np.full(5000, 2.0))
    assert not all_compiled(r)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.int64, np.uint32, np.float64, np.bool_])
def test_other_dtypes(c_runner: Runner, dtype: type) -> None:
    a = (rng.integers(0, 5, 64) if dtype is not np.float64 else rng.standard_normal(64)).astype(dtype)
    dt: DType = dtypes.from_any(np.dtype(dtype))
    x = tensor(c_runner, a)
    if dt == dtypes.bool:
        got, want = run(c_runner, x.alu(Ops.XOR, x.const_like(True))), ~a
    else:
        got, want = run(c_runner, (x * x.const_like(3)).maximum(x)), np.maximum(a * dtype(3), a)
    np.testing.assert_array_equal(got, want)
    total = run(c_runner, reduce(x if dt.is_float else x.cast(I64), Ops.ADD, (0,)))
    np.testing.assert_allclose(total, [a.astype(np.float64 if dt.is_float else np.int64).sum()], rtol=1e-12)
    assert all_compiled(c_runner)


def test_c_and_numpy_paths_agree_bit_for_bit_on_float32_math(c_runner: Runner, tmp_path: Path) -> None:
    """A value one kernel recomputes must equal what another computed (max's gradient compares them),
    whichever path each kernel took: no fused multiply-adds, and the same exp2 and erf."""
    numpy_runner = Runner("cpu", CPUBackend(Settings(cpu_cc="numpy", cache_dir=str(tmp_path))))
    a = np.concatenate([rng.standard_normal(5000) * 30, [0.0, -0.0, np.nan, np.inf, -np.inf, 127.3, -126.7]])
    a = a.astype(np.float32)
    for op in (Ops.EXP2, Ops.ERF):

        def graph(r: Runner) -> UOp:
            x = tensor(r, a)
            return (x * 0.7 + 0.3).alu(op) * x + x.alu(Ops.SQRT)  # noqa: B023

        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(run(c_runner, graph(c_runner)), run(numpy_runner, graph(numpy_runner)))


@pytest.mark.parametrize("threads", [1, 2])
def test_sums_down_columns_run_as_columns(tmp_path: Path, threads: int) -> None:
    """sum_r x[r, c] * sqrt(s[r]) + w[c]: the reads are contiguous along c and strided along r, so the
    stage keeps one accumulator per column and computes sqrt(s[r]) once per row (a layer norm's weight
    gradient); the same values as numpy."""
    r = Runner("cpu", CPUBackend(Settings(cpu_c_min=0, cpu_threads=threads, cache_dir=str(tmp_path))))
    x = rng.standard_normal((700, 300)).astype(np.float32)
    s, w = rng.uniform(0.5, 2, 700).astype(np.float32), rng.standard_normal(300).astype(np.float32)
    row = expand(UOp(Ops.RESHAPE, F32, (tensor(r, s).alu(Ops.SQRT),), (700, 1)), (700, 300))
    col = UOp(Ops.RESHAPE, F32, (tensor(r, w),), (1, 300))
    out = reduce(tensor(r, x) * row, Ops.ADD, (0,)) + col
    want = (x.astype(np.float64) * np.sqrt(s.astype(np.float64))[:, None]).sum(0, keepdims=True) + w
    np.testing.assert_allclose(run(r, out), want, rtol=1e-5, atol=1e-4)
    (prog,) = r.programs.values()
    assert prog.compiled and re.search(r"double acc\d+\[", prog.source), prog.source  # an array of column sums


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_stages_split_over_threads_give_the_same_result(tmp_path: Path, threads: int) -> None:
    r = Runner("cpu", CPUBackend(Settings(cpu_c_min=0, cpu_threads=threads, cache_dir=str(tmp_path))))
    a = rng.standard_normal((1031, 1029)).astype(np.float32)  # over the runtime's 2^14 iterations: split
    x = tensor(r, a)
    rows = reduce(x.alu(Ops.EXP2), Ops.ADD, (1,))
    out = x * expand(rows, (1031, 1029)) + 1.0
    want = a * np.exp2(a.astype(np.float64)).sum(1, keepdims=True) + 1
    np.testing.assert_allclose(run(r, out), want, rtol=1e-5, atol=1e-3)  # x * sum + 1 cancels near x = -1/sum
    assert all_compiled(r)


def test_a_sum_of_two_products_becomes_two_contractions(c_runner: Runner) -> None:
    """sum_k (a[m,k] b[k,n] + c[m,k] d[k,n]): two BLAS calls, not a loop over m x n x k (SwiGLU's backward)."""
    a, b, c, d = (rng.standard_normal(s).astype(np.float32) for s in ((40, 30), (30, 20), (40, 30), (30, 20)))

    def product(x: UOp, y: UOp) -> UOp:
        xe = expand(UOp(Ops.RESHAPE, F32, (x,), (40, 1, 30)), (40, 20, 30))
        ye = expand(UOp(Ops.RESHAPE, F32, (UOp(Ops.PERMUTE, F32, (y,), (1, 0)),), (1, 20, 30)), (40, 20, 30))
        return xe * ye

    ta, tb, tc, td = (tensor(c_runner, v) for v in (a, b, c, d))
    out = reduce(product(ta, tb) + product(tc, td), Ops.ADD, (2,))
    np.testing.assert_allclose(run(c_runner, out).reshape(40, 20), a @ b + c @ d, rtol=1e-5, atol=1e-5)
    (prog,) = c_runner.programs.values()
    assert prog.source.count("_contract(") == 2 and "acc" not in c_stages(prog.source)


def test_a_symbolic_size_with_a_division_renders_in_c_and_python(c_runner: Runner, tmp_path: Path) -> None:
    """(n // 2, 2): C spells the division `/` (`//` opens a comment there), the Python glue `//`."""
    from anneal_ir.sint import sdiv

    n = Variable("n", 2, 4096)
    data = rng.standard_normal(4000).astype(np.float32)
    for r in (c_runner, Runner("cpu", CPUBackend(Settings(cpu_cc="numpy", cache_dir=str(tmp_path))))):
        buf = Buffer("cpu", r.backend, data.size, F32).copy_in(data)
        x = buf.view((n,), (n.bind(4000),))
        pairs = UOp(Ops.RESHAPE, F32, (x,), (sdiv(n, 2), 2))
        out = reduce(pairs * 2.0, Ops.ADD, (1,))
        (got,) = r.realize([out], {"n": 4000})
        np.testing.assert_allclose(got.numpy()[:2000], (data.reshape(2000, 2) * 2).sum(1), rtol=1e-6)
    assert all_compiled(c_runner)

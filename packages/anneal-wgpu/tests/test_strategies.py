"""Every opt list the optimizer may choose (and every BEAM candidate) computes the same values.

Each case is checked against numpy; then each kernel of its schedule is run again with each of
its candidate opt lists (vec4 flat, row kernels in groups, the staged vec4 tile) and must agree
with the heuristic's output. The sizes are chosen to hit the edges: extents that are not multiples of
the tile, innermost sizes that are (vec4) and are not (scalar), transposed operands (vec4 gathers),
gated loads (pad), bool and int outputs.
"""

from __future__ import annotations

import numpy as np
import pytest

from anneal_ir import Ops, UOp, dtypes
from anneal_schedule.analysis import find_contraction, ranges_of, row_kernel
from anneal_schedule.buffer import Buffer
from anneal_schedule.heuristic import candidate_opts, choose_opts
from anneal_schedule.opt import Opt, OptOps
from anneal_schedule.runner import Executed, Runner
from anneal_wgpu.render import render_wgsl

F32 = dtypes.float32
rng = np.random.default_rng(0)


@pytest.fixture(scope="module")
def runner(adapter: object) -> Runner:
    from anneal_wgpu.runtime import WebGPUBackend

    return Runner("webgpu", WebGPUBackend())


def tensor(runner: Runner, data: np.ndarray) -> UOp:
    return Buffer("webgpu", runner.backend, data.size, dtypes.from_any(data.dtype)).copy_in(data).view(data.shape)


def view(u: UOp, shape: tuple[int, ...], via: tuple[int, ...]) -> UOp:
    return UOp(Ops.EXPAND, u.dtype, (UOp(Ops.RESHAPE, u.dtype, (u,), via),), shape)


def reduce(x: UOp, op: Ops, axis: int) -> UOp:
    return UOp(Ops.REDUCE_AXIS, x.dtype, (x,), (op, (axis,)))


def bcast(r: UOp, shape: tuple[int, ...]) -> UOp:
    return UOp(Ops.EXPAND, r.dtype, (r,), shape)


def matmul(a: UOp, b: UOp) -> UOp:
    (n, k), (_, m) = a.shape, b.shape  # type: ignore[misc]
    a3 = view(a, (n, m, k), (n, 1, k))
    b3 = view(UOp(Ops.PERMUTE, b.dtype, (b,), (1, 0)), (n, m, k), (1, m, k))
    return UOp(Ops.RESHAPE, a.dtype, (reduce(a3 * b3, Ops.ADD, 2),), (n, m))


def exp(x: UOp) -> UOp:
    return (x * 1.4426950408889634).alu(Ops.EXP2)


def softmax(x: UOp) -> UOp:
    shape = x.shape
    assert shape is not None
    e = exp(x - bcast(reduce(x, Ops.MAX, 1), shape))
    return e * bcast(reduce(e, Ops.ADD, 1), shape).alu(Ops.RECIPROCAL)


def layernorm(x: UOp) -> UOp:
    shape = x.shape
    assert shape is not None
    inv = 1.0 / shape[1]
    d = x - bcast(reduce(x, Ops.ADD, 1) * inv, shape)
    return d * (bcast(reduce(d * d, Ops.ADD, 1) * inv, shape) + 1e-5).alu(Ops.SQRT).alu(Ops.RECIPROCAL)


def kind_of(opts: tuple[Opt, ...]) -> str:
    """The shape of kernel an opt list makes: a staged tile, a workgroup per row or output, or flat."""
    ops = {o.op for o in opts}
    return "tile" if OptOps.STAGE in ops else "group" if OptOps.GROUP in ops else "flat"


def row_loops(source: str) -> list[str]:
    """The loops of a kernel other than the workgroup trees that combine grouped reductions."""
    return [ln for ln in source.splitlines() if "for (var" in ln and "for (var s:" not in ln]


def check_every_candidate(runner: Runner, out: UOp, expected: np.ndarray, rtol: float = 1e-5,
                          atol: float = 1e-5, limit: int = 8) -> list[str]:  # fmt: skip
    """Realize out (heuristic strategies), compare with numpy, then re-run each kernel with each of its
    candidates (about limit of the tile ones) and compare with the heuristic's result. Returns the strategies seen."""
    runner.recording = []
    try:
        (buf,) = runner.realize([out])
        executed: Executed = runner.recording[-1]
    finally:
        runner.recording = None
    got = buf.numpy().reshape(expected.shape)
    if expected.dtype.kind == "f":
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)
    else:
        np.testing.assert_array_equal(got, expected)
    backend = runner.backend
    seen = []
    for kern in executed.schedule.kernels:
        buffers = [executed.slots[s].ensure() for s in kern.slots]
        out_buf = buffers[0]
        backend.run(backend.build(kern.name, kern.ast, choose_opts(kern.ast, backend.limits)), buffers, {})
        reference = backend.copy_out(out_buf, out_buf.size, out_buf.dtype)
        candidates = candidate_opts(kern.ast, backend.limits)
        tiles = [o for o in candidates[1:] if kind_of(o) == "tile"]  # a spread of them: each compile is slow here
        picked = [
            candidates[0],
            *tiles[:: max(1, len(tiles) // limit)],
            *(o for o in candidates if kind_of(o) != "tile"),
        ]
        for opts in picked:
            prog = backend.build(kern.name, kern.ast, opts)
            vec = any(o.op is OptOps.VECTOR for o in opts) and "vec4<" in prog.source
            seen.append(f"{kind_of(opts)}{'/vec4' if vec else ''}")
            backend.run(prog, buffers, {})
            trial = backend.copy_out(out_buf, out_buf.size, out_buf.dtype)
            assert np.allclose(trial, reference, rtol=1e-4, atol=1e-5, equal_nan=True), (opts, prog.source)
    return seen


@pytest.mark.parametrize("shape", [(64, 36), (5, 7), (3, 4, 8)], ids=["vec4", "scalar", "3d"])
def test_elementwise(runner: Runner, shape: tuple[int, ...]) -> None:
    a, b = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
    x, y = tensor(runner, a), tensor(runner, b)
    zero = view(UOp.const(F32, 0.0), shape, (1,) * len(shape))
    chain = UOp(Ops.WHERE, F32, (zero < x * 1.5 + y, (x * 1.5 + y) * y, zero)) - x * 0.25
    seen = check_every_candidate(runner, chain.alu(Ops.ERF), _erf(np.maximum(a * 1.5 + b, 0) * b - a * 0.25))
    assert ("flat/vec4" in seen) == (shape[-1] % 4 == 0)


def _erf(x: np.ndarray) -> np.ndarray:
    t = 1.0 / (1.0 + 0.3275911 * np.abs(x))
    p = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return (np.sign(x) * (1.0 - p * np.exp(-x * x))).astype(np.float32)


def test_broadcast_transposed_and_padded_operands(runner: Runner) -> None:
    a = rng.standard_normal((12, 16)).astype(np.float32)
    b = rng.standard_normal((16, 12)).astype(np.float32)
    c = rng.standard_normal(16).astype(np.float32)
    x, yt, row = tensor(runner, a), UOp(Ops.PERMUTE, F32, (tensor(runner, b),), (1, 0)), tensor(runner, c)
    out = x * yt + view(row, (12, 16), (1, 16))  # contiguous, gathered (transposed), broadcast
    check_every_candidate(runner, out, a * b.T + c)
    padded = UOp(Ops.PAD, F32, (x,), ((1, 3), (2, 2)))  # (16, 20): gated loads in every lane
    check_every_candidate(runner, padded * 2.0, np.pad(a, ((1, 3), (2, 2))) * 2)
    shifted = UOp(Ops.SHRINK, F32, (x,), ((0, 12), (1, 13)))  # unaligned: offset 1 along the vec4 range
    check_every_candidate(runner, shifted + 1.0, a[:, 1:13] + 1)


def test_bool_and_int_outputs(runner: Runner) -> None:
    a = rng.integers(-50, 50, size=(8, 12)).astype(np.int32)
    x = tensor(runner, a)
    check_every_candidate(runner, x.const_like(0) < x, a > 0)
    check_every_candidate(runner, (x * 3 + 1).alu(Ops.SHL, x.const_like(2)), (a * 3 + 1) << 2)
    flags = tensor(runner, a % 2 == 0)
    check_every_candidate(runner, flags.alu(Ops.XOR, x.const_like(0) < x), (a % 2 == 0) ^ (a > 0))
    check_every_candidate(runner, (x.const_like(0) < x).cast(F32) * 2.5, (a > 0) * np.float32(2.5))


@pytest.mark.parametrize(
    "shape", [(33, 40), (3, 1000), (40, 6), (24, 256), (5, 4096)], ids=["rows", "long", "short", "cached", "wide"]
)
def test_softmax_is_one_row_kernel(runner: Runner, shape: tuple[int, int]) -> None:
    a = rng.standard_normal(shape).astype(np.float32) * 3
    out = softmax(tensor(runner, a))
    e = np.exp(a - a.max(-1, keepdims=True))
    seen = check_every_candidate(runner, out, e / e.sum(-1, keepdims=True), rtol=1e-4, atol=1e-6)
    assert set(seen) <= {"group", "group/vec4"}  # never flat: that would redo the row's reductions per element
    (kern,) = runner.scheduler.schedule([out])[0].kernels
    opts = choose_opts(kern.ast, runner.backend.limits)
    assert row_kernel(kern.ast) is not None and kind_of(opts) == "group"
    source = render_wgsl("k0", kern.ast, opts=opts).source
    # a row whose quads divide evenly among the invocations stays in registers: no loop over the row
    if shape[1] in (256, 4096):
        assert not row_loops(source), source


@pytest.mark.parametrize("cols", [64, 384])
def test_layernorm_is_one_row_kernel(runner: Runner, cols: int) -> None:
    a = rng.standard_normal((48, cols)).astype(np.float32)
    out = layernorm(tensor(runner, a))
    ref = (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + 1e-5)
    check_every_candidate(runner, out, ref, rtol=1e-4, atol=1e-4)
    assert len(runner.scheduler.schedule([out])[0].kernels) == 1


def test_row_kernel_over_an_outer_and_an_inner_axis(runner: Runner) -> None:
    """Batch-norm-like: statistics per channel over (batch, h*w); the rows are the channels."""
    a = rng.standard_normal((4, 40, 24)).astype(np.float32)  # (batch, channel, h*w)
    x = tensor(runner, a)
    xt = UOp(Ops.PERMUTE, F32, (x,), (1, 0, 2))  # (channel, batch, h*w)
    flat = UOp(Ops.RESHAPE, F32, (xt,), (40, 96))
    mean = bcast(reduce(flat, Ops.ADD, 1) * (1 / 96), (40, 96))
    out = UOp(Ops.RESHAPE, F32, (flat - mean,), (40, 4, 24))
    ref = np.transpose(a, (1, 0, 2)) - np.transpose(a, (1, 0, 2)).mean((1, 2), keepdims=True)
    check_every_candidate(runner, out, ref, rtol=1e-4, atol=1e-5)


def test_a_row_over_short_ranges_joins_them_across_the_workgroup(runner: Runner) -> None:
    """Batch-norm-like over a 4x4 image stored channels last: a channel's row is (batch, y, x), whose innermost x
    (4) alone would leave most of a workgroup idle; the row's ranges JOIN into one, and every candidate agrees."""
    a = rng.standard_normal((6, 4, 4, 40)).astype(np.float32)  # (batch, y, x, channel)
    rows = UOp(Ops.PERMUTE, F32, (tensor(runner, a),), (3, 0, 1, 2))  # (channel, batch, y, x)
    sums = UOp(Ops.REDUCE_AXIS, F32, (rows,), (Ops.ADD, (1, 2, 3)))
    out = rows * 2.0 - bcast(sums, (40, 6, 4, 4))
    by_channel = np.transpose(a, (3, 0, 1, 2))
    expected = by_channel * 2 - by_channel.sum((1, 2, 3), keepdims=True)
    check_every_candidate(runner, out, expected, rtol=1e-4, atol=1e-4)
    (kern,) = runner.scheduler.schedule([out])[0].kernels
    opts = choose_opts(kern.ast, runner.backend.limits)
    assert row_kernel(kern.ast) is not None and kind_of(opts) == "group", opts
    assert [o.op for o in opts[:2]] == [OptOps.JOIN, OptOps.JOIN], opts


def test_a_pooling_kernel_steps_along_its_image_not_its_per_channel_reads(runner: Runner) -> None:
    """A 2x2 max pool of a channels-first image scaled per channel: the image and the output are contiguous along
    x, the per-channel scale along the channels. Invocations step along x (the stores count with the loads),
    not along the channels, where each one read 64 words from its neighbour."""
    a = rng.standard_normal((2, 8, 8, 8)).astype(np.float32)  # (batch, channel, y, x)
    scale = rng.standard_normal(8).astype(np.float32)
    windows = UOp(Ops.RESHAPE, F32, (tensor(runner, a),), (2, 8, 4, 2, 4, 2))
    windows = UOp(Ops.PERMUTE, F32, (windows,), (0, 1, 2, 4, 3, 5))
    windows = UOp(Ops.RESHAPE, F32, (windows,), (2, 8, 4, 4, 4))
    scaled = windows * view(tensor(runner, scale), (2, 8, 4, 4, 4), (1, 8, 1, 1, 1))
    out = UOp(Ops.RESHAPE, F32, (reduce(scaled, Ops.MAX, 4),), (2, 8, 4, 4))
    expected = (a * scale[None, :, None, None]).reshape(2, 8, 4, 2, 4, 2).max((3, 5))
    check_every_candidate(runner, out, expected)
    (kern,) = runner.scheduler.schedule([out])[0].kernels
    merges = [o for o in choose_opts(kern.ast, runner.backend.limits) if o.op is OptOps.MERGE]
    assert merges == [Opt(OptOps.MERGE)], merges


def test_matmul_broadcast_read_is_not_fused(runner: Runner) -> None:
    a, b = rng.standard_normal((40, 16)).astype(np.float32), rng.standard_normal((16, 36)).astype(np.float32)
    c = rng.standard_normal((40, 36, 8)).astype(np.float32)
    mm = UOp(Ops.RESHAPE, F32, (matmul(tensor(runner, a), tensor(runner, b)),), (40, 36, 1))
    out = tensor(runner, c) + bcast(mm, (40, 36, 8))
    check_every_candidate(runner, out, c + (a @ b)[:, :, None], rtol=1e-4, atol=1e-4)
    assert len(runner.scheduler.schedule([out])[0].kernels) == 2


@pytest.mark.parametrize(
    "m,k,n",
    [(70, 52, 36), (128, 64, 128), (33, 20, 44), (40, 50, 36), (64, 16, 30), (64, 40, 131)],
    ids=["edges", "even", "small-k", "k-not-4", "n-not-4", "n-ragged-wide"],
)
def test_matmul_tiles(runner: Runner, m: int, k: int, n: int) -> None:
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    mm = matmul(tensor(runner, a), tensor(runner, b)) + view(tensor(runner, bias), (m, n), (1, n))
    zero = view(UOp.const(F32, 0.0), (m, n), (1, 1))
    out = UOp(Ops.WHERE, F32, (zero < mm, mm, zero))
    seen = check_every_candidate(runner, out, np.maximum(a @ b + bias, 0), rtol=1e-4, atol=1e-4)
    # the columns in lanes (a ragged last quad guarded lane by lane, when there is a tile's width of them); k in
    # quads too where k % 4 == 0
    assert ("tile/vec4" in seen) == (n % 4 == 0 or n >= 64)


def test_matmul_transposed_operands_and_batches(runner: Runner) -> None:
    at = rng.standard_normal((24, 40)).astype(np.float32)  # a = at.T: contiguous along m, gathered along k
    b = rng.standard_normal((24, 36)).astype(np.float32)
    a_t = UOp(Ops.PERMUTE, F32, (tensor(runner, at),), (1, 0))
    check_every_candidate(runner, matmul(a_t, tensor(runner, b)), at.T @ b, rtol=1e-4, atol=1e-4)
    batch_a = rng.standard_normal((3, 32, 16)).astype(np.float32)
    batch_b = rng.standard_normal((3, 16, 40)).astype(np.float32)
    x, y = tensor(runner, batch_a), tensor(runner, batch_b)
    x4 = view(x, (3, 32, 40, 16), (3, 32, 1, 16))
    y4 = view(UOp(Ops.PERMUTE, F32, (y,), (0, 2, 1)), (3, 32, 40, 16), (3, 1, 40, 16))
    bmm = UOp(Ops.RESHAPE, F32, (reduce(x4 * y4, Ops.ADD, 3),), (3, 32, 40))
    check_every_candidate(runner, bmm, batch_a @ batch_b, rtol=1e-4, atol=1e-4)


def test_int_matmul(runner: Runner) -> None:
    a = rng.integers(-5, 5, size=(36, 20)).astype(np.int32)
    b = rng.integers(-5, 5, size=(20, 40)).astype(np.int32)
    check_every_candidate(runner, matmul(tensor(runner, a), tensor(runner, b)), a @ b)


def test_heuristic_strategies(runner: Runner) -> None:
    limits = runner.backend.limits
    x = UOp(Ops.RESHAPE, F32, (UOp(Ops.BUFFER, F32, (), _Fake(1 << 20)),), (1024, 1024))
    w = UOp(Ops.RESHAPE, F32, (UOp(Ops.BUFFER, F32, (), _Fake(1 << 20)),), (1024, 1024))
    sched = runner.scheduler.schedule([matmul(x, w)])[0]
    opts = choose_opts(sched.kernels[0].ast, limits)
    assert kind_of(opts) == "tile" and any(o.op is OptOps.VECTOR for o in opts)
    assert find_contraction(sched.kernels[0].ast, ranges_of(sched.kernels[0].ast)) is not None
    sched = runner.scheduler.schedule([x * 2.0 + w])[0]
    local = min(256, limits.max_workgroup_invocations)
    assert choose_opts(sched.kernels[0].ast, limits) == (Opt(OptOps.VECTOR, 1), Opt(OptOps.MERGE),
                                                        Opt(OptOps.LOCAL, 0, local))  # fmt: skip
    sched = runner.scheduler.schedule([softmax(x)])[0]
    (kern,) = sched.kernels
    assert kind_of(choose_opts(kern.ast, limits)) == "group"
    assert all(kind_of(o) == "group" for o in candidate_opts(kern.ast, limits))
    source = render_wgsl("k0", kern.ast, opts=choose_opts(kern.ast, limits)).source
    assert "array<vec4<f32>>" in source and not row_loops(source)  # the row of 1024 in registers


class _Fake:
    def __init__(self, size: int):
        self.size = size


def test_short_row_ranges_are_joined_into_a_tile(runner: Runner) -> None:
    """Rows over two short ranges (a small image's y and x: 8 x 8) JOIN into one of 64, so the contraction is
    tiled; every candidate (JOINed tiles among them) agrees."""
    a = rng.standard_normal((2, 8, 8, 16)).astype(np.float32)
    w = rng.standard_normal((16, 40)).astype(np.float32)
    shape = (2, 8, 8, 40, 16)
    a5 = view(tensor(runner, a), shape, (2, 8, 8, 1, 16))
    w5 = view(UOp(Ops.PERMUTE, F32, (tensor(runner, w),), (1, 0)), shape, (1, 1, 1, 40, 16))
    out = UOp(Ops.RESHAPE, F32, (reduce(a5 * w5, Ops.ADD, 4),), (2, 8, 8, 40))
    seen = check_every_candidate(runner, out, a @ w, rtol=1e-4, atol=1e-4)
    (kern,) = runner.scheduler.schedule([out])[0].kernels
    opts = choose_opts(kern.ast, runner.backend.limits)
    assert kind_of(opts) == "tile" and "tile/vec4" in seen
    assert any(o.op is OptOps.JOIN for o in opts), opts


def test_a_big_matmul_takes_the_8x8_register_tile_and_computes_numpys_product(runner: Runner) -> None:
    """1024 x 1024 outputs (the heuristic's "big" contractions): the 64x128x32 tile with 8x8 outputs per
    invocation, two vec4s of columns, that the H200 sweep put first."""
    a, b = rng.standard_normal((1024, 64)).astype(np.float32), rng.standard_normal((64, 1024)).astype(np.float32)
    out = matmul(tensor(runner, a), tensor(runner, b))
    (buf,) = runner.realize([out])
    np.testing.assert_allclose(buf.numpy().reshape(1024, 1024), a @ b, rtol=1e-4, atol=1e-4)
    (kern,) = [k for k in runner.scheduler.schedule([out])[0].kernels]
    opts = choose_opts(kern.ast, runner.backend.limits)
    assert kind_of(opts) == "tile"
    assert [o.amount for o in opts if o.op is OptOps.LOCAL] == [16, 8]  # 128 invocations
    assert [o.amount for o in opts if o.op is OptOps.UPCAST] == [2, 8]  # 2 vec4s of columns x 8 rows each


def test_many_reductions_of_one_scalar_share_a_workgroups_trees(runner: Runner) -> None:
    # a gradient norm over 40 parameters: 40 sums in one kernel. Each tree once had an array of its own, and past the
    # shared memory the kernel fell back to one invocation doing every sum (GPT-2's 150: 10.5 ms on an H200)
    parts = [rng.standard_normal((3 + i, 97)).astype(np.float32) for i in range(40)]
    total: UOp | None = None
    for p in parts:
        flat = UOp(Ops.RESHAPE, F32, (tensor(runner, p),), (p.size,))
        s = reduce(flat * flat, Ops.ADD, 0)
        total = s if total is None else total + s
    assert total is not None
    kernels = runner.scheduler.schedule([total])[0].kernels  # (as many as the device's buffers per kernel need)
    kern = max(kernels, key=lambda k: sum(n.op is Ops.REDUCE for n in k.ast.toposort()))
    assert sum(n.op is Ops.REDUCE for n in kern.ast.toposort()) >= 4
    opts = choose_opts(kern.ast, runner.backend.limits)
    assert kind_of(opts) == "group"
    assert render_wgsl("k0", kern.ast, opts=opts).source.count("var<workgroup>") == 1
    check_every_candidate(runner, total, np.array([sum(float((p.astype(np.float64) ** 2).sum()) for p in parts)],
                                                  np.float32), rtol=1e-5, atol=1e-3)  # fmt: skip


def test_a_ragged_k_guards_the_staged_tiles_not_the_multiply_adds(runner: Runner) -> None:
    # k = 1001 (GPT-2's 50257 tokens are ragged the same way): the last k step runs past the end. Its zeros are
    # staged into the tiles, so the inner loop stays one fma per product, not a select and an add
    import re

    a = rng.integers(-3, 4, (64, 1001)).astype(np.float32)  # small integers: every order of the sums is exact
    b = rng.integers(-3, 4, (1001, 64)).astype(np.float32)
    mm = matmul(tensor(runner, a), tensor(runner, b))
    check_every_candidate(runner, mm, a @ b, limit=2)
    (kern,) = runner.scheduler.schedule([mm])[0].kernels
    opts = choose_opts(kern.ast, runner.backend.limits)
    source = render_wgsl("k0", kern.ast, opts=opts).source
    assert kind_of(opts) == "tile" and "fma(" in source
    assert not re.search(r"acc\d+ = \(acc\d+ \+", source)


def test_invocations_step_along_the_range_a_reduction_reads_contiguously(runner: Runner) -> None:
    # per-channel sums over a channels-last image, kept channels first: invocations step along the channels (the
    # loads' unit stride), not along the batch, the output's innermost range (a batch norm's statistics)
    x = rng.standard_normal((16, 64, 32)).astype(np.float32)  # (batch, positions, channels)
    xt = tensor(runner, x)
    moved = UOp(Ops.PERMUTE, F32, (xt,), (2, 0, 1))  # (channels, batch, positions)
    sums = UOp(Ops.RESHAPE, F32, (reduce(moved, Ops.ADD, 2),), (32, 16))
    (kern,) = runner.scheduler.schedule([sums])[0].kernels
    opts = choose_opts(kern.ast, runner.backend.limits)
    channels = min(r.arg[0] for r in kern.ast.toposort() if r.op is Ops.RANGE)
    assert Opt(OptOps.MERGE, 0, channels + 1) in opts, opts
    assert any(o.op is OptOps.UNROLL and o.amount == 4 for o in opts)  # four loads of an invocation in flight
    check_every_candidate(runner, sums, x.sum(1).T, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("op", [Ops.ADD, Ops.MAX])
def test_sums_down_columns_take_a_workgroup_of_neighbouring_columns(runner: Runner, op: Ops) -> None:
    # a layer norm's weight gradient: a sum over rows of products, the columns side by side in memory. A workgroup
    # per column read one word of each row; 32 neighbouring columns per workgroup, each sum grouped 8 ways, read
    # 128 bytes of 8 rows at a time, and each column's tree keeps its lanes apart
    # (enough columns for 32 a workgroup to fill the device: half its `parallel` workgroups)
    shape = (128, 32 * runner.backend.limits.parallel // 2)
    a, b = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
    col = UOp(Ops.RESHAPE, F32, (reduce(tensor(runner, a) * tensor(runner, b), op, 0),), shape[1:])
    (kern,) = runner.scheduler.schedule([col])[0].kernels
    opts = choose_opts(kern.ast, runner.backend.limits)
    assert [(o.op, o.amount) for o in opts] == [(OptOps.LOCAL, 32), (OptOps.GROUP, 8)], opts
    expected = (a * b).sum(0) if op is Ops.ADD else (a * b).max(0)
    seen = check_every_candidate(runner, col, expected, rtol=1e-4, atol=1e-4)
    assert "group" in seen and "flat" in seen


@pytest.mark.parametrize("lanes, groups", [(1, 48), (1, 3), (16, 6)])
def test_a_tree_over_a_count_that_is_not_a_power_of_two(runner: Runner, lanes: int, groups: int) -> None:
    # a device whose workgroups hold 48 or 96 invocations groups a reduction over a count the tree must halve unevenly
    from anneal_schedule.analysis import global_ranges
    from anneal_schedule.heuristic import _column_range, column_opts, group_opts

    a = rng.standard_normal((192, 64)).astype(np.float32)
    col = UOp(Ops.RESHAPE, F32, (reduce(tensor(runner, a), Ops.ADD, 0),), (64,))
    runner.recording = []
    try:
        runner.realize([col])
        executed: Executed = runner.recording[-1]
    finally:
        runner.recording = None
    (kern,) = executed.schedule.kernels
    deps = ranges_of(kern.ast)
    along = _column_range(kern.ast, deps, global_ranges(deps))
    assert along is not None
    opts = group_opts(kern.ast, groups) if lanes == 1 else column_opts(kern.ast, along, lanes, groups)
    prog = runner.backend.build(kern.name, kern.ast, opts)
    assert prog.kernel.workgroup == lanes * groups, prog.source
    buffers = [executed.slots[s].ensure() for s in kern.slots]
    runner.backend.run(prog, buffers, {})
    got = runner.backend.copy_out(buffers[0], 64, F32)
    np.testing.assert_allclose(got, a.sum(0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows, cols", [(128, 16384), (256, 64)], ids=["columns", "group"])
def test_a_grouped_sum_added_into_its_own_output_in_place(runner: Runner, rows: int, cols: int) -> None:
    # x.assign(y.sum(0) + x): every invocation of a workgroup had the tree's result, and each stored it; one that
    # read x after another had stored into it added the sum twice. One invocation per output stores
    y, x0 = rng.standard_normal((rows, cols)).astype(np.float32), rng.standard_normal(cols).astype(np.float32)
    x = Buffer("webgpu", runner.backend, cols, F32).copy_in(x0)
    total = UOp(Ops.RESHAPE, F32, (reduce(tensor(runner, y), Ops.ADD, 0),), (cols,))
    (kern,) = runner.scheduler.schedule([UOp(Ops.ASSIGN, F32, (x.view((cols,)), total + x.view((cols,))))])[0].kernels
    assert kind_of(choose_opts(kern.ast, runner.backend.limits)) == "group"
    for _ in range(3):
        runner.realize([UOp(Ops.ASSIGN, F32, (x.view((cols,)), total + x.view((cols,))))])
    np.testing.assert_allclose(x.numpy(), x0 + 3 * y.sum(0), rtol=1e-4, atol=1e-3)


def test_many_dot_products_along_memory_take_a_workgroup_each(runner: Runner) -> None:
    # a language model's head on one token: many rows, each a long dot product read along memory; one row per
    # invocation would have neighbouring invocations read a row apart
    w = rng.standard_normal((70000, 128)).astype(np.float32)
    x = rng.standard_normal(128).astype(np.float32)
    rows = view(tensor(runner, x), (70000, 128), (1, 128)) * tensor(runner, w)
    y = reduce(rows, Ops.ADD, 1)
    (kern,) = runner.scheduler.schedule([y])[0].kernels
    assert kind_of(choose_opts(kern.ast, runner.backend.limits)) == "group"
    check_every_candidate(runner, y, (w @ x).reshape(70000, 1), rtol=1e-4, atol=1e-4)


def test_a_one_hot_contraction_skips_its_zero_steps_and_equals_an_index_add(runner: Runner) -> None:
    # an embedding's gradient: (v == tokens[t]) contracted with the upstream gradient over the tokens. Most steps of
    # most 64-row tiles are zero; they leave out their multiply-adds (GPT-2's, 50257 x 768 x 4096: 16.6 ms on an H200)
    v, t, c = 3000, 320, 40
    tokens = rng.integers(0, v, t)
    tokens[:20] = 7  # a row many tokens add into, and rows in the first and last tiles
    tokens[20], tokens[21] = 0, v - 1
    g = rng.standard_normal((t, c)).astype(np.float32)
    tok = tensor(runner, tokens.astype(np.int64))
    iota = view(UOp(Ops.IOTA, dtypes.int64, (), v), (v, t), (v, 1))
    onehot = UOp(Ops.CAST, F32, (UOp(Ops.CMPEQ, dtypes.bool, (iota, view(tok, (v, t), (1, t)))),))
    grad = matmul(onehot, tensor(runner, g))
    expected = np.zeros((v, c), np.float32)
    np.add.at(expected, tokens, g)
    (kern,) = [k for k in runner.scheduler.schedule([grad])[0].kernels if find_contraction(k.ast, ranges_of(k.ast))]
    opts = choose_opts(kern.ast, runner.backend.limits)
    assert any(o.op is OptOps.SKIP for o in opts), opts
    assert "skiptile" in render_wgsl("k0", kern.ast, opts=opts).source
    check_every_candidate(runner, grad, expected, rtol=1e-5, atol=1e-5, limit=4)


def test_a_causally_masked_operand_skips_the_steps_past_its_rows(runner: Runner) -> None:
    # attention's probabilities times the values under a causal mask: a 64-row tile's steps of keys past its last
    # row are all zeros (3/8 of them at 256 positions); they leave out their multiply-adds
    t, d = 256, 64
    gen = np.random.default_rng(1)
    s = gen.integers(-3, 4, (t, t)).astype(np.float32)  # small integers: every order of the sums is exact
    v = gen.integers(-3, 4, (t, d)).astype(np.float32)
    rows = view(UOp(Ops.IOTA, dtypes.int64, (), t), (t, t), (t, 1))
    cols = view(UOp(Ops.IOTA, dtypes.int64, (), t), (t, t), (1, t))
    future = UOp(Ops.CMPLT, dtypes.bool, (rows, cols))
    p = UOp(Ops.WHERE, F32, (future, view(UOp.const(F32, 0.0), (t, t), (1, 1)), tensor(runner, s)))
    out = matmul(p, tensor(runner, v))
    expected = np.where(np.triu(np.ones((t, t), bool), 1), 0.0, s) @ v
    (kern,) = runner.scheduler.schedule([out])[0].kernels
    opts = choose_opts(kern.ast, runner.backend.limits)
    assert Opt(OptOps.SKIP, 0) in opts, opts
    check_every_candidate(runner, out, expected.astype(np.float32), limit=4)


def test_a_long_odd_k_is_split_into_slices_padded_with_zeros(runner: Runner) -> None:
    # GPT-2's head input gradient sums over 50257 tokens for 4096 x 768 outputs (384 tiles): S does not divide K, so
    # each factor is padded with zeros to S slices of partial sums, then summed
    gen = np.random.default_rng(2)
    a = gen.integers(-3, 4, (32, 8193)).astype(np.float32)  # small integers: every order of the sums is exact
    b = gen.integers(-3, 4, (8193, 48)).astype(np.float32)
    mm = matmul(tensor(runner, a), tensor(runner, b))
    kernels = runner.scheduler.schedule([mm])[0].kernels
    assert len(kernels) == 2  # the slices' partial sums, then their sum
    assert any(o.op is OptOps.STAGE for o in choose_opts(kernels[0].ast, runner.backend.limits))
    check_every_candidate(runner, mm, a @ b, limit=2)


def test_a_long_one_hot_sum_is_not_split_but_read_as_a_gather(runner: Runner) -> None:
    # an embedding over 20001 tokens: a sum over a one-hot the gather rule turns into a load once the kernel is
    # formed. Split first (a long odd sum of products), it stayed a contraction (GPT-2's embedding: 13.4 ms)
    gen = np.random.default_rng(3)
    v, t, c = 20001, 512, 64
    table = gen.standard_normal((v, c)).astype(np.float32)
    tokens = gen.integers(0, v, t)
    iota = view(UOp(Ops.IOTA, dtypes.int64, (), v), (t, c, v), (1, 1, v))
    tok = view(tensor(runner, tokens.astype(np.int64)), (t, c, v), (t, 1, 1))
    onehot = UOp(Ops.CAST, F32, (UOp(Ops.CMPEQ, dtypes.bool, (iota, tok)),))
    rows = view(UOp(Ops.PERMUTE, F32, (tensor(runner, table),), (1, 0)), (t, c, v), (1, c, v))
    emb = reduce(onehot * rows, Ops.ADD, 2)
    kernels = runner.scheduler.schedule([emb])[0].kernels
    assert len(kernels) == 1 and not any(n.op is Ops.REDUCE for n in kernels[0].ast.toposort())
    (buf,) = runner.realize([emb])
    np.testing.assert_array_equal(buf.numpy().reshape(t, c), table[tokens])

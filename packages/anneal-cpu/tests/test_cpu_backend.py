"""The numpy backend against numpy itself: hand-built tensor graphs, scheduled and run."""

from __future__ import annotations

import numpy as np
import pytest

from anneal_cpu.backend import CPUBackend, _idiv
from anneal_ir import Ops, UOp, dtypes
from anneal_schedule.buffer import Buffer
from anneal_schedule.runner import Runner

F32 = dtypes.float32
rng = np.random.default_rng(0)


@pytest.fixture()
def runner() -> Runner:
    return Runner("cpu", CPUBackend())


def tensor(runner: Runner, data: np.ndarray) -> UOp:
    dt = dtypes.from_any(data.dtype)
    return Buffer("cpu", runner.backend, data.size, dt).copy_in(data).view(data.shape)


def run(runner: Runner, out: UOp) -> np.ndarray:
    (buf,) = runner.realize([out])
    assert out.shape is not None
    return buf.numpy().reshape(out.shape)


def matmul(a: UOp, b: UOp) -> UOp:
    (n, k), (_, m) = a.shape, b.shape  # type: ignore[misc]
    a3 = UOp(Ops.EXPAND, F32, (UOp(Ops.RESHAPE, F32, (a,), (n, 1, k)),), (n, m, k))
    bt = UOp(Ops.PERMUTE, F32, (b,), (1, 0))
    b3 = UOp(Ops.EXPAND, F32, (UOp(Ops.RESHAPE, F32, (bt,), (1, m, k)),), (n, m, k))
    r = UOp(Ops.REDUCE_AXIS, F32, (a3 * b3,), (Ops.ADD, (2,)))
    return UOp(Ops.RESHAPE, F32, (r,), (n, m))


def test_matmul_renders_to_a_contraction_over_strided_views(runner: Runner) -> None:
    a, b = rng.standard_normal((6, 5)).astype(np.float32), rng.standard_normal((5, 7)).astype(np.float32)
    out = matmul(tensor(runner, a), tensor(runner, b))
    np.testing.assert_allclose(run(runner, out), a @ b, rtol=1e-5, atol=1e-5)
    (prog,) = runner.programs.values()
    assert "_contract(" in prog.source and "_view(" in prog.source
    assert "np.arange" not in prog.source  # strided views only, no index arrays


def test_flip_and_shrink_are_views(runner: Runner) -> None:
    a = rng.standard_normal((4, 6)).astype(np.float32)
    x = tensor(runner, a)
    flipped = UOp(Ops.FLIP, F32, (x,), (1,))
    out = UOp(Ops.SHRINK, F32, (flipped,), ((1, 3), (2, 6))) + 1.0
    np.testing.assert_allclose(run(runner, out), a[:, ::-1][1:3, 2:6] + 1.0)


def test_pad_reads_zero_outside(runner: Runner) -> None:
    a = rng.standard_normal((3, 2)).astype(np.float32)
    out = UOp(Ops.PAD, F32, (tensor(runner, a),), ((1, 1), (0, 2)))
    np.testing.assert_allclose(run(runner, out), np.pad(a, ((1, 1), (0, 2))))


def test_reduce_max_and_sum_of_constant(runner: Runner) -> None:
    a = rng.standard_normal((5, 4)).astype(np.float32)
    x = tensor(runner, a)
    mx = UOp(Ops.REDUCE_AXIS, F32, (x,), (Ops.MAX, (0,)))
    np.testing.assert_allclose(run(runner, mx), a.max(0, keepdims=True))
    ones = UOp(Ops.EXPAND, F32, (UOp(Ops.RESHAPE, F32, (UOp.const(F32, 1.0),), (1, 1)),), (5, 4))
    count = UOp(Ops.REDUCE_AXIS, F32, (ones,), (Ops.ADD, (0, 1)))
    np.testing.assert_allclose(run(runner, count), [[20.0]])


def test_reshape_with_split_dims(runner: Runner) -> None:
    a = np.arange(24, dtype=np.float32)
    x = tensor(runner, a)
    r = UOp(Ops.RESHAPE, F32, (x,), (2, 3, 4))
    p = UOp(Ops.PERMUTE, F32, (r,), (2, 0, 1))
    out = UOp(Ops.RESHAPE, F32, (p,), (4, 6)) * 2.0
    np.testing.assert_allclose(run(runner, out), a.reshape(2, 3, 4).transpose(2, 0, 1).reshape(4, 6) * 2)


def test_integer_division_truncates_like_c() -> None:
    a = np.array([7, -7, 7, -7])
    b = np.array([2, 2, -2, -2])
    np.testing.assert_array_equal(_idiv(a, b), np.trunc(a / b).astype(int))


def test_programs_are_cached_by_content(runner: Runner) -> None:
    a = rng.standard_normal((3, 3)).astype(np.float32)
    for _ in range(3):
        run(runner, tensor(runner, a) + 1.0)
    assert runner.stats.programs_compiled == 1


@pytest.mark.parametrize(
    "sa,sb,so",
    [
        ("ik", "kj", "ij"),
        ("bik", "bkj", "bij"),
        ("ik", "jk", "ji"),
        ("ikl", "k", "i"),
        ("i", "j", "ij"),
        ("abc", "c", "ab"),
    ],
)
def test_contract_matches_einsum(sa: str, sb: str, so: str) -> None:
    """Both ways: numpy's matmul (no compiler) and BLAS in place through the runtime."""
    from anneal_cpu.backend import CPUBackend
    from anneal_cpu.contract import numpy_contract

    runtime = CPUBackend().runtime
    assert runtime is not None
    sizes = dict(zip("abcijkl", (2, 3, 4, 5, 6, 7, 3)))
    a = rng.standard_normal([sizes[c] for c in sa]).astype(np.float32)
    b = rng.standard_normal([sizes[c] for c in sb]).astype(np.float32)
    want = np.einsum(f"{sa},{sb}->{so}", a, b)
    for contract in (numpy_contract, runtime.contract):
        np.testing.assert_allclose(contract(a, sa, b, sb, so), want, rtol=1e-5, atol=1e-5)


def test_an_async_read_is_complete_at_once_and_a_copy() -> None:
    backend = CPUBackend()
    handle = backend.allocate(4, dtypes.float32)
    backend.copy_in(handle, np.arange(4, dtype=np.float32))
    pending = backend.copy_out_async([(handle, 4, dtypes.float32), (handle, 2, dtypes.float32)])
    assert pending.ready()
    backend.copy_in(handle, np.zeros(4, np.float32))  # later writes do not reach what was read
    whole, prefix = pending.result()
    np.testing.assert_array_equal(whole, np.arange(4))
    np.testing.assert_array_equal(prefix, [0, 1])

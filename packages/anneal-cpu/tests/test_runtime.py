"""The runtime's thread pool and its BLAS calls, against numpy in float64."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from anneal_cpu.backend import CPUBackend
from anneal_cpu.contract import gemm_plan, merged
from anneal_cpu.runtime import Runtime
from anneal_ir.settings import Settings

rng = np.random.default_rng(7)


@pytest.fixture(scope="module", params=[1, 2, 3])
def runtime(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Runtime:
    cache = tmp_path_factory.mktemp(f"rt{request.param}")
    backend = CPUBackend(Settings(cpu_threads=request.param, cache_dir=str(cache)))
    assert backend.runtime is not None
    return backend.runtime


def test_numpy_blas_is_found() -> None:
    """numpy's wheels on Linux carry OpenBLAS: the runtime must find its sgemm (else contractions
    silently fall back to numpy's matmul, which runs outside the pool)."""
    backend = CPUBackend(Settings(cpu_threads=2))
    assert backend.runtime is not None and backend.runtime.blas is not None


def layouts(batch: int, m: int, k: int, n: int) -> list[tuple[str, np.ndarray, np.ndarray]]:
    a = rng.standard_normal((batch, m, k)).astype(np.float32)
    b = rng.standard_normal((batch, k, n)).astype(np.float32)
    at = np.ascontiguousarray(a.transpose(0, 2, 1)).transpose(0, 2, 1)  # columns of unit stride
    bt = np.ascontiguousarray(b.transpose(0, 2, 1)).transpose(0, 2, 1)
    wide = rng.standard_normal((batch, m, 2 * k)).astype(np.float32)[:, :, ::2]  # no unit stride: copied
    shared = np.broadcast_to(b[:1], b.shape)  # batch stride 0
    same_rows = np.broadcast_to(a[:, :1], a.shape)  # row stride 0: copied
    return [("plain", a, b), ("a transposed", at, b), ("b transposed", a, bt), ("both", at, bt),
            ("strided a", wide, b), ("shared b", a, shared), ("reversed", a[:, ::-1], b),
            ("same rows", same_rows, b)]  # fmt: skip


SHAPES = [(1, 64, 48, 80), (5, 33, 17, 9), (1, 1, 7, 5), (3, 6, 1, 4), (2, 9, 5, 1), (1, 300, 200, 100),
          (48, 64, 32, 64)]  # fmt: skip


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matmul_matches_numpy_on_every_layout(runtime: Runtime, shape: tuple[int, int, int, int]) -> None:
    for name, a, b in layouts(*shape):
        want = np.matmul(a.astype(np.float64), b.astype(np.float64))
        got = runtime.matmul(a, b)
        assert got.shape == want.shape and got.dtype == np.float32, name
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=name)


def test_matmul_of_empty_and_zero_depth(runtime: Runtime) -> None:
    a, b = np.ones((2, 3, 0), np.float32), np.ones((2, 0, 4), np.float32)
    np.testing.assert_array_equal(runtime.matmul(a, b), np.zeros((2, 3, 4), np.float32))  # k = 0: zeros
    assert runtime.matmul(np.ones((1, 0, 3), np.float32), np.ones((1, 3, 2), np.float32)).shape == (1, 0, 2)


def test_other_dtypes_go_to_numpy(runtime: Runtime) -> None:
    a, b = rng.standard_normal((2, 4, 3)), rng.standard_normal((2, 3, 5))
    np.testing.assert_array_equal(runtime.matmul(a, b), np.matmul(a, b))
    ia, ib = rng.integers(-9, 9, (1, 4, 3)), rng.integers(-9, 9, (1, 3, 5))
    np.testing.assert_array_equal(runtime.matmul(ia, ib), np.matmul(ia, ib))


def test_axes_merge_when_evenly_spaced() -> None:
    size = {"a": 4, "b": 6, "c": 1}
    assert merged(("a", "b"), size, {"a": 6, "b": 1, "c": 99}) == (24, 1)
    assert merged(("a", "c", "b"), size, {"a": 12, "b": 2, "c": 99}) == (24, 2)  # size 1: any stride
    assert merged(("a", "b"), size, {"a": 7, "b": 1}) is None
    assert merged((), size, {}) == (1, 0)


def test_gemm_plans_read_operands_in_place() -> None:
    """Attention's q @ k^T with heads interleaved in one (batch, seq, 3*dim) buffer, and a weight gradient
    whose rows do not merge: batched matrices at offsets, nothing copied."""
    b, h, t, d = 2, 3, 5, 4
    qkv = (t * 3 * h * d, d, 3 * h * d, 1)  # element strides of (b, h, t, d) inside (b, t, 3, h, d)
    plan = gemm_plan("abce", "abde", "abcd", (b, h, t, d), qkv, (b, h, t, d), qkv)
    assert plan.a_copy is None and plan.b_copy is None and len(plan.offsets) == b * h
    assert (plan.m, plan.n, plan.k, plan.ta, plan.tb) == (t, t, d, 0, 1)
    plan = gemm_plan("adb", "cd", "abc", (12, 384, 64), (384 * 64, 64, 1), (128, 384), (1, 128))
    assert plan.a_copy is None and len(plan.offsets) == 12 and plan.ta == 1  # rows (a, b) split: a is a batch
    strided = gemm_plan("ab", "bc", "ac", (4, 6), (12, 2), (6, 3), (3, 1))  # no unit stride in a: copied
    assert strided.a_copy == (0, 1) and strided.b_copy is None


CONTRACTIONS = [
    ("adb", (12, 384, 64), "cd", (128, 384), "abc"),
    ("adb", (12, 384, 64), "cd", (128, 384), "cab"),
    ("abc", (12, 384, 64), "ce", (64, 5), "ae"),  # b summed by a alone
    ("abce", (2, 3, 5, 4), "abde", (2, 3, 6, 4), "abcd"),
    ("abce", (2, 3, 5, 4), "abde", (2, 3, 6, 4), "acbd"),  # the product's axes interleaved
    ("cda", (12, 64, 512), "cdb", (12, 64, 128), "ab"),
    ("ab", (7, 9), "bc", (9, 1), "ca"),
]


@pytest.mark.parametrize("case", CONTRACTIONS, ids=lambda c: f"{c[0]},{c[2]}->{c[4]}")
def test_contractions_match_einsum(runtime: Runtime, case: tuple) -> None:
    """Through the runtime, from contiguous operands and from views with interleaved axes (as the
    kernels' glue passes them): the same as numpy's einsum in float64."""
    sa, shape_a, sb, shape_b, so = case
    for transposed in (False, True):
        a = rng.standard_normal(shape_a).astype(np.float32)
        b = rng.standard_normal(shape_b).astype(np.float32)
        if transposed:  # the same values, stored with the axes reversed
            a = np.ascontiguousarray(a.T).T
            b = np.ascontiguousarray(b.T).T
        want = np.einsum(f"{sa},{sb}->{so}", a.astype(np.float64), b.astype(np.float64))
        np.testing.assert_allclose(runtime.contract(a, sa, b, sb, so), want, rtol=1e-4, atol=1e-3)


def test_the_backend_contracts_through_the_runtime(tmp_path: Path) -> None:
    backend = CPUBackend(Settings(cpu_threads=2, cache_dir=str(tmp_path)))
    assert backend.runtime is not None and backend.contract == backend.runtime.contract


def test_a_forked_child_computes_on_one_thread(tmp_path: Path) -> None:
    """multiprocessing forks on Linux; OpenMP's pool does not survive fork, so a child that used it
    would wait forever. The child runs on its one thread instead, and gets the same product (to rounding:
    OpenBLAS may split a product differently on one thread than on two)."""
    backend = CPUBackend(Settings(cpu_threads=2, cache_dir=str(tmp_path)))
    runtime = backend.runtime
    assert runtime is not None and runtime.threads == 2
    a, b = rng.standard_normal((1, 256, 256)).astype(np.float32), rng.standard_normal((1, 256, 256)).astype(np.float32)
    want = runtime.matmul(a, b)  # the pool has run in the parent
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if it computes the same product on one thread
        ok = runtime.threads == 1 and np.allclose(runtime.matmul(a, b), want, rtol=1e-5, atol=1e-4)
        os._exit(0 if ok else 1)
    deadline = time.monotonic() + 60
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung in the OpenMP pool")
    assert os.waitstatus_to_exitcode(done[1]) == 0

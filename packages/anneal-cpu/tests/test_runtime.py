"""The runtime's thread pool and its BLAS calls, against numpy in float64."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from anneal_cpu.backend import CPUBackend, _contract
from anneal_cpu.runtime import Runtime, blas_operand
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


def test_blas_operand_reads_strides() -> None:
    x = np.zeros((4, 6, 8), np.float32)
    assert blas_operand(x) == (48, 0, 8)
    assert blas_operand(x.transpose(0, 2, 1)) == (48, 1, 8)  # (4, 8, 6) with unit row stride
    assert blas_operand(x[:1]) == (0, 0, 8)
    assert blas_operand(x[:, :, ::2]) is None
    assert blas_operand(x[:, ::-1]) is None
    assert blas_operand(np.broadcast_to(x[:, :1], x.shape)) is None  # rows all the same: overlapping
    assert blas_operand(np.broadcast_to(x[:, :, :1], x.shape)) is None  # each row one value repeated


def test_contractions_of_the_backend_use_the_runtime(tmp_path: Path) -> None:
    """einsum strings through _contract with the runtime's matmul: the same as numpy's einsum."""
    backend = CPUBackend(Settings(cpu_threads=2, cache_dir=str(tmp_path)))
    assert backend.runtime is not None
    a = rng.standard_normal((12, 384, 64)).astype(np.float32)
    b = rng.standard_normal((128, 384)).astype(np.float32)
    for sa, sb, so in (("adb", "cd", "abc"), ("adb", "cd", "cab"), ("abc", "ce", "ae")):
        bb = b if sb == "cd" else rng.standard_normal((64, 5)).astype(np.float32)
        want = np.einsum(f"{sa},{sb}->{so}", a.astype(np.float64), bb.astype(np.float64))
        got = _contract(a, sa, bb, sb, so, backend.runtime.matmul)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)

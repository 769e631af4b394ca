"""The WGSL kernel strategies (flat, group, tile) on shapes that select each, against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from anneal import Tensor
from anneal.realize import runner
from anneal_wgpu.testing import require_adapter

rng = np.random.default_rng(0)


def t(*shape: int) -> Tensor:
    return Tensor(rng.standard_normal(shape).astype(np.float32), device="webgpu")


def strategies() -> set[str]:
    return {p.kernel.strategy for p in runner("webgpu").programs.values()}


@pytest.fixture(autouse=True)
def _adapter() -> None:
    require_adapter(pytest.fail, pytest.skip)


@pytest.mark.parametrize("m,k,n", [(100, 70, 130), (64, 16, 32), (257, 33, 129)])
def test_tiled_matmul_with_epilogue(m: int, k: int, n: int) -> None:
    x, w, b = t(m, k), t(k, n), t(n)
    out = (x @ w + b).relu().numpy()
    np.testing.assert_allclose(out, np.maximum(x.numpy() @ w.numpy() + b.numpy(), 0), rtol=1e-4, atol=1e-4)
    assert "tile" in strategies()


def test_batched_tiled_matmul() -> None:
    x, w = t(3, 40, 50), t(3, 50, 36)
    np.testing.assert_allclose((x @ w).numpy(), x.numpy() @ w.numpy(), rtol=1e-4, atol=1e-4)


def test_transposed_operands() -> None:
    x, w = t(48, 64), t(80, 64)
    np.testing.assert_allclose((x @ w.T).numpy(), x.numpy() @ w.numpy().T, rtol=1e-4, atol=1e-4)


def test_group_reductions_and_softmax() -> None:
    x = t(37, 1000)
    np.testing.assert_allclose(x.sum(-1).numpy(), x.numpy().sum(-1), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(x.max(-1).numpy(), x.numpy().max(-1))
    e = np.exp(x.numpy() - x.numpy().max(-1, keepdims=True))
    np.testing.assert_allclose(x.softmax(-1).numpy(), e / e.sum(-1, keepdims=True), rtol=1e-4, atol=1e-6)
    assert "group" in strategies()


def test_full_reduction_of_a_large_tensor() -> None:
    x = t(300, 300)
    np.testing.assert_allclose(x.sum().numpy(), x.numpy().sum(), rtol=1e-4)

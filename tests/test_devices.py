"""cpu and webgpu (lavapipe in CI) in one process: the same random numbers for the same seed, and
Tensor.to() between them lazy and differentiable."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import anneal
import anneal.nn.functional as F
from anneal import Tensor
from anneal.data.testing import shared_data_dir
from anneal.jit import jit
from anneal_models import nanogpt
from anneal_wgpu.testing import require_adapter


@pytest.fixture(autouse=True)
def webgpu() -> None:
    require_adapter(pytest.fail, pytest.skip)


def draws(device: str) -> list[np.ndarray]:
    anneal.manual_seed(1234)
    x = Tensor(np.ones((64, 64), np.float32), device=device)
    return [
        Tensor.rand(4096, device=device).numpy(),
        Tensor.randint(-5, 1000, (4096,), device=device).numpy(),
        F.dropout(x, 0.3).numpy(),
    ]


def test_the_same_seed_draws_the_same_bits_on_cpu_and_webgpu() -> None:
    for a, b in zip(draws("cpu"), draws("webgpu")):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


def test_randn_and_uniform_agree_to_float_rounding() -> None:
    """Box-Muller's log, sqrt and cos are each backend's own, and a GPU compiler may fuse uniform's
    scale-and-shift into one FMA: equal to a few ulps, not bit for bit (the bits underneath are)."""
    values: dict[str, list[np.ndarray]] = {}
    for device in ("cpu", "webgpu"):
        anneal.manual_seed(99)
        values[device] = [Tensor.randn(4096, device=device).numpy(),
                          Tensor.uniform(1000, low=-2.0, high=2.0, device=device).numpy()]  # fmt: skip
    for a, b in zip(values["cpu"], values["webgpu"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_jitted_draws_are_the_same_stream_on_both() -> None:
    def run(device: str) -> list[np.ndarray]:
        @jit
        def noisy(x: Tensor) -> Tensor:
            return (x + Tensor.rand(*x.shape, device=x.device)).realize()

        anneal.manual_seed(5)
        z = Tensor(np.zeros(256, np.float32), device=device)
        return [noisy(z).numpy().copy() for _ in range(4)]

    for a, b in zip(run("cpu"), run("webgpu")):
        np.testing.assert_array_equal(a, b)


def test_to_between_cpu_and_webgpu_keeps_gradients_flowing() -> None:
    rng = np.random.default_rng(0)
    w0, x0 = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((2, 4)).astype(np.float32)
    w = Tensor(w0, requires_grad=True, device="cpu")
    h = (Tensor(x0, device="webgpu") @ w.to("webgpu")).tanh()  # computed on the GPU
    print(h.numpy())  # read there, then differentiate back to the cpu leaf
    loss = (h.to("cpu") ** 2).sum()
    loss.backward()
    tw = torch.tensor(w0, requires_grad=True)
    tloss = ((torch.tensor(x0) @ tw).tanh() ** 2).sum()
    tloss.backward()
    np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-5)
    assert w.grad is not None and w.grad.device == "cpu"
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-6)  # type: ignore[union-attr]


def test_dropout_training_matches_on_cpu_and_webgpu() -> None:
    """nanogpt with dropout: the same masks on both backends, so the same losses (to float rounding)."""
    text = shared_data_dir(__file__) / "tinyshakespeare" / "input.txt"  # the pinned copy beside the repository
    config = {**nanogpt.DEFAULTS, **nanogpt.PRESETS["tiny"], "dropout": 0.2, "data": str(text)}
    losses = {}
    for device in ("cpu", "webgpu"):
        trainer = nanogpt.build(config, device)
        losses[device] = [trainer.step(i) for i in range(4)]
    np.testing.assert_allclose(losses["webgpu"], losses["cpu"], rtol=1e-3)

"""The WGSL kernel shapes the heuristic makes (flat, a workgroup per row or output, staged tiles) on shapes
that select each, against numpy."""

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
    """What each compiled kernel is: "tile" (operands staged in workgroup memory), "group" (a reduction
    split across a workgroup) or "flat", read from its opts."""
    kinds = set()
    for p in runner("webgpu").programs.values():
        opts = p.kernel.strategy
        kinds.add("tile" if "STAGE" in opts else "group" if "GROUP" in opts else "flat")
    return kinds


@pytest.fixture(autouse=True)
def _adapter() -> None:
    require_adapter(pytest.fail, pytest.skip)


@pytest.mark.parametrize("m,k,n", [(100, 70, 130), (64, 16, 32), (257, 33, 129), (1024, 64, 1030)])
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
    np.testing.assert_allclose(x.amax(-1).numpy(), x.numpy().max(-1))
    e = np.exp(x.numpy() - x.numpy().max(-1, keepdims=True))
    np.testing.assert_allclose(x.softmax(-1).numpy(), e / e.sum(-1, keepdims=True), rtol=1e-4, atol=1e-6)
    assert "group" in strategies()


def test_full_reduction_of_a_large_tensor() -> None:
    x = t(300, 300)
    np.testing.assert_allclose(x.sum().numpy(), x.numpy().sum(), rtol=1e-4)


def test_group_kernel_with_several_reductions() -> None:
    """A gradient norm: several full reductions in one tiny-output kernel share one workgroup each."""
    x, y = t(65, 384), t(384, 100)
    norm = (x.square().sum() + y.square().sum()).sqrt()
    ref = np.sqrt((x.numpy().astype(np.float64) ** 2).sum() + (y.numpy().astype(np.float64) ** 2).sum())
    np.testing.assert_allclose(norm.numpy(), ref, rtol=1e-5)
    both = x.amax(-1) + x.sum(-1)
    np.testing.assert_allclose(both.numpy(), x.numpy().max(-1) + x.numpy().sum(-1), rtol=1e-4, atol=1e-4)


def test_contraction_over_several_reduce_ranges() -> None:
    """A weight gradient sums over batch and time: both ranges form the tile's k."""
    a, g = t(4, 32, 48), t(4, 32, 40)
    out = (a.reshape(4, 32, 48, 1) * g.reshape(4, 32, 1, 40)).sum((0, 1))
    ref = np.einsum("btm,btn->mn", a.numpy().astype(np.float64), g.numpy().astype(np.float64))
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4)
    assert "tile" in strategies()


@pytest.mark.parametrize("c_in,c_out,size", [(16, 32, 8), (3, 32, 16)], ids=["small-image", "three-channels"])
def test_convolution_gradients_are_tiled(c_in: int, c_out: int, size: int) -> None:
    """A stride-1 convolution's input gradient is a convolution again (its own gradient rule): with a small
    image's y and x JOINed into a tile's rows it is tiled like the forward, and a 3-channel weight gradient's
    27 columns get a narrow tile. Forward and both gradients against torch."""
    import torch

    import anneal.nn.functional as AF

    xa = rng.standard_normal((4, c_in, size, size)).astype(np.float32)
    wa = rng.standard_normal((c_out, c_in, 3, 3)).astype(np.float32)
    up = rng.standard_normal((4, c_out, size, size)).astype(np.float32)
    runner("webgpu").programs.clear()
    x = Tensor(xa, device="webgpu", requires_grad=True)
    w = Tensor(wa, device="webgpu", requires_grad=True)
    y = AF.conv2d(x, w, padding=1)
    (y * Tensor(up, device="webgpu")).sum().backward()
    tx, tw = torch.tensor(xa, requires_grad=True), torch.tensor(wa, requires_grad=True)
    ty = torch.nn.functional.conv2d(tx, tw, padding=1)
    (ty * torch.tensor(up)).sum().backward()
    assert x.grad is not None and w.grad is not None and tx.grad is not None and tw.grad is not None
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-3)
    tiles = [p.kernel.strategy for p in runner("webgpu").programs.values() if "STAGE" in p.kernel.strategy]
    assert len(tiles) >= (3 if c_in >= 16 else 1), tiles  # forward, input and weight gradients
    if c_in >= 16:
        assert sum("JOIN" in s for s in tiles) >= 2, tiles  # the forward's and the input gradient's rows


def _kernels_of(outputs: list[Tensor]) -> list:
    sched, _ = runner("webgpu").scheduler.schedule([o.uop for o in outputs])
    return list(sched.kernels)


def _stored_size(kernel: object) -> int:
    store = next(n for n in kernel.ast.toposort() if n.op.name == "STORE")  # type: ignore[attr-defined]
    return int(store.src[1].vmax) + 1


def test_an_embedding_gradient_is_split_over_tokens_but_its_lookup_stays_a_load() -> None:
    from anneal import nn

    vocab, dim, tokens = 65, 64, 8192
    ids = rng.integers(0, vocab, tokens)
    emb = nn.Embedding(vocab, dim, device="webgpu")
    x = Tensor(ids, device="webgpu")
    g = rng.standard_normal((tokens, dim)).astype(np.float32)
    out = emb(x)
    (out * Tensor(g, device="webgpu")).sum().backward()
    kernels = _kernels_of([emb.weight.grad, out])
    # the gradient: partial sums over slices of tokens, then their sum; the lookup: no sum at all
    sizes = sorted(_stored_size(k) for k in kernels)
    assert len(kernels) == 3 and sizes[0] == vocab * dim and sizes[1] > vocab * dim, sizes
    lookup = next(k for k in kernels if _stored_size(k) == tokens * dim)
    assert "REDUCE" not in {n.op.name for n in lookup.ast.toposort()}
    ref = np.zeros((vocab, dim), np.float32)
    np.add.at(ref, ids, g)
    np.testing.assert_allclose(emb.weight.grad.numpy(), ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out.numpy(), emb.weight.numpy()[ids])


def test_a_lookup_of_tokens_sliced_from_a_window_is_not_split() -> None:
    # GPT-2's inputs, window[:, :-1]: the lookup reshapes its (2, 64, V) one-hot to (128, V), whose flat index names
    # the class range c syntactically ((t * V + c) // V); a ragged split over the classes then made it a contraction
    from anneal import nn

    vocab, dim = 9001, 32
    window = rng.integers(0, vocab, (2, 65))
    emb = nn.Embedding(vocab, dim, device="webgpu")
    out = emb(Tensor(window, device="webgpu")[:, :-1])
    kernels = _kernels_of([out])
    assert len(kernels) == 1 and "REDUCE" not in {n.op.name for n in kernels[0].ast.toposort()}
    np.testing.assert_array_equal(out.numpy(), emb.weight.numpy()[window[:, :-1]])


def test_a_three_channel_input_gradient_computes_its_channels_from_the_same_loads() -> None:
    # the upstream gradient (64 channels, 9 windows) does not vary with the 3 input channels: one invocation
    # computes all three from one read of it (UPCAST of the channel range), where each channel read it again
    import torch

    import anneal.nn.functional as AF

    x, w = (
        rng.standard_normal((32, 3, 32, 32)).astype(np.float32),
        rng.standard_normal((64, 3, 3, 3)).astype(np.float32),
    )
    g = rng.standard_normal((32, 64, 32, 32)).astype(np.float32)
    a = Tensor(x, device="webgpu", requires_grad=True)
    AF.conv2d(a, Tensor(w, device="webgpu"), padding=1).backward(Tensor(g, device="webgpu"))
    backend = runner("webgpu").backend
    opts = [backend.plan(k.ast)[1] for k in _kernels_of([a.grad])]  # type: ignore[list-item]
    assert any(o.op.name == "UPCAST" and o.amount == 3 for k in opts for o in k), opts
    ta = torch.tensor(x, requires_grad=True)
    torch.nn.functional.conv2d(ta, torch.tensor(w), padding=1).backward(torch.tensor(g))
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-4, atol=1e-3)  # type: ignore[union-attr]

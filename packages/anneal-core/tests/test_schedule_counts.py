"""Kernel-count regression baselines (like tinygrad's check_schedule), with values checked.

The counts are the fusion contract: a change that splits a fused kernel fails here.
Baselines (numpy backend): matmul+bias+relu 1, softmax 1, layernorm 1, an MLP forward
one kernel per layer. Softmax and layernorm were 3 kernels each until row kernels (a reduction
read through a broadcast, fused with its reader: anneal_schedule.analysis.row_kernel); an
improvement: the row is read from memory once instead of three times.
"""

from __future__ import annotations

import numpy as np
import pytest

from anneal import Tensor
from anneal.realize import runner

rng = np.random.default_rng(0)


def t(*shape: int) -> Tensor:
    return Tensor(rng.standard_normal(shape).astype(np.float32), device="cpu")


def kernels_for(out: Tensor) -> int:
    sched, _ = runner("cpu").scheduler.schedule([out.uop])
    return len(sched.kernels)


def test_matmul_bias_relu_is_one_kernel() -> None:
    x, w, b = t(8, 32), t(32, 16), t(16)
    out = (x @ w + b).relu()
    assert kernels_for(out) == 1
    np.testing.assert_allclose(out.numpy(), np.maximum(x.numpy() @ w.numpy() + b.numpy(), 0), rtol=1e-5, atol=1e-5)


def test_softmax_is_one_kernel() -> None:
    x = t(4, 10)
    out = x.softmax(-1)
    assert kernels_for(out) == 1  # was 3 (max, sum, normalize) before row kernels
    e = np.exp(x.numpy() - x.numpy().max(-1, keepdims=True))
    np.testing.assert_allclose(out.numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_layernorm_is_one_kernel() -> None:
    x = t(6, 20)
    mu = x.mean(-1, keepdim=True)
    out = (x - mu) / ((x - mu).square().mean(-1, keepdim=True) + 1e-5).sqrt()
    assert kernels_for(out) == 1  # was 3 (mean, variance, normalize) before row kernels
    xn = x.numpy()
    ref = (xn - xn.mean(-1, keepdims=True)) / np.sqrt(xn.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-5)


def test_log_softmax_and_its_gradient_are_one_kernel_each() -> None:
    x = Tensor(rng.standard_normal((8, 16)).astype(np.float32), device="cpu", requires_grad=True)
    out = x.log_softmax(-1)
    assert kernels_for(out) == 1  # was 2
    g = t(8, 16)
    (out * g).sum().backward()
    assert x.grad is not None
    assert kernels_for(x.grad) == 1  # g - softmax(x) * sum(g): the sum is read through a broadcast too
    xn = x.numpy()
    sm = np.exp(xn - xn.max(-1, keepdims=True))
    sm /= sm.sum(-1, keepdims=True)
    np.testing.assert_allclose(x.grad.numpy(), g.numpy() - sm * g.numpy().sum(-1, keepdims=True), rtol=1e-4, atol=1e-5)


def test_column_softmax_keeps_three_kernels() -> None:
    x = t(4, 10)
    out = x.softmax(0)  # a column's elements are not contiguous: no row kernel
    assert kernels_for(out) == 3
    e = np.exp(x.numpy() - x.numpy().max(0, keepdims=True))
    np.testing.assert_allclose(out.numpy(), e / e.sum(0, keepdims=True), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_mlp_forward_one_kernel_per_layer(layers: int) -> None:
    sizes = [16, 32, 24, 8][: layers + 1]
    x = t(5, sizes[0])
    ws = [(t(a, b), t(b)) for a, b in zip(sizes, sizes[1:])]
    h, ref = x, x.numpy()
    for i, (w, b) in enumerate(ws):
        h = h @ w + b
        ref = ref @ w.numpy() + b.numpy()
        if i < layers - 1:
            h, ref = h.relu(), np.maximum(ref, 0)
    assert kernels_for(h) == layers
    np.testing.assert_allclose(h.numpy(), ref, rtol=1e-4, atol=1e-5)


def test_elementwise_chain_is_one_kernel() -> None:
    x, y = t(3, 4), t(4)
    out = ((x * 2 + y).exp() - x.T.T).sigmoid()
    assert kernels_for(out) == 1
    ref = 1 / (1 + np.exp(-(np.exp(x.numpy() * 2 + y.numpy()) - x.numpy())))
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5, atol=1e-6)


def test_reduce_used_twice_at_one_place_fuses_once() -> None:
    x = t(4, 8)
    s = x.sum(-1)
    out = s * 2 + s.exp()
    sched, _ = runner("cpu").scheduler.schedule([out.uop])
    assert len(sched.kernels) == 1
    assert sum(n.op.name == "REDUCE" for n in sched.kernels[0].ast.toposort()) == 1
    ref = x.numpy().sum(-1)
    np.testing.assert_allclose(out.numpy(), ref * 2 + np.exp(ref), rtol=1e-5, atol=1e-5)


def test_reduce_read_at_two_places_gets_its_own_kernel() -> None:
    x = t(4, 8)
    s = x.sum(-1)
    out = s + s.flip(0)
    assert kernels_for(out) == 2  # never recomputed per reader
    ref = x.numpy().sum(-1)
    np.testing.assert_allclose(out.numpy(), ref + ref[::-1], rtol=1e-5, atol=1e-5)


def test_schedule_cache_hit_on_new_data() -> None:
    sched = runner("cpu").scheduler
    x1, w1 = t(3, 5), t(5, 2)
    (x1 @ w1).relu().numpy()
    hits = sched.stats.hits
    x2, w2 = t(3, 5), t(5, 2)
    out = (x2 @ w2).relu()
    np.testing.assert_allclose(out.numpy(), np.maximum(x2.numpy() @ w2.numpy(), 0), rtol=1e-5, atol=1e-6)
    assert sched.stats.hits == hits + 1


def test_realized_subgraph_is_reused() -> None:
    x = t(4, 4)
    y = (x @ x).contiguous()
    y.realize()
    before = runner("cpu").stats.kernels_run
    z = y + 1
    z.realize()
    assert runner("cpu").stats.kernels_run - before == 1  # y is read, not recomputed
    np.testing.assert_allclose(z.numpy(), x.numpy() @ x.numpy() + 1, rtol=1e-5, atol=1e-5)


def _unfused(outputs: list) -> int:
    """What an eager framework would launch: one kernel per compute op (no movement, no constants)."""
    from anneal_ir import GroupOp, Ops, UOp

    sink = UOp(Ops.SINK, src=tuple(outputs))
    compute = GroupOp.Elementwise | {Ops.REDUCE_AXIS, Ops.ASSIGN}
    return sum(1 for n in sink.toposort() if n.op in compute)


def _step_kernels(optimizer_cls: type, **kw: float) -> tuple[int, int]:
    """Kernels of one MLP training step (forward + backward + update, one schedule) vs unfused ops."""
    import anneal.realize as realize_module

    w1 = Tensor(rng.standard_normal((16, 32)).astype(np.float32), device="cpu", requires_grad=True)
    w2 = Tensor(rng.standard_normal((32, 4)).astype(np.float32), device="cpu", requires_grad=True)
    opt = optimizer_cls([w1, w2], **kw)
    seen: list = []
    realize = realize_module.realize

    def capturing(device: str, uops: list, *rest: object) -> list:
        seen[:] = list(uops)
        return realize(device, uops, *rest)  # type: ignore[arg-type]

    realize_module.realize = capturing  # type: ignore[assignment]
    try:
        for _ in range(2):  # the second step updates its optimizer state in place, as every later step
            opt.zero_grad()
            loss = ((t(8, 16) @ w1).relu() @ w2).square().mean()
            loss.backward()
            before = runner("cpu").stats.kernels_run
            opt.step()
            fused = runner("cpu").stats.kernels_run - before
    finally:
        realize_module.realize = realize  # type: ignore[assignment]
    return fused, _unfused(seen)


def test_mlp_training_step_kernel_counts() -> None:
    from anneal.optim import SGD

    fused, unfused = _step_kernels(SGD, lr=0.1)
    assert (fused, unfused) == (8, 27)  # baseline on the numpy backend; unfused: one kernel per op


def test_adam_step_kernel_counts() -> None:
    from anneal.optim import Adam

    fused, unfused = _step_kernels(Adam, lr=1e-3)
    # numpy backend: one kernel advances the step count, one computes the live loss before the update (it reads
    # the parameters the step overwrites), one the second layer's weight gradient, which the two moments and the live
    # loss read (16 before: each of the three computed that contraction again); unfused: one kernel per op
    assert (fused, unfused) == (17, 70)


def _kernels_of(outputs: list[Tensor]) -> list:
    sched, _ = runner("cpu").scheduler.schedule([o.uop for o in outputs])
    return list(sched.kernels)


def _ops_in(kernel: object) -> set[str]:
    return {n.op.name for n in kernel.ast.toposort()}  # type: ignore[attr-defined]


def _stored_size(kernel: object) -> int:
    store = next(n for n in kernel.ast.toposort() if n.op.name == "STORE")  # type: ignore[attr-defined]
    return int(store.src[1].vmax) + 1


def test_gelu_backward_is_the_epilogue_of_the_contraction_it_reads() -> None:
    import torch

    # x @ w1 -> gelu -> @ w2; the GELU's backward (dZ = dH * gelu'(z)) is read by both gradients of the first layer,
    # broadcast over 256 > a tile's 128 columns: stored once by the kernel computing dH, not recomputed per tile
    x, w1, w2, g = t(48, 256), t(256, 512), t(512, 200), t(48, 200)
    for p in (x, w1, w2):
        p.requires_grad = True
    ((x @ w1).gelu() @ w2 * g).sum().backward()
    kernels = _kernels_of([x.grad, w1.grad, w2.grad])
    by_size = {_stored_size(k): k for k in kernels}
    assert "ERF" not in _ops_in(by_size[48 * 256]) and "ERF" not in _ops_in(by_size[256 * 512])  # dX, dW1
    epilogue = [k for k in kernels if {"ERF", "REDUCE"} <= _ops_in(k) and _stored_size(k) == 48 * 512]
    assert len(epilogue) == 1  # dZ: the contraction dH = g @ w2^T, then the GELU's backward
    tx, tw1, tw2 = (torch.tensor(p.numpy(), requires_grad=True) for p in (x, w1, w2))
    (torch.nn.functional.gelu(tx @ tw1) @ tw2 * torch.tensor(g.numpy())).sum().backward()
    for ours, theirs in ((x, tx), (w1, tw1), (w2, tw2)):
        want = theirs.grad.numpy()  # sums of hundreds of products: float32 error relative to the largest value
        np.testing.assert_allclose(ours.grad.numpy(), want, rtol=1e-4, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("vocab, buffer", [(8192, True), (1024, False)], ids=["64 tiles", "8 tiles"])
def test_a_layer_norm_staged_over_many_column_tiles_is_a_buffer(vocab: int, buffer: bool) -> None:
    import torch

    from anneal.nn import functional as F

    # a language model's head: the final layer norm, read by the logits over a vocabulary of 64 tiles of 128 columns,
    # would be computed once per tile in the contraction's staged operand; over 8 tiles it stays that prologue
    h, w, g, b = t(16, 64), t(vocab, 64), t(64), t(64)
    logits = F.layer_norm(h, (64,), g, b) @ w.T
    kernels = _kernels_of([logits])
    assert any(_stored_size(k) == 16 * 64 for k in kernels) == buffer
    (head,) = [k for k in kernels if _stored_size(k) == 16 * vocab]
    assert ("SQRT" in _ops_in(head)) != buffer
    th, tw, tg, tb = (torch.tensor(p.numpy()) for p in (h, w, g, b))
    want = torch.nn.functional.layer_norm(th, (64,), tg, tb) @ tw.T
    np.testing.assert_allclose(logits.numpy(), want.numpy(), rtol=1e-4, atol=1e-4)


def test_a_reduction_read_by_two_kernels_is_computed_once() -> None:
    # the contraction's one reader (its scaling) is read by the kernels of u and v: before, each of them computed the
    # whole contraction again
    a, b = t(32, 64), t(64, 16)
    scaled = (a @ b) * 0.5
    u, v = scaled.exp(), scaled.square()
    kernels = _kernels_of([u, v])
    contractions = [k for k in kernels if sum(n.op.name == "REDUCE" for n in k.ast.toposort()) == 1 and
                    _stored_size(k) == 32 * 16]  # fmt: skip
    assert len(kernels) == 3 and len(contractions) == 1
    ref = a.numpy() @ b.numpy() * 0.5
    np.testing.assert_allclose(u.numpy(), np.exp(ref), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(v.numpy(), ref**2, rtol=1e-4, atol=1e-4)

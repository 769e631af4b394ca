"""Reading a value does not cut the graph: the habits of PyTorch users, checked against torch.

A tensor whose value was read (item, numpy, realize, print) keeps the graph that computed it, so
backward() afterwards differentiates through it and reuses what was computed. In-place updates
(optimizer steps, assign) keep PyTorch's meaning too: a lazy value that reads a parameter is computed
before the parameter is overwritten, and a graph built after an update never reads a stale result.
Runs on ANNEAL_DEVICE (cpu by default; the webgpu nox session runs it on the WebGPU backend).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from devices import DEV

import anneal
import anneal.nn.functional as F
from anneal import Tensor, optim
from anneal.nn.modules import Linear, Module, Sequential, Tanh
from anneal.realize import as_buffer
from anneal_ir import Ops

RTOL = 1e-5


def N(*shape: int, seed: int = 0) -> np.ndarray:  # noqa: N802 - reads like a type
    return np.random.default_rng(seed + 17 * len(shape) + sum(shape)).standard_normal(shape).astype(np.float32)


def test_item_then_backward() -> None:
    b = Tensor(N(3), requires_grad=True, device=DEV)
    tb = torch.tensor(N(3), requires_grad=True)
    loss, tloss = (b * b).sum(), (tb * tb).sum()
    np.testing.assert_allclose(loss.item(), tloss.item(), rtol=RTOL)
    loss.backward()
    tloss.backward()
    assert b.grad is not None and tb.grad is not None
    np.testing.assert_allclose(b.grad.numpy(), tb.grad.numpy(), rtol=RTOL)


def test_numpy_of_an_intermediate_then_backward() -> None:
    a = Tensor(N(4), requires_grad=True, device=DEV)
    ta = torch.tensor(N(4), requires_grad=True)
    y, ty = (a * 3).exp(), (ta * 3).exp()
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=RTOL)
    y.sum().backward()
    ty.sum().backward()
    assert a.grad is not None and ta.grad is not None
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=RTOL)


def test_print_realize_and_repr_do_not_cut_the_graph(capsys: pytest.CaptureFixture[str]) -> None:
    x = Tensor(N(2, 3), requires_grad=True, device=DEV)
    h = (x @ Tensor(N(3, 2, seed=1), device=DEV)).tanh()
    h.realize()
    print(h, h.numpy())
    assert capsys.readouterr().out
    (h * h).sum().backward()
    tx = torch.tensor(N(2, 3), requires_grad=True)
    th = (tx @ torch.tensor(N(3, 2, seed=1))).tanh()
    (th * th).sum().backward()
    assert x.grad is not None and tx.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_a_read_value_is_reused_by_the_backward() -> None:
    """The exp that was computed for the read is what the gradient multiplies by: its buffer, not a recomputation."""
    a = Tensor(N(4), requires_grad=True, device=DEV)
    y = (a * 3).exp()
    y.realize()
    assert y.uop.op is Ops.REALIZED and as_buffer(y.uop) is not None
    (g,) = y.sum().gradient(a)
    assert y.uop.src[0] in g.uop.toposort()  # the gradient graph reads y's buffer
    assert y.uop.src[1] not in g.uop.toposort()  # and never recomputes y
    np.testing.assert_allclose(g.numpy(), 3 * np.exp(3 * N(4)), rtol=RTOL)


def test_values_without_grad_are_plain_buffers() -> None:
    """Only what autograd may still need keeps its graph: other tensors read their buffer alone."""
    y = Tensor(N(4), device=DEV).exp()
    y.realize()
    assert y.uop.op is not Ops.REALIZED and as_buffer(y.uop) is not None


def test_read_twice_and_backward_twice_accumulate_like_torch() -> None:
    w = Tensor(N(3), requires_grad=True, device=DEV)
    tw = torch.tensor(N(3), requires_grad=True)
    for k in range(2):
        out, tout = (w.sin() * (k + 1)).sum(), (tw.sin() * (k + 1)).sum()
        np.testing.assert_allclose(out.item(), tout.item(), rtol=RTOL)
        out.backward()
        tout.backward()
    assert w.grad is not None and tw.grad is not None
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=RTOL)


def test_a_graph_built_after_an_update_is_not_read_stale() -> None:
    """The same expression before and after an in-place write is the same graph node; the second must be
    computed anew, while a tensor realized before the write keeps its value."""
    x = Tensor(np.ones(4, np.float32), device=DEV)
    y = x * 2
    w = y + 1  # holds y's graph
    np.testing.assert_array_equal(y.numpy(), [2, 2, 2, 2])
    x.assign(x + 1).realize()
    np.testing.assert_array_equal((x * 2).numpy(), [4, 4, 4, 4])
    np.testing.assert_array_equal(y.numpy(), [2, 2, 2, 2])
    assert w.shape == (4,)


def test_a_lazy_loss_read_after_the_step_is_the_loss_the_step_used() -> None:
    """As in PyTorch, where the forward ran before step(): the loss, the logits and a gradient norm read after
    step() hold their pre-step values."""
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((8, 3)).astype(np.float32), rng.standard_normal((8, 2)).astype(np.float32)
    anneal.manual_seed(0)
    model = Linear(3, 2, device=DEV)
    tmodel = torch.nn.Linear(3, 2)
    with torch.no_grad():
        tmodel.weight.copy_(torch.tensor(model.weight.numpy()))
        tmodel.bias.copy_(torch.tensor(model.bias.numpy()))
    opt, topt = optim.SGD(model.parameters(), lr=0.5), torch.optim.SGD(tmodel.parameters(), lr=0.5)
    out = model(Tensor(x, device=DEV))
    loss = (out - Tensor(y, device=DEV)).square().mean()
    loss.backward()
    norm = optim.clip_grad_norm_(model.parameters(), 0.1)
    opt.step()
    tout = tmodel(torch.tensor(x))
    tloss = (tout - torch.tensor(y)).square().mean()
    tloss.backward()
    tnorm = torch.nn.utils.clip_grad_norm_(tmodel.parameters(), 0.1)
    topt.step()
    np.testing.assert_allclose(loss.item(), tloss.item(), rtol=RTOL)
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=RTOL, atol=1e-6)
    np.testing.assert_allclose(norm.item(), tnorm.item(), rtol=RTOL)
    np.testing.assert_allclose(model.weight.numpy(), tmodel.weight.detach().numpy(), rtol=RTOL, atol=1e-6)


def test_a_view_of_a_parameter_sees_the_update_like_a_torch_view() -> None:
    w = Tensor(N(2, 3), requires_grad=True, device=DEV)
    view = w.T
    opt = optim.SGD([w], lr=1.0)
    (w * 2).sum().backward()
    opt.step()
    np.testing.assert_allclose(view.numpy(), (N(2, 3) - 2).T, rtol=RTOL)


class MLP(Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = Linear(4, 16, device=DEV), Linear(16, 1, device=DEV)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.relu(self.fc1(x)))


def torch_twin(model: MLP) -> torch.nn.Sequential:
    twin = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    with torch.no_grad():
        for (_, p), tp in zip(model.named_parameters(), twin.parameters()):
            tp.copy_(torch.tensor(p.numpy()))
    return twin


def test_training_an_mlp_while_printing_the_loss_before_backward(capsys: pytest.CaptureFixture[str]) -> None:
    """The loop every PyTorch tutorial writes: forward, print loss.item(), backward, step; against torch."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((32, 4)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32)).astype(np.float32)
    anneal.manual_seed(1)
    model = MLP()
    tmodel = torch_twin(model)
    opt, topt = optim.Adam(model.parameters(), lr=0.05), torch.optim.Adam(tmodel.parameters(), lr=0.05)
    losses, tlosses = [], []
    for _ in range(25):
        opt.zero_grad()
        loss = F.mse_loss(model(Tensor(x, device=DEV)), Tensor(y, device=DEV))
        print(f"loss {loss.item():.4f}")
        losses.append(loss.item())
        loss.backward()
        opt.step()
        topt.zero_grad()
        tloss = torch.nn.functional.mse_loss(tmodel(torch.tensor(x)), torch.tensor(y))
        tlosses.append(tloss.item())
        tloss.backward()
        topt.step()
    assert capsys.readouterr().out.count("loss ") == 25
    np.testing.assert_allclose(losses, tlosses, rtol=1e-4)
    assert losses[-1] < 0.5 * losses[0]


def test_a_module_stays_trainable_after_its_output_is_read() -> None:
    model = Sequential(Linear(3, 3, device=DEV), Tanh())
    out = model(Tensor(N(2, 3), device=DEV))
    out.numpy()
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters())

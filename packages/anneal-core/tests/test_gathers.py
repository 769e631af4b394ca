"""One-hot reductions become loads (anneal_schedule.gather): embedding, gather and cross entropy's picked logit
read their one term instead of summing over the whole class dim, with torch's values and gradients."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as TF
from devices import DEV

import anneal.nn.functional as AF
from anneal import Tensor
from anneal.realize import runner
from anneal_ir import Ops
from anneal_schedule.gather import fold_one_hot_sum


def kernels_of(*ts: Tensor) -> list:
    sched, _, _ = runner(DEV).scheduler.schedule_bound([t.uop for t in ts])
    return list(sched.kernels)


def one_hot_sums(kernels: list) -> int:
    """How many sums over a one-hot select the kernels still compute."""
    return sum(fold_one_hot_sum(n) is not None for k in kernels for n in k.ast.toposort() if n.op is Ops.REDUCE)


def compared_sums(kernels: list) -> int:
    """How many sums compare their own range for equality (a one-hot summed, whatever its form)."""
    return sum(
        any(c.op is Ops.CMPEQ and any(r in c.toposort() for r in n.src[1:]) for c in n.src[0].toposort())
        for k in kernels
        for n in k.ast.toposort()
        if n.op is Ops.REDUCE
    )


def test_an_embedding_lookup_is_a_load() -> None:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((1000, 16)).astype(np.float32)
    idx = rng.integers(0, 1000, (3, 5))
    out = AF.embedding(Tensor(idx, device=DEV), Tensor(w, device=DEV))
    assert one_hot_sums(kernels_of(out)) == 0  # a load, not a sum over the 1000 rows
    np.testing.assert_array_equal(out.numpy(), w[idx])


def test_a_lookup_next_to_inf_and_nan_rows_is_exact() -> None:
    # the one-hot product summed 0 * inf = NaN from the other rows; torch reads the row alone
    w = np.array([[1.0, 2.0], [np.inf, -np.inf], [np.nan, 3.0]], np.float32)
    idx = np.array([0, 0, 2, 1])
    got = AF.embedding(Tensor(idx, device=DEV), Tensor(w, device=DEV)).numpy()
    np.testing.assert_array_equal(got, TF.embedding(torch.tensor(idx), torch.tensor(w)).numpy())


def test_gather_is_a_load_with_torchs_values_and_gradient() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 300)).astype(np.float32)
    idx = rng.integers(0, 300, (4, 7))
    a = Tensor(x, device=DEV, requires_grad=True)
    out = a.gather(1, Tensor(idx, device=DEV))
    assert one_hot_sums(kernels_of(out)) == 0
    t = torch.tensor(x, requires_grad=True)
    ref = t.gather(1, torch.tensor(idx))
    np.testing.assert_array_equal(out.numpy(), ref.detach().numpy())
    g = rng.standard_normal(ref.shape).astype(np.float32)
    out.backward(Tensor(g, device=DEV))
    ref.backward(torch.tensor(g))
    np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=1e-6, atol=1e-6)  # type: ignore[union-attr]


def test_cross_entropy_reads_the_picked_logit() -> None:
    rng = np.random.default_rng(2)
    logits = rng.standard_normal((64, 5000)).astype(np.float32)
    target = rng.integers(0, 5000, 64)
    target[3] = -100  # ignored
    a = Tensor(logits, device=DEV, requires_grad=True)
    loss = AF.cross_entropy(a, Tensor(target, device=DEV))
    assert one_hot_sums(kernels_of(loss)) == 0  # the classes are summed by logsumexp alone
    t = torch.tensor(logits, requires_grad=True)
    ref = TF.cross_entropy(t, torch.tensor(target))
    np.testing.assert_allclose(loss.item(), ref.item(), rtol=1e-5)
    loss.backward()
    ref.backward()
    np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-7)  # type: ignore[union-attr]


def test_an_index_computed_in_the_kernel_is_gathered() -> None:
    # max(dim)'s values are gathered at the argmax the same kernel (or the one before it) computes
    x = np.array([[3, 9, 9, 1], [-5, -2, -7, -2]], np.int64)
    got = Tensor(x, device=DEV).max(1)
    assert got.values.tolist() == [9, -2] and got.indices.tolist() == [1, 1]


def test_cross_entropys_gradient_reads_the_picked_class() -> None:
    # the gradient's sum over the classes of -where(target == class, -1/n, 0) is the picked term: no sum over 5000
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((32, 5000)).astype(np.float32)
    target = rng.integers(0, 5000, 32)
    a = Tensor(logits, device=DEV, requires_grad=True)
    AF.cross_entropy(a, Tensor(target, device=DEV)).backward()
    assert compared_sums(kernels_of(a.grad)) == 0  # type: ignore[arg-type]
    t = torch.tensor(logits, requires_grad=True)
    TF.cross_entropy(t, torch.tensor(target)).backward()
    np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-7)  # type: ignore[union-attr]

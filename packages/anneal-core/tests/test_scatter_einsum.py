"""Issue 18's scatter family, masked_select, nonzero, einsum, unfold and prod(dtype=) against torch: values,
dtypes, gradients read after a value, and the errors torch raises."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from devices import DEV

import anneal
from anneal import Tensor

RNG = np.random.default_rng(3)
BASE = RNG.standard_normal((3, 5)).astype(np.float32)
INDEX = np.array([[0, 1, 2, 0, 0], [2, 0, 0, 1, 2]], np.int64)
SRC = RNG.standard_normal((2, 5)).astype(np.float32)


def ours(a: Any) -> Tensor:
    return Tensor(a, device=DEV)


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(reduce: str, include_self: bool) -> None:
    got = ours(BASE).scatter_reduce(0, ours(INDEX), ours(SRC), reduce, include_self=include_self)
    want = torch.tensor(BASE).scatter_reduce(0, torch.tensor(INDEX), torch.tensor(SRC), reduce,
                                             include_self=include_self)  # fmt: skip
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)


def test_scatter_and_scatter_add() -> None:
    unique = np.array([[0, 1, 2, 0]], np.int64)  # torch leaves duplicate writes' winner open
    want = torch.tensor(BASE).scatter(0, torch.tensor(unique), torch.tensor(SRC))
    np.testing.assert_array_equal(ours(BASE).scatter(0, ours(unique), ours(SRC)).numpy(), want.numpy())
    cols = np.array([[1], [3], [0]], np.int64)
    np.testing.assert_array_equal(ours(BASE).scatter(1, ours(cols), 2.5).numpy(),
                                  torch.tensor(BASE).scatter(1, torch.tensor(cols), 2.5).numpy())  # fmt: skip
    np.testing.assert_allclose(ours(BASE).scatter_add(0, ours(INDEX), ours(SRC)).numpy(),
                               torch.tensor(BASE).scatter_add(0, torch.tensor(INDEX), torch.tensor(SRC)).numpy(),
                               rtol=1e-6)  # fmt: skip
    np.testing.assert_allclose(ours(BASE).scatter(0, ours(INDEX), ours(SRC), reduce="multiply").numpy(),
                               torch.tensor(BASE).scatter(0, torch.tensor(INDEX), torch.tensor(SRC),
                                                          reduce="multiply").numpy(), rtol=1e-6)  # fmt: skip
    ints = np.arange(15, dtype=np.int64).reshape(3, 5)
    got = ours(ints).scatter_reduce(0, ours(INDEX), ours(INDEX * 7), "amax")
    assert got.dtype.name == "int64"
    want = torch.tensor(ints).scatter_reduce(0, torch.tensor(INDEX), torch.tensor(INDEX * 7), "amax")
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_scatter_gradients() -> None:
    x, s = ours(BASE).requires_grad_(), ours(SRC).requires_grad_()
    tx, ts = torch.tensor(BASE, requires_grad=True), torch.tensor(SRC, requires_grad=True)
    out = x.scatter_reduce(0, ours(INDEX), s, "sum")
    tout = tx.scatter_reduce(0, torch.tensor(INDEX), ts, "sum")
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-6)
    weights = RNG.standard_normal((3, 5)).astype(np.float32)
    (out * ours(weights)).sum().backward()
    (tout * torch.tensor(weights)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(s.grad.numpy(), ts.grad.numpy(), rtol=1e-6)


def test_scatter_errors() -> None:
    with pytest.raises(RuntimeError, match="int64 for index"):
        ours(BASE).scatter(0, ours(INDEX.astype(np.float32)), ours(SRC))
    with pytest.raises(RuntimeError, match="index has 1 dims but self has 2"):
        ours(BASE).scatter(0, ours(INDEX[0]), ours(SRC))
    with pytest.raises(RuntimeError, match="reduce argument must be one of"):
        ours(BASE).scatter_reduce(0, ours(INDEX), ours(SRC), "median")
    with pytest.raises(RuntimeError):
        torch.tensor(BASE).scatter_reduce(0, torch.tensor(INDEX), torch.tensor(SRC), "median")


def test_masked_select_and_nonzero() -> None:
    mask = BASE > 0
    np.testing.assert_array_equal(ours(BASE).masked_select(ours(mask)).numpy(),
                                  torch.tensor(BASE).masked_select(torch.tensor(mask)).numpy())  # fmt: skip
    row = np.array([True, False, True, True, False])  # broadcast over the rows
    np.testing.assert_array_equal(ours(BASE).masked_select(ours(row)).numpy(),
                                  torch.tensor(BASE).masked_select(torch.tensor(row)).numpy())  # fmt: skip
    got, want = ours(BASE * mask).nonzero(), torch.tensor(BASE * mask).nonzero()
    assert got.dtype.name == "int64"
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    for g, w in zip(ours(BASE * mask).nonzero(as_tuple=True), torch.tensor(BASE * mask).nonzero(as_tuple=True)):
        np.testing.assert_array_equal(g.numpy(), w.numpy())
    x, tx = ours(BASE).requires_grad_(), torch.tensor(BASE, requires_grad=True)
    x.masked_select(ours(mask)).square().sum().backward()
    tx.masked_select(torch.tensor(mask)).square().sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6)


A, B = RNG.standard_normal((3, 4)).astype(np.float32), RNG.standard_normal((4, 5)).astype(np.float32)
S = RNG.standard_normal((4, 4)).astype(np.float32)
X, Y = RNG.standard_normal((2, 3, 4)).astype(np.float32), RNG.standard_normal((2, 4, 5)).astype(np.float32)
EINSUMS = [("ij,jk->ik", A, B), ("ij,jk", A, B), ("ii->i", S), ("ii", S), ("ij->ji", A), ("...ij,...jk->...ik", X, Y),
           ("bij,bjk->bik", X, Y), ("i,j->ij", A[0], B[0]), ("ij,ij->", A, A), ("bij->", X), ("...j->...", X),
           ("i,i", A[0], A[0]), ("bij,jk", X, B), ("b i j , b j k -> b k i", X, Y)]  # fmt: skip


@pytest.mark.parametrize("case", EINSUMS, ids=[c[0] for c in EINSUMS])
def test_einsum(case: tuple[Any, ...]) -> None:
    equation, *arrays = case
    ins = [ours(a).requires_grad_() for a in arrays]
    tins = [torch.tensor(a, requires_grad=True) for a in arrays]
    got, want = anneal.einsum(equation, *ins), torch.einsum(equation, *tins)
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-5)
    got.square().sum().backward()
    want.square().sum().backward()
    for x, tx in zip(ins, tins):
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_einsum_errors() -> None:
    with pytest.raises(RuntimeError, match="names 2 operands, 1 given"):
        anneal.einsum("ij,jk->ik", ours(A))
    with pytest.raises(RuntimeError, match="'j' is 4 in one operand and 3 in another"):
        anneal.einsum("ij,jk->ik", ours(A), ours(A))
    with pytest.raises(RuntimeError, match="names 'z', in no operand"):
        anneal.einsum("ij->z", ours(A))


@pytest.mark.parametrize("args", [(2, 2, 1), (1, 2, 1), (0, 1, 1), (2, 4, 4), (-1, 1, 3)])
def test_unfold(args: tuple[int, int, int]) -> None:
    x, tx = ours(X).requires_grad_(), torch.tensor(X, requires_grad=True)
    got, want = x.unfold(*args), tx.unfold(*args)
    np.testing.assert_array_equal(got.numpy(), want.detach().numpy())
    got.square().sum().backward()
    want.square().sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6)  # overlapping windows add up
    with pytest.raises(RuntimeError, match="maximum size"):
        x.unfold(2, 5, 1)


def test_prod_is_exact_takes_a_dtype_and_has_a_gradient_at_zero() -> None:
    ints = np.array([[3, -2, 7], [1, 5, 2]], np.int32)
    got = ours(ints).prod(1)
    assert got.dtype.name == "int64" and torch.tensor(ints).prod(1).dtype == torch.int64
    np.testing.assert_array_equal(got.numpy(), torch.tensor(ints).prod(1).numpy())
    assert ours(ints).prod(dtype=anneal.float32).numpy() == torch.tensor(ints).prod(dtype=torch.float32).numpy()
    data = RNG.standard_normal((3, 7)).astype(np.float32)
    data[1, 3] = 0.0
    x, tx = ours(data).requires_grad_(), torch.tensor(data, requires_grad=True)
    np.testing.assert_allclose(x.prod(1).numpy(), tx.prod(1).detach().numpy(), rtol=1e-6)
    x.prod(1).sum().backward()
    tx.prod(1).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5)  # finite at the zero, as torch

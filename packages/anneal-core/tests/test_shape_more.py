"""Issue 18's rearranging ops against torch: diagonal, diag, roll, repeat_interleave, meshgrid, t, std_mean,
linspace, anneal.tensor / from_numpy / __array__: values, dtypes, gradients and error types."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from devices import DEV

import anneal
from anneal import Tensor


def _same(fn: Callable[[Any], Any], x: np.ndarray, grads: bool = True) -> None:
    a, t = Tensor(x, device=DEV, requires_grad=grads), torch.tensor(x, requires_grad=grads)
    ya, yt = fn(a), fn(t)
    assert tuple(ya.shape) == tuple(yt.shape) and ya.dtype.name == str(yt.dtype).removeprefix("torch.")
    np.testing.assert_allclose(ya.numpy(), yt.detach().numpy(), rtol=1e-6, atol=1e-6)
    if grads and yt.numel():
        w = np.random.default_rng(0).uniform(0.5, 1.5, tuple(yt.shape)).astype(np.float32)
        (ya * Tensor(w, device=DEV)).sum().backward()
        (yt * torch.from_numpy(w)).sum().backward()
        assert a.grad is not None and t.grad is not None
        np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=1e-6, atol=1e-6)


X = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4) / 7


@pytest.mark.parametrize("offset", [0, 1, 2, -1, -2, 5])
@pytest.mark.parametrize("dims", [(0, 1), (1, 2), (2, 0), (-1, -2)])
def test_diagonal_matches_torch(offset: int, dims: tuple[int, int]) -> None:
    _same(lambda x: x.diagonal(offset, *dims), X)


@pytest.mark.parametrize("k", [0, 1, -2])
def test_diag_matches_torch(k: int) -> None:
    _same(lambda x: x.diag(k), np.array([1.5, -2.0, 3.0], np.float32))
    _same(lambda x: x.diag(k), X[0])


@pytest.mark.parametrize("shifts, dims", [(1, 0), (-2, 2), ((1, 2), (0, 1)), (5, None), (7, -1)])
def test_roll_matches_torch(shifts: Any, dims: Any) -> None:
    _same(lambda x: x.roll(shifts, dims), X)


@pytest.mark.parametrize("repeats, dim", [(2, 0), (3, 1), (1, -1), (2, None), (0, 1)])
def test_repeat_interleave_matches_torch(repeats: int, dim: int | None) -> None:
    _same(lambda x: x.repeat_interleave(repeats, dim), X)


@pytest.mark.parametrize("repeats, dim", [([1, 0, 3], 1), ([2, 1], 0), ([4], 2), ([0, 0, 0, 2], -1),
                                          (list(range(24)), None), ([2], None)])  # fmt: skip
def test_repeat_interleave_by_a_tensor_of_counts_matches_torch(repeats: list[int], dim: int | None) -> None:
    r = np.array(repeats, np.int64)
    _same(lambda x: x.repeat_interleave(Tensor(r, device=DEV) if isinstance(x, Tensor) else torch.from_numpy(r), dim),
          X)  # fmt: skip


def test_repeat_interleave_errors_are_torchs_types() -> None:
    x, t = Tensor(X, device=DEV), torch.from_numpy(X)
    for bad in (np.array([1, 2], np.int64), np.array([1, -1, 2], np.int64), np.array([1.0, 2.0, 1.0], np.float32)):
        with pytest.raises(RuntimeError):
            t.repeat_interleave(torch.from_numpy(bad), 1)
        with pytest.raises(RuntimeError, match="repeat"):
            x.repeat_interleave(Tensor(bad, device=DEV), 1)


@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("dim", [0, -1])
def test_max_and_min_along_a_dim_of_a_0d_tensor(op: str, dim: int) -> None:
    a, t = Tensor(np.float32(2.5), device=DEV, requires_grad=True), torch.tensor(2.5, requires_grad=True)
    (va, ia), (vt, it) = getattr(a, op)(dim), getattr(t, op)(dim)
    assert va.shape == ia.shape == () and va.item() == vt.item() and ia.item() == it.item() == 0
    assert ia.dtype.name == "int64" and a.argmax(dim).item() == t.argmax(dim).item()
    va.backward()
    vt.backward()
    assert a.grad is not None and t.grad is not None and a.grad.item() == t.grad.item()
    with pytest.raises(IndexError):
        getattr(t, op)(1)
    with pytest.raises(IndexError):
        getattr(a, op)(1)


@pytest.mark.parametrize("value", [3.0, 0.0])
def test_nonzero_of_a_0d_tensor_matches_torch(value: float) -> None:
    a, t = Tensor(np.float32(value), device=DEV), torch.tensor(value)
    assert tuple(a.nonzero().shape) == tuple(t.nonzero().shape) and a.nonzero().dtype.name == "int64"
    (ours,), (theirs,) = a.nonzero(as_tuple=True), t.nonzero(as_tuple=True)
    assert ours.numpy().tolist() == theirs.tolist()


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid_matches_torch(indexing: str) -> None:
    a, b, c = (np.arange(n, dtype=np.float32) + n for n in (2, 3, 4))
    ours = anneal.meshgrid(Tensor(a, device=DEV), Tensor(b, device=DEV), Tensor(c, device=DEV), indexing=indexing)
    theirs = torch.meshgrid(torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(c), indexing=indexing)
    for o, t in zip(ours, theirs):
        assert o.numpy().tolist() == t.tolist()


def test_t_and_its_error() -> None:
    _same(lambda x: x.t(), X[0])
    _same(lambda x: x.t(), X[0, 0])
    with pytest.raises(RuntimeError, match="<= 2 dimensions"):
        Tensor(X, device=DEV).t()


@pytest.mark.parametrize("dim, keepdim, correction", [(None, False, 1), (1, True, 0), ((0, 2), False, 1)])
def test_std_mean_matches_torch(dim: Any, keepdim: bool, correction: int) -> None:
    ours = Tensor(X, device=DEV).std_mean(dim, keepdim=keepdim, correction=correction)
    theirs = torch.std_mean(torch.from_numpy(X), dim, keepdim=keepdim, correction=correction)
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(o.numpy(), t.numpy(), rtol=1e-5, atol=1e-6)
    functional = (anneal.std_mean, anneal.var_mean), (torch.std_mean, torch.var_mean)
    for fo, ft in zip(*functional):
        for o, t in zip(fo(Tensor(X, device=DEV), dim, keepdim, correction),
                        ft(torch.from_numpy(X), dim, keepdim=keepdim, correction=correction)):  # fmt: skip
            np.testing.assert_allclose(o.numpy(), t.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("unbiased", [True, False])
@pytest.mark.parametrize("dim", [None, 1])
def test_std_mean_and_var_mean_take_unbiased_as_torch(unbiased: bool, dim: Any) -> None:
    for ours, theirs in ((anneal.std_mean, torch.std_mean), (anneal.var_mean, torch.var_mean)):
        for o, t in zip(ours(Tensor(X, device=DEV), dim, unbiased=unbiased),
                        theirs(torch.from_numpy(X), dim, unbiased=unbiased)):  # fmt: skip
            np.testing.assert_allclose(o.numpy(), t.numpy(), rtol=1e-5, atol=1e-6)
    got = Tensor(X, device=DEV).var_mean(dim, unbiased=unbiased)[0].numpy()
    np.testing.assert_allclose(got, torch.from_numpy(X).var(dim, unbiased=unbiased).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("start, end, steps", [(0.0, 1.0, 5), (-3.0, 7.5, 11), (2.0, 2.0, 3), (0.0, 1.0, 1),
                                               (0.0, 1.0, 0), (1.0, -1.0, 4)])  # fmt: skip
def test_linspace_matches_torch(start: float, end: float, steps: int) -> None:
    ours = anneal.linspace(start, end, steps, device=DEV)
    theirs = torch.linspace(start, end, steps)
    assert tuple(ours.shape) == tuple(theirs.shape) and ours.dtype.name == "float32"
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6, atol=1e-6)
    with pytest.raises(RuntimeError, match="non-negative"):
        anneal.linspace(0, 1, -1)


def test_tensor_from_numpy_and_array() -> None:
    arr = np.arange(6, dtype=np.int32).reshape(2, 3)
    t = anneal.from_numpy(arr)
    assert t.dtype.name == "int32" and np.asarray(t).tolist() == arr.tolist()
    arr[0, 0] = 99  # a copy, unlike torch.from_numpy (documented)
    assert t.numpy()[0, 0] == 0
    u = anneal.tensor([[1.0, 2.0]], requires_grad=True)
    assert u.requires_grad and u.dtype.name == "float32" and np.asarray(u, dtype=np.float64).dtype == np.float64


def test_errors_are_torchs_types() -> None:
    x = Tensor(X, device=DEV)
    with pytest.raises(RuntimeError, match="differ"):
        x.diagonal(0, 1, 1)
    with pytest.raises(IndexError, match="out of range"):
        x.roll(1, 5)
    with pytest.raises(RuntimeError, match="repeats"):
        x.repeat_interleave(-1)

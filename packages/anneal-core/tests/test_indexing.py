"""Advanced indexing and item assignment against torch: integer tensors, lists and boolean masks on any dims
(numpy's placement rules), `x[idx] = v` for basic, mask and advanced indices, gradients through both, errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from devices import DEV

import anneal
from anneal import Tensor

A = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 7.5
MASK = A > 0

GETS: dict[str, Any] = {
    "list on dim 0": lambda T, M: ([1, 0, 1],),
    "list on dim 1": lambda T, M: (slice(None), [2, 0]),
    "two lists, adjacent": lambda T, M: (slice(None), [0, 2], [1, 3]),
    "two lists, apart": lambda T, M: ([1, 0], slice(None), [3, 3]),
    "int and list": lambda T, M: (0, [1, 2]),
    "broadcast lists": lambda T, M: ([[0], [1]], [0, 2]),
    "ellipsis and tensor": lambda T, M: (Ellipsis, T([1, -1])),
    "None and list": lambda T, M: (None, [1]),
    "negative indices": lambda T, M: (slice(None), [-1, -3]),
    "whole mask": lambda T, M: (M(MASK),),
    "mask of the first two dims": lambda T, M: (M(MASK[..., 0]),),
    "mask after an ellipsis": lambda T, M: (Ellipsis, M(np.array([True, False, True, True]))),
    "list of bools": lambda T, M: ([True, False],),
    "tuple on dim 1 (a list)": lambda T, M: (slice(None), (2, 0)),
    "tuples on two dims": lambda T, M: ((1, 0), slice(None), (3, -1)),
    "tuple of bools": lambda T, M: (Ellipsis, (True, False, False, True)),
}


def _ours(data: Any) -> Tensor:
    return Tensor(np.asarray(data), device=DEV)


def _torch(data: Any) -> torch.Tensor:
    return torch.tensor(np.asarray(data))


@pytest.mark.parametrize("name", list(GETS))
def test_getitem_as_torch(name: str) -> None:
    index = GETS[name](_ours, _ours)
    want = torch.tensor(A)[GETS[name](_torch, _torch)]
    got = Tensor(A, device=DEV)[index]
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize(
    "name", ["list on dim 1", "two lists, apart", "broadcast lists", "whole mask", "tuple on dim 1 (a list)"]
)
def test_the_gradient_of_a_gather_as_torch(name: str) -> None:
    x, tx = Tensor(A, device=DEV, requires_grad=True), torch.tensor(A, requires_grad=True)
    got, want = x[GETS[name](_ours, _ours)], tx[GETS[name](_torch, _torch)]
    upstream = np.random.default_rng(0).standard_normal(tuple(want.shape)).astype(np.float32)
    np.testing.assert_array_equal(got.numpy(), want.detach().numpy())
    (got * Tensor(upstream, device=DEV)).sum().backward()
    (want * torch.tensor(upstream)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6)  # repeated rows add up


SETS: dict[str, Any] = {
    "int": lambda T, M: ((0,), 5.0),
    "slices": lambda T, M: ((slice(None), slice(1, 3)), -1.0),
    "a row of values": lambda T, M: ((Ellipsis, 0), T(np.array([1.0, 2.0, 3.0], np.float32))),
    "None and int": lambda T, M: ((None, 1), 3.0),
    "strided slice": lambda T, M: ((slice(None), slice(None), slice(None, None, 2)), 9.0),
    "lists": lambda T, M: (([0, 1], [2, 0]), 7.0),
    "duplicates: the last wins": lambda T, M: (([1, 1, 0],), T(np.arange(3, dtype=np.float32).reshape(3, 1, 1))),
    "mask": lambda T, M: ((M(MASK),), 0.0),
    "mask with a value per selected element": lambda T, M: ((M(MASK),), T(-np.arange(MASK.sum(), dtype=np.float32))),
    "mask of two dims with rows": lambda T, M: ((M(MASK[..., 0]),), T(np.arange(4 * int(MASK[..., 0].sum()),
                                                                              dtype=np.float32).reshape(-1, 4))),
    "tuple index": lambda T, M: ((slice(None), (2, 0)), 4.0),
}  # fmt: skip


@pytest.mark.parametrize("name", list(SETS))
def test_setitem_as_torch(name: str) -> None:
    x, t = Tensor(A, device=DEV), torch.tensor(A)
    index, value = SETS[name](_ours, _ours)
    x[index] = value
    tindex, tvalue = SETS[name](_torch, _torch)
    t[tindex] = tvalue
    np.testing.assert_array_equal(x.numpy(), t.numpy())
    assert x.dtype.name == "float32" and tuple(x.shape) == A.shape


def test_gradients_through_a_masked_assignment_of_values() -> None:
    x, v = Tensor(A, device=DEV, requires_grad=True), Tensor(np.ones(int(MASK.sum()), np.float32), device=DEV,
                                                             requires_grad=True)  # fmt: skip
    tx, tv = torch.tensor(A, requires_grad=True), torch.ones(int(MASK.sum()), requires_grad=True)
    y, ty = x * 1.0, tx * 1.0
    y[Tensor(MASK, device=DEV)] = v * 3.0
    ty[torch.tensor(MASK)] = tv * 3.0
    np.testing.assert_array_equal(y.numpy(), ty.detach().numpy())
    (y * y).sum().backward()
    (ty * ty).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())
    np.testing.assert_allclose(v.grad.numpy(), tv.grad.numpy())


def test_gradients_through_an_assignment() -> None:
    """y = x * 1; y[0] = v * 2: x's gradient is cut where v was written, v's is what reached it."""
    x, v = Tensor(A, device=DEV, requires_grad=True), Tensor(np.ones((3, 4), np.float32), device=DEV,
                                                             requires_grad=True)  # fmt: skip
    tx, tv = torch.tensor(A, requires_grad=True), torch.ones((3, 4), requires_grad=True)
    y, ty = x * 1.0, tx * 1.0
    y[0] = v * 2.0
    ty[0] = tv * 2.0
    np.testing.assert_array_equal(y.numpy(), ty.detach().numpy())
    (y * y).sum().backward()
    (ty * ty).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())
    np.testing.assert_allclose(v.grad.numpy(), tv.grad.numpy())


def test_errors_as_torch() -> None:
    x = Tensor(A, device=DEV)
    for index in ((5,), ([0, 7],), (slice(None), [3])):
        with pytest.raises(IndexError, match="out of bounds"):
            x[index]
        with pytest.raises(IndexError):
            torch.tensor(A)[index]
    with pytest.raises(IndexError, match=r"mask of shape \(3,\) does not match the indexed dims \(2,\)"):
        x[np.array([True, False, True])]
    with pytest.raises(IndexError, match="single ellipsis"):
        x[..., 0, ...]
    with pytest.raises(RuntimeError, match="cannot be broadcast to the selection"):
        x[0] = Tensor(np.ones((2, 2), np.float32), device=DEV)
    w = Tensor([1.0, 2.0], device=DEV, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        w[0] = 3.0
    with anneal.no_grad():  # what an optimizer's update does
        w[0] = 3.0
    np.testing.assert_array_equal(w.numpy(), [3.0, 2.0])


def test_gathering_from_a_tensor_holding_inf_and_nan_keeps_the_other_rows_exact() -> None:
    data = np.array([[1.0, np.inf], [-np.inf, 2.0], [np.nan, 3.0]], np.float32)
    for index in ([1, 0], [[2], [0]]):
        got = Tensor(data, device=DEV)[Tensor(np.array(index), device=DEV)]
        want = torch.tensor(data)[torch.tensor(index)]
        np.testing.assert_array_equal(got.numpy(), want.numpy())

"""Issue 18's order and scan ops against torch: sort, argsort, topk, cummax, cummin, cumprod, logcumsumexp.
Values, indices and dtypes (NaN and ties included), gradients read after a value, and the errors torch raises."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from devices import DEV

from anneal import Tensor

NAN = np.nan
ROWS = np.array([[3.0, 1.0, NAN, 2.0, 1.0, -4.0], [0.0, -1.0, 5.0, 5.0, 2.0, 7.5], [2.0, 2.0, 2.0, 2.0, 2.0, 2.0]],
                np.float32)  # fmt: skip
DISTINCT = np.random.default_rng(5).permutation(24).reshape(2, 3, 4).astype(np.float32) - 11.5
INTS = np.array([[3, -7, 3, 0], [127, -128, 5, 5]], np.int64)


def both(fn: Callable[[Any, Any], Any], data: np.ndarray) -> tuple[Any, Any]:
    return fn(Tensor(data, device=DEV), "anneal"), fn(torch.tensor(data), "torch")


def same(got: Any, want: Any) -> None:
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-6, atol=1e-6, equal_nan=True)
    assert got.dtype.name == str(want.dtype).removeprefix("torch."), (got.dtype, want.dtype)


@pytest.mark.parametrize("data", [ROWS, DISTINCT, INTS], ids=["nan-and-ties", "distinct", "int64"])
@pytest.mark.parametrize("dim", [-1, 0, 1])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_and_argsort(data: np.ndarray, dim: int, descending: bool) -> None:
    def run(x: Any, lib: str) -> Any:
        return torch.sort(x, dim=dim, descending=descending, stable=True) if lib == "torch" else x.sort(dim, descending)

    got, want = both(run, data)
    same(got.values, want.values)
    same(got.indices, want.indices)
    want_order = torch.argsort(torch.tensor(data), dim=dim, descending=descending, stable=True)
    same(Tensor(data, device=DEV).argsort(dim, descending), want_order)


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("dim", [-1, 1])
def test_topk(largest: bool, dim: int) -> None:
    got, want = both(lambda x, lib: x.topk(2, dim, largest), DISTINCT)  # distinct: torch's order of ties is open
    same(got.values, want.values)
    same(got.indices, want.indices)
    ints, tints = both(lambda x, lib: x.topk(3, -1, largest), INTS[:, [0, 1, 3]])
    same(ints.values, tints.values)


@pytest.mark.parametrize("op", ["cummax", "cummin"])
@pytest.mark.parametrize("data", [ROWS, DISTINCT, INTS], ids=["nan-and-ties", "distinct", "int64"])
def test_cummax_cummin(op: str, data: np.ndarray) -> None:
    for dim in (0, -1):
        got, want = both(lambda x, lib, d=dim: getattr(x, op)(d), data)
        same(got.values, want.values)
        same(got.indices, want.indices)  # ties: the last index; NaN: from its first appearance on


def test_cumprod_and_logcumsumexp() -> None:
    for dim in (0, 1, -1):
        same(*both(lambda x, lib, d=dim: x.cumprod(d), DISTINCT / 4))
        same(*both(lambda x, lib, d=dim: x.logcumsumexp(d), DISTINCT))
    same(*both(lambda x, lib: x.cumprod(1), INTS))  # integers: int64, as torch
    same(*both(lambda x, lib: x.cumprod(0, dtype="float32" if lib == "anneal" else torch.float32), INTS))
    same(*both(lambda x, lib: x.logcumsumexp(1), np.array([[-np.inf, 0.0, 80.0, -np.inf, 100.0]], np.float32)))


GRADIENTS: list[tuple[str, Callable[[Any], Any]]] = [
    ("sort", lambda x: x.sort(1, True)[0]),
    ("topk", lambda x: x.topk(2, -1)[0]),
    ("cummax", lambda x: x.cummax(2)[0]),
    ("cummin", lambda x: x.cummin(0)[0]),
    ("cumprod", lambda x: x.cumprod(2)),
    ("logcumsumexp", lambda x: x.logcumsumexp(1)),
]


@pytest.mark.parametrize(("name", "fn"), GRADIENTS, ids=[n for n, _ in GRADIENTS])
def test_gradients(name: str, fn: Callable[[Any], Any]) -> None:
    data = DISTINCT / 8
    x, tx = Tensor(data, device=DEV, requires_grad=True), torch.tensor(data, requires_grad=True)
    out, tout = fn(x), fn(tx)
    upstream = np.random.default_rng(1).standard_normal(tuple(tout.shape)).astype(np.float32)
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=2e-6, atol=1e-6)  # read, then backward
    (out * Tensor(upstream, device=DEV)).sum().backward()
    (tout * torch.tensor(upstream)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=2e-5, atol=1e-6)


def test_errors_as_torch() -> None:
    x = Tensor(DISTINCT, device=DEV)
    for call in (lambda: x.sort(3), lambda: x.cummax(-4), lambda: x.topk(1, 5), lambda: x.logcumsumexp(3)):
        with pytest.raises(IndexError, match="out of range"):
            call()
    with pytest.raises(RuntimeError, match=r"topk: k \(5\) is out of range for dim -1 of size 4"):
        x.topk(5)
    with pytest.raises(IndexError):
        torch.tensor(DISTINCT).sort(3)  # the same error types as torch
    with pytest.raises(RuntimeError):
        torch.tensor(DISTINCT).topk(5)

"""no_grad / enable_grad / set_grad_enabled and the printed form of a tensor, against torch's. On another device
than cpu the repr names it, as torch's names device='cuda:0'."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
import torch
from devices import DEV

import anneal
from anneal import Tensor


def _on_device(torch_repr: str) -> str:
    """torch's repr of a CPU tensor as torch would print it on another device: the device first among the
    suffixes, which torch's own rule then places (after ", " or on a new line past 80 characters)."""
    if DEV == "cpu":
        return torch_repr
    body, *suffixes = re.split(r",\s+(?=(?:size|dtype|requires_grad)=)", torch_repr[:-1])
    return torch._tensor_str._add_suffixes(body, [f"device='{DEV}'", *suffixes], len("tensor("), False)


def test_no_grad_results_have_no_history_and_backward_stops_there() -> None:
    w, tw = Tensor([1.0, 2.0], device=DEV, requires_grad=True), torch.tensor([1.0, 2.0], requires_grad=True)
    with anneal.no_grad(), torch.no_grad():
        y, ty = w * 3, tw * 3
        assert y.requires_grad is ty.requires_grad is False
        assert not anneal.is_grad_enabled()
        with anneal.enable_grad(), torch.enable_grad():
            assert (w * 1).requires_grad and (tw * 1).requires_grad
    assert anneal.is_grad_enabled()
    (y * w).sum().backward()
    (ty * tw).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), tw.grad.numpy())  # y is a constant to the backward


def test_the_modes_as_decorators_and_after_an_error() -> None:
    w = Tensor([1.0], device=DEV, requires_grad=True)

    @anneal.no_grad()
    def frozen(x: Tensor) -> Tensor:
        return x * 2

    @anneal.set_grad_enabled(True)
    def tracked(x: Tensor) -> Tensor:
        return x * 2

    assert not frozen(w).requires_grad and tracked(w).requires_grad
    with anneal.no_grad():
        assert tracked(w).requires_grad  # the inner mode wins, and is undone after
        assert not (w * 2).requires_grad
    with pytest.raises(KeyError), anneal.set_grad_enabled(False):
        raise KeyError("x")
    assert anneal.is_grad_enabled()


def test_no_grad_and_enable_grad_decorate_without_parentheses_as_torch() -> None:
    w, tw = Tensor([1.0], device=DEV, requires_grad=True), torch.tensor([1.0], requires_grad=True)

    def double(x: Any) -> Any:
        return x * 2

    ours, theirs = anneal.no_grad(double), torch.no_grad(double)
    assert ours.__name__ == "double" and ours(w).requires_grad is theirs(tw).requires_grad is False
    tracked, ttracked = anneal.enable_grad(double), torch.enable_grad(double)
    with anneal.no_grad(), torch.no_grad():
        assert tracked(w).requires_grad is ttracked(tw).requires_grad is True
    assert anneal.is_grad_enabled()


@pytest.mark.parametrize("make", [
    lambda m, **d: m.tensor([1.0, 2.0], requires_grad=True, **d),
    lambda m, **d: m.tensor([[0, 1, 2], [3, 4, 5]], **d),
    lambda m, **d: m.tensor([1, 2], dtype=m.int32, **d),
    lambda m, **d: m.tensor([True, False], **d),
    lambda m, **d: m.tensor([[0.5, -1.25]], **d),
    lambda m, **d: m.tensor([1e-5, 3.0, float("nan")], **d),
    lambda m, **d: m.tensor(3.5, **d),
    lambda m, **d: m.tensor(7, **d),
    lambda m, **d: m.tensor([1, 200], dtype=m.uint8, **d),
    lambda m, **d: m.tensor([1e10, 2.0], **d),
    lambda m, **d: m.tensor([123456.0, 2.5], **d),
    lambda m, **d: m.tensor([float("inf"), -float("inf"), 1.0], **d),  # padded to the finite values' width
    lambda m, **d: m.tensor([float("inf"), 1.5], **d),
    lambda m, **d: m.tensor([-0.0, 1.0], **d),
    lambda m, **d: m.tensor([1.5, 2.0], dtype=m.float16, **d),
    lambda m, **d: m.tensor([1.5, 2.0], dtype=m.bfloat16, **d),
    lambda m, **d: m.tensor([], **d),
    lambda m, **d: m.tensor(np.zeros((0, 3), np.float32), **d),
    lambda m, **d: m.tensor(np.zeros((2, 0), np.int32), **d),
    lambda m, **d: m.tensor(np.arange(8, dtype=np.float32).reshape(2, 2, 2) / 3, **d),
    lambda m, **d: m.tensor(np.arange(30, dtype=np.float32) * 1.5, **d),  # 8 to a line of 80
    lambda m, **d: m.tensor(np.arange(2000), **d),  # summarized: " ..." padded like an element
    lambda m, **d: m.tensor(np.arange(5000, dtype=np.float32).reshape(50, 100), **d),
    lambda m, **d: m.tensor(np.linspace(-1, 1, 24, dtype=np.float32).reshape(2, 3, 4) ** 3, requires_grad=True, **d),
])  # fmt: skip
def test_repr_shows_the_values_as_torch(make: Any) -> None:
    got, want = repr(make(anneal, device=DEV)), _on_device(repr(make(torch)))
    assert got == want.replace("torch.", "anneal.")


def test_repr_of_a_large_tensor_is_summarized() -> None:
    values = np.arange(5000, dtype=np.float32)
    text = repr(Tensor(values, device=DEV))
    assert text == _on_device(repr(torch.tensor(values))) and "..." in text and len(text) < 230

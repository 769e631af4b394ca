"""no_grad / enable_grad / set_grad_enabled and the printed form of a tensor, against torch's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import anneal
from anneal import Tensor


def test_no_grad_results_have_no_history_and_backward_stops_there() -> None:
    w, tw = Tensor([1.0, 2.0], requires_grad=True), torch.tensor([1.0, 2.0], requires_grad=True)
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
    w = Tensor([1.0], requires_grad=True)

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


@pytest.mark.parametrize("make", [
    lambda m: m.tensor([1.0, 2.0], requires_grad=True),
    lambda m: m.tensor([[0, 1, 2], [3, 4, 5]]),
    lambda m: m.tensor([1, 2], dtype=m.int32),
    lambda m: m.tensor([True, False]),
    lambda m: m.tensor([[0.5, -1.25]]),
    lambda m: m.tensor([1e-5, 3.0, float("nan")]),
    lambda m: m.tensor(3.5),
])  # fmt: skip
def test_repr_shows_the_values_as_torch(make: object) -> None:
    got, want = repr(make(anneal)), repr(make(torch))  # type: ignore[operator]
    assert got == want.replace("torch.", "anneal.")


def test_repr_of_a_large_tensor_is_summarized() -> None:
    values = np.arange(5000, dtype=np.float32)
    text = repr(Tensor(values))
    assert text.split() == repr(torch.tensor(values)).split() and "..." in text and len(text) < 200  # spacing aside

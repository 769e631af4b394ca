"""with_gradient: a composite evaluates to its value, reverse mode takes its rule, forward mode its graph."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from devices import DEV

import anneal
import anneal.nn.functional as AF
from anneal import Tensor
from anneal.composite import with_gradient

rng = np.random.default_rng(0)


def _three_times(grad: Tensor, x: Tensor) -> tuple[Tensor]:
    return (grad * 3.0,)


def test_value_from_the_graph_gradient_from_the_rule() -> None:
    x = Tensor(np.array([1.0, -2.0, 4.0], np.float32), device=DEV, requires_grad=True)
    y = with_gradient(x * 2.0, (x,), _three_times)  # a deliberately "wrong" rule: its use is visible
    np.testing.assert_array_equal(y.numpy(), [2.0, -4.0, 8.0])
    (y * y).sum().backward()
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), 3.0 * 2.0 * y.numpy())
    _, tangent = anneal.jvp(lambda v: with_gradient(v * 2.0, (v,), _three_times), [x], [Tensor.ones(3, device=DEV)])
    np.testing.assert_array_equal(tangent.numpy(), [2.0, 2.0, 2.0])  # forward mode: the value's graph


def _too_many(grad: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
    return grad, grad


def _misshapen(grad: Tensor, x: Tensor) -> tuple[Tensor]:
    return (grad.sum(),)


def test_a_rule_that_breaks_its_contract_says_so() -> None:
    x = Tensor(np.ones(3, np.float32), device=DEV, requires_grad=True)
    with pytest.raises(TypeError, match="gave 2 gradients for 1 primals"):
        with_gradient(x * 1.0, (x,), _too_many).sum().backward()
    with pytest.raises(ValueError, match=r"a gradient of shape \(\) for a primal of shape \(3,\)"):
        with_gradient(x * 1.0, (x,), _misshapen).sum().backward()


@pytest.mark.parametrize("padding,groups", [(1, 1), (0, 2), ("same", 1)])
def test_second_order_through_a_convolution(padding: object, groups: int) -> None:
    """The rule's gradients are convolutions again (with their own rule): a gradient of a gradient, as
    torch.autograd.grad with create_graph, for the input and the weight."""
    xa = rng.standard_normal((2, 4, 6, 5)).astype(np.float32)
    wa = rng.standard_normal((6, 4 // groups, 3, 3)).astype(np.float32)
    x, w = Tensor(xa, device=DEV, requires_grad=True), Tensor(wa, device=DEV, requires_grad=True)
    (gx,) = (AF.conv2d(x, w, padding=padding, groups=groups) ** 2).sum().gradient(x)
    gw_of_gx = (gx * gx).sum().gradient(w)[0]
    tx, tw = torch.tensor(xa, requires_grad=True), torch.tensor(wa, requires_grad=True)
    (tgx,) = torch.autograd.grad((torch.nn.functional.conv2d(tx, tw, padding=padding, groups=groups) ** 2).sum(),
                                 tx, create_graph=True)  # fmt: skip
    (tgw,) = torch.autograd.grad((tgx * tgx).sum(), tw)
    np.testing.assert_allclose(gx.numpy(), tgx.detach().numpy(), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(gw_of_gx.numpy(), tgw.numpy(), rtol=1e-4, atol=1e-2)

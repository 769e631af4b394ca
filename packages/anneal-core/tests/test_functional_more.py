"""Issue 18's nn.functional activations and losses, the module classes anneal.nn exports, and the gradients
that were NaN where torch's are finite (sigmoid and tanh at -300, gelu(tanh) at -20, softplus(350)).
Each against torch: forward values, dtypes, gradients (read after a value), error types."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from devices import DEV
from torch import nn as tnn

import anneal.nn as nn
import anneal.nn.functional as AF
from anneal import Tensor

RTOL, ATOL = 2e-5, 1e-6
KINKS = [-300.0, -20.0, -3.0, -1.0, 0.0, 1.0, 3.0, 6.0, 20.0, 350.0]


def _x(n: int = 41, lo: float = -8, hi: float = 8, extra: list[float] | None = None) -> np.ndarray:
    return np.concatenate([np.linspace(lo, hi, n) + 0.013, extra or []]).astype(np.float32)


def _both(fn: Callable[[Any, Any], Any], *arrays: np.ndarray, grads: bool = True, rtol: float = RTOL,
          frozen: tuple[int, ...] = ()) -> None:  # fmt: skip
    """fn(F, *tensors) in anneal and torch: values, dtype, and the gradient of a weighted sum for every float input
    (but the frozen ones: class weights, which torch does not differentiate)."""
    wants = [grads and a.dtype.kind == "f" and i not in frozen for i, a in enumerate(arrays)]
    a_in = [Tensor(a, device=DEV, requires_grad=w) for a, w in zip(arrays, wants)]
    t_in = [torch.tensor(a, requires_grad=w) for a, w in zip(arrays, wants)]
    ya, yt = fn(AF, *a_in), fn(TF, *t_in)
    assert ya.dtype.name == str(yt.dtype).removeprefix("torch."), (ya.dtype, yt.dtype)
    np.testing.assert_allclose(ya.numpy(), yt.detach().numpy(), rtol=rtol, atol=ATOL, equal_nan=True)
    if not grads:
        return
    w = np.random.default_rng(3).uniform(0.5, 1.5, tuple(yt.shape)).astype(np.float32)
    (ya * Tensor(w, device=DEV)).sum().backward()
    (yt * torch.from_numpy(w)).sum().backward()
    for a, t in zip(a_in, t_in):
        if t.requires_grad:
            assert a.grad is not None and t.grad is not None
            assert np.isfinite(a.grad.numpy()).all() == np.isfinite(t.grad.numpy()).all()
            np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=rtol, atol=ATOL, equal_nan=True)


ACTIVATIONS: list[tuple[str, Callable[..., Any]]] = [
    ("sigmoid", lambda F, x: F.sigmoid(x)),
    ("logsigmoid", lambda F, x: F.logsigmoid(x)),
    ("softplus", lambda F, x: F.softplus(x)),
    ("softplus_beta", lambda F, x: F.softplus(x, beta=2.0, threshold=10.0)),
    ("elu", lambda F, x: F.elu(x, alpha=0.7)),
    ("celu", lambda F, x: F.celu(x, alpha=1.3)),
    ("selu", lambda F, x: F.selu(x)),
    ("mish", lambda F, x: F.mish(x)),
    ("hardtanh", lambda F, x: F.hardtanh(x, -2.0, 2.5)),
    ("relu6", lambda F, x: F.relu6(x)),
    ("hardsigmoid", lambda F, x: F.hardsigmoid(x)),
    ("hardswish", lambda F, x: F.hardswish(x)),
    ("softsign", lambda F, x: F.softsign(x)),
    ("tanh", lambda F, x: x.tanh()),
    ("gelu_tanh", lambda F, x: F.gelu(x, approximate="tanh")),
]


@pytest.mark.parametrize("name, fn", ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
def test_activations_match_torch_including_kinks_and_extremes(name: str, fn: Callable[..., Any]) -> None:
    _both(fn, _x(extra=KINKS))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmin_matches_torch(dim: int) -> None:
    _both(lambda F, x: F.softmin(x, dim=dim), np.random.default_rng(0).normal(size=(3, 5)).astype(np.float32))


@pytest.mark.parametrize("p, dim", [(2.0, 1), (1.0, 0), (3.0, 1), (float("inf"), 1)])
def test_normalize_matches_torch_and_a_zero_row_has_a_finite_gradient(p: float, dim: int) -> None:
    x = np.random.default_rng(1).normal(size=(4, 5)).astype(np.float32)
    x[2] = 0.0  # a zero row: clamped to eps, gradient finite as torch's
    x[:, 3] = 0.0
    _both(lambda F, t: F.normalize(t, p=p, dim=dim), x, rtol=1e-4)


@pytest.mark.parametrize("groups, affine", [(1, False), (2, True), (4, True)])
def test_group_norm_matches_torch(groups: int, affine: bool) -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 4, 3, 5)).astype(np.float32)
    if not affine:
        _both(lambda F, t: F.group_norm(t, groups), x, rtol=1e-4)
        return
    w, b = rng.normal(size=4).astype(np.float32), rng.normal(size=4).astype(np.float32)
    _both(lambda F, t, ww, bb: F.group_norm(t, groups, ww, bb), x, w, b, rtol=1e-4)


def test_group_norm_refuses_channels_it_cannot_split() -> None:
    with pytest.raises(RuntimeError, match="3 channels cannot be split into 2 groups"):
        AF.group_norm(Tensor(np.ones((1, 3, 2), np.float32), device=DEV), 2)


REDUCTIONS = ["mean", "sum", "none"]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", ["l1_loss", "smooth_l1_loss", "mse_loss"])
def test_regression_losses_match_torch(name: str, reduction: str) -> None:
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=(3, 4)).astype(np.float32)
    x[0, 0] = y[0, 0]  # |d| = 0: l1's gradient there is 0, as torch's
    _both(lambda F, a, b: getattr(F, name)(a, b, reduction=reduction), x, y)


@pytest.mark.parametrize("beta", [0.0, 0.5, 2.0])
def test_smooth_l1_beta(beta: float) -> None:
    rng = np.random.default_rng(5)
    _both(lambda F, a, b: F.smooth_l1_loss(a, b, beta=beta), rng.normal(size=(6,)).astype(np.float32),
          rng.normal(size=(6,)).astype(np.float32))  # fmt: skip


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_binary_cross_entropy_matches_torch_at_0_and_1_too(reduction: str) -> None:
    p = np.array([[0.0, 0.2, 0.5, 0.9, 1.0], [0.3, 1e-8, 0.999, 0.6, 0.05]], np.float32)
    y = np.array([[0.0, 1.0, 0.3, 1.0, 1.0], [0.0, 1.0, 0.0, 0.5, 1.0]], np.float32)
    w = np.array([1.0, 2.0, 0.5, 1.0, 3.0], np.float32)
    _both(lambda F, a, b: F.binary_cross_entropy(a, b, reduction=reduction), p, y, rtol=1e-4)
    _both(lambda F, a, b, ww: F.binary_cross_entropy(a, b, ww, reduction=reduction), p, y, w, rtol=1e-4, frozen=(2,))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_binary_cross_entropy_with_logits_is_stable(reduction: str) -> None:
    z = np.array([[-300.0, -20.0, -1.0, 0.0, 2.0], [5.0, 40.0, 350.0, -0.5, 1.0]], np.float32)
    y = np.array([[0.0, 1.0, 0.3, 1.0, 0.0], [1.0, 0.0, 1.0, 0.5, 1.0]], np.float32)
    pw = np.array([1.0, 2.0, 0.5, 1.0, 3.0], np.float32)
    _both(lambda F, a, b: F.binary_cross_entropy_with_logits(a, b, reduction=reduction), z, y)
    _both(lambda F, a, b, p: F.binary_cross_entropy_with_logits(a, b, reduction=reduction, pos_weight=p), z, y, pw,
          frozen=(2,))  # fmt: skip


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss_matches_torch(reduction: str, weighted: bool) -> None:
    rng = np.random.default_rng(6)
    logp = np.log(rng.dirichlet(np.ones(4), size=(5,))).astype(np.float32)
    target = np.array([0, 3, 1, -100, 2], np.int64)
    w = rng.uniform(0.5, 2, size=4).astype(np.float32)
    if weighted:
        _both(lambda F, a, t, ww: F.nll_loss(a, t, ww, reduction=reduction), logp, target, w, frozen=(2,))
    else:
        _both(lambda F, a, t: F.nll_loss(a, t, reduction=reduction), logp, target)
    images = np.ascontiguousarray(np.log(rng.dirichlet(np.ones(3), size=(2, 4, 5))).transpose(0, 3, 1, 2), np.float32)
    _both(lambda F, a, t: F.nll_loss(a, t, reduction=reduction), images, rng.integers(0, 3, (2, 4, 5)))


def test_loss_errors_are_torchs_types() -> None:
    x = Tensor(np.zeros((2, 3), np.float32), device=DEV)
    with pytest.raises(ValueError, match="reduction"):
        AF.l1_loss(x, x, reduction="avg")
    with pytest.raises(ValueError, match="shape"):
        AF.binary_cross_entropy(x, Tensor(np.zeros((3, 2), np.float32), device=DEV))
    with pytest.raises(TypeError, match="class indices"):
        AF.nll_loss(x, Tensor(np.zeros(2, np.float32), device=DEV))


def test_loss_modules_are_the_functional_losses() -> None:
    rng = np.random.default_rng(7)
    x, y = rng.normal(size=(4, 3)).astype(np.float32), rng.uniform(size=(4, 3)).astype(np.float32)
    idx = np.array([0, 2, 1, 1], np.int64)
    cases = [(nn.MSELoss(), tnn.MSELoss(), x, y), (nn.L1Loss(reduction="sum"), tnn.L1Loss(reduction="sum"), x, y),
             (nn.SmoothL1Loss(beta=0.5), tnn.SmoothL1Loss(beta=0.5), x, y),
             (nn.BCEWithLogitsLoss(), tnn.BCEWithLogitsLoss(), x, y), (nn.BCELoss(), tnn.BCELoss(), y * 0.9 + 0.05, y),
             (nn.CrossEntropyLoss(label_smoothing=0.1), tnn.CrossEntropyLoss(label_smoothing=0.1), x, idx),
             (nn.NLLLoss(), tnn.NLLLoss(), np.log(y / y.sum(1, keepdims=True)), idx)]  # fmt: skip
    for ours, theirs, a, b in cases:
        got = ours(Tensor(a, device=DEV), Tensor(b, device=DEV)).numpy()
        np.testing.assert_allclose(got, theirs(torch.from_numpy(a), torch.from_numpy(b)).numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="reduction"):
        nn.MSELoss(reduction="avg")


def test_module_list_and_dict_register_their_modules_as_torch_names_them() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList([nn.Linear(2, 3), nn.Linear(3, 2)])
            self.heads = nn.ModuleDict({"a": nn.Linear(2, 1), "b": nn.Linear(2, 4)})

    class TNet(tnn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = tnn.ModuleList([tnn.Linear(2, 3), tnn.Linear(3, 2)])
            self.heads = tnn.ModuleDict({"a": tnn.Linear(2, 1), "b": tnn.Linear(2, 4)})

    ours = [name for name, _ in Net().named_parameters()]
    assert ours == list(TNet().state_dict())
    net = Net()
    assert len(net.blocks) == 2 and isinstance(net.blocks[1], nn.Linear) and list(net.heads) == ["a", "b"]
    assert "a" in net.heads and net.heads["b"].weight.shape == (4, 2)
    with pytest.raises(TypeError, match="not a Module"):
        nn.ModuleList([3])  # type: ignore[list-item]
    with pytest.raises(KeyError):
        net.heads["missing"]


ACTIVATION_MODULES: list[tuple[str, tuple[Any, ...]]] = [
    # class name (the same in anneal.nn and torch.nn), constructor arguments
    ("ELU", ()), ("ELU", (0.5,)), ("CELU", (0.7,)), ("SELU", ()), ("Mish", ()), ("Hardsigmoid", ()),
    ("Hardswish", ()), ("Hardtanh", ()), ("Hardtanh", (-2.0, 2.5)), ("ReLU6", ()), ("Softsign", ()),
    ("Softmin", (1,)), ("Softmax", (0,)), ("Softmax", (-1,)), ("LogSoftmax", (1,)), ("LogSigmoid", ()),
    ("Softplus", ()), ("Softplus", (2.0, 5.0)), ("LeakyReLU", (0.2,)),
]  # fmt: skip


@pytest.mark.parametrize("name, args", ACTIVATION_MODULES, ids=[f"{n}{a}" for n, a in ACTIVATION_MODULES])
def test_activation_modules_match_torchs(name: str, args: tuple[Any, ...]) -> None:
    ours, theirs = getattr(nn, name)(*args), getattr(tnn, name)(*args)
    assert isinstance(ours, nn.Module) and list(ours.parameters()) == []
    _both(lambda m, x: (ours if m is AF else theirs)(x), _x(40).reshape(5, 8))


@pytest.mark.parametrize("affine", [True, False])
def test_group_norm_module_matches_torchs(affine: bool) -> None:
    ours, theirs = nn.GroupNorm(2, 4, affine=affine), tnn.GroupNorm(2, 4, affine=affine)
    assert [n for n, _ in ours.named_parameters()] == list(theirs.state_dict())
    x = np.random.default_rng(3).normal(size=(3, 4, 5)).astype(np.float32)
    a, t = Tensor(x, device=DEV, requires_grad=True), torch.tensor(x, requires_grad=True)
    ya, yt = ours(a), theirs(t)
    np.testing.assert_allclose(ya.numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-5)
    (ya * ya).sum().backward()
    (yt * yt).sum().backward()
    assert a.grad is not None and t.grad is not None
    np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-5)
    if affine:
        for p, tp in zip(ours.parameters(), theirs.parameters()):
            assert p.grad is not None and tp.grad is not None
            np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError):
        tnn.GroupNorm(3, 4)
    with pytest.raises(ValueError, match="divisible"):
        nn.GroupNorm(3, 4)


def _kinds(modules: Any) -> list[str]:
    return [type(m).__name__ for m in modules]


def test_module_list_edits_as_torchs() -> None:
    def build(lib: Any) -> Any:
        return lib.ModuleList([lib.ReLU(), lib.Tanh(), lib.Linear(2, 3)])

    ours, theirs = build(nn), build(tnn)
    for lib, ml in ((nn, ours), (tnn, theirs)):
        ml.insert(1, lib.Linear(3, 4))
        ml.insert(3, lib.Sigmoid())
        ml.append(lib.SELU())
        ml[0] = lib.ELU()
        del ml[2]
        ml += [lib.Mish()]
    assert _kinds(ours) == _kinds(theirs)
    assert [n for n, _ in ours.named_parameters()] == list(theirs.state_dict())  # renumbered as torch's
    assert type(ours[1:3]) is nn.ModuleList and _kinds(ours[1:3]) == _kinds(theirs[1:3])
    assert _kinds(ours[::-2]) == _kinds(theirs[::-2])
    assert type(ours.pop(1)).__name__ == type(theirs.pop(1)).__name__ and _kinds(ours) == _kinds(theirs)
    assert _kinds(ours + nn.ModuleList([nn.ReLU()])) == _kinds(theirs + tnn.ModuleList([tnn.ReLU()]))
    assert [n for n, _ in ours.named_parameters()] == list(theirs.state_dict())


def test_module_dict_edits_as_torchs() -> None:
    def build(lib: Any) -> Any:
        return lib.ModuleDict({"a": lib.Linear(2, 1), "b": lib.ReLU()})

    ours, theirs = build(nn), build(tnn)
    for lib, md in ((nn, ours), (tnn, theirs)):
        md.update({"c": lib.Linear(1, 2), "a": lib.Linear(2, 2)})
        md.update([("d", lib.Tanh())])
        assert type(md.pop("b")).__name__ == "ReLU"
        del md["d"]
    assert list(ours.keys()) == list(theirs.keys())
    assert [n for n, _ in ours.named_parameters()] == list(theirs.state_dict())
    assert ours["a"].weight.shape == tuple(theirs["a"].weight.shape)
    with pytest.raises(KeyError):
        ours.pop("b")
    ours.clear()
    theirs.clear()
    assert len(ours) == len(theirs) == 0


def test_parameters_and_their_containers_are_named_and_trained_as_torchs() -> None:
    def build(lib: Any, tensor: Callable[[np.ndarray], Any]) -> Any:
        class Scales(lib.Module):
            def __init__(self) -> None:
                super().__init__()
                self.bias = lib.Parameter(tensor(np.ones(3, np.float32)))
                self.scales = lib.ParameterList([lib.Parameter(tensor(np.full(3, i + 1.0, np.float32)))
                                                 for i in range(2)])  # fmt: skip
                self.extra = lib.ParameterDict({"shift": lib.Parameter(tensor(np.arange(3, dtype=np.float32)))})

            def forward(self, x: Any) -> Any:
                for s in self.scales:
                    x = x * s
                return x + self.bias + self.extra["shift"]

        return Scales()

    ours = build(nn, lambda a: Tensor(a, device=DEV))
    theirs = build(tnn, torch.tensor)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    x = np.array([1.0, -2.0, 0.5], np.float32)
    ours(Tensor(x, device=DEV)).sum().backward()
    theirs(torch.tensor(x)).sum().backward()
    for (_, a), (_, b) in zip(ours.named_parameters(), theirs.named_parameters()):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-6)  # type: ignore[union-attr]
    assert len(ours.scales) == 2 and "shift" in ours.extra and list(ours.extra.keys()) == ["shift"]

"""Issue 18, section 2: the edges where anneal and torch used to differ, each against torch (value, dtype, error
type): integer extremes, wrapping scalars, zero-size axes, 0-d reductions, dtypes of tril/triu and int ** float,
and the errors torch raises."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from devices import DEV

import anneal
import anneal.nn
import anneal.nn.functional as AF
from anneal import Tensor

I32 = np.array([-2147483648, 5, 2147483647, -3], np.int32)
U8 = np.array([0, 255, 7, 200], np.uint8)


def _f32(a: Any) -> np.ndarray:
    a = np.asarray(a)
    return a.astype(np.float32) if a.dtype == np.float64 else a  # WGSL has no float64


def ours(a: Any) -> Tensor:
    return Tensor(_f32(a), device=DEV)


def theirs(a: Any) -> torch.Tensor:
    return torch.tensor(_f32(a))


def agree(fn: Callable[[Any, Any], Any]) -> None:
    got, want = fn(anneal, ours), fn(torch, theirs)
    got_v, want_v = (got.values, want.values) if isinstance(want, tuple) else (got, want)
    np.testing.assert_array_equal(got_v.numpy(), want_v.numpy())
    assert got_v.dtype.name == str(want_v.dtype).removeprefix("torch."), (got_v.dtype, want_v.dtype)


VALUES: dict[str, Callable[[Any, Any], Any]] = {
    "int32 min at the extreme": lambda m, T: T(I32).min(),
    "int32 argmin at the extreme": lambda m, T: T(I32).argmin(),
    "uint8 min": lambda m, T: T(U8).min(),
    "uint8 argmin": lambda m, T: T(U8).argmin(),
    "uint8 min(dim)": lambda m, T: T(U8.reshape(2, 2)).min(1),
    "int32 amin": lambda m, T: T(I32.reshape(2, 2)).amin(0),
    "int32 minimum": lambda m, T: T(I32).minimum(T(np.zeros(4, np.int32))),
    "int32 | 0xFFFFFFFF wraps": lambda m, T: T(I32) | (0xFFFFFFFF if m is anneal else -1),
    "uint8 + 300 wraps": lambda m, T: T(U8) + (300 if m is anneal else 44),
    "any over a size-0 axis": lambda m, T: T(np.zeros((2, 0), np.float32)).any(1),
    "all over a size-0 axis": lambda m, T: T(np.zeros((2, 0), np.float32)).all(1),
    "cat with an empty piece": lambda m, T: m.cat([T(np.zeros((0, 3), np.float32)), T(np.ones((2, 3), np.float32))]),
    "cat skips a 1-d empty piece (torch's legacy rule)": lambda m, T: m.cat(
        [T(np.ones((2, 3), np.float32)), T(np.zeros(0, np.int64)), T(np.ones((1, 3), np.float32))]
    ),
    "softmax of 0-d": lambda m, T: T(np.float32(2.0)).softmax(0),
    "log_softmax of 0-d": lambda m, T: T(np.float32(2.0)).log_softmax(-1),
    "logsumexp of 0-d": lambda m, T: T(np.float32(2.0)).logsumexp(0),
    "tril of bool": lambda m, T: T(np.ones((3, 3), bool)).tril(),
    "triu of bool": lambda m, T: T(np.ones((3, 3), bool)).triu(1),
    "int ** 2.0 is float": lambda m, T: T(np.array([2, 3])) ** 2.0,
    "int ** 2 stays int": lambda m, T: T(np.array([2, 3])) ** 2,
    "NaN >= x is false": lambda m, T: T(np.array([np.nan, 1.0, 0.0], np.float32)) >= 0,
    "NaN <= x is false": lambda m, T: T(np.array([np.nan, 1.0, 0.0], np.float32)) <= T(np.float32(np.nan)),
    # prod(dtype=): the product taken in that dtype, wrapping as torch's
    "int32 prod(dtype=uint8) wraps": lambda m, T: T(np.array([3, 200, 7, 1], np.int32)).prod(dtype=m.uint8),
    "uint8 prod(dtype=int32)": lambda m, T: T(np.array([3, 200, 7], np.uint8)).prod(dtype=m.int32),
    "int8 prod(dim, dtype=int32)": lambda m, T: T(np.array([[3, -56], [7, 2]], np.int8)).prod(1, dtype=m.int32),
    "float prod(dtype=int32)": lambda m, T: T(np.array([3.5, 2.0, -4.0], np.float32)).prod(0, dtype=m.int32),
    "int32 prod(keepdim, dtype=bool)": lambda m, T: T(np.array([[3, 0], [7, 1]], np.int32)).prod(1, True, dtype=m.bool),
    "bool prod(dtype=uint8)": lambda m, T: T(np.array([True, True])).prod(dtype=m.uint8),
    "bool prod": lambda m, T: T(np.array([[True, False], [True, True]])).prod(1),
    "int32 prod is int64": lambda m, T: T(np.array([2**10, 2**10], np.int32)).prod(),
    # zero-size dims: empty results (and NaN for var/std, -inf for logsumexp), as torch's
    **{
        f"{name} over a size-0 dim": fn
        for name, fn in {
            "softmax": lambda m, T: T(np.zeros((3, 0, 2), np.float32)).softmax(1),
            "log_softmax": lambda m, T: T(np.zeros((3, 0, 2), np.float32)).log_softmax(1),
            "logsumexp": lambda m, T: T(np.zeros((3, 0, 2), np.float32)).logsumexp(1),
            "logsumexp keepdim": lambda m, T: T(np.zeros((3, 0), np.float32)).logsumexp(1, keepdim=True),
            "cumprod": lambda m, T: T(np.zeros((3, 0, 2), np.float32)).cumprod(1),
            "cumprod of ints": lambda m, T: T(np.zeros((0, 2), np.int32)).cumprod(0),
            "cummax": lambda m, T: T(np.zeros((3, 0, 2), np.float32)).cummax(1),
            "cummax indices": lambda m, T: T(np.zeros((3, 0, 2), np.float32)).cummax(1)[1],
            "cummin indices": lambda m, T: T(np.zeros((0, 2), np.int32)).cummin(0)[1],
            "logcumsumexp": lambda m, T: T(np.zeros((3, 0, 2), np.float32)).logcumsumexp(1),
            "var": lambda m, T: T(np.zeros((3, 0, 2), np.float32)).var(1),
            "std": lambda m, T: T(np.zeros((3, 0, 2), np.float32)).std(1),
            "var keepdim": lambda m, T: T(np.zeros((3, 0), np.float32)).var(1, keepdim=True),
            "var of all": lambda m, T: T(np.zeros((0, 2), np.float32)).var(),
            "std_mean": lambda m, T: m.std_mean(T(np.zeros((3, 0), np.float32)), 1)[0],
            "prod": lambda m, T: T(np.zeros((3, 0), np.float32)).prod(1),
        }.items()
    },
}


@pytest.mark.parametrize("name", list(VALUES))
def test_values_and_dtypes_as_torch(name: str) -> None:
    agree(VALUES[name])


ERRORS: dict[str, tuple[Callable[[Any, Any], Any], type[Exception], str]] = {
    "flip((0, 0))": (lambda m, T: T(np.arange(3.0)).flip((0, 0)), RuntimeError, "appears multiple times"),
    "full((-3,), 2)": (lambda m, T: (m.Tensor.full if m is anneal else m.full)((-3,), 2.0), RuntimeError,
                       "negative dimension -3"),
    "a bad rounding_mode": (lambda m, T: T(np.array([5.0])).div(T(np.array([2.0])), rounding_mode="bad"),
                            RuntimeError, "rounding_mode"),
    "int ** -2": (lambda m, T: T(np.array([2, 3])) ** -2, RuntimeError, "negative integer powers"),
    "cumsum(1) of 0-d": (lambda m, T: T(np.array(3.0)).cumsum(1), IndexError, "out of range"),
    "a float index tensor": (lambda m, T: T(np.arange(3.0))[T(np.array([1.0]))], IndexError, "indices"),
    "triu of 1-d": (lambda m, T: T(np.ones(3)).triu(), RuntimeError, "at least 2 dimensions"),
    "amax over a size-0 dim": (lambda m, T: T(np.zeros((0, 3))).amax(0), IndexError, "empty dim"),
    "argmax over a size-0 dim": (lambda m, T: T(np.zeros((0, 3))).argmax(0), IndexError, "empty dim"),
    "logcumsumexp of ints": (lambda m, T: T(np.array([1, 2])).logcumsumexp(0), NotImplementedError, "floating"),
}  # fmt: skip


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "logsumexp", "cumprod", "logcumsumexp", "var", "prod"])
def test_results_over_a_size_0_dim_require_grad_as_torchs(op: str) -> None:
    data = np.zeros((3, 0), np.float32)
    got = getattr(ours(data).requires_grad_(), op)(1)
    want = getattr(theirs(data).requires_grad_(), op)(1)
    assert got.requires_grad and want.requires_grad and tuple(got.shape) == tuple(want.shape)


@pytest.mark.parametrize("name", list(ERRORS))
def test_the_errors_torch_raises(name: str) -> None:
    fn, kind, words = ERRORS[name]
    with pytest.raises(kind, match=words):
        fn(anneal, ours)
    with pytest.raises(kind):
        fn(torch, theirs)


def test_clip_gradient_is_one_at_a_bound_and_zero_at_nan() -> None:
    data = np.array([0.5, 0.0, 0.2, 0.7, np.nan, -1.0], np.float32)
    x, tx = ours(data).requires_grad_(), theirs(data).requires_grad_()
    y, ty = x.clip(0.0, 0.5), tx.clip(0.0, 0.5)
    np.testing.assert_array_equal(y.numpy(), ty.detach().numpy())
    y.sum().backward()
    ty.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())


OUT_OF_RANGE: dict[str, Callable[[Any, Any, Any], Any]] = {
    "x[Tensor([5])]": lambda m, T, F: T(np.arange(3, dtype=np.float32))[T(np.array([5]))],
    "cross_entropy target 7 of 4 classes": lambda m, T, F: F.cross_entropy(T(np.zeros((2, 4), np.float32)),
                                                                           T(np.array([7, 1]))),
    "Embedding past the end": lambda m, T, F: F.embedding(T(np.array([3])), T(np.zeros((3, 2), np.float32))),
    "gather past the end": lambda m, T, F: T(np.zeros((2, 3), np.float32)).gather(1, T(np.array([[3], [0]]))),
}  # fmt: skip


@pytest.mark.parametrize("name", list(OUT_OF_RANGE))
def test_out_of_range_indices_raise_index_errors(name: str) -> None:
    with pytest.raises(IndexError, match="out of range for size"):
        OUT_OF_RANGE[name](anneal, ours, AF)
    with pytest.raises((IndexError, RuntimeError)):  # torch: IndexError, or RuntimeError for the target
        OUT_OF_RANGE[name](torch, theirs, TF)


def test_ignored_targets_and_negative_indices_are_in_range() -> None:
    logits, target = np.zeros((2, 4), np.float32), np.array([-100, 1])
    np.testing.assert_allclose(AF.cross_entropy(ours(logits), ours(target)).numpy(),
                               TF.cross_entropy(theirs(logits), theirs(target)).numpy(), rtol=1e-6)  # fmt: skip
    np.testing.assert_array_equal(ours(np.arange(3, dtype=np.float32))[ours(np.array([-1]))].numpy(), [2.0])


SHAPE_ERRORS: dict[str, Callable[[Any, Any], Any]] = {
    "broadcast": lambda m, T: T(np.ones(3, np.float32)) + T(np.ones(4, np.float32)),
    "matmul": lambda m, T: T(np.ones((2, 3), np.float32)) @ T(np.ones((4, 2), np.float32)),
    "reshape": lambda m, T: T(np.ones(6, np.float32)).reshape(4, 2),
    "expand": lambda m, T: T(np.ones((2, 3), np.float32)).expand(4, 3),
    "cat": lambda m, T: m.cat([T(np.ones((2, 3), np.float32)), T(np.ones((2, 4), np.float32))]),
    "stack": lambda m, T: m.stack([T(np.ones(2, np.float32)), T(np.ones(3, np.float32))]),
    "item of many": lambda m, T: T(np.ones(2, np.float32)).item(),
    "reshape to a negative size": lambda m, T: T(np.ones(6, np.float32)).reshape(-2, -3),
    "expand to a negative size": lambda m, T: T(np.ones(1, np.float32)).expand(-2),
    "einsum sizes": lambda m, T: m.einsum("ij,jk->ik", T(np.ones((2, 3), np.float32)), T(np.ones((4, 2), np.float32))),
    "einsum operand count": lambda m, T: m.einsum("ij,jk->ik", T(np.ones((2, 3), np.float32))),
    "layer_norm": lambda m, T: _F(m).layer_norm(T(np.ones((2, 3), np.float32)), (4,)),
    "group_norm": lambda m, T: _F(m).group_norm(T(np.ones((2, 3, 4), np.float32)), 2),
    "scaled_dot_product_attention": lambda m, T: _F(m).scaled_dot_product_attention(
        T(np.ones((1, 2, 3, 4), np.float32)), *(T(np.ones((1, 2, 3, 5), np.float32)) for _ in range(2))),
    "mse_loss": lambda m, T: _F(m).mse_loss(T(np.ones((2, 3), np.float32)), T(np.ones((3, 2), np.float32))),
    "l1_loss": lambda m, T: _F(m).l1_loss(T(np.ones((2, 3), np.float32)), T(np.ones((3, 2), np.float32))),
    "pad of odd length": lambda m, T: _F(m).pad(T(np.ones((2, 3), np.float32)), (1, 2, 3)),
    "pad to a negative size": lambda m, T: _F(m).pad(T(np.ones((1, 2, 3), np.float32)), (-2, -2), mode="replicate"),
    "reflect pad past the dim": lambda m, T: _F(m).pad(T(np.ones((1, 2, 3), np.float32)), (3, 0), mode="reflect"),
    "x[i] = v of another shape": lambda m, T: T(np.ones((3, 2), np.float32)).__setitem__(0, T(np.ones(3, np.float32))),
    "BatchNorm2d channels": lambda m, T: m.nn.BatchNorm2d(3)(T(np.ones((2, 4, 2, 2), np.float32))),
    "RMSNorm shape": lambda m, T: m.nn.RMSNorm(4)(T(np.ones((2, 3), np.float32))),
    "nll_loss weight shape": lambda m, T: _F(m).nll_loss(T(np.zeros((2, 3), np.float32)), T(np.array([0, 1])),
                                                         weight=T(np.ones(4, np.float32))),
    "nll_loss target shape": lambda m, T: _F(m).nll_loss(T(np.zeros((2, 3), np.float32)), T(np.array([0, 1, 2]))),
    "binary_cross_entropy": lambda m, T: _F(m).binary_cross_entropy(T(np.full((2, 3), 0.5, np.float32)),
                                                                    T(np.ones((3, 2), np.float32))),
    "BatchNorm2d of a 3-d input": lambda m, T: m.nn.BatchNorm2d(3)(T(np.ones((3, 2, 2), np.float32))),
}  # fmt: skip


def _F(m: Any) -> Any:  # noqa: N802 - torch's import name
    return AF if m is anneal else TF


@pytest.mark.parametrize("name", list(SHAPE_ERRORS))
def test_shape_errors_are_runtime_errors_as_torch(name: str) -> None:
    """ShapeError: a RuntimeError (torch's type for most; a ValueError for a few, which it is too)."""
    with pytest.raises((RuntimeError, ValueError)) as want:
        SHAPE_ERRORS[name](torch, theirs)
    with pytest.raises(type(want.value)) as got:
        SHAPE_ERRORS[name](anneal, ours)
    assert isinstance(got.value, RuntimeError) and isinstance(got.value, ValueError)


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("pad", [(-2, -1, 1, 0), (1, -1, -1, 2)])
def test_negative_pads_crop_in_every_mode(mode: str, pad: tuple[int, ...]) -> None:
    data = np.arange(36, dtype=np.float32).reshape(1, 2, 3, 6) / 7
    x, tx = ours(data).requires_grad_(), theirs(data).requires_grad_()
    y, ty = AF.pad(x, pad, mode=mode), TF.pad(tx, pad, mode=mode)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-6)
    (y * y).sum().backward()
    (ty * ty).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5)


def test_float16_matmul_gradients_are_as_precise_as_torchs() -> None:
    """Half sums accumulate in float32, as torch's: a float16 accumulator (shader-f16 on webgpu) made these
    gradients ten times less precise."""
    rng = np.random.default_rng(0)
    a, b, g = (rng.standard_normal(s).astype(np.float16) for s in ((64, 512), (512, 128), (64, 128)))
    x, w = Tensor(a, device=DEV).requires_grad_(), Tensor(b, device=DEV).requires_grad_()
    tx, tw = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    y, ty = x @ w, tx @ tw
    (y * Tensor(g, device=DEV)).sum().backward()
    (ty * torch.tensor(g)).sum().backward()
    exact = {"y": a.astype(np.float64) @ b, "x": g.astype(np.float64) @ b.T.astype(np.float64),
             "w": a.T.astype(np.float64) @ g}  # fmt: skip
    for name, got, theirs in (("y", y, ty), ("x", x.grad, tx.grad), ("w", w.grad, tw.grad)):
        assert got.dtype == anneal.float16
        error = np.abs(got.numpy().astype(np.float64) - exact[name]).max()
        torch_error = np.abs(theirs.detach().numpy().astype(np.float64) - exact[name]).max()
        assert error <= 1.5 * torch_error, (name, error, torch_error)

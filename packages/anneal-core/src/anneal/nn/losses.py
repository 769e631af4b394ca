"""torch.nn.functional's losses beyond cross entropy, with torch's reductions, weights and gradients.

Binary cross entropy clamps its logs at -100 as torch does, and takes torch's gradient
(x - y) / max(x (1 - x), 1e-12) as a rule, so a prediction of exactly 0 or 1 gives a finite gradient."""

from __future__ import annotations

from anneal import special
from anneal.composite import with_gradient
from anneal.errors import ShapeError
from anneal.tensor import Tensor, where

LOG_FLOOR = -100.0  # torch clamps binary cross entropy's logs here
BCE_EPS = 1e-12  # and its gradient's denominator here


def legacy_reduction(size_average: bool | None, reduce: bool | None, reduction: str) -> str:
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    return "mean" if size_average and reduce else "sum" if reduce else "none"


def reduce_loss(loss: Tensor, reduction: str, name: str) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"{name}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _same_shape(input: Tensor, target: Tensor, name: str) -> None:  # noqa: A002
    if input.shape != target.shape:
        raise ShapeError(f"{name}: input shape {input.shape} and target shape {target.shape} differ "
                         "(torch would broadcast with a warning; pass tensors of one shape)")  # fmt: skip


def l1_loss(input: Tensor, target: Tensor, size_average: bool | None = None, reduce: bool | None = None,  # noqa: A002
            reduction: str = "mean") -> Tensor:  # fmt: skip
    _same_shape(input, target, "l1_loss")
    return reduce_loss((input - target).abs(), legacy_reduction(size_average, reduce, reduction), "l1_loss")


def smooth_l1_loss(input: Tensor, target: Tensor, size_average: bool | None = None,  # noqa: A002
                   reduce: bool | None = None, reduction: str = "mean", beta: float = 1.0) -> Tensor:  # fmt: skip
    _same_shape(input, target, "smooth_l1_loss")
    if beta < 0:
        raise ValueError(f"smooth_l1_loss: beta must be >= 0, got {beta}")
    d = (input - target).abs()
    loss = d if beta == 0 else where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta)
    return reduce_loss(loss, legacy_reduction(size_average, reduce, reduction), "smooth_l1_loss")


def binary_cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,  # noqa: A002
                         size_average: bool | None = None, reduce: bool | None = None,
                         reduction: str = "mean") -> Tensor:  # fmt: skip
    _same_shape(input, target, "binary_cross_entropy")
    x, y = input._float(), target.cast(input._float().dtype)
    loss = with_gradient(_bce(x, y), (x, y), _bce_gradient)
    if weight is not None:
        loss = loss * weight
    return reduce_loss(loss, legacy_reduction(size_average, reduce, reduction), "binary_cross_entropy")


def _bce(x: Tensor, y: Tensor) -> Tensor:
    return -(y * x.log().maximum(LOG_FLOOR) + (1 - y) * (1 - x).log().maximum(LOG_FLOOR))


def _bce_gradient(g: Tensor, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    dx = g * (x - y) / (x * (1 - x)).maximum(BCE_EPS)
    dy = g * ((1 - x).log() - x.log())  # unclamped, as torch's: infinite at x = 0 and 1
    return dx, dy


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight: Tensor | None = None,  # noqa: A002
                                     size_average: bool | None = None, reduce: bool | None = None,
                                     reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:  # fmt: skip
    """(1 - y) x + (1 + (pos_weight - 1) y) softplus(-x): stable for any logit."""
    _same_shape(input, target, "binary_cross_entropy_with_logits")
    x, y = input._float(), target.cast(input._float().dtype)
    scale = 1 if pos_weight is None else 1 + (pos_weight - 1) * y
    loss = (1 - y) * x + scale * special.softplus(-x)
    if weight is not None:
        loss = loss * weight
    return reduce_loss(loss, legacy_reduction(size_average, reduce, reduction), "binary_cross_entropy_with_logits")


def nll_loss(input: Tensor, target: Tensor, weight: Tensor | None = None, size_average: bool | None = None,  # noqa: A002
             ignore_index: int = -100, reduce: bool | None = None, reduction: str = "mean") -> Tensor:  # fmt: skip
    """The negative log-likelihood of class indices, input holding log-probabilities (N, C, ...) or (C,)."""
    from anneal.nn.functional import class_nll

    return class_nll(input, target, weight, ignore_index, legacy_reduction(size_average, reduce, reduction), "nll_loss")

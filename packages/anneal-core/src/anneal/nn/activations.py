"""torch.nn.functional's pointwise activations, as Tensor compositions with torch's values and gradients,
including at the kinks (hardtanh's and hardsigmoid's gradients are 0 on their boundaries, as torch's)."""

from __future__ import annotations

import math

from anneal import special
from anneal.errors import ShapeError
from anneal.tensor import Tensor, where

SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def sigmoid(input: Tensor) -> Tensor:  # noqa: A002 - torch's names
    return input.sigmoid()


def logsigmoid(input: Tensor) -> Tensor:  # noqa: A002
    return -special.softplus(-input._float())


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:  # noqa: A002
    return input.softplus(beta, threshold)


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:  # noqa: A002
    x = input._float()
    # expm1 of x clamped to <= 0: the unused branch stays finite, so its (masked) gradient is 0, not 0 * inf
    return where(x > 0, x, alpha * special.expm1(where(x > 0, 0.0, x)))


def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:  # noqa: A002
    if alpha == 0:
        raise ValueError("celu: alpha must not be 0")
    x = input._float()
    return where(x > 0, x, alpha * special.expm1(where(x > 0, 0.0, x) / alpha))


def selu(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    return SELU_SCALE * elu(input, SELU_ALPHA)


def mish(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    x = input._float()
    return x * special.softplus(x).tanh()


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Tensor:  # noqa: A002
    if min_val > max_val:
        raise ValueError(f"hardtanh: min_val ({min_val}) must not exceed max_val ({max_val})")
    return where(input <= min_val, min_val, where(input >= max_val, max_val, input)).cast(input.dtype)


def relu6(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    return hardtanh(input, 0.0, 6.0)


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    x = input._float()
    return where(x <= -3, 0.0, where(x >= 3, 1.0, x / 6 + 0.5))


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    x = input._float()
    return where(x <= -3, 0.0, where(x >= 3, x, x * (x + 3) / 6))


def softsign(input: Tensor) -> Tensor:  # noqa: A002
    x = input._float()
    return x / (1 + x.abs())


def softmin(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: object = None) -> Tensor:  # noqa: A002
    from anneal.nn.functional import softmax

    return softmax(-input, dim, dtype=dtype)  # type: ignore[arg-type]


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:  # noqa: A002
    """input / max(||input||_p, eps) along dim. The clamp is applied before the root (the same value, since
    the root is monotonic), so a zero vector's gradient is finite, as torch's."""
    x = input._float()
    if p == math.inf:
        norm = x.abs().amax(dim, keepdim=True).maximum(eps)
    elif p == 1:
        norm = x.abs().sum(dim, keepdim=True).maximum(eps)
    else:
        power = (x.abs() ** p).sum(dim, keepdim=True).maximum(eps**p)
        norm = power.sqrt() if p == 2 else power ** (1 / p)
    return x / norm


def group_norm(input: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None,  # noqa: A002
               eps: float = 1e-5) -> Tensor:  # fmt: skip
    if input.ndim < 2:
        raise ShapeError(f"group_norm: expected an input of at least 2 dims (N, C, ...), got shape {input.shape}")
    n, c = input.shape[0], input.shape[1]
    if num_groups <= 0 or c % num_groups:
        raise ShapeError(f"group_norm: {c} channels cannot be split into {num_groups} groups")
    x = input._float().reshape(n, num_groups, -1)
    mean = x.mean(2, keepdim=True)
    var = ((x - mean) ** 2).mean(2, keepdim=True)
    out = ((x - mean) / (var + eps).sqrt()).reshape(input.shape)
    channel = (1, c) + (1,) * (input.ndim - 2)
    if weight is not None:
        out = out * weight.reshape(channel)
    if bias is not None:
        out = out + bias.reshape(channel)
    return out

"""Gradient checks: every differentiable Tensor op's backward() against torch autograd (float32).

Each case runs the same function on anneal and torch inputs, back-propagates the same random
output gradient (not all-ones, which hides transposed or mis-summed gradients), and compares the
forward value and every input's gradient at rtol 1e-4. Inputs are chosen away from kinks and
ties (relu at 0, max ties, clip bounds) except where a case tests the tie rule itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from devices import HAS_F64

import anneal.nn.functional as AF
from anneal import Tensor
from anneal import cat as acat
from anneal import stack as astack
from anneal import where as awhere
from anneal.optim import realize_all

RTOL = 1e-4
# float32 gradients that are sums of many terms and whose true value is close to 0 carry an absolute
# rounding error of about eps32 * sum(|terms|) ~ 1e-6 for these sizes; no relative tolerance can absorb it.
ATOL = 1e-5


def N(*shape: int, seed: int = 0) -> np.ndarray:  # noqa: N802 - reads like a type
    return np.random.default_rng(seed + 101 * len(shape) + sum(shape)).standard_normal(shape).astype(np.float32)


def U(lo: float, hi: float, *shape: int, seed: int = 0) -> np.ndarray:  # noqa: N802
    return np.random.default_rng(seed + 7 + sum(shape)).uniform(lo, hi, shape).astype(np.float32)


def I(high: int, *shape: int, seed: int = 0) -> np.ndarray:  # noqa: N802, E743
    return np.random.default_rng(seed + 3 + sum(shape)).integers(0, high, shape).astype(np.int64)


def B(*shape: int, seed: int = 0) -> np.ndarray:  # noqa: N802
    return np.random.default_rng(seed + 5 + sum(shape)).random(shape) > 0.5


def run_case(fn: Callable[..., Any], tfn: Callable[..., Any] | None, inputs: list[np.ndarray],
             rtol: float = RTOL, atol: float = ATOL, read_first: bool = False) -> None:  # fmt: skip
    """With read_first, the forward value is read before backward(), as PyTorch users do."""
    tfn = tfn or fn
    diff = [a.dtype.kind == "f" for a in inputs]
    ai = [Tensor(a, requires_grad=d) for a, d in zip(inputs, diff)]
    ti = [torch.tensor(a, requires_grad=d) for a, d in zip(inputs, diff)]
    out, tout = fn(*ai), tfn(*ti)
    assert out.shape == tuple(tout.shape), f"forward shape {out.shape} != torch {tuple(tout.shape)}"
    if read_first:
        np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=rtol, atol=atol, err_msg="forward")
    g = np.random.default_rng(42).standard_normal(out.shape).astype(np.float32)
    out.backward(Tensor(g))
    tout.backward(torch.tensor(g))
    grads = [a.grad for a, d in zip(ai, diff) if d]
    assert all(gr is not None for gr in grads), "an input that requires grad got no .grad"
    realize_all([out, *grads])  # one schedule for forward and all gradients
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=rtol, atol=atol, err_msg="forward")
    for k, (a, t) in enumerate((a, t) for a, t, d in zip(ai, ti, diff) if d):
        assert a.grad is not None and t.grad is not None
        np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=rtol, atol=atol, err_msg=f"grad of input {k}")


def case(name: str, fn: Callable[..., Any], inputs: list[np.ndarray], tfn: Callable[..., Any] | None = None,
         **tol: float) -> Any:  # fmt: skip
    return pytest.param(fn, tfn, inputs, tol, id=name)


X = N(3, 4)
POS = U(0.5, 2.0, 3, 4)

UNARY = [
    case("neg", lambda x: -x, [X]),
    case("exp", lambda x: x.exp(), [X]),
    case("exp2", lambda x: x.exp2(), [X]),
    case("log", lambda x: x.log(), [POS]),
    case("log2", lambda x: x.log2(), [POS]),
    case("sqrt", lambda x: x.sqrt(), [POS]),
    case("rsqrt", lambda x: x.rsqrt(), [POS]),
    case("reciprocal", lambda x: x.reciprocal(), [POS]),
    case("sin", lambda x: x.sin(), [X]),
    case("cos", lambda x: x.cos(), [X]),
    case("tan", lambda x: x.tan(), [U(-1.2, 1.2, 3, 4)]),
    case("sigmoid", lambda x: x.sigmoid(), [X]),
    case("tanh", lambda x: x.tanh(), [X]),
    case("relu", lambda x: x.relu(), [X]),
    case("leaky_relu", lambda x: AF.relu(x) + x.leaky_relu(0.1), [X], lambda x: TF.relu(x) + TF.leaky_relu(x, 0.1)),
    case("silu", lambda x: AF.silu(x), [X], lambda x: TF.silu(x)),
    case("gelu", lambda x: AF.gelu(x), [X], lambda x: TF.gelu(x)),
    case("gelu_tanh", lambda x: AF.gelu(x, "tanh"), [X], lambda x: TF.gelu(x, approximate="tanh")),
    case("erf", lambda x: x.erf(), [X]),
    case("softplus", lambda x: x.softplus(), [X], lambda x: TF.softplus(x)),
    case("abs", lambda x: x.abs(), [X]),
    case("square", lambda x: x.square(), [X]),
    case(
        "floor_ceil_round_trunc_zero_grad", lambda x: x.floor() + x.ceil() + x.round() + x.trunc() + x, [U(-3, 3, 3, 4)]
    ),
    case("sign_zero_grad", lambda x: x.sign() * 3 + x * x, [X]),
    case("float64_cast", lambda x: (x.double() if HAS_F64 else x.float()).exp().float(), [X]),
]

POW = [
    case("pow_int", lambda x: x**3, [X]),
    case("pow_half", lambda x: x**0.5, [POS]),
    case("pow_frac", lambda x: x**2.5, [POS]),
    case("pow_neg", lambda x: x**-1.5, [POS]),
    case("pow_tensor_tensor", lambda x, y: x**y, [POS, N(3, 4, seed=1)]),
    case("rpow_scalar_base", lambda x: 2.0**x, [X]),
    case("pow_neg_base_int_exp", lambda x: x**4, [U(-2, -0.5, 3, 4)]),
]

BINARY = [
    case("add", lambda x, y: x + y, [X, N(3, 4, seed=1)]),
    case("add_broadcast", lambda x, y: x + y, [N(3, 1, 5), N(4, 1, seed=1)]),
    case("sub_broadcast", lambda x, y: x - y, [X, N(4, seed=1)]),
    case("rsub_scalar", lambda x: 1.5 - x, [X]),
    case("mul_broadcast", lambda x, y: x * y, [N(2, 3, 4), N(3, 1, seed=1)]),
    case("div", lambda x, y: x / y, [X, U(0.5, 2, 3, 4, seed=2)]),
    case("div_broadcast", lambda x, y: x / y, [X, U(0.5, 2, 4, seed=2)]),
    case("rdiv_scalar", lambda x: 2.0 / x, [POS]),
    case("remainder", lambda x, y: x % y, [U(-3, 3, 3, 4), U(0.5, 2, 3, 4, seed=2)]),
    case("half_roundtrip", lambda x: x.half().float() * x, [X]),
    case("maximum", lambda x, y: x.maximum(y), [X, N(3, 4, seed=1)], lambda x, y: torch.maximum(x, y)),
    case("minimum", lambda x, y: x.minimum(y), [X, N(3, 4, seed=1)], lambda x, y: torch.minimum(x, y)),
    case(
        "maximum_ties",
        lambda x, y: x.maximum(y),
        [np.array([1.0, 2.0, 3.0], np.float32), np.array([1.0, 0.0, 3.0], np.float32)],
        lambda x, y: torch.maximum(x, y),
    ),
    case("maximum_scalar", lambda x: x.maximum(0.1), [X], lambda x: torch.clamp(x, min=0.1)),
    case("where", lambda c, x, y: awhere(c, x, y), [B(3, 4), X, N(4, seed=1)], lambda c, x, y: torch.where(c, x, y)),
    case("where_scalar", lambda c, x: awhere(c, x, 0.5), [B(3, 4), X], lambda c, x: torch.where(c, x, 0.5)),
    case("tensor_where_method", lambda c, x, y: x.where(c, y), [B(3, 4), X, N(3, 4, seed=1)]),
    case("masked_fill", lambda x, m: x.masked_fill(m, -1.0), [X, B(3, 4)]),
    case("clip", lambda x: x.clip(-0.5, 0.5), [X], lambda x: x.clamp(-0.5, 0.5)),
    case("clip_min_only", lambda x: x.clip(min=0.2), [X], lambda x: x.clamp(min=0.2)),
]

REDUCE = [
    case("sum_all", lambda x: x.sum(), [X]),
    case("sum_axis", lambda x: x.sum(1), [N(2, 3, 4)]),
    case("sum_axes_keepdim", lambda x: x.sum((0, 2), keepdim=True), [N(2, 3, 4)]),
    case("mean", lambda x: x.mean(1), [N(2, 3, 4)]),
    case("mean_all", lambda x: x.mean(), [X]),
    case("max_axis", lambda x: x.amax(1), [N(2, 3, 4)], lambda x: x.amax(1)),
    case("max_all", lambda x: x.max(), [X]),
    case("min_axis", lambda x: x.amin(0), [X], lambda x: x.amin(0)),
    # torch.amax/amin split a tie's gradient evenly among the maxima, as anneal's rule does
    case("amax_ties", lambda x: x.amax(1), [np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]], np.float32)]),
    case("amin_ties", lambda x: x.amin(0), [np.array([[1.0, 3.0], [1.0, 2.0]], np.float32)]),
    case("var", lambda x: x.var(1), [N(3, 5)]),
    case("var_correction0", lambda x: x.var(0, correction=0), [N(3, 5)]),
    case("std", lambda x: x.std(1, keepdim=True), [N(3, 5)]),
    case("std_all", lambda x: x.std(), [N(3, 5)]),
    case("logsumexp", lambda x: x.logsumexp(1), [N(3, 5)]),
    case("logsumexp_large", lambda x: (x * 30).logsumexp(0), [N(3, 5)]),
    case("softmax", lambda x: x.softmax(-1), [N(3, 5)]),
    case("softmax_dim0", lambda x: x.softmax(0), [N(2, 3, 5)]),
    case("log_softmax", lambda x: x.log_softmax(1), [N(3, 5)]),
    case("cumsum", lambda x: x.cumsum(1), [N(3, 5)]),
    case("cumsum_dim0", lambda x: x.cumsum(0), [N(4, 3)]),
    case("prod", lambda x: x.prod(1), [U(0.5, 1.5, 3, 4) * np.sign(N(3, 4))]),
]

MOVEMENT = [
    case(
        "reshape",
        lambda x: x.reshape(6, 4) * N(6, 4, seed=9),
        [N(2, 3, 4)],
        lambda x: x.reshape(6, 4) * torch.tensor(N(6, 4, seed=9)),
    ),
    case("reshape_minus1", lambda x: x.reshape(-1, 2), [N(2, 3, 4)]),
    case("permute", lambda x: x.permute(2, 0, 1), [N(2, 3, 4)]),
    case("transpose", lambda x: x.transpose(0, 2), [N(2, 3, 4)]),
    case("T", lambda x: x.T * 2, [X]),
    case("expand", lambda x: x.expand(2, 3, 4), [N(3, 1)]),
    case("expand_as_broadcast", lambda x, y: x.expand_as(y) * y, [N(1, 4), N(3, 4, seed=1)]),
    case("flip", lambda x: x.flip(1), [N(2, 3, 4)]),
    case("flip_multi", lambda x: x.flip((0, 2)), [N(2, 3, 4)]),
    case("pad_constant", lambda x: AF.pad(x, (1, 2, 0, 1)), [X], lambda x: TF.pad(x, (1, 2, 0, 1))),
    case("pad_value", lambda x: AF.pad(x, (2, 1), value=3.0), [X], lambda x: TF.pad(x, (2, 1), value=3.0)),
    case("pad_negative", lambda x: AF.pad(x, (-1, 2, 1, -1)), [X], lambda x: TF.pad(x, (-1, 2, 1, -1))),
    case(
        "pad_reflect",
        lambda x: AF.pad(x, (2, 1), mode="reflect"),
        [N(2, 3, 4)],
        lambda x: TF.pad(x, (2, 1), mode="reflect"),
    ),
    case(
        "pad_replicate",
        lambda x: AF.pad(x, (2, 1, 1, 0), mode="replicate"),
        [N(1, 2, 3, 4)],
        lambda x: TF.pad(x, (2, 1, 1, 0), mode="replicate"),
    ),
    case(
        "pad_circular",
        lambda x: AF.pad(x, (1, 2), mode="circular"),
        [N(2, 3, 4)],
        lambda x: TF.pad(x, (1, 2), mode="circular"),
    ),
    case("squeeze", lambda x: x.squeeze(1), [N(3, 1, 4)]),
    case("squeeze_all", lambda x: x.squeeze(), [N(3, 1, 4, 1)]),
    case("unsqueeze", lambda x: x.unsqueeze(-1), [X]),
    case("flatten", lambda x: x.flatten(1), [N(2, 3, 4)]),
    case("unflatten", lambda x: x.unflatten(1, (2, 2)), [X]),
    case("repeat", lambda x: x.repeat(2, 1, 3), [X]),
    case(
        "cat",
        lambda x, y, z: acat([x, y, z], 1),
        [N(2, 3), N(2, 1, seed=1), N(2, 4, seed=2)],
        lambda x, y, z: torch.cat([x, y, z], 1),
    ),
    case("cat_dim0", lambda x, y: acat([x, y]), [N(2, 3), N(1, 3, seed=1)], lambda x, y: torch.cat([x, y])),
    case("stack", lambda x, y: astack([x, y], 1), [X, N(3, 4, seed=1)], lambda x, y: torch.stack([x, y], 1)),
    case("slice_basic", lambda x: x[1:, ::2], [N(4, 5)]),
    # torch has no negative slice steps: its side is written with flip (x[::-k] == x.flip(0)[::k])
    case("slice_negative_step", lambda x: x[::-1], [N(4, 5)], lambda x: x.flip(0)),
    case("slice_negative_step2", lambda x: x[::-2, 1], [N(5, 4)], lambda x: x.flip(0)[::2, 1]),
    case("slice_negative_step_range", lambda x: x[:, 4:0:-3], [N(3, 6)], lambda x: x.flip(1)[:, 1:5:3]),
    case("slice_none_ellipsis", lambda x: x[None, ..., 2], [N(2, 3, 4)]),
    case("slice_negative_bounds", lambda x: x[:, -3:-1], [N(3, 5)]),
    case("split", lambda x: x.split(2, 1)[1] * 2 + x.split(2, 1)[0], [N(3, 4)]),
    case("chunk", lambda x: x.chunk(2, 0)[0] - x.chunk(2, 0)[1], [N(4, 3)]),
    case("index_tensor", lambda x, i: x[i], [N(5, 3), np.array([4, 0, 4, 2], np.int64)]),
    case("contiguous_clone", lambda x: x.contiguous() * x.clone(), [X]),
]

LINALG = [
    case("matmul", lambda x, y: x @ y, [N(3, 4), N(4, 5, seed=1)]),
    case("matmul_batched", lambda x, y: x @ y, [N(2, 3, 4), N(2, 4, 5, seed=1)]),
    case("matmul_broadcast", lambda x, y: x @ y, [N(2, 1, 3, 4), N(3, 4, 5, seed=1)]),
    case("matmul_broadcast_2d", lambda x, y: x @ y, [N(2, 3, 4), N(4, 5, seed=1)]),
    case("vector_matrix", lambda x, y: x @ y, [N(4), N(4, 5, seed=1)]),
    case("matrix_vector", lambda x, y: x @ y, [N(3, 4), N(4, seed=1)]),
    case("dot", lambda x, y: x.dot(y), [N(4), N(4, seed=1)]),
    case(
        "linear",
        lambda x, w, b: AF.linear(x, w, b),
        [N(2, 3, 4), N(5, 4, seed=1), N(5, seed=2)],
        lambda x, w, b: TF.linear(x, w, b),
    ),
    case("gather", lambda x, i: x.gather(1, i), [N(3, 5), I(5, 3, 2)]),
    case("gather_dim0", lambda x, i: x.gather(0, i), [N(4, 3), I(4, 2, 3)]),
    case("tril_triu", lambda x: x.tril() + 2 * x.triu(1), [N(4, 4)]),
]

CLASS_W = U(0.5, 2, 6)
NN = [
    case(
        "embedding",
        lambda i, w: AF.embedding(i, w),
        [np.array([[1, 3, 1], [0, 4, 2]], np.int64), N(5, 3)],
        lambda i, w: TF.embedding(i, w),
    ),
    case(
        "embedding_padding_idx",
        lambda i, w: AF.embedding(i, w, padding_idx=1),
        [np.array([1, 3, 1, 0], np.int64), N(5, 3)],
        lambda i, w: TF.embedding(i, w, padding_idx=1),
    ),
    case(
        "layer_norm",
        lambda x, w, b: AF.layer_norm(x, (5,), w, b),
        [N(2, 3, 5), N(5, seed=1), N(5, seed=2)],
        lambda x, w, b: TF.layer_norm(x, (5,), w, b),
    ),
    case(
        "layer_norm_2d_no_affine", lambda x: AF.layer_norm(x, (3, 5)), [N(2, 3, 5)], lambda x: TF.layer_norm(x, (3, 5))
    ),
    case("cross_entropy", lambda x, t: AF.cross_entropy(x, t), [N(4, 6), I(6, 4)], lambda x, t: TF.cross_entropy(x, t)),
    case(
        "cross_entropy_smoothing",
        lambda x, t: AF.cross_entropy(x, t, label_smoothing=0.1),
        [N(4, 6), I(6, 4)],
        lambda x, t: TF.cross_entropy(x, t, label_smoothing=0.1),
    ),
    case(
        "cross_entropy_ignore_index",
        lambda x, t: AF.cross_entropy(x, t, ignore_index=2),
        [N(5, 6), np.array([2, 0, 5, 2, 1], np.int64)],
        lambda x, t: TF.cross_entropy(x, t, ignore_index=2),
    ),
    # torch has no gradient for the class weights: they are a constant here
    case(
        "cross_entropy_weight",
        lambda x, t: AF.cross_entropy(x, t, weight=Tensor(CLASS_W)),
        [N(4, 6), I(6, 4)],
        lambda x, t: TF.cross_entropy(x, t, weight=torch.tensor(CLASS_W)),
    ),
    case(
        "cross_entropy_probs",
        lambda x, p: AF.cross_entropy(x, p.softmax(1)),
        [N(4, 6), N(4, 6, seed=1)],
        lambda x, p: TF.cross_entropy(x, p.softmax(1)),
    ),
    case(
        "cross_entropy_spatial_sum",
        lambda x, t: AF.cross_entropy(x, t, reduction="sum"),
        [N(2, 4, 3), I(4, 2, 3)],
        lambda x, t: TF.cross_entropy(x, t, reduction="sum"),
    ),
    case(
        "cross_entropy_none",
        lambda x, t: AF.cross_entropy(x, t, reduction="none"),
        [N(4, 6), I(6, 4)],
        lambda x, t: TF.cross_entropy(x, t, reduction="none"),
    ),
]

CONV = [
    case(
        "conv2d",
        lambda x, w, b: AF.conv2d(x, w, b),
        [N(2, 3, 6, 6), N(4, 3, 3, 3, seed=1), N(4, seed=2)],
        lambda x, w, b: TF.conv2d(x, w, b),
    ),
    case(
        "conv2d_stride_padding",
        lambda x, w: AF.conv2d(x, w, stride=2, padding=1),
        [N(2, 3, 7, 6), N(4, 3, 3, 3, seed=1)],
        lambda x, w: TF.conv2d(x, w, stride=2, padding=1),
    ),
    case(
        "conv2d_dilation",
        lambda x, w: AF.conv2d(x, w, padding=2, dilation=2),
        [N(1, 2, 7, 7), N(3, 2, 3, 3, seed=1)],
        lambda x, w: TF.conv2d(x, w, padding=2, dilation=2),
    ),
    case(
        "conv2d_groups",
        lambda x, w, b: AF.conv2d(x, w, b, groups=2),
        [N(2, 4, 5, 5), N(6, 2, 3, 3, seed=1), N(6, seed=2)],
        lambda x, w, b: TF.conv2d(x, w, b, groups=2),
    ),
    case(
        "conv2d_depthwise_rect",
        lambda x, w: AF.conv2d(x, w, stride=(2, 1), padding=(1, 0), groups=3),
        [N(1, 3, 6, 5), N(3, 1, 3, 2, seed=1)],
        lambda x, w: TF.conv2d(x, w, stride=(2, 1), padding=(1, 0), groups=3),
    ),
    case(
        "conv2d_same_1x1",
        lambda x, w, v: AF.conv2d(x, w, padding="same") + AF.conv2d(x, v),
        [N(1, 2, 5, 5), N(3, 2, 4, 4, seed=1), N(3, 2, 1, 1, seed=2)],
        lambda x, w, v: TF.conv2d(x, w, padding="same") + TF.conv2d(x, v),
    ),
    case("max_pool2d", lambda x: AF.max_pool2d(x, 2), [N(2, 3, 6, 6)], lambda x: TF.max_pool2d(x, 2)),
    case(
        "max_pool2d_overlap_pad",
        lambda x: AF.max_pool2d(x, 3, 2, 1),
        [N(1, 2, 7, 6)],
        lambda x: TF.max_pool2d(x, 3, 2, 1),
    ),
    case(
        "max_pool2d_ceil_dilation",
        lambda x: AF.max_pool2d(x, 2, 2, 0, 2, ceil_mode=True),
        [N(1, 2, 8, 7)],
        lambda x: TF.max_pool2d(x, 2, 2, 0, 2, ceil_mode=True),
    ),
    case("avg_pool2d", lambda x: AF.avg_pool2d(x, 2), [N(2, 3, 6, 6)], lambda x: TF.avg_pool2d(x, 2)),
    case(
        "avg_pool2d_pad_exclude",
        lambda x: AF.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
        [N(1, 2, 7, 6)],
        lambda x: TF.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
    ),
    case(
        "avg_pool2d_ceil",
        lambda x: AF.avg_pool2d(x, 3, 2, ceil_mode=True),
        [N(1, 2, 6, 6)],
        lambda x: TF.avg_pool2d(x, 3, 2, ceil_mode=True),
    ),
]

SDPA = [
    case(
        "sdpa",
        lambda q, k, v: AF.scaled_dot_product_attention(q, k, v),
        [N(2, 2, 4, 8), N(2, 2, 5, 8, seed=1), N(2, 2, 5, 6, seed=2)],
        TF.scaled_dot_product_attention,
    ),
    case(
        "sdpa_causal",
        lambda q, k, v: AF.scaled_dot_product_attention(q, k, v, is_causal=True),
        [N(1, 2, 5, 8), N(1, 2, 5, 8, seed=1), N(1, 2, 5, 8, seed=2)],
        lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, is_causal=True),
    ),
    case(
        "sdpa_gqa_causal",
        lambda q, k, v: AF.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
        [N(1, 4, 5, 8), N(1, 2, 5, 8, seed=1), N(1, 2, 5, 8, seed=2)],
        lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
    ),
    case(
        "sdpa_bool_mask_scale",
        lambda q, k, v, m: AF.scaled_dot_product_attention(q, k, v, m, scale=0.3),
        [N(2, 3, 8), N(2, 4, 8, seed=1), N(2, 4, 8, seed=2), np.tril(np.ones((3, 4), bool))],
        lambda q, k, v, m: TF.scaled_dot_product_attention(q, k, v, m, scale=0.3),
    ),
    case(
        "sdpa_float_mask",
        lambda q, k, v, m: AF.scaled_dot_product_attention(q, k, v, m),
        [N(2, 3, 8), N(2, 4, 8, seed=1), N(2, 4, 8, seed=2), N(3, 4, seed=3)],
        lambda q, k, v, m: TF.scaled_dot_product_attention(q, k, v, m),
    ),
]

ALL = UNARY + POW + BINARY + REDUCE + MOVEMENT + LINALG + NN + CONV + SDPA


@pytest.mark.parametrize("fn, tfn, inputs, tol", ALL)
def test_grad_matches_torch(fn: Callable[..., Any], tfn: Callable[..., Any] | None, inputs: list[np.ndarray],
                            tol: dict[str, float]) -> None:  # fmt: skip
    run_case(fn, tfn, inputs, **tol)


@pytest.mark.parametrize("fn, tfn, inputs, tol", ALL)
def test_grad_after_reading_the_forward(fn: Callable[..., Any], tfn: Callable[..., Any] | None,
                                        inputs: list[np.ndarray], tol: dict[str, float]) -> None:  # fmt: skip
    run_case(fn, tfn, inputs, **tol, read_first=True)


# ---- the autograd API around the rules ----


def test_backward_accumulates_like_torch() -> None:
    a = Tensor(N(3), requires_grad=True)
    (a * 2).sum().backward()
    (a * a).sum().backward()
    ta = torch.tensor(N(3), requires_grad=True)
    (ta * 2).sum().backward()
    (ta * ta).sum().backward()
    assert a.grad is not None and ta.grad is not None
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=RTOL)


def test_gradient_returns_lazy_grads_without_touching_grad() -> None:
    x, y = Tensor(N(3, 4), requires_grad=True), Tensor(N(4, 2, seed=1), requires_grad=True)
    out = (x @ y).tanh().sum()
    gx, gy = out.gradient(x, y)
    assert x.grad is None and y.grad is None
    tx, ty = torch.tensor(N(3, 4), requires_grad=True), torch.tensor(N(4, 2, seed=1), requires_grad=True)
    rx, ry = torch.autograd.grad((tx @ ty).tanh().sum(), (tx, ty))
    np.testing.assert_allclose(gx.numpy(), rx.numpy(), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(gy.numpy(), ry.numpy(), rtol=RTOL, atol=ATOL)


def test_detach_stops_gradient() -> None:
    x = Tensor(N(4), requires_grad=True)
    (x * x.detach()).sum().backward()
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), N(4), rtol=RTOL)


def test_second_order_gradient() -> None:
    """The gradient is graph too: differentiating it again gives the second derivative."""
    x = Tensor(N(5), requires_grad=True)
    (g,) = (x.sin() * x).sum().gradient(x)
    g.sum().backward()
    tx = torch.tensor(N(5), requires_grad=True)
    (tg,) = torch.autograd.grad((tx.sin() * tx).sum(), tx, create_graph=True)
    tg.sum().backward()
    assert x.grad is not None and tx.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=RTOL, atol=ATOL)


def test_backward_of_non_scalar_needs_gradient() -> None:
    x = Tensor(N(3), requires_grad=True)
    with pytest.raises(RuntimeError, match="scalar"):
        (x * 2).backward()

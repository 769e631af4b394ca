"""anneal.nn.functional: torch.nn.functional's names, argument order and defaults.

Every function is a composite of Tensor ops, so it becomes ordinary graph that the
compiler fuses (no numpy on the data). Convolution is im2col as movement ops (no copy)
plus one matmul; pooling gathers the same windows and reduces them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from anneal import random as _random
from anneal.composite import with_gradient
from anneal.nn.activations import (
    celu,
    elu,
    group_norm,
    hardsigmoid,
    hardswish,
    hardtanh,
    logsigmoid,
    mish,
    normalize,
    relu6,
    selu,
    sigmoid,
    softmin,
    softplus,
    softsign,
)
from anneal.nn.losses import (
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    l1_loss,
    legacy_reduction,
    nll_loss,
    reduce_loss,
    smooth_l1_loss,
)
from anneal.tensor import Tensor, cat, where
from anneal.tensor import one_hot as _one_hot
from anneal_ir import DType, dtypes

__all__ = [
    "avg_pool2d",
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "celu",
    "conv2d",
    "cross_entropy",
    "dropout",
    "elu",
    "embedding",
    "gelu",
    "group_norm",
    "hardsigmoid",
    "hardswish",
    "hardtanh",
    "l1_loss",
    "layer_norm",
    "linear",
    "log_softmax",
    "logsigmoid",
    "max_pool2d",
    "mish",
    "mse_loss",
    "nll_loss",
    "normalize",
    "one_hot",
    "pad",
    "relu",
    "relu6",
    "scaled_dot_product_attention",
    "selu",
    "sigmoid",
    "silu",
    "smooth_l1_loss",
    "softmax",
    "softmin",
    "softplus",
    "softsign",
]

IntOrPair = int | Sequence[int]


# ---- helpers ----


def _ntuple(x: Any, n: int, name: str) -> tuple[int, ...]:
    if isinstance(x, int):
        return (x,) * n
    t = tuple(int(v) for v in x)
    if len(t) == 1:
        return t * n
    if len(t) != n:
        raise ValueError(f"{name}: expected an int or {n} ints, got {x!r}")
    return t


def _flat(pairs: Sequence[tuple[int, ...]]) -> list[int]:
    return [v for p in pairs for v in p]


def _windows(x: Tensor, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int]) -> Tensor:
    """The sliding windows over the last len(kernel) dims of x, as a view (movement ops only).

    Returns shape (*prefix, *out, *kernel) with out[j] = (i[j] - dilation[j]*(kernel[j]-1) - 1)//stride[j] + 1,
    where result[..., o..., k...] = x[..., o*stride + k*dilation ...].
    """
    n = len(kernel)
    prefix, sizes = x.shape[:-n], x.shape[-n:]
    keep = [(0, p) for p in prefix]
    outs = [(i - d * (k - 1) - 1) // s + 1 for i, k, s, d in zip(sizes, kernel, stride, dilation)]
    if any(o <= 0 for o in outs):
        raise ValueError(f"window: kernel {tuple(kernel)} (dilation {tuple(dilation)}) is larger than the padded "
                         f"input {tuple(sizes)}")  # fmt: skip
    if all(k <= s for k, s in zip(kernel, stride)) and all(d == 1 for d in dilation):
        # non-overlapping windows: cut to out*stride, split each dim into (out, stride), keep the first k
        x = x._pad([(0, 0)] * len(prefix) + [(0, o * s - i) for o, s, i in zip(outs, stride, sizes)])
        x = x.reshape(*prefix, *_flat([(o, s) for o, s in zip(outs, stride)]))
        x = x._shrink(keep + _pairs_flat([((0, o), (0, k)) for o, k in zip(outs, kernel)]))
    else:
        # overlapping windows: repeat the dim, and read it with rows of length L = m*i + d, so that
        # row a starts at offset a*d (mod i); then take every stride-th element of each row.
        rows = [i * max(1, math.ceil((o * s - d) / i)) + d for i, o, s, d in zip(sizes, outs, stride, dilation)]
        reps = [math.ceil(k * r / i) for k, r, i in zip(kernel, rows, sizes)]
        x = x.repeat(*([1] * len(prefix)), *reps)
        x = x._shrink(keep + [(0, k * r) for k, r in zip(kernel, rows)])
        x = x.reshape(*prefix, *_flat([(k, r) for k, r in zip(kernel, rows)]))
        x = x._shrink(keep + _pairs_flat([((0, k), (0, o * s)) for k, o, s in zip(kernel, outs, stride)]))
        x = x.reshape(*prefix, *_flat([(k, o, s) for k, o, s in zip(kernel, outs, stride)]))
        x = x._shrink(keep + _pairs_flat([((0, k), (0, o), (0, 1)) for k, o in zip(kernel, outs)]))
        x = x.reshape(*prefix, *_flat([(k, o) for k, o in zip(kernel, outs)]))
        # now (*prefix, k0, o0, k1, o1, ...): swap each pair so that the code below sees (o, k)
        p = len(prefix)
        x = x.permute(*range(p), *_flat([(p + 2 * j + 1, p + 2 * j) for j in range(n)]))
    # (*prefix, o0, k0, o1, k1, ...) -> (*prefix, o0, o1, ..., k0, k1, ...)
    p = len(prefix)
    return x.permute(*range(p), *[p + 2 * j for j in range(n)], *[p + 2 * j + 1 for j in range(n)])


def _pairs_flat(groups: Sequence[Sequence[tuple[int, int]]]) -> list[tuple[int, int]]:
    return [pair for g in groups for pair in g]


def _pool_geometry(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> tuple[int, int]:
    """(output size, extra right padding) as torch's pooling_output_shape."""
    eff = d * (k - 1) + 1
    num = size + 2 * p - eff + (s - 1 if ceil_mode else 0)
    out = num // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    extra = max(0, (out - 1) * s + eff - (size + 2 * p))
    return out, extra


def _pool_args(name: str, input: Tensor, kernel_size: IntOrPair, stride: IntOrPair | None, padding: IntOrPair,
               dilation: IntOrPair) -> tuple[tuple[int, ...], ...]:  # fmt: skip
    if input.ndim not in (3, 4):
        raise ValueError(f"{name}: expected a 3-d (C, H, W) or 4-d (N, C, H, W) input, got shape {input.shape}")
    k = _ntuple(kernel_size, 2, name)
    s = k if stride is None or (not isinstance(stride, int) and len(stride) == 0) else _ntuple(stride, 2, name)
    p, d = _ntuple(padding, 2, name), _ntuple(dilation, 2, name)
    if any(2 * pp > kk for pp, kk in zip(p, k)):
        raise ValueError(f"{name}: padding {p} should be at most half of the kernel size {k}")
    if any(v <= 0 for v in (*k, *s, *d)):
        raise ValueError(f"{name}: kernel_size {k}, stride {s} and dilation {d} must be positive")
    return k, s, p, d


# ---- linear and convolution ----


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:  # noqa: A002 - torch's names
    """y = input @ weight.T + bias."""
    out = input.matmul(weight.transpose(-1, -2) if weight.ndim >= 2 else weight)
    return out if bias is None else out + bias


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntOrPair = 1,  # noqa: A002
           padding: IntOrPair | str = 0, dilation: IntOrPair = 1, groups: int = 1) -> Tensor:  # fmt: skip
    """2-d cross-correlation as im2col: the (padded) input's windows are a view, then one matmul (stride 1 and
    dilation 1 with their own gradient rule: the input gradient is a convolution, see _conv2d_unit)."""
    if input.ndim not in (3, 4):
        raise ValueError(f"conv2d: expected a 3-d or 4-d input, got shape {input.shape}")
    if weight.ndim != 4:
        raise ValueError(f"conv2d: expected a 4-d weight (out, in/groups, kh, kw), got shape {weight.shape}")
    x = input.unsqueeze(0) if input.ndim == 3 else input
    n, c, _, _ = x.shape
    o, cg, kh, kw = weight.shape
    if groups <= 0 or c != cg * groups or o % groups:
        raise ValueError(f"conv2d: input shape {input.shape} and weight shape {weight.shape} do not match with "
                         f"groups={groups} (need in_channels == weight[1] * groups)")  # fmt: skip
    s, d = _ntuple(stride, 2, "conv2d"), _ntuple(dilation, 2, "conv2d")
    if isinstance(padding, str):
        if padding == "valid":
            pads = [(0, 0), (0, 0)]
        elif padding == "same":
            if any(v != 1 for v in s):
                raise ValueError("conv2d: padding='same' is not supported for strided convolutions")
            tot = [dd * (k - 1) for dd, k in zip(d, (kh, kw))]
            pads = [(t // 2, t - t // 2) for t in tot]
        else:
            raise ValueError(f"conv2d: invalid padding string {padding!r}, expected 'valid' or 'same'")
    else:
        pads = [(v, v) for v in _ntuple(padding, 2, "conv2d")]
    if s == (1, 1) and d == (1, 1) and all(0 <= p <= k - 1 for (a, b), k in zip(pads, (kh, kw)) for p in (a, b)):
        out = _conv2d_unit(x, weight, tuple(pads), groups)
    else:
        out = _im2col(x, weight, pads, s, d, groups)
    if bias is not None:
        out = out + bias.reshape(1, o, 1, 1)
    return out.squeeze(0) if input.ndim == 3 else out


def _im2col(x: Tensor, weight: Tensor, pads: Sequence[tuple[int, int]], s: Sequence[int], d: Sequence[int],
            groups: int) -> Tensor:  # fmt: skip
    """The convolution of a 4-d x: its padded windows are a view, then one matmul."""
    n = x.shape[0]
    o, cg, kh, kw = weight.shape
    win = _windows(x._pad([(0, 0), (0, 0), *pads]), (kh, kw), s, d)  # (n, c, oh, ow, kh, kw)
    oh, ow = win.shape[2], win.shape[3]
    g, og, kk = groups, o // groups, cg * kh * kw
    cols = win.reshape(n, g, cg, oh, ow, kh, kw).permute(0, 1, 3, 4, 2, 5, 6).reshape(n, g, oh * ow, kk)
    w = weight.reshape(g, og, kk).transpose(1, 2)  # (g, kk, og)
    out = cols.matmul(w)  # (n, g, oh*ow, og): the one matmul
    return out.permute(0, 1, 3, 2).reshape(n, o, oh, ow)


def _conv2d_unit(x: Tensor, weight: Tensor, pads: tuple[tuple[int, int], ...], groups: int) -> Tensor:
    """A stride-1, dilation-1 convolution, differentiated as PyTorch does: its input gradient is a convolution of
    the output gradient with the flipped kernel (a contraction the GPU tiles), not a scatter through the windows."""
    out = _im2col(x, weight, pads, (1, 1), (1, 1), groups)
    return with_gradient(out, (x, weight), _conv2d_unit_gradient, pads=pads, groups=groups)


def _conv2d_unit_gradient(grad: Tensor, x: Tensor, weight: Tensor, *, pads: tuple[tuple[int, int], ...],
                          groups: int) -> tuple[Tensor, Tensor]:  # fmt: skip
    n = x.shape[0]
    o, cg, kh, kw = weight.shape
    g, og = groups, o // groups
    oh, ow = grad.shape[2], grad.shape[3]
    # input: the full correlation of grad with the kernel flipped, in and out channels swapped in each group
    flipped = weight.reshape(g, og, cg, kh, kw).transpose(1, 2).reshape(g * cg, og, kh, kw).flip(2, 3)
    back = tuple((k - 1 - a, k - 1 - b) for (a, b), k in zip(pads, (kh, kw)))
    dx = _conv2d_unit(grad, flipped, back, g)
    # weight: grad against the windows of the padded input, summed over the batch and the positions
    win = _windows(x._pad([(0, 0), (0, 0), *pads]), (kh, kw), (1, 1), (1, 1))  # (n, c, oh, ow, kh, kw)
    cols = win.reshape(n, g, cg, oh * ow, kh * kw).permute(1, 0, 3, 2, 4).reshape(g, n * oh * ow, cg * kh * kw)
    dy = grad.reshape(n, g, og, oh * ow).permute(1, 2, 0, 3).reshape(g, og, n * oh * ow)
    return dx, dy.matmul(cols).reshape(o, cg, kh, kw)


# ---- pooling ----


def max_pool2d(input: Tensor, kernel_size: IntOrPair, stride: IntOrPair | None = None, padding: IntOrPair = 0,  # noqa: A002
               dilation: IntOrPair = 1, ceil_mode: bool = False, return_indices: bool = False) -> Any:  # fmt: skip
    """Max over each window; with return_indices, also the flat (h*W + w) index of the max, as torch."""
    k, s, p, d = _pool_args("max_pool2d", input, kernel_size, stride, padding, dilation)
    h, w = input.shape[-2:]
    (oh, eh), (ow, ew) = (_pool_geometry(sz, *a, ceil_mode) for sz, a in zip((h, w), zip(k, s, p, d)))
    padarg = (p[1], p[1] + ew, p[0], p[0] + eh)
    lowest = -math.inf if input.dtype.is_float else _int_min(input.dtype)
    x = input.pad(padarg, value=lowest) if any(padarg) else input
    win = _windows(x, k, s, d).flatten(-2)  # (..., oh, ow, kh*kw)
    values = win.amax(-1)
    if not return_indices:
        return values
    pos = Tensor.arange(h * w, device=input.device).reshape(h, w).pad(padarg)
    pos_win = _windows(pos, k, s, d).flatten(-2)  # (oh, ow, kh*kw)
    first = win.argmax(-1, keepdim=True) == Tensor.arange(k[0] * k[1], device=input.device)
    return values, where(first, pos_win, 0).sum(-1)


def _int_min(dt: DType) -> int:
    return 0 if dt.kind in "bu" else -(2 ** (dt.bits - 1))


def avg_pool2d(input: Tensor, kernel_size: IntOrPair, stride: IntOrPair | None = None, padding: IntOrPair = 0,  # noqa: A002
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Tensor:  # fmt: skip
    """Mean over each window, with torch's divisor rules (padding counted or not, ceil_mode overhang not)."""
    k, s, p, d = _pool_args("avg_pool2d", input, kernel_size, stride, padding, 1)
    h, w = input.shape[-2:]
    (oh, eh), (ow, ew) = (_pool_geometry(sz, *a, ceil_mode) for sz, a in zip((h, w), zip(k, s, p, d)))
    padarg = (p[1], p[1] + ew, p[0], p[0] + eh)
    x = input if input.dtype.is_float else input.cast(dtypes.default_float)
    total = _windows(x.pad(padarg), k, s, d).flatten(-2).sum(-1)
    if divisor_override is not None:
        if divisor_override == 0:
            raise ValueError("avg_pool2d: divisor_override must be non-zero")
        return total / divisor_override
    if count_include_pad and eh == 0 and ew == 0:
        return total / (k[0] * k[1])
    # count, per window, the cells that torch divides by: inside the padded input (count_include_pad) or the input
    ones = Tensor.ones(h, w, device=input.device)
    if count_include_pad:
        ones = ones.pad((p[1], p[1], p[0], p[0]), value=1.0).pad((0, ew, 0, eh))
    else:
        ones = ones.pad(padarg)
    count = _windows(ones, k, s, d).flatten(-2).sum(-1)
    return total / count


# ---- normalization, embedding, losses ----


def layer_norm(input: Tensor, normalized_shape: int | Sequence[int], weight: Tensor | None = None,  # noqa: A002
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:  # fmt: skip
    """Normalize over the trailing normalized_shape dims (biased variance), then scale and shift."""
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(int(v) for v in normalized_shape)
    if len(ns) > input.ndim or tuple(input.shape[input.ndim - len(ns) :]) != ns:
        raise ValueError(f"layer_norm: normalized_shape {ns} does not match the trailing dims of input shape "
                         f"{input.shape}")  # fmt: skip
    axes = tuple(range(input.ndim - len(ns), input.ndim))
    x = input if input.dtype.is_float else input.cast(dtypes.default_float)
    mean = x.mean(axes, keepdim=True)
    centered = x - mean
    var = centered.square().mean(axes, keepdim=True)
    out = centered * (var + eps).rsqrt()
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None, max_norm: float | None = None,  # noqa: A002
              norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:  # fmt: skip
    """weight[input]: rows picked by a one-hot reduction; padding_idx rows get no gradient, as torch."""
    if weight.ndim != 2:
        raise ValueError(f"embedding: weight must be 2-d (num_embeddings, dim), got shape {weight.shape}")
    if input.dtype.is_float:
        raise TypeError(f"embedding: indices must be an integer tensor, got {input.dtype.name}")
    if max_norm is not None:
        raise NotImplementedError("embedding: max_norm renormalizes the weight in place; anneal tensors are immutable")
    if scale_grad_by_freq:
        raise NotImplementedError("embedding: scale_grad_by_freq is not supported")
    n, dim = weight.shape
    if padding_idx is not None:
        if not -n <= padding_idx < n:
            raise ValueError(f"embedding: padding_idx {padding_idx} must be within num_embeddings {n}")
        padding_idx %= n
    hit = input.unsqueeze(-1) == Tensor.arange(n, device=weight.device)  # (*input, n)
    out = hit.cast(weight.dtype).reshape(-1, n).matmul(weight).reshape(*input.shape, dim)
    if padding_idx is not None:
        out = where((input == padding_idx).unsqueeze(-1), out.detach(), out)
    return out


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """int64 one-hot along a new last dim; num_classes=-1 means max(tensor) + 1 (reads the data, as torch)."""
    return _one_hot(tensor, num_classes)


def _class_weight(weight: Tensor | None, logp: Tensor, cdim: int, name: str) -> Tensor | None:
    c = logp.shape[cdim]
    if weight is None:
        return None
    if weight.shape != (c,):
        raise ValueError(f"{name}: weight shape {weight.shape} must be ({c},) for input shape {logp.shape}")
    bshape = [1] * logp.ndim
    bshape[cdim] = c
    return weight.cast(logp.dtype).reshape(bshape)


def _class_terms(logp: Tensor, target: Tensor, w: Tensor | None, ignore_index: int, cdim: int,
                 name: str) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """Per target: -w[t] logp[t] (0 where ignored), the weight w[t] (0 where ignored), and whether it counts."""
    expected = logp.shape[:cdim] + logp.shape[cdim + 1 :]
    if target.shape != expected:
        raise ValueError(f"{name}: class-index target shape {target.shape} must be {expected} for input shape "
                         f"{logp.shape}")  # fmt: skip
    c = logp.shape[cdim]
    bshape = [1] * logp.ndim
    bshape[cdim] = c
    keep = target != ignore_index
    classes = Tensor.arange(c, device=logp.device).reshape(bshape)
    hit = (target.unsqueeze(cdim) == classes) & keep.unsqueeze(cdim)  # (input shape), all False where ignored
    nll = -where(hit, logp, 0.0).sum(cdim)  # 0 where ignored
    wt = keep.cast(logp.dtype) if w is None else where(hit, w, 0.0).sum(cdim)  # weight of each target, 0 if ignored
    return (nll if w is None else nll * wt), wt, keep


def _reduce_nll(nll: Tensor, wt: Tensor, reduction: str) -> Tensor:
    if reduction == "none":
        return nll
    return nll.sum() if reduction == "sum" else nll.sum() / wt.sum()  # mean: over the targets' total weight


def class_nll(logp: Tensor, target: Tensor, weight: Tensor | None, ignore_index: int, reduction: str,
              name: str) -> Tensor:  # fmt: skip
    """nll_loss: class-index targets against log-probabilities over dim 1 (or 0 for a 1-d input)."""
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{name}: {reduction!r} is not a valid reduction")
    if logp.ndim == 0:
        raise ValueError(f"{name}: input must have at least 1 dim (classes)")
    if target.dtype.is_float:
        raise TypeError(f"{name}: target must hold class indices (an integer tensor), got {target.dtype.name}")
    cdim = 0 if logp.ndim == 1 else 1
    nll, wt, _ = _class_terms(logp, target, _class_weight(weight, logp, cdim, name), ignore_index, cdim, name)
    return _reduce_nll(nll, wt, reduction)


def cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,  # noqa: A002
                  size_average: bool | None = None, ignore_index: int = -100, reduce: bool | None = None,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:  # fmt: skip
    """log_softmax over the class dim (1, or 0 for a 1-d input) + NLL, with torch's weight, ignore_index,
    label_smoothing and reduction semantics; target holds class indices or class probabilities."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"cross_entropy: {reduction!r} is not a valid reduction")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    if input.ndim == 0:
        raise ValueError("cross_entropy: input must have at least 1 dim (classes)")
    cdim = 0 if input.ndim == 1 else 1
    c = input.shape[cdim]
    logp = input.log_softmax(cdim)
    w = _class_weight(weight, logp, cdim, "cross_entropy")

    if target.dtype.is_float:  # class probabilities
        if target.shape != input.shape:
            raise ValueError(f"cross_entropy: probability target shape {target.shape} must equal input shape "
                             f"{input.shape}")  # fmt: skip
        tgt = target * (1 - label_smoothing) + label_smoothing / c if label_smoothing > 0 else target
        terms = logp * tgt if w is None else logp * tgt * w
        loss = -terms.sum(cdim)
        if reduction == "none":
            return loss
        return loss.sum() if reduction == "sum" else loss.sum() / (input.numel() // c if c else 0)

    nll, wt, keep = _class_terms(logp, target, w, ignore_index, cdim, "cross_entropy")
    out = _reduce_nll(nll, wt, reduction)
    if label_smoothing <= 0:
        return out
    smooth = -(logp if w is None else logp * w).sum(cdim)
    smooth = where(keep, smooth, 0.0)
    if reduction == "none":
        sm = smooth
    elif reduction == "sum":
        sm = smooth.sum()
    else:  # normalized like the NLL term: by the (weighted) count of targets not ignored
        sm = smooth.sum() / wt.sum()
    return out * (1 - label_smoothing) + sm * (label_smoothing / c)


# ---- attention ----


def mse_loss(input: Tensor, target: Tensor, size_average: bool | None = None, reduce: bool | None = None,  # noqa: A002
             reduction: str = "mean") -> Tensor:  # fmt: skip
    """torch.nn.functional.mse_loss: the squared difference, averaged (or summed, or kept per element)."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    if input.shape != target.shape:
        raise ValueError(f"mse_loss: input shape {input.shape} and target shape {target.shape} differ "
                         "(torch would broadcast with a warning; pass tensors of one shape)")  # fmt: skip
    return reduce_loss((input - target).square(), reduction, "mse_loss")


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> Tensor:  # fmt: skip
    """softmax(q @ k^T * scale + mask) @ v. is_causal keeps the top-left lower triangle (as torch);
    a bool attn_mask keeps True; a float mask is added. enable_gqa repeats each kv head for its group."""
    if query.ndim < 2 or key.ndim < 2 or value.ndim < 2:
        raise ValueError(f"scaled_dot_product_attention: query, key and value need at least 2 dims, got shapes "
                         f"{query.shape}, {key.shape}, {value.shape}")  # fmt: skip
    if query.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
        raise ValueError(f"scaled_dot_product_attention: shapes query {query.shape}, key {key.shape}, value "
                         f"{value.shape} do not match (need query[-1] == key[-1], key[-2] == value[-2])")  # fmt: skip
    if is_causal and attn_mask is not None:
        raise ValueError("scaled_dot_product_attention: attn_mask must be None when is_causal=True")
    if enable_gqa and query.ndim >= 3:
        hq, hk, hv = query.shape[-3], key.shape[-3], value.shape[-3]
        if hq % hk or hq % hv:
            raise ValueError(f"scaled_dot_product_attention: {hq} query heads are not a multiple of the key/value "
                             f"heads ({hk}, {hv}) (shapes {query.shape}, {key.shape}, {value.shape})")  # fmt: skip
        key, value = _repeat_heads(key, hq // hk), _repeat_heads(value, hq // hv)
    length, src = query.shape[-2], key.shape[-2]
    sc = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = query.matmul(key.transpose(-1, -2)) * sc
    if is_causal:
        keep = Tensor.ones(length, src, dtype=dtypes.bool, device=query.device).tril()
        scores = where(keep, scores, -math.inf)
    elif attn_mask is not None:
        scores = where(attn_mask, scores, -math.inf) if attn_mask.dtype == dtypes.bool else scores + attn_mask
    attn = scores.softmax(-1)
    return _random.dropout(attn, dropout_p).matmul(value)


def _repeat_heads(x: Tensor, n: int) -> Tensor:
    """repeat_interleave(n, dim=-3): (..., H, S, E) -> (..., H*n, S, E)."""
    if n == 1:
        return x
    *batch, h, s, e = x.shape
    return x.unsqueeze(-3).expand(*batch, h, n, s, e).reshape(*batch, h * n, s, e)


# ---- activations ----


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:  # noqa: A002
    """torch.nn.functional.dropout; the mask is drawn on the device (anneal.random), fresh on every jit replay."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: probability has to be between 0 and 1, got {p}")
    return _inplace(input, _random.dropout(input, p) if training else input, inplace)


def _inplace(input: Tensor, out: Tensor, inplace: bool) -> Tensor:
    """Tensors are immutable graph nodes: in place means the input now stands for the result."""
    if not inplace:
        return out
    input.uop = out.uop
    return input


def relu(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002 - torch's names
    return _inplace(input, input.relu(), inplace)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:  # noqa: A002
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return input.gelu(approximate)


def silu(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    return _inplace(input, input.silu(), inplace)


def _softmax_dim(dim: int | None, ndim: int) -> int:
    if dim is not None:
        return dim
    return 0 if ndim in (0, 1, 3) else 1  # torch's legacy implicit choice


def softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3,  # noqa: A002
            dtype: DType | str | None = None) -> Tensor:  # fmt: skip
    return input.softmax(_softmax_dim(dim, input.ndim), dtype)


def log_softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3,  # noqa: A002
                dtype: DType | str | None = None) -> Tensor:  # fmt: skip
    return input.log_softmax(_softmax_dim(dim, input.ndim), dtype)


# ---- padding ----


def pad(input: Tensor, pad: Sequence[int], mode: str = "constant", value: float | None = None) -> Tensor:  # noqa: A002
    """torch's order: (last_before, last_after, second_last_before, ...). Modes: constant (negative pads
    crop), reflect, replicate, circular."""
    pad = [int(v) for v in pad]
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise ValueError(f"pad: padding {tuple(pad)} must have an even length of at most 2*{input.ndim} "
                         f"(input shape {input.shape})")  # fmt: skip
    if mode == "constant":
        return input.pad(pad, 0.0 if value is None else value)
    if mode not in ("reflect", "replicate", "circular"):
        raise ValueError(f"pad: unknown mode {mode!r}; expected constant, reflect, replicate or circular")
    if value not in (None, 0, 0.0):
        raise ValueError(f"pad: padding mode {mode!r} doesn't take in value argument")
    out = input
    for i in range(len(pad) // 2):
        d = input.ndim - 1 - i
        out = _pad_dim(out, d, pad[2 * i], pad[2 * i + 1], mode)
    return out


def _slice_dim(x: Tensor, d: int, start: int, stop: int) -> Tensor:
    return x._shrink([(start, stop) if j == d else (0, s) for j, s in enumerate(x.shape)])


def _pad_dim(x: Tensor, d: int, before: int, after: int, mode: str) -> Tensor:
    n = x.shape[d]
    if before < 0 or after < 0:  # negative amounts crop first, as torch
        x = _slice_dim(x, d, max(-before, 0), n - max(-after, 0))
        before, after, n = max(before, 0), max(after, 0), x.shape[d]
    if before == 0 and after == 0:
        return x
    if mode == "reflect":
        if before >= n or after >= n:
            raise ValueError(f"pad: reflect padding ({before}, {after}) must be smaller than dim {d} of size {n}")
        parts = [_slice_dim(x, d, 1, before + 1).flip(d), x, _slice_dim(x, d, n - 1 - after, n - 1).flip(d)]
    elif mode == "replicate":
        if n == 0:
            raise ValueError(f"pad: cannot replicate-pad the empty dim {d}")
        shape_b = [before if j == d else s for j, s in enumerate(x.shape)]
        shape_a = [after if j == d else s for j, s in enumerate(x.shape)]
        parts = [_slice_dim(x, d, 0, 1).expand(shape_b), x, _slice_dim(x, d, n - 1, n).expand(shape_a)]
    else:  # circular
        if before > n or after > n:
            raise ValueError(f"pad: circular padding ({before}, {after}) must be at most dim {d} of size {n}")
        parts = [_slice_dim(x, d, n - before, n), x, _slice_dim(x, d, 0, after)]
    return cat([p for p in parts if p.shape[d] > 0], d)

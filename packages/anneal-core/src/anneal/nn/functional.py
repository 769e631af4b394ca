"""anneal.nn.functional: torch.nn.functional's names, argument order and defaults.

Every function is a composite of Tensor ops, so it becomes ordinary graph that the
compiler fuses (no numpy on the data). Convolution (anneal.nn.convolution, every rank and the
transposed forms) is im2col as movement ops (no copy) plus one matmul; pooling gathers the same
windows and reduces them; interpolate gathers host-computed source indices along each dim.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from anneal import bounds, indexing
from anneal import random as _random
from anneal.composite import with_gradient
from anneal.errors import DTypeError, ShapeError
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
from anneal.nn.convolution import (
    conv1d,
    conv2d,
    conv3d,
    conv_transpose1d,
    conv_transpose2d,
    conv_transpose3d,
)
from anneal.nn.convolution import ntuple as _ntuple
from anneal.nn.convolution import windows as _windows
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
    "avg_pool3d",
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "celu",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "cross_entropy",
    "dropout",
    "elu",
    "embedding",
    "gelu",
    "group_norm",
    "hardsigmoid",
    "hardswish",
    "hardtanh",
    "interpolate",
    "l1_loss",
    "layer_norm",
    "leaky_relu",
    "linear",
    "log_softmax",
    "logsigmoid",
    "max_pool2d",
    "max_unpool2d",
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


def _pool_geometry(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> tuple[int, int]:
    """(output size, extra right padding) as torch's pooling_output_shape."""
    eff = d * (k - 1) + 1
    num = size + 2 * p - eff + (s - 1 if ceil_mode else 0)
    out = num // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    extra = max(0, (out - 1) * s + eff - (size + 2 * p))
    return out, extra


POOL_AXES = {1: "(C, L)", 2: "(C, H, W)", 3: "(C, D, H, W)"}  # the spatial rank -> torch's unbatched layout


def _pool_args(name: str, input: Tensor, kernel_size: IntOrPair, stride: IntOrPair | None, padding: IntOrPair,  # noqa: A002
               dilation: IntOrPair, nd: int = 2) -> tuple[tuple[int, ...], ...]:  # fmt: skip
    if input.ndim not in (nd + 1, nd + 2):
        raise RuntimeError(f"{name}: expected a {nd + 1}-d {POOL_AXES[nd]} or {nd + 2}-d (N, {POOL_AXES[nd][1:]} "
                           f"input, got shape {input.shape}")  # fmt: skip
    k = _ntuple(kernel_size, nd, name)
    s = k if stride is None or (not isinstance(stride, int) and len(stride) == 0) else _ntuple(stride, nd, name)
    p, d = _ntuple(padding, nd, name), _ntuple(dilation, nd, name)
    if any(2 * pp > kk for pp, kk in zip(p, k)):
        raise ShapeError(f"{name}: padding {p} should be at most half of the kernel size {k}")
    if any(v <= 0 for v in (*k, *s, *d)):
        raise ShapeError(f"{name}: kernel_size {k}, stride {s} and dilation {d} must be positive")
    return k, s, p, d


def _torch_pad(pairs: Sequence[tuple[int, int]]) -> list[int]:
    """Per-dim (before, after) pairs, first dim first, as F.pad's flat list (last dim first)."""
    return [v for a, b in reversed(pairs) for v in (a, b)]


# ---- linear and convolution ----


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:  # noqa: A002 - torch's names
    """y = input @ weight.T + bias."""
    out = input.matmul(weight.transpose(-1, -2) if weight.ndim >= 2 else weight)
    return out if bias is None else out + bias


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
    return _avg_pool("avg_pool2d", 2, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)  # fmt: skip


def avg_pool3d(input: Tensor, kernel_size: IntOrPair, stride: IntOrPair | None = None, padding: IntOrPair = 0,  # noqa: A002
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Tensor:  # fmt: skip
    """torch.nn.functional.avg_pool3d: avg_pool2d's rules over (D, H, W)."""
    return _avg_pool("avg_pool3d", 3, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)  # fmt: skip


def _avg_pool(name: str, nd: int, input: Tensor, kernel_size: IntOrPair, stride: IntOrPair | None,  # noqa: A002
              padding: IntOrPair, ceil_mode: bool, count_include_pad: bool,
              divisor_override: int | None) -> Tensor:  # fmt: skip
    k, s, p, d = _pool_args(name, input, kernel_size, stride, padding, 1, nd)
    sizes = input.shape[-nd:]
    geo = [_pool_geometry(sz, *a, ceil_mode) for sz, a in zip(sizes, zip(k, s, p, d))]
    extra = [e for _, e in geo]
    padarg = _torch_pad([(pp, pp + e) for pp, e in zip(p, extra)])
    x = input if input.dtype.is_float else input.cast(dtypes.default_float)
    total = _windows(x.pad(padarg), k, s, d).flatten(-nd).sum(-1)
    if divisor_override is not None:
        if divisor_override == 0:
            raise ValueError(f"{name}: divisor_override must be non-zero")
        return total / divisor_override
    if count_include_pad and not any(extra):
        return total / math.prod(k)
    # count, per window, the cells that torch divides by: inside the padded input (count_include_pad) or the input
    ones = Tensor.ones(*sizes, device=input.device)
    if count_include_pad:
        ones = ones.pad(_torch_pad([(pp, pp) for pp in p]), value=1.0).pad(_torch_pad([(0, e) for e in extra]))
    else:
        ones = ones.pad(padarg)
    count = _windows(ones, k, s, d).flatten(-nd).sum(-1)
    return total / count


def max_unpool2d(input: Tensor, indices: Tensor, kernel_size: IntOrPair, stride: IntOrPair | None = None,  # noqa: A002
                 padding: IntOrPair = 0, output_size: Sequence[int] | None = None) -> Tensor:  # fmt: skip
    """The inverse of max_pool2d(return_indices=True): each value scattered to its flat (h*W + w) index of the
    output plane, zeros elsewhere; output (in - 1)*stride - 2*padding + kernel unless output_size says."""
    if input.shape != indices.shape:
        raise RuntimeError(f"max_unpool2d: input shape {input.shape} and indices shape {indices.shape} must match")
    k, s, p, _ = _pool_args("max_unpool2d", input, kernel_size, stride, padding, 1)
    if indices.dtype.is_float:
        raise RuntimeError(f"max_unpool2d: indices must be an integer tensor, got {indices.dtype.name}")
    default = tuple((i - 1) * ss - 2 * pp + kk for i, ss, pp, kk in zip(input.shape[-2:], s, p, k))
    out = default if output_size is None else tuple(int(v) for v in output_size)[-2:]
    if len(out) != 2 or any(v <= 0 for v in out):
        raise RuntimeError(f"max_unpool2d: output_size {output_size} must end in 2 positive sizes")
    lead = input.shape[:-2]
    flat_in, flat_idx = input.reshape(*lead, -1), indices.reshape(*lead, -1)
    plane = Tensor.zeros(*lead, out[0] * out[1], dtype=input.dtype, device=input.device)
    scattered = indexing.scatter(plane, -1, flat_idx, flat_in, op="max_unpool2d")
    # overlapping windows repeat an index; torch's backward gives each of them the whole gradient there
    scattered = with_gradient(scattered, (flat_in, flat_idx), _unpool_gradient)
    return scattered.reshape(*lead, *out)


def _unpool_gradient(grad: Tensor, values: Tensor, index: Tensor) -> tuple[Tensor, None]:
    return grad.gather(-1, index), None


# ---- resampling ----

# mode -> the spatial ranks torch accepts it for, and whether it interpolates (takes align_corners)
INTERPOLATE_MODES: dict[str, tuple[tuple[int, ...], bool]] = {
    "nearest": ((1, 2, 3), False),
    "nearest-exact": ((1, 2, 3), False),
    "linear": ((1,), True),
    "bilinear": ((2,), True),
    "trilinear": ((3,), True),
}


def interpolate(input: Tensor, size: int | Sequence[int] | None = None,  # noqa: A002 - torch's names
                scale_factor: float | Sequence[float] | None = None, mode: str = "nearest",
                align_corners: bool | None = None, recompute_scale_factor: bool | None = None,
                antialias: bool = False) -> Tensor:  # fmt: skip
    """torch.nn.functional.interpolate for the nearest, nearest-exact and (bi/tri)linear modes. Each spatial dim
    is resampled in turn (last first, as torch's kernels sum): a gather of the source indices, which torch's
    rules compute on the host, blended by their weights in the linear modes."""
    if mode not in INTERPOLATE_MODES:
        raise NotImplementedError(f"interpolate: mode {mode!r} is not supported; expected one of "
                                  f"{', '.join(INTERPOLATE_MODES)}")  # fmt: skip
    ranks, linear_mode = INTERPOLATE_MODES[mode]
    nd = input.ndim - 2
    if nd not in ranks:
        raise NotImplementedError(f"interpolate: got a {input.ndim}-d input (shape {input.shape}), but mode {mode!r} "
                                  f"needs a {', '.join(str(r + 2) for r in ranks)}-d (N, C, ...) input")  # fmt: skip
    if align_corners is not None and not linear_mode:
        raise ValueError("interpolate: align_corners option can only be set with the interpolating modes: "
                         "linear | bilinear | trilinear")  # fmt: skip
    if antialias:
        raise NotImplementedError("interpolate: antialias is not supported")
    if linear_mode and not input.dtype.is_float:
        raise NotImplementedError(f"interpolate: mode {mode!r} needs a float input, got {input.dtype.name}")
    outs, scales = _output_sizes(input.shape[2:], size, scale_factor, recompute_scale_factor)
    x = input
    for dim in reversed(range(nd)):
        index = _source_index if not linear_mode else _linear_source
        x = _resample_dim(x, 2 + dim, outs[dim], scales[dim], mode, bool(align_corners), index)
    return x


def _output_sizes(sizes: Sequence[int], size: int | Sequence[int] | None,
                  scale_factor: float | Sequence[float] | None,
                  recompute: bool | None) -> tuple[list[int], list[float | None]]:  # fmt: skip
    """Output sizes and the scales the kernels use (1/scale_factor, or None for in/out), as torch."""
    nd = len(sizes)
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate: only one of size or scale_factor should be defined" if size is not None
                         else "interpolate: either size or scale_factor should be defined")  # fmt: skip
    if size is not None:
        outs = [int(size)] * nd if isinstance(size, int) else [int(v) for v in size]
        if len(outs) != nd:
            raise ValueError(f"interpolate: size {size} must have {nd} elements for the spatial dims {tuple(sizes)}")
        return outs, [None] * nd
    assert scale_factor is not None
    sf = [float(scale_factor)] * nd if isinstance(scale_factor, int | float) else [float(v) for v in scale_factor]
    if len(sf) != nd:
        raise ValueError(f"interpolate: scale_factor {scale_factor} must have {nd} elements for the spatial dims "
                         f"{tuple(sizes)}")  # fmt: skip
    outs = [math.floor(i * f) for i, f in zip(sizes, sf)]
    return outs, ([None] * nd if recompute else list(sf))


def _ratio(size: int, out: int, scale: float | None, np_float: Any) -> Any:
    # torch: 1/scale_factor when one was given (and not recomputed), else in/out, in the op's float type
    return np_float(1.0 / scale) if scale is not None and scale > 0 else np_float(size) / np_float(out)


def _source_index(size: int, out: int, scale: float | None, mode: str, align_corners: bool,
                  np_float: Any) -> list[tuple[Any, Any]]:  # fmt: skip
    """Nearest modes: one source index per output position, with weight 1 (torch's nearest_idx rules)."""
    dst = np.arange(out)
    if mode == "nearest" and out == size:
        src = dst
    elif mode == "nearest" and out == 2 * size:
        src = dst >> 1
    else:
        r = _ratio(size, out, scale, np_float)
        shift = np_float(0.5) if mode == "nearest-exact" else np_float(0.0)
        src = np.minimum(np.floor((dst.astype(np_float) + shift) * r).astype(np.int64), size - 1)
    return [(src, None)]


def _linear_source(size: int, out: int, scale: float | None, mode: str, align_corners: bool,
                   np_float: Any) -> list[tuple[Any, Any]]:  # fmt: skip
    """Linear modes: the two neighbours of each output position and their weights (area_pixel rules)."""
    dst = np.arange(out).astype(np_float)
    if align_corners:
        r = np_float(size - 1) / np_float(out - 1) if out > 1 else np_float(0.0)
        src = r * dst
    else:
        src = np.maximum(_ratio(size, out, scale, np_float) * (dst + np_float(0.5)) - np_float(0.5), np_float(0.0))
    i0 = src.astype(np.int64)  # src >= 0, so the cast is the floor
    i1 = i0 + (i0 < size - 1)
    lam1 = np.clip(src - i0.astype(np_float), 0, 1).astype(np_float)
    return [(i0, (np_float(1) - lam1).astype(np_float)), (i1, lam1)]


def _resample_dim(x: Tensor, dim: int, out: int, scale: float | None, mode: str, align_corners: bool,
                  index: Any) -> Tensor:  # fmt: skip
    """x resampled along dim to out positions: the sum over (source indices, weights) of weight * x[source]."""
    np_float = np.float64 if x.dtype == dtypes.float64 else np.float32
    target = [out if j == dim else v for j, v in enumerate(x.shape)]
    line = [out if j == dim else 1 for j in range(x.ndim)]
    result: Tensor | None = None
    for src, weight in index(x.shape[dim], out, scale, mode, align_corners, np_float):
        idx = Tensor(src.astype(np.int32), device=x.device).reshape(line).expand(target)
        term = x.gather(dim, idx)
        if weight is not None:
            term = term * Tensor(weight, device=x.device).cast(x.dtype).reshape(line)
        result = term if result is None else result + term
    assert result is not None
    return result


# ---- normalization, embedding, losses ----


def layer_norm(input: Tensor, normalized_shape: int | Sequence[int], weight: Tensor | None = None,  # noqa: A002
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:  # fmt: skip
    """Normalize over the trailing normalized_shape dims (biased variance), then scale and shift."""
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(int(v) for v in normalized_shape)
    if len(ns) > input.ndim or tuple(input.shape[input.ndim - len(ns) :]) != ns:
        raise ShapeError(f"layer_norm: normalized_shape {ns} does not match the trailing dims of input shape "
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
        raise ShapeError(f"embedding: weight must be 2-d (num_embeddings, dim), got shape {weight.shape}")
    if input.dtype.is_float:
        raise DTypeError(f"embedding: indices must be an integer tensor, got {input.dtype.name}")
    if max_norm is not None:
        raise NotImplementedError("embedding: max_norm renormalizes the weight in place; anneal tensors are immutable")
    if scale_grad_by_freq:
        raise NotImplementedError("embedding: scale_grad_by_freq is not supported")
    n, dim = weight.shape
    if padding_idx is not None:
        if not -n <= padding_idx < n:
            raise ValueError(f"embedding: padding_idx {padding_idx} must be within num_embeddings {n}")
        padding_idx %= n
    bounds.check_bounds(input, n, "embedding")
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
        raise ShapeError(f"{name}: weight shape {weight.shape} must be ({c},) for input shape {logp.shape}")
    bshape = [1] * logp.ndim
    bshape[cdim] = c
    return weight.cast(logp.dtype).reshape(bshape)


def _class_terms(logp: Tensor, target: Tensor, w: Tensor | None, ignore_index: int, cdim: int,
                 name: str) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """Per target: -w[t] logp[t] (0 where ignored), the weight w[t] (0 where ignored), and whether it counts."""
    expected = logp.shape[:cdim] + logp.shape[cdim + 1 :]
    if target.shape != expected:
        raise ShapeError(f"{name}: class-index target shape {target.shape} must be {expected} for input shape "
                         f"{logp.shape}")  # fmt: skip
    c = logp.shape[cdim]
    bounds.check_bounds(target, c, f"{name}: target", ignore=ignore_index)
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
        raise ShapeError(f"{name}: input must have at least 1 dim (classes)")
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
        raise ShapeError("cross_entropy: input must have at least 1 dim (classes)")
    cdim = 0 if input.ndim == 1 else 1
    c = input.shape[cdim]
    logp = input.log_softmax(cdim)
    w = _class_weight(weight, logp, cdim, "cross_entropy")

    if target.dtype.is_float:  # class probabilities
        if target.shape != input.shape:
            raise ShapeError(f"cross_entropy: probability target shape {target.shape} must equal input shape "
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
        raise ShapeError(f"mse_loss: input shape {input.shape} and target shape {target.shape} differ "
                         "(torch would broadcast with a warning; pass tensors of one shape)")  # fmt: skip
    return reduce_loss((input - target).square(), reduction, "mse_loss")


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> Tensor:  # fmt: skip
    """softmax(q @ k^T * scale + mask) @ v. is_causal keeps the top-left lower triangle (as torch);
    a bool attn_mask keeps True; a float mask is added. enable_gqa repeats each kv head for its group."""
    if query.ndim < 2 or key.ndim < 2 or value.ndim < 2:
        raise ShapeError(f"scaled_dot_product_attention: query, key and value need at least 2 dims, got shapes "
                         f"{query.shape}, {key.shape}, {value.shape}")  # fmt: skip
    if query.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
        raise ShapeError(f"scaled_dot_product_attention: shapes query {query.shape}, key {key.shape}, value "
                         f"{value.shape} do not match (need query[-1] == key[-1], key[-2] == value[-2])")  # fmt: skip
    if is_causal and attn_mask is not None:
        raise ValueError("scaled_dot_product_attention: attn_mask must be None when is_causal=True")
    if enable_gqa and query.ndim >= 3:
        hq, hk, hv = query.shape[-3], key.shape[-3], value.shape[-3]
        if hq % hk or hq % hv:
            raise ShapeError(f"scaled_dot_product_attention: {hq} query heads are not a multiple of the key/value "
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


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:  # noqa: A002
    return _inplace(input, input.leaky_relu(negative_slope), inplace)


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
        raise ShapeError(f"pad: padding {tuple(pad)} must have an even length of at most 2*{input.ndim} "
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
        if input.shape[d] + pad[2 * i] + pad[2 * i + 1] < 0:
            raise ShapeError(f"pad: padding ({pad[2 * i]}, {pad[2 * i + 1]}) of dim {d} (size {input.shape[d]}) "
                             "leaves a negative size")  # fmt: skip
        out = _pad_dim(out, d, pad[2 * i], pad[2 * i + 1], mode)
    return out


def _slice_dim(x: Tensor, d: int, start: int, stop: int) -> Tensor:
    return x._shrink([(start, stop) if j == d else (0, s) for j, s in enumerate(x.shape)])


def _pad_dim(x: Tensor, d: int, before: int, after: int, mode: str) -> Tensor:
    if (before < 0 or after < 0) and mode != "circular":  # torch: reflect/replicate the whole dim, then crop
        padded = _pad_dim(x, d, max(before, 0), max(after, 0), mode)
        return _slice_dim(padded, d, max(-before, 0), padded.shape[d] - max(-after, 0))
    n = x.shape[d]
    if before < 0 or after < 0:  # circular, as torch: crop first, then wrap what is left
        x = _slice_dim(x, d, max(-before, 0), n - max(-after, 0))
        before, after, n = max(before, 0), max(after, 0), x.shape[d]
    if before == 0 and after == 0:
        return x
    if mode == "reflect":
        if before >= n or after >= n:
            raise ShapeError(f"pad: reflect padding ({before}, {after}) must be smaller than dim {d} of size {n}")
        parts = [_slice_dim(x, d, 1, before + 1).flip(d), x, _slice_dim(x, d, n - 1 - after, n - 1).flip(d)]
    elif mode == "replicate":
        if n == 0:
            raise ShapeError(f"pad: cannot replicate-pad the empty dim {d}")
        shape_b = [before if j == d else s for j, s in enumerate(x.shape)]
        shape_a = [after if j == d else s for j, s in enumerate(x.shape)]
        parts = [_slice_dim(x, d, 0, 1).expand(shape_b), x, _slice_dim(x, d, n - 1, n).expand(shape_a)]
    else:  # circular
        if before > n or after > n:
            raise ShapeError(f"pad: circular padding ({before}, {after}) must be at most dim {d} of size {n}")
        parts = [_slice_dim(x, d, n - before, n), x, _slice_dim(x, d, 0, after)]
    return cat([p for p in parts if p.shape[d] > 0], d)

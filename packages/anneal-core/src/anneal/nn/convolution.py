"""The N-d convolution family of anneal.nn.functional: conv1d/2d/3d and conv_transpose1d/2d/3d.

One N-d core serves every rank. A convolution is im2col: the padded input's sliding windows are a
view (movement ops, no copy), then one matmul. A stride-1, dilation-1 convolution carries its own
gradient rule (the input gradient is a convolution again, which the GPU tiles, not a scatter back
through the windows). A transposed convolution is the gradient of a convolution with respect to its
input: the input stuffed with stride-1 zeros, convolved with the flipped kernel.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from anneal.composite import with_gradient
from anneal.errors import ShapeError
from anneal.tensor import Tensor
from anneal_ir import GroupOp

__all__ = [
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_nd",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "conv_transpose_nd",
    "ntuple",
    "windows",
]

IntOrTuple = int | Sequence[int]
# an image of this many output positions fills a tile's columns by itself and is computed channels first; a smaller
# one is computed channels last (and permuted), where the tile's rows join the batch and the positions (8x8, 4x4)
CHANNELS_FIRST_POSITIONS = 128
Pads = tuple[tuple[int, int], ...]

# the spatial rank of each public op, as data: (name, N) -> the rank checks and tuples follow from N
SPATIAL_DIMS = {"conv1d": 1, "conv2d": 2, "conv3d": 3, "conv_transpose1d": 1, "conv_transpose2d": 2,
                "conv_transpose3d": 3}  # fmt: skip
AXIS_NAMES = {1: "(C, L)", 2: "(C, H, W)", 3: "(C, D, H, W)"}


# ---- helpers ----


def ntuple(x: Any, n: int, name: str) -> tuple[int, ...]:
    """An int, or 1 or n ints, as n ints (torch's _ntuple, with a named error)."""
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


def _pairs_flat(groups: Sequence[Sequence[tuple[int, int]]]) -> list[tuple[int, int]]:
    return [pair for g in groups for pair in g]


def windows(x: Tensor, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int]) -> Tensor:
    """The sliding windows over the last len(kernel) dims of x, as a view (movement ops only).

    Returns shape (*prefix, *out, *kernel) with out[j] = (i[j] - dilation[j]*(kernel[j]-1) - 1)//stride[j] + 1,
    where result[..., o..., k...] = x[..., o*stride + k*dilation ...].
    """
    n = len(kernel)
    prefix, sizes = x.shape[:-n], x.shape[-n:]
    keep = [(0, p) for p in prefix]
    outs = [(i - d * (k - 1) - 1) // s + 1 for i, k, s, d in zip(sizes, kernel, stride, dilation)]
    if any(o <= 0 for o in outs):
        raise ShapeError(f"window: kernel {tuple(kernel)} (dilation {tuple(dilation)}) is larger than the padded "
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


def _check_ranks(name: str, input: Tensor, weight: Tensor, layout: str) -> int:  # noqa: A002 - torch's names
    nd = SPATIAL_DIMS[name]
    if input.ndim not in (nd + 1, nd + 2):
        raise RuntimeError(f"{name}: expected a {nd + 1}-d {AXIS_NAMES[nd]} or {nd + 2}-d (N, {AXIS_NAMES[nd][1:]} "
                           f"input, got input shape {input.shape} (weight shape {weight.shape})")  # fmt: skip
    if weight.ndim != nd + 2:
        raise RuntimeError(f"{name}: expected a {nd + 2}-d weight {layout}, got weight shape {weight.shape} "
                           f"(input shape {input.shape})")  # fmt: skip
    return nd


def _same_pads(name: str, padding: str, s: Sequence[int], d: Sequence[int], k: Sequence[int]) -> list[tuple[int, int]]:
    if padding == "valid":
        return [(0, 0)] * len(k)
    if padding == "same":
        if any(v != 1 for v in s):
            raise RuntimeError(f"{name}: padding='same' is not supported for strided convolutions")
        tot = [dd * (kk - 1) for dd, kk in zip(d, k)]
        return [(t // 2, t - t // 2) for t in tot]  # torch puts the odd extra on the right
    raise RuntimeError(f"{name}: invalid padding string {padding!r}, expected 'valid' or 'same'")


def _add_bias(out: Tensor, bias: Tensor | None, nd: int) -> Tensor:
    return out if bias is None else out + bias.reshape(1, out.shape[1], *([1] * nd))


# ---- convolution ----


def conv_nd(name: str, input: Tensor, weight: Tensor, bias: Tensor | None, stride: IntOrTuple,  # noqa: A002
            padding: IntOrTuple | str, dilation: IntOrTuple, groups: int) -> Tensor:  # fmt: skip
    """The N-d cross-correlation of torch's conv{N}d, N = SPATIAL_DIMS[name]."""
    nd = _check_ranks(name, input, weight, "(out, in/groups, *kernel)")
    x = input.unsqueeze(0) if input.ndim == nd + 1 else input
    c, o, cg, k = x.shape[1], weight.shape[0], weight.shape[1], tuple(weight.shape[2:])
    if groups <= 0 or c != cg * groups or o % groups:
        raise RuntimeError(f"{name}: input shape {input.shape} and weight shape {weight.shape} do not match with "
                           f"groups={groups} (need in_channels == weight[1] * groups)")  # fmt: skip
    s, d = ntuple(stride, nd, name), ntuple(dilation, nd, name)
    if isinstance(padding, str):
        pads = _same_pads(name, padding, s, d, k)
    else:
        pads = [(v, v) for v in ntuple(padding, nd, name)]
    if any(v <= 0 for v in (*s, *d)) or any(a < 0 for a, _ in pads):
        raise RuntimeError(f"{name}: stride {s} and dilation {d} must be positive and padding {tuple(pads)} "
                           "non-negative")  # fmt: skip
    padded = tuple(i + a + b for i, (a, b) in zip(x.shape[2:], pads))
    if any(pi < dd * (kk - 1) + 1 for pi, dd, kk in zip(padded, d, k)):
        raise RuntimeError(f"{name}: the padded input size {padded} is smaller than the (dilated) kernel size "
                           f"{k} (input shape {input.shape}, weight shape {weight.shape}, dilation {d})")  # fmt: skip
    out = _conv(x, weight, tuple(pads), s, d, groups)
    out = _add_bias(out, bias, nd)
    return out.squeeze(0) if input.ndim == nd + 1 else out


def _conv(x: Tensor, weight: Tensor, pads: Pads, s: Sequence[int], d: Sequence[int], groups: int) -> Tensor:
    """Batched, channels-first convolution; stride 1 and dilation 1 take the path with the gradient rule."""
    k = weight.shape[2:]
    if all(v == 1 for v in (*s, *d)) and all(0 <= p <= kk - 1 for (a, b), kk in zip(pads, k) for p in (a, b)):
        return _conv_unit(x, weight, pads, groups)
    return _im2col(x, weight, pads, s, d, groups)


def _im2col(x: Tensor, weight: Tensor, pads: Sequence[tuple[int, int]], s: Sequence[int], d: Sequence[int],
            groups: int) -> Tensor:  # fmt: skip
    """The convolution of a batched x: its padded windows are a view, then one matmul."""
    n = x.shape[0]
    o, cg, *k = weight.shape
    nd = len(k)
    win = windows(x._pad([(0, 0), (0, 0), *pads]), k, s, d)  # (n, c, *out, *k)
    outs = win.shape[2 : 2 + nd]
    g, og, kk = groups, o // groups, cg * math.prod(k)
    # (n, g, cg, *out, *k) -> (n, g, *out, *k, cg): the contraction axes last, the channels innermost, so that a
    # tile's k step (16 channels) reads one window position: its bounds checks and offsets are the step's, not
    # each element's (with the channels outermost, every staged element divided its k by 9 and 3)
    order = (0, 1, *range(3, 3 + 2 * nd), 2)
    positions = math.prod(outs)
    cols = win.reshape(n, g, cg, *outs, *k).permute(*order).reshape(n, g, positions, kk)
    w = weight.reshape(g, og, cg, *k).permute(0, 1, *range(3, 3 + nd), 2).reshape(g, og, kk)
    # the weight is copied (a small kernel) into the order its tile stages it in, so that the tile reads it four
    # words at a time; read in place it was four loads 9 * cg words apart (ResNet-9's convolutions: 15-18 TFLOP/s
    # against 24-28 with the copy, on an H100)
    if positions >= CHANNELS_FIRST_POSITIONS:
        # the output channels first, as the image is laid out: the batch norm, ReLU and pooling that read it (and
        # their gradients) read it along the same axis as the pooled images (a third of ResNet-9's other kernels)
        out = w.contiguous().matmul(cols.transpose(2, 3))  # (n, g, og, positions): the one matmul
        return out.reshape(n, o, *outs)
    out = cols.matmul(w.transpose(1, 2).contiguous())  # (n, g, positions, og): the batch joins the positions
    return out.permute(0, 1, 3, 2).reshape(n, o, *outs)


def _computed(x: Tensor) -> Tensor:
    """x, computed once into a buffer where it is the result of arithmetic (under movement ops). A convolution reads
    each input element once per kernel position, in every tile of output channels: a fused prologue (a batch norm
    and ReLU before it, their gradients after it) would be computed that often, and cost ResNet-9 about half of
    its convolutions' speed. PyTorch writes it once too."""
    u = x.uop
    while u.op in GroupOp.Movement:
        u = u.src[0]
    return x.contiguous() if u.op in GroupOp.ALU else x


def _conv_unit(x: Tensor, weight: Tensor, pads: Pads, groups: int) -> Tensor:
    """A stride-1, dilation-1 convolution, differentiated as PyTorch does: its input gradient is a convolution of
    the output gradient with the flipped kernel (a contraction the GPU tiles), not a scatter through the windows."""
    nd = weight.ndim - 2
    if math.prod(weight.shape[2:]) > 1:
        x = _computed(x)
    out = _im2col(x, weight, pads, (1,) * nd, (1,) * nd, groups)
    return with_gradient(out, (x, weight), _conv_unit_gradient, pads=pads, groups=groups)


def _swap_in_out(weight: Tensor, groups: int) -> Tensor:
    """(g*a, b, *k) -> (g*b, a, *k): each group's in and out channels exchanged, the kernel flipped."""
    ga, b, *k = weight.shape
    a, nd = ga // groups, len(k)
    swapped = weight.reshape(groups, a, b, *k).transpose(1, 2).reshape(groups * b, a, *k)
    return swapped.flip(*range(2, 2 + nd))


def _conv_unit_gradient(grad: Tensor, x: Tensor, weight: Tensor, *, pads: Pads,
                        groups: int) -> tuple[Tensor, Tensor]:  # fmt: skip
    n = x.shape[0]
    o, cg, *k = weight.shape
    nd = len(k)
    g, og = groups, o // groups
    positions = math.prod(grad.shape[2:])
    if math.prod(k) > 1:
        grad = _computed(grad)  # read by both gradients, the input's through windows
    # input: the full correlation of grad with the kernel flipped, in and out channels swapped in each group
    back = tuple((kk - 1 - a, kk - 1 - b) for (a, b), kk in zip(pads, k))
    dx = _conv_unit(grad, _swap_in_out(weight, g), back, g)
    # weight: grad against the windows of the padded input, summed over the batch and the positions
    win = windows(x._pad([(0, 0), (0, 0), *pads]), k, (1,) * nd, (1,) * nd)  # (n, c, *out, *k)
    kk = math.prod(k)
    # the columns are (window position, channel), the channels innermost as in the forward: a tile's four lanes are
    # four channels at one window position, so they share its bounds check and offset (in the (channel, window)
    # order each lane checked and computed its own)
    cols = win.reshape(n, g, cg, positions, kk).permute(1, 0, 3, 4, 2).reshape(g, n * positions, kk * cg)
    dy = grad.reshape(n, g, og, positions).permute(1, 2, 0, 3).reshape(g, og, n * positions)
    dw = dy.matmul(cols).reshape(o, *k, cg)
    return dx, dw.permute(0, nd + 1, *range(1, nd + 1))


def conv1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntOrTuple = 1,  # noqa: A002
           padding: IntOrTuple | str = 0, dilation: IntOrTuple = 1, groups: int = 1) -> Tensor:  # fmt: skip
    """torch.nn.functional.conv1d: input (N, C, L) or (C, L), weight (out, in/groups, k)."""
    return conv_nd("conv1d", input, weight, bias, stride, padding, dilation, groups)


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntOrTuple = 1,  # noqa: A002
           padding: IntOrTuple | str = 0, dilation: IntOrTuple = 1, groups: int = 1) -> Tensor:  # fmt: skip
    """torch.nn.functional.conv2d: input (N, C, H, W) or (C, H, W), weight (out, in/groups, kh, kw)."""
    return conv_nd("conv2d", input, weight, bias, stride, padding, dilation, groups)


def conv3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntOrTuple = 1,  # noqa: A002
           padding: IntOrTuple | str = 0, dilation: IntOrTuple = 1, groups: int = 1) -> Tensor:  # fmt: skip
    """torch.nn.functional.conv3d: input (N, C, D, H, W) or (C, D, H, W), weight (out, in/groups, kd, kh, kw)."""
    return conv_nd("conv3d", input, weight, bias, stride, padding, dilation, groups)


# ---- transposed convolution ----


def _stuff_zeros(x: Tensor, stride: Sequence[int]) -> Tensor:
    """stride-1 zeros between neighbours along each spatial dim: (n, c, *i) -> (n, c, *((i-1)*s + 1))."""
    for j, s in enumerate(stride):
        if s == 1:
            continue
        dim = 2 + j
        i = x.shape[dim]
        x = x.unsqueeze(dim + 1)._pad([(0, 0)] * (dim + 1) + [(0, s - 1)] + [(0, 0)] * (x.ndim - dim - 1))
        x = x.reshape(*x.shape[:dim], i * s, *x.shape[dim + 2 :])
        x = x._shrink([(0, v) if a != dim else (0, (i - 1) * s + 1) for a, v in enumerate(x.shape)])
    return x


def _pad_or_crop(x: Tensor, pads: Sequence[tuple[int, int]]) -> Tensor:
    """Pad the spatial dims by pads, where a negative amount crops (torch's negative padding)."""
    crop = [(0, v) for v in x.shape[:2]] + [(max(-a, 0), v - max(-b, 0)) for (a, b), v in zip(pads, x.shape[2:])]
    x = x._shrink(crop)
    return x._pad([(0, 0), (0, 0), *[(max(a, 0), max(b, 0)) for a, b in pads]])


def conv_transpose_nd(name: str, input: Tensor, weight: Tensor, bias: Tensor | None, stride: IntOrTuple,  # noqa: A002
                      padding: IntOrTuple, output_padding: IntOrTuple, groups: int,
                      dilation: IntOrTuple) -> Tensor:  # fmt: skip
    """torch's conv_transpose{N}d: the input gradient of conv{N}d, with weight (in, out/groups, *kernel)."""
    nd = _check_ranks(name, input, weight, "(in, out/groups, *kernel)")
    x = input.unsqueeze(0) if input.ndim == nd + 1 else input
    c, k = x.shape[1], tuple(weight.shape[2:])
    if groups <= 0 or c != weight.shape[0] or c % groups:
        raise RuntimeError(f"{name}: input shape {input.shape} and weight shape {weight.shape} do not match with "
                           f"groups={groups} (need in_channels == weight[0], divisible by groups)")  # fmt: skip
    s, p = ntuple(stride, nd, name), ntuple(padding, nd, name)
    op, d = ntuple(output_padding, nd, name), ntuple(dilation, nd, name)
    if any(v <= 0 for v in (*s, *d)) or any(v < 0 for v in (*p, *op)):
        raise RuntimeError(f"{name}: stride {s} and dilation {d} must be positive, padding {p} and output_padding "
                           f"{op} non-negative")  # fmt: skip
    if any(o >= max(ss, dd) for o, ss, dd in zip(op, s, d)):
        raise RuntimeError(f"{name}: output_padding {op} must be smaller than either stride {s} or dilation {d}")
    # the full correlation of the zero-stuffed input with the flipped kernel, cut by padding, grown by output_padding
    full = [dd * (kk - 1) for dd, kk in zip(d, k)]
    pads = [(f - pp, f - pp + o) for f, pp, o in zip(full, p, op)]
    sizes = [(i - 1) * ss + f + 1 - 2 * pp + o for i, ss, f, pp, o in zip(x.shape[2:], s, full, p, op)]
    if any(v <= 0 for v in sizes):
        raise RuntimeError(f"{name}: input shape {input.shape} and weight shape {weight.shape} give the non-positive "
                           f"output size {tuple(sizes)} (stride {s}, padding {p}, dilation {d})")  # fmt: skip
    # cropping (padding beyond the kernel reach) and any pad the unit convolution cannot take are applied to x
    inner = [(min(max(a, 0), f), min(max(b, 0), f)) for (a, b), f in zip(pads, full)]
    outer = [(a - ia, b - ib) for (a, b), (ia, ib) in zip(pads, inner)]
    xs = _pad_or_crop(_stuff_zeros(x, s), outer)
    out = _conv(xs, _swap_in_out(weight, groups), tuple(inner), (1,) * nd, d, groups)
    out = _add_bias(out, bias, nd)
    return out.squeeze(0) if input.ndim == nd + 1 else out


def conv_transpose1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntOrTuple = 1,  # noqa: A002
                     padding: IntOrTuple = 0, output_padding: IntOrTuple = 0, groups: int = 1,
                     dilation: IntOrTuple = 1) -> Tensor:  # fmt: skip
    """torch.nn.functional.conv_transpose1d: input (N, C, L) or (C, L), weight (in, out/groups, k)."""
    return conv_transpose_nd("conv_transpose1d", input, weight, bias, stride, padding, output_padding, groups,
                             dilation)  # fmt: skip


def conv_transpose2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntOrTuple = 1,  # noqa: A002
                     padding: IntOrTuple = 0, output_padding: IntOrTuple = 0, groups: int = 1,
                     dilation: IntOrTuple = 1) -> Tensor:  # fmt: skip
    """torch.nn.functional.conv_transpose2d: input (N, C, H, W) or (C, H, W), weight (in, out/groups, kh, kw)."""
    return conv_transpose_nd("conv_transpose2d", input, weight, bias, stride, padding, output_padding, groups,
                             dilation)  # fmt: skip


def conv_transpose3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntOrTuple = 1,  # noqa: A002
                     padding: IntOrTuple = 0, output_padding: IntOrTuple = 0, groups: int = 1,
                     dilation: IntOrTuple = 1) -> Tensor:  # fmt: skip
    """torch.nn.functional.conv_transpose3d: input (N, C, D, H, W) or (C, D, H, W), weight (in, out/groups, k...)."""
    return conv_transpose_nd("conv_transpose3d", input, weight, bias, stride, padding, output_padding, groups,
                             dilation)  # fmt: skip

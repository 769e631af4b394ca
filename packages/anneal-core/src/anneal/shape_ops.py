"""torch's rearranging ops, as movement ops and masks on Tensors (so they differentiate and fuse like any
view): diagonal, diag, roll, repeat_interleave, meshgrid, t, and linspace."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from anneal.tensor import Tensor


def _dim(dim: int, ndim: int, op: str) -> int:
    if not -max(ndim, 1) <= dim < max(ndim, 1):
        raise IndexError(f"{op}: dimension {dim} is out of range for a tensor of {ndim} dims")
    return dim % max(ndim, 1)


def diagonal(x: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The diagonal of the (dim1, dim2) planes, as a view: the planes flattened, every (m + 1)-th element."""
    d1, d2 = _dim(dim1, x.ndim, "diagonal"), _dim(dim2, x.ndim, "diagonal")
    if d1 == d2:
        raise RuntimeError(f"diagonal: dim1 and dim2 must differ, both are {d1}")
    rest = [d for d in range(x.ndim) if d not in (d1, d2)]
    planes = x.permute(*rest, d1, d2)
    n, m = planes.shape[-2], planes.shape[-1]
    length = max(0, min(n, m - offset) if offset >= 0 else min(n + offset, m))
    start = offset if offset >= 0 else -offset * m
    flat = planes.flatten(-2) if planes.ndim >= 2 else planes
    if length == 0:
        return flat[..., 0:0]
    return flat[..., start : start + (length - 1) * (m + 1) + 1 : m + 1]


def diag(x: Tensor, diagonal_: int = 0) -> Tensor:
    """A 1-d x on the k-th diagonal of a square matrix (zeros elsewhere); a 2-d x's k-th diagonal."""
    from anneal.tensor import Tensor, where

    if x.ndim == 2:
        return diagonal(x, diagonal_)
    if x.ndim != 1:
        raise RuntimeError(f"diag: expected a 1-d or 2-d tensor, got {x.ndim} dims")
    k = diagonal_
    size = x.shape[0] + abs(k)
    rows = Tensor.arange(size, device=x.device).reshape(size, 1)
    cols = Tensor.arange(size, device=x.device).reshape(1, size)
    padded = x.pad((0, abs(k)))
    values = padded.reshape(size, 1) if k >= 0 else padded.reshape(1, size)
    return where(cols - rows == k, values, Tensor.full((), 0, x.dtype, x.device))


def roll(x: Tensor, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:
    from anneal.tensor import cat

    if dims is None:
        if not isinstance(shifts, int) and len(shifts) != 1:
            raise RuntimeError("roll: with no dims, shifts must be one number (the tensor is rolled flat)")
        s = shifts if isinstance(shifts, int) else shifts[0]
        return roll(x.flatten(), s, 0).reshape(x.shape)
    shift_list = [shifts] if isinstance(shifts, int) else list(shifts)
    dim_list = [dims] if isinstance(dims, int) else list(dims)
    if len(shift_list) != len(dim_list):
        raise RuntimeError(f"roll: {len(shift_list)} shifts for {len(dim_list)} dims")
    out = x
    for s, d in zip(shift_list, dim_list):
        d = _dim(d, x.ndim, "roll")
        size = out.shape[d]
        s = s % size if size else 0
        if s == 0:
            continue
        index = [slice(None)] * d
        out = cat([out[(*index, slice(size - s, size))], out[(*index, slice(0, size - s))]], d)
    return out


def repeat_interleave(
    x: Tensor, repeats: int | Tensor, dim: int | None = None, output_size: int | None = None
) -> Tensor:
    """Each element repeated `repeats` times along dim (x flattened first when dim is None). A tensor of counts, one
    per element (or one for all), is read when the op is built (the result's size is its sum, as torch reads it),
    and the elements are gathered by index, so the gradient of each sums its copies'."""
    from anneal.tensor import Tensor

    if isinstance(repeats, Tensor):
        if repeats.dtype.is_float:
            raise RuntimeError(f"repeat_interleave: repeats must be an integer tensor, got {repeats.dtype.name}")
        if repeats.ndim > 1:
            raise RuntimeError(f"repeat_interleave: repeats must be 0-d or 1-d, got shape {repeats.shape}")
        if repeats.numel() == 1:
            return repeat_interleave(x, int(repeats.item()), dim, output_size)
        if dim is None:
            x, dim = x.flatten(), 0
        d = _dim(dim, x.ndim, "repeat_interleave")
        counts = repeats.numpy().astype(np.int64)
        if counts.shape[0] != x.shape[d]:
            raise RuntimeError(f"repeat_interleave: {counts.shape[0]} repeats for dim {d} of size {x.shape[d]}")
        if (counts < 0).any():
            raise RuntimeError(f"repeat_interleave: repeats must be >= 0, got {counts.min()}")
        if output_size is not None and output_size != int(counts.sum()):
            raise RuntimeError(f"repeat_interleave: output_size {output_size} is not the sum of repeats "
                               f"{int(counts.sum())}")  # fmt: skip
        index = Tensor(np.repeat(np.arange(counts.shape[0]), counts), device=x.device)
        return x[(slice(None),) * d + (index,)]
    if not isinstance(repeats, int):
        raise TypeError(f"repeat_interleave: repeats must be an int or an integer tensor, got {type(repeats).__name__}")
    if repeats < 0:
        raise RuntimeError(f"repeat_interleave: repeats must be >= 0, got {repeats}")
    if dim is None:
        x, dim = x.flatten(), 0
    d = _dim(dim, x.ndim, "repeat_interleave")
    if repeats == 0:  # nothing along dim: an empty slice (an expand to size 0 would index by 0)
        return x[(slice(None),) * d + (slice(0, 0),)]
    expanded = x.unsqueeze(d + 1).expand(*x.shape[: d + 1], repeats, *x.shape[d + 1 :])
    return expanded.flatten(d, d + 1)


def meshgrid(*tensors: Any, indexing: str = "ij") -> tuple[Tensor, ...]:
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
        raise ValueError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    for t in tensors:
        if t.ndim > 1:
            raise RuntimeError(f"meshgrid: expects 0-d or 1-d tensors, got one of shape {t.shape}")
    flat = [t.reshape(-1) for t in tensors]
    if indexing == "xy" and len(flat) >= 2:
        flat[0], flat[1] = flat[1], flat[0]
    shape = tuple(t.shape[0] for t in flat)
    grids = [t.reshape(*(1,) * i, shape[i], *(1,) * (len(flat) - i - 1)).expand(*shape) for i, t in enumerate(flat)]
    if indexing == "xy" and len(grids) >= 2:  # the grids of the swapped inputs, given back in the inputs' order
        grids[0], grids[1] = grids[1], grids[0]
    return tuple(grids)


def t(x: Tensor) -> Tensor:
    if x.ndim > 2:
        raise RuntimeError(f"t: expects a tensor with <= 2 dimensions, got {x.ndim}; use transpose or mT")
    return x.transpose(0, 1) if x.ndim == 2 else x


def linspace(start: float, end: float, steps: int, dtype: Any = None, device: str | None = None) -> Tensor:
    """steps points from start to end, computed from the nearer end as torch does (exact end points)."""
    from anneal.tensor import Tensor, where

    if steps < 0:
        raise RuntimeError(f"linspace: number of steps must be non-negative, got {steps}")
    if steps <= 1:
        return Tensor.full((steps,), start, dtype, device)
    i = Tensor.arange(steps, device=device).cast(dtype or "float32")
    step = (end - start) / (steps - 1)
    out = where(i < steps // 2, start + i * step, end - (steps - 1 - i) * step)
    return out.cast(dtype) if dtype is not None else out


def unfold(x: Tensor, dimension: int, size: int, step: int) -> Tensor:
    """torch's Tensor.unfold: every window of `size` along dimension, `step` apart, as a new last dim. The
    windows are slices stacked along dimension (one view each), so it differentiates like any view."""
    from anneal.tensor import stack

    d = _dim(dimension, x.ndim, "unfold")
    n = x.shape[d] if x.ndim else 1
    if size < 0 or size > n:
        raise RuntimeError(f"unfold: maximum size for tensor at dimension {d} is {n} but size is {size}")
    if step <= 0:
        raise RuntimeError(f"unfold: step is {step} but must be > 0")
    if x.ndim == 0:
        return x.reshape(1)
    count = (n - size) // step + 1
    window = [(0, s) for s in x.shape]
    windows = []
    for k in range(count):
        window[d] = (k * step, k * step + size)
        windows.append(x._shrink(window))
    stacked = stack(windows, d)  # (.., count, size, ..): the window's own dim goes last
    order = [i for i in range(stacked.ndim) if i != d + 1] + [d + 1]
    return stacked.permute(*order)

"""Advanced indexing and item assignment, as torch (numpy's rules): `x[idx]` and `x[idx] = v`.

Integer tensors, lists and arrays index any dims and broadcast together; ints among them count as 0-d indices;
the result's indexed dims take the place of the first indexed dim when the indices are adjacent, and go first
otherwise. A boolean mask (a tensor, list or array) selects the True elements of the dims it covers: its count
is data, so the mask is computed (read) when the index is built, as torch reads it. A gather is a one-hot
product over the flattened indexed dims, so it fuses, differentiates and runs on every backend.

`x[idx] = v` replaces x's value by the updated one (the Python object now holds the new graph, as torch's
in-place write changes x): a basic index (ints, step-1 slices, None, ...) pads v into place; a boolean mask of
x's shape is a `where`; other indices scatter through the one-hot, the last write of duplicates winning. Unlike
torch, views taken from x before the write keep the old values (a lazy tensor's views are values, not storage).
Indices known on the host (lists, arrays, ints) are checked against the dims; those in tensors by anneal.bounds.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from anneal import bounds
from anneal.errors import ShapeError
from anneal_ir import dtypes

if TYPE_CHECKING:
    from anneal.tensor import Tensor


def _mask(i: Any) -> np.ndarray | None:
    """A boolean index as a host array (a mask tensor is read: its count is the result's size), else None."""
    from anneal.tensor import Tensor

    if isinstance(i, Tensor) and i.dtype == dtypes.bool:
        return i.numpy()
    if isinstance(i, (list, tuple, np.ndarray)) and np.asarray(i).dtype == np.bool_:
        return np.asarray(i)
    return None


def full_index(x: Tensor, index: tuple) -> tuple:
    """The index with masks read, Ellipsis expanded and trailing dims filled with slice(None); each mask
    becomes one int64 index per dim it covers (np.nonzero)."""
    masks = [_mask(i) for i in index]
    real = sum(1 if m is None else max(m.ndim, 1) for i, m in zip(index, masks) if i is not None and i is not Ellipsis)
    if real > x.ndim:
        raise IndexError(f"too many indices ({real}) for a tensor of shape {x.shape}")
    ellipses = [k for k, i in enumerate(index) if i is Ellipsis]
    if len(ellipses) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    out: list[Any] = []
    dim = 0
    for i, m in zip(index, masks):
        if i is Ellipsis:
            out += [slice(None)] * (x.ndim - real)
            dim += x.ndim - real
        elif m is not None:
            covered = tuple(x.shape[dim : dim + m.ndim])
            if m.shape != covered:
                raise IndexError(f"the boolean mask of shape {m.shape} does not match the indexed dims {covered} "
                                 f"(from dim {dim} of shape {x.shape})")  # fmt: skip
            out += [np.asarray(axis, np.int64) for axis in np.nonzero(m)]
            dim += m.ndim
        else:
            out.append(i)
            dim += i is not None
    return tuple(out) + (slice(None),) * (x.ndim - dim)


def _as_index(i: Any, size: int, dim: int, device: str) -> Tensor:
    """An index along a dim of size as an int64 tensor, negatives wrapped; host-known values checked."""
    from anneal.tensor import Tensor, where

    if isinstance(i, Tensor):
        if not i.dtype.is_int:
            raise IndexError(f"tensors used as indices must be integer or bool tensors, got {i.dtype.name}")
        bounds.check_bounds(i, size, f"index (dim {dim})", negative=True)
        t = i.cast(dtypes.int64)
        return where(t < 0, t + size, t)
    values = np.asarray(i)
    if values.dtype.kind not in "iu" and values.size:
        raise IndexError(f"only integers, slices, None, Ellipsis and integer or boolean arrays are valid "
                         f"indices, got {values.dtype}")  # fmt: skip
    values = values.astype(np.int64)
    bad = values[(values < -size) | (values >= size)]
    if bad.size:
        raise IndexError(f"index {int(bad.flat[0])} is out of bounds for dim {dim} with size {size}")
    return Tensor(np.where(values < 0, values + size, values), device=device)


def getitem(x: Tensor, index: Any) -> Tensor:
    """x[index] with at least one tensor, list, array or boolean mask in it."""
    from anneal.tensor import Tensor, broadcast_shape, where

    index = full_index(x, index if isinstance(index, tuple) else (index,))
    # 1. the basic part: slices and None as they are, every advanced (or int) position kept whole
    basic: list[Any] = []
    advanced: list[tuple[int, Any]] = []  # (dim of the intermediate, index)
    for i in index:
        if i is None:
            basic.append(None)
        elif isinstance(i, slice):
            basic.append(i)
        else:
            advanced.append((len(basic), i))
            basic.append(slice(None))
    y = x[tuple(basic)] if basic else x
    dims = [d for d, _ in advanced]
    sizes = [y.shape[d] for d in dims]
    idx = [_as_index(i, s, d, x.device) for (d, i), s in zip(advanced, sizes)]
    shape = broadcast_shape(*(t.shape for t in idx), op="index")
    # 2. one flat index over the indexed dims (row-major), gathered by a one-hot product
    flat = idx[0].expand(shape) if idx else Tensor(0)
    for t, s in zip(idx[1:], sizes[1:]):
        flat = flat * s + t.expand(shape)
    n = math.prod(sizes)
    rest = [d for d in range(y.ndim) if d not in dims]
    table = y.permute(*dims, *rest).reshape(n, -1)
    onehot = flat.reshape(-1, 1, 1) == Tensor.arange(n, device=x.device).reshape(1, n, 1)  # [slot, row, 1]
    # a select, not a one-hot product: inf and NaN rows elsewhere must not turn 0 * inf into NaN here
    picked = where(onehot, table.unsqueeze(0), 0).sum(1, dtype=table.dtype)
    out = picked.reshape(*shape, *(y.shape[d] for d in rest)).cast(x.dtype)
    adjacent = dims == list(range(dims[0], dims[0] + len(dims)))
    if adjacent and dims[0] > 0:  # the indexed dims stay where they were
        k = len(shape)
        order = list(range(k, k + dims[0])) + list(range(k)) + list(range(k + dims[0], out.ndim))
        out = out.permute(*order)
    return out


def setitem(x: Tensor, index: Any, value: Any) -> None:
    """x[index] = value: x now holds the updated value (its dtype and shape unchanged)."""
    from anneal import autograd, grad_mode
    from anneal.tensor import Tensor, where

    if x.requires_grad and grad_mode.is_grad_enabled() and autograd.is_leaf(x):
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation "
                           "(write under anneal.no_grad(), or to a copy: x = x.clone())")  # fmt: skip
    v = (value if isinstance(value, Tensor) else Tensor(value, dtype=x.dtype, device=x.device)).cast(x.dtype)
    items = index if isinstance(index, tuple) else (index,)
    mask = items[0] if len(items) == 1 else None
    full_mask = isinstance(mask, Tensor) and mask.dtype == dtypes.bool and tuple(mask.shape) == tuple(x.shape)
    if full_mask and v.numel() == 1:  # one value everywhere the mask holds: a where (a tensor of values scatters)
        _replace(x, where(mask, v.reshape(()), x))
        return
    target = tuple(x[index].shape)
    try:
        v = v.expand(target) if tuple(v.shape) != target else v
    except ValueError:
        raise ShapeError(f"x[index] = v: v of shape {v.shape} cannot be broadcast to the selection's shape "
                         f"{target}") from None  # fmt: skip
    region = _region(x, items)
    if region is not None:  # ints and step-1 slices: v padded into place
        pads = [(start, size - stop) for (start, stop), size in zip(region, x.shape)]
        placed = v.reshape(tuple(stop - start for start, stop in region))._pad(pads)
        inside = Tensor.ones(*(stop - start for start, stop in region), dtype=dtypes.bool, device=x.device)._pad(pads)
        _replace(x, where(inside, placed, x))
        return
    slots = _positions(x, items).reshape(-1)  # the flat element each selected slot is, by the same indexing
    n = x.numel()
    onehot = slots.unsqueeze(-1) == Tensor.arange(n, device=x.device)  # [slot, element]
    order = Tensor.arange(slots.shape[0], device=x.device).unsqueeze(-1) + 1
    last = (onehot.cast(dtypes.int64) * order).amax(0)  # the last slot writing each element (0: none)
    chosen = onehot & (order == last.unsqueeze(0))
    written = where(chosen, v.reshape(-1, 1), 0).sum(0, dtype=x.dtype)
    _replace(x, where(last > 0, written, x.reshape(-1)).reshape(x.shape))


def _region(x: Tensor, items: tuple) -> list[tuple[int, int]] | None:
    """(start, stop) per dim when the index is ints, step-1 slices, None and Ellipsis; None otherwise."""
    from anneal.tensor import Tensor

    if any(isinstance(i, (Tensor, list, tuple, np.ndarray)) for i in items):
        return None
    region = []
    dims = iter(range(x.ndim))
    for i in full_index(x, items):
        if i is None:
            continue
        size = x.shape[next(dims)]
        if isinstance(i, slice):
            start, stop, step = i.indices(size)
            if step != 1:
                return None
            region.append((start, max(start, stop)))
        else:
            j = int(i) + size if int(i) < 0 else int(i)
            if not 0 <= j < size:
                raise IndexError(f"index {i} is out of bounds for dim {len(region)} with size {size}")
            region.append((j, j + 1))
    return region


def _positions(x: Tensor, items: tuple) -> Tensor:
    from anneal.tensor import Tensor

    n = x.numel()
    flat = Tensor(np.arange(n, dtype=np.int64).reshape(tuple(x.shape)), device=x.device)
    return flat[items if len(items) != 1 else items[0]]


def _replace(x: Tensor, new: Tensor) -> None:
    x.uop = new.uop
    if new.requires_grad and not x.requires_grad:
        x._requires_grad = True


# ---- index-driven reads and writes along one dim: torch's scatter family, and the data-sized selections ----

SCATTER_REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")


def scatter(x: Tensor, dim: int, index: Tensor, src: Any, reduce: str | None = None, op: str = "scatter") -> Tensor:
    """torch.scatter: out[..index[i][j]..][j] = src[i][j] along dim (reduce 'add' / 'multiply' combine)."""
    if reduce is None:
        return _scatter(x, dim, index, src, "assign", True, op)
    legacy = {"add": "sum", "multiply": "prod"}
    if reduce not in legacy:
        raise ValueError(f"scatter: reduce must be 'add' or 'multiply', got {reduce!r}")
    return _scatter(x, dim, index, src, legacy[reduce], True, op)


def scatter_reduce(x: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, include_self: bool = True,
                   op: str = "scatter_reduce") -> Tensor:  # fmt: skip
    """torch.scatter_reduce: every src element combined into its target by sum, prod, mean, amax or amin."""
    if reduce not in SCATTER_REDUCTIONS:
        raise RuntimeError(f"scatter_reduce: reduce argument must be one of {', '.join(SCATTER_REDUCTIONS)}, got "
                           f"{reduce!r}")  # fmt: skip
    return _scatter(x, dim, index, src, reduce, include_self, op)


def _scatter(x: Tensor, dim: int, index: Tensor, src: Any, reduce: str, include_self: bool, op: str) -> Tensor:
    """The scatter family; op names the caller in an out-of-range index's error (checked as gather's)."""
    from anneal.tensor import Tensor, where

    d = dim % max(x.ndim, 1) if -max(x.ndim, 1) <= dim < max(x.ndim, 1) else None
    if d is None:
        raise IndexError(f"scatter: dimension {dim} is out of range for a tensor of {x.ndim} dims")
    if not index.dtype.is_int:
        raise RuntimeError(f"scatter(): Expected dtype int64 for index, got {index.dtype.name}")
    if index.ndim != x.ndim:
        raise RuntimeError(f"scatter: index has {index.ndim} dims but self has {x.ndim} (shapes {index.shape}, "
                           f"{x.shape})")  # fmt: skip
    for k, (i, s) in enumerate(zip(index.shape, x.shape)):
        if k != d and i > s:
            raise RuntimeError(f"scatter: index {index.shape} is larger than self {x.shape} in dim {k}")
    values = src if isinstance(src, Tensor) else Tensor.full(tuple(index.shape), src, dtype=x.dtype, device=x.device)
    if isinstance(src, Tensor):
        if any(i > s for i, s in zip(index.shape, src.shape)):
            raise RuntimeError(f"scatter: index {index.shape} is larger than src {src.shape}")
        values = src._shrink([(0, i) for i in index.shape])
    values = values.cast(x.dtype)
    n = x.shape[d]
    bounds.check_bounds(index, n, op)
    # [.., m (the index's positions along dim), n (the targets)], with the other dims of the index's extent
    onehot = index.cast(dtypes.int64).transpose(d, -1).unsqueeze(-1) == Tensor.arange(n, device=x.device)
    v = values.transpose(d, -1).unsqueeze(-1)
    if reduce == "assign":  # the last write of duplicates wins
        order = Tensor.arange(onehot.shape[-2], device=x.device).unsqueeze(-1) + 1
        last = (onehot.cast(dtypes.int64) * order).amax(-2, keepdim=True)
        onehot = onehot & (order == last)
    hits = onehot.cast(dtypes.int64).sum(-2)  # [.., n]: writes per target
    if reduce in ("sum", "mean", "assign"):
        combined = where(onehot, v, 0).sum(-2, dtype=x.dtype)
    elif reduce == "prod":
        combined = where(onehot, v, 1).prod(-2).cast(x.dtype)
    else:
        fill = v.amin() if reduce == "amax" else v.amax()  # a value no target's result can exceed
        picked = where(onehot, v, fill)
        combined = picked.amax(-2) if reduce == "amax" else picked.amin(-2)
    # back to x's layout: the index's extent in the other dims, padded to x's shape
    pads = [(0, s - i) if k != d else (0, 0) for k, (i, s) in enumerate(zip(index.shape, x.shape))]
    combined, hits = combined.transpose(d, -1)._pad(pads), hits.transpose(d, -1)._pad(pads)
    hit = hits > 0
    if reduce == "assign":
        return where(hit, combined, x)
    if reduce in ("sum", "mean"):
        total = x + combined if include_self else combined
        if reduce == "mean":  # torch: integers divide with floor
            count = (hits + int(include_self)).maximum(1)
            total = total / count.cast(total.dtype) if x.dtype.is_float else total.cast(dtypes.int64) // count
    elif reduce == "prod":
        total = x * combined if include_self else combined
    else:
        total = (x.maximum(combined) if reduce == "amax" else x.minimum(combined)) if include_self else combined
    return where(hit, total, x).cast(x.dtype)


def masked_select(x: Tensor, mask: Tensor) -> Tensor:
    """The elements of x where mask (broadcast together) is True, as 1-d: the mask is read for the count."""
    from anneal.tensor import broadcast_shape

    if mask.dtype != dtypes.bool:
        raise RuntimeError(f"masked_select: expected a bool mask, got {mask.dtype.name}")
    shape = broadcast_shape(tuple(x.shape), tuple(mask.shape), op="masked_select")
    return x.expand(shape)[mask.expand(shape)]


def nonzero(x: Tensor, as_tuple: bool = False) -> Any:
    """The indices of the nonzero elements (read now: their count is the result's size), int64 (count, ndim)."""
    from anneal.tensor import Tensor

    if x.ndim == 0:  # torch: a 0-d tensor is one element with no dims to index
        count = int(x.numpy() != 0)
        if as_tuple:
            return (Tensor(np.zeros(count, np.int64), device=x.device),)
        return Tensor(np.zeros((count, 0), np.int64), device=x.device)
    where_ = np.nonzero(x.numpy())
    if as_tuple:
        return tuple(Tensor(np.asarray(w, np.int64), device=x.device) for w in where_)
    return Tensor(np.stack(where_, -1).astype(np.int64).reshape(-1, x.ndim), device=x.device)

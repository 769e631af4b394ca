"""torch's order and scan ops, as masked reductions over an (n, n) comparison of a dim with itself (as cumsum):
sort, argsort, topk, cummax, cummin, cumprod and logcumsumexp. No data-dependent control flow, so each is one
graph that fuses, differentiates through its `where`s (values flow from the elements they came from) and runs
the same on every backend; the cost is n^2 per row, fine for the dims models sort or scan (up to a few thousand).

NaN orders as torch's: the largest value for sort and topk, and the running extreme of cummax and cummin.
Ties keep their original order (every sort here is stable; torch's stable=False may order ties differently).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from anneal_ir import dtypes

if TYPE_CHECKING:
    from anneal.tensor import Tensor, ValuesIndices


def _dim(x: Tensor, dim: int, op: str) -> int:
    n = max(x.ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"{op}: dimension {dim} is out of range for a tensor of {x.ndim} dims")
    return dim % n


def _last(x: Tensor, d: int) -> Tensor:
    """x with dim d moved last, as (..., n); a 0-d x as (1,)."""
    return x.reshape(1) if x.ndim == 0 else x.transpose(d, -1)


def _back(y: Tensor, x: Tensor, d: int) -> Tensor:
    return y.reshape(()) if x.ndim == 0 else y.transpose(d, -1)


def _comparable(x: Tensor) -> Tensor:
    return x.cast(dtypes.int8) if x.dtype == dtypes.bool else x


def _isnan(x: Tensor) -> Tensor:
    return x.isnan() if x.dtype.is_float else (x != x)


def sort(x: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> ValuesIndices:
    """(values, indices) along dim, ascending unless descending; the rank of each element is how many come
    before it, and each output slot gathers the element of its rank."""
    from anneal.tensor import Tensor, ValuesIndices, where

    d = _dim(x, dim, "sort")
    v = _last(x, d)
    n = v.shape[-1]
    key = _comparable(v)
    a, b = key.unsqueeze(-1), key.unsqueeze(-2)  # [.., i, j]: element i against element j
    a_nan, b_nan = _isnan(a), _isnan(b)
    if descending:
        j_first = (b > a) | (b_nan & a_nan.logical_not())
    else:
        j_first = (b < a) | (a_nan & b_nan.logical_not())
    same = (a == b) | (a_nan & b_nan)
    position = Tensor.arange(n, device=x.device)
    j_earlier = position.reshape(1, n) < position.reshape(n, 1)  # [i, j]: j < i, so equal j stays first
    rank = (j_first | (same & j_earlier)).cast(dtypes.int64).sum(-1)  # (.., n): where element i goes
    slot = rank.unsqueeze(-1) == position  # [.., i, r]: element i lands in slot r
    values = where(slot, v.unsqueeze(-1), 0).sum(-2, dtype=v.dtype)
    indices = where(slot, position.reshape(n, 1), 0).sum(-2, dtype=dtypes.int64)
    return ValuesIndices(_back(values, x, d), _back(indices, x, d))


def argsort(x: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> Tensor:
    return sort(x, dim, descending, stable).indices


def topk(x: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> ValuesIndices:  # noqa: A002
    """The k largest (or smallest) along dim, in order."""
    from anneal.tensor import ValuesIndices

    d = _dim(x, dim, "topk")
    n = 1 if x.ndim == 0 else x.shape[d]
    if not 0 <= k <= n:
        raise RuntimeError(f"topk: k ({k}) is out of range for dim {dim} of size {n}")
    values, indices = sort(x, d, descending=largest)
    if x.ndim == 0:
        return ValuesIndices(values, indices)
    keep = [(0, s) if i != d else (0, k) for i, s in enumerate(x.shape)]
    return ValuesIndices(values._shrink(keep), indices._shrink(keep))


def _empty_dim(x: Tensor, d: int) -> bool:
    """A scan along a size-0 dim: its result is as empty as its input (torch's), with nothing to compute."""
    return x.ndim > 0 and x.shape[d] == 0


def _running(x: Tensor, dim: int, op: str) -> ValuesIndices:
    """cummax / cummin: the extreme of elements 0..i and the last index holding it (NaN, once seen, wins)."""
    from anneal.tensor import Tensor, ValuesIndices, where

    d = _dim(x, dim, op)
    if _empty_dim(x, d):
        return ValuesIndices(x * 1, Tensor.zeros(*x.shape, dtype=dtypes.int64, device=x.device))
    v = _last(x, d)
    n = v.shape[-1]
    key = _comparable(v)
    position = Tensor.arange(n, device=x.device)
    upto = position.reshape(1, n) <= position.reshape(n, 1)  # [i, j]: j <= i
    # j > i stands in as element 0, which every prefix holds: no dtype extreme (a backend without int64
    # stores int64 narrower, where -2**63 would wrap)
    seen = where(upto, key.unsqueeze(-2), key[..., 0:1].unsqueeze(-2))  # [.., i, j]
    extreme = seen.amax(-1) if op == "cummax" else seen.amin(-1)
    if key.dtype.is_float:  # NaN is the running extreme from its first appearance on
        nan_seen = (upto & _isnan(key).unsqueeze(-2)).any(-1)
        extreme = where(nan_seen, math.nan, extreme)
    holds = upto & ((key.unsqueeze(-2) == extreme.unsqueeze(-1)) | (_isnan(key).unsqueeze(-2)
                                                                  & _isnan(extreme).unsqueeze(-1)))  # fmt: skip
    index = (holds.cast(dtypes.int64) * (position + 1)).amax(-1) - 1  # the last j holding it
    values = v.gather(-1, index)  # gathered from the element, so the gradient reaches it
    return ValuesIndices(_back(values, x, d), _back(index, x, d))


def cummax(x: Tensor, dim: int) -> ValuesIndices:
    return _running(x, dim, "cummax")


def cummin(x: Tensor, dim: int) -> ValuesIndices:
    return _running(x, dim, "cummin")


def cumprod(x: Tensor, dim: int, dtype: object = None) -> Tensor:
    """out[i] = x[0] * ... * x[i]: a product over the masked (n, n) rows (absent factors are 1)."""
    from anneal.tensor import Tensor, where

    d = _dim(x, dim, "cumprod")
    v = _last(x, d if x.ndim else 0)
    if dtype is not None:
        v = v.cast(dtypes.from_any(dtype))
    elif not v.dtype.is_float:
        v = v.cast(dtypes.int64)  # torch: integers accumulate in int64
    if _empty_dim(x, d):
        return _back(v, x, d)
    n = v.shape[-1]
    position = Tensor.arange(n, device=x.device)
    upto = position.reshape(1, n) <= position.reshape(n, 1)
    return _back(where(upto, v.unsqueeze(-2), 1).prod(-1), x, d)


def logcumsumexp(x: Tensor, dim: int) -> Tensor:
    """out[i] = log(exp(x[0]) + ... + exp(x[i])), stably: a logsumexp over the masked rows."""
    from anneal.errors import DTypeError
    from anneal.tensor import Tensor, where

    d = _dim(x, dim, "logcumsumexp")
    if not x.dtype.is_float:
        raise DTypeError(f"logcumsumexp is only implemented for floating point tensors, got {x.dtype.name}")
    v = _last(x, d)
    if _empty_dim(x, d):
        return _back(v, x, d)
    n = v.shape[-1]
    position = Tensor.arange(n, device=x.device)
    upto = position.reshape(1, n) <= position.reshape(n, 1)
    return _back(where(upto, v.unsqueeze(-2), -math.inf).logsumexp(-1), x, d)

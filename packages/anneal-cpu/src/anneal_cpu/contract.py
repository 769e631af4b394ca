"""Contractions: einsum(f"{sa},{sb}->{so}", a, b) as batched matrix products.

Two ways, chosen by the backend for all its kernels (so a product another kernel recomputes is the same
bits): `numpy_contract` reshapes both operands to stacks of matrices for np.matmul (copying what does
not reshape as a view); `gemm_plan` describes each operand in place as strided matrices at per-matrix
offsets, which runtime.Runtime hands to cblas_sgemm with no copy unless a matrix has no unit stride.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class EinsumAxes:
    a_sum: tuple[int, ...]  # axes of a that only a has (summed before the product)
    b_sum: tuple[int, ...]
    sa: str  # the axes of a and b left after those sums
    sb: str
    batch: tuple[str, ...]  # in both operands and the output
    m: tuple[str, ...]  # a and the output
    n: tuple[str, ...]  # b and the output
    k: tuple[str, ...]  # both operands, summed


@functools.lru_cache(maxsize=4096)
def einsum_axes(sa: str, sb: str, so: str) -> EinsumAxes:
    a_sum = tuple(i for i, c in enumerate(sa) if c not in sb and c not in so)
    b_sum = tuple(i for i, c in enumerate(sb) if c not in sa and c not in so)
    sa, sb = "".join(c for c in sa if c in sb or c in so), "".join(c for c in sb if c in sa or c in so)
    return EinsumAxes(a_sum, b_sum, sa, sb, tuple(c for c in so if c in sa and c in sb),
                      tuple(c for c in so if c in sa and c not in sb), tuple(c for c in so if c in sb and c not in sa),
                      tuple(c for c in sa if c in sb and c not in so))  # fmt: skip


def summed(a: np.ndarray, b: np.ndarray, axes: EinsumAxes) -> tuple[np.ndarray, np.ndarray]:
    return (a.sum(axis=axes.a_sum) if axes.a_sum else a), (b.sum(axis=axes.b_sum) if axes.b_sum else b)


def product_layout(axes: EinsumAxes, size: dict[str, int], so: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The product comes out contiguous in (batch, m, n) order: its shape, and the permutation to so."""
    order = axes.batch + axes.m + axes.n
    return tuple(size[c] for c in order), tuple(order.index(c) for c in so)


# ---- numpy's matmul ----
def numpy_matmul(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """left (batch, m, k) @ right (batch, k, n) by np.matmul, which reaches BLAS for a strided 2-D pair
    but only for contiguous stacks."""
    if left.shape[0] == 1:
        return np.matmul(left[0], right[0])[None]
    return np.matmul(np.ascontiguousarray(left), np.ascontiguousarray(right))


def numpy_contract(a: np.ndarray, sa: str, b: np.ndarray, sb: str, so: str) -> np.ndarray:
    axes = einsum_axes(sa, sb, so)
    a, b = summed(a, b, axes)
    size = dict(zip(axes.sa, a.shape)) | dict(zip(axes.sb, b.shape))
    nb, nm, nn, nk = (math.prod(size[c] for c in group) for group in (axes.batch, axes.m, axes.n, axes.k))
    left = a.transpose([axes.sa.index(c) for c in axes.batch + axes.m + axes.k]).reshape(nb, nm, nk)
    right = b.transpose([axes.sb.index(c) for c in axes.batch + axes.k + axes.n]).reshape(nb, nk, nn)
    shape, order = product_layout(axes, size, so)
    return numpy_matmul(left, right).reshape(shape).transpose(order)


# ---- BLAS in place ----
@dataclass(frozen=True)
class GemmPlan:
    """c[i] = op(a at offsets[i, 0]) @ op(b at offsets[i, 1]) into c at offsets[i, 2], each matrix
    m x k, k x n, m x n (row stride ldc); op transposes when ta/tb (the matrix is stored k x m)."""

    a_copy: tuple[int, ...] | None  # copy a contiguous in this axis order first (no unit stride)
    b_copy: tuple[int, ...] | None
    offsets: np.ndarray  # (matrices, 3) int64, in elements
    m: int
    n: int
    k: int
    ta: int
    lda: int
    tb: int
    ldb: int
    ldc: int
    out_shape: tuple[int, ...]
    out_order: tuple[int, ...]


def merged(axes: tuple[str, ...], size: dict[str, int], stride: dict[str, int]) -> tuple[int, int] | None:
    """(extent, stride) of axes (outer to inner) read as one axis, or None when they are not evenly spaced."""
    axes = tuple(c for c in axes if size[c] != 1)
    if not axes:
        return 1, 0
    extent, step = size[axes[-1]], stride[axes[-1]]
    for c in reversed(axes[:-1]):
        if stride[c] != step * extent:
            return None
        extent *= size[c]
    return extent, step


def matrix(rows: tuple[str, ...], cols: tuple[str, ...], split: str, size: dict[str, int],
           stride: dict[str, int]) -> tuple[tuple[str, ...], int, int, int, int] | None:  # fmt: skip
    """One operand as strided matrices: (axes moved to the batch, rows, cols, transposed, leading
    dimension), or None when BLAS cannot read it in place. The `split` side ("rows" or "cols") may leave
    its outer axes to the batch when they do not merge; the other side must merge whole."""
    outer: tuple[str, ...] = ()
    if split == "rows":
        cut = next(i for i in range(len(rows) + 1) if merged(rows[i:], size, stride) is not None)
        outer, rows = rows[:cut], rows[cut:]
    else:
        cut = next(i for i in range(len(cols) + 1) if merged(cols[i:], size, stride) is not None)
        outer, cols = cols[:cut], cols[cut:]
    r, c = merged(rows, size, stride), merged(cols, size, stride)
    if r is None or c is None or min(r[1], c[1]) < 0:
        return None
    (nr, sr), (nc, sc) = r, c
    if (nc == 1 or sc == 1) and (nr == 1 or sr >= nc):
        return outer, nr, nc, 0, max(sr if nr > 1 else nc, 1)
    if (nr == 1 or sr == 1) and (nc == 1 or sc >= nr):
        return outer, nr, nc, 1, max(sc if nc > 1 else nr, 1)
    return None


@functools.lru_cache(maxsize=4096)
def gemm_plan(sa: str, sb: str, so: str, a_shape: tuple[int, ...], a_strides: tuple[int, ...],
              b_shape: tuple[int, ...], b_strides: tuple[int, ...]) -> GemmPlan:  # fmt: skip
    """The plan for operands already summed over their lone axes (strides in elements)."""
    axes = einsum_axes(sa, sb, so)
    size = dict(zip(sa, a_shape)) | dict(zip(sb, b_shape))
    sta, stb = dict(zip(sa, a_strides)), dict(zip(sb, b_strides))
    a_copy = b_copy = None
    left = matrix(axes.m, axes.k, "rows", size, sta)
    if left is None:  # copied contiguous in (batch, m, k) order: then it reads as plain matrices
        order = axes.batch + axes.m + axes.k
        a_copy, sta = tuple(sa.index(c) for c in order), contiguous(order, size)
        left = matrix(axes.m, axes.k, "rows", size, sta)
    right = matrix(axes.k, axes.n, "cols", size, stb)
    if right is None:
        order = axes.batch + axes.k + axes.n
        b_copy, stb = tuple(sb.index(c) for c in order), contiguous(order, size)
        right = matrix(axes.k, axes.n, "cols", size, stb)
    assert left is not None and right is not None
    m_outer, m, k, ta, lda = left
    n_outer, _, n, tb, ldb = right
    shape, out_order = product_layout(axes, size, so)
    stc = contiguous(axes.batch + axes.m + axes.n, size)
    offsets = np.zeros((1, 3), np.int64)
    for c in axes.batch + m_outer + n_outer:  # every matrix: the sum of its batch indices times strides
        index = np.arange(size[c], dtype=np.int64)[None, :, None]
        step = np.array([sta.get(c, 0), stb.get(c, 0), stc[c]], np.int64)[None, None, :]
        offsets = (offsets[:, None, :] + index * step).reshape(-1, 3)
    ldc = max(math.prod(size[x] for x in axes.n), 1)
    return GemmPlan(a_copy, b_copy, offsets, m, n, k, ta, lda, tb, ldb, ldc, shape, out_order)


def contiguous(order: tuple[str, ...], size: dict[str, int]) -> dict[str, int]:
    """Element strides of a C-contiguous array with these axes."""
    out, step = {}, 1
    for c in reversed(order):
        out[c], step = step, step * size[c]
    return out

"""Augmentation of image batches as torchvision users know it, on the host, seeded, batched.

Each transform takes a float32 batch (N, C, H, W) and a numpy Generator and returns a new batch;
`Compose` chains them. Every image draws its own crop offset, flip and shift, so one generator
seeded per step reproduces the batch exactly (a resumed run sees the same pixels).

`Prefetch` computes batch i+1, i+2, ... on a background thread while the device runs step i:
batches depend on their index only, so what the thread computes is what the loop would have.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

Transform = Callable[[np.ndarray, np.random.Generator], np.ndarray]


def _crop_at(x: np.ndarray, top: np.ndarray, left: np.ndarray, h: int, w: int) -> np.ndarray:
    """x[i, :, top[i]:top[i]+h, left[i]:left[i]+w] for every i, as one gather."""
    rows = top[:, None] + np.arange(h)  # (N, h)
    cols = left[:, None] + np.arange(w)  # (N, w)
    n = np.arange(len(x))[:, None, None, None]
    c = np.arange(x.shape[1])[None, :, None, None]
    return x[n, c, rows[:, None, :, None], cols[:, None, None, :]]


class RandomCrop:
    """torchvision.transforms.RandomCrop(size, padding, padding_mode): pad, then a random size x size window."""

    def __init__(self, size: int, padding: int = 0, padding_mode: str = "reflect") -> None:
        if padding_mode not in ("constant", "reflect", "edge"):
            raise ValueError(f"RandomCrop: padding_mode {padding_mode!r}; expected constant, reflect or edge")
        self.size, self.padding, self.padding_mode = size, padding, padding_mode

    def __call__(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        p = self.padding
        if p:
            x = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)), mode=self.padding_mode)  # type: ignore[call-overload]
        h, w = x.shape[2:]
        if h < self.size or w < self.size:
            raise ValueError(f"RandomCrop: crop {self.size} is larger than the padded image {h}x{w}")
        top = rng.integers(0, h - self.size + 1, len(x))
        left = rng.integers(0, w - self.size + 1, len(x))
        return _crop_at(x, top, left, self.size, self.size)

    def __repr__(self) -> str:
        return f"RandomCrop({self.size}, padding={self.padding}, padding_mode={self.padding_mode!r})"


class RandomHorizontalFlip:
    def __init__(self, p: float = 0.5) -> None:
        self.p = p

    def __call__(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        flip = rng.random(len(x)) < self.p
        out = x.copy()
        out[flip] = x[flip, :, :, ::-1]
        return out

    def __repr__(self) -> str:
        return f"RandomHorizontalFlip(p={self.p})"


class RandomTranslate:
    """A random shift of up to `pixels` in each direction, zeros shifted in (RandomAffine's translate)."""

    def __init__(self, pixels: int) -> None:
        self.pixels = pixels

    def __call__(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        p = self.pixels
        padded = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
        h, w = x.shape[2:]
        return _crop_at(padded, rng.integers(0, 2 * p + 1, len(x)), rng.integers(0, 2 * p + 1, len(x)), h, w)

    def __repr__(self) -> str:
        return f"RandomTranslate({self.pixels})"


class Normalize:
    """(x - mean) / std per channel, as torchvision.transforms.Normalize."""

    def __init__(self, mean: Sequence[float] | np.ndarray, std: Sequence[float] | np.ndarray) -> None:
        self.mean = np.asarray(mean, np.float32).reshape(1, -1, 1, 1)
        self.std = np.asarray(std, np.float32).reshape(1, -1, 1, 1)
        if np.any(self.std <= 0):
            raise ValueError(f"Normalize: std must be positive, got {np.asarray(std).tolist()}")

    def __call__(self, x: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
        return ((x - self.mean) / self.std).astype(np.float32)

    def __repr__(self) -> str:
        return (
            f"Normalize(mean={self.mean.reshape(-1).round(3).tolist()}, std={self.std.reshape(-1).round(3).tolist()})"
        )


class Compose:
    def __init__(self, transforms: Sequence[Transform]) -> None:
        self.transforms = list(transforms)

    def __call__(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        for t in self.transforms:
            x = t(x, rng)
        return np.ascontiguousarray(x, dtype=np.float32)

    def __repr__(self) -> str:
        return "Compose(" + ", ".join(map(repr, self.transforms)) + ")"


class Prefetch:
    """batch(i) with batches i+1 .. i+ahead computed on one background thread meanwhile."""

    def __init__(self, batch: Callable[[int], Any], ahead: int = 2) -> None:
        self.batch, self.ahead = batch, ahead
        self._pool: ThreadPoolExecutor | None = None
        self._pending: dict[int, Future[Any]] = {}

    def __call__(self, i: int) -> Any:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="anneal-batches")
        for j in range(i, i + self.ahead + 1):
            if j not in self._pending:
                self._pending[j] = self._pool.submit(self.batch, j)
        for j in [j for j in self._pending if j < i]:  # a jump (resume, eval) leaves stale work behind
            self._pending.pop(j).cancel()
        return self._pending.pop(i).result()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
            self._pending.clear()

"""Char-level tinyshakespeare: the vocabulary is the text's own characters, as nanoGPT's shakespeare_char.

The first 90% of the text trains and the last 10% validates (nanoGPT's split). A batch is `batch`
random contiguous windows of `block + 1` characters: x is the first `block`, y the same shifted by one.
Everything random takes a numpy Generator, so a seed reproduces every batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

TRAIN_FRACTION = 0.9


def tinyshakespeare_path() -> Path:
    """The pinned, verified copy in anneal's cache (downloaded on first use) through anneal.data."""
    try:
        from anneal.data import fetch  # type: ignore[import-not-found,unused-ignore]
    except ImportError as exc:  # anneal without its data layer: say what to do instead
        raise RuntimeError(
            "tinyshakespeare: this anneal has no anneal.data to download the dataset; "
            "pass the path of input.txt explicitly (tinyshakespeare(path=...))"
        ) from exc
    return Path(fetch("tinyshakespeare"))


@dataclass
class CharDataset:
    """A text as character ids, with its vocabulary and its train/val split."""

    text: str
    train_fraction: float = TRAIN_FRACTION
    chars: list[str] = field(init=False)
    stoi: dict[str, int] = field(init=False)
    data: np.ndarray = field(init=False, repr=False)
    train: np.ndarray = field(init=False, repr=False)
    val: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.text:
            raise ValueError("CharDataset: the text is empty")
        self.chars = sorted(set(self.text))
        self.stoi = {c: i for i, c in enumerate(self.chars)}
        self.data = self.encode(self.text)
        n = int(len(self.data) * self.train_fraction)
        self.train, self.val = self.data[:n], self.data[n:]

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, s: str) -> np.ndarray:
        try:
            return np.fromiter((self.stoi[c] for c in s), dtype=np.int64, count=len(s))
        except KeyError as exc:
            raise ValueError(f"CharDataset: character {exc.args[0]!r} is not in the vocabulary") from None

    def decode(self, ids: np.ndarray | list[int]) -> str:
        return "".join(self.chars[int(i)] for i in ids)

    def split(self, name: str) -> np.ndarray:
        if name not in ("train", "val"):
            raise ValueError(f"CharDataset: split must be 'train' or 'val', got {name!r}")
        return self.train if name == "train" else self.val

    def batch(self, split: str, batch: int, block: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """`batch` random windows: x (batch, block) int64, y = x shifted by one character."""
        data = self.split(split)
        if len(data) <= block:
            raise ValueError(f"CharDataset: the {split} split has {len(data)} characters, too few for block {block}")
        starts = rng.integers(0, len(data) - block, batch)
        windows = data[starts[:, None] + np.arange(block + 1)]
        return windows[:, :-1], windows[:, 1:]

    def fixed_batches(
        self, split: str, n: int, batch: int, block: int, seed: int
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """n batches that depend only on the seed (the val loss is then comparable across steps)."""
        rng = np.random.default_rng(seed)
        return [self.batch(split, batch, block, rng) for _ in range(n)]

    def unigram(self, split: str = "train") -> np.ndarray:
        """Each character's frequency in a split (a distribution over the vocabulary)."""
        counts = np.bincount(self.split(split), minlength=self.vocab_size).astype(np.float64)
        return counts / counts.sum()


_CACHE: dict[Path, CharDataset] = {}


def tinyshakespeare(path: str | Path | None = None) -> CharDataset:
    """The char-level tinyshakespeare dataset; path=None fetches the pinned asset through anneal.data."""
    p = Path(path) if path is not None else tinyshakespeare_path()
    p = p.resolve()
    if p not in _CACHE:
        _CACHE[p] = CharDataset(p.read_text(encoding="utf-8"))
    return _CACHE[p]

"""Image classification sets: digits and CIFAR-10 (pinned downloads, through anneal.data) and synthetic10.

Every set is an `ImageSet`: train and test images as float32 (N, C, H, W) in their raw value range
(digits 0..16, CIFAR 0..255, synthetic10 0..1), int64 labels, class names, and the per-channel mean
and std of the training images (what `augment.Normalize` takes). Splits are fixed: a model compared
across runs is always tested on the same images.

- digits: UCI optdigits' test set as scikit-learn bundles it (1,797 8x8 images, 10 classes), split
  1,500 train / 297 test, stratified by class with a fixed seed.
- cifar10: the binary archive's data_batch_1..5 (50,000 train) and test_batch (10,000 test); each record
  is one label byte and 3,072 pixel bytes (R, G, B planes of 32x32). The archive is extracted once into
  the cache, through a temporary folder renamed into place, so a crash never leaves half a dataset.
- synthetic8: the generative models' small set, 8x8 grey shapes (two bars, a box, a plus), generated.
- synthetic10: 10 classes of 32x32 RGB images generated from a seed (no download): an oriented grating
  per class (18 degrees apart), with random frequency, phase, colour and noise; 5,000 train / 1,000 test.
"""

from __future__ import annotations

import functools
import gzip
import shutil
import tarfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DIGITS_TEST = 297  # of 1,797: the 1,500 / 297 split
SPLIT_SEED = 0  # the split is part of the dataset's definition, not of a run's seed
CIFAR_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
CIFAR_RECORD = 1 + 3 * 32 * 32
CIFAR_FOLDER = "cifar-10-batches-bin"
CIFAR_TRAIN = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
CIFAR_TEST = "test_batch.bin"


class ImageDataError(RuntimeError):
    """A dataset file that is missing, truncated or not what it claims to be; the message names the fix."""


@dataclass(frozen=True)
class ImageSet:
    name: str
    x_train: np.ndarray  # float32 (N, C, H, W), raw value range
    y_train: np.ndarray  # int64 (N,)
    x_test: np.ndarray
    y_test: np.ndarray
    classes: tuple[str, ...]
    flips: bool  # whether a horizontal flip keeps the class (a mirrored digit is not the same digit)

    @property
    def shape(self) -> tuple[int, int, int]:
        """(channels, height, width) of one image."""
        c, h, w = self.x_train.shape[1:]
        return int(c), int(h), int(w)

    @property
    def mean(self) -> np.ndarray:
        return self.x_train.mean(axis=(0, 2, 3)).astype(np.float32)

    @property
    def std(self) -> np.ndarray:
        return self.x_train.std(axis=(0, 2, 3)).astype(np.float32)

    def describe(self) -> str:
        c, h, w = self.shape
        return (f"{self.name}: {len(self.x_train):,} train / {len(self.x_test):,} test images, {c}x{h}x{w}, "
                f"{len(self.classes)} classes")  # fmt: skip


# ---------------------------------------------------------------------------- splits


def stratified_split(labels: np.ndarray, n_test: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices (train, test) with n_test test items, each class's share as in the whole set (largest
    remainders decide the rounding); which items of a class go to test is a seeded permutation."""
    classes, counts = np.unique(labels, return_counts=True)
    exact = counts * n_test / len(labels)
    take = np.floor(exact).astype(int)
    for i in np.argsort(-(exact - take), kind="stable")[: n_test - int(take.sum())]:
        take[i] += 1
    rng = np.random.default_rng(seed)
    test = np.concatenate([rng.permutation(np.flatnonzero(labels == c))[:k] for c, k in zip(classes, take)])
    mask = np.zeros(len(labels), bool)
    mask[test] = True
    return np.flatnonzero(~mask), np.flatnonzero(mask)


# ---------------------------------------------------------------------------- digits


def read_digits(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The csv.gz of scikit-learn: 64 pixel values (0..16) and the label on each row."""
    try:
        with gzip.open(path, "rt") as f:
            table = np.loadtxt(f, delimiter=",", dtype=np.float32)
    except (OSError, EOFError, ValueError, zlib.error) as exc:
        raise ImageDataError(f"digits: {path} is not the digits csv.gz ({exc}); delete it and download it again "
                             f"(anneal cache clear digits; anneal download digits)") from None  # fmt: skip
    if table.ndim != 2 or table.shape[1] != 65:
        raise ImageDataError(f"digits: {path} has rows of {table.shape[-1]} values, expected 65 (64 pixels + label)")
    return table[:, :64].reshape(-1, 1, 8, 8), table[:, 64].astype(np.int64)


def digits(path: str | Path | None = None) -> ImageSet:
    from anneal.data import fetch

    x, y = read_digits(Path(path) if path is not None else fetch("digits"))
    train, test = stratified_split(y, DIGITS_TEST, SPLIT_SEED)
    return ImageSet("digits", x[train], y[train], x[test], y[test], tuple(str(i) for i in range(10)), flips=False)


# ---------------------------------------------------------------------------- cifar10


def read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One binary batch file: records of a label byte and 3,072 pixel bytes."""
    raw = np.fromfile(path, dtype=np.uint8)
    if raw.size == 0 or raw.size % CIFAR_RECORD:
        raise ImageDataError(
            f"cifar10: {path} holds {raw.size} bytes, not a whole number of {CIFAR_RECORD}-byte "
            "records; clear the cache (anneal cache clear cifar10) and download it again"
        )
    records = raw.reshape(-1, CIFAR_RECORD)
    labels = records[:, 0].astype(np.int64)
    if labels.max() >= len(CIFAR_CLASSES):
        raise ImageDataError(f"cifar10: {path} has label {labels.max()}; CIFAR-10 labels are 0..9")
    return records[:, 1:].reshape(-1, 3, 32, 32).astype(np.float32), labels


def _extracted(folder: Path) -> bool:
    return all((folder / f).is_file() for f in (*CIFAR_TRAIN, CIFAR_TEST))


def extract_cifar(archive: Path) -> Path:
    """The folder of .bin files next to the archive, extracted once (through a temporary folder)."""
    folder = archive.parent / CIFAR_FOLDER
    if _extracted(folder):
        return folder
    from anneal.data.cache import file_lock, lock_path
    from anneal.files import atomic_folder

    with file_lock(lock_path(folder)):
        if _extracted(folder):
            return folder  # another process extracted it meanwhile
        # extracted into a temporary folder that becomes `folder` only when complete (anneal.files)
        with atomic_folder(folder) as tmp:
            try:
                wanted = {f"{CIFAR_FOLDER}/{f}" for f in (*CIFAR_TRAIN, CIFAR_TEST, "batches.meta.txt")}
                with tarfile.open(archive, "r:gz") as tar:
                    members = [m for m in tar.getmembers() if m.name in wanted and m.isfile()]
                    missing = sorted(wanted - {m.name for m in members} - {f"{CIFAR_FOLDER}/batches.meta.txt"})
                    if missing:
                        raise ImageDataError(f"cifar10: the archive {archive} lacks {', '.join(missing)}; it is not "
                                             f"the CIFAR-10 binary archive (anneal cache clear cifar10)")  # fmt: skip
                    for m in members:
                        source = tar.extractfile(m)
                        assert source is not None
                        with source, open(tmp / Path(m.name).name, "wb") as out:
                            shutil.copyfileobj(source, out)
            except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
                raise ImageDataError(
                    f"cifar10: the archive {archive} is truncated or corrupt ({exc}); clear it and "
                    f"download it again (anneal cache clear cifar10; anneal download cifar10)"
                ) from None
    return folder


def cifar10(archive: str | Path | None = None) -> ImageSet:
    from anneal.data import fetch

    folder = extract_cifar(Path(archive) if archive is not None else fetch("cifar10"))
    parts = [read_cifar_batch(folder / f) for f in CIFAR_TRAIN]
    x_test, y_test = read_cifar_batch(folder / CIFAR_TEST)
    x_train, y_train = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    return ImageSet("cifar10", x_train, y_train, x_test, y_test, CIFAR_CLASSES, flips=True)


# ---------------------------------------------------------------------------- synthetic10


def synthetic_images(n: int, rng: np.random.Generator, size: int = 32, noise: float = 0.25
                     ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """n images: class k is a grating at angle 18k degrees with random frequency, phase, colour and noise."""
    labels = rng.integers(0, 10, n)
    angle = labels * (np.pi / 10) + rng.normal(0, 0.03, n)
    freq = rng.uniform(0.35, 0.7, n)  # radians per pixel
    phase = rng.uniform(0, 2 * np.pi, n)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) - (size - 1) / 2
    proj = np.cos(angle)[:, None, None] * xx + np.sin(angle)[:, None, None] * yy
    wave = 0.5 + 0.5 * np.sin(freq[:, None, None] * proj + phase[:, None, None])  # (n, H, W) in 0..1
    colour = rng.uniform(0.3, 1.0, (n, 3))
    images = colour[:, :, None, None] * wave[:, None] + rng.normal(0, noise, (n, 3, size, size))
    return np.clip(images, 0, 1).astype(np.float32), labels.astype(np.int64)


def synthetic10(train: int = 5_000, test: int = 1_000, seed: int = 0) -> ImageSet:
    x_train, y_train = synthetic_images(train, np.random.default_rng([seed, 0]))
    x_test, y_test = synthetic_images(test, np.random.default_rng([seed, 1]))
    names = tuple(f"{18 * k}deg" for k in range(10))
    return ImageSet("synthetic10", x_train, y_train, x_test, y_test, names, flips=False)


# ---------------------------------------------------------------------------- synthetic8

SHAPES8 = ("hbar", "vbar", "box", "plus")


def shape_images(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """n grey 8x8 images of one shape each at a random place and brightness: a 4-pixel horizontal or vertical
    bar, a 4x4 box outline, a 3x3 plus; faint noise."""
    labels = rng.integers(0, len(SHAPES8), n)
    x = rng.normal(0, 0.03, (n, 1, 8, 8))
    for i, k in enumerate(labels):
        r, c = rng.integers(0, 5, 2)
        v = rng.uniform(0.6, 1.0)
        if k == 0:
            x[i, 0, r + 1, c : c + 4] += v
        elif k == 1:
            x[i, 0, r : r + 4, c + 1] += v
        elif k == 2:
            x[i, 0, r : r + 4, c : c + 4] += v
            x[i, 0, r + 1 : r + 3, c + 1 : c + 3] -= v
        else:
            x[i, 0, r + 1, c : c + 3] += v
            x[i, 0, r : r + 3, c + 1] += v
            x[i, 0, r + 1, c + 1] -= v  # the centre once, not twice
    return np.clip(x, 0, 1).astype(np.float32), labels.astype(np.int64)


def synthetic8(train: int = 2_000, test: int = 500, seed: int = 0) -> ImageSet:
    x_train, y_train = shape_images(train, np.random.default_rng([seed, 8, 0]))
    x_test, y_test = shape_images(test, np.random.default_rng([seed, 8, 1]))
    return ImageSet("synthetic8", x_train, y_train, x_test, y_test, SHAPES8, flips=True)


LOADERS: dict[str, Callable[[], ImageSet]] = {"digits": digits, "cifar10": cifar10, "synthetic10": synthetic10,
                                              "synthetic8": synthetic8}  # fmt: skip
SUMMARIES = {
    "digits": "UCI optdigits as scikit-learn bundles it: 1,797 8x8 grey digits, 1,500 train / 297 test",
    "cifar10": "CIFAR-10 (binary archive): 50,000 train / 10,000 test 32x32 RGB images, 10 classes",
    "synthetic10": "10 oriented-grating classes, 32x32 RGB, 5,000 train / 1,000 test, generated (no download)",
    "synthetic8": "4 shapes (bars, box, plus) at random places, 8x8 grey, 2,000 train / 500 test, generated",
}


@functools.lru_cache(maxsize=4)
def load(name: str) -> ImageSet:
    """The named set, read once per process (the arrays are shared: treat them as read-only)."""
    if name not in LOADERS:
        raise ImageDataError(f"unknown image dataset {name!r}; known: {', '.join(LOADERS)}")
    return LOADERS[name]()

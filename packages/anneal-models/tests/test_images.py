"""Image datasets (digits, cifar10, synthetic10) and augmentation.

digits is the real pinned file (from ../shared/data, fetched through a loopback server); CIFAR-10
cannot be downloaded on these machines, so its download, extraction and parsing run on generated
archives in the real format, served the same way: a good one, a truncated one and a corrupt one.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from anneal import data
from anneal.data.testing import LoopbackServer, allow_loopback_only, shared_data_dir
from anneal_models import augment, images

SHARED = shared_data_dir(__file__)


def cifar_archive(per_batch: int, seed: int = 0, drop: str | None = None) -> tuple[bytes, np.ndarray, np.ndarray]:
    """A tar.gz laid out as cifar-10-binary.tar.gz: (archive, all pixels as uint8 (N,3,32,32), labels);
    the five train batches come first, then the test batch. `drop` leaves one member out."""
    rng = np.random.default_rng(seed)
    names = [*images.CIFAR_TRAIN, images.CIFAR_TEST]
    pixels = rng.integers(0, 256, (len(names) * per_batch, 3, 32, 32), dtype=np.uint8)
    labels = rng.integers(0, 10, len(names) * per_batch).astype(np.uint8)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        members = {"batches.meta.txt": "\n".join(images.CIFAR_CLASSES).encode()}
        for i, name in enumerate(names):
            part = slice(i * per_batch, (i + 1) * per_batch)
            records = np.concatenate([labels[part, None], pixels[part].reshape(per_batch, -1)], axis=1)
            members[name] = records.tobytes()
        for name, content in members.items():
            if name == drop:
                continue
            info = tarfile.TarInfo(f"{images.CIFAR_FOLDER}/{name}")
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return buf.getvalue(), pixels, labels.astype(np.int64)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, LoopbackServer]]:
    allow_loopback_only(monkeypatch)
    with LoopbackServer(SHARED) as server:
        monkeypatch.setenv("ANNEAL_CACHE_DIR", str(tmp_path))
        monkeypatch.setenv("ANNEAL_MIRROR", server.url)
        monkeypatch.delenv("ANNEAL_OFFLINE", raising=False)
        images.load.cache_clear()
        yield tmp_path / "data", server
        images.load.cache_clear()


def serve_cifar(server: LoopbackServer, monkeypatch: pytest.MonkeyPatch, archive: bytes) -> None:
    """The archive stands in for the pinned one: same file name, its own size and sha256."""
    real = data.ASSETS["cifar10"]
    stand_in = data.Asset("cifar10", real.url, len(archive), hashlib.sha256(archive).hexdigest(), real.filename)
    monkeypatch.setitem(data.ASSETS, "cifar10", stand_in)
    server.files[real.filename] = archive


# ---- digits ----


def test_digits_is_the_real_set_split_1500_297_by_class(cache: tuple[Path, LoopbackServer]) -> None:
    ds = images.load("digits")
    assert (cache[0] / "digits" / "digits.csv.gz").is_file()  # fetched through the real download code
    assert ds.x_train.shape == (1500, 1, 8, 8) and ds.x_test.shape == (297, 1, 8, 8)
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int64
    assert ds.x_train.min() == 0 and ds.x_train.max() == 16
    with gzip.open(SHARED / "digits" / "digits.csv.gz", "rt") as f:
        table = np.loadtxt(f, delimiter=",")
    whole = np.bincount(table[:, -1].astype(int), minlength=10)
    test = np.bincount(ds.y_test, minlength=10)
    assert test.sum() == 297 and np.all(np.abs(test - whole * 297 / 1797) < 1)  # stratified
    # every image is used once, and the split is fixed (the same for every run)
    rows = {r.tobytes() for r in table[:, :64].astype(np.float32)}
    assert {x.reshape(-1).tobytes() for x in np.concatenate([ds.x_train, ds.x_test])} == rows
    images.load.cache_clear()
    np.testing.assert_array_equal(images.load("digits").y_test, ds.y_test)
    assert not ds.flips and ds.classes == tuple("0123456789")


def test_stratified_split_shares_each_class() -> None:
    labels = np.repeat(np.arange(3), [50, 30, 20])
    train, test = images.stratified_split(labels, 10, seed=1)
    assert sorted(np.bincount(labels[test]).tolist()) == [2, 3, 5]
    assert len(set(train) | set(test)) == 100 and not set(train) & set(test)
    np.testing.assert_array_equal(images.stratified_split(labels, 10, seed=1)[1], test)
    assert not np.array_equal(images.stratified_split(labels, 10, seed=2)[1], test)


def test_corrupt_digits_file_names_the_fix(tmp_path: Path) -> None:
    bad = tmp_path / "digits.csv.gz"
    bad.write_bytes(b"not gzip")
    with pytest.raises(images.ImageDataError, match="anneal cache clear digits"):
        images.digits(bad)
    bad.write_bytes(gzip.compress(b"1,2,3\n4,5,6\n"))
    with pytest.raises(images.ImageDataError, match="expected 65"):
        images.digits(bad)


# ---- cifar10 ----


def test_cifar10_downloads_extracts_once_and_parses(cache: tuple[Path, LoopbackServer],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    folder, server = cache
    archive, pixels, labels = cifar_archive(per_batch=4)
    serve_cifar(server, monkeypatch, archive)
    ds = images.load("cifar10")
    assert ds.x_train.shape == (20, 3, 32, 32) and ds.x_test.shape == (4, 3, 32, 32)
    np.testing.assert_array_equal(ds.x_train, pixels[:20].astype(np.float32))
    np.testing.assert_array_equal(ds.y_train, labels[:20])
    np.testing.assert_array_equal(ds.x_test, pixels[20:].astype(np.float32))
    np.testing.assert_array_equal(ds.y_test, labels[20:])
    assert ds.flips and ds.classes[0] == "airplane"
    extracted = folder / "cifar10" / images.CIFAR_FOLDER
    assert sorted(p.name for p in extracted.iterdir()) == sorted([*images.CIFAR_TRAIN, images.CIFAR_TEST,
                                                                  "batches.meta.txt"])  # fmt: skip
    assert not [p for p in (folder / "cifar10").iterdir() if p.name.startswith(".")]  # no temporary left behind
    stamp = (extracted / images.CIFAR_TEST).stat().st_mtime_ns
    images.load.cache_clear()
    images.load("cifar10")
    assert (extracted / images.CIFAR_TEST).stat().st_mtime_ns == stamp  # extracted once
    assert len(server.gets("/" + data.ASSETS["cifar10"].filename)) == 1


@pytest.mark.parametrize("damage", ["truncated", "corrupt", "missing member"])
def test_bad_cifar10_archive_fails_clearly_and_leaves_nothing(
    cache: tuple[Path, LoopbackServer], monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    folder, server = cache
    archive, _, _ = cifar_archive(per_batch=4, drop="test_batch.bin" if damage == "missing member" else None)
    if damage == "truncated":
        archive = archive[: len(archive) // 2]
    elif damage == "corrupt":
        archive = archive[:100] + bytes(b ^ 0x5A for b in archive[100:])
    serve_cifar(server, monkeypatch, archive)  # the download itself verifies: what is damaged is the archive
    with pytest.raises(images.ImageDataError, match="anneal cache clear cifar10"):
        images.load("cifar10")
    assert not (folder / "cifar10" / images.CIFAR_FOLDER).exists()
    assert not [p for p in (folder / "cifar10").iterdir() if p.name.startswith(".cifar")]


def test_cifar_batch_of_the_wrong_size_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "data_batch_1.bin"
    bad.write_bytes(bytes(images.CIFAR_RECORD + 5))
    with pytest.raises(images.ImageDataError, match="whole number"):
        images.read_cifar_batch(bad)
    bad.write_bytes(bytes([12]) + bytes(images.CIFAR_RECORD - 1))
    with pytest.raises(images.ImageDataError, match="label 12"):
        images.read_cifar_batch(bad)


def test_unknown_dataset_is_named() -> None:
    with pytest.raises(images.ImageDataError, match="unknown image dataset 'mnist'; known: digits"):
        images.load("mnist")


# ---- synthetic10 ----


def test_synthetic10_is_seeded_and_balanced() -> None:
    a = images.synthetic10(train=500, test=100, seed=3)
    b = images.synthetic10(train=500, test=100, seed=3)
    np.testing.assert_array_equal(a.x_train, b.x_train)
    assert a.x_train.shape == (500, 3, 32, 32) and 0 <= a.x_train.min() and a.x_train.max() <= 1
    assert np.bincount(a.y_train, minlength=10).min() > 25
    assert not np.array_equal(images.synthetic10(train=500, test=100, seed=4).x_train, a.x_train)
    # the class is the grating's orientation: the mean image of two classes differ in their spectra
    power = [np.abs(np.fft.fft2(a.x_train[a.y_train == k].mean(1))).mean(0) for k in (0, 5)]
    assert not np.allclose(power[0], power[1], rtol=0.1)


# ---- augmentation ----


def reference_crop(x: np.ndarray, size: int, pad: int, mode: str, tops: np.ndarray, lefts: np.ndarray) -> np.ndarray:
    """One image at a time, as torchvision's RandomCrop does it."""
    out = []
    for img, t, left in zip(x, tops, lefts):
        padded = np.pad(img, ((0, 0), (pad, pad), (pad, pad)), mode=mode)
        out.append(padded[:, t : t + size, left : left + size])
    return np.stack(out)


@pytest.mark.parametrize("mode", ["reflect", "constant", "edge"])
def test_random_crop_matches_a_per_image_crop(mode: str) -> None:
    x = np.random.default_rng(0).standard_normal((6, 2, 8, 8)).astype(np.float32)
    got = augment.RandomCrop(8, padding=2, padding_mode=mode)(x, np.random.default_rng(5))
    rng = np.random.default_rng(5)
    tops, lefts = rng.integers(0, 5, 6), rng.integers(0, 5, 6)
    np.testing.assert_array_equal(got, reference_crop(x, 8, 2, mode, tops, lefts))
    assert not np.array_equal(got, x)


def test_flip_translate_normalize() -> None:
    x = np.random.default_rng(1).standard_normal((64, 3, 5, 5)).astype(np.float32)
    flipped = augment.RandomHorizontalFlip()(x, np.random.default_rng(2))
    which = np.random.default_rng(2).random(64) < 0.5
    np.testing.assert_array_equal(flipped[which], x[which, :, :, ::-1])
    np.testing.assert_array_equal(flipped[~which], x[~which])
    moved = augment.RandomTranslate(1)(x, np.random.default_rng(3))
    rng = np.random.default_rng(3)
    tops, lefts = rng.integers(0, 3, 64), rng.integers(0, 3, 64)
    np.testing.assert_array_equal(moved, reference_crop(x, 5, 1, "constant", tops, lefts))
    mean, std = np.array([1.0, 2.0, 3.0]), np.array([0.5, 1.0, 2.0])
    np.testing.assert_allclose(augment.Normalize(mean, std)(x), (x - mean[:, None, None]) / std[:, None, None],
                               rtol=1e-6)  # fmt: skip
    with pytest.raises(ValueError, match="std must be positive"):
        augment.Normalize([0.0], [0.0])


def test_compose_is_reproducible_by_seed() -> None:
    x = np.random.default_rng(1).standard_normal((16, 3, 8, 8)).astype(np.float32)
    pipeline = augment.Compose([augment.RandomCrop(8, 2), augment.RandomHorizontalFlip()])
    a, b = pipeline(x, np.random.default_rng(7)), pipeline(x, np.random.default_rng(7))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, pipeline(x, np.random.default_rng(8)))
    assert a.dtype == np.float32 and a.flags.c_contiguous


def test_prefetch_gives_what_a_direct_call_gives_in_any_order() -> None:
    def batch(i: int) -> np.ndarray:
        return np.random.default_rng(i).standard_normal(4)

    prefetch = augment.Prefetch(batch, ahead=2)
    try:
        for i in [0, 1, 2, 7, 8, 3]:  # a jump forward and back (a resume, a peek)
            np.testing.assert_array_equal(prefetch(i), batch(i))
    finally:
        prefetch.close()

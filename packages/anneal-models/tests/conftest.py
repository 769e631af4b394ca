"""Fixtures the model tests share."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from anneal.data.testing import shared_data_dir
from anneal_models import images


@pytest.fixture(scope="module")
def offline_digits(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The pinned digits in a private cache, used offline (the real fetch verifies its sha256)."""
    cache = tmp_path_factory.mktemp("cache")
    (cache / "data" / "digits").mkdir(parents=True)
    shutil.copy(shared_data_dir(__file__) / "digits" / "digits.csv.gz", cache / "data" / "digits")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ANNEAL_CACHE_DIR", str(cache))
        mp.setenv("ANNEAL_OFFLINE", "1")
        images.load.cache_clear()
        yield
    images.load.cache_clear()

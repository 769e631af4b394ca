"""The host random generator for initializers, seeded like torch.manual_seed."""

from __future__ import annotations

import numpy as np

_state: dict[str, np.random.Generator] = {"rng": np.random.default_rng(0)}


def manual_seed(seed: int) -> None:
    """Reseed every anneal initializer (rand, randn, uniform, randint, nn init)."""
    _state["rng"] = np.random.default_rng(seed)


def generator() -> np.random.Generator:
    return _state["rng"]

"""Registers the built-in models, through the same hook a third party uses."""

from __future__ import annotations

from collections.abc import Callable

from anneal.registry import hookimpl


@hookimpl
def register_models(register: Callable[..., None]) -> None:
    # The zoo (mlp, conv, nanogpt, ...) registers here as each model lands; see PRODUCT.md.
    del register

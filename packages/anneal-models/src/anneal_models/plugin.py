"""Registers the built-in models, through the same hook a third party uses."""

from __future__ import annotations

from collections.abc import Callable

from anneal.registry import hookimpl


@hookimpl
def register_models(register: Callable[..., None]) -> None:
    from anneal_models import mlp

    register(
        "mlp",
        build=mlp.build,
        summary="small MLP regression on a synthetic 2-D function",
        defaults=mlp.DEFAULTS,
        presets=mlp.PRESETS,
    )

"""anneal-models registers through the `anneal` entry point, like any third-party plugin."""

from __future__ import annotations

from anneal_ir.plugins import load_plugins
from anneal_ir.settings import Settings


def test_entry_point_loads_and_implements_register_models() -> None:
    plugins = load_plugins(Settings(load_plugins=frozenset({"anneal-models"})), stream=None)
    assert plugins.failures == []
    (info,) = plugins.loaded
    assert (info.name, info.version, info.module) == ("anneal-models", "0.1.0", "anneal_models.plugin")
    assert "register_models" in info.hooks
    assert all(entry.plugin == "anneal-models" for entry in plugins.models.values())

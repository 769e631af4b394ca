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


def test_what_each_model_says_it_samples_is_what_its_trainer_does() -> None:
    """`anneal sample` and the studio's /generate view choose text or images from the registration alone."""
    import typing

    plugins = load_plugins(Settings(load_plugins=frozenset({"anneal-models"})), stream=None)
    kinds = {}
    for name, entry in plugins.models.items():
        trainer = typing.get_type_hints(entry.build)["return"]  # build() names its trainer class
        kinds[name] = "images" if hasattr(trainer, "sample_grid") else "text" if hasattr(trainer, "sample") else ""
        assert entry.samples == kinds[name], name
    assert set(kinds.values()) == {"text", "images", ""}

"""The defensive plugin loader: load order, refusals, allow/deny lists, and Settings."""

from __future__ import annotations

import io
from collections.abc import Callable

import pytest

from anneal_ir.plugins import hookimpl, load_plugins
from anneal_ir.settings import Settings


def only(*names: str, **kw: object) -> Settings:
    return Settings(load_plugins=frozenset(names), **kw)  # type: ignore[arg-type]


class First:
    @hookimpl
    def register_backends(self, register: Callable[..., None]) -> None:
        register("dup", lambda: "first")


class Second:
    @hookimpl
    def register_backends(self, register: Callable[..., None]) -> None:
        register("dup", lambda: "second")
        register("own", lambda: "second")


class Misspelled:
    @hookimpl
    def register_model(self, register: Callable[..., None]) -> None:
        pass


class WrongArgument:
    @hookimpl
    def register_models(self, reg: Callable[..., None]) -> None:
        pass


class Raising:
    @hookimpl
    def register_models(self, register: Callable[..., None]) -> None:
        raise KeyError("oops")


def test_first_plugin_to_claim_a_name_keeps_it() -> None:
    stream = io.StringIO()
    plugins = load_plugins(only("a", "b"), extra=[("a", First()), ("b", Second())], stream=stream)
    assert plugins.backends["dup"].factory() == "first"
    assert plugins.backends["own"].plugin == "b"
    assert stream.getvalue() == "anneal: plugin b in-process: backend 'dup' is already registered by a; skipped\n"


def test_misspelled_hook_is_refused_with_a_hint() -> None:
    plugins = load_plugins(only("m"), extra=[("m", Misspelled())], stream=None)
    assert plugins.loaded == []
    (failure,) = plugins.failures
    assert failure.error == "unknown hook 'register_model' (did you mean register_models?)"


def test_hook_with_wrong_arguments_is_refused_not_fatal() -> None:
    plugins = load_plugins(only("w", "a"), extra=[("w", WrongArgument()), ("a", First())], stream=None)
    assert [p.name for p in plugins.loaded] == ["a"]
    (failure,) = plugins.failures
    assert failure.name == "w" and failure.error.startswith("invalid hook: PluginValidationError")
    assert "\n" not in failure.error
    assert not plugins.manager.has_plugin("w")


def test_hook_that_raises_is_reported_and_the_rest_still_register() -> None:
    plugins = load_plugins(only("r", "a"), extra=[("r", Raising()), ("a", First())], stream=None)
    assert "dup" in plugins.backends
    assert [(f.name, f.error) for f in plugins.failures] == [("r", "register_models raised KeyError: 'oops'")]


def test_allow_and_deny_lists() -> None:
    extra = [("a", First()), ("b", Second())]
    assert [p.name for p in load_plugins(only("b"), extra=extra, stream=None).loaded] == ["b"]
    assert load_plugins(only(), extra=extra, stream=None).loaded == []  # empty allow-list: none
    denied = Settings(load_plugins=frozenset({"a", "b"}), disable_plugins=frozenset({"a"}))
    assert [p.name for p in load_plugins(denied, extra=extra, stream=None).loaded] == ["b"]


def test_settings_from_the_environment() -> None:
    s = Settings.from_env(
        {"ANNEAL_LOAD_PLUGINS": " a, b ,", "ANNEAL_DISABLE_PLUGINS": "c", "ANNEAL_EXPECT_ADAPTER": "1"}
    )
    assert s.load_plugins == frozenset({"a", "b"}) and s.disable_plugins == frozenset({"c"}) and s.expect_adapter
    assert Settings.from_env({"ANNEAL_LOAD_PLUGINS": ""}).load_plugins == frozenset()
    assert Settings.from_env({}).load_plugins is None and Settings.from_env({}).device == "auto"
    with pytest.raises(ValueError, match="ANNEAL_DEBUG must be an integer, got 'yes'"):
        Settings.from_env({"ANNEAL_DEBUG": "yes"})


class BadSamples:
    @hookimpl
    def register_models(self, register: Callable[..., None]) -> None:
        register("m", build=lambda config, device: None, samples="audio")


def test_a_model_registered_with_an_unknown_sample_kind_is_refused_by_name() -> None:
    plugins = load_plugins(only("s"), extra=[("s", BadSamples())], stream=None)
    assert "m" not in plugins.models
    (failure,) = plugins.failures
    assert "samples='audio'" in failure.error and "'images'" in failure.error

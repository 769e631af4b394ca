"""The plugin system: hook specs, the registries they fill, and defensive loading.

Every backend, model, dataset and extra command (built-in or third-party) arrives through
the entry-point group ``anneal``; the entry-point name is the distribution's name. A plugin
that fails to import, misspells a hook or raises while registering is reported once on
stderr, with its distribution's name, and skipped: the rest keeps working.
"""

from __future__ import annotations

import difflib
import importlib.metadata as md
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TextIO

import pluggy

from anneal_ir.settings import Settings

PROJECT = "anneal"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class AnnealSpec:
    """The hooks a plugin may implement. Registering never creates a device."""

    @hookspec
    def register_backends(self, register: Callable[..., None]) -> None:
        """Call ``register(name, factory, probe=..., summary=...)`` once per backend."""

    @hookspec
    def register_models(self, register: Callable[..., None]) -> None:
        """Call ``register(name, build=..., summary=..., defaults=..., presets=..., datasets=..., samples=...)`` per
        model; ``datasets`` names what ``anneal train MODEL --dataset`` accepts (the first is its default), and
        ``samples`` what ``anneal sample`` makes from a run of it ("text", "images", or "" when it does not)."""

    @hookspec
    def register_datasets(self, register: Callable[..., None]) -> None:
        """Call ``register(name, load=..., summary=...)`` once per dataset."""

    @hookspec
    def register_commands(self, cli: Any) -> None:
        """Add click commands to the ``anneal`` group."""


@dataclass(frozen=True)
class Availability:
    """What a backend's cheap probe found: usable or not, and one line saying why."""

    available: bool
    detail: str = ""
    # True when the device is emulated on the CPU (e.g. Mesa's lavapipe): usable, but
    # slower than the numpy backend, so `auto` does not pick it.
    software: bool = False


@dataclass(frozen=True)
class BackendEntry:
    name: str
    factory: Callable[[], Any]
    probe: Callable[[], Availability]
    summary: str
    plugin: str


SAMPLE_KINDS = ("text", "images", "")


@dataclass(frozen=True)
class ModelEntry:
    name: str
    build: Callable[..., Any]
    summary: str
    defaults: dict[str, Any]
    presets: dict[str, dict[str, Any]]
    plugin: str
    datasets: tuple[str, ...] = ()  # what `anneal train --dataset` may name for it (empty: it takes none)
    samples: str = ""  # what `anneal sample` makes from a run of it: "text", "images", or "" (it does not generate)


@dataclass(frozen=True)
class DatasetEntry:
    name: str
    load: Callable[..., Any]
    summary: str
    plugin: str


@dataclass(frozen=True)
class PluginInfo:
    name: str  # the distribution's name, which is also the entry-point name
    version: str
    module: str
    hooks: tuple[str, ...]


@dataclass(frozen=True)
class PluginFailure:
    name: str
    version: str
    error: str


def _always_available() -> Availability:
    return Availability(True, "")


@dataclass
class Plugins:
    """What loading found: the plugin manager, each plugin, and the filled registries."""

    manager: pluggy.PluginManager
    loaded: list[PluginInfo] = field(default_factory=list)
    failures: list[PluginFailure] = field(default_factory=list)
    backends: dict[str, BackendEntry] = field(default_factory=dict)
    models: dict[str, ModelEntry] = field(default_factory=dict)
    datasets: dict[str, DatasetEntry] = field(default_factory=dict)
    stream: TextIO | None = None

    def fail(self, name: str, version: str, error: str) -> None:
        self.failures.append(PluginFailure(name, version, error))
        if self.stream is not None:
            print(f"anneal: plugin {name} {version}: {error}; skipped", file=self.stream)

    def _call_each(self, hook_name: str, arguments: Callable[[str], dict[str, Any]]) -> None:
        """Call one hook plugin by plugin, so that one broken plugin spoils nothing else.

        ``arguments(plugin_name)`` gives each plugin its own keyword arguments (a register
        function that remembers who registered what).
        """
        hook = getattr(self.manager.hook, hook_name)
        # get_hookimpls() lists them first-registered-first (pluggy *calls* them in reverse);
        # we call them in load order, so the first plugin to claim a name keeps it.
        for impl in hook.get_hookimpls():
            plugin_name = impl.plugin_name
            try:
                impl.function(**arguments(plugin_name))
            except Exception as exc:  # a plugin's bug must not take the CLI down
                self.fail(plugin_name, self.version_of(plugin_name), f"{hook_name} raised {type(exc).__name__}: {exc}")

    def version_of(self, plugin_name: str) -> str:
        for info in self.loaded:
            if info.name == plugin_name:
                return info.version
        return "?"

    def _claim(self, kind: str, table: dict[str, Any], name: str, plugin: str) -> bool:
        if name in table:
            self.fail(plugin, self.version_of(plugin), f"{kind} {name!r} is already registered by {table[name].plugin}")
            return False
        return True

    def _backend_register(self, plugin: str) -> Callable[..., None]:
        def register(
            name: str,
            factory: Callable[[], Any],
            *,
            probe: Callable[[], Availability] = _always_available,
            summary: str = "",
        ) -> None:
            if self._claim("backend", self.backends, name, plugin):
                self.backends[name] = BackendEntry(name, factory, probe, summary, plugin)

        return register

    def _model_register(self, plugin: str) -> Callable[..., None]:
        def register(
            name: str,
            *,
            build: Callable[..., Any],
            summary: str = "",
            defaults: dict[str, Any] | None = None,
            presets: dict[str, dict[str, Any]] | None = None,
            datasets: tuple[str, ...] = (),
            samples: str = "",
        ) -> None:
            if samples not in SAMPLE_KINDS:
                raise ValueError(f"plugin {plugin!r} registers model {name!r} with samples={samples!r}; "
                                 f"use one of {', '.join(map(repr, SAMPLE_KINDS))}")  # fmt: skip
            if self._claim("model", self.models, name, plugin):
                self.models[name] = ModelEntry(name, build, summary, dict(defaults or {}), dict(presets or {}), plugin,
                                               tuple(datasets), samples)  # fmt: skip

        return register

    def _dataset_register(self, plugin: str) -> Callable[..., None]:
        def register(name: str, *, load: Callable[..., Any], summary: str = "") -> None:
            if self._claim("dataset", self.datasets, name, plugin):
                self.datasets[name] = DatasetEntry(name, load, summary, plugin)

        return register

    def fill_registries(self) -> None:
        self._call_each("register_backends", lambda p: {"register": self._backend_register(p)})
        self._call_each("register_models", lambda p: {"register": self._model_register(p)})
        self._call_each("register_datasets", lambda p: {"register": self._dataset_register(p)})

    def add_commands(self, cli: Any) -> None:
        self._call_each("register_commands", lambda p: {"cli": cli})


def _unknown_hooks(manager: pluggy.PluginManager, plugin: object) -> list[str]:
    known = [n for n in dir(AnnealSpec) if n.startswith("register_")]
    problems = []
    for attr in dir(plugin):
        opts = manager.parse_hookimpl_opts(plugin, attr)
        if opts is not None and (opts.get("specname") or attr) not in known:
            close = difflib.get_close_matches(attr, known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else f" (known hooks: {', '.join(known)})"
            problems.append(f"unknown hook {attr!r}{hint}")
    return problems


def _returning(obj: object) -> Callable[[], object]:
    return lambda: obj


def _wanted(name: str, settings: Settings) -> bool:
    if settings.load_plugins is not None and name not in settings.load_plugins:
        return False
    return name not in settings.disable_plugins


def load_plugins(
    settings: Settings | None = None,
    extra: Iterable[tuple[str, object]] = (),
    stream: TextIO | None = sys.stderr,
) -> Plugins:
    """Load every ``anneal`` entry point (honouring allow/deny lists) and fill the registries.

    ``extra`` registers in-process plugins as (name, module-or-object) pairs, for tests and
    embedding; they go through the same checks as entry points.
    """
    settings = settings or Settings.from_env()
    manager = pluggy.PluginManager(PROJECT)
    manager.add_hookspecs(AnnealSpec)
    plugins = Plugins(manager=manager, stream=stream)

    candidates: list[tuple[str, str, Callable[[], object]]] = []
    for ep in sorted(md.entry_points(group=PROJECT), key=lambda e: e.name):
        version = ep.dist.version if ep.dist is not None else "?"
        candidates.append((ep.name, version, ep.load))
    for name, obj in extra:
        candidates.append((name, "in-process", _returning(obj)))

    seen: set[str] = set()
    for name, version, load in candidates:
        if name in seen or not _wanted(name, settings):
            continue
        seen.add(name)
        try:
            module = load()
        except Exception as exc:  # any import-time error is the plugin's, not ours
            plugins.fail(name, version, f"failed to import: {type(exc).__name__}: {exc}")
            continue
        problems = _unknown_hooks(manager, module)
        if problems:
            plugins.fail(name, version, "; ".join(problems))
            continue
        try:
            manager.register(module, name=name)
        except Exception as exc:  # e.g. a hookimpl whose arguments the spec does not have
            if manager.has_plugin(name):  # pluggy may have registered some of its hooks already
                manager.unregister(name=name)
            plugins.fail(name, version, f"invalid hook: {type(exc).__name__}: {exc}".replace("\n", " "))
            continue
        hooks = tuple(sorted(h.name for h in manager.get_hookcallers(module) or []))
        plugins.loaded.append(PluginInfo(name, version, getattr(module, "__name__", repr(module)), hooks))
    manager.check_pending()  # belt and braces: _unknown_hooks already refused misspellings
    plugins.fill_registries()
    return plugins

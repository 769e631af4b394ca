"""The device registry: which backends the plugins registered, what ``auto`` means, and
one backend instance per name per process.

``auto`` (the default, or ``ANNEAL_DEVICE``) picks "webgpu" only when its probe reports a
real GPU adapter, and "cpu" otherwise: a software adapter such as Mesa's lavapipe runs
WGSL on the CPU and is slower than numpy, so it is used only when asked for by name.
Backends are created lazily by their factory, on first use, never at registration.
"""

from __future__ import annotations

import sys
from typing import Any

from anneal_ir.plugins import Availability, BackendEntry, Plugins, hookimpl, load_plugins
from anneal_ir.settings import Settings

__all__ = [
    "AUTO",
    "DeviceError",
    "Devices",
    "auto_device",
    "backend_names",
    "devices",
    "get_backend",
    "hookimpl",
    "plugins",
    "probe",
    "reset",
    "resolve_device",
    "split_index",
]

AUTO = "auto"
GPU_BACKEND = "webgpu"
CPU_BACKEND = "cpu"


class DeviceError(RuntimeError):
    """A device that is unknown, unavailable or failed to start; the message says the fix."""


class Devices:
    """Backends of one plugin load, with probes and instances cached per name."""

    def __init__(self, plugins: Plugins, settings: Settings) -> None:
        self._plugins = plugins
        self._settings = settings
        self._probes: dict[str, Availability] = {}
        self._instances: dict[str, object] = {}

    def names(self) -> list[str]:
        return list(self._plugins.backends)

    def entry(self, name: str) -> BackendEntry:
        try:
            return self._plugins.backends[name]
        except KeyError:
            known = ", ".join(self.names()) or "none (no backend plugin is installed or enabled)"
            raise DeviceError(f"unknown device {name!r}; registered backends: {known}") from None

    def probe(self, name: str) -> Availability:
        """The backend's availability, probed once; a probe that raises means unavailable."""
        if name not in self._probes:
            entry = self.entry(name)
            try:
                self._probes[name] = entry.probe()
            except Exception as exc:  # a plugin's probe bug must not crash `anneal devices`
                self._probes[name] = Availability(False, f"probe raised {type(exc).__name__}: {exc}")
        return self._probes[name]

    def auto(self) -> tuple[str, str]:
        """The backend ``auto`` stands for, and one line saying why."""
        gpu = self.probe(GPU_BACKEND) if GPU_BACKEND in self._plugins.backends else None
        if gpu is not None and gpu.available and not gpu.software:
            return GPU_BACKEND, f"auto chose webgpu: {gpu.detail}"
        if gpu is None:
            reason = "the webgpu backend is not installed or is disabled (install anneal-wgpu from the project's wheel)"
        elif gpu.available:
            reason = f"the only WebGPU adapter, {gpu.detail}, runs on the CPU and is slower than numpy"
            reason += " (--device webgpu uses it anyway)"
        else:
            reason = f"webgpu is unavailable: {gpu.detail}"
        if CPU_BACKEND in self._plugins.backends:
            return CPU_BACKEND, f"auto chose cpu: {reason}"
        if gpu is not None and gpu.available:  # no numpy backend: a software adapter beats nothing
            return GPU_BACKEND, f"auto chose webgpu ({gpu.detail}): the cpu backend is not installed"
        raise DeviceError(f"no device is available: {reason}, and the cpu backend is not installed")

    def resolve(self, name: str = AUTO) -> tuple[str, str]:
        """A concrete backend name for ``name`` (``auto`` → ``Settings.device`` → auto choice)."""
        name = name or AUTO
        if name == AUTO and self._settings.device != AUTO:
            return self.entry(self._settings.device).name, f"ANNEAL_DEVICE={self._settings.device}"
        if name == AUTO:
            return self.auto()
        return self.entry(name).name, ""  # an unknown name fails here, naming the registered ones

    def get(self, name: str = AUTO) -> tuple[str, object]:
        """(resolved name, backend instance); DeviceError if unknown, unavailable or broken."""
        resolved, _ = self.resolve(name)
        if resolved in self._instances:
            return resolved, self._instances[resolved]
        entry = self.entry(resolved)
        availability = self.probe(resolved)
        if not availability.available:
            raise DeviceError(f"device {resolved!r} is not available: {availability.detail}")
        try:
            backend = entry.factory()
        except Exception as exc:  # report it as the device's failure, in one line
            raise DeviceError(f"device {resolved!r} failed to start: {type(exc).__name__}: {exc}") from exc
        self._instances[resolved] = backend
        return resolved, backend


def split_index(name: str) -> tuple[str, int | None]:
    """A device name with an optional adapter index: "webgpu:1" -> ("webgpu", 1), "cpu" -> ("cpu", None).
    The index counts adapters in the order `anneal doctor` lists them; a process uses one of them."""
    base, sep, index = name.partition(":")
    if not sep:
        return name, None
    if not base or not index.isdigit():
        raise DeviceError(f"device {name!r} is not NAME or NAME:INDEX (an adapter number such as webgpu:0)")
    if base != GPU_BACKEND:
        raise DeviceError(f"device {name!r}: only {GPU_BACKEND} has indexed adapters ({GPU_BACKEND}:0, ...)")
    return base, int(index)


# The process-wide state: loaded once, on first use (a functools.cache that reset() can seed).
_state: dict[str, Any] = {}


def plugins() -> Plugins:
    """Every plugin, loaded once per process; failures are reported once on stderr."""
    if "plugins" not in _state:
        _state["plugins"] = load_plugins(Settings.from_env(), stream=sys.stderr)
    loaded: Plugins = _state["plugins"]
    return loaded


def devices() -> Devices:
    if "devices" not in _state:
        _state["devices"] = Devices(plugins(), Settings.from_env())
    registry: Devices = _state["devices"]
    return registry


def reset(using: Plugins | None = None) -> None:
    """Forget the loaded plugins and backend instances; with ``using``, adopt those plugins
    instead of loading entry points (embedding, tests)."""
    _state.clear()
    if using is not None:
        _state["plugins"] = using


def backend_names() -> list[str]:
    return devices().names()


def probe(name: str) -> Availability:
    return devices().probe(name)


def auto_device() -> tuple[str, str]:
    return devices().auto()


def resolve_device(name: str = AUTO) -> tuple[str, str]:
    return devices().resolve(name)


def get_backend(name: str = AUTO) -> tuple[str, object]:
    return devices().get(name)

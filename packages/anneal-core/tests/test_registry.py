"""anneal.registry: device names, what `auto` means, one instance per device, clear errors."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from anneal import registry
from anneal.registry import DeviceError, Devices
from anneal_ir.plugins import Availability, Plugins, hookimpl, load_plugins
from anneal_ir.settings import Settings


class Thing:
    pass


def broken() -> object:
    raise OSError("driver exploded")


def make(backends: dict[str, tuple[Callable[[], object], Availability]], **settings: object) -> Devices:
    class Plugin:
        @hookimpl
        def register_backends(self, register: Callable[..., None]) -> None:
            for name, (factory, availability) in backends.items():
                register(name, factory, probe=lambda a=availability: a)

    plugins = load_plugins(Settings(load_plugins=frozenset({"p"})), extra=[("p", Plugin())], stream=None)
    return Devices(plugins, Settings(**settings))  # type: ignore[arg-type]


GPU = Availability(True, "Some GPU (DiscreteGPU, Vulkan)")
LAVAPIPE = Availability(True, "llvmpipe (CPU, Vulkan)", software=True)
MISSING = Availability(False, "no Vulkan/Metal/D3D12 adapter found; install a Vulkan driver")
UP = Availability(True)


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    registry.reset()
    yield
    registry.reset()


def test_auto_prefers_a_real_gpu() -> None:
    devices = make({"cpu": (Thing, UP), "webgpu": (Thing, GPU)})
    assert devices.auto() == ("webgpu", "auto chose webgpu: Some GPU (DiscreteGPU, Vulkan)")


def test_auto_skips_a_software_adapter() -> None:
    name, note = make({"cpu": (Thing, UP), "webgpu": (Thing, LAVAPIPE)}).auto()
    assert name == "cpu"
    assert "llvmpipe (CPU, Vulkan), runs on the CPU and is slower than numpy" in note


def test_auto_without_webgpu_says_why() -> None:
    assert make({"cpu": (Thing, UP), "webgpu": (Thing, MISSING)}).auto() == (
        "cpu",
        "auto chose cpu: webgpu is unavailable: no Vulkan/Metal/D3D12 adapter found; install a Vulkan driver",
    )
    name, note = make({"cpu": (Thing, UP)}).auto()
    assert name == "cpu" and "install anneal-wgpu" in note


def test_auto_without_cpu_backend() -> None:
    assert make({"webgpu": (Thing, LAVAPIPE)}).auto()[0] == "webgpu"
    with pytest.raises(DeviceError, match="no device is available"):
        make({"webgpu": (Thing, MISSING)}).auto()


def test_settings_device_stands_in_for_auto() -> None:
    devices = make({"cpu": (Thing, UP), "other": (Thing, UP)}, device="other")
    assert devices.resolve("auto") == ("other", "ANNEAL_DEVICE=other")
    assert devices.resolve("cpu") == ("cpu", "")


def test_get_creates_one_instance_per_name() -> None:
    devices = make({"cpu": (Thing, UP), "webgpu": (Thing, GPU)})
    name, first = devices.get("webgpu")
    assert name == "webgpu" and isinstance(first, Thing)
    assert devices.get("auto") == ("webgpu", first)
    assert devices.get("cpu")[1] is not first


def test_unknown_unavailable_and_broken_devices_raise_device_error() -> None:
    devices = make({"cpu": (Thing, UP), "webgpu": (Thing, MISSING), "bad": (broken, UP)})
    with pytest.raises(DeviceError, match=r"^unknown device 'tpu'; registered backends: cpu, webgpu, bad$"):
        devices.get("tpu")
    with pytest.raises(DeviceError, match=r"^device 'webgpu' is not available: no Vulkan.*install a Vulkan driver$"):
        devices.get("webgpu")
    with pytest.raises(DeviceError, match=r"^device 'bad' failed to start: OSError: driver exploded$"):
        devices.get("bad")
    assert issubclass(DeviceError, RuntimeError)


def test_a_probe_that_raises_means_unavailable() -> None:
    def probe() -> Availability:
        raise RuntimeError("boom")

    class Plugin:
        @hookimpl
        def register_backends(self, register: Callable[..., None]) -> None:
            register("flaky", Thing, probe=probe)

    plugins = load_plugins(Settings(load_plugins=frozenset({"p"})), extra=[("p", Plugin())], stream=None)
    assert Devices(plugins, Settings()).probe("flaky") == Availability(False, "probe raised RuntimeError: boom")


def test_process_registry_loads_installed_plugins_once() -> None:
    assert registry.plugins() is registry.plugins()
    assert "cpu" in registry.backend_names()  # anneal-cpu is a dependency of anneal
    assert registry.devices().entry("cpu").plugin == "anneal-cpu"


def test_reset_can_adopt_given_plugins() -> None:
    plugins = Plugins(manager=load_plugins(Settings(load_plugins=frozenset()), stream=None).manager)
    registry.reset(using=plugins)
    assert registry.plugins() is plugins and registry.backend_names() == []
    with pytest.raises(DeviceError, match="none \\(no backend plugin is installed or enabled\\)"):
        registry.get_backend("cpu")

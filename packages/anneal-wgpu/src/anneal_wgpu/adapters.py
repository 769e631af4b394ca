"""Adapter discovery: which WebGPU adapters exist, which one anneal uses, and why.

Only Vulkan, Metal and D3D12 adapters count. wgpu also offers OpenGL(ES) adapters, but
their compute support is partial and slow, so they are left out of the instance and
filtered out again here. Among the rest, real GPUs come before CPU (software) adapters
such as Mesa's lavapipe; ``ANNEAL_WGPU_ADAPTER`` picks one by a substring of its name.

Enumerating adapters is cheap and never creates a device: the backend's availability
probe and ``anneal doctor`` both use ``describe()``. ``select_adapter()`` hands the
runtime the chosen ``wgpu.GPUAdapter``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from anneal_ir.settings import Settings
from anneal_wgpu.loader import load_wgpu

ACCEPTED_BACKENDS = ("Vulkan", "Metal", "D3D12")
# wgpu-native's instance flags for the same backends (D3D12 is spelled DX12 there).
_INSTANCE_BACKENDS = ["Vulkan", "Metal", "DX12"]
# Lower sorts first: the order in which adapters are preferred.
_TYPE_RANK = {"DiscreteGPU": 0, "IntegratedGPU": 1, "VirtualGPU": 2, "Unknown": 3, "CPU": 4}

FIX = (
    "install a Vulkan driver for your GPU (on Debian/Ubuntu without a GPU: "
    "apt-get install mesa-vulkan-drivers, which provides the lavapipe CPU adapter)"
)

# The limits the compiler reads (wgpu's names), with the words doctor prints for them.
COMPILER_LIMITS = {
    "max-storage-buffers-per-shader-stage": "max storage buffers per shader stage",
    "max-compute-workgroup-size-x": "max workgroup size x",
    "max-compute-workgroup-size-y": "max workgroup size y",
    "max-compute-workgroup-size-z": "max workgroup size z",
    "max-compute-invocations-per-workgroup": "max invocations per workgroup",
    "max-compute-workgroup-storage-size": "max workgroup storage size (bytes)",
    "max-compute-workgroups-per-dimension": "max workgroups per dimension",
    "max-storage-buffer-binding-size": "max storage buffer binding size (bytes)",
    "max-buffer-size": "max buffer size (bytes)",
}
# The features the compiler may use, shown first by doctor.
COMPILER_FEATURES = ("shader-f16", "subgroup", "timestamp-query")


class NoAdapterError(RuntimeError):
    """No usable adapter; the message says what was found and how to fix it."""


@dataclass(frozen=True)
class AdapterInfo:
    """One adapter as wgpu reports it; ``handle`` is the wgpu.GPUAdapter itself."""

    name: str
    vendor: str
    description: str
    backend: str  # Vulkan, Metal, D3D12 (or OpenGL, for the ignored ones)
    adapter_type: str  # DiscreteGPU, IntegratedGPU, VirtualGPU, CPU or Unknown
    features: tuple[str, ...]
    limits: dict[str, int]
    handle: Any = field(default=None, compare=False, repr=False)

    @property
    def software(self) -> bool:
        """Emulated on the CPU (lavapipe, WARP, SwiftShader): works, but slower than numpy."""
        return self.adapter_type == "CPU"

    @property
    def summary(self) -> str:
        return f"{self.name} ({self.adapter_type}, {self.backend})"

    def matches(self, wanted: str) -> bool:
        text = " ".join((self.name, self.vendor, self.description, self.backend, self.adapter_type))
        return wanted.lower() in text.lower()

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "vendor": self.vendor,
            "description": self.description,
            "backend": self.backend,
            "adapter_type": self.adapter_type,
            "software": self.software,
            "features": list(self.features),
            "limits": {k: self.limits.get(k) for k in COMPILER_LIMITS},
        }


@dataclass(frozen=True)
class Description:
    """What discovery found: usable adapters (best first), ignored ones, and the choice."""

    adapters: tuple[AdapterInfo, ...]
    ignored: tuple[AdapterInfo, ...]
    chosen: AdapterInfo | None
    problem: str  # why nothing was chosen ("" when something was)


def _info(adapter: Any) -> AdapterInfo:
    info = adapter.info
    return AdapterInfo(
        name=str(info.get("device") or info.get("description") or "unknown adapter"),
        vendor=str(info.get("vendor", "")),
        description=str(info.get("description", "")),
        backend=str(info.get("backend_type", "Unknown")),
        adapter_type=str(info.get("adapter_type", "Unknown")),
        features=tuple(sorted(adapter.features)),
        limits={str(k): int(v) for k, v in dict(adapter.limits).items()},
        handle=adapter,
    )


def _restrict_instance(extras: Any) -> None:
    # Keep OpenGL out of the instance: it is never used, and initializing it costs time.
    # This must happen before anyone creates the (process-global) instance; if the runtime
    # or a user already did, the filter below still leaves OpenGL adapters out.
    try:
        extras.set_instance_extras(backends=_INSTANCE_BACKENDS)
    except RuntimeError:
        pass


@functools.cache
def enumerate_adapters() -> tuple[tuple[AdapterInfo, ...], tuple[AdapterInfo, ...]]:
    """(usable adapters, best first; ignored OpenGL/unknown adapters). Cached per process.

    Raises ImportError if wgpu (or its native library) cannot be loaded.
    """
    wgpu = load_wgpu()  # deferred: importing wgpu loads a native library, and plugins load eagerly
    from wgpu.backends.wgpu_native import extras

    _restrict_instance(extras)
    found = [_info(a) for a in wgpu.gpu.enumerate_adapters_sync()]
    usable = rank([a for a in found if a.backend in ACCEPTED_BACKENDS])
    ignored = tuple(a for a in found if a.backend not in ACCEPTED_BACKENDS)
    return usable, ignored


def rank(adapters: list[AdapterInfo]) -> tuple[AdapterInfo, ...]:
    """Real GPUs first (discrete, integrated, virtual), software adapters last; stable."""
    return tuple(sorted(adapters, key=lambda a: _TYPE_RANK.get(a.adapter_type, 3)))


def choose(adapters: tuple[AdapterInfo, ...], wanted: str | None) -> tuple[AdapterInfo | None, str]:
    """Pick the first (best) adapter, or the first whose name etc. contains ``wanted``."""
    if not adapters:
        return None, f"no Vulkan/Metal/D3D12 adapter found (OpenGL adapters are not used); {FIX}"
    if wanted:
        for adapter in adapters:
            if adapter.matches(wanted):
                return adapter, ""
        names = ", ".join(a.summary for a in adapters)
        return None, f"ANNEAL_WGPU_ADAPTER={wanted!r} matches none of the adapters: {names}"
    return adapters[0], ""


# The adapter index this process was told to use (--device webgpu:N, or its rank's), set once before the
# backend starts; None: choose() picks. A process drives one adapter: several ranks, several GPUs.
_index: list[int | None] = [None]


def use_index(index: int | None) -> None:
    """Use the adapter of this index in describe()'s order (what `anneal doctor` numbers webgpu:0, ...);
    NoAdapterError names the adapters when there is no such one."""
    if index is not None:
        usable = describe().adapters
        if not 0 <= index < len(usable):
            names = ", ".join(f"webgpu:{i} {a.summary}" for i, a in enumerate(usable)) or "none"
            raise NoAdapterError(f"there is no adapter webgpu:{index}; the adapters: {names}")
    _index[0] = index


def describe(settings: Settings | None = None) -> Description:
    """Enumerate (once per process) and choose, without ever raising."""
    settings = settings or Settings.from_env()
    try:
        usable, ignored = enumerate_adapters()
    except Exception as exc:  # a missing or broken native library must not crash doctor
        return Description((), (), None, f"cannot load wgpu: {type(exc).__name__}: {exc}; {FIX}")
    index = _index[0]
    if index is not None and index < len(usable):
        return Description(usable, ignored, usable[index], "")
    chosen, problem = choose(usable, settings.wgpu_adapter)
    return Description(usable, ignored, chosen, problem)


def select_adapter(settings: Settings | None = None) -> Any:
    """The wgpu.GPUAdapter the runtime should use; NoAdapterError says why there is none."""
    found = describe(settings)
    if found.chosen is None:
        raise NoAdapterError(found.problem)
    return found.chosen.handle

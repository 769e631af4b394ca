"""Registers the "webgpu" backend. Importing this module must stay cheap: no wgpu import."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from anneal_ir.plugins import Availability, hookimpl


def probe() -> Availability:
    """Enumerate adapters (cheap, cached); never create a device."""
    from anneal_wgpu import adapters

    found = adapters.describe()
    if found.chosen is None:
        return Availability(False, found.problem)
    return Availability(True, found.chosen.summary, software=found.chosen.software)


@hookimpl
def register_backends(register: Callable[..., None]) -> None:
    register(
        "webgpu",
        lambda: importlib.import_module("anneal_wgpu.runtime").WebGPUBackend(),
        probe=probe,
        summary="WGSL kernels through wgpu (Vulkan, Metal, D3D12)",
    )

"""Registers the "cpu" (numpy) backend, exactly as a third-party backend would register."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from anneal_ir.plugins import hookimpl


@hookimpl
def register_backends(register: Callable[..., None]) -> None:
    # numpy is always there, so the default probe (always available) is the truth.
    register(
        "cpu",
        lambda: importlib.import_module("anneal_cpu.backend").CPUBackend(),
        summary="numpy kernels on the CPU (the default without a GPU, and the value oracle)",
    )

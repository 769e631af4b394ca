"""The "cpu" backend registers through the `anneal` entry point like any third-party plugin."""

from __future__ import annotations

import subprocess
import sys

from anneal_ir.plugins import load_plugins
from anneal_ir.settings import Settings


def test_entry_point_registers_cpu_backend() -> None:
    plugins = load_plugins(Settings(load_plugins=frozenset({"anneal-cpu"})), stream=None)
    assert plugins.failures == []
    assert [p.name for p in plugins.loaded] == ["anneal-cpu"]
    entry = plugins.backends["cpu"]
    assert entry.plugin == "anneal-cpu"
    assert entry.probe().available


def test_registering_does_not_create_the_backend() -> None:
    code = (
        "import sys; from anneal_ir.plugins import load_plugins; from anneal_ir.settings import Settings;"
        "load_plugins(Settings(load_plugins=frozenset({'anneal-cpu'})));"
        "assert 'anneal_cpu.backend' not in sys.modules, 'registration imported the backend'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)

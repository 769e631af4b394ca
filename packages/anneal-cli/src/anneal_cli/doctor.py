"""`anneal doctor`: adapters, their features and limits, the `auto` device, numpy and BLAS.

Only Vulkan, Metal and D3D12 adapters count (anneal_wgpu leaves OpenGL out: its compute
support is partial). With no usable adapter, doctor names the fix and exits 1; the CPU
backend works regardless.
"""

from __future__ import annotations

import textwrap
from typing import Any

import click
import numpy as np

from anneal.registry import DeviceError, auto_device
from anneal.registry import plugins as loaded_plugins
from anneal_cli.errors import WGPU_WHEEL, CommandError
from anneal_ir.settings import Settings

try:  # optional: the anneal-wgpu wheel (anneal-cli's `wgpu` extra), installed by path, brings the WebGPU backend
    from anneal_wgpu import adapters
except ImportError:  # the CLI works without it; doctor then says how to get it
    adapters = None  # type: ignore[assignment]


def _cpu_compiler() -> str:
    """Which C compiler the cpu backend builds its kernels with (or why it renders numpy only)."""
    from anneal_cpu.compiler import CompileError, find_compiler

    settings = Settings.from_env()
    try:
        found = find_compiler(settings.cpu_cc)
    except CompileError as exc:
        return f"cpu kernels: numpy only ({exc})"
    if found is None:
        why = "ANNEAL_CPU_CC=numpy" if settings.cpu_cc == "numpy" else "no C compiler (cc, gcc or clang) on PATH"
        return f"cpu kernels: numpy only ({why}); install gcc for compiled kernels"
    from anneal_cpu.backend import usable_cores
    from anneal_cpu.runtime import numpy_blas

    cache = settings.cache_root()[0] / "cpu-kernels"
    threads = settings.cpu_threads or usable_cores()
    blas = "cblas_sgemm of numpy's OpenBLAS" if numpy_blas(single_threaded=False) else "np.matmul (no OpenBLAS found)"
    return (f"cpu kernels: C via {found} (kernels of >= {settings.cpu_c_min} iterations), cached in {cache}; "
            f"{threads} threads; contractions by {blas}")  # fmt: skip


def _blas() -> str:
    try:
        config: Any = np.show_config(mode="dicts")
        blas = config["Build Dependencies"]["blas"]
    except Exception:  # older or unusual numpy builds: the version alone still helps
        return "BLAS: unknown"
    detail = blas.get("openblas configuration") or blas.get("lib directory") or ""
    return f"BLAS: {blas.get('name', '?')} {blas.get('version', '')}".rstrip() + (f" ({detail})" if detail else "")


def _adapter_lines(adapter: Any, chosen: bool, index: int = 0) -> list[str]:
    mark = "*" if chosen else "-"
    kind = f"{adapter.adapter_type}, software: slower than numpy" if adapter.software else adapter.adapter_type
    lines = [
        f"  {mark} webgpu:{index}  {adapter.name}",
        f"      vendor {adapter.vendor or '?'}, backend {adapter.backend}, type {kind}",
    ]
    used = ", ".join(f"{f} {'yes' if f in adapter.features else 'no'}" for f in adapters.COMPILER_FEATURES)
    lines.append(f"      compiler features: {used}")
    wrapped = textwrap.wrap(", ".join(adapter.features), width=88, break_on_hyphens=False)
    lines += ["      all features: " + (wrapped[0] if wrapped else "none")] + [f"        {w}" for w in wrapped[1:]]
    width = max(len(v) for v in adapters.COMPILER_LIMITS.values())
    for key, label in adapters.COMPILER_LIMITS.items():
        lines.append(f"      {label:<{width}}  {adapter.limits.get(key, '?')}")
    return lines


def _gpu_section() -> str:
    """Print the adapters; return why none is usable ("" when one is)."""
    if adapters is None:
        problem = f"the WebGPU backend is not installed ({WGPU_WHEEL})"
        click.echo(f"WebGPU: {problem}")
        return problem
    found = adapters.describe()
    click.echo("WebGPU adapters (Vulkan, Metal, D3D12; OpenGL adapters are not used):")
    for index, adapter in enumerate(found.adapters):  # the index is the device name's: webgpu:0, webgpu:1, ...
        click.echo("\n".join(_adapter_lines(adapter, adapter is found.chosen, index)))
    for adapter in found.ignored:
        click.echo(f"  - ignored: {adapter.summary}")
    if found.chosen is None:
        click.echo(f"  no usable adapter: {found.problem}")
        click.echo("  the CPU backend (numpy) still works: anneal train <model> --device cpu")
        return found.problem
    return ""


@click.command()
def doctor() -> None:
    """Show the adapters, features and limits, the chosen device, numpy and BLAS.

    Exits 1 when no Vulkan/Metal/D3D12 adapter is usable.
    """
    problem = _gpu_section()
    try:
        _, note = auto_device()
    except DeviceError as exc:
        note = f"no device: {exc}"
    click.echo(f"device: {note}")
    found = loaded_plugins()
    failed = f", {len(found.failures)} failed (see anneal plugins)" if found.failures else ""
    click.echo(f"plugins: {len(found.loaded)} loaded{failed}; backends: {', '.join(found.backends) or 'none'}")
    click.echo(f"numpy {np.__version__}, {_blas()}")
    click.echo(_cpu_compiler())
    from anneal_cli.distributed import mpi_implementation  # mpi4py only here, and only if it is installed

    click.echo(f"MPI (data-parallel training): {mpi_implementation()}")
    if problem:
        raise CommandError(problem)

"""Every ANNEAL_* environment variable is read here, and only here.

Code elsewhere takes a `Settings` argument (or calls `Settings.from_env()` at its entry
point), so behaviour never changes behind a caller's back.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


def _names(value: str | None) -> frozenset[str] | None:
    if value is None:
        return None
    return frozenset(n.strip() for n in value.split(",") if n.strip())


def _int(env: Mapping[str, str], name: str) -> int:
    value = env.get(name, "") or "0"
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {value!r}") from None


@dataclass(frozen=True)
class Settings:
    """Process configuration taken from the environment."""

    load_plugins: frozenset[str] | None = None  # allow-list; None = all, empty = none
    disable_plugins: frozenset[str] = frozenset()
    device: str = "auto"
    debug: int = 0
    expect_adapter: bool = False
    wgpu_adapter: str | None = None
    cache_dir: str | None = None
    xdg_cache_home: str | None = None  # XDG_CACHE_HOME: the cache default
    offline: bool = False
    mirror: str | None = None  # ANNEAL_MIRROR: base URL laid out like the data cache
    beam: int = 0
    cpu_cc: str | None = None  # ANNEAL_CPU_CC: the C compiler of the cpu backend; "numpy" renders numpy only
    cpu_threads: int = 0  # ANNEAL_CPU_THREADS: the cpu pool (C stages, BLAS); 0 = the cores this process may use
    cpu_c_min: int = 4096  # ANNEAL_CPU_C_MIN: kernels of fewer loop iterations stay numpy (compiling would not pay)
    wgpu_checks: bool = False  # ANNEAL_WGPU_CHECKS=1: every WGSL kernel keeps naga's bounds checks (debugging)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        return cls(
            load_plugins=_names(env.get("ANNEAL_LOAD_PLUGINS")),
            disable_plugins=_names(env.get("ANNEAL_DISABLE_PLUGINS")) or frozenset(),
            device=env.get("ANNEAL_DEVICE", "auto") or "auto",
            debug=_int(env, "ANNEAL_DEBUG"),
            expect_adapter=env.get("ANNEAL_EXPECT_ADAPTER", "") not in ("", "0"),
            wgpu_adapter=env.get("ANNEAL_WGPU_ADAPTER") or None,
            cache_dir=env.get("ANNEAL_CACHE_DIR") or None,
            xdg_cache_home=env.get("XDG_CACHE_HOME") or None,
            offline=env.get("ANNEAL_OFFLINE", "") not in ("", "0"),
            mirror=env.get("ANNEAL_MIRROR") or None,
            beam=_int(env, "ANNEAL_BEAM"),
            cpu_cc=env.get("ANNEAL_CPU_CC") or None,
            cpu_threads=_int(env, "ANNEAL_CPU_THREADS"),
            cpu_c_min=_int(env, "ANNEAL_CPU_C_MIN") if env.get("ANNEAL_CPU_C_MIN") else 4096,
            wgpu_checks=env.get("ANNEAL_WGPU_CHECKS", "") not in ("", "0"),
        )

    def cache_root(self) -> tuple[Path, str]:
        """The anneal cache folder and which setting chose it (`ANNEAL_CACHE_DIR`, `XDG_CACHE_HOME`, `default`)."""
        if self.cache_dir:
            return Path(self.cache_dir).expanduser(), "ANNEAL_CACHE_DIR"
        if self.xdg_cache_home and Path(self.xdg_cache_home).is_absolute():  # the XDG spec ignores relative paths
            return Path(self.xdg_cache_home) / "anneal", "XDG_CACHE_HOME"
        return Path.home() / ".cache" / "anneal", "default"

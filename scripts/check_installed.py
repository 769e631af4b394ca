"""Run by a wheel-installed environment's Python: `python scripts/check_installed.py VENV`.

Every anneal module is imported from VENV (not from a source tree on sys.path), the test helpers are absent,
and the three plugins register through their entry points.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

MODULES = ["anneal_ir", "anneal_autodiff", "anneal_schedule", "anneal_cpu", "anneal_wgpu", "anneal", "anneal_models",
           "anneal_cli"]  # fmt: skip
TEST_HELPERS = ["anneal.data.testing", "anneal_wgpu.testing"]


def main() -> int:
    venv = Path(sys.argv[1]).resolve()
    found = []
    for name in MODULES:
        where = Path(importlib.import_module(name).__file__ or "").resolve()
        if venv not in where.parents:
            found.append(f"{name} imported from {where}, not from {venv}")
    found += [f"{name} is installed (a test helper)" for name in TEST_HELPERS if importlib.util.find_spec(name)]
    from anneal.registry import plugins

    loaded = {p.name for p in plugins().loaded}
    found += [f"plugin {p} did not load" for p in ("anneal-cpu", "anneal-wgpu", "anneal-models") if p not in loaded]
    for line in found:
        print(f"check_installed: {line}", file=sys.stderr)
    if not found:
        print(f"check_installed: {len(MODULES)} packages from {venv}, plugins {sorted(loaded)}")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`anneal --version`: every installed anneal distribution and every plugin distribution."""

from __future__ import annotations

import importlib.metadata as md
import platform
import re

from anneal_ir.plugins import PROJECT


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed() -> list[tuple[str, str, bool]]:
    """(distribution, version, is a plugin) for anneal* distributions and plugin distributions."""
    plugin_dists = {_normalize(ep.dist.name) for ep in md.entry_points(group=PROJECT) if ep.dist is not None}
    found: dict[str, tuple[str, str, bool]] = {}
    for dist in md.distributions():
        name = dist.metadata["Name"]
        if not name:
            continue
        key = _normalize(name)
        if (key.startswith("anneal") or key in plugin_dists) and key not in found:  # first on sys.path wins
            found[key] = (key, dist.version, key in plugin_dists)
    return sorted(found.values())


def version_text() -> str:
    rows = installed()
    cli = next((v for n, v, _ in rows if n == "anneal-cli"), "?")
    head = f"anneal-cli {cli} (Python {platform.python_version()})"
    width = max((len(n) for n, _, _ in rows), default=0)
    lines = [head] + [f"  {n:<{width}}  {v}{'  plugin' if p else ''}" for n, v, p in rows]
    return "\n".join(lines)

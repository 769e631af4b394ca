"""`anneal plugins` and `anneal devices`: what the plugin system loaded and registered."""

from __future__ import annotations

import json
from typing import Any

import click

from anneal.registry import DeviceError
from anneal.registry import devices as device_registry
from anneal.registry import plugins as loaded_plugins


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    return "\n".join(lines)


def plugins_report() -> dict[str, Any]:
    found = loaded_plugins()
    provides: dict[str, list[str]] = {}
    for kind, table in (("backend", found.backends), ("model", found.models), ("dataset", found.datasets)):
        for name, entry in table.items():
            provides.setdefault(entry.plugin, []).append(f"{kind} {name}")
    return {
        "plugins": [
            {
                "name": p.name,
                "version": p.version,
                "module": p.module,
                "hooks": list(p.hooks),
                "provides": provides.get(p.name, []),
            }
            for p in found.loaded
        ],
        "failures": [{"name": f.name, "version": f.version, "error": f.error} for f in found.failures],
    }


@click.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def plugins(as_json: bool) -> None:
    """List the loaded plugins (name, version, module, hooks) and the ones that failed."""
    report = plugins_report()
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    if report["plugins"]:
        rows = [["PLUGIN", "VERSION", "MODULE", "HOOKS", "PROVIDES"]]
        for p in report["plugins"]:
            rows.append([p["name"], p["version"], p["module"], ", ".join(p["hooks"]), ", ".join(p["provides"])])
        click.echo(_table(rows))
    else:
        click.echo("no plugins loaded (check ANNEAL_LOAD_PLUGINS / ANNEAL_DISABLE_PLUGINS)")
    for f in report["failures"]:
        click.echo(f"failed: {f['name']} {f['version']}: {f['error']}")


def devices_report() -> dict[str, Any]:
    registry = device_registry()
    found = loaded_plugins()
    backends = []
    for name in registry.names():
        availability = registry.probe(name)
        entry = found.backends[name]
        backends.append(
            {
                "name": name,
                "plugin": entry.plugin,
                "available": availability.available,
                "software": availability.software,
                "detail": availability.detail,
                "summary": entry.summary,
            }
        )
    try:
        chosen, note = registry.auto()
    except DeviceError as exc:
        chosen, note = None, str(exc)
    return {"backends": backends, "auto": {"device": chosen, "note": note}, "adapters": _indexed_adapters(found)}


def _indexed_adapters(found: Any) -> list[dict[str, Any]]:
    """The WebGPU adapters by device name (webgpu:0, webgpu:1, ...: anneal doctor's order; a data-parallel rank
    takes its local rank's)."""
    if "webgpu" not in found.backends:
        return []
    try:
        from anneal_wgpu import adapters
    except ImportError:
        return []
    return [{"device": f"webgpu:{i}", "name": a.summary, "software": a.software}
            for i, a in enumerate(adapters.describe().adapters)]  # fmt: skip


@click.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def devices(as_json: bool) -> None:
    """List the registered backends, whether each is available, and what `auto` picks."""
    report = devices_report()
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    if not report["backends"]:
        click.echo("no backends registered (install anneal-cpu or anneal-wgpu, or check ANNEAL_LOAD_PLUGINS)")
    else:
        rows = [["DEVICE", "AVAILABLE", "PLUGIN", "DETAIL"]]
        for b in report["backends"]:
            available = ("yes (software)" if b["software"] else "yes") if b["available"] else "no"
            rows.append([b["name"], available, b["plugin"], b["detail"] or b["summary"]])
        click.echo(_table(rows))
    if report["adapters"]:
        click.echo(_table([["ADAPTER", "NAME"]] + [[a["device"], a["name"]] for a in report["adapters"]]))
    click.echo(report["auto"]["note"])

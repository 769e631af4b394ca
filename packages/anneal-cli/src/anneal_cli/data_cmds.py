"""`anneal download <asset>` and `anneal cache`: the pinned datasets and weights on disk."""

from __future__ import annotations

import json
from typing import Any

import click

from anneal import data
from anneal_cli.errors import CommandError
from anneal_ir.settings import Settings


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def _assets(names: tuple[str, ...], param: str) -> list[data.Asset]:
    try:
        return data.resolve(names)
    except data.UnknownAssetError as exc:
        raise click.BadParameter(
            f"unknown asset {exc.name!r}; choose from: {', '.join(data.names())}", param_hint=param
        ) from None


def _settings() -> Settings:
    try:
        return Settings.from_env()
    except ValueError as exc:
        raise CommandError(str(exc)) from None


@click.command()
@click.argument("assets", nargs=-1, required=True, metavar="ASSET...")
@click.option(
    "--mirror", metavar="URL", help="Download <URL>/<file> instead of the pinned URLs (default: ANNEAL_MIRROR)."
)
def download(assets: tuple[str, ...], mirror: str | None) -> None:
    """Download pinned datasets or weights into the cache, verified by size and sha256.

    ASSET is an asset name, `gpt2` (weights, vocab and merges) or `all`; `anneal cache`
    lists them. An interrupted download resumes where it stopped.
    """
    selected = _assets(assets, "ASSET")
    settings = _settings()
    width = max(len(a.name) for a in selected)
    for asset in selected:
        had = data.status(asset, settings, verify=True).state == "ok"
        try:
            path = data.fetch(asset.name, settings=settings, base_url=mirror)
        except data.DataError as exc:
            raise CommandError(" ".join(str(exc).split())) from exc
        # one line per asset as it completes, so a later failure still shows what is done
        state = "cached" if had else "downloaded"
        click.echo(f"{asset.name:<{width}}  {state:<10}  {data.human_size(asset.size):>8}  {path}")


def cache_report(settings: Settings, verify: bool) -> dict[str, Any]:
    root, source = data.cache_root(settings)
    entries = []
    for asset in data.ASSETS.values():
        st = data.status(asset, settings, verify=verify)
        entries.append(
            {
                "name": asset.name,
                "state": st.state,
                "path": str(st.path),
                "size": st.size,
                "expected_size": asset.size,
                "sha256": asset.sha256,
                "verified": st.verified,
                "detail": st.detail,
                "url": asset.url,
            }
        )
    return {"cache_dir": str(root), "data_dir": str(data.data_dir(settings)), "source": source, "assets": entries}


@click.command("cache")
@click.option("--verify", is_flag=True, help="Rehash every cached file (sha256); exit 1 if one is corrupt.")
@click.option(
    "--clear",
    "clear_what",
    is_flag=False,
    flag_value="all",
    default=None,
    metavar="[ASSET]",
    help="Delete the cached file and partial download of ASSET (a name, `gpt2` or `all`; alone: all).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def cache(verify: bool, clear_what: str | None, as_json: bool) -> None:
    """Show the cache of pinned assets: path, size and state (ok, missing, partial, corrupt).

    Without --verify, `ok` means the size matches; --verify also checks the sha256.
    """
    settings = _settings()
    if clear_what is not None:
        selected = _assets((clear_what,), "--clear")
        removed_any = False
        for asset in selected:
            try:
                removed = data.clear(asset, settings)
            except data.DataError as exc:
                raise CommandError(str(exc)) from exc
            for path in removed:
                click.echo(f"removed {path}")
            removed_any = removed_any or bool(removed)
        if not removed_any:
            click.echo(f"nothing to remove in {data.data_dir(settings)}")
        return
    report = cache_report(settings, verify)
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        click.echo(f"cache: {report['data_dir']} (from {report['source']})")
        rows = [["ASSET", "STATE", "SIZE", "PATH"]]
        for e in report["assets"]:
            expected = data.human_size(e["expected_size"])
            size = expected if e["state"] in ("ok", "missing") else f"{data.human_size(e['size'])} of {expected}"
            note = f"  ({e['detail']})" if e["state"] == "corrupt" else ""
            rows.append([e["name"], e["state"], size, e["path"] + note])
        click.echo(_table(rows))
        if not verify:
            click.echo("`ok`: the size matches; `anneal cache --verify` also checks the sha256")
    corrupt = [e["name"] for e in report["assets"] if e["state"] == "corrupt"]
    if verify and corrupt:
        raise CommandError(
            f"corrupt in the cache: {', '.join(corrupt)}; `anneal download <asset>` downloads them again"
        )

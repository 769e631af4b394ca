"""`anneal download <asset>` and `anneal cache`: the pinned datasets and weights on disk.

Both show only the assets that an installed model or dataset reads (`Asset.users` against the
registered plugins); `anneal cache --clear` may still remove any asset's files.
"""

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


def installed_assets() -> list[data.Asset]:
    """The assets a registered model or dataset reads, in table order."""
    from anneal.registry import plugins

    loaded = plugins()
    return data.used([*loaded.models, *loaded.datasets])


def _choices(assets: list[data.Asset]) -> list[str]:
    have = {a.name for a in assets}
    groups = [g for g, members in data.GROUPS.items() if have.issuperset(members)]
    return [*(a.name for a in assets), *groups, "all"]


def _assets(names: tuple[str, ...], param: str, *, installed_only: bool = True) -> list[data.Asset]:
    """The assets `names` stand for; `all` is every installed one (with installed_only) or every one in the table."""
    usable = installed_assets() if installed_only else list(data.ASSETS.values())
    if not usable:
        raise click.UsageError("no installed model reads a pinned asset (is anneal-models installed? `anneal plugins`)")
    try:
        chosen = data.resolve(n for n in names if n != "all")
    except data.UnknownAssetError as exc:
        raise click.BadParameter(
            f"unknown asset {exc.name!r}; choose from: {', '.join(_choices(usable))}", param_hint=param
        ) from None
    unused = [a for a in chosen if a not in usable]
    if unused:
        a = unused[0]
        raise click.BadParameter(f"{a.name!r} is read by no installed model (it is for {', '.join(a.users)}); "
                                 f"choose from: {', '.join(_choices(usable))}", param_hint=param)  # fmt: skip
    wanted = {a.name for a in chosen} | ({a.name for a in usable} if "all" in names else set())
    return [a for a in usable if a.name in wanted]


def _settings() -> Settings:
    try:
        return Settings.from_env()
    except ValueError as exc:
        raise CommandError(str(exc)) from None


@click.command()
@click.argument("assets", nargs=-1, required=True, metavar="ASSET...")
@click.option(
    "--mirror",
    metavar="URL",
    callback=lambda ctx, param, value: check_mirror(value),
    help="Download <URL>/<file> instead of the pinned URLs: http(s)://, file:///FOLDER or a folder laid out like "
    "the cache (default: ANNEAL_MIRROR).",
)
def download(assets: tuple[str, ...], mirror: str | None) -> None:
    """Download pinned datasets or weights into the cache, verified by size and sha256.

    ASSET is an asset name, `gpt2` (weights, vocab and merges) or `all` (what the installed
    models read); `anneal cache` lists them. An interrupted download resumes where it stopped.
    """
    selected = _assets(assets, "ASSET")
    settings = _settings()
    if mirror is None and settings.mirror:
        try:
            data.mirror_source(settings.mirror)
        except data.MirrorError as exc:
            raise CommandError(f"ANNEAL_MIRROR: {exc}") from None
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


def check_mirror(value: str | None) -> str | None:
    """--mirror as a usage error when it is not an http(s) URL, a file:/// URL or an existing folder."""
    if value is not None:
        try:
            data.mirror_source(value)
        except data.MirrorError as exc:
            raise click.BadParameter(str(exc), param_hint="--mirror") from None
    return value


def cache_report(settings: Settings, verify: bool, assets: list[data.Asset] | None = None) -> dict[str, Any]:
    """The cache's state as JSON-ready data: of `assets` (default: those the installed models read)."""
    root, source = data.cache_root(settings)
    entries = []
    for asset in installed_assets() if assets is None else assets:
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
        selected = _assets((clear_what,), "--clear", installed_only=False)  # files of an uninstalled model too
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
    if not report["assets"] and not as_json:
        click.echo("no installed model reads a pinned asset (is anneal-models installed? `anneal plugins`)")
        return
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

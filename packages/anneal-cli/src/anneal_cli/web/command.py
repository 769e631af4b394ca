"""`anneal web [ADDR]`: the local studio, on 127.0.0.1 unless told otherwise (and then only with a token)."""

from __future__ import annotations

import webbrowser
from pathlib import Path
from typing import Any

import click

from anneal_cli.errors import CommandError

DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8766


def parse_address(addr: str | None) -> tuple[str, int]:
    """`HOST:PORT`, `HOST` or `PORT` (an empty part takes the default)."""
    if not addr:
        return DEFAULT_HOST, DEFAULT_PORT
    host, _, port = addr.rpartition(":") if ":" in addr else ((addr, "", "") if not addr.isdigit() else ("", "", addr))
    try:
        number = int(port) if port else DEFAULT_PORT
    except ValueError:
        raise click.BadParameter(f"{addr!r}: the port must be a number (HOST:PORT)", param_hint="ADDR") from None
    if not 0 <= number <= 65535:
        raise click.BadParameter(f"{addr!r}: the port must be 0-65535", param_hint="ADDR")
    return host or DEFAULT_HOST, number


@click.command()
@click.argument("addr", required=False)
@click.option("--runs", "runs_root", type=click.Path(file_okay=False, path_type=Path), default=Path("runs"),
              show_default=True, help="The folder of run folders the studio lists and trains into.")  # fmt: skip
@click.option("--allow-remote", is_flag=True,
              help="Serve on a non-loopback ADDR; every request then needs the printed random token.")  # fmt: skip
@click.option("--no-open", is_flag=True, help="Do not open a browser; print the address.")
def web(addr: str | None, runs_root: Path, allow_remote: bool, no_open: bool) -> None:
    """The studio: studio, visualize, kernels, explain, train, generate, history and doctor views."""
    from anneal_cli.viz.command import step_document
    from anneal_cli.viz.server import bind
    from anneal_cli.web.app import studio_app
    from anneal_cli.web.security import Guard, is_loopback

    host, port = parse_address(addr)
    remote = not is_loopback(host)
    if remote and not allow_remote:
        raise click.UsageError(f"{host} is not a loopback address: the studio would be reachable from other "
                               "machines; pass --allow-remote to serve it there (with a random token)")  # fmt: skip
    guard = Guard(runs_root, token=Guard.new_token() if remote else None)
    try:
        sock = bind(port, host)
    except OSError as exc:
        raise CommandError(str(exc)) from None
    bound = sock.getsockname()[1]
    # the page's own origin: the address it was opened at (a loopback studio may be opened either way)
    aliases = set() if remote else {f"http://localhost:{bound}", f"http://127.0.0.1:{bound}"}
    guard.origins = {f"http://{host}:{bound}"} | aliases

    def document(model: str, preset: str | None) -> dict[str, Any]:
        return step_document(model, preset, "auto", True, ())

    app = studio_app(guard, document)
    url = f"http://{host}:{bound}/studio" + (f"?token={guard.token}" if guard.token else "")
    click.echo(f"anneal web: the studio at {url} (runs in {runs_root}; Ctrl-C stops)")
    if not no_open:
        webbrowser.open(url)
    from anneal_cli.viz.server import serve

    try:
        serve(app, sock)
    except KeyboardInterrupt:
        pass
    finally:
        app.state.jobs.stop_all()

"""`anneal viz [MODEL]`: one training step of MODEL, as the real compiler built it, in the browser."""

from __future__ import annotations

import webbrowser
from pathlib import Path
from typing import Any

import click

from anneal.registry import AUTO
from anneal_cli.errors import CommandError
from anneal_cli.inspect_cmds import SET, build_trainer
from anneal_cli.runs import atomic_write
from anneal_cli.train import PRESETS

DEFAULT_PORT = 8765


def step_document(
    model: str, preset: str | None, device: str, backward: bool, settings: tuple[str, ...]
) -> dict[str, Any]:
    """Build, schedule and compile one step of MODEL under a compile trace; the page's data."""
    from anneal.step_record import record_step

    trainer, resolved = build_trainer(model, preset, device, settings)

    def build() -> tuple[list[Any], list[Any]]:
        step = trainer.graph(backward)
        return step.forward, step.backward

    title = f"{model} ({preset or 'default'} preset{', with gradients' if backward else ''})"
    return record_step(build, resolved, getattr(trainer, "model", None), title)


@click.command()
@click.argument("model", default="mlp")
@click.option("--backward", is_flag=True, help="Include the gradients (and kernels fused across the seam).")
@click.option("--preset", type=click.Choice(PRESETS), help="Model size [default: the model's default].")
@click.option("--device", default=AUTO, show_default=True, help="Whose kernels are compiled and shown.")
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True,
              help="The port on 127.0.0.1 (0: any free one).")  # fmt: skip
@click.option("--no-open", is_flag=True, help="Do not open a browser; print the address.")
@click.option("--export", "export", type=click.Path(dir_okay=False, path_type=Path),
              help="Write one self-contained HTML file (the same views, no server) and exit.")  # fmt: skip
@SET
def viz(model: str, backward: bool, preset: str | None, device: str, port: int, no_open: bool,
        export: Path | None, settings: tuple[str, ...]) -> None:  # fmt: skip
    """Draw one step of MODEL: its graph by module, the pass timeline, its kernels and their source."""
    from anneal_cli.viz.page import render_page

    document = step_document(model, preset, device, backward, settings)
    summary = (f"{len(document['main'])} nodes, {len(document['kernels'])} kernels, "
               f"{len(document['passes'])} passes")  # fmt: skip
    if export is not None:
        if not export.parent.is_dir():
            raise click.BadParameter(f"folder {str(export.parent)!r} does not exist", param_hint="--export")
        atomic_write(export, render_page(document).encode("utf-8"))
        click.echo(f"anneal viz: wrote {export} ({summary}); open it in a browser, no server needed")
        return
    from anneal_cli.viz.server import LOOPBACK, bind, serve, viz_app

    try:
        sock = bind(port)
    except OSError as exc:
        raise CommandError(str(exc)) from None
    url = f"http://{LOOPBACK}:{sock.getsockname()[1]}/"
    click.echo(f"anneal viz: {document['title']}: {summary} at {url} (Ctrl-C stops)")
    if not no_open:
        webbrowser.open(url)
    try:
        serve(viz_app(document), sock)
    except KeyboardInterrupt:
        pass

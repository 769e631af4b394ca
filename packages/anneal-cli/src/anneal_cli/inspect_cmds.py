"""`anneal graph`, `anneal kernels` and `anneal explain`: the compiler's own data, printed."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import click

from anneal.registry import AUTO, get_backend, resolve_device
from anneal_cli.train import PRESETS, check_device, find_model, make_config, parse_settings

SET = click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="A setting of the model, as `anneal train --set` (meanflow: --set jvp=false).",
)


def build_trainer(model: str, preset: str | None, device: str, settings: tuple[str, ...] = ()) -> tuple[Any, str]:
    """MODEL's trainer on device (resolved: `auto` becomes a backend), for commands that look at its step."""
    entry = find_model(model)
    check_device(device)
    resolved, _ = resolve_device(device)
    resolved, _ = get_backend(resolved)
    trainer = entry.build(make_config(entry, preset, parse_settings(entry, settings)), resolved)
    if not callable(getattr(trainer, "graph", None)):
        raise click.UsageError(f"model {model!r} does not expose its step graph (its trainer has no graph())")
    return trainer, resolved


def _step_graph(model: str, preset: str | None, device: str, backward: bool,
                settings: tuple[str, ...] = ()) -> tuple[Any, str]:  # fmt: skip
    trainer, resolved = build_trainer(model, preset, device, settings)
    return trainer.graph(backward), resolved


@click.command()
@click.argument("model")
@click.option("--backward", is_flag=True, help="Include the gradients (backward nodes are marked).")
@click.option("--json", "as_json", is_flag=True, help="One JSON array of nodes.")
@click.option("--preset", type=click.Choice(PRESETS), help="Model size [default: the model's default].")
@click.option("--device", default=AUTO, show_default=True, help="Where the model's tensors live.")
@SET
def graph(
    model: str, backward: bool, as_json: bool, preset: str | None, device: str, settings: tuple[str, ...]
) -> None:
    """The UOp DAG of one training step of MODEL, one line per node (--backward: with the gradients, marked)."""
    from anneal.introspect import graph_rows, row_text

    step, _ = _step_graph(model, preset, device, backward, settings)
    rows = graph_rows(step.forward, step.backward)
    if as_json:
        click.echo(json.dumps([asdict(r) for r in rows]))
        return
    for r in rows:
        click.echo(row_text(r))
    n_bwd = sum(r.phase == "backward" for r in rows)
    click.echo(f"{len(rows)} nodes ({len(rows) - n_bwd} forward, {n_bwd} backward)")


@click.command()
@click.argument("model")
@click.option("--backward", is_flag=True, help="Include the gradients; kernels fused across the seam are marked.")
@click.option(
    "--device", default=AUTO, show_default=True, help="The backend whose source is shown (cpu: C stages or numpy)."
)
@click.option("--preset", type=click.Choice(PRESETS), help="Model size [default: the model's default].")
@click.option("--no-source", is_flag=True, help="Only the one-line summaries.")
@SET
def kernels(model: str, backward: bool, device: str, preset: str | None, no_source: bool,
            settings: tuple[str, ...]) -> None:  # fmt: skip
    """Each scheduled kernel of one step of MODEL: its opts and generated source."""
    from anneal.introspect import kernel_rows

    step, resolved = _step_graph(model, preset, device, backward, settings)
    rows = kernel_rows(step.forward, step.backward, resolved)
    for r in rows:
        click.echo(f"{r.name}  [{r.phase}]  {r.fused_ops} ops  out: {r.output}  in: {', '.join(r.inputs) or '-'}")
        click.echo(f"  opts: {r.opts}")
        if not no_source:
            click.echo(r.source)
    seam = sum(r.phase == "forward+backward" for r in rows)
    click.echo(f"{len(rows)} kernels on {resolved}; {seam} fused across the forward/backward seam")


@click.command()
@click.argument("op")
def explain(op: str) -> None:
    """What OP means to the compiler. A UOp op (exp2, mul, reduce_axis, ...): its rewrite, gradient and tangent
    rules, printed from the real rule tables. A Tensor method or anneal.nn.functional name (matmul, softmax,
    conv2d, embedding, ...; F.NAME or Tensor.NAME picks one where both exist): the UOp graph it lowers to, traced
    on a small example call."""
    from anneal.introspect import explain as explain_op
    from anneal.introspect import row_text

    try:
        found = explain_op(op)
    except KeyError as exc:  # not a name it knows, or one that builds no graph: it says why
        raise click.UsageError(str(exc.args[0])) from None
    if found.example:
        inputs = f" ({found.inputs})" if found.inputs else ""
        click.echo(f"== {found.example} lowers to {len(found.lowering)} UOps{inputs}")
        for r in found.lowering:
            click.echo(row_text(r))
        click.echo(f"its ops: {', '.join(found.primitives)} (anneal explain OP shows an op's rules)")
        click.echo("")
    for table, rules in found.tables.items():
        click.echo(f"== {table}: {len(rules)} rule(s) for {found.op}")
        for text in rules:
            click.echo(text)
            click.echo("")

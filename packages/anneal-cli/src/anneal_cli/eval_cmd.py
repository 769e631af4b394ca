"""`anneal eval <model> --checkpoint RUN [--dataset]`: the test accuracy of a saved classifier run."""

from __future__ import annotations

import json
from pathlib import Path

import click

from anneal.registry import AUTO, get_backend, resolve_device
from anneal_cli.runs import read_run
from anneal_cli.train import check_dataset, check_device, find_model, load_checkpoint


@click.command("eval")
@click.argument("model")
@click.option("--checkpoint", "where", required=True, type=click.Path(exists=True, path_type=Path),
              help="A run folder written by `anneal train --out`, or its checkpoint.safetensors.")  # fmt: skip
@click.option("--dataset", help="Test on another dataset than the run's (images of the same shape).")
@click.option("--device", default=AUTO, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="The report as one JSON object.")
def evaluate(model: str, where: Path, dataset: str | None, device: str, as_json: bool) -> None:
    """Test accuracy (overall and per class) of MODEL trained in a run folder."""
    entry = find_model(model)
    check_device(device)
    check_dataset(entry, dataset)
    saved = read_run(where if where.is_dir() else where.parent, entry.name)
    config = dict(saved.config)
    trained_on = config.get("dataset")
    if dataset is not None:
        config["dataset"] = dataset
    resolved, _ = resolve_device(device)
    resolved, _ = get_backend(resolved)
    trainer = entry.build(config, resolved)
    if not callable(getattr(trainer, "report", None)):
        raise click.UsageError(f"model {model!r} is not a classifier (its trainer has no report()); "
                               f"`anneal sample` generates from language models")  # fmt: skip
    other = dataset not in (None, trained_on)  # shapes that differ: another dataset's images or classes
    load_checkpoint(
        trainer, saved, f"; it was trained on {trained_on}, which {dataset} does not match" if other else ""
    )
    report = trainer.report()
    click.echo(json.dumps(report) if as_json else trainer.report_text(report))

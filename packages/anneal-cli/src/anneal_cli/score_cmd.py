"""`anneal score RUN`: FD-resnet9-digits of a generative run's samples (anneal_models.score)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from anneal.registry import AUTO, get_backend, resolve_device
from anneal_cli.params import FiniteFloat
from anneal_cli.runs import SavedRun, read_run
from anneal_cli.train import DATA_OPTION, MIRROR_OPTION, check_device, command_data, find_model, load_checkpoint
from anneal_ir.plugins import ModelEntry


@click.command()
@click.argument("run", type=click.Path(exists=True, path_type=Path))
@click.option("--samples", type=click.IntRange(min=20), default=500, show_default=True,
              help="How many samples to draw and score.")  # fmt: skip
@click.option("--steps", type=int, help="Sampling steps [default: the run's].")
@click.option("--cfg", type=FiniteFloat(), help="Classifier-free guidance weight [default: the run's].")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--device", default=AUTO, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="The scores as one JSON object.")
@DATA_OPTION
@MIRROR_OPTION
def score(run: Path, samples: int, steps: int | None, cfg: float | None, seed: int, device: str, as_json: bool,
          data_path: Path | None, mirror: str | None) -> None:  # fmt: skip
    """Score samples of the image generator trained in RUN with anneal's digits classifier: the share recognized
    as the class asked for, the class histogram, and FD-resnet9-digits (a Frechet distance of its features; not
    FID)."""
    check_device(device)
    saved = read_run(run if run.is_dir() else run.parent)
    entry = find_model(saved.model)
    with command_data("score", saved.model, dict(saved.config), data_path, mirror):
        result = _score(run, saved, entry, samples, steps, cfg, seed, device)
    if as_json:
        click.echo(json.dumps({"model": saved.model, "step": saved.step, **result}))
        return
    from anneal_models.score import line

    click.echo(f"{saved.model} at step {saved.step}, {samples} samples (seed {seed})")
    click.echo(line({"step": saved.step, **result}))


def _score(run: Path, saved: SavedRun, entry: ModelEntry, samples: int, steps: int | None, cfg: float | None, seed: int,
           device: str) -> dict[str, Any]:  # fmt: skip
    resolved, _ = resolve_device(device)
    resolved, _ = get_backend(resolved)
    trainer = entry.build(dict(saved.config), resolved)
    if not callable(getattr(trainer, "score", None)):
        raise click.UsageError(f"{run} is a run of {saved.model}, which does not generate images to score")
    try:
        trainer.check_sampling(None, steps, cfg)
        load_checkpoint(trainer, saved)
        result = trainer.score(samples, seed=seed, steps=steps, cfg=cfg)
    except ValueError as exc:  # a run on another dataset than digits, --steps out of range, ...
        raise click.UsageError(str(exc)) from None
    return dict(result)

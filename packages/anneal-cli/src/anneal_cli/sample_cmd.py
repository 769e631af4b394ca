"""`anneal sample <model> --checkpoint RUN`: generate from a trained run (a run folder or its checkpoint)."""

from __future__ import annotations

from pathlib import Path

import click

from anneal.registry import AUTO, get_backend, resolve_device
from anneal_cli.runs import read_run
from anneal_cli.train import check_device, find_model


@click.command()
@click.argument("model")
@click.option("--checkpoint", "where", required=True, type=click.Path(exists=True, path_type=Path),
              help="A run folder written by `anneal train --out`, or its checkpoint.safetensors.")  # fmt: skip
@click.option("--prompt", default="\n", show_default=True, help="Text the sample continues.")
@click.option("--max-tokens", type=click.IntRange(min=1), default=500, show_default=True)
@click.option("--temperature", type=click.FloatRange(min=0, min_open=True), help="[default: the run's]")
@click.option("--top-k", type=click.IntRange(min=1), help="[default: the run's]")
@click.option("--greedy", is_flag=True, help="Always the most likely token (top-k 1).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--device", default=AUTO, show_default=True)
def sample(model: str, where: Path, prompt: str, max_tokens: int, temperature: float | None, top_k: int | None,
           greedy: bool, seed: int, device: str) -> None:  # fmt: skip
    """Generate text from MODEL trained in a run folder."""
    entry = find_model(model)
    check_device(device)
    saved = read_run(where if where.is_dir() else where.parent, entry.name)
    config = dict(saved.config)
    if temperature is not None:
        config["temperature"] = temperature
    if top_k is not None or greedy:
        config["top_k"] = 1 if greedy else top_k
    resolved, _ = resolve_device(device)
    resolved, _ = get_backend(resolved)
    trainer = entry.build(config, resolved)
    if not callable(getattr(trainer, "sample", None)):
        raise click.UsageError(f"model {model!r} does not generate text (its trainer has no sample())")
    trainer.load_state_dict(saved.state)
    try:
        text = trainer.sample(prompt, max_tokens, seed)
    except ValueError as exc:  # e.g. a prompt character outside the model's vocabulary
        raise click.UsageError(str(exc)) from None
    click.echo(text)

"""`anneal sample <model> --checkpoint RUN`: generate from a trained run (a run folder or its checkpoint).

Language models print text (--prompt, --max-tokens, --temperature, --top-k, --greedy); image generators
(diffusion, dit, meanflow) write a labelled PNG grid (--out, --class, --steps, --cfg, --per-row). A model that
reads its dataset to sample (nanogpt: its vocabulary) takes --data and --mirror as `anneal train` does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from anneal.registry import AUTO, get_backend, plugins, resolve_device
from anneal_cli.params import FiniteFloat
from anneal_cli.runs import SavedRun, atomic_write, read_run
from anneal_cli.train import DATA_OPTION, MIRROR_OPTION, check_device, command_data, find_model, load_checkpoint
from anneal_ir.plugins import ModelEntry

TEXT_ONLY = ("prompt", "max_tokens", "temperature", "top_k", "greedy")
IMAGE_ONLY = ("out", "label", "steps", "cfg", "per_row")


@click.command()
@click.argument("model")
@click.option("--checkpoint", "where", required=True, type=click.Path(exists=True, path_type=Path),
              help="A run folder written by `anneal train --out`, or its checkpoint.safetensors.")  # fmt: skip
@click.option("--prompt", help="Text the sample continues [default: a newline].")
@click.option("--max-tokens", type=click.IntRange(min=1), help="Tokens to generate [default: 500].")
@click.option("--temperature", type=FiniteFloat(min=0, min_open=True), help="[default: the run's]")
@click.option("--top-k", type=click.IntRange(min=1), help="[default: the run's]")
@click.option("--greedy", is_flag=True, default=None, help="Always the most likely token (top-k 1).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Image models: the PNG grid to write.")
@click.option("--class", "label", type=int, help="Image models: sample this class only [default: every class].")
@click.option("--steps", type=int, help="Image models: sampling steps [default: the run's].")
@click.option("--cfg", type=FiniteFloat(), help="Image models: classifier-free guidance weight [default: the run's].")
@click.option("--per-row", type=click.IntRange(min=1), default=8, show_default=True,
              help="Image models: samples per class (a row each).")  # fmt: skip
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--device", default=AUTO, show_default=True)
@DATA_OPTION
@MIRROR_OPTION
def sample(model: str, where: Path, seed: int, device: str, data_path: Path | None, mirror: str | None,
           **options: Any) -> None:  # fmt: skip
    """Generate from MODEL trained in a run folder: text, or a PNG grid of images."""
    entry = find_model(model)
    check_device(device)
    saved = read_run(where if where.is_dir() else where.parent, entry.name)
    with command_data("sample", entry.name, dict(saved.config), data_path, mirror):
        _sample(model, entry, saved, seed, device, options)


def _sample(model: str, entry: ModelEntry, saved: SavedRun, seed: int, device: str, options: dict[str, Any]) -> None:
    config = dict(saved.config)
    resolved, _ = resolve_device(device)
    resolved, _ = get_backend(resolved)
    given = {k for k, v in options.items() if v is not None and k != "per_row"}
    if options["temperature"] is not None:
        config["temperature"] = options["temperature"]
    if options["top_k"] is not None or options["greedy"]:
        config["top_k"] = 1 if options["greedy"] else options["top_k"]
    if not entry.samples:
        raise click.UsageError(f"model {model!r} does not generate; models that do: {', '.join(generating())}")
    trainer = entry.build(config, resolved)
    if entry.samples == "images":
        _usage_unless_none(model, given & set(TEXT_ONLY), "generates images")
        if options["out"] is None:
            raise click.UsageError(f"{model} writes a PNG grid: pass --out FILE.png")
        label, steps, cfg = options["label"], options["steps"], options["cfg"]
        try:
            trainer.check_sampling(label, steps, cfg)
            load_checkpoint(trainer, saved)
            png = trainer.sample_grid(options["per_row"], label=label, steps=steps, cfg=cfg, seed=seed)
        except ValueError as exc:  # SampleError: --steps beyond the model's diffusion steps, ...
            raise click.UsageError(str(exc)) from None
        out: Path = options["out"]
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(out, png)
        click.echo(f"wrote {options['out']}")
        return
    _usage_unless_none(model, given & set(IMAGE_ONLY), "generates text")
    load_checkpoint(trainer, saved)
    try:
        text = trainer.sample(options["prompt"] or "\n", options["max_tokens"] or 500, seed)
    except ValueError as exc:  # e.g. a prompt character outside the model's vocabulary
        raise click.UsageError(str(exc)) from None
    click.echo(text)


def generating() -> list[str]:
    """The registered models `anneal sample` can generate from."""
    return sorted(name for name, entry in plugins().models.items() if entry.samples)


def _usage_unless_none(model: str, options: set[str], what: str) -> None:
    if options:
        flags = ", ".join("--" + ("class" if o == "label" else o.replace("_", "-")) for o in sorted(options))
        raise click.UsageError(f"{model} {what}: {flags} do not apply to it")

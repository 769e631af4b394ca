"""`anneal train <model>`: resolve the model and the device, build, run the loop."""

from __future__ import annotations

from typing import Any

import click

from anneal.registry import AUTO, backend_names, get_backend, resolve_device
from anneal.registry import plugins as loaded_plugins
from anneal_cli import loop
from anneal_cli.errors import CommandError
from anneal_ir.plugins import ModelEntry

PRESETS = ("tiny", "small", "full")
DEFAULT_PRESET = "small"  # PRODUCT.md: small is the default, when a model defines it
FALLBACKS = {"steps": 100, "seed": 0}  # for models whose defaults leave them out


def find_model(name: str) -> ModelEntry:
    models = loaded_plugins().models
    if name not in models:
        known = ", ".join(sorted(models)) or "none (is anneal-models installed?)"
        raise click.UsageError(f"unknown model {name!r}; known models: {known}")
    return models[name]


def make_config(entry: ModelEntry, preset: str | None, flags: dict[str, Any]) -> dict[str, Any]:
    """Fallbacks < the model's defaults < its preset < the flags actually given."""
    if preset is not None and preset not in entry.presets:
        have = ", ".join(entry.presets) or "none"
        raise click.UsageError(f"model {entry.name!r} has no preset {preset!r} (its presets: {have})")
    chosen = preset or (DEFAULT_PRESET if DEFAULT_PRESET in entry.presets else None)
    config: dict[str, Any] = {**FALLBACKS, **entry.defaults}
    if chosen is not None:
        config.update(entry.presets[chosen])
        config["preset"] = chosen
    config.update({k: v for k, v in flags.items() if v is not None})
    return config


def check_device(name: str) -> None:
    if name != AUTO and name not in backend_names():
        known = ", ".join(backend_names()) or "none"
        raise click.BadParameter(f"unknown device {name!r}; registered backends: {known}", param_hint="--device")


@click.command()
@click.argument("model")
@click.option("--device", default=AUTO, show_default=True, help="auto, cpu, webgpu or a plugin's backend.")
@click.option("--steps", type=click.IntRange(min=1), help="Training steps.")
@click.option("--lr", type=click.FloatRange(min=0, min_open=True), help="Learning rate.")
@click.option("--batch", type=click.IntRange(min=1), help="Batch size.")
@click.option("--seed", type=int, help="Random seed.")
@click.option("--preset", type=click.Choice(PRESETS), help="Model size: tiny (seconds), small (default), full.")
@click.option("--log-every", type=click.IntRange(min=1), help="Log every N steps [default: steps/10].")
@click.option("--plain", is_flag=True, help="One line per logged step (the only output mode so far).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per logged step on stdout.")
def train(
    model: str,
    device: str,
    steps: int | None,
    lr: float | None,
    batch: int | None,
    seed: int | None,
    preset: str | None,
    log_every: int | None,
    plain: bool,
    as_json: bool,
) -> None:
    """Train MODEL; hyperparameters default per model, a flag overrides only what it names."""
    del plain  # no dashboard yet: output is always plain lines (or JSON)
    entry = find_model(model)
    check_device(device)
    config = make_config(entry, preset, {"steps": steps, "lr": lr, "batch": batch, "seed": seed})
    resolved, note = resolve_device(device)
    resolved, _backend = get_backend(resolved)  # create it now, so a broken device fails first

    info = lambda text: click.echo(text, err=as_json)  # noqa: E731 - JSON mode keeps stdout for records
    settings = "  ".join(f"{k} {config[k]}" for k in ("preset", "steps", "batch", "lr", "seed") if k in config)
    info(f"model {entry.name}  device {resolved}  {settings}")
    if note:
        info(note)

    trainer = entry.build(dict(config), resolved)
    emit = (lambda r: click.echo(loop.json_line(r))) if as_json else (lambda r: click.echo(loop.plain_line(r)))
    total = int(config["steps"])
    try:
        loop.run(trainer, total, log_every=log_every or loop.default_log_every(total), lr=config.get("lr"), emit=emit)
    except loop.NonFiniteLoss as exc:
        raise CommandError(str(exc)) from exc
    finish = getattr(trainer, "finish", None)
    text = finish() if callable(finish) else None
    if text:
        info(str(text))

"""`anneal gpt2 sample PROMPT`: GPT-2 from the real weights (or a Hugging Face folder), streamed token by token."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import BinaryIO

import click

from anneal.registry import AUTO, get_backend, resolve_device
from anneal_cli.errors import CommandError
from anneal_cli.params import FiniteFloat
from anneal_cli.train import check_device, naming_own_flag


@click.group()
def gpt2() -> None:
    """GPT-2 small from the pinned Hugging Face weights."""


@gpt2.command("sample")
@click.argument("prompt")
@click.option("--max-tokens", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--temperature", type=FiniteFloat(min=0, min_open=True), default=1.0, show_default=True)
@click.option("--top-k", type=click.IntRange(min=1), help="Sample among the k most likely tokens.")
@click.option("--top-p", type=FiniteFloat(min=0, max=1, min_open=True),
              help="Sample among the most likely tokens whose probabilities reach p (nucleus sampling).")  # fmt: skip
@click.option("--greedy", is_flag=True, help="Always the most likely token.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--weights", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="A Hugging Face GPT-2 folder: config.json, model.safetensors [default: the pinned].")  # fmt: skip
@click.option("--dtype", type=click.Choice(["float32", "float16", "bfloat16"]), default="float32", show_default=True,
              help="The weights' storage dtype (activations stay float32).")  # fmt: skip
@click.option("--device", default=AUTO, show_default=True)
def sample(prompt: str, max_tokens: int, temperature: float, top_k: int | None, top_p: float | None, greedy: bool,
           seed: int, weights: Path | None, dtype: str, device: str) -> None:  # fmt: skip
    """Continue PROMPT with GPT-2; tokens are printed as they come, and it stops at <|endoftext|>."""
    from anneal_models import gpt2 as model

    if not prompt:
        raise click.BadParameter("the prompt is empty; GPT-2 needs at least one token to continue", param_hint="PROMPT")
    check_device(device)
    resolved, _ = resolve_device(device)
    resolved, _ = get_backend(resolved)
    # offline without the pinned weights: the hint names --weights (a folder), this command's own copy
    own = "`anneal gpt2 sample --weights DIR` (a Hugging Face GPT-2 folder: config.json, model.safetensors)"
    try:
        with naming_own_flag(own, detail=False):
            net, bpe = model.load(weights, resolved, dtype)
    except model.WeightsError as exc:
        if weights is not None and "not GPT-2" in str(exc):
            raise click.BadParameter(str(exc), param_hint="--weights") from None
        raise CommandError(str(exc)) from None
    ids = bpe.encode(prompt)
    out: BinaryIO = sys.stdout.buffer  # bytes: a token may end inside a UTF-8 character
    out.write(prompt.encode())
    out.flush()
    generator = model.Generator(net, resolved)
    try:
        for token in generator.stream(ids, max_tokens, temperature=0.0 if greedy else temperature, top_k=top_k,
                                      top_p=top_p, seed=seed, stop=bpe.eot):  # fmt: skip
            if token != bpe.eot:
                out.write(bpe.decode([token]))
                out.flush()
    except ValueError as exc:  # the prompt and --max-tokens exceed the model's positions
        raise click.UsageError(str(exc)) from None
    out.write(b"\n")
    out.flush()

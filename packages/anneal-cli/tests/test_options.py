"""Option types: every float option of every command refuses nan and inf as a usage error (exit 2)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from anneal_cli.main import AnnealGroup
from anneal_cli.params import FiniteFloat


def _options(command: click.Command, path: str) -> Iterator[tuple[str, click.Option]]:
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _options(sub, f"{path} {name}".strip())
    for param in command.params:
        if isinstance(param, click.Option):
            yield path, param


def test_every_float_option_is_finite(cli: AnnealGroup) -> None:
    floats = [(path, p) for path, p in _options(cli, "") if isinstance(p.type, click.types.FloatParamType)]
    assert {(path, p.opts[0]) for path, p in floats} >= {
        ("train", "--lr"), ("sample", "--temperature"), ("sample", "--cfg"), ("score", "--cfg"),
        ("gpt2 sample", "--temperature"), ("gpt2 sample", "--top-p"),
    }  # fmt: skip
    assert [f"{path} {p.opts[0]}" for path, p in floats if not isinstance(p.type, FiniteFloat)] == []


@pytest.mark.parametrize("value", ["nan", "inf", "-Infinity"])
@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["sample", "nanogpt", "--checkpoint", "{run}", "--temperature"], "--temperature"),
        (["sample", "diffusion", "--checkpoint", "{run}", "--cfg"], "--cfg"),
        (["score", "{run}", "--cfg"], "--cfg"),
        (["gpt2", "sample", "hello", "--temperature"], "--temperature"),
        (["gpt2", "sample", "hello", "--top-p"], "--top-p"),
    ],
)
def test_non_finite_floats_are_usage_errors(
    cli: AnnealGroup, runner: CliRunner, tmp_path: Path, args: list[str], option: str, value: str
) -> None:
    result = runner.invoke(cli, [a.replace("{run}", str(tmp_path)) for a in args] + [value])
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{option}': {value!r} is not a finite number" in result.stderr
    assert "Usage: " in result.stderr


def test_finite_floats_keep_their_bounds() -> None:
    assert FiniteFloat(min=0, max=1, min_open=True).convert("0.5", None, None) == 0.5
    with pytest.raises(click.BadParameter, match="not in the range"):
        FiniteFloat(min=0, max=1, min_open=True).convert("0", None, None)

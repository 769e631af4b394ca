"""How the CLI fails: usage errors exit 2 (click's own), runtime failures exit 1 in one line."""

from __future__ import annotations

import sys
from typing import IO, Any

import click

# How to add the WebGPU backend: the project's own wheel, by path (README, "Install from the project's wheels");
# a bare `pip install` of our names from the public index can find an unrelated project.
WGPU_WHEEL = "install the project's anneal-wgpu wheel by path: pip install dist/anneal_wgpu-*.whl"


class CommandError(click.ClickException):
    """A runtime failure: printed as one line `anneal: error: ...`, exit code 1."""

    exit_code = 1

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"anneal: error: {self.format_message()}", err=True, file=file)


def one_line(exc: BaseException) -> str:
    """An exception as one line; our own error types carry a complete message already."""
    text = " ".join(str(exc).split())
    registry = sys.modules.get("anneal.registry")  # not imported: exc cannot be a DeviceError
    if registry is not None and isinstance(exc, registry.DeviceError):
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__

"""Option types shared by the commands."""

from __future__ import annotations

import math
from typing import Any

import click


class FiniteFloat(click.FloatRange):
    """A float option that refuses nan and inf (click's FloatRange lets nan through every bound, and inf past a
    lower one): a usage error naming the option. Every float option of the CLI takes this type (a test checks)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):  # before the bounds, so every non-finite value reads the same
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return super().convert(number, param, ctx)

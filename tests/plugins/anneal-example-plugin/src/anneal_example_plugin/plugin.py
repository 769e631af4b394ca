"""One backend, one model and one command, registered the way any third party would."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
import numpy as np

from anneal.registry import get_backend
from anneal_ir.plugins import Availability, hookimpl


class ExampleBackend:
    """A minimal backend: numpy matmul, counting the calls so tests can see it was used."""

    def __init__(self) -> None:
        self.calls = 0

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        self.calls += 1
        return a @ b


class LeastSquaresFit:
    """Fits y = x @ w by gradient descent; the loss falls every step for a small lr."""

    def __init__(self, config: dict[str, Any], device: str) -> None:
        self.device = device
        _, self.backend = get_backend(device)  # the instance the CLI created, not a new one
        rng = np.random.default_rng(config["seed"])
        self.x = rng.normal(size=(config["batch"], 8))
        self.y = self.x @ rng.normal(size=(8, 1))
        self.w = np.zeros((8, 1))
        self.lr = config["lr"]

    def step(self, i: int) -> float:
        matmul = getattr(self.backend, "matmul", np.matmul)
        err = matmul(self.x, self.w) - self.y
        self.w -= self.lr * 2.0 * self.x.T @ err / len(self.x)
        return float(np.mean(err**2))

    def finish(self) -> str:
        calls = getattr(self.backend, "calls", "?")
        return f"example-fit ran on device {self.device} ({type(self.backend).__name__}, {calls} calls)"


@hookimpl
def register_backends(register: Callable[..., None]) -> None:
    register(
        "example",
        ExampleBackend,
        probe=lambda: Availability(True, "numpy matmul, from anneal-example-plugin"),
        summary="the example plugin's backend",
    )


@hookimpl
def register_models(register: Callable[..., None]) -> None:
    register(
        "example-fit",
        build=LeastSquaresFit,
        summary="least-squares fit (plugin test fixture)",
        defaults={"steps": 50, "lr": 0.05, "batch": 64, "seed": 0},
        presets={"tiny": {"steps": 10}, "small": {"steps": 50}},
    )


@hookimpl
def register_commands(cli: Any) -> None:
    @cli.command("example-hello")
    def example_hello() -> None:
        """Say hello from the example plugin."""
        click.echo("hello from anneal-example-plugin")

"""The training step every supervised model shares: forward, backward, update, in one graph.

A model supplies a module, an optimizer, a batch function and a loss; this class runs the
step under anneal.jit (captured on the second call, replayed after), and exposes the lazy
graph of one step for ``anneal graph`` / ``anneal kernels``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from anneal import Tensor
from anneal.jit import jit
from anneal.optim import Optimizer

Batch = tuple[np.ndarray, np.ndarray]


@dataclass
class StepGraph:
    """The lazy tensors of one step: the forward outputs and (optionally) the gradients."""

    forward: list[Tensor]
    backward: list[Tensor]


class SupervisedTrainer:
    def __init__(
        self,
        model: Callable[[Tensor], Tensor],
        params: list[Tensor],
        optimizer: Optimizer,
        batch: Callable[[int], Batch],
        loss: Callable[[Tensor, Tensor], Tensor],
        device: str,
        use_jit: bool = True,
    ) -> None:
        self.model, self.params, self.optimizer = model, params, optimizer
        self.batch, self.loss, self.device = batch, loss, device
        self._step = jit(self._train_step) if use_jit else self._train_step
        self.first_loss: float | None = None
        self.last_loss: float | None = None

    def _tensors(self, i: int) -> tuple[Tensor, Tensor]:
        x, y = self.batch(i)
        return Tensor(x, device=self.device), Tensor(y, device=self.device)

    def _train_step(self, x: Tensor, y: Tensor) -> Tensor:
        self.optimizer.zero_grad()
        loss = self.loss(self.model(x), y)
        loss.backward()
        self.optimizer.step(extra=[loss])  # the loss is computed in the same schedule as the update
        return loss

    def step(self, i: int) -> float:
        value = float(self._step(*self._tensors(i)).item())
        if self.first_loss is None:
            self.first_loss = value
        self.last_loss = value
        return value

    def graph(self, backward: bool) -> StepGraph:
        x, y = self._tensors(0)
        loss = self.loss(self.model(x), y)
        return StepGraph([loss], loss.gradient(*self.params) if backward else [])

    def evaluate(self, x: np.ndarray, y: np.ndarray) -> float:
        return float(self.loss(self.model(Tensor(x, device=self.device)), Tensor(y, device=self.device)).item())

    @property
    def jit(self) -> Any:
        return self._step

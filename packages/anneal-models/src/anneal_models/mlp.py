"""mlp: a small MLP regressing a smooth 2-D function (synthetic data, seeded)."""

from __future__ import annotations

from typing import Any

import numpy as np

from anneal import Tensor, manual_seed
from anneal.nn.modules import Linear, Module
from anneal.optim import Adam
from anneal_models.trainer import SupervisedTrainer

DEFAULTS: dict[str, Any] = {"steps": 500, "batch": 256, "lr": 1e-2, "hidden": 64, "samples": 4096, "seed": 0}
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"steps": 200, "hidden": 32, "batch": 128, "samples": 1024},
    "small": {},
    "full": {"steps": 3000, "hidden": 256, "batch": 1024, "samples": 65536},
}


def target(x: np.ndarray) -> np.ndarray:
    return (np.sin(3 * x[:, :1]) * np.cos(2 * x[:, 1:]) + 0.5 * x[:, :1]).astype(np.float32)


class MLP(Module):
    def __init__(self, hidden: int):
        self.l1, self.l2, self.l3 = Linear(2, hidden), Linear(hidden, hidden), Linear(hidden, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.l3(self.l2(self.l1(x).gelu()).gelu())


def mse(pred: Tensor, y: Tensor) -> Tensor:
    return (pred - y).square().mean()


class MLPTrainer(SupervisedTrainer):
    def __init__(self, config: dict[str, Any], device: str):
        manual_seed(config["seed"])
        rng = np.random.default_rng(config["seed"])
        self.x = rng.uniform(-1, 1, (config["samples"], 2)).astype(np.float32)
        self.y = target(self.x)
        net = MLP(config["hidden"]).to(device)
        params = list(net.parameters())
        batch_size = config["batch"]

        def batch(i: int) -> tuple[np.ndarray, np.ndarray]:
            idx = rng.integers(0, len(self.x), batch_size)
            return self.x[idx], self.y[idx]

        val_x = np.random.default_rng(config["seed"] + 1).uniform(-1, 1, (1024, 2)).astype(np.float32)  # held out
        super().__init__(net, params, Adam(params, lr=config["lr"]), batch, mse, device,
                         val=(val_x, target(val_x)), config=config)  # fmt: skip
        self.initial_eval = self.evaluate(self.x, self.y)

    def finish(self) -> str:
        final = self.evaluate(self.x, self.y)
        return (
            f"mlp: eval loss {self.initial_eval:.4f} -> {final:.5f} "
            f"({100 * final / self.initial_eval:.2f}% of initial; target < 3%)"
        )


def build(config: dict[str, Any], device: str) -> MLPTrainer:
    return MLPTrainer(config, device)

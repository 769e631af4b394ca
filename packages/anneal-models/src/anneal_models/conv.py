"""conv: a small ConvNet classifying oriented bars in noisy 12x12 images (synthetic, seeded).

Conv2d runs as im2col + one matmul, so the whole net is a handful of fused kernels.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from anneal import Tensor, manual_seed
from anneal.nn import functional as F
from anneal.nn.modules import Conv2d, Linear, Module
from anneal.optim import Adam
from anneal_models.trainer import SupervisedTrainer

DEFAULTS: dict[str, Any] = {"steps": 300, "batch": 64, "lr": 3e-3, "channels": 8, "samples": 2048, "noise": 0.3,
                            "seed": 0}  # fmt: skip
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"steps": 150, "channels": 4, "batch": 32, "samples": 512},
    "small": {},
    "full": {"steps": 1500, "channels": 32, "batch": 256, "samples": 16384},
}
SIZE, CLASSES = 12, 4


def make_images(n: int, noise: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Class k is a bar of orientation k (horizontal, vertical, diagonal, anti-diagonal)."""
    labels = rng.integers(0, CLASSES, n)
    images = rng.normal(0, noise, (n, 1, SIZE, SIZE)).astype(np.float32)
    for i, k in enumerate(labels):
        r, c = rng.integers(3, SIZE - 3, 2)
        for t in range(-3, 4):
            y, x = [(r, c + t), (r + t, c), (r + t, c + t), (r + t, c - t)][k]
            images[i, 0, y, x] += 1.0
    return images, labels.astype(np.int64)


class ConvNet(Module):
    def __init__(self, channels: int):
        self.c1 = Conv2d(1, channels, 3, padding=1)
        self.c2 = Conv2d(channels, 2 * channels, 3, padding=1)
        self.head = Linear(2 * channels * 3 * 3, CLASSES)

    def forward(self, x: Tensor) -> Tensor:
        x = F.max_pool2d(self.c1(x).relu(), 2)
        x = F.max_pool2d(self.c2(x).relu(), 2)
        return self.head(x.flatten(1))


class ConvTrainer(SupervisedTrainer):
    def __init__(self, config: dict[str, Any], device: str):
        manual_seed(config["seed"])
        rng = np.random.default_rng(config["seed"])
        self.x, self.y = make_images(config["samples"], config["noise"], rng)
        net = ConvNet(config["channels"]).to(device)
        params = list(net.parameters())
        batch_size = config["batch"]

        def batch(i: int) -> tuple[np.ndarray, np.ndarray]:
            idx = rng.integers(0, len(self.x), batch_size)
            return self.x[idx], self.y[idx]

        val = make_images(512, config["noise"], np.random.default_rng(config["seed"] + 1))  # held out
        super().__init__(net, params, Adam(params, lr=config["lr"]), batch, F.cross_entropy, device,
                         val=val, config=config)  # fmt: skip
        self.net = net
        self.initial_eval = self.evaluate(self.x[:512], self.y[:512])

    def finish(self) -> str:
        final = self.evaluate(self.x[:512], self.y[:512])
        logits = self.net(Tensor(self.x[:512], device=self.device)).numpy()
        accuracy = float((logits.argmax(-1) == self.y[:512]).mean())
        return (
            f"conv: eval loss {self.initial_eval:.4f} -> {final:.5f} "
            f"({100 * final / self.initial_eval:.2f}% of initial; target < 5%), accuracy {100 * accuracy:.1f}%"
        )


def build(config: dict[str, Any], device: str) -> ConvTrainer:
    return ConvTrainer(config, device)

"""The zoo's mlp and conv, and a 2-layer transformer LM step, in PyTorch: the peers of the benchmarks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn


def torch_trainer(model: str, config: dict[str, Any], device: str = "cuda") -> Callable[[int], float]:
    from anneal_models import conv, mlp

    rng = np.random.default_rng(config["seed"])
    if model == "mlp":
        x = rng.uniform(-1, 1, (config["samples"], 2)).astype(np.float32)
        y = mlp.target(x)
        h = config["hidden"]
        net: nn.Module = nn.Sequential(nn.Linear(2, h), nn.GELU(), nn.Linear(h, h), nn.GELU(), nn.Linear(h, 1))
        loss_fn: Callable[..., torch.Tensor] = nn.functional.mse_loss
    else:
        x, y = conv.make_images(config["samples"], config["noise"], rng)
        c = config["channels"]
        layers = [nn.Conv2d(1, c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(c, 2 * c, 3, padding=1)]
        net = nn.Sequential(*layers, nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(2 * c * 9, 4))
        loss_fn = nn.functional.cross_entropy
    net = net.to(device)
    opt = torch.optim.Adam(net.parameters(), lr=config["lr"])
    tx, ty = torch.tensor(x, device=device), torch.tensor(y, device=device)

    def step(i: int) -> float:
        idx = torch.tensor(rng.integers(0, len(x), config["batch"]), device=device)
        opt.zero_grad()
        loss = loss_fn(net(tx[idx]), ty[idx])
        loss.backward()
        opt.step()
        return float(loss.item())

    return step

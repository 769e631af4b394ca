"""diffusion: a tiny DDPM (Ho et al.) — a constant-resolution conv stack with a sinusoidal time embedding.

conv 3x3 in -> `blocks` residual blocks (SiLU, conv, + the projected time embedding, SiLU, conv) -> SiLU,
conv 3x3 out (starting at zero); no down-sampling, for 8x8 images. Epsilon prediction, uniform t, a
linear or cosine noise schedule; sampling is ancestral DDPM or DDIM over a respaced subsequence of the
T steps (``sample_steps``). Unconditional. Data: `synthetic8` (default) or `digits`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from anneal import Tensor, dtypes, manual_seed
from anneal.nn import functional as F
from anneal.nn.modules import Conv2d, Module
from anneal.optim import AdamW
from anneal_models import images
from anneal_models.generative import EpsilonTrainer, TimeEmbedder
from anneal_models.transformer import linear

DEFAULTS: dict[str, Any] = {
    "dataset": "synthetic8", "steps": 1500, "batch": 64, "lr": 2e-3, "min_lr": 2e-5, "warmup": 100,
    "channels": 32, "blocks": 2, "diffusion_steps": 1000, "noise_schedule": "cosine", "sampler": "ddpm",
    "sample_steps": 100, "grid": 8, "score_samples": 500, "eval_every": None, "seed": 0,
}  # fmt: skip
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"steps": 20, "batch": 16, "channels": 8, "blocks": 1, "diffusion_steps": 100, "sample_steps": 5,
             "grid": 2, "score_samples": 0},
    "small": {},
    "full": {"dataset": "digits", "steps": 20_000, "channels": 128, "blocks": 6, "sample_steps": 250},
}  # fmt: skip


class ResBlock(Module):
    def __init__(self, channels: int, device: str) -> None:
        super().__init__()
        self.conv1 = Conv2d(channels, channels, 3, padding=1, device=device)
        self.time = linear(channels, channels, True, 0.02, device)
        self.conv2 = Conv2d(channels, channels, 3, padding=1, device=device)

    def forward(self, x: Tensor, temb: Tensor) -> Tensor:
        h = self.conv1(F.silu(x)) + self.time(F.silu(temb)).reshape(*temb.shape, 1, 1)
        return x + self.conv2(F.silu(h))


class Denoiser(Module):
    """forward(x_t (N, C, H, W), t (N,)) -> the predicted noise."""

    def __init__(self, image_channels: int, channels: int, blocks: int, device: str) -> None:
        super().__init__()
        self.time = TimeEmbedder(channels, device, frequencies=channels)
        self.conv_in = Conv2d(image_channels, channels, 3, padding=1, device=device)
        self.blocks = [ResBlock(channels, device) for _ in range(blocks)]
        self.conv_out = Conv2d(channels, image_channels, 3, padding=1, device=device)
        shape = self.conv_out.weight.shape  # the output starts at zero: the first prediction is "no noise"
        self.conv_out.weight = Tensor(np.zeros(shape, np.float32), dtypes.float32, device, requires_grad=True)

    def forward(self, x: Tensor, t: Tensor) -> Tensor:
        temb = self.time(t)
        h = self.conv_in(x)
        for blk in self.blocks:
            h = blk(h, temb)
        return self.conv_out(F.silu(h))


class DiffusionTrainer(EpsilonTrainer):
    name = "diffusion"


def build(config: dict[str, Any], device: str) -> DiffusionTrainer:
    manual_seed(int(config["seed"]))
    data = images.load(str(config["dataset"]))
    net = Denoiser(data.shape[0], int(config["channels"]), int(config["blocks"]), device)
    optimizer = AdamW(list(net.parameters()), lr=float(config["lr"]), weight_decay=0.0)
    return DiffusionTrainer(config, device, data, net, optimizer)

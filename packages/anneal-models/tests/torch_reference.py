"""The tests' PyTorch oracles: nanoGPT (also the peer of benchmarks/bench_nanogpt.py) and Page's ResNet-9
(also the peer of benchmarks/bench_resnet9.py), with the names of the zoo's modules."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812 - torch's own name


def torch_nanogpt(cfg: dict[str, Any], vocab: int) -> Any:
    """nanoGPT's model.py (Karpathy), trimmed to its forward."""
    import torch
    from torch import nn
    from torch.nn import functional as tf

    c, h, bias = cfg["dim"], cfg["heads"], cfg["bias"]

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c_attn, self.c_proj = nn.Linear(c, 3 * c, bias=bias), nn.Linear(c, c, bias=bias)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, _ = x.shape
            q, k, v = (z.view(b, t, h, c // h).transpose(1, 2) for z in self.c_attn(x).split(c, dim=2))
            y = tf.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c_fc, self.c_proj = nn.Linear(c, 4 * c, bias=bias), nn.Linear(4 * c, c, bias=bias)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.c_proj(tf.gelu(self.c_fc(x)))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln_1, self.attn = nn.LayerNorm(c, bias=bias), Attention()
            self.ln_2, self.mlp = nn.LayerNorm(c, bias=bias), MLP()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.transformer = nn.ModuleDict({
                "wte": nn.Embedding(vocab, c), "wpe": nn.Embedding(cfg["block"], c),
                "h": nn.ModuleList([Block() for _ in range(cfg["layers"])]), "ln_f": nn.LayerNorm(c, bias=bias),
            })  # fmt: skip
            self.lm_head = nn.Linear(c, vocab, bias=False)
            self.lm_head.weight = self.transformer["wte"].weight  # type: ignore[assignment]  # tied, as nanoGPT

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            tr: Any = self.transformer
            x = tr.wte(idx) + tr.wpe(torch.arange(idx.shape[1], device=idx.device))
            for blk in tr.h:
                x = blk(x)
            return self.lm_head(tr.ln_f(x))

    return GPT()


class TorchConvBN(nn.Module):
    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.conv, self.bn = nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn(self.conv(x)))


class TorchResidual(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.res1, self.res2 = TorchConvBN(c, c), TorchConvBN(c, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.res2(self.res1(x))


class TorchResNet9(nn.Module):
    """Page's ResNet-9, written in torch with the names of anneal_models.resnet9."""

    def __init__(self, channels: int, classes: int, w: int) -> None:
        super().__init__()
        self.prep = TorchConvBN(channels, w)
        self.layer1, self.res1 = TorchConvBN(w, 2 * w), TorchResidual(2 * w)
        self.layer2 = TorchConvBN(2 * w, 4 * w)
        self.layer3, self.res3 = TorchConvBN(4 * w, 8 * w), TorchResidual(8 * w)
        self.head = nn.Linear(8 * w, classes, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.prep(x)
        x = self.res1(F.max_pool2d(self.layer1(x), 2))
        x = F.max_pool2d(self.layer2(x), 2)
        x = self.res3(F.max_pool2d(self.layer3(x), 2))
        return self.head(torch.amax(x, dim=(2, 3))) * 0.125


# ---- the generative models (dit, meanflow): the same networks with anneal's parameter names ----


def torch_timestep_embedding(t: torch.Tensor, dim: int, max_period: float = 10000.0) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t.float()[:, None] * freqs[None]
    return torch.cat([args.cos(), args.sin()], -1)


class TorchTimeEmbedder(nn.Module):
    def __init__(self, dim: int, frequencies: int = 256, scale: float = 1.0) -> None:
        super().__init__()
        self.frequencies, self.scale = frequencies, scale
        self.fc1, self.fc2 = nn.Linear(frequencies, dim), nn.Linear(dim, dim)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.silu(self.fc1(torch_timestep_embedding(t * self.scale, self.frequencies))))


class TorchAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.c_attn, self.c_proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = (s.reshape(b, t, self.heads, c // self.heads).transpose(1, 2) for s in self.c_attn(x).chunk(3, -1))
        # softmax(q k^T / sqrt(d)) v spelled out: torch's fused attention has no forward-mode derivative
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(c // self.heads), -1)
        return self.c_proj((att @ v).transpose(1, 2).reshape(b, t, c))


class TorchMLP(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.c_fc, self.c_proj = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x)))


class TorchDiTBlock(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.attn, self.mlp, self.ada = TorchAttention(dim, heads), TorchMLP(dim), nn.Linear(dim, 6 * dim)

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        shift1, scale1, gate1, shift2, scale2, gate2 = self.ada(F.silu(c)).unsqueeze(1).chunk(6, -1)
        ln = lambda z: F.layer_norm(z, z.shape[-1:], eps=1e-6)  # noqa: E731
        x = x + gate1 * self.attn(ln(x) * (1 + scale1) + shift1)
        return x + gate2 * self.mlp(ln(x) * (1 + scale2) + shift2)


class TorchDiT(nn.Module):
    """anneal_models.dit.DiT in torch: forward(x, *times, y)."""

    def __init__(self, shape: tuple[int, int, int], classes: int, patch: int, dim: int, layers: int, heads: int,
                 times: int = 1, time_scale: float = 1.0) -> None:  # fmt: skip
        super().__init__()
        c, h, w = shape
        self.shape, self.patch, self.grid = shape, patch, (h // patch, w // patch)
        self.embed = nn.Linear(c * patch * patch, dim)
        self.pos = nn.Parameter(torch.zeros(self.grid[0] * self.grid[1], dim))
        self.time = nn.ModuleList([TorchTimeEmbedder(dim, scale=time_scale) for _ in range(times)])
        self.label = nn.Parameter(torch.zeros(classes + 1, dim))
        self.blocks = nn.ModuleList([TorchDiTBlock(dim, heads) for _ in range(layers)])
        self.ada, self.out = nn.Linear(dim, 2 * dim), nn.Linear(dim, c * patch * patch)

    def forward(self, x: torch.Tensor, *inputs: torch.Tensor) -> torch.Tensor:
        *times, y = inputs
        n, c = x.shape[:2]
        (gh, gw), p = self.grid, self.patch
        cond = self.label[y]
        for embed, t in zip(self.time, times):
            cond = cond + embed(t)
        h = self.embed(x.reshape(n, c, gh, p, gw, p).permute(0, 2, 4, 1, 3, 5).reshape(n, gh * gw, c * p * p))
        h = h + self.pos
        for blk in self.blocks:
            h = blk(h, cond)
        shift, scale = self.ada(F.silu(cond)).unsqueeze(1).chunk(2, -1)
        h = self.out(F.layer_norm(h, h.shape[-1:], eps=1e-6) * (1 + scale) + shift)
        return h.reshape(n, gh, gw, c, p, p).permute(0, 3, 1, 4, 2, 5).reshape(n, c, gh * p, gw * p)


def torch_meanflow_loss(net: nn.Module, x: torch.Tensor, y: torch.Tensor, r: torch.Tensor, t: torch.Tensor,
                        e: torch.Tensor, p: float = 1.0, c: float = 1e-3) -> torch.Tensor:  # fmt: skip
    """MeanFlow's objective for given times, noise and labels (no guidance), its JVP by torch.func.jvp."""
    t4, r4 = t.reshape(-1, 1, 1, 1), r.reshape(-1, 1, 1, 1)
    z = (1 - t4) * x + t4 * e
    v = e - x
    u, dudt = torch.func.jvp(lambda z_, r_, t_: net(z_, t_, t_ - r_, y), (z, r, t),
                             (v, torch.zeros_like(r), torch.ones_like(t)))  # fmt: skip
    target = (v - (t4 - r4) * dudt).detach()
    err = (u - target).square().reshape(len(x), -1).sum(-1)
    return ((err.detach() + c) ** -p * err).mean()

"""The tests' PyTorch oracles: nanoGPT (also the peer of benchmarks/bench_nanogpt.py) and Page's ResNet-9
(also the peer of benchmarks/bench_resnet9.py), with the names of the zoo's modules."""

from __future__ import annotations

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

"""A nanoGPT-shaped transformer forward written with anneal Tensors and with torch.

Shared by the benchmarks: same weights (numpy), same math, so values can be compared too.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def init_weights(layers: int, dim: int, vocab: int, block: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    w: dict[str, np.ndarray] = {
        "wte": rng.standard_normal((vocab, dim)).astype(np.float32) * 0.02,
        "wpe": rng.standard_normal((block, dim)).astype(np.float32) * 0.02,
    }
    for i in range(layers):
        for name, shape in (("qkv", (dim, 3 * dim)), ("proj", (dim, dim)), ("fc", (dim, 4 * dim)),
                            ("out", (4 * dim, dim))):  # fmt: skip
            w[f"{i}.{name}.w"] = rng.standard_normal(shape).astype(np.float32) * 0.02
            w[f"{i}.{name}.b"] = np.zeros(shape[1], np.float32)
        for ln in ("ln1", "ln2"):
            w[f"{i}.{ln}.g"], w[f"{i}.{ln}.b"] = np.ones(dim, np.float32), np.zeros(dim, np.float32)
    return w


def forward(lib: Any, w: dict[str, Any], x: Any, layers: int, heads: int) -> Any:
    """x: (B, T, C) activations; lib provides tensor ops (anneal or torch) with torch names."""
    B, T, C = x.shape
    hd = C // heads
    mask = lib.causal_mask(T)
    for i in range(layers):
        h = lib.layer_norm(x, w[f"{i}.ln1.g"], w[f"{i}.ln1.b"])
        qkv = h @ w[f"{i}.qkv.w"] + w[f"{i}.qkv.b"]
        q, k, v = (qkv[:, :, j * C : (j + 1) * C].reshape(B, T, heads, hd).transpose(1, 2) for j in range(3))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd)) + mask
        y = att.softmax(-1) @ v
        x = x + y.transpose(1, 2).reshape(B, T, C) @ w[f"{i}.proj.w"] + w[f"{i}.proj.b"]
        h = lib.layer_norm(x, w[f"{i}.ln2.g"], w[f"{i}.ln2.b"])
        x = x + lib.gelu(h @ w[f"{i}.fc.w"] + w[f"{i}.fc.b"]) @ w[f"{i}.out.w"] + w[f"{i}.out.b"]
    return x


class AnnealOps:
    def __init__(self, device: str = "cpu"):
        import anneal

        self.anneal, self.device = anneal, device

    def tensor(self, a: np.ndarray) -> Any:
        return self.anneal.Tensor(a, device=self.device)

    def causal_mask(self, t: int) -> Any:
        return self.tensor(np.triu(np.full((t, t), -np.inf, np.float32), 1))

    def layer_norm(self, x: Any, g: Any, b: Any) -> Any:
        mu = x.mean(-1, keepdim=True)
        xc = x - mu
        return xc * (xc.square().mean(-1, keepdim=True) + 1e-5).rsqrt() * g + b

    def gelu(self, x: Any) -> Any:
        return x.gelu()


class TorchOps:
    def __init__(self, device: str = "cpu"):
        import torch

        self.torch, self.device = torch, device

    def tensor(self, a: np.ndarray) -> Any:
        return self.torch.tensor(a, device=self.device)

    def causal_mask(self, t: int) -> Any:
        return self.tensor(np.triu(np.full((t, t), -np.inf, np.float32), 1))

    def layer_norm(self, x: Any, g: Any, b: Any) -> Any:
        return self.torch.nn.functional.layer_norm(x, (x.shape[-1],), g, b, 1e-5)

    def gelu(self, x: Any) -> Any:
        return self.torch.nn.functional.gelu(x)

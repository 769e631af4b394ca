"""nanogpt: Karpathy's nanoGPT on char-level tinyshakespeare.

Learned token and position embeddings, pre-LayerNorm blocks with causal multi-head attention and a
GELU MLP, a final LayerNorm, and a **weight-tied** head (the logits are x @ wte.weight.T: the token
embedding is the output projection). Dropout after the embeddings, on the attention weights and on
each residual branch. Names and init follow nanoGPT's model.py (weights ~ N(0, 0.02), residual
projections N(0, 0.02/sqrt(2 layers)), no biases by default as nanoGPT's train.py), so a nanoGPT
state_dict loads unchanged. The `small` preset is nanoGPT's CPU run of shakespeare_char (val 1.88) with
twice its learning rate: 2e-3 reaches val ~1.81 where nanoGPT's 1e-3 stops at ~1.91 in 2000 steps (PyTorch,
same recipe, two seeds; benchmarks/RESULTS.md). `full` is its GPU run, learning rate 1e-3 (best val 1.47).
"""

from __future__ import annotations

import math
from typing import Any

from anneal import Tensor
from anneal.nn.modules import Embedding
from anneal_models.transformer import (
    MLP,
    Block,
    CausalSelfAttention,
    Dropout,
    LanguageModel,
    LMTrainer,
    build_trainer,
    norm,
    normal,
)

DEFAULTS: dict[str, Any] = {
    "steps": 2000, "batch": 12, "block": 64, "layers": 4, "heads": 4, "dim": 128, "dropout": 0.0, "bias": False,
    "lr": 2e-3, "min_lr": 1e-4, "warmup": 100, "weight_decay": 0.1, "beta1": 0.9, "beta2": 0.99, "grad_clip": 1.0,
    "eval_every": 250, "eval_batches": 20, "sample_tokens": 500, "temperature": 0.8, "top_k": 200, "seed": 0,
    "data": None,
}  # fmt: skip
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"steps": 60, "batch": 8, "block": 32, "layers": 2, "heads": 2, "dim": 32, "lr": 3e-3, "min_lr": 3e-4,
             "warmup": 10, "eval_every": 0, "eval_batches": 2, "sample_tokens": 40},
    "small": {},
    "full": {"steps": 5000, "batch": 64, "block": 256, "layers": 6, "heads": 6, "dim": 384, "dropout": 0.2,
             "lr": 1e-3, "eval_every": 500, "eval_batches": 20},
}  # fmt: skip


class GPT(LanguageModel):
    """`gelu="tanh"` and `eps` 1e-5 with biases is GPT-2 (anneal_models.gpt2 loads its weights into this module)."""

    def __init__(self, vocab_size: int, block: int, layers: int, heads: int, dim: int, dropout: float, bias: bool,
                 device: str, gelu: str = "none") -> None:  # fmt: skip
        super().__init__()
        self.vocab_size, self.block = vocab_size, block
        std, proj_std = 0.02, 0.02 / math.sqrt(2 * layers)
        wte, wpe = Embedding(vocab_size, dim, device=device), Embedding(block, dim, device=device)
        wte.weight, wpe.weight = normal((vocab_size, dim), std, device), normal((block, dim), std, device)

        def block_(i: int) -> Block:
            attn = CausalSelfAttention(dim, heads, bias=bias, dropout=dropout, std=std,
                                       proj_std=proj_std, device=device)  # fmt: skip
            mlp = MLP(dim, 4 * dim, bias=bias, dropout=dropout, std=std, proj_std=proj_std,
                      device=device, approximate=gelu)  # fmt: skip
            return Block(norm("layernorm", dim, bias, device), attn, norm("layernorm", dim, bias, device), mlp)

        self.transformer: dict[str, Any] = {  # nanoGPT's names: transformer.h.0.attn.c_attn.weight, ...
            "wte": wte,
            "wpe": wpe,
            "drop": Dropout(dropout),
            "h": [block_(i) for i in range(layers)],
            "ln_f": norm("layernorm", dim, bias, device),
        }

    def hidden(self, idx: Tensor) -> Tensor:
        t = idx.shape[-1]
        if t > self.block:
            raise ValueError(f"nanogpt: sequence of length {t} is longer than the block size {self.block}")
        tr = self.transformer
        # float32 activations whatever the weights' storage dtype (gpt2 --dtype float16): wider weights meet them
        x = tr["drop"]((tr["wte"](idx) + tr["wpe"].weight[:t]).float())
        for blk in tr["h"]:
            x = blk(x)
        return tr["ln_f"](x)

    def forward(self, idx: Tensor) -> Tensor:
        return self.hidden(idx).matmul(self.transformer["wte"].weight.transpose(0, 1))  # the tied head


class NanoGPTTrainer(LMTrainer):
    name = "nanogpt"

    def describe(self) -> str:
        c = self.config
        return (f"{super().describe()}: {c['layers']} layers, {c['heads']} heads, {c['dim']} dim, block {c['block']}, "
                f"pre-LayerNorm, GELU MLP, learned positions, weight-tied head, dropout {c['dropout']}")  # fmt: skip


def build_model(config: dict[str, Any], vocab_size: int, device: str) -> GPT:
    c = config
    return GPT(vocab_size, int(c["block"]), int(c["layers"]), int(c["heads"]), int(c["dim"]), float(c["dropout"]),
               bool(c["bias"]), device)  # fmt: skip


def build(config: dict[str, Any], device: str) -> NanoGPTTrainer:
    return build_trainer(config, device, build_model, NanoGPTTrainer)

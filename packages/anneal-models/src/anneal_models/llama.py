"""llama: a Llama-style char model on tinyshakespeare.

RMSNorm (pre-norm), grouped-query attention (kv_heads < heads) with rotary position embeddings
(no learned positions), a SwiGLU feed-forward, tied input/output embeddings, and no biases
anywhere. The SwiGLU width defaults to the one that gives each block nanogpt's 12 * dim^2
parameters (GQA's smaller k/v projections leave more for the feed-forward), so llama and nanogpt
compare at equal parameters (small: 0.796M vs 0.804M, the difference is nanogpt's position table).
Training setup as nanogpt (AdamW, warmup + cosine, clip 1.0).
"""

from __future__ import annotations

import math
from typing import Any

from anneal import Tensor
from anneal.nn.modules import Embedding
from anneal_models.transformer import (
    Block,
    CausalSelfAttention,
    Dropout,
    LanguageModel,
    LMTrainer,
    Rotary,
    SwiGLU,
    build_trainer,
    norm,
    normal,
)

DEFAULTS: dict[str, Any] = {
    "steps": 2000, "batch": 12, "block": 64, "layers": 4, "heads": 4, "kv_heads": 2, "dim": 128, "hidden": None,
    "dropout": 0.0, "rope_base": 10000.0, "lr": 1e-3, "min_lr": 1e-4, "warmup": 100, "weight_decay": 0.1,
    "beta1": 0.9, "beta2": 0.99, "grad_clip": 1.0, "eval_every": 250, "eval_batches": 20, "sample_tokens": 500,
    "temperature": 0.8, "top_k": 200, "seed": 0, "data": None,
}  # fmt: skip
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"steps": 60, "batch": 8, "block": 32, "layers": 2, "heads": 2, "kv_heads": 1, "dim": 32, "lr": 3e-3,
             "min_lr": 3e-4, "warmup": 10, "eval_every": 0, "eval_batches": 2, "sample_tokens": 40},
    "small": {},
    "full": {"steps": 5000, "batch": 64, "block": 256, "layers": 6, "heads": 6, "kv_heads": 2, "dim": 384,
             "dropout": 0.2, "eval_every": 500, "eval_batches": 20},
}  # fmt: skip


def swiglu_hidden(dim: int, heads: int, kv_heads: int) -> int:
    """The SwiGLU width h that makes a block cost what a GPT block does, to a multiple of 8:
    attention 2 dim^2 (1 + kv_heads/heads) + SwiGLU 3 dim h = 12 dim^2."""
    h = dim * (10 - 2 * kv_heads / heads) / 3
    return 8 * round(h / 8)


class Llama(LanguageModel):
    def __init__(self, vocab_size: int, block: int, layers: int, heads: int, kv_heads: int, dim: int, hidden: int,
                 dropout: float, rope_base: float, device: str) -> None:  # fmt: skip
        super().__init__()
        self.vocab_size, self.block = vocab_size, block
        std, proj_std = 0.02, 0.02 / math.sqrt(2 * layers)
        rotary = Rotary(dim // heads, block, rope_base)
        self.tok_embeddings = Embedding(vocab_size, dim, device=device)
        self.tok_embeddings.weight = normal((vocab_size, dim), std, device)
        self.drop = Dropout(dropout)

        def block_() -> Block:
            attn = CausalSelfAttention(dim, heads, kv_heads=kv_heads, bias=False, dropout=dropout,
                                       std=std, proj_std=proj_std, device=device, rotary=rotary)  # fmt: skip
            ffn = SwiGLU(dim, hidden, dropout=dropout, std=std, proj_std=proj_std, device=device)
            return Block(norm("rmsnorm", dim, False, device), attn, norm("rmsnorm", dim, False, device), ffn)

        self.layers = [block_() for _ in range(layers)]
        self.norm = norm("rmsnorm", dim, False, device)

    def forward(self, idx: Tensor) -> Tensor:
        if idx.shape[-1] > self.block:
            raise ValueError(f"llama: sequence of length {idx.shape[-1]} is longer than the block size {self.block}")
        x = self.drop(self.tok_embeddings(idx))
        for layer in self.layers:
            x = layer(x)
        return self.norm(x).matmul(self.tok_embeddings.weight.transpose(0, 1))  # tied output embedding


class LlamaTrainer(LMTrainer):
    name = "llama"

    def describe(self) -> str:
        c = self.config
        return (f"{super().describe()}: {c['layers']} layers, {c['heads']} heads ({c['kv_heads']} kv heads: GQA), "
                f"{c['dim']} dim, SwiGLU {hidden_of(c)}, block {c['block']}, RMSNorm, RoPE, tied embeddings, "
                f"no biases, dropout {c['dropout']}")  # fmt: skip


def hidden_of(config: dict[str, Any]) -> int:
    if config.get("hidden"):
        return int(config["hidden"])
    return swiglu_hidden(int(config["dim"]), int(config["heads"]), int(config["kv_heads"]))


def build_model(config: dict[str, Any], vocab_size: int, device: str) -> Llama:
    c = config
    return Llama(vocab_size, int(c["block"]), int(c["layers"]), int(c["heads"]), int(c["kv_heads"]), int(c["dim"]),
                 hidden_of(c), float(c["dropout"]), float(c["rope_base"]), device)  # fmt: skip


def build(config: dict[str, Any], device: str) -> LlamaTrainer:
    return build_trainer(config, device, build_model, LlamaTrainer)

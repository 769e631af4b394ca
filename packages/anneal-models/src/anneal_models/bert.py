"""bert: a bidirectional char-level encoder trained as a masked language model.

Every position sees the whole window (no causal mask). The vocabulary gets one extra token,
[MASK]. In each window 15% of the positions are chosen (exactly round(0.15 * block), at least
one); as BERT, a chosen position's input becomes [MASK] 80% of the time, a random character 10%,
and stays unchanged 10%. The loss is the cross-entropy at the chosen positions only (every other
target is ignore_index). The decoder is tied to the character rows of the token embedding, plus a
bias. finish() prints some masked val windows with the model's reconstructions, and the masked-token
accuracy against the unigram baseline (always guessing the most frequent training character).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from anneal import Tensor
from anneal.jit import jit
from anneal.nn import functional as F
from anneal.nn.modules import Embedding
from anneal_models.datasets import CharDataset
from anneal_models.transformer import (
    MLP,
    Batch,
    Block,
    CausalSelfAttention,
    Dropout,
    LanguageModel,
    LMTrainer,
    build_trainer,
    norm,
    normal,
)

IGNORE = -100
DEFAULTS: dict[str, Any] = {
    "steps": 2000, "batch": 12, "block": 64, "layers": 4, "heads": 4, "dim": 128, "dropout": 0.0, "bias": True,
    "mask_rate": 0.15, "lr": 1e-3, "min_lr": 1e-4, "warmup": 100, "weight_decay": 0.1, "beta1": 0.9, "beta2": 0.99,
    "grad_clip": 1.0, "eval_every": 250, "eval_batches": 20, "examples": 4, "seed": 0, "data": None,
}  # fmt: skip
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"steps": 60, "batch": 8, "block": 32, "layers": 2, "heads": 2, "dim": 32, "lr": 3e-3, "min_lr": 3e-4,
             "warmup": 10, "eval_every": 0, "eval_batches": 2, "examples": 2},
    "small": {},
    "full": {"steps": 5000, "batch": 64, "block": 256, "layers": 6, "heads": 6, "dim": 384, "dropout": 0.2,
             "eval_every": 500, "eval_batches": 20},
}  # fmt: skip


def mask_tokens(x: np.ndarray, vocab_size: int, rate: float, rng: np.random.Generator) -> Batch:
    """BERT's masking of a batch of windows x (B, T): (inputs, targets).

    inputs use id vocab_size for [MASK]; targets hold the original id at the chosen positions and
    IGNORE elsewhere."""
    b, t = x.shape
    k = max(1, round(rate * t))
    chosen = np.zeros((b, t), bool)
    picks = np.argsort(rng.random((b, t)), axis=1)[:, :k]  # k distinct positions per window
    np.put_along_axis(chosen, picks, True, axis=1)
    roll = rng.random((b, t))
    inputs = x.copy()
    inputs[chosen & (roll < 0.8)] = vocab_size  # [MASK]
    swap = chosen & (roll >= 0.8) & (roll < 0.9)
    inputs[swap] = rng.integers(0, vocab_size, int(swap.sum()))
    targets = np.where(chosen, x, IGNORE).astype(np.int64)
    return inputs.astype(np.int64), targets


class Bert(LanguageModel):
    """Input ids over vocab + [MASK]; logits over the vocabulary (no [MASK] column)."""

    def __init__(self, vocab_size: int, block: int, layers: int, heads: int, dim: int, dropout: float, bias: bool,
                 device: str) -> None:  # fmt: skip
        super().__init__()
        self.vocab_size, self.block, self.mask_id = vocab_size, block, vocab_size
        std, proj_std = 0.02, 0.02 / math.sqrt(2 * layers)
        self.wte, self.wpe = Embedding(vocab_size + 1, dim, device=device), Embedding(block, dim, device=device)
        self.wte.weight, self.wpe.weight = normal((vocab_size + 1, dim), std, device), normal((block, dim), std, device)
        self.drop = Dropout(dropout)

        def block_() -> Block:
            attn = CausalSelfAttention(dim, heads, bias=bias, dropout=dropout, std=std,
                                       proj_std=proj_std, device=device, causal=False)  # fmt: skip
            mlp = MLP(dim, 4 * dim, bias=bias, dropout=dropout, std=std, proj_std=proj_std,
                      device=device)  # fmt: skip
            return Block(norm("layernorm", dim, bias, device), attn, norm("layernorm", dim, bias, device), mlp)

        self.h = [block_() for _ in range(layers)]
        self.ln_f = norm("layernorm", dim, bias, device)
        self.decoder_bias = Tensor(np.zeros(vocab_size, np.float32), device=device, requires_grad=True)

    def forward(self, idx: Tensor) -> Tensor:
        t = idx.shape[-1]
        if t > self.block:
            raise ValueError(f"bert: sequence of length {t} is longer than the block size {self.block}")
        x = self.drop(self.wte(idx) + self.wpe.weight[:t])
        for blk in self.h:
            x = blk(x)
        chars = self.wte.weight[: self.vocab_size]  # the decoder is tied to the character embeddings
        return self.ln_f(x).matmul(chars.transpose(0, 1)) + self.decoder_bias

    def loss(self, idx: Tensor, targets: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        logits = self(idx)
        mlm = F.cross_entropy(logits.reshape(-1, self.vocab_size), targets.reshape(-1), ignore_index=IGNORE)
        return mlm, {"lm": mlm}


class BertTrainer(LMTrainer):
    name = "bert"
    net: Bert

    def __init__(self, config: dict[str, Any], device: str, net: Bert, data: CharDataset) -> None:
        bsz, block, rate = int(config["batch"]), int(config["block"]), float(config["mask_rate"])

        def masked(split: str, rng: np.random.Generator) -> Batch:
            x, _ = data.batch(split, bsz, block, rng)
            return mask_tokens(x, data.vocab_size, rate, rng)

        val_rng = np.random.default_rng(int(config["seed"]) + 1)
        val = [masked("val", val_rng) for _ in range(int(config["eval_batches"]))]
        super().__init__(config, device, net, data, lambda rng: masked("train", rng), val)
        self._logits = jit(self._forward)

    def shard_weight(self, batch: Batch, part: slice) -> float:
        """The masked-token mean is over the global batch's masked positions: a shard weighs its share of them
        (a shard without one weighs nothing)."""
        counted = int((batch[1] != IGNORE).sum())
        if not counted:
            return super().shard_weight(batch, part)
        return int((batch[1][part] != IGNORE).sum()) / counted

    def describe(self) -> str:
        c = self.config
        return (f"{super().describe()}: bidirectional encoder, {c['layers']} layers, {c['heads']} heads, "
                f"{c['dim']} dim, block {c['block']}, masked LM ({100 * c['mask_rate']:.0f}% of positions: "
                f"80% [MASK], 10% random, 10% kept), tied decoder, dropout {c['dropout']}")  # fmt: skip

    def _forward(self, x: Tensor) -> Tensor:
        return self.net(x).realize()

    def predictions(self) -> list[np.ndarray]:
        """The model's most likely character at every position of each val batch (dropout off)."""
        self.net.eval()
        try:
            return [self._logits(Tensor(x, device=self.device)).numpy().argmax(-1) for x, _ in self.val_batches]
        finally:
            self.net.train()

    def masked_accuracy(self) -> tuple[float, float]:
        """(model, unigram baseline) accuracy over the masked positions of the val batches."""
        preds = self.predictions()
        guess = int(np.argmax(self.data.unigram("train")))
        hits = total = base = 0
        for p, (_, y) in zip(preds, self.val_batches):
            m = y != IGNORE
            hits += int((p[m] == y[m]).sum())
            base += int((y[m] == guess).sum())
            total += int(m.sum())
        return hits / total, base / total

    def reconstructions(self, n: int) -> list[str]:
        preds = self.predictions()[0]
        x, y = self.val_batches[0]
        lines = []
        for row in range(min(n, len(x))):
            m = y[row] != IGNORE
            shown = "".join("_" if mm else self.data.chars[int(c)] if c < self.data.vocab_size else "_"
                            for c, mm in zip(x[row], m))  # fmt: skip
            truth = self.data.decode(np.where(m, y[row], x[row]))
            guess = "".join(self.data.chars[int(p)] if mm else self.data.chars[int(t)]
                            for p, t, mm in zip(preds[row], np.where(m, y[row], x[row]), m))  # fmt: skip
            lines += [f"  masked:  {shown!r}", f"  model:   {guess!r}", f"  truth:   {truth!r}"]
        return lines

    def finish(self) -> str:
        lines = self.summary()
        acc, base = self.masked_accuracy()
        top = self.data.chars[int(np.argmax(self.data.unigram("train")))]
        lines.append(f"masked-token accuracy {100 * acc:.1f}% vs unigram baseline {100 * base:.1f}% "
                     f"(always {top!r}), on the val batches")  # fmt: skip
        lines.append("reconstructions (_ = a position the loss scores):")
        lines += self.reconstructions(int(self.config["examples"]))
        return "\n".join(lines)


def build_model(config: dict[str, Any], vocab_size: int, device: str) -> Bert:
    c = config
    return Bert(vocab_size, int(c["block"]), int(c["layers"]), int(c["heads"]), int(c["dim"]), float(c["dropout"]),
                bool(c["bias"]), device)  # fmt: skip


def build(config: dict[str, Any], device: str) -> BertTrainer:
    return build_trainer(config, device, build_model, BertTrainer)

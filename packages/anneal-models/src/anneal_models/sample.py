"""Autoregressive generation for the char-level language models: temperature, top-k, seeded.

The model always sees one fixed-shape window (1, block): the context's last `block` tokens, padded
on the right. A causal model's logits at position t do not depend on later positions, so the pad
changes nothing, and the fixed shape lets anneal.jit replay one captured forward for every token
(no re-scheduling per length). Choosing the next token happens on the host with a seeded numpy
Generator: the same seed gives the same text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from anneal import Tensor
from anneal.jit import jit


def choose(logits: np.ndarray, temperature: float, top_k: int | None, rng: np.random.Generator) -> int:
    """One token from logits (V,): greedy when temperature <= 0, else softmax(logits / temperature)
    restricted to the top_k largest (ties at the k-th value stay in, as nanoGPT's sample)."""
    logits = np.asarray(logits, np.float64)
    if temperature <= 0:
        return int(np.argmax(logits))
    z = logits / temperature
    if top_k is not None and 0 < top_k < z.size:
        kth = np.partition(z, -top_k)[-top_k]
        z = np.where(z < kth, -np.inf, z)
    p = np.exp(z - z.max())
    p /= p.sum()
    return int(rng.choice(z.size, p=p))


class Sampler:
    """Generates from a model mapping ids (1, block) to logits (1, block, V); the model is put in eval
    mode while generating (no dropout)."""

    def __init__(self, model: Callable[[Tensor], Tensor], block: int, device: str) -> None:
        self.model, self.block, self.device = model, block, device
        self._forward = jit(self._logits)

    def _logits(self, idx: Tensor) -> Tensor:
        return self.model(idx).realize()

    def logits(self, window: np.ndarray) -> np.ndarray:
        """Logits (block, V) for one window of `block` ids."""
        out = self._forward(Tensor(window.reshape(1, self.block).astype(np.int64), device=self.device))
        return out.numpy()[0]

    def generate(self, prompt: np.ndarray | list[int], tokens: int, *, temperature: float = 1.0,
                 top_k: int | None = None, seed: int = 0) -> np.ndarray:  # fmt: skip
        """prompt followed by `tokens` generated ids (1-d int64)."""
        ids = [int(i) for i in prompt]
        if not ids:
            raise ValueError("generate: the prompt needs at least one token")
        rng = np.random.default_rng(seed)
        model: Any = self.model
        was_training = bool(getattr(model, "training", False))
        if hasattr(model, "eval"):
            model.eval()
        try:
            for _ in range(tokens):
                context = ids[-self.block :]
                window = np.zeros(self.block, np.int64)
                window[: len(context)] = context
                ids.append(choose(self.logits(window)[len(context) - 1], temperature, top_k, rng))
        finally:
            if was_training and hasattr(model, "train"):
                model.train()
        return np.asarray(ids, np.int64)

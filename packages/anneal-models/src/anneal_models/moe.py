"""moe: nanogpt whose feed-forwards are mixtures of experts.

In each block the GELU MLP is replaced by `experts` expert MLPs and a router: a linear map to one
logit per expert, softmaxed. Routing is soft and dense: every token goes through every expert and
the outputs are mixed by the router's probabilities (no token dropping, no capacity; all experts
run as one batched contraction). A Switch-Transformer load-balance loss keeps the router from
collapsing onto a few experts:

    aux = E * sum_e f_e * P_e

with f_e the fraction of tokens whose top expert is e (no gradient) and P_e the mean router
probability of e. aux is 1 when routing is balanced and grows to E when it collapses onto one
expert; the model minimizes lm + aux_weight * mean-over-layers(aux). finish() reports aux and each
layer's per-expert load (f_e) on the val batches.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from anneal import Tensor
from anneal.jit import jit
from anneal.nn import functional as F
from anneal.nn.modules import Dropout, Module
from anneal_models.nanogpt import GPT
from anneal_models.transformer import LMTrainer, build_trainer, linear, normal

DEFAULTS: dict[str, Any] = {
    "steps": 2000, "batch": 12, "block": 64, "layers": 4, "heads": 4, "dim": 128, "experts": 4, "expert_hidden": None,
    "aux_weight": 0.01, "dropout": 0.0, "bias": False, "lr": 1e-3, "min_lr": 1e-4, "warmup": 100,
    "weight_decay": 0.1, "beta1": 0.9, "beta2": 0.99, "grad_clip": 1.0, "eval_every": 250, "eval_batches": 20,
    "sample_tokens": 500, "temperature": 0.8, "top_k": 200, "seed": 0, "data": None,
}  # fmt: skip
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"steps": 60, "batch": 8, "block": 32, "layers": 2, "heads": 2, "dim": 32, "experts": 4,
             "expert_hidden": 64, "lr": 3e-3, "min_lr": 3e-4, "warmup": 10, "eval_every": 0, "eval_batches": 2,
             "sample_tokens": 40},
    "small": {},
    "full": {"steps": 5000, "batch": 64, "block": 256, "layers": 6, "heads": 6, "dim": 384, "experts": 8,
             "dropout": 0.2, "eval_every": 500, "eval_batches": 20},
}  # fmt: skip


class MoEFeedForward(Module):
    """Router + `experts` GELU MLPs (dim -> hidden -> dim), densely mixed by the router's softmax.

    The expert weights are stacked, (E, dim, hidden) and (E, hidden, dim): each layer is one batched
    matmul over experts; the router's weights scale the hidden units, and the experts' outputs are summed."""

    def __init__(self, dim: int, hidden: int, experts: int, *, dropout: float, std: float,
                 proj_std: float, device: str) -> None:  # fmt: skip
        super().__init__()
        self.experts = experts
        self.router = linear(dim, experts, False, std, device)
        self.w_fc = normal((experts, dim, hidden), std, device)
        self.w_proj = normal((experts, hidden, dim), proj_std, device)
        self.dropout = Dropout(dropout)
        self._stats: tuple[Tensor, Tensor] | None = None  # (load f, mean probability P) of the last forward

    def forward(self, x: Tensor) -> Tensor:
        b, t, c = x.shape
        tokens = x.reshape(b * t, c)
        gates = self.router(tokens).softmax(-1)  # (N, E)
        top = (gates == gates.amax(-1, keepdim=True)).detach().float()  # each token's top expert (one-hot)
        self._stats = (top.mean(0), gates.mean(0))
        h = F.gelu(tokens.unsqueeze(0).matmul(self.w_fc))  # (E, N, hidden)
        weighted = h * gates.transpose(0, 1).unsqueeze(-1)
        # a batched matmul per expert, then summed: merging (expert, hidden) into one axis instead would
        # index it by division and remainder, which the cpu backend's loops cannot vectorize
        out = weighted.matmul(self.w_proj).sum(0)  # (N, dim)
        return self.dropout(out.reshape(b, t, c))

    def aux(self) -> Tensor:
        assert self._stats is not None, "aux() reads the statistics of a forward pass"
        load, prob = self._stats
        return (load * prob).sum() * self.experts

    def load(self) -> Tensor:
        assert self._stats is not None, "load() reads the statistics of a forward pass"
        return self._stats[0]


class MoEGPT(GPT):
    def __init__(self, vocab_size: int, block: int, layers: int, heads: int, dim: int, dropout: float, bias: bool,
                 experts: int, hidden: int, aux_weight: float, device: str) -> None:  # fmt: skip
        super().__init__(vocab_size, block, layers, heads, dim, dropout, bias, device)
        self.aux_weight = aux_weight
        std, proj_std = 0.02, 0.02 / math.sqrt(2 * layers)
        for blk in self.transformer["h"]:
            blk.mlp = MoEFeedForward(dim, hidden, experts, dropout=dropout, std=std,
                                     proj_std=proj_std, device=device)  # fmt: skip

    def moe_layers(self) -> list[MoEFeedForward]:
        return [blk.mlp for blk in self.transformer["h"]]

    def loss(self, idx: Tensor, targets: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        lm, parts = super().loss(idx, targets)
        layers = self.moe_layers()
        aux = layers[0].aux()
        for layer in layers[1:]:
            aux = aux + layer.aux()
        aux = aux / len(layers)
        return lm + self.aux_weight * aux, {**parts, "aux": aux}


class MoETrainer(LMTrainer):
    name = "moe"
    net: MoEGPT

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._load_step = jit(self._loads)

    def describe(self) -> str:
        c = self.config
        return (f"{super().describe()}: nanogpt {c['layers']} layers, {c['heads']} heads, {c['dim']} dim, "
                f"block {c['block']}, each FFN {c['experts']} GELU experts of {hidden_of(c)} mixed by a softmax router "
                f"(soft dense routing), load-balance loss weight {c['aux_weight']}")  # fmt: skip

    def _loads(self, x: Tensor, y: Tensor) -> list[Tensor]:
        _, parts = self.net.loss(x, y)
        outs = [parts["aux"], *(layer.load() for layer in self.net.moe_layers())]
        for o in outs:
            o.realize()
        return outs

    def expert_load(self) -> tuple[float, np.ndarray]:
        """(aux, per-layer per-expert load (layers, E)) averaged over the val batches, dropout off."""
        self.net.eval()
        try:
            aux, loads = [], []
            for bx, by in self.val_batches:
                outs = self._load_step(Tensor(bx, device=self.device), Tensor(by, device=self.device))
                aux.append(float(outs[0].item()))
                loads.append(np.stack([o.numpy() for o in outs[1:]]))
        finally:
            self.net.train()
        return float(np.mean(aux)), np.mean(loads, axis=0)

    def finish(self) -> str:
        text = super().finish()
        aux, load = self.expert_load()
        first = self.first_parts.get("aux", float("nan"))
        lines = [f"load-balance aux loss (1 = balanced, {self.config['experts']} = collapsed): "
                 f"train {first:.3f} at step 1 -> {self.parts.get('aux', float('nan')):.3f}, val {aux:.3f}",
                 "per-expert load (fraction of tokens whose top expert it is), val batches:"]  # fmt: skip
        for i, row in enumerate(load):
            lines.append(f"  layer {i}: " + "  ".join(f"{v:.2f}" for v in row))
        return text + "\n" + "\n".join(lines)


def hidden_of(config: dict[str, Any]) -> int:
    return int(config["expert_hidden"]) if config.get("expert_hidden") else 4 * int(config["dim"])


def build_model(config: dict[str, Any], vocab_size: int, device: str) -> MoEGPT:
    c = config
    return MoEGPT(vocab_size, int(c["block"]), int(c["layers"]), int(c["heads"]), int(c["dim"]), float(c["dropout"]),
                  bool(c["bias"]), int(c["experts"]), hidden_of(c), float(c["aux_weight"]), device)  # fmt: skip


def build(config: dict[str, Any], device: str) -> MoETrainer:
    return build_trainer(config, device, build_model, MoETrainer)

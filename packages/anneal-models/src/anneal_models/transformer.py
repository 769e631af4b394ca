"""Blocks the char-level language models share: initializers, attention (MHA/GQA, optional RoPE),
the GELU and SwiGLU feed-forwards, and the transformer block.

Dropout is anneal.nn.Dropout: its masks are drawn on the device by anneal.random inside the kernels
that use them, fresh on every jit replay; the generator's state is part of the trainer's checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from anneal import Tensor, cat, dtypes
from anneal import random as anneal_random
from anneal.jit import jit
from anneal.nn import functional as F
from anneal.nn.modules import Dropout, LayerNorm, Linear, Module, RMSNorm
from anneal.optim import AdamW, clip_grad_norm_, warmup_cosine
from anneal_models import datasets
from anneal_models.datasets import CharDataset
from anneal_models.sample import Sampler
from anneal_models.trainer import StepGraph, SupervisedTrainer

# ---- initializers ----


def normal(shape: tuple[int, ...], std: float, device: str) -> Tensor:
    """A trainable leaf ~ N(0, std), drawn from anneal's generator (anneal.manual_seed reproduces it)."""
    data = anneal_random.generator().standard_normal(shape, dtype=np.float32) * np.float32(std)
    return Tensor(data, dtypes.float32, device, requires_grad=True)


def linear(fan_in: int, fan_out: int, bias: bool, std: float, device: str) -> Linear:
    """nn.Linear with GPT-2's init: weight ~ N(0, std), bias zero."""
    layer = Linear(fan_in, fan_out, bias=False, device=device)
    layer.weight = normal((fan_out, fan_in), std, device)
    if bias:
        layer.bias = Tensor(np.zeros(fan_out, np.float32), dtypes.float32, device, requires_grad=True)
    return layer


# ---- rotary position embedding ----


class Rotary:
    """RoPE tables (cos, sin) for positions 0..block-1, rotate-half layout (as Hugging Face's Llama)."""

    def __init__(self, head_dim: int, block: int, base: float = 10000.0) -> None:
        if head_dim % 2:
            raise ValueError(f"RoPE needs an even head dim, got {head_dim}")
        inv = 1.0 / base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
        angles = np.outer(np.arange(block, dtype=np.float64), inv)  # (block, head_dim/2)
        full = np.concatenate([angles, angles], axis=-1)
        self.cos, self.sin = np.cos(full).astype(np.float32), np.sin(full).astype(np.float32)
        self._tables: dict[tuple[str, int], tuple[Tensor, Tensor]] = {}

    def tables(self, device: str, length: int) -> tuple[Tensor, Tensor]:
        key = (device, length)
        if key not in self._tables:
            self._tables[key] = (Tensor(self.cos[:length], device=device), Tensor(self.sin[:length], device=device))
        return self._tables[key]

    def __call__(self, x: Tensor) -> Tensor:
        """x: (..., T, head_dim)."""
        cos, sin = self.tables(x.device, x.shape[-2])
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        return x * cos + cat([-x2, x1], -1) * sin


# ---- layers ----


class CausalSelfAttention(Module):
    """Causal attention with one fused q/k/v projection (nanoGPT's c_attn / c_proj names).

    kv_heads < heads is grouped-query attention: each key/value head serves heads // kv_heads query
    heads. `rotary` applies RoPE to queries and keys. `causal=False` makes it bidirectional (bert)."""

    def __init__(self, dim: int, heads: int, *, kv_heads: int | None = None, bias: bool, dropout: float,
                 std: float, proj_std: float, device: str, rotary: Rotary | None = None,
                 causal: bool = True) -> None:  # fmt: skip
        super().__init__()
        kv_heads = heads if kv_heads is None else kv_heads
        if dim % heads or heads % kv_heads:
            raise ValueError(f"attention: dim {dim} must divide into {heads} heads, and heads into {kv_heads} kv heads")
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.c_attn = linear(dim, (heads + 2 * kv_heads) * self.head_dim, bias, std, device)
        self.c_proj = linear(dim, dim, bias, proj_std, device)
        self.attn_dropout, self.resid_dropout = Dropout(dropout), Dropout(dropout)
        self._rotary, self._causal = rotary, causal

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        b, t, c = x.shape
        hd, h, kvh = self.head_dim, self.heads, self.kv_heads
        q, k, v = self.c_attn(x).split([h * hd, kvh * hd, kvh * hd], dim=-1)
        q = q.reshape(b, t, h, hd).transpose(1, 2)  # (b, h, t, hd)
        k = k.reshape(b, t, kvh, hd).transpose(1, 2)
        v = v.reshape(b, t, kvh, hd).transpose(1, 2)
        if self._rotary is not None:
            q, k = self._rotary(q), self._rotary(k)
        p, causal = self.attn_dropout.p if self.training else 0.0, self._causal and mask is None
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=causal, enable_gqa=kvh != h)
        y = y.transpose(1, 2).reshape(b, t, c)
        return self.resid_dropout(self.c_proj(y))


class MLP(Module):
    """GPT's feed-forward: c_fc (dim -> 4 dim), GELU (exact, or `approximate="tanh"`: GPT-2's gelu_new), c_proj,
    dropout."""

    def __init__(self, dim: int, hidden: int, *, bias: bool, dropout: float, std: float,
                 proj_std: float, device: str, approximate: str = "none") -> None:  # fmt: skip
        super().__init__()
        self.c_fc = linear(dim, hidden, bias, std, device)
        self.c_proj = linear(hidden, dim, bias, proj_std, device)
        self.dropout = Dropout(dropout)
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate=self.approximate)))


class SwiGLU(Module):
    """Llama's feed-forward: w2(silu(w1 x) * w3 x), no biases."""

    def __init__(self, dim: int, hidden: int, *, dropout: float, std: float, proj_std: float,
                 device: str) -> None:  # fmt: skip
        super().__init__()
        self.w1 = linear(dim, hidden, False, std, device)
        self.w3 = linear(dim, hidden, False, std, device)
        self.w2 = linear(hidden, dim, False, proj_std, device)
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.w2(F.silu(self.w1(x)) * self.w3(x)))


def norm(kind: str, dim: int, bias: bool, device: str) -> Module:
    if kind == "layernorm":
        return LayerNorm(dim, bias=bias, device=device)
    if kind == "rmsnorm":
        return RMSNorm(dim, eps=1e-5, device=device)
    raise ValueError(f"unknown norm {kind!r}")


class Block(Module):
    """Pre-norm residual block: x + attn(ln_1(x)), then x + mlp(ln_2(x)) (nanoGPT's names)."""

    def __init__(self, ln_1: Module, attn: CausalSelfAttention, ln_2: Module, mlp: Module) -> None:
        super().__init__()
        self.ln_1, self.attn, self.ln_2, self.mlp = ln_1, attn, ln_2, mlp

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        x = (x + self.attn(self.ln_1(x), mask)).contiguous()
        return (x + self.mlp(self.ln_2(x))).contiguous()


def decay_groups(params: list[Tensor], weight_decay: float) -> list[dict[str, Any]]:
    """AdamW's parameter groups as nanoGPT makes them: weight decay on matrices, none on biases and norms."""
    groups = [{"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
              {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]  # fmt: skip
    return [g for g in groups if g["params"]]


def count_parameters(module: Module, exclude: tuple[Tensor, ...] = ()) -> int:
    skip = {id(t) for t in exclude}
    return sum(p.numel() for p in module.parameters() if id(p) not in skip)


def describe(config: dict[str, Any], keys: tuple[str, ...]) -> str:
    return ", ".join(f"{k} {config[k]}" for k in keys if k in config)


# ---- the language-model trainer ----


class LanguageModel(Module):
    """A module mapping token ids (B, T) to logits (B, T, V), with its training loss.

    loss() returns the scalar to minimize and its named parts (realized with the step and logged):
    "lm" is always the language-model cross-entropy; a model may add more (moe's "aux")."""

    vocab_size: int
    block: int

    def loss(self, idx: Tensor, targets: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        logits = self(idx)
        lm = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        return lm, {"lm": lm}


Batch = tuple[np.ndarray, np.ndarray]


class LMTrainer(SupervisedTrainer):
    """Trains a LanguageModel as nanoGPT does: AdamW (weight decay on matrices only), linear warmup
    then cosine decay to min_lr, gradient clipping, one jitted step (forward, backward, clip, update).

    Step i's batch depends only on (seed, i), its learning rate only on i, and its dropout masks on the
    device generator's state, which checkpoints save, so a run resumed at step i continues exactly.
    evaluate() is the mean loss over fixed val batches (config "eval_batches" of them), jitted too;
    config "eval_every" is the model's suggested period."""

    name = "lm"

    def __init__(self, config: dict[str, Any], device: str, net: LanguageModel, data: CharDataset,
                 train_batch: Callable[[np.random.Generator], Batch] | None = None,
                 val_batches: list[Batch] | None = None) -> None:  # fmt: skip
        self.data, self.net = data, net
        bsz, block = int(config["batch"]), int(config["block"])
        self._train_batch = train_batch or (lambda rng: data.batch("train", bsz, block, rng))
        self.val_batches = val_batches if val_batches is not None else data.fixed_batches(
            "val", int(config["eval_batches"]), bsz, block, seed=int(config["seed"]) + 1)  # fmt: skip
        params = list(net.parameters())
        optimizer = AdamW(decay_groups(params, float(config["weight_decay"])), lr=float(config["lr"]),
                          betas=(float(config["beta1"]), float(config["beta2"])))  # fmt: skip

        def lm_loss(logits: Tensor, y: Tensor) -> Tensor:
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

        super().__init__(net, params, optimizer, self._batch, lm_loss, device)
        self.config = config  # set after the base class, which may keep its own copy of what it is given
        self.steps_done = 0
        self.part_names: list[str] = []
        self.parts: dict[str, float] = {}  # the last step's loss parts ("lm", and e.g. moe's "aux")
        self.first_parts: dict[str, float] = {}
        self.val_history: list[tuple[int, float]] = []  # (steps done, val loss) of each evaluate()
        self._eval = jit(self._eval_step)
        self._sampler: Sampler | None = None

    # ---- data, schedule and randomness of step i ----
    def _batch(self, i: int) -> Batch:
        return self._train_batch(np.random.default_rng([int(self.config["seed"]), i]))

    def _device_batch(self, i: int) -> tuple[Tensor, Tensor]:
        x, y = self._batch(i)
        return Tensor(x, device=self.device), Tensor(y, device=self.device)

    def lr_at(self, i: int) -> float:
        c = self.config
        return float(c["lr"]) * warmup_cosine(i, int(c["warmup"]), int(c["steps"]), float(c["min_lr"]) / float(c["lr"]))

    def lr(self) -> float:
        """The learning rate the next step uses."""
        return self.lr_at(self.steps_done)

    # ---- the step ----
    step_in_parts = True  # _train_step below is the base's parts (data-parallel training splits it)

    def _outputs(self, x: Tensor, y: Tensor) -> list[Tensor]:
        loss, parts = self.net.loss(x, y)
        self.part_names = list(parts)
        return [loss, *parts.values()]

    def _before_update(self) -> None:
        clip = float(self.config["grad_clip"])
        if clip > 0:
            clip_grad_norm_(self.params, clip)

    def _train_step(self, x: Tensor, y: Tensor) -> list[Tensor]:  # type: ignore[override]
        self.optimizer.zero_grad()
        outs = self._outputs(x, y)
        outs[0].backward()
        self._before_update()
        self.optimizer.step()  # computes the outputs too, in the same schedule, before the update
        return outs

    def step(self, i: int) -> float:
        """Runs step i; returns its language-model loss (parts["lm"]: without auxiliary terms)."""
        for g in self.optimizer.param_groups:
            g["lr"] = self.lr_at(i)
        self.optimizer.sync_lr()  # into the lr buffers, which a jit replay reads (it runs no optimizer code)
        if self._reducer is not None:
            values = self._parallel_step(self._batch(i))
        else:
            values = [float(o.item()) for o in self._step(*self._device_batch(i))]
        self.parts = dict(zip(self.part_names, values[1:]))
        value = self.parts.get("lm", values[0])
        if self.first_loss is None:
            self.first_loss, self.first_parts = value, dict(self.parts)
        self.last_loss = value
        self.steps_done = i + 1
        return value

    def graph(self, backward: bool) -> StepGraph:
        x, y = self._device_batch(self.steps_done)
        with anneal_random.fork_rng([self.device]):  # looking at the step draws nothing the run would
            loss, _ = self.net.loss(x, y)
        return StepGraph([loss], loss.gradient(*self.params) if backward else [])

    # ---- evaluation ----
    def _eval_step(self, x: Tensor, y: Tensor) -> Tensor:
        return self.net.loss(x, y)[1]["lm"].realize()

    def evaluate(self, x: np.ndarray | None = None, y: np.ndarray | None = None) -> float:
        """The mean val loss over the fixed val batches (recorded in val_history), or the loss on one
        given batch; dropout off."""
        batches = self.val_batches if x is None or y is None else [(x, y)]
        self.net.eval()
        try:
            values = [float(self._eval(Tensor(bx, device=self.device), Tensor(by, device=self.device)).item())
                      for bx, by in batches]  # fmt: skip
        finally:
            self.net.train()
        value = float(np.mean(values))
        if x is None:
            self.val_history.append((self.steps_done, value))
        return value

    # ---- the end of the run ----
    def sampler(self) -> Sampler:
        if self._sampler is None:
            self._sampler = Sampler(self.net, self.net.block, self.device)
        return self._sampler

    def sample(self, prompt: str = "\n", tokens: int | None = None, seed: int | None = None) -> str:
        c = self.config
        ids = self.sampler().generate(self.data.encode(prompt), int(c["sample_tokens"] if tokens is None else tokens),
                                      temperature=float(c["temperature"]), top_k=c.get("top_k"),
                                      seed=int(c["seed"] if seed is None else seed))  # fmt: skip
        return self.data.decode(ids)

    def describe(self) -> str:
        """One line: what was trained (the subclass says which architecture)."""
        return f"{self.name}: {count_parameters(self.net) / 1e6:.2f}M parameters"

    def summary(self) -> list[str]:
        val = self.val_history[-1][1] if self.val_history and self.val_history[-1][0] == self.steps_done \
            else self.evaluate()  # fmt: skip
        lines = [self.describe(),
                 f"train loss {self.first_loss:.4f} -> {self.last_loss:.4f} after {self.steps_done} steps; "
                 f"val loss {val:.4f} (mean of {len(self.val_batches)} fixed val batches)"]  # fmt: skip
        if len(self.val_history) > 1:
            lines.append("val loss by step: " + "  ".join(f"{s}: {v:.3f}" for s, v in self.val_history))
        return lines

    def finish(self) -> str:
        c = self.config
        lines = self.summary()
        lines.append(f"sample (temperature {c['temperature']}, top-k {c.get('top_k')}, seed {c['seed']}):")
        lines.append(self.sample())
        return "\n".join(lines)


T = TypeVar("T", bound="LMTrainer")


def build_trainer(
    config: dict[str, Any], device: str, build_model: Callable[[dict[str, Any], int, str], Any], trainer: type[T]
) -> T:
    """What every language model's build() does: seed, load tinyshakespeare, build the net, wrap it."""
    anneal_random.manual_seed(int(config["seed"]))
    data = datasets.tinyshakespeare(config.get("data"))
    return trainer(config, device, build_model(config, data.vocab_size, device), data)

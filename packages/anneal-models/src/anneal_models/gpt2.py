"""gpt2: GPT-2 from the real weights (the Hugging Face layout), sampled with a KV cache, fine-tuned on
tinyshakespeare through the same trainer as the other language models.

- Weights: config.json (n_layer, n_head, n_embd, n_positions, vocab_size, layer_norm_epsilon, activation
  gelu_new) and model.safetensors load into nanogpt's `GPT` module (pre-LayerNorm blocks, learned
  positions, a head tied to wte) with biases and the tanh GELU. Hugging Face's Conv1D keeps its weights as
  (in, out): they are transposed; the causal-mask buffers (`attn.bias`, `attn.masked_bias`) are skipped;
  `lm_head.weight`, when saved, must equal wte (the head is tied). Missing, extra or misshapen tensors are
  named together in one WeightsError. `dtype` float16/bfloat16 keeps the weights in that storage dtype;
  activations stay float32 (a low-precision weight is widened where a float32 activation meets it).
- Sampling (`Generator`): one jitted decode step of fixed shape (1 token against a cache of `positions`
  keys and values per layer) takes the position as a tensor, so the one capture serves every position:
  the new key and value are written into the cache at that position (an in-place assign of the masked
  select) and attention reads the positions up to it. Prompts run through the same step. Tokens are drawn
  on the host (temperature, top-k, top-p, greedy) with a seeded generator, and stream out as bytes.
- Data: tinyshakespeare in GPT-2's BPE (anneal_models.bpe), split as nanoGPT's shakespeare (the first 90%
  of the characters: 301,966 train / 36,059 val tokens), the token arrays cached beside the text.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from anneal import Tensor, dtypes, where
from anneal import random as anneal_random
from anneal.jit import jit
from anneal.nn.state import atomic_write, get_state_dict, load_state_dict, safe_load
from anneal.realize import realize_all
from anneal_models import datasets
from anneal_models.bpe import BPE
from anneal_models.nanogpt import GPT
from anneal_models.sample import choose
from anneal_models.transformer import LMTrainer, count_parameters

DEFAULTS: dict[str, Any] = {
    "steps": 300, "batch": 4, "block": 256, "lr": 6e-5, "min_lr": 6e-6, "warmup": 30, "weight_decay": 0.1,
    "beta1": 0.9, "beta2": 0.95, "grad_clip": 1.0, "eval_every": 50, "eval_batches": 8, "sample_tokens": 100,
    "temperature": 0.8, "top_k": 200, "seed": 0, "weights": None, "init": "pretrained", "dtype": "float32",
    "layers": 12, "heads": 12, "dim": 768, "positions": 1024, "dropout": 0.0, "data": None,
}  # fmt: skip
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"init": "random", "layers": 2, "heads": 2, "dim": 64, "positions": 128, "block": 32, "batch": 2,
             "steps": 8, "lr": 1e-3, "warmup": 2, "eval_every": 0, "eval_batches": 1, "sample_tokens": 8},
    "small": {},
    "full": {"batch": 8, "block": 1024, "steps": 2000, "eval_every": 200, "eval_batches": 20},
}  # fmt: skip
DTYPES = ("float32", "float16", "bfloat16")
SMALL = {
    "model_type": "gpt2",
    "n_layer": 12,
    "n_head": 12,
    "n_embd": 768,
    "n_positions": 1024,
    "vocab_size": 50257,
    "layer_norm_epsilon": 1e-5,
    "activation_function": "gelu_new",
}  # GPT-2 small's config.json
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
MASKS = (".attn.bias", ".attn.masked_bias")  # Hugging Face's causal-mask buffers, not weights


class WeightsError(ValueError):
    """A weights folder that is not GPT-2's layout, or tensors that do not fit it; the message names them."""


# ---------------------------------------------------------------------------- the Hugging Face layout


@dataclass(frozen=True)
class GPT2Config:
    layers: int
    heads: int
    dim: int
    positions: int
    vocab_size: int
    eps: float

    @classmethod
    def read(cls, path: Path) -> GPT2Config:
        try:
            raw = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise WeightsError(f"{path}: not a readable config.json ({exc})") from None
        kind = raw.get("model_type")
        if kind != "gpt2":
            raise WeightsError(f"{path.parent} holds a {kind or 'unknown'} model, not GPT-2 (config.json model_type)")
        act = raw.get("activation_function", "gelu_new")
        if act != "gelu_new":
            raise WeightsError(f"{path}: activation {act!r}; GPT-2 uses gelu_new (the tanh approximation)")
        try:
            return cls(int(raw["n_layer"]), int(raw["n_head"]), int(raw["n_embd"]), int(raw["n_positions"]),
                       int(raw["vocab_size"]), float(raw.get("layer_norm_epsilon", 1e-5)))  # fmt: skip
        except KeyError as exc:
            raise WeightsError(f"{path}: config.json has no {exc.args[0]}") from None


def anneal_names(hf: dict[str, Any]) -> dict[str, Any]:
    """Hugging Face GPT-2 tensors (arrays) under the module's names: `transformer.` prefixed, Conv1D transposed,
    mask buffers dropped; lm_head.weight checked against wte and dropped (the head is tied)."""
    out: dict[str, Any] = {}
    head = None
    for name, value in hf.items():
        key = name.removeprefix("transformer.")
        if key.endswith(MASKS):
            continue
        if key == "lm_head.weight":
            head = value
            continue
        out[f"transformer.{key}"] = value.T if key.endswith(CONV1D) else value
    wte = out.get("transformer.wte.weight")
    if head is not None and wte is not None and (head.shape != wte.shape or not np.array_equal(head, wte)):
        raise WeightsError("lm_head.weight differs from wte.weight: anneal's GPT-2 ties the head to the embedding")
    return out


def read_weights(path: Path) -> dict[str, np.ndarray]:
    """model.safetensors as numpy arrays; a truncated or corrupt file is a WeightsError."""
    try:
        return {k: v.numpy() for k, v in safe_load(path).items()}
    except FileNotFoundError:
        raise WeightsError(f"{path} does not exist") from None
    except Exception as exc:  # safetensors' own error type for a bad header or a short file
        raise WeightsError(f"{path} is truncated or not a safetensors file: {exc}") from None


def load_weights(net: GPT, folder: Path, dtype: str = "float32") -> None:
    """Copy a Hugging Face GPT-2 folder's weights into net (raising WeightsError naming what does not fit)."""
    state = anneal_names(read_weights(folder / "model.safetensors"))
    own = get_state_dict(net)
    missing = sorted(set(own) - set(state))
    extra = sorted(set(state) - set(own))
    shapes = [f"{k}: {tuple(state[k].shape)} in the file, {own[k].shape} in the model" for k in own
              if k in state and tuple(state[k].shape) != own[k].shape]  # fmt: skip
    problems = [f"missing: {_some(missing, ', ')}" if missing else "", f"unexpected: {_some(extra, ', ')}" if extra
                else "", f"misshapen: {_some(shapes, '; ')}" if shapes else ""]  # fmt: skip
    if any(problems):
        raise WeightsError(f"{folder / 'model.safetensors'} does not fit GPT-2 ({'; '.join(p for p in problems if p)})")
    load_state_dict(net, state)
    if dtype != "float32":
        store = dtypes.from_any(dtype)
        for t in own.values():  # the same Tensor objects: the module (and an optimizer) keep them
            t.uop = t.cast(store).contiguous().realize().uop


def _some(items: list[str], sep: str, shown: int = 6) -> str:
    more = f"{sep}and {len(items) - shown} more" if len(items) > shown else ""
    return sep.join(items[:shown]) + more


def pinned_folder() -> Path:
    """The pinned GPT-2 weights, vocab and merges from anneal's cache (fetched on first use; ANNEAL_OFFLINE=1 fails
    fast naming `anneal download gpt2`); config.json is written beside them (the pinned assets do not include it)."""
    from anneal.data import fetch

    weights = Path(fetch("gpt2-weights"))
    fetch("gpt2-vocab")
    fetch("gpt2-merges")
    config = weights.parent / "config.json"
    if not config.exists():
        text = json.dumps(SMALL)
        atomic_write(config, text.encode())
    return weights.parent


def tokenizer(folder: Path | None) -> BPE:
    """The folder's vocab.json / merges.txt when it has them, else the pinned ones."""
    if folder is not None and (folder / "vocab.json").exists() and (folder / "merges.txt").exists():
        return BPE(folder / "vocab.json", folder / "merges.txt")
    from anneal.data import fetch

    return BPE(Path(fetch("gpt2-vocab")), Path(fetch("gpt2-merges")))


# ---------------------------------------------------------------------------- the model


def build_model(cfg: GPT2Config, device: str, dropout: float = 0.0) -> GPT:
    if cfg.eps != 1e-5:
        raise WeightsError(f"layer_norm_epsilon {cfg.eps}: anneal's GPT-2 uses LayerNorm's 1e-5")
    return GPT(cfg.vocab_size, cfg.positions, cfg.layers, cfg.heads, cfg.dim, dropout, True, device, gelu="tanh")


def load(folder: Path | None, device: str, dtype: str = "float32") -> tuple[GPT, BPE]:
    """GPT-2 and its tokenizer from a Hugging Face folder (None: the pinned assets)."""
    if dtype not in DTYPES:
        raise WeightsError(f"dtype {dtype!r}; one of {', '.join(DTYPES)}")
    where_ = folder if folder is not None else pinned_folder()
    net = build_model(GPT2Config.read(where_ / "config.json"), device)
    load_weights(net, where_, dtype)
    return net, tokenizer(folder)


# ---------------------------------------------------------------------------- sampling with a KV cache


class Generator:
    """Token by token from a GPT, one jitted decode step against per-layer key/value caches of `positions`."""

    def __init__(self, net: GPT, device: str) -> None:
        self.net, self.device = net, device
        first = net.transformer["h"][0].attn
        self.heads, self.head_dim = first.heads, first.head_dim
        self.positions = net.block
        shape = (1, self.heads, self.positions, self.head_dim)
        zeros = np.zeros(shape, np.float32)
        self.keys = [Tensor(zeros, device=device).realize() for _ in net.transformer["h"]]
        self.values = [Tensor(zeros, device=device).realize() for _ in net.transformer["h"]]
        self.decode = jit(self._decode)  # public: benchmarks time its replays
        # The step's arguments live in two fixed buffers written before each call: the jit then binds the same
        # buffers every replay (WebGPU: no new bind groups for the ~70 kernels that read the token or position).
        self.token = Tensor(np.zeros((1, 1), np.int64), device=device).realize()
        self.position = Tensor(np.zeros((1,), np.int64), device=device).realize()

    def _decode(self, idx: Tensor, pos: Tensor) -> Tensor:
        """Logits (1, V) of token idx (1, 1) at position pos (1,) int64, given the caches; writes this
        position's keys and values into them."""
        tr, hd = self.net.transformer, self.head_dim
        span = Tensor.arange(self.positions, device=self.device)
        here = (span == pos).reshape(1, 1, self.positions, 1)
        seen = (span <= pos).reshape(1, 1, 1, self.positions)
        x = (tr["wte"](idx) + tr["wpe"](pos.reshape(1, 1))).float()
        writes = []
        for blk, kc, vc in zip(tr["h"], self.keys, self.values):
            attn = blk.attn
            q, k, v = attn.c_attn(blk.ln_1(x)).split([attn.heads * hd] * 3, dim=-1)
            q, k, v = (t.reshape(1, 1, attn.heads, hd).transpose(1, 2) for t in (q, k, v))
            keys, values = where(here, k, kc), where(here, v, vc)
            scores = (q @ keys.transpose(-1, -2)) * (1.0 / math.sqrt(hd))
            y = where(seen, scores, -math.inf).softmax(-1) @ values
            x = x + attn.c_proj(y.transpose(1, 2).reshape(1, 1, attn.heads * hd))
            x = x + blk.mlp(blk.ln_2(x))
            writes += [kc.assign(keys), vc.assign(values)]
        logits = tr["ln_f"](x).matmul(tr["wte"].weight.transpose(0, 1)).reshape(1, -1)
        realize_all([logits, *writes])
        return logits

    def logits(self, token: int, pos: int) -> np.ndarray:
        self.token.assign(Tensor(np.array([[token]], np.int64), device=self.device))
        self.position.assign(Tensor(np.array([pos], np.int64), device=self.device))
        return self.decode(self.token, self.position).numpy()[0].astype(np.float64)

    def stream(self, prompt: list[int], tokens: int, *, temperature: float = 1.0, top_k: int | None = None,
               top_p: float | None = None, seed: int = 0, stop: int | None = None) -> Iterator[int]:  # fmt: skip
        """The generated ids, one at a time (the prompt is not repeated); stops after `tokens` or at `stop`."""
        if not prompt:
            raise ValueError("gpt2: the prompt needs at least one token")
        if len(prompt) + tokens > self.positions:
            raise ValueError(f"gpt2: {len(prompt)} prompt tokens + {tokens} new ones exceed the model's "
                             f"{self.positions} positions")  # fmt: skip
        rng = np.random.default_rng(seed)
        was_training = self.net.training
        self.net.eval()
        try:
            for pos, tok in enumerate(prompt[:-1]):
                self.logits(tok, pos)
            last, pos = prompt[-1], len(prompt) - 1
            for _ in range(tokens):
                nxt = choose_token(self.logits(last, pos), temperature, top_k, top_p, rng)
                yield nxt
                if stop is not None and nxt == stop:
                    return
                last, pos = nxt, pos + 1
        finally:
            if was_training:
                self.net.train()


def choose_token(logits: np.ndarray, temperature: float, top_k: int | None, top_p: float | None,
                 rng: np.random.Generator) -> int:  # fmt: skip
    """sample.choose with nucleus filtering: keep the most likely tokens whose probabilities reach top_p."""
    if temperature <= 0 or top_p is None or top_p >= 1:
        return choose(logits, temperature, top_k, rng)
    z = logits / temperature
    if top_k is not None and 0 < top_k < z.size:
        z = np.where(z < np.partition(z, -top_k)[-top_k], -np.inf, z)
    p = np.exp(z - z.max())
    p /= p.sum()
    order = np.argsort(-p, kind="stable")
    keep = order[: int(np.searchsorted(np.cumsum(p[order]), top_p)) + 1]
    q = np.zeros_like(p)
    q[keep] = p[keep]
    return int(rng.choice(z.size, p=q / q.sum()))


# ---------------------------------------------------------------------------- fine-tuning


class BPEText(datasets.CharDataset):
    """A text in GPT-2's BPE, split as nanoGPT's shakespeare: each part of the character split encoded on its own."""

    def __init__(self, text: str, bpe: BPE, cache: Path | None = None) -> None:
        self.text, self.bpe = text, bpe
        cut = int(len(text) * datasets.TRAIN_FRACTION)
        arrays = _cached(cache, lambda: (bpe.encode(text[:cut]), bpe.encode(text[cut:])))
        self.train, self.val = arrays
        self.data = np.concatenate(arrays)

    @property
    def vocab_size(self) -> int:
        return self.bpe.vocab_size

    def encode(self, s: str) -> np.ndarray:
        return np.asarray(self.bpe.encode(s), np.int64)

    def decode(self, ids: np.ndarray | list[int]) -> str:
        return self.bpe.text(int(i) for i in ids)


def _cached(cache: Path | None, compute: Callable[[], tuple[list[int], list[int]]]) -> tuple[np.ndarray, np.ndarray]:
    """(train, val) token arrays, from cache.npz when it is there (written atomically after computing them)."""
    if cache is not None and cache.exists():
        with np.load(cache) as f:
            return f["train"].astype(np.int64), f["val"].astype(np.int64)
    train, val = (np.asarray(a, np.uint16) for a in compute())
    if cache is not None:
        buf = io.BytesIO()
        np.savez(buf, train=train, val=val)
        atomic_write(cache, buf.getvalue())
    return train.astype(np.int64), val.astype(np.int64)


class GPT2Trainer(LMTrainer):
    name = "gpt2"

    def sample(self, prompt: str = "\n", tokens: int | None = None, seed: int | None = None) -> str:
        c = self.config
        bpe: BPE = self.data.bpe  # type: ignore[attr-defined]
        gen = Generator(self.net, self.device)  # type: ignore[arg-type]
        ids = list(gen.stream(bpe.encode(prompt), int(c["sample_tokens"] if tokens is None else tokens),
                              temperature=float(c["temperature"]), top_k=c.get("top_k"),
                              seed=int(c["seed"] if seed is None else seed), stop=bpe.eot))  # fmt: skip
        return prompt + bpe.text(ids)

    def describe(self) -> str:
        c = self.config
        size = f"{c['layers']} layers, {c['heads']} heads, {c['dim']} dim, block {c['block']}"
        return (f"{self.name}: {count_parameters(self.net) / 1e6:.2f}M parameters ({c['init']}): {size}, "
                f"BPE vocabulary {self.data.vocab_size}")  # fmt: skip


def build(config: dict[str, Any], device: str) -> GPT2Trainer:
    anneal_random.manual_seed(int(config["seed"]))
    folder = Path(config["weights"]) if config.get("weights") else None
    if config["init"] == "pretrained":
        net, bpe = load(folder, device)
        config = {**config, "layers": len(net.transformer["h"]), "dim": net.transformer["wte"].weight.shape[1],
                  "heads": net.transformer["h"][0].attn.heads, "positions": net.block}  # fmt: skip
    elif config["init"] == "random":
        cfg = GPT2Config(int(config["layers"]), int(config["heads"]), int(config["dim"]), int(config["positions"]),
                         50257, 1e-5)  # fmt: skip
        net, bpe = build_model(cfg, device, float(config["dropout"])), tokenizer(folder)
    else:
        raise ValueError(f"gpt2: init must be 'pretrained' or 'random', got {config['init']!r}")
    if int(config["block"]) > net.block:
        raise ValueError(f"gpt2: block {config['block']} is longer than the model's {net.block} positions")
    path = Path(config["data"]) if config.get("data") else datasets.tinyshakespeare_path()
    data = BPEText(path.read_text(encoding="utf-8"), bpe, path.parent / f"{path.stem}.gpt2-bpe.npz")
    return GPT2Trainer(config, device, net, data)

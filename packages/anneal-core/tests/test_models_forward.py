"""Whole-model forward passes against the same models written in PyTorch, with weights from numpy.

Each model is one function of a library namespace (torch or anneal: ``m.F`` is its functional
module) and a dict of parameters, so both sides run literally the same code.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import anneal.nn.functional as AF
from anneal import Tensor

DEV = "cpu"
TORCH = SimpleNamespace(F=TF, tensor=lambda a: torch.from_numpy(a.copy()))
ANNEAL = SimpleNamespace(F=AF, tensor=lambda a: Tensor(a.copy(), device=DEV))


def params(m: SimpleNamespace, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    return {k: m.tensor(v) for k, v in arrays.items()}


def init(rng: np.random.Generator, shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    out = {}
    for name, shape in shapes.items():
        fan_in = shape[-1] if len(shape) > 1 else shape[0]
        out[name] = (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)
    return out


# ---- 784-256-10 MLP ----


def mlp(m: SimpleNamespace, p: dict[str, Any], x: Any, y: Any) -> tuple[Any, Any, Any]:
    h = m.F.relu(m.F.linear(x, p["w1"], p["b1"]))
    logits = m.F.linear(h, p["w2"], p["b2"])
    return logits, m.F.log_softmax(logits, dim=-1), m.F.cross_entropy(logits, y)


@pytest.mark.parametrize("batch", [1, 32])
def test_mlp_784_256_10_forward(batch: int) -> None:
    rng = np.random.default_rng(batch)
    arrays = init(rng, {"w1": (256, 784), "b1": (256,), "w2": (10, 256), "b2": (10,)})
    x = rng.random((batch, 784), dtype=np.float32)
    y = rng.integers(0, 10, size=(batch,))
    expected = mlp(TORCH, params(TORCH, arrays), TORCH.tensor(x), TORCH.tensor(y))
    got = mlp(ANNEAL, params(ANNEAL, arrays), ANNEAL.tensor(x), ANNEAL.tensor(y))
    for name, g, e in zip(("logits", "log_softmax", "loss"), got, expected):
        assert g.shape == tuple(e.shape), name
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)


# ---- a 2-layer pre-LN transformer (causal MHA via scaled_dot_product_attention, GELU MLP) ----

VOCAB, CTX, DIM, HEADS, LAYERS = 64, 16, 32, 4, 2


def transformer_arrays(rng: np.random.Generator) -> dict[str, np.ndarray]:
    shapes: dict[str, tuple[int, ...]] = {"wte": (VOCAB, DIM), "wpe": (CTX, DIM), "lnf.w": (DIM,), "lnf.b": (DIM,)}
    for i in range(LAYERS):
        shapes |= {
            f"h{i}.ln1.w": (DIM,), f"h{i}.ln1.b": (DIM,), f"h{i}.ln2.w": (DIM,), f"h{i}.ln2.b": (DIM,),
            f"h{i}.qkv.w": (3 * DIM, DIM), f"h{i}.qkv.b": (3 * DIM,),
            f"h{i}.proj.w": (DIM, DIM), f"h{i}.proj.b": (DIM,),
            f"h{i}.fc.w": (4 * DIM, DIM), f"h{i}.fc.b": (4 * DIM,),
            f"h{i}.out.w": (DIM, 4 * DIM), f"h{i}.out.b": (DIM,),
        }  # fmt: skip
    arrays = init(rng, shapes)
    for k in arrays:
        if k.endswith(("ln1.w", "ln2.w", "lnf.w")):
            arrays[k] = (1 + 0.1 * rng.standard_normal(arrays[k].shape)).astype(np.float32)
    return arrays


def block(m: SimpleNamespace, p: dict[str, Any], i: int, x: Any) -> Any:
    b, t, c = x.shape
    h = m.F.layer_norm(x, (c,), p[f"h{i}.ln1.w"], p[f"h{i}.ln1.b"])
    qkv = m.F.linear(h, p[f"h{i}.qkv.w"], p[f"h{i}.qkv.b"])  # (b, t, 3c)
    q, k, v = (qkv[:, :, j * c : (j + 1) * c].reshape(b, t, HEADS, c // HEADS).transpose(1, 2) for j in range(3))
    y = m.F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (b, heads, t, c/heads)
    x = x + m.F.linear(y.transpose(1, 2).reshape(b, t, c), p[f"h{i}.proj.w"], p[f"h{i}.proj.b"])
    h = m.F.layer_norm(x, (c,), p[f"h{i}.ln2.w"], p[f"h{i}.ln2.b"])
    h = m.F.gelu(m.F.linear(h, p[f"h{i}.fc.w"], p[f"h{i}.fc.b"]))
    return x + m.F.linear(h, p[f"h{i}.out.w"], p[f"h{i}.out.b"])


def transformer(m: SimpleNamespace, p: dict[str, Any], idx: Any, targets: Any) -> tuple[Any, Any]:
    t = idx.shape[1]
    x = m.F.embedding(idx, p["wte"]) + p["wpe"][:t]
    for i in range(LAYERS):
        x = block(m, p, i, x)
    x = m.F.layer_norm(x, (DIM,), p["lnf.w"], p["lnf.b"])
    logits = m.F.linear(x, p["wte"])  # tied embedding
    return logits, m.F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


@pytest.mark.parametrize("batch,seq", [(2, 16), (1, 5)])
def test_two_layer_transformer_forward(batch: int, seq: int) -> None:
    rng = np.random.default_rng(seq)
    arrays = transformer_arrays(rng)
    idx = rng.integers(0, VOCAB, size=(batch, seq))
    targets = rng.integers(0, VOCAB, size=(batch, seq))
    expected = transformer(TORCH, params(TORCH, arrays), TORCH.tensor(idx), TORCH.tensor(targets))
    got = transformer(ANNEAL, params(ANNEAL, arrays), ANNEAL.tensor(idx), ANNEAL.tensor(targets))
    for name, g, e in zip(("logits", "loss"), got, expected):
        assert g.shape == tuple(e.shape), name
        # two residual blocks (layernorm rsqrt, softmax, erf-based GELU, sums of up to 128 terms) compound
        # float32 rounding to ~2e-6 absolute on logits of magnitude up to ~5 (measured), above atol 1e-6
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-5, atol=1e-5, err_msg=name)

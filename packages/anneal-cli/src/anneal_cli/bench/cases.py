"""The cases `anneal bench` runs: what models are made of, forward + backward, and whole training steps.

Each op case is one function of a functional namespace `F` and a dict of inputs, written once: anneal's
`anneal.nn.functional` and torch's `torch.nn.functional` take the same calls, so the same code builds the anneal
graph and the PyTorch peer, and the peer's gradients check anneal's. Sizes: `tiny` (seconds on a CPU, for tests),
`small`, and `full` (the shapes of issue 12's GPU table).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SIZES = ("tiny", "small", "full")


@dataclass(frozen=True)
class OpCase:
    name: str
    build: Callable[[Any, dict[str, Any]], Any]  # (F, inputs) -> output
    shapes: Callable[[str], dict[str, tuple[int, ...]]]  # size -> input shapes
    flops: Callable[[dict[str, tuple[int, ...]]], float]  # forward + backward work, for the TFLOP/s column


@dataclass(frozen=True)
class StepCase:
    model: str
    presets: dict[str, str]  # size -> the model's preset


def _rows(size: str, tiny: int, small: int, full: int) -> int:
    return {"tiny": tiny, "small": small, "full": full}[size]


def linear_gelu(F: Any, t: dict[str, Any]) -> Any:
    return F.gelu(t["x"] @ t["w"])


def matmul(F: Any, t: dict[str, Any]) -> Any:
    return t["x"] @ t["w"]


def layernorm_linear(F: Any, t: dict[str, Any]) -> Any:
    return F.layer_norm(t["x"], (t["x"].shape[-1],)) @ t["w"]


def softmax(F: Any, t: dict[str, Any]) -> Any:
    return F.softmax(t["x"], -1)


def causal_attention(F: Any, t: dict[str, Any]) -> Any:
    return F.scaled_dot_product_attention(t["q"], t["k"], t["v"], is_causal=True)


def conv3x3_relu(F: Any, t: dict[str, Any]) -> Any:
    return F.relu(F.conv2d(t["x"], t["w"], padding=1))


def _gemm(n: int, k: int, m: int) -> dict[str, tuple[int, ...]]:
    return {"x": (n, k), "w": (k, m)}


def _gemm_flops(s: dict[str, tuple[int, ...]]) -> float:
    (n, k), (_, m) = s["x"], s["w"]
    return 3 * 2.0 * n * k * m  # the product and the two gradient products


def _attention(size: str) -> dict[str, tuple[int, ...]]:
    shape = (_rows(size, 2, 8, 64), _rows(size, 2, 4, 6), _rows(size, 32, 128, 256), 64)
    return {"q": shape, "k": shape, "v": shape}


def _attention_flops(s: dict[str, tuple[int, ...]]) -> float:
    b, h, t, d = s["q"]
    return 3 * 2 * 2.0 * b * h * t * t * d / 2  # two products, forward and two gradients each, causal half


def _conv(size: str) -> dict[str, tuple[int, ...]]:
    return {"x": (_rows(size, 4, 64, 512), 3, 32, 32), "w": (64, 3, 3, 3)}


def _conv_flops(s: dict[str, tuple[int, ...]]) -> float:
    (n, c, h, w), (o, _, kh, kw) = s["x"], s["w"]
    return 3 * 2.0 * n * o * h * w * c * kh * kw


OP_CASES = [
    OpCase("linear + gelu", linear_gelu, lambda z: _gemm(_rows(z, 256, 2048, 16384), 384, 1536), _gemm_flops),
    OpCase("matmul", matmul, lambda z: _gemm(_rows(z, 256, 2048, 16384), 1536, 384), _gemm_flops),
    OpCase(
        "layernorm + linear", layernorm_linear, lambda z: _gemm(_rows(z, 256, 2048, 16384), 384, 1152), _gemm_flops
    ),  # fmt: skip
    OpCase(
        "softmax", softmax, lambda z: {"x": (_rows(z, 256, 4096, 16384), 1024)}, lambda s: 5.0 * math.prod(s["x"])
    ),  # fmt: skip
    OpCase("causal attention", causal_attention, _attention, _attention_flops),
    OpCase("conv3x3 + relu", conv3x3_relu, _conv, _conv_flops),
]

STEP_CASES = [
    StepCase("mlp", {"tiny": "tiny", "small": "small", "full": "small"}),
    StepCase("nanogpt", {"tiny": "tiny", "small": "small", "full": "full"}),
]

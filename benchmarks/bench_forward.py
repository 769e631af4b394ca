"""Forward passes on the numpy backend vs PyTorch CPU, measured in the same run.

Prints anneal's time, torch's time and their ratio (anneal / torch; lower is better) for
a chain of 512x512 matmuls and a 2-layer transformer block stack. Values are compared too.
Run: python benchmarks/bench_forward.py
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch
from transformer import AnnealOps, TorchOps, forward, init_weights

from anneal import Tensor


def best_of(fn: Callable[[], object], runs: int = 10) -> float:
    fn()  # warm-up: compile / schedule once
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def matmul_chain(n: int = 512, depth: int = 4) -> None:
    rng = np.random.default_rng(0)
    mats = [(rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32) for _ in range(depth + 1)]
    a = [Tensor(m, device="cpu") for m in mats]
    t = [torch.tensor(m) for m in mats]

    def run_anneal() -> np.ndarray:
        x = a[0]
        for m in a[1:]:
            x = x @ m
        return x.numpy()

    def run_torch() -> np.ndarray:
        x = t[0]
        for m in t[1:]:
            x = x @ m
        return x.numpy()

    np.testing.assert_allclose(run_anneal(), run_torch(), rtol=1e-3, atol=1e-4)
    ta, tt = best_of(run_anneal), best_of(run_torch)
    print(f"matmul chain {depth}x {n}x{n}: anneal {ta * 1e3:7.2f} ms  torch {tt * 1e3:7.2f} ms  ratio {ta / tt:5.2f}x")


def transformer(layers: int = 2, heads: int = 4, dim: int = 128, block: int = 64, batch: int = 12) -> None:
    w = init_weights(layers, dim, 65, block)
    x = np.random.default_rng(1).standard_normal((batch, block, dim)).astype(np.float32)
    ao, to = AnnealOps("cpu"), TorchOps("cpu")
    aw, tw = {k: ao.tensor(v) for k, v in w.items()}, {k: to.tensor(v) for k, v in w.items()}
    ax, tx = ao.tensor(x), to.tensor(x)

    def run_anneal() -> np.ndarray:
        return forward(ao, aw, ax, layers, heads).numpy()

    def run_torch() -> np.ndarray:
        with torch.no_grad():
            return forward(to, tw, tx, layers, heads).numpy()

    np.testing.assert_allclose(run_anneal(), run_torch(), rtol=1e-4, atol=1e-4)
    ta, tt = best_of(run_anneal), best_of(run_torch)
    print(f"transformer {layers}L d{dim} T{block} B{batch}: anneal {ta * 1e3:7.2f} ms  torch {tt * 1e3:7.2f} ms  "
          f"ratio {ta / tt:5.2f}x")  # fmt: skip


if __name__ == "__main__":
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    matmul_chain()
    transformer()

"""One training step on the numpy backend vs PyTorch CPU, measured in the same run.

Cases: the 784-256-10 MLP (SGD) and a 2-layer transformer LM (AdamW). Reported separately:
the first step (graph building, scheduling, compiling: anneal's compile cost) and the
jit-replayed step (what every later step costs), each as a ratio to torch's eager step.
Run: python benchmarks/bench_train_cpu.py
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch
from transformer import AnnealOps, TorchOps, forward, init_weights

from anneal import Tensor
from anneal.jit import jit
from anneal.optim import SGD, AdamW


def per_step(fn: Callable[[], object], steps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(steps):
        fn()
    return (time.perf_counter() - t0) / steps


def first_and_replay(step: Callable[[], object], steps: int = 20) -> tuple[float, float]:
    t0 = time.perf_counter()
    step()
    first = time.perf_counter() - t0
    step()  # the jit's capture call
    return first, per_step(step, steps)


def mlp(batch: int = 128) -> None:
    rng = np.random.default_rng(0)
    w1, w2 = (
        rng.standard_normal((784, 256)).astype(np.float32) * 0.05,
        rng.standard_normal((256, 10)).astype(np.float32) * 0.05,
    )
    x = rng.standard_normal((batch, 784)).astype(np.float32)
    y = rng.integers(0, 10, batch)
    a1, a2 = Tensor(w1, requires_grad=True, device="cpu"), Tensor(w2, requires_grad=True, device="cpu")
    opt = SGD([a1, a2], lr=0.01)
    ax, ay = Tensor(x, device="cpu"), Tensor(y, device="cpu")

    @jit
    def astep(xx: Tensor, yy: Tensor) -> Tensor:
        opt.zero_grad()
        logits = (xx @ a1).relu() @ a2
        loss = -logits.log_softmax(-1).gather(1, yy.reshape(-1, 1)).mean()
        loss.backward()
        opt.step()
        return loss

    first, replay = first_and_replay(lambda: astep(ax, ay).item())
    t1, t2 = torch.tensor(w1, requires_grad=True), torch.tensor(w2, requires_grad=True)
    topt = torch.optim.SGD([t1, t2], lr=0.01)
    tx, ty = torch.tensor(x), torch.tensor(y)

    def tstep() -> float:
        topt.zero_grad()
        loss = torch.nn.functional.cross_entropy((tx @ t1).relu() @ t2, ty)
        loss.backward()
        topt.step()
        return float(loss.item())

    tstep()
    tt = per_step(tstep, 20)
    print(f"MLP 784-256-10 b{batch} step: anneal first {first * 1e3:7.1f} ms, replay {replay * 1e3:6.2f} ms | "
          f"torch {tt * 1e3:6.2f} ms | replay/torch {replay / tt:5.2f}x")  # fmt: skip


def transformer(layers: int = 2, heads: int = 4, dim: int = 128, block: int = 64, batch: int = 12) -> None:
    w = init_weights(layers, dim, 65, block)
    rng = np.random.default_rng(0)
    data = rng.standard_normal((batch, block, dim)).astype(np.float32)
    target = rng.integers(0, 65, (batch, block))
    ao, to = AnnealOps("cpu"), TorchOps("cpu")
    aw = {k: Tensor(v, device="cpu", requires_grad=True) for k, v in w.items()}
    opt = AdamW(list(aw.values()), lr=1e-3)

    @jit
    def astep(x: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        logits = forward(ao, aw, x, layers, heads) @ aw["wte"].T
        loss = -logits.reshape(-1, 65).log_softmax(-1).gather(1, y.reshape(-1, 1)).mean()
        loss.backward()
        opt.step()
        return loss

    x, y = Tensor(data, device="cpu"), Tensor(target, device="cpu")
    first, replay = first_and_replay(lambda: astep(x, y).item(), steps=10)
    tw = {k: torch.tensor(v, requires_grad=True) for k, v in w.items()}
    topt = torch.optim.AdamW(list(tw.values()), lr=1e-3)
    tx, ty = torch.tensor(data), torch.tensor(target)

    def tstep() -> float:
        topt.zero_grad()
        logits = forward(to, tw, tx, layers, heads) @ tw["wte"].T
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 65), ty.reshape(-1))
        loss.backward()
        topt.step()
        return float(loss.item())

    tstep()
    tt = per_step(tstep, 10)
    print(f"transformer {layers}L d{dim} T{block} B{batch} step: anneal first {first * 1e3:7.1f} ms, replay "
          f"{replay * 1e3:6.2f} ms | torch {tt * 1e3:6.2f} ms | replay/torch {replay / tt:5.2f}x")  # fmt: skip


if __name__ == "__main__":
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    mlp()
    transformer()

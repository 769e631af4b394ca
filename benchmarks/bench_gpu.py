"""WebGPU backend vs PyTorch CUDA (float32, TF32 off) on the same GPU, measured in one run.

Prints, for each case, anneal's time, torch's time, their ratio and the achieved TFLOP/s or
GB/s (and the share of the GPU's peak memory bandwidth, given with --peak-gbs).
Run on a machine with a GPU: python benchmarks/bench_gpu.py [--peak-gbs 4800] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable

import numpy as np
import torch

from anneal import Tensor
from anneal.jit import jit
from anneal.realize import runner

DEVICE = "webgpu"
TORCH = "cuda"  # --torch-device: the peer's device


def sync() -> None:
    runner(DEVICE).backend.synchronize()


def torch_sync() -> None:
    if TORCH == "cuda":
        torch.cuda.synchronize()


def timeit(fn: Callable[[], object], sync_fn: Callable[[], None], runs: int = 10, reps: int = 3) -> float:
    """Seconds per call: calls are queued back to back and synchronized once per batch, so the
    cost of a host round trip (large for wgpu's buffer mapping) is not counted per call."""
    fn()
    sync_fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(runs):
            fn()
        sync_fn()
        best = min(best, (time.perf_counter() - t0) / runs)
    return best


def report(name: str, ta: float, tt: float, work: float, unit: str, peak: float | None = None) -> dict:
    rate_a, rate_t = work / ta, work / tt
    extra = f"  ({100 * rate_a / peak:.0f}% of peak)" if peak else ""
    print(f"{name:<34} anneal {ta * 1e3:8.3f} ms {rate_a:8.1f} {unit}{extra} | torch {tt * 1e3:8.3f} ms "
          f"{rate_t:8.1f} {unit} | anneal/torch time {ta / tt:5.2f}x")  # fmt: skip
    return {"case": name, "anneal_ms": ta * 1e3, "torch_ms": tt * 1e3, f"anneal_{unit}": rate_a,
            f"torch_{unit}": rate_t, "peak_share": rate_a / peak if peak else None}  # fmt: skip


def matmul(n: int) -> dict:
    a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((n, n)).astype(np.float32)
    x, w = Tensor(a, device=DEVICE), Tensor(b, device=DEVICE)
    tx, tw = torch.tensor(a, device=TORCH), torch.tensor(b, device=TORCH)
    got = (x @ w).numpy()
    ref = (tx @ tw).cpu().numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-2 * np.sqrt(n))
    step = jit(lambda u, v: (u @ v).realize())
    ta = timeit(lambda: step(x, w), sync)
    tt = timeit(lambda: tx @ tw, torch_sync)
    return report(f"matmul {n}x{n}x{n} f32", ta, tt, 2 * n**3 / 1e12, "TFLOP/s")


def elementwise(n: int, peak: float | None) -> dict:
    a = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    b = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    x, y = Tensor(a, device=DEVICE), Tensor(b, device=DEVICE)
    tx, ty = torch.tensor(a, device=TORCH), torch.tensor(b, device=TORCH)

    def chain(u: object, v: object) -> object:
        return ((u * 1.5 + v).relu() * v - u * 0.25).sigmoid()  # type: ignore[operator]

    np.testing.assert_allclose(chain(x, y).numpy(), chain(tx, ty).cpu().numpy(), rtol=1e-5, atol=1e-6)
    step = jit(lambda u, v: chain(u, v).realize())  # replayed: the GPU's time, not Python's graph building
    ta = timeit(lambda: step(x, y), sync, runs=50)
    tt = timeit(lambda: chain(tx, ty), torch_sync)
    return report(f"elementwise chain ({n // 2**20}M f32)", ta, tt, 3 * 4 * n / 1e9, "GB/s", peak)


def softmax(rows: int, cols: int, peak: float | None) -> dict:
    a = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    x, tx = Tensor(a, device=DEVICE), torch.tensor(a, device=TORCH)
    np.testing.assert_allclose(x.softmax(-1).numpy(), tx.softmax(-1).cpu().numpy(), rtol=1e-4, atol=1e-7)
    step = jit(lambda u: u.softmax(-1).realize())
    ta = timeit(lambda: step(x), sync, runs=50)
    tt = timeit(lambda: tx.softmax(-1), torch_sync)
    return report(f"softmax {rows}x{cols} f32 (read+write)", ta, tt, 2 * 4 * rows * cols / 1e9, "GB/s", peak)


def training_step(model: str, steps: int = 20) -> dict:
    """One training step of a model from the zoo vs the same model in torch, eager, same hyperparameters."""
    from torch_models import torch_trainer

    from anneal_models import conv, mlp

    module = {"mlp": mlp, "conv": conv}[model]
    config = {**module.DEFAULTS}
    trainer = module.build(config, DEVICE)
    for i in range(3):
        trainer.step(i)
    sync()
    t0 = time.perf_counter()
    for i in range(steps):
        trainer.step(i)
    ta = (time.perf_counter() - t0) / steps
    tstep = torch_trainer(model, config, TORCH)
    for i in range(3):
        tstep(i)
    torch_sync()
    t0 = time.perf_counter()
    for i in range(steps):
        tstep(i)
    torch_sync()
    tt = (time.perf_counter() - t0) / steps
    print(f"{model + ' training step':<34} anneal {ta * 1e3:8.3f} ms | torch eager {tt * 1e3:8.3f} ms | "
          f"ratio {ta / tt:5.2f}x")  # fmt: skip
    return {"case": f"{model} step", "anneal_ms": ta * 1e3, "torch_ms": tt * 1e3}


def transformer_step(steps: int = 20, layers: int = 2, heads: int = 4, dim: int = 128, block: int = 64,
                     batch: int = 12) -> dict:  # fmt: skip
    """One AdamW training step of a 2-layer transformer (the forward of transformer.py + a linear head)."""
    from transformer import AnnealOps, TorchOps, forward, init_weights

    from anneal.jit import jit
    from anneal.optim import AdamW

    w = init_weights(layers, dim, 65, block)
    rng = np.random.default_rng(0)
    data = rng.standard_normal((batch, block, dim)).astype(np.float32)
    target = rng.integers(0, 65, (batch, block))
    ao = AnnealOps(DEVICE)
    aw = {k: Tensor(v, device=DEVICE, requires_grad=True) for k, v in w.items()}
    opt = AdamW(list(aw.values()), lr=1e-3)

    @jit
    def astep(x: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        logits = forward(ao, aw, x, layers, heads) @ aw["wte"].T
        loss = logits.reshape(-1, 65).log_softmax(-1).gather(1, y.reshape(-1, 1)).mean() * -1
        loss.backward()
        opt.step(extra=[loss])
        return loss

    x, y = Tensor(data, device=DEVICE), Tensor(target, device=DEVICE)
    for _ in range(3):
        astep(x, y).item()
    t0 = time.perf_counter()
    for _ in range(steps):
        astep(x, y)
    sync()
    ta = (time.perf_counter() - t0) / steps
    to = TorchOps(TORCH)
    tw = {k: torch.tensor(v, device=TORCH, requires_grad=True) for k, v in w.items()}
    topt = torch.optim.AdamW(list(tw.values()), lr=1e-3)
    tx, ty = torch.tensor(data, device=TORCH), torch.tensor(target, device=TORCH)

    def tstep() -> None:
        topt.zero_grad()
        logits = forward(to, tw, tx, layers, heads) @ tw["wte"].T
        torch.nn.functional.cross_entropy(logits.reshape(-1, 65), ty.reshape(-1)).backward()
        topt.step()

    for _ in range(3):
        tstep()
    torch_sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        tstep()
    torch_sync()
    tt = (time.perf_counter() - t0) / steps
    print(f"{'2-layer transformer step':<34} anneal {ta * 1e3:8.3f} ms | torch eager {tt * 1e3:8.3f} ms | "
          f"ratio {ta / tt:5.2f}x")  # fmt: skip
    return {"case": "transformer step", "anneal_ms": ta * 1e3, "torch_ms": tt * 1e3}


def host_overhead(kernels: int = 200) -> dict:
    """A jit-replayed step of ~200 tiny kernels: microseconds of Python per kernel."""
    from anneal.jit import jit

    xs = [Tensor(np.ones(64, np.float32), device=DEVICE) for _ in range(kernels)]

    @jit
    def step(x: Tensor) -> Tensor:
        out = x
        for i in range(kernels):
            out = (out + xs[i]).contiguous()  # one kernel each
        return out.realize()

    x = Tensor(np.zeros(64, np.float32), device=DEVICE)
    for _ in range(3):
        step(x)
    sync()
    n = 20
    t0 = time.perf_counter()
    for _ in range(n):
        step(x)
    host = (time.perf_counter() - t0) / n
    sync()
    run = runner(DEVICE)
    print(f"host overhead: {host * 1e6 / kernels:.1f} us per kernel ({kernels} kernels per replayed step)")
    return {"case": "host overhead", "us_per_kernel": host * 1e6 / kernels, "kernels_run": run.stats.kernels_run}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--peak-gbs", type=float, default=None, help="the GPU's peak memory bandwidth in GB/s")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--torch-device", default="cuda")
    args = p.parse_args()
    global TORCH
    TORCH = args.torch_device
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    backend = runner(DEVICE).backend
    print(f"anneal webgpu on {backend.adapter.info['device']} ({backend.adapter.info['backend_type']}); "
          f"torch {torch.__version__} on {torch.cuda.get_device_name() if TORCH == 'cuda' else TORCH}")  # fmt: skip
    results = [matmul(1024 if args.quick else 4096), elementwise(2**24 if args.quick else 2**26, args.peak_gbs),
               softmax(4096, 4096 if args.quick else 8192, args.peak_gbs), host_overhead()]  # fmt: skip
    for model in ("mlp", "conv"):
        results.append(training_step(model))
    results.append(transformer_step())
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "bench_gpu.json"), "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()

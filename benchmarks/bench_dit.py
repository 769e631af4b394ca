"""One dit `small` training step (and meanflow's, JVP included): anneal vs the same model in PyTorch, same run.

    python benchmarks/bench_dit.py --device webgpu --torch-device cuda      # the H200 run
    python benchmarks/bench_dit.py --device cpu --torch-device cpu --steps 20

Both sides train on the real digits (8x8, patch 2), draw the step's noise, times and label dropout on the
device, run forward, backward and AdamW, and read the loss every step (as `anneal train` does). torch runs
float32 with TF32 off; its meanflow step takes the JVP with torch.func.jvp (eager; its fused attention has
no forward-mode rule, so attention is spelled out, as in the tests' oracle). Prints ms per step of each and
the ratio; the first anneal step (trace, schedule, compile) separately.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch

from anneal_models import dit, generative, images, meanflow

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "anneal-models" / "tests"))
from torch_reference import TorchDiT, torch_meanflow_loss  # noqa: E402 - the tests' oracle of the same net

from anneal_cli.bench.timing import time_steps


def anneal_steps(module: Any, config: dict[str, Any], device: str, steps: int) -> tuple[float, float]:
    first, ms = time_steps(module.build(config, device), steps)
    return first, ms / steps


def torch_steps(kind: str, config: dict[str, Any], device: str, steps: int) -> float:
    torch.manual_seed(0)
    data = images.load("digits")
    x_all = torch.tensor(generative.to_unit_range(data.x_train, 16.0), device=device)
    y_all = torch.tensor(data.y_train, device=device)
    times, scale = (1, 1.0) if kind == "dit" else (2, meanflow.TIME_SCALE)
    net = TorchDiT((1, 8, 8), 10, int(config["patch"]), int(config["dim"]), int(config["layers"]),
                   int(config["heads"]), times, scale).to(device)  # fmt: skip
    opt = torch.optim.AdamW(net.parameters(), lr=float(config["lr"]), weight_decay=0.0)
    abar = torch.tensor(generative.alpha_bars("cosine", 1000), dtype=torch.float32, device=device)
    bsz = int(config["batch"])

    def step(i: int) -> float:
        idx = torch.randint(0, len(x_all), (bsz,), device=device)
        x, y = x_all[idx], y_all[idx]
        y = torch.where(torch.rand(bsz, device=device) < 0.1, 10, y)
        e = torch.randn_like(x)
        if kind == "dit":
            t = torch.randint(0, 1000, (bsz,), device=device)
            a = abar[t].reshape(-1, 1, 1, 1)
            loss = (net(a.sqrt() * x + (1 - a).sqrt() * e, t.float(), y) - e).square().mean()
        else:
            a, b = (torch.sigmoid(torch.randn(bsz, device=device) - 0.4) for _ in range(2))
            t, r = torch.maximum(a, b), torch.minimum(a, b)
            r = torch.where(torch.rand(bsz, device=device) < 0.25, r, t)
            loss = torch_meanflow_loss(net, x, y, r, t, e)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return float(loss.item())

    step(0)
    step(1)
    t0 = time.perf_counter()
    for i in range(2, steps + 2):
        step(i)
    return (time.perf_counter() - t0) * 1000 / steps


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="webgpu")
    p.add_argument("--torch-device", default="cuda")
    p.add_argument("--steps", type=int, default=100)
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for kind, module in (("dit", dit), ("meanflow", meanflow)):
        config = {**module.DEFAULTS, "score_samples": 0}
        ms_torch = torch_steps(kind, config, args.torch_device, args.steps)
        first, ms_anneal = anneal_steps(module, config, args.device, args.steps)
        print(f"{kind} small (dim {config['dim']}, {config['layers']} blocks, batch {config['batch']}): torch "
              f"{args.torch_device} {ms_torch:.2f} ms/step, anneal {args.device} {ms_anneal:.2f} ms/step "
              f"(first step {first:.1f} s); ratio anneal/torch {ms_anneal / ms_torch:.2f}x", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()

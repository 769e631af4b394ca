"""nanogpt from the zoo: anneal vs nanoGPT in PyTorch (same model, batch and AdamW), in one run.

    python benchmarks/bench_nanogpt.py --device webgpu --torch-device cuda --preset full --steps 20
    python benchmarks/bench_nanogpt.py --device cpu --torch-device cpu --preset small --steps 10
    python benchmarks/bench_nanogpt.py --device webgpu --preset small --train   # the whole run: val loss

Prints the first-step (trace, schedule, compile) time and the jit-replayed ms/step of both, and
with --train the full training run's val loss (target for small: <= 1.88, nanoGPT's CPU result).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from anneal_models import nanogpt

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "anneal-models" / "tests"))
from torch_reference import torch_nanogpt  # noqa: E402 - the tests' nanoGPT oracle


def anneal_stepper(config: dict, device: str) -> tuple[float, Callable[[int], float], object]:
    """The anneal trainer after its first step (trace, schedule, compile: timed) and the jit's capture."""
    trainer = nanogpt.build(config, device)
    t0 = time.perf_counter()
    trainer.step(0)
    first = time.perf_counter() - t0
    trainer.step(1)  # the jit's capture
    return first, trainer.step, trainer


def torch_stepper(config: dict, device: str, steps: int, vocab: int) -> Callable[[int], float]:
    net = torch_nanogpt(config, vocab).to(device)
    opt = torch.optim.AdamW(net.parameters(), lr=config["lr"], betas=(config["beta1"], config["beta2"]),
                            weight_decay=config["weight_decay"])  # fmt: skip
    rng = np.random.default_rng(0)
    data = rng.integers(0, vocab, (steps + 2, config["batch"], config["block"] + 1))

    def step(i: int) -> float:
        batch = torch.tensor(data[i % len(data)], device=device)
        x, y = batch[:, :-1], batch[:, 1:]
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(x).reshape(-1, vocab), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), config["grad_clip"])
        opt.step()
        return float(loss.item())

    step(0)
    step(1)
    return step


def interleaved(
    a: Callable[[int], float], b: Callable[[int], float], steps: int, rounds: int
) -> list[tuple[float, float]]:
    """Seconds per step of a and of b, measured in alternating rounds of `steps` steps each, so a machine
    whose speed drifts (shared cores) slows both alike."""
    out = []
    for r in range(rounds):
        per = []
        for fn in (a, b):
            t0 = time.perf_counter()
            for i in range(2 + r * steps, 2 + (r + 1) * steps):
                fn(i)
            per.append((time.perf_counter() - t0) / steps)
        out.append((per[0], per[1]))
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cpu")
    p.add_argument("--torch-device", default="cpu")
    p.add_argument("--preset", default="small", choices=["tiny", "small", "full"])
    p.add_argument("--steps", type=int, default=10, help="steps per round")
    p.add_argument("--rounds", type=int, default=5, help="alternating rounds (anneal, then torch)")
    p.add_argument("--train", action="store_true", help="run the preset's whole training and report val loss")
    args = p.parse_args()
    config = {**nanogpt.DEFAULTS, **nanogpt.PRESETS[args.preset]}
    if args.train:
        trainer = nanogpt.build(config, args.device)
        t0 = time.perf_counter()
        for i in range(config["steps"]):
            loss = trainer.step(i)
            if (i + 1) % max(1, config["steps"] // 10) == 0:
                print(f"step {i + 1}/{config['steps']}  loss {loss:.4f}  {time.perf_counter() - t0:.1f} s", flush=True)
        print(f"val loss {trainer.evaluate():.4f} after {config['steps']} steps, {time.perf_counter() - t0:.1f} s")
        print(trainer.finish())
        return
    first, anneal_step, trainer = anneal_stepper(config, args.device)
    vocab = trainer.vocab_size if hasattr(trainer, "vocab_size") else 65
    torch_step = torch_stepper(config, args.torch_device, args.steps * args.rounds, vocab)
    rounds = interleaved(anneal_step, torch_step, args.steps, args.rounds)
    ours, theirs = (statistics.median(r[i] for r in rounds) for i in (0, 1))
    ratios = sorted(a / b for a, b in rounds)
    print(f"nanogpt {args.preset} (batch {config['batch']}, block {config['block']}): anneal on {args.device}: first "
          f"step {first:.2f} s, {ours * 1e3:.1f} ms/step | torch on {args.torch_device}: {theirs * 1e3:.1f} ms/step | "
          f"ratio {statistics.median(ratios):.2f}x (median of {args.rounds} alternating rounds of {args.steps} steps; "
          f"rounds {ratios[0]:.2f}-{ratios[-1]:.2f}x)")  # fmt: skip


if __name__ == "__main__":
    main()

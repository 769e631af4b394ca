"""nanogpt from the zoo: anneal vs nanoGPT in PyTorch (same model, batch and AdamW), in one run.

    python benchmarks/bench_nanogpt.py --device webgpu --torch-device cuda --preset full --steps 20
    python benchmarks/bench_nanogpt.py --device cpu --torch-device cpu --preset small --steps 10
    python benchmarks/bench_nanogpt.py --device webgpu --preset small --train   # the whole run: val loss

Prints the first-step (trace, schedule, compile) time and the jit-replayed ms/step of both, and
with --train the full training run's val loss (target for small: <= 1.88, nanoGPT's CPU result).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from anneal_cli.bench.profile import KernelTime, Profile, print_slowest, profile_replay
from anneal_models import nanogpt

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "anneal-models" / "tests"))
from torch_reference import torch_nanogpt  # noqa: E402 - the tests' nanoGPT oracle


def anneal_stepper(config: dict, device: str) -> tuple[float, Callable[[int], float], object]:
    """The anneal trainer after its first step (trace, schedule, compile: timed) and the jit's capture."""
    trainer = nanogpt.build(config, device)
    spent = _time_compiles(device)
    t0 = time.perf_counter()
    trainer.step(0)
    first = time.perf_counter() - t0
    if spent:
        print(f"first step {first:.2f} s: lowering, rendering and pipelines ahead {spent['render']:.2f} s "
              f"({spent['renders']} kernels; pipelines {spent['pipelines']:.2f} s for {spent['ahead']}), "
              f"programs built {spent['build']:.2f} s ({spent['builds']})")  # fmt: skip
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


def _time_compiles(device: str) -> dict[str, float]:
    """Count the time spent lowering kernels (in the render pool, or one at a time) and building programs
    (WebGPU pipelines), for the first step's breakdown."""
    if device != "webgpu":
        return {}
    import anneal_wgpu.runtime as rt

    spent = {"render": 0.0, "renders": 0, "build": 0.0, "builds": 0, "pipelines": 0.0, "ahead": 0}

    def timed(fn: Callable, time_key: str, count_key: str) -> Callable:
        def run(*a: object, **k: object) -> object:
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[time_key] += time.perf_counter() - t0
                spent[count_key] += len(a[1]) if fn in (prepare, ahead) else 1  # type: ignore[arg-type]

        return run

    render, prepare, build = rt.render_wgsl, rt.WebGPUBackend.prepare, rt.WebGPUBackend.build
    ahead = rt.WebGPUBackend.create_pipelines
    rt.WebGPUBackend.create_pipelines = timed(ahead, "pipelines", "ahead")  # type: ignore[method-assign]
    rt.render_wgsl = timed(render, "render", "renders")  # type: ignore[assignment]
    rt.WebGPUBackend.prepare = timed(prepare, "render", "renders")  # type: ignore[method-assign]
    rt.WebGPUBackend.build = timed(build, "build", "builds")  # type: ignore[method-assign]
    return spent


FP32_PEAK = 66.9e12  # H200 fp32 (non-tensor-core) FLOP/s, for MFU


def contraction_class(ast: object, attention_batch: int) -> str:
    """A tiled contraction's class by its batch ranges (those both operands vary with): attention's are the
    batch x heads products, split-K partial sums (weight gradients) are batched over their few slices."""
    from anneal_schedule.analysis import find_contraction, global_ranges, ranges_of

    deps = ranges_of(ast)  # type: ignore[arg-type]
    c = find_contraction(ast, deps)  # type: ignore[arg-type]
    if c is None:
        return "contractions (linear layers)"
    batch = [r for r in global_ranges(deps) if r in deps[c.a] and r in deps[c.b]]
    size = math.prod(int(r.src[0].vmax) for r in batch)
    if size == attention_batch:
        return "attention (batched over batch x heads)"
    return "split-K partial sums (weight gradients)" if batch else "contractions (linear layers)"


def kernel_class(k: KernelTime, attention_batch: int) -> str:
    """A kernel's class by its opts: staged tiles are contractions, grouped ones row kernels or grouped sums."""
    if "STAGE" in k.opts:
        return contraction_class(k.ast, attention_batch)
    if "GROUP" in k.opts:
        return "row kernels and grouped reductions"
    if any(n.op.name == "REDUCE" for n in k.ast.toposort()):
        return "other reductions"
    return "elementwise"


def kernel_classes(trainer: object, device: str, step: int, attention_batch: int, dump: str | None = None) -> None:
    """GPU time of one jit-replayed step by kernel class (timestamp queries), and each class's slowest kernels."""
    profile = profile_replay(device, trainer.jit.captured, lambda: trainer.step(step))  # type: ignore[attr-defined]
    if profile is None:
        print("kernel classes: no timestamp queries on this device (or the replay ran other kernels)")
        return
    classes: dict[str, list[KernelTime]] = {}
    for k in profile.kernels:
        classes.setdefault(kernel_class(k, attention_batch), []).append(k)
    total = profile.gpu
    print(f"GPU time of one step: {total * 1e3:.1f} ms over {len(profile.kernels)} kernels "
          f"({profile.wall * 1e3:.1f} ms wall)")  # fmt: skip
    for name, ks in sorted(classes.items(), key=lambda kv: -sum(k.seconds for k in kv[1])):
        t = sum(k.seconds for k in ks)
        print(f"  {name:<38} {t * 1e3:7.1f} ms  {100 * t / total:5.1f}%  ({len(ks)} kernels)")
    for name, ks in classes.items():
        print(f"  slowest {name}:")
        print_slowest(Profile(0.0, ks), top=4, indent="  ", width=150, summary=False)
    print("  slowest of all:")
    print_slowest(profile, top=24, indent="  ", width=150, summary=False, dump=dump)


def step_flops(config: dict, vocab: int) -> float:
    """Training FLOPs of one step: 6 per parameter and token, plus attention's score and value products."""
    d, layers, t, b = config["dim"], config["layers"], config["block"], config["batch"]
    params = layers * 12 * d * d + vocab * d
    return 6.0 * params * b * t + layers * 6.0 * 2 * b * t * t * d


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
    p.add_argument("--profile", action="store_true", help="GPU time by kernel class and MFU (timestamp queries)")
    p.add_argument("--dump", default=None, help="with --profile: write the slowest kernels' sources here")
    p.add_argument("--data", default=None, help="tinyshakespeare's input.txt (default: the cache)")
    args = p.parse_args()
    config = {**nanogpt.DEFAULTS, **nanogpt.PRESETS[args.preset], **({"data": args.data} if args.data else {})}
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
    if args.profile:
        kernel_classes(trainer, args.device, 2 + args.steps * args.rounds, config["batch"] * config["heads"], args.dump)
        flops = step_flops(config, vocab)
        print(f"MFU (fp32 peak {FP32_PEAK / 1e12:.1f} TFLOP/s): anneal {flops / ours / FP32_PEAK:.1%}, "
              f"torch {flops / theirs / FP32_PEAK:.1%}")  # fmt: skip
    print(f"nanogpt {args.preset} (batch {config['batch']}, block {config['block']}): anneal on {args.device}: first "
          f"step {first:.2f} s, {ours * 1e3:.1f} ms/step | torch on {args.torch_device}: {theirs * 1e3:.1f} ms/step | "
          f"ratio {statistics.median(ratios):.2f}x (median of {args.rounds} alternating rounds of {args.steps} steps; "
          f"rounds {ratios[0]:.2f}-{ratios[-1]:.2f}x)")  # fmt: skip


if __name__ == "__main__":
    main()

"""GPT-2 small (124M, random init: the real weights cannot be downloaded here; speed does not depend on them):
a fine-tune step and KV-cache sampling, anneal against PyTorch / Hugging Face transformers in the same run.

    python benchmarks/bench_gpt2.py --device webgpu --torch-device cuda        # the H200 run
    python benchmarks/bench_gpt2.py --device cpu --torch-device cpu --skip-step --tokens 32

The step: batch 4 x 1024 tokens of tinyshakespeare in GPT-2's BPE, cross-entropy with the tied head, global-norm
clipping, AdamW, the loss read every step (as `anneal train gpt2`); torch runs transformers' GPT2LMHeadModel
eagerly in float32 with TF32 off. Sampling: greedy tokens after an 8-token prompt, anneal's jitted decode step
against `generate(do_sample=False)` (transformers' own KV cache); tokens per second of each and the ratio.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import transformers

from anneal_cli.bench.profile import print_slowest, profile_replay
from anneal_cli.bench.timing import time_steps
from anneal_models import gpt2

SMALL = {"n_layer": 12, "n_head": 12, "n_embd": 768, "n_positions": 1024, "vocab_size": 50257}


def anneal_step(device: str, steps: int, profile: bool, dump: str | None = None) -> tuple[float, float]:
    config = {**gpt2.DEFAULTS, "init": "random", "batch": 4, "block": 1024, "steps": steps + 3, "eval_every": 0}
    trainer = gpt2.build(config, device)
    first, ms = time_steps(trainer, steps)
    if profile:
        print_slowest(profile_replay(device, trainer.jit.captured, lambda: trainer.step(steps + 2)), top=24, dump=dump)
    return first, ms / steps


def torch_step(device: str, steps: int) -> float:
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**SMALL, resid_pdrop=0.0, embd_pdrop=0.0,
                                                                 attn_pdrop=0.0)).to(device).train()  # fmt: skip
    opt = torch.optim.AdamW(model.parameters(), lr=6e-5, betas=(0.9, 0.95), weight_decay=0.1)
    rng = np.random.default_rng(0)

    def step() -> float:
        window = torch.from_numpy(rng.integers(0, 50257, (4, 1025))).to(device)
        logits = model(window[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), window[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return float(loss.item())

    step()
    step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - t0) * 1000 / steps


def anneal_sampling(device: str, tokens: int, profile: bool) -> float:
    cfg = gpt2.GPT2Config(12, 12, 768, 1024, 50257, 1e-5)
    generator = gpt2.Generator(gpt2.build_model(cfg, device), device)
    prompt = list(range(100, 108))
    list(generator.stream(prompt, 4, temperature=0.0))  # compile and capture the decode step
    t0 = time.perf_counter()
    out = list(generator.stream(prompt, tokens, temperature=0.0))
    tps = len(out) / (time.perf_counter() - t0)
    if profile:
        print("one decode step:")
        replay = lambda: generator.decode(generator.token, generator.position)  # noqa: E731 - the jit alone
        print_slowest(profile_replay(device, generator.decode.captured, replay), top=12)
    return tps


def torch_sampling(device: str, tokens: int) -> float:
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**SMALL)).to(device).eval()
    prompt = torch.arange(100, 108, device=device).reshape(1, -1)
    with torch.no_grad():
        model.generate(prompt, max_new_tokens=4, do_sample=False, pad_token_id=50256)
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model.generate(prompt, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, pad_token_id=50256)
        if device == "cuda":
            torch.cuda.synchronize()
    return (out.shape[1] - prompt.shape[1]) / (time.perf_counter() - t0)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="webgpu")
    p.add_argument("--torch-device", default="cuda")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--tokens", type=int, default=200)
    p.add_argument("--skip-step", action="store_true", help="Only sampling (the step is slow on a laptop CPU).")
    p.add_argument("--profile", action="store_true", help="the slowest kernels of a step and of a decode step")
    p.add_argument("--dump", default=None, help="with --profile: write the step's slowest kernels' sources here")
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if not args.skip_step:
        ms_torch = torch_step(args.torch_device, args.steps)
        first, ms_anneal = anneal_step(args.device, args.steps, args.profile, args.dump)
        print(f"gpt2 124M fine-tune step (batch 4 x 1024): torch {args.torch_device} {ms_torch:.1f} ms, anneal "
              f"{args.device} {ms_anneal:.1f} ms (first step {first:.1f} s); ratio {ms_anneal / ms_torch:.2f}x",
              flush=True)  # fmt: skip
    tps_torch = torch_sampling(args.torch_device, args.tokens)
    tps_anneal = anneal_sampling(args.device, args.tokens, args.profile)
    print(f"gpt2 124M greedy sampling ({args.tokens} tokens): transformers generate on {args.torch_device} "
          f"{tps_torch:.1f} tokens/s, anneal {args.device} {tps_anneal:.1f} tokens/s; ratio "
          f"{tps_anneal / tps_torch:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()

"""ResNet-9 `full` (Page's recipe, batch 512) for one epoch: anneal vs the same model and recipe in PyTorch.

    python benchmarks/bench_resnet9.py --device webgpu --torch-device cuda            # the H200 run
    python benchmarks/bench_resnet9.py --device cpu --torch-device cpu --images 2048 --width 16

The real CIFAR-10 cannot be downloaded on the machines that build anneal, so the images are generated
with its shape (50,000 train, 3x32x32, pixel values 0..255, 10 classes): speed does not depend on
what the pixels show. Both sides run the same host pipeline (crop with 4-pixel reflect padding and
flips, on a background thread), SGD with Nesterov momentum, label smoothing 0.2, the one-cycle
learning rate, BatchNorm in train mode, and read the loss every step (as `anneal train` does).
torch runs float32 with TF32 off. Prints the first step (trace, schedule, compile), ms per epoch of
each and their ratio, and the projected time to 94% (24 epochs of this recipe) beside Page's 26
V100-seconds and airbench's 2.59 A100-seconds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as tf

from anneal_models import classify, images, resnet9

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "anneal-models" / "tests"))
from test_vision_models import TorchResNet9  # noqa: E402 - the tests' torch oracle of the same net

from anneal_cli.bench.profile import print_slowest, profile_replay
from anneal_cli.bench.timing import time_steps

EPOCHS_TO_94 = 24  # Page's schedule reaches 94% in 24 epochs


def generated_cifar(n: int, seed: int = 0) -> images.ImageSet:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (n, 3, 32, 32)).astype(np.float32)
    y = rng.integers(0, 10, n).astype(np.int64)
    xt = rng.integers(0, 256, (1000, 3, 32, 32)).astype(np.float32)
    yt = rng.integers(0, 10, 1000).astype(np.int64)
    return images.ImageSet("cifar10-shaped", x, y, xt, yt, images.CIFAR_CLASSES, flips=True)


def anneal_epoch(
    config: dict, device: str, data: images.ImageSet, profile: bool = False, dump: str | None = None
) -> tuple[float, float, int]:
    trainer = resnet9.build(config, device, data=data)
    first, ms = time_steps(trainer, trainer.steps_per_epoch)
    if profile:
        step = trainer.steps_per_epoch + 2
        print_slowest(profile_replay(device, trainer.jit.captured, lambda: trainer.step(step)), top=24, dump=dump)
    return first, ms, trainer.steps_per_epoch


def torch_epoch(config: dict, device: str, data: images.ImageSet) -> tuple[float, int]:
    torch.manual_seed(0)
    net = TorchResNet9(3, 10, int(config["width"])).to(device).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=float(config["lr"]), momentum=float(config["momentum"]),
                          nesterov=True, weight_decay=float(config["weight_decay"]))  # fmt: skip
    # the same host pipeline as anneal's trainer: its batches, augmented on a background thread
    host = resnet9.build({**config, "width": 1}, "cpu", data=data)
    steps = host.steps_per_epoch
    total = steps + 2

    def step(i: int) -> float:
        x, y = host.batch(i)
        xt = torch.from_numpy(x).to(device, non_blocking=True).contiguous(memory_format=torch.channels_last)
        for g in opt.param_groups:
            g["lr"] = classify.one_cycle(i, total, float(config["lr"]), float(config["warmup"]))
        opt.zero_grad(set_to_none=True)
        loss = tf.cross_entropy(net(xt), torch.from_numpy(y).to(device), label_smoothing=0.2)
        loss.backward()
        opt.step()
        return float(loss.item())

    step(0)
    step(1)
    t0 = time.perf_counter()
    for i in range(2, total):
        step(i)
    return (time.perf_counter() - t0) * 1000, steps


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="webgpu")
    p.add_argument("--torch-device", default="cuda")
    p.add_argument("--images", type=int, default=50_000)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--profile", action="store_true", help="one step's GPU time and slowest kernels (timestamps)")
    p.add_argument("--dump", default=None, help="with --profile: write the slowest kernels' sources here")
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    config = classify.with_recipe({**resnet9.DEFAULTS, **resnet9.PRESETS["full"], "width": args.width},
                                  resnet9.RECIPES)  # fmt: skip
    data = generated_cifar(args.images)
    print(f"ResNet-9 width {args.width}, batch {config['batch']}, {args.images:,} images of 3x32x32 "
          f"(generated, CIFAR-10's shape)", flush=True)  # fmt: skip
    t_torch, steps = torch_epoch(config, args.torch_device, data)
    print(f"torch {args.torch_device}: {t_torch:.0f} ms/epoch ({steps} steps, {t_torch / steps:.1f} ms/step)",
          flush=True)  # fmt: skip
    first, t_anneal, steps = anneal_epoch(config, args.device, data, args.profile, args.dump)
    print(f"anneal {args.device}: first step {first:.2f} s; {t_anneal:.0f} ms/epoch ({t_anneal / steps:.1f} ms/step)")
    print(f"ratio anneal/torch: {t_anneal / t_torch:.2f}x")
    print(f"projected time to 94% ({EPOCHS_TO_94} epochs): anneal {EPOCHS_TO_94 * t_anneal / 1000:.1f} s, torch "
          f"{EPOCHS_TO_94 * t_torch / 1000:.1f} s (Page: 26 V100-seconds; airbench: 2.59 A100-seconds)")  # fmt: skip


if __name__ == "__main__":
    main()

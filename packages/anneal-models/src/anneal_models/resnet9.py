"""resnet9: David Page's ResNet-9 (the DAWNBench CIFAR-10 net), with his recipe in `full`.

prep conv -> [conv, pool] + residual(2 convs) -> [conv, pool] -> [conv, pool] + residual(2 convs)
-> global max pool -> linear head scaled by 0.125. Each conv is 3x3, no bias, then BatchNorm2d and
ReLU; the stages widen w, 2w, 4w, 8w (Page: w = 64). The recipe: SGD with Nesterov momentum 0.9,
weight decay 5e-4, label smoothing 0.2, batch 512, a one-cycle learning rate (linear up to 0.4 over the
first 5/24 of training, then down to 0), random crop with 4-pixel reflect padding (translate) and
horizontal flips, optional test-time flip augmentation (`tta_flip`).

`--dataset digits` adapts the stem to one grey channel and the crop to 1-pixel shifts without flips
(a mirrored digit is another digit); the three pools then take 8x8 to 1x1.
"""

from __future__ import annotations

from typing import Any

from anneal import Tensor, manual_seed
from anneal.nn import functional as F
from anneal.nn.modules import BatchNorm2d, Conv2d, Linear, Module
from anneal.optim import SGD
from anneal_models import images
from anneal_models.augment import Compose, RandomCrop, RandomHorizontalFlip
from anneal_models.classify import ClassifierTrainer, one_cycle, with_recipe
from anneal_models.images import ImageSet

# width 32 and 24 epochs on digits: 98.99-99.33% over seeds 0-3 in 30-34 s on a 2-core CPU; width 16 and 16 epochs
# gave 96.97-98.99% (one image is 0.34%), so 98.5% held only for some seeds (RESULTS.md, session 22)
# None: the dataset's recipe (RECIPES) decides
DEFAULTS: dict[str, Any] = {
    "dataset": "digits", "steps": None, "epochs": None, "batch": None, "width": 32, "lr": None, "warmup": None,
    "momentum": 0.9, "weight_decay": 5e-4, "label_smoothing": 0.2, "tta_flip": True, "eval_every": None,
    "eval_chunk": 1000, "seed": 0,
}  # fmt: skip
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"epochs": 2, "batch": 50, "width": 4},
    "small": {},
    "full": {"dataset": "cifar10", "width": 64},
}  # fmt: skip
RECIPES: dict[str, dict[str, Any]] = {
    "digits": {"epochs": 24, "batch": 100, "lr": 0.2, "warmup": 0.2},
    "cifar10": {"epochs": 24, "batch": 512, "lr": 0.4, "warmup": 5 / 24},  # Page's
    "synthetic10": {"epochs": 10, "batch": 128, "lr": 0.2, "warmup": 0.2},
}


class ConvBN(Module):
    def __init__(self, c_in: int, c_out: int, device: str) -> None:
        super().__init__()
        self.conv = Conv2d(c_in, c_out, 3, padding=1, bias=False, device=device)
        self.bn = BatchNorm2d(c_out, device=device)

    def forward(self, x: Tensor) -> Tensor:
        return self.bn(self.conv(x)).relu()


class Residual(Module):
    def __init__(self, c: int, device: str) -> None:
        super().__init__()
        self.res1, self.res2 = ConvBN(c, c, device), ConvBN(c, c, device)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.res2(self.res1(x))


class ResNet9(Module):
    def __init__(self, channels: int, classes: int, width: int, device: str) -> None:
        super().__init__()
        w = width
        self.prep = ConvBN(channels, w, device)
        self.layer1, self.res1 = ConvBN(w, 2 * w, device), Residual(2 * w, device)
        self.layer2 = ConvBN(2 * w, 4 * w, device)
        self.layer3, self.res3 = ConvBN(4 * w, 8 * w, device), Residual(8 * w, device)
        self.head = Linear(8 * w, classes, bias=False, device=device)

    def features(self, x: Tensor) -> Tensor:
        """The penultimate features (N, 8w): the global max pool the head reads (what FD-resnet9 compares)."""
        x = self.prep(x)
        x = self.res1(F.max_pool2d(self.layer1(x), 2))
        x = F.max_pool2d(self.layer2(x), 2)
        return self.res3(F.max_pool2d(self.layer3(x), 2)).amax((2, 3))

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x)) * 0.125


class ResNet9Trainer(ClassifierTrainer):
    name = "resnet9"


def build(config: dict[str, Any], device: str, data: ImageSet | None = None) -> ResNet9Trainer:
    """The trainer on config's dataset, or on `data` (benchmarks pass generated images of CIFAR-10's shape)."""
    config = with_recipe(config, RECIPES)
    manual_seed(int(config["seed"]))
    data = data if data is not None else images.load(str(config["dataset"]))
    c, h, w = data.shape
    if min(h, w) < 8:
        raise ValueError(f"resnet9: its three 2x2 pools need images of at least 8x8, {data.name} has {h}x{w}")
    net = ResNet9(c, len(data.classes), int(config["width"]), device)
    params = list(net.parameters())
    optimizer = SGD(params, lr=float(config["lr"]), momentum=float(config["momentum"]), nesterov=True,
                    weight_decay=float(config["weight_decay"]))  # fmt: skip
    if data.flips:
        augment = Compose([RandomCrop(w, padding=4, padding_mode="reflect"), RandomHorizontalFlip()])
    else:
        augment = Compose([RandomCrop(w, padding=1, padding_mode="reflect")])
    peak, warmup = float(config["lr"]), float(config["warmup"])
    return ResNet9Trainer(config, device, data, net, optimizer, augment,
                          lambda i, steps: one_cycle(i, steps, peak, warmup))  # fmt: skip

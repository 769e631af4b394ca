"""The trainer image classifiers share: epochs over an ImageSet, augmentation, test accuracy.

Training goes in epochs: epoch e is a permutation of the training images drawn from (seed, e), cut
into full batches (the jitted step keeps one shape; the remainder of an epoch is left out, as
torch's drop_last). Step i's batch and augmentation depend on (seed, i) only, so a resumed run sees
the same pixels, and a background thread prepares the next batches while the device runs this one.
The learning rate of step i is the model's schedule at i (written into the optimizer's buffers
before the step, which a jit replay reads).

Config keys: ``dataset``, ``epochs`` (``steps`` = epochs x batches per epoch unless given),
``batch``, ``lr``, ``label_smoothing``, ``seed``, ``eval_chunk`` (test images per jitted forward).
evaluate() runs after every epoch (``eval_every`` defaults to the batches of one epoch) and records
the test loss and accuracy; finish() prints accuracy by epoch, the per-class table and the wall time,
and report() is what `anneal train --out` writes to summary.json and `anneal eval` prints.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from anneal import Tensor
from anneal.jit import jit
from anneal.nn import functional as F
from anneal.nn.modules import Module
from anneal.optim import Optimizer
from anneal_models import images
from anneal_models.augment import Compose, Normalize, Prefetch
from anneal_models.trainer import Batch, SupervisedTrainer


def with_recipe(config: dict[str, Any], recipes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The dataset's recipe fills the settings the configuration leaves at None (a flag or preset that names
    one keeps it): 1,500 digits want other epochs and batches than 50,000 CIFAR images."""
    recipe = recipes.get(str(config["dataset"]), {})
    return {**config, **{k: v for k, v in recipe.items() if config.get(k) is None}}


class ClassifierTrainer(SupervisedTrainer):
    """A model gives the network, the optimizer, the augmentation and its schedule: the learning rate of
    step i of a run of n steps, schedule(i, n)."""

    name = "classifier"
    replay_batches_on_load = False  # batch(i) depends on i alone

    def __init__(self, config: dict[str, Any], device: str, data: images.ImageSet, net: Module,
                 optimizer: Optimizer, augment: Compose, schedule: Callable[[int, int], float]) -> None:  # fmt: skip
        self.data, self.net, self.schedule_at = data, net, schedule
        self.normalize = Normalize(data.mean, data.std)
        self.augment = augment
        bsz = int(config["batch"])
        if bsz > len(data.x_train):
            raise ValueError(f"{self.name}: batch {bsz} is larger than the {len(data.x_train)} training images")
        self.steps_per_epoch = len(data.x_train) // bsz
        config = dict(config)
        if not config.get("steps"):
            config["steps"] = int(config["epochs"]) * self.steps_per_epoch
        if not config.get("eval_every"):
            config["eval_every"] = self.steps_per_epoch
        self._prefetch = Prefetch(self._batch)
        smoothing = float(config.get("label_smoothing", 0.0))
        params = list(net.parameters())

        def loss(logits: Tensor, y: Tensor) -> Tensor:
            return F.cross_entropy(logits, y, label_smoothing=smoothing)

        super().__init__(net, params, optimizer, self._prefetch, loss, device, config=config)
        self.history: list[dict[str, float]] = []  # one entry per evaluate(): step, epoch, loss, accuracy
        self._logits = jit(self._forward)
        self._t0 = time.perf_counter()
        self._last_predictions: np.ndarray | None = None

    # ---- data ----
    def _batch(self, i: int) -> Batch:
        e, j = divmod(i, self.steps_per_epoch)
        seed, bsz = int(self.config["seed"]), int(self.config["batch"])
        order = np.random.default_rng([seed, e]).permutation(len(self.data.x_train))
        idx = order[j * bsz : (j + 1) * bsz]
        x = self.augment(self.data.x_train[idx], np.random.default_rng([seed, e, j, 1]))
        return self.normalize(x), self.data.y_train[idx]

    # ---- the step ----
    def lr_at(self, i: int) -> float:
        return self.schedule_at(i, int(self.config["steps"]))

    def step(self, i: int) -> float:
        for g in self.optimizer.param_groups:
            g["lr"] = self.lr_at(i)
        self.optimizer.sync_lr()
        return super().step(i)

    def lr(self) -> float:
        return self.lr_at(self.steps_done)

    # ---- evaluation ----
    def _forward(self, x: Tensor) -> Tensor:
        return self.net(x).realize()

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Logits of raw images x (normalized here), in eval mode, in chunks of one shape (the last one padded)."""
        chunk = min(int(self.config.get("eval_chunk") or 1000), len(x))
        x = self.normalize(x)
        out = []
        self.net.eval()
        try:
            for s in range(0, len(x), chunk):
                part = x[s : s + chunk]
                n = len(part)
                if n < chunk:
                    part = np.concatenate([part, np.zeros((chunk - n, *part.shape[1:]), np.float32)])
                out.append(self._logits(Tensor(part, device=self.device)).numpy()[:n].copy())
        finally:
            self.net.train()
        return np.concatenate(out)

    def test_logits(self) -> np.ndarray:
        logits = self.predict(self.data.x_test)
        if self.config.get("tta_flip") and self.data.flips:  # test-time augmentation: average with the mirror
            logits = logits + self.predict(self.data.x_test[..., ::-1])
            logits = logits / 2
        return logits

    def evaluate(self, x: np.ndarray | None = None, y: np.ndarray | None = None) -> float:
        """The test-set loss (cross-entropy, no smoothing); records it and the accuracy in history."""
        if x is not None and y is not None:
            logits = self.predict(x)
            return float(_cross_entropy(logits, y))
        logits = self.test_logits()
        self._last_predictions = logits.argmax(-1)
        loss = float(_cross_entropy(logits, self.data.y_test))
        accuracy = float((self._last_predictions == self.data.y_test).mean())
        self.history.append({"step": self.steps_done, "epoch": self.steps_done / self.steps_per_epoch,
                             "loss": loss, "accuracy": accuracy,
                             "seconds": time.perf_counter() - self._t0})  # fmt: skip
        return loss

    def accuracy(self) -> float:
        if not self.history or self.history[-1]["step"] != self.steps_done:
            self.evaluate()
        return self.history[-1]["accuracy"]

    def per_class(self) -> list[tuple[str, int, float]]:
        """(class name, test images, accuracy) per class, for the predictions of the last evaluate()."""
        self.accuracy()
        assert self._last_predictions is not None
        y = self.data.y_test
        return [(name, int((y == k).sum()), float((self._last_predictions[y == k] == k).mean()) if (y == k).any()
                 else float("nan")) for k, name in enumerate(self.data.classes)]  # fmt: skip

    def report(self) -> dict[str, Any]:
        """What finish() prints and summary.json holds."""
        accuracy = self.accuracy()
        return {
            "model": self.name,
            "dataset": self.data.name,
            "steps": self.steps_done,
            "epochs": self.steps_done / self.steps_per_epoch,
            "test_images": len(self.data.x_test),
            "accuracy": accuracy,
            "per_class": {name: acc for name, _, acc in self.per_class()},
            "history": self.history,
        }

    def report_text(self, report: dict[str, Any]) -> str:
        lines = [f"{self.name} on {self.data.describe()}",
                 f"test accuracy {100 * report['accuracy']:.2f}% ({len(self.data.x_test)} images) after "
                 f"{report['steps']} steps ({report['epochs']:.1f} epochs)"]  # fmt: skip
        if len(self.history) > 1:
            lines.append("accuracy by epoch: " + "  ".join(
                f"{h['epoch']:.0f}: {100 * h['accuracy']:.1f}%" for h in self.history))  # fmt: skip
            lines.append(f"wall time {self.history[-1]['seconds']:.1f} s")
        width = max(len("class"), *(len(n) for n in self.data.classes))
        lines.append(f"{'class':<{width}}  images  accuracy")
        for name, count, acc in self.per_class():
            lines.append(f"{name:<{width}}  {count:>6}  {100 * acc:7.2f}%")
        return "\n".join(lines)

    def finish(self) -> str:
        self._prefetch.close()
        return self.report_text(self.report())


def _cross_entropy(logits: np.ndarray, y: np.ndarray) -> float:
    z = logits - logits.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    return float(-logp[np.arange(len(y)), y].mean())


def one_cycle(i: int, steps: int, peak: float, warmup: float, final: float = 0.0) -> float:
    """Step i of n: linear from 0 to peak over the first `warmup` fraction of the steps, then linear to final
    (Page's piecewise-linear schedule; airbench's has the same shape)."""
    up = max(1, round(warmup * steps))
    if i < up:
        return peak * (i + 1) / up
    return peak + (final - peak) * min(1.0, (i - up + 1) / max(1, steps - up))

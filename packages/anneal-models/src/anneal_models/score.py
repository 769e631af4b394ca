"""FD-resnet9-digits: how good samples of digits are, measured by a digits classifier that anneal trained.

FID needs Inception weights, which cannot be fetched here; this is the same idea on what every machine
has. The scorer is resnet9 at width 8 trained on the digits train split (97.6% of the 297 test images),
shipped as package data in float16 (`data/scorer-resnet9-digits.safetensors`, ~200 kB; rebuild it with
`python -m anneal_models.score --train`). For a set of samples it gives:

- accuracy: the share of class-conditional samples the classifier recognizes as the class asked for;
- histogram: the share of samples it puts in each class (an unconditional model should cover all ten);
- FD-resnet9-digits: the Frechet distance between Gaussians fitted to its penultimate features (the
  64 global-max-pooled channels) on the samples and on the 297 real test images (lower is better; the
  real train images score about 2 against the test images at 500 samples).

It is not FID: its numbers are comparable only with each other.
"""

from __future__ import annotations

import functools
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from anneal import Tensor
from anneal.jit import jit
from anneal.nn.state import load_state_dict, safe_load, safe_save
from anneal_models import images

NAME = "FD-resnet9-digits"
WIDTH = 8
WEIGHTS = "scorer-resnet9-digits.safetensors"
CHUNK = 500  # images per jitted forward


def frechet_distance(a: np.ndarray, b: np.ndarray) -> float:
    """|mu_a - mu_b|^2 + tr(S_a + S_b - 2 (S_a S_b)^(1/2)) of Gaussians fitted to rows of a and b. The trace of
    the square root is the sum of the square roots of the eigenvalues of S_a^(1/2) S_b S_a^(1/2) (symmetric, so
    numpy's eigh suffices: no scipy)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    mu = a.mean(0) - b.mean(0)
    sa, sb = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    w, v = np.linalg.eigh(sa)
    root = (v * np.sqrt(np.clip(w, 0, None))) @ v.T
    cross = np.clip(np.linalg.eigvalsh(root @ sb @ root), 0, None)
    return float(mu @ mu + np.trace(sa) + np.trace(sb) - 2 * np.sqrt(cross).sum())


class Scorer:
    """The shipped digits classifier on one device: features and predictions of raw digit images (0..16)."""

    def __init__(self, device: str, path: Path | None = None) -> None:
        from anneal_models.resnet9 import ResNet9

        self.data = images.load("digits")
        self.net = ResNet9(1, 10, WIDTH, device)
        weights = path or resources.files("anneal_models") / "data" / WEIGHTS
        load_state_dict(self.net, safe_load(str(weights), device))
        self.net.eval()
        self.device = device
        self.mean = self.data.mean.reshape(1, -1, 1, 1)
        self.std = self.data.std.reshape(1, -1, 1, 1)
        self._forward = jit(self._features_and_logits)
        self.real = self.features(self.data.x_test)[0]

    def _features_and_logits(self, x: Tensor) -> tuple[Tensor, Tensor]:
        f = self.net.features(x)
        return f.realize(), (self.net.head(f) * 0.125).realize()

    def features(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(features (N, 64), logits (N, 10)) of raw images (N, 1, 8, 8), in chunks of one shape."""
        x = ((x - self.mean) / self.std).astype(np.float32)
        feats, logits = [], []
        for s in range(0, len(x), CHUNK):
            part = x[s : s + CHUNK]
            n = len(part)
            pad = np.concatenate([part, np.zeros((CHUNK - n, *part.shape[1:]), np.float32)]) if n < CHUNK else part
            f, z = self._forward(Tensor(pad, device=self.device))
            feats.append(f.numpy()[:n].copy())
            logits.append(z.numpy()[:n].copy())
        return np.concatenate(feats), np.concatenate(logits)

    def score(self, x: np.ndarray, labels: np.ndarray | None = None) -> dict[str, Any]:
        """The scores of raw images x (0..16); accuracy only when the classes they were sampled as are given."""
        feats, logits = self.features(x)
        predicted = logits.argmax(-1)
        out: dict[str, Any] = {NAME: frechet_distance(feats, self.real), "samples": len(x),
                               "histogram": (np.bincount(predicted, minlength=10) / len(x)).tolist()}  # fmt: skip
        if labels is not None:
            out["accuracy"] = float((predicted == labels).mean())
        return out


@functools.lru_cache(maxsize=4)
def scorer(device: str) -> Scorer:
    return Scorer(device)


def line(entry: dict[str, Any]) -> str:
    """A history entry as text: the step, loss and scores it has."""
    parts = [f"step {entry['step']}"] if "step" in entry else []
    parts += [f"loss {entry['loss']:.4f}"] if "loss" in entry else []
    if NAME in entry:
        parts.append(f"{NAME} {entry[NAME]:.2f}")
    if "accuracy" in entry:
        parts.append(f"recognized {100 * entry['accuracy']:.1f}%")
    if "histogram" in entry:
        parts.append("classes " + " ".join(f"{100 * p:.0f}" for p in entry["histogram"]))
    return "  ".join(parts)


def train(path: Path, device: str = "cpu") -> float:
    """Train the scorer (resnet9 width 8, digits recipe) and save it in float16; returns its test accuracy."""
    from anneal_models import resnet9

    config = {**resnet9.DEFAULTS, "width": WIDTH, "epochs": 16}  # the shipped scorer's recipe
    trainer = resnet9.build(config, device)
    for i in range(int(trainer.config["steps"])):
        trainer.step(i)
    accuracy = trainer.accuracy()
    state = {k: v.numpy().astype(np.float16) if v.dtype.is_float else v.numpy()
             for k, v in trainer.net.state_dict().items()}  # fmt: skip
    safe_save(state, path, {"accuracy": f"{accuracy:.4f}", "width": str(WIDTH)})
    return accuracy


if __name__ == "__main__":
    if sys.argv[1:] != ["--train"]:
        raise SystemExit("usage: python -m anneal_models.score --train")
    target = Path(str(resources.files("anneal_models") / "data" / WEIGHTS))
    target.parent.mkdir(exist_ok=True)
    print(f"test accuracy {100 * train(target):.2f}%; wrote {target}")

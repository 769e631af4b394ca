"""What the generative image models share: pixels in [-1, 1], time embeddings, noise schedules, samplers and
the trainer (epochs of real images, the objective's noise drawn in the graph, sample grids and scores).

The training objective draws its noise, times and label dropout on the device (anneal.random), inside
the jitted step: every replay draws fresh values, and nothing is copied from the host but the images.
Sampling is the opposite: its noise comes from a numpy Generator seeded by the caller, so a seed gives
the same samples on every backend; the network call of one sampling step is jitted at one shape, and the
update between steps (a few multiply-adds on (N, C, H, W)) runs in numpy.

Diffusion (epsilon prediction) with T steps and cumulative products alpha_bar_t of 1 - beta_t:
x_t = sqrt(alpha_bar_t) x_0 + sqrt(1 - alpha_bar_t) eps. Sampling visits a subsequence of the T steps
(all of them by default); `ddpm` is ancestral sampling with the betas of that subsequence (Nichol and
Dhariwal's respacing), `ddim` the deterministic DDIM update (eta 0). Both clip the predicted x_0 to [-1, 1].
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from anneal import Tensor, cat, where
from anneal import random as anneal_random
from anneal.jit import jit
from anneal.nn import functional as F
from anneal.nn.modules import Module
from anneal.optim import Optimizer, warmup_cosine_lr
from anneal_models import grid
from anneal_models.images import ImageSet
from anneal_models.trainer import StepGraph, SupervisedTrainer
from anneal_models.transformer import linear

SAMPLERS = ("ddpm", "ddim")


class SampleError(ValueError):
    """Sampling arguments the model cannot take (a class it does not have, guidance without classes)."""


# ---------------------------------------------------------------------------- pixels and times


def to_unit_range(x: np.ndarray, peak: float) -> np.ndarray:
    """Raw pixels 0..peak -> [-1, 1] (float32)."""
    return (x * np.float32(2.0 / peak) - 1).astype(np.float32)


def from_unit_range(x: np.ndarray, peak: float) -> np.ndarray:
    """[-1, 1] -> raw pixels 0..peak (what a classifier trained on the dataset reads), clipped."""
    return ((np.clip(x, -1, 1) + 1) * np.float32(peak / 2)).astype(np.float32)


def timestep_embedding(t: Tensor, dim: int, max_period: float = 10000.0) -> Tensor:
    """Sinusoidal embedding (N,) -> (N, dim): cos then sin of t times dim/2 geometric frequencies (DiT's)."""
    half = dim // 2
    freqs = np.exp(-math.log(max_period) * np.arange(half, dtype=np.float32) / half).astype(np.float32)
    args = t.float().reshape(-1, 1) * Tensor(freqs, device=t.device).reshape(1, half)
    return cat([args.cos(), args.sin()], -1)


class TimeEmbedder(Module):
    """A scalar time per image -> sinusoidal features -> MLP (SiLU) -> dim."""

    def __init__(self, dim: int, device: str, frequencies: int = 256, scale: float = 1.0) -> None:
        super().__init__()
        self.frequencies, self.scale = frequencies, scale
        self.fc1 = linear(frequencies, dim, True, 0.02, device)
        self.fc2 = linear(dim, dim, True, 0.02, device)

    def forward(self, t: Tensor) -> Tensor:
        return self.fc2(F.silu(self.fc1(timestep_embedding(t * self.scale, self.frequencies))))


# ---------------------------------------------------------------------------- noise schedules


def alpha_bars(kind: str, steps: int) -> np.ndarray:
    """alpha_bar_t for t = 0..steps-1 (float64). linear: Ho et al.'s betas 1e-4..0.02, scaled to `steps`
    (as improved DDPM does, so fewer steps keep the same end point); cosine: Nichol and Dhariwal's, s = 0.008,
    betas clipped at 0.999."""
    if kind == "linear":
        scale = 1000 / steps
        betas = np.linspace(scale * 1e-4, scale * 0.02, steps, dtype=np.float64)
        return np.cumprod(1 - betas)
    if kind == "cosine":
        s = 0.008
        f = np.cos((np.arange(steps + 1, dtype=np.float64) / steps + s) / (1 + s) * math.pi / 2) ** 2
        betas = np.clip(1 - f[1:] / f[:-1], 0, 0.999)
        return np.cumprod(1 - betas)
    raise ValueError(f"unknown noise schedule {kind!r}; known: linear, cosine")


def respaced(abar: np.ndarray, count: int) -> np.ndarray:
    """`count` timesteps of the T, evenly spaced from T-1 down to 0 (the order a sampler visits them)."""
    total = len(abar)
    if not 1 <= count <= total:
        raise SampleError(f"--steps must be between 1 and the model's {total} diffusion steps, got {count}")
    return np.unique(np.round(np.linspace(0, total - 1, count)).astype(np.int64))[::-1]


def denoise_step(kind: str, x: np.ndarray, eps: np.ndarray, a_t: float, a_prev: float,
                 noise: np.ndarray | None) -> np.ndarray:  # fmt: skip
    """One sampling step from alpha_bar a_t to a_prev (1 at the end), given the predicted eps."""
    x0 = np.clip((x - math.sqrt(1 - a_t) * eps) / math.sqrt(a_t), -1, 1)
    if kind == "ddim":
        eps = (x - math.sqrt(a_t) * x0) / math.sqrt(1 - a_t)  # the eps that the clipped x0 implies
        return (math.sqrt(a_prev) * x0 + math.sqrt(1 - a_prev) * eps).astype(np.float32)
    beta = 1 - a_t / a_prev  # the respaced step's beta; the posterior q(x_prev | x_t, x0):
    mean = (math.sqrt(a_prev) * beta / (1 - a_t)) * x0 + (math.sqrt(1 - beta) * (1 - a_prev) / (1 - a_t)) * x
    if noise is None:
        return mean.astype(np.float32)
    var = beta * (1 - a_prev) / (1 - a_t)
    return (mean + math.sqrt(var) * noise).astype(np.float32)


# ---------------------------------------------------------------------------- the trainer


class GenerativeTrainer(SupervisedTrainer):
    """A model gives the network, the optimizer and `objective(x, y) -> loss` (drawing its own noise), and
    `generate(n, labels, steps, cfg, rng) -> images in [-1, 1]`.

    Config keys: ``dataset``, ``steps``, ``batch``, ``lr``, ``warmup`` (steps), ``min_lr``, ``seed``,
    ``grid`` (samples per class in the grid written at each evaluation), ``score_samples`` (samples scored at
    each evaluation on digits; 0: none), ``sample_steps``, ``cfg``, ``eval_every``."""

    name = "generative"
    conditional = False  # whether samples take a class (and classifier-free guidance)
    replay_batches_on_load = False  # batch(i) depends on (seed, i) only

    def __init__(self, config: dict[str, Any], device: str, data: ImageSet, net: Module,
                 optimizer: Optimizer) -> None:  # fmt: skip
        self.data, self.net = data, net
        self.peak = float(data.x_train.max())
        self.x_train = to_unit_range(data.x_train, self.peak)
        self.classes = len(data.classes)
        bsz, steps = int(config["batch"]), int(config["steps"])
        if bsz > len(self.x_train):
            raise ValueError(f"{self.name}: batch {bsz} is larger than the {len(self.x_train)} training images")
        self.steps_per_epoch = len(self.x_train) // bsz
        config = {**config, "eval_every": config.get("eval_every") or max(1, steps // 5)}
        lr = float(config["lr"])
        schedule = warmup_cosine_lr(optimizer, int(config["warmup"]), steps, float(config["min_lr"]) / lr)
        params = list(net.parameters())
        super().__init__(net, params, optimizer, self._batch, self._unused_loss, device, schedule=schedule,
                         config=config)  # fmt: skip
        self.history: list[dict[str, Any]] = []  # one entry per evaluate(): step, loss, the score
        self._networks: dict[tuple, jit] = {}  # one capture per input shape

    # ---- data ----
    def _batch(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        e, j = divmod(i, self.steps_per_epoch)
        seed, bsz = int(self.config["seed"]), int(self.config["batch"])
        idx = np.random.default_rng([seed, e]).permutation(len(self.x_train))[j * bsz : (j + 1) * bsz]
        return self.x_train[idx], self.data.y_train[idx]

    @staticmethod
    def _unused_loss(out: Tensor, y: Tensor) -> Tensor:
        raise AssertionError("generative trainers compute their objective in objective()")

    # ---- the step: the model's objective, its gradient and the update, in one graph ----
    def objective(self, x: Tensor, y: Tensor) -> Tensor:
        raise NotImplementedError

    def losses(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        """(what the step minimizes, what the log shows): the objective both times, unless a model's objective
        is weighted so that its value says little (meanflow shows the unweighted error)."""
        loss = self.objective(x, y)
        return loss, loss

    def _train_step(self, x: Tensor, y: Tensor) -> Tensor:
        self.optimizer.zero_grad()
        loss, shown = self.losses(x, y)
        loss.backward()
        self.optimizer.step()
        return shown

    def graph(self, backward: bool) -> StepGraph:
        x, y = self._as_tensors(self._peek())
        with anneal_random.fork_rng([self.device]):  # looking at the step draws nothing the run would
            loss = self.objective(x, y)
        return StepGraph([loss], loss.gradient(*self.params) if backward else [])

    # ---- sampling ----
    def network(self, *inputs: np.ndarray) -> np.ndarray:
        """The network on host arrays, in eval mode, jitted (one capture per input shape)."""
        key = tuple((a.shape, a.dtype.str) for a in inputs)
        fn = self._networks.setdefault(key, jit(self._network_call))
        self.net.eval()
        try:
            return fn(*(Tensor(a, device=self.device) for a in inputs)).numpy().copy()
        finally:
            self.net.train()

    def _network_call(self, *inputs: Tensor) -> Tensor:
        return self.net(*inputs).realize()

    def generate(self, n: int, labels: np.ndarray | None, steps: int | None, cfg: float | None,
                 rng: np.random.Generator) -> np.ndarray:  # fmt: skip
        raise NotImplementedError

    def check_sampling(self, label: int | None, steps: int | None, cfg: float | None) -> None:
        """Raise SampleError for arguments this model cannot take."""
        if label is not None and not self.conditional:
            raise SampleError(f"{self.name} is unconditional: it takes no --class")
        if cfg is not None and not self.conditional:
            raise SampleError(f"{self.name} is unconditional: classifier-free guidance (--cfg) needs a class-"
                              "conditional model (dit, meanflow)")  # fmt: skip
        if label is not None and not 0 <= label < self.classes:
            raise SampleError(f"--class {label} is out of range: {self.name} was trained on {self.classes} classes "
                              f"(0..{self.classes - 1})")  # fmt: skip
        if steps is not None and steps < 1:
            raise SampleError(f"--steps must be at least 1, got {steps}")

    def sample(self, n: int, *, label: int | None = None, steps: int | None = None, cfg: float | None = None,
               seed: int = 0) -> tuple[np.ndarray, np.ndarray | None]:  # fmt: skip
        """n images in [-1, 1] (N, C, H, W) and their classes (None: unconditional). Without `label`, a
        conditional model samples the classes in turn (0, 1, ..., 0, 1, ...)."""
        self.check_sampling(label, steps, cfg)
        labels = None
        if self.conditional:
            labels = np.full(n, label, np.int64) if label is not None else np.arange(n, dtype=np.int64) % self.classes
        return self.generate(n, labels, steps, cfg, np.random.default_rng(seed)), labels

    def sample_grid(self, per_class: int, *, label: int | None = None, steps: int | None = None,
                    cfg: float | None = None, seed: int = 0) -> bytes:  # fmt: skip
        """A labelled PNG: a row per class (per_class samples each), or rows of unconditional samples."""
        if self.conditional and label is None:
            x, labels = self.sample(per_class * self.classes, steps=steps, cfg=cfg, seed=seed)
            assert labels is not None
            order = np.argsort(labels, kind="stable")
            rows = [self.data.classes[k] for k in range(self.classes)]
            return grid.png(from_unit_range(x[order], 1.0), per_class, rows)
        count = per_class * (1 if label is not None else self.classes)
        x, _ = self.sample(count, label=label, steps=steps, cfg=cfg, seed=seed)
        title = [self.data.classes[label]] if label is not None else None
        return grid.png(from_unit_range(x, 1.0), per_class if label is not None else self.classes, title)

    # ---- evaluation: a held-out loss, a sample grid, the score ----
    def evaluate(self, x: np.ndarray | None = None, y: np.ndarray | None = None) -> float:
        """The objective on test images (its draws forked off the run's generator); writes a sample grid into
        the run folder and, on digits, scores samples (anneal_models.score)."""
        xs = to_unit_range(self.data.x_test, self.peak) if x is None else x
        ys = self.data.y_test if y is None else y
        n = min(len(xs), int(self.config["batch"]))
        with anneal_random.fork_rng([self.device]):
            loss = float(self._eval_loss(Tensor(xs[:n], device=self.device), Tensor(ys[:n], device=self.device)))
        if x is not None:
            return loss
        entry: dict[str, Any] = {"step": self.steps_done, "loss": loss}
        if self.out_dir is not None:
            grid.write(self.out_dir / "samples" / f"step_{self.steps_done:06d}.png",
                       self.sample_grid(int(self.config.get("grid") or 8), seed=0))  # fmt: skip
        count = int(self.config.get("score_samples") or 0)
        if count and self.data.name == "digits":
            entry.update(self.score(count))
        self.history.append(entry)
        return loss

    def eval_note(self) -> str | None:
        """The last evaluation's scores, for the log line."""
        from anneal_models import score

        entry = self.history[-1] if self.history else {}
        return score.line({k: v for k, v in entry.items() if k not in ("step", "loss")}) or None

    def score(self, count: int, *, seed: int = 0, steps: int | None = None, cfg: float | None = None
              ) -> dict[str, Any]:  # fmt: skip
        """FD-resnet9-digits and the class shares of `count` samples (the classes in turn when conditional)."""
        if self.data.name != "digits":
            raise ValueError(f"the scorer is a digits classifier; this {self.name} run was trained on {self.data.name}")
        from anneal_models import score

        x, labels = self.sample(count, seed=seed, steps=steps, cfg=cfg)
        return score.scorer(self.device).score(from_unit_range(x, 16.0), labels)

    def _eval_loss(self, x: Tensor, y: Tensor) -> float:
        self.net.eval()
        try:
            return float(self.losses(x, y)[1].item())
        finally:
            self.net.train()

    def report(self) -> dict[str, Any]:
        if not self.history or self.history[-1]["step"] != self.steps_done:
            self.evaluate()
        return {"model": self.name, "dataset": self.data.name, "steps": self.steps_done, "history": self.history,
                **{k: v for k, v in self.history[-1].items() if k not in ("step", "loss")}}  # fmt: skip

    def report_text(self, report: dict[str, Any]) -> str:
        from anneal_models import score

        lines = [f"{self.name} on {self.data.describe()}, {report['steps']} steps"]
        lines += [score.line(h) for h in report["history"]]
        return "\n".join(lines)

    def finish(self) -> str:
        return self.report_text(self.report())


class EpsilonTrainer(GenerativeTrainer):
    """DDPM training (epsilon prediction, uniform t) and sampling, for a network net(x_t, t[, y]) -> eps.

    Extra config keys: ``diffusion_steps`` (T), ``noise_schedule`` (linear, cosine), ``sampler`` (ddpm, ddim),
    ``sample_steps`` (default T); conditional models also ``label_dropout`` (the share of training labels
    replaced by the null class, for classifier-free guidance) and ``cfg`` (the guidance weight w of
    eps = eps_null + w (eps_class - eps_null); 1: the conditional model alone)."""

    def __init__(self, config: dict[str, Any], device: str, data: ImageSet, net: Module,
                 optimizer: Optimizer) -> None:  # fmt: skip
        if config["sampler"] not in SAMPLERS:
            raise ValueError(f"unknown sampler {config['sampler']!r}; known: {', '.join(SAMPLERS)}")
        self.abar = alpha_bars(str(config["noise_schedule"]), int(config["diffusion_steps"]))
        super().__init__(config, device, data, net, optimizer)
        self._abar_table = Tensor(self.abar.astype(np.float32).reshape(-1, 1), device=device)

    def predict(self, x: Tensor, t: Tensor, y: Tensor) -> Tensor:
        return self.net(x, t.float(), y) if self.conditional else self.net(x, t.float())

    def objective(self, x: Tensor, y: Tensor) -> Tensor:
        n = x.shape[0]
        t = Tensor.randint(0, len(self.abar), (n,), device=self.device)
        noise = Tensor.randn(*x.shape, device=self.device)
        if self.conditional:  # label dropout: the null class (index `classes`) teaches the unconditional model
            drop = Tensor.rand(n, device=self.device) < float(self.config["label_dropout"])
            y = where(drop, self.classes, y)
        return self.loss_at(x, y, t, noise)

    def loss_at(self, x: Tensor, y: Tensor, t: Tensor, noise: Tensor) -> Tensor:
        """The denoising loss for given steps t (int64) and noise: mean (eps_theta(x_t, t, y) - noise)^2."""
        abar = F.embedding(t, self._abar_table).reshape(x.shape[0], 1, 1, 1)
        xt = abar.sqrt() * x + (1 - abar).sqrt() * noise
        return (self.predict(xt, t, y) - noise).square().mean()

    def eps(self, x: np.ndarray, t: int, labels: np.ndarray | None, cfg: float) -> np.ndarray:
        n = len(x)
        tt = np.full(n, t, np.float32)
        if labels is None:
            return self.network(x, tt)
        if cfg == 1:
            return self.network(x, tt, labels)
        both = self.network(np.concatenate([x, x]), np.concatenate([tt, tt]),
                            np.concatenate([labels, np.full(n, self.classes, np.int64)]))  # fmt: skip
        cond, null = both[:n], both[n:]
        return null + np.float32(cfg) * (cond - null)

    def generate(self, n: int, labels: np.ndarray | None, steps: int | None, cfg: float | None,
                 rng: np.random.Generator) -> np.ndarray:  # fmt: skip
        c, h, w = self.data.shape
        kind = str(self.config["sampler"])
        ts = respaced(self.abar, int(steps or self.config.get("sample_steps") or len(self.abar)))
        weight = float(cfg if cfg is not None else self.config.get("cfg", 1.0))
        x = rng.standard_normal((n, c, h, w)).astype(np.float32)
        for i, t in enumerate(ts):
            a_prev = float(self.abar[ts[i + 1]]) if i + 1 < len(ts) else 1.0
            noise = rng.standard_normal(x.shape).astype(np.float32) if kind == "ddpm" and i + 1 < len(ts) else None
            x = denoise_step(kind, x, self.eps(x, int(t), labels, weight), float(self.abar[t]), a_prev, noise)
        return x

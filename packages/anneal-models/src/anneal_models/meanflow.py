"""meanflow: MeanFlow (Geng et al., 2025), a one-step generator trained through a forward-mode JVP.

The flow path is z_t = (1 - t) x + t e from data x (t = 0) to noise e (t = 1), with velocity v = e - x.
The network (the DiT backbone, conditioned on t and t - r) predicts the average velocity
u(z_t, r, t) = 1/(t - r) * integral from r to t of the velocity, which satisfies the MeanFlow identity
u = v - (t - r) d/dt u, where d/dt u = dz/dt . du/dz + du/dt is the JVP of u along (v, 0, 1) in
(z, r, t). The training target is that right-hand side with the JVP stop-gradiented:

    loss = mean over images of  w * ||u - sg(v - (t - r) * jvp(u, (z, r, t), (v, 0, 1)))||^2,
    w = sg(1 / (||.||^2 + c)^p)   (adaptive loss weighting).

anneal.jvp turns the forward graph into its tangent graph in the same lazy graph, so the step's schedule
holds the forward, the JVP and the backward together (`anneal kernels meanflow --set jvp=false` shows the
step without it). The paper's choices are config keys: ``flow_ratio`` (the share of pairs with r != t;
the rest use r = t, plain flow matching), ``time_mu`` / ``time_sigma`` (both times logit-normal, t the
larger), ``adaptive_p`` / ``adaptive_c`` (the weighting), ``label_dropout`` and ``guidance`` (omega of the
guided velocity v~ = omega v + (1 - omega) u(z_t, t, t | null), trained in, so one step samples with
guidance). Sampling takes ``sample_steps`` steps (1: z_0 = e - u(e, 0, 1)); ``cfg`` mixes the conditional
and null predictions at sampling time too (2 network calls per step; 1: off).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from anneal import Tensor, jvp, manual_seed, where
from anneal.optim import AdamW
from anneal_models import images
from anneal_models.dit import DEFAULTS as DIT_DEFAULTS
from anneal_models.dit import backbone
from anneal_models.generative import GenerativeTrainer
from anneal_models.transformer import decay_groups

TIME_SCALE = 1000.0  # times in [0, 1] embedded as DiT embeds its 1000 integer steps

DEFAULTS: dict[str, Any] = {
    **{k: DIT_DEFAULTS[k] for k in ("dataset", "steps", "batch", "lr", "min_lr", "warmup", "weight_decay", "patch",
                                    "dim", "layers", "heads", "label_dropout", "grid", "score_samples", "eval_every",
                                    "seed")},
    "flow_ratio": 0.25, "time_mu": -0.4, "time_sigma": 1.0, "adaptive_p": 1.0, "adaptive_c": 1e-3,
    "guidance": 1.0, "jvp": True, "sample_steps": 1, "cfg": 1.0,
    "lr": 1e-3, "min_lr": 1e-5,  # dit's 3e-3 diverges here (the target moves with d/dt u)
}  # fmt: skip
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"steps": 20, "batch": 16, "dim": 32, "layers": 1, "heads": 2, "grid": 2, "score_samples": 0},
    "small": {},
    "full": {"dataset": "cifar10", "steps": 100_000, "batch": 256, "lr": 1e-4, "patch": 4, "dim": 384,
             "layers": 12, "heads": 6},
}  # fmt: skip


def logit_normal(n: int, mu: float, sigma: float, device: str) -> Tensor:
    return (Tensor.randn(n, device=device) * sigma + mu).sigmoid()


class MeanFlowTrainer(GenerativeTrainer):
    name = "meanflow"
    conditional = True

    def u(self, z: Tensor, r: Tensor, t: Tensor, y: Tensor) -> Tensor:
        """The average velocity from r to t (the network sees t and t - r)."""
        return self.net(z, t, t - r, y)

    def times(self, n: int) -> tuple[Tensor, Tensor]:
        c = self.config
        a = logit_normal(n, float(c["time_mu"]), float(c["time_sigma"]), self.device)
        b = logit_normal(n, float(c["time_mu"]), float(c["time_sigma"]), self.device)
        t, r = a.maximum(b), a.minimum(b)
        apart = Tensor.rand(n, device=self.device) < float(c["flow_ratio"])
        return where(apart, r, t), t

    def losses(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        """(the weighted loss, the mean squared error), with fresh times, noise and label dropout: with p = 1 the
        weighted loss is err / (err + c), ~1 for as long as err >> c, so the log shows the error itself."""
        n = x.shape[0]
        r, t = self.times(n)
        e = Tensor.randn(*x.shape, device=self.device)
        dropped = Tensor.rand(n, device=self.device) < float(self.config["label_dropout"])
        return self.loss_at(x, where(dropped, self.classes, y), r, t, e, dropped)

    def objective(self, x: Tensor, y: Tensor) -> Tensor:
        return self.losses(x, y)[0]

    def loss_at(self, x: Tensor, y: Tensor, r: Tensor, t: Tensor, e: Tensor, dropped: Tensor | None = None
                ) -> tuple[Tensor, Tensor]:  # fmt: skip
        """The MeanFlow loss and the plain squared error ||u - target||^2 (mean over images) for given times,
        noise and labels (`dropped`: which labels label dropout replaced; the guided velocity leaves them alone)."""
        c, n = self.config, x.shape[0]
        t4, r4 = t.reshape(n, 1, 1, 1), r.reshape(n, 1, 1, 1)
        z = (1 - t4) * x + t4 * e
        v = e - x
        omega = float(c["guidance"])
        if omega != 1.0:
            null = Tensor.full((n,), self.classes, y.dtype, self.device)
            guided = omega * v + (1 - omega) * self.u(z, t, t, null).detach()
            v = guided if dropped is None else where(dropped.reshape(n, 1, 1, 1), v, guided)
        if c["jvp"]:
            u, dudt = jvp(lambda z_, r_, t_: self.u(z_, r_, t_, y), (z, r, t), (v, r.zeros_like(), t.ones_like()))
            target = (v - (t4 - r4) * dudt).detach()
        else:
            u, target = self.u(z, r, t, y), v
        err = (u - target).square().reshape(n, -1).sum(-1)
        weight = (err.detach() + float(c["adaptive_c"])) ** -float(c["adaptive_p"])
        return (weight * err).mean(), err.mean()

    def velocity(self, z: np.ndarray, r: float, t: float, labels: np.ndarray, cfg: float) -> np.ndarray:
        n = len(z)
        rr, tt = np.full(n, r, np.float32), np.full(n, t, np.float32)
        if cfg == 1:
            return self.network(z, tt, tt - rr, labels)
        both = self.network(np.concatenate([z, z]), np.concatenate([tt, tt]), np.concatenate([tt - rr, tt - rr]),
                            np.concatenate([labels, np.full(n, self.classes, np.int64)]))  # fmt: skip
        return both[n:] + np.float32(cfg) * (both[:n] - both[n:])

    def generate(self, n: int, labels: np.ndarray | None, steps: int | None, cfg: float | None,
                 rng: np.random.Generator) -> np.ndarray:  # fmt: skip
        assert labels is not None
        weight = float(cfg if cfg is not None else self.config.get("cfg", 1.0))
        z = rng.standard_normal((n, *self.data.shape)).astype(np.float32)
        grid = np.linspace(1.0, 0.0, int(steps or self.config["sample_steps"]) + 1)
        for t, r in zip(grid[:-1], grid[1:]):
            z = (z - np.float32(t - r) * self.velocity(z, float(r), float(t), labels, weight)).astype(np.float32)
        return z


def build(config: dict[str, Any], device: str) -> MeanFlowTrainer:
    manual_seed(int(config["seed"]))
    data = images.load(str(config["dataset"]))
    net = backbone(config, data.shape, len(data.classes), device, times=2, time_scale=TIME_SCALE)
    optimizer = AdamW(decay_groups(list(net.parameters()), float(config["weight_decay"])), lr=float(config["lr"]))
    return MeanFlowTrainer(config, device, data, net, optimizer)

"""dynmlp: the mlp task, compiled once for a symbolic batch size.

The batch dimension is a Variable (``batch`` in [1, max_batch]): every step's data is bound
to it (``x.reshape(batch.bind(n), 2)``), so one schedule, one set of kernels and one jit
capture serve every size. Each step draws its size from [ceil(batch/2), batch], as a data
loader with ragged batches would, and evaluation runs the same kernels at the size of the
held-out set. The report counts what was compiled and when.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from anneal import Tensor, Variable, manual_seed
from anneal.optim import Adam
from anneal.realize import runner
from anneal_models.mlp import MLP, mse, target
from anneal_models.trainer import Batch, SupervisedTrainer

DEFAULTS: dict[str, Any] = {"steps": 500, "batch": 256, "lr": 1e-2, "hidden": 64, "samples": 4096,
                            "max_batch": 4096, "seed": 0}  # fmt: skip
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"steps": 200, "hidden": 32, "batch": 128, "samples": 1024},
    "small": {},
    "full": {"steps": 3000, "hidden": 256, "batch": 1024, "samples": 65536},
}
EVAL_SIZE = 1024


class DynMLPTrainer(SupervisedTrainer):
    def __init__(self, config: dict[str, Any], device: str):
        manual_seed(config["seed"])
        rng = np.random.default_rng(config["seed"])
        self.x = rng.uniform(-1, 1, (config["samples"], 2)).astype(np.float32)
        self.y = target(self.x)
        # the bound only sizes the buffers (allocated for the largest batch): any --batch fits under it
        self.var = Variable("batch", 1, max(config["max_batch"], config["batch"], EVAL_SIZE, len(self.x)))
        net = MLP(config["hidden"]).to(device)
        params = list(net.parameters())
        largest = config["batch"]
        smallest = max(1, math.ceil(largest / 2))
        self.sizes: set[int] = set()

        def batch(i: int) -> tuple[np.ndarray, np.ndarray]:
            n = int(rng.integers(smallest, largest + 1))
            self.sizes.add(n)
            idx = rng.integers(0, len(self.x), n)
            return self.x[idx], self.y[idx]

        val_x = np.random.default_rng(config["seed"] + 1).uniform(-1, 1, (EVAL_SIZE, 2)).astype(np.float32)
        self.compiled_before = runner(device).stats.programs_compiled
        self.compiled_at_capture: int | None = None
        super().__init__(net, params, Adam(params, lr=config["lr"]), batch, mse, device,
                         val=(val_x, target(val_x)), config=config)  # fmt: skip
        self.initial_eval = self.evaluate(self.x, self.y)

    def _as_tensors(self, batch: Batch) -> tuple[Tensor, Tensor]:
        x, y = batch
        n = self.var.bind(len(x))
        return Tensor(x, device=self.device).reshape(n, 2), Tensor(y, device=self.device).reshape(n, 1)

    def step(self, i: int) -> float:
        loss = super().step(i)
        if self.steps_done == 2:  # step 1 ran eagerly (Adam's first update is a graph of its own), step 2 captured
            self.compiled_at_capture = runner(self.device).stats.programs_compiled
        return loss

    def compile_counts(self) -> tuple[int, int]:
        """(kernels compiled until the jit captured the step, kernels compiled after: every later step
        and evaluation, whatever their sizes)."""
        now = runner(self.device).stats.programs_compiled
        until = (self.compiled_at_capture if self.compiled_at_capture is not None else now) - self.compiled_before
        return until, now - self.compiled_before - until

    def finish(self) -> str:
        final = self.evaluate(self.x, self.y)
        until, later = self.compile_counts()
        lo, hi = (min(self.sizes), max(self.sizes)) if self.sizes else (0, 0)
        return (
            f"dynmlp: eval loss {self.initial_eval:.4f} -> {final:.5f} ({100 * final / self.initial_eval:.2f}% "
            f"of initial); {len(self.sizes)} batch sizes in [{lo}, {hi}] and evaluations of {EVAL_SIZE} and "
            f"{len(self.x)} samples ran on {until} kernels compiled until the jit capture (step 2) and {later} "
            f"after it ({self.jit.replays} replays)"
        )


def build(config: dict[str, Any], device: str) -> DynMLPTrainer:
    return DynMLPTrainer(config, device)

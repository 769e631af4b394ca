"""The training loop behind `anneal train`, apart from the command so that it can grow
(dashboard, eval, checkpoints) without touching argument handling.

A trainer is what a model entry's ``build(config, device)`` returns: an object with
``step(i) -> float`` (i counts from 0; returns that step's training loss) and, optionally,
``finish() -> str | None`` (text to print when training ends: a sample, a summary).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Protocol


class Trainer(Protocol):
    def step(self, i: int) -> float: ...


class NonFiniteLoss(RuntimeError):
    def __init__(self, step: int, loss: float) -> None:
        super().__init__(f"loss is {loss} at step {step}; training stopped")
        self.step = step
        self.loss = loss


@dataclass(frozen=True)
class StepLog:
    step: int  # 1-based: steps done so far
    steps: int
    loss: float
    lr: float | None
    ms_per_step: float


def default_log_every(steps: int) -> int:
    return max(1, steps // 10)


def run(
    trainer: Trainer,
    steps: int,
    *,
    log_every: int,
    lr: float | None = None,
    emit: Callable[[StepLog], None],
    clock: Callable[[], float] = time.perf_counter,
) -> list[StepLog]:
    """Run ``steps`` steps; emit a record every ``log_every`` steps and after the last."""
    logs: list[StepLog] = []
    since, t0 = 0, clock()
    for i in range(steps):
        loss = float(trainer.step(i))
        if not math.isfinite(loss):  # a diverged run is an error, not a number to print
            raise NonFiniteLoss(i + 1, loss)
        since += 1
        done = i + 1
        if done % log_every == 0 or done == steps:
            now = clock()
            record = StepLog(done, steps, loss, lr, (now - t0) * 1000.0 / since)
            logs.append(record)
            emit(record)
            since, t0 = 0, now
    return logs


def plain_line(record: StepLog) -> str:
    width = len(str(record.steps))
    parts = [f"step {record.step:>{width}}/{record.steps}", f"loss {record.loss:.4f}"]
    if record.lr is not None:
        parts.append(f"lr {record.lr:.1e}")
    parts.append(f"{record.ms_per_step:.1f} ms/step")
    return "  ".join(parts)


def json_line(record: StepLog) -> str:
    data: dict[str, Any] = asdict(record)
    return json.dumps(data)

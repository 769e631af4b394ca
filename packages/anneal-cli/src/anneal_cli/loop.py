"""The training loop behind `anneal train`, apart from the command so that it can grow
(dashboard, eval, checkpoints) without touching argument handling.

A trainer is what a model entry's ``build(config, device)`` returns. Only ``step`` is required;
the loop and the command use the rest when it is there (docs/ARCHITECTURE.md, "Models and
trainers"):

- ``step(i) -> float``: run step i (from 0), return its training loss;
- ``evaluate() -> float | None``: the validation loss now (None: no validation data);
- ``eval_note() -> str | None``: what else the evaluation measured, for the log line (a generator's scores);
- ``lr() -> float``: the learning rate in effect;
- ``finish() -> str | None``: text to print when training ends (a sample, a summary);
- ``graph(backward) -> StepGraph``, ``params``, ``jit``: what the dashboard's header and
  compiler statistics read;
- ``state_dict() -> dict[str, Tensor]`` / ``load_state_dict(d)``: checkpoints (``--out``,
  ``--resume``);
- ``config``: the trainer's own view of its configuration (written to the run folder).

Observers watch the loop (the dashboard, the run folder, compiler statistics); each method
is optional: ``before_step(i)``, ``after_step(done, loss)``, ``after_eval(done, val)``,
``logged(record)``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol


class Trainer(Protocol):
    def step(self, i: int) -> float: ...


class NonFiniteLoss(RuntimeError):
    def __init__(self, step: int, loss: float, what: str = "loss") -> None:
        super().__init__(f"{what} is {loss} at step {step}; training stopped")
        self.step = step
        self.loss = loss


class Interrupted(Exception):
    """The loop was asked to stop (Ctrl-C) and did, between steps: the trainer's state is exactly `done` steps."""

    def __init__(self, done: int) -> None:
        super().__init__(f"interrupted at step {done}")
        self.done = done


@dataclass(frozen=True)
class StepLog:
    step: int  # 1-based: steps done so far
    steps: int
    loss: float
    val: float | None  # the validation loss, on steps where it was evaluated
    lr: float | None
    ms_per_step: float
    note: str | None = None  # the trainer's eval_note() on steps where it was evaluated
    comm_ms: float | None = None  # data-parallel: the last step's ms in the gradient exchange


def default_log_every(steps: int) -> int:
    return max(1, steps // 10)


def default_eval_every(steps: int) -> int:
    return max(1, steps // 10)


def _notify(observers: Sequence[Any], method: str, *args: Any) -> None:
    for o in observers:
        fn = getattr(o, method, None)
        if fn is not None:
            fn(*args)


def run(
    trainer: Trainer,
    steps: int,
    *,
    log_every: int,
    lr: float | None = None,
    emit: Callable[[StepLog], None],
    clock: Callable[[], float] = time.perf_counter,
    start: int = 0,
    eval_every: int | None = None,
    observers: Sequence[Any] = (),
    checkpoint: Callable[[int], None] | None = None,
    comm_ms: Callable[[], float] | None = None,
    stop: Callable[[], bool] | None = None,
) -> list[StepLog]:
    """Run steps ``start`` .. ``steps - 1``; emit a record every ``log_every`` steps, every evaluation and after
    the last step. With ``eval_every``, evaluate (when the trainer can) every that many steps and after the last;
    ``checkpoint(done)`` is called then too (and after the last step). ms/step counts the steps only: time spent
    evaluating, emitting and checkpointing is left out. ``stop()`` is asked before each step: True raises
    ``Interrupted`` with the steps done (after the last step the run is complete, so it is not asked)."""
    evaluate = getattr(trainer, "evaluate", None)
    eval_note = getattr(trainer, "eval_note", None)
    current_lr = getattr(trainer, "lr", None)
    logs: list[StepLog] = []
    since, t0 = 0, clock()
    for i in range(start, steps):
        if stop is not None and stop():
            raise Interrupted(i)
        _notify(observers, "before_step", i)
        loss = float(trainer.step(i))
        if not math.isfinite(loss):  # a diverged run is an error, not a number to print
            raise NonFiniteLoss(i + 1, loss)
        since += 1
        done = i + 1
        _notify(observers, "after_step", done, loss)
        at_eval = eval_every is not None and (done % eval_every == 0 or done == steps)
        if done % log_every == 0 or done == steps or (at_eval and callable(evaluate)):
            now = clock()
            val, note = None, None
            if at_eval and callable(evaluate):
                result = evaluate()
                if result is not None:
                    val = float(result)
                    if not math.isfinite(val):
                        raise NonFiniteLoss(done, val, "val loss")
                    _notify(observers, "after_eval", done, val)
                note = eval_note() if callable(eval_note) else None
            rate = float(current_lr()) if callable(current_lr) else lr
            record = StepLog(done, steps, loss, val, rate, (now - t0) * 1000.0 / since, note,
                             comm_ms() if comm_ms is not None else None)  # fmt: skip
            logs.append(record)
            emit(record)
            _notify(observers, "logged", record)
            since, t0 = 0, clock()
        if checkpoint is not None and (at_eval or done == steps):
            t_save = clock()
            checkpoint(done)
            t0 += clock() - t_save  # saving is not step time
    return logs


def plain_line(record: StepLog) -> str:
    width = len(str(record.steps))
    parts = [f"step {record.step:>{width}}/{record.steps}", f"loss {record.loss:.4f}"]
    if record.val is not None:
        parts.append(f"val {record.val:.4f}")
    if record.lr is not None:
        parts.append(f"lr {record.lr:.1e}")
    parts.append(f"{record.ms_per_step:.1f} ms/step")
    if record.comm_ms is not None:
        parts.append(f"comm {record.comm_ms:.1f} ms")
    if record.note:
        parts.append(record.note)
    return "  ".join(parts)


def json_line(record: StepLog) -> str:
    data: dict[str, Any] = {k: v for k, v in asdict(record).items() if k not in ("note", "comm_ms") or v is not None}
    return json.dumps(data)

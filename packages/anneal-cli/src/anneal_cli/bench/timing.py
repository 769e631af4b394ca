"""How anneal is timed: calls queued back to back and synchronized once per batch, best of a few batches.

A host round trip (about 1 ms for wgpu's buffer mapping) is paid once per batch, not per call; the first call
(trace, schedule, compile) and the jit's capture are left out, as a user's long run amortizes them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def best_time(fn: Callable[[], object], sync: Callable[[], None], runs: int = 10, reps: int = 3) -> float:
    """Seconds per call of fn: the best of reps batches of runs calls, each batch synchronized once."""
    fn()
    fn()
    sync()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(runs):
            fn()
        sync()
        best = min(best, (time.perf_counter() - t0) / runs)
    return best


def time_steps(trainer: Any, steps: int) -> tuple[float, float]:
    """(seconds of a trainer's step 0, milliseconds of steps 2 .. steps + 1 in all): step 1 is the jit's capture."""
    t0 = time.perf_counter()
    trainer.step(0)
    first = time.perf_counter() - t0
    trainer.step(1)
    t0 = time.perf_counter()
    for i in range(2, steps + 2):
        trainer.step(i)
    return first, (time.perf_counter() - t0) * 1000

"""How the benchmarks time an anneal trainer: the first step alone (trace, schedule, compile), the second (the
jit's capture) left out, then `steps` replayed steps."""

from __future__ import annotations

import time
from typing import Any


def time_steps(trainer: Any, steps: int) -> tuple[float, float]:
    """(seconds of step 0, milliseconds of steps 2 .. steps + 1 in all)."""
    t0 = time.perf_counter()
    trainer.step(0)
    first = time.perf_counter() - t0
    trainer.step(1)  # the jit's capture
    t0 = time.perf_counter()
    for i in range(2, steps + 2):
        trainer.step(i)
    return first, (time.perf_counter() - t0) * 1000

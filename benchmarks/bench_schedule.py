"""How long scheduling a 6-layer nanoGPT-shaped transformer forward takes, cold and cached.

Target (issue 3): under 2 s cold, under 20 ms on a schedule-cache hit.
Run: python benchmarks/bench_schedule.py
"""

from __future__ import annotations

import time

import numpy as np
from transformer import AnnealOps, forward, init_weights

from anneal.realize import runner


def main(layers: int = 6, heads: int = 6, dim: int = 384, block: int = 256, batch: int = 4) -> None:
    ops = AnnealOps("cpu")
    weights = {k: ops.tensor(v) for k, v in init_weights(layers, dim, 65, block).items()}
    rng = np.random.default_rng(0)

    def graph() -> list:
        x = ops.tensor(rng.standard_normal((batch, block, dim)).astype(np.float32))
        return [forward(ops, weights, x, layers, heads).uop]

    scheduler = runner("cpu").scheduler
    out = graph()
    nodes = len(out[0].toposort())
    t0 = time.perf_counter()
    sched, _ = scheduler.schedule(out)
    cold = time.perf_counter() - t0
    hits = []
    for _ in range(5):
        out = graph()  # same structure, new input buffer
        t0 = time.perf_counter()
        scheduler.schedule(out)
        hits.append(time.perf_counter() - t0)
    print(f"6-layer transformer forward: {nodes} tensor-level nodes -> {len(sched.kernels)} kernels")
    print(f"schedule cold      {cold * 1e3:8.1f} ms   (target < 2000 ms)")
    print(f"schedule cache hit {min(hits) * 1e3:8.1f} ms   (target < 20 ms; median {sorted(hits)[2] * 1e3:.1f} ms)")


if __name__ == "__main__":
    main()

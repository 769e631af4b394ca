"""A second process finds the first's schedules on disk, and computes the same step with them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

STEP = """
import json, numpy as np
import anneal
from anneal.realize import runner
sched = runner("cpu").scheduler
sched.store_after_s = 0.0  # store every schedule, however quick
rng = np.random.default_rng(0)
x = anneal.Tensor(rng.standard_normal((8, 5)).astype(np.float32), device="cpu")
w = anneal.Tensor(rng.standard_normal((5, 3)).astype(np.float32), device="cpu", requires_grad=True)
loss = (x @ w).relu().softmax(-1).log().mean()
value = loss.item()
loss.backward()
print(json.dumps({"loss": value, "grad": w.grad.numpy().tolist(), "misses": sched.stats.misses,
                  "loaded": sched.stats.loaded}))
"""


def run_step(cache: Path) -> dict:
    env = {**os.environ, "ANNEAL_CACHE_DIR": str(cache), "ANNEAL_DEVICE": "cpu"}
    out = subprocess.run([sys.executable, "-c", STEP], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def test_a_second_process_loads_every_schedule_and_agrees(tmp_path: Path) -> None:
    first = run_step(tmp_path)
    assert first["misses"] >= 2 and first["loaded"] == 0 and any((tmp_path / "schedules").iterdir())
    second = run_step(tmp_path)
    assert second["loaded"] == second["misses"] == first["misses"]
    assert second["loss"] == first["loss"] and second["grad"] == first["grad"]

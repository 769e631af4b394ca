"""anneal.jit: capture on the second call, replay after; arguments rebound; clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from anneal import Tensor
from anneal.jit import JitError, jit
from anneal.realize import runner

rng = np.random.default_rng(0)


def test_replay_rebinds_arguments_and_updates_in_place() -> None:
    w = Tensor(np.ones((3, 2), np.float32), device="cpu")
    w_ref = np.ones((3, 2), np.float32)

    @jit
    def step(x: Tensor) -> Tensor:
        loss = (x @ w).square().mean()
        w.assign(w - 0.1 * x.T @ (x @ w) / 3)
        loss.realize()
        w.realize()
        return loss

    for _ in range(5):
        x = rng.standard_normal((4, 3)).astype(np.float32)
        expected = float(((x @ w_ref) ** 2).mean())
        w_ref = w_ref - 0.1 * x.T @ (x @ w_ref) / 3
        np.testing.assert_allclose(step(Tensor(x, device="cpu")).item(), expected, rtol=1e-5)
        np.testing.assert_allclose(w.numpy(), w_ref, rtol=1e-5, atol=1e-6)
    assert step.replays == 3


def test_replay_runs_no_scheduling() -> None:
    @jit
    def f(x: Tensor) -> Tensor:
        return (x * 2 + 1).realize()

    x = Tensor(np.ones(8, np.float32), device="cpu")
    f(x)
    f(x)
    sched = runner("cpu").scheduler.stats
    before = (sched.hits, sched.misses)
    out = f(Tensor(np.full(8, 3.0, np.float32), device="cpu"))
    assert (sched.hits, sched.misses) == before  # the replay never looked at the graph
    np.testing.assert_array_equal(out.numpy(), np.full(8, 7.0, np.float32))


def test_changed_shapes_are_a_clear_error() -> None:
    @jit
    def f(x: Tensor) -> Tensor:
        return (x + 1).realize()

    for _ in range(3):
        f(Tensor(np.ones(4, np.float32), device="cpu"))
    with pytest.raises(JitError, match="arguments changed since capture"):
        f(Tensor(np.ones(5, np.float32), device="cpu"))

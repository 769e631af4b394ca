"""anneal.jit: capture on the second call, replay after; arguments rebound; clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from anneal import Tensor
from anneal.jit import JitError, jit
from anneal.realize import realize_all, run_host_step, runner
from anneal_schedule.runner import HostStep

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


# ---- host steps: host code recorded at capture, run again by every replay ----
def test_host_steps_run_where_placed_and_replay_on_the_replays_buffers() -> None:
    run = runner("cpu")
    events: list[tuple[str, int, np.ndarray]] = []

    def seen(name: str) -> HostStep:
        return HostStep(name, lambda bufs: events.append((name, run.stats.kernels_run, bufs[0].numpy().copy())))

    early, between = seen("early"), seen("between")

    @jit
    def f(x: Tensor) -> Tensor:
        doubled = x * 2
        late = (x.sum() * x).exp().sum() + (x * x.max()).sum()  # kernels the early step need not wait for
        realize_all([doubled, late], host_steps=[(early, [0])])
        run_host_step("cpu", between, [x])  # between schedules, on the argument's buffer
        return (late + doubled.sum()).realize()

    for call in range(5):
        x = rng.standard_normal(16).astype(np.float32)
        events.clear()
        start = run.stats.kernels_run
        out = f(Tensor(x, device="cpu"))
        end = run.stats.kernels_run
        (_, early_at, early_value), (_, between_at, between_value) = events
        np.testing.assert_array_equal(early_value, x * 2)  # this call's values: replays rebind the argument
        np.testing.assert_array_equal(between_value, x)
        assert start < early_at < between_at < end, (call, start, early_at, between_at, end)
        expected = np.exp((x.sum() * x).astype(np.float32)).sum() + (x * x.max()).sum() + (2 * x).sum()
        np.testing.assert_allclose(out.item(), expected, rtol=1e-5)
    assert f.replays == 3 and f.host_steps == 2


def test_a_host_step_follows_the_last_kernel_that_writes_what_it_waits_for() -> None:
    from anneal_schedule.runner import place

    x = Tensor(rng.standard_normal((8, 8)).astype(np.float32), device="cpu")
    a, b, c = x.exp(), (x @ x).relu(), (x.sum(0) * x).sum()  # requested in this order: a's kernel is first
    sched, _, _ = runner("cpu").scheduler.schedule_bound([a.uop, b.uop, c.uop])
    step = HostStep("s", lambda bufs: None)
    writers = {kern.slots[0]: k for k, kern in enumerate(sched.kernels)}
    assert place(sched, step, [0]).after == writers[sched.outputs[0]] < len(sched.kernels) - 1
    assert place(sched, step, [0, 2]).after == max(writers[sched.outputs[0]], writers[sched.outputs[2]])
    assert place(sched, step, [1]).slots == (sched.outputs[1],)


def test_a_host_step_cannot_wait_for_a_value_computed_before() -> None:
    done = Tensor(np.ones(4, np.float32), device="cpu").realize()
    with pytest.raises(ValueError, match="waits for a value computed before this schedule"):
        realize_all([done, done + 1], host_steps=[(HostStep("s", lambda bufs: None), [0])])

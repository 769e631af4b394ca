"""anneal.random: Threefry-2x32 on the device, its statistics, seeds, and fresh draws under jit.

Runs on ANNEAL_DEVICE (cpu by default; the webgpu nox session runs it on WebGPU). That cpu and
webgpu give the same numbers bit for bit is checked in tests/test_devices.py, where both exist.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest
from devices import DEV

import anneal
import anneal.nn.functional as F
from anneal import Tensor, random
from anneal.jit import jit
from anneal.nn.modules import Dropout

N_SAMPLES = 1 << 16
KS_CRITICAL = 1.95 / math.sqrt(N_SAMPLES)  # Kolmogorov-Smirnov at a 0.1% false-alarm rate


def ks_distance(sample: np.ndarray, cdf: np.ndarray) -> float:
    """sup |empirical CDF - cdf| for cdf evaluated at the sorted sample."""
    n = len(sample)
    ranks = np.arange(1, n + 1) / n
    return float(max(np.max(ranks - cdf), np.max(cdf - (ranks - 1 / n))))


def normal_cdf(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def test_threefry_matches_random123s_known_answers() -> None:
    """Known-answer vectors of threefry2x32_20 from the Random123 distribution (kat_vectors)."""
    cases = [
        ((0x00000000, 0x00000000), (0x00000000, 0x00000000), (0x6B200159, 0x99BA4EFE)),
        ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
        ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
    ]
    for key, counter, expected in cases:
        words = [np.array([w], np.uint32) for w in (*key, *counter)]
        host = random.threefry2x32((words[0], words[1]), (words[2], words[3]))
        assert (int(host[0][0]), int(host[1][0])) == expected
        dev = [Tensor(w, device=DEV) for w in words]
        graph = random.threefry2x32((dev[0], dev[1]), (dev[2], dev[3]))
        assert (int(graph[0].numpy()[0]), int(graph[1].numpy()[0])) == expected  # the graph, on the device


def test_rand_is_uniform() -> None:
    anneal.manual_seed(0)
    x = Tensor.rand(N_SAMPLES, device=DEV).numpy()
    assert x.dtype == np.float32 and x.min() >= 0.0 and x.max() < 1.0
    assert abs(x.mean() - 0.5) < 0.005 and abs(x.var() - 1 / 12) < 0.002
    s = np.sort(x.astype(np.float64))
    assert ks_distance(s, s) < KS_CRITICAL


def test_randn_is_standard_normal() -> None:
    anneal.manual_seed(1)
    x = Tensor.randn(N_SAMPLES, device=DEV).numpy()
    assert np.isfinite(x).all()
    assert abs(x.mean()) < 0.02 and abs(x.var() - 1) < 0.03
    s = np.sort(x.astype(np.float64))
    assert ks_distance(s, normal_cdf(s)) < KS_CRITICAL


def test_uniform_and_randint_ranges() -> None:
    anneal.manual_seed(2)
    u = Tensor.uniform(4096, low=-3.0, high=5.0, device=DEV).numpy()
    assert u.min() >= -3.0 and u.max() < 5.0 and abs(u.mean() - 1.0) < 0.15
    r = Tensor.randint(-2, 5, (20000,), device=DEV).numpy()
    assert r.dtype == np.int64 and set(np.unique(r).tolist()) == set(range(-2, 5))
    counts = np.bincount(r + 2) / len(r)
    assert np.abs(counts - 1 / 7).max() < 0.01
    assert Tensor.randint(10, (3, 4), device=DEV).shape == (3, 4)  # torch's randint(high, size)


def test_randint_rejects_bad_ranges() -> None:
    with pytest.raises(ValueError, match=r"high \(3\) must be greater than low \(3\)"):
        Tensor.randint(3, 3, (2,), device=DEV)
    with pytest.raises(ValueError, match="wider than 2\\*\\*32"):
        Tensor.randint(0, 1 << 40, (2,), device=DEV)


def test_draws_are_independent_and_seeds_reproduce() -> None:
    anneal.manual_seed(7)
    a, b = Tensor.rand(1000, device=DEV).numpy(), Tensor.rand(1000, device=DEV).numpy()
    anneal.manual_seed(7)
    a2, b2 = Tensor.rand(1000, device=DEV).numpy(), Tensor.rand(1000, device=DEV).numpy()
    np.testing.assert_array_equal(a, a2)
    np.testing.assert_array_equal(b, b2)
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.1 and not np.array_equal(a, b)
    anneal.manual_seed(8)
    assert not np.array_equal(Tensor.rand(1000, device=DEV).numpy(), a)


def test_draws_made_together_and_apart_are_the_same_numbers() -> None:
    """Streams are handed out in draw order, whichever schedule computes them."""
    anneal.manual_seed(3)
    x, y = Tensor.rand(64, device=DEV), Tensor.rand(64, device=DEV)
    together = np.concatenate([x.numpy(), y.numpy()])
    anneal.manual_seed(3)
    x = Tensor.rand(64, device=DEV)
    first = x.numpy()
    y = Tensor.rand(64, device=DEV)
    np.testing.assert_array_equal(np.concatenate([first, y.numpy()]), together)


def test_a_draw_used_by_two_schedules_has_one_value() -> None:
    """A lazy draw recomputed by a later schedule (as a backward pass re-derives a dropout mask) is the same."""
    noise = Tensor.randn(256, device=DEV)
    a = (noise + 1).numpy()
    Tensor.rand(8, device=DEV).numpy()  # other draws and schedules in between
    b = (noise * 2).numpy()
    np.testing.assert_allclose(b, (a - 1) * 2, rtol=1e-6, atol=1e-6)


def test_jitted_draws_are_fresh_on_every_replay_and_follow_the_seed() -> None:
    @jit
    def draw(x: Tensor) -> Tensor:
        return (x + Tensor.rand(*x.shape, device=x.device)).realize()

    def run() -> list[np.ndarray]:
        anneal.manual_seed(11)
        zeros = Tensor(np.zeros(512, np.float32), device=DEV)
        return [draw(zeros).numpy().copy() for _ in range(5)]

    first = run()
    assert draw.replays >= 3
    for i in range(len(first)):
        for j in range(i):
            assert not np.array_equal(first[i], first[j]), f"replays {j} and {i} drew the same numbers"
    second = run()  # the same seed: the same sequence, replayed
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    anneal.manual_seed(11)
    eager = [Tensor.rand(512, device=DEV).numpy() for _ in range(5)]
    for a, b in zip(first, eager):
        np.testing.assert_array_equal(a, b)  # jitted and eager draws are the same stream


def test_dropout_rate_scaling_and_gradient() -> None:
    anneal.manual_seed(4)
    x = Tensor(np.ones((256, 256), np.float32), requires_grad=True, device=DEV)
    y = F.dropout(x, 0.25)
    out = y.numpy()
    kept = out != 0
    assert abs(kept.mean() - 0.75) < 0.01
    np.testing.assert_allclose(out[kept], 1 / 0.75, rtol=1e-6)
    (y * 3).sum().backward()  # the backward recomputes the same mask
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), np.where(kept, 3 / 0.75, 0.0), rtol=1e-6)


def test_dropout_module_is_off_in_eval_and_fresh_under_jit() -> None:
    layer = Dropout(0.5)
    x = Tensor(np.ones(1000, np.float32), device=DEV)
    layer.eval()
    np.testing.assert_array_equal(layer(x).numpy(), np.ones(1000, np.float32))
    layer.train()

    @jit
    def step(v: Tensor) -> Tensor:
        return layer(v).realize()

    masks = [step(x).numpy() != 0 for _ in range(4)]
    assert all(abs(m.mean() - 0.5) < 0.06 for m in masks)
    assert not np.array_equal(masks[2], masks[3])
    with pytest.raises(ValueError, match="between 0 and 1"):
        F.dropout(x, 1.5)


def test_rng_state_round_trip_and_fork() -> None:
    anneal.manual_seed(5)
    Tensor.rand(3, device=DEV).numpy()
    state = random.get_rng_state(DEV)
    assert state.dtype == np.uint32 and state.shape == (3,)
    after = Tensor.rand(100, device=DEV).numpy()
    random.set_rng_state(state, DEV)
    np.testing.assert_array_equal(Tensor.rand(100, device=DEV).numpy(), after)
    random.set_rng_state(state, DEV)
    with random.fork_rng([DEV]):
        Tensor.rand(100, device=DEV).numpy()
    np.testing.assert_array_equal(Tensor.rand(100, device=DEV).numpy(), after)
    with pytest.raises(ValueError, match="3 uint32 words"):
        random.set_rng_state(np.zeros(2, np.uint32), DEV)
    with pytest.raises(ValueError, match="seed must be in"):
        anneal.manual_seed(-1)


def test_batch_shards_draw_their_rows_of_the_whole_batchs_draw() -> None:
    """What each data-parallel rank draws for its rows is those rows of the one-process draw (dropout too)."""
    x = Tensor(np.ones((6, 4, 5), np.float32), device=DEV)

    def draws(rows: tuple[int, int] | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        random.manual_seed(11)
        part = x[rows[0] : rows[1]] if rows else x
        with random.batch_shard(*rows) if rows else contextlib.nullcontext():
            return (Tensor.rand(*part.shape, device=DEV).numpy(), F.dropout(part, 0.5).numpy(),
                    Tensor.rand(3, 2, device=DEV).numpy())  # fmt: skip

    whole = draws(None)
    shards = [draws((0, 2)), draws((2, 6))]
    np.testing.assert_array_equal(np.concatenate([shards[0][0], shards[1][0]]), whole[0])
    np.testing.assert_array_equal(np.concatenate([shards[0][1], shards[1][1]]), whole[1])
    assert not np.array_equal(shards[0][0], shards[1][0][:2])  # not the same rows twice
    np.testing.assert_array_equal(shards[1][2], whole[2])  # a draw of another leading size is left alone
    with pytest.raises(ValueError, match="not a slice"):
        with random.batch_shard(3, 1):
            pass


def test_a_dropout_read_by_two_contractions_is_drawn_once_and_its_mask_is_no_buffer() -> None:
    # the draw is ~100 integer ops: recomputed inside the forward and the weight-gradient contractions it was
    # computed once per staged element of every tile; a dropout's output is written once instead (its mask never)
    from anneal.realize import runner

    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((64, 32)).astype(np.float32), device=DEV, requires_grad=True)
    w = Tensor(rng.standard_normal((32, 16)).astype(np.float32), device=DEV, requires_grad=True)
    loss = (F.dropout(x.relu(), 0.5, training=True) @ w).square().mean()
    gx, gw = loss.gradient(x, w)
    sched, _, _ = runner(DEV).scheduler.schedule_bound([loss.uop, gx.uop, gw.uop])
    drawing = [k for k in sched.kernels if any(n.op.name == "THREEFRY" for n in k.ast.toposort())]
    assert len(drawing) == 1
    assert all(dtype.name != "bool" for _, dtype in sched.buffers)

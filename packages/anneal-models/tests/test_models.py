"""The built-in models train on the CPU backend (tiny presets, so the suite stays fast)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from anneal import Tensor
from anneal_models import conv, dynmlp, mlp


def config(module: Any, **overrides: Any) -> dict[str, Any]:
    return {**module.DEFAULTS, **module.PRESETS["tiny"], **overrides}


def train(trainer: Any, steps: int) -> list[float]:
    return [trainer.step(i) for i in range(steps)]


def test_mlp_reaches_three_percent_of_initial_loss() -> None:
    cfg = config(mlp)
    trainer = mlp.build(cfg, "cpu")
    train(trainer, cfg["steps"])
    final = trainer.evaluate(trainer.x, trainer.y)
    assert final < 0.03 * trainer.initial_eval
    assert "of initial" in trainer.finish()


def test_mlp_jit_replays_after_capture() -> None:
    trainer = mlp.build(config(mlp), "cpu")
    train(trainer, 5)
    assert trainer.jit.replays == 3  # call 1 runs eagerly, call 2 captures, calls 3-5 replay


def test_jit_replay_matches_eager_steps() -> None:
    a, b = mlp.build(config(mlp), "cpu"), mlp.build(config(mlp), "cpu")
    b._step = b._train_step  # the same model stepped eagerly, without the jit
    np.testing.assert_allclose(train(a, 6), train(b, 6), rtol=1e-5)


def test_conv_learns_the_bars() -> None:
    cfg = config(conv)
    trainer = conv.build(cfg, "cpu")
    train(trainer, cfg["steps"])
    final = trainer.evaluate(trainer.x[:512], trainer.y[:512])
    assert final < 0.5 * trainer.initial_eval
    assert "accuracy" in trainer.finish()


@pytest.mark.parametrize("module", [mlp, conv, dynmlp])
def test_step_graph_has_forward_and_backward(module: Any) -> None:
    trainer = module.build(config(module), "cpu")
    graph = trainer.graph(backward=True)
    assert len(graph.forward) == 1 and graph.forward[0].shape == ()
    assert [g.shape for g in graph.backward] == [p.shape for p in trainer.params]


def test_dynmlp_trains_on_ragged_batches_without_recompiling() -> None:
    cfg = config(dynmlp)
    trainer = dynmlp.build(cfg, "cpu")
    train(trainer, cfg["steps"])
    final = trainer.evaluate(trainer.x, trainer.y)
    assert final < 0.03 * trainer.initial_eval
    until, later = trainer.compile_counts()
    assert until > 0 and later == 0
    assert len(trainer.sizes) > 20  # many sizes really ran: ceil(128/2)..128
    report = trainer.finish()
    assert "0 after it" in report and f"{trainer.jit.replays} replays" in report


def test_dynmlp_batch_7_and_300_share_one_compilation() -> None:
    """The kernels compiled for --batch 7 serve --batch 300 (and the other way round): same process, no
    new program."""
    from anneal.realize import runner

    small = dynmlp.build(config(dynmlp, batch=7), "cpu")
    train(small, 4)
    compiled = runner("cpu").stats.programs_compiled
    big = dynmlp.build(config(dynmlp, batch=300), "cpu")
    train(big, 4)
    assert runner("cpu").stats.programs_compiled == compiled
    assert max(big.sizes) > 150 and max(small.sizes) <= 7


def test_dynmlp_jit_replay_matches_eager_steps() -> None:
    a, b = dynmlp.build(config(dynmlp), "cpu"), dynmlp.build(config(dynmlp), "cpu")
    b._step = b._train_step
    np.testing.assert_allclose(train(a, 6), train(b, 6), rtol=1e-5)


def test_dynmlp_loss_matches_a_fixed_shape_mlp() -> None:
    """The symbolic step computes what the same MLP computes on concrete shapes (the mlp model's graph)."""
    cfg = config(dynmlp)
    trainer = dynmlp.build(cfg, "cpu")
    x, y = trainer.x[:37], trainer.y[:37]
    concrete = float(mlp.mse(trainer.model(Tensor(x)), Tensor(y)).item())
    assert trainer.evaluate(x, y) == pytest.approx(concrete, rel=1e-6)

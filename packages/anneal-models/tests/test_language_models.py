"""The char-level language models (nanogpt, llama, moe, bert), their dataset and sampling.

Tiny presets on the CPU backend, so the whole file runs in well under a minute. The value oracle
is PyTorch: nanoGPT's forward, written in torch with the same weights, gives the same logits.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from torch_reference import torch_nanogpt

from anneal import Tensor
from anneal import random as anneal_random
from anneal.data.testing import shared_data_dir
from anneal_models import bert, datasets, llama, moe, nanogpt, sample, transformer

# the pinned copy beside the repository (shared/data); a missing copy fails here, it never skips
DATA = shared_data_dir(__file__) / "tinyshakespeare" / "input.txt"


def config(module: Any, **overrides: Any) -> dict[str, Any]:
    return {**module.DEFAULTS, **module.PRESETS["tiny"], "data": str(DATA), **overrides}


@pytest.fixture(scope="module")
def data() -> datasets.CharDataset:
    return datasets.tinyshakespeare(DATA)


# ---- dataset ----


def test_vocabulary_and_split(data: datasets.CharDataset) -> None:
    assert data.vocab_size == 65 and data.chars == sorted(set(data.text))
    assert len(data.text) == 1_115_394
    assert len(data.train) == int(0.9 * len(data.data)) and len(data.train) + len(data.val) == len(data.data)
    assert data.decode(data.encode("First Citizen:")) == "First Citizen:"
    assert data.decode(data.val[:20]) == data.text[len(data.train) : len(data.train) + 20]


def test_windows_are_shifted_by_one_and_seeded(data: datasets.CharDataset) -> None:
    x, y = data.batch("train", 6, 16, np.random.default_rng(3))
    assert x.shape == y.shape == (6, 16) and x.dtype == np.int64
    np.testing.assert_array_equal(x[:, 1:], y[:, :-1])  # y is x one character on
    for row in x:  # each window is a contiguous piece of the train split
        text = data.decode(row)
        assert text in data.text[: len(data.train) + 16]
    x2, y2 = data.batch("train", 6, 16, np.random.default_rng(3))
    np.testing.assert_array_equal(x, x2)
    np.testing.assert_array_equal(y, y2)
    x3, _ = data.batch("train", 6, 16, np.random.default_rng(4))
    assert not np.array_equal(x, x3)
    v1 = data.fixed_batches("val", 2, 4, 8, seed=7)
    v2 = data.fixed_batches("val", 2, 4, 8, seed=7)
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(v1, v2))


def test_trainer_batches_depend_only_on_seed_and_step() -> None:
    a, b = nanogpt.build(config(nanogpt), "cpu"), nanogpt.build(config(nanogpt), "cpu")
    np.testing.assert_array_equal(a._batch(5)[0], b._batch(5)[0])
    assert not np.array_equal(a._batch(5)[0], a._batch(6)[0])


def test_dataset_rejects_unknown_split_and_characters(data: datasets.CharDataset) -> None:
    with pytest.raises(ValueError, match="split"):
        data.batch("test", 1, 4, np.random.default_rng(0))
    with pytest.raises(ValueError, match="vocabulary"):
        data.encode("é")


# ---- the oracle: nanoGPT in torch, same weights, same logits ----


@pytest.mark.parametrize("bias", [False, True])
def test_nanogpt_forward_matches_torch(bias: bool) -> None:
    import torch

    cfg = config(nanogpt, bias=bias, layers=2, heads=4, dim=32, block=16)
    net = nanogpt.build_model(cfg, 65, "cpu")
    rng = np.random.default_rng(0)
    weights = {name: rng.normal(0, 0.3, p.shape).astype(np.float32) for name, p in net.named_parameters()}
    weights = {k: v + 1.0 if "ln" in k and k.endswith("weight") else v for k, v in weights.items()}
    net.load_state_dict(weights)
    ref = torch_nanogpt(cfg, 65)
    missing, unexpected = ref.load_state_dict({k: torch.tensor(v) for k, v in weights.items()}, strict=False)
    assert set(missing) == {"lm_head.weight"} and not unexpected  # nanoGPT's names; the head is tied to wte
    idx = rng.integers(0, 65, (3, 16))
    got = net(Tensor(idx, device="cpu")).numpy()
    with torch.no_grad():
        want = ref(torch.tensor(idx)).numpy()
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)
    shorter = net(Tensor(idx[:, :5], device="cpu")).numpy()  # fewer positions than the block
    np.testing.assert_allclose(shorter, want[:, :5], atol=1e-4, rtol=1e-4)


def test_nanogpt_head_is_tied_and_init_follows_nanogpt() -> None:
    net = nanogpt.build_model(config(nanogpt, layers=4, dim=64, heads=4), 65, "cpu")
    names = dict(net.named_parameters())
    assert "lm_head.weight" not in names and "transformer.wte.weight" in names  # one matrix, used twice
    assert not any(n.endswith("bias") for n in names)  # nanoGPT's bias=False
    std = lambda n: float(names[n].numpy().std())  # noqa: E731
    assert abs(std("transformer.h.0.attn.c_attn.weight") - 0.02) < 0.002
    assert abs(std("transformer.h.0.mlp.c_proj.weight") - 0.02 / math.sqrt(8)) < 0.001


# ---- every model trains ----


@pytest.mark.parametrize("module", [nanogpt, llama, moe, bert], ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_model_trains_and_finishes(module: Any) -> None:
    trainer = module.build(config(module, steps=30, warmup=5), "cpu")
    before = trainer.evaluate()
    losses = [trainer.step(i) for i in range(30)]
    assert all(math.isfinite(v) for v in losses)
    assert np.mean(losses[-5:]) < losses[0] - 0.3, losses
    assert trainer.evaluate() < before - 0.2
    assert trainer.jit.replays == 28  # one eager call, one capture, replays after
    text = trainer.finish()
    assert "val loss" in text
    g = trainer.graph(backward=True)
    assert g.forward[0].shape == () and [t.shape for t in g.backward] == [p.shape for p in trainer.params]


def test_jit_replay_matches_eager_steps() -> None:
    """Through warmup (the lr changes every step) and with dropout: a replay reads the new lr, and draws the
    same fresh masks as eager steps (build() seeds the device generator)."""
    cfg = config(nanogpt, dropout=0.1, warmup=10)
    a = nanogpt.build(cfg, "cpu")
    jitted = [a.step(i) for i in range(6)]
    b = nanogpt.build(cfg, "cpu")
    b._step = b._train_step  # the same model stepped eagerly, without the jit
    np.testing.assert_allclose(jitted, [b.step(i) for i in range(6)], rtol=1e-5)
    assert a.jit.replays == 4


def test_resumed_run_continues_exactly() -> None:
    cfg = config(nanogpt, dropout=0.1)
    a = nanogpt.build(cfg, "cpu")
    full = [a.step(i) for i in range(7)]
    b = nanogpt.build(cfg, "cpu")
    first = [b.step(i) for i in range(4)]
    saved = b.state_dict()  # the checkpoint holds the device generator's state: the dropout masks continue
    c = nanogpt.build(cfg, "cpu")
    c.load_state_dict(saved)
    assert c.steps_done == 4 and c.lr() == a.lr_at(4)
    np.testing.assert_allclose(full, first + [c.step(i) for i in range(4, 7)], rtol=1e-6)


def test_lr_follows_warmup_and_cosine() -> None:
    trainer = nanogpt.build(config(nanogpt, steps=100, warmup=10, lr=1e-3, min_lr=1e-4), "cpu")
    assert trainer.lr_at(0) == pytest.approx(1e-4)
    assert trainer.lr_at(9) == pytest.approx(1e-3)
    assert trainer.lr_at(55) == pytest.approx(5.5e-4)
    assert trainer.lr_at(100) == pytest.approx(1e-4)


def test_llama_has_gqa_rope_swiglu_no_biases() -> None:
    cfg = config(llama, dim=32, heads=4, kv_heads=2)
    net = llama.build_model(cfg, 65, "cpu")
    names = dict(net.named_parameters())
    assert not any(n.endswith("bias") for n in names)
    assert names["layers.0.attn.c_attn.weight"].shape == ((4 + 2 * 2) * 8, 32)  # q: 4 heads, k and v: 2 heads
    assert names["layers.0.mlp.w1.weight"].shape == (llama.swiglu_hidden(32, 4, 2), 32) == (96, 32)
    assert not any("pos" in n or "wpe" in n for n in names)  # positions come from RoPE


def test_llama_small_matches_nanogpt_size() -> None:
    sizes = {}
    for module in (nanogpt, llama):
        cfg = {**module.DEFAULTS, **module.PRESETS["small"]}
        sizes[module.__name__] = transformer.count_parameters(module.build_model(cfg, 65, "cpu"))
    assert abs(sizes["anneal_models.llama"] / sizes["anneal_models.nanogpt"] - 1) < 0.015, sizes


def test_rope_rotates_pairs_by_position() -> None:
    rot = transformer.Rotary(4, 8)
    x = np.random.default_rng(0).normal(size=(1, 8, 4)).astype(np.float32)
    got = rot(Tensor(x, device="cpu")).numpy()
    inv = 1.0 / 10000 ** (np.arange(0, 4, 2) / 4)
    ang = np.arange(8)[:, None] * inv
    cos, sin = np.cos(ang), np.sin(ang)
    x1, x2 = x[..., :2], x[..., 2:]
    want = np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)
    np.testing.assert_allclose(got, want, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(got, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-5)


# ---- moe ----


def test_moe_aux_loss_is_near_one_at_init_and_loads_sum_to_one() -> None:
    trainer = moe.build(config(moe), "cpu")
    x, y = trainer._device_batch(0)
    _, parts = trainer.net.loss(x, y)
    assert abs(float(parts["aux"].item()) - 1.0) < 0.05
    aux, load = trainer.expert_load()
    assert load.shape == (2, 4) and np.allclose(load.sum(-1), 1.0)
    assert abs(aux - 1.0) < 0.05


def test_moe_aux_loss_detects_collapse() -> None:
    layer = moe.MoEFeedForward(8, 16, 4, dropout=0.0, std=0.02, proj_std=0.02,
                               device="cpu")  # fmt: skip
    w = np.zeros((4, 8), np.float32)
    w[2] = 50.0  # every token prefers expert 2
    layer.router.weight = Tensor(w, device="cpu")
    layer(Tensor(np.abs(np.random.default_rng(0).normal(size=(2, 5, 8))).astype(np.float32), device="cpu"))
    assert float(layer.aux().item()) == pytest.approx(4.0, rel=1e-3)
    np.testing.assert_allclose(layer.load().numpy(), [0, 0, 1, 0])


def test_moe_mixture_equals_weighted_sum_of_experts() -> None:
    layer = moe.MoEFeedForward(8, 16, 3, dropout=0.0, std=0.5, proj_std=0.5,
                               device="cpu")  # fmt: skip
    x = np.random.default_rng(1).normal(size=(2, 5, 8)).astype(np.float32)
    got = layer(Tensor(x, device="cpu")).numpy()
    wr, w1, w2 = layer.router.weight.numpy(), layer.w_fc.numpy(), layer.w_proj.numpy()
    logits = x @ wr.T
    g = np.exp(logits - logits.max(-1, keepdims=True))
    g /= g.sum(-1, keepdims=True)
    gelu = lambda z: 0.5 * z * (1 + np.vectorize(math.erf)(z / math.sqrt(2)))  # noqa: E731
    want = sum(g[..., e : e + 1] * (gelu(x @ w1[e]) @ w2[e]) for e in range(3))
    np.testing.assert_allclose(got, want, atol=1e-4)


# ---- bert ----


def test_bert_masks_fifteen_percent(data: datasets.CharDataset) -> None:
    rng = np.random.default_rng(0)
    x, _ = data.batch("train", 64, 64, rng)
    inputs, targets = bert.mask_tokens(x, data.vocab_size, 0.15, rng)
    chosen = targets != bert.IGNORE
    assert (chosen.sum(1) == round(0.15 * 64)).all()
    np.testing.assert_array_equal(targets[chosen], x[chosen])
    np.testing.assert_array_equal(inputs[~chosen], x[~chosen])  # unchosen positions are untouched
    masked = inputs[chosen] == data.vocab_size
    assert 0.7 < masked.mean() < 0.9  # 80% [MASK]
    assert (inputs[~chosen] < data.vocab_size).all()


def test_bert_loss_counts_masked_positions_only() -> None:
    trainer = bert.build(config(bert), "cpu")
    x, y = trainer.val_batches[0]
    logits = trainer.net(Tensor(x, device="cpu")).numpy()
    m = y != bert.IGNORE
    z = logits[m] - logits[m].max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    want = -logp[np.arange(m.sum()), y[m]].mean()
    assert trainer.evaluate(x, y) == pytest.approx(want, rel=1e-4)
    y2 = y.copy()
    y2[~m] = 0  # scoring the other positions too would change the loss
    assert trainer.evaluate(x, y2) != pytest.approx(want, rel=1e-3)


def test_bert_shards_weigh_their_share_of_the_masked_positions() -> None:
    """Data-parallel ranks sum weight x (their loss, their gradients): with the masked-token mean, the weights are
    the shards' shares of the masked positions, so the sum is the global mean whatever the masks."""
    trainer = bert.build(config(bert), "cpu")
    x, y = trainer.val_batches[0]
    y = y.copy()
    y[1:] = bert.IGNORE
    y[0, :3] = 1  # row 0: at least 3 masked positions, every other row none
    halves = slice(0, len(y) // 2), slice(len(y) // 2, len(y))
    assert [trainer.shard_weight((x, y), p) for p in halves] == [1.0, 0.0]
    per_shard = []
    for p in halves:
        loss = trainer.evaluate(x[p], y[p]) if (y[p] != bert.IGNORE).any() else 0.0
        per_shard.append(trainer.shard_weight((x, y), p) * loss)
    assert sum(per_shard) == pytest.approx(trainer.evaluate(x, y), rel=1e-5)
    unmasked = np.full_like(y, bert.IGNORE)
    assert trainer.shard_weight((x, unmasked), halves[0]) == pytest.approx(0.5)  # nothing masked: the rows' share


def test_bert_is_bidirectional() -> None:
    net = bert.build_model(config(bert), 65, "cpu")
    x = np.random.default_rng(0).integers(0, 65, (1, 32))
    y = x.copy()
    y[0, -1] = (y[0, -1] + 1) % 65  # change the last token: the first position's logits move too
    a, b = (net(Tensor(v, device="cpu")).numpy() for v in (x, y))
    assert np.abs(a[0, 0] - b[0, 0]).max() > 1e-6


# ---- sampling and dropout ----


def test_sampling_is_reproducible_and_respects_top_k() -> None:
    trainer = nanogpt.build(config(nanogpt), "cpu")
    a, b = trainer.sample(tokens=30, seed=1), trainer.sample(tokens=30, seed=1)
    assert a == b and len(a) == 31
    assert trainer.sample(tokens=30, seed=2) != a
    rng = np.random.default_rng(0)
    logits = np.array([0.0, 5.0, 4.0, -1.0])
    assert {sample.choose(logits, 1.0, 2, rng) for _ in range(200)} == {1, 2}
    assert sample.choose(logits, 0.0, None, rng) == 1  # temperature 0: greedy


def test_causal_model_ignores_the_padding_of_the_window() -> None:
    trainer = nanogpt.build(config(nanogpt), "cpu")
    s = trainer.sampler()
    w = np.random.default_rng(0).integers(0, 65, 32)
    w2 = w.copy()
    w2[10:] = 0
    np.testing.assert_allclose(s.logits(w)[:10], s.logits(w2)[:10], atol=1e-5)


def test_dropout_masks_differ_between_jit_replays() -> None:
    trainer = nanogpt.build(config(nanogpt, dropout=0.2), "cpu")
    for g in trainer.optimizer.param_groups:
        g["lr"] = 0.0  # the parameters stay as they are: only the dropout masks can change the loss
    x, y = trainer._device_batch(0)
    state = anneal_random.get_rng_state("cpu")
    losses = [float(trainer._step(x, y)[0].item()) for _ in range(4)]
    assert trainer.jit.replays == 2  # the last two calls replay the captured step
    assert len(set(losses)) == 4  # every call, replays included, drew new masks
    anneal_random.set_rng_state(state, "cpu")  # the same generator state: the same masks, replayed
    assert [float(trainer._step(x, y)[0].item()) for _ in range(4)] == losses

"""vit and resnet9: the networks against PyTorch with the same weights, and their trainers on real digits.

The oracle for the networks is torch (same weights, same input: logits, every parameter's gradient and
BatchNorm's running statistics, in train and eval mode). The trainers run their tiny presets on the
pinned digits, served to the real download code by a loopback server.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn as tnn
from torch.nn import functional as tf
from torch_reference import TorchResNet9

from anneal import Tensor, manual_seed
from anneal.nn.state import get_state_dict
from anneal.realize import realize_all
from anneal_models import classify, images, resnet9, vit

RTOL, ATOL = 2e-4, 2e-5


pytestmark = pytest.mark.usefixtures("offline_digits")  # conftest.py: the pinned digits, offline


def config(module: Any, **overrides: Any) -> dict[str, Any]:
    return {**module.DEFAULTS, **module.PRESETS["tiny"], **overrides}


# ---- the networks against torch ----


def torch_copy(module: Any, tmodule: tnn.Module) -> None:
    state = {k: torch.tensor(v.numpy()) for k, v in get_state_dict(module).items()}
    tmodule.load_state_dict(state)


def check_grads(module: Any, tmodule: tnn.Module) -> None:
    params = dict(module.named_parameters())
    realize_all([p.grad for p in params.values()])  # one schedule for the whole backward
    for name, tp in tmodule.named_parameters():
        assert tp.grad is not None, name
        np.testing.assert_allclose(params[name].grad.numpy(), tp.grad.numpy(), rtol=1e-3, atol=1e-5, err_msg=name)


def test_resnet9_matches_torch_in_train_and_eval_mode() -> None:
    manual_seed(0)
    net = resnet9.ResNet9(3, 10, 4, "cpu")
    tnet = TorchResNet9(3, 10, 4).double().float()
    torch_copy(net, tnet)
    x = np.random.default_rng(0).standard_normal((4, 3, 16, 16)).astype(np.float32)
    y = np.array([1, 3, 5, 7])
    # train mode: batch statistics; the loss read first, then backward, as torch users write it
    loss = classify_loss(net(Tensor(x)), Tensor(y))
    tloss = tf.cross_entropy(tnet(torch.tensor(x)), torch.tensor(y), label_smoothing=0.2)
    assert abs(loss.item() - tloss.item()) < 1e-5
    loss.backward()
    tloss.backward()
    check_grads(net, tnet)
    ours, theirs = get_state_dict(net), tnet.state_dict()
    realize_all(list(ours.values()))
    for name in ("prep.bn.running_mean", "res3.res2.bn.running_var", "layer2.bn.num_batches_tracked"):
        np.testing.assert_allclose(ours[name].numpy(), theirs[name].numpy(), rtol=RTOL, atol=ATOL, err_msg=name)
    # eval mode: the running statistics
    net.eval()
    tnet.eval()
    with torch.no_grad():
        expected = tnet(torch.tensor(x)).numpy()
    np.testing.assert_allclose(net(Tensor(x)).numpy(), expected, rtol=RTOL, atol=ATOL)


def classify_loss(logits: Tensor, y: Tensor) -> Tensor:
    from anneal.nn import functional as F

    return F.cross_entropy(logits, y, label_smoothing=0.2)


def torch_vit(net: vit.ViT, heads: int) -> Any:
    """The same ViT in torch functional form, reading anneal's weights."""
    w = {k: torch.tensor(v.numpy(), requires_grad=True) for k, v in get_state_dict(net).items()}

    def forward(x: torch.Tensor) -> torch.Tensor:
        n, c, h, wd = x.shape
        p = net.patch
        t = x.reshape(n, c, h // p, p, wd // p, p).permute(0, 2, 4, 1, 3, 5).reshape(n, -1, c * p * p)
        z = t @ w["embed.weight"].T + w["embed.bias"] + w["pos"]
        for i in range(len(net.blocks)):
            b = f"blocks.{i}."
            a = tf.layer_norm(z, (z.shape[-1],), w[b + "ln_1.weight"], w[b + "ln_1.bias"])
            q, k, v = (a @ w[b + "attn.c_attn.weight"].T + w[b + "attn.c_attn.bias"]).chunk(3, -1)
            q, k, v = (s.reshape(n, -1, heads, s.shape[-1] // heads).transpose(1, 2) for s in (q, k, v))
            o = tf.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(z.shape)
            z = z + o @ w[b + "attn.c_proj.weight"].T + w[b + "attn.c_proj.bias"]
            m = tf.layer_norm(z, (z.shape[-1],), w[b + "ln_2.weight"], w[b + "ln_2.bias"])
            hid = tf.gelu(m @ w[b + "mlp.c_fc.weight"].T + w[b + "mlp.c_fc.bias"])
            z = z + hid @ w[b + "mlp.c_proj.weight"].T + w[b + "mlp.c_proj.bias"]
        z = tf.layer_norm(z, (z.shape[-1],), w["norm.weight"], w["norm.bias"]).mean(1)
        return z @ w["head.weight"].T + w["head.bias"]

    return forward, w


def test_vit_matches_torch() -> None:
    manual_seed(1)
    net = vit.ViT((3, 16, 16), 10, 4, 16, 2, 2, "cpu")
    forward, weights = torch_vit(net, heads=2)
    x = np.random.default_rng(1).standard_normal((3, 3, 16, 16)).astype(np.float32)
    y = np.array([0, 4, 9])
    loss = classify_loss(net(Tensor(x)), Tensor(y))
    tloss = tf.cross_entropy(forward(torch.tensor(x)), torch.tensor(y), label_smoothing=0.2)
    assert abs(loss.item() - tloss.item()) < 1e-5
    loss.backward()
    tloss.backward()
    realize_all([p.grad for p in net.parameters()])
    for name, p in net.named_parameters():
        tgrad = weights[name].grad
        assert tgrad is not None, name
        np.testing.assert_allclose(p.grad.numpy(), tgrad.numpy(), rtol=1e-3, atol=1e-5, err_msg=name)


def test_vit_patches_are_row_major_tiles() -> None:
    net = vit.ViT((2, 4, 4), 10, 2, 8, 1, 2, "cpu")
    x = np.arange(32, dtype=np.float32).reshape(1, 2, 4, 4)
    got = net.patches(Tensor(x)).numpy()
    assert got.shape == (1, 4, 8)
    np.testing.assert_array_equal(got[0, 1], x[0, :, 0:2, 2:4].reshape(-1))  # top-right tile, channels first


# ---- trainers ----


@pytest.mark.parametrize("module", [resnet9, vit], ids=["resnet9", "vit"])
def test_trainer_learns_digits_and_reports_accuracy(module: Any) -> None:
    trainer = module.build(config(module), "cpu")
    assert trainer.config["steps"] == 2 * trainer.steps_per_epoch == 60  # 2 epochs of 1,500 // 50
    assert trainer.config["eval_every"] == trainer.steps_per_epoch
    losses = [trainer.step(i) for i in range(trainer.config["steps"])]
    assert np.mean(losses[-10:]) < np.mean(losses[:10])
    trainer.evaluate()
    report = trainer.report()
    assert report["dataset"] == "digits" and report["test_images"] == 297 and report["epochs"] == 2
    chance = np.bincount(trainer.data.y_test).max() / 297
    assert report["accuracy"] > chance + 0.1  # well above guessing after two epochs
    predictions = trainer.test_logits().argmax(-1)
    assert report["accuracy"] == pytest.approx(float((predictions == trainer.data.y_test).mean()))
    for k, name in enumerate(trainer.data.classes):
        mask = trainer.data.y_test == k
        assert report["per_class"][name] == pytest.approx(float((predictions[mask] == k).mean()))
    text = trainer.finish()
    assert "test accuracy" in text and "class  images  accuracy" in text
    json.dumps(report)  # what summary.json holds


def test_eval_chunks_give_the_same_logits_as_one_forward() -> None:
    trainer = resnet9.build(config(resnet9), "cpu")
    whole = trainer.predict(trainer.data.x_test[:40])
    trainer.config["eval_chunk"] = 16  # 16 + 16 + 8 (padded to 16)
    chunked = resnet9.ResNet9Trainer.predict(trainer, trainer.data.x_test[:40])
    np.testing.assert_allclose(chunked, whole, rtol=1e-4, atol=1e-5)


def test_batches_depend_on_seed_and_step_only_and_are_augmented() -> None:
    a, b = resnet9.build(config(resnet9), "cpu"), resnet9.build(config(resnet9), "cpu")
    for i in (0, 31, 5):
        xa, ya = a._batch(i)
        xb, yb = b._batch(i)
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)
    x0, y0 = a._batch(0)
    assert x0.shape == (50, 1, 8, 8) and abs(float(x0.mean())) < 0.5  # normalized
    epoch = np.concatenate([a._batch(i)[1] for i in range(a.steps_per_epoch)])
    np.testing.assert_array_equal(np.sort(epoch), np.sort(a.data.y_train))  # one epoch: every image once
    c = resnet9.build(config(resnet9, seed=1), "cpu")
    assert not np.array_equal(c._batch(0)[0], x0)
    raw = a.data.x_train[np.random.default_rng([0, 0]).permutation(1500)[:50]]
    assert not np.allclose(a.normalize(raw), x0)  # shifted by the crop


def test_resumed_trainer_continues_exactly() -> None:
    whole = resnet9.build(config(resnet9), "cpu")
    expected = [whole.step(i) for i in range(6)]
    first = resnet9.build(config(resnet9), "cpu")
    [first.step(i) for i in range(3)]
    state = {k: Tensor(v.numpy(), device="cpu") for k, v in first.state_dict().items()}
    resumed = resnet9.build(config(resnet9), "cpu")
    resumed.load_state_dict(state)
    assert resumed.steps_done == 3
    np.testing.assert_allclose([resumed.step(i) for i in range(3, 6)], expected[3:], rtol=1e-5, atol=1e-6)


def test_one_cycle_schedule() -> None:
    lrs = [classify.one_cycle(i, 100, 0.4, 0.2) for i in range(100)]
    assert lrs[19] == pytest.approx(0.4) and lrs[0] == pytest.approx(0.02)
    assert lrs[-1] == pytest.approx(0.0) and max(lrs) == pytest.approx(0.4)
    assert all(x < y for x, y in zip(lrs[:19], lrs[1:20])) and all(x > y for x, y in zip(lrs[20:-1], lrs[21:]))


def test_bad_configurations_are_named() -> None:
    with pytest.raises(images.ImageDataError, match="unknown image dataset 'tinyshakespeare'; known: digits"):
        resnet9.build(config(resnet9, dataset="tinyshakespeare"), "cpu")
    with pytest.raises(ValueError, match="batch 5000 is larger than the 1500 training images"):
        vit.build(config(vit, batch=5000), "cpu")
    with pytest.raises(ValueError, match="patch 3 does not divide"):
        vit.build(config(vit, patch=3), "cpu")

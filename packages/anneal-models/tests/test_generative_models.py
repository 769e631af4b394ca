"""diffusion, dit and meanflow against PyTorch; the schedules and samplers against their formulas; the scorer.

The oracles: TorchDiT (torch_reference.py) with anneal's weights for dit's denoising loss and gradients;
torch.func.jvp for MeanFlow's JVP, and a torch implementation of its objective (loss and gradients).
"""

from __future__ import annotations

import io
import math
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from torch_reference import TorchDiT, torch_meanflow_loss

from anneal import Tensor, jvp, manual_seed
from anneal.nn.state import get_state_dict, load_state_dict
from anneal.realize import realize_all
from anneal_models import diffusion, dit, generative, images, meanflow, score

pytestmark = pytest.mark.usefixtures("offline_digits")  # conftest.py: the pinned digits, offline
TINY = {"dataset": "digits", "patch": 2, "dim": 16, "layers": 2, "heads": 2}


def randomized(net: Any, seed: int) -> dict[str, np.ndarray]:
    """Give every parameter of net random values (adaLN-zero starts most of them at zero, which would hide
    wrong gradients) and return them as arrays."""
    rng = np.random.default_rng(seed)
    weights = {k: (rng.standard_normal(v.shape) * 0.3).astype(np.float32) for k, v in get_state_dict(net).items()}
    load_state_dict(net, weights)
    return weights


def torch_twin(weights: dict[str, np.ndarray], times: int, time_scale: float) -> TorchDiT:
    tnet = TorchDiT((1, 8, 8), 10, 2, TINY["dim"], TINY["layers"], TINY["heads"], times, time_scale)
    tnet.load_state_dict({k: torch.tensor(v) for k, v in weights.items()})
    return tnet


def check_grads(net: Any, tnet: torch.nn.Module) -> None:
    params = dict(net.named_parameters())
    realize_all([p.grad for p in params.values()])
    for name, tp in tnet.named_parameters():
        assert tp.grad is not None, name
        np.testing.assert_allclose(params[name].grad.numpy(), tp.grad.numpy(), rtol=2e-3, atol=2e-5, err_msg=name)


def batch(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (n, 1, 8, 8)).astype(np.float32), rng.integers(0, 11, n)  # 10: the null class


def test_dit_denoising_loss_and_gradients_match_torch() -> None:
    manual_seed(0)
    trainer = dit.build({**dit.DEFAULTS, **dit.PRESETS["tiny"], **TINY}, "cpu")
    weights = randomized(trainer.net, 1)
    tnet = torch_twin(weights, 1, 1.0)
    x, y = batch(6, 2)
    t = np.array([0, 3, 17, 50, 80, 99])
    noise = np.random.default_rng(3).standard_normal(x.shape).astype(np.float32)
    loss = trainer.loss_at(Tensor(x), Tensor(y), Tensor(t), Tensor(noise))
    a = torch.tensor(trainer.abar[t], dtype=torch.float32).reshape(-1, 1, 1, 1)
    tx, tn = torch.tensor(x), torch.tensor(noise)
    tloss = (tnet(a.sqrt() * tx + (1 - a).sqrt() * tn, torch.tensor(t).float(), torch.tensor(y)) - tn).square().mean()
    assert loss.item() == pytest.approx(tloss.item(), rel=1e-5)
    loss.backward()
    tloss.backward()
    check_grads(trainer.net, tnet)


def test_meanflow_jvp_matches_torch_func_jvp() -> None:
    """d/dt u along (v, 0, 1) in (z, r, t): the JVP MeanFlow's target needs, through the whole DiT."""
    manual_seed(0)
    net = dit.DiT((1, 8, 8), 10, 2, TINY["dim"], TINY["layers"], TINY["heads"], "cpu", times=2,
                  time_scale=meanflow.TIME_SCALE)  # fmt: skip
    tnet = torch_twin(randomized(net, 4), 2, meanflow.TIME_SCALE)
    rng = np.random.default_rng(5)
    z, y = batch(5, 6)
    v = rng.standard_normal(z.shape).astype(np.float32)
    t = rng.uniform(0.2, 1, 5).astype(np.float32)
    r = (t * rng.uniform(0, 1, 5)).astype(np.float32)

    def u(z_: Tensor, r_: Tensor, t_: Tensor) -> Tensor:
        return net(z_, t_, t_ - r_, Tensor(y))

    out, dudt = jvp(u, (Tensor(z), Tensor(r), Tensor(t)), (Tensor(v), Tensor(np.zeros(5, np.float32)),
                                                           Tensor(np.ones(5, np.float32))))  # fmt: skip
    tout, tdudt = torch.func.jvp(lambda z_, r_, t_: tnet(z_, t_, t_ - r_, torch.tensor(y)),
                                 (torch.tensor(z), torch.tensor(r), torch.tensor(t)),
                                 (torch.tensor(v), torch.zeros(5), torch.ones(5)))  # fmt: skip
    # times are embedded as cos/sin of up to 1000 radians: float32 rounds those angles to ~6e-5
    expected, expected_t = tout.detach().numpy(), tdudt.detach().numpy()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-3, atol=1e-3 * np.abs(expected).max())
    np.testing.assert_allclose(dudt.numpy(), expected_t, rtol=1e-3, atol=1e-3 * np.abs(expected_t).max())
    assert np.abs(expected_t).max() > 1e-2  # a derivative that is there to compare


def test_meanflow_loss_and_gradients_match_torch() -> None:
    manual_seed(0)
    trainer = meanflow.build({**meanflow.DEFAULTS, **meanflow.PRESETS["tiny"], **TINY}, "cpu")
    tnet = torch_twin(randomized(trainer.net, 7), 2, meanflow.TIME_SCALE)
    x, y = batch(6, 8)
    rng = np.random.default_rng(9)
    e = rng.standard_normal(x.shape).astype(np.float32)
    t = rng.uniform(0.1, 1, 6).astype(np.float32)
    r = np.where(np.arange(6) % 2 == 0, t, t * 0.4).astype(np.float32)  # half of the pairs with r = t
    loss, _ = trainer.loss_at(Tensor(x), Tensor(y), Tensor(r), Tensor(t), Tensor(e))
    tloss = torch_meanflow_loss(tnet, torch.tensor(x), torch.tensor(y), torch.tensor(r), torch.tensor(t),
                                torch.tensor(e))  # fmt: skip
    assert loss.item() == pytest.approx(tloss.item(), rel=1e-4)
    loss.backward()
    tloss.backward()
    check_grads(trainer.net, tnet)


def test_meanflow_without_the_jvp_is_flow_matching_on_the_average_velocity() -> None:
    manual_seed(0)
    config = {**meanflow.DEFAULTS, **meanflow.PRESETS["tiny"], **TINY, "jvp": False, "adaptive_p": 0.0}
    trainer = meanflow.build(config, "cpu")
    randomized(trainer.net, 10)
    x, y = batch(4, 11)
    e = np.random.default_rng(12).standard_normal(x.shape).astype(np.float32)
    r, t = np.full(4, 0.2, np.float32), np.full(4, 0.7, np.float32)
    loss, error = trainer.loss_at(Tensor(x), Tensor(y), Tensor(r), Tensor(t), Tensor(e))
    assert loss.item() == pytest.approx(error.item(), rel=1e-6)  # p = 0: no weighting
    z = (1 - 0.7) * x + 0.7 * e
    u = trainer.net(Tensor(z), Tensor(t), Tensor(t - r), Tensor(y)).numpy()
    assert error.item() == pytest.approx(float(((u - (e - x)) ** 2).reshape(4, -1).sum(-1).mean()), rel=1e-5)


def test_noise_schedules_follow_their_definitions() -> None:
    linear = generative.alpha_bars("linear", 1000)
    np.testing.assert_allclose(linear, np.cumprod(1 - np.linspace(1e-4, 0.02, 1000)))
    cosine = generative.alpha_bars("cosine", 1000)
    f = np.cos((np.arange(1001) / 1000 + 0.008) / 1.008 * math.pi / 2) ** 2
    np.testing.assert_allclose(cosine[:990], (f[1:] / f[0])[:990], rtol=1e-9)  # before the 0.999 clip
    assert np.all(np.diff(cosine) < 0) and 0 < cosine[-1] < 1e-4
    with pytest.raises(ValueError, match="unknown noise schedule 'quadratic'"):
        generative.alpha_bars("quadratic", 10)
    np.testing.assert_array_equal(generative.respaced(linear, 4), [999, 666, 333, 0])
    np.testing.assert_array_equal(generative.respaced(linear[:5], 5), [4, 3, 2, 1, 0])
    with pytest.raises(generative.SampleError, match="between 1 and the model's 1000 diffusion steps, got 0"):
        generative.respaced(linear, 0)


def test_samplers_recover_x0_from_the_true_noise() -> None:
    """Given the noise that made x_t, DDIM's step to alpha_bar 1 returns x0, and DDPM's noiseless step is the
    posterior mean of q(x_prev | x_t, x0)."""
    rng = np.random.default_rng(0)
    x0 = rng.uniform(-1, 1, (3, 1, 8, 8))
    eps = rng.standard_normal(x0.shape)
    a_t, a_prev = 0.3, 0.7
    xt = math.sqrt(a_t) * x0 + math.sqrt(1 - a_t) * eps
    np.testing.assert_allclose(generative.denoise_step("ddim", xt, eps, a_t, 1.0, None), x0, atol=1e-5)
    beta = 1 - a_t / a_prev
    mean = (math.sqrt(a_prev) * beta * x0 + math.sqrt(1 - beta) * (1 - a_prev) * xt) / (1 - a_t)
    np.testing.assert_allclose(generative.denoise_step("ddpm", xt, eps, a_t, a_prev, None), mean, atol=1e-5)
    noise = rng.standard_normal(x0.shape)
    var = beta * (1 - a_prev) / (1 - a_t)
    np.testing.assert_allclose(generative.denoise_step("ddpm", xt, eps, a_t, a_prev, noise),
                               mean + math.sqrt(var) * noise, atol=1e-5)  # fmt: skip


def test_timestep_embedding_is_cos_then_sin() -> None:
    t = np.array([0.0, 1.0, 250.0], np.float32)
    got = generative.timestep_embedding(Tensor(t), 8).numpy()
    freqs = np.exp(-math.log(10000) * np.arange(4) / 4)
    np.testing.assert_allclose(got, np.concatenate([np.cos(t[:, None] * freqs), np.sin(t[:, None] * freqs)], -1),
                               rtol=1e-5, atol=1e-5)  # fmt: skip


@pytest.mark.parametrize("module", [diffusion, dit, meanflow], ids=["diffusion", "dit", "meanflow"])
def test_tiny_presets_train_and_sample_by_seed(module: Any) -> None:
    config = {**module.DEFAULTS, **module.PRESETS["tiny"]}
    trainer = module.build(config, "cpu")
    before = [p.numpy().copy() for p in trainer.params]
    losses = [trainer.step(i) for i in range(config["steps"])]
    assert all(np.isfinite(losses)) and all(np.abs(b - p.numpy()).max() > 0 for b, p in zip(before, trainer.params))
    if module is not meanflow:  # meanflow's error grows while its target (through d/dt u) does
        assert np.mean(losses[-5:]) < losses[0]
    a, labels = trainer.sample(12, seed=3)
    b, _ = trainer.sample(12, seed=3)
    c, _ = trainer.sample(12, seed=4)
    assert a.shape == (12, *trainer.data.shape) and np.isfinite(a).all()
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - c).max() > 1e-3
    if trainer.conditional:
        np.testing.assert_array_equal(labels, np.arange(12) % 10)
    else:
        assert labels is None
    png = Image.open(io.BytesIO(trainer.sample_grid(2, seed=0)))
    assert png.format == "PNG" and png.size[0] > 8 * 4 * 2


@pytest.mark.parametrize("module", [dit, meanflow], ids=["dit", "meanflow"])
def test_a_resumed_generator_continues_exactly(module: Any) -> None:
    """Parameters, AdamW's moments, the lr schedule and the device generator (the objective's noise) are all in
    the checkpoint: steps 4 and 5 after a reload are those of an uninterrupted run."""
    config = {**module.DEFAULTS, **module.PRESETS["tiny"]}
    whole = module.build(config, "cpu")
    expected = [whole.step(i) for i in range(6)]
    first = module.build(config, "cpu")
    for i in range(4):
        first.step(i)
    state = {k: Tensor(v.numpy().copy(), device="cpu") for k, v in first.state_dict().items()}
    resumed = module.build(config, "cpu")
    resumed.load_state_dict(state)
    assert [resumed.step(i) for i in (4, 5)] == pytest.approx(expected[4:], rel=1e-6)


def test_dit_on_colour_images_of_cifars_shape() -> None:
    """`--dataset cifar10`'s path (3x32x32, patch 4) on the generated synthetic10 set of the same shape: the real
    archive cannot be fetched here."""
    config = {**dit.DEFAULTS, **dit.PRESETS["tiny"], "dataset": "synthetic10", "patch": 4, "steps": 3}
    trainer = dit.build(config, "cpu")
    assert trainer.net.grid == (8, 8) and trainer.peak == 1.0
    assert all(np.isfinite([trainer.step(i) for i in range(3)]))
    x, _ = trainer.sample(4, steps=2, seed=0)
    assert x.shape == (4, 3, 32, 32)
    png = Image.open(io.BytesIO(trainer.sample_grid(1, steps=2)))
    assert png.mode == "RGB" and png.size[1] > 10 * 32 * 4


def test_sampling_arguments_are_checked() -> None:
    cond = dit.build({**dit.DEFAULTS, **dit.PRESETS["tiny"]}, "cpu")
    uncond = diffusion.build({**diffusion.DEFAULTS, **diffusion.PRESETS["tiny"]}, "cpu")
    with pytest.raises(generative.SampleError, match=r"--class 12 is out of range: dit was trained on 10 classes"):
        cond.check_sampling(12, None, None)
    with pytest.raises(generative.SampleError, match="diffusion is unconditional: it takes no --class"):
        uncond.check_sampling(3, None, None)
    with pytest.raises(generative.SampleError, match=r"classifier-free guidance \(--cfg\) needs a class"):
        uncond.check_sampling(None, None, 2.0)
    with pytest.raises(generative.SampleError, match="--steps must be at least 1, got 0"):
        cond.check_sampling(None, 0, None)
    with pytest.raises(generative.SampleError, match="between 1 and the model's 100 diffusion steps, got 500"):
        cond.sample(4, steps=500)
    with pytest.raises(ValueError, match="the scorer is a digits classifier; this diffusion run was trained on "
                                         "synthetic8"):  # fmt: skip
        uncond.score(10)


def test_guidance_mixes_the_class_and_null_predictions() -> None:
    trainer = dit.build({**dit.DEFAULTS, **dit.PRESETS["tiny"]}, "cpu")
    randomized(trainer.net, 13)
    x, _ = batch(4, 14)
    labels = np.array([1, 7, 7, 3])
    t = np.full(4, 40, np.float32)
    cond = trainer.network(x, t, labels)
    null = trainer.network(x, t, np.full(4, 10))
    assert np.abs(cond - null).max() > 1e-3
    np.testing.assert_allclose(trainer.eps(x, 40, labels, 3.0), null + 3 * (cond - null), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(trainer.eps(x, 40, labels, 1.0), cond)
    png = Image.open(io.BytesIO(trainer.sample_grid(3, label=7)))
    assert png.size[1] < 2 * (8 * 4 + 4)  # one row


def test_frechet_distance_matches_the_eigenvalue_formula() -> None:
    """tr sqrt(S_a S_b) through eigenvalues of the product (torch.linalg.eigvals), as pytorch-fid computes it."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((400, 6)) @ rng.standard_normal((6, 6))
    b = rng.standard_normal((300, 6)) @ rng.standard_normal((6, 6)) + 0.5
    sa, sb = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    root = torch.linalg.eigvals(torch.tensor(sa @ sb)).sqrt().real.sum().item()
    expected = float(((a.mean(0) - b.mean(0)) ** 2).sum() + np.trace(sa) + np.trace(sb) - 2 * root)
    assert score.frechet_distance(a, b) == pytest.approx(expected, rel=1e-6)
    assert abs(score.frechet_distance(a, a)) < 1e-6


def test_the_shipped_scorer_recognizes_real_digits() -> None:
    scorer = score.Scorer("cpu")
    data = images.load("digits")
    real = scorer.score(data.x_test, data.y_test)
    assert real["accuracy"] >= 0.97 and real[score.NAME] < 1e-6  # the test images against themselves
    train = scorer.score(data.x_train[:500], data.y_train[:500])
    noise = scorer.score(np.random.default_rng(0).uniform(0, 16, (500, 1, 8, 8)).astype(np.float32))
    assert train[score.NAME] < 5 < 50 < noise[score.NAME]
    assert train["histogram"] == pytest.approx(list(np.bincount(data.y_train[:500], minlength=10) / 500), abs=0.02)

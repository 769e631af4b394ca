"""The same training run on the numpy backend and on WebGPU (lavapipe in CI) gives the same losses."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from anneal.data.testing import shared_data_dir
from anneal_models import conv, diffusion, dit, dynmlp, gpt2, images, meanflow, mlp, resnet9, vit
from anneal_wgpu.testing import require_adapter


@pytest.mark.parametrize("module,steps", [(mlp, 40), (conv, 8), (dynmlp, 12)], ids=["mlp", "conv", "dynmlp"])
def test_training_matches_across_backends(module: Any, steps: int) -> None:
    _, on_gpu = train_on_both(module, steps)
    assert on_gpu.jit.replays == steps - 2


def train_on_both(module: Any, steps: int) -> tuple[Any, Any]:
    """The model's tiny preset trained `steps` steps on cpu and on webgpu, which must give the same losses."""
    require_adapter(pytest.fail, pytest.skip)
    config = {**module.DEFAULTS, **module.PRESETS["tiny"]}
    # build and train one after the other: build() reseeds every device's generator (as torch.manual_seed),
    # so a second build between the first one and its steps would rewind the first one's draws
    on_cpu = module.build(config, "cpu")
    losses_cpu = [on_cpu.step(i) for i in range(steps)]
    on_gpu = module.build(config, "webgpu")
    losses_gpu = [on_gpu.step(i) for i in range(steps)]
    np.testing.assert_allclose(losses_gpu, losses_cpu, rtol=2e-3, atol=1e-5)
    return on_cpu, on_gpu


@pytest.fixture
def offline_digits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    (tmp_path / "data" / "digits").mkdir(parents=True)
    shutil.copy(shared_data_dir(__file__) / "digits" / "digits.csv.gz", tmp_path / "data" / "digits")
    monkeypatch.setenv("ANNEAL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("ANNEAL_OFFLINE", "1")
    images.load.cache_clear()
    yield
    images.load.cache_clear()


@pytest.mark.parametrize("module,steps", [(resnet9, 4), (vit, 4)], ids=["resnet9", "vit"])
def test_classifiers_train_alike_on_both_backends(module: Any, steps: int, offline_digits: None) -> None:
    """BatchNorm's batch statistics and running statistics, attention, SGD/AdamW: the same losses and the same
    test logits (eval mode, running statistics) after a few steps on real digits."""
    on_cpu, on_gpu = train_on_both(module, steps)
    x = on_cpu.data.x_test[:64]
    np.testing.assert_allclose(on_gpu.predict(x), on_cpu.predict(x), rtol=2e-3, atol=2e-4)


@pytest.mark.parametrize("module", [diffusion, dit, meanflow], ids=["diffusion", "dit", "meanflow"])
def test_generators_train_and_sample_alike_on_both_backends(module: Any, offline_digits: None) -> None:
    """The objective's noise, times and label dropout are drawn in the graph (the same bits on every backend),
    meanflow's through anneal.jvp: the same losses; sampling draws on the host by seed: the same images."""
    on_cpu, on_gpu = train_on_both(module, 4)
    a, _ = on_cpu.sample(8, seed=5, steps=3)
    b, _ = on_gpu.sample(8, seed=5, steps=3)
    np.testing.assert_allclose(b, a, rtol=2e-3, atol=2e-3)


def test_gpt2_on_webgpu_matches_transformers(tmp_path: Path) -> None:
    """A random tiny GPT-2 in the Hugging Face layout: logits on webgpu against transformers (1e-4), and the KV
    cache's greedy tokens the same as on cpu."""
    require_adapter(pytest.fail, pytest.skip)
    import torch
    import transformers

    torch.manual_seed(2)
    config = transformers.GPT2Config(vocab_size=50257, n_positions=64, n_embd=32, n_layer=2, n_head=2)
    hf = transformers.GPT2LMHeadModel(config).eval()
    hf.save_pretrained(tmp_path, safe_serialization=True)
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(shared_data_dir(__file__) / "gpt2" / name, tmp_path)
    net, bpe = gpt2.load(tmp_path, "webgpu")
    net.eval()
    ids = bpe.encode("To be, or not to be, that is the question")
    with torch.no_grad():
        expected = hf(torch.tensor([ids])).logits.numpy()
    from anneal import Tensor

    np.testing.assert_allclose(net(Tensor(np.array([ids]), device="webgpu")).numpy(), expected, atol=1e-4, rtol=1e-4)
    on_gpu = list(gpt2.Generator(net, "webgpu").stream(ids, 12, temperature=0.0))
    cpu_net, _ = gpt2.load(tmp_path, "cpu")
    assert on_gpu == list(gpt2.Generator(cpu_net, "cpu").stream(ids, 12, temperature=0.0))

"""The same training run on the numpy backend and on WebGPU (lavapipe in CI) gives the same losses."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from anneal_models import conv, dynmlp, mlp
from anneal_wgpu.testing import require_adapter


@pytest.mark.parametrize("module,steps", [(mlp, 40), (conv, 8), (dynmlp, 12)], ids=["mlp", "conv", "dynmlp"])
def test_training_matches_across_backends(module: Any, steps: int) -> None:
    require_adapter(pytest.fail, pytest.skip)
    config = {**module.DEFAULTS, **module.PRESETS["tiny"]}
    on_cpu, on_gpu = module.build(config, "cpu"), module.build(config, "webgpu")
    losses_cpu = [on_cpu.step(i) for i in range(steps)]
    losses_gpu = [on_gpu.step(i) for i in range(steps)]
    np.testing.assert_allclose(losses_gpu, losses_cpu, rtol=2e-3, atol=1e-5)
    assert on_gpu.jit.replays == steps - 2

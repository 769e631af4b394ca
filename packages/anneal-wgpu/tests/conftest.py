"""Shared fixtures for WebGPU tests.

`adapter` gives the chosen adapter's description. Without one the test is skipped, unless
ANNEAL_EXPECT_ADAPTER=1 (CI sets it, after installing Mesa's lavapipe): then it fails, so
a missing driver can never turn the WebGPU suite into a row of silent skips.
"""

from __future__ import annotations

import pytest

from anneal_wgpu import adapters
from anneal_wgpu.testing import require_adapter


@pytest.fixture(scope="session")
def adapter() -> adapters.AdapterInfo:
    return require_adapter(pytest.fail, pytest.skip)

"""Shared fixtures for WebGPU tests.

`adapter` gives the chosen adapter's description. Without one the test is skipped, unless
ANNEAL_EXPECT_ADAPTER=1 (CI sets it, after installing Mesa's lavapipe): then it fails, so
a missing driver can never turn the WebGPU suite into a row of silent skips.
"""

from __future__ import annotations

import pytest

from anneal_ir.settings import Settings
from anneal_wgpu import adapters


@pytest.fixture(scope="session")
def adapter() -> adapters.AdapterInfo:
    found = adapters.describe()
    if found.chosen is None:
        if Settings.from_env().expect_adapter:
            pytest.fail(f"ANNEAL_EXPECT_ADAPTER is set, but there is no WebGPU adapter: {found.problem}")
        pytest.skip(f"no WebGPU adapter: {found.problem}")
    return found.chosen

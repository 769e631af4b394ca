"""For test suites: the adapter, or a skip — a failure when ANNEAL_EXPECT_ADAPTER=1 (CI).

CI installs Mesa's lavapipe and sets ANNEAL_EXPECT_ADAPTER, so a missing driver can never
turn the WebGPU tests into a row of silent skips.
"""

from __future__ import annotations

import pytest

from anneal_ir.settings import Settings
from anneal_wgpu import adapters


def require_adapter() -> adapters.AdapterInfo:
    found = adapters.describe()
    if found.chosen is None:
        if Settings.from_env().expect_adapter:
            pytest.fail(f"ANNEAL_EXPECT_ADAPTER is set, but there is no WebGPU adapter: {found.problem}")
        pytest.skip(f"no WebGPU adapter: {found.problem}")
    return found.chosen

"""For test suites: the adapter, or a skip — a failure when ANNEAL_EXPECT_ADAPTER=1 (CI).

CI installs Mesa's lavapipe and sets ANNEAL_EXPECT_ADAPTER, so a missing driver can never
turn the WebGPU tests into a row of silent skips. The test framework's fail and skip are
passed in, so this package does not depend on one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from anneal_ir.settings import Settings
from anneal_wgpu import adapters


def require_adapter(fail: Callable[[str], Any], skip: Callable[[str], Any]) -> adapters.AdapterInfo:
    found = adapters.describe()
    if found.chosen is None:
        if Settings.from_env().expect_adapter:
            fail(f"ANNEAL_EXPECT_ADAPTER is set, but there is no WebGPU adapter: {found.problem}")
        skip(f"no WebGPU adapter: {found.problem}")
        raise AssertionError("skip() returned")  # pragma: no cover - fail/skip raise
    return found.chosen

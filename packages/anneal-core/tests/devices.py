"""Which backend the suites run on: ANNEAL_DEVICE (read through Settings), cpu by default."""

from __future__ import annotations

from anneal_ir import Settings

_chosen = Settings.from_env().device
DEV = _chosen if _chosen != "auto" else "cpu"
# WGSL has no 64-bit floats: on webgpu (as on torch's MPS) float64 is refused, so cases that exercise a
# wide float use float32 there (test_ops.test_float64_support checks both behaviours).
HAS_F64 = DEV != "webgpu"
WIDE = "float64" if HAS_F64 else "float32"

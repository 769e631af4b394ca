"""float16 through the ops that test a float by its bits (isnan and isinf, and everything that finds a NaN with
them: isclose, fmod, the max family, sort/topk/cummax, max_pool2d, the activations with a NaN-safe branch,
normalize, binary cross entropy with logits), against torch's float16 on the CPU: values (NaN and inf where
torch's are), dtypes, and gradients where torch computes them in float16. On webgpu these kernels store and
compute float16 (shader-f16), where a 16-bit bitcast is not one WGSL instruction."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from devices import DEV

import anneal.nn.functional as F
from anneal import Tensor

# float16 rounds at 2^-11 relative; torch computes most of these in float32 and rounds once
RTOL, ATOL = 4e-3, 4e-3
H = np.array([[1.0, np.nan, np.inf, -2.0, -np.inf, 0.0, 0.5, 65504.0],
              [-0.25, 3.0, -1.0, 7.5, 2.0, -3.5, -0.0, 6e-5]], np.float16)  # fmt: skip
FINITE = np.array([[1.0, -2.0, 0.25, 3.5, -0.75, 0.0], [2.5, -1.5, 0.5, -3.0, 1.25, -0.5]], np.float16)
IMAGE = np.linspace(-3, 3, 2 * 3 * 4 * 4).reshape(2, 3, 4, 4).astype(np.float16)
IMAGE[0, 1, 2, 2] = np.nan


def _first(x: Any) -> Any:
    return x[0] if isinstance(x, tuple) else x


def _values(x: Any) -> np.ndarray:
    x = _first(x)
    return x.detach().numpy() if isinstance(x, torch.Tensor) else x.numpy()


def _dtype(x: Any) -> str:
    x = _first(x)
    return str(x.dtype).removeprefix("torch.") if isinstance(x, torch.Tensor) else x.dtype.name


def _check(got: Any, exp: Any, what: str) -> None:
    assert _dtype(got) == _dtype(exp), f"{what}: dtype {_dtype(got)}, torch {_dtype(exp)}"
    g, e = _values(got), _values(exp)
    assert g.shape == e.shape, f"{what}: shape {g.shape}, torch {e.shape}"
    if g.dtype.kind in "biu":
        np.testing.assert_array_equal(g, e, err_msg=what)
    else:
        np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), rtol=RTOL, atol=ATOL,
                                   equal_nan=True, err_msg=what)  # fmt: skip


CASES: list[tuple[str, Callable[[Any, Any], Any], np.ndarray]] = [
    # name, fn(namespace of functional ops, x), input
    ("isnan", lambda f, x: x.isnan(), H),
    ("isinf", lambda f, x: x.isinf(), H),
    ("isfinite", lambda f, x: x.isfinite(), H),
    ("isclose", lambda f, x: x.isclose(x * 1.001 if isinstance(x, Tensor) else x * 1.001), H),
    ("isclose_equal_nan", lambda f, x: x.isclose(x, equal_nan=True), H),
    ("fmod_tensor", lambda f, x: x.fmod(x.flip(-1)), H),
    ("fmod_scalar", lambda f, x: x.fmod(1.5), H),
    ("amax", lambda f, x: x.amax(-1), H),
    ("max", lambda f, x: x.max(), H),
    ("max_dim", lambda f, x: x.max(-1), H),
    ("argmin", lambda f, x: x.argmin(-1), H),
    ("argmax", lambda f, x: x.argmax(), H),
    ("maximum", lambda f, x: x.maximum(x.flip(-1)), H),
    ("minimum", lambda f, x: x.minimum(x.flip(-1)), H),
    ("sort", lambda f, x: x.sort(-1), H),
    ("sort_indices", lambda f, x: x.sort(-1)[1], FINITE),
    ("topk", lambda f, x: x.topk(3), H),
    ("cummax", lambda f, x: x.cummax(1), H),
    ("max_pool2d", lambda f, x: f.max_pool2d(x, 2), IMAGE),
    ("elu", lambda f, x: f.elu(x), H),
    ("selu", lambda f, x: f.selu(x), H),
    ("celu", lambda f, x: f.celu(x, 0.5), H),
    ("mish", lambda f, x: f.mish(x), H),
    ("logsigmoid", lambda f, x: f.logsigmoid(x), H),
    ("normalize", lambda f, x: f.normalize(x, dim=-1), FINITE),
    ("bce_with_logits", lambda f, x: f.binary_cross_entropy_with_logits(x, (x * 0.1).sigmoid()), FINITE),
]


@pytest.mark.parametrize("name, fn, data", CASES, ids=[c[0] for c in CASES])
def test_float16_values_match_torch(name: str, fn: Callable[[Any, Any], Any], data: np.ndarray) -> None:
    _check(fn(F, Tensor(data, device=DEV)), fn(TF, torch.from_numpy(data)), name)


GRADIENTS = ["amax", "max_dim", "maximum", "sort", "topk", "cummax", "max_pool2d", "elu", "selu", "mish",
             "logsigmoid", "normalize", "bce_with_logits"]  # fmt: skip


@pytest.mark.parametrize("name", GRADIENTS)
def test_float16_gradients_match_torch(name: str) -> None:
    fn, data = next((c[1], c[2]) for c in CASES if c[0] == name)
    # finite, moderate and without ties (which element a tie's gradient reaches is the implementation's)
    data = np.where(np.isfinite(data) & (np.abs(data) < 1e3), data, np.float16(0.0)).astype(np.float16)
    data = data + np.arange(data.size, dtype=np.float16).reshape(data.shape) * np.float16(1 / 64)
    a = Tensor(data, device=DEV, requires_grad=True)
    t = torch.tensor(data, requires_grad=True)
    _first(fn(F, a)).float().sum().backward()
    _first(fn(TF, t)).float().sum().backward()
    assert a.grad is not None and t.grad is not None
    _check(a.grad, t.grad, f"d {name}")


@pytest.mark.parametrize("dtype", ["float16"])  # bfloat16: the numpy renderer views its float32 working copy
def test_half_bitcast_to_int16_and_back_matches_torch_view(dtype: str) -> None:
    data = H.ravel().astype(np.float32)
    t = torch.from_numpy(data).to(getattr(torch, dtype))
    x = Tensor(data, device=DEV).cast(dtype)
    bits = x.bitcast("int16")
    exp = t.view(torch.int16)
    assert bits.dtype.name == "int16" and bits.numpy().tolist() == exp.tolist()
    assert x.bitcast("uint16").numpy().astype(np.int64).tolist() == (exp.numpy().astype(np.int64) & 0xFFFF).tolist()
    back = (bits + 0).bitcast(dtype)  # computed bits (not a buffer's) read back as the float
    assert back.dtype.name == dtype
    assert back.bitcast("int16").numpy().tolist() == exp.tolist()

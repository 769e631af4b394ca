"""Shifts and bitwise ops against torch: `<<` and `>>` on every integer dtype by scalars and by tensors, shifts by
the bit width or more (0, or the sign for `>>`), the reflected forms (`2 << t`), bool operands promoted as torch
promotes them, and the errors torch raises (a bitwise op or shift of floats, `~` of a float) raised when the op is
built rather than by a kernel. On webgpu int64 lives in 32 bits, so int64 cases keep to values that fit there."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from devices import DEV

from anneal import Tensor

INT_DTYPES = ["int8", "int16", "int32", "int64", "uint8"]
I32 = (-(2**31), 2**31 - 1)


def _values(dtype: str) -> np.ndarray:
    info = np.iinfo(dtype)
    vals = [0, 1, 5, 17, info.max, info.max // 3]
    if info.min < 0:
        vals += [-1, -8, info.min, info.min // 5]
    return np.array(vals, dtype)


def _fits_device(values: np.ndarray, dtype: str) -> np.ndarray:
    """Which results the device can hold: all of them, except int64 outside int32 on webgpu."""
    if DEV == "webgpu" and dtype == "int64":
        return (values >= I32[0]) & (values <= I32[1])
    return np.ones(values.shape, bool)


def _same(got: Tensor, exp: torch.Tensor, what: str) -> None:
    assert got.dtype.name == str(exp.dtype).removeprefix("torch."), f"{what}: {got.dtype.name} vs {exp.dtype}"
    np.testing.assert_array_equal(got.numpy(), exp.numpy(), err_msg=what)


@pytest.mark.parametrize("dtype", INT_DTYPES)
@pytest.mark.parametrize("op", ["<<", ">>"])
def test_shift_by_scalars_matches_torch(dtype: str, op: str) -> None:
    width = 8 * np.dtype(dtype).itemsize
    shift: Callable[[Any, int], Any] = (lambda x, k: x << k) if op == "<<" else (lambda x, k: x >> k)
    for k in (0, 1, 3, width - 1, width, width + 5, 40, 70):
        data = _values(dtype)
        exp = shift(torch.from_numpy(data), k)
        keep = _fits_device(exp.numpy(), dtype) & _fits_device(data, dtype)
        _same(shift(Tensor(data[keep], device=DEV), k), exp[torch.from_numpy(keep)], f"{dtype} {op} {k}")


@pytest.mark.parametrize("dtype", INT_DTYPES)
@pytest.mark.parametrize("op", ["<<", ">>"])
def test_shift_by_tensors_matches_torch(dtype: str, op: str) -> None:
    width = 8 * np.dtype(dtype).itemsize
    data = np.repeat(_values(dtype), 6)
    amounts = np.tile(np.array([0, 2, width - 1, width, width + 1, 33], dtype), data.size // 6)
    shift: Callable[[Any, Any], Any] = (lambda x, k: x << k) if op == "<<" else (lambda x, k: x >> k)
    exp = shift(torch.from_numpy(data), torch.from_numpy(amounts))
    keep = _fits_device(exp.numpy(), dtype) & _fits_device(data, dtype)
    got = shift(Tensor(data[keep], device=DEV), Tensor(amounts[keep], device=DEV))
    _same(got, exp[torch.from_numpy(keep)], f"{dtype} {op} tensor")


REFLECTED: list[tuple[str, Callable[[Any], Any], np.ndarray]] = [
    ("2 << int32", lambda t: 2 << t, np.array([0, 1, 5, 30, 31, 32, 40], np.int32)),
    ("256 >> int32", lambda t: 256 >> t, np.array([0, 1, 8, 9, 31, 32], np.int32)),
    ("-256 >> int32", lambda t: -256 >> t, np.array([0, 1, 8, 9, 31, 32], np.int32)),
    ("3 << int64", lambda t: 3 << t, np.array([0, 1, 20, 28], np.int64)),
    ("1 << uint8", lambda t: 1 << t, np.array([0, 3, 7, 8, 9], np.uint8)),
    ("2 << bool", lambda t: 2 << t, np.array([True, False])),
    ("bool << 1", lambda t: t << 1, np.array([True, False])),
    ("bool >> int32 tensor", lambda t: t >> (t.int() if isinstance(t, Tensor) else t.int()), np.array([True, False])),
    ("uint8 << int32 tensor", lambda t: t << t.int(), np.array([255, 3, 1], np.uint8)),
]


@pytest.mark.parametrize("name, fn, data", REFLECTED, ids=[r[0] for r in REFLECTED])
def test_reflected_shifts_and_promotion_match_torch(name: str, fn: Callable[[Any], Any], data: np.ndarray) -> None:
    _same(fn(Tensor(data, device=DEV)), fn(torch.from_numpy(data)), name)


ERRORS: list[tuple[str, Callable[[Any, Any, Any], Any]]] = [
    # fn(float tensor, int tensor, bool tensor)
    ("float << 1", lambda f, i, b: f << 1),
    ("float >> int tensor", lambda f, i, b: f >> i),
    ("int << 1.5", lambda f, i, b: i << 1.5),
    ("2.5 << int", lambda f, i, b: 2.5 << i),
    ("bool << bool", lambda f, i, b: b << b),
    ("float & 1", lambda f, i, b: f & 1),
    ("1.5 & int", lambda f, i, b: 1.5 & i),
    ("int | float", lambda f, i, b: i | f),
    ("float ^ float", lambda f, i, b: f ^ f),
    ("~float", lambda f, i, b: ~f),
    ("float.bitwise_not()", lambda f, i, b: f.bitwise_not()),
    ("bool ** bool", lambda f, i, b: b**b),
]


@pytest.mark.parametrize("name, fn", ERRORS, ids=[e[0] for e in ERRORS])
def test_undefined_dtype_ops_raise_torchs_error_when_built(name: str, fn: Callable[[Any, Any, Any], Any]) -> None:
    f, i, b = np.array([1.0, 2.0], np.float32), np.array([1, 2], np.int32), np.array([True, False])
    with pytest.raises(Exception) as torch_error:
        fn(torch.from_numpy(f), torch.from_numpy(i), torch.from_numpy(b))
    with pytest.raises(type(torch_error.value)):  # at build time: nothing is realized here
        fn(Tensor(f, device=DEV), Tensor(i, device=DEV), Tensor(b, device=DEV))

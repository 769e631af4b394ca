"""The op test suite: every frontend op of issue 3 against PyTorch CPU (tinygrad's helper_test_op style).

Each case builds its inputs with a seeded numpy generator, runs the same function once on torch
tensors and once on anneal Tensors (device "cpu"), and compares shape, dtype and values
(float32: rtol 1e-5, atol 1e-6 unless a case documents why it needs more). A case's function
takes the library namespace first (``m.F`` is torch.nn.functional or anneal.nn.functional,
``m.cat``/``m.stack``/``m.where``/``m.matmul`` the top-level functions, ``m.dt(name)`` a dtype),
then the input tensors.
"""

from __future__ import annotations

import ast
import inspect
import math
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from devices import DEV, HAS_F64, WIDE

import anneal
import anneal.nn.functional as AF
from anneal import Tensor, dtypes
from anneal.registry import DeviceError, backend_names

# the whole suite runs on any backend: ANNEAL_DEVICE=webgpu selects another one (see devices.py)

TORCH = SimpleNamespace(name="torch", F=TF, cat=torch.cat, stack=torch.stack, where=torch.where, matmul=torch.matmul,
                        dt=lambda n: getattr(torch, n), cast=lambda x, n: x.to(getattr(torch, n)),
                        tensor=lambda a: torch.from_numpy(np.array(a)))  # fmt: skip
ANNEAL = SimpleNamespace(name="anneal", F=AF, cat=anneal.cat, stack=anneal.stack, where=anneal.where,
                         matmul=anneal.matmul, dt=dtypes.from_any, cast=lambda x, n: x.cast(n),
                         tensor=lambda a: Tensor(np.array(a), device=DEV))  # fmt: skip

Fn = Callable[..., Any]


# ---- the helper ----


def _rand(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any, low: float, high: float) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return np.asarray(rng.random(shape) < 0.5)
    if dt.kind in "iu":
        return rng.integers(int(low), int(high), size=shape).astype(dt)
    return rng.uniform(low, high, size=shape).astype(dt)


def _torch_dtype_name(d: torch.dtype) -> str:
    return str(d).removeprefix("torch.")


def compare(got: Any, exp: Any, atol: float, rtol: float, path: str = "out") -> None:
    if isinstance(exp, (tuple, list)):
        assert isinstance(got, (tuple, list)), f"{path}: expected a tuple of {len(exp)}, got {type(got).__name__}"
        assert len(got) == len(exp), f"{path}: {len(got)} outputs, torch has {len(exp)}"
        for i, (g, e) in enumerate(zip(got, exp)):
            compare(g, e, atol, rtol, f"{path}[{i}]")
        return
    assert isinstance(got, Tensor), f"{path}: expected an anneal Tensor, got {type(got).__name__}"
    assert got.shape == tuple(exp.shape), f"{path}: shape {got.shape} != torch {tuple(exp.shape)}"
    assert got.dtype.name == _torch_dtype_name(exp.dtype), f"{path}: dtype {got.dtype.name} != torch {exp.dtype}"
    g, e = got.numpy(), exp.detach().numpy()
    assert isinstance(g, np.ndarray) and g.shape == e.shape and g.dtype == e.dtype, (g.shape, g.dtype, e.dtype)
    if e.dtype.kind == "f":
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, equal_nan=True, err_msg=path)
    else:
        np.testing.assert_array_equal(g, e, err_msg=path)


def helper_test_op(shapes: Sequence[Any], fn: Fn, *, low: float = -2.0, high: float = 2.0, dtype: Any = np.float32,
                   atol: float = 1e-6, rtol: float = 1e-5, seed: int = 0) -> None:  # fmt: skip
    """shapes: one entry per input, a shape (random values of dtype in [low, high)) or a ready np.ndarray."""
    rng = np.random.default_rng(seed)
    arrays = [s if isinstance(s, np.ndarray) else _rand(rng, tuple(s), dtype, low, high) for s in shapes]
    expected = fn(TORCH, *[torch.from_numpy(a.copy()) for a in arrays])
    got = fn(ANNEAL, *[Tensor(a.copy(), device=DEV) for a in arrays])
    compare(got, expected, atol, rtol)


def case(id: str, shapes: Sequence[Any], fn: Fn, **opts: Any) -> Any:  # noqa: A002 - pytest's name
    return pytest.param(shapes, fn, opts, id=id)


def run_case(shapes: Sequence[Any], fn: Fn, opts: dict[str, Any]) -> None:
    helper_test_op(shapes, fn, **opts)


def _values(r: Any) -> Any:
    """torch's max/min with a dim return (values, indices); anneal returns the values tensor."""
    return r[0] if isinstance(r, tuple) else r


_irng = np.random.default_rng(1234)


def ints(low: int, high: int, shape: tuple[int, ...]) -> np.ndarray:
    return _irng.integers(low, high, size=shape).astype(np.int64)


def t(a: Any) -> Tensor:
    return Tensor(a, device=DEV)


def _neg_step(index: Any) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, slice) and i.step is not None and i.step < 0 for i in items)


def sl(m: SimpleNamespace, x: Any, index: Any) -> Any:
    """x[index]; torch has no negative slice steps, so its reference for those is numpy's (same semantics)."""
    if m is TORCH and _neg_step(index):
        return torch.from_numpy(np.ascontiguousarray(x.numpy()[index]))
    return x[index]


# ---- creation ----

NP_DTYPES = [np.float32, np.float64, np.float16, np.int8, np.int16, np.int32, np.int64, np.uint8, np.bool_]
NP_DTYPES = [d for d in NP_DTYPES if HAS_F64 or d is not np.float64]


@pytest.mark.parametrize("dtype", NP_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(), (3,), (2, 3), (0, 4)], ids=str)
def test_from_numpy(dtype: Any, shape: tuple[int, ...]) -> None:
    arr = _rand(np.random.default_rng(0), shape, dtype, -5, 5)
    x = Tensor(arr, device=DEV)
    ref = torch.from_numpy(arr.copy())
    assert x.shape == tuple(ref.shape) and x.dtype.name == _torch_dtype_name(ref.dtype)
    out = x.numpy()
    assert out.dtype == arr.dtype
    np.testing.assert_array_equal(out, arr)


@pytest.mark.parametrize("data", [
    [[1, 2], [3, 4]], [1.5, 2, -3], [True, False], 3, 2.5, True, [], [[1.0], [2.0]], -7,
], ids=repr)  # fmt: skip
def test_from_python(data: Any) -> None:
    x, ref = Tensor(data, device=DEV), torch.tensor(data)
    compare(x, ref, 0, 0)


@pytest.mark.parametrize("data,dtype", [([1, 2, 3], "float32"), ([1.7, -2.2], "int32"), ([0, 1, 2], "bool"),
                                        (5, WIDE), ([1.5], "int64")])  # fmt: skip
def test_from_python_with_dtype(data: Any, dtype: str) -> None:
    compare(Tensor(data, dtype=getattr(anneal, dtype) if dtype != "bool" else dtypes.bool, device=DEV),
            torch.tensor(data, dtype=getattr(torch, dtype)), 0, 0)  # fmt: skip


@pytest.mark.parametrize("fn", [
    lambda m: (m.lib.zeros(2, 3), m.lib.zeros((4,)), m.lib.zeros(0, 2), m.lib.zeros(())),
    lambda m: (m.lib.ones(3), m.lib.ones((2, 1, 2)), m.lib.ones(2, 0), m.lib.ones(2, dtype=m.dt("int32"))),
    lambda m: (m.lib.full((2, 3), 1.5), m.lib.full((2,), 7), m.lib.full((3,), True), m.lib.full((0, 3), -1.0)),
    lambda m: (m.lib.full((2, 2), 3, dtype=m.dt("float32")), m.lib.zeros(2, dtype=m.dt("int64"))),
    lambda m: (m.lib.arange(5), m.lib.arange(2, 10, 3), m.lib.arange(10, 0, -2), m.lib.arange(0)),
    lambda m: (m.lib.arange(1.5, 4.5), m.lib.arange(0, 1, 0.125), m.lib.arange(5, dtype=m.dt("float32"))),
    lambda m: (m.lib.eye(3), m.lib.eye(2, 4), m.lib.eye(4, 2), m.lib.eye(0), m.lib.eye(3, dtype=m.dt("int64"))),
], ids=["zeros", "ones", "full", "full_dtype", "arange_int", "arange_float", "eye"])  # fmt: skip
def test_creation(fn: Fn) -> None:
    tns = SimpleNamespace(lib=torch, dt=TORCH.dt)
    ans = SimpleNamespace(lib=_AnnealCreate, dt=ANNEAL.dt)
    compare(fn(ans), fn(tns), 1e-6, 1e-5)


class _AnnealCreate:
    """torch.zeros(...) and friends as anneal's Tensor static methods, on the test device."""

    zeros = staticmethod(lambda *a, **k: Tensor.zeros(*a, **k, device=DEV))
    ones = staticmethod(lambda *a, **k: Tensor.ones(*a, **k, device=DEV))
    full = staticmethod(lambda *a, **k: Tensor.full(*a, **k, device=DEV))
    arange = staticmethod(lambda *a, **k: Tensor.arange(*a, **k, device=DEV))
    eye = staticmethod(lambda *a, **k: Tensor.eye(*a, **k, device=DEV))


@pytest.mark.parametrize("kind", ["rand", "randn", "uniform"])
def test_random_shape_dtype_moments(kind: str) -> None:
    anneal.manual_seed(0)
    if kind == "uniform":
        x = Tensor.uniform(200, 100, low=-3.0, high=5.0, device=DEV)
    else:
        x = getattr(Tensor, kind)(200, 100, device=DEV)
    assert x.shape == (200, 100) and x.dtype == dtypes.float32
    v = x.numpy()
    assert v.dtype == np.float32 and v.shape == (200, 100)
    if kind == "rand":
        assert v.min() >= 0 and v.max() < 1
        assert abs(v.mean() - 0.5) < 0.01 and abs(v.var() - 1 / 12) < 0.005
    elif kind == "randn":
        assert abs(v.mean()) < 0.03 and abs(v.std() - 1) < 0.03
    else:
        assert v.min() >= -3 and v.max() < 5
        assert abs(v.mean() - 1) < 0.1 and abs(v.var() - 64 / 12) < 0.2
    assert len(np.unique(v)) > 19000  # not a constant or a short cycle


@pytest.mark.parametrize("kind", ["rand", "randn", "uniform"])
def test_manual_seed_reproducible(kind: str) -> None:
    def draw(seed: int) -> np.ndarray:
        anneal.manual_seed(seed)
        return getattr(Tensor, kind)(3, 4, device=DEV).numpy()

    a, b, c = draw(7), draw(7), draw(8)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    anneal.manual_seed(7)
    first, second = getattr(Tensor, kind)(3, 4, device=DEV).numpy(), getattr(Tensor, kind)(3, 4, device=DEV).numpy()
    assert not np.array_equal(first, second)  # the stream advances


def test_random_zero_size_and_dtype() -> None:
    assert Tensor.rand(0, 3, device=DEV).numpy().shape == (0, 3)
    assert Tensor.randn(2, dtype=getattr(dtypes, WIDE), device=DEV).numpy().dtype == np.dtype(WIDE)


def test_float64_support() -> None:
    data = np.array([1.0, 2.5], np.float64)
    if HAS_F64:
        np.testing.assert_array_equal((Tensor(data, device=DEV) * 2).numpy(), data * 2)
    else:
        with pytest.raises(Exception, match="float64 is not supported"):
            Tensor(data, device=DEV)


# ---- data out and conversions ----


def test_numpy_item_tolist() -> None:
    arr = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
    x = t(arr)
    out = x.numpy()
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    np.testing.assert_array_equal(out, arr)
    assert x.tolist() == torch.from_numpy(arr).tolist()
    assert (x * 2).tolist() == (torch.from_numpy(arr) * 2).tolist()
    assert t(np.array([[4.25]], dtype=np.float32)).item() == 4.25
    assert t(np.array(3, dtype=np.int64)).item() == 3 and isinstance(t(np.array(3)).item(), int)
    assert isinstance(t(np.float32(1.5)).item(), float)
    assert x.sum().item() == pytest.approx(float(arr.sum()))
    with pytest.raises(RuntimeError):
        x.item()
    assert x.shape == (2, 3) and x.dtype == dtypes.float32 and x.ndim == 2 and x.numel() == 6
    assert (x + 1).shape == (2, 3) and x.T.shape == (3, 2)


def test_realize_returns_self_and_keeps_value() -> None:
    x = t(np.arange(4, dtype=np.float32))
    y = (x * 3 + 1).exp2()
    assert y.realize() is y
    expected = np.exp2(np.arange(4, dtype=np.float32) * 3 + 1)
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-5)
    np.testing.assert_allclose((y - 1).numpy(), expected - 1, rtol=1e-5)  # builds on the realized value


OUT_CASES = [
    case("detach", [(3, 4)], lambda m, x: (x * 2).detach() + 1),
    case("contiguous_T", [(3, 4)], lambda m, x: x.T.contiguous()),
    case("contiguous_slice", [(5, 6)], lambda m, x: x[1:4, ::2].contiguous() * 1),
    case("to_dtype", [(3, 4)], lambda m, x: x.to(m.dt(WIDE))),
    case("to_device", [(3, 4)], lambda m, x: x.to("cpu") + 0),
    case("cast_f2i_trunc", [(3, 4)], lambda m, x: m.cast(x * 3, "int32"), low=-5, high=5),
    case("cast_f2i64", [(7,)], lambda m, x: m.cast(x, "int64"), low=-9, high=9),
    case("cast_i2f", [(3, 4)], lambda m, x: m.cast(x, "float32"), dtype=np.int64, low=-100, high=100),
    case("cast_f2bool", [np.array([0.0, -0.0, 1.5, -2.0, 1e-30], dtype=np.float32)], lambda m, x: m.cast(x, "bool")),
    case("cast_bool2f", [(5,)], lambda m, x: m.cast(x, "float32"), dtype=np.bool_),
    case("cast_f2f16", [(6,)], lambda m, x: m.cast(x, "float16")),
    case("cast_f2u8", [(6,)], lambda m, x: m.cast(x, "uint8"), low=0, high=200),
    case("float_long", [(4,)], lambda m, x: (x.long(), x.float(), x.int()), low=-9, high=9),
    case("cast_empty", [(0, 3)], lambda m, x: m.cast(x, "int64")),
]


@pytest.mark.parametrize("shapes,fn,opts", OUT_CASES)
def test_conversions(shapes: Any, fn: Fn, opts: dict[str, Any]) -> None:
    run_case(shapes, fn, opts)


# ---- elementwise ----

BINARY_SHAPES = [
    ("same", [(3, 4), (3, 4)]),
    ("bcast_col_row", [(3, 1), (1, 4)]),
    ("bcast_trailing", [(2, 3, 4), (4,)]),
    ("scalar_tensor", [(), (3,)]),
    ("size1", [(1,), (5,)]),
    ("empty", [(0, 3), (1, 3)]),
]

BINARY_OPS: dict[str, Fn] = {
    "add": lambda m, a, b: a + b,
    "sub": lambda m, a, b: a - b,
    "mul": lambda m, a, b: a * b,
    "div": lambda m, a, b: a / b,
    "maximum": lambda m, a, b: a.maximum(b),
    "minimum": lambda m, a, b: a.minimum(b),
    "lt": lambda m, a, b: a < b,
    "eq": lambda m, a, b: a == m.where(b > 0, a, b),  # some equal elements
}


@pytest.mark.parametrize("name", list(BINARY_OPS))
@pytest.mark.parametrize("shapes", [s for _, s in BINARY_SHAPES], ids=[n for n, _ in BINARY_SHAPES])
def test_binary(name: str, shapes: Any) -> None:
    f = BINARY_OPS[name]
    helper_test_op(shapes, lambda m, a, b: f(m, a, b))


@pytest.mark.parametrize("shapes,fn,opts", [
    case("pow_tensor", [(3, 4), (3, 4)], lambda m, a, b: a.abs() + 0.5 ** b, low=-2, high=2),
    case("pow_tensor_tensor", [(3, 4), (4,)], lambda m, a, b: (a.abs() + 0.1) ** b),
    case("gt", [(3, 4), (4,)], lambda m, a, b: a > b),
    case("le", [(3, 4), (3, 1)], lambda m, a, b: a <= b),
    case("ge_eq", [(2, 3), (2, 3)], lambda m, a, b: (a >= b, a >= a, a != b, a != a)),
    case("noncontig_add_T", [(4, 3), (3, 4)], lambda m, a, b: a.T + b),
    case("noncontig_mul_slice", [(6, 8), (3, 4)], lambda m, a, b: a[::2, 1::2] * b),
    case("noncontig_flip_div", [(3, 4), (3, 4)], lambda m, a, b: a.flip(0) / (b.abs() + 0.5)),
    case("int_add_mul", [(3, 4), (3, 4)], lambda m, a, b: (a + b, a * b, a - b), dtype=np.int64, low=-50, high=50),
    case("int_truediv", [(3, 4), (3, 4)], lambda m, a, b: a / (b.abs() + 1), dtype=np.int64, low=-50, high=50),
    case("int_floordiv", [(3, 4), (3, 4)], lambda m, a, b: a // (b.abs() + 1), dtype=np.int64, low=-50, high=50),
    case("int_cmp", [(3, 4), (3, 4)], lambda m, a, b: (a < b, a == b, a.maximum(b)), dtype=np.int64, low=-3, high=3),
    case("int32_plus_int64", [np.array([1, -2, 3], dtype=np.int32), ints(-5, 5, (3,))], lambda m, a, b: a + b),
    case("int_plus_float", [ints(-5, 5, (3, 2)), (3, 2)], lambda m, a, b: a + b),
    case("f64_plus_f32", [np.array([1.25, 2.5], WIDE), (2,)], lambda m, a, b: a * b),
    case("bool_and_or", [(4,), (4,)], lambda m, a, b: ((a > 0) & (b > 0), (a > 0) | (b > 0), (a > 0) ^ (b > 0))),
])  # fmt: skip
def test_binary_more(shapes: Any, fn: Fn, opts: dict[str, Any]) -> None:
    run_case(shapes, fn, opts)


SCALAR_CASES = [
    case("add_r", [(3, 4)], lambda m, x: x + 2),
    case("add_l", [(3, 4)], lambda m, x: 2 + x),
    case("sub_r", [(3, 4)], lambda m, x: x - 1.5),
    case("sub_l", [(3, 4)], lambda m, x: 1.5 - x),
    case("mul_r", [(3, 4)], lambda m, x: x * 3),
    case("mul_l", [(3, 4)], lambda m, x: -3 * x),
    case("div_r", [(3, 4)], lambda m, x: x / 4),
    case("div_l", [(3, 4)], lambda m, x: 4 / x, low=0.5, high=3),
    case("div_l_neg", [(3, 4)], lambda m, x: 4 / x, low=-3, high=-0.5),
    case("pow_2", [(3, 4)], lambda m, x: x**2),
    case("pow_3", [(3, 4)], lambda m, x: x**3),
    case("pow_half", [(3, 4)], lambda m, x: x**0.5, low=0, high=4),
    case("pow_neg1", [(3, 4)], lambda m, x: x**-1, low=0.5, high=3),
    case("pow_1_5", [(3, 4)], lambda m, x: x**1.5, low=0, high=3),
    case("pow_0", [(3, 4)], lambda m, x: x**0),
    case("rpow_2", [(3, 4)], lambda m, x: 2**x),
    case("rpow_half", [(3, 4)], lambda m, x: 0.5**x),
    case("pow_neg_base_int_exp", [(3, 4)], lambda m, x: x**3.0, low=-3, high=-0.5),
    case("pow_neg_base_frac_exp_nan", [(4,)], lambda m, x: x**0.5, low=-3, high=-0.5),
    case("int_pow_2", [(3, 4)], lambda m, x: x**2, dtype=np.int64, low=-9, high=9),
    case("int_plus_float_scalar", [(3, 4)], lambda m, x: x + 2.5, dtype=np.int64, low=-9, high=9),
    case("int_mul_int_scalar", [(3, 4)], lambda m, x: 3 * x, dtype=np.int32, low=-9, high=9),
    case("bool_plus_int", [(3,)], lambda m, x: x + 1, dtype=np.bool_),
    case("float_cmp_scalar", [(3, 4)], lambda m, x: (x < 0.5, 0.5 < x, x >= 1, x == 0.0, x != 1)),
    case("neg", [(3, 4)], lambda m, x: -x),
    case("scalar_0d", [()], lambda m, x: 1 - x * 2),
    case("empty_scalar", [(0,)], lambda m, x: x * 2 + 1),
]


@pytest.mark.parametrize("shapes,fn,opts", SCALAR_CASES)
def test_scalar_operands(shapes: Any, fn: Fn, opts: dict[str, Any]) -> None:
    run_case(shapes, fn, opts)


UNARY: dict[str, tuple[Fn, dict[str, Any]]] = {
    "neg": (lambda m, x: x.neg(), {}),
    "exp": (lambda m, x: x.exp(), {"low": -5, "high": 5}),
    "log": (lambda m, x: x.log(), {"low": 1e-3, "high": 10}),
    "exp2": (lambda m, x: x.exp2(), {"low": -5, "high": 5}),
    "log2": (lambda m, x: x.log2(), {"low": 1e-3, "high": 10}),
    "sqrt": (lambda m, x: x.sqrt(), {"low": 0, "high": 10}),
    "rsqrt": (lambda m, x: x.rsqrt(), {"low": 0.1, "high": 10}),
    "sin": (lambda m, x: x.sin(), {"low": -3, "high": 3}),
    "cos": (lambda m, x: x.cos(), {"low": -3, "high": 3}),
    "tanh": (lambda m, x: x.tanh(), {"low": -4, "high": 4}),
    "sigmoid": (lambda m, x: x.sigmoid(), {"low": -6, "high": 6}),
    "relu": (lambda m, x: x.relu(), {}),
    "gelu": (lambda m, x: m.F.gelu(x), {"low": -4, "high": 4}),
    "gelu_tanh": (lambda m, x: m.F.gelu(x, approximate="tanh"), {"low": -4, "high": 4}),
    "silu": (lambda m, x: m.F.silu(x), {"low": -6, "high": 6}),
    "abs": (lambda m, x: x.abs(), {}),
    "clip": (lambda m, x: x.clip(-0.5, 0.75), {}),
    "clip_min": (lambda m, x: x.clip(min=0.1), {}),
    "clamp_max": (lambda m, x: x.clamp(max=-0.2), {}),
}
UNARY_SHAPES = [("2d", (3, 4)), ("0d", ()), ("empty", (0, 5)), ("size1", (1, 1, 3))]


@pytest.mark.parametrize("shape", [s for _, s in UNARY_SHAPES], ids=[n for n, _ in UNARY_SHAPES])
@pytest.mark.parametrize("name", list(UNARY))
def test_unary(name: str, shape: tuple[int, ...]) -> None:
    f, opts = UNARY[name]
    helper_test_op([shape], f, **opts)


@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "sin", "tanh", "sigmoid", "abs", "gelu"])
def test_unary_noncontiguous(name: str) -> None:
    f, opts = UNARY[name]
    helper_test_op([(5, 6)], lambda m, x: f(m, x.T[::2, 1:]), **opts)


@pytest.mark.parametrize("shapes,fn,opts", [
    case("sin_wide", [(50,)], lambda m, x: x.sin(), low=-30, high=30),
    # cos is sin(pi/2 - x): rounding pi/2 - x to float32 costs one ulp of |x| (~2e-6 at |x| = 30)
    case("cos_wide", [(50,)], lambda m, x: x.cos(), low=-30, high=30, atol=4e-6),
    case("exp_large", [(10,)], lambda m, x: x.exp(), low=-80, high=80),
    case("exp_overflow", [np.array([100.0, -200.0, 0.0], dtype=np.float32)], lambda m, x: x.exp()),
    case("log_zero_neg", [np.array([0.0, -1.0, 1.0], dtype=np.float32)], lambda m, x: x.log()),
    case("sqrt_neg", [np.array([-1.0, 4.0], dtype=np.float32)], lambda m, x: x.sqrt()),
    case("sigmoid_extreme", [np.array([-100.0, 100.0, 0.0], dtype=np.float32)], lambda m, x: x.sigmoid()),
    case("tanh_extreme", [np.array([-100.0, 100.0, 1e-4], dtype=np.float32)], lambda m, x: x.tanh()),
    case("int_abs_neg", [(6,)], lambda m, x: (x.abs(), -x), dtype=np.int64, low=-9, high=9),
    case("int_exp_promotes", [(4,)], lambda m, x: (x.exp(), x.sqrt()), dtype=np.int64, low=0, high=5),
    case("int_relu", [(6,)], lambda m, x: x.relu(), dtype=np.int32, low=-9, high=9),
    case("int_clip", [(6,)], lambda m, x: x.clip(-3, 4), dtype=np.int64, low=-9, high=9),
    case("clip_tensor_bounds", [(3, 4), (4,), (3, 1)], lambda m, x, lo, hi: x.clip(lo - 1, hi + 1)),
    case("f64_exp", [(5,)], lambda m, x: x.exp(), dtype=np.dtype(WIDE).type, low=-5, high=5),
])  # fmt: skip
def test_unary_more(shapes: Any, fn: Fn, opts: dict[str, Any]) -> None:
    run_case(shapes, fn, opts)


WHERE_CASES = [
    case("same", [(3, 4), (3, 4), (3, 4)], lambda m, c, a, b: m.where(c > 0, a, b)),
    case("bcast", [(3, 1), (1, 4), (4,)], lambda m, c, a, b: m.where(c > 0, a, b)),
    case("scalar_other", [(3, 4), (3, 4)], lambda m, c, a: m.where(c > 0, a, 0.0)),
    case("scalar_input", [(3, 4), (3, 4)], lambda m, c, b: m.where(c > 0, -1.0, b)),
    case("method", [(3, 4), (3, 4), (3, 4)], lambda m, c, a, b: a.where(c > 0, b)),  # torch: x.where(cond, other)
    case("int_float_promote", [ints(-3, 3, (2, 3)), (2, 3)], lambda m, c, b: m.where(c > 0, c, b)),
    case("empty", [(0, 4), (0, 4), (1, 4)], lambda m, c, a, b: m.where(c > 0, a, b)),
    case("noncontig", [(4, 3), (3, 4), (3, 4)], lambda m, c, a, b: m.where(c.T > 0, a, b.flip(1))),
]


@pytest.mark.parametrize("shapes,fn,opts", WHERE_CASES)
def test_where(shapes: Any, fn: Fn, opts: dict[str, Any]) -> None:
    run_case(shapes, fn, opts)


# ---- reductions ----

REDUCE_OPS: dict[str, Fn] = {
    "sum": lambda m, x, **k: x.sum(**k),
    "mean": lambda m, x, **k: x.mean(**k),
    "max": lambda m, x, **k: _values(x.max(**k)) if k else x.max(),
    "min": lambda m, x, **k: _values(x.min(**k)) if k else x.min(),
    "var": lambda m, x, **k: x.var(**k),
    "std": lambda m, x, **k: x.std(**k),
    "logsumexp": lambda m, x, **k: x.logsumexp(**k),
}
REDUCE_AXES = [
    ("all", {}),
    ("dim0", {"dim": 0}),
    ("dim1_keep", {"dim": 1, "keepdim": True}),
    ("dimneg1", {"dim": -1}),
    ("dims02", {"dim": (0, 2)}),
    ("dims12_keep", {"dim": (1, 2), "keepdim": True}),
]


@pytest.mark.parametrize("axes", [a for _, a in REDUCE_AXES], ids=[n for n, _ in REDUCE_AXES])
@pytest.mark.parametrize("name", list(REDUCE_OPS))
def test_reduce(name: str, axes: dict[str, Any]) -> None:
    f = REDUCE_OPS[name]
    if name == "logsumexp" and "dim" not in axes:
        axes = {"dim": (0, 1, 2)}  # torch requires dim for logsumexp
    if name in ("max", "min") and isinstance(axes.get("dim"), tuple):
        helper_test_op([(3, 4, 5)], lambda m, x: x.amax(axes["dim"], axes.get("keepdim", False)) if name == "max"
                       else x.amin(axes["dim"], axes.get("keepdim", False)))  # fmt: skip
        return
    helper_test_op([(3, 4, 5)], lambda m, x: f(m, x, **axes))


@pytest.mark.parametrize("shapes,fn,opts", [
    case("sum_axis_alias", [(3, 4)], lambda m, x: x.sum(1) if m is TORCH else x.sum(axis=1)),
    case("sum_noncontig", [(4, 3, 5)], lambda m, x: x.permute(2, 0, 1).sum(-1)),
    case("sum_slice_neg_step", [(6, 7)], lambda m, x: sl(m, x, (slice(None, None, -2), slice(1, None))).sum(0, True)),
    case("sum_size1", [(1, 4, 1)], lambda m, x: (x.sum(0), x.sum(2, keepdim=True), x.sum())),
    case("sum_0d", [()], lambda m, x: (x.sum(), x.mean(), x.max())),
    case("sum_empty_dim", [(0, 3)], lambda m, x: (x.sum(0), x.sum(), x.sum(1))),
    case("mean_empty_nan", [(0, 3)], lambda m, x: x.mean(0)),
    case("max_empty_other_dim", [(0, 3)], lambda m, x: _values(x.max(1))),
    case("sum_int", [(3, 4)], lambda m, x: (x.sum(), x.sum(0)), dtype=np.int32, low=-9, high=9),
    case("sum_bool", [(3, 4)], lambda m, x: (x > 0).sum(1)),
    case("max_int", [(3, 4)], lambda m, x: (x.max(), _values(x.max(1)), _values(x.min(0))), dtype=np.int64,
         low=-9, high=9),
    case("max_with_inf", [np.array([[1.0, -math.inf], [-math.inf, -math.inf]], dtype=np.float32)],
         lambda m, x: (_values(x.max(1)), _values(x.min(1)))),
    case("mean_int_promotes", [(3, 4)], lambda m, x: x.float().mean(0), dtype=np.int64, low=-9, high=9),
    case("var_unbiased_false", [(4, 5)], lambda m, x: (x.var(1, unbiased=False), x.std(0, unbiased=False))),
    case("var_correction0", [(4, 5)], lambda m, x: x.var(dim=1, correction=0, keepdim=True)),
    case("var_single_nan", [(1, 3)], lambda m, x: x.var(0)),
    case("std_all", [(6,)], lambda m, x: x.std()),
    case("logsumexp_large", [(3, 4)], lambda m, x: x.logsumexp(1), low=-100, high=100),
    case("logsumexp_neg_inf", [np.array([[-math.inf, -math.inf], [0.0, -math.inf]], dtype=np.float32)],
         lambda m, x: x.logsumexp(1)),
    case("logsumexp_keep", [(2, 3, 4)], lambda m, x: x.logsumexp(-1, keepdim=True)),
    case("mean_sum_keep_multi", [(2, 3, 4)], lambda m, x: x.mean((0, -1), keepdim=True) + x.sum((0, -1), True)),
])  # fmt: skip
def test_reduce_more(shapes: Any, fn: Fn, opts: dict[str, Any]) -> None:
    run_case(shapes, fn, opts)


@pytest.mark.parametrize("shapes,fn,opts", [
    case("argmax_all", [(3, 4)], lambda m, x: x.argmax()),
    case("argmax_dim0", [(3, 4)], lambda m, x: x.argmax(0)),
    case("argmax_dim1_keep", [(3, 4)], lambda m, x: x.argmax(1, keepdim=True)),
    case("argmax_dimneg", [(2, 3, 4)], lambda m, x: x.argmax(dim=-2)),
    case("argmax_ties_first", [np.array([[1, 3, 3, 0], [2, 2, 2, 2], [0, 0, 5, 5]], dtype=np.int64)],
         lambda m, x: (x.argmax(1), x.argmax(0), x.argmax())),
    case("argmax_noncontig", [(4, 5)], lambda m, x: x.T.argmax(1)),
    case("argmax_size1", [(1, 4)], lambda m, x: (x.argmax(0), x.argmax(1))),
    case("argmin", [(3, 4)], lambda m, x: (x.argmin(1), x.argmin())),
])  # fmt: skip
def test_argmax(shapes: Any, fn: Fn, opts: dict[str, Any]) -> None:
    run_case(shapes, fn, opts)


@pytest.mark.parametrize("shapes,fn,opts", [
    case("softmax_last", [(3, 5)], lambda m, x: x.softmax(-1)),
    case("softmax_dim0", [(3, 5)], lambda m, x: x.softmax(0)),
    case("softmax_3d_mid", [(2, 3, 4)], lambda m, x: x.softmax(1)),
    case("softmax_large", [(2, 6)], lambda m, x: x.softmax(-1), low=-80, high=80),
    case("softmax_F", [(2, 3, 4)], lambda m, x: m.F.softmax(x, dim=-1)),
    case("softmax_size1", [(4, 1)], lambda m, x: x.softmax(-1)),
    case("softmax_empty", [(0, 4)], lambda m, x: x.softmax(-1)),
    case("softmax_noncontig", [(5, 3)], lambda m, x: x.T.softmax(-1)),
    case("log_softmax_last", [(3, 5)], lambda m, x: x.log_softmax(-1)),
    case("log_softmax_dim0", [(3, 5)], lambda m, x: x.log_softmax(0)),
    case("log_softmax_large", [(2, 6)], lambda m, x: x.log_softmax(-1), low=-80, high=80),
    case("log_softmax_F", [(2, 3, 4)], lambda m, x: m.F.log_softmax(x, 1)),
    case("log_softmax_F_dtype", [(2, 3)], lambda m, x: m.F.log_softmax(x, -1, dtype=m.dt(WIDE))),
    case("softmax_with_neg_inf", [np.array([[0.0, -math.inf, 1.0]], dtype=np.float32)], lambda m, x: x.softmax(-1)),
])  # fmt: skip
def test_softmax(shapes: Any, fn: Fn, opts: dict[str, Any]) -> None:
    run_case(shapes, fn, opts)


@pytest.mark.parametrize("shapes,fn,opts", [
    case("dim0", [(4, 3)], lambda m, x: x.cumsum(0)),
    case("dim1", [(4, 3)], lambda m, x: x.cumsum(1)),
    case("dimneg", [(2, 3, 4)], lambda m, x: x.cumsum(-1)),
    case("mid", [(2, 3, 4)], lambda m, x: x.cumsum(1)),
    case("1d", [(7,)], lambda m, x: x.cumsum(0)),
    case("int", [(5,)], lambda m, x: x.cumsum(0), dtype=np.int64, low=-9, high=9),
    case("noncontig", [(4, 5)], lambda m, x: x.T.cumsum(1)),
    case("empty", [(0, 3)], lambda m, x: x.cumsum(0)),
])  # fmt: skip
def test_cumsum(shapes: Any, fn: Fn, opts: dict[str, Any]) -> None:
    run_case(shapes, fn, opts)


# ---- movement ----

MOVEMENT_CASES = [
    case("reshape", [(2, 3, 4)], lambda m, x: x.reshape(6, 4)),
    case("reshape_tuple_neg1", [(2, 3, 4)], lambda m, x: x.reshape((4, -1, 2))),
    case("reshape_flat", [(2, 3, 4)], lambda m, x: x.reshape(-1)),
    case("reshape_0d", [(1, 1)], lambda m, x: x.reshape(())),
    case("reshape_empty", [(0, 3)], lambda m, x: x.reshape(3, 0)),
    case("reshape_of_T", [(3, 4)], lambda m, x: x.T.reshape(2, 6)),
    case("view", [(2, 6)], lambda m, x: x.view(3, 4)),
    case("permute", [(2, 3, 4)], lambda m, x: x.permute(2, 0, 1)),
    case("permute_tuple", [(2, 3, 4)], lambda m, x: x.permute((1, 2, 0))),
    case("permute_neg", [(2, 3, 4)], lambda m, x: x.permute(-1, -3, -2)),
    case("transpose", [(2, 3, 4)], lambda m, x: x.transpose(0, 2)),
    case("transpose_neg", [(2, 3, 4)], lambda m, x: x.transpose(-1, -2)),
    case("T", [(3, 4)], lambda m, x: x.T),
    case("expand", [(3, 1)], lambda m, x: x.expand(3, 4)),
    case("expand_new_dims", [(1, 4)], lambda m, x: x.expand(2, 3, 4)),
    case("expand_neg1", [(3, 1)], lambda m, x: x.expand(-1, 5)),
    case("expand_to_empty", [(1, 3)], lambda m, x: x.expand(0, 3)),
    case("expand_then_math", [(3, 1)], lambda m, x: x.expand(3, 4) * 2 + x),
    case("flip0", [(3, 4)], lambda m, x: x.flip(0)),
    case("flip_both", [(3, 4)], lambda m, x: x.flip((0, 1))),
    case("flip_neg", [(2, 3, 4)], lambda m, x: x.flip(-1)),
    case("flip_size1", [(1, 4)], lambda m, x: x.flip(0)),
    case("squeeze_all", [(1, 3, 1, 4)], lambda m, x: x.squeeze()),
    case("squeeze_dim", [(1, 3, 1, 4)], lambda m, x: x.squeeze(2)),
    case("squeeze_not1", [(2, 3)], lambda m, x: x.squeeze(0)),
    case("squeeze_neg", [(3, 1)], lambda m, x: x.squeeze(-1)),
    case("unsqueeze0", [(3, 4)], lambda m, x: x.unsqueeze(0)),
    case("unsqueeze_last", [(3, 4)], lambda m, x: x.unsqueeze(-1)),
    case("unsqueeze_mid", [(3, 4)], lambda m, x: x.unsqueeze(1)),
    case("unsqueeze_0d", [()], lambda m, x: x.unsqueeze(0)),
    case("flatten", [(2, 3, 4)], lambda m, x: x.flatten()),
    case("flatten_start1", [(2, 3, 4)], lambda m, x: x.flatten(1)),
    case("flatten_range", [(2, 3, 4, 5)], lambda m, x: x.flatten(1, 2)),
    case("flatten_0d", [()], lambda m, x: x.flatten()),
    case("flatten_T", [(3, 4)], lambda m, x: x.T.flatten()),
    case("repeat", [(2, 3)], lambda m, x: x.repeat(2, 3)),
    case("repeat_new_dims", [(2, 3)], lambda m, x: x.repeat(2, 1, 1)),
    case("repeat_1d", [(3,)], lambda m, x: x.repeat(4)),
    case("repeat_zero", [(2, 3)], lambda m, x: x.repeat(0, 2)),
    case("unflatten", [(2, 12)], lambda m, x: x.unflatten(1, (3, 4))),
]


@pytest.mark.parametrize("shapes,fn,opts", MOVEMENT_CASES)
def test_movement(shapes: Any, fn: Fn, opts: dict[str, Any]) -> None:
    run_case(shapes, fn, opts)


@pytest.mark.parametrize("shapes,fn,opts", [
    case("last", [(2, 3)], lambda m, x: m.F.pad(x, (1, 2))),
    case("two_dims", [(2, 3)], lambda m, x: m.F.pad(x, (1, 0, 2, 3))),
    case("value", [(2, 3)], lambda m, x: m.F.pad(x, (1, 1, 1, 1), value=-2.5)),
    case("neg_crop", [(4, 5)], lambda m, x: m.F.pad(x, (-1, 2, 0, -2))),
    case("three_dims", [(2, 2, 2)], lambda m, x: m.F.pad(x, (1, 1, 0, 1, 1, 0))),
    case("empty_dim", [(0, 3)], lambda m, x: m.F.pad(x, (1, 1))),
    case("pad_empty_to_nonempty", [(2, 0)], lambda m, x: m.F.pad(x, (1, 2), value=3.0)),
    case("noncontig", [(3, 4)], lambda m, x: m.F.pad(x.T, (2, 0, 0, 1))),
    case("int", [(2, 3)], lambda m, x: m.F.pad(x, (1, 1), value=7), dtype=np.int64, low=-9, high=9),
    case("reflect", [(1, 2, 4, 5)], lambda m, x: m.F.pad(x, (2, 1, 1, 3), mode="reflect")),
    case("replicate", [(1, 2, 4, 5)], lambda m, x: m.F.pad(x, (2, 1, 1, 3), mode="replicate")),
    case("circular", [(1, 2, 4, 5)], lambda m, x: m.F.pad(x, (2, 1, 1, 3), mode="circular")),
    case("reflect_1d", [(2, 6)], lambda m, x: m.F.pad(x, (3, 2), mode="reflect")),
])  # fmt: skip
def test_pad(shapes: Any, fn: Fn, opts: dict[str, Any]) -> None:
    run_case(shapes, fn, opts)


@pytest.mark.parametrize("shapes,fn,opts", [
    case("dim0", [(2, 3), (4, 3)], lambda m, a, b: m.cat([a, b], 0)),
    case("dim1", [(2, 3), (2, 1)], lambda m, a, b: m.cat([a, b], 1)),
    case("dimneg_three", [(2, 3), (2, 2), (2, 4)], lambda m, a, b, c: m.cat([a, b, c], dim=-1)),
    case("with_empty", [(2, 3), (0, 3)], lambda m, a, b: m.cat([b, a, b], 0)),
    case("single", [(2, 3)], lambda m, a: m.cat([a], 1)),
    case("noncontig", [(3, 2), (2, 4)], lambda m, a, b: m.cat([a.T, b.flip(1)[:, 1:]], 1)),
    case("tuple_3d", [(2, 1, 3), (2, 2, 3)], lambda m, a, b: m.cat((a, b), 1)),
    case("int", [(2, 2), (1, 2)], lambda m, a, b: m.cat([a, b]), dtype=np.int64, low=-9, high=9),
    case("promote", [ints(0, 5, (2, 2)), (2, 2)], lambda m, a, b: m.cat([a, b], 0)),
    case("stack0", [(2, 3), (2, 3)], lambda m, a, b: m.stack([a, b])),
    case("stack1", [(2, 3), (2, 3), (2, 3)], lambda m, a, b, c: m.stack([a, b, c], 1)),
    case("stack_neg", [(2, 3), (2, 3)], lambda m, a, b: m.stack((a, b), dim=-1)),
    case("stack_0d", [(), ()], lambda m, a, b: m.stack([a, b])),
    case("stack_empty", [(0, 2), (0, 2)], lambda m, a, b: m.stack([a, b], 1)),
])  # fmt: skip
def test_cat_stack(shapes: Any, fn: Fn, opts: dict[str, Any]) -> None:
    run_case(shapes, fn, opts)


SLICES: list[tuple[str, Any]] = [
    ("int", 1),
    ("neg_int", -1),
    ("slice", slice(1, 3)),
    ("step2", slice(None, None, 2)),
    ("neg_step", slice(None, None, -1)),
    ("neg_step2", slice(None, None, -2)),
    ("neg_bounds", (slice(-3, -1), slice(2, None, 3))),
    ("none_front", None),
    ("ellipsis_int", (Ellipsis, 1)),
    ("none_mid", (slice(None), None, slice(1, None))),
    ("int_ellipsis_negstep", (1, Ellipsis, slice(None, None, -1))),
    ("empty_slice", slice(3, 1)),
    ("ellipsis_none", (Ellipsis, None)),
    ("last_col", (slice(None), slice(None), -1)),
    ("neg_step_bounds", (slice(3, 0, -2), slice(None, 1, -1))),
    ("all_ints", (0, 2, 3)),
    ("out_of_range_slice", slice(2, 100)),
    ("ellipsis_only", Ellipsis),
]


@pytest.mark.parametrize("index", [s for _, s in SLICES], ids=[n for n, _ in SLICES])
def test_getitem(index: Any) -> None:
    helper_test_op([(4, 5, 6)], lambda m, x: sl(m, x, index))


@pytest.mark.parametrize("shapes,fn,opts", [
    case("of_transposed", [(5, 6)], lambda m, x: sl(m, x.T, (slice(1, None), slice(None, None, -2)))),
    case("chained", [(6, 7)], lambda m, x: x[1:][::2][:, 3]),
    case("then_math", [(4, 6)], lambda m, x: x[:, ::2] + x[:, 1::2]),
    case("empty_input", [(0, 4)], lambda m, x: x[:, 1:3]),
    case("tensor_index", [(5, 3), ints(-5, 5, (2, 4))], lambda m, x, i: x[i]),
    case("list_index", [(5, 3)], lambda m, x: x[[0, 4, 4, 1]]),
])  # fmt: skip
def test_getitem_more(shapes: Any, fn: Fn, opts: dict[str, Any]) -> None:
    run_case(shapes, fn, opts)


# ---- matmul ----

MATMUL_SHAPES = [
    ("2d", [(3, 4), (4, 5)]),
    ("batched", [(2, 3, 4), (2, 4, 5)]),
    ("broadcast_batch", [(2, 1, 3, 4), (5, 4, 2)]),
    ("broadcast_2d_rhs", [(2, 3, 4), (4, 5)]),
    ("broadcast_2d_lhs", [(3, 4), (2, 4, 5)]),
    ("vec_vec", [(4,), (4,)]),
    ("vec_mat", [(4,), (4, 5)]),
    ("mat_vec", [(3, 4), (4,)]),
    ("batched_vec", [(2, 3, 4), (4,)]),
    ("vec_batched", [(4,), (2, 4, 3)]),
    ("size1", [(1, 4), (4, 1)]),
    ("empty_k", [(3, 0), (0, 4)]),
    ("empty_m", [(0, 4), (4, 5)]),
    ("empty_batch", [(0, 2, 3), (3, 4)]),
    ("larger", [(17, 33), (33, 9)]),
]


@pytest.mark.parametrize("shapes", [s for _, s in MATMUL_SHAPES], ids=[n for n, _ in MATMUL_SHAPES])
def test_matmul(shapes: Any) -> None:
    helper_test_op(shapes, lambda m, a, b: a @ b)


@pytest.mark.parametrize("shapes,fn,opts", [
    case("method", [(3, 4), (4, 2)], lambda m, a, b: a.matmul(b)),
    case("function", [(2, 3, 4), (4, 2)], lambda m, a, b: m.matmul(a, b)),
    case("transposed_lhs", [(4, 3), (4, 5)], lambda m, a, b: a.T @ b),
    case("transposed_both", [(4, 3), (5, 4)], lambda m, a, b: a.T @ b.T),
    case("sliced", [(6, 8), (4, 3)], lambda m, a, b: a[::2, 1::2] @ b),
    case("permuted_batch", [(3, 2, 4), (2, 4, 5)], lambda m, a, b: a.permute(1, 0, 2) @ b),
    case("expanded", [(1, 3, 4), (2, 4, 5)], lambda m, a, b: a.expand(2, 3, 4) @ b),
    case("int", [(3, 4), (4, 2)], lambda m, a, b: a @ b, dtype=np.int64, low=-9, high=9),
    case("chain_bias_relu", [(3, 4), (4, 5), (5,)], lambda m, a, b, c: (a @ b + c).relu()),
])  # fmt: skip
def test_matmul_more(shapes: Any, fn: Fn, opts: dict[str, Any]) -> None:
    run_case(shapes, fn, opts)


# ---- functional: linear, conv, pool ----


@pytest.mark.parametrize("shapes,fn,opts", [
    case("bias", [(4, 5), (3, 5), (3,)], lambda m, x, w, b: m.F.linear(x, w, b)),
    case("no_bias", [(4, 5), (3, 5)], lambda m, x, w: m.F.linear(x, w)),
    case("3d_input", [(2, 4, 5), (3, 5), (3,)], lambda m, x, w, b: m.F.linear(x, w, bias=b)),
    case("1d_input", [(5,), (3, 5), (3,)], lambda m, x, w, b: m.F.linear(x, w, b)),
    case("empty_batch", [(0, 5), (3, 5), (3,)], lambda m, x, w, b: m.F.linear(x, w, b)),
    case("noncontig_weight", [(4, 5), (5, 3)], lambda m, x, w: m.F.linear(x, w.T)),
])  # fmt: skip
def test_linear(shapes: Any, fn: Fn, opts: dict[str, Any]) -> None:
    run_case(shapes, fn, opts)


CONV_CASES = [
    case("basic", [(2, 3, 7, 6), (4, 3, 3, 3)], lambda m, x, w: m.F.conv2d(x, w)),
    case("bias", [(2, 3, 7, 6), (4, 3, 3, 3), (4,)], lambda m, x, w, b: m.F.conv2d(x, w, b)),
    case("stride2", [(2, 3, 8, 7), (4, 3, 3, 3)], lambda m, x, w: m.F.conv2d(x, w, stride=2)),
    case("stride_tuple", [(1, 3, 8, 7), (4, 3, 3, 2)], lambda m, x, w: m.F.conv2d(x, w, stride=(2, 3))),
    case("padding1", [(2, 3, 5, 5), (4, 3, 3, 3)], lambda m, x, w: m.F.conv2d(x, w, padding=1)),
    case("padding_tuple", [(1, 2, 5, 6), (3, 2, 3, 3)], lambda m, x, w: m.F.conv2d(x, w, padding=(2, 0))),
    case("padding_same", [(1, 2, 6, 6), (3, 2, 4, 3)], lambda m, x, w: m.F.conv2d(x, w, padding="same")),
    case("padding_valid", [(1, 2, 6, 6), (3, 2, 3, 3)], lambda m, x, w: m.F.conv2d(x, w, padding="valid")),
    case("dilation2", [(1, 2, 9, 8), (3, 2, 3, 3)], lambda m, x, w: m.F.conv2d(x, w, dilation=2)),
    case(
        "dilation_stride_pad",
        [(2, 2, 9, 8), (3, 2, 3, 2)],
        lambda m, x, w: m.F.conv2d(x, w, stride=2, padding=(1, 2), dilation=(2, 3)),
    ),
    case("groups2", [(2, 4, 6, 6), (6, 2, 3, 3), (6,)], lambda m, x, w, b: m.F.conv2d(x, w, b, groups=2)),
    case("depthwise", [(1, 4, 6, 5), (4, 1, 3, 3)], lambda m, x, w: m.F.conv2d(x, w, padding=1, groups=4)),
    case(
        "groups_all_args",
        [(1, 6, 9, 9), (9, 2, 2, 3), (9,)],
        lambda m, x, w, b: m.F.conv2d(x, w, b, (2, 1), (1, 1), (2, 1), 3),
    ),
    case("1x1", [(2, 5, 4, 4), (3, 5, 1, 1)], lambda m, x, w: m.F.conv2d(x, w)),
    case("kernel_eq_input", [(2, 3, 4, 4), (5, 3, 4, 4)], lambda m, x, w: m.F.conv2d(x, w)),
    case("stride_gt_kernel", [(1, 2, 9, 9), (3, 2, 2, 2)], lambda m, x, w: m.F.conv2d(x, w, stride=4)),
    case("unbatched", [(3, 6, 6), (2, 3, 3, 3)], lambda m, x, w: m.F.conv2d(x, w, padding=1)),
    case("empty_batch", [(0, 3, 5, 5), (2, 3, 3, 3)], lambda m, x, w: m.F.conv2d(x, w)),
    case("noncontig_input", [(2, 3, 6, 7), (4, 3, 3, 3)], lambda m, x, w: m.F.conv2d(x.transpose(2, 3), w)),
    case("noncontig_weight", [(1, 3, 6, 6), (3, 4, 3, 3)], lambda m, x, w: m.F.conv2d(x, w.transpose(0, 1))),
]


@pytest.mark.parametrize("shapes,fn,opts", CONV_CASES)
def test_conv2d(shapes: Any, fn: Fn, opts: dict[str, Any]) -> None:
    # an output is a sum of 27-108 products of values up to 4 (outputs up to ~20), summed in another order than
    # torch's (a tile's k steps): float32 rounding reaches 1.4e-6 there, so atol 1e-6 held only by the order's luck
    run_case(shapes, fn, {"atol": 1e-5, **opts})


POOL_CASES = [
    case("max_k2", [(2, 3, 6, 6)], lambda m, x: m.F.max_pool2d(x, 2)),
    case("max_k3_s2", [(2, 3, 7, 8)], lambda m, x: m.F.max_pool2d(x, 3, 2)),
    case("max_k3_s1", [(1, 2, 5, 6)], lambda m, x: m.F.max_pool2d(x, 3, stride=1)),
    case("max_tuple", [(1, 2, 7, 8)], lambda m, x: m.F.max_pool2d(x, (2, 3), (1, 2))),
    case("max_pad", [(1, 2, 6, 7)], lambda m, x: m.F.max_pool2d(x, 3, 2, padding=1)),
    case("max_dilation", [(1, 2, 9, 9)], lambda m, x: m.F.max_pool2d(x, 3, 1, dilation=2)),
    case("max_ceil", [(1, 2, 7, 6)], lambda m, x: m.F.max_pool2d(x, 2, 2, ceil_mode=True)),
    case("max_ceil_pad", [(1, 1, 8, 8)], lambda m, x: m.F.max_pool2d(x, 3, 2, 1, ceil_mode=True)),
    case("max_stride_gt_k", [(1, 2, 9, 9)], lambda m, x: m.F.max_pool2d(x, 2, 3)),
    case("max_indices", [(2, 2, 6, 6)], lambda m, x: m.F.max_pool2d(x, 3, 2, return_indices=True)),
    case("max_3d_input", [(3, 6, 6)], lambda m, x: m.F.max_pool2d(x, 2)),
    case("max_empty_batch", [(0, 2, 4, 4)], lambda m, x: m.F.max_pool2d(x, 2)),
    case("max_noncontig", [(1, 2, 6, 8)], lambda m, x: m.F.max_pool2d(x.transpose(2, 3), 2)),
    case("avg_k2", [(2, 3, 6, 6)], lambda m, x: m.F.avg_pool2d(x, 2)),
    case("avg_k3_s2", [(2, 3, 7, 8)], lambda m, x: m.F.avg_pool2d(x, 3, 2)),
    case("avg_k3_s1", [(1, 2, 5, 6)], lambda m, x: m.F.avg_pool2d(x, 3, stride=1)),
    case("avg_pad_include", [(1, 2, 6, 7)], lambda m, x: m.F.avg_pool2d(x, 3, 2, padding=1)),
    case("avg_pad_exclude", [(1, 2, 6, 7)], lambda m, x: m.F.avg_pool2d(x, 3, 2, 1, count_include_pad=False)),
    case("avg_ceil", [(1, 2, 7, 6)], lambda m, x: m.F.avg_pool2d(x, 2, 2, ceil_mode=True)),
    case("avg_ceil_pad", [(1, 1, 8, 8)], lambda m, x: m.F.avg_pool2d(x, 3, 2, 1, ceil_mode=True)),
    case(
        "avg_ceil_pad_exclude",
        [(1, 1, 8, 9)],
        lambda m, x: m.F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
    ),
    case("avg_divisor", [(1, 2, 6, 6)], lambda m, x: m.F.avg_pool2d(x, 2, divisor_override=3)),
    case("avg_tuple", [(2, 2, 6, 9)], lambda m, x: m.F.avg_pool2d(x, (3, 2), (1, 3))),
    case("avg_3d_input", [(3, 6, 6)], lambda m, x: m.F.avg_pool2d(x, 2)),
    case("avg_noncontig", [(1, 2, 6, 8)], lambda m, x: m.F.avg_pool2d(x.flip(2)[:, :, 1:], 2)),
]


@pytest.mark.parametrize("shapes,fn,opts", POOL_CASES)
def test_pool2d(shapes: Any, fn: Fn, opts: dict[str, Any]) -> None:
    run_case(shapes, fn, opts)


# ---- gather, one_hot, embedding ----


@pytest.mark.parametrize("shapes,fn,opts", [
    case("dim0", [(4, 3), ints(0, 4, (2, 3))], lambda m, x, i: x.gather(0, i)),
    case("dim1", [(4, 3), ints(0, 3, (4, 5))], lambda m, x, i: x.gather(1, i)),
    case("dimneg_3d", [(2, 3, 4), ints(0, 4, (2, 3, 2))], lambda m, x, i: x.gather(-1, i)),
    case("smaller_index", [(4, 5), ints(0, 5, (2, 3))], lambda m, x, i: x.gather(1, i)),
    case("int_values", [ints(-9, 9, (3, 4)), ints(0, 4, (3, 2))], lambda m, x, i: x.gather(1, i)),
    case("noncontig", [(4, 3), ints(0, 4, (3, 2))], lambda m, x, i: x.T.gather(1, i)),
    case("empty_index", [(4, 3), np.zeros((0, 3), dtype=np.int64)], lambda m, x, i: x.gather(0, i)),
])  # fmt: skip
def test_gather(shapes: Any, fn: Fn, opts: dict[str, Any]) -> None:
    run_case(shapes, fn, opts)


@pytest.mark.parametrize("shapes,fn,opts", [
    case("num_classes", [ints(0, 5, (6,))], lambda m, i: m.F.one_hot(i, 5)),
    case("inferred", [ints(0, 4, (2, 3))], lambda m, i: m.F.one_hot(i)),
    case("keyword", [ints(0, 3, (4,))], lambda m, i: m.F.one_hot(i, num_classes=7)),
    case("method", [ints(0, 4, (3,))], lambda m, i: i.one_hot(4) if m is ANNEAL else m.F.one_hot(i, 4)),
    case("empty", [np.zeros((0,), dtype=np.int64)], lambda m, i: m.F.one_hot(i, 3)),
])  # fmt: skip
def test_one_hot(shapes: Any, fn: Fn, opts: dict[str, Any]) -> None:
    run_case(shapes, fn, opts)


@pytest.mark.parametrize("shapes,fn,opts", [
    case("2d_idx", [ints(0, 10, (2, 3)), (10, 4)], lambda m, i, w: m.F.embedding(i, w)),
    case("1d_idx", [ints(0, 7, (5,)), (7, 3)], lambda m, i, w: m.F.embedding(i, w)),
    case("0d_idx", [np.array(2, dtype=np.int64), (4, 3)], lambda m, i, w: m.F.embedding(i, w)),
    case("padding_idx", [ints(0, 6, (3, 4)), (6, 2)], lambda m, i, w: m.F.embedding(i, w, padding_idx=0)),
    case("empty_idx", [np.zeros((0, 2), dtype=np.int64), (5, 3)], lambda m, i, w: m.F.embedding(i, w)),
    case("int32_idx", [ints(0, 5, (4,)).astype(np.int32), (5, 3)], lambda m, i, w: m.F.embedding(i, w)),
    case("noncontig_weight", [ints(0, 4, (3,)), (3, 4)], lambda m, i, w: m.F.embedding(i, w.T)),
])  # fmt: skip
def test_embedding(shapes: Any, fn: Fn, opts: dict[str, Any]) -> None:
    run_case(shapes, fn, opts)


# ---- layer_norm, cross_entropy, attention ----


@pytest.mark.parametrize("shapes,fn,opts", [
    case("last_dim", [(4, 8)], lambda m, x: m.F.layer_norm(x, (8,))),
    case("affine", [(2, 3, 8), (8,), (8,)], lambda m, x, w, b: m.F.layer_norm(x, [8], w, b)),
    case("weight_only", [(4, 6), (6,)], lambda m, x, w: m.F.layer_norm(x, (6,), weight=w)),
    case("two_dims", [(2, 3, 4), (3, 4), (3, 4)], lambda m, x, w, b: m.F.layer_norm(x, (3, 4), w, b)),
    case("eps", [(3, 5)], lambda m, x: m.F.layer_norm(x, (5,), eps=0.5)),
    case("offset_scale", [(3, 16)], lambda m, x: m.F.layer_norm(x * 100 + 50, (16,)), low=-1, high=1),
    case("noncontig", [(8, 3)], lambda m, x: m.F.layer_norm(x.T, (8,))),
    case("empty_batch", [(0, 5)], lambda m, x: m.F.layer_norm(x, (5,))),
    case("size1", [(3, 1)], lambda m, x: m.F.layer_norm(x, (1,))),
])  # fmt: skip
def test_layer_norm(shapes: Any, fn: Fn, opts: dict[str, Any]) -> None:
    run_case(shapes, fn, opts)


_TGT = ints(0, 5, (6,))
_TGT_IGN = np.array([0, -100, 4, 2, -100, 1], dtype=np.int64)
_TGT_IGN_1 = np.array([0, 1, 4, 2, 1, 3], dtype=np.int64)
_PROBS = np.random.default_rng(5).dirichlet(np.ones(5), size=6).astype(np.float32)

CE_CASES = [
    case("mean", [(6, 5), _TGT], lambda m, x, y: m.F.cross_entropy(x, y)),
    case("sum", [(6, 5), _TGT], lambda m, x, y: m.F.cross_entropy(x, y, reduction="sum")),
    case("none", [(6, 5), _TGT], lambda m, x, y: m.F.cross_entropy(x, y, reduction="none")),
    case("weight", [(6, 5), _TGT, (5,)], lambda m, x, y, w: m.F.cross_entropy(x, y, w.abs() + 0.1)),
    case(
        "weight_none", [(6, 5), _TGT, (5,)], lambda m, x, y, w: m.F.cross_entropy(x, y, w.abs() + 0.1, reduction="none")
    ),
    case("ignore_index", [(6, 5), _TGT_IGN], lambda m, x, y: m.F.cross_entropy(x, y)),
    case("ignore_index_custom", [(6, 5), _TGT_IGN_1], lambda m, x, y: m.F.cross_entropy(x, y, ignore_index=1)),
    case(
        "ignore_weight_sum",
        [(6, 5), _TGT_IGN, (5,)],
        lambda m, x, y, w: m.F.cross_entropy(x, y, w.abs() + 0.1, reduction="sum"),
    ),
    case("label_smoothing", [(6, 5), _TGT], lambda m, x, y: m.F.cross_entropy(x, y, label_smoothing=0.1)),
    case("ls_ignore", [(6, 5), _TGT_IGN], lambda m, x, y: m.F.cross_entropy(x, y, label_smoothing=0.2)),
    case(
        "ls_ignore_none",
        [(6, 5), _TGT_IGN],
        lambda m, x, y: m.F.cross_entropy(x, y, reduction="none", label_smoothing=0.2),
    ),
    case(
        "ls_weight_ignore",
        [(6, 5), _TGT_IGN, (5,)],
        lambda m, x, y, w: m.F.cross_entropy(x, y, w.abs() + 0.1, label_smoothing=0.3),
    ),
    case("spatial", [(2, 5, 3, 2), ints(0, 5, (2, 3, 2))], lambda m, x, y: m.F.cross_entropy(x, y)),
    case("spatial_none", [(2, 5, 3), ints(0, 5, (2, 3))], lambda m, x, y: m.F.cross_entropy(x, y, reduction="none")),
    case("unbatched", [(5,), np.array(3, dtype=np.int64)], lambda m, x, y: m.F.cross_entropy(x, y)),
    case("large_logits", [(6, 5), _TGT], lambda m, x, y: m.F.cross_entropy(x, y), low=-60, high=60),
    case("noncontig", [(5, 6), _TGT], lambda m, x, y: m.F.cross_entropy(x.T, y)),
    case("probs", [(6, 5), _PROBS], lambda m, x, p: m.F.cross_entropy(x, p)),
    case(
        "probs_ls_weight",
        [(6, 5), _PROBS, (5,)],
        lambda m, x, p, w: m.F.cross_entropy(x, p, w.abs(), label_smoothing=0.1),
    ),
    case("probs_none", [(6, 5), _PROBS], lambda m, x, p: m.F.cross_entropy(x, p, reduction="none")),
    case("legacy_size_average", [(6, 5), _TGT], lambda m, x, y: m.F.cross_entropy(x, y, size_average=False)),
]


@pytest.mark.parametrize("shapes,fn,opts", CE_CASES)
def test_cross_entropy(shapes: Any, fn: Fn, opts: dict[str, Any]) -> None:
    run_case(shapes, fn, opts)


_BOOL_MASK = np.random.default_rng(9).random((5, 7)) < 0.7
_BOOL_MASK[:, 0] = True  # no fully masked row (torch gives NaN there, as would anneal; kept out of this case)

SDPA_CASES = [
    case(
        "basic",
        [(2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 6)],
        lambda m, q, k, v: m.F.scaled_dot_product_attention(q, k, v),
    ),
    case(
        "causal",
        [(2, 3, 6, 4), (2, 3, 6, 4), (2, 3, 6, 4)],
        lambda m, q, k, v: m.F.scaled_dot_product_attention(q, k, v, is_causal=True),
    ),
    case(
        "causal_l_lt_s",
        [(1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4)],
        lambda m, q, k, v: m.F.scaled_dot_product_attention(q, k, v, is_causal=True),
    ),
    case(
        "bool_mask",
        [(2, 1, 5, 4), (2, 1, 7, 4), (2, 1, 7, 3), _BOOL_MASK],
        lambda m, q, k, v, mask: m.F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
    ),
    case(
        "float_mask",
        [(2, 2, 5, 4), (2, 2, 7, 4), (2, 2, 7, 4), (5, 7)],
        lambda m, q, k, v, mask: m.F.scaled_dot_product_attention(q, k, v, mask),
    ),
    case(
        "scale",
        [(1, 2, 4, 8), (1, 2, 4, 8), (1, 2, 4, 8)],
        lambda m, q, k, v: m.F.scaled_dot_product_attention(q, k, v, scale=0.3),
    ),
    case(
        "gqa_2to1",
        [(2, 4, 5, 8), (2, 2, 5, 8), (2, 2, 5, 8)],
        lambda m, q, k, v: m.F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
    ),
    case(
        "gqa_mqa",
        [(1, 6, 4, 4), (1, 1, 4, 4), (1, 1, 4, 4)],
        lambda m, q, k, v: m.F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
    ),
    case("3d", [(3, 5, 4), (3, 6, 4), (3, 6, 2)], lambda m, q, k, v: m.F.scaled_dot_product_attention(q, k, v)),
    case(
        "noncontig_blhe",
        [(2, 5, 3, 4), (2, 5, 3, 4), (2, 5, 3, 4)],
        lambda m, q, k, v: m.F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        ),
    ),  # fmt: skip
    case(
        "single_query",
        [(1, 2, 1, 4), (1, 2, 6, 4), (1, 2, 6, 4)],
        lambda m, q, k, v: m.F.scaled_dot_product_attention(q, k, v),
    ),
]


@pytest.mark.parametrize("shapes,fn,opts", SDPA_CASES)
def test_sdpa(shapes: Any, fn: Fn, opts: dict[str, Any]) -> None:
    run_case(shapes, fn, opts)


def test_sdpa_dropout_keeps_expectation() -> None:
    """dropout_p > 0 zeroes weights at random and rescales the rest: the mean output is unchanged."""
    rng = np.random.default_rng(0)
    q, k = (rng.standard_normal((1, 1, 64, 8)).astype(np.float32) for _ in range(2))
    v = np.ones((1, 1, 64, 8), dtype=np.float32)
    anneal.manual_seed(3)
    out = AF.scaled_dot_product_attention(t(q), t(k), t(v), dropout_p=0.5).numpy()
    assert out.shape == (1, 1, 64, 8)
    assert not np.allclose(out, 1.0)  # something was dropped
    assert abs(out.mean() - 1.0) < 0.1


# ---- API contract ----


def test_tensor_import_and_init_signature() -> None:
    from anneal import Tensor as T2

    assert T2 is Tensor
    params = list(inspect.signature(Tensor.__init__).parameters.values())[1:]
    assert [(p.name, p.default) for p in params] == [("data", inspect.Parameter.empty), ("dtype", None),
                                                     ("device", None), ("requires_grad", False)]  # fmt: skip
    x = Tensor([1.0, 2.0], None, DEV, True)
    assert x.requires_grad and x.device == DEV and x.dtype == dtypes.float32
    assert not Tensor([1], device=DEV).requires_grad


def _torch_doc_signature(fn: Any) -> list[tuple[str, Any]]:
    """(name, default) of the parameters before any `*`, from inspect or from the docstring of a builtin."""
    try:
        sig = inspect.signature(fn)
        if any(p.kind is p.VAR_POSITIONAL for p in sig.parameters.values()):
            raise ValueError("boolean-dispatch wrapper")
        return [(p.name, p.default) for p in sig.parameters.values() if p.kind is not p.KEYWORD_ONLY]
    except ValueError:
        pass
    doc = fn.__doc__
    name = fn.__name__
    start = doc.index(name + "(") + len(name) + 1
    depth, end = 1, start
    while depth:
        depth += {"(": 1, ")": -1}.get(doc[end], 0)
        end += 1
    args = ast.parse(f"def f({doc[start : end - 1]}): pass").body[0].args  # type: ignore[attr-defined]
    defaults = [inspect.Parameter.empty] * (len(args.args) - len(args.defaults)) + [ast.literal_eval(d)
                                                                                 for d in args.defaults]  # fmt: skip
    return [(a.arg, d) for a, d in zip(args.args, defaults)]


def _ours(fn: Any) -> list[tuple[str, Any]]:
    return [(p.name, p.default) for p in inspect.signature(fn).parameters.values() if p.kind is not p.KEYWORD_ONLY]


F_NAMES = ["linear", "conv2d", "max_pool2d", "avg_pool2d", "layer_norm", "embedding", "cross_entropy", "one_hot",
           "scaled_dot_product_attention", "gelu", "silu", "relu", "softmax", "log_softmax", "pad"]  # fmt: skip


@pytest.mark.parametrize("name", F_NAMES)
def test_functional_signature_matches_torch(name: str) -> None:
    theirs = _torch_doc_signature(getattr(TF, name))
    assert theirs, f"could not read torch's signature of {name}"
    assert _ours(getattr(AF, name)) == theirs


@pytest.mark.parametrize("name", ["cat", "stack", "where"])
def test_toplevel_signature_matches_torch(name: str) -> None:
    theirs = [(n, d) for n, d in _torch_doc_signature(getattr(torch, name)) if n != "out"]
    assert _ours(getattr(anneal, name))[: len(theirs)] == theirs


def test_toplevel_functions_as_torch() -> None:
    a, b = np.arange(6, dtype=np.float32).reshape(2, 3), -np.ones((2, 3), dtype=np.float32)
    compare(anneal.cat([t(a), t(b)], 1), torch.cat([torch.tensor(a), torch.tensor(b)], 1), 0, 0)
    compare(anneal.cat(tensors=[t(a), t(b)], dim=0), torch.cat(tensors=[torch.tensor(a), torch.tensor(b)], dim=0), 0, 0)
    compare(anneal.stack([t(a), t(b)], dim=2), torch.stack([torch.tensor(a), torch.tensor(b)], dim=2), 0, 0)
    compare(anneal.where(t(a) > 2, t(a), t(b)), torch.where(torch.tensor(a) > 2, torch.tensor(a), torch.tensor(b)),
            0, 0)  # fmt: skip
    compare(anneal.where(condition=t(a) > 2, input=t(a), other=0.5),
            torch.where(condition=torch.tensor(a) > 2, input=torch.tensor(a), other=0.5), 0, 0)  # fmt: skip


@pytest.mark.parametrize("op", ["max", "min"])
def test_max_min_with_a_dim_return_values_and_indices_as_torch(op: str) -> None:
    arr = np.array([[1.0, 5.0, -2.0, 5.0], [7.0, np.nan, 3.0, 7.0], [0.0, 0.0, 0.0, 0.0]], dtype=np.float32)
    for kwargs in ({"dim": 1}, {"dim": 0, "keepdim": True}, {"dim": -1, "keepdim": False}):
        got, want = getattr(t(arr), op)(**kwargs), getattr(torch.tensor(arr), op)(**kwargs)
        assert isinstance(got, tuple) and got._fields == ("values", "indices")
        np.testing.assert_array_equal(got.values.numpy(), want.values.numpy())  # NaN wins, as torch
        np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())  # the first of ties
        assert got.indices.dtype.name == "int64" and got.values.shape == tuple(want.values.shape)
        values, indices = got  # unpacks like torch's
        assert values.shape == indices.shape
    np.testing.assert_array_equal(getattr(t(arr), op)().numpy(), getattr(torch.tensor(arr), op)().numpy())
    other = np.full_like(arr, 2.0)
    np.testing.assert_array_equal(getattr(t(arr), op)(t(other)).numpy(),
                                  getattr(torch.tensor(arr), op)(torch.tensor(other)).numpy())  # fmt: skip
    with pytest.raises(TypeError, match="amax/amin take several"):
        getattr(t(arr), op)((0, 1))
    with pytest.raises(IndexError, match="empty dim"):
        getattr(t(np.zeros((2, 0), np.float32)), op)(1)


def test_the_gradient_of_max_values_reaches_the_chosen_elements() -> None:
    arr = np.array([[1.0, 5.0, 5.0], [7.0, 0.0, 7.0]], dtype=np.float32)  # ties: the first one's alone
    x, tx = Tensor(arr, requires_grad=True), torch.tensor(arr, requires_grad=True)
    (x.max(1).values * Tensor([2.0, 3.0])).sum().backward()
    (tx.max(1).values * torch.tensor([2.0, 3.0])).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())


# ---- errors ----


@pytest.mark.parametrize("opname,fn", [
    ("add", lambda a, b: a + b),
    ("sub", lambda a, b: a - b),
    ("mul", lambda a, b: a * b),
    ("div", lambda a, b: a / b),
    ("maximum", lambda a, b: a.maximum(b)),
    ("lt", lambda a, b: a < b),
    ("eq", lambda a, b: a == b),
])  # fmt: skip
def test_elementwise_shape_mismatch_names_op_and_shapes(opname: str, fn: Fn) -> None:
    a, b = Tensor.zeros(2, 3, device=DEV), Tensor.ones(4, 3, device=DEV)
    with pytest.raises(RuntimeError) as e:
        fn(a, b)  # graph build: nothing is realized
    msg = str(e.value)
    assert opname in msg and "(2, 3)" in msg and "(4, 3)" in msg, msg


def test_where_shape_mismatch() -> None:
    c, a, b = Tensor.zeros(2, 3, device=DEV) > 0, Tensor.zeros(2, 3, device=DEV), Tensor.zeros(5, device=DEV)
    with pytest.raises(RuntimeError, match=r"where.*\(2, 3\).*\(5,\)"):
        anneal.where(c, a, b)


@pytest.mark.parametrize(
    "sa,sb",
    [((2, 3), (4, 5)), ((3,), (4,)), ((2, 2, 3), (3, 3, 4)), ((5, 3), (2,))],
    ids=["2d", "vec", "batch", "mat_vec"],
)
def test_matmul_shape_mismatch(sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    a, b = Tensor.zeros(*sa, device=DEV), Tensor.zeros(*sb, device=DEV)
    with pytest.raises(RuntimeError) as e:
        a @ b
    msg = str(e.value)
    assert "matmul" in msg and str(sa) in msg and str(sb) in msg, msg


@pytest.mark.parametrize("new", [(4, 2), (-1, 4), (7,), (-1, -1)], ids=str)
def test_reshape_invalid(new: tuple[int, ...]) -> None:
    with pytest.raises(RuntimeError) as e:
        Tensor.zeros(2, 3, device=DEV).reshape(new)
    msg = str(e.value)
    assert "reshape" in msg and "(2, 3)" in msg, msg


@pytest.mark.parametrize("fn,words", [
    (lambda: anneal.cat([Tensor.zeros(2, 3, device=DEV), Tensor.zeros(2, 4, device=DEV)], 0),
     ["cat", "(2, 3)", "(2, 4)"]),
    (lambda: anneal.stack([Tensor.zeros(2, 3, device=DEV), Tensor.zeros(3, 2, device=DEV)]),
     ["stack", "(2, 3)", "(3, 2)"]),
    (lambda: Tensor.zeros(2, 3, device=DEV).expand(4, 4), ["expand", "(2, 3)", "(4, 4)"]),
    (lambda: AF.conv2d(Tensor.zeros(1, 3, 5, 5, device=DEV), Tensor.zeros(2, 4, 3, 3, device=DEV)),
     ["conv2d", "(1, 3, 5, 5)", "(2, 4, 3, 3)"]),
    (lambda: AF.layer_norm(Tensor.zeros(2, 3, device=DEV), (4,)), ["layer_norm", "(4,)", "(2, 3)"]),
    (lambda: AF.linear(Tensor.zeros(2, 3, device=DEV), Tensor.zeros(4, 5, device=DEV)), ["matmul", "(2, 3)", "(5, 4)"]),
    (lambda: AF.scaled_dot_product_attention(*(Tensor.zeros(1, 2, 3, s, device=DEV) for s in (4, 5, 5))),
     ["scaled_dot_product_attention", "(1, 2, 3, 4)", "(1, 2, 3, 5)"]),
])  # fmt: skip
def test_other_shape_errors(fn: Fn, words: list[str]) -> None:
    kind = RuntimeError if words[0].startswith("conv") else ValueError  # conv's: torch's RuntimeError
    with pytest.raises(kind) as e:
        fn()
    msg = str(e.value)
    assert all(w in msg for w in words), msg


@pytest.mark.parametrize("fn", [
    lambda: Tensor.zeros(3, device=DEV).one_hot(3),
    lambda: AF.embedding(Tensor.zeros(3, device=DEV), Tensor.zeros(4, 2, device=DEV)),
    lambda: Tensor.zeros(3, 2, device=DEV).gather(0, Tensor.zeros(3, 2, device=DEV)),
    lambda: Tensor.zeros(3, device=DEV).bitcast(dtypes.int64),
], ids=["one_hot_float", "embedding_float_idx", "gather_float_idx", "bitcast_size"])  # fmt: skip
def test_dtype_errors_at_build_time(fn: Fn) -> None:
    with pytest.raises(TypeError):
        fn()


def test_unknown_device_names_registered_ones() -> None:
    registered = backend_names()
    assert "cpu" in registered
    with pytest.raises(DeviceError) as e:
        Tensor([1.0, 2.0], device="no-such-device")
    msg = str(e.value)
    assert "no-such-device" in msg and all(name in msg for name in registered), msg
    with pytest.raises(DeviceError):
        Tensor.zeros(2, device="no-such-device")


# ---- bfloat16: storage dtype, computed in float32 and rounded on store (as torch rounds each op's result) ----

BF16_CASES = {
    "add_scalar": lambda x: x + 1,
    "mul_chain": lambda x: x * x * 0.1,
    "exp": lambda x: x.exp(),
    "sum": lambda x: x.sum(-1),
    "matmul": lambda x: x @ x.T,
    "to_float": lambda x: x.float() * 1.001,
}


@pytest.mark.parametrize("name", list(BF16_CASES))
def test_bfloat16_matches_torch(name: str) -> None:
    data = np.random.default_rng(3).uniform(-3, 3, (4, 8)).astype(np.float32)
    fn = BF16_CASES[name]
    got = fn(Tensor(data, dtype=dtypes.bfloat16, device=DEV))
    ref = fn(torch.tensor(data, dtype=torch.bfloat16))
    assert got.dtype.name == _torch_dtype_name(ref.dtype)
    got_values = got.float().numpy() if got.dtype == dtypes.bfloat16 else got.numpy()
    np.testing.assert_allclose(got_values, ref.float().numpy(), rtol=1e-2, atol=1e-2)  # bf16 has 8 bits of mantissa

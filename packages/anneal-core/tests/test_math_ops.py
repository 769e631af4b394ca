"""The elementwise math of issue 18 against torch: inverse trigonometric and hyperbolic functions, log1p,
expm1, log10, logaddexp, copysign, fmod, lerp, the value tests (isnan, isinf, isfinite, isclose),
bitwise_not and the reflected integer operators. Forward values (NaN where torch's are), dtypes and
gradients (read after a value, as PyTorch users do), at ordinary points and at the edges (0, +-1, inf, NaN)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from devices import DEV

from anneal import Tensor

RTOL, ATOL = 2e-5, 1e-6  # float32; each op is a composition of a few roundings
EDGES = [0.0, -0.0, 1e-7, -1e-7, np.inf, -np.inf, np.nan]


def _grid(lo: float, hi: float, n: int = 37, edges: bool = True) -> np.ndarray:
    points = np.linspace(lo, hi, n)
    return np.concatenate([points, EDGES] if edges else [points]).astype(np.float32)


UNARY: list[tuple[str, np.ndarray, np.ndarray]] = [
    # op, values at which forward values are compared, points (away from singularities) for gradients
    ("atan", _grid(-30, 30), _grid(-30, 30, edges=False)),
    ("asin", _grid(-1.2, 1.2), _grid(-0.95, 0.95, edges=False)),
    ("acos", _grid(-1.2, 1.2), _grid(-0.95, 0.95, edges=False)),
    ("sinh", _grid(-9, 9), _grid(-9, 9, edges=False)),
    ("cosh", _grid(-9, 9), _grid(-9, 9, edges=False)),
    ("asinh", np.concatenate([_grid(-50, 50), [1e9, -1e9, 3e-5]]).astype(np.float32), _grid(-50, 50, edges=False)),
    ("acosh", np.concatenate([_grid(1, 40), [0.5, 1e9]]).astype(np.float32), _grid(1.05, 40, edges=False)),
    ("atanh", _grid(-1.2, 1.2), _grid(-0.95, 0.95, edges=False)),
    ("log1p", np.concatenate([_grid(-1, 20), [1e-4, -0.9999]]).astype(np.float32), _grid(-0.9, 20, edges=False)),
    ("expm1", _grid(-20, 20), _grid(-20, 20, edges=False)),
    ("log10", np.abs(_grid(0, 1e4)), _grid(0.01, 1e4, edges=False)),
]


def _close(got: np.ndarray, exp: np.ndarray, what: str) -> None:
    np.testing.assert_allclose(got, exp, rtol=RTOL, atol=ATOL, equal_nan=True, err_msg=what)


@pytest.mark.parametrize("name, values, points", UNARY, ids=[u[0] for u in UNARY])
def test_unary_values_and_gradients_match_torch(name: str, values: np.ndarray, points: np.ndarray) -> None:
    got = getattr(Tensor(values, device=DEV), name)()
    exp = getattr(torch.from_numpy(values), name)()
    assert got.dtype.name == str(exp.dtype).removeprefix("torch.")
    _close(got.numpy(), exp.numpy(), f"{name} values")

    weights = np.random.default_rng(0).uniform(0.5, 1.5, points.shape).astype(np.float32)
    a = Tensor(points, device=DEV, requires_grad=True)
    t = torch.tensor(points, requires_grad=True)
    ya, yt = getattr(a, name)(), getattr(t, name)()
    ya.numpy()  # read a value first, then differentiate
    (ya * Tensor(weights, device=DEV)).sum().backward()
    (yt * torch.from_numpy(weights)).sum().backward()
    assert a.grad is not None and t.grad is not None
    _close(a.grad.numpy(), t.grad.numpy(), f"{name} gradient")


@pytest.mark.parametrize("name", ["atan", "sinh", "asinh", "log1p", "log10"])
def test_integer_inputs_give_the_default_float(name: str) -> None:
    data = np.array([0, 1, 3], np.int32)
    got = getattr(Tensor(data, device=DEV), name)()
    exp = getattr(torch.from_numpy(data), name)()
    assert got.dtype.name == "float32" == str(exp.dtype).removeprefix("torch.")
    _close(got.numpy(), exp.numpy(), name)


def _pair() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    a = rng.uniform(-6, 6, (5, 7)).astype(np.float32)
    b = rng.uniform(-6, 6, (5, 7)).astype(np.float32)
    b[0, :4] = [0.0, -0.0, np.inf, -np.inf]
    a[1, :3] = [np.inf, -np.inf, np.nan]
    b[1, :3] = [np.inf, -np.inf, 2.0]
    return a, b


BINARY: list[tuple[str, Callable[..., Any], bool]] = [
    ("logaddexp", lambda x, y: x.logaddexp(y), True),
    ("copysign", lambda x, y: x.copysign(y), True),
    ("fmod", lambda x, y: x.fmod(y), True),
    ("lerp", lambda x, y: x.lerp(y, 0.3), True),
    ("lerp_tensor_weight", lambda x, y: x.lerp(y, (y - y.floor()) * 0.9), True),
]


@pytest.mark.parametrize("name, fn, grads", BINARY, ids=[b[0] for b in BINARY])
def test_binary_values_and_gradients_match_torch(name: str, fn: Callable[..., Any], grads: bool) -> None:
    a, b = _pair()
    got = fn(Tensor(a, device=DEV), Tensor(b, device=DEV))
    _close(got.numpy(), fn(torch.from_numpy(a), torch.from_numpy(b)).numpy(), f"{name} values")
    rng = np.random.default_rng(2)
    x = rng.uniform(-4, 4, (4, 6)).astype(np.float32)
    y = rng.uniform(0.5, 4, (4, 6)).astype(np.float32) * np.sign(rng.uniform(-1, 1, (4, 6))).astype(np.float32)
    ax, ay = Tensor(x, device=DEV, requires_grad=True), Tensor(y, device=DEV, requires_grad=True)
    tx, ty = torch.tensor(x, requires_grad=True), torch.tensor(y, requires_grad=True)
    fn(ax, ay).sum().backward()
    fn(tx, ty).sum().backward()
    for got, exp, which in ((ax.grad, tx.grad, "x"), (ay.grad, ty.grad, "y")):
        expected = np.zeros_like(x) if exp is None else exp.numpy()
        assert got is not None
        _close(got.numpy(), expected, f"{name} gradient of {which}")


def test_fmod_of_integers_keeps_the_dividends_sign() -> None:
    a = np.array([7, -7, 7, -7, 0, 5], np.int32)
    b = np.array([3, 3, -3, -3, 4, 5], np.int32)
    got = Tensor(a, device=DEV).fmod(Tensor(b, device=DEV))
    exp = torch.from_numpy(a).fmod(torch.from_numpy(b))
    assert got.dtype.name == "int32" and got.numpy().tolist() == exp.tolist()


def test_value_tests_match_torch() -> None:
    data = np.array([0.0, -1.5, np.inf, -np.inf, np.nan, 3e38], np.float32)
    a, t = Tensor(data, device=DEV), torch.from_numpy(data)
    for name in ("isnan", "isinf", "isfinite"):
        got, exp = getattr(a, name)(), getattr(t, name)()
        assert got.dtype.name == "bool" and got.numpy().tolist() == exp.tolist(), name
    ints = np.array([0, -3, 7], np.int32)
    for name in ("isnan", "isinf", "isfinite"):
        exp = getattr(torch.from_numpy(ints), name)()
        assert getattr(Tensor(ints, device=DEV), name)().numpy().tolist() == exp.tolist()


@pytest.mark.parametrize("equal_nan", [False, True])
def test_isclose_matches_torch(equal_nan: bool) -> None:
    a = np.array([1.0, 1.0, np.inf, np.inf, -np.inf, np.nan, 0.0, 1e-9, 100.0], np.float32)
    b = np.array([1.0 + 1e-6, 1.1, np.inf, 1.0, np.inf, np.nan, 1e-9, 0.0, 100.001], np.float32)
    got = Tensor(a, device=DEV).isclose(Tensor(b, device=DEV), equal_nan=equal_nan)
    exp = torch.from_numpy(a).isclose(torch.from_numpy(b), equal_nan=equal_nan)
    assert got.numpy().tolist() == exp.tolist()
    got = Tensor(a, device=DEV).isclose(Tensor(b, device=DEV), rtol=0.2, atol=0.0)
    assert got.numpy().tolist() == torch.from_numpy(a).isclose(torch.from_numpy(b), rtol=0.2, atol=0.0).tolist()


def test_bitwise_not_and_reflected_integer_operators() -> None:
    data = np.array([0, 1, -6, 2**31 - 1], np.int32)
    a, t = Tensor(data, device=DEV), torch.from_numpy(data)
    assert a.bitwise_not().numpy().tolist() == t.bitwise_not().tolist()
    flags = np.array([True, False]), torch.tensor([True, False])
    assert Tensor(flags[0], device=DEV).bitwise_not().numpy().tolist() == flags[1].bitwise_not().tolist()
    with pytest.raises(TypeError, match="bitwise_not"):
        Tensor(np.ones(2, np.float32), device=DEV).bitwise_not()
    for op in (lambda x: 6 & x, lambda x: 6 | x, lambda x: 6 ^ x, lambda x: 7 % x.clip(1, None)):
        got, exp = op(a), op(t)
        assert got.numpy().tolist() == exp.tolist() and got.dtype.name == str(exp.dtype).removeprefix("torch.")
    floats = np.array([1.5, -2.5, 4.0], np.float32)
    _close((7 % Tensor(floats, device=DEV)).numpy(), (7 % torch.from_numpy(floats)).numpy(), "7 % x")


def test_second_order_through_a_gradient_rule() -> None:
    x = np.array([0.3, -0.7, 2.0], np.float32)
    a = Tensor(x, device=DEV, requires_grad=True)
    t = torch.tensor(x, requires_grad=True)
    (ga,) = a.atan().sum().gradient(a)
    (gt,) = torch.autograd.grad(t.atan().sum(), t, create_graph=True)
    (gga,) = ga.sum().gradient(a)
    (ggt,) = torch.autograd.grad(gt.sum(), t)
    _close(gga.numpy(), ggt.numpy(), "d2 atan")


@pytest.mark.parametrize("exponent", [3.0, 2.5, -1.5, 0.0, 1.0])
def test_pow_at_zero_and_infinity_matches_torch(exponent: float) -> None:
    x = np.array([0.0, 0.5, 2.0, np.inf, 3.0], np.float32)
    a, t = Tensor(x, device=DEV, requires_grad=True), torch.tensor(x, requires_grad=True)
    ya, yt = a.pow(exponent), t.pow(exponent)
    _close(ya.numpy(), yt.detach().numpy(), f"x ** {exponent}")
    ya.sum().backward()
    yt.sum().backward()
    assert a.grad is not None and t.grad is not None
    _close(a.grad.numpy(), t.grad.numpy(), f"d/dx x ** {exponent}")


def test_pow_gradient_of_the_exponent_matches_torch() -> None:
    base = np.array([0.0, 0.5, 2.0, 3.0], np.float32)
    exp = np.array([2.0, 1.5, -1.0, 0.0], np.float32)
    a, b = Tensor(base, device=DEV, requires_grad=True), Tensor(exp, device=DEV, requires_grad=True)
    ta, tb = torch.tensor(base, requires_grad=True), torch.tensor(exp, requires_grad=True)
    a.pow(b).sum().backward()
    ta.pow(tb).sum().backward()
    assert a.grad is not None and b.grad is not None and ta.grad is not None and tb.grad is not None
    _close(a.grad.numpy(), ta.grad.numpy(), "d/da")
    _close(b.grad.numpy(), tb.grad.numpy(), "d/db")


# ops whose operand is a constant, which a kernel holds as a literal: C takes no address of a literal (a
# bitcast reads the bits through memory) and WGSL refuses a literal expression that is not finite (log2(0.0))
CONSTANT_OPS: list[tuple[str, Callable[[Any, Any], Any]]] = [
    ("fmod_scalar", lambda c, x: x.fmod(1.5)),
    ("fmod_by_constant_tensor", lambda c, x: x.fmod(c(1.5))),
    ("constant_fmod", lambda c, x: c(7.25).fmod(x)),
    ("amax", lambda c, x: c(2.0).amax()),
    ("maximum", lambda c, x: c(2.0).maximum(x)),
    ("isinf", lambda c, x: c(np.inf).isinf()),
    ("isnan", lambda c, x: c(np.nan).isnan()),
    ("isclose", lambda c, x: c(1.0).isclose(x)),
    ("log_of_zeros", lambda c, x: c(0.0).log()),
    ("log_of_negative", lambda c, x: c(-2.0).log()),
    ("reciprocal_of_zeros", lambda c, x: c(0.0).reciprocal()),
    ("sqrt_of_negative", lambda c, x: c(-1.0).sqrt()),
    ("exp_overflow", lambda c, x: c(200.0).exp()),
    ("zero_to_the_x", lambda c, x: 0.0**x),
    ("minus_two_to_the_x", lambda c, x: (-2.0) ** x.round()),
]


@pytest.mark.parametrize("size", [5, 5000])  # 5000: past the cpu backend's C threshold
@pytest.mark.parametrize("name, fn", CONSTANT_OPS, ids=[c[0] for c in CONSTANT_OPS])
def test_ops_of_constant_tensors_match_torch(name: str, fn: Callable[[Any, Any], Any], size: int) -> None:
    x = np.linspace(-5, 5, size).astype(np.float32)
    got = fn(lambda v: Tensor.full((size,), v, device=DEV), Tensor(x, device=DEV))
    exp = fn(lambda v: torch.full((size,), v), torch.from_numpy(x))
    assert got.dtype.name == str(exp.dtype).removeprefix("torch.")
    _close(got.numpy(), exp.numpy(), name)


def test_gradient_through_a_constant_base_matches_torch() -> None:
    x = np.array([0.0, 1.0, 2.0, -1.0, 0.5], np.float32)
    for base in (0.0, -2.0, 2.0):
        a, t = Tensor(x, device=DEV, requires_grad=True), torch.tensor(x, requires_grad=True)
        (base**a).sum().backward()
        (base**t).sum().backward()
        assert a.grad is not None and t.grad is not None
        _close(a.grad.numpy(), t.grad.numpy(), f"d {base} ** x")


POW_BASES = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, np.inf, -np.inf, np.nan], np.float32)
POW_EXPONENTS = [-0.5, 0.0, 1.0, 2.0, 3.0, -1.0, -2.0, -3.0, 0.5, 2.5, -1.5, np.inf, -np.inf, np.nan]


def _exact_zeros(got: np.ndarray, exp: np.ndarray, what: str) -> None:
    """Values as _close, and a zero's sign as torch's ((-0.0) ** 3 is -0.0)."""
    _close(got, exp, what)
    zero = exp == 0
    np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(exp[zero]), err_msg=f"{what}: signs of zeros")


@pytest.mark.parametrize("exponent", POW_EXPONENTS)
def test_pow_by_a_scalar_at_every_edge_matches_torch(exponent: float) -> None:
    a, t = Tensor(POW_BASES, device=DEV, requires_grad=True), torch.tensor(POW_BASES, requires_grad=True)
    ya, yt = a ** float(exponent), t ** float(exponent)
    _exact_zeros(ya.numpy(), yt.detach().numpy(), f"x ** {exponent}")
    ya.sum().backward()
    yt.sum().backward()
    assert a.grad is not None and t.grad is not None
    _exact_zeros(a.grad.numpy(), t.grad.numpy(), f"d/dx x ** {exponent}")


def test_pow_of_tensors_at_every_edge_matches_torch() -> None:
    base, exponent = (g.ravel() for g in np.meshgrid(POW_BASES, np.array(POW_EXPONENTS, np.float32)))
    a, b = Tensor(base, device=DEV, requires_grad=True), Tensor(exponent, device=DEV, requires_grad=True)
    ta, tb = torch.tensor(base, requires_grad=True), torch.tensor(exponent, requires_grad=True)
    ya, yt = a**b, ta**tb
    _exact_zeros(ya.numpy(), yt.detach().numpy(), "a ** b")
    ya.sum().backward()
    yt.sum().backward()
    assert a.grad is not None and b.grad is not None and ta.grad is not None and tb.grad is not None
    _exact_zeros(a.grad.numpy(), ta.grad.numpy(), "d/da a ** b")
    _exact_zeros(b.grad.numpy(), tb.grad.numpy(), "d/db a ** b")
    for scalar in (0.0, -2.0, 1.0, -1.0):  # a Python base: rpow
        x, tx = Tensor(exponent, device=DEV, requires_grad=True), torch.tensor(exponent, requires_grad=True)
        (scalar**x).sum().backward()
        (scalar**tx).sum().backward()
        assert x.grad is not None and tx.grad is not None
        _exact_zeros((scalar**x).numpy(), (scalar**tx).detach().numpy(), f"{scalar} ** x")
        _exact_zeros(x.grad.numpy(), tx.grad.numpy(), f"d/dx {scalar} ** x")


INT_POWERS: list[tuple[str, Callable[[Callable[..., Any]], Any]]] = [
    # m(values, dtype) makes a tensor of the library under test
    (
        "int32 ** int32",
        lambda m: m([0, 1, -1, 2, -1, 3, 2, 3, 7], "int32") ** m([-1, -1, -2, -1, -3, 0, 30, 19, 12], "int32"),
    ),
    ("int64 ** int64", lambda m: m([0, 1, -1, 2, -1, 3, -3], "int64") ** m([-1, -1, -2, -1, -3, 0, 13], "int64")),
    ("2 ** int32", lambda m: 2 ** m([0, 3, 10, 30, 31, 32], "int32")),
    ("2 ** int64", lambda m: 2 ** m([0, 3, 10, 29], "int64")),
    ("uint8 ** uint8", lambda m: m([3, 2, 5, 0], "uint8") ** m([5, 9, 1, 0], "uint8")),
    ("int8 ** 7", lambda m: m([2, 3, -2], "int8") ** 7),
    ("uint8 ** 2", lambda m: m([20, 3], "uint8") ** 2),
    ("int32 ** 0", lambda m: m([20, 3], "int32") ** 0),
    ("int32 ** 13", lambda m: m([3, -2], "int32") ** 13),
    ("bool ** 2", lambda m: m([True, False], "bool") ** 2),
    ("bool ** 2.0", lambda m: m([True, False], "bool") ** 2.0),
    ("bool ** int64 tensor", lambda m: m([True, False], "bool") ** m([2, 3], "int64")),
    ("int32 ** int64 tensor", lambda m: m([2, 3], "int32") ** m([2], "int64")),
    ("2.0 ** int32", lambda m: 2.0 ** m([2, 3, -1], "int32")),
    ("int32 ** 2.5", lambda m: m([2, 3], "int32") ** 2.5),
]


@pytest.mark.parametrize("name, fn", INT_POWERS, ids=[p[0] for p in INT_POWERS])
def test_integer_and_bool_powers_match_torch(name: str, fn: Callable[[Callable[..., Any]], Any]) -> None:
    got = fn(lambda v, dt: Tensor(np.array(v, dt), device=DEV))
    exp = fn(lambda v, dt: torch.from_numpy(np.array(v, dt)))
    assert got.dtype.name == str(exp.dtype).removeprefix("torch."), name
    _close(got.numpy(), exp.numpy(), name)


@pytest.mark.parametrize("exponent", [-1, -2])
def test_integer_tensor_to_a_negative_int_raises_as_torch(exponent: int) -> None:
    data = np.array([2, 3], np.int32)
    with pytest.raises(RuntimeError, match="negative integer powers") as torch_error:
        torch.from_numpy(data) ** exponent
    with pytest.raises(type(torch_error.value), match="negative integer powers"):
        Tensor(data, device=DEV) ** exponent


@pytest.mark.parametrize("name, data", [
    ("sinh", [88.0, 89.0, -89.0, 89.4, -89.4, 100.0, -100.0]),  # finite up to where the value overflows
    ("cosh", [88.0, 89.0, -89.0, 89.4, -89.4, 100.0, -100.0]),
    ("atanh", [0.999999, -0.999999, 0.9999, -0.9999, 1e-6, -1e-6, 1.0, -1.0]),  # both ends as accurate
    ("log1p", [2e-6, -1e-5, 1e-4, 3e-3, 0.05, -0.05, 0.0999, 0.1001, -0.3]),  # relative accuracy near 0
])  # fmt: skip
def test_inverse_and_hyperbolic_functions_near_their_edges_match_torch(name: str, data: list[float]) -> None:
    x = np.array(data, np.float32)
    a, t = Tensor(x, device=DEV, requires_grad=True), torch.tensor(x, requires_grad=True)
    ya, yt = getattr(a, name)(), getattr(t, name)()
    np.testing.assert_allclose(ya.numpy(), yt.detach().numpy(), rtol=1e-5, equal_nan=True, err_msg=name)
    ya.sum().backward()
    yt.sum().backward()
    assert a.grad is not None and t.grad is not None
    np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=1e-4, equal_nan=True, err_msg=f"d {name}")
    zero = getattr(Tensor(np.array([-0.0, 0.0], np.float32), device=DEV), name)().numpy()
    np.testing.assert_array_equal(np.signbit(zero), np.signbit(getattr(torch.tensor([-0.0, 0.0]), name)().numpy()))

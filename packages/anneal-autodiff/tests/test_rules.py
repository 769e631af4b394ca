"""Every VJP and JVP rule against central finite differences (float64), with a numpy oracle."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from reference import evaluate, leaf

from anneal_autodiff import compute_gradient, compute_tangents, vjp_rules
from anneal_autodiff.build import full, shape_of
from anneal_ir import Ops, UOp, dtypes

F64 = dtypes.float64
rng = np.random.default_rng(0)


def expand(u: UOp, shape: tuple[int, ...]) -> UOp:
    return UOp(Ops.EXPAND, u.dtype, (u,), shape)


def reshape(u: UOp, shape: tuple[int, ...]) -> UOp:
    return UOp(Ops.RESHAPE, u.dtype, (u,), shape)


def const_like(u: UOp, value: float) -> UOp:
    return full(shape_of(u), u, value)


# Each case: (name, input shapes, graph builder, positive-only inputs)
CASES: list[tuple[str, list[tuple[int, ...]], Callable[..., UOp], bool]] = [
    ("add", [(3, 4), (3, 4)], lambda a, b: a + b, False),
    ("mul", [(3, 4), (3, 4)], lambda a, b: a * b, False),
    ("neg", [(5,)], lambda a: -a, False),
    ("max", [(6,), (6,)], lambda a, b: a.alu(Ops.MAX, b), False),
    ("exp2", [(4,)], lambda a: a.alu(Ops.EXP2), False),
    ("log2", [(4,)], lambda a: a.alu(Ops.LOG2), True),
    ("sin", [(4,)], lambda a: a.alu(Ops.SIN), False),
    ("sqrt", [(4,)], lambda a: a.alu(Ops.SQRT), True),
    ("erf", [(6,)], lambda a: a.alu(Ops.ERF), False),
    ("reciprocal", [(4,)], lambda a: a.alu(Ops.RECIPROCAL), True),
    ("where", [(5,), (5,)], lambda a, b: UOp(Ops.WHERE, F64, (const_like(a, 0.0) < a, a * b, b)), False),
    ("reshape", [(2, 6)], lambda a: reshape(a, (3, 4)) * const_like(reshape(a, (3, 4)), 2.0), False),
    ("permute", [(2, 3, 4)], lambda a: UOp(Ops.PERMUTE, F64, (a,), (2, 0, 1)), False),
    ("expand", [(3, 1)], lambda a: expand(a, (3, 5)), False),
    ("pad", [(2, 3)], lambda a: UOp(Ops.PAD, F64, (a,), ((1, 0), (2, 1))), False),
    ("shrink", [(4, 5)], lambda a: UOp(Ops.SHRINK, F64, (a,), ((1, 3), (0, 4))), False),
    ("flip", [(3, 4)], lambda a: UOp(Ops.FLIP, F64, (a,), (1,)), False),
    ("sum", [(3, 4)], lambda a: UOp(Ops.REDUCE_AXIS, F64, (a,), (Ops.ADD, (1,))), False),
    ("max_reduce", [(3, 4)], lambda a: UOp(Ops.REDUCE_AXIS, F64, (a,), (Ops.MAX, (0,))), False),
    ("contiguous", [(3,)], lambda a: UOp(Ops.CONTIGUOUS, F64, (a,)), False),
    ("chain", [(3, 4), (4,)], lambda a, b: (a * expand(reshape(b, (1, 4)), (3, 4))).alu(Ops.SIN), False),
]  # fmt: skip


def _inputs(shapes: list[tuple[int, ...]], positive: bool) -> list[np.ndarray]:
    return [rng.uniform(0.5, 2.0, s) if positive else rng.standard_normal(s) for s in shapes]


def _numeric_grad(
    f: Callable[[list[np.ndarray]], float], xs: list[np.ndarray], i: int, eps: float = 1e-6
) -> np.ndarray:
    g = np.zeros_like(xs[i])
    for j in np.ndindex(xs[i].shape):
        up = [x.copy() for x in xs]
        dn = [x.copy() for x in xs]
        up[i][j] += eps
        dn[i][j] -= eps
        g[j] = (f(up) - f(dn)) / (2 * eps)
    return g


@pytest.mark.parametrize("name,shapes,build,positive", CASES, ids=[c[0] for c in CASES])
def test_vjp_matches_finite_differences(name: str, shapes: list, build: Callable, positive: bool) -> None:
    xs = _inputs(shapes, positive)
    leaves = [leaf(x) for x in xs]
    out = build(*leaves)
    weights = rng.standard_normal(shape_of(out))
    seed = leaf(weights)
    grads = compute_gradient(out, seed, set(leaves))

    def loss(values: list[np.ndarray]) -> float:
        return float((evaluate(out, dict(zip(leaves, values))) * weights).sum())

    for i, lf in enumerate(leaves):
        got = evaluate(grads[lf]) if lf in grads else np.zeros_like(xs[i])
        np.testing.assert_allclose(got, _numeric_grad(loss, xs, i), rtol=1e-5, atol=1e-6, err_msg=f"{name} input {i}")


@pytest.mark.parametrize("name,shapes,build,positive", CASES, ids=[c[0] for c in CASES])
def test_jvp_matches_finite_differences(name: str, shapes: list, build: Callable, positive: bool) -> None:
    xs = _inputs(shapes, positive)
    ts = [rng.standard_normal(x.shape) for x in xs]
    leaves = [leaf(x) for x in xs]
    out = build(*leaves)
    (tangent,) = compute_tangents([out], {lf: leaf(t) for lf, t in zip(leaves, ts)})
    eps = 1e-6
    up = evaluate(out, {lf: x + eps * t for lf, x, t in zip(leaves, xs, ts)})
    dn = evaluate(out, {lf: x - eps * t for lf, x, t in zip(leaves, xs, ts)})
    got = evaluate(tangent) if tangent is not None else np.zeros(shape_of(out))
    np.testing.assert_allclose(got, (up - dn) / (2 * eps), rtol=1e-5, atol=1e-6)


def test_no_gradient_through_comparisons_and_detach() -> None:
    x = leaf(rng.standard_normal(4))
    out = UOp(Ops.DETACH, F64, (x,)) * x
    grads = compute_gradient(out, const_like(out, 1.0), {x})
    np.testing.assert_allclose(evaluate(grads[x]), evaluate(UOp(Ops.DETACH, F64, (x,))))
    flags = (const_like(x, 0.0) < x).cast(F64)
    assert x not in compute_gradient(flags, const_like(flags, 1.0), {x})


def test_cast_passes_gradient_and_tangent_back_in_the_source_dtype() -> None:
    x = leaf(rng.standard_normal(3))
    y = x.cast(dtypes.float32)
    seed = leaf(np.array([1.0, 2.0, 3.0], np.float32))
    g = compute_gradient(y, seed, {x})[x]
    assert g.dtype == F64
    np.testing.assert_array_equal(evaluate(g), [1.0, 2.0, 3.0])
    (t,) = compute_tangents([y], {x: leaf(np.array([0.5, 1.0, 2.0]))})
    assert t is not None and t.dtype == dtypes.float32
    np.testing.assert_array_equal(evaluate(t), [0.5, 1.0, 2.0])
    ints = x.cast(dtypes.int32).cast(F64)  # through an integer: no gradient
    assert x not in compute_gradient(ints, const_like(ints, 1.0), {x})


def test_gradients_accumulate_over_uses() -> None:
    x = leaf(rng.standard_normal(3))
    out = x * x + x
    grads = compute_gradient(out, const_like(out, 1.0), {x})
    np.testing.assert_allclose(evaluate(grads[x]), 2 * evaluate(x) + 1)


def test_every_differentiable_op_has_a_rule() -> None:
    covered = {op for rule in vjp_rules.rules for op in (rule.pattern.ops or ())}
    differentiable = [
        Ops.ADD,
        Ops.MUL,
        Ops.NEG,
        Ops.MAX,
        Ops.EXP2,
        Ops.LOG2,
        Ops.SIN,
        Ops.SQRT,
        Ops.RECIPROCAL,
        Ops.ERF,
    ]
    differentiable += [Ops.WHERE, Ops.CAST, Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP]
    for op in [*differentiable, Ops.REDUCE_AXIS]:
        assert op in covered, op

"""Forward mode: every JVP rule against torch.func.jvp, and JVPs inside a loss that backward() differentiates.

Each primitive of the rule table (anneal_autodiff.jvp) is reached through the Tensor op that emits
it: exp2/log2/sin/sqrt/reciprocal/maximum/where/cast directly, movement ops and reductions by name.
A few composites check that the rules chain. The last tests differentiate a loss that contains a
JVP (MeanFlow's training objective does), in reverse mode, against torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from devices import HAS_F64

import anneal
import anneal.nn.functional as AF
from anneal import Tensor
from anneal.optim import realize_all
from anneal_autodiff import jvp_rules
from anneal_ir import Ops

RTOL = 1e-4
ATOL = 1e-5  # float32 tangents that are near 0 are sums with ~1e-6 absolute rounding error (see test_grad.py)


def N(*shape: int, seed: int = 0) -> np.ndarray:  # noqa: N802
    return np.random.default_rng(seed + 11 * len(shape) + sum(shape)).standard_normal(shape).astype(np.float32)


def U(lo: float, hi: float, *shape: int, seed: int = 0) -> np.ndarray:  # noqa: N802
    return np.random.default_rng(seed + 13 + sum(shape)).uniform(lo, hi, shape).astype(np.float32)


def check_jvp(fn: Callable[..., Any], tfn: Callable[..., Any] | None, primals: list[np.ndarray],
              rtol: float = RTOL, atol: float = ATOL, read_first: bool = False) -> None:  # fmt: skip
    """With read_first, fn reads its outputs' values before returning them (the tangents go through)."""
    tfn = tfn or fn

    def reading(*args: Tensor) -> Any:
        out = fn(*args)
        realize_all(list(out) if isinstance(out, tuple) else [out])
        return out

    tangents = [N(*p.shape, seed=100 + i) for i, p in enumerate(primals)]
    out, tan = anneal.jvp(reading if read_first else fn, [Tensor(p) for p in primals], [Tensor(t) for t in tangents])
    tout, ttan = torch.func.jvp(tfn, tuple(torch.tensor(p) for p in primals), tuple(torch.tensor(t) for t in tangents))
    outs, tans = (list(out), list(tan)) if isinstance(out, tuple) else ([out], [tan])
    touts, ttans = (list(tout), list(ttan)) if isinstance(tout, tuple) else ([tout], [ttan])
    realize_all([*outs, *tans])
    for a, t in zip(outs, touts):
        np.testing.assert_allclose(a.numpy(), t.numpy(), rtol=rtol, atol=atol, err_msg="primal output")
    for a, t in zip(tans, ttans):
        assert a.shape == tuple(t.shape)
        np.testing.assert_allclose(a.numpy(), t.numpy(), rtol=rtol, atol=atol, err_msg="tangent")


def case(name: str, fn: Callable[..., Any], primals: list[np.ndarray], tfn: Callable[..., Any] | None = None) -> Any:
    return pytest.param(fn, tfn, primals, id=name)


X, Y = N(3, 4), N(3, 4, seed=1)
POS = U(0.5, 2.0, 3, 4)


def _torch_causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """torch's fused CPU attention has no forward-mode rule, so the reference is written out."""
    scores = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
    return scores.masked_fill(~keep, float("-inf")).softmax(-1) @ v


PRIMITIVES = [
    case("add", lambda x, y: x + y, [X, Y]),
    case("add_broadcast", lambda x, y: x + y, [X, N(4, seed=1)]),
    case("mul", lambda x, y: x * y, [X, Y]),
    case("mul_scalar", lambda x: x * 3.0, [X]),
    case("neg", lambda x: -x, [X]),
    case("maximum", lambda x, y: x.maximum(y), [X, Y], torch.maximum),
    # torch's tangent at a tie is the mean of the two tangents, as anneal's rule
    case(
        "maximum_ties",
        lambda x, y: x.maximum(y),
        [np.array([1.0, 2.0, 3.0], np.float32), np.array([1.0, 0.0, 3.0], np.float32)],
        torch.maximum,
    ),
    case("exp2", lambda x: x.exp2(), [X]),
    case("log2", lambda x: x.log2(), [POS]),
    case("sin", lambda x: x.sin(), [X]),
    case("sqrt", lambda x: x.sqrt(), [POS]),
    case("erf", lambda x: x.erf(), [X]),
    case("reciprocal", lambda x: x.reciprocal(), [POS]),
    case("where", lambda x, y: anneal.where(Tensor(X > 0), x, y), [X, Y], lambda x, y: torch.where(x > 0, x, y)),
    case("cast_f64_roundtrip", lambda x: ((x.double() if HAS_F64 else x.float()) * 2).float(), [X]),
    case("cast_f16", lambda x: x.half().float(), [np.array([0.5, -2.0, 3.25], np.float32)]),
    case("trunc_zero_tangent", lambda x: x.trunc() + x, [U(-3, 3, 3, 4)]),
    case("compare_where_zero_tangent", lambda x: (x > 0).float() * x, [X]),
    case("detach_zero_tangent", lambda x: x.detach() * x, [X], lambda x: x * x.detach()),
    case("reshape", lambda x: x.reshape(2, 6), [X]),
    case("permute", lambda x: x.permute(2, 0, 1), [N(2, 3, 4)]),
    case("expand", lambda x: x.expand(2, 3, 4), [N(3, 1)]),
    case("pad", lambda x: AF.pad(x, (1, 2, 0, 1)), [X], lambda x: TF.pad(x, (1, 2, 0, 1))),
    case("shrink", lambda x: x[1:3, 1:], [X]),
    case("flip", lambda x: x.flip(1), [X]),
    case("contiguous", lambda x: x.contiguous() * 2, [X]),
    case("sum", lambda x: x.sum(1), [N(2, 3, 4)]),
    case("sum_all", lambda x: x.sum(), [X]),
    case("max", lambda x: x.amax(1), [N(2, 3, 4)], lambda x: x.amax(1)),
    case(
        "max_ties", lambda x: x.amax(1), [np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]], np.float32)], lambda x: x.amax(1)
    ),
]

COMPOSITES = [
    case("exp_log", lambda x: x.exp() + x.log(), [POS]),
    case("pow", lambda x, y: x**y, [POS, Y]),
    case("div", lambda x, y: x / y, [X, POS]),
    case("tanh_sigmoid", lambda x: x.tanh() * x.sigmoid(), [X]),
    case("softmax", lambda x: x.softmax(-1), [X]),
    case("log_softmax", lambda x: x.log_softmax(0), [X]),
    case(
        "layer_norm", lambda x, w: AF.layer_norm(x, (4,), w), [X, N(4, seed=2)], lambda x, w: TF.layer_norm(x, (4,), w)
    ),
    case("gelu", lambda x: AF.gelu(x), [X], TF.gelu),
    case("matmul_mlp", lambda x, w1, w2: (x @ w1).tanh() @ w2, [X, N(4, 5, seed=2), N(5, 2, seed=3)]),
    case(
        "conv2d",
        lambda x, w: AF.conv2d(x, w, padding=1),
        [N(1, 2, 5, 5), N(3, 2, 3, 3, seed=1)],
        lambda x, w: TF.conv2d(x, w, padding=1),
    ),
    case(
        "sdpa_causal",
        lambda q, k, v: AF.scaled_dot_product_attention(q, k, v, is_causal=True),
        [N(1, 2, 4, 8), N(1, 2, 4, 8, seed=1), N(1, 2, 4, 8, seed=2)],
        lambda q, k, v: _torch_causal_attention(q, k, v),
    ),
    case("multiple_outputs", lambda x, y: (x * y, (x + y).sum(0)), [X, Y]),
]


@pytest.mark.parametrize("fn, tfn, primals", PRIMITIVES + COMPOSITES)
def test_jvp_matches_torch(fn: Callable[..., Any], tfn: Callable[..., Any] | None, primals: list[np.ndarray]) -> None:
    check_jvp(fn, tfn, primals)


@pytest.mark.parametrize("fn, tfn, primals", PRIMITIVES + COMPOSITES)
def test_jvp_through_values_read_inside(fn: Callable[..., Any], tfn: Callable[..., Any] | None,
                                        primals: list[np.ndarray]) -> None:  # fmt: skip
    check_jvp(fn, tfn, primals, read_first=True)


def test_every_jvp_rule_is_exercised() -> None:
    """The cases above reach every op of the rule table (a new rule needs a case here)."""
    covered = {Ops.ADD, Ops.MUL, Ops.NEG, Ops.MAX, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.WHERE,
               Ops.ERF, Ops.CAST, Ops.TRUNC, Ops.CMPLT, Ops.DETACH, Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD,
               Ops.SHRINK,
               Ops.FLIP, Ops.CONTIGUOUS, Ops.REDUCE_AXIS, Ops.REALIZED}  # fmt: skip
    covered.add(Ops.COPY)  # test_to_device.py: test_jvp_through_a_copy_between_devices
    covered.add(Ops.CUSTOM_VJP)  # the conv2d case: a stride-1 convolution carries its own gradient rule
    # integer/bitwise ops and the other comparisons share zero_jvp with CMPLT/TRUNC/DETACH above
    zero_like = {
        Ops.CMPNE,
        Ops.CMPEQ,
        Ops.IDIV,
        Ops.MOD,
        Ops.AND,
        Ops.OR,
        Ops.XOR,
        Ops.SHL,
        Ops.SHR,
        Ops.BITCAST,
        Ops.THREEFRY,
    }
    ruled = {op for op in Ops if jvp_rules.rules_for(op)}
    assert ruled - covered - zero_like == set(), f"rules without a test case: {ruled - covered - zero_like}"


def test_tangent_of_unrelated_output_is_zero() -> None:
    c = Tensor(N(3))
    out, tan = anneal.jvp(lambda x: c * 2, [Tensor(N(3, seed=1))], [Tensor(N(3, seed=2))])
    np.testing.assert_array_equal(tan.numpy(), np.zeros(3, np.float32))


def test_jvp_rejects_mismatched_tangent() -> None:
    with pytest.raises(RuntimeError, match="tangent shape"):
        anneal.jvp(lambda x: x, [Tensor(N(3))], [Tensor(N(4))])


# ---- a loss that contains a JVP, differentiated in reverse mode ----


def test_backward_through_jvp_matches_torch() -> None:
    """d/dW of a loss built from f(x) and its JVP, where f depends on the weights W."""
    wn, xn, vn = N(4, 4, seed=5), N(4, seed=6), N(4, seed=7)
    w = Tensor(wn, requires_grad=True)
    x = Tensor(xn, requires_grad=True)
    out, tan = anneal.jvp(lambda x: (w @ x).tanh() * x, [x], [Tensor(vn)])
    loss = tan.square().sum() + out.sum()
    loss.backward()

    tw, tx = torch.tensor(wn, requires_grad=True), torch.tensor(xn, requires_grad=True)
    tout, ttan = torch.func.jvp(lambda x: (tw @ x).tanh() * x, (tx,), (torch.tensor(vn),))
    tloss = ttan.square().sum() + tout.sum()
    tloss.backward()
    assert w.grad is not None and x.grad is not None and tw.grad is not None and tx.grad is not None
    realize_all([loss, w.grad, x.grad])
    np.testing.assert_allclose(loss.numpy(), tloss.detach().numpy(), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=RTOL, atol=ATOL)


def test_meanflow_style_loss_matches_torch() -> None:
    """MeanFlow: u(z, r, t) and du/dt along (v, 0, 1) by JVP; target = v - (t - r) du/dt, stop-gradient;
    loss = |u - target|^2. Gradients of the network's weights against torch."""
    b, d, h = 4, 3, 8
    rng = np.random.default_rng(0)
    w1n = (rng.standard_normal((d + 2, h)) * 0.5).astype(np.float32)
    w2n = (rng.standard_normal((h, d)) * 0.5).astype(np.float32)
    zn, vn = rng.standard_normal((b, d)).astype(np.float32), rng.standard_normal((b, d)).astype(np.float32)
    tn = rng.uniform(0.2, 1.0, (b, 1)).astype(np.float32)
    rn = (tn * rng.uniform(0, 1, (b, 1))).astype(np.float32)

    def u_anneal(z: Tensor, r: Tensor, t: Tensor) -> Tensor:
        return AF.silu(anneal.cat([z, r, t], 1) @ w1) @ w2

    w1, w2 = Tensor(w1n, requires_grad=True), Tensor(w2n, requires_grad=True)
    z, r, t, v = Tensor(zn), Tensor(rn), Tensor(tn), Tensor(vn)
    u, dudt = anneal.jvp(u_anneal, [z, r, t], [v, r.zeros_like(), t.ones_like()])
    target = (v - (t - r) * dudt).detach()
    loss = (u - target).square().mean()
    loss.backward()

    tw1, tw2 = torch.tensor(w1n, requires_grad=True), torch.tensor(w2n, requires_grad=True)

    def u_torch(z: torch.Tensor, r: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return TF.silu(torch.cat([z, r, t], 1) @ tw1) @ tw2

    tz, tr, tt, tv = (torch.tensor(a) for a in (zn, rn, tn, vn))
    tu, tdudt = torch.func.jvp(u_torch, (tz, tr, tt), (tv, torch.zeros_like(tr), torch.ones_like(tt)))
    ttarget = (tv - (tt - tr) * tdudt).detach()
    tloss = (tu - ttarget).square().mean()
    tloss.backward()
    assert w1.grad is not None and w2.grad is not None and tw1.grad is not None and tw2.grad is not None
    realize_all([loss, w1.grad, w2.grad])
    np.testing.assert_allclose(loss.numpy(), tloss.detach().numpy(), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(w1.grad.numpy(), tw1.grad.numpy(), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(w2.grad.numpy(), tw2.grad.numpy(), rtol=RTOL, atol=ATOL)


def test_meanflow_without_stop_gradient_matches_torch() -> None:
    """The same objective with the JVP term left in the graph: backward must go through the tangent rules."""
    rng = np.random.default_rng(1)
    wn = (rng.standard_normal((3, 3)) * 0.7).astype(np.float32)
    xn, tn = rng.standard_normal((5, 3)).astype(np.float32), rng.uniform(0, 1, (5, 1)).astype(np.float32)
    w = Tensor(wn, requires_grad=True)
    u, dudt = anneal.jvp(lambda x, t: ((x @ w) * t).sin(), [Tensor(xn), Tensor(tn)],
                         [Tensor(xn), Tensor(np.ones_like(tn))])  # fmt: skip
    loss = (u + 0.5 * dudt).square().mean()
    loss.backward()
    tw = torch.tensor(wn, requires_grad=True)
    tu, tdudt = torch.func.jvp(lambda x, t: ((x @ tw) * t).sin(), (torch.tensor(xn), torch.tensor(tn)),
                               (torch.tensor(xn), torch.ones(5, 1)))  # fmt: skip
    (tu + 0.5 * tdudt).square().mean().backward()
    assert w.grad is not None and tw.grad is not None
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=RTOL, atol=ATOL)

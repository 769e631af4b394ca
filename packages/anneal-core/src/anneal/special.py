"""Elementwise functions built from the primitive ALU ops, each with its exact derivative.

The values are compositions: atan is a range-reduced Taylor series, the others follow from it, from exp
and from log. The gradients are the textbook derivatives, given as rules (`with_gradient`), so a gradient
is as accurate as the derivative's formula, never the derivative of an approximation, and a `where` between
branches never turns an unused branch's inf into a NaN gradient. A rule's own tensors are differentiable,
so second order works.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from anneal.composite import with_gradient

if TYPE_CHECKING:
    from anneal.tensor import Tensor

TAN_PI_8 = math.tan(math.pi / 8)
ATAN_TERMS = 10  # atan(t) for |t| <= tan(pi/8): the Taylor terms up to t^19 (the next, t^21/21, is < 1e-9)
LN2 = math.log(2)
LOG1P_SERIES_BELOW, LOG1P_TERMS = 0.1, 9  # log1p(x) = x - x^2/2 + ... for |x| < 0.1: 9 terms (x^10/10 < 1e-9 x)


def log1p(x: Tensor) -> Tensor:
    """log(1 + x), accurate near 0: log(u) corrected by the rounding error of u = 1 + x (Goldberg's form)."""
    from anneal.tensor import where

    x = x._float()
    u = 1 + x
    exact = u == 1  # 1 + x rounded to 1: log1p(x) is x
    infinite = u == math.inf  # inf / inf would be NaN; log1p(-inf) is NaN as it should be
    corrected = u.log() * (x / where(exact | infinite, 1.0, u - 1))
    # near 0 by its series: WGSL's log2 is only 2^-21 accurate in absolute terms on [0.5, 2] (lavapipe's is), which
    # is all of log1p(1e-6); the terms to x^9 leave less than 1e-9 relative below 0.1
    series = x * 0.0
    for k in range(LOG1P_TERMS, 0, -1):
        series = x * ((1.0 if k % 2 else -1.0) / k + series)
    small = x.abs() < LOG1P_SERIES_BELOW
    return with_gradient(where(exact, x, where(small, series, where(infinite, u, corrected))), (x,), _log1p_gradient)


def _log1p_gradient(g: Tensor, x: Tensor) -> tuple[Tensor]:
    return (g / (1 + x),)


def expm1(x: Tensor) -> Tensor:
    """exp(x) - 1, accurate near 0 (Kahan: (e^x - 1) * x / log(e^x))."""
    from anneal.tensor import where

    x = x._float()
    u = x.exp()
    small = u == 1
    value = where(small, x, where(u - 1 == -1, -1.0, (u - 1) * x / where(small, 1.0, u.log())))
    return with_gradient(where(u.isinf(), u, value), (x,), _expm1_gradient)


def _expm1_gradient(g: Tensor, x: Tensor) -> tuple[Tensor]:
    return (g * x.exp(),)


def atan(x: Tensor) -> Tensor:
    from anneal.tensor import where

    x = x._float()
    a = x.abs()
    big = a > 1
    r = where(big, 1 / where(big, a, 1.0), a)  # atan(a) = pi/2 - atan(1/a)
    mid = r > TAN_PI_8
    t = where(mid, (r - 1) / (r + 1), r)  # atan(r) = pi/4 + atan((r - 1) / (r + 1))
    t2 = t * t
    series = t2 * ((-1) ** (ATAN_TERMS - 1) / (2 * ATAN_TERMS - 1))  # Horner over (-1)^k t2^k / (2k + 1)
    for k in range(ATAN_TERMS - 2, -1, -1):
        series = (series + (-1) ** k / (2 * k + 1)) * (t2 if k else 1)
    v = t * series + where(mid, math.pi / 4, 0.0)
    v = where(big, math.pi / 2 - v, v)
    return with_gradient(where(x < 0, -v, v), (x,), _atan_gradient)


def _atan_gradient(g: Tensor, x: Tensor) -> tuple[Tensor]:
    return (g / (1 + x * x),)


def asin(x: Tensor) -> Tensor:
    x = x._float()
    return with_gradient(atan(x / (1 - x * x).sqrt()), (x,), _asin_gradient)


def _asin_gradient(g: Tensor, x: Tensor) -> tuple[Tensor]:
    return (g / (1 - x * x).sqrt(),)


def acos(x: Tensor) -> Tensor:
    x = x._float()
    return with_gradient((math.pi / 2 - asin(x)), (x,), _acos_gradient)


def _acos_gradient(g: Tensor, x: Tensor) -> tuple[Tensor]:
    return (-g / (1 - x * x).sqrt(),)


def sinh(x: Tensor) -> Tensor:
    from anneal.tensor import where

    x = x._float()
    small = x.abs() < 1
    half = _half_exp(x)
    large = where(x < 0, -1.0, 1.0) * (half - 0.25 / half)
    return with_gradient(where(small, 0.5 * (expm1(x) - expm1(-x)), large), (x,), _sinh_gradient)


def _half_exp(x: Tensor) -> Tensor:
    """e^|x| / 2 as e^(|x|/2) * (e^(|x|/2) / 2): finite up to |x| = 89.4, where sinh and cosh themselves overflow
    (e^|x| would at 88.7; and exp2 near 2^128 is clamped on the cpu backend)."""
    h = (x.abs() * 0.5).exp()
    return h * (h * 0.5)


def _sinh_gradient(g: Tensor, x: Tensor) -> tuple[Tensor]:
    return (g * cosh(x),)


def cosh(x: Tensor) -> Tensor:
    x = x._float()
    half = _half_exp(x)
    return with_gradient(half + 0.25 / half, (x,), _cosh_gradient)


def _cosh_gradient(g: Tensor, x: Tensor) -> tuple[Tensor]:
    return (g * sinh(x),)


def asinh(x: Tensor) -> Tensor:
    from anneal.tensor import where

    x = x._float()
    a = x.abs()
    huge = a > 1e8  # a * a would lose a or overflow: asinh(a) = log(2a) to float precision
    safe = where(huge, 1.0, a)
    near = log1p(safe + safe * safe / (1 + (safe * safe + 1).sqrt()))
    v = where(huge, where(huge, a, 1.0).log() + LN2, near)
    return with_gradient(where(x < 0, -v, v), (x,), _asinh_gradient)


def _asinh_gradient(g: Tensor, x: Tensor) -> tuple[Tensor]:
    return (g / (x * x + 1).sqrt(),)


def acosh(x: Tensor) -> Tensor:
    from anneal.tensor import where

    x = x._float()
    huge = x > 1e8
    safe = where(huge, 2.0, x)
    v = where(huge, where(huge, x, 1.0).log() + LN2, log1p(safe - 1 + ((safe - 1) * (safe + 1)).sqrt()))
    return with_gradient(v, (x,), _acosh_gradient)


def _acosh_gradient(g: Tensor, x: Tensor) -> tuple[Tensor]:
    return (g / ((x - 1) * (x + 1)).sqrt(),)


def atanh(x: Tensor) -> Tensor:
    """An odd function, computed at |x| (where 2|x| / (1 - |x|) is positive and log1p exact near -1 too), then
    given x's sign (-0.0's included)."""
    from anneal.tensor import where

    x = x._float()
    a = x.abs()
    v = where(x == 0, x, _copysign(0.5 * log1p(2 * a / (1 - a)), x))  # a zero is its own atanh, sign and all
    return with_gradient(v, (x,), _atanh_gradient)


def _atanh_gradient(g: Tensor, x: Tensor) -> tuple[Tensor]:
    return (g / (1 - x * x),)


def logaddexp(a: Tensor, b: Tensor) -> Tensor:
    from anneal.tensor import where

    m = a.maximum(b)
    v = m + log1p((-(a - b).abs()).exp())
    return with_gradient(where(a == b, a + LN2, v), (a, b), _logaddexp_gradient)


def _logaddexp_gradient(g: Tensor, a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    share = ((b - a).exp() + 1).reciprocal()  # a's share of the sum: sigmoid(a - b)
    return g * share, g * (1 - share)


def copysign(a: Tensor, b: Tensor) -> Tensor:
    """|a| with b's sign bit (-0.0 counts as negative); b gets a zero gradient, as in torch."""
    return with_gradient(_copysign(a, b), (a, b), _copysign_gradient)


def _copysign(a: Tensor, b: Tensor) -> Tensor:
    from anneal.tensor import where

    negative = (b < 0) | ((b == 0) & (b.reciprocal() < 0))
    return where(negative, -a.abs(), a.abs())


def _copysign_gradient(g: Tensor, a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    return g * a.sign() * _copysign(a.sign() + (a == 0), b).sign(), b.zeros_like()


def sigmoid(x: Tensor) -> Tensor:
    """1 / (1 + e^-x); its derivative s (1 - s) stays finite where e^-x overflows (x = -300)."""
    x = x._float()
    return with_gradient((1 + (-x).exp()).reciprocal(), (x,), _sigmoid_gradient)


def _sigmoid_gradient(g: Tensor, x: Tensor) -> tuple[Tensor]:
    s = sigmoid(x)
    return (g * s * (1 - s),)


def softplus(x: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + e^(beta x)) / beta, linear above threshold as torch; finite everywhere (softplus(350) = 350)."""
    from anneal.tensor import where

    x = x._float()
    bx = x * beta
    stable = bx.maximum(0) + log1p((-bx.abs()).exp())
    return with_gradient(where(bx > threshold, x, stable / beta), (x,), _softplus_gradient, beta=beta,
                         threshold=threshold)  # fmt: skip


def _softplus_gradient(g: Tensor, x: Tensor, *, beta: float, threshold: float) -> tuple[Tensor]:
    from anneal.tensor import where

    bx = x * beta
    return (where(bx > threshold, g, g * sigmoid(bx)),)

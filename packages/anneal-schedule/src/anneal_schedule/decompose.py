"""Ops no target computes natively, rewritten into ones every target has (rules as data).

These are primitives of the graph because that is where they are one thing: ERF so GELU's gradient
is one rule; THREEFRY so a random draw is one node the scheduler never splits, whatever kernel reads
it. After scheduling they are expanded, once, here, for every renderer:

- ERF becomes Abramowitz & Stegun 7.1.26 (max abs error 1.5e-7): adds, multiplies, one reciprocal
  and one exp2;
- THREEFRY becomes Threefry-2x32 with 20 rounds (Salmon et al., 2011; JAX's and Random123's
  generator): uint32 adds, xors and rotations.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from anneal_ir import Ops, PatternMatcher, UOp, UPat, graph_rewrite

_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
_P = 0.3275911


def erf_polynomial(x: UOp) -> UOp:
    def c(v: float) -> UOp:
        return x.const_like(v)

    a = x.alu(Ops.MAX, x.alu(Ops.NEG))  # |x|
    t = (c(1.0) + c(_P) * a).alu(Ops.RECIPROCAL)
    p = c(_A[4])
    for coeff in reversed(_A[:4]):
        p = c(coeff) + t * p
    p = t * p
    e = ((a * a).alu(Ops.NEG) * c(1 / math.log(2))).alu(Ops.EXP2)
    sign = UOp(Ops.WHERE, x.dtype, (c(0.0) < x, c(1.0), UOp(Ops.WHERE, x.dtype, (x < c(0.0), c(-1.0), c(0.0)))))
    return sign * (c(1.0) - p * e)


def _erf(x: UOp) -> UOp:
    return erf_polynomial(x.src[0])


ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)  # Threefry-2x32's rotation constants
PARITY = 0x1BD11BDA  # the key schedule's parity constant


def threefry_rounds(k0: Any, k1: Any, c0: Any, c1: Any, xor: Callable[[Any, Any], Any],
                    rotl: Callable[[Any, int], Any], const: Callable[[int], Any]) -> tuple[Any, Any]:  # fmt: skip
    """Threefry-2x32-20 of counter words (c0, c1) under key words (k0, k1), over any representation of
    wrapping uint32 values with +, xor, a left rotation and constants (graph nodes, numpy arrays)."""
    ks = (k0, k1, xor(xor(k0, k1), const(PARITY)))
    x0, x1 = c0 + ks[0], c1 + ks[1]
    for r in range(20):
        x0 = x0 + x1
        x1 = xor(rotl(x1, ROTATIONS[r % 8]), x0)
        if r % 4 == 3:  # key injection s after every four rounds
            s = (r + 1) // 4
            x0, x1 = x0 + ks[s % 3], x1 + ks[(s + 1) % 3] + const(s)
    return x0, x1


def _uop_rotl(x: UOp, r: int) -> UOp:
    return x.alu(Ops.SHL, x.const_like(r)).alu(Ops.OR, x.alu(Ops.SHR, x.const_like(32 - r)))


def _threefry(x: UOp) -> UOp:
    k0, k1, c0, c1 = x.src
    words = threefry_rounds(k0, k1, c0, c1, lambda a, b: a.alu(Ops.XOR, b), _uop_rotl, k0.const_like)
    return words[x.arg]


decompositions = PatternMatcher([
    (UPat(Ops.ERF, name="x"), _erf),
    (UPat(Ops.THREEFRY, name="x"), _threefry),
], "decompose")  # fmt: skip


def decompose(ast: UOp) -> UOp:
    """ast with every primitive expanded (the numpy renderer's way; the lowering expands one node at a time)."""
    return graph_rewrite(ast, decompositions, name="decompose")

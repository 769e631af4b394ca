"""Symbolic sizes: canonical products, evaluation, bounds and errors."""

from __future__ import annotations

import pytest

from anneal_ir import Ops, UOp
from anneal_ir.sint import (
    UnboundVariableError,
    Variable,
    bound_values,
    render_shape,
    resolve,
    sdiv,
    smul,
    sprod,
    upper,
    variables,
)


def test_equal_sizes_are_the_same_node() -> None:
    b = Variable("batch", 1, 64)
    assert smul(b, 6) is smul(6, b) is sprod((b, 2, 3)) is sprod((3, b, 2))
    assert sdiv(smul(b, 12), 4) is smul(b, 3)
    assert sprod((2, 3)) == 6 and smul(b, 1) is b and smul(1, b) is b


def test_resolve_upper_and_render() -> None:
    b, t = Variable("batch", 1, 64), Variable("time", 2, 8)
    size = sprod((b, t, 4))
    assert resolve(size, {"batch": 5, "time": 3}) == 60
    assert upper(size) == 64 * 8 * 4 and upper(7) == 7
    assert render_shape((b, smul(t, 4))) == "(batch, time*4)"
    assert render_shape((smul(b, 2),)) == "(batch*2,)"
    assert [v.arg[0] for v in variables((t, smul(b, 2), 3))] == ["batch", "time"]
    with pytest.raises(UnboundVariableError, match="'time' has no value"):
        resolve(size, {"batch": 5})


def test_bind_checks_bounds_and_values_are_collected() -> None:
    b = Variable("batch", 2, 8)
    bound = b.bind(5)
    assert bound.op is Ops.BIND and bound.vmin == bound.vmax == 5
    assert bound_values(UOp(Ops.SINK, src=(bound, b.bind(5)))) == {"batch": 5}
    with pytest.raises(ValueError, match="bound to both 5 and 6"):
        bound_values(UOp(Ops.SINK, src=(bound, b.bind(6))))
    for bad in (1, 9, 2.5, True):
        with pytest.raises(ValueError, match=r"outside its bounds \[2, 8\]"):
            b.bind(bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="only a Variable can be bound"):
        UOp.const(b.dtype, 3).bind(3)


def test_a_variable_is_a_bounded_leaf() -> None:
    b = Variable("batch", 3, 9)
    assert (b.vmin, b.vmax) == (3, 9) and b.shape == ()
    assert repr(b) == "Variable('batch', 3, 9)"
    assert (smul(b, 4).vmin, smul(b, 4).vmax) == (12, 36)

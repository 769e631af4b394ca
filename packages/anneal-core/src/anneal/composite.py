"""Composites with a gradient rule of their own: the forward an ordinary graph, the backward given as code.

JAX's ``custom_vjp`` for a lazy graph. ``with_gradient(value, primals, rule, **params)`` evaluates to
value (the scheduler drops the node), but reverse mode asks ``rule(grad, *primals, **params)`` for the
primals' gradients instead of differentiating value's graph; forward mode (``anneal.jvp``) still runs
through that graph. A convolution uses it: its input gradient is a convolution again (one tiled
contraction), where differentiating its window view gives a scatter back through the windows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from anneal_ir import Ops, UOp

if TYPE_CHECKING:
    from anneal.tensor import Tensor

Rule = Callable[..., Sequence["Tensor | None"]]


@dataclass(frozen=True)
class GradientRule:
    """The arg of a CUSTOM_VJP node: the rule, its static parameters and the device its tensors live on."""

    fn: Rule
    params: tuple[tuple[str, Any], ...]
    device: str

    def vjp(self, grad: UOp, primals: tuple[UOp, ...]) -> tuple[UOp | None, ...]:
        from anneal.tensor import Tensor

        ts = [Tensor._from(p, self.device) for p in primals]
        out = tuple(self.fn(Tensor._from(grad, self.device), *ts, **dict(self.params)))
        if len(out) != len(ts):
            raise TypeError(f"gradient rule {self.fn.__qualname__} gave {len(out)} gradients for {len(ts)} primals")
        for g, p in zip(out, ts):
            if g is not None and g.shape != p.shape:
                raise ValueError(f"gradient rule {self.fn.__qualname__}: a gradient of shape {g.shape} for a "
                                 f"primal of shape {p.shape}")  # fmt: skip
        return tuple(None if g is None else g.cast(p.dtype).uop for g, p in zip(out, ts))

    def content_key(self) -> str:
        return f"{self.fn.__module__}.{self.fn.__qualname__}{self.params!r}@{self.device}"


def with_gradient(value: Tensor, primals: Sequence[Tensor], rule: Rule, **params: Any) -> Tensor:
    """value, differentiated by rule(grad, *primals, **params) -> one gradient (or None) per primal.

    The primals must be what value was computed from; params must be hashable (they are part of the node)."""
    arg = GradientRule(rule, tuple(sorted(params.items())), value.device)
    node = UOp(Ops.CUSTOM_VJP, value.dtype, (value.uop, *(p.uop for p in primals)), arg)
    return value._new(node, *primals)

"""Tensor-level entry points of autodiff: backward(), gradient() and jvp().

The rules live in anneal_autodiff and work on UOps; this module maps tensors to graph
nodes and back. Leaves that require grad are tracked weakly, like torch's leaf tensors.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from anneal_autodiff import compute_gradient, compute_tangents
from anneal_autodiff.build import full

if TYPE_CHECKING:
    from anneal.tensor import Tensor

_leaves: weakref.WeakSet[Tensor] = weakref.WeakSet()


def track_leaf(t: Tensor) -> None:
    _leaves.add(t)


def untrack_leaf(t: Tensor) -> None:
    _leaves.discard(t)


def _seed(out: Tensor, gradient: Tensor | None) -> Any:
    if gradient is not None:
        if gradient.shape != out.shape:
            raise ValueError(f"backward: gradient shape {gradient.shape} does not match output shape {out.shape}")
        return gradient.cast(out.dtype).uop
    if out.numel() != 1:
        raise RuntimeError(f"backward: grad can be implicitly created only for scalar outputs, got shape {out.shape};"
                           " pass gradient=")  # fmt: skip
    return full(out.shape, out.uop, 1.0)


def backward(out: Tensor, gradient: Tensor | None = None) -> None:
    """Accumulate d(out)/d(leaf) into .grad of every leaf that requires grad, like torch."""
    from anneal.tensor import Tensor

    if not out.dtype.is_float:
        raise RuntimeError(f"backward: only floating point outputs have gradients, got {out.dtype.name}")
    in_graph = set(out.uop.toposort())
    leaves = [t for t in list(_leaves) if t.requires_grad and t.uop in in_graph]
    if not leaves:
        raise RuntimeError("backward: the output does not depend on any tensor with requires_grad=True")
    grads = compute_gradient(out.uop, _seed(out, gradient), {t.uop for t in leaves})
    for t in leaves:
        g = grads.get(t.uop)
        if g is None:
            continue
        gt = Tensor._from(g, t.device)
        t.grad = gt if t.grad is None else t.grad + gt


def gradient(out: Tensor, targets: Sequence[Tensor], gradient: Tensor | None = None) -> list[Tensor]:
    """Lazy gradients of out with respect to targets (zeros where out does not depend on one)."""
    from anneal.tensor import Tensor

    grads = compute_gradient(out.uop, _seed(out, gradient), {t.uop for t in targets})
    return [Tensor._from(grads[t.uop], t.device) if t.uop in grads else t.zeros_like() for t in targets]


def jvp(fn: Callable[..., Any], primals: Sequence[Tensor], tangents: Sequence[Tensor]) -> tuple[Any, Any]:
    """Forward-mode derivative, as torch.func.jvp: returns (fn(*primals), J @ tangents)."""
    from anneal.tensor import Tensor

    primals, tangents = tuple(primals), tuple(tangents)
    if len(primals) != len(tangents):
        raise ValueError(f"jvp: {len(primals)} primals but {len(tangents)} tangents")
    for p, t in zip(primals, tangents):
        if p.shape != t.shape:
            raise ValueError(f"jvp: primal shape {p.shape} and tangent shape {t.shape} differ")
    out = fn(*primals)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    tmap = {p.uop: t.cast(p.dtype).uop for p, t in zip(primals, tangents)}
    ts = compute_tangents([o.uop for o in outs], tmap)
    out_t = [Tensor._from(t, o.device) if t is not None else o.zeros_like() for o, t in zip(outs, ts)]
    return out, (tuple(out_t) if isinstance(out, (tuple, list)) else out_t[0])

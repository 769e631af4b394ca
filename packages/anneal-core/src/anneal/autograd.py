"""Tensor-level entry points of autodiff: backward(), gradient() and jvp().

The rules live in anneal_autodiff and work on UOps; this module maps tensors to graph
nodes and back. Leaves that require grad are tracked weakly, like torch's leaf tensors.

A tensor whose value was read (item, numpy, realize) keeps the graph that computed it
(a REALIZED node), so backward() after a read differentiates through it, and the
derivative graph reads the values already computed instead of recomputing them.
"""

from __future__ import annotations

import contextvars
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from anneal.errors import ShapeError
from anneal.realize import wait_for_writes
from anneal_autodiff import compute_gradient, compute_tangents
from anneal_autodiff.build import full
from anneal_ir import Ops, PatternMatcher, UOp, UPat, graph_rewrite

if TYPE_CHECKING:
    from anneal.tensor import Tensor

# keyed by id(): a Tensor's == is elementwise, so it cannot sit in a (Weak)Set
_leaves: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()
# > 0 while jvp() runs its function: every value read inside keeps its graph, for the tangents
_forward_mode: contextvars.ContextVar[int] = contextvars.ContextVar("forward_mode", default=0)


def keeps_history(t: Tensor) -> bool:
    """Whether a computed t must keep its graph once realized: autodiff may still differentiate through it."""
    return t.requires_grad or _forward_mode.get() > 0


def _read_saved(ctx: dict[UOp, UOp], x: UOp) -> UOp | None:
    return ctx.get(x)


_use_saved = PatternMatcher([(UPat(name="x"), _read_saved)], "use_saved_values")


def _reuse_values(roots: Sequence[UOp], derived: list[UOp]) -> list[UOp]:
    """Derivative graphs reading each value the roots were computed from (REALIZED) instead of recomputing it."""
    saved = {n.src[1]: n.src[0] for r in roots for n in r.toposort() if n.op is Ops.REALIZED}
    if not saved or not derived:
        return derived
    sink = graph_rewrite(UOp(Ops.SINK, src=tuple(derived)), _use_saved, ctx=saved, bottom_up=True, name="use_saved")
    return list(sink.src)


def track_leaf(t: Tensor) -> None:
    _leaves[id(t)] = t


def is_leaf(t: Tensor) -> bool:
    """A tensor made to require grad by the user (a parameter), not one computed from such."""
    return _leaves.get(id(t)) is t


def untrack_leaf(t: Tensor) -> None:
    if _leaves.get(id(t)) is t:
        del _leaves[id(t)]


def _seed(out: Tensor, gradient: Tensor | None) -> Any:
    if gradient is not None:
        if gradient.shape != out.shape:
            raise ShapeError(f"backward: gradient shape {gradient.shape} does not match output shape {out.shape}")
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
    leaves = [t for t in list(_leaves.values()) if t.requires_grad and t.uop in in_graph]
    if not leaves:
        raise RuntimeError("backward: the output does not depend on any tensor with requires_grad=True")
    grads = _gradients(out, gradient, [t.uop for t in leaves])
    for t in leaves:
        g = grads.get(t.uop)
        if g is None:
            continue
        gt = Tensor._from(g, t.device)
        wait_for_writes(gt)  # a gradient reads the parameters: computed before they are updated in place
        t.grad = gt if t.grad is None else t.grad + gt


def _gradients(out: Tensor, gradient: Tensor | None, targets: list[UOp]) -> dict[UOp, UOp]:
    grads = compute_gradient(out.uop, _seed(out, gradient), set(targets))
    found = [t for t in targets if t in grads]
    return dict(zip(found, _reuse_values([out.uop], [grads[t] for t in found])))


def gradient(out: Tensor, targets: Sequence[Tensor], gradient: Tensor | None = None) -> list[Tensor]:
    """Lazy gradients of out with respect to targets (zeros where out does not depend on one)."""
    from anneal.tensor import Tensor

    grads = _gradients(out, gradient, [t.uop for t in targets])
    return [Tensor._from(grads[t.uop], t.device) if t.uop in grads else t.zeros_like() for t in targets]


def jvp(fn: Callable[..., Any], primals: Sequence[Tensor], tangents: Sequence[Tensor]) -> tuple[Any, Any]:
    """Forward-mode derivative, as torch.func.jvp: returns (fn(*primals), J @ tangents)."""
    from anneal.tensor import Tensor

    primals, tangents = tuple(primals), tuple(tangents)
    if len(primals) != len(tangents):
        raise ShapeError(f"jvp: {len(primals)} primals but {len(tangents)} tangents")
    for p, t in zip(primals, tangents):
        if p.shape != t.shape:
            raise ShapeError(f"jvp: primal shape {p.shape} and tangent shape {t.shape} differ")
    token = _forward_mode.set(_forward_mode.get() + 1)
    try:
        out = fn(*primals)
    finally:
        _forward_mode.reset(token)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    tmap = {p.uop: t.cast(p.dtype).uop for p, t in zip(primals, tangents)}
    roots = [o.uop for o in outs]
    ts = compute_tangents(roots, tmap)
    found = _reuse_values(roots, [t for t in ts if t is not None])
    ts = [None if t is None else found.pop(0) for t in ts]
    out_t = [Tensor._from(t, o.device) if t is not None else o.zeros_like() for o, t in zip(outs, ts)]
    return out, (tuple(out_t) if isinstance(out, (tuple, list)) else out_t[0])

"""What `anneal graph`, `anneal kernels` and `anneal explain` show: the real compiler's data.

Nodes are numbered in the order the scheduler sees them (sources first). A node belongs to
the forward pass if a forward output depends on it, otherwise to the backward pass; a
kernel that computes nodes of both fused across the forward/backward seam.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from anneal.realize import runner
from anneal.tensor import Tensor
from anneal_ir import Ops, PatternMatcher, UOp
from anneal_ir.sint import render_size
from anneal_schedule.schedule import normalize


@dataclass(frozen=True)
class NodeRow:
    id: int
    op: str
    dtype: str
    shape: tuple[int | str, ...] | None  # a symbolic size as text: "batch*4"
    sources: tuple[int, ...]
    arg: str
    phase: str  # "forward" or "backward"


@dataclass(frozen=True)
class KernelRow:
    name: str
    phase: str  # "forward", "backward" or "forward+backward" (fused across the seam)
    fused_ops: int
    output: str
    inputs: tuple[str, ...]
    source: str
    opts: str = "-"  # the kernel's opts as the backend applied them


def _short(arg: Any) -> str:
    if arg is None:
        return ""
    if isinstance(arg, Ops):
        return arg.name
    if isinstance(arg, tuple):
        return "(" + ", ".join(_short(a) for a in arg) + ("," if len(arg) == 1 else "") + ")"
    if isinstance(arg, UOp):
        return render_size(arg)
    if hasattr(arg, "describe"):
        return arg.describe()
    if hasattr(arg, "content_key"):
        return arg.content_key()
    return repr(arg)


def _forward_set(sink: UOp, n_forward: int) -> set[UOp]:
    return set(UOp(Ops.SINK, src=sink.src[:n_forward]).toposort()) if n_forward else set()


def graph_rows(forward: list[Tensor], backward: list[Tensor]) -> list[NodeRow]:
    sink, _ = normalize([t.uop for t in forward + backward])
    fwd = _forward_set(sink, len(forward))
    nodes = [n for n in sink.toposort() if n is not sink]
    ids = {n: i for i, n in enumerate(nodes)}
    return [
        NodeRow(
            ids[n],
            n.op.name,
            n.dtype.name,
            None if n.shape is None else tuple(d if isinstance(d, int) else render_size(d) for d in n.shape),
            tuple(ids[s] for s in n.src),
            _short(n.arg),
            "forward" if n in fwd else "backward",
        )  # fmt: skip
        for n in nodes
    ]


def row_text(r: NodeRow) -> str:
    """One node as `anneal graph` prints it: id, op, dtype, shape, sources, argument, a backward mark."""
    shape = "" if r.shape is None else "(" + ", ".join(map(str, r.shape)) + ("," if len(r.shape) == 1 else "") + ")"
    srcs = " ".join(f"%{s}" for s in r.sources)
    mark = "  [backward]" if r.phase == "backward" else ""
    return f"%{r.id:<5} {r.op:<12} {r.dtype:<8} {shape:<18} {srcs:<16} {r.arg}{mark}".rstrip()


def kernel_rows(forward: list[Tensor], backward: list[Tensor], device: str) -> list[KernelRow]:
    outputs = [t.uop for t in forward + backward]
    run = runner(device)
    sched, _ = run.scheduler.schedule(outputs)
    sink, inputs = normalize(outputs)
    fwd = _forward_set(sink, len(forward))
    writer = {k.slots[0]: k.name for k in sched.kernels}

    def describe(slot: int) -> str:
        if slot < sched.n_inputs:
            buf = inputs[slot]
            return f"input{slot} {buf.dtype.name}[{render_size(buf.size)}]"
        size, dtype = sched.buffers[slot - sched.n_inputs]
        return f"{writer.get(slot, '?')} {dtype.name}[{render_size(size)}]"

    rows = []
    for k in sched.kernels:
        computed = [n for n in k.nodes if n.op not in (Ops.CONST, Ops.BUFFER)]
        phases = {"forward" if n in fwd else "backward" for n in computed} or {"forward"}
        phase = "forward+backward" if len(phases) == 2 else phases.pop()
        prog = run.program(k.name, k.ast)
        rows.append(KernelRow(k.name, phase, k.fused_ops, describe(k.slots[0]), tuple(describe(s) for s in k.slots[1:]),
                              prog.source, str(getattr(prog, "opts", "-"))))  # fmt: skip
    return rows


@dataclass
class Explanation:
    op: str
    tables: dict[str, list[str]] = field(default_factory=dict)  # table name -> rule sources (UOp ops)
    example: str = ""  # a Tensor-level name: the call that was traced, e.g. "x.softmax()"
    lowering: list[NodeRow] = field(default_factory=list)  # ... and the UOp graph it built
    primitives: list[str] = field(default_factory=list)  # ... the UOp ops in it, each explainable itself


def _rules_for(matcher: PatternMatcher, op: Ops) -> list[str]:
    out = []
    for rule in matcher.rules:
        if rule.pattern.ops is not None and op not in rule.pattern.ops:
            continue
        try:
            body = inspect.getsource(rule.fn).rstrip()
        except (OSError, TypeError):
            body = repr(rule.fn)
        out.append(f"# pattern: {rule.pattern!r}\n{body}")
    return out


def known_ops() -> list[str]:
    return sorted(op.name.lower() for op in Ops)


# The example a Tensor-level name is traced on: x and y of shape (2, 3), w of (3, 4); names that need other
# arguments say how they are called. The rest are tried as f(x), f(x, y), f(x, w).
_ARGUMENTS: dict[str, Callable[[Tensor, Tensor, Tensor], tuple[str, Tensor]]] = {
    "cross_entropy": lambda x, y, w: ("F.cross_entropy(x, labels)", _functional().cross_entropy(x, Tensor([0, 2]))),
    "layer_norm": lambda x, y, w: ("F.layer_norm(x, 3)", _functional().layer_norm(x, 3)),
    "linear": lambda x, y, w: ("F.linear(x, w.T)", _functional().linear(x, w.T)),
}


def _functional() -> Any:
    from anneal.nn import functional

    return functional


def _example_call(name: str) -> tuple[str, Tensor] | None:
    """Trace the Tensor method or `anneal.nn.functional` function NAME on small inputs; None if there is none."""
    import numpy as np

    x, y = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3) / 6), Tensor(np.ones((2, 3), np.float32))
    w = Tensor(np.ones((3, 4), np.float32))
    if name in _ARGUMENTS:
        return _ARGUMENTS[name](x, y, w)
    method = getattr(Tensor, name, None) if not name.startswith("_") else None
    function = getattr(_functional(), name, None) if not name.startswith("_") else None
    target, prefix = (method, "x.") if callable(method) else (function, "F.")
    if not callable(target):
        return None
    for label, args in (("", ()), ("y", (y,)), ("w", (w,))):
        try:
            out = target(x, *args)
        except (TypeError, ValueError):
            continue
        if isinstance(out, Tensor):
            call = f"{prefix}{name}({label})" if prefix == "x." else f"F.{name}(x{', ' + label if label else ''})"
            return call, out
    return None


def explain(op_name: str) -> Explanation:
    """What a name means to the compiler: for a UOp op, the symbolic, VJP and JVP rules that fire for it, from
    the real tables; for a Tensor-level name (matmul, softmax, relu, ...), the UOp graph it lowers to."""
    from anneal_autodiff import jvp_rules, vjp_rules
    from anneal_ir.symbolic import symbolic

    name = op_name.lower()
    op = Ops.__members__.get(op_name.upper())
    traced = _example_call(name)
    if op is None and traced is None:
        raise KeyError(f"unknown op {op_name!r}; known ops: {', '.join(known_ops())}; or a Tensor method or "
                       "anneal.nn.functional name (matmul, softmax, relu, layer_norm, ...)")  # fmt: skip
    found = Explanation(op.name if op is not None else name)
    if op is not None:
        tables = {"symbolic (index simplification)": symbolic, "vjp (reverse mode)": vjp_rules,
                  "jvp (forward mode)": jvp_rules}  # fmt: skip
        found.tables = {table: _rules_for(m, op) for table, m in tables.items()}
    if traced is not None:
        found.example, out = traced
        found.lowering = graph_rows([out], [])
        plumbing = {"BUFFER", "BUFFER_VIEW", "CONST", "DEVICE", "UNIQUE"}
        found.primitives = sorted({r.op.lower() for r in found.lowering if r.op not in plumbing})
    return found


def gradient_example(op_name: str) -> tuple[UOp, UOp] | None:
    """A tiny graph of one op and the graph its VJP rule builds for its sources' gradients, over placeholder
    inputs (x, y, c) and an upstream gradient g; None for ops without an example (or without a gradient)."""
    from anneal_autodiff.vjp import vjp_rule
    from anneal_ir import GroupOp, dtypes

    op = Ops.__members__.get(op_name.upper())
    if op is None:  # a Tensor-level name: its lowering is the example
        return None

    def placeholder(name: str, shape: tuple[int, ...] = (), dtype: Any = dtypes.float32) -> UOp:
        u = UOp(Ops.DEFINE_VAR, dtype, (), (name, 0, 1))
        return UOp(Ops.EXPAND, dtype, (UOp(Ops.RESHAPE, dtype, (u,), (1,) * len(shape)),), shape) if shape else u

    x = placeholder("x", (2, 3))
    if op in GroupOp.Unary or op in GroupOp.Binary:
        ret = x.alu(op, *(placeholder("y", (2, 3)),) * (op in GroupOp.Binary))
    elif op is Ops.WHERE:
        ret = UOp(Ops.WHERE, dtypes.float32, (placeholder("c", (2, 3), dtypes.bool), x, placeholder("y", (2, 3))))
    elif op is Ops.REDUCE_AXIS:
        ret = UOp(Ops.REDUCE_AXIS, dtypes.float32, (x,), (Ops.ADD, (1,)))
    elif op is Ops.RESHAPE:
        ret = UOp(Ops.RESHAPE, dtypes.float32, (x,), (6,))
    elif op is Ops.PERMUTE:
        ret = UOp(Ops.PERMUTE, dtypes.float32, (x,), (1, 0))
    else:
        return None
    grads = vjp_rule(ret, placeholder("g", ret.shape or ()))
    found = [g for g in grads if g is not None]
    return (ret, UOp(Ops.SINK, src=tuple(found))) if found else None

"""What `anneal graph`, `anneal kernels` and `anneal explain` show: the real compiler's data.

Nodes are numbered in the order the scheduler sees them (sources first). A node belongs to
the forward pass if a forward output depends on it, otherwise to the backward pass; a
kernel that computes nodes of both fused across the forward/backward seam.
"""

from __future__ import annotations

import inspect
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
    inputs: str = ""  # ... the example inputs it reads, e.g. "x: float32 (2, 3); w: float32 (3, 4)"
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


# The example call each Tensor-level name is traced on: text, evaluated over the inputs of `_inputs` (the text
# shown is the call traced). A name missing here is tried as x.NAME() / F.NAME(x); `_REFUSED` says why a name has
# no graph to show.
_UNARY = (
    "abs acos acosh asin asinh atan atanh bool ceil clone contiguous cos cosh cpu detach double erf exp exp2 expm1 "
    "flatten float floor gelu half int isfinite isinf isnan leaky_relu log log10 log1p log2 log_softmax "
    "logical_not long neg ones_like rand_like randn_like realize reciprocal relu requires_grad_ round rsqrt "
    "sigmoid sign silu sin sinh softmax softplus sqrt square t tan tanh tril triu trunc zeros_like"
).split()
_BINARY = (
    "add copysign div eq expand_as fmod ge gt isclose le logaddexp logical_and logical_or lt maximum minimum mul ne "
    "pow sub assign"
).split()
_ALONG_DIM = (
    "amax amin argmax argmin argsort cummax cummin cumprod cumsum logcumsumexp logsumexp max mean min prod sort std "
    "std_mean sum var var_mean"
).split()
METHOD_EXAMPLES: dict[str, str] = {
    **{name: f"x.{name}()" for name in _UNARY},
    **{name: f"x.{name}(y)" for name in _BINARY},
    **{name: f"x.{name}(1)" for name in _ALONG_DIM},
    "all": "m.all(1)", "any": "m.any(1)", "bitwise_not": "i.bitwise_not()", "nonzero": "m.nonzero()",
    "matmul": "x.matmul(w)", "dot": "x.dot(w)", "lerp": "x.lerp(y, 0.25)", "where": "x.where(m, y)",
    "clamp": "x.clamp(0.25, 0.75)", "clip": "x.clip(0.25, 0.75)", "full_like": "x.full_like(0.5)",
    "T": "x.T", "mT": "x.mT", "transpose": "x.transpose(0, 1)", "permute": "x.permute(1, 0)",
    "reshape": "x.reshape(3, 2)", "view": "x.view(3, 2)", "unflatten": "x.unflatten(1, (3, 1))",
    "unsqueeze": "x.unsqueeze(0)", "squeeze": "x.reshape(2, 1, 3).squeeze(1)",
    "expand": "x.unsqueeze(0).expand(4, 2, 3)", "repeat": "x.repeat(2, 1)",
    "repeat_interleave": "x.repeat_interleave(2, 1)", "flip": "x.flip(1)", "roll": "x.roll(1, 1)",
    "pad": "x.pad((1, 1))", "diag": "x.diag()", "diagonal": "x.diagonal()", "chunk": "x.chunk(3, 1)",
    "split": "x.split(2, 1)", "unfold": "x.unfold(1, 2, 1)", "topk": "x.topk(2)",
    "masked_fill": "x.masked_fill(m, 0.0)", "masked_select": "x.masked_select(m)", "gather": "x.gather(1, i)",
    "scatter": "x.scatter(1, i, y)", "scatter_add": "x.scatter_add(1, i, y)",
    "scatter_reduce": "x.scatter_reduce(1, i, y, 'amax')", "one_hot": "labels.one_hot(3)",
    "cast": "x.cast('int32')", "bitcast": "x.bitcast('int32')", "type": "x.type('float16')", "to": "x.to('float16')",
    "gradient": "(g * g).sum().gradient(g)",
    "arange": "Tensor.arange(6)", "eye": "Tensor.eye(3)", "full": "Tensor.full((2, 3), 0.5)",
    "ones": "Tensor.ones(2, 3)", "zeros": "Tensor.zeros(2, 3)", "rand": "Tensor.rand(2, 3)",
    "randn": "Tensor.randn(2, 3)", "uniform": "Tensor.uniform(2, 3)", "randint": "Tensor.randint(0, 5, (2, 3))",
}  # fmt: skip
_ELEMENTWISE_F = "celu elu gelu hardsigmoid hardswish hardtanh logsigmoid mish normalize relu relu6 selu sigmoid silu "
FUNCTIONAL_EXAMPLES: dict[str, str] = {
    **{name: f"F.{name}(x)" for name in (_ELEMENTWISE_F + "softplus softsign").split()},
    **{name: f"F.{name}(x, y)" for name in "binary_cross_entropy binary_cross_entropy_with_logits l1_loss mse_loss "
                                            "smooth_l1_loss".split()},
    **{name: f"F.{name}(x, 1)" for name in ("softmax", "log_softmax", "softmin")},
    "leaky_relu": "F.leaky_relu(x, 0.1)",
    "dropout": "F.dropout(x, 0.5)", "linear": "F.linear(x, w.T)", "layer_norm": "F.layer_norm(x, 3)",
    "cross_entropy": "F.cross_entropy(x, labels)", "nll_loss": "F.nll_loss(x.log_softmax(1), labels)",
    "class_nll": "F.class_nll(x.log_softmax(1), labels, None, -100, 'mean', 'nll_loss')",
    "reduce_loss": "F.reduce_loss(x, 'mean', 'l1_loss')", "one_hot": "F.one_hot(labels, 3)",
    "embedding": "F.embedding(i, w)", "cat": "F.cat([x, y], 1)", "where": "F.where(m, x, y)", "pad": "F.pad(x, (1, 1))",
    "group_norm": "F.group_norm(t(1, 4, 2, 2), 2)",
    "conv1d": "F.conv1d(t(1, 2, 5), t(3, 2, 3))", "conv2d": "F.conv2d(t(1, 2, 4, 4), t(3, 2, 3, 3))",
    "conv3d": "F.conv3d(t(1, 2, 3, 3, 3), t(3, 2, 2, 2, 2))",
    "conv_transpose1d": "F.conv_transpose1d(t(1, 2, 4), t(2, 3, 3))",
    "conv_transpose2d": "F.conv_transpose2d(t(1, 2, 3, 3), t(2, 3, 2, 2))",
    "conv_transpose3d": "F.conv_transpose3d(t(1, 2, 2, 2, 2), t(2, 3, 2, 2, 2))",
    "max_pool2d": "F.max_pool2d(t(1, 2, 4, 4), 2)", "avg_pool2d": "F.avg_pool2d(t(1, 2, 4, 4), 2)",
    "avg_pool3d": "F.avg_pool3d(t(1, 2, 4, 4, 4), 2)",
    "max_unpool2d": "F.max_unpool2d(*F.max_pool2d(t(1, 2, 4, 4), 2, return_indices=True), 2)",
    "interpolate": "F.interpolate(t(1, 2, 2, 2), scale_factor=2)",
    "scaled_dot_product_attention": "F.scaled_dot_product_attention(t(1, 2, 3, 4), t(1, 2, 3, 4), t(1, 2, 3, 4), "
                                    "is_causal=True)",
}  # fmt: skip
_HOST = "it reads the values back to the host (running the graph) and builds none of its own"
_SHAPE = "it answers from the shape alone"
_REFUSED: dict[str, str] = {
    "backward": "it runs the backward pass into .grad and returns nothing; `anneal explain gradient` shows an "
    "example's gradient graph, `anneal graph MODEL --backward` a training step's",
    "item": _HOST, "tolist": _HOST, "numpy": _HOST, "size": _SHAPE, "dim": _SHAPE, "numel": _SHAPE,
    "with_gradient": "it attaches a caller's gradient rule (a function) to a value, and there is no example rule "
    "to trace; `anneal explain custom_vjp` shows the UOp it builds",
    "legacy_reduction": "it maps the legacy size_average/reduce flags to a reduction name and touches no tensor",
}  # fmt: skip


def _inputs() -> dict[str, Any]:
    """The tensors the example calls read, made fresh for each call (assign and requires_grad_ change theirs)."""
    import numpy as np

    def t(*shape: int) -> Tensor:  # any shape the call needs, with distinct values
        n = int(np.prod(shape))
        return Tensor((np.arange(n, dtype=np.float32) / n).reshape(shape))

    return {
        "x": Tensor(np.arange(6, dtype=np.float32).reshape(2, 3) / 6), "y": Tensor(np.ones((2, 3), np.float32)),
        "w": Tensor(np.ones((3, 4), np.float32)), "i": Tensor(np.array([[0, 2, 1], [1, 1, 0]], np.int32)),
        "m": Tensor(np.array([[True, False, True], [False, True, True]])), "labels": Tensor(np.array([0, 2], np.int32)),
        "g": Tensor(np.arange(6, dtype=np.float32).reshape(2, 3) / 6, requires_grad=True), "t": t,
        "F": _functional(), "Tensor": Tensor,
    }  # fmt: skip


def _legend(call: str, inputs: dict[str, Any]) -> str:
    """The example inputs `call` reads, as `x: float32 (2, 3); ...`."""
    import re

    used = {n for n in re.findall(r"(?<![\w.'])([A-Za-z_]\w*)", call) if n in inputs}
    parts = []
    for name in ("x", "y", "g", "w", "i", "m", "labels"):
        if name in used:
            tensor = inputs[name]
            grad = ", requires_grad" if tensor.requires_grad else ""
            parts.append(f"{name}: {tensor.dtype.name} {tuple(tensor.shape)}{grad}")
    if "t" in used:
        parts.append("t(*shape): float32 of that shape")
    return "; ".join(parts)


def _functional() -> Any:
    from anneal.nn import functional

    return functional


def _split_name(name: str) -> tuple[str | None, str]:
    """`F.relu`, `anneal.nn.functional.relu`, `Tensor.relu`, `x.relu` or plain `relu` -> (namespace, name)."""
    for prefix, where in (("anneal.nn.functional.", "F"), ("functional.", "F"), ("F.", "F"), ("Tensor.", "Tensor"),
                          ("x.", "Tensor")):  # fmt: skip
        if name.startswith(prefix):
            return where, name[len(prefix) :]
    return None, name


def _lookup(name: str) -> tuple[str | None, str | None]:
    """(the example call, or None; why the name has none, or None) for a Tensor-level name; (None, None) when it
    is neither a Tensor attribute nor an anneal.nn.functional name."""
    where, bare = _split_name(name)
    functional = _functional()
    in_tensor = where in (None, "Tensor") and not bare.startswith("_") and hasattr(Tensor, bare)
    in_f = where in (None, "F") and not bare.startswith("_") and hasattr(functional, bare)
    if in_tensor and bare in METHOD_EXAMPLES:
        return METHOD_EXAMPLES[bare], None
    if in_f and bare in FUNCTIONAL_EXAMPLES:
        return FUNCTIONAL_EXAMPLES[bare], None
    if (in_tensor or in_f) and bare in _REFUSED:
        return None, f"{name} has no graph to show: {_REFUSED[bare]}"
    if in_tensor:
        if not callable(inspect.getattr_static(Tensor, bare)):  # shape, dtype, device, grad, ...
            return None, f"{name} has no graph to show: Tensor.{bare} is an attribute, not an operation"
        return f"x.{bare}()", None
    if in_f:
        if not inspect.isfunction(getattr(functional, bare)):  # Tensor, dtypes, math, ... re-exported there
            return None, f"{name} has no graph to show: anneal.nn.functional.{bare} is not an operation"
        return f"F.{bare}(x)", None
    return None, None


def _trace(name: str, call: str, inputs: dict[str, Any], table: bool) -> list[Tensor]:
    """Evaluate the example call: its tensor outputs. A call guessed for a name missing from the tables that
    fails (it needs other arguments) is a KeyError naming why."""
    try:
        out = eval(call, {"__builtins__": {}}, inputs)  # our table's text, never the user's: see the tables
    except Exception as exc:
        if table:
            raise
        why = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        raise KeyError(f"{name} has no graph to show: anneal.introspect's tables have no example call for it, and "
                       f"the guess {call} fails ({why})") from None  # fmt: skip
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    if not outs or not all(isinstance(o, Tensor) for o in outs):
        raise KeyError(f"{name} has no graph to show: {call} returns {type(out).__name__}, not tensors")
    return outs


def explain(op_name: str) -> Explanation:
    """What a name means to the compiler: for a UOp op, the symbolic, VJP and JVP rules that fire for it, from
    the real tables; for a Tensor method or anneal.nn.functional name (matmul, softmax, relu, ...; `F.relu` or
    `Tensor.relu` to pick one), the UOp graph it lowers to on a small example. A KeyError (its message says why)
    for a name that is neither, or one that builds no graph (item, backward, shape, ...)."""
    from anneal_autodiff import jvp_rules, vjp_rules
    from anneal_ir.symbolic import symbolic

    op = Ops.__members__.get(op_name.upper()) if "." not in op_name else None
    call, refused = _lookup(op_name)
    if call is None and refused is None and op_name != op_name.lower():
        call, refused = _lookup(op_name.lower())  # Softmax, RELU: as the ops, case does not matter
    if op is None and call is None:
        if refused is not None:
            raise KeyError(refused)
        import difflib

        names = {*known_ops(), *METHOD_EXAMPLES, *FUNCTIONAL_EXAMPLES}
        close = difflib.get_close_matches(op_name.lower(), sorted(names), n=3, cutoff=0.75)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        raise KeyError(f"{op_name!r} is neither a UOp op nor a Tensor method or anneal.nn.functional name; {hint}"
                       f"UOp ops: {', '.join(known_ops())}; Tensor-level names: matmul, softmax, relu, layer_norm, "
                       f"conv2d, embedding, ... (any Tensor method or F. function)")  # fmt: skip
    found = Explanation(op.name if op is not None else op_name)
    if op is not None:
        tables = {"symbolic (index simplification)": symbolic, "vjp (reverse mode)": vjp_rules,
                  "jvp (forward mode)": jvp_rules}  # fmt: skip
        found.tables = {table: _rules_for(m, op) for table, m in tables.items()}
    if call is not None:
        inputs = _inputs()
        bare = _split_name(op_name)[1]
        table = call in (METHOD_EXAMPLES.get(bare), FUNCTIONAL_EXAMPLES.get(bare))
        try:
            outs = _trace(op_name, call, inputs, table)
        except KeyError:
            if op is None:
                raise
            outs = []  # a UOp op too (a guessed call failed): its rules alone
        if outs:
            found.example, found.inputs = call, _legend(call, inputs)
            found.lowering = graph_rows(outs, [])
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

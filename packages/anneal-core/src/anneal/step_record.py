"""One training step as the compiler built it, as a JSON-ready document (what `anneal viz` draws).

The step's graph is built, scheduled and compiled under a `CompileTrace`, then flattened:
- ``nodes``: every node any recorded graph holds, numbered once (a node shared between
  passes is one entry), with its origin (phase, module path), the rule that made it, the
  kernels that compute it and, for materialized nodes, why;
- ``main``: the ids of the step's graph as the scheduler cuts it into kernels;
- ``kernels``: each kernel with its phase, fused nodes, opts and generated source;
- ``passes``: each graph rewrite in order, with its input and output roots (small graphs
  only: kernel ASTs) and the rules that fired.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from anneal.introspect import _short
from anneal.realize import runner
from anneal.tensor import Tensor
from anneal_ir import CompileTrace, Ops, UOp
from anneal_ir.sint import render_size
from anneal_schedule.schedule import Scheduler

PASS_GRAPH_LIMIT = 3000  # a pass's graph is kept for the timeline up to this many nodes (kernel ASTs are)
FIRED_LIMIT = 400  # firings listed per pass (the counts per rule are always complete)


class _Numbering:
    def __init__(self, trace: CompileTrace) -> None:
        self.trace = trace
        self.ids: dict[UOp, int] = {}
        self.rows: list[dict[str, Any]] = []

    def add_graph(self, root: UOp) -> list[int]:
        """Number every node under root (sources first); returns their ids in that order."""
        out = []
        for n in root.toposort():
            if n not in self.ids:
                self.ids[n] = len(self.rows)
                self.rows.append(self._row(n))
            out.append(self.ids[n])
        return out

    def id(self, node: UOp) -> int:
        if node not in self.ids:
            self.add_graph(node)
        return self.ids[node]

    def _row(self, n: UOp) -> dict[str, Any]:
        origin = self.trace.origins.get(n)
        shape = None if n.shape is None else [d if isinstance(d, int) else render_size(d) for d in n.shape]
        return {
            "op": n.op.name,
            "dtype": n.dtype.name,
            "shape": shape,
            "src": [self.ids[s] for s in n.src],
            "arg": _short(n.arg)[:120],
            "phase": origin.phase if origin else ("input" if n.op in (Ops.BUFFER, Ops.CONST) else "compiler"),
            "module": origin.module if origin else "",
            "made_by": self.trace.made_by.get(n, ""),
        }


def _kernel_phase(phases: Iterable[str]) -> str:
    kinds = {p for p in phases if p in ("forward", "backward", "jvp")}
    if not kinds:
        return "forward"
    if "forward" in kinds and len(kinds) > 1:
        return "forward+" + "+".join(sorted(kinds - {"forward"}))  # fused across the seam
    return "+".join(sorted(kinds))


def record_step(
    build: Callable[[], tuple[list[Tensor], list[Tensor]]],
    device: str,
    model: Any = None,
    title: str = "",
) -> dict[str, Any]:
    """Build (forward outputs, gradients) with build(), then schedule and compile them on device, recording it all."""
    trace = CompileTrace()
    if model is not None:
        trace.name_modules(model)
    started = time.perf_counter()
    with trace.active():
        with trace.within("forward"):
            forward, backward = build()
        outputs = [t.uop for t in forward + backward]
        run = runner(device)
        # a scheduler of its own: the device's would answer a graph it has seen from its cache, unrecorded
        scheduler = Scheduler(max_buffers=run.scheduler.max_buffers, parallel=run.scheduler.parallel)
        sched, _ = scheduler.schedule(outputs)
        programs = {}
        for k in sched.kernels:
            with trace.working_on(k.name):
                programs[k.name] = run.backend.compile(k.name, k.ast)  # uncached: its passes are recorded too
    seconds = time.perf_counter() - started

    numbering = _Numbering(trace)
    # the graph the kernels were cut from: the step's, normalized, its long reductions split
    sink = next(ev.node for ev in trace.events if ev.kind == "schedule" and ev.node is not None)
    main = [i for i in numbering.add_graph(sink) if numbering.rows[i]["op"] != "SINK"]
    n_forward = len(forward)
    forward_roots = {numbering.ids[s] for s in sink.src[:n_forward]}
    # A node the trace gave no phase (a view built before it started) is filed as `anneal graph` files it:
    # forward if a forward output depends on it.
    reach_forward = {numbering.ids[n] for r in sink.src[:n_forward] for n in r.toposort()}
    for i in main:
        if numbering.rows[i]["phase"] == "compiler":
            numbering.rows[i]["phase"] = "forward" if i in reach_forward else "backward"

    reasons: dict[int, str] = {}
    for ev in trace.events:
        if ev.node is not None and ev.kind in ("realize", "split", "unfuse") and ev.node in numbering.ids:
            reasons.setdefault(numbering.ids[ev.node], f"{ev.kind}: {ev.detail.get('reason', '')}")
    for i, why in reasons.items():
        numbering.rows[i]["why"] = why

    decisions = {ev.context: ev.detail for ev in trace.events if ev.kind == "opts" and ev.context}
    kernels = []
    for k in sched.kernels:
        fused = sorted(numbering.ids[n] for n in k.nodes if n.op is not Ops.CONST)
        for i in fused:
            numbering.rows[i].setdefault("kernels", []).append(k.name)
        prog = programs[k.name]
        computed = [numbering.rows[i]["phase"] for i in fused if numbering.rows[i]["op"] != "BUFFER"]
        kernels.append({
            "name": k.name,
            "phase": _kernel_phase(computed),
            "nodes": fused,
            "fused_ops": k.fused_ops,
            "opts": str(getattr(prog, "opts", "-")),
            "decision": decisions.get(k.name, {}).get("why", ""),  # the optimizer's, where one chose (webgpu)
            "ast": numbering.id(k.ast) if len(k.ast.toposort()) <= PASS_GRAPH_LIMIT else None,
            "source": prog.source,
        })  # fmt: skip

    passes = []
    for p in trace.passes:
        size_in = len(p.root_in.toposort())
        keep = size_in <= PASS_GRAPH_LIMIT
        entry: dict[str, Any] = {
            "name": p.name,
            "context": p.context,
            "ms": round(p.seconds * 1000, 3),
            "nodes_in": size_in,
            "rules": dict(Counter(f.rule for f in p.fired)),
            "fired": [[f.rule, numbering.id(f.matched), numbering.id(f.result)] for f in p.fired[:FIRED_LIMIT]]
            if keep or all(f.matched in numbering.ids for f in p.fired[:FIRED_LIMIT])
            else [],
        }
        if keep and p.root_out is not None:
            entry["root_in"] = numbering.id(p.root_in)
            entry["root_out"] = numbering.id(p.root_out)
            entry["nodes_out"] = len(p.root_out.toposort())
        passes.append(entry)

    phases = Counter(numbering.rows[i]["phase"] for i in main)
    return {
        "title": title,
        "device": run.device if hasattr(run, "device") else device,
        "compile_seconds": round(seconds, 3),
        "nodes": numbering.rows,
        "main": main,
        "forward_roots": sorted(forward_roots),
        "kernels": kernels,
        "passes": passes,
        "events": len(trace.events),
        "phases": dict(phases),
        "truncated": trace.truncated,
    }

"""anneal.step_record: one step recorded under a CompileTrace, checked against the compiler's own answers
(the kernels `anneal kernels` lists, the graph `anneal graph` prints) and against how the model was built."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import numpy as np
from devices import DEV

import anneal
from anneal import Tensor
from anneal.introspect import graph_rows, kernel_rows
from anneal.nn import modules as nn
from anneal.realize import runner
from anneal.step_record import record_step
from anneal_ir import Ops
from anneal_schedule.schedule import normalize
from anneal_schedule.split import split_reductions


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.norm = nn.LayerNorm(6)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(self.fc(x).gelu()) + x


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = [Block(), Block()]
        self.head = nn.Linear(6, 3)

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def _step(model: Net, backward: bool = True) -> tuple[list[Tensor], list[Tensor]]:
    x = Tensor(np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 6), device=DEV)
    loss = (model(x) ** 2).mean()
    params = [p for _, p in model.named_parameters()]
    return [loss], (loss.gradient(*params) if backward else [])


def _record(backward: bool = True) -> tuple[dict[str, Any], Net, tuple[list[Tensor], list[Tensor]]]:
    model = Net()
    built: dict[str, Any] = {}

    def build() -> tuple[list[Tensor], list[Tensor]]:
        built["step"] = _step(model, backward)
        return built["step"]

    return record_step(build, DEV, model, "net"), model, built["step"]


def test_nodes_carry_their_phase_and_module_path() -> None:
    doc, _, _ = _record()
    main = [doc["nodes"][i] for i in doc["main"]]
    modules = Counter((n["phase"], n["module"]) for n in main)
    for path in ("layers.0.fc", "layers.0.norm", "layers.1.fc", "layers.1.norm", "head"):
        assert modules[("forward", path)] > 0, path
        assert modules[("backward", path)] > 0, path  # each gradient is filed under the module it differentiates
    assert {n["phase"] for n in main} <= {"forward", "backward", "input", "compiler"}
    assert doc["phases"]["forward"] > 0 and doc["phases"]["backward"] > 0


def test_the_main_graph_is_the_one_the_scheduler_cuts_into_kernels() -> None:
    doc, _, (forward, backward) = _record()
    sink, _ = normalize([t.uop for t in forward + backward])
    scheduled = [n for n in split_reductions(sink, runner(DEV).scheduler.parallel).toposort() if n.op is not Ops.SINK]
    main = [doc["nodes"][i] for i in doc["main"]]
    assert [(n.op.name, n.dtype.name) for n in scheduled] == [(n["op"], n["dtype"]) for n in main]
    ids = {i: k for k, i in enumerate(doc["main"])}
    index = {n: k for k, n in enumerate(scheduled)}
    assert [tuple(index[s] for s in n.src) for n in scheduled] == [tuple(ids[s] for s in n["src"]) for n in main]
    # without split reductions it is the graph `anneal graph` prints
    assert len(graph_rows(forward, backward)) == len(sink.toposort()) - 1


def test_kernels_are_the_ones_anneal_kernels_lists_and_link_to_their_nodes() -> None:
    doc, _, (forward, backward) = _record()
    rows = kernel_rows(forward, backward, DEV)
    assert [k["name"] for k in doc["kernels"]] == [r.name for r in rows]
    # the same code; `anneal kernels` may show a cached program under the name it was first compiled as
    assert [unnamed(k["source"]) for k in doc["kernels"]] == [unnamed(r.source) for r in rows]
    assert [k["phase"] for k in doc["kernels"]] == [r.phase for r in rows]
    main = set(doc["main"])
    for k in doc["kernels"]:
        assert k["nodes"] and set(k["nodes"]) <= main
        for i in k["nodes"]:
            assert k["name"] in doc["nodes"][i]["kernels"]
    assert any("+" in k["phase"] for k in doc["kernels"])  # something fused across the forward/backward seam


def unnamed(source: str) -> str:
    return re.sub(r"\bk\d+\b", "k", source)


def test_materialized_nodes_say_why() -> None:
    doc, _, _ = _record()
    reasons = [n["why"] for n in doc["nodes"] if "why" in n]
    assert any("an output of the step" in r for r in reasons)
    assert all(r.split(":")[0] in ("realize", "split", "unfuse") for r in reasons)


def test_passes_record_their_roots_and_the_rules_that_fired() -> None:
    doc, _, _ = _record()
    passes = doc["passes"]
    assert passes and all(p["nodes_in"] > 0 for p in passes)
    fired = [p for p in passes if p["rules"]]
    assert fired, "no pass rewrote anything"
    for p in fired:
        assert sum(p["rules"].values()) >= len(p["fired"]) > 0 or not p["fired"]
        for rule, matched, result in p["fired"]:
            assert rule.split(".")[0] in p["name"] or "." in rule
            assert 0 <= matched < len(doc["nodes"]) and 0 <= result < len(doc["nodes"])
    kernel_passes = [p for p in passes if p["context"]]
    assert {p["context"] for p in kernel_passes} <= {k["name"] for k in doc["kernels"]}
    small = [p for p in passes if "root_in" in p]
    assert small and all(p["nodes_out"] > 0 for p in small)
    made = [n for n in doc["nodes"] if n["made_by"]]
    assert made and all("." in n["made_by"] for n in made)  # "table.rule"


def test_forward_mode_nodes_are_jvp() -> None:
    model = Net()

    def build() -> tuple[list[Tensor], list[Tensor]]:
        x = Tensor(np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 6), device=DEV)
        v = Tensor(np.ones((4, 6), np.float32), device=DEV)
        out, tangent = anneal.jvp(model, [x], [v])
        return [out], [tangent]

    doc = record_step(build, DEV, model)
    phases = Counter((doc["nodes"][i]["phase"], doc["nodes"][i]["module"]) for i in doc["main"])
    assert phases[("jvp", "layers.0.fc")] > 0 and phases[("forward", "layers.0.fc")] > 0


def test_recording_changes_nothing_the_step_computes() -> None:
    doc, model, (forward, backward) = _record()
    traced = [t.numpy() for t in forward + backward]
    again = [t.numpy() for t in sum(_step(model), [])]
    for a, b in zip(traced, again):
        np.testing.assert_array_equal(a, b)
    assert not doc["truncated"]


def test_a_forward_only_step_has_no_backward_nodes() -> None:
    doc, _, _ = _record(backward=False)
    assert "backward" not in doc["phases"]
    assert all(k["phase"] == "forward" for k in doc["kernels"])


def test_the_optimizers_choice_is_an_event_of_the_kernel_it_was_made_for() -> None:
    from anneal_ir import CompileTrace
    from anneal_schedule.backend import Limits
    from anneal_schedule.heuristic import choose_opts

    rows = Tensor(np.ones((64, 256), np.float32), device=DEV).sum(1)
    (kernel,) = runner(DEV).scheduler.schedule([rows.uop])[0].kernels
    limits = Limits(max_workgroup_size=(256, 256, 64), max_workgroup_invocations=256, max_shared_memory=16384)
    trace = CompileTrace()
    with trace.active(), trace.working_on("k7"):
        opts = choose_opts(kernel.ast, limits)
    (event,) = [e for e in trace.events if e.kind == "opts"]
    assert event.context == "k7" and event.detail["form"] in ("row", "tile", "group", "flat") and event.detail["why"]
    assert event.detail["opts"] == ", ".join(map(str, opts))

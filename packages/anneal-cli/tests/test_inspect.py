"""`anneal graph`, `anneal kernels` and `anneal explain` on the built-in models and rule tables."""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from anneal import Tensor
from anneal.nn import functional as F
from anneal_autodiff import vjp_rules
from anneal_cli.main import AnnealGroup


def test_graph_marks_backward_nodes(cli: AnnealGroup, runner: CliRunner) -> None:
    forward = runner.invoke(cli, ["graph", "mlp", "--preset", "tiny", "--device", "cpu", "--json"])
    assert forward.exit_code == 0, forward.output
    nodes = json.loads(forward.stdout)
    assert nodes and all(n["phase"] == "forward" for n in nodes)
    both = runner.invoke(cli, ["graph", "mlp", "--preset", "tiny", "--device", "cpu", "--json", "--backward"])
    rows = json.loads(both.stdout)
    assert any(n["phase"] == "backward" for n in rows) and len(rows) > len(nodes)
    assert all(s < n["id"] for n in rows for s in n["sources"])  # sources come first
    plain = runner.invoke(cli, ["graph", "mlp", "--preset", "tiny", "--device", "cpu", "--backward"])
    assert "[backward]" in plain.output and plain.output.strip().endswith("backward)")


def test_kernels_show_source_and_the_seam(cli: AnnealGroup, runner: CliRunner) -> None:
    result = runner.invoke(cli, ["kernels", "mlp", "--preset", "tiny", "--device", "cpu", "--backward"])
    assert result.exit_code == 0, result.output
    assert "def k0(" in result.output  # the rendered numpy source
    assert "  opts: none (" in result.output  # the cpu applies no opts: it says which form each kernel took
    last = result.output.strip().splitlines()[-1]
    fused = int(last.split(";")[1].split()[0])
    assert fused > 0 and "[forward+backward]" in result.output


def test_kernels_on_webgpu_show_wgsl(cli: AnnealGroup, runner: CliRunner, adapter: object) -> None:
    result = runner.invoke(cli, ["kernels", "mlp", "--preset", "tiny", "--device", "webgpu"])
    assert result.exit_code == 0, result.output
    assert "@compute @workgroup_size" in result.output
    opts = [ln.split("opts: ", 1)[1] for ln in result.output.splitlines() if ln.startswith("  opts: ")]
    assert opts and all(o == "no opts" or re.fullmatch(r"[A-Z]+\(\d+(, \d+)?\)(, [A-Z]+\(\d+(, \d+)?\))*", o)
                        for o in opts), opts  # fmt: skip
    assert any("GROUP(" in o or "LOCAL(" in o for o in opts)  # a kernel runs across a workgroup's invocations


def test_explain_prints_the_real_rules(cli: AnnealGroup, runner: CliRunner) -> None:
    result = runner.invoke(cli, ["explain", "mul"])
    assert result.exit_code == 0, result.output
    assert "def mul_vjp" in result.output and "def mul_jvp" in result.output
    rule = next(r for r in vjp_rules.rules if r.pattern.ops and "MUL" in {o.name for o in r.pattern.ops})
    assert rule.fn.__name__ in result.output


def test_explain_unknown_op_is_a_usage_error(cli: AnnealGroup, runner: CliRunner) -> None:
    result = runner.invoke(cli, ["explain", "frobnicate"])
    assert result.exit_code == 2
    assert "'frobnicate' is neither a UOp op nor a Tensor method or anneal.nn.functional name" in result.stderr
    assert "UOp ops: add, " in result.stderr and "exp2" in result.stderr and "did you mean" not in result.stderr
    assert "did you mean softmax?" in runner.invoke(cli, ["explain", "sotfmax"]).stderr


def _tensor_level_names() -> list[str]:
    from anneal.nn import functional

    return [f"F.{n}" for n in dir(functional) if not n.startswith("_")] + [
        f"Tensor.{n}" for n in dir(Tensor) if not n.startswith("_")
    ]


def test_explain_shows_every_tensor_level_name_or_says_why(cli: AnnealGroup, runner: CliRunner) -> None:
    """Every name of anneal.nn.functional and Tensor, qualified and plain: its traced graph (exit 0), or a usage
    error saying why it has none (exit 2); never a crash (exit 1)."""
    from anneal.introspect import FUNCTIONAL_EXAMPLES, METHOD_EXAMPLES
    from anneal.nn import functional

    shown, refused, wrong = set(), {}, []
    for name in _tensor_level_names():
        for asked in (name, name.split(".", 1)[1]):
            result = runner.invoke(cli, ["explain", asked])
            if result.exit_code == 0 and result.stdout.startswith("== ") and " lowers to " in result.stdout:
                shown.add(asked)
            elif result.exit_code == 2 and f"{asked} has no graph to show: " in result.stderr:
                refused[asked] = result.stderr.splitlines()[-1]
            else:
                wrong.append(f"{asked}: exit {result.exit_code}: {result.output[-300:]}")
    assert wrong == []
    # what the tables hold is shown: every functional in __all__, every Tensor method with an example
    assert {f"F.{n}" for n in functional.__all__} <= {f"F.{n}" for n in FUNCTIONAL_EXAMPLES} <= shown
    assert {f"Tensor.{n}" for n in METHOD_EXAMPLES} <= shown
    # and only names that build no graph are refused
    assert {"Tensor.item", "Tensor.backward", "Tensor.shape", "F.with_gradient", "F.Tensor"} <= set(refused)
    assert (
        "Tensor.shape has no graph to show: Tensor.shape is an attribute, not an operation" in refused["Tensor.shape"]
    )
    assert not {n for n in refused if n.startswith("Tensor.") and callable(getattr(Tensor, n[7:]))} - {
        "Tensor.backward",
        "Tensor.item",
        "Tensor.tolist",
        "Tensor.numpy",
        "Tensor.size",
        "Tensor.dim",
        "Tensor.numel",
    }


@pytest.mark.parametrize(("name", "call", "legend", "build", "must"), [
    ("softmax", "x.softmax()", "x: float32 (2, 3)", lambda x, w, t: x.softmax(), {"EXP2", "REDUCE_AXIS", "RECIPROCAL"}),
    ("matmul", "x.matmul(w)", "x: float32 (2, 3); w: float32 (3, 4)", lambda x, w, t: x @ w, {"MUL", "REDUCE_AXIS"}),
    ("relu", "x.relu()", "x: float32 (2, 3)", lambda x, w, t: x.relu(), {"WHERE"}),
    ("conv2d", "F.conv2d(t(1, 2, 4, 4), t(3, 2, 3, 3))", "t(*shape): float32 of that shape",
     lambda x, w, t: F.conv2d(t(1, 2, 4, 4), t(3, 2, 3, 3)), {"MUL", "REDUCE_AXIS"}),
    ("F.relu", "F.relu(x)", "x: float32 (2, 3)", lambda x, w, t: F.relu(x), {"WHERE"}),
])  # fmt: skip
def test_explain_a_tensor_level_name_shows_what_it_lowers_to(cli: AnnealGroup, runner: CliRunner, name: str,
                                                             call: str, legend: str, build: Any,
                                                             must: set[str]) -> None:  # fmt: skip
    from anneal.introspect import graph_rows, row_text

    def t(*shape: int) -> Tensor:
        n = int(np.prod(shape))
        return Tensor((np.arange(n, dtype=np.float32) / n).reshape(shape))

    result = runner.invoke(cli, ["explain", name])
    assert result.exit_code == 0, result.output
    x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3) / 6)
    expected = [row_text(r) for r in graph_rows([build(x, Tensor(np.ones((3, 4), np.float32)), t)], [])]
    lines = result.output.splitlines()
    assert lines[0] == f"== {call} lowers to {len(expected)} UOps ({legend})"
    assert lines[1 : 1 + len(expected)] == expected  # the same graph the Tensor call builds
    assert must <= {r.split()[1] for r in expected}


def test_graph_help_says_what_the_readme_says(cli: AnnealGroup, runner: CliRunner) -> None:
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| `anneal graph "))
    help_text = " ".join(runner.invoke(cli, ["graph", "--help"]).output.split())
    assert "one line per node" in row and "one line per node" in help_text
    assert "UOp DAG of one training step" in row and "UOp DAG of one training step" in help_text

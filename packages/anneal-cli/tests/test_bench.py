"""`anneal bench`: every case timed, the ratios against PyTorch measured in the same run, gradients checked."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from click.testing import CliRunner

from anneal_cli.bench.cases import OP_CASES, STEP_CASES
from anneal_cli.main import AnnealGroup


def test_the_suite_against_torch_as_json(cli: AnnealGroup, runner: CliRunner, offline_data: None) -> None:
    result = runner.invoke(cli, ["bench", "--device", "cpu", "--size", "tiny", "--steps", "3", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["device"] == "cpu" and document["torch"] == {"version": torch.__version__, "device": "cpu"}
    rows = {row["case"]: row for row in document["cases"]}
    assert [c.name for c in OP_CASES] + [f"train {c.model} tiny" for c in STEP_CASES] == list(rows)
    for case in OP_CASES:
        row = rows[case.name]
        assert row["gradients_agree"] is True, row  # torch's gradients check anneal's
        assert row["ratio"] == pytest.approx(row["anneal_ms"] / row["torch_ms"])
        assert row["anneal_gflops"] == pytest.approx(case.flops(row["shapes"]) / row["anneal_ms"] / 1e6, rel=1e-6)
    for case in STEP_CASES:
        row = rows[f"train {case.model} tiny"]
        assert row["steps_per_s"] == pytest.approx(1000 / row["anneal_ms"]) and row["first_step_s"] > 0


def test_the_table_without_a_peer(cli: AnnealGroup, runner: CliRunner) -> None:
    result = runner.invoke(cli, ["bench", "--device", "cpu", "--size", "tiny", "--only", "matmul", "--against",
                                 "none"])  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "anneal bench  device cpu  size tiny  peer none"
    (row,) = lines[2:]
    assert row.split()[0] == "matmul" and row.split()[2:4] == ["-", "-"] and "GFLOP/s" in row


def test_bad_requests_say_what_to_do(cli: AnnealGroup, runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    nothing = runner.invoke(cli, ["bench", "--device", "cpu", "--only", "frobnicate"])
    assert nothing.exit_code == 2 and "no case matches --only frobnicate" in nothing.output
    assert "matmul" in nothing.output  # the cases there are
    monkeypatch.setitem(sys.modules, "torch", None)  # PyTorch not installed
    missing = runner.invoke(cli, ["bench", "--device", "cpu", "--size", "tiny", "--against", "torch"])
    assert missing.exit_code == 1 and "PyTorch is not installed" in missing.output
    alone = runner.invoke(cli, ["bench", "--device", "cpu", "--size", "tiny", "--only", "softmax"])
    assert alone.exit_code == 0 and "peer none" in alone.output  # the default: torch only when installed

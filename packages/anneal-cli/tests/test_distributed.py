"""Data-parallel `anneal train` on MPI: the single-process run is the oracle.

The MPI runs go through the mpich wheel's mpiexec (the nox session installs mpi4py and mpich). Without them
these tests skip on a developer's machine and fail under ANNEAL_EXPECT_MPI=1, which CI sets (scripts/test.sh),
so a missing MPI can never turn them into silent skips.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from anneal_cli import distributed
from anneal_cli.main import AnnealGroup
from anneal_cli.runs import Row, csv_text, read_csv, tensors_digest
from anneal_models import mlp
from anneal_models.trainer import shard

ANNEAL = [sys.executable, "-m", "anneal_cli.main", "train"]


@pytest.fixture(scope="module")
def mpiexec() -> str:
    found = distributed.find_mpiexec()
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        found = None
    if found is None:
        if os.environ.get("ANNEAL_EXPECT_MPI", "") not in ("", "0"):
            pytest.fail("ANNEAL_EXPECT_MPI is set, but mpi4py or mpiexec is missing (pip install mpi4py mpich)")
        pytest.skip("no MPI (pip install mpi4py mpich)")
    return found


def run(cmd: list[str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_RUNTIME_DIR": os.environ.get("XDG_RUNTIME_DIR", "/tmp")}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def losses(folder: Path) -> np.ndarray:
    return np.array([r.loss for r in read_csv(folder / "loss.csv")])


def train(args: list[str], mpiexec: str | None = None, n: int = 1) -> subprocess.CompletedProcess[str]:
    cmd = ([mpiexec, "-n", str(n)] if mpiexec else []) + ANNEAL + [*args, "--device", "cpu", "--plain"]
    result = run(cmd)
    assert result.returncode == 0, result.stderr[-2000:]
    return result


def checkpoint_digest(folder: Path) -> str:
    from anneal_cli.runs import load_checkpoint

    _, info = load_checkpoint(folder / "checkpoint.safetensors")
    return info["anneal.sha256"]


def assert_ranks_agree(folder: Path, n: int) -> None:
    record = json.loads((folder / "ranks.json").read_text())
    assert record["ranks"] == n and len(record["sha256"]) == n
    assert set(record["sha256"]) == {checkpoint_digest(folder)}  # every rank's state is the saved one


# ---- units: sharding, buckets, the launcher's environment ----
@pytest.mark.parametrize("n,size", [(8, 2), (7, 2), (10, 3), (5, 5), (256, 4)])
def test_shards_tile_the_global_batch_in_rank_order(n: int, size: int) -> None:
    parts = [shard(n, r, size) for r in range(size)]
    assert parts[0].start == 0 and parts[-1].stop == n
    assert all(a.stop == b.start for a, b in zip(parts, parts[1:]))
    lengths = [p.stop - p.start for p in parts]
    assert max(lengths) - min(lengths) <= 1 and sum(lengths) == n


def test_a_batch_smaller_than_the_world_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot be split over 4 ranks"):
        shard(3, 0, 4)
    with pytest.raises(ValueError, match="rank 2"):
        shard(8, 2, 2)


def test_buckets_cover_every_gradient_once_last_first_within_the_limit() -> None:
    sizes = [10, 300, 5, 5, 80, 1000, 3]
    buckets = distributed.plan_buckets(sizes, 100)
    flat = [i for b in buckets for i in b]
    assert flat == list(reversed(range(len(sizes))))  # the backward finishes the last parameters first
    for b in buckets:
        assert len(b) == 1 or sum(sizes[i] for i in b) <= 100  # only a gradient larger than a bucket stands alone
    assert distributed.plan_buckets(sizes, 10**9) == [flat]
    # the first bucket closes once it holds first_elems (DDP's 1 MiB): the backward's first gradients go early
    assert distributed.plan_buckets(sizes, 10**9, first_elems=2) == [[6], flat[1:]]
    assert distributed.plan_buckets(sizes, 10**9, first_elems=1000) == [[6, 5], flat[2:]]
    assert distributed.plan_buckets(sizes, 10**9, first_elems=1003) == [[6, 5], flat[2:]]
    assert distributed.plan_buckets(sizes, 10**9, first_elems=1004) == [[6, 5, 4], flat[3:]]
    assert distributed.plan_buckets(sizes, 100, first_elems=50) == distributed.plan_buckets(sizes, 100)


def test_launched_reads_the_launchers_environment() -> None:
    assert distributed.launched({}) is None
    assert distributed.launched({"PMI_SIZE": "1", "PMI_RANK": "0"}) is None  # one process: nothing changes
    assert distributed.launched({"PMI_SIZE": "4", "PMI_RANK": "3", "MPI_LOCALRANKID": "1"}) == distributed.Launch(
        4, 3, 1
    )
    ompi = {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "1"}
    assert distributed.launched(ompi) == distributed.Launch(2, 1, 1)


def test_loss_csv_keeps_ranks_and_communication_time() -> None:
    rows = [Row(1, 0.5, None, 2, 3.25), Row(2, 0.25, 0.3, 2, 1.5), Row(3, 0.2)]  # step 3: resumed on 1 rank
    text = csv_text(rows)
    assert text.splitlines()[0] == "step,loss,val,ranks,comm_ms"
    assert text.splitlines()[3] == "3,0.2,,1,0.000"
    assert csv_text([Row(1, 0.5)]) == "step,loss\n1,0.5\n"  # a single-process run's file is unchanged


def test_one_process_never_imports_mpi4py(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from anneal_cli.main import build_cli\n"
        "try:\n"
        "    build_cli().main(['train', 'mlp', '--preset', 'tiny', '--steps', '2', '--device', 'cpu', '--plain'],"
        " prog_name='anneal')\n"
        "except SystemExit as e:\n"
        "    assert not e.code, e.code\n"
        "print('mpi4py' in sys.modules)\n"
    )
    result = run([sys.executable, "-c", code])
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "False"


# ---- the data-parallel step: one jit, each bucket's exchange started inside the backward ----
class OneRank:
    """A GradientReducer of one rank (the sums are the values themselves) that records, for each of its calls, how
    many kernels the device had run (WebGPU: recorded) by then."""

    rank, size = 0, 1

    def __init__(self, device: str, bucket_elems: int) -> None:
        from anneal.realize import runner as device_runner

        self.run, self.bucket_elems = device_runner(device), bucket_elems
        self.events: list[tuple[str, int]] = []

    def buckets(self, sizes: list[int]) -> list[list[int]]:
        return distributed.plan_buckets(sizes, self.bucket_elems)

    def _event(self, name: str) -> None:
        self.events.append((name, self.run.stats.kernels_run))

    def begin(self) -> None:
        self._event("begin")

    def start(self, flat: np.ndarray) -> None:
        self._event("start")

    def progress(self) -> None:
        pass

    def finish(self) -> None:
        self._event("finish")


@pytest.mark.parametrize("device", ["cpu", "webgpu"])
def test_the_step_is_one_jit_that_starts_each_bucket_inside_the_backward(
    device: str, request: pytest.FixtureRequest
) -> None:
    if device == "webgpu":
        request.getfixturevalue("adapter")
    config = {**mlp.DEFAULTS, **mlp.PRESETS["tiny"]}
    alone, parallel = mlp.build(dict(config), device), mlp.build(dict(config), device)
    reducer = OneRank(device, bucket_elems=40)  # mlp tiny's 6 gradients (1 to 1024 floats): 5 buckets
    parallel.data_parallel(reducer)
    traced = 0
    outputs = parallel._outputs

    def counted(x: Any, y: Any) -> Any:
        nonlocal traced
        traced += 1
        return outputs(x, y)

    parallel._outputs = counted  # type: ignore[method-assign]
    scheduler = reducer.run.scheduler.stats
    for i in range(6):
        reducer.events.clear()
        if i == 2:
            scheduled = (scheduler.hits, scheduler.misses)
        np.testing.assert_allclose(parallel.step(i), alone.step(i), rtol=1e-5, err_msg=f"step {i}")
        names = [name for name, _ in reducer.events]
        assert names == ["begin", *["start"] * 5, "finish"], (i, names)  # replays run the exchange too
        at = dict(reducer.events[:1] + reducer.events[-1:])
        starts = [k for name, k in reducer.events if name == "start"]
        # the first bucket's read (begin) and, on the cpu, its Allreduce were started while backward kernels were
        # still to run: the buckets start at several points of the backward, the last at its end
        assert at["begin"] < at["finish"], reducer.events
        if device == "cpu":
            assert starts[0] < starts[-1] == at["finish"] and len(set(starts)) >= 3, reducer.events
    jitted = parallel.jit
    assert jitted.replays == 4 and jitted.host_steps == 5 + 1  # a step per bucket, and the wait and write-back
    assert traced == 2  # the step's Python ran at the first call and the capture; replays built no graph
    assert (scheduler.hits, scheduler.misses) == scheduled


# ---- acceptance: 2 ranks against 1 ----
def test_mlp_on_two_ranks_equals_one_process(tmp_path: Path, mpiexec: str) -> None:
    args = ["mlp", "--preset", "tiny", "--steps", "12", "--eval-every", "6"]
    train([*args, "--out", str(tmp_path / "one")])
    two = train([*args, "--out", str(tmp_path / "two")], mpiexec, 2)
    np.testing.assert_allclose(losses(tmp_path / "two"), losses(tmp_path / "one"), rtol=1e-5)
    assert_ranks_agree(tmp_path / "two", 2)
    rows = read_csv(tmp_path / "two" / "loss.csv")
    assert {r.ranks for r in rows} == {2} and all(r.comm_ms is not None and r.comm_ms > 0 for r in rows)
    assert "ranks 2" in two.stdout and two.stdout.count("model mlp") == 1  # rank 0 alone prints
    assert "comm " in two.stdout


@pytest.mark.oracle_python  # the models' numerics, the same on any Python: 3.11 alone (noxfile)
def test_nanogpt_on_two_ranks_equals_one_process_and_resumes_on_one_and_two(
    tmp_path: Path, mpiexec: str, offline_data: None
) -> None:
    args = ["nanogpt", "--preset", "tiny"]
    train([*args, "--steps", "6", "--out", str(tmp_path / "one")])
    train([*args, "--steps", "3", "--out", str(tmp_path / "two")], mpiexec, 2)
    assert_ranks_agree(tmp_path / "two", 2)
    train(["nanogpt", "--steps", "6", "--resume", str(tmp_path / "two"), "--out", str(tmp_path / "on1")])  # 2 -> 1
    train([*args, "--steps", "6", "--resume", str(tmp_path / "two"), "--out", str(tmp_path / "on2")], mpiexec, 2)
    reference = losses(tmp_path / "one")
    for folder in ("on1", "on2"):
        np.testing.assert_allclose(losses(tmp_path / folder), reference, rtol=1e-5, err_msg=folder)
    assert_ranks_agree(tmp_path / "on2", 2)
    ranks = [r.ranks for r in read_csv(tmp_path / "on1" / "loss.csv")]
    assert ranks == [2, 2, 2, 1, 1, 1]


@pytest.mark.oracle_python  # the models' numerics, the same on any Python: 3.11 alone (noxfile)
def test_dropout_on_two_ranks_draws_the_one_process_masks(tmp_path: Path, mpiexec: str, offline_data: None) -> None:
    args = ["nanogpt", "--preset", "tiny", "--steps", "4", "--set", "dropout=0.2"]  # each rank: its rows' masks
    train([*args, "--out", str(tmp_path / "one")])
    train([*args, "--out", str(tmp_path / "two")], mpiexec, 2)
    np.testing.assert_allclose(losses(tmp_path / "two"), losses(tmp_path / "one"), rtol=1e-5)


@pytest.mark.oracle_python  # the models' numerics, the same on any Python: 3.11 alone (noxfile)
def test_bert_on_two_ranks_equals_one_process(tmp_path: Path, mpiexec: str, offline_data: None) -> None:
    """The masked-token mean is over the global batch's masked positions: each rank weighs its share of them."""
    args = ["bert", "--preset", "tiny", "--steps", "4"]
    train([*args, "--out", str(tmp_path / "one")])
    train([*args, "--out", str(tmp_path / "two")], mpiexec, 2)
    np.testing.assert_allclose(losses(tmp_path / "two"), losses(tmp_path / "one"), rtol=1e-5)


@pytest.mark.oracle_python  # the models' numerics, the same on any Python: 3.11 alone (noxfile)
def test_moe_on_two_ranks_starts_as_one_process(tmp_path: Path, mpiexec: str, offline_data: None) -> None:
    """moe's load-balance term is a product of two batch means, computed per shard (as Switch Transformer's
    per-device term): the first step's language-model loss is the global one, later steps follow closely."""
    args = ["moe", "--preset", "tiny", "--steps", "4"]
    train([*args, "--out", str(tmp_path / "one")])
    train([*args, "--out", str(tmp_path / "two")], mpiexec, 2)
    one, two = losses(tmp_path / "one"), losses(tmp_path / "two")
    np.testing.assert_allclose(two[0], one[0], rtol=1e-5)
    np.testing.assert_allclose(two, one, rtol=2e-2)


@pytest.mark.oracle_python  # the models' numerics, the same on any Python: 3.11 alone (noxfile)
def test_many_small_buckets_on_two_ranks_equal_one_process(tmp_path: Path, mpiexec: str, offline_data: None) -> None:
    """Buckets of 10 KiB: nanogpt tiny's gradients go in many Allreduces, each started inside the backward."""
    args = ["nanogpt", "--preset", "tiny", "--steps", "4"]
    train([*args, "--out", str(tmp_path / "one")])
    train([*args, "--bucket-mb", "0.01", "--out", str(tmp_path / "two")], mpiexec, 2)
    np.testing.assert_allclose(losses(tmp_path / "two"), losses(tmp_path / "one"), rtol=1e-5)
    assert_ranks_agree(tmp_path / "two", 2)


def test_resume_from_one_process_on_two_ranks(tmp_path: Path, mpiexec: str) -> None:
    args = ["mlp", "--preset", "tiny"]
    train([*args, "--steps", "8", "--out", str(tmp_path / "one")])
    train([*args, "--steps", "4", "--out", str(tmp_path / "half")])
    train(["mlp", "--steps", "8", "--resume", str(tmp_path / "half")], mpiexec, 2)
    np.testing.assert_allclose(losses(tmp_path / "half"), losses(tmp_path / "one"), rtol=1e-5)
    assert_ranks_agree(tmp_path / "half", 2)


def test_digests_are_of_the_tensors() -> None:  # the ranks compare what the checkpoint's checksum covers
    a = {"w": np.ones(3, np.float32)}
    assert tensors_digest(a) != tensors_digest({"w": np.array([1, 1, 1.0000001], np.float32)})


# ---- faults ----
def _rank_pid(marker: str, rank: int, deadline: float) -> int:
    """The pid of the rank process whose environment carries marker."""
    while time.monotonic() < deadline:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                env = (entry / "environ").read_bytes().split(b"\0")
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if f"DP_TEST_MARK={marker}".encode() in env and f"PMI_RANK={rank}".encode() in env:
                if b"anneal_cli.main" in cmdline:
                    return int(entry.name)
        time.sleep(0.2)
    raise AssertionError(f"no rank {rank} process appeared")


def _start(marker: str, extra: list[str], nproc: int = 2) -> subprocess.Popen[str]:
    env = {**os.environ, "DP_TEST_MARK": marker}
    cmd = [*ANNEAL, "mlp", "--nproc", str(nproc), "--steps", "1000000", "--device", "cpu", "--plain",
           "--log-every", "50", *extra]  # fmt: skip
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _wait_for_steps(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:  # training is under way once rank 0 logs a step
        if line.startswith("step "):
            return
    raise AssertionError("the run ended before its first logged step")


def test_killing_one_rank_ends_the_run_with_one_line_naming_it(mpiexec: str) -> None:
    marker = uuid.uuid4().hex
    proc = _start(marker, ["--comm-timeout", "60"])
    try:
        _wait_for_steps(proc)
        victim = _rank_pid(marker, 1, time.monotonic() + 30)
        t0 = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        _, err = proc.communicate(timeout=30)
        elapsed = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    assert elapsed < 30, err
    errors = [line for line in err.splitlines() if line.startswith("anneal: error:")]
    assert len(errors) == 1, err
    assert f"rank 1 (pid {victim}" in errors[0] and "died" in errors[0], err


def test_a_hung_rank_is_named_after_the_timeout(mpiexec: str) -> None:
    marker = uuid.uuid4().hex
    proc = _start(marker, ["--comm-timeout", "4"])
    try:
        _wait_for_steps(proc)
        victim = _rank_pid(marker, 1, time.monotonic() + 30)
        t0 = time.monotonic()
        os.kill(victim, signal.SIGSTOP)  # alive, but never arrives at the next exchange
        _, err = proc.communicate(timeout=30)
        elapsed = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    assert 4 <= elapsed < 30, err
    errors = [line for line in err.splitlines() if line.startswith("anneal: error:")]
    assert len(errors) == 1, err
    assert "rank 1 did not reach" in errors[0] and "within 4 s" in errors[0], err


def test_the_one_of_three_that_never_arrived_is_named(mpiexec: str) -> None:
    marker = uuid.uuid4().hex
    proc = _start(marker, ["--comm-timeout", "4"], nproc=3)
    try:
        _wait_for_steps(proc)
        victim = _rank_pid(marker, 2, time.monotonic() + 30)
        os.kill(victim, signal.SIGSTOP)
        _, err = proc.communicate(timeout=40)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    errors = [line for line in err.splitlines() if line.startswith("anneal: error:")]
    assert errors and "rank 2 did not reach" in errors[0], err  # the first to time out names it; then all end


def test_rank_0_alone_draws_the_dashboard_when_the_launcher_has_a_terminal(mpiexec: str) -> None:
    # --nproc adds --terminal when its own stdout is a terminal: rank 0's stdout is mpiexec's pipe
    result = run([mpiexec, "-n", "2", *ANNEAL, "mlp", "--preset", "tiny", "--steps", "5", "--device", "cpu",
                  "--terminal"])  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert "\x1b[" in out and "anneal train mlp" in out and "ranks " in out  # drawn with a terminal's codes
    assert out.count("trained mlp to step 5/5") == 1  # the dashboard's closing line, rank 0's alone
    assert "model mlp  device" not in out  # not the plain header


# ---- indexed devices ----
def test_device_names_take_an_adapter_index() -> None:
    from anneal.registry import DeviceError, split_index

    assert split_index("webgpu:1") == ("webgpu", 1) and split_index("cpu") == ("cpu", None)
    for bad in ("webgpu:x", "cpu:0", ":1"):
        with pytest.raises(DeviceError):
            split_index(bad)


def test_an_adapter_index_past_the_adapters_is_refused_naming_them() -> None:
    from anneal_wgpu import adapters

    with pytest.raises(adapters.NoAdapterError, match="there is no adapter webgpu:99; the adapters: "):
        adapters.use_index(99)
    adapters.use_index(None)


def test_train_refuses_an_index_on_a_backend_without_adapters(cli: AnnealGroup, runner: CliRunner) -> None:
    result = runner.invoke(cli, ["train", "mlp", "--device", "cpu:1", "--steps", "1"])
    assert result.exit_code == 2 and "only webgpu has indexed adapters" in result.output

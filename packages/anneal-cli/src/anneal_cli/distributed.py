"""Data-parallel training on MPI (mpi4py): `mpiexec -n N anneal train ...` and `anneal train --nproc N`.

A process learns that it is one of several from its launcher's environment (MPICH/Hydra's PMI_SIZE,
Open MPI's OMPI_COMM_WORLD_SIZE); only then is mpi4py imported, so a single process runs exactly as
before. The trainer side (sharding, the step split around the exchange) is
anneal_models.trainer.SupervisedTrainer.data_parallel(); this module is the communication:

- the state is broadcast from rank 0 before the first step (every rank then starts identical);
- gradients are exchanged in flat float32 buckets (BUCKET_BYTES, in reverse parameter order: the order
  the backward finishes them), one nonblocking Iallreduce per bucket, started as soon as the bucket is
  copied out of the device, so the copy of the next bucket overlaps the exchange of the previous one;
  the step's losses ride in the last bucket (weighted by the shard's share: the global mean);
- every wait polls with a deadline and checks that the ranks on this host are alive: a rank that died
  is named at once, one that hangs after `timeout` seconds; either way this rank prints one line and
  exits 1 (never a silent hang). Rank 0 also kills the ranks on its host that never arrived, so that
  a launcher that keeps the others running (Hydra's -disable-auto-cleanup) ends too.
"""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# The launchers' variables for (world size, rank, rank on this host), first match wins.
LAUNCHER_ENV = (
    ("PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID"),  # MPICH's Hydra (the mpich wheel), Intel MPI, srun --mpi=pmi2
    ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"),  # Open MPI
)
BUCKET_BYTES = 25 * 2**20  # PyTorch DDP's default bucket: large enough for bandwidth, small enough to overlap
DEFAULT_TIMEOUT = 300.0  # seconds a rank waits for the others in one exchange (NCCL's default is 600)
POLL_CHECK = 0.5  # seconds between liveness checks of the other ranks while waiting
_HEARTBEAT_TAG = 17
_HYDRA_BANNER = ("=====", "=   ", "YOUR APPLICATION TERMINATED", "This typically refers", "Please see the FAQ")


class RankFailure(RuntimeError):
    """Another rank died or did not arrive in time; the message names it."""


@dataclass(frozen=True)
class Launch:
    """What the launcher's environment says about this process."""

    size: int
    rank: int
    local_rank: int


def launched(environ: Mapping[str, str] | None = None) -> Launch | None:
    """This process's place in a launch of several processes, or None for a lone process (mpi4py is not
    imported then)."""
    env = os.environ if environ is None else environ
    for size_key, rank_key, local_key in LAUNCHER_ENV:
        if size_key in env:
            try:
                size, rank = int(env[size_key]), int(env.get(rank_key, "0"))
                local = int(env.get(local_key, str(rank)))
            except ValueError:
                return None
            return Launch(size, rank, local) if size > 1 else None
    return None


def mpi_implementation() -> str:
    """The MPI library mpi4py is built against, as one line, or why there is none (for anneal doctor).
    Importing mpi4py.MPI initializes MPI as a singleton process: doctor only."""
    try:
        from mpi4py import MPI
    except ImportError as exc:
        return f"not installed (pip install mpi4py mpich: {exc})"
    except Exception as exc:  # a broken MPI library fails on import
        return f"mpi4py cannot load its MPI library: {type(exc).__name__}: {exc}"
    version = " ".join(MPI.Get_library_version().strip().splitlines()[0].split())
    mpiexec = find_mpiexec()
    return f"{version} (MPI {'.'.join(map(str, MPI.Get_version()))}, mpi4py); mpiexec: {mpiexec or 'not found'}"


def find_mpiexec() -> str | None:
    """The mpiexec beside this Python (the mpich wheel installs it into the venv), else on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.access(here, os.X_OK) else shutil.which("mpiexec")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a dead child its launcher has not reaped yet is a zombie: dead all the same
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def plan_buckets(sizes: Sequence[int], bucket_elems: int) -> list[list[int]]:
    """Gradient indices grouped into buckets of at most bucket_elems elements (a larger gradient is a bucket
    of its own), in reverse order: the last parameters' gradients are the backward's first."""
    buckets: list[list[int]] = []
    current: list[int] = []
    filled = 0
    for i in reversed(range(len(sizes))):
        if current and filled + sizes[i] > bucket_elems:
            buckets.append(current)
            current, filled = [], 0
        current.append(i)
        filled += sizes[i]
    if current:
        buckets.append(current)
    return buckets


class World:
    """This rank's view of the job: rank, size, the peers' hosts and pids, and the exchanges."""

    def __init__(self, timeout: float = DEFAULT_TIMEOUT, bucket_bytes: int = BUCKET_BYTES) -> None:
        from mpi4py import MPI  # only here: a lone process never imports it

        self.MPI = MPI
        self.comm = MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.timeout = timeout
        self.bucket_elems = max(1, bucket_bytes // 4)
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.peers: list[tuple[str, int]] = self.comm.allgather((self.host, self.pid))
        local = [r for r, (h, _) in enumerate(self.peers) if h == self.host]
        self.local_rank, self.local_size = local.index(self.rank), len(local)
        self.hosts = len({h for h, _ in self.peers})
        self.step = 0  # the step whose exchange runs (for messages)
        self.comm_ms = 0.0  # the last step's time in average(): copies out, exchange, waiting for the others
        self._buckets: list[list[int]] | None = None

    # ---- waiting, with a deadline and liveness checks ----
    def _fail(self, text: str) -> RankFailure:
        return RankFailure(f"rank {self.rank} of {self.size}: {text}")

    def check_peers(self) -> None:
        for r, (host, pid) in enumerate(self.peers):
            if r != self.rank and host == self.host and not _alive(pid):
                raise self._fail(f"rank {r} (pid {pid} on {host}) died at step {self.step}; stopping")

    def wait(self, requests: list[Any], what: str, heartbeats: list[Any] | None = None) -> None:
        """Wait for requests; RankFailure when a rank on this host died, or after timeout seconds."""
        Request = self.MPI.Request  # noqa: N806 - mpi4py's name
        t0 = last_check = time.monotonic()
        spins = 0
        while not Request.Testall(requests):
            spins += 1
            if spins > 200:
                time.sleep(0.0002)  # past a short spin, give the core back (2 ranks may share 2 cores)
            now = time.monotonic()
            if now - last_check >= POLL_CHECK:
                last_check = now
                self.check_peers()
                if now - t0 > self.timeout:
                    raise self._fail(self._late(what, heartbeats))

    def _late(self, what: str, heartbeats: list[Any] | None) -> str:
        missing: list[int]
        if self.rank == 0 and heartbeats is not None:
            flags = [bool(h.Test()) for h in heartbeats]
            missing = [r for r, ok in zip(range(1, self.size), flags) if not ok]
        else:
            missing = [r for r in range(self.size) if r != self.rank] if self.size == 2 else []
        who = f"rank {', '.join(map(str, missing))}" if missing else "another rank"
        if self.rank == 0:
            for r in missing:  # the ones on this host that hang would keep an -disable-auto-cleanup job alive
                host, pid = self.peers[r]
                if host == self.host:
                    with _suppress_os():
                        os.kill(pid, signal.SIGKILL)
        return f"{who} did not reach {what} within {self.timeout:g} s (hung?); stopping"

    # ---- collectives ----
    def bcast(self, obj: Any, what: str) -> Any:
        """Rank 0's obj (pickled) on every rank: its length, then its bytes, each waited for as wait() does
        (mpi4py's pickled collectives only block)."""
        MPI = self.MPI  # noqa: N806
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL) if self.rank == 0 else b""
        size = np.array([len(data)], np.int64)
        self.wait([self.comm.Ibcast([size, MPI.INT64_T], root=0)], what)
        buf = np.frombuffer(data, np.uint8).copy() if self.rank == 0 else np.empty(int(size[0]), np.uint8)
        self.wait([self.comm.Ibcast([buf, MPI.BYTE], root=0)], what)
        return obj if self.rank == 0 else pickle.loads(buf.tobytes())

    def gather(self, obj: Any, what: str) -> list[Any] | None:
        """obj (pickled) of every rank, on rank 0 (None elsewhere)."""
        MPI = self.MPI  # noqa: N806
        data = np.frombuffer(pickle.dumps(obj), np.uint8).copy()
        sizes = np.zeros(self.size, np.int64)
        self.wait([self.comm.Igather([np.array([len(data)], np.int64), MPI.INT64_T], [sizes, MPI.INT64_T], root=0)],
                  what)  # fmt: skip
        out = np.empty(int(sizes.sum()) if self.rank == 0 else 0, np.uint8)
        recv = [out, (sizes, np.concatenate([[0], np.cumsum(sizes)[:-1]])), MPI.BYTE] if self.rank == 0 else None
        self.wait([self.comm.Igatherv([data, MPI.BYTE], recv, root=0)], what)
        if self.rank != 0:
            return None
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        return [pickle.loads(out[offsets[r] : offsets[r + 1]].tobytes()) for r in range(self.size)]

    def barrier(self, what: str) -> None:
        self.wait([self.comm.Ibarrier()], what)

    def average(self, grads: Sequence[Any], values: Sequence[Any], weight: float) -> tuple[
        list[np.ndarray], list[float]]:  # fmt: skip
        """The GradientReducer of anneal_models.trainer: weighted sums over every rank, in flat buckets."""
        t0 = time.perf_counter()
        MPI = self.MPI  # noqa: N806
        sizes = [int(np.prod(g.shape)) for g in grads]
        if self._buckets is None:
            self._buckets = plan_buckets(sizes, self.bucket_elems)
        what = f"step {self.step + 1}'s gradient exchange"
        heartbeats = self._heartbeats()
        flats: list[np.ndarray] = []
        requests: list[Any] = []
        last = len(self._buckets) - 1
        for b, members in enumerate(self._buckets):
            n = sum(sizes[i] for i in members) + (len(values) if b == last else 0)
            flat = np.empty(n, np.float32)
            o = 0
            for i in members:
                flat[o : o + sizes[i]] = np.asarray(grads[i].numpy(), np.float32).reshape(-1)
                o += sizes[i]
            if b == last:
                flat[o:] = [float(v.numpy()) for v in values]
            if weight != 1.0:
                flat *= np.float32(weight)
            requests.append(self.comm.Iallreduce(MPI.IN_PLACE, flat, op=MPI.SUM))
            flats.append(flat)
            MPI.Request.Testall(requests)  # MPI progresses inside its calls: nudge the buckets already sent
        self.wait(requests + heartbeats, what, heartbeats if self.rank == 0 else None)
        out: list[np.ndarray] = [np.empty(0, np.float32)] * len(grads)
        for members, flat in zip(self._buckets, flats):
            o = 0
            for i in members:
                out[i] = flat[o : o + sizes[i]]
                o += sizes[i]
        means = [float(v) for v in flats[last][len(flats[last]) - len(values) :]]
        self.step += 1
        self.comm_ms = (time.perf_counter() - t0) * 1000.0
        return out, means

    def _heartbeats(self) -> list[Any]:
        """One tiny message from every rank to rank 0 per exchange, so that rank 0 can name a rank that never
        arrived (an Allreduce cannot say who is missing)."""
        if self.rank == 0:
            self._hb = [np.zeros(1, np.int64) for _ in range(1, self.size)]
            return [self.comm.Irecv(buf, source=r, tag=_HEARTBEAT_TAG) for r, buf in zip(range(1, self.size), self._hb)]
        self._hb = [np.array([self.step], np.int64)]
        return [self.comm.Isend(self._hb[0], dest=0, tag=_HEARTBEAT_TAG)]


class _suppress_os:  # noqa: N801 - contextlib.suppress(OSError), spelled out to stay import-light
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> bool:
        return exc[0] is not None and issubclass(exc[0], OSError)


def cpu_threads_per_rank(local_size: int) -> int:
    """The cpu pool's threads for one of local_size ranks on a host: the usable cores split between them
    (two pools that each think they own the cores spin against each other)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(1, cores // max(1, local_size))


# ---- the launcher: anneal train --nproc N ----
def launch(nproc: int, argv: Sequence[str], echo: Callable[[str], None]) -> int:
    """Run `anneal train` argv (without --nproc) as nproc ranks through mpiexec; returns the exit code: 0, or 1
    for a failed run (the ranks said why), or 2 for a usage error."""
    mpiexec = find_mpiexec()
    if mpiexec is None:
        raise RuntimeError("--nproc needs mpiexec, which is not installed (pip install mpi4py mpich)")
    cmd = [mpiexec]
    if _is_hydra(mpiexec):  # keep the others running when one dies, so that they can say which one
        cmd.append("-disable-auto-cleanup")
    argv = list(argv)
    env = dict(os.environ)
    isatty = getattr(sys.stdout, "isatty", None)
    if callable(isatty) and isatty() and env.get("TERM") != "dumb" and not {"--plain", "--json"} & set(argv):
        argv.append("--terminal")  # rank 0 draws the dashboard through mpiexec's pipe, at this terminal's size
        size = shutil.get_terminal_size()
        env.update(COLUMNS=str(size.columns), LINES=str(size.lines))
    cmd += ["-n", str(nproc), sys.executable, "-m", "anneal_cli.main", "train", *argv]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, bufsize=1, env=env)
    relay = threading.Thread(target=_relay, args=(proc, echo), daemon=True)
    relay.start()
    try:
        rc = proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        rc = proc.wait()
    relay.join(timeout=5)
    return 0 if rc == 0 else 2 if rc == 2 else 1


def _relay(proc: subprocess.Popen[str], echo: Callable[[str], None]) -> None:
    """The ranks' stderr, less Hydra's banner about a killed process (the surviving ranks name it)."""
    assert proc.stderr is not None
    for line in proc.stderr:
        if not line.startswith(_HYDRA_BANNER) and line.strip():
            echo(line.rstrip("\n"))


def _is_hydra(mpiexec: str) -> bool:
    try:
        out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "HYDRA" in out.upper()

"""Data-parallel training on MPI (mpi4py): `mpiexec -n N anneal train ...` and `anneal train --nproc N`.

A process learns that it is one of several from its launcher's environment (MPICH/Hydra's PMI_SIZE,
Open MPI's OMPI_COMM_WORLD_SIZE); only then is mpi4py imported, so a single process runs exactly as
before. The trainer side (sharding, the one jitted step whose host steps copy each bucket of gradients out as
soon as the backward has written it) is anneal_models.trainer.SupervisedTrainer.data_parallel(); this module is
the communication:

- the state is broadcast from rank 0 before the first step (every rank then starts identical);
- gradients are summed in flat float32 buckets (FIRST_BUCKET_BYTES, then BUCKET_BYTES each, in reverse parameter
  order: the order the backward finishes them), one nonblocking Iallreduce per bucket, started by the trainer
  while the rest of the backward runs (every rank starts them in the same order) and nudged on (Testall)
  between its kernels;
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
# DDP's first bucket is smaller (1 MiB): it is what the backward finishes first, so its exchange starts early even
# in a model whose gradients fit one bucket of BUCKET_BYTES
FIRST_BUCKET_BYTES = 2**20
DEFAULT_TIMEOUT = 300.0  # seconds a rank waits for the others in one exchange (NCCL's default is 600)
POLL_CHECK = 0.5  # seconds between liveness checks of the other ranks while waiting
GRACE = 5.0  # --nproc: seconds the other ranks get to exit after one reported a failure
_HEARTBEAT_TAG = 17
_HYDRA_BANNER = ("=====", "=   ", "YOUR APPLICATION TERMINATED", "This typically refers", "Please see the FAQ")


class RankFailure(RuntimeError):
    """Another rank died or did not arrive in time; the message names it. laggards: the pids of hung ranks on this
    host that rank 0 ends (end_laggards) once it has said so; ended first, they would be named dead by the others."""

    def __init__(self, text: str, laggards: Sequence[int] = ()) -> None:
        super().__init__(text)
        self.laggards = list(laggards)

    def end_laggards(self) -> None:
        for pid in self.laggards:  # a hung rank would keep an -disable-auto-cleanup job alive
            with _suppress_os():
                os.kill(pid, signal.SIGKILL)


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


def _state(pid: int) -> str | None:
    """A process's state letter from /proc (R, S, T for stopped, Z for a zombie, ...); None where unknown."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _state(pid) != "Z"  # a dead child its launcher has not reaped yet is dead all the same


def plan_buckets(sizes: Sequence[int], bucket_elems: int, first_elems: int | None = None) -> list[list[int]]:
    """Gradient indices grouped into buckets of at most bucket_elems elements (a larger gradient is a bucket of its
    own), in reverse order: the last parameters' gradients are the backward's first. With first_elems, the first
    bucket closes as soon as it holds that many (DDP's rule: it starts the exchange early in the backward)."""
    buckets: list[list[int]] = []
    current: list[int] = []
    filled = 0
    for i in reversed(range(len(sizes))):
        if current and filled + sizes[i] > bucket_elems:
            buckets.append(current)
            current, filled = [], 0
        current.append(i)
        filled += sizes[i]
        if not buckets and first_elems is not None and filled >= first_elems:
            buckets.append(current)
            current, filled = [], 0
    if current:
        buckets.append(current)
    return buckets


class World:
    """This rank's view of the job: rank, size, the peers' hosts and pids, and the exchanges."""

    def __init__(self, timeout: float = DEFAULT_TIMEOUT, bucket_bytes: int = BUCKET_BYTES) -> None:
        try:
            from mpi4py import MPI  # only here: a lone process never imports it
        except ImportError as exc:
            raise RuntimeError(f"data-parallel training needs mpi4py and an MPI library: pip install mpi4py mpich "
                               f"(what the anneal-cli wheel's `mpi` extra holds) ({exc})") from None  # fmt: skip

        self.MPI = MPI
        self.comm = MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.timeout = timeout
        self.bucket_elems = max(1, bucket_bytes // 4)
        self.first_bucket_elems = max(1, min(bucket_bytes, FIRST_BUCKET_BYTES) // 4)
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.peers: list[tuple[str, int]] = self.comm.allgather((self.host, self.pid))
        local = [r for r, (h, _) in enumerate(self.peers) if h == self.host]
        self.local_rank, self.local_size = local.index(self.rank), len(local)
        self.hosts = len({h for h, _ in self.peers})
        self.step = 0  # the step whose exchange runs (for messages)
        self._requests: list[Any] = []  # the Iallreduces of the step's exchange
        self._moved = True  # every one of them completed
        self._heartbeat_requests: list[Any] = []

    # ---- waiting, with a deadline and liveness checks ----
    def _fail(self, text: str, laggards: Sequence[int] = ()) -> RankFailure:
        return RankFailure(f"rank {self.rank} of {self.size}: {text}", laggards)

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
                    raise self._fail(*self._late(what, heartbeats))

    def _late(self, what: str, heartbeats: list[Any] | None) -> tuple[str, list[int]]:
        """Who is late, as a message, and (on rank 0) the pids of the late ranks on this host, to end."""
        missing: list[int] = []
        if self.rank == 0 and heartbeats is not None:  # who never said it reached this exchange
            missing = [r for r, h in zip(range(1, self.size), heartbeats) if not h.Test()]
        if not missing:  # arrived, then stopped inside the exchange (SIGSTOP, a debugger): stopped ones on this host
            missing = [r for r, (h, pid) in enumerate(self.peers)
                       if r != self.rank and h == self.host and _state(pid) in ("T", "t")]  # fmt: skip
        if not missing and self.size == 2:  # of two, the late one is the other
            missing = [1 - self.rank]
        who = f"rank {', '.join(map(str, missing))}" if missing else "another rank"
        laggards = [self.peers[r][1] for r in missing if self.rank == 0 and self.peers[r][0] == self.host]
        return f"{who} did not reach {what} within {self.timeout:g} s (hung?); stopping", laggards

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

    # ---- the gradient exchange: the GradientReducer of anneal_models.trainer ----
    def buckets(self, sizes: Sequence[int]) -> list[list[int]]:
        """Gradient indices in buckets of at most bucket_bytes (the first of FIRST_BUCKET_BYTES at most), in the
        order they are exchanged (plan_buckets)."""
        return plan_buckets(sizes, self.bucket_elems, self.first_bucket_elems)

    def begin(self) -> None:
        """A step's exchange begins (before its first bucket): the heartbeat to rank 0 goes out."""
        self._requests = []
        self._heartbeat_requests = self._heartbeats()

    def start(self, flat: np.ndarray) -> None:
        """Sum flat (float32) over every rank, in place, without waiting; each rank starts its buckets in the same
        order (MPI matches nonblocking collectives by order)."""
        MPI = self.MPI  # noqa: N806
        self._requests.append(self.comm.Iallreduce(MPI.IN_PLACE, flat, op=MPI.SUM))
        self._moved = False
        self.progress()

    def progress(self) -> None:
        """Let MPI move the buckets started (it progresses inside its calls only); called after every kernel of the
        backward once a bucket started, so a call with nothing left to move costs nothing."""
        if self._requests and not self._moved:
            self._moved = self.MPI.Request.Testall(self._requests)

    def finish(self) -> None:
        """Wait until every bucket started holds its sum; RankFailure when a rank died or after the timeout."""
        heartbeats = self._heartbeat_requests
        self.wait(self._requests + heartbeats, f"step {self.step + 1}'s gradient exchange",
                  heartbeats if self.rank == 0 else None)  # fmt: skip
        self._requests, self._heartbeat_requests = [], []
        self.step += 1

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
    # a session of its own, so that the whole job can be ended at once (below)
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, bufsize=1, env=env, start_new_session=True)
    failed = threading.Event()
    exit_string: list[str] = []  # Hydra's words for how a rank ended ("Killed (signal 9)")
    relay = threading.Thread(target=_relay, args=(proc, echo, failed, exit_string), daemon=True)
    relay.start()
    watch = _RankWatch(proc.pid, nproc)
    try:
        while proc.poll() is None:
            watch.poll()
            # Once a rank has said why it failed, the others get GRACE seconds to say theirs and exit; one that
            # cannot (hung where this host cannot see it, stopped) would keep -disable-auto-cleanup's job alive.
            if failed.wait(timeout=0.02):  # often: Hydra kills the other ranks moments after one dies
                try:
                    proc.wait(timeout=GRACE)
                except subprocess.TimeoutExpired:
                    _end(proc)
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)  # Hydra forwards it to the ranks
        try:
            proc.wait(timeout=GRACE)
        except subprocess.TimeoutExpired:
            _end(proc)
    rc = proc.wait()
    relay.join(timeout=5)
    if rc == 0:
        return 0
    if not failed.is_set() and watch.first_death is not None:
        # Hydra killed the others before any of them could say which rank died (it does, even with
        # -disable-auto-cleanup, a moment after the death): say it from what this launcher watched
        rank, pid = watch.first_death
        how = f" ({exit_string[-1]})" if exit_string else ""
        echo(f"anneal: error: rank {rank} (pid {pid} on {socket.gethostname()}) died{how}; every rank of {nproc} "
             "stopped")  # fmt: skip
        return 1
    return 2 if rc == 2 and not failed.is_set() else 1  # 2: the ranks' usage error (click's exit code)


class _RankWatch:
    """The launcher's view of its job's ranks on this host: their pids (mpiexec's descendants whose environment
    names a PMI_RANK) and the first of them to die while others lived."""

    def __init__(self, session: int, nproc: int) -> None:
        self.session, self.nproc = session, nproc
        self.pids: dict[int, int] = {}  # rank -> pid
        self.first_death: tuple[int, int] | None = None
        self._scanned = 0.0

    def poll(self) -> None:
        now = time.monotonic()
        if len(self.pids) < self.nproc and now - self._scanned > 0.5:  # a /proc scan until every rank is found
            self._scanned = now
            self._discover()
            if len(self.pids) == self.nproc and hasattr(os, "pidfd_open"):
                # Hydra kills the others a moment after one dies: a pidfd wakes this launcher at the first exit
                threading.Thread(target=self._wait_exits, daemon=True).start()
        if self.first_death is None and self.pids:
            dead = [(r, pid) for r, pid in sorted(self.pids.items()) if not _alive(pid)]
            if dead and len(dead) < len(self.pids):
                self.first_death = dead[0]

    def _wait_exits(self) -> None:
        import select

        fds: dict[int, tuple[int, int]] = {}
        try:
            for r, pid in self.pids.items():
                fds[os.pidfd_open(pid)] = (r, pid)
        except OSError:  # one has exited already: the polling in poll() has it
            for fd in fds:
                os.close(fd)
            return
        waiter = select.poll()
        for fd in fds:
            waiter.register(fd, select.POLLIN)
        try:
            while fds:
                ready = waiter.poll()
                if self.first_death is None and len(ready) < len(fds):  # one exited while others lived
                    self.first_death = min(fds[fd] for fd, _ in ready)
                for fd, _ in ready:
                    waiter.unregister(fd)
                    os.close(fd)
                    del fds[fd]
        finally:
            for fd in fds:
                os.close(fd)

    def _discover(self) -> None:
        parents: dict[int, int] = {}
        for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
            try:
                with open(f"/proc/{entry}/stat") as f:  # pid (comm) state ppid ...
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
        for pid in parents:
            if pid in self.pids.values() or not self._descends(pid, parents):
                continue
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = f.read().split(b"\0")
            except OSError:
                continue
            for item in env:
                if item.startswith(b"PMI_RANK=") and item[9:].isdigit():
                    self.pids.setdefault(int(item[9:]), pid)

    def _descends(self, pid: int, parents: dict[int, int]) -> bool:
        """pid is mpiexec's descendant (Hydra's proxies start sessions of their own: ancestry, not session)."""
        for _ in range(16):
            pid = parents.get(pid, 0)
            if pid == self.session:
                return True
            if pid <= 1:
                return False
        return False


def _end(proc: subprocess.Popen[str]) -> None:
    """SIGTERM to mpiexec (Hydra then ends the ranks, on every node), SIGKILL to the job's session after GRACE."""
    proc.terminate()
    try:
        proc.wait(timeout=GRACE)
    except subprocess.TimeoutExpired:
        with _suppress_os():
            os.killpg(proc.pid, signal.SIGKILL)


def _relay(proc: subprocess.Popen[str], echo: Callable[[str], None], failed: threading.Event,
           exit_string: list[str]) -> None:  # fmt: skip
    """The ranks' stderr, less Hydra's banner about a killed process (the surviving ranks, or launch(), name
    it); sets failed when a rank reports a failure."""
    assert proc.stderr is not None
    for line in proc.stderr:
        if "EXIT STRING:" in line:
            exit_string.append(line.split("EXIT STRING:", 1)[1].strip())
        if not line.startswith(_HYDRA_BANNER) and line.strip():
            echo(line.rstrip("\n"))
            if line.startswith("anneal: error:"):
                failed.set()


def _is_hydra(mpiexec: str) -> bool:
    try:
        out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "HYDRA" in out.upper()

"""Render kernels in worker processes: a step's first compile lowers its kernels in parallel.

The lowering is pure Python, so it scales with processes, not threads. Workers are plain
``python -m anneal_wgpu.render_pool`` subprocesses (never forks of a process that holds a GPU
device and its driver's threads, never a re-run of the user's script as multiprocessing's spawn
would do). A kernel travels as its flat node list (``anneal_ir.uop.flatten``: a deep graph does
not fit pickle's recursion), the rendered kernel comes back pickled.
"""

from __future__ import annotations

import math
import os
import pickle
import struct
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any

from anneal_ir import UOp
from anneal_ir.uop import flatten, unflatten
from anneal_schedule.opt import Opt, OptOps
from anneal_wgpu.render import Kernel, render_wgsl


def _send(stream: IO[bytes], obj: Any) -> None:
    data = pickle.dumps(obj)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _cost(flat: Any, opts: tuple[Opt, ...]) -> int:
    """A kernel's lowering work, roughly: its nodes, times the values an invocation unrolls (a register tile's
    UPCASTs, a staged step's UNROLL)."""
    unrolled = math.prod(o.amount for o in opts if o.op in (OptOps.UPCAST, OptOps.UNROLL) and o.amount)
    return len(flat) * unrolled


def _receive(stream: IO[bytes]) -> Any:
    head = stream.read(8)
    if len(head) < 8:
        raise EOFError("render worker closed its pipe")
    (n,) = struct.unpack("<Q", head)
    return pickle.loads(stream.read(n))


class RenderPool:
    """Up to ``size`` worker processes, started on first use and ended with the pool."""

    def __init__(self, size: int):
        self.size = size
        self.workers: list[subprocess.Popen[bytes]] = []

    def _start(self, n: int) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        while len(self.workers) < n:
            self.workers.append(subprocess.Popen([sys.executable, "-m", "anneal_wgpu.render_pool"],  # noqa: S603
                                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env))  # fmt: skip

    def render(self, jobs: list[tuple[str, UOp, tuple[Opt, ...], bool]]) -> list[Kernel | None]:
        """Each (name, ast, opts, f16) rendered (None where a worker failed: the caller renders it itself). Each
        worker takes the next job as soon as it returns one, the costliest first (a thread per worker waits on its
        pipe): rounds of one job per worker waited for each round's slowest, and a tile takes ten times an
        elementwise kernel."""
        n = min(self.size, len(jobs))
        flats = [flatten(ast) for _, ast, _, _ in jobs]
        pending = iter(sorted(range(len(jobs)), key=lambda i: -_cost(flats[i], jobs[i][2])))
        take = threading.Lock()
        out: list[Kernel | None] = [None] * len(jobs)

        def serve(w: subprocess.Popen[bytes]) -> None:
            assert w.stdin is not None and w.stdout is not None
            while True:
                with take:
                    i = next(pending, None)
                if i is None:
                    return
                name, _, opts, f16 = jobs[i]
                _send(w.stdin, (name, flats[i], opts, f16))
                out[i] = _receive(w.stdout)

        try:
            self._start(n)
            with ThreadPoolExecutor(n) as threads:
                for done in [threads.submit(serve, w) for w in self.workers[:n]]:
                    done.result()
            return out
        except (OSError, EOFError, pickle.PickleError):  # a pool that cannot work costs only the serial renders
            self.close()
            return [None] * len(jobs)

    def close(self) -> None:
        for w in self.workers:
            if w.stdin is not None:
                w.stdin.close()
            w.kill()
        self.workers = []

    def __del__(self) -> None:
        self.close()


def _serve() -> None:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))
    while True:
        try:
            name, flat, opts, f16 = _receive(stdin)
        except EOFError:
            return
        try:
            result: Kernel | None = render_wgsl(name, unflatten(flat), f16, opts)
        except Exception:  # the parent renders it again and reports the error, naming the kernel
            result = None
        _send(stdout, result)


if __name__ == "__main__":
    _serve()

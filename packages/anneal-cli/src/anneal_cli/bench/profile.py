"""Where a jitted call's GPU time goes: one replay timed kernel by kernel with the device's timestamp queries.

The benchmarks (`benchmarks/bench_*.py --profile`) and `anneal bench` read the same rows: each kernel's seconds,
name, range extents and opts, in the order the replay ran them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class KernelTime:
    seconds: float
    name: str
    ranges: tuple[int, ...]  # the extents of the kernel's RANGEs
    opts: str  # the optimizer's opts (the program's description)
    ast: Any  # the kernel's SINK


@dataclass(frozen=True)
class Profile:
    wall: float  # seconds of the whole call, host included
    kernels: list[KernelTime]

    @property
    def gpu(self) -> float:
        return sum(k.seconds for k in self.kernels)

    def slowest(self, top: int) -> list[KernelTime]:
        return sorted(self.kernels, key=lambda k: -k.seconds)[:top]


def profile_replay(device: str, captured: Any, call: Callable[[], object]) -> Profile | None:
    """Time one call of a jitted function whose capture is `captured` (its `.calls`' schedules are what a replay
    runs); None where the device has no timestamp queries or the call ran other kernels than the capture's."""
    from anneal.realize import runner

    run = runner(device)
    backend = run.backend
    kernels = [k for c in captured.calls for k in c.schedule.kernels]
    start, stop = getattr(backend, "start_timing", None), getattr(backend, "stop_timing", None)
    if start is None or stop is None or not start():
        return None
    t0 = time.perf_counter()
    call()
    backend.synchronize()
    wall = time.perf_counter() - t0
    times = stop()
    if len(times) != len(kernels):
        return None
    rows = []
    for t, kern in zip(times, kernels):
        ends = tuple(int(r.src[0].vmax) for r in kern.ast.toposort() if r.op.name == "RANGE")
        prog = run.programs.get(kern.ast.key)
        opts = str(getattr(getattr(prog, "kernel", None), "strategy", ""))
        rows.append(KernelTime(t, kern.name, ends, opts, kern.ast))
    return Profile(wall, rows)


def print_slowest(
    profile: Profile | None, top: int = 12, indent: str = "  ", width: int = 160, summary: bool = True
) -> None:
    """The call's wall and GPU time (with summary), then its slowest kernels with their ranges and opts."""
    if profile is None:
        print(f"{indent}profile: no timestamp queries on this device (or the replay ran other kernels)")
        return
    if summary:
        gpu, wall = profile.gpu * 1e3, profile.wall * 1e3
        print(f"{indent}profile: {wall:.2f} ms wall, {gpu:.2f} ms of GPU time in {len(profile.kernels)} kernels")
    for k in profile.slowest(top):
        print(f"{indent}  {k.seconds * 1e3:7.3f} ms {k.name} ranges {list(k.ranges)}: {k.opts[:width]}")

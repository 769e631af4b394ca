"""Where a jitted call's GPU time goes: one replay timed kernel by kernel with the device's timestamp queries.

The benchmarks (`benchmarks/bench_*.py --profile`) and `anneal bench` read the same rows: each kernel's seconds,
name, range extents and opts, in the order the replay ran them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class KernelTime:
    seconds: float
    name: str
    ranges: tuple[int, ...]  # the extents of the kernel's RANGEs
    opts: str  # the optimizer's opts (the program's description)
    ast: Any  # the kernel's SINK
    source: str = ""  # the program's generated source

    @property
    def flops(self) -> float:
        """Multiply-adds of its sums of products, two FLOPs each (0 for a kernel with none)."""
        return contraction_flops(self.ast)


def contraction_flops(ast: Any) -> float:
    """2 x the points of every sum of products in the kernel (each REDUCE(ADD) of a MUL): its output ranges times
    its reduction ranges. A matmul's 2mnk."""
    from anneal_ir import Ops
    from anneal_schedule.analysis import ranges_of

    deps = ranges_of(ast)
    total = 0.0
    for n in deps:
        if n.op is Ops.REDUCE and n.arg is Ops.ADD and n.src[0].op is Ops.MUL:
            total += 2.0 * math.prod(int(r.src[0].vmax) for r in deps[n] | set(n.src[1:]))
    return total


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
        rows.append(KernelTime(t, kern.name, ends, opts, kern.ast, str(getattr(prog, "source", ""))))
    return Profile(wall, rows)


def print_slowest(
    profile: Profile | None,
    top: int = 12,
    indent: str = "  ",
    width: int = 160,
    summary: bool = True,
    dump: str | Path | None = None,
) -> None:
    """The call's wall and GPU time (with summary), then its slowest kernels with their ranges, TFLOP/s (sums of
    products) and opts; with dump, each of those kernels' sources into that folder, slowest first."""
    if profile is None:
        print(f"{indent}profile: no timestamp queries on this device (or the replay ran other kernels)")
        return
    if summary:
        gpu, wall = profile.gpu * 1e3, profile.wall * 1e3
        print(f"{indent}profile: {wall:.2f} ms wall, {gpu:.2f} ms of GPU time in {len(profile.kernels)} kernels")
    for i, k in enumerate(profile.slowest(top)):
        rate = f" {k.flops / k.seconds / 1e12:5.1f} TFLOP/s" if k.flops and k.seconds else ""
        print(f"{indent}  {k.seconds * 1e3:7.3f} ms{rate} {k.name} ranges {list(k.ranges)}: {k.opts[:width]}")
        if dump is not None and k.source:
            folder = Path(dump)
            folder.mkdir(parents=True, exist_ok=True)
            header = f"// {k.seconds * 1e3:.3f} ms{rate}, ranges {list(k.ranges)}\n"
            (folder / f"{i:02d}_{k.name}.txt").write_text(header + k.source)

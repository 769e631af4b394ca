"""Runner: binds a Schedule to buffers on one backend and runs its kernels."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

from anneal_ir import UOp
from anneal_ir.sint import UnboundVariableError, upper
from anneal_schedule.analysis import flops
from anneal_schedule.backend import Backend, Program
from anneal_schedule.buffer import Buffer
from anneal_schedule.schedule import Kernel, Schedule, Scheduler


@dataclass
class RunStats:
    kernels_run: int = 0
    programs_compiled: int = 0


@dataclass
class Executed:
    """One schedule as it ran: every slot's buffer (inputs first). What a JIT replays."""

    schedule: Schedule
    slots: list[Buffer]


@dataclass
class Runner:
    """One per device: a scheduler, a program cache keyed by kernel content hash, stats."""

    device: str
    backend: Backend
    scheduler: Scheduler = field(default_factory=Scheduler)
    programs: dict[bytes, Program] = field(default_factory=dict)
    stats: RunStats = field(default_factory=RunStats)
    recording: list[Executed] | None = None  # when a list, each execute() is appended (JIT capture)
    debug: int = 0  # ANNEAL_DEBUG: 2 prints one line per kernel run (device timestamps if any), 4 also its source
    flops: dict[bytes, int] = field(default_factory=dict)  # per kernel, for ANNEAL_DEBUG=2's TFLOP/s

    def __post_init__(self) -> None:
        self.scheduler.max_buffers = self.backend.limits.max_buffers
        self.scheduler.parallel = self.backend.limits.parallel

    def program(self, name: str, ast: UOp) -> Program:
        prog = self.programs.get(ast.key)
        if prog is None:
            prog = self.backend.compile(name, ast)
            self.programs[ast.key] = prog
            self.stats.programs_compiled += 1
        return prog

    def realize(self, outputs: list[UOp], var_values: dict[str, int] | None = None) -> list[Buffer]:
        """Schedule and run; returns one Buffer per output."""
        sched, inputs, bound = self.scheduler.schedule_bound(outputs)
        return self.execute(sched, inputs, bound | (var_values or {}))

    def execute(self, sched: Schedule, inputs: list[Buffer], var_values: dict[str, int]) -> list[Buffer]:
        missing = [v for v in sched.variables if v not in var_values]
        if missing:
            raise UnboundVariableError(f"Variable {missing[0]!r} has no value in this graph: bind it where data "
                                       f"enters, e.g. x.reshape({missing[0]}.bind(len(data)), ...)")  # fmt: skip
        physical: dict[int, Buffer] = {}
        slots: list[Buffer] = list(inputs)
        for k, (size, dtype) in enumerate(sched.buffers):
            pid = sched.physical[k]
            if pid not in physical:
                physical[pid] = Buffer(self.device, self.backend, upper(size), dtype)
            slots.append(physical[pid])
        self.run_kernels(sched, slots, var_values)
        if self.recording is not None:
            self.recording.append(Executed(sched, slots))
        return [slots[s] for s in sched.outputs]

    def run_kernels(self, sched: Schedule, slots: list[Buffer], var_values: dict[str, int]) -> None:
        prepare = getattr(self.backend, "prepare", None)
        if prepare is not None:  # a backend that compiles many kernels at once gets them together
            new = {k.ast.key: (k.name, k.ast) for k in sched.kernels if k.ast.key not in self.programs}
            if len(new) > 1:
                prepare(list(new.values()))
        if self.debug >= 2:
            self._run_timed(sched, slots, var_values)
            return
        for kern in sched.kernels:
            prog = self.program(kern.name, kern.ast)
            self.backend.run(prog, [slots[s].ensure() for s in kern.slots], var_values)
            self.stats.kernels_run += 1
        flush = getattr(self.backend, "flush_soon", None)
        if flush is not None:  # the device starts on this schedule while the host goes on to the next
            flush()

    def _run_timed(self, sched: Schedule, slots: list[Buffer], var_values: dict[str, int]) -> None:
        """ANNEAL_DEBUG=2: one line per kernel. GPU timestamps where the backend has them (start_timing /
        stop_timing: no host round trip between kernels), else the wall time of a synchronize around each."""
        start = getattr(self.backend, "start_timing", None)
        if start is not None and start():
            progs = []
            for kern in sched.kernels:
                progs.append(self.program(kern.name, kern.ast))
                self.backend.run(progs[-1], [slots[s].ensure() for s in kern.slots], var_values)
                self.stats.kernels_run += 1
            times = self.backend.stop_timing()  # type: ignore[attr-defined]
            for kern, prog, dt in zip(sched.kernels, progs, times):
                self._report(kern, prog, dt, slots, "gpu")
            return
        for kern in sched.kernels:
            prog = self.program(kern.name, kern.ast)
            buffers = [slots[s].ensure() for s in kern.slots]
            self.backend.synchronize()
            t0 = time.perf_counter()
            self.backend.run(prog, buffers, var_values)
            self.backend.synchronize()
            self.stats.kernels_run += 1
            self._report(kern, prog, time.perf_counter() - t0, slots, "wall")

    def _report(self, kern: Kernel, prog: Program, dt: float, slots: list[Buffer], clock: str) -> None:
        nbytes = sum(slots[s].nbytes for s in kern.slots)
        if kern.ast.key not in self.flops:
            self.flops[kern.ast.key] = flops(kern.ast)
        rate = self.flops[kern.ast.key] / max(dt, 1e-9)
        print(f"*** {self.device} {kern.name:>5} {kern.fused_ops:4d} ops  {dt * 1e6:9.1f} us {clock:<4} "
              f"{nbytes / max(dt, 1e-9) / 1e9:7.2f} GB/s {rate / 1e12:9.4g} TFLOP/s  "
              f"args {[slots[s].size for s in kern.slots]}  opts: {getattr(prog, 'opts', '-')}",
              file=sys.stderr)  # fmt: skip
        if self.debug >= 4:
            print(prog.source, file=sys.stderr)

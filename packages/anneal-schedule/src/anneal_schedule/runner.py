"""Runner: binds a Schedule to buffers on one backend and runs its kernels, and the host steps placed between them."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
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


@dataclass(frozen=True)
class HostStep:
    """Host code that is part of a step: the runner runs it at its point of the step (after the kernel that writes
    the last of the outputs it waits for, or between schedules: Runner.host), a jit capture records it there, and
    every replay runs it there again, given that replay's buffers. What it does with them is its own (a
    data-parallel step copies gradients out and starts their exchange); it must not build or realize graphs.

    ``poll``, when given, is called after each kernel that runs later in the same schedule: progress for work the
    step started without waiting for it (a device read, a nonblocking message)."""

    name: str
    run: Callable[[list[Buffer]], None]
    poll: Callable[[], None] | None = None


@dataclass(frozen=True)
class PlacedStep:
    """A host step at its point of one schedule: after kernel ``after`` (-1: before the first), given the buffers
    of ``slots``."""

    step: HostStep
    after: int
    slots: tuple[int, ...]


@dataclass
class Executed:
    """One schedule as it ran: every slot's buffer (inputs first) and its host steps. What a JIT replays."""

    schedule: Schedule
    slots: list[Buffer]
    device: str
    host_steps: tuple[PlacedStep, ...] = ()


def place(sched: Schedule, step: HostStep, outputs: Sequence[int]) -> PlacedStep:
    """step placed right after the last kernel that writes any of the schedule's outputs (indices into
    sched.outputs; a kernel writes its first argument); before the first kernel when none of them does."""
    slots = tuple(sched.outputs[j] for j in outputs)
    wanted = set(slots)
    after = max((k for k, kern in enumerate(sched.kernels) if kern.slots[0] in wanted), default=-1)
    return PlacedStep(step, after, slots)


class _HostSteps:
    """The host steps of one run of a schedule, by the kernel they follow, and the polls of those already run."""

    def __init__(self, placed: Sequence[PlacedStep], slots: list[Buffer]) -> None:
        self.slots = slots
        self.after: dict[int, list[PlacedStep]] = {}
        for p in placed:
            self.after.setdefault(p.after, []).append(p)
        self.polls: list[Callable[[], None]] = []

    def run_after(self, k: int) -> None:
        for poll in self.polls:
            poll()
        for p in self.after.get(k, ()):
            p.step.run([self.slots[s] for s in p.slots])
            if p.step.poll is not None and p.step.poll not in self.polls:
                self.polls.append(p.step.poll)


@dataclass
class Runner:
    """One per device: a scheduler, a program cache keyed by kernel content hash, stats."""

    device: str
    backend: Backend
    scheduler: Scheduler = field(default_factory=Scheduler)
    programs: dict[bytes, Program] = field(default_factory=dict)
    stats: RunStats = field(default_factory=RunStats)
    recording: list[Executed] | None = None  # when a list, each execute() and host() is appended (JIT capture)
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

    def execute(
        self,
        sched: Schedule,
        inputs: list[Buffer],
        var_values: dict[str, int],
        host_steps: Sequence[tuple[HostStep, Sequence[int]]] = (),
    ) -> list[Buffer]:
        """Run sched on inputs (its other buffers allocated here); returns one Buffer per output. host_steps: each
        with the outputs (indices into sched.outputs) it waits for, run as soon as the kernels writing them ran."""
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
        placed = tuple(place(sched, step, outputs) for step, outputs in host_steps)
        self.run_kernels(sched, slots, var_values, placed)
        if self.recording is not None:
            self.recording.append(Executed(sched, slots, self.device, placed))
        return [slots[s] for s in sched.outputs]

    def host(self, step: HostStep, buffers: list[Buffer]) -> None:
        """Run step on buffers now, between schedules; a jit capture records it as a schedule of no kernels whose
        inputs are the buffers (a replay rebinds them as any schedule's)."""
        sched = Schedule((), len(buffers), (), (), ())
        slots = list(buffers)
        placed = (PlacedStep(step, -1, tuple(range(len(slots)))),)
        self.run_kernels(sched, slots, {}, placed)
        if self.recording is not None:
            self.recording.append(Executed(sched, slots, self.device, placed))

    def run_kernels(
        self, sched: Schedule, slots: list[Buffer], var_values: dict[str, int], host_steps: Sequence[PlacedStep] = ()
    ) -> None:
        prepare = getattr(self.backend, "prepare", None)
        if prepare is not None:  # a backend that compiles many kernels at once gets them together
            new = {k.ast.key: (k.name, k.ast) for k in sched.kernels if k.ast.key not in self.programs}
            if len(new) > 1:
                prepare(list(new.values()))
        host = _HostSteps(host_steps, slots) if host_steps else None
        if self.debug >= 2:
            self._run_timed(sched, slots, var_values, host)
            return
        if host is None:
            for kern in sched.kernels:
                prog = self.program(kern.name, kern.ast)
                self.backend.run(prog, [slots[s].ensure() for s in kern.slots], var_values)
                self.stats.kernels_run += 1
        else:
            host.run_after(-1)
            for k, kern in enumerate(sched.kernels):
                prog = self.program(kern.name, kern.ast)
                self.backend.run(prog, [slots[s].ensure() for s in kern.slots], var_values)
                self.stats.kernels_run += 1
                host.run_after(k)
        flush = getattr(self.backend, "flush_soon", None)
        if flush is not None:  # the device starts on this schedule while the host goes on to the next
            flush()

    def _run_timed(self, sched: Schedule, slots: list[Buffer], var_values: dict[str, int],
                   host: _HostSteps | None) -> None:  # fmt: skip
        """ANNEAL_DEBUG=2: one line per kernel. GPU timestamps where the backend has them (start_timing /
        stop_timing: no host round trip between kernels), else the wall time of a synchronize around each."""
        start = getattr(self.backend, "start_timing", None)
        if host is not None:
            host.run_after(-1)
        if start is not None and start():
            progs = []
            for k, kern in enumerate(sched.kernels):
                progs.append(self.program(kern.name, kern.ast))
                self.backend.run(progs[-1], [slots[s].ensure() for s in kern.slots], var_values)
                self.stats.kernels_run += 1
                if host is not None:
                    host.run_after(k)
            times = self.backend.stop_timing()  # type: ignore[attr-defined]
            for kern, prog, dt in zip(sched.kernels, progs, times):
                self._report(kern, prog, dt, slots, "gpu")
            return
        for k, kern in enumerate(sched.kernels):
            prog = self.program(kern.name, kern.ast)
            buffers = [slots[s].ensure() for s in kern.slots]
            self.backend.synchronize()
            t0 = time.perf_counter()
            self.backend.run(prog, buffers, var_values)
            self.backend.synchronize()
            self.stats.kernels_run += 1
            self._report(kern, prog, time.perf_counter() - t0, slots, "wall")
            if host is not None:
                host.run_after(k)

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

"""anneal.jit: capture the kernels of a step once, then replay them without re-tracing.

The first call runs the function normally (warm-up: compiles everything). The second call
runs it while recording every schedule executed, with the buffer of each slot. Later calls
skip Python entirely: the Tensor arguments' buffers are bound in place of the captured
ones and the recorded kernels run again. Parameters updated with ``assign`` live in the
same buffers across calls, so training steps replay correctly.

A size that changes per call is a Variable: pass ``x.reshape(batch.bind(n), ...)`` and one
capture serves every n in the Variable's bounds (its buffers are allocated for the largest).

Host steps (``anneal_schedule.runner.HostStep``) are host code that is part of the step: placed
in a schedule by ``realize_all(..., host_steps=...)`` (right after the kernels that compute what
they wait for) or between schedules by ``anneal.realize.run_host_step``. The capture records them
where they ran and every replay runs them there again, given that replay's buffers (an argument's
buffer rebound like a kernel's). They are how a replay runs host work inside a step (a
data-parallel step's gradient exchange) without tracing the function again.

Rules, as in tinygrad's TinyJit: pass every per-call input as a Tensor argument (anything
else is baked in at capture, except what host steps read when they run), realize what you
return, and expect the returned tensors to be overwritten by the next call (copy them if you
keep them).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from anneal import bounds
from anneal.realize import as_buffer, buffer_view, realize, runner
from anneal.tensor import Tensor
from anneal_ir import Ops, UOp
from anneal_ir.sint import bound_values
from anneal_schedule.buffer import Buffer
from anneal_schedule.runner import Executed


class JitError(RuntimeError):
    """A replay whose arguments do not match the capture; the message names the difference."""


def _tensor_args(args: tuple, kwargs: dict) -> list[Tensor]:
    return [a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)]


def _signature(ts: list[Tensor]) -> list[tuple]:
    return [(t.shape, t.dtype, t.device) for t in ts]


@dataclass
class Captured:
    calls: list[Executed]  # schedules in the order they ran, with their host steps (a host step alone: no kernels)
    arg_slots: list[tuple[int, int, int]]  # (call, slot, argument position) to rebind
    outputs: Any  # the function's return value, tensors replaced by (call, slot) or kept
    signature: list[tuple]
    checks: list[bounds.Check]  # index checks on the device the step makes: read after each replay


@dataclass
class jit:  # noqa: N801 - used as a decorator, like torch.compile / TinyJit
    fn: Callable[..., Any]
    calls: int = 0
    captured: Captured | None = None
    replays: int = field(default=0)

    @property
    def host_steps(self) -> int:
        """Host steps each replay runs (0 before the capture)."""
        return sum(len(call.host_steps) for call in self.captured.calls) if self.captured is not None else 0

    def __post_init__(self) -> None:
        functools.update_wrapper(self, self.fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        tensors = _tensor_args(args, kwargs)
        for t in tensors:
            t.realize()
        if self.captured is not None:
            return self.replay(tensors)
        self.calls += 1
        if self.calls == 1:
            return self.fn(*args, **kwargs)
        return self.capture(tensors, args, kwargs)

    def capture(self, tensors: list[Tensor], args: tuple, kwargs: dict) -> Any:
        devices = {t.device for t in tensors} or {"cpu"}
        if len(devices) > 1:
            raise JitError(f"jit: arguments on several devices {sorted(devices)}")
        device = devices.pop()
        run = runner(device)
        before = bounds.unread(device)
        run.recording = []
        try:
            out = self.fn(*args, **kwargs)
            realize(device, [])  # writes still pending (an index check, the random counter) belong to the step
        finally:
            recorded, run.recording = run.recording, None
        arg_buffers = {id(as_buffer(t.uop)): i for i, t in enumerate(tensors)}
        arg_slots = [
            (c, s, arg_buffers[id(b)])
            for c, call in enumerate(recorded)
            for s, b in enumerate(call.slots)
            if id(b) in arg_buffers
        ]
        where = {id(b): (c, s) for c, call in enumerate(recorded) for s, b in enumerate(call.slots)}

        def locate(x: Any) -> Any:
            if isinstance(x, Tensor):
                buf = as_buffer(x.uop)
                if buf is None or id(buf) not in where:
                    return x  # not produced by the step: returned as it is
                return ("slot", *where[id(buf)], x.shape, x.device)
            if isinstance(x, (tuple, list)):
                return type(x)(locate(v) for v in x)
            return x

        checks = [c for c in bounds.unread(device) if all(c is not b for b in before)]
        self.captured = Captured(recorded, arg_slots, locate(out), _signature(tensors), checks)
        return out

    def replay(self, tensors: list[Tensor]) -> Any:
        cap = self.captured
        assert cap is not None
        if _signature(tensors) != cap.signature:
            raise JitError(
                f"jit: arguments changed since capture: {cap.signature} -> {_signature(tensors)} "
                "(shapes, dtypes and devices must stay the same; make a new jit for new shapes)"
            )
        try:  # this call's Variable values, bound in the arguments' views
            values = bound_values(UOp(Ops.SINK, src=tuple(t.uop for t in tensors)))
        except ValueError as exc:
            raise JitError(f"jit: {exc}") from None
        bufs: list[Buffer] = []
        for t in tensors:
            b = as_buffer(t.uop)
            assert b is not None
            bufs.append(b)
        for c, s, i in cap.arg_slots:
            cap.calls[c].slots[s] = bufs[i]
        for call in cap.calls:
            runner(call.device).run_kernels(call.schedule, call.slots, values, call.host_steps)
        bounds.read_again(cap.checks)
        self.replays += 1

        def rebuild(x: Any) -> Any:
            if isinstance(x, tuple) and x and x[0] == "slot":
                _, c, s, shape, device = x
                return Tensor._from(buffer_view(cap.calls[c].slots[s], shape, values), device)
            if isinstance(x, (tuple, list)):
                return type(x)(rebuild(v) for v in x)
            return x

        return rebuild(cap.outputs)

"""A record of one compilation, for `anneal viz`: off by default, bounded in memory.

While a `CompileTrace` is active (``with trace.active():``) the compiler reports to it:
- every node built gets an origin: its phase (forward, backward, jvp) and the `nn.Module`
  path that was running (``h.3.attn.c_proj``); a node a rule builds inherits the origin of
  the node it replaced. The first origin a node gets is kept: nodes are hash-consed, so a
  backward node equal to a forward one *is* the forward one.
- every `graph_rewrite` pass: its name, its input and output roots and each rule that fired
  (the rule, the node it matched, what it made). Nodes are immutable and shared between
  passes, so a pass costs a few references, not a copy of its graph.
- decisions as events: what the scheduler materialized and why, the opts each kernel got.

Nothing here changes what the compiler does; with no trace active each hook is one
context-variable read. Limits keep a runaway compile from holding the process's memory:
past them the trace stops recording and says it was truncated.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from anneal_ir.uop import UOp


T = TypeVar("T")
FRESH_LIMIT = 10_000  # compiler-built nodes remembered while waiting to see whether a rule made them


@dataclass(frozen=True)
class Origin:
    phase: str  # "forward", "backward" or "jvp"
    module: str  # the nn.Module path that built the node ("" outside any module)


@dataclass(frozen=True)
class Firing:
    rule: str  # "table.function"
    matched: UOp
    result: UOp


@dataclass
class PassTrace:
    name: str
    root_in: UOp
    root_out: UOp | None = None
    fired: list[Firing] = field(default_factory=list)
    seconds: float = 0.0
    context: str = ""  # what the pass worked on, e.g. the kernel being built


@dataclass(frozen=True)
class Event:
    kind: str  # "realize", "kernel", "opts", ...
    node: UOp | None
    detail: dict[str, Any]
    context: str = ""


@dataclass
class CompileTrace:
    max_nodes: int = 500_000  # origins kept
    max_passes: int = 20_000
    max_firings: int = 200_000
    origins: dict[UOp, Origin] = field(default_factory=dict)
    made_by: dict[UOp, str] = field(default_factory=dict)  # node -> the rule that built it
    passes: list[PassTrace] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    module_paths: dict[int, str] = field(default_factory=dict)  # id(module) -> its path
    truncated: bool = False
    context: str = ""  # set by the scheduler: the kernel being built
    _phase: str | None = None  # None: nodes built now get no origin of their own (the compiler's)
    _module: str = ""
    _firings: int = 0
    _fresh: set[UOp] = field(default_factory=set)  # built by the compiler since the last rule fired

    # ---- turning it on ----
    @contextmanager
    def active(self) -> Iterator[CompileTrace]:
        token = current_trace.set(self)
        try:
            yield self
        finally:
            current_trace.reset(token)

    def name_modules(self, root: Any, prefix: str = "") -> None:
        """Give every module under root its attribute path (root.named_modules(), as torch)."""
        for path, module in root.named_modules(prefix):
            self.module_paths.setdefault(id(module), path)

    # ---- origins ----
    @contextmanager
    def within(self, phase: str | None = None, module: str | None = None) -> Iterator[None]:
        """Nodes built inside belong to phase and module (None: keep the current one)."""
        saved = self._phase, self._module
        self._phase = phase if phase is not None else self._phase
        self._module = module if module is not None else self._module
        try:
            yield
        finally:
            self._phase, self._module = saved

    @contextmanager
    def inside_module(self, module: Any) -> Iterator[None]:
        path = self.module_paths.get(id(module))
        with self.within(module=path if path is not None else self._module):
            yield

    @contextmanager
    def deriving(self, node: UOp, phase: str) -> Iterator[None]:
        """Build node's derivative: its nodes belong to phase and to the module that built node."""
        found = self.origins.get(node)
        with self.within(phase, found.module if found else self._module):
            yield

    def created(self, node: UOp) -> None:
        if self._phase is None:  # the compiler's node: a rule's, if one fires next (see fired)
            if len(self._fresh) >= FRESH_LIMIT:
                self._fresh.clear()
            self._fresh.add(node)
            return
        if node in self.origins:
            return
        if len(self.origins) >= self.max_nodes:
            self.truncated = True
            return
        self.origins[node] = Origin(self._phase, self._module)

    # ---- passes ----
    def begin_pass(self, name: str, root: UOp) -> PassTrace | None:
        if len(self.passes) >= self.max_passes:
            self.truncated = True
            return None
        record = PassTrace(name, root, context=self.context)
        self.passes.append(record)
        return record

    def fired(self, record: PassTrace | None, rule: str, matched: UOp, result: UOp) -> None:
        """A rule replaced matched by result: result (and what it built new) inherits matched's origin."""
        self._adopt(result, matched, rule)
        if record is None:
            return
        if self._firings >= self.max_firings:
            self.truncated = True
            return
        self._firings += 1
        record.fired.append(Firing(rule, matched, result))

    def rebuilt(self, node: UOp, new: UOp) -> None:
        """A rewrite rebuilt node over rewritten sources: the same node to a reader of the graph."""
        self._fresh.discard(new)
        origin = self.origins.get(node)
        if origin is not None and len(self.origins) < self.max_nodes:
            self.origins.setdefault(new, origin)

    def _adopt(self, result: UOp, matched: UOp, rule: str) -> None:
        """result, and the nodes the rule built for it, were made by rule in place of matched."""
        origin = self.origins.get(matched)
        stack = [result]
        while stack and len(self.made_by) < self.max_nodes:
            n = stack.pop()
            if n in self.made_by or (n is not result and n not in self._fresh):
                continue
            self.made_by[n] = rule
            if origin is not None:
                self.origins.setdefault(n, origin)
            stack.extend(n.src)
        self._fresh.clear()

    def event(self, kind: str, node: UOp | None = None, **detail: Any) -> None:
        if len(self.events) >= self.max_passes:
            self.truncated = True
            return
        self.events.append(Event(kind, node, detail, self.context))

    @contextmanager
    def working_on(self, context: str) -> Iterator[None]:
        saved, self.context = self.context, context
        try:
            yield
        finally:
            self.context = saved


# Observers only: the compiler reports here when a trace is set, and behaves the same either way.
current_trace: contextvars.ContextVar[CompileTrace | None] = contextvars.ContextVar("current_trace", default=None)


def derive(node: UOp, phase: str, fn: Callable[..., T], *args: Any) -> T:
    """For autodiff: fn(*args) builds node's derivative in phase (with no trace, just a call)."""
    trace = current_trace.get()
    if trace is None:
        return fn(*args)
    with trace.deriving(node, phase):
        return fn(*args)


@contextmanager
def inside_module(module: Any) -> Iterator[None]:
    """For nn.Module.__call__: the nodes built inside belong to module (a no-op with no trace)."""
    trace = current_trace.get()
    if trace is None:
        yield
        return
    with trace.inside_module(module):
        yield


@contextmanager
def working_on(context: str) -> Iterator[None]:
    """For the scheduler: passes and events inside are about context (a kernel's name)."""
    trace = current_trace.get()
    if trace is None:
        yield
        return
    with trace.working_on(context):
        yield


def event(kind: str, node: UOp | None = None, **detail: Any) -> None:
    trace = current_trace.get()
    if trace is not None:
        trace.event(kind, node, **detail)

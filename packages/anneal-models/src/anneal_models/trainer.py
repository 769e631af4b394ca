"""The training step every supervised model shares: forward, backward, update, in one graph.

A model supplies a module, an optimizer, a batch function and a loss; this class runs the
step under anneal.jit (captured on the second call, replayed after), and exposes the lazy
graph of one step for ``anneal graph`` / ``anneal kernels``.

It implements the whole trainer protocol of ``anneal train`` (docs/ARCHITECTURE.md,
"Models and trainers"): ``step``, ``evaluate`` (on ``val``, when the model gave one),
``graph``, ``lr``, ``state_dict``/``load_state_dict`` (parameters, buffers, optimizer state
and hyperparameters, LR schedule, steps done: a resumed run continues exactly) and ``config``.

Batches: ``batch(i)`` is called once per step, in order. A resumed trainer replays the
batch draws of the steps already done (host-side only, no compute), so a model whose
batch function draws from a seeded generator sees the same data as an uninterrupted run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol, overload

import numpy as np

from anneal import Tensor, dtypes
from anneal import random as anneal_random
from anneal.jit import jit
from anneal.nn.state import get_state_dict, load_state_dict
from anneal.optim import LRScheduler, Optimizer
from anneal.realize import Buffer, HostStep, read_async, realize_all, run_host_step

Batch = tuple[np.ndarray, np.ndarray]
HOST = "cpu"  # where the checkpoint's scalars (step counts, hyperparameters) live: any device can read them


@dataclass
class StepGraph:
    """The lazy tensors of one step: the forward outputs and (optionally) the gradients."""

    forward: list[Tensor]
    backward: list[Tensor]


def shard(n: int, rank: int, size: int) -> slice:
    """Rank's contiguous part of a global batch of n: the first n % size ranks take one more sample, so the
    parts tile the batch in rank order whatever the rank count (--resume on another count sees the same data)."""
    if not 0 <= rank < size:
        raise ValueError(f"rank {rank} is not in a world of {size}")
    if n < size:
        raise ValueError(f"a batch of {n} cannot be split over {size} ranks (each rank needs a sample)")
    base, extra = divmod(n, size)
    start = rank * base + min(rank, extra)
    return slice(start, start + base + (1 if rank < extra else 0))


class GradientReducer(Protocol):
    """The communication data-parallel training needs (anneal_cli.distributed implements it on MPI).

    rank and size say which part of each global batch this process takes (shard()). buckets() groups the
    gradients (by size) in the order they are exchanged. Each step, begin() opens the exchange, start(flat) sums a
    flat float32 bucket over every rank in place without waiting (every rank starts the same buckets in the same
    order), progress() lets the buckets started move on, and finish() waits until all of them hold their sums (it
    raises when a rank died or hangs)."""

    rank: int
    size: int

    def buckets(self, sizes: Sequence[int]) -> list[list[int]]: ...
    def begin(self) -> None: ...
    def start(self, flat: np.ndarray) -> None: ...
    def progress(self) -> None: ...
    def finish(self) -> None: ...


class GradientExchange:
    """The host side of a data-parallel step: its host steps, which the step's jit records and replays.

    One host step per bucket of gradients runs in the backward's schedule right after the kernel that writes the
    last of its gradients: it starts reading them to the host (on WebGPU a copy recorded at that point of the
    command stream, mapped asynchronously; on the cpu at once), and its poll, called after every later kernel,
    starts the bucket's Allreduce once its read completed (buckets in order) and nudges MPI. The step's outputs
    (losses) ride in the last bucket. After the backward, finish waits for every read and every bucket, and writes
    the weighted sums into ``averaged``: float32 buffers of the parameters' shapes, which the update reads."""

    def __init__(self, reducer: GradientReducer, params: Sequence[Tensor], device: str) -> None:
        self.reducer = reducer
        self.sizes = [math.prod(p.shape) for p in params]
        self.buckets = reducer.buckets(self.sizes)
        self.averaged = [Tensor(np.zeros(p.shape, np.float32), device=device).realize() for p in params]
        self.bucket_steps = [HostStep(f"gradient bucket {b}", partial(self._read, b), poll=self._progress)
                             for b in range(len(self.buckets))]  # fmt: skip
        self.finish_step = HostStep("gradient exchange: wait, write back", self._finish)
        self.weight = 1.0  # this rank's share of the global loss, set before each step (shard_weight)
        self.values: list[float] = []  # the step's outputs summed over the ranks (the global means)
        self.comm_ms = 0.0  # the last step's host time in the exchange: reads, copies, MPI calls, waiting
        self.flats: list[np.ndarray | None] = [None] * len(self.buckets)  # one per bucket, kept across steps
        self.reads: list[Any] = [None] * len(self.buckets)
        self.started = 0  # buckets whose Allreduce started this step (in bucket order, the same on every rank)
        self.open = False  # a step's exchange has begun and not finished

    def _read(self, bucket: int, buffers: list[Buffer]) -> None:
        t0 = time.perf_counter()
        if not self.open:  # the step's first bucket to be ready: the exchange begins
            self.reducer.begin()
            self.open, self.started, self.comm_ms = True, 0, 0.0
        self.reads[bucket] = read_async(buffers)
        self._start_ready()
        self.comm_ms += (time.perf_counter() - t0) * 1e3

    def _progress(self) -> None:
        t0 = time.perf_counter()
        self._start_ready()
        self.reducer.progress()
        self.comm_ms += (time.perf_counter() - t0) * 1e3

    def _start_ready(self) -> None:
        while self.started < len(self.buckets):
            read = self.reads[self.started]
            if read is None or not read.ready():
                return
            self._start(self.started, read.result())

    def _start(self, bucket: int, arrays: list[np.ndarray]) -> None:
        flat = self.flats[bucket]
        if flat is None:
            flat = self.flats[bucket] = np.empty(sum(a.size for a in arrays), np.float32)
        o = 0
        for a in arrays:
            flat[o : o + a.size] = a.reshape(-1)
            o += a.size
        if self.weight == 0.0:  # a shard with nothing in the loss (its own mean is NaN): it adds nothing
            flat[:] = 0.0
        elif self.weight != 1.0:
            flat *= np.float32(self.weight)
        self.reads[bucket] = None
        self.started += 1
        self.reducer.start(flat)

    def _finish(self, averaged: list[Buffer]) -> None:
        t0 = time.perf_counter()
        while self.started < len(self.buckets):  # reads not yet complete: wait for the device, MPI moving
            read = self.reads[self.started]
            assert read is not None, f"gradient bucket {self.started} was never read (a host step did not run)"
            while not read.ready():
                self.reducer.progress()
                time.sleep(0.0001)
            self._start_ready()
        self.reducer.finish()
        self.open = False
        for members, flat in zip(self.buckets, self.flats):
            assert flat is not None
            o = 0
            for i in members:
                averaged[i].copy_in(flat[o : o + self.sizes[i]])
                o += self.sizes[i]
        last = self.flats[-1]
        assert last is not None
        self.values = [float(v) for v in last[sum(self.sizes[i] for i in self.buckets[-1]) :]]
        self.comm_ms += (time.perf_counter() - t0) * 1e3


def _scalar(value: Any) -> Tensor | None:
    """A Python scalar (or a tuple of numbers) as a host tensor; None for what a tensor cannot hold."""
    if isinstance(value, bool):
        return Tensor(np.asarray(value, np.bool_), device=HOST)
    if isinstance(value, int):
        return Tensor(np.asarray(value, np.int64), device=HOST)
    if isinstance(value, float):
        return Tensor(np.asarray(value, np.float64), device=HOST)
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, (int, float)) for v in value):
        return Tensor(np.asarray(value, np.float64), device=HOST)
    return None


def _restore(saved: Tensor, like: Any) -> Any:
    """A saved scalar back as the Python type of ``like`` (the value it replaces)."""
    arr = saved.numpy()
    if isinstance(like, bool):
        return bool(arr)
    if isinstance(like, int):
        return int(arr)
    if isinstance(like, float):
        return float(arr)
    if isinstance(like, (tuple, list)):
        return type(like)(float(v) for v in arr.reshape(-1))
    return saved


class SupervisedTrainer:
    # A resumed trainer calls batch(i) for the steps already done, so that a batch function drawing from one
    # seeded generator continues where it stopped; a subclass whose batch(i) depends on i alone sets False.
    replay_batches_on_load = True
    # The class that defines the effective _train_step sets this when that step is exactly zero_grad,
    # _outputs, backward, _before_update, optimizer.step: data-parallel training then runs those parts with the
    # gradient exchange between them. A subclass with a step of its own is refused (data_parallel() says why).
    step_in_parts = True

    def __init__(
        self,
        model: Callable[[Tensor], Tensor],
        params: list[Tensor],
        optimizer: Optimizer,
        batch: Callable[[int], Batch],
        loss: Callable[[Tensor, Tensor], Tensor],
        device: str,
        use_jit: bool = True,
        *,
        val: Batch | None = None,
        schedule: LRScheduler | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        self.model, self.params, self.optimizer = model, params, optimizer
        self.batch, self.loss, self.device = batch, loss, device
        self.val, self.schedule = val, schedule
        self.config: dict[str, Any] = dict(config or {})
        self.out_dir: Path | None = None  # the run folder (anneal train --out): where samples go
        self._step: Callable[..., Any] = jit(self._train_step) if use_jit else self._train_step
        self.first_loss: float | None = None
        self.last_loss: float | None = None
        self.steps_done = 0
        self._peeked: Batch | None = None  # a batch drawn by graph(), used by the next step
        self._reducer: GradientReducer | None = None  # data-parallel: set by data_parallel()
        self._exchange: GradientExchange | None = None

    # ---- batches ----
    def _next_batch(self, i: int) -> Batch:
        if self._peeked is not None:
            batch, self._peeked = self._peeked, None
            return batch
        return self.batch(i)

    def _peek(self) -> Batch:
        if self._peeked is None:
            self._peeked = self.batch(self.steps_done)
        return self._peeked

    def _as_tensors(self, batch: Batch) -> tuple[Tensor, Tensor]:
        x, y = batch
        return Tensor(x, device=self.device), Tensor(y, device=self.device)

    def _tensors(self, i: int) -> tuple[Tensor, Tensor]:
        """Step i's batch as tensors."""
        return self._as_tensors(self._next_batch(i))

    # ---- the step ----
    def _outputs(self, x: Tensor, y: Tensor) -> list[Tensor]:
        """The step's forward outputs: the loss to minimize first, then anything else the step reports."""
        return [self.loss(self.model(x), y)]

    def _before_update(self) -> None:
        """Runs once the gradients are complete (averaged over ranks, when data-parallel), before the update:
        where a trainer clips them."""

    def _train_step(self, x: Tensor, y: Tensor) -> Tensor:
        self.optimizer.zero_grad()
        loss = self._outputs(x, y)[0]
        loss.backward()
        self._before_update()
        self.optimizer.step()  # computes the loss too, in the same schedule, before the update
        return loss

    # ---- data-parallel: one jitted step, its gradient exchange run by host steps inside it ----
    def parallel_problem(self) -> str | None:
        """Why this trainer cannot train data-parallel, or None when it can."""
        owner = next(c for c in type(self).__mro__ if "_train_step" in vars(c))
        if not vars(owner).get("step_in_parts", False):
            return f"{type(self).__name__} has a training step of its own, not split around a gradient exchange"
        params = {id(p) for p in self.params}
        buffers = sorted(k for k, t in get_state_dict(self.model).items() if id(t) not in params)
        if buffers:  # BatchNorm's running statistics: each rank would update them from its own shard
            return f"its module has buffers each rank would update from its own shard ({', '.join(buffers[:3])})"
        return None

    def data_parallel(self, reducer: GradientReducer) -> None:
        """Train as one rank of reducer.size: each step takes this rank's shard of the global batch and runs one
        jitted step: forward and backward (one schedule), during which each bucket of gradients starts its
        exchange as soon as the backward has written it; then the wait for the sums, and clipping and the
        optimizer on the averaged gradients. Call before the first step."""
        problem = self.parallel_problem()
        if problem is not None:
            raise ValueError(f"cannot train data-parallel: {problem}")
        self._reducer = reducer
        self._exchange = GradientExchange(reducer, self.params, self.device)
        self._parallel = jit(self._parallel_train_step)

    def _parallel_train_step(self, x: Tensor, y: Tensor) -> None:
        exchange = self._exchange
        assert exchange is not None
        self.optimizer.zero_grad()
        outs = self._outputs(x, y)
        outs[0].backward()
        missing = [i for i, p in enumerate(self.params) if p.grad is None]
        if missing:
            raise RuntimeError(f"data-parallel: parameters {missing} get no gradient from the loss")
        grads = [p.grad for p in self.params if p.grad is not None]
        # asked for in bucket order, so that the schedule computes the last parameters' gradients first (the
        # scheduler orders kernels by the outputs they are for): the first bucket is done early in the backward
        order = [i for members in exchange.buckets for i in members]
        at = {i: len(outs) + n for n, i in enumerate(order)}
        waits = [[at[i] for i in members] for members in exchange.buckets]
        waits[-1] += range(len(outs))  # the outputs ride in the last bucket
        realize_all([*outs, *(grads[i] for i in order)], host_steps=list(zip(exchange.bucket_steps, waits)))
        run_host_step(self.device, exchange.finish_step, exchange.averaged)
        for p, g in zip(self.params, exchange.averaged):
            p.grad = g
        self._before_update()
        self.optimizer.step()

    def shard_weight(self, batch: Batch, part: slice) -> float:
        """The weight of this rank's loss and gradients in the ranks' sum: what share of the global loss its shard
        holds. A mean over samples weighs the shard's share of the samples; a trainer whose loss is a mean over
        something else (BERT's masked positions) weighs by its share of that, so N ranks sum to the global mean."""
        return (part.stop - part.start) / len(batch[0])

    def _parallel_step(self, batch: Batch) -> list[float]:
        """One data-parallel step on the global batch; returns the step's outputs averaged over every rank."""
        reducer, exchange = self._reducer, self._exchange
        assert reducer is not None and exchange is not None
        x, y = batch
        part = shard(len(x), reducer.rank, reducer.size)
        exchange.weight = self.shard_weight(batch, part)  # read by the exchange's host steps as they run
        with anneal_random.batch_shard(part.start, part.stop):  # dropout: this shard's rows of the global batch's masks
            self._parallel(*self._as_tensors((x[part], y[part])))
        return exchange.values

    @property
    def comm_ms(self) -> float:
        """The last data-parallel step's host time in the gradient exchange (0 for a single process)."""
        return self._exchange.comm_ms if self._exchange is not None else 0.0

    def step(self, i: int) -> float:
        if self._reducer is not None:
            value = self._parallel_step(self._next_batch(i))[0]
        else:
            value = float(self._step(*self._tensors(i)).item())
        self.steps_done += 1
        if self.schedule is not None:
            self.schedule.step()  # writes the next lr into its buffer: a jit replay reads it
        if self.first_loss is None:
            self.first_loss = value
        self.last_loss = value
        return value

    def lr(self) -> float:
        """The learning rate the next step uses (the first parameter group's)."""
        return float(self.optimizer.param_groups[0]["lr"])

    def graph(self, backward: bool) -> StepGraph:
        """One step's lazy graph, on the batch the next step will use (so drawing it changes no data)."""
        x, y = self._as_tensors(self._peek())
        with anneal_random.fork_rng([self.device]):  # looking at the step draws nothing the run would
            loss = self.loss(self.model(x), y)
        return StepGraph([loss], loss.gradient(*self.params) if backward else [])

    # ---- evaluation ----
    @overload
    def evaluate(self) -> float | None: ...
    @overload
    def evaluate(self, x: np.ndarray, y: np.ndarray) -> float: ...
    def evaluate(self, x: np.ndarray | None = None, y: np.ndarray | None = None) -> float | None:
        """The loss on (x, y), in eval mode; without arguments on the validation set (None if there is none)."""
        if x is None or y is None:
            if self.val is None:
                return None
            x, y = self.val
        module = self.model
        was_training = getattr(module, "training", None)
        if was_training and callable(getattr(module, "eval", None)):
            module.eval()  # type: ignore[attr-defined]
        try:
            xt, yt = self._as_tensors((x, y))  # as training data enters (dynmlp binds its batch Variable)
            return float(self.loss(module(xt), yt).item())
        finally:
            if was_training and callable(getattr(module, "train", None)):
                module.train()  # type: ignore[attr-defined]

    @property
    def jit(self) -> Any:
        return self._parallel if self._reducer is not None else self._step

    # ---- checkpoints ----
    def state_dict(self) -> dict[str, Tensor]:
        """Everything a resumed run needs, as tensors: ``model.*`` (parameters and buffers, torch's names),
        ``optim.state.<param index>.<key>`` (moments, momentum buffers, step counts),
        ``optim.group.<group>.<key>`` (hyperparameters: the lr a schedule moved, betas, ...),
        ``optim.bias.*`` (Adam's running bias corrections), ``schedule.*``, ``rng.state`` (the device
        generator: dropout and other draws continue where they were) and ``trainer.steps``."""
        out = {f"model.{k}": t for k, t in get_state_dict(self.model).items()}
        opt = self.optimizer
        index = {id(p): i for i, p in enumerate(opt.params)}
        counts: dict[int, int] = {}  # parameters that step together share one count buffer: read it once
        for p, state in opt.state.items():
            for key, value in state.items():
                if isinstance(value, Tensor) and value.shape == () and value.dtype.name.startswith(("int", "uint")):
                    if id(value) not in counts:
                        counts[id(value)] = int(value)
                    value = counts[id(value)]  # a count in a device buffer (Adam's step): saved as a 0-d int64
                t = value if isinstance(value, Tensor) else _scalar(value)
                if t is not None:
                    out[f"optim.state.{index[id(p)]}.{key}"] = t
        for gi, group in enumerate(opt.param_groups):
            for key, value in group.items():
                t = None if key == "params" else _scalar(value)
                if t is not None:
                    out[f"optim.group.{gi}.{key}"] = t
        # Adam advances its step counts and bias corrections 1 - beta**t in the graph (so a jit replay moves
        # them too); saving the running corrections, keyed by the step count they belong to, makes the resumed
        # steps bit-identical to an uninterrupted run instead of recomputing them.
        bias_corrections = getattr(opt, "bias_corrections", None)
        for (gi, step, dtype), (c1, c2) in (bias_corrections() if bias_corrections else {}).items():
            out[f"optim.bias.{gi}.{step}.{dtype.name}.c1"] = c1
            out[f"optim.bias.{gi}.{step}.{dtype.name}.c2"] = c2
        if self.schedule is not None:
            for key, value in self.schedule.state_dict().items():
                t = _scalar(value)
                if t is not None:
                    out[f"schedule.{key}"] = t
        out["rng.state"] = Tensor(anneal_random.get_rng_state(self.device), device=HOST)
        steps = _scalar(self.steps_done)
        assert steps is not None
        out["trainer.steps"] = steps
        return out

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        """Load what state_dict() wrote, before the first step. Raises RuntimeError (model keys or shapes
        that do not match: the message names them) or ValueError (optimizer groups that do not match)."""
        if self.steps_done or self._peeked is not None:
            raise RuntimeError("load_state_dict: load a checkpoint before the first step (and before graph())")
        load_state_dict(self.model, {k[len("model.") :]: v for k, v in state.items() if k.startswith("model.")})
        opt = self.optimizer
        layout = opt.state_dict()
        params = opt.params
        per_param: dict[int, dict[str, Any]] = {}
        bias: dict[tuple[int, int, str], dict[str, Tensor]] = {}
        for key, value in state.items():
            parts = key.split(".")
            if parts[0] == "optim" and parts[1] == "state" and len(parts) >= 4:
                i, name = int(parts[2]), ".".join(parts[3:])
                if i >= len(params):
                    raise ValueError(f"optimizer state for parameter {i}, but the optimizer has {len(params)}")
                arr_dtype = value.dtype
                if value.shape == () and (arr_dtype.name.startswith("int") or arr_dtype.name == "bool"):
                    per_param.setdefault(i, {})[name] = _restore(value, 0)  # a count (Adam's step: a buffer again)
                else:
                    if value.shape != params[i].shape and value.shape != ():
                        raise ValueError(f"optimizer state {name} of parameter {i} has shape {value.shape}, "
                                         f"the parameter {params[i].shape}")  # fmt: skip
                    per_param.setdefault(i, {})[name] = value
            elif parts[0] == "optim" and parts[1] == "bias" and len(parts) == 6:
                bias.setdefault((int(parts[2]), int(parts[3]), parts[4]), {})[parts[5]] = value
        for gi, group in enumerate(layout["param_groups"]):
            for key, like in list(group.items()):
                saved = state.get(f"optim.group.{gi}.{key}")
                if key != "params" and saved is not None:
                    group[key] = _restore(saved, like)
        opt.load_state_dict({"state": per_param, "param_groups": layout["param_groups"]})
        load_bias_corrections = getattr(opt, "load_bias_corrections", None)
        if load_bias_corrections is not None:  # copied into buffers of the optimizer's own, advanced in place
            by_name = {dt.name: dt for dt in (*(p.dtype for p in params), dtypes.float32)}  # float32: master weights
            load_bias_corrections({(gi, step, by_name[name]): (pair["c1"], pair["c2"])
                                   for (gi, step, name), pair in bias.items()
                                   if {"c1", "c2"} <= set(pair) and name in by_name})  # fmt: skip
        if self.schedule is not None:
            sched_state = self.schedule.state_dict()
            restored = {
                k: _restore(state[f"schedule.{k}"], v) for k, v in sched_state.items() if f"schedule.{k}" in state
            }
            self.schedule.load_state_dict(restored)
            opt.sync_lr()
        if "rng.state" in state:
            anneal_random.set_rng_state(state["rng.state"], self.device)
        steps = int(state["trainer.steps"].numpy()) if "trainer.steps" in state else 0
        if self.replay_batches_on_load:
            for i in range(steps):  # replay the batch draws already done: the data continues where it stopped
                self.batch(i)
        self.steps_done = steps

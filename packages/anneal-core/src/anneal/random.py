"""anneal.random: the seed, the host generator of initializers, and the device generator of draws.

Draws (``Tensor.rand``, ``randn``, ``randint``, ``uniform``, dropout) are graph, not host data:
Threefry-2x32 with 20 rounds (the counter-based generator of JAX and Random123) turns a key and a
counter (stream, element index) into 64 random bits per element, so a draw fuses into the kernels
that use it and never needs a buffer of its own.

Per device, the key and a 32-bit stream counter live in device buffers that ``manual_seed`` writes.
The draws made between two realizations form one *epoch*: its first draw copies the counter into a
snapshot buffer (one tiny kernel), draw k of the epoch is stream ``snapshot + k``, and the next
schedule run on the device advances the counter past the epoch. So:

- a draw is a pure function of buffers that never change under it: every schedule that recomputes it
  (a backward pass re-deriving the forward's dropout mask) gets the same values;
- a jitted step replays the snapshot and the advance, so it draws fresh values on every replay;
- the same seed gives the same bits on every backend (integer arithmetic), and ``rand`` is an exact
  function of the bits, so cpu and webgpu agree bit for bit (``randn`` to the last ulps of log/cos).

Inside ``batch_shard(start, stop, batch)`` a draw whose leading axis is that shard's rows takes the element
indices the whole batch's draw gives those rows: data-parallel ranks, each drawing for its shard, draw together
exactly the dropout masks one process draws for the global batch.

Initializers (``nn`` layers, the zoo's weight init) draw on the host from a numpy Generator seeded
by the same ``manual_seed``: they run once, at creation, and are identical on every device.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from anneal_ir import Ops, UOp, dtypes
from anneal_schedule.buffer import Buffer
from anneal_schedule.decompose import threefry_rounds

if TYPE_CHECKING:
    from anneal.tensor import Tensor

__all__ = ["batch_shard", "fork_rng", "generator", "get_rng_state", "manual_seed", "set_rng_state", "threefry2x32"]

MASK32 = 0xFFFFFFFF


def _key_words(seed: int) -> tuple[int, int]:
    """A seed as Threefry's two key words: high and low 32 bits (jax.random.PRNGKey's layout)."""
    return (seed >> 32) & MASK32, seed & MASK32


@dataclass
class _Seed:
    seed: int
    host: np.random.Generator


_seed = _Seed(0, np.random.default_rng(0))


@dataclass
class _DeviceStream:
    """One device's generator state: the key and the stream counter (device buffers), and the epoch."""

    key: Buffer  # uint32[2]
    counter: Buffer  # uint32[1]: the first stream the next epoch uses
    snapshot: Buffer | None = None  # uint32[1]: the counter as this epoch began (None: no draw since the last run)
    drawn: int = 0  # streams this epoch has handed out

    def write(self, key: tuple[int, int], counter: int) -> None:
        self.key.copy_in(np.asarray(key, np.uint32))
        self.counter.copy_in(np.asarray([counter], np.uint32))
        self.snapshot, self.drawn = None, 0


_streams: dict[str, _DeviceStream] = {}


def _stream_of(device: str) -> _DeviceStream:
    st = _streams.get(device)
    if st is None:
        from anneal.realize import runner

        backend = runner(device).backend
        st = _DeviceStream(Buffer(device, backend, 2, dtypes.uint32), Buffer(device, backend, 1, dtypes.uint32))
        st.write(_key_words(_seed.seed), 0)
        _streams[device] = st
    return st


def manual_seed(seed: int) -> None:
    """Reseed everything: the initializers' host generator and every device's key and counter (in place, so
    a jitted step replays with the new seed)."""
    if not 0 <= int(seed) < 1 << 64:
        raise ValueError(f"manual_seed: seed must be in [0, 2**64), got {seed}")
    _seed.seed, _seed.host = int(seed), np.random.default_rng(int(seed))
    for st in _streams.values():
        st.write(_key_words(_seed.seed), 0)


def generator() -> np.random.Generator:
    """The host generator of initializers (weights drawn once, at creation)."""
    return _seed.host


def get_rng_state(device: str) -> np.ndarray:
    """The device generator's state as uint32[3] (key high, key low, counter): what a checkpoint saves."""
    from anneal.realize import realize

    st = _stream_of(device)
    realize(device, [])  # runs a pending counter advance
    return np.concatenate([st.key.numpy(), st.counter.numpy()]).astype(np.uint32)


def set_rng_state(state: Any, device: str) -> None:
    """Restore a state from get_rng_state (the next draws continue exactly where that state was taken)."""
    arr = np.asarray(state.numpy() if hasattr(state, "numpy") else state).reshape(-1)
    if arr.shape != (3,):
        raise ValueError(f"set_rng_state: expected 3 uint32 words (key high, key low, counter), got shape {arr.shape}")
    _stream_of(device).write((int(arr[0]), int(arr[1])), int(arr[2]))


@contextlib.contextmanager
def fork_rng(devices: list[str]) -> Iterator[None]:
    """Draws inside the block leave the generators of ``devices`` (and the host's) as they were, as
    torch.random.fork_rng: for looking at a step's graph without changing what the run draws."""
    saved = {d: get_rng_state(d) for d in devices}
    host = _seed.host.bit_generator.state
    try:
        yield
    finally:
        for d, state in saved.items():
            set_rng_state(state, d)
        _seed.host.bit_generator.state = host


# ---- the graph side ----

# (first row, rows) of the global batch this process draws for; None: the whole batch (one process)
_shard: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar("anneal_batch_shard", default=None)


@contextlib.contextmanager
def batch_shard(start: int, stop: int) -> Iterator[None]:
    """Draws inside the block whose leading axis has stop - start rows are rows start:stop of the draw the
    whole batch would make (their element indices move by start rows): each rank of a data-parallel run
    draws its part of the single-process masks. Other draws (no such leading axis) are unchanged."""
    if not 0 <= start <= stop:
        raise ValueError(f"batch_shard: rows {start}:{stop} are not a slice")
    token = _shard.set((start, stop - start))
    try:
        yield
    finally:
        _shard.reset(token)


def _stream(device: str) -> UOp:
    """A fresh stream number for one draw: a 0-d uint32 graph reading this epoch's snapshot."""
    from anneal.realize import realize

    st = _stream_of(device)
    if st.snapshot is None:  # the epoch's first draw: copy the counter, so later advances never reach this draw
        snapshot = Buffer(device, st.counter.backend, 1, dtypes.uint32)
        realize(device, [UOp(Ops.ASSIGN, dtypes.uint32, (snapshot.view(()), st.counter.view(())))])
        st.snapshot = snapshot
    k, st.drawn = st.drawn, st.drawn + 1
    base = st.snapshot.view(())
    return base if k == 0 else base + UOp.const(dtypes.uint32, k)


def pending_writes(device: str) -> list[UOp]:
    """The counter advance the next schedule on device runs (and closes the epoch), if draws were made."""
    st = _streams.get(device)
    if st is None or st.snapshot is None:
        return []
    advanced = st.snapshot.view(()) + UOp.const(dtypes.uint32, st.drawn)
    st.snapshot, st.drawn = None, 0
    return [UOp(Ops.ASSIGN, dtypes.uint32, (st.counter.view(()), advanced))]


def threefry2x32(key: tuple[Any, Any], counter: tuple[Any, Any]) -> tuple[Any, Any]:
    """Threefry-2x32-20 of counter words under key words. On uint32 Tensors (broadcasting) it is one graph
    node per word (THREEFRY: the scheduler never splits a draw; anneal_schedule.decompose expands it in the
    kernel); on numpy uint32 arrays it is computed here (the reference the tests check it against)."""
    from anneal.tensor import Tensor

    given = (*key, *counter)
    if any(isinstance(w, Tensor) for w in given):
        device = next(w.device for w in given if isinstance(w, Tensor))
        words = [w if isinstance(w, Tensor) else Tensor(np.asarray(w, np.uint32), device=device) for w in given]
        shape = _broadcast(*(w.shape for w in words))
        args = [w.cast(dtypes.uint32)._broadcast_to(shape) for w in words]
        srcs = tuple(t.uop for t in args)
        return args[0]._new(UOp(Ops.THREEFRY, dtypes.uint32, srcs, 0)), args[0]._new(UOp(Ops.THREEFRY, dtypes.uint32,
                                                                                     srcs, 1))  # fmt: skip

    def rotl(x: np.ndarray, r: int) -> np.ndarray:
        return (x << np.uint32(r)) | (x >> np.uint32(32 - r))

    return threefry_rounds(*key, *counter, np.bitwise_xor, rotl, np.uint32)


def _broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    from anneal.tensor import broadcast_shape

    return broadcast_shape(*shapes, op="threefry")


def bits(shape: tuple[int, ...], device: str) -> tuple[Tensor, Tensor]:
    """Two uint32 words of fresh random bits per element of shape, from a new stream on device."""
    from anneal.tensor import Tensor

    if not all(isinstance(d, int) for d in shape):
        raise NotImplementedError(f"random draws need a concrete shape, got {shape}: draw for the Variable's bound")
    stream = Tensor._from(_stream(device), device)
    key = Tensor._from(_stream_of(device).key.view((2,)), device)
    index = Tensor.arange(math.prod(shape), dtype=dtypes.uint32, device=device)
    rows = _shard.get()
    if rows is not None and rows[0] and shape and shape[0] == rows[1]:  # this shard's rows of the batch's draw
        index = index + rows[0] * math.prod(shape[1:])
    return threefry2x32((key[0], key[1]), (stream, index.reshape(shape)))


def unit_float(word: Tensor) -> Tensor:
    """The top 24 bits of a uint32 word as a float32 in [0, 1): exact, the same on every backend."""
    return (word >> 8).cast(dtypes.float32) * (1.0 / (1 << 24))


def uniform(shape: tuple[int, ...], device: str) -> Tensor:
    return unit_float(bits(shape, device)[0])


def normal(shape: tuple[int, ...], device: str) -> Tensor:
    """Standard normal floats by Box-Muller over both words of each element."""
    w0, w1 = bits(shape, device)
    u1 = 1.0 - unit_float(w0)  # in (0, 1]: log stays finite
    return (u1.log() * -2.0).sqrt() * (unit_float(w1) * (2 * math.pi)).cos()


def integers(low: int, high: int, shape: tuple[int, ...], device: str) -> Tensor:
    """Integers in [low, high) (int64): the first word modulo the span (a bias below span / 2**32)."""
    span = high - low
    if span <= 0:
        raise ValueError(f"randint: high ({high}) must be greater than low ({low})")
    if span > 1 << 32:
        raise ValueError(f"randint: the range [{low}, {high}) is wider than 2**32, the generator's word")
    word = bits(shape, device)[0]
    if span < 1 << 32:
        word = word % span
    return word.cast(dtypes.int64) + low


def dropout(x: Tensor, p: float) -> Tensor:
    """Zero each element of x with probability p and scale the rest by 1/(1-p): the mask is a fresh draw,
    computed inside the kernels that use it (the backward pass recomputes the same mask)."""
    from anneal.tensor import where

    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: probability has to be between 0 and 1, got {p}")
    if p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    keep = uniform(tuple(x.shape), x.device) >= p
    return where(keep, x * (1.0 / (1.0 - p)), 0.0)

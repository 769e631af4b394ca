"""Index bounds: an index outside its dimension raises IndexError, as in PyTorch, on every backend.

An index the host already holds (a batch from numpy, a literal) is checked at once. An index the host
does not hold — one computed lazily, or a jit argument, whose replays the host never sees — is checked on
the device, as CUDA's device-side asserts are: the check is a tiny reduction into a state buffer of its
own (how many indices were out of range, and the largest), written by the next schedule run on the device
(an ASSIGN, like the random counter's advance, so a jitted step replays it), and read at the next host
read on that device (``numpy()``, ``item()``, ``tolist()``), which raises the IndexError there. The state
adds up across replays that nothing reads in between, so no bad batch goes unreported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from anneal.errors import IndexOutOfRange
from anneal_ir import Ops, UOp, dtypes
from anneal_schedule.buffer import Buffer, read_many

if TYPE_CHECKING:
    from anneal.tensor import Tensor


_LOWEST = np.iinfo(np.int32).min
_CLEAR = np.array([0, _LOWEST], np.int32)  # no index out of range; the largest bad one seen: none


@dataclass(eq=False)
class Check:
    """One device-side check: state holds int32 [indices out of range so far, the largest of them]."""

    op: str
    size: int
    device: str
    state: Buffer
    scheduled: bool = False  # its write has gone into a schedule: the state is worth reading


_unscheduled: dict[str, list[UOp]] = {}  # per device: the checks' writes the next schedule runs
_unread: dict[str, list[Check]] = {}  # per device: checks the next host read on the device reads


def check_bounds(index: Tensor, size: int, op: str, *, negative: bool = False, ignore: int | None = None) -> None:
    """An IndexError naming op, the index and the size when index points outside [0, size) ([-size, size)
    with negative; entries equal to ignore are skipped): now when the host holds the index, else at the
    next host read on its device."""
    from anneal.realize import as_buffer, runner

    if not index.dtype.is_int or not isinstance(size, int):
        return
    if as_buffer(index.uop) is not None and runner(index.device).recording is None:
        _check_on_host(index.numpy(), size, op, -size if negative else 0, ignore)
    elif not (isinstance(index.numel(), int) and index.numel() == 0):
        _check_on_device(index, size, op, -size if negative else 0, ignore)


def _check_on_host(values: np.ndarray, size: int, op: str, low: int, ignore: int | None) -> None:
    if ignore is not None:
        values = values[values != ignore]
    bad = values[(values < low) | (values >= size)]
    if bad.size:
        raise IndexOutOfRange(f"{op}: index {int(bad.flat[0])} is out of range for size {size}")


def _check_on_device(index: Tensor, size: int, op: str, low: int, ignore: int | None) -> None:
    from anneal.realize import buffer_view, runner
    from anneal.tensor import Tensor, stack, where

    i = index.detach()
    if i.dtype not in (dtypes.int32, dtypes.int64):
        i = i.cast(dtypes.int32)  # uint8 and int16 indices: room for the sentinel below
    bad = (i < low) | (i >= size)
    if ignore is not None:
        bad = bad & (i != ignore)
    count = bad.cast(dtypes.int32).sum()
    largest = where(bad, i, int(_LOWEST)).max().clip(int(_LOWEST), int(np.iinfo(np.int32).max)).cast(dtypes.int32)
    state = Buffer(index.device, runner(index.device).backend, 2, dtypes.int32).copy_in(_CLEAR)
    view = buffer_view(state, (2,))
    old = Tensor._from(view, index.device)
    new = stack([old[0] + count, old[1].maximum(largest)]).cast(dtypes.int32)  # sum() widens to int64
    _unscheduled.setdefault(index.device, []).append(UOp(Ops.ASSIGN, dtypes.int32, (view, new.uop)))
    _unread.setdefault(index.device, []).append(Check(op, size, index.device, state))


def pending_writes(device: str) -> list[UOp]:
    """The checks' writes for the next schedule on device (taken: each runs once)."""
    writes = _unscheduled.pop(device, [])
    if writes:
        for c in _unread.get(device, ()):
            c.scheduled = True
    return writes


def unread(device: str) -> list[Check]:
    return list(_unread.get(device, ()))


def read_again(checks: list[Check]) -> None:
    """A jit replay ran these checks' kernels again: the next host read reads their states."""
    for c in checks:
        waiting = _unread.setdefault(c.device, [])
        if all(c is not w for w in waiting):
            waiting.append(c)


def raise_failed(device: str) -> None:
    """Read the device's computed checks; the first that found an index out of range raises IndexError
    (its state cleared, so a caller that handles the error can go on)."""
    read_checked(device, [])


def read_checked(device: str, buffers: list[Buffer]) -> list[np.ndarray]:
    """The contents of buffers (of device), read in the same round trip as the device's computed checks; the
    first check that found an index out of range raises IndexError (its state cleared, so a caller that
    handles the error can go on)."""
    waiting = _unread.get(device, [])
    checks = [c for c in waiting if c.scheduled]
    for c in checks:
        waiting.remove(c)
    values = read_many([c.state for c in checks] + buffers)
    for k, (c, state) in enumerate(zip(checks, values)):
        count, largest = (int(v) for v in state)
        if count:
            c.state.copy_in(_CLEAR)
            waiting.extend(checks[k + 1 :])  # not reported yet: the next read reads them again
            raise IndexOutOfRange(f"{c.op}: index {largest} is out of range for size {c.size} ({count} "
                             f"{'index was' if count == 1 else 'indices were'} out of range; checked on the device, "
                             f"so raised at this read, the first after the op ran)")  # fmt: skip
    return values[len(checks) :]

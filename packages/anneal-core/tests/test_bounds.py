"""Out-of-range indices the host does not hold (computed lazily, or jit arguments) raise IndexError at the next
host read on their device, as CUDA's device-side asserts do; torch (on the CPU, where it checks at once) raises
IndexError (or RuntimeError for a target) for the same input; in-range indices give torch's values."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from devices import DEV

import anneal.nn.functional as AF
from anneal import Tensor
from anneal.jit import jit


def lazy(a: Any) -> Tensor:
    """An index the host does not hold: computed from a realized one."""
    return Tensor(np.asarray(a), device=DEV) * 1


def host(a: Any) -> Tensor:
    return Tensor(np.asarray(a, np.float32), device=DEV)


CASES: dict[str, tuple[Callable[[Any], Any], Callable[[], Any]]] = {
    "x[lazy([5])]": (lambda i: host(np.arange(3))[i], lambda: torch.arange(3.0)[torch.tensor([5])]),
    "x[lazy([-4])]": (lambda i: host(np.arange(3))[i], lambda: torch.arange(3.0)[torch.tensor([-4])]),
    "cross_entropy target 7 of 4": (lambda i: AF.cross_entropy(host(np.zeros((2, 4))), i),
                                    lambda: TF.cross_entropy(torch.zeros(2, 4), torch.tensor([7, 1]))),
    "embedding past the end": (lambda i: AF.embedding(i, host(np.zeros((3, 2)))),
                               lambda: TF.embedding(torch.tensor([3]), torch.zeros(3, 2))),
    "gather past the end": (lambda i: host(np.zeros((2, 3))).gather(1, i),
                            lambda: torch.zeros(2, 3).gather(1, torch.tensor([[3], [0]]))),
}  # fmt: skip
BAD = {"x[lazy([5])]": [5], "x[lazy([-4])]": [-4], "cross_entropy target 7 of 4": [7, 1],
       "embedding past the end": [3], "gather past the end": [[3], [0]]}  # fmt: skip


@pytest.mark.parametrize("name", list(CASES))
def test_a_lazy_index_out_of_range_raises_at_the_next_read(name: str) -> None:
    ours, theirs = CASES[name]
    out = ours(lazy(BAD[name]))  # building the op does not compute the index: nothing to raise yet
    size = {"x[lazy([5])]": 3, "x[lazy([-4])]": 3, "cross_entropy target 7 of 4": 4}.get(name, 3)
    bad = BAD[name][0] if not isinstance(BAD[name][0], list) else BAD[name][0][0]
    with pytest.raises(IndexError, match=rf"index {bad} is out of range for size {size} \(1 index was"):
        out.numpy()
    with pytest.raises((IndexError, RuntimeError)):
        theirs()
    out.numpy()  # reported once: the value (whatever the kernel read) can still be read after handling it


def test_lazy_indices_in_range_give_torch_values_and_raise_nothing() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    got = host(x)[lazy([2, -1, 0])].numpy()
    np.testing.assert_array_equal(got, torch.tensor(x)[torch.tensor([2, -1, 0])].numpy())
    logits = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    ce = AF.cross_entropy(host(logits), lazy([3, -100, 0])).item()  # -100: ignore_index, not out of range
    assert ce == pytest.approx(TF.cross_entropy(torch.tensor(logits), torch.tensor([3, -100, 0])).item(), rel=1e-6)
    table = np.arange(6, dtype=np.float32).reshape(3, 2)
    small = Tensor(np.array([2, 0], np.uint8), device=DEV) * 1  # a uint8 index, widened for the check
    np.testing.assert_array_equal(AF.embedding(small, host(table)).numpy(), table[[2, 0]])


def test_every_bad_index_is_counted_and_the_largest_named() -> None:
    out = host(np.arange(3))[lazy([4, 9, 1, -7])]
    with pytest.raises(IndexError, match=r"index 9 is out of range for size 3 \(3 indices were out of range"):
        out.numpy()


def test_a_check_made_on_one_device_read_on_it_only() -> None:
    out = host(np.arange(3))[lazy([5])]
    other = Tensor(np.ones(2, np.float32), device="cpu" if DEV != "cpu" else DEV)
    if other.device != out.device:
        np.testing.assert_array_equal(other.numpy(), [1, 1])  # the other device's read has nothing to report
    with pytest.raises(IndexError, match="index 5 is out of range"):
        out.numpy()


def step(logits: Tensor, target: Tensor) -> Tensor:
    return AF.cross_entropy(logits, target).realize()


def test_a_jitted_step_checks_its_index_arguments_on_every_replay() -> None:
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((4, 5)).astype(np.float32)
    good, bad = np.array([0, 4, 2, 1]), np.array([0, 5, 2, 1])
    fn = jit(step)
    for _ in range(3):  # warm-up, capture, replay
        loss = fn(host(logits), Tensor(good, device=DEV))
        expected = TF.cross_entropy(torch.tensor(logits), torch.tensor(good)).item()
        assert loss.item() == pytest.approx(expected, rel=1e-6)
    assert fn.replays == 1
    fn(host(logits), Tensor(bad, device=DEV))
    with pytest.raises(IndexError, match=r"cross_entropy: target: index 5 is out of range for size 5"):
        loss = fn(host(logits), Tensor(good, device=DEV))  # a bad replay, then a good one: still reported
        loss.item()
    assert fn.replays == 3
    loss = fn(host(logits), Tensor(good, device=DEV))  # the error was handled: the state starts clean
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    with pytest.raises(IndexError, match="Target 5 is out of bounds"):
        TF.cross_entropy(torch.tensor(logits), torch.tensor(bad))


# the scatter family, one_hot and max_unpool2d: each index names a slot of its output, so one outside raises
# (torch: RuntimeError; anneal's IndexOutOfRange is an IndexError and a RuntimeError)
WRITES: dict[str, tuple[Callable[[Any, Any], Any], Any, Any, int]] = {
    # name: (fn(module namespace or tensor maker, index), a bad index, a good one, the indexed size)
    "scatter": (lambda m, i: m.zeros(2, 3).scatter(1, i, m.ones(2, 1)), [[3], [0]], [[2], [0]], 3),
    "scatter_value": (lambda m, i: m.zeros(2, 3).scatter(1, i, value=2.0), [[0], [-1]], [[0], [1]], 3),
    "scatter_add": (lambda m, i: m.zeros(3).scatter_add(0, i, m.ones(2)), [1, 5], [1, 1], 3),
    "scatter_reduce": (lambda m, i: m.zeros(3).scatter_reduce(0, i, m.ones(2), "amax"), [4, 0], [2, 0], 3),
    "one_hot": (lambda m, i: m.F.one_hot(i, 3), [0, 5], [0, 2], 3),
    "one_hot_negative": (lambda m, i: m.F.one_hot(i, 3), [-1, 1], [2, 1], 3),
    "max_unpool2d": (lambda m, i: m.F.max_unpool2d(m.ones(1, 1, 1, 2), i, 2), [[[[0, 9]]]], [[[[0, 7]]]], 8),
}  # fmt: skip


class _Anneal:
    F = AF

    @staticmethod
    def zeros(*s: int) -> Tensor:
        return Tensor.zeros(*s, device=DEV)

    @staticmethod
    def ones(*s: int) -> Tensor:
        return Tensor.ones(*s, device=DEV)


class _Torch:
    F = TF
    zeros, ones = torch.zeros, torch.ones


@pytest.mark.parametrize("name", list(WRITES))
def test_writes_through_an_index_out_of_range_raise_as_torch(name: str) -> None:
    fn, bad, good, size = WRITES[name]
    with pytest.raises(RuntimeError):
        fn(_Torch, torch.tensor(bad))
    first = bad if not isinstance(bad, list) else np.asarray(bad).ravel()[np.argmax(
        (np.asarray(bad).ravel() < 0) | (np.asarray(bad).ravel() >= size))]  # fmt: skip
    with pytest.raises(RuntimeError, match=rf"{name.split('_negative')[0].split('_value')[0]}: index {first} is "
                                           rf"out of range for size {size}"):  # fmt: skip
        fn(_Anneal, Tensor(np.asarray(bad), device=DEV)).numpy()  # a host index: raised when built
    out = fn(_Anneal, lazy(bad))  # computed on the device: raised at the next read
    with pytest.raises(IndexError, match=rf"index {first} is out of range for size {size} \(1 index was"):
        out.numpy()
    np.testing.assert_array_equal(fn(_Anneal, lazy(good)).numpy(), fn(_Torch, torch.tensor(good)).numpy())

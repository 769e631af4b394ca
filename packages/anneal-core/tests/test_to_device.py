"""Tensor.to(device): lazy and differentiable, as in PyTorch, between two devices of this process.

The second device is another instance of the cpu backend registered under its own name ("cpu-b"),
so the copy path (computed on one device, moved, the gradient moved back) runs in every session;
tests/test_devices.py runs the same between cpu and webgpu.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pytest
import torch

import anneal
from anneal import Tensor, registry
from anneal.jit import jit
from anneal.realize import as_buffer
from anneal_cpu.backend import CPUBackend
from anneal_ir import Ops
from anneal_ir.plugins import Availability, hookimpl, load_plugins
from anneal_ir.settings import Settings

OTHER = "cpu-b"


class SecondCPU:
    @hookimpl
    def register_backends(self, register: Callable[..., None]) -> None:
        register(OTHER, CPUBackend, probe=lambda: Availability(True, "a second cpu backend instance"))


@pytest.fixture(autouse=True)
def two_devices() -> Iterator[None]:
    registry.reset(using=load_plugins(Settings.from_env(), extra=[("second-cpu", SecondCPU())], stream=None))
    yield
    registry.reset()


def N(*shape: int, seed: int = 0) -> np.ndarray:  # noqa: N802
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape).astype(np.float32)


def test_to_is_lazy_and_keeps_the_value() -> None:
    x = Tensor(N(3, 4), device="cpu")
    y = (x * 2).to(OTHER)
    assert y.device == OTHER and y.uop.op is Ops.COPY  # nothing ran yet
    np.testing.assert_allclose(y.numpy(), N(3, 4) * 2, rtol=1e-6)
    assert as_buffer(y.uop) is not None and as_buffer(y.uop).device == OTHER  # type: ignore[union-attr]


def test_gradients_flow_back_through_to() -> None:
    w = Tensor(N(4, 3), requires_grad=True, device="cpu")
    x = Tensor(N(2, 4, seed=1), device=OTHER)
    out = (x @ w.to(OTHER)).tanh().sum()
    out.backward()
    tw = torch.tensor(N(4, 3), requires_grad=True)
    (torch.tensor(N(2, 4, seed=1)) @ tw).tanh().sum().backward()
    assert w.grad is not None and w.grad.device == "cpu"
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-6)  # type: ignore[union-attr]


def test_there_and_back_after_reading_the_value() -> None:
    a = Tensor(N(5), requires_grad=True, device="cpu")
    b = a.to(OTHER).exp()
    b.numpy()  # read on the other device, then differentiate back to the first
    (b.to("cpu") * a).sum().backward()
    ta = torch.tensor(N(5), requires_grad=True)
    (ta.exp() * ta).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-5)  # type: ignore[union-attr]


def test_jvp_through_a_copy_between_devices() -> None:
    x, t = Tensor(N(4), device="cpu"), Tensor(N(4, seed=2), device="cpu")
    out, tan = anneal.jvp(lambda v: v.to(OTHER).sin().to("cpu"), [x], [t])
    np.testing.assert_allclose(out.numpy(), np.sin(N(4)), rtol=1e-6)
    np.testing.assert_allclose(tan.numpy(), np.cos(N(4)) * N(4, seed=2), rtol=1e-5)


def test_a_copy_inside_a_jitted_function_is_refused() -> None:
    @jit
    def step(x: Tensor) -> Tensor:
        return (x.to(OTHER) * 2).realize()

    step(Tensor(N(3), device="cpu"))
    with pytest.raises(RuntimeError, match="copy between devices inside a jitted function"):
        step(Tensor(N(3), device="cpu"))


def test_ops_across_devices_name_both() -> None:
    with pytest.raises(RuntimeError, match=r"different devices \(cpu and cpu-b\).*\.to\(device\)"):
        Tensor(N(3), device="cpu") + Tensor(N(3), device=OTHER)

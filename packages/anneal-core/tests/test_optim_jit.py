"""Adam's step count under anneal.jit: replays advance it, checkpoints save it, torch.optim.Adam agrees.

A jit replay re-runs the captured kernels without calling Python, so everything a step changes must
change in the graph: state["step"] is a 0-d buffer advanced by an in-graph assign, as the bias
corrections are. The oracle is torch.optim.Adam on the CPU, stepped as many times as the replays did.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn as tnn

import anneal.optim as optim
from anneal import Tensor
from anneal.jit import jit
from anneal.nn import modules as nn

TOL = {"rtol": 1e-5, "atol": 1e-6}
STEPS = 7  # one eager call, one capture, five replays


def twins() -> tuple[nn.Module, tnn.Module]:
    torch.manual_seed(0)
    tmodel = tnn.Sequential(tnn.Linear(4, 8), tnn.Tanh(), tnn.Linear(8, 3))
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    model.load_state_dict(tmodel.state_dict())
    return model, tmodel


def data(i: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(i)
    return rng.standard_normal((8, 4)).astype(np.float32), rng.standard_normal((8, 3)).astype(np.float32)


def jitted_step(model: nn.Module, opt: optim.Optimizer) -> jit:
    @jit
    def step(x: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        loss = (model(x) - y).square().mean()
        loss.backward()
        opt.step()
        return loss

    return step


def torch_steps(tmodel: tnn.Module, topt: torch.optim.Optimizer, steps: range) -> None:
    for i in steps:
        x, y = data(i)
        topt.zero_grad()
        (tmodel(torch.tensor(x)) - torch.tensor(y)).square().mean().backward()
        topt.step()


def assert_same_params(model: nn.Module, tmodel: tnn.Module, msg: str) -> None:
    for (name, p), (_, tp) in zip(model.named_parameters(), tmodel.named_parameters()):
        np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), **TOL, err_msg=f"{name} {msg}")


def step_counts(opt: optim.Optimizer) -> list[int]:
    return [int(s["step"]) for s in opt.state.values()]


ADAMS = [
    ("adam", lambda ps: optim.Adam(ps, lr=0.02), lambda ps: torch.optim.Adam(ps, lr=0.02)),
    ("adam_amsgrad_wd", lambda ps: optim.Adam(ps, lr=0.02, weight_decay=0.1, amsgrad=True),
     lambda ps: torch.optim.Adam(ps, lr=0.02, weight_decay=0.1, amsgrad=True)),
    ("adamw", lambda ps: optim.AdamW(ps, lr=0.02, weight_decay=0.3),
     lambda ps: torch.optim.AdamW(ps, lr=0.02, weight_decay=0.3)),
]  # fmt: skip


@pytest.mark.parametrize("make, make_torch", [pytest.param(a, b, id=n) for n, a, b in ADAMS])
def test_jit_replays_advance_the_step_count(make: Callable[[Any], Any], make_torch: Callable[[Any], Any]) -> None:
    model, tmodel = twins()
    opt, topt = make(model.parameters()), make_torch(tmodel.parameters())
    step = jitted_step(model, opt)
    for i in range(STEPS):
        step(*(Tensor(a) for a in data(i)))
        assert step_counts(opt) == [i + 1] * len(list(model.parameters())), f"after call {i + 1}"
    assert step.replays == STEPS - 2
    torch_steps(tmodel, topt, range(STEPS))
    assert_same_params(model, tmodel, f"after {STEPS} steps")
    sd = opt.state_dict()
    assert [int(s["step"]) for s in sd["state"].values()] == [STEPS] * len(list(model.parameters()))
    assert [int(s["step"]) for s in topt.state_dict()["state"].values()] == [STEPS] * len(list(model.parameters()))


@pytest.mark.parametrize("resume_jitted", [False, True], ids=["eager", "jitted"])
def test_state_dict_after_replays_resumes_like_torch(resume_jitted: bool) -> None:
    """A checkpoint taken after replays holds the steps really taken: the resumed bias corrections are right."""
    model, tmodel = twins()
    opt, topt = optim.Adam(model.parameters(), lr=0.02), torch.optim.Adam(tmodel.parameters(), lr=0.02)
    step = jitted_step(model, opt)
    for i in range(STEPS):
        step(*(Tensor(a) for a in data(i)))
    saved_model = {k: v.numpy() for k, v in model.state_dict().items()}
    saved_opt = {**opt.state_dict()}
    saved_opt["state"] = {i: {k: v.numpy() if isinstance(v, Tensor) else v for k, v in s.items()}
                          for i, s in saved_opt["state"].items()}  # fmt: skip
    assert {int(s["step"]) for s in saved_opt["state"].values()} == {STEPS}

    resumed, _ = twins()
    resumed.load_state_dict(saved_model)
    ropt = optim.Adam(resumed.parameters(), lr=0.02)
    ropt.load_state_dict(saved_opt)
    assert step_counts(ropt) == [STEPS] * len(list(resumed.parameters()))
    more = 4
    rstep = jitted_step(resumed, ropt) if resume_jitted else jitted_step(resumed, ropt).fn
    for i in range(STEPS, STEPS + more):
        rstep(*(Tensor(a) for a in data(i)))
    assert step_counts(ropt) == [STEPS + more] * len(list(resumed.parameters()))
    torch_steps(tmodel, topt, range(STEPS + more))
    assert_same_params(resumed, tmodel, f"after {STEPS} steps, a checkpoint and {more} more")


def test_parameters_without_grad_keep_their_own_count_through_replays() -> None:
    """As torch: a parameter without .grad is skipped and its step does not move, even while the
    parameters it shared a count with advance in a replayed step."""
    w0 = np.array([0.5, -1.0, 2.0], np.float32)
    a, b = Tensor(w0.copy(), requires_grad=True), Tensor(-w0, requires_grad=True)
    ta, tb = torch.tensor(w0.copy(), requires_grad=True), torch.tensor(-w0, requires_grad=True)
    opt, topt = optim.Adam([a, b], lr=0.05), torch.optim.Adam([ta, tb], lr=0.05)

    def loss(x: Any, both: bool) -> Any:
        out = ((a if isinstance(x, Tensor) else ta) * x).sum().square()
        return out + ((b if isinstance(x, Tensor) else tb) * x).sum().square() if both else out

    def eager(x: np.ndarray) -> None:
        opt.zero_grad()
        loss(Tensor(x), True).backward()
        opt.step()

    @jit
    def only_a(x: Tensor) -> Tensor:
        opt.zero_grad()
        out = loss(x, False)
        out.backward()
        opt.step()
        return out

    plan = ["both", "both", "a", "a", "a", "a", "both", "a", "both"]  # the last "a": a replay after the eager step
    xs = [np.random.default_rng(i).standard_normal(3).astype(np.float32) for i in range(len(plan))]
    for what, x in zip(plan, xs):
        if what == "both":
            eager(x)
        else:
            only_a(Tensor(x))
        topt.zero_grad()
        loss(torch.tensor(x), what == "both").backward()
        topt.step()
    assert only_a.replays == 3
    assert [int(opt.state[p]["step"]) for p in (a, b)] == [9, 4]
    assert [int(topt.state[p]["step"]) for p in (ta, tb)] == [9, 4]
    for p, tp in ((a, ta), (b, tb)):
        np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), **TOL)

"""anneal.optim against torch.optim: whole trajectories, clipping, LR schedules, one schedule per step.

The same model (torch's initial weights loaded into the anneal twin) trains on the same data for a
few steps under each optimizer configuration; after every step all parameters must agree with
torch's to 1e-5.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn as tnn

import anneal.optim as optim
import anneal.realize as anneal_realize
from anneal import Tensor, dtypes
from anneal.jit import jit
from anneal.nn import modules as nn
from anneal.realize import as_buffer, runner

STEPS = 5
TOL = {"rtol": 1e-5, "atol": 1e-6}  # atol: parameters that pass near 0 during the trajectory


def data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((8, 4)).astype(np.float32), rng.standard_normal((8, 3)).astype(np.float32)


def twins() -> tuple[nn.Module, tnn.Module]:
    torch.manual_seed(0)
    tmodel = tnn.Sequential(tnn.Linear(4, 8), tnn.Tanh(), tnn.Linear(8, 3))
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    model.load_state_dict(tmodel.state_dict())
    return model, tmodel


def assert_same_params(model: nn.Module, tmodel: tnn.Module, msg: str = "") -> None:
    for (name, p), (_, tp) in zip(model.named_parameters(), tmodel.named_parameters()):
        np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), **TOL, err_msg=f"{name} {msg}")


def train_both(make: Callable[[Any], Any], make_torch: Callable[[Any], Any], steps: int = STEPS,
               schedule: Callable[[Any], Any] | None = None,
               torch_schedule: Callable[[Any], Any] | None = None) -> None:  # fmt: skip
    model, tmodel = twins()
    opt, topt = make(model), make_torch(tmodel)
    sched = schedule(opt) if schedule else None
    tsched = torch_schedule(topt) if torch_schedule else None
    x, y = data()
    for i in range(steps):
        opt.zero_grad()
        loss = (model(Tensor(x)) - Tensor(y)).square().mean()
        loss.backward()
        opt.step()
        topt.zero_grad()
        tloss = (tmodel(torch.tensor(x)) - torch.tensor(y)).square().mean()
        tloss.backward()
        topt.step()
        np.testing.assert_allclose(loss.numpy(), tloss.detach().numpy(), **TOL, err_msg=f"loss at step {i}")
        assert_same_params(model, tmodel, f"after step {i + 1}")
        if sched is not None and tsched is not None:
            sched.step()
            tsched.step()


CONFIGS = [
    ("sgd", lambda ps: optim.SGD(ps, lr=0.1), lambda ps: torch.optim.SGD(ps, lr=0.1)),
    ("sgd_momentum", lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9),
     lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)),
    ("sgd_momentum_dampening_wd", lambda ps: optim.SGD(ps, lr=0.05, momentum=0.8, dampening=0.3, weight_decay=0.1),
     lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.8, dampening=0.3, weight_decay=0.1)),
    ("sgd_nesterov_wd", lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
     lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("adam", lambda ps: optim.Adam(ps, lr=0.01), lambda ps: torch.optim.Adam(ps, lr=0.01)),
    ("adam_wd_betas", lambda ps: optim.Adam(ps, lr=0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
     lambda ps: torch.optim.Adam(ps, lr=0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
    ("adam_amsgrad", lambda ps: optim.Adam(ps, lr=0.01, amsgrad=True),
     lambda ps: torch.optim.Adam(ps, lr=0.01, amsgrad=True)),
    ("adamw", lambda ps: optim.AdamW(ps, lr=0.01), lambda ps: torch.optim.AdamW(ps, lr=0.01)),
    ("adamw_strong_decay", lambda ps: optim.AdamW(ps, lr=0.05, weight_decay=0.5),
     lambda ps: torch.optim.AdamW(ps, lr=0.05, weight_decay=0.5)),
]  # fmt: skip


@pytest.mark.parametrize("make, make_torch", [pytest.param(a, b, id=n) for n, a, b in CONFIGS])
def test_trajectory_matches_torch(make: Callable[[Any], Any], make_torch: Callable[[Any], Any]) -> None:
    train_both(lambda m: make(m.parameters()), lambda m: make_torch(m.parameters()))


def test_param_groups_with_their_own_hyperparameters() -> None:
    def groups(m: Any) -> list[dict[str, Any]]:
        layers = list(m.children()) if hasattr(m, "children") else []
        return [{"params": list(layers[0].parameters()), "lr": 0.05},
                {"params": list(layers[2].parameters()), "weight_decay": 0.2}]  # fmt: skip

    train_both(lambda m: optim.AdamW(groups(m), lr=0.01), lambda m: torch.optim.AdamW(groups(m), lr=0.01))


def test_lambda_lr_schedule_drives_the_step() -> None:
    fn = lambda s: optim.warmup_cosine(s, 2, 6, 0.1)  # noqa: E731
    train_both(lambda m: optim.Adam(m.parameters(), lr=0.05), lambda m: torch.optim.Adam(m.parameters(), lr=0.05),
               schedule=lambda o: optim.LambdaLR(o, fn),
               torch_schedule=lambda o: torch.optim.lr_scheduler.LambdaLR(o, fn))  # fmt: skip


# ---- how the step runs ----


def test_step_is_one_schedule_in_place_and_does_not_recompile(monkeypatch: pytest.MonkeyPatch) -> None:
    model, _ = twins()
    opt = optim.Adam(model.parameters(), lr=0.01)
    sched = optim.CosineAnnealingLR(opt, T_max=10)
    x, y = data()
    calls: list[int] = []
    real = anneal_realize.realize

    def counted(dev: str, uops: list, *rest: object) -> object:
        calls.append(len(uops))
        return real(dev, uops, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(anneal_realize, "realize", counted)
    compiled = []
    for _ in range(5):
        buffers = [as_buffer(p.uop) for p in model.parameters()]
        calls.clear()
        opt.zero_grad()
        loss = (model(Tensor(x)) - Tensor(y)).square().mean()
        loss.backward()
        opt.step()
        sched.step()  # a new lr is data in a buffer, not a new graph
        assert len(calls) == 1  # forward, backward and update: one realize, one schedule
        assert [as_buffer(p.uop) for p in model.parameters()] == buffers  # updated in place
        compiled.append(runner("cpu").stats.programs_compiled)
    assert compiled[2] == compiled[3] == compiled[4]  # steps after the second reuse every kernel


def test_loss_and_grads_read_after_the_step_keep_their_pre_step_values() -> None:
    """The parameters change in place; the lazy loss and .grad, read only after step(), still hold the
    values the step was taken on (they are computed in the step's schedule, before the update)."""
    model, tmodel = twins()
    opt = optim.SGD(model.parameters(), lr=0.5)
    x, y = data()
    loss = (model(Tensor(x)) - Tensor(y)).square().mean()
    loss.backward()
    opt.step()
    tloss = (tmodel(torch.tensor(x)) - torch.tensor(y)).square().mean()
    tloss.backward()
    np.testing.assert_allclose(loss.numpy(), tloss.detach().numpy(), **TOL)
    for p, tp in zip(model.parameters(), tmodel.parameters()):
        assert p.grad is not None and tp.grad is not None
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), **TOL)


def test_closure_returns_loss_realized_before_the_update() -> None:
    model, tmodel = twins()
    opt = optim.SGD(model.parameters(), lr=0.5)
    x, y = data()

    def closure() -> Tensor:
        opt.zero_grad()
        loss = (model(Tensor(x)) - Tensor(y)).square().mean()
        loss.backward()
        return loss

    loss = opt.step(closure)
    tloss = (tmodel(torch.tensor(x)) - torch.tensor(y)).square().mean()
    np.testing.assert_allclose(loss.numpy(), tloss.detach().numpy(), **TOL)


def test_jit_replays_the_training_step() -> None:
    """Parameters, state, bias corrections and the lr live in buffers updated in place: a replay trains."""
    model, tmodel = twins()
    opt = optim.Adam(model.parameters(), lr=0.05)
    sched = optim.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    topt = torch.optim.Adam(tmodel.parameters(), lr=0.05)
    tsched = torch.optim.lr_scheduler.LambdaLR(topt, lambda s: 1.0 / (1 + s))

    @jit
    def step(x: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        loss = (model(x) - y).square().mean()
        loss.backward()
        opt.step()
        return loss

    for i in range(STEPS):
        xn, yn = data(seed=i)
        loss = step(Tensor(xn), Tensor(yn))
        sched.step()
        topt.zero_grad()
        tloss = (tmodel(torch.tensor(xn)) - torch.tensor(yn)).square().mean()
        tloss.backward()
        topt.step()
        tsched.step()
        np.testing.assert_allclose(loss.numpy(), tloss.detach().numpy(), **TOL, err_msg=f"loss at step {i}")
        assert_same_params(model, tmodel, f"after step {i + 1}")
    assert step.replays == STEPS - 2


def test_half_precision_params_keep_float32_master_weights() -> None:
    w0 = np.array([0.1, -0.2, 0.3], np.float16).astype(np.float32)  # representable in float16: the same start
    p = Tensor(w0, dtype=dtypes.float16, requires_grad=True)
    opt = optim.SGD([p], lr=1e-4)
    tp = torch.tensor(w0, requires_grad=True)
    topt = torch.optim.SGD([tp], lr=1e-4)
    for _ in range(3):
        opt.zero_grad()
        (p.float() * Tensor(np.array([1.0, 2.0, 3.0], np.float32))).sum().backward()
        opt.step()
        topt.zero_grad()
        (tp * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
        topt.step()
    master = opt.state[p]["master"]
    assert master.dtype == dtypes.float32 and p.dtype == dtypes.float16
    # the float32 master follows torch's float32 trajectory; steps of 1e-4 would vanish in float16 alone
    np.testing.assert_allclose(master.numpy(), tp.detach().numpy(), rtol=1e-6)
    np.testing.assert_array_equal(p.numpy(), tp.detach().numpy().astype(np.float16).astype(np.float32))


def test_optimizer_state_dict_roundtrip_continues_identically() -> None:
    x, y = data()

    def run(model: nn.Module, opt: optim.Optimizer, n: int) -> None:
        for _ in range(n):
            opt.zero_grad()
            (model(Tensor(x)) - Tensor(y)).square().mean().backward()
            opt.step()

    a, _ = twins()
    opt_a = optim.Adam(a.parameters(), lr=0.02)
    run(a, opt_a, 4)
    b, _ = twins()
    opt_b = optim.Adam(b.parameters(), lr=0.02)
    run(b, opt_b, 2)
    saved_model, saved_opt = {k: v.numpy() for k, v in b.state_dict().items()}, opt_b.state_dict()
    c, _ = twins()
    c.load_state_dict(saved_model)
    opt_c = optim.Adam(c.parameters(), lr=0.02)
    opt_c.load_state_dict(saved_opt)
    run(c, opt_c, 2)
    for pa, pc in zip(a.parameters(), c.parameters()):
        np.testing.assert_allclose(pc.numpy(), pa.numpy(), rtol=1e-6, atol=1e-7)


def test_amsgrad_keeps_exp_avg_sq_apart_from_its_max() -> None:
    """exp_avg_sq and max_exp_avg_sq start equal but are two buffers: the in-place max must not overwrite the
    average once the average falls below it (here at the fourth step, after the gradients shrink)."""
    p, tp = Tensor(np.zeros(3, np.float32), requires_grad=True), torch.zeros(3, requires_grad=True)
    opt, topt = optim.Adam([p], lr=0.1, amsgrad=True), torch.optim.Adam([tp], lr=0.1, amsgrad=True)
    for scale in (3.0, 1.0, 0.1, 0.01, 2.0):
        g = np.array([1.0, -2.0, 0.5], np.float32) * scale
        p.grad, tp.grad = Tensor(g), torch.tensor(g)
        opt.step()
        topt.step()
        for key in ("exp_avg_sq", "max_exp_avg_sq"):
            np.testing.assert_allclose(opt.state[p][key].numpy(), topt.state[tp][key].numpy(), rtol=1e-6, err_msg=key)
        np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), **TOL)


def test_invalid_arguments() -> None:
    p = Tensor(np.ones(2, np.float32), requires_grad=True)
    with pytest.raises(ValueError, match="nesterov"):
        optim.SGD([p], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="empty"):
        optim.Adam([])
    with pytest.raises(TypeError, match="floating point"):
        optim.SGD([Tensor(np.ones(2, np.int64))], lr=0.1)
    with pytest.raises(ValueError, match="more than one"):
        optim.SGD([{"params": [p]}, {"params": [p]}], lr=0.1)


# ---- gradient clipping ----


@pytest.mark.parametrize("max_norm, norm_type", [(0.5, 2.0), (100.0, 2.0), (0.3, math.inf), (0.7, 1.0)],
                         ids=["clip_l2", "no_clip_l2", "clip_inf", "clip_l1"])  # fmt: skip
def test_clip_grad_norm_matches_torch(max_norm: float, norm_type: float) -> None:
    model, tmodel = twins()
    x, y = data()
    (model(Tensor(x)) - Tensor(y)).square().sum().backward()
    (tmodel(torch.tensor(x)) - torch.tensor(y)).square().sum().backward()
    total = optim.clip_grad_norm_(model.parameters(), max_norm, norm_type)
    ttotal = torch.nn.utils.clip_grad_norm_(tmodel.parameters(), max_norm, norm_type)
    np.testing.assert_allclose(total.numpy(), ttotal.numpy(), rtol=1e-5)
    for p, tp in zip(model.parameters(), tmodel.parameters()):
        assert p.grad is not None and tp.grad is not None
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_clip_grad_norm_fuses_into_the_step() -> None:
    """Clipped gradients are lazy: clipping plus the update still realize once, the lazy norm included."""
    model, tmodel = twins()
    opt, topt = optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(tmodel.parameters(), lr=0.1)
    x, y = data()
    (model(Tensor(x)) - Tensor(y)).square().sum().backward()
    norm = optim.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    (tmodel(torch.tensor(x)) - torch.tensor(y)).square().sum().backward()
    tnorm = torch.nn.utils.clip_grad_norm_(tmodel.parameters(), 1.0)
    topt.step()
    np.testing.assert_allclose(norm.numpy(), tnorm.numpy(), rtol=1e-5)
    assert_same_params(model, tmodel)


def test_clip_grad_norm_nonfinite_error() -> None:
    p = Tensor(np.ones(2, np.float32), requires_grad=True)
    p.grad = Tensor(np.array([np.inf, 1.0], np.float32))
    with pytest.raises(RuntimeError, match="inf"):
        optim.clip_grad_norm_([p], 1.0, error_if_nonfinite=True)


# ---- learning-rate schedules ----


def test_warmup_cosine_values() -> None:
    f = optim.warmup_cosine
    assert [f(s, 4, 20) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert f(4, 4, 20) == 1.0
    assert math.isclose(f(12, 4, 20), 0.5)  # halfway through the cosine
    assert math.isclose(f(12, 4, 20, min_ratio=0.1), 0.55)
    assert math.isclose(f(20, 4, 20, min_ratio=0.1), 0.1) and math.isclose(f(500, 4, 20, min_ratio=0.1), 0.1)
    values = [f(s, 4, 20) for s in range(4, 21)]
    assert all(a >= b for a, b in zip(values, values[1:]))  # monotone decay after warmup
    assert math.isclose(f(0, 0, 10), 1.0)  # no warmup


def _lrs(opt: Any, sched: Any, n: int) -> list[float]:
    out = []
    for _ in range(n):
        out.append(opt.param_groups[0]["lr"])
        sched.step()
    return out


def test_lambda_lr_and_cosine_annealing_match_torch() -> None:
    p, tp = Tensor(np.ones(1, np.float32), requires_grad=True), torch.ones(1, requires_grad=True)
    fn = lambda s: optim.warmup_cosine(s, 3, 12, 0.05)  # noqa: E731
    a = _lrs(o := optim.SGD([p], lr=0.3), optim.LambdaLR(o, fn), 15)
    b = _lrs(t := torch.optim.SGD([tp], lr=0.3), torch.optim.lr_scheduler.LambdaLR(t, fn), 15)
    np.testing.assert_allclose(a, b, rtol=1e-12)
    a = _lrs(o := optim.SGD([p], lr=0.3), optim.CosineAnnealingLR(o, T_max=7, eta_min=0.01), 25)
    b = _lrs(t := torch.optim.SGD([tp], lr=0.3), torch.optim.lr_scheduler.CosineAnnealingLR(t, T_max=7, eta_min=0.01),
             25)  # fmt: skip
    np.testing.assert_allclose(a, b, rtol=1e-12)
    sched = optim.warmup_cosine_lr(o := optim.SGD([p], lr=2.0), 2, 10)
    assert sched.get_last_lr() == [1.0] and o.param_groups[0]["lr"] == 1.0

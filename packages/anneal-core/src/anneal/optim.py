"""anneal.optim: SGD, Adam, AdamW with torch's update math, gradient clipping, LR schedules.

The update is part of the step's graph: step() builds every new parameter and every new
optimizer-state tensor as a lazy expression of the gradients (themselves lazy: the backward
pass) and assigns them in place; one realize then runs forward, backward and update as ONE
schedule, so the scheduler fuses across them.

In place, because anneal.jit replays a captured step by re-running its kernels on the same
buffers. For the same reason the per-step scalars (learning rate, Adam's step count and bias
corrections) are 0-d buffers, never constants or Python numbers: a constant would be baked into a
capture, and would make every step a different graph that misses the schedule cache; a Python
number would not move while a replay runs the step.

Parameters stored in float16/bfloat16 get float32 master weights (kept in the optimizer
state); the stored parameter is the cast of the master.

In-place updates over lazy graphs keep PyTorch's meaning: every lazy tensor still reading a
parameter's old value (the loss, the logits, a BatchNorm's pending running statistics) is computed
in the step's schedule, before the update (anneal.realize.realize_all), so a loss read after
step() is the loss the step was taken on.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from anneal.realize import as_buffer, realize_all
from anneal.tensor import Tensor
from anneal_ir import DType, dtypes

__all__ = [
    "SGD",
    "Adam",
    "AdamW",
    "CosineAnnealingLR",
    "LRScheduler",
    "LambdaLR",
    "Optimizer",
    "clip_grad_norm_",
    "realize_all",
    "warmup_cosine",
    "warmup_cosine_lr",
]


ParamsArg = Iterable[Tensor] | Iterable[dict[str, Any]]


class Optimizer:
    """Parameter groups and per-parameter state as torch.

    A subclass defines two lazy rules: _state_update (the new optimizer state of one parameter) and
    _param_update (its new value, reading the updated state). step() assigns both in place and
    realizes everything in one schedule, ordered so that no kernel reads a value an earlier kernel of
    the same schedule overwrote: first the gradients as ordinary outputs (and every lazy tensor that still
    reads a parameter, pulled in by realize_all), then the state assigns (they read the old parameters),
    then the parameter assigns.

    In place (assign), not into new buffers: parameters and state keep their buffers, so anneal.jit
    can replay a captured step. Everything that changes per step therefore lives in buffers too: the
    learning rate (written from group["lr"] by step() and by the LR schedulers) and Adam's step count
    and bias corrections (advanced in the graph).
    """

    def __init__(self, params: ParamsArg, defaults: dict[str, Any]) -> None:
        self.defaults = dict(defaults)
        items: list[Any] = list(params)
        if not items:
            raise ValueError("optimizer got an empty parameter list")
        groups: list[dict[str, Any]] = [dict(g) for g in items] if isinstance(items[0], dict) else [{"params": items}]
        self.param_groups: list[dict[str, Any]] = []
        self.state: dict[Tensor, dict[str, Any]] = {}
        self._lr: dict[tuple[int, DType], Tensor] = {}  # a 0-d buffer per (group, dtype)
        self._lr_written: dict[tuple[int, DType], float] = {}
        for g in groups:
            self.add_param_group(g)

    def add_param_group(self, group: dict[str, Any]) -> None:
        params = group["params"]
        group["params"] = [params] if isinstance(params, Tensor) else list(params)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        for p in group["params"]:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, got {type(p).__name__}")
            if not p.dtype.is_float:
                raise TypeError(f"optimizer can only optimize floating point tensors, got {p.dtype.name}")
            if id(p) in seen:
                raise ValueError("some parameters appear in more than one parameter group")
            seen.add(id(p))
            if not p.requires_grad:
                p.requires_grad = True  # as tinygrad: handing a tensor to an optimizer makes it trainable
        for k, v in self.defaults.items():
            group.setdefault(k, v)
        self.param_groups.append(group)

    @property
    def params(self) -> list[Tensor]:
        return [p for g in self.param_groups for p in g["params"]]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None if set_to_none or p.grad is None else p.grad.zeros_like()

    # ---- per-step scalars in buffers ----
    def lr_tensor(self, gi: int, dtype: DType, device: str) -> Tensor:
        """Group gi's learning rate as a 0-d buffer of dtype (the same buffer every step)."""
        key = (gi, dtype)
        t = self._lr.get(key)
        if t is None or t.device != device:
            t = self._lr[key] = Tensor(np.asarray(self.param_groups[gi]["lr"], np.float64), dtype, device)
            self._lr_written[key] = self.param_groups[gi]["lr"]
        return t

    def sync_lr(self) -> None:
        """Write each group's "lr" into its buffer (schedulers call this, so a jit replay sees the new lr)."""
        for (gi, dtype), t in self._lr.items():
            value = self.param_groups[gi]["lr"]
            if self._lr_written.get((gi, dtype)) != value:
                buf = as_buffer(t.uop)
                assert buf is not None
                buf.copy_in(np.asarray(value, dtype=np.float64))
                self._lr_written[(gi, dtype)] = value

    # ---- the step ----
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Update every parameter that has a .grad, in one schedule.

        The parameters change in place; every lazy tensor still reading their old values (the loss, the
        logits, a BatchNorm's pending running statistics) is computed in the same schedule, before the
        update. The gradients are realized too, so .grad keeps reading the values the step used."""
        loss = closure() if closure is not None else None
        self.sync_lr()
        self._begin_step({id(p) for g in self.param_groups for p in g["params"] if p.grad is not None})
        plain: list[Tensor] = [loss] if isinstance(loss, Tensor) else []
        self._state_assigns: list[Tensor] = []
        param_assigns: list[Tensor] = []
        for gi, group in enumerate(self.param_groups):
            for p in group["params"]:
                if p.grad is None:
                    continue
                plain.append(p.grad)  # computed first: later kernels read it instead of re-deriving it
                state = self.state.setdefault(p, {})
                value = self._master(p, state)
                grad = Tensor._from(p.grad.uop, p.device).cast(value.dtype)
                for k, v in self._state_update(gi, group, value, grad, state).items():
                    old = state.get(k)
                    if isinstance(v, Tensor) and isinstance(old, Tensor):
                        self._state_assigns.append(old.assign(v))  # same buffer, new value
                    else:
                        state[k] = v  # first step: the new tensor becomes the state (realized below)
                        if isinstance(v, Tensor):
                            plain.append(v)
                new_value = self._param_update(gi, group, value, grad, state)
                if "master" in state:
                    self._state_assigns.append(state["master"].assign(new_value))
                    new_value = state["master"].cast(p.dtype)
                param_assigns.append(p.assign(new_value))
        realize_all([*plain, *self._state_assigns, *param_assigns])
        return loss

    def _begin_step(self, stepping: set[int]) -> None:
        """Called by step() before it builds the update; stepping holds the id() of each parameter with a .grad."""

    def _master(self, p: Tensor, state: dict[str, Any]) -> Tensor:
        """float32 master weights for float16/bfloat16 parameters; otherwise the parameter's own value."""
        if p.dtype.itemsize >= 4:
            return Tensor._from(p.uop, p.device)  # the same data, outside autograd's view of p
        if "master" not in state:
            m = Tensor._from(p.uop, p.device).cast(dtypes.float32)
            realize_all([m])
            state["master"] = m
        return state["master"]

    def _state_update(self, gi: int, group: dict[str, Any], p: Tensor, grad: Tensor,
                      state: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
        """The parameter's new state entries (lazy tensors, or plain values); entries it leaves out stay as they are."""
        return {}

    def _param_update(self, gi: int, group: dict[str, Any], p: Tensor, grad: Tensor,
                      state: dict[str, Any]) -> Tensor:  # fmt: skip
        """The parameter's new value; state holds the tensors as updated by _state_update."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """torch's layout: state by parameter index, groups with 'params' as index lists. As torch's, the state
        entries are the live ones: the buffers the next step updates in place (Adam's "step" included)."""
        index = {id(p): i for i, p in enumerate(self.params)}
        groups = [{**{k: v for k, v in g.items() if k != "params"}, "params": [index[id(p)] for p in g["params"]]}
                  for g in self.param_groups]  # fmt: skip
        return {"state": {index[id(p)]: dict(s) for p, s in self.state.items()}, "param_groups": groups}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        params = self.params
        groups = sd["param_groups"]
        if len(groups) != len(self.param_groups) or any(len(a["params"]) != len(b["params"])
                                                         for a, b in zip(groups, self.param_groups)):  # fmt: skip
            raise ValueError("optimizer state_dict: parameter groups do not match this optimizer's")
        for g, saved in zip(self.param_groups, groups):
            g.update({k: v for k, v in saved.items() if k != "params"})
        self.state = {}
        for i, s in sd["state"].items():
            p = params[int(i)]
            entries = {}
            for k, v in s.items():
                if isinstance(v, Tensor) or isinstance(v, np.ndarray):
                    v = Tensor(v.numpy() if isinstance(v, Tensor) else v, v.dtype if isinstance(v, Tensor) else None,
                               p.device)  # a buffer of its own: it will be updated in place  # fmt: skip
                entries[k] = v
            self.state[p] = entries
        self.sync_lr()


class SGD(Optimizer):
    """torch.optim.SGD: d = g + wd*p; b = momentum*b + (1-dampening)*d (b = d at the first step);
    d = d + momentum*b (nesterov) or b; p = p - lr*d."""

    def __init__(self, params: ParamsArg, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False) -> None:  # fmt: skip
        if lr < 0 or momentum < 0 or weight_decay < 0:
            raise ValueError(f"SGD: invalid lr {lr}, momentum {momentum} or weight_decay {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, {"lr": lr, "momentum": momentum, "dampening": dampening,
                                  "weight_decay": weight_decay, "nesterov": nesterov})  # fmt: skip

    @staticmethod
    def _direction(group: dict[str, Any], p: Tensor, grad: Tensor) -> Tensor:
        wd = group["weight_decay"]
        return grad + wd * p if wd != 0 else grad

    def _state_update(self, gi: int, group: dict[str, Any], p: Tensor, grad: Tensor,
                      state: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
        momentum = group["momentum"]
        if momentum == 0:
            return {}
        d = self._direction(group, p, grad)
        buf = state.get("momentum_buffer")
        return {"momentum_buffer": d if buf is None else buf * momentum + d * (1 - group["dampening"])}

    def _param_update(self, gi: int, group: dict[str, Any], p: Tensor, grad: Tensor,
                      state: dict[str, Any]) -> Tensor:  # fmt: skip
        d = self._direction(group, p, grad)
        if group["momentum"] != 0:
            buf = state["momentum_buffer"]
            d = d + group["momentum"] * buf if group["nesterov"] else buf
        return p - self.lr_tensor(gi, p.dtype, p.device) * d


@dataclass(eq=False)
class _StepCount:
    """The step count of the parameters whose state["step"] is `step`: one group, one device, parameters that
    have stepped together (they share the buffer, so a step advances it once), plus the bias corrections
    (1 - beta1**step, 1 - beta2**step) of that count, one pair per dtype of the parameters' values."""

    step: Tensor  # 0-d int32 buffer, advanced in the graph
    group: int
    bias: dict[DType, tuple[Tensor, Tensor]] = field(default_factory=dict)
    before: Tensor | None = None  # the count before the advance of the step being built
    reached: int | None = None  # the count that step reaches, where the host knows it


class Adam(Optimizer):
    """torch.optim.Adam (and AdamW, with decoupled weight decay), per-parameter step counts as torch.

    state["step"] is a 0-d int32 buffer, as torch keeps a tensor there: step() advances it with an
    in-graph assign, so a jit replay advances it too, and int(state["step"]) (or a saved state_dict)
    gives the steps really taken. Parameters of a group that step together share that buffer (one tiny
    kernel per step); a parameter that has no .grad at a step is skipped, as torch does, and gets a
    buffer of its own holding its count.

    The bias corrections 1 - beta**step are 0-d buffers advanced in the graph by
    c_t = (1 - beta) + beta * c_{t-1}: that form has no cancellation for small t (where 1 - beta**t
    computed in float32 loses digits) and keeps a jit replay correct. A count's first correction (first
    step, after load_state_dict) comes from the host in float64."""

    decoupled: bool = False

    def __init__(self, params: ParamsArg, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, amsgrad: bool = False) -> None:  # fmt: skip
        if lr < 0 or eps < 0 or weight_decay < 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"{type(self).__name__}: invalid lr {lr}, betas {betas}, eps {eps} or "
                             f"weight_decay {weight_decay}")  # fmt: skip
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay,
                                  "amsgrad": amsgrad})  # fmt: skip
        self._counts: dict[int, _StepCount] = {}  # by id() of the step buffer (which the entry keeps alive)
        self._advanced: dict[int | tuple[int, str, int], _StepCount] = {}  # counts the step being built moved
        self._bias_memo: dict[tuple[int, DType], tuple[Tensor, Tensor]] = {}

    # ---- step counts ----
    def _begin_step(self, stepping: set[int]) -> None:
        """Give the parameters that will not step a buffer of their own where they share one with some that will."""
        self._advanced, self._bias_memo = {}, {}
        holders: dict[int, list[Tensor]] = {}
        for p, state in self.state.items():
            if isinstance(state.get("step"), Tensor):
                holders.setdefault(id(state["step"]), []).append(p)
        for ps in holders.values():
            if any(id(p) in stepping for p in ps):
                for p in ps:
                    if id(p) not in stepping:  # a copy through the host: no kernel, so a replay leaves it alone
                        old = self.state[p]["step"]
                        self.state[p]["step"] = Tensor(old.numpy(), old.dtype, old.device)
        self._counts = {k: c for k, c in self._counts.items() if k in holders}

    def _step_count(self, gi: int, state: dict[str, Any], device: str) -> _StepCount:
        """The parameter's count, advanced by this step (once per shared buffer), as state["step"]."""
        s = state.get("step")
        if isinstance(s, Tensor):
            count = self._advanced.get(id(s))
            if count is None:
                count = self._counts.get(id(s)) or _StepCount(s, gi)
                self._counts[id(s)] = self._advanced[id(s)] = count
                count.before, count.reached = Tensor._from(s.uop, s.device), None
                self._state_assigns.append(s.assign(s + 1))
        else:  # the first step (or a count held as a number): a new buffer, shared with the group's other ones
            n = 0 if s is None else int(s)
            key = (gi, device, n)
            count = self._advanced.get(key)
            if count is None:
                t = Tensor(np.asarray(n + 1, np.int32), dtypes.int32, device)
                count = self._counts[id(t)] = self._advanced[key] = _StepCount(t, gi, reached=n + 1)
        state["step"] = count.step
        return count

    def _live_counts(self) -> list[_StepCount]:
        held = {id(s["step"]) for s in self.state.values() if isinstance(s.get("step"), Tensor)}
        return [c for k, c in self._counts.items() if k in held]

    def _bias_corrections(self, count: _StepCount, dtype: DType, device: str) -> tuple[Tensor, Tensor]:
        """(1 - beta1**step, 1 - beta2**step) as 0-d buffers, shared by the parameters sharing the count."""
        key = (id(count), dtype)
        if key in self._bias_memo:
            return self._bias_memo[key]
        beta1, beta2 = self.param_groups[count.group]["betas"]
        prev = count.bias.get(dtype)
        if prev is None:  # a new count (first step, a loaded state, a parameter that skipped steps): from the host
            if count.reached is None:
                assert count.before is not None
                count.reached = int(count.before) + 1  # reads the buffer as it was before this step
            t = count.reached
            pair = (Tensor(np.asarray(1 - beta1**t), dtype, device),
                    Tensor(np.asarray(1 - beta2**t), dtype, device))  # fmt: skip
        else:
            c1, c2 = prev
            pair = (c1.assign(c1 * beta1 + (1 - beta1)), c2.assign(c2 * beta2 + (1 - beta2)))
            self._state_assigns += list(pair)
        count.bias[dtype] = self._bias_memo[key] = pair
        return pair

    def bias_corrections(self) -> dict[tuple[int, int, DType], tuple[Tensor, Tensor]]:
        """The running bias corrections by (group, step count, dtype): the buffers the step advances. They are
        float32 recursions, not 1 - beta**t recomputed: a checkpoint that keeps them (with load_bias_corrections)
        resumes bit for bit. Reads each count from its buffer."""
        out: dict[tuple[int, int, DType], tuple[Tensor, Tensor]] = {}
        for count in self._live_counts():
            t = int(count.step)
            for dtype, pair in count.bias.items():
                out[(count.group, t, dtype)] = pair
        return out

    def load_bias_corrections(self, saved: dict[tuple[int, int, DType], tuple[Any, Any]]) -> None:
        """After load_state_dict: each count takes the corrections bias_corrections() gave for its group, count and
        dtype (Tensors or arrays), into buffers of its own; a count without them starts from the host."""
        for count in self._live_counts():
            t, device = int(count.step), count.step.device
            for (gi, n, dtype), pair in saved.items():
                if gi == count.group and n == t:
                    c1, c2 = (Tensor(c.numpy() if isinstance(c, Tensor) else np.asarray(c), dtype, device)
                              for c in pair)  # fmt: skip
                    count.bias[dtype] = (c1, c2)

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """torch's layout; a saved "step" may be a Tensor, an array or a number. Parameters of a group saved at
        the same count share one count buffer again."""
        states = {i: {k: int(v) if k == "step" else v for k, v in s.items()} for i, s in sd["state"].items()}
        super().load_state_dict({**sd, "state": states})
        group_of = {id(p): gi for gi, g in enumerate(self.param_groups) for p in g["params"]}
        shared: dict[tuple[int, str, int], Tensor] = {}
        self._counts = {}
        for p, state in self.state.items():
            if "step" in state:
                key = (group_of[id(p)], p.device, state["step"])
                if key not in shared:
                    t = shared[key] = Tensor(np.asarray(key[2], np.int32), dtypes.int32, p.device)
                    self._counts[id(t)] = _StepCount(t, key[0])
                state["step"] = shared[key]

    # ---- the update ----
    def _decayed_grad(self, group: dict[str, Any], p: Tensor, grad: Tensor) -> Tensor:
        wd = group["weight_decay"]
        return grad + wd * p if wd != 0 and not self.decoupled else grad

    def _state_update(self, gi: int, group: dict[str, Any], p: Tensor, grad: Tensor,
                      state: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
        beta1, beta2 = group["betas"]
        self._step_count(gi, state, p.device)
        g = self._decayed_grad(group, p, grad)
        m, v = state.get("exp_avg"), state.get("exp_avg_sq")
        # torch: exp_avg.lerp_(g, 1-beta1) = m + (g-m)*(1-beta1); exp_avg_sq*beta2 + (1-beta2)*g*g
        new: dict[str, Any] = {
            "exp_avg": g * (1 - beta1) if m is None else m + (g - m) * (1 - beta1),
            "exp_avg_sq": g * g * (1 - beta2) if v is None else v * beta2 + g * g * (1 - beta2),
        }
        if group["amsgrad"]:
            vmax = state.get("max_exp_avg_sq")
            # a buffer of its own from the first step: sharing exp_avg_sq's, the later in-place max would overwrite it
            v_new = new["exp_avg_sq"]
            new["max_exp_avg_sq"] = v_new.contiguous() if vmax is None else vmax.maximum(v_new)
        return new

    def _param_update(self, gi: int, group: dict[str, Any], p: Tensor, grad: Tensor,
                      state: dict[str, Any]) -> Tensor:  # fmt: skip
        lr = self.lr_tensor(gi, p.dtype, p.device)
        if self.decoupled and group["weight_decay"] != 0:
            p = p * (1 - lr * group["weight_decay"])
        c1, c2 = self._bias_corrections(self._counts[id(state["step"])], p.dtype, p.device)
        v = state["max_exp_avg_sq"] if group["amsgrad"] else state["exp_avg_sq"]
        denom = v.sqrt() / c2.sqrt() + group["eps"]
        return p - (lr / c1) * (state["exp_avg"] / denom)


class AdamW(Adam):
    """torch.optim.AdamW: p = p * (1 - lr*wd) before the Adam step (decoupled weight decay)."""

    decoupled = True

    def __init__(self, params: ParamsArg, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, amsgrad: bool = False) -> None:  # fmt: skip
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad)


# ---- gradient clipping ----


def clip_grad_norm_(parameters: Tensor | Iterable[Tensor], max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False) -> Tensor:  # fmt: skip
    """Scale every .grad by min(1, max_norm / (total_norm + 1e-6)), as torch; returns the total norm (lazy).

    The norm is over all gradients as one vector. Gradients are replaced by lazy scaled ones, so the
    clipping fuses into the optimizer step that reads them."""
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return Tensor(np.zeros((), np.float32))
    norm_type = float(norm_type)
    parts = [g.float() for g in grads]
    if math.isinf(norm_type):
        total = parts[0].abs().max()
        for g in parts[1:]:
            total = total.maximum(g.abs().max())
    else:
        acc = None
        for g in parts:
            s = g.square().sum() if norm_type == 2.0 else (g.abs() ** norm_type).sum()
            acc = s if acc is None else acc + s
        assert acc is not None
        total = acc.sqrt() if norm_type == 2.0 else acc ** (1.0 / norm_type)
    total = total.detach()
    if error_if_nonfinite:
        value = float(total.item())
        if not math.isfinite(value):
            raise RuntimeError(f"clip_grad_norm_: the total norm of order {norm_type} of the gradients is {value}")
    coef = (max_norm / (total + 1e-6)).minimum(1.0)
    for p in params:
        if p.grad is not None:
            p.grad = (p.grad * coef.cast(p.grad.dtype)).cast(p.grad.dtype)
    return total


# ---- learning-rate schedules ----


def warmup_cosine(step: int, warmup: int, total: int, min_ratio: float = 0.0) -> float:
    """LR multiplier: linear warmup to 1 over `warmup` steps ((step+1)/warmup, so step 0 already moves),
    then a cosine from 1 down to min_ratio at step `total`; min_ratio after that."""
    if step < warmup:
        return (step + 1) / warmup
    span = max(1, total - warmup)
    progress = min(1.0, (step - warmup) / span)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


class LRScheduler:
    """torch's LRScheduler protocol: construction applies epoch 0; each step() moves to the next epoch."""

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        self.optimizer = optimizer
        for g in optimizer.param_groups:
            if last_epoch == -1:
                g["initial_lr"] = g["lr"]
            elif "initial_lr" not in g:
                raise KeyError("param 'initial_lr' is not specified in param_groups when resuming a scheduler")
        self.base_lrs: list[float] = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._step_count = 0
        self.step()

    def get_lr(self) -> list[float]:
        raise NotImplementedError

    def step(self) -> None:
        self._step_count += 1
        self.last_epoch += 1
        values = self.get_lr()
        for g, lr in zip(self.optimizer.param_groups, values):
            g["lr"] = lr
        self._last_lr = list(values)
        self.optimizer.sync_lr()  # into the lr buffers now, so that a jit replay of the step sees it

    def get_last_lr(self) -> list[float]:
        return self._last_lr

    def state_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "lr_lambdas")}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        self.__dict__.update(sd)


class LambdaLR(LRScheduler):
    """lr = base_lr * lr_lambda(epoch); one lambda, or one per parameter group."""

    def __init__(self, optimizer: Optimizer, lr_lambda: Callable[[int], float] | Sequence[Callable[[int], float]],
                 last_epoch: int = -1) -> None:  # fmt: skip
        n = len(optimizer.param_groups)
        if callable(lr_lambda):
            self.lr_lambdas = [lr_lambda] * n
        else:
            if len(lr_lambda) != n:
                raise ValueError(f"LambdaLR: expected {n} lr_lambdas, got {len(lr_lambda)}")
            self.lr_lambdas = list(lr_lambda)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        return [base * fn(self.last_epoch) for fn, base in zip(self.lr_lambdas, self.base_lrs)]


class CosineAnnealingLR(LRScheduler):
    """torch.optim.lr_scheduler.CosineAnnealingLR, with torch's recursive (chainable) form of the update."""

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0,  # noqa: N803 - torch's name
                 last_epoch: int = -1) -> None:  # fmt: skip
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        groups = self.optimizer.param_groups
        e, t, lo = self.last_epoch, self.T_max, self.eta_min
        if e == 0:
            return [g["lr"] for g in groups]
        if self._step_count == 1 and e > 0:
            return [lo + (b - lo) * (1 + math.cos(e * math.pi / t)) / 2 for b in self.base_lrs]
        if (e - 1 - t) % (2 * t) == 0:
            return [g["lr"] + (b - lo) * (1 - math.cos(math.pi / t)) / 2 for b, g in zip(self.base_lrs, groups)]
        return [(1 + math.cos(math.pi * e / t)) / (1 + math.cos(math.pi * (e - 1) / t)) * (g["lr"] - lo) + lo
                for g in groups]  # fmt: skip


def warmup_cosine_lr(optimizer: Optimizer, warmup: int, total: int, min_ratio: float = 0.0) -> LambdaLR:
    """A LambdaLR following warmup_cosine."""
    return LambdaLR(optimizer, lambda s: warmup_cosine(s, warmup, total, min_ratio))

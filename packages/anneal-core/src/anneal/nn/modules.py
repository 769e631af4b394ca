"""anneal.nn modules: torch.nn's layers (names, arguments, defaults, init) over lazy Tensors.

A Module finds its parameters by walking its attributes (tensors, sub-modules, and lists,
tuples and dicts of them), the way tinygrad does, so there is no registration step; names
come out dotted exactly as torch's (``layers.0.weight``), which lets a torch ``state_dict``
load unchanged. Buffers (running statistics) are tensors whose attribute name was given to
``register_buffer``: they are saved and loaded but not trained.

Updates of state that torch does in place (BatchNorm's running statistics) are ``assign``s
to the same Tensor and buffer, so a caller holding the tensor sees the new value and a jit
replay writes it; the value is lazy until something realizes it (``Optimizer.step(extra=
model.buffers())`` realizes it with the update, in one schedule).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from anneal.errors import ShapeError
from anneal.nn import functional as F
from anneal.tensor import Tensor
from anneal_ir import DType, dtypes
from anneal_ir.trace import inside_module

__all__ = [
    "AvgPool2d",
    "AvgPool3d",
    "BatchNorm2d",
    "Conv1d",
    "Conv2d",
    "Conv3d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "ConvTranspose3d",
    "Dropout",
    "Embedding",
    "Flatten",
    "GELU",
    "Identity",
    "LayerNorm",
    "Linear",
    "MaxPool2d",
    "MaxUnpool2d",
    "Module",
    "RMSNorm",
    "ReLU",
    "Sequential",
    "SiLU",
    "Sigmoid",
    "Tanh",
    "Upsample",
]


def _walk(obj: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    """(dotted name, value) for every Tensor or Module reachable through lists, tuples and dicts."""
    if isinstance(obj, (Tensor, Module)):
        yield prefix, obj
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _walk(v, f"{prefix}.{i}" if prefix else str(i))
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _walk(v, f"{prefix}.{k}" if prefix else str(k))


class Module:
    """Base class: subclasses set tensors and sub-modules as attributes and define forward()."""

    # class-level defaults, so that a subclass that forgets super().__init__() still works
    training: bool = True
    _buffer_names: frozenset[str] = frozenset()

    def __init__(self) -> None:
        self.training = True

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with inside_module(self):  # a compile trace (anneal viz) learns which module built each node
            return self.forward(*args, **kwargs)

    # ---- structure ----
    def _members(self) -> Iterator[tuple[str, Any]]:
        """Direct members in attribute order; names starting with '_' are private state, not members."""
        for name, value in vars(self).items():
            if not name.startswith("_"):
                yield from _walk(value, name)

    def register_buffer(self, name: str, tensor: Tensor | None) -> None:
        """A tensor that is state but not a parameter (saved and loaded, not trained), as torch."""
        self._buffer_names = frozenset(self._buffer_names | {name})
        setattr(self, name, tensor)

    def named_children(self) -> Iterator[tuple[str, Module]]:
        for name, v in self._members():
            if isinstance(v, Module):
                yield name, v

    def children(self) -> Iterator[Module]:
        for _, m in self.named_children():
            yield m

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        seen: set[int] = set()
        for name, m in self._named_modules(prefix):
            if id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def _named_modules(self, prefix: str) -> Iterator[tuple[str, Module]]:
        yield prefix, self
        for name, child in self.named_children():
            yield from child._named_modules(f"{prefix}.{name}" if prefix else name)

    def modules(self) -> Iterator[Module]:
        for _, m in self.named_modules():
            yield m

    def _named_tensors(self, prefix: str, buffers: bool | None) -> Iterator[tuple[str, Tensor]]:
        """Every tensor, torch's order: this module's parameters, then its buffers, then each child's.

        buffers: None = both, True = buffers only, False = parameters only. Tied tensors appear under
        every name (as torch's state_dict); the callers that need uniqueness dedupe."""
        direct = [(n, v) for n, v in self._members() if isinstance(v, Tensor)]
        is_buf = [n.split(".")[0] in self._buffer_names for n, _ in direct]
        pre = f"{prefix}." if prefix else ""
        for want in (False, True):
            if buffers is not None and buffers != want:
                continue
            for (n, v), b in zip(direct, is_buf):
                if b == want:
                    yield pre + n, v
        for name, child in self.named_children():
            yield from child._named_tensors(pre + name, buffers)

    def named_parameters(self, prefix: str = "", remove_duplicate: bool = True) -> Iterator[tuple[str, Tensor]]:
        seen: set[int] = set()
        for name, t in self._named_tensors(prefix, buffers=False):
            if remove_duplicate and id(t) in seen:
                continue
            seen.add(id(t))
            yield name, t

    def parameters(self) -> Iterator[Tensor]:
        for _, t in self.named_parameters():
            yield t

    def named_buffers(self, prefix: str = "") -> Iterator[tuple[str, Tensor]]:
        seen: set[int] = set()
        for name, t in self._named_tensors(prefix, buffers=True):
            if id(t) not in seen:
                seen.add(id(t))
                yield name, t

    def buffers(self) -> Iterator[Tensor]:
        for _, t in self.named_buffers():
            yield t

    # ---- modes and state ----
    def train(self, mode: bool = True) -> Module:
        for m in self.modules():
            m.training = mode
        return self

    def eval(self) -> Module:
        return self.train(False)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.parameters():
            p.grad = None if set_to_none or p.grad is None else p.grad.zeros_like()

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        for p in self.parameters():
            p.requires_grad = requires_grad
        return self

    def state_dict(self) -> dict[str, Tensor]:
        from anneal.nn.state import get_state_dict

        return get_state_dict(self)

    def load_state_dict(self, state: dict[str, Any], strict: bool = True) -> Any:
        from anneal.nn.state import load_state_dict

        return load_state_dict(self, state, strict=strict)

    def to(self, *args: Any, **kwargs: Any) -> Module:
        """Move (to(device)) or cast floating point tensors (to(dtype)) in place, as torch.

        The Tensor objects are kept (an optimizer may already hold them); their data is replaced."""
        from anneal.realize import plain_view, realize_all

        dtype, device = kwargs.get("dtype"), kwargs.get("device")
        for a in args:  # the same reading of positional arguments as Tensor.to
            if isinstance(a, DType) or (isinstance(a, str) and a in dtypes.__dict__):
                dtype = dtypes.from_any(a)
            else:
                device = a
        changed = []
        for _, t in self._named_tensors("", None):
            new = t.to(device=device, dtype=dtype if t.dtype.is_float else None)  # integer buffers keep their dtype
            if new is not t:
                changed.append((t, new))
        realize_all([n for _, n in changed])
        for t, new in changed:
            t.uop, t.device = plain_view(new.uop), new.device  # the same leaf, now reading the moved buffer
        return self

    def __repr__(self) -> str:
        inner = [f"  ({n}): " + repr(m).replace("\n", "\n  ") for n, m in self.named_children()]
        extra = self.extra_repr()
        if not inner:
            return f"{type(self).__name__}({extra})"
        return f"{type(self).__name__}({extra}\n" + "\n".join(inner) + "\n)"

    def extra_repr(self) -> str:
        return ""


def _param(t: Tensor) -> Tensor:
    return t.requires_grad_(True)


def _float_dtype(dtype: DType | str | None) -> DType:
    return dtypes.from_any(dtype) if dtype is not None else dtypes.default_float


def _uniform(shape: tuple[int, ...], bound: float, dtype: DType | str | None, device: str | None) -> Tensor:
    return _param(Tensor.uniform(*shape, low=-bound, high=bound, dtype=_float_dtype(dtype), device=device))


# ---- layers ----


class Linear(Module):
    """y = x @ W.T + b; W and b ~ U(-1/sqrt(in), 1/sqrt(in)), torch's kaiming_uniform(a=sqrt(5)) bounds."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device: str | None = None,
                 dtype: DType | str | None = None) -> None:  # fmt: skip
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        bound = 1 / math.sqrt(in_features) if in_features > 0 else 0.0
        self.weight = _uniform((out_features, in_features), bound, dtype, device)
        self.bias = _uniform((out_features,), bound, dtype, device) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def _pair(v: Any) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


class _ConvNd(Module):
    """torch.nn.Conv{N}d: weight (out, in/groups, *kernel), bounds 1/sqrt(fan_in) with fan_in = in/groups*prod(k)."""

    nd = 2
    _function = staticmethod(F.conv2d)

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros", device: str | None = None,
                 dtype: DType | str | None = None) -> None:  # fmt: skip
        super().__init__()
        name = type(self).__name__
        if groups <= 0 or in_channels % groups or out_channels % groups:
            raise ValueError(f"{name}: in_channels {in_channels} and out_channels {out_channels} must be divisible by "
                             f"groups {groups}")  # fmt: skip
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise ValueError(f"{name}: padding_mode must be zeros, reflect, replicate or circular, got "
                             f"{padding_mode!r}")  # fmt: skip
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = _tuple(kernel_size, self.nd)
        self.stride, self.dilation = _tuple(stride, self.nd), _tuple(dilation, self.nd)
        self.padding = padding if isinstance(padding, str) else _tuple(padding, self.nd)
        self.padding_mode = padding_mode
        fan_in = in_channels // groups * math.prod(self.kernel_size)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0.0
        self.weight = _uniform((out_channels, in_channels // groups, *self.kernel_size), bound, dtype, device)
        self.bias = _uniform((out_channels,), bound, dtype, device) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        if self.padding_mode == "zeros" or self.padding == "valid":
            return self._function(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)
        if self.padding == "same":
            tot = [d * (k - 1) for d, k in zip(self.dilation, self.kernel_size)]
            pads = [(t // 2, t - t // 2) for t in tot]
        else:
            assert not isinstance(self.padding, str)
            pads = [(p, p) for p in self.padding]
        x = F.pad(x, [v for a, b in reversed(pads) for v in (a, b)], mode=self.padding_mode)
        return self._function(x, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}, dilation={self.dilation}, groups={self.groups}")  # fmt: skip


def _tuple(v: Any, n: int) -> tuple[int, ...]:
    return (v,) * n if isinstance(v, int) else tuple(int(e) for e in v)


class Conv1d(_ConvNd):
    nd = 1
    _function = staticmethod(F.conv1d)


class Conv2d(_ConvNd):
    nd = 2
    _function = staticmethod(F.conv2d)


class Conv3d(_ConvNd):
    nd = 3
    _function = staticmethod(F.conv3d)


class _ConvTransposeNd(Module):
    """torch.nn.ConvTranspose{N}d: weight (in, out/groups, *kernel), torch's bounds (fan_in = out/groups*prod(k))."""

    nd = 2
    _function = staticmethod(F.conv_transpose2d)

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 output_padding: Any = 0, groups: int = 1, bias: bool = True, dilation: Any = 1,
                 padding_mode: str = "zeros", device: str | None = None,
                 dtype: DType | str | None = None) -> None:  # fmt: skip
        super().__init__()
        name = type(self).__name__
        if groups <= 0 or in_channels % groups or out_channels % groups:
            raise ValueError(f"{name}: in_channels {in_channels} and out_channels {out_channels} must be divisible by "
                             f"groups {groups}")  # fmt: skip
        if padding_mode != "zeros":
            raise ValueError(f'{name}: only "zeros" padding_mode is supported, got {padding_mode!r}')
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size, self.stride = _tuple(kernel_size, self.nd), _tuple(stride, self.nd)
        self.padding, self.output_padding = _tuple(padding, self.nd), _tuple(output_padding, self.nd)
        self.dilation = _tuple(dilation, self.nd)
        fan_in = out_channels // groups * math.prod(self.kernel_size)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0.0
        self.weight = _uniform((in_channels, out_channels // groups, *self.kernel_size), bound, dtype, device)
        self.bias = _uniform((out_channels,), bound, dtype, device) if bias else None

    def forward(self, x: Tensor, output_size: Any = None) -> Tensor:
        op = self.output_padding if output_size is None else self._output_padding(x, output_size)
        return self._function(x, self.weight, self.bias, self.stride, self.padding, op, self.groups, self.dilation)

    def _output_padding(self, x: Tensor, output_size: Any) -> tuple[int, ...]:
        """The output_padding that reaches output_size (its last nd entries), as torch's _output_padding."""
        want = [int(v) for v in output_size][-self.nd :]
        least = [(i - 1) * s - 2 * p + d * (k - 1) + 1 for i, s, p, d, k in
                 zip(x.shape[-self.nd :], self.stride, self.padding, self.dilation, self.kernel_size)]  # fmt: skip
        extra = tuple(w - m for w, m in zip(want, least))
        if len(want) != self.nd or any(not 0 <= e < max(s, d) for e, s, d in zip(extra, self.stride, self.dilation)):
            raise ValueError(f"{type(self).__name__}: requested an output size of {tuple(want)}, but valid sizes "
                             f"start at {tuple(least)} (input shape {x.shape})")  # fmt: skip
        return extra

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}, output_padding={self.output_padding}, groups={self.groups}")  # fmt: skip


class ConvTranspose1d(_ConvTransposeNd):
    nd = 1
    _function = staticmethod(F.conv_transpose1d)


class ConvTranspose2d(_ConvTransposeNd):
    nd = 2
    _function = staticmethod(F.conv_transpose2d)


class ConvTranspose3d(_ConvTransposeNd):
    nd = 3
    _function = staticmethod(F.conv_transpose3d)


def _normalized_shape(normalized_shape: int | tuple[int, ...] | list[int]) -> tuple[int, ...]:
    return (normalized_shape,) if isinstance(normalized_shape, int) else tuple(int(v) for v in normalized_shape)


class LayerNorm(Module):
    def __init__(self, normalized_shape: int | tuple[int, ...] | list[int], eps: float = 1e-5,
                 elementwise_affine: bool = True, bias: bool = True, device: str | None = None,
                 dtype: DType | str | None = None) -> None:  # fmt: skip
        super().__init__()
        self.normalized_shape, self.eps = _normalized_shape(normalized_shape), eps
        dt = _float_dtype(dtype)
        self.weight = _param(Tensor.ones(self.normalized_shape, dtype=dt, device=device)) if elementwise_affine \
            else None  # fmt: skip
        self.bias = _param(Tensor.zeros(self.normalized_shape, dtype=dt, device=device)) if elementwise_affine and \
            bias else None  # fmt: skip

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.weight is not None}"


def _finfo_eps(dt: DType) -> float:
    if dt == dtypes.bfloat16:
        return 2.0**-7  # numpy has no bfloat16: 7 explicit mantissa bits
    return float(np.finfo(dt.np).eps)


def rms_norm(x: Tensor, normalized_shape: tuple[int, ...], weight: Tensor | None = None,
             eps: float | None = None) -> Tensor:  # fmt: skip
    """torch.nn.functional.rms_norm: x / sqrt(mean(x^2) + eps) * weight; eps=None is finfo(x.dtype).eps.

    Local because anneal.nn.functional has no rms_norm yet."""
    if tuple(x.shape[x.ndim - len(normalized_shape) :]) != tuple(normalized_shape):
        raise ShapeError(f"rms_norm: normalized_shape {normalized_shape} does not match the trailing dims of input "
                         f"shape {x.shape}")  # fmt: skip
    x = x if x.dtype.is_float else x.cast(dtypes.default_float)
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    e = _finfo_eps(x.dtype) if eps is None else eps
    out = x * (x.square().mean(axes, keepdim=True) + e).rsqrt()
    return out if weight is None else out * weight


class RMSNorm(Module):
    def __init__(self, normalized_shape: int | tuple[int, ...] | list[int], eps: float | None = None,
                 elementwise_affine: bool = True, device: str | None = None,
                 dtype: DType | str | None = None) -> None:  # fmt: skip
        super().__init__()
        self.normalized_shape, self.eps = _normalized_shape(normalized_shape), eps
        self.weight = _param(Tensor.ones(self.normalized_shape, dtype=_float_dtype(dtype), device=device)) \
            if elementwise_affine else None  # fmt: skip

    def forward(self, x: Tensor) -> Tensor:
        return rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.weight is not None}"


class Embedding(Module):
    """weight ~ N(0, 1) (the padding_idx row zero), as torch.nn.Embedding."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 device: str | None = None, dtype: DType | str | None = None) -> None:  # fmt: skip
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(f"Embedding: padding_idx {padding_idx} must be within num_embeddings {num_embeddings}")
            padding_idx %= num_embeddings
        self.padding_idx = padding_idx
        w = Tensor.randn(num_embeddings, embedding_dim, dtype=_float_dtype(dtype), device=device)
        if padding_idx is not None:
            data = w.numpy().copy()
            data[padding_idx] = 0
            w = Tensor(data, dtype=w.dtype, device=w.device)
        self.weight = _param(w)

    def forward(self, idx: Tensor) -> Tensor:
        return F.embedding(idx, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"


class BatchNorm2d(Module):
    """Batch statistics in training (and running statistics updated from them), running statistics in eval.

    As torch: the batch variance used to normalize is biased; running_var accumulates the unbiased one;
    momentum=None means a cumulative average (factor 1/num_batches_tracked)."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device: str | None = None,
                 dtype: DType | str | None = None) -> None:  # fmt: skip
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.track_running_stats = track_running_stats
        dt = _float_dtype(dtype)
        self.weight = _param(Tensor.ones(num_features, dtype=dt, device=device)) if affine else None
        self.bias = _param(Tensor.zeros(num_features, dtype=dt, device=device)) if affine else None
        if track_running_stats:
            # real buffers (not lazy constants): they are replaced in place each training step
            self.register_buffer("running_mean", Tensor(np.zeros(num_features), dtype=dt, device=device))
            self.register_buffer("running_var", Tensor(np.ones(num_features), dtype=dt, device=device))
            self.register_buffer("num_batches_tracked", Tensor(np.zeros((), np.int64), device=device))
        else:
            self.running_mean = self.running_var = self.num_batches_tracked = None

    def _check(self, x: Tensor) -> None:
        if x.ndim != 4:
            raise ShapeError(f"BatchNorm2d: expected a 4-d input (N, C, H, W), got shape {x.shape}")
        if x.shape[1] != self.num_features:
            raise ShapeError(f"BatchNorm2d: expected {self.num_features} channels, got input shape {x.shape}")

    def forward(self, x: Tensor) -> Tensor:
        self._check(x)
        shape = (1, self.num_features, 1, 1)
        use_batch = self.training or self.running_mean is None
        if use_batch:
            axes = (0, 2, 3)
            n = x.shape[0] * x.shape[2] * x.shape[3]
            if n <= 1:
                raise ShapeError(f"BatchNorm2d: expected more than 1 value per channel when training, got input shape "
                                 f"{x.shape}")  # fmt: skip
            mean = x.mean(axes, keepdim=True)
            var = (x - mean).square().mean(axes, keepdim=True)
            if self.training and self.running_mean is not None:
                self._update_running(mean.reshape(-1).detach(), var.reshape(-1).detach(), n)
        else:
            assert self.running_mean is not None and self.running_var is not None
            mean, var = self.running_mean.reshape(shape), self.running_var.reshape(shape)
        out = (x - mean) * (var + self.eps).rsqrt()
        if self.weight is not None:
            out = out * self.weight.reshape(shape)
        if self.bias is not None:
            out = out + self.bias.reshape(shape)
        return out

    def _update_running(self, mean: Tensor, var: Tensor, n: int) -> None:
        rm, rv, nbt = self.running_mean, self.running_var, self.num_batches_tracked
        assert rm is not None and rv is not None and nbt is not None
        new_nbt = nbt + 1
        if self.momentum is None:
            factor: Any = 1.0 / new_nbt.cast(rm.dtype)  # cumulative average
        else:
            factor = self.momentum
        new_rm = (1 - factor) * rm + factor * mean.cast(rm.dtype)
        new_rv = (1 - factor) * rv + factor * (var * (n / (n - 1))).cast(rv.dtype)
        # in place, as torch: the same tensors and buffers (an optimizer step or a jit replay writes them)
        rm.assign(new_rm)
        rv.assign(new_rv)
        nbt.assign(new_nbt)

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}"


class Dropout(Module):
    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout: probability has to be between 0 and 1, got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


# ---- activations and small wrappers ----


class GELU(Module):
    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x, self.approximate)


class SiLU(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.silu(x)


class ReLU(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.relu(x)


class Tanh(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.tanh()


class Sigmoid(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.sigmoid()


class ELU(Module):
    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, x: Tensor) -> Tensor:
        return F.elu(x, self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}"


class CELU(ELU):
    def forward(self, x: Tensor) -> Tensor:
        return F.celu(x, self.alpha)


class SELU(Module):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, x: Tensor) -> Tensor:
        return F.selu(x)


class Hardtanh(Module):
    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        if min_val > max_val:
            raise ValueError(f"Hardtanh: min_val ({min_val}) must not exceed max_val ({max_val})")
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace

    def forward(self, x: Tensor) -> Tensor:
        return F.hardtanh(x, self.min_val, self.max_val)

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}"


class ReLU6(Hardtanh):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__(0.0, 6.0, inplace)


class LeakyReLU(Module):
    def __init__(self, negative_slope: float = 0.01, inplace: bool = False) -> None:
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace

    def forward(self, x: Tensor) -> Tensor:
        return F.leaky_relu(x, self.negative_slope)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}"


class Softplus(Module):
    def __init__(self, beta: float = 1.0, threshold: float = 20.0) -> None:
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, x: Tensor) -> Tensor:
        return F.softplus(x, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class _Pointwise(Module):
    """An activation without parameters: forward is the function of anneal.nn.functional named by FN."""

    FN = ""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, x: Tensor) -> Tensor:
        return getattr(F, self.FN)(x)


class Mish(_Pointwise):
    FN = "mish"


class Hardsigmoid(_Pointwise):
    FN = "hardsigmoid"


class Hardswish(_Pointwise):
    FN = "hardswish"


class Softsign(_Pointwise):
    FN = "softsign"


class LogSigmoid(_Pointwise):
    FN = "logsigmoid"


class _AlongDim(Module):
    """softmax, log_softmax and softmin along dim (None: torch's legacy choice for the input's rank)."""

    FN = ""

    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return getattr(F, self.FN)(x, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Softmax(_AlongDim):
    FN = "softmax"


class LogSoftmax(_AlongDim):
    FN = "log_softmax"


class Softmin(_AlongDim):
    FN = "softmin"


class GroupNorm(Module):
    """torch.nn.GroupNorm: weight ones and bias zeros per channel (affine)."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True,
                 device: str | None = None, dtype: DType | str | None = None) -> None:  # fmt: skip
        super().__init__()
        if num_channels % num_groups:
            raise ValueError(f"GroupNorm: num_channels {num_channels} must be divisible by num_groups {num_groups}")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        dt = _float_dtype(dtype)
        self.weight = _param(Tensor.ones(num_channels, dtype=dt, device=device)) if affine else None
        self.bias = _param(Tensor.zeros(num_channels, dtype=dt, device=device)) if affine else None

    def forward(self, x: Tensor) -> Tensor:
        return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"


class Identity(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x


class Flatten(Module):
    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(self.start_dim, self.end_dim)


class MaxPool2d(Module):
    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
                 ceil_mode: bool = False) -> None:  # fmt: skip
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.dilation, self.ceil_mode = dilation, ceil_mode

    def forward(self, x: Tensor) -> Tensor:
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)


class AvgPool2d(Module):
    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True) -> None:  # fmt: skip
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def forward(self, x: Tensor) -> Tensor:
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad)


class Sequential(Module):
    """Modules applied in order; named 0, 1, ... (or by the keys of an OrderedDict), as torch."""

    def __init__(self, *modules: Any) -> None:
        super().__init__()
        items = list(modules[0].items()) if len(modules) == 1 and isinstance(modules[0], OrderedDict) \
            else [(str(i), m) for i, m in enumerate(modules)]  # fmt: skip
        for name, m in items:
            if not isinstance(m, Module):
                raise TypeError(f"Sequential: {name} is a {type(m).__name__}, not a Module")
            setattr(self, name, m)  # attribute order is the call order (and torch's state_dict order)

    def _layers(self) -> list[Module]:
        return [m for _, m in self.named_children()]

    def forward(self, x: Any) -> Any:
        for m in self._layers():
            x = m(x)
        return x

    def __getitem__(self, i: int) -> Module:
        return self._layers()[i]

    def __len__(self) -> int:
        return len(self._layers())

    def __iter__(self) -> Iterator[Module]:
        return iter(self._layers())

    def append(self, m: Module) -> Sequential:
        setattr(self, str(len(self)), m)
        return self


class ModuleList(Module):
    """A list of modules, registered as children named 0, 1, ... (torch's state_dict names: layers.0.weight)."""

    def __init__(self, modules: Iterable[Module] | None = None) -> None:
        super().__init__()
        for m in modules or ():
            self.append(m)

    def _items(self) -> list[Module]:
        return [m for _, m in self.named_children()]

    def append(self, m: Module) -> ModuleList:
        if not isinstance(m, Module):
            raise TypeError(f"ModuleList: {type(m).__name__} is not a Module")
        setattr(self, str(len(self)), m)
        return self

    def extend(self, modules: Iterable[Module]) -> ModuleList:
        for m in modules:
            self.append(m)
        return self

    def _renumber(self, items: list[Module]) -> None:
        """Children named 0, 1, ... again after an insert or a delete (torch's names follow positions)."""
        for k in range(len(self)):
            delattr(self, str(k))
        for m in items:
            self.append(m)

    def insert(self, index: int, m: Module) -> None:
        items = self._items()
        items.insert(index, m)
        self._renumber(items)

    def pop(self, index: int = -1) -> Module:
        items = self._items()
        m = items.pop(index)
        self._renumber(items)
        return m

    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return ModuleList(self._items()[i])
        return self._items()[i]

    def __setitem__(self, i: int, m: Module) -> None:
        if not isinstance(m, Module):
            raise TypeError(f"ModuleList: {type(m).__name__} is not a Module")
        items = self._items()
        items[i] = m
        self._renumber(items)

    def __delitem__(self, i: int | slice) -> None:
        items = self._items()
        del items[i]
        self._renumber(items)

    def __add__(self, other: Iterable[Module]) -> ModuleList:
        return ModuleList([*self, *other])

    def __iadd__(self, other: Iterable[Module]) -> ModuleList:
        return self.extend(other)

    def __len__(self) -> int:
        return len(self._items())

    def __iter__(self) -> Iterator[Module]:
        return iter(self._items())

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("ModuleList is a container: call its modules, not the list")


class _NamedMembers(Module):
    """A dict of members registered under their keys, in insertion order (ModuleDict, ParameterDict): what a member
    is and how it is registered is the subclass's."""

    _what = "member"

    def _entries(self) -> list[tuple[str, Any]]:
        raise NotImplementedError

    def _register(self, key: str, value: Any) -> None:
        raise NotImplementedError

    def __setitem__(self, key: str, value: Any) -> None:
        if not key.isidentifier() or key.startswith("_"):
            raise KeyError(f"{type(self).__name__}: {key!r} must be an identifier not starting with '_' (it names "
                           "parameters)")  # fmt: skip
        self._register(key, value)

    def __getitem__(self, key: str) -> Any:
        found = dict(self._entries())
        if key not in found:
            raise KeyError(key)
        return found[key]

    def __contains__(self, key: object) -> bool:
        return key in dict(self._entries())

    def __len__(self) -> int:
        return len(self._entries())

    def __iter__(self) -> Iterator[str]:
        return iter(dict(self._entries()))

    def keys(self) -> list[str]:
        return list(self)

    def values(self) -> list[Any]:
        return [v for _, v in self._entries()]

    def items(self) -> list[tuple[str, Any]]:
        return self._entries()

    def update(self, values: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> None:
        for k, v in values.items() if isinstance(values, Mapping) else values:
            self[k] = v

    def pop(self, key: str) -> Any:
        v = self[key]
        delattr(self, key)
        return v

    def __delitem__(self, key: str) -> None:
        self.pop(key)

    def clear(self) -> None:
        for k in self.keys():
            delattr(self, k)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} is a container: use its {self._what}s, not the dict")


class ModuleDict(_NamedMembers):
    """Modules by name, registered as children under their keys, in insertion order."""

    _what = "module"

    def __init__(self, modules: Mapping[str, Module] | None = None) -> None:
        super().__init__()
        for k, m in (modules or {}).items():
            self[k] = m

    def _entries(self) -> list[tuple[str, Any]]:
        return list(self.named_children())

    def _register(self, key: str, m: Any) -> None:
        if not isinstance(m, Module):
            raise TypeError(f"ModuleDict: {key!r} is a {type(m).__name__}, not a Module")
        setattr(self, key, m)


def Parameter(data: Tensor | None = None, requires_grad: bool = True) -> Tensor:  # noqa: N802 - torch's name
    """torch.nn.Parameter: the tensor itself, made trainable. Every tensor a Module holds is one of its parameters
    (buffers are registered apart), so no wrapper class is needed."""
    t = data if data is not None else Tensor(np.zeros((0,), np.float32))
    return t.requires_grad_(True) if requires_grad else t


class ParameterList(Module):
    """Tensors registered as parameters named 0, 1, ... (torch's state_dict names: scales.0)."""

    def __init__(self, values: Iterable[Tensor] | None = None) -> None:
        super().__init__()
        for v in values or ():
            self.append(v)

    def _items(self) -> list[Tensor]:
        return [t for _, t in self._members() if isinstance(t, Tensor)]

    def append(self, value: Tensor) -> ParameterList:
        if not isinstance(value, Tensor):
            raise TypeError(f"ParameterList: {type(value).__name__} is not a Tensor")
        setattr(self, str(len(self)), Parameter(value) if not value.requires_grad else value)
        return self

    def extend(self, values: Iterable[Tensor]) -> ParameterList:
        for v in values:
            self.append(v)
        return self

    def __getitem__(self, i: int) -> Tensor:
        return self._items()[i]

    def __setitem__(self, i: int, value: Tensor) -> None:
        setattr(self, str(range(len(self))[i]), value)

    def __len__(self) -> int:
        return len(self._items())

    def __iter__(self) -> Iterator[Tensor]:
        return iter(self._items())

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("ParameterList is a container: use its tensors, not the list")


class ParameterDict(_NamedMembers):
    """Tensors by name, registered as parameters under their keys, in insertion order."""

    _what = "tensor"

    def __init__(self, values: Mapping[str, Tensor] | None = None) -> None:
        super().__init__()
        for k, v in (values or {}).items():
            self[k] = v

    def _entries(self) -> list[tuple[str, Any]]:
        return [(n, t) for n, t in self._members() if isinstance(t, Tensor)]

    def _register(self, key: str, value: Any) -> None:
        if not isinstance(value, Tensor):
            raise TypeError(f"ParameterDict: {key!r} is a {type(value).__name__}, not a Tensor")
        setattr(self, key, Parameter(value) if not value.requires_grad else value)


class AvgPool3d(Module):
    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override: int | None = None) -> None:  # fmt: skip
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad, self.divisor_override = ceil_mode, count_include_pad, divisor_override

    def forward(self, x: Tensor) -> Tensor:
        return F.avg_pool3d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad,
                            self.divisor_override)  # fmt: skip


class MaxUnpool2d(Module):
    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0) -> None:
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x: Tensor, indices: Tensor, output_size: Any = None) -> Tensor:
        return F.max_unpool2d(x, indices, self.kernel_size, self.stride, self.padding, output_size)


class Upsample(Module):
    """torch.nn.Upsample: F.interpolate with the arguments fixed at construction."""

    def __init__(self, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
                 align_corners: bool | None = None, recompute_scale_factor: bool | None = None) -> None:  # fmt: skip
        super().__init__()
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners, self.recompute_scale_factor = align_corners, recompute_scale_factor

    def forward(self, x: Tensor) -> Tensor:
        return F.interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners,
                             self.recompute_scale_factor)  # fmt: skip

    def extra_repr(self) -> str:
        shown = f"scale_factor={self.scale_factor}" if self.scale_factor is not None else f"size={self.size}"
        return f"{shown}, mode={self.mode!r}"

"""Tensor: a lazy n-d array with PyTorch's names and semantics, built on UOps.

Every op builds graph; nothing runs until a value is needed (numpy(), item(), realize()).
Composite ops are written in terms of the primitives, so the compiler sees (and fuses)
everything; numpy is used only to bring data in and out.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np

from anneal import bounds, grad_mode, indexing, order, printing, shape_ops, special
from anneal import random as _random
from anneal.composite import with_gradient
from anneal.errors import DTypeError, EmptyReduction, ShapeError
from anneal.realize import as_buffer, buffer_view, plain_view, realize_all, wait_for_writes, waits_for_writes
from anneal.registry import resolve_device
from anneal_ir import DType, Ops, UOp, dtypes, promote_types
from anneal_ir.dtype import result_type_with_scalar, scalar_dtype
from anneal_ir.sint import bound_values, render_shape, resolve_shape, sdiv, sint, smul, sprod
from anneal_schedule.buffer import Buffer

Scalar = int | float | bool
# a size is an int, or a symbolic size over Variables (anneal_ir.sint) where one is in play; typed Any so
# code written for int sizes type-checks, as torch's SymInt passes for an int
Shape = tuple[Any, ...]


def _shape_arg(shape: Any) -> tuple[Any, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(shape[0])
    return tuple(shape)


def _unbind(shape: tuple[Any, ...]) -> tuple[Shape, tuple[UOp, ...]]:
    """Sizes with each bound Variable (``var.bind(n)``) replaced by the Variable, and the BINDs."""
    binds = tuple(d for d in shape if isinstance(d, UOp) and d.op is Ops.BIND)
    sizes = tuple(d.src[0] if isinstance(d, UOp) and d.op is Ops.BIND else d for d in shape)
    return tuple(d if isinstance(d, UOp) else int(d) for d in sizes), binds


def _norm_dim(dim: int, ndim: int, op: str = "dim") -> int:
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"{op}: dimension {dim} out of range for a tensor of {ndim} dims (expected [{-n}, {n - 1}])")
    return dim % n


def broadcast_shape(*shapes: Shape, op: str = "broadcast") -> Shape:
    ndim = max(len(s) for s in shapes)
    padded = [(1,) * (ndim - len(s)) + tuple(s) for s in shapes]
    out = []
    for dims in zip(*padded):
        sizes = {d for d in dims if d != 1}
        if len(sizes) > 1:
            raise ShapeError(
                f"{op}: shapes {' and '.join(render_shape(tuple(s)) for s in shapes)} cannot be broadcast together"
            )
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


# ops defined on integers only (bool too, except shifts), by torch's kernel name
_INTEGER_OPS: dict[Ops, tuple[str, bool]] = {
    Ops.AND: ("bitwise_and", True), Ops.OR: ("bitwise_or", True), Ops.XOR: ("bitwise_xor", True),
    Ops.SHL: ("lshift", False), Ops.SHR: ("rshift", False),
}  # fmt: skip


class ValuesIndices(NamedTuple):
    """What torch's max/min (with a dim), sort, topk, cummax and cummin return: (values, indices)."""

    values: Tensor
    indices: Tensor


class Tensor:
    __slots__ = ("uop", "device", "_requires_grad", "grad", "__weakref__")
    __array_priority__ = 1000  # make numpy defer to our reflected operators

    def __init__(self, data: Any, dtype: DType | str | None = None, device: str | None = None,
                 requires_grad: bool = False):  # fmt: skip
        dev = resolve_device(device or "auto")[0]
        if isinstance(data, UOp):
            self.uop = data if dtype is None else data.cast(dtypes.from_any(dtype))
        elif isinstance(data, Tensor):
            self.uop = data.uop if dtype is None else data.uop.cast(dtypes.from_any(dtype))
            dev = data.device if device is None else dev
        else:
            arr, dt = _to_numpy(data, None if dtype is None else dtypes.from_any(dtype))
            buf = Buffer(dev, _backend(dev), arr.size, dt).copy_in(_to_storage(arr, dt))
            self.uop = buffer_view(buf, arr.shape)
        self.device: str = dev
        self._requires_grad = False
        self.grad: Tensor | None = None
        self.requires_grad = requires_grad

    # ---- construction helpers ----
    @staticmethod
    def _from(uop: UOp, device: str, requires_grad: bool = False) -> Tensor:
        t = Tensor.__new__(Tensor)
        t.uop, t.device, t._requires_grad, t.grad = uop, device, False, None
        if requires_grad:
            t.requires_grad = True
        return t

    def _new(self, uop: UOp, *others: Tensor, device: str | None = None) -> Tensor:
        """A result of an op on self (and others): requires grad if any input does, as torch. Such a result
        reads trainable state, so it is computed before an in-place update overwrites what it reads; so is
        anything derived from such a value or from a gradient."""
        t = Tensor._from(uop, device or self.device)
        if self._requires_grad or any(o._requires_grad for o in others):
            if grad_mode.is_grad_enabled():
                t._requires_grad = True
            else:  # no_grad: no history, and none a later backward could reach through
                t.uop = UOp(Ops.DETACH, uop.dtype, (uop,))
            wait_for_writes(t)
        elif waits_for_writes(self) or any(waits_for_writes(o) for o in others):
            wait_for_writes(t)  # derived from a gradient: computed before the update too
        return t

    # ---- autodiff ----
    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        from anneal import autograd

        if value and not self.dtype.is_float:
            raise RuntimeError(f"only floating point tensors can require gradients, got {self.dtype.name}")
        if value and not self._requires_grad:
            if as_buffer(self.uop) is None:  # a leaf needs its own node: lazy constants are shared
                self.uop = Tensor(self.numpy(), self.dtype, self.device).uop
            self.uop = plain_view(self.uop)  # a leaf has no history
            autograd.track_leaf(self)
        elif not value:
            autograd.untrack_leaf(self)
        self._requires_grad = bool(value)

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        self.requires_grad = requires_grad
        return self

    def backward(self, gradient: Tensor | None = None) -> None:
        from anneal import autograd

        autograd.backward(self, gradient)

    def gradient(self, *targets: Tensor, gradient: Tensor | None = None) -> list[Tensor]:
        from anneal import autograd

        return autograd.gradient(self, targets, gradient)

    @staticmethod
    def full(shape: Any, fill_value: Scalar, dtype: DType | str | None = None, device: str | None = None,
             requires_grad: bool = False) -> Tensor:  # fmt: skip
        shape = _shape_arg(shape) if isinstance(shape, (tuple, list)) else (shape,)
        negative = [d for d in shape if isinstance(d, builtins.int) and d < 0]
        if negative:
            raise RuntimeError(f"Trying to create tensor with negative dimension {negative[0]}: {list(shape)}")
        dt = dtypes.from_any(dtype) if dtype is not None else scalar_dtype(fill_value)
        dev = resolve_device(device or "auto")[0]
        u = UOp.const(dt, fill_value)
        if shape:
            sizes, binds = _unbind(shape)
            u = UOp(Ops.RESHAPE, dt, (u,), (1,) * len(shape))
            u = UOp(Ops.EXPAND, dt, (u, *binds), sizes)
        return Tensor._from(u, dev, requires_grad)

    @staticmethod
    def zeros(*shape: Any, dtype: DType | str | None = None, device: str | None = None,
              requires_grad: bool = False) -> Tensor:  # fmt: skip
        return Tensor.full(_shape_arg(shape), 0.0, dtype or dtypes.default_float, device, requires_grad)

    @staticmethod
    def ones(*shape: Any, dtype: DType | str | None = None, device: str | None = None,
             requires_grad: bool = False) -> Tensor:  # fmt: skip
        return Tensor.full(_shape_arg(shape), 1.0, dtype or dtypes.default_float, device, requires_grad)

    @staticmethod
    def arange(start: Scalar, end: Scalar | None = None, step: Scalar = 1, dtype: DType | str | None = None,
               device: str | None = None) -> Tensor:  # fmt: skip
        if end is None:
            start, end = 0, start
        n = max(0, math.ceil((end - start) / step))
        dt = (
            dtypes.from_any(dtype)
            if dtype is not None
            else (dtypes.default_float if any(isinstance(v, float) for v in (start, end, step)) else dtypes.default_int)
        )
        dev = resolve_device(device or "auto")[0]
        iota = Tensor._from(UOp(Ops.IOTA, dtypes.int64, (), n), dev)
        return (iota.cast(dt) * step + start).cast(dt) if (step, start) != (1, 0) else iota.cast(dt)

    @staticmethod
    def eye(n: int, m: int | None = None, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        m = n if m is None else m
        r = Tensor.arange(n, device=device).reshape(n, 1)
        c = Tensor.arange(m, device=device).reshape(1, m)
        return (r == c).cast(dtypes.from_any(dtype) if dtype else dtypes.default_float)

    @staticmethod
    def rand(*shape: Any, dtype: DType | str | None = None, device: str | None = None,
             requires_grad: bool = False) -> Tensor:  # fmt: skip
        """Uniform [0, 1), drawn on the device (anneal.random): fresh on every jit replay."""
        dev = resolve_device(device or "auto")[0]
        out = _random.uniform(_shape_arg(shape), dev).cast(dtype or dtypes.default_float)
        return out.requires_grad_() if requires_grad else out

    @staticmethod
    def randn(*shape: Any, dtype: DType | str | None = None, device: str | None = None,
              requires_grad: bool = False) -> Tensor:  # fmt: skip
        """Standard normal, drawn on the device (anneal.random)."""
        dev = resolve_device(device or "auto")[0]
        out = _random.normal(_shape_arg(shape), dev).cast(dtype or dtypes.default_float)
        return out.requires_grad_() if requires_grad else out

    @staticmethod
    def uniform(*shape: Any, low: float = 0.0, high: float = 1.0, dtype: DType | str | None = None,
                device: str | None = None, requires_grad: bool = False) -> Tensor:  # fmt: skip
        dev = resolve_device(device or "auto")[0]
        out = (_random.uniform(_shape_arg(shape), dev) * (high - low) + low).cast(dtype or dtypes.default_float)
        return out.requires_grad_() if requires_grad else out

    @staticmethod
    def randint(low: int, high: Any = None, size: Any = (), dtype: DType | str | None = None,
                device: str | None = None) -> Tensor:  # fmt: skip
        """Integers in [low, high) (torch's randint(low, high, size), or randint(high, size)), on the device."""
        if high is None or isinstance(high, (tuple, list)):
            low, high, size = 0, low, size if high is None else high
        dev = resolve_device(device or "auto")[0]
        shape = _shape_arg(size) if isinstance(size, (tuple, list)) else (size,)
        return _random.integers(int(low), int(high), shape, dev).cast(dtype or dtypes.int64)

    def rand_like(self, dtype: DType | str | None = None) -> Tensor:
        return Tensor.rand(*self.shape, dtype=dtype or self.dtype, device=self.device)

    def randn_like(self, dtype: DType | str | None = None) -> Tensor:
        return Tensor.randn(*self.shape, dtype=dtype or self.dtype, device=self.device)

    def zeros_like(self, dtype: DType | str | None = None) -> Tensor:
        return Tensor.full(self.shape, 0, dtype or self.dtype, self.device)

    def ones_like(self, dtype: DType | str | None = None) -> Tensor:
        return Tensor.full(self.shape, 1, dtype or self.dtype, self.device)

    def full_like(self, fill_value: Scalar, dtype: DType | str | None = None) -> Tensor:
        return Tensor.full(self.shape, fill_value, dtype or self.dtype, self.device)

    # ---- properties and data out ----
    @property
    def shape(self) -> Shape:
        s = self.uop.shape
        assert s is not None
        return s

    @property
    def dtype(self) -> DType:
        return self.uop.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def dim(self) -> int:
        return self.ndim

    def numel(self) -> Any:
        return sprod(self.shape)

    def size(self, dim: int | None = None) -> Any:
        return self.shape if dim is None else self.shape[_norm_dim(dim, self.ndim)]

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        """As torch's: the values (computed now, as printing a torch tensor is), and the device, a dtype other
        than the defaults, requires_grad. A tensor of symbolic shape has no values until a call binds it."""
        if not all(isinstance(d, builtins.int) for d in self.shape):
            grad = " requires_grad" if self.requires_grad else ""
            return f"<Tensor {render_shape(self.shape)} {self.dtype.name} on {self.device}{grad}>"
        values = self.numpy()
        prefix = "tensor("
        suffixes = [f"device='{self.device}'"] if self.device != "cpu" else []
        if values.size == 0:  # torch: the size unless (0,), and the dtype unless the default float
            suffixes += [f"size={tuple(self.shape)}"] if self.ndim != 1 else []
            suffixes += [f"dtype=anneal.{self.dtype.name}"] if self.dtype != dtypes.float32 else []
        elif self.dtype not in (dtypes.float32, dtypes.int64, dtypes.bool):
            suffixes.append(f"dtype=anneal.{self.dtype.name}")
        if self.requires_grad:  # torch names a non-leaf's grad_fn; anneal has no function objects to name
            suffixes.append("requires_grad=True")
        body = printing.values_str(values, self.dtype.is_float, len(prefix))
        return printing.with_suffixes(prefix + body, suffixes, len(prefix))

    def realize(self) -> Tensor:
        """Compute the value now. Autograd still sees how it was computed: backward() after a read works."""
        realize_all([self])
        return self

    def numpy(self) -> np.ndarray:
        self.realize()
        buf = as_buffer(self.uop)
        assert buf is not None
        shape = resolve_shape(self.shape, bound_values(self.uop))  # a symbolic view reads a prefix
        (flat,) = bounds.read_checked(self.device, [buf])  # a host read: where index checks made on the device report
        return _from_storage(flat[: math.prod(shape)], self.dtype).reshape(shape)

    def item(self) -> Any:
        if self.numel() != 1:
            raise ShapeError(f"item(): a tensor with {self.numel()} elements cannot be converted to a Python scalar")
        return self.numpy().reshape(()).item()

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def __bool__(self) -> bool:
        return bool(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def to(self, *args: Any, **kwargs: Any) -> Tensor:
        """to(device), to(dtype) or to(device, dtype), as torch."""
        device, dtype = kwargs.get("device"), kwargs.get("dtype")
        for a in args:
            if isinstance(a, DType):
                dtype = a
            elif isinstance(a, str) and a in dtypes.__dict__:
                dtype = dtypes.from_any(a)
            else:
                device = a
        out = self if dtype is None else self.cast(dtype)
        if device is not None:
            dev = resolve_device(device)[0]
            if dev != out.device:  # lazy and differentiable: the gradient is copied back
                return out._new(UOp(Ops.COPY, out.dtype, (out.uop,), (out.device, dev)), device=dev)
        return out

    def cpu(self) -> Tensor:
        return self.to("cpu")

    def assign(self, value: Any) -> Tensor:
        """Write value into this tensor's memory (lazily; in place when realized), as optimizers need."""
        x = value if isinstance(value, Tensor) else Tensor.full(self.shape, value, self.dtype, self.device)
        if x.shape != self.shape:
            x = x._broadcast_to(broadcast_shape(self.shape, x.shape, op="assign"))
            if x.shape != self.shape:
                raise ShapeError(f"assign: value of shape {value.shape} does not fit a tensor of shape {self.shape}")
        x = x.cast(self.dtype)
        if x.device != self.device:
            raise RuntimeError(f"assign: the value is on {x.device}, the tensor on {self.device}; move it with .to()")
        if self.uop.op is Ops.ASSIGN:  # a second write before realizing: into the same buffer, after the first
            self.uop = UOp(Ops.ASSIGN, self.dtype, (self.uop.src[0], x.uop))
        elif as_buffer(self.uop) is None:  # nothing realized to write into: just take the new value
            self.uop = x.uop
            return self
        else:
            self.uop = UOp(Ops.ASSIGN, self.dtype, (plain_view(self.uop), x.uop))
        wait_for_writes(self)  # a pending write: computed before anything overwrites what it reads
        return self

    def detach(self) -> Tensor:
        t = Tensor._from(UOp(Ops.DETACH, self.dtype, (self.uop,)), self.device)
        if self._requires_grad or waits_for_writes(self):
            wait_for_writes(t)  # no gradient, but still a value of the parameters as they are now
        return t

    def contiguous(self) -> Tensor:
        return self._new(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,)))

    def clone(self) -> Tensor:
        return self.contiguous()

    def cast(self, dtype: DType | str) -> Tensor:
        return self._new(self.uop.cast(dtypes.from_any(dtype)))

    def type(self, dtype: DType | str) -> Tensor:
        return self.cast(dtype)

    def float(self) -> Tensor:
        return self.cast(dtypes.float32)

    def half(self) -> Tensor:
        return self.cast(dtypes.float16)

    def double(self) -> Tensor:
        return self.cast(dtypes.float64)

    def int(self) -> Tensor:
        return self.cast(dtypes.int32)

    def long(self) -> Tensor:
        return self.cast(dtypes.int64)

    def bool(self) -> Tensor:
        return self.cast(dtypes.bool)

    def bitcast(self, dtype: DType | str) -> Tensor:
        dt = dtypes.from_any(dtype)
        if dt.itemsize != self.dtype.itemsize:
            raise TypeError(f"bitcast: {self.dtype.name} and {dt.name} differ in size")
        return self._new(UOp(Ops.BITCAST, dt, (self.uop,)))

    # ---- elementwise core ----
    def _operands(self, other: Any, op: str, reverse: builtins.bool = False) -> tuple[Tensor, Tensor]:
        if isinstance(other, Tensor):
            if other.device != self.device:
                raise RuntimeError(f"{op}: tensors are on different devices ({self.device} and {other.device});"
                                   " move one with .to(device)")  # fmt: skip
            dt = promote_types(self.dtype, other.dtype)
            a, b = self.cast(dt), other.cast(dt)
        else:
            if isinstance(other, np.ndarray):
                return self._operands(Tensor(other, device=self.device), op, reverse)
            dt = result_type_with_scalar(self.dtype, other)
            a = self.cast(dt)
            b = Tensor.full((), _wrapped(other, dt), dt, self.device)
        shape = broadcast_shape(a.shape, b.shape, op=op)
        a, b = a._broadcast_to(shape), b._broadcast_to(shape)
        return (b, a) if reverse else (a, b)

    def _broadcast_to(self, shape: Shape) -> Tensor:
        if self.shape == shape:
            return self
        x = self.reshape((1,) * (len(shape) - self.ndim) + self.shape) if self.ndim < len(shape) else self
        return x.expand(shape)

    def _alu(self, op: Ops, *others: Tensor) -> Tensor:
        return self._new(self.uop.alu(op, *(o.uop for o in others)), *others)

    def _binary(self, op: Ops, other: Any, name: str, reverse: builtins.bool = False) -> Tensor:
        a, b = self._operands(other, name, reverse)
        if op in _INTEGER_OPS:
            _check_integer_op(op, a.dtype)
        return a._alu(op, b)

    def _float(self) -> Tensor:
        return self if self.dtype.is_float else self.cast(dtypes.default_float)

    def add(self, other: Any, alpha: Scalar = 1) -> Tensor:
        return self._binary(Ops.ADD, other if alpha == 1 else other * alpha, "add")

    def sub(self, other: Any) -> Tensor:
        a, b = self._operands(other, "sub")
        return a._alu(Ops.ADD, -b)

    def mul(self, other: Any) -> Tensor:
        return self._binary(Ops.MUL, other, "mul")

    def div(self, other: Any, rounding_mode: str | None = None) -> Tensor:
        if rounding_mode not in (None, "trunc", "floor"):
            raise RuntimeError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
                               f"{rounding_mode!r}")  # fmt: skip
        a, b = self._operands(other, "div")
        if rounding_mode == "floor":
            return a._floordiv(b)
        if rounding_mode == "trunc":
            return a._alu(Ops.IDIV, b) if a.dtype.is_int else (a._float() / b._float()).trunc()
        a, b = a._float(), b._float()
        return a._alu(Ops.MUL, b._alu(Ops.RECIPROCAL))

    def _floordiv(self, b: Tensor) -> Tensor:
        if self.dtype.is_float:
            return (self / b).floor()
        q = self._alu(Ops.IDIV, b)
        fix = (self._alu(Ops.MOD, b) != 0) & ((self < 0) != (b < 0))
        return q - fix.cast(q.dtype)

    def __add__(self, o: Any) -> Tensor:
        return self.add(o)

    def __radd__(self, o: Any) -> Tensor:
        return self._binary(Ops.ADD, o, "add", reverse=True)

    def __sub__(self, o: Any) -> Tensor:
        return self.sub(o)

    def __rsub__(self, o: Any) -> Tensor:
        a, b = self._operands(o, "sub", reverse=True)
        return a._alu(Ops.ADD, -b)

    def __mul__(self, o: Any) -> Tensor:
        return self.mul(o)

    def __rmul__(self, o: Any) -> Tensor:
        return self._binary(Ops.MUL, o, "mul", reverse=True)

    def __truediv__(self, o: Any) -> Tensor:
        return self.div(o)

    def __rtruediv__(self, o: Any) -> Tensor:
        a, b = self._operands(o, "div", reverse=True)
        return a.div(b)

    def __floordiv__(self, o: Any) -> Tensor:
        return self.div(o, rounding_mode="floor")

    def __rfloordiv__(self, o: Any) -> Tensor:
        a, b = self._operands(o, "floordiv", reverse=True)
        return a._floordiv(b)

    def __mod__(self, o: Any) -> Tensor:
        a, b = self._operands(o, "remainder")
        if a.dtype.is_float and a.dtype.itemsize < 4:  # a - floor(a/b) b cancels to nothing in 16 bits
            return (a.cast(dtypes.float32) % b.cast(dtypes.float32)).cast(a.dtype)
        return a - a._floordiv(b) * b

    def __pow__(self, o: Any) -> Tensor:
        return self.pow(o)

    def __rpow__(self, o: Any) -> Tensor:
        a, b = self._operands(o, "pow", reverse=True)
        return a.pow(b)

    def __neg__(self) -> Tensor:
        return self.neg()

    def __matmul__(self, o: Tensor) -> Tensor:
        return self.matmul(o)

    def __rmatmul__(self, o: Tensor) -> Tensor:
        return o.matmul(self)

    def __lt__(self, o: Any) -> Tensor:
        return self._binary(Ops.CMPLT, o, "lt")

    def __gt__(self, o: Any) -> Tensor:
        return self._binary(Ops.CMPLT, o, "gt", reverse=True)

    def __le__(self, o: Any) -> Tensor:
        return self._or_equal(o, self < o) if self._compares_nan(o) else (self > o).logical_not()

    def __ge__(self, o: Any) -> Tensor:
        return self._or_equal(o, self > o) if self._compares_nan(o) else (self < o).logical_not()

    def _compares_nan(self, o: Any) -> builtins.bool:
        """Whether a NaN can take part: then a <= b is (a < b) | (a == b), since not(a > b) holds for NaN."""
        return self.dtype.is_float or (isinstance(o, Tensor) and o.dtype.is_float) or isinstance(o, builtins.float)

    def _or_equal(self, o: Any, strict: Tensor) -> Tensor:
        return strict | (self == o)

    def __eq__(self, o: Any) -> Tensor:  # type: ignore[override]
        return self._binary(Ops.CMPEQ, o, "eq")

    def __ne__(self, o: Any) -> Tensor:  # type: ignore[override]
        return self._binary(Ops.CMPNE, o, "ne")

    __hash__ = object.__hash__

    def __and__(self, o: Any) -> Tensor:
        return self._binary(Ops.AND, o, "and")

    def __or__(self, o: Any) -> Tensor:
        return self._binary(Ops.OR, o, "or")

    def __xor__(self, o: Any) -> Tensor:
        return self._binary(Ops.XOR, o, "xor")

    def __rand__(self, o: Any) -> Tensor:
        return self._binary(Ops.AND, o, "and", reverse=True)

    def __ror__(self, o: Any) -> Tensor:
        return self._binary(Ops.OR, o, "or", reverse=True)

    def __rxor__(self, o: Any) -> Tensor:
        return self._binary(Ops.XOR, o, "xor", reverse=True)

    def __rmod__(self, o: Any) -> Tensor:
        a, b = self._operands(o, "remainder", reverse=True)
        return a % b

    def __lshift__(self, o: Any) -> Tensor:
        """A shift by the bit width or more gives 0 (>>: the sign), as torch's; bool promotes with an int."""
        return self._binary(Ops.SHL, o, "lshift")

    def __rshift__(self, o: Any) -> Tensor:
        return self._binary(Ops.SHR, o, "rshift")

    def __rlshift__(self, o: Any) -> Tensor:
        return self._binary(Ops.SHL, o, "lshift", reverse=True)

    def __rrshift__(self, o: Any) -> Tensor:
        return self._binary(Ops.SHR, o, "rshift", reverse=True)

    def __invert__(self) -> Tensor:
        if self.dtype.is_float:
            raise DTypeError(f"~ (bitwise_not) is only implemented on integer and bool tensors, got {self.dtype.name}")
        return self.logical_not() if self.dtype == dtypes.bool else self._binary(Ops.XOR, -1, "invert")

    def lt(self, o: Any) -> Tensor:
        return self < o

    def gt(self, o: Any) -> Tensor:
        return self > o

    def le(self, o: Any) -> Tensor:
        return self <= o

    def ge(self, o: Any) -> Tensor:
        return self >= o

    def eq(self, o: Any) -> Tensor:
        return self == o

    def ne(self, o: Any) -> Tensor:
        return self != o

    def logical_not(self) -> Tensor:
        return self.cast(dtypes.bool)._binary(Ops.CMPNE, True, "logical_not")

    def logical_and(self, o: Any) -> Tensor:
        return self.cast(dtypes.bool) & (o.cast(dtypes.bool) if isinstance(o, Tensor) else bool(o))

    def logical_or(self, o: Any) -> Tensor:
        return self.cast(dtypes.bool) | (o.cast(dtypes.bool) if isinstance(o, Tensor) else bool(o))

    # ---- unary math ----
    def neg(self) -> Tensor:
        return self._alu(Ops.NEG) if self.dtype != dtypes.bool else self.logical_not()

    def exp2(self) -> Tensor:
        return self._float()._alu(Ops.EXP2)

    def log2(self) -> Tensor:
        return self._float()._alu(Ops.LOG2)

    def exp(self) -> Tensor:
        return (self._float() * (1 / math.log(2))).exp2()

    def log(self) -> Tensor:
        return self.log2() * math.log(2)

    def sqrt(self) -> Tensor:
        return self._float()._alu(Ops.SQRT)

    def rsqrt(self) -> Tensor:
        return self.sqrt().reciprocal()

    def reciprocal(self) -> Tensor:
        return self._float()._alu(Ops.RECIPROCAL)

    def sin(self) -> Tensor:
        return self._float()._alu(Ops.SIN)

    def cos(self) -> Tensor:
        return (math.pi / 2 - self._float()).sin()

    def tan(self) -> Tensor:
        return self.sin() / self.cos()

    # inverse trigonometric and hyperbolic functions: anneal.special, each with its exact derivative
    def atan(self) -> Tensor:
        return special.atan(self)

    def asin(self) -> Tensor:
        return special.asin(self)

    def acos(self) -> Tensor:
        return special.acos(self)

    def sinh(self) -> Tensor:
        return special.sinh(self)

    def cosh(self) -> Tensor:
        return special.cosh(self)

    def asinh(self) -> Tensor:
        return special.asinh(self)

    def acosh(self) -> Tensor:
        return special.acosh(self)

    def atanh(self) -> Tensor:
        return special.atanh(self)

    def log1p(self) -> Tensor:
        return special.log1p(self)

    def expm1(self) -> Tensor:
        return special.expm1(self)

    def log10(self) -> Tensor:
        return self.log2() * math.log10(2)

    def logaddexp(self, o: Any) -> Tensor:
        a, b = self._operands(o, "logaddexp")
        return special.logaddexp(a._float(), b._float())

    def copysign(self, o: Any) -> Tensor:
        """|self| with the sign of o (including -0.0's), as torch.copysign: a float result."""
        a, b = self._operands(o, "copysign")
        return special.copysign(a._float(), b._float())

    def fmod(self, o: Any) -> Tensor:
        """C's remainder: the sign of the dividend (x % y takes the divisor's), as torch.fmod."""
        a, b = self._operands(o, "fmod")
        r = a % b
        r = where((r != 0) & ((r < 0) != (a < 0)), r - b, r)
        return where(b.isinf() & a.isfinite(), a, r) if r.dtype.is_float else r  # fmod(x, inf) is x

    def lerp(self, end: Any, weight: Any) -> Tensor:
        """self + weight * (end - self), computed from the nearer end as torch does (exact at weight 0 and 1)."""
        start, stop = self._operands(end, "lerp")
        w = weight if isinstance(weight, Tensor) else Tensor.full((), weight, start.dtype, start.device)
        return where(w < 0.5, start + w * (stop - start), stop - (stop - start) * (1 - w))

    # ---- classification of values ----
    def isnan(self) -> Tensor:
        if not self.dtype.is_float:
            return self != self  # never true for an integer
        # by the bits: GPU shader compilers may assume finite math and fold x != x to false
        exponent, magnitude = self._float_bits()
        return magnitude > exponent

    def isinf(self) -> Tensor:
        if not self.dtype.is_float:
            return self != self
        exponent, magnitude = self._float_bits()
        return magnitude == exponent

    def _float_bits(self) -> tuple[builtins.int, Tensor]:
        """(the all-ones exponent with a zero mantissa, |self|'s bits) as unsigned integers. A 16-bit float is
        widened to float32 first (exact, inf and NaN kept): backends store 16-bit integers in 32-bit words (WGSL
        has none), so a 16-bit bitcast is not one instruction there."""
        if self.dtype == dtypes.float64:
            return 0x7FF0000000000000, self.bitcast(dtypes.uint64) & 0x7FFFFFFFFFFFFFFF
        return 0x7F800000, self.cast(dtypes.float32).bitcast(dtypes.uint32) & 0x7FFFFFFF

    def isfinite(self) -> Tensor:
        if not self.dtype.is_float:
            return self == self
        return (self.isnan() | self.isinf()).logical_not()

    def isclose(
        self, other: Any, rtol: builtins.float = 1e-5, atol: builtins.float = 1e-8, equal_nan: builtins.bool = False
    ) -> Tensor:
        """|self - other| <= atol + rtol * |other|, infinities equal only to themselves, as torch.isclose."""
        a, b = self._operands(other, "isclose")
        if not a.dtype.is_float:
            return (a - b).abs() <= atol + rtol * b.abs() if atol or rtol else a == b
        nan = a.isnan() | b.isnan()  # tested by the bits: a == b may hold for NaN on a GPU (see isnan)
        close = (a == b) | (a.isfinite() & b.isfinite() & ((a - b).abs() <= atol + rtol * b.abs()))
        close = close & nan.logical_not()
        return close | (a.isnan() & b.isnan()) if equal_nan else close

    def bitwise_not(self) -> Tensor:
        return ~self

    def trunc(self) -> Tensor:
        return self._alu(Ops.TRUNC) if self.dtype.is_float else self

    def floor(self) -> Tensor:
        t = self.trunc()
        return t - (self < t).cast(self.dtype) if self.dtype.is_float else self

    def ceil(self) -> Tensor:
        t = self.trunc()
        return t + (self > t).cast(self.dtype) if self.dtype.is_float else self

    def round(self) -> Tensor:
        """Half to even, as torch.round."""
        f = self.floor()
        diff = self - f
        up = (diff > 0.5) | ((diff == 0.5) & ((f % 2) != 0))
        return f + up.cast(self.dtype)

    def abs(self) -> Tensor:
        return self._binary(Ops.MAX, -self, "abs") if self.dtype != dtypes.bool else self  # |NaN| is NaN anyway

    def sign(self) -> Tensor:
        return (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype)

    def square(self) -> Tensor:
        return self * self

    def sigmoid(self) -> Tensor:
        return special.sigmoid(self)

    def tanh(self) -> Tensor:
        return 2.0 * (2.0 * self._float()).sigmoid() - 1.0

    def relu(self) -> Tensor:
        return where(self > 0, self, 0)

    def leaky_relu(self, negative_slope: builtins.float = 0.01) -> Tensor:
        return where(self > 0, self, self * negative_slope)

    def silu(self) -> Tensor:
        return self * self.sigmoid()

    def erf(self) -> Tensor:
        return self._float()._alu(Ops.ERF)

    def gelu(self, approximate: str = "none") -> Tensor:
        x = self._float()
        if approximate == "tanh":
            return 0.5 * x * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).tanh())
        return 0.5 * x * (1 + (x * (1 / math.sqrt(2))).erf())

    def softplus(self, beta: builtins.float = 1.0, threshold: builtins.float = 20.0) -> Tensor:
        return special.softplus(self, beta, threshold)

    def maximum(self, o: Any) -> Tensor:
        """torch.maximum: a NaN on either side gives NaN (found by its bits: a GPU's max may drop it)."""
        out = self._binary(Ops.MAX, o, "maximum")
        return _nan_if_either(self, o, out)

    def minimum(self, o: Any) -> Tensor:
        return _nan_if_either(self, o, self._minimum(o))

    def _minimum(self, o: Any) -> Tensor:
        a, b = self._operands(o, "minimum")
        if a.dtype == dtypes.bool:
            return a & b
        if not a.dtype.is_float:  # ~x reverses the order without overflow (-x of int32's minimum wraps)
            return (~((~a)._alu(Ops.MAX, ~b))).cast(a.dtype)
        return -((-a)._alu(Ops.MAX, -b))

    def clip(self, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002 - torch's names
        """Selects, not maximum/minimum: at a bound the gradient is 1 (torch's), not a tie's half."""
        if not self.dtype.is_float:
            out = self if min is None else self.maximum(min)
            return out if max is None else out.minimum(max)
        out = self
        if min is not None:  # a NaN stays NaN, without a gradient (neither comparison holds), as torch
            out = where(out >= min, out, where(out < min, min, out.detach()))
        if max is not None:
            out = where(out <= max, out, where(out > max, max, out.detach()))
        return out

    clamp = clip

    def where(self, condition: Any, other: Any) -> Tensor:
        """torch's Tensor.where: self where condition holds, other elsewhere."""
        return where(condition, self, other)

    def pow(self, o: Any) -> Tensor:
        """torch.pow: dtypes as torch's (int ** int stays int and wraps, bool ** 2 is int64, int ** 2.0 a float);
        C's pow at the edges (0, -0.0, 1, -1, inf, NaN)."""
        if not isinstance(o, Tensor):
            x = self.cast(result_type_with_scalar(self.dtype, o))
            if not x.dtype.is_float and not isinstance(o, builtins.float):
                if o < 0:
                    raise RuntimeError("Integers to negative integer powers are not allowed.")
                return _int_power(x, builtins.int(o))
            if o == 2:
                return x * x
            if o == 1:
                return x * 1
            if o == 0.5:  # torch's sqrt and rsqrt: (-0.0) ** 0.5 is -0.0, (-inf) ** 0.5 NaN
                return x.sqrt()
            if o == 0:  # still a function of x (a zero gradient, as torch), not a constant
                return with_gradient(x.ones_like(), (x,), _zero_gradient)
            value = (
                x.rsqrt() if o == -0.5 else x._float_pow(Tensor.full((), o, x.dtype, x.device)._broadcast_to(x.shape))
            )
            return with_gradient(value, (x,), _scalar_pow_gradient, exponent=o)
        a, b = self._operands(o, "pow")
        if a.dtype == dtypes.bool:
            raise DTypeError("pow is not implemented for bool tensors (both operands bool)")
        if not a.dtype.is_float:
            return _int_tensor_power(a, b)
        return a._float_pow(b)

    def _float_pow(self, b: Tensor) -> Tensor:
        a = self._float()
        b = b.cast(a.dtype)
        # |a|^b as exp2(b log2|a|), with the cases that formula gets wrong by hand: a zero base (WGSL leaves
        # log2(0) undefined, lavapipe does not give -inf) and |a| = 1 (0 * inf is NaN, 1 ** inf is 1)
        mag = where(a == 0, where(b < 0, math.inf, 0.0), where(a.abs() == 1, 1.0, (b * a.abs().log2()).exp2()))
        negative = (a < 0) | ((a == 0) & (a.reciprocal() < 0))  # -0.0 too: (-0.0) ** -3 is -inf
        odd = (b.abs() % 2) == 1
        signed = where(odd, -mag, mag)
        # a finite negative base to a fractional power has no real value; -inf's and -0.0's do (inf or 0)
        fractional = where((a == 0) | a.isinf(), mag, math.nan)
        res = where(negative, where(b == b.trunc(), signed, fractional), mag)
        res = where(a.isnan() | b.isnan(), math.nan, res)  # by the bits: a GPU's exp2 may drop a NaN
        # differentiated as b a^(b-1) (exp2 and log2's derivatives would give 0 * inf = NaN at a = 0), as torch
        return with_gradient(where((b == 0) | (a == 1), 1.0, res), (a, b), _pow_gradient)

    # ---- movement ----
    def reshape(self, *shape: Any) -> Tensor:
        """As torch; a size may also be a Variable, or one bound for this call (``var.bind(n)``)."""
        asked = _shape_arg(shape)
        shape, binds = _unbind(asked)
        if any(isinstance(d, builtins.int) and d < -1 for d in shape):
            raise ShapeError(f"reshape: invalid shape dimension {min(shape)} in {render_shape(shape)}")
        if shape.count(-1) > 1:
            raise ShapeError(f"reshape: only one dimension can be -1, got {render_shape(shape)} "
                             f"for input of shape {render_shape(self.shape)}")  # fmt: skip
        known = sprod(d for d in shape if not (isinstance(d, int) and d == -1))
        if -1 in shape:
            missing = sdiv(self.numel(), known) if known != 0 else 0
            if known == 0 or smul(missing, known) != self.numel():
                raise ShapeError(f"reshape: shape {render_shape(shape)} is invalid for input of shape "
                                 f"{render_shape(self.shape)}")  # fmt: skip
            shape = tuple(missing if isinstance(d, int) and d == -1 else d for d in shape)
        if not self._same_numel(shape, binds):
            raise ShapeError(f"reshape: shape {render_shape(asked)} is invalid for input of shape "
                             f"{render_shape(self.shape)} ({_render_numel(self.numel())} elements)")  # fmt: skip
        if shape == self.shape:
            return self
        src = self.uop
        if binds and src.op is Ops.RESHAPE and as_buffer(src) is not None and not self.requires_grad:
            # data viewed anew: reshape the buffer itself, so a symbolic view's graph does not
            # depend on this call's size (one schedule for every batch)
            src, binds = src.src[0], tuple(dict.fromkeys(src.src[1:] + binds))
        return self._new(UOp(Ops.RESHAPE, self.dtype, (src, *binds), shape))

    def _same_numel(self, shape: Shape, binds: tuple[UOp, ...]) -> builtins.bool:
        """Equal sizes; a concrete tensor meets a symbolic shape through the values bound here."""
        new, old = sprod(shape), self.numel()
        if new == old:
            return True
        if isinstance(new, int) and isinstance(old, int):
            return False
        values = {b.src[0].arg[0]: b.src[1].arg for b in binds} | bound_values(self.uop)
        try:
            return resolve_shape((new,), values) == resolve_shape((old,), values)
        except ValueError:
            return False

    view = reshape

    def permute(self, *dims: Any) -> Tensor:
        dims = tuple(_norm_dim(d, self.ndim, "permute") for d in _shape_arg(dims))
        if sorted(dims) != list(range(self.ndim)):
            raise ShapeError(f"permute: {dims} is not a permutation of the {self.ndim} dims of shape {self.shape}")
        if dims == tuple(range(self.ndim)):
            return self
        return self._new(UOp(Ops.PERMUTE, self.dtype, (self.uop,), dims))

    def transpose(self, dim0: builtins.int = -2, dim1: builtins.int = -1) -> Tensor:
        order = list(range(self.ndim))
        a, b = _norm_dim(dim0, self.ndim, "transpose"), _norm_dim(dim1, self.ndim, "transpose")
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self) -> Tensor:  # noqa: N802 - torch's name
        return self.permute(tuple(reversed(range(self.ndim))))

    @property
    def mT(self) -> Tensor:  # noqa: N802 - torch's name
        return self.transpose(-2, -1)

    def expand(self, *sizes: Any) -> Tensor:
        sizes = _shape_arg(sizes)
        if len(sizes) < self.ndim:
            raise ShapeError(f"expand: {tuple(sizes)} has fewer dims than shape {self.shape}")
        lead = len(sizes) - self.ndim
        if any(isinstance(n, builtins.int) and (n < -1 or (n == -1 and i < lead)) for i, n in enumerate(sizes)):
            raise ShapeError(f"expand: invalid size in {tuple(sizes)} for shape {self.shape} (-1 keeps an existing "
                             "dim; no size is negative)")  # fmt: skip
        x = self.reshape((1,) * lead + self.shape) if lead > 0 else self
        new = tuple(s if n == -1 else n for s, n in zip(x.shape, sizes))
        for s, n in zip(x.shape, new):
            if s != n and s != 1:
                raise ShapeError(f"expand: shape {self.shape} cannot be expanded to {tuple(sizes)}")
        if new == x.shape:
            return x
        return x._new(UOp(Ops.EXPAND, self.dtype, (x.uop,), new))

    def expand_as(self, other: Tensor) -> Tensor:
        return self.expand(other.shape)

    def flip(self, *dims: Any) -> Tensor:
        named = [_norm_dim(d, self.ndim, "flip") for d in _shape_arg(dims)]
        repeated = sorted({d for d in named if named.count(d) > 1})
        if repeated:
            raise RuntimeError(f"flip: dim {repeated[0]} appears multiple times in the list of dims")
        axes = tuple(sorted(set(named)))
        axes = tuple(a for a in axes if self.shape[a] > 1)
        return self._new(UOp(Ops.FLIP, self.dtype, (self.uop,), axes)) if axes else self

    def _shrink(self, arg: Sequence[tuple[builtins.int, builtins.int]]) -> Tensor:
        arg = tuple((int(b), int(e)) for b, e in arg)
        if all(b == 0 and e == s for (b, e), s in zip(arg, self.shape)):
            return self
        return self._new(UOp(Ops.SHRINK, self.dtype, (self.uop,), arg))

    def _pad(self, arg: Sequence[tuple[builtins.int, builtins.int]]) -> Tensor:
        """Zero padding; negative amounts shrink."""
        arg = tuple((int(b), int(a)) for b, a in arg)
        for d, ((b, a), s) in enumerate(zip(arg, self.shape)):
            if isinstance(s, builtins.int) and s + b + a < 0:
                raise ShapeError(f"pad: padding ({b}, {a}) of dim {d} (size {s}) leaves a negative size {s + b + a}")
        x = self._shrink([(-min(b, 0), s + min(a, 0)) for (b, a), s in zip(arg, self.shape)])
        pos = tuple((max(b, 0), max(a, 0)) for b, a in arg)
        if all(b == 0 and a == 0 for b, a in pos):
            return x
        return x._new(UOp(Ops.PAD, x.dtype, (x.uop,), pos))

    def pad(self, pad: Sequence[builtins.int], value: Scalar = 0.0) -> Tensor:
        """torch.nn.functional.pad order: (last_before, last_after, second_last_before, ...)."""
        if len(pad) % 2 or len(pad) // 2 > self.ndim:
            raise ShapeError(f"pad: padding {tuple(pad)} must have an even length of at most 2*{self.ndim}")
        arg = [(0, 0)] * self.ndim
        for i in range(len(pad) // 2):
            arg[self.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
        out = self._pad(arg)
        if value != 0:
            mask = self.ones_like(dtypes.bool)._pad(arg)
            out = where(mask, out, value)
        return out

    def squeeze(self, dim: builtins.int | Sequence[builtins.int] | None = None) -> Tensor:
        if dim is None:
            return self.reshape(tuple(s for s in self.shape if s != 1))
        dims = {_norm_dim(d, self.ndim, "squeeze") for d in (dim if isinstance(dim, (tuple, list)) else (dim,))}
        return self.reshape(tuple(s for i, s in enumerate(self.shape) if not (i in dims and s == 1)))

    def unsqueeze(self, dim: builtins.int) -> Tensor:
        d = _norm_dim(dim, self.ndim + 1, "unsqueeze")
        return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

    def flatten(self, start_dim: builtins.int = 0, end_dim: builtins.int = -1) -> Tensor:
        if self.ndim == 0:
            return self.reshape(1)
        s, e = _norm_dim(start_dim, self.ndim, "flatten"), _norm_dim(end_dim, self.ndim, "flatten")
        return self.reshape(self.shape[:s] + (sprod(self.shape[s : e + 1]),) + self.shape[e + 1 :])

    def unflatten(self, dim: builtins.int, sizes: Sequence[builtins.int]) -> Tensor:
        d = _norm_dim(dim, self.ndim, "unflatten")
        return self.reshape(self.shape[:d] + tuple(sizes) + self.shape[d + 1 :])

    def repeat(self, *sizes: Any) -> Tensor:
        sizes = _shape_arg(sizes)
        if len(sizes) < self.ndim:
            raise ShapeError(f"repeat: {len(sizes)} repeat sizes for a tensor of {self.ndim} dims")
        x = self.reshape((1,) * (len(sizes) - self.ndim) + self.shape)
        inter = []
        for s in x.shape:
            inter += [1, s]
        expanded = []
        for r, s in zip(sizes, x.shape):
            expanded += [r, s]
        return x.reshape(inter).expand(expanded).reshape(tuple(r * s for r, s in zip(sizes, x.shape)))

    def chunk(self, chunks: builtins.int, dim: builtins.int = 0) -> list[Tensor]:
        d = _norm_dim(dim, self.ndim)
        step = math.ceil(self.shape[d] / chunks)
        return self.split(step, d)

    def split(self, split_size: builtins.int | Sequence[builtins.int], dim: builtins.int = 0) -> list[Tensor]:
        d = _norm_dim(dim, self.ndim)
        n = self.shape[d]
        sizes = [min(split_size, n - i) for i in range(0, n, split_size)] if isinstance(split_size, int) \
            else list(split_size)  # fmt: skip
        if sum(sizes) != n:
            raise ShapeError(f"split: sizes {sizes} do not add up to {n} (dim {d} of shape {self.shape})")
        out, start = [], 0
        for s in sizes:
            out.append(self._shrink([(start, start + s) if i == d else (0, sz) for i, sz in enumerate(self.shape)]))
            start += s
        return out

    def __getitem__(self, index: Any) -> Tensor:
        return getitem(self, index)

    def __setitem__(self, index: Any, value: Any) -> None:
        indexing.setitem(self, index, value)

    # ---- reductions ----
    def _axes(self, axis: Any, op: str) -> tuple[builtins.int, ...]:
        if axis is None:
            return tuple(range(self.ndim))
        axes = axis if isinstance(axis, (tuple, list)) else (axis,)
        named = {_norm_dim(a, self.ndim, op) for a in axes}
        return tuple(sorted(named)) if self.ndim else ()  # a 0-d tensor's dim 0 / -1 is itself: nothing to reduce

    def _reduce(self, op: Ops, axis: Any, keepdim: builtins.bool, name: str) -> Tensor:
        axes = self._axes(axis, name)
        if self.ndim == 0:
            return self
        out = self._new(UOp(Ops.REDUCE_AXIS, self.dtype, (self.uop,), (op, axes))) if axes else self
        if keepdim:
            return out
        return out.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    def sum(
        self, axis: Any = None, keepdim: builtins.bool = False, dtype: DType | str | None = None, dim: Any = None
    ) -> Tensor:
        axis = dim if dim is not None else axis
        acc = (
            dtypes.from_any(dtype)
            if dtype is not None
            else (dtypes.int64 if self.dtype.kind in "bi" or self.dtype.is_unsigned else self.dtype)
        )
        inner = dtypes.float32 if acc in (dtypes.float16, dtypes.bfloat16) else acc  # f32 accumulation
        return self.cast(inner)._reduce(Ops.ADD, axis, keepdim, "sum").cast(acc)

    def prod(self, axis: Any = None, keepdim: builtins.bool = False, dim: Any = None,
             dtype: DType | str | None = None) -> Tensor:  # fmt: skip
        """torch.prod: a pairwise product over the reduced elements (log2(n) rounds of multiplies: exact as a
        product is, and its gradient at a zero factor is the product of the others); integers and bools give
        int64 unless dtype says otherwise, as sum."""
        axis = dim if dim is not None else axis
        acc = dtypes.from_any(dtype) if dtype is not None else self.dtype if self.dtype.is_float else dtypes.int64
        return self.cast(acc)._prod(axis, keepdim)

    def _prod(self, axis: Any, keepdim: builtins.bool) -> Tensor:
        """The product in self's dtype (an integer one wraps, a bool one is all())."""
        axes = self._axes(axis, "prod")
        rest = [d for d in range(self.ndim) if d not in axes]
        x = self.permute(*rest, *axes).reshape(*(self.shape[d] for d in rest), -1) if self.ndim else self.reshape(1)
        n = x.shape[-1]
        if not isinstance(n, builtins.int):
            raise NotImplementedError(f"prod over a symbolic size {render_shape(self.shape)}")
        if n == 0:
            # a product of nothing is 1; a float one stays a function of x (a result that requires grad, as torch)
            one = Tensor.ones(*x.shape[:-1], 1, dtype=self.dtype, device=self.device)
            x, n = (x.sum(-1, keepdim=True) * 0 + one if self.dtype.is_float else one), 1
        while n > 1:  # multiply the halves; an odd last element waits for the next round
            h = n // 2
            paired = x[..., :h] * x[..., h : 2 * h]
            x, n = (cat([paired, x[..., 2 * h :]], -1) if n % 2 else paired), n - h
        out = x.reshape(*(self.shape[d] for d in rest))
        if keepdim:
            out = out.reshape(*(1 if d in axes else self.shape[d] for d in range(self.ndim)))
        return out

    def amax(self, dim: Any = None, keepdim: builtins.bool = False) -> Tensor:
        """torch.amax: a NaN makes the max NaN (found by its bits: a GPU's max may drop it)."""
        out = self._amax(dim, keepdim)
        if not self.dtype.is_float:
            return out
        return where(self.isnan().any(dim, keepdim), math.nan, out)

    def _amax(self, dim: Any = None, keepdim: builtins.bool = False) -> Tensor:
        """The MAX reduction alone: where a NaN needs no care (a stabilizing shift, argmax's own NaN test)."""
        if any(self.shape[a] == 0 for a in self._axes(dim, "amax")):
            raise EmptyReduction(f"amax: cannot reduce over an empty dim of shape {self.shape} (a max of no "
                                 "elements has no value)")  # fmt: skip
        return self._reduce(Ops.MAX, dim, keepdim, "amax")

    def _shift(self, dim: Any) -> Tensor:
        """The stabilizing shift of softmax and logsumexp: the max along dim (kept), without a gradient; over
        a size-0 dim, -inf (there is nothing to shift, and a max of nothing has no value)."""
        if any(self.shape[a] == 0 for a in self._axes(dim, "softmax")):
            shape = tuple(1 if a in self._axes(dim, "softmax") else s for a, s in enumerate(self.shape))
            return Tensor.full(shape, -math.inf, self.dtype, self.device)
        return self._amax(dim, keepdim=True).detach()

    def amin(self, dim: Any = None, keepdim: builtins.bool = False) -> Tensor:
        if self.dtype == dtypes.bool:
            return self.logical_not().amax(dim, keepdim).logical_not()
        if not self.dtype.is_float:  # ~x reverses the order without overflow (-x of int32's minimum wraps)
            return ~((~self).amax(dim, keepdim))
        return -((-self).amax(dim, keepdim))

    def max(self, dim: Any = None, keepdim: builtins.bool = False, *, axis: Any = None) -> Any:
        """torch.max: the largest element; with an int dim, (values, indices) along it; with a Tensor, maximum."""
        return self._extreme("max", axis if dim is None else dim, keepdim)

    def min(self, dim: Any = None, keepdim: builtins.bool = False, *, axis: Any = None) -> Any:
        """torch.min: the smallest element; with an int dim, (values, indices) along it; with a Tensor, minimum."""
        return self._extreme("min", axis if dim is None else dim, keepdim)

    def _extreme(self, name: str, dim: Any, keepdim: builtins.bool) -> Any:
        if isinstance(dim, Tensor):
            return self.maximum(dim) if name == "max" else self.minimum(dim)
        if dim is None:
            return self.amax(None, keepdim) if name == "max" else self.amin(None, keepdim)
        if not isinstance(dim, builtins.int) or isinstance(dim, builtins.bool):
            raise TypeError(f"{name}(dim) takes one int dim, as torch's, got {dim!r}; amax/amin take several")
        if self.ndim == 0:  # the element itself, at index 0 (dim 0 and -1 name it)
            _norm_dim(dim, 0, name)
            return ValuesIndices(self * 1, Tensor.zeros((), dtype=dtypes.int64, device=self.device))
        if any(self.shape[a] == 0 for a in self._axes(dim, name)):
            raise IndexError(f"{name}(): cannot reduce over the empty dim {dim} of shape {self.shape} "
                             f"(an empty dim has no {name}imum)")  # fmt: skip
        index = self.argmax(dim, True) if name == "max" else self.argmin(dim, True)
        values = self.gather(dim, index)  # not amax: the gradient goes to the chosen element alone, as torch's
        return ValuesIndices(values, index) if keepdim else ValuesIndices(values.squeeze(dim), index.squeeze(dim))

    def mean(self, axis: Any = None, keepdim: builtins.bool = False, dim: Any = None) -> Tensor:
        axis = dim if dim is not None else axis
        axes = self._axes(axis, "mean")
        count = sprod(self.shape[a] for a in axes) if self.ndim else 1
        x = self._float()
        if isinstance(count, UOp):  # known per call: divide by the Variable's value
            return x.sum(axes, keepdim) * self._size_tensor(count, x.dtype).reciprocal()
        return x.sum(axes, keepdim) * (1.0 / count if count else math.nan)

    def var(self, axis: Any = None, keepdim: builtins.bool = False, correction: builtins.int = 1, dim: Any = None,
            unbiased: builtins.bool | None = None) -> Tensor:  # fmt: skip
        axis = dim if dim is not None else axis
        if unbiased is not None:
            correction = int(unbiased)
        axes = self._axes(axis, "var")
        n = sprod(self.shape[a] for a in axes) if self.ndim else 1
        x = self._float()
        if isinstance(n, builtins.int) and n == 0:  # no elements: NaN (a sum of nothing times inf would fold to 0)
            shape = tuple(1 if a in axes else s for a, s in enumerate(self.shape) if keepdim or a not in axes)
            return Tensor.full(shape, math.nan, x.dtype, self.device) + x.sum(axes, keepdim) * 0
        sq = (x - x.mean(axes, keepdim=True)).square().sum(axes, keepdim)
        if isinstance(n, UOp):
            return sq * (self._size_tensor(n, x.dtype) - correction).reciprocal()
        return sq * (1.0 / max(n - correction, 0) if n - correction > 0 else math.inf)

    def _size_tensor(self, size: UOp, dtype: DType) -> Tensor:
        """A symbolic size as a 0-d tensor of dtype (its value comes from the call's BIND)."""
        return Tensor._from(size.cast(dtype), self.device)

    def std(self, axis: Any = None, keepdim: builtins.bool = False, correction: builtins.int = 1, dim: Any = None,
            unbiased: builtins.bool | None = None) -> Tensor:  # fmt: skip
        return self.var(axis, keepdim, correction, dim, unbiased).sqrt()

    def argmax(
        self, axis: builtins.int | None = None, keepdim: builtins.bool = False, dim: builtins.int | None = None
    ) -> Tensor:
        axis = dim if dim is not None else axis
        if axis is None:
            return self.flatten().argmax(0)
        d = _norm_dim(axis, self.ndim, "argmax")
        if self.ndim == 0:
            return Tensor.zeros((), dtype=dtypes.int64, device=self.device)
        n = self.shape[d]
        m = self._amax(d, keepdim=True)
        if self.dtype.is_float:  # NaN is the max, as torch (found by its bits: WGSL's max and != may drop a NaN)
            nan = self.isnan()
            is_max = where(nan.any(d, keepdim=True), nan, self == m)
        else:
            is_max = self == m
        count_down = Tensor.arange(n, 0, -1, device=self.device).reshape((n,) + (1,) * (self.ndim - d - 1))
        first = (is_max.cast(dtypes.int64) * count_down)._amax(d, keepdim)
        return n - first

    def argmin(
        self, axis: builtins.int | None = None, keepdim: builtins.bool = False, dim: builtins.int | None = None
    ) -> Tensor:
        axis = dim if dim is not None else axis
        x = self.logical_not() if self.dtype == dtypes.bool else ~self if not self.dtype.is_float else -self
        return x.argmax(axis, keepdim)

    def logsumexp(self, axis: Any = None, keepdim: builtins.bool = False, dim: Any = None) -> Tensor:
        axis = dim if dim is not None else axis
        x = self._float()
        m = x._shift(axis)
        m = where(m.abs() == math.inf, 0.0, m)
        out = (x - m).exp().sum(axis, keepdim=True).log() + m
        return out if keepdim else out.squeeze(self._axes(axis, "logsumexp")) if self.ndim else out

    def softmax(self, dim: builtins.int = -1, dtype: DType | str | None = None) -> Tensor:
        x = self.cast(dtype) if dtype is not None else self._float()
        e = (x - x._shift(dim)).exp()
        return e / e.sum(dim, keepdim=True)

    def log_softmax(self, dim: builtins.int = -1, dtype: DType | str | None = None) -> Tensor:
        x = self.cast(dtype) if dtype is not None else self._float()
        shifted = x - x._shift(dim)
        return shifted - shifted.exp().sum(dim, keepdim=True).log()

    def cumsum(self, dim: builtins.int = 0) -> Tensor:
        """As a masked reduction: out[i] = sum_j x[j] * (j <= i)."""
        if self.ndim == 0:
            _norm_dim(dim, 0, "cumsum")
            return self
        d = _norm_dim(dim, self.ndim, "cumsum")
        n = self.shape[d]
        x = self.transpose(d, -1)  # (..., n)
        j = Tensor.arange(n, device=self.device)
        lower = j.reshape(1, n) <= j.reshape(n, 1)  # [i, j]: j <= i
        acc = dtypes.int64 if not self.dtype.is_float else self.dtype
        prod = x.cast(acc).unsqueeze(-2) * lower.cast(acc)  # (..., n_i, n_j)
        return prod.sum(-1).transpose(d, -1)

    def all(self, axis: Any = None, keepdim: builtins.bool = False) -> Tensor:
        return self.logical_not().any(axis, keepdim).logical_not()

    def any(self, axis: Any = None, keepdim: builtins.bool = False) -> Tensor:
        axes = self._axes(axis, "any")
        if any(self.shape[a] == 0 for a in axes):  # nothing is true of no elements (a MAX has no identity)
            shape = tuple(1 if a in axes else s for a, s in enumerate(self.shape) if keepdim or a not in axes)
            return Tensor.full(shape, False, dtypes.bool, self.device)
        return self.cast(dtypes.bool)._reduce(Ops.MAX, axis, keepdim, "any")

    # ---- linear algebra and friends ----
    def matmul(self, other: Tensor) -> Tensor:
        return matmul(self, other)

    def dot(self, other: Tensor) -> Tensor:
        return matmul(self, other)

    def gather(self, dim: builtins.int, index: Tensor) -> Tensor:
        """torch.gather: out[..i..] = self[..index[..i..]..] along dim, as a one-hot reduction."""
        d = _norm_dim(dim, self.ndim, "gather")
        if not index.dtype.is_int:
            raise DTypeError(f"gather: index must be an integer tensor, got {index.dtype.name}")
        if index.ndim != self.ndim:
            raise ShapeError(f"gather: index has {index.ndim} dims but input has {self.ndim} (shapes {index.shape}, "
                             f"{self.shape})")  # fmt: skip
        n = self.shape[d]
        bounds.check_bounds(index, n, "gather")
        x = self._shrink([(0, index.shape[i]) if i != d else (0, n) for i in range(self.ndim)])
        onehot = index.unsqueeze(-1) == Tensor.arange(n, device=self.device)  # (*index.shape, n)
        values = _move(x, d, -1).unsqueeze(d).expand(onehot.shape)  # x[.., j at the end]
        return where(onehot, values, 0).sum(-1, dtype=self.dtype)

    def scatter(self, dim: builtins.int, index: Tensor, src: Any = None, value: Any = None,
                reduce: str | None = None) -> Tensor:  # fmt: skip
        """torch.scatter (src a tensor, or value a scalar); a new tensor, as torch's out-of-place form."""
        return indexing.scatter(self, dim, index, src if src is not None else value, reduce)

    def scatter_add(self, dim: builtins.int, index: Tensor, src: Tensor) -> Tensor:
        return indexing.scatter_reduce(self, dim, index, src, "sum", op="scatter_add")

    def scatter_reduce(self, dim: builtins.int, index: Tensor, src: Tensor, reduce: str,
                       include_self: builtins.bool = True) -> Tensor:  # fmt: skip
        return indexing.scatter_reduce(self, dim, index, src, reduce, include_self)

    def masked_select(self, mask: Tensor) -> Tensor:
        return indexing.masked_select(self, mask)

    def nonzero(self, as_tuple: builtins.bool = False) -> Any:
        return indexing.nonzero(self, as_tuple)

    def one_hot(self, num_classes: builtins.int = -1) -> Tensor:
        return one_hot(self, num_classes)

    def masked_fill(self, mask: Tensor, value: Scalar) -> Tensor:
        return where(mask, value, self)

    # ---- order and scans: anneal.order ----
    def sort(self, dim: builtins.int = -1, descending: builtins.bool = False,
             stable: builtins.bool = False) -> ValuesIndices:  # fmt: skip
        return order.sort(self, dim, descending, stable)

    def argsort(self, dim: builtins.int = -1, descending: builtins.bool = False,
                stable: builtins.bool = False) -> Tensor:  # fmt: skip
        return order.argsort(self, dim, descending, stable)

    def topk(self, k: builtins.int, dim: builtins.int = -1, largest: builtins.bool = True,
             sorted: builtins.bool = True) -> ValuesIndices:  # noqa: A002 - torch's name  # fmt: skip
        return order.topk(self, k, dim, largest, sorted)

    def cummax(self, dim: builtins.int) -> ValuesIndices:
        return order.cummax(self, dim)

    def cummin(self, dim: builtins.int) -> ValuesIndices:
        return order.cummin(self, dim)

    def cumprod(self, dim: builtins.int, dtype: DType | str | None = None) -> Tensor:
        return order.cumprod(self, dim, dtype)

    def logcumsumexp(self, dim: builtins.int) -> Tensor:
        return order.logcumsumexp(self, dim)

    # ---- rearranging: anneal.shape_ops ----
    def diagonal(self, offset: builtins.int = 0, dim1: builtins.int = 0, dim2: builtins.int = 1) -> Tensor:
        return shape_ops.diagonal(self, offset, dim1, dim2)

    def diag(self, diagonal: builtins.int = 0) -> Tensor:
        return shape_ops.diag(self, diagonal)

    def roll(
        self, shifts: builtins.int | Sequence[builtins.int], dims: builtins.int | Sequence[builtins.int] | None = None
    ) -> Tensor:
        return shape_ops.roll(self, shifts, dims)

    def repeat_interleave(self, repeats: builtins.int | Tensor, dim: builtins.int | None = None,
                          output_size: builtins.int | None = None) -> Tensor:  # fmt: skip
        return shape_ops.repeat_interleave(self, repeats, dim, output_size)

    def unfold(self, dimension: builtins.int, size: builtins.int, step: builtins.int) -> Tensor:
        return shape_ops.unfold(self, dimension, size, step)

    def t(self) -> Tensor:
        return shape_ops.t(self)

    def std_mean(self, dim: Any = None, keepdim: builtins.bool = False, correction: builtins.int = 1,
                 unbiased: builtins.bool | None = None) -> tuple[Tensor, Tensor]:  # fmt: skip
        return self.std(dim, keepdim, correction, unbiased=unbiased), self.mean(dim, keepdim)

    def var_mean(self, dim: Any = None, keepdim: builtins.bool = False, correction: builtins.int = 1,
                 unbiased: builtins.bool | None = None) -> tuple[Tensor, Tensor]:  # fmt: skip
        return self.var(dim, keepdim, correction, unbiased=unbiased), self.mean(dim, keepdim)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self.numpy() if dtype is None else self.numpy().astype(dtype)

    def tril(self, diagonal: builtins.int = 0) -> Tensor:
        if self.ndim < 2:
            raise RuntimeError(f"tril: input tensor must have at least 2 dimensions, got shape {self.shape}")
        r, c = self.shape[-2], self.shape[-1]
        keep = Tensor.arange(c, device=self.device).reshape(1, c) <= Tensor.arange(r, device=self.device).reshape(
            r, 1) + diagonal  # fmt: skip
        return where(keep, self, False if self.dtype == dtypes.bool else 0)

    def triu(self, diagonal: builtins.int = 0) -> Tensor:
        if self.ndim < 2:
            raise RuntimeError(f"triu: input tensor must have at least 2 dimensions, got shape {self.shape}")
        r, c = self.shape[-2], self.shape[-1]
        keep = Tensor.arange(c, device=self.device).reshape(1, c) >= Tensor.arange(r, device=self.device).reshape(
            r, 1) + diagonal  # fmt: skip
        return where(keep, self, False if self.dtype == dtypes.bool else 0)


def _check_integer_op(op: Ops, dtype: DType) -> None:
    name, bool_ok = _INTEGER_OPS[op]
    if dtype.is_float or (dtype == dtypes.bool and not bool_ok):
        raise DTypeError(f"{name} is only implemented on integer{' and bool' if bool_ok else ''} tensors, "
                         f"got operands promoting to {dtype.name}")  # fmt: skip


def _nan_if_either(a: Tensor, b: Any, out: Tensor) -> Tensor:
    if not out.dtype.is_float:
        return out
    nan = a.isnan() if a.dtype.is_float else None
    if isinstance(b, Tensor) and b.dtype.is_float:
        nan = b.isnan() if nan is None else nan | b.isnan()
    elif isinstance(b, builtins.float) and math.isnan(b):
        return Tensor.full(out.shape, math.nan, out.dtype, out.device)
    return out if nan is None else where(nan, math.nan, out)


def _wrapped(value: Any, dtype: DType) -> Any:
    """A Python int outside an integer dtype's range wraps into it, as torch's (int32 | 0xFFFFFFFF is | -1)."""
    if not isinstance(value, builtins.int) or isinstance(value, builtins.bool):
        return value
    if dtype.is_float or dtype == dtypes.bool:
        return value
    span = 1 << dtype.bits
    value %= span
    return value - span if not dtype.is_unsigned and value >= span >> 1 else value


def _move(x: Tensor, src: int, dst: int) -> Tensor:
    order = list(range(x.ndim))
    s, d = _norm_dim(src, x.ndim), _norm_dim(dst, x.ndim)
    order.insert(d, order.pop(s))
    return x.permute(order)


def _scalar_pow_gradient(g: Tensor, x: Tensor, *, exponent: float) -> tuple[Tensor]:
    """torch's: e x^(e-1), the power taken as pow takes it (x ** 0.5's is 0.5 rsqrt(x): -inf at -0.0)."""
    return (g * exponent * x.pow(exponent - 1),)


def _int_power(x: Tensor, e: int) -> Tensor:
    """x ** e for an integer tensor and e >= 0, by squaring (log2(e) multiplies); wraps as torch's."""
    out: Tensor | None = None
    while e:
        if e & 1:
            out = x if out is None else out * x
        e >>= 1
        if e:
            x = x * x
    return out if out is not None else x.ones_like()


def _int_tensor_power(a: Tensor, b: Tensor) -> Tensor:
    """a ** b, both integer tensors: square-and-multiply over b's bits (wrapping as torch's). A negative b gives
    1 / a ** |b| truncated, as torch's: 1 for a = 1, +-1 for a = -1 (by b's parity), 0 otherwise."""
    out, x, e = a.ones_like(), a, b
    for _ in range(b.dtype.bits - (0 if b.dtype.is_unsigned else 1)):
        out = where((e & 1) == 1, out * x, out)
        x, e = x * x, e >> 1
    odd = (b & 1) == 1
    negative = where(a == 1, 1, where(a == -1, where(odd, -1, 1), 0)).cast(a.dtype) if not a.dtype.is_unsigned \
        else (a == 1).cast(a.dtype)  # fmt: skip
    return where(b < 0, negative, out) if not b.dtype.is_unsigned else out


def _zero_gradient(g: Tensor, x: Tensor) -> tuple[Tensor]:
    return (x.zeros_like(),)


def _pow_gradient(g: Tensor, a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """torch's: d/da = b a^(b-1), 0 where b = 0; d/db = a^b log(a), 0 where a = 0 and b >= 0."""
    da = where(b == 0, 0.0, g * b * a.pow(b - 1))
    db = where((a == 0) & (b >= 0), 0.0, g * a.pow(b) * a.log())
    return da, db  # a and b are broadcast to one shape already: their broadcasts are differentiated as usual


def where(condition: Any, input: Any, other: Any) -> Tensor:  # noqa: A002 - torch's names
    """torch.where(condition, input, other), broadcasting all three."""
    cond = condition if isinstance(condition, Tensor) else None
    ref = next(t for t in (condition, input, other) if isinstance(t, Tensor))
    if cond is None:
        cond = Tensor.full((), bool(condition), dtypes.bool, ref.device)
    cond = cond.cast(dtypes.bool)
    if isinstance(input, Tensor) and isinstance(other, Tensor):
        dt = promote_types(input.dtype, other.dtype)
    elif isinstance(input, Tensor):
        dt = result_type_with_scalar(input.dtype, other)
    elif isinstance(other, Tensor):
        dt = result_type_with_scalar(other.dtype, input)
    else:
        dt = promote_types(scalar_dtype(input), scalar_dtype(other))
    a = input.cast(dt) if isinstance(input, Tensor) else Tensor.full((), input, dt, ref.device)
    b = other.cast(dt) if isinstance(other, Tensor) else Tensor.full((), other, dt, ref.device)
    shape = broadcast_shape(cond.shape, a.shape, b.shape, op="where")
    c, a, b = cond._broadcast_to(shape), a._broadcast_to(shape), b._broadcast_to(shape)
    return c._new(UOp(Ops.WHERE, dt, (c.uop, a.uop, b.uop)), a, b)


def matmul(a: Tensor, b: Tensor) -> Tensor:
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"matmul: both arguments need at least 1 dim, got shapes {a.shape} and {b.shape}")
    x = a.unsqueeze(0) if a.ndim == 1 else a
    y = b.unsqueeze(-1) if b.ndim == 1 else b
    if x.shape[-1] != y.shape[-2]:
        raise ShapeError(f"matmul: shapes {a.shape} and {b.shape} cannot be multiplied "
                         f"({x.shape[-1]} != {y.shape[-2]})")  # fmt: skip
    dt = promote_types(x.dtype, y.dtype)
    x, y = x.cast(dt), y.cast(dt)
    try:
        batch = broadcast_shape(x.shape[:-2], y.shape[:-2], op="matmul")
    except ValueError:
        raise ShapeError(f"matmul: batch dims of shapes {a.shape} and {b.shape} cannot be broadcast together") from None
    n, k, m = x.shape[-2], x.shape[-1], y.shape[-1]
    xe = x.reshape(*x.shape[:-1], 1, k)._broadcast_to((*batch, n, m, k))
    ye = y.transpose(-1, -2).reshape(*y.shape[:-2], 1, m, k)._broadcast_to((*batch, n, m, k))
    out = (xe * ye).sum(-1, dtype=dt)
    if a.ndim == 1:
        out = out.squeeze(-2)
    if b.ndim == 1:
        out = out.squeeze(-1)
    return out


def one_hot(t: Tensor, num_classes: int = -1) -> Tensor:
    if t.dtype.is_float:
        raise TypeError(f"one_hot: needs an integer tensor, got {t.dtype.name}")
    n = int(t.max().item()) + 1 if num_classes == -1 else num_classes
    bounds.check_bounds(t, n, "one_hot")  # a class past num_classes (or negative) has no column: torch raises
    return (t.unsqueeze(-1) == Tensor.arange(n, device=t.device)).cast(dtypes.int64)


def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """torch.cat: each input is padded to the full size and the pieces are added (one kernel)."""
    tensors = [t for t in tensors]
    if not tensors:
        raise ShapeError("cat: expected a non-empty list of tensors")
    legacy = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)]  # torch skips 1-d empty pieces
    if legacy and len(legacy) < len(tensors):
        dt = tensors[0].dtype
        for t in tensors[1:]:
            dt = promote_types(dt, t.dtype)
        return cat([t.cast(dt) for t in legacy], dim)
    ref = tensors[0]
    d = _norm_dim(dim, ref.ndim, "cat")
    for t in tensors[1:]:
        if t.ndim != ref.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, ref.shape)) if i != d):
            raise ShapeError(f"cat: shapes {ref.shape} and {t.shape} differ outside dim {d}")
    dt = ref.dtype
    for t in tensors[1:]:
        dt = promote_types(dt, t.dtype)
    total = sum(t.shape[d] for t in tensors)
    out: Tensor | None = None
    start = 0
    for t in tensors:
        pad = [(0, 0)] * ref.ndim
        pad[d] = (start, total - start - t.shape[d])
        piece = t.cast(dt)._pad(pad)
        out = piece if out is None else out + piece
        start += t.shape[d]
    assert out is not None
    return out


def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    tensors = list(tensors)
    if not tensors:
        raise ShapeError("stack: expected a non-empty list of tensors")
    d = _norm_dim(dim, tensors[0].ndim + 1, "stack")
    for t in tensors[1:]:
        if t.shape != tensors[0].shape:
            raise ShapeError(f"stack: all tensors must have the same shape, got {tensors[0].shape} and {t.shape}")
    return cat([t.unsqueeze(d) for t in tensors], d)


def getitem(x: Tensor, index: Any) -> Tensor:
    """Basic indexing: ints, slices (any step), None and Ellipsis; tensors, lists and masks: anneal.indexing."""
    if not isinstance(index, tuple):
        index = (index,)
    if any(isinstance(i, (Tensor, list, tuple, np.ndarray)) for i in index):  # a tuple inside the index is a list
        return indexing.getitem(x, index)
    index = indexing.full_index(x, index)  # Ellipsis expanded, trailing dims filled, too many indices refused
    shrink, flips, steps = [], [], []
    final_shape: list[tuple[str, int | None]] = []  # (kind, source dim); a new axis has no source dim
    dim = 0
    for i in index:
        if i is None:
            final_shape.append(("new", None))
            continue
        size = x.shape[dim]
        if isinstance(i, (int, np.integer)) and not isinstance(i, bool):
            j = int(i) + size if i < 0 else int(i)
            if not 0 <= j < size:
                raise IndexError(f"index {i} is out of bounds for dim {dim} with size {size}")
            shrink.append((j, j + 1))
            flips.append(False)
            steps.append(1)
            final_shape.append(("drop", dim))
        elif isinstance(i, slice):
            start, stop, step = i.indices(size)
            if step > 0:
                n = max(0, math.ceil((stop - start) / step))
                shrink.append((start, start + max(n - 1, 0) * step + 1) if n else (0, 0))
            else:
                n = max(0, math.ceil((start - stop) / -step))
                shrink.append((start - max(n - 1, 0) * -step, start + 1) if n else (0, 0))
            flips.append(step < 0)
            steps.append(abs(step))
            final_shape.append(("keep", dim))
        else:
            raise IndexError(f"only integers, slices, None, Ellipsis and integer or boolean tensors are valid "
                             f"indices, got {i!r} of type {type(i).__name__}")  # fmt: skip
        dim += 1
    out = x._shrink(shrink)
    flip_axes = [a for a, f in enumerate(flips) if f]
    if flip_axes:
        out = out.flip(flip_axes)
    if any(s != 1 for s in steps):
        out = _stride(out, steps)
    shape = []
    for kind, d in final_shape:
        if kind == "new":
            shape.append(1)
        elif kind == "keep":
            assert d is not None
            shape.append(out.shape[d])
    return out.reshape(tuple(shape))


def _stride(x: Tensor, steps: Sequence[int]) -> Tensor:
    """Take every steps[i]-th element along each dim: pad to a multiple, reshape, keep the first."""
    pad = [(0, (-s) % k if s else 0) for s, k in zip(x.shape, steps)]
    x = x._pad(pad)
    split: list[int] = []
    for s, k in zip(x.shape, steps):
        split += [s // k, k]
    x = x.reshape(split)
    x = x._shrink([(0, s) if j % 2 == 0 else (0, 1) for j, s in enumerate(split)])
    return x.reshape(tuple(split[0::2]))


# ---- data in and out ----


def _backend(device: str) -> Any:
    from anneal.realize import runner

    return runner(device).backend


def _to_numpy(data: Any, dtype: DType | None) -> tuple[np.ndarray, DType]:
    if isinstance(data, (list, tuple)) and any(isinstance(x, Tensor) for x in _flatten(data)):
        data = np.asarray([x.numpy() if isinstance(x, Tensor) else x for x in data])
    arr = np.asarray(data)
    if dtype is None:
        if arr.dtype == np.float64 and not isinstance(data, np.ndarray):
            dtype = dtypes.default_float  # Python floats become float32, as torch.tensor
        elif arr.dtype.kind in "iu" and not isinstance(data, np.ndarray):
            dtype = dtypes.default_int
        elif arr.dtype == object:
            raise TypeError(f"cannot make a tensor from {type(data).__name__} holding mixed objects")
        else:
            dtype = dtypes.from_any(arr.dtype)
    return arr, dtype


def _render_numel(n: sint) -> str:
    return render_shape((n,))[1:-2]


def _flatten(data: Iterable) -> Iterable:
    for x in data:
        if isinstance(x, (list, tuple)):
            yield from _flatten(x)
        else:
            yield x


def _to_storage(arr: np.ndarray, dtype: DType) -> np.ndarray:
    if dtype == dtypes.bfloat16:  # round to nearest even, keep the top 16 bits
        bits = np.asarray(arr, dtype=np.float32).view(np.uint32)
        return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.asarray(arr).astype(dtype.np)


def _from_storage(arr: np.ndarray, dtype: DType) -> np.ndarray:
    if dtype == dtypes.bfloat16:
        return (arr.astype(np.uint32) << 16).view(np.float32)
    return arr

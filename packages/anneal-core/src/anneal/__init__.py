"""anneal: a lazy Tensor whose whole training step compiles to fused kernels."""

from anneal.autograd import jvp
from anneal.einsum import einsum
from anneal.errors import DTypeError, IndexOutOfRange, ShapeError
from anneal.grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from anneal.order import argsort, cummax, cummin, cumprod, logcumsumexp, sort, topk
from anneal.random import manual_seed
from anneal.registry import hookimpl
from anneal.shape_ops import linspace, meshgrid
from anneal.tensor import Tensor, cat, matmul, stack, where
from anneal_ir import DType, dtypes
from anneal_ir.sint import Variable

float16, bfloat16, float32, float64 = dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64
int8, int16, int32, int64 = dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64
uint8, bool_ = dtypes.uint8, dtypes.bool

__version__ = "0.1.0"


def tensor(data: object, dtype: DType | str | None = None, device: str | None = None,
           requires_grad: bool = False) -> Tensor:  # fmt: skip
    """torch.tensor: a new Tensor holding a copy of data."""
    return Tensor(data, dtype=dtype, device=device, requires_grad=requires_grad)


def std_mean(input: Tensor, dim: object = None, keepdim: bool = False, correction: int = 1,  # noqa: A002
             unbiased: bool | None = None) -> tuple[Tensor, Tensor]:  # fmt: skip
    """torch.std_mean: (std, mean) over dim (unbiased=False is correction=0, as torch's older form)."""
    return input.std_mean(dim, keepdim, correction, unbiased)


def var_mean(input: Tensor, dim: object = None, keepdim: bool = False, correction: int = 1,  # noqa: A002
             unbiased: bool | None = None) -> tuple[Tensor, Tensor]:  # fmt: skip
    """torch.var_mean: (var, mean) over dim."""
    return input.var_mean(dim, keepdim, correction, unbiased)


def from_numpy(array: object) -> Tensor:
    """A Tensor of the array's values and dtype. A copy: a lazy tensor's buffer lives on its device, so unlike
    torch.from_numpy, writing to the array afterwards does not change the tensor."""
    return Tensor(array)


# torch's name (torch.bool) beside numpy's bool_; set through globals() so this module's own annotations keep
# Python's bool
globals()["bool"] = dtypes.bool

__all__ = ["DType", "DTypeError", "IndexOutOfRange", "ShapeError", "Tensor", "Variable", "argsort", "cat",
           "cummax", "cummin", "cumprod", "dtypes", "einsum", "enable_grad", "from_numpy", "hookimpl",
           "is_grad_enabled", "jvp", "linspace", "logcumsumexp", "manual_seed", "matmul", "meshgrid", "no_grad",
           "set_grad_enabled", "sort", "stack", "std_mean", "tensor", "topk", "var_mean", "where"]  # fmt: skip

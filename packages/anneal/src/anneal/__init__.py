"""anneal: a lazy Tensor whose whole training step compiles to fused kernels."""

from anneal.autograd import jvp
from anneal.random import manual_seed
from anneal.registry import hookimpl
from anneal.tensor import Tensor, cat, matmul, stack, where
from anneal_ir import DType, dtypes
from anneal_ir.sint import Variable

float16, bfloat16, float32, float64 = dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64
int8, int16, int32, int64 = dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64
uint8, bool_ = dtypes.uint8, dtypes.bool

__version__ = "0.1.0"

__all__ = ["DType", "Tensor", "Variable", "cat", "dtypes", "hookimpl", "jvp", "manual_seed", "matmul", "stack", "where"]

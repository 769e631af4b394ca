"""anneal.nn.state: parameters, state dicts and safetensors files.

Names are torch's dotted names (``layers.0.weight``), so a torch ``state_dict`` loads into
the matching anneal module and a file written here loads in torch (and back).
Checkpoints are written atomically: to a temporary file in the target's directory, flushed
and fsynced, then renamed over the target, so a crash or an error mid-write never leaves a
truncated checkpoint where a good one was.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np
import safetensors

from anneal.files import atomic_write as atomic_write  # re-exported: the models import it from here
from anneal.nn.modules import Module, _walk
from anneal.tensor import Tensor
from anneal_ir import DType, dtypes

__all__ = ["get_parameters", "get_state_dict", "load_state_dict", "safe_load", "safe_save", "state_dict"]


def _named_tensors(obj: Any, prefix: str = "") -> Iterator[tuple[str, Tensor, bool]]:
    """(name, tensor, is_buffer) for every tensor reachable from obj: modules, containers, plain objects."""
    if isinstance(obj, Module):
        bufs = {id(t) for _, t in obj._named_tensors(prefix, buffers=True)}
        for name, t in obj._named_tensors(prefix, buffers=None):
            yield name, t, id(t) in bufs
        return
    if isinstance(obj, Tensor):
        yield prefix, obj, False
        return
    if isinstance(obj, (list, tuple, dict)):
        for name, v in _walk(obj, prefix):
            yield from _named_tensors(v, name)
        return
    if hasattr(obj, "__dict__"):  # any object holding tensors (a model written without Module)
        for k, v in vars(obj).items():
            if not k.startswith("_"):
                yield from _named_tensors(v, f"{prefix}.{k}" if prefix else k)


def get_state_dict(obj: Any, prefix: str = "") -> dict[str, Tensor]:
    """Every tensor of obj (parameters and buffers) by dotted name; tied tensors under each name, as torch."""
    return {name: t for name, t, _ in _named_tensors(obj, prefix)}


def state_dict(module: Any) -> dict[str, Tensor]:
    return get_state_dict(module)


def get_parameters(obj: Any) -> list[Tensor]:
    """The trainable tensors of obj, each once (buffers such as running statistics are not parameters)."""
    seen: set[int] = set()
    out = []
    for _, t, is_buffer in _named_tensors(obj):
        if not is_buffer and id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


class IncompatibleKeys(NamedTuple):
    missing_keys: list[str]
    unexpected_keys: list[str]


def _as_numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach") and hasattr(value, "cpu") and not isinstance(value, Tensor):  # a torch tensor
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":  # numpy has no bfloat16: go through float32 (exact)
            value = value.float()
        value = value.numpy()
    return np.asarray(value)


def _shape_of(value: Any) -> tuple[int, ...]:
    if isinstance(value, Tensor):
        return value.shape
    shape = getattr(value, "shape", None)
    return tuple(int(s) for s in shape) if shape is not None else np.shape(value)


def load_state_dict(module: Any, state: dict[str, Any], strict: bool = True) -> IncompatibleKeys:
    """Copy state (anneal Tensors, numpy arrays or torch tensors) into module's tensors, casting to their dtype.

    Raises RuntimeError naming every missing and unexpected key (when strict) and every shape mismatch
    (always, as torch); nothing is loaded unless everything fits. The module's Tensor objects are kept,
    so an optimizer built on them stays valid."""
    from anneal.realize import plain_view, realize_all

    own = get_state_dict(module)
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    errors = []
    if strict and unexpected:
        errors.append("Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in unexpected) + ".")
    if strict and missing:
        errors.append("Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing) + ".")
    for k, t in own.items():
        if k in state and tuple(_shape_of(state[k])) != t.shape:
            errors.append(f"size mismatch for {k}: copying a param with shape {tuple(_shape_of(state[k]))} from "
                          f"checkpoint, the shape in current model is {t.shape}.")  # fmt: skip
    if errors:
        raise RuntimeError(f"Error(s) in loading state_dict for {type(module).__name__}:\n\t" + "\n\t".join(errors))
    new: list[tuple[Tensor, Tensor]] = []
    for k, t in own.items():
        if k in state:
            v = state[k]
            src = v.to(t.device).cast(t.dtype) if isinstance(v, Tensor) else Tensor(_as_numpy(v), t.dtype, t.device)
            new.append((t, src))
    realize_all([s for _, s in new])
    for t, s in new:
        # the tensor object stays (an optimizer holds it) and reads the loaded buffer: no copy kernel. A leaf's
        # uop must be a buffer: it is. (A jit captured before the load would still read the old buffers.)
        t.uop = plain_view(s.uop)
    return IncompatibleKeys(missing, unexpected)


# ---- safetensors ----

_ST_DTYPES: dict[str, DType] = {
    "F64": dtypes.float64, "F32": dtypes.float32, "F16": dtypes.float16, "BF16": dtypes.bfloat16,
    "I64": dtypes.int64, "I32": dtypes.int32, "I16": dtypes.int16, "I8": dtypes.int8, "U8": dtypes.uint8,
    "U16": dtypes.uint16, "U32": dtypes.uint32, "U64": dtypes.uint64,
    "BOOL": dtypes.bool,
}  # fmt: skip


def _storage(value: Any) -> tuple[np.ndarray, str]:
    """The little-endian array to write and its dtype name (bfloat16 kept as its raw 16-bit patterns)."""
    if isinstance(value, Tensor):
        arr = value.numpy()
        if value.dtype == dtypes.bfloat16:  # the values are exact bfloat16: the top half of each float32
            bits = (arr.astype(np.float32).view(np.uint32) >> 16).astype("<u2")
            return np.require(bits, requirements="C"), "bfloat16"
    else:
        arr = _as_numpy(value)
    arr = np.require(arr, requirements="C")  # (np.ascontiguousarray would make a 0-d array 1-d)
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return arr, arr.dtype.name


def _serialize(tensors: dict[str, Any], metadata: dict[str, str] | None) -> bytes:
    arrays = {}
    for k, v in tensors.items():
        if not isinstance(k, str):
            raise TypeError(f"safe_save: tensor names must be strings, got {k!r}")
        arrays[k] = _storage(v)
    if all(name != "bfloat16" for _, name in arrays.values()):
        from safetensors.numpy import save

        return save({k: a for k, (a, _) in arrays.items()}, metadata=metadata)
    # numpy has no bfloat16, so the numpy API cannot name it: hand the raw bytes to the serializer
    if hasattr(safetensors, "TensorSpec"):  # safetensors >= 0.8 takes specs pointing at the data
        specs = {k: safetensors.TensorSpec(dtype=name, shape=a.shape, data_ptr=a.ctypes.data, data_len=a.nbytes)
                 for k, (a, name) in arrays.items()}  # fmt: skip
        return bytes(safetensors.serialize(specs, metadata=metadata))
    legacy = {k: {"dtype": name, "shape": list(a.shape), "data": a.tobytes()} for k, (a, name) in arrays.items()}
    return bytes(safetensors.serialize(legacy, metadata=metadata))  # type: ignore[arg-type]


def safe_save(tensors: dict[str, Any], path: str | os.PathLike[str], metadata: dict[str, str] | None = None) -> None:
    """Write tensors (anneal Tensors or arrays) to a .safetensors file, atomically."""
    atomic_write(path, _serialize(tensors, metadata))  # serialize first: a bad tensor writes nothing


def safe_load(path: str | os.PathLike[str], device: str | None = None) -> dict[str, Tensor]:
    """Read a .safetensors file into anneal Tensors (any dtype safetensors and anneal share, bfloat16 included)."""
    with open(path, "rb") as f:
        raw = f.read()
    out: dict[str, Tensor] = {}
    for name, info in safetensors.deserialize(raw):
        code = str(info["dtype"]).upper()
        dt = _ST_DTYPES.get(code)
        if dt is None:
            raise ValueError(f"safe_load: {path}: tensor {name!r} has dtype {code}, which anneal does not support")
        shape = tuple(int(s) for s in info["shape"])
        if dt == dtypes.bfloat16:
            bits = np.frombuffer(info["data"], dtype="<u2").astype(np.uint32) << 16
            arr = bits.view(np.float32).reshape(shape)  # exact: bfloat16 is the top half of a float32
        else:
            arr = np.frombuffer(info["data"], dtype=np.dtype(dt.np).newbyteorder("<")).reshape(shape)
        out[name] = Tensor(arr.copy(), dt, device)
    return out

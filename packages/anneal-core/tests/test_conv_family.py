"""The convolution family of issue 18 against torch: conv1d, conv3d, conv_transpose1d/2d/3d, interpolate
(nearest, nearest-exact, linear, bilinear, trilinear), avg_pool3d and max_unpool2d. Forward values, gradients
(read after a value, as PyTorch users do) and dtypes, torch's error types naming the op and the shapes, and the
module classes (nn.Conv1d, ..., nn.Upsample)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from devices import DEV, HAS_F64

import anneal.nn as nn
import anneal.nn.functional as F
from anneal import Tensor

RTOL, ATOL = 1e-4, 1e-5  # float32 sums of a few dozen products

Fn = Callable[..., Any]


def _compare(fn: Fn, shapes: list[tuple[int, ...]], dtype: str = "float32", seed: int = 0) -> None:
    """fn(F, *tensors) in anneal and fn(torch's F, *tensors) agree in value, dtype and every input gradient."""
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s).astype(dtype) for s in shapes]
    ours = [Tensor(a, device=DEV, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    out, ref = fn(F, *ours), fn(TF, *theirs)
    value = out.numpy()  # read before backward
    assert value.shape == tuple(ref.shape)
    assert str(value.dtype) == str(ref.dtype).removeprefix("torch.")
    np.testing.assert_allclose(value, ref.detach().numpy(), rtol=RTOL, atol=ATOL)
    seed_grad = rng.standard_normal(value.shape).astype(dtype)
    (out * Tensor(seed_grad, device=DEV)).sum().backward()
    (ref * torch.tensor(seed_grad)).sum().backward()
    for i, (a, t) in enumerate(zip(ours, theirs)):
        assert a.grad is not None and t.grad is not None, f"input {i} has no gradient"
        np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=RTOL, atol=ATOL, err_msg=f"input {i}")


def case(name: str, shapes: list[tuple[int, ...]], fn: Fn) -> Any:
    # torch warns that an even 'same' kernel pads a copy; that is its implementation, not a difference
    quiet = pytest.mark.filterwarnings("ignore:Using padding='same'")
    return pytest.param(shapes, fn, id=name, marks=quiet)


CONV = [
    # conv1d: (N, C, L), weight (out, in/groups, k)
    case("c1_basic", [(2, 3, 9), (4, 3, 3)], lambda m, x, w: m.conv1d(x, w)),
    case(
        "c1_bias_stride_pad_dil",
        [(2, 4, 11), (6, 4, 3), (6,)],
        lambda m, x, w, b: m.conv1d(x, w, b, stride=2, padding=1, dilation=2),
    ),  # fmt: skip
    case(
        "c1_same_even_kernel_groups",
        [(2, 4, 9), (6, 2, 4), (6,)],
        lambda m, x, w, b: m.conv1d(x, w, b, padding="same", groups=2),
    ),  # fmt: skip
    case("c1_valid", [(1, 2, 7), (3, 2, 4)], lambda m, x, w: m.conv1d(x, w, padding="valid")),
    case(
        "c1_depthwise_tuple_args",
        [(1, 3, 8), (3, 1, 3)],
        lambda m, x, w: m.conv1d(x, w, stride=(3,), padding=(2,), groups=3),
    ),  # fmt: skip
    case("c1_unbatched", [(3, 7), (2, 3, 3)], lambda m, x, w: m.conv1d(x, w, padding=1)),
    # at least CHANNELS_FIRST_POSITIONS (128) output positions: the contraction computed channels first
    case("c1_long_groups", [(2, 4, 130), (6, 2, 3), (6,)], lambda m, x, w, b: m.conv1d(x, w, b, padding=1, groups=2)),
    case("c2_channels_first", [(2, 3, 12, 12), (5, 3, 3, 3)], lambda m, x, w: m.conv2d(x, w, padding=1)),
    # conv3d: (N, C, D, H, W)
    case(
        "c3_basic_bias_pad", [(2, 2, 4, 5, 4), (3, 2, 3, 3, 2), (3,)], lambda m, x, w, b: m.conv3d(x, w, b, padding=1)
    ),
    case(
        "c3_stride_dilation",
        [(1, 2, 6, 5, 5), (3, 2, 2, 3, 3)],
        lambda m, x, w: m.conv3d(x, w, stride=(1, 2, 2), dilation=(2, 1, 1)),
    ),  # fmt: skip
    case(
        "c3_groups_same", [(1, 4, 3, 4, 3), (4, 2, 3, 2, 3)], lambda m, x, w: m.conv3d(x, w, padding="same", groups=2)
    ),
    case("c3_unbatched", [(2, 3, 4, 3), (2, 2, 2, 2, 2)], lambda m, x, w: m.conv3d(x, w)),
    # conv2d through the shared N-d core (the existing suites cover it; one case here as a cross-check)
    case("c2_pad_stride", [(1, 2, 6, 5), (3, 2, 3, 3)], lambda m, x, w: m.conv2d(x, w, stride=2, padding=1)),
]

TRANSPOSED = [
    case("t1_basic", [(2, 3, 5), (3, 2, 3)], lambda m, x, w: m.conv_transpose1d(x, w)),
    case(
        "t1_stride_pad_outpad_bias",
        [(2, 4, 5), (4, 3, 3), (3,)],
        lambda m, x, w, b: m.conv_transpose1d(x, w, b, stride=2, padding=1, output_padding=1),
    ),  # fmt: skip
    case(
        "t1_dilation_groups",
        [(1, 4, 4), (4, 1, 3)],
        lambda m, x, w: m.conv_transpose1d(x, w, stride=3, groups=2, dilation=2),
    ),  # fmt: skip
    case("t2_basic_unbatched", [(3, 4, 4), (3, 2, 3, 2)], lambda m, x, w: m.conv_transpose2d(x, w)),
    case(
        "t2_stride_pad_groups_dil",
        [(2, 4, 3, 4), (4, 3, 3, 3)],
        lambda m, x, w: m.conv_transpose2d(x, w, stride=(2, 3), padding=(0, 2), groups=2, dilation=(1, 2)),
    ),  # fmt: skip
    case(
        "t2_outpad_bias",
        [(1, 2, 3, 3), (2, 3, 2, 3), (3,)],
        lambda m, x, w, b: m.conv_transpose2d(x, w, b, stride=2, padding=(1, 0), output_padding=(1, 0)),
    ),  # fmt: skip
    case("t2_pad_beyond_kernel", [(1, 2, 8, 8), (2, 2, 3, 3)], lambda m, x, w: m.conv_transpose2d(x, w, padding=3)),
    case(
        "t3_stride_pad_outpad_bias",
        [(1, 2, 3, 3, 2), (2, 3, 3, 2, 3), (3,)],
        lambda m, x, w, b: m.conv_transpose3d(x, w, b, stride=2, padding=1, output_padding=(1, 0, 1)),
    ),  # fmt: skip
    case("t3_groups", [(1, 4, 2, 3, 2), (4, 1, 2, 2, 2)], lambda m, x, w: m.conv_transpose3d(x, w, groups=2)),
]

INTERPOLATE = [
    case("nearest_size", [(2, 3, 4, 5)], lambda m, x: m.interpolate(x, size=(7, 5))),
    case("nearest_scale_frac", [(2, 3, 4, 5)], lambda m, x: m.interpolate(x, scale_factor=2.5)),
    case("nearest_double", [(1, 2, 3, 4)], lambda m, x: m.interpolate(x, scale_factor=2)),
    case("nearest_down", [(1, 2, 7, 6)], lambda m, x: m.interpolate(x, size=(3, 4))),
    case("nearest_1d", [(2, 3, 4)], lambda m, x: m.interpolate(x, scale_factor=3)),
    case("nearest_3d", [(1, 2, 2, 3, 4)], lambda m, x: m.interpolate(x, size=(3, 5, 2))),
    case("nearest_exact", [(2, 3, 4, 5)], lambda m, x: m.interpolate(x, size=(2, 9), mode="nearest-exact")),
    case("bilinear_size", [(2, 3, 4, 5)], lambda m, x: m.interpolate(x, size=(5, 7), mode="bilinear")),
    case("bilinear_scale", [(2, 3, 4, 5)], lambda m, x: m.interpolate(x, scale_factor=1.7, mode="bilinear")),
    case(
        "bilinear_scale_tuple",
        [(1, 2, 4, 5)],
        lambda m, x: m.interpolate(x, scale_factor=(2, 3), mode="bilinear", align_corners=False),
    ),  # fmt: skip
    case(
        "bilinear_align",
        [(2, 3, 4, 5)],
        lambda m, x: m.interpolate(x, size=(7, 3), mode="bilinear", align_corners=True),
    ),
    case(
        "bilinear_align_to_1",
        [(1, 2, 4, 5)],
        lambda m, x: m.interpolate(x, size=1, mode="bilinear", align_corners=True),
    ),  # fmt: skip
    case(
        "bilinear_recompute",
        [(1, 2, 5, 5)],
        lambda m, x: m.interpolate(x, scale_factor=0.7, mode="bilinear", recompute_scale_factor=True),
    ),  # fmt: skip
    case("linear_1d", [(2, 3, 4)], lambda m, x: m.interpolate(x, size=7, mode="linear")),
    case("trilinear", [(1, 2, 2, 3, 4)], lambda m, x: m.interpolate(x, size=(3, 5, 2), mode="trilinear")),
]

POOLING = [
    case("avg3_kernel2", [(2, 2, 4, 5, 4)], lambda m, x: m.avg_pool3d(x, 2)),
    case(
        "avg3_pad_ceil_exclude",
        [(2, 5, 4, 5)],
        lambda m, x: m.avg_pool3d(x, (3, 2, 2), stride=(2, 1, 2), padding=1, ceil_mode=True, count_include_pad=False),
    ),  # fmt: skip
    case("avg3_pad_include", [(1, 2, 4, 4, 5)], lambda m, x: m.avg_pool3d(x, 3, stride=2, padding=1)),
    case("avg3_divisor", [(1, 1, 4, 4, 4)], lambda m, x: m.avg_pool3d(x, 2, divisor_override=3)),
    case("avg2_ceil", [(2, 2, 6, 5)], lambda m, x: m.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True)),
]


@pytest.mark.parametrize(("shapes", "fn"), CONV + TRANSPOSED + INTERPOLATE + POOLING)
def test_against_torch(shapes: list[tuple[int, ...]], fn: Fn) -> None:
    _compare(fn, shapes)


@pytest.mark.parametrize(
    ("shapes", "fn"),
    [
        case("conv1d", [(1, 2, 6), (3, 2, 3), (3,)], lambda m, x, w, b: m.conv1d(x, w, b, padding=1)),
        case("conv3d", [(1, 2, 3, 3, 3), (2, 2, 2, 2, 2)], lambda m, x, w: m.conv3d(x, w, stride=2)),
        case("conv_transpose2d", [(1, 2, 3, 3), (2, 2, 3, 3)], lambda m, x, w: m.conv_transpose2d(x, w, stride=2)),
        case("bilinear", [(1, 2, 3, 4)], lambda m, x: m.interpolate(x, scale_factor=1.5, mode="bilinear")),
        case("avg_pool3d", [(1, 1, 4, 4, 4)], lambda m, x: m.avg_pool3d(x, 2)),
    ],
)
def test_float64_keeps_dtype(shapes: list[tuple[int, ...]], fn: Fn) -> None:
    if HAS_F64:
        _compare(fn, shapes, dtype="float64")
        return
    with pytest.raises(Exception, match="float64 is not supported"):  # WGSL has no f64: a clear error, not a skip
        _compare(fn, shapes, dtype="float64")


def _unpool_case(x: np.ndarray, k: int, s: int, p: int) -> None:
    values, idx = TF.max_pool2d(torch.tensor(x), k, s, p, return_indices=True)
    our_values, our_idx = F.max_pool2d(Tensor(x, device=DEV), k, s, p, return_indices=True)
    np.testing.assert_array_equal(our_idx.numpy(), idx.numpy())
    size = x.shape[-2:]
    _compare(lambda m, v: m.max_unpool2d(v, our_idx if m is F else idx, k, s, p, size), [tuple(values.shape)])


def test_max_unpool2d_inverts_max_pool2d() -> None:
    rng = np.random.default_rng(1)
    _unpool_case(rng.standard_normal((2, 3, 6, 5)).astype(np.float32), 2, 2, 0)


def test_max_unpool2d_overlapping_windows_give_each_duplicate_the_gradient() -> None:
    # stride < kernel: one input element can be the max of two windows, so an index repeats
    rng = np.random.default_rng(2)
    _unpool_case(rng.standard_normal((1, 2, 6, 4)).astype(np.float32), 3, 2, 1)


def test_max_unpool2d_default_size_unbatched() -> None:
    v = np.arange(4, dtype=np.float32).reshape(1, 2, 2) + 1
    idx = np.array([[[0, 3], [9, 15]]], dtype=np.int64)
    ours = F.max_unpool2d(Tensor(v, device=DEV), Tensor(idx, device=DEV), 2).numpy()
    ref = TF.max_unpool2d(torch.tensor(v), torch.tensor(idx), 2).numpy()
    np.testing.assert_array_equal(ours, ref)


def test_interpolate_nearest_keeps_integer_dtype_and_inf() -> None:
    x = np.array([[[[1, 2], [3, 4]]]], dtype=np.int32)
    ours = F.interpolate(Tensor(x, device=DEV), scale_factor=3).numpy()
    ref = TF.interpolate(torch.tensor(x).float(), scale_factor=3).int().numpy()
    assert ours.dtype == np.int32
    np.testing.assert_array_equal(ours, ref)
    inf = np.array([[[[np.inf, 1.0], [-np.inf, 2.0]]]], dtype=np.float32)
    got = F.interpolate(Tensor(inf, device=DEV), size=(3, 3)).numpy()
    np.testing.assert_array_equal(got, TF.interpolate(torch.tensor(inf), size=(3, 3)).numpy())


# ---- errors: torch's types, naming the op and both shapes ----


def _errors(fn: Fn, shapes: list[tuple[int, ...]]) -> tuple[type[BaseException], type[BaseException], str]:
    ours = [Tensor(np.zeros(s, np.float32), device=DEV) for s in shapes]
    theirs = [torch.zeros(s) for s in shapes]
    with pytest.raises(Exception) as ref:
        fn(TF, *theirs)
    with pytest.raises(Exception) as got:
        fn(F, *ours)
    return got.type, ref.type, str(got.value)


ERRORS = [
    # (case, shapes, fn, words the message names)
    case("conv1d_channels", [(2, 3, 5), (4, 2, 3)], lambda m, x, w: m.conv1d(x, w)),
    case("conv1d_rank", [(2, 3, 5, 5), (4, 3, 3)], lambda m, x, w: m.conv1d(x, w)),
    case("conv3d_channels", [(1, 2, 3, 3, 3), (1, 3, 2, 2, 2)], lambda m, x, w: m.conv3d(x, w)),
    case("conv3d_weight_rank", [(1, 2, 3, 3, 3), (1, 2, 2, 2)], lambda m, x, w: m.conv3d(x, w)),
    case("convT2d_channels", [(1, 3, 4, 4), (2, 3, 3, 3)], lambda m, x, w: m.conv_transpose2d(x, w)),
    case("conv3d_kernel_too_large", [(1, 2, 3, 4, 3), (1, 2, 2, 5, 2)], lambda m, x, w: m.conv3d(x, w)),
    case("conv1d_dilated_kernel_too_large", [(1, 1, 5), (1, 1, 3)], lambda m, x, w: m.conv1d(x, w, dilation=3)),
    case("convT3d_rank", [(2, 3, 3), (2, 1, 2, 2, 2)], lambda m, x, w: m.conv_transpose3d(x, w)),
]


@pytest.mark.parametrize(("shapes", "fn"), ERRORS)
def test_conv_errors_as_torch(shapes: list[tuple[int, ...]], fn: Fn) -> None:
    ours, theirs, message = _errors(fn, shapes)
    assert ours is theirs is RuntimeError
    assert "conv" in message
    assert str(tuple(shapes[0])) in message and str(tuple(shapes[1])) in message


@pytest.mark.parametrize(
    ("fn", "kind"),
    [
        (lambda m, x: m.conv2d(x, x, stride=2, padding="same"), RuntimeError),
        (lambda m, x: m.conv2d(x, x, padding="full"), RuntimeError),
        (lambda m, x: m.conv_transpose2d(x, x[:, :1], stride=2, output_padding=2), RuntimeError),
        (lambda m, x: m.interpolate(x[0], size=5, mode="bilinear"), NotImplementedError),  # 3-d input, bilinear
        (lambda m, x: m.interpolate(x, size=5, align_corners=True), ValueError),  # nearest takes no align_corners
        (lambda m, x: m.interpolate(x), ValueError),  # neither size nor scale_factor
        (lambda m, x: m.interpolate(x, size=3, scale_factor=2), ValueError),  # both
        (lambda m, x: m.avg_pool3d(x[0, 0], 2), RuntimeError),  # a 2-d input
    ],
)
def test_argument_errors_as_torch(fn: Fn, kind: type[BaseException]) -> None:
    ours, theirs, _ = _errors(fn, [(1, 2, 4, 4)])
    assert ours is theirs is kind


def test_max_unpool2d_indices_shape_mismatch() -> None:
    ours, theirs, message = _errors(lambda m, v, i: m.max_unpool2d(v, i.long(), 2) if m is TF else
                                    m.max_unpool2d(v, i.cast("int64"), 2), [(1, 2, 2, 2), (1, 2, 2, 3)])  # fmt: skip
    assert ours is theirs is RuntimeError
    assert "max_unpool2d" in message and "(1, 2, 2, 3)" in message


# ---- module classes ----


def _load(ours: nn.Module, theirs: torch.nn.Module) -> None:
    ours.load_state_dict({k: Tensor(v.detach().numpy(), device=DEV) for k, v in theirs.state_dict().items()})


@pytest.mark.parametrize(
    ("make", "shape"),
    [
        (lambda m: m.Conv1d(4, 6, 3, stride=2, padding=1, groups=2), (2, 4, 9)),
        (lambda m: m.Conv1d(3, 2, 3, padding=2, padding_mode="reflect"), (1, 3, 7)),
        (lambda m: m.Conv3d(2, 3, (2, 3, 2), padding="same"), (1, 2, 3, 4, 3)),
        (lambda m: m.ConvTranspose1d(2, 4, 3, stride=2, output_padding=1, groups=2), (1, 2, 5)),
        (lambda m: m.ConvTranspose2d(3, 2, 3, stride=2, padding=1), (1, 3, 4, 3)),
        (lambda m: m.ConvTranspose3d(2, 2, 2, stride=2, bias=False), (1, 2, 2, 3, 2)),
        (lambda m: m.Upsample(scale_factor=2, mode="bilinear", align_corners=True), (1, 2, 3, 4)),
        (lambda m: m.Upsample(size=(5, 3)), (1, 2, 3, 4)),
        (lambda m: m.AvgPool3d(2, stride=1), (1, 2, 3, 3, 3)),
    ],
)
def test_modules_match_torch(make: Fn, shape: tuple[int, ...]) -> None:
    theirs, ours = make(torch.nn), make(nn)
    assert sorted(ours.state_dict()) == sorted(theirs.state_dict())
    for k, v in theirs.state_dict().items():
        assert ours.state_dict()[k].shape == tuple(v.shape), k
    _load(ours, theirs)
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    ref = theirs(torch.tensor(x)).detach().numpy()
    np.testing.assert_allclose(ours(Tensor(x, device=DEV)).numpy(), ref, rtol=RTOL, atol=ATOL)


def test_conv_transpose_module_output_size_and_unpool_module() -> None:
    theirs, ours = torch.nn.ConvTranspose2d(2, 3, 3, stride=2), nn.ConvTranspose2d(2, 3, 3, stride=2)
    _load(ours, theirs)
    x = np.random.default_rng(4).standard_normal((1, 2, 3, 3)).astype(np.float32)
    ref = theirs(torch.tensor(x), output_size=(8, 8)).detach().numpy()
    got = ours(Tensor(x, device=DEV), output_size=(8, 8)).numpy()
    assert got.shape == ref.shape == (1, 3, 8, 8)
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL)
    with pytest.raises(ValueError, match="output size"):
        ours(Tensor(x, device=DEV), output_size=(10, 10))
    pool_ref, idx = torch.nn.MaxPool2d(2, return_indices=True)(torch.tensor(x[:, :, :2, :2]))
    unpooled = nn.MaxUnpool2d(2)(Tensor(pool_ref.numpy(), device=DEV), Tensor(idx.numpy(), device=DEV)).numpy()
    np.testing.assert_array_equal(unpooled, torch.nn.MaxUnpool2d(2)(pool_ref, idx).numpy())

"""Opts as transformations of a kernel's ranges, the lowering's program, split reductions, decompositions.

What a kernel computes under every opt list is checked on a device (anneal-wgpu's test_strategies runs
each candidate against the heuristic's output and numpy); here, what each transformation does to the
kernel: which ranges exist, of which kind and extent, what is guarded, what the program holds.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from anneal_ir import Ops, UOp, dtypes
from anneal_ir.symbolic import simplify
from anneal_schedule.accumulate import accumulate_wide
from anneal_schedule.analysis import canonical, find_contraction, flops, ranges_of
from anneal_schedule.backend import Limits
from anneal_schedule.decompose import erf_polynomial, threefry_rounds
from anneal_schedule.heuristic import candidate_opts, choose_opts, group_size
from anneal_schedule.lower import lower
from anneal_schedule.opt import Opt, OptError, OptOps, apply_opts, origin, stride
from anneal_schedule.schedule import build_schedule, normalize
from anneal_schedule.split import split_reductions

F32 = dtypes.float32
LIMITS = Limits(max_workgroup_size=(1024, 1024, 64), max_workgroup_invocations=1024, max_shared_memory=49152)


class FakeBuffer:
    def __init__(self, size: int):
        self.size = size


def buf(*shape: int) -> UOp:
    return UOp(Ops.RESHAPE, F32, (UOp(Ops.BUFFER, F32, (), FakeBuffer(math.prod(shape))),), shape)


def view(u: UOp, shape: tuple[int, ...], via: tuple[int, ...]) -> UOp:
    return UOp(Ops.EXPAND, u.dtype, (UOp(Ops.RESHAPE, u.dtype, (u,), via),), shape)


def matmul(a: UOp, b: UOp) -> UOp:
    (n, k), (_, m) = a.shape, b.shape  # type: ignore[misc]
    prod = view(a, (n, m, k), (n, 1, k)) * view(UOp(Ops.PERMUTE, b.dtype, (b,), (1, 0)), (n, m, k), (1, m, k))
    return UOp(Ops.RESHAPE, a.dtype, (UOp(Ops.REDUCE_AXIS, a.dtype, (prod,), (Ops.ADD, (2,))),), (n, m))


def kernel(out: UOp) -> UOp:
    sink, inputs = normalize([out])
    (k,) = build_schedule(sink, len(inputs)).kernels
    return k.ast


def ranges(ast: UOp) -> dict[int, UOp]:
    return {r.arg[0]: r for r in ast.toposort() if r.op is Ops.RANGE}


def test_a_split_keeps_the_id_on_the_outer_part() -> None:
    ast = kernel(buf(64, 48) * 2.0)  # ranges 0 (64 rows) and 1 (48 columns)
    out = apply_opts(ast, [Opt(OptOps.LOCAL, 1, 16)])
    rs = ranges(out)
    assert (rs[1].arg[1], int(rs[1].src[0].arg), stride(rs[1])) == ("global", 3, 16)
    assert (rs[2].arg[1], int(rs[2].src[0].arg), stride(rs[2]), origin(rs[2])) == ("local", 16, 1, 1)
    again = apply_opts(ast, [Opt(OptOps.LOCAL, 1, 16), Opt(OptOps.UPCAST, 1, 3)])
    assert 1 not in ranges(again) and ranges(again)[3].arg[1] == "upcast"  # the outer part is used up


def test_vec4_lanes_over_a_ragged_range_are_guarded() -> None:
    ast = kernel(buf(6, 5) * 2.0)  # 5 columns: the second quad has one lane
    out = apply_opts(ast, [Opt(OptOps.VECTOR, 1)])
    lanes = [r for r in ranges(out).values() if r.arg[1] == "vector"]
    assert len(lanes) == 1 and int(lanes[0].src[0].arg) == 4
    assert len(out.src[0].src) == 4  # the store is guarded past the 5th column


def test_a_guarded_product_guards_each_factor() -> None:
    # a k that is not a multiple of the unroll: the zeros go into the factors (the staged tiles), not the product
    ast = kernel(matmul(buf(8, 10), buf(10, 8)))
    out = apply_opts(ast, [Opt(OptOps.UNROLL, 2, 4)])
    (red,) = [n for n in out.toposort() if n.op is Ops.REDUCE]
    # each factor reads 0 past k's end: a where, or a load gated by the same condition (which reads 0 there itself)
    assert red.src[0].op is Ops.MUL
    assert all(f.op is Ops.WHERE or (f.op is Ops.LOAD and len(f.src) == 3) for f in red.src[0].src), red.src[0].src


def test_a_split_that_does_not_divide_guards_loads_and_the_store() -> None:
    ast = kernel(buf(10) + 1.0)
    out = apply_opts(ast, [Opt(OptOps.LOCAL, 0, 4)])
    store = out.src[0]
    assert len(store.src) == 4 and store.src[3].dtype == dtypes.bool  # STORE(buf, index, value, valid)
    loads = [n for n in out.toposort() if n.op is Ops.LOAD]
    assert loads and all(len(n.src) == 3 for n in loads)


def test_opts_refuse_what_does_not_apply() -> None:
    ast = kernel(buf(6, 5) * 2.0)
    with pytest.raises(OptError, match="no range 7"):
        apply_opts(ast, [Opt(OptOps.LOCAL, 7, 4)])
    with pytest.raises(OptError, match="splits reduce ranges"):
        apply_opts(ast, [Opt(OptOps.UNROLL, 0, 2)])
    with pytest.raises(OptError, match="no single contraction"):
        apply_opts(ast, [Opt(OptOps.STAGE, 0)])


def test_opts_are_data() -> None:
    opts = (Opt(OptOps.VECTOR, 1), Opt(OptOps.LOCAL, 1, 32), Opt(OptOps.STAGE, 0))
    assert tuple(Opt.from_data(o.as_data()) for o in opts) == opts
    assert repr(opts[1]) == "LOCAL(1, 32)"


def test_the_heuristic_tiles_a_contraction_and_stages_both_operands() -> None:
    ast = kernel(matmul(buf(256, 128), buf(128, 256)))
    opts = choose_opts(ast, LIMITS)
    assert [o.op for o in opts][-2:] == [OptOps.STAGE, OptOps.STAGE]
    out = apply_opts(ast, opts)
    tiles = [n for n in out.toposort() if n.op is Ops.DEFINE_LOCAL]
    assert len(tiles) == 2 and all(n.arg[1] > 0 for n in tiles)
    assert all(any(o.op is OptOps.STAGE for o in c) for c in candidate_opts(ast, LIMITS)[:3])


def test_the_program_of_a_tiled_kernel() -> None:
    ast = kernel(matmul(buf(256, 128), buf(128, 256)))
    prog = lower("k", ast, choose_opts(ast, LIMITS), lanes=True, vec_storage=lambda d: True)
    ops = [i.op for i in prog.instrs]
    assert prog.workgroup == 256 and ops.count("barrier") == 2  # one fill per k step, its reads, one barrier each
    assert "reg" in ops and "set" in ops  # the next step is loaded into registers while this one is multiplied
    assert all(s.vec for s in prog.shared) and all(b.vec for b in prog.buffers)
    updates = [i for i in prog.instrs if i.op == "update"]
    assert updates and all(len(i.srcs) == 3 for i in updates)  # acc + a * b: an fma each


def test_a_row_kernel_groups_its_reductions() -> None:
    x = buf(48, 1024)
    mx = UOp(Ops.REDUCE_AXIS, F32, (x,), (Ops.MAX, (1,)))
    out = x - UOp(Ops.EXPAND, F32, (mx,), (48, 1024))
    ast = kernel(out)
    opts = choose_opts(ast, LIMITS)
    assert {o.op for o in opts} >= {OptOps.GROUP, OptOps.LOCAL, OptOps.VECTOR}
    prog = lower("k", ast, opts, lanes=True, vec_storage=lambda d: True)
    assert [i.op for i in prog.instrs].count("group") == 1 and prog.workgroup in (64, 128, 256, 512, 1024)
    c = lower("k", ast, (), lanes=False, wide_float_sums=True)  # the C side: no workgroup, loops
    assert c.workgroup == 1 and "group" not in [i.op for i in c.instrs]


def test_split_reductions_sum_slices_first() -> None:
    x = buf(1 << 20)
    total = UOp(Ops.REDUCE_AXIS, F32, (x,), (Ops.ADD, (0,)))
    sink = UOp(Ops.SINK, dtypes.void, (total,))
    split = split_reductions(sink, 512)
    reduces = [n for n in split.toposort() if n.op is Ops.REDUCE_AXIS]
    assert len(reduces) == 2 and any(n.op is Ops.CONTIGUOUS for n in split.toposort())
    assert split_reductions(sink, 0) is sink  # a backend that asks for none
    small = UOp(Ops.SINK, dtypes.void, (UOp(Ops.REDUCE_AXIS, F32, (buf(1000),), (Ops.ADD, (0,))),))
    assert split_reductions(small, 512) is small  # too little work for a second kernel


def test_a_gated_sum_of_sums_is_one_contraction() -> None:
    """A convolution's input gradient: sum over window positions of a gated sum over channels."""
    ast = kernel(matmul(buf(32, 40), buf(40, 36)))
    red = next(n for n in ast.toposort() if n.op is Ops.REDUCE)
    (k,) = red.src[1:]
    outer = k.replace(arg=(99, "reduce"))
    gate = outer < 2
    nested = UOp(Ops.REDUCE, F32, (UOp(Ops.WHERE, F32, (gate, red, UOp.const(F32, 0.0))), outer), Ops.ADD)
    store = ast.src[0]
    wrapped = ast.replace(src=(store.replace(src=(*store.src[:2], nested)),))
    assert find_contraction(wrapped, ranges_of(wrapped)) is None
    c = canonical(wrapped)
    found = find_contraction(c, ranges_of(c))
    assert found is not None and set(found.k) == {outer, k}


def test_a_sum_gated_by_its_own_inner_sum_stays_nested() -> None:
    """sum over columns of relu(x @ w): the gate reads the inner sum, so merging the sums would bind the
    contraction range around a sum that binds it again (WGSL then read a value out of its loop's scope)."""
    ast = kernel(matmul(buf(32, 40), buf(40, 36)))
    red = next(n for n in ast.toposort() if n.op is Ops.REDUCE)
    outer = next(r for r in ranges(ast).values() if r.arg[1] == "global").replace(arg=(99, "reduce"))
    relu = UOp(Ops.WHERE, F32, (UOp.const(F32, 0.0) < red, red, UOp.const(F32, 0.0)))
    nested = UOp(Ops.REDUCE, F32, (relu, outer), Ops.ADD)
    assert canonical(nested) is nested


def test_half_sums_accumulate_in_float32_and_stay_contractions() -> None:
    half = dtypes.float16

    def hbuf(*shape: int) -> UOp:
        return UOp(Ops.RESHAPE, half, (UOp(Ops.BUFFER, half, (), FakeBuffer(math.prod(shape))),), shape)

    ast = kernel(matmul(hbuf(32, 40), hbuf(40, 36)))
    wide = accumulate_wide(ast)
    (red,) = [n for n in wide.toposort() if n.op is Ops.REDUCE]
    assert red.dtype == F32 and all(f.op is Ops.CAST and f.src[0].dtype == half for f in red.src[0].src)
    assert find_contraction(wide, ranges_of(wide)) is not None
    assert wide.src[0].src[-1].dtype == half  # rounded once, into the half output
    plain = kernel(UOp(Ops.REDUCE_AXIS, half, (hbuf(64, 8),), (Ops.ADD, (1,))))
    (total,) = [n for n in accumulate_wide(plain).toposort() if n.op is Ops.REDUCE]
    assert total.dtype == F32 and total.src[0].op is Ops.CAST
    single = kernel(matmul(buf(32, 40), buf(40, 36)))
    assert accumulate_wide(single) is single  # float32 kernels are left alone


def test_erf_decomposes_to_abramowitz_and_stegun() -> None:
    for x in (-2.5, -0.3, 0.0, 0.7, 3.0):
        value = simplify(erf_polynomial(UOp.const(dtypes.float64, x)))
        assert value.op is Ops.CONST and abs(value.arg - math.erf(x)) < 2e-7


def test_threefry_rounds_known_answer() -> None:
    def rotl(v: np.ndarray, r: int) -> np.ndarray:
        return (v << np.uint32(r)) | (v >> np.uint32(32 - r))

    words = [np.array([w], np.uint32) for w in (0x13198A2E, 0x03707344, 0x243F6A88, 0x85A308D3)]
    x0, x1 = threefry_rounds(*words, np.bitwise_xor, rotl, np.uint32)
    assert (int(x0[0]), int(x1[0])) == (0xC4923A9C, 0x483DF7A0)  # Random123's kat_vectors


def test_flops_count_a_matmul_as_2mnk_plus_its_epilogue() -> None:
    """ANNEAL_DEBUG=2's TFLOP/s: float operations once per point they vary with; index math is free."""
    ast = kernel(matmul(buf(48, 32), buf(32, 40)) * 2.0)
    assert flops(ast) == 2 * 48 * 40 * 32 + 48 * 40
    assert flops(kernel(buf(64, 48) + 1.0)) == 64 * 48


def test_a_grouped_reduction_gives_each_invocation_a_quad_at_least() -> None:
    assert [group_size(n, 256) for n in (128, 256, 512, 1024, 1 << 20)] == [64, 64, 128, 256, 256]
    assert group_size(1 << 20, 32) == 32  # a device's limit wins


def one_hot_rows(rows: int, tokens: UOp) -> UOp:
    """(v == tokens[t]) as float32, shape (rows, len(tokens)): the one-hot an embedding's gradient contracts."""
    (t,) = tokens.shape  # type: ignore[misc]
    iota = view(UOp(Ops.IOTA, dtypes.int64, (), rows), (rows, t), (rows, 1))
    return UOp(Ops.CAST, F32, (UOp(Ops.CMPEQ, dtypes.bool, (iota, view(tokens, (rows, t), (1, t)))),))


def test_a_one_hot_operand_skips_the_steps_where_its_tile_is_zero() -> None:
    # an embedding's gradient over a vocabulary: 4096 rows of a one-hot, most 64-row tiles zero in most k steps
    tokens = UOp(Ops.RESHAPE, dtypes.int64, (UOp(Ops.BUFFER, dtypes.int64, (), FakeBuffer(512)),), (512,))
    ast = kernel(matmul(one_hot_rows(4096, tokens), buf(512, 64)))
    opts = choose_opts(ast, LIMITS)
    assert Opt(OptOps.SKIP, 0) in opts and Opt(OptOps.SKIP, 1) not in opts
    prog = lower("k", ast, opts, lanes=True, vec_storage=lambda d: True)
    flags = [s for s in prog.shared if s.name.startswith("skip")]
    assert len(flags) == 1 and flags[0].count == 1
    marks = [i for i in prog.instrs if i.op == "store" and i.arg[1] == flags[0].name]
    assert len(marks) == 1 and len(marks[0].srcs) == 3  # stored where the invocation's elements are not all zero
    loops = [i for i in prog.instrs if i.op == "loop"]
    assert any(isinstance(i.srcs[1], str) for i in loops)  # the inner loop's end: zero where no mark was stored
    # a short one-hot (65 letters, one tile) and a dense operand take no SKIP; SKIP needs the operand staged
    assert not any(o.op is OptOps.SKIP for o in choose_opts(kernel(matmul(one_hot_rows(65, tokens), buf(512, 64))),
                                                           LIMITS))  # fmt: skip
    dense = kernel(matmul(buf(256, 128), buf(128, 256)))
    assert not any(o.op is OptOps.SKIP for o in choose_opts(dense, LIMITS))
    with pytest.raises(OptError, match="not staged"):
        apply_opts(ast, [Opt(OptOps.SKIP, 0)])


def test_a_staged_tile_keeps_its_big_operands_contiguous_range_innermost() -> None:
    # a weight gradient X^T dY with X scaled per row (a layer norm's recomputation reads its statistics one apart
    # along k): X steps through memory by 1 along m, the statistics along k. The tile keeps m innermost, so it is
    # filled and read as vec4s (with k innermost it was scalar: eight shared loads per k step instead of two)
    x, scale = buf(512, 256), buf(512)
    scaled = x * view(scale, (512, 256), (512, 1))
    ast = kernel(matmul(UOp(Ops.PERMUTE, F32, (scaled,), (1, 0)), buf(512, 256)))
    opts = choose_opts(ast, LIMITS)
    prog = lower("k", ast, opts, lanes=True, vec_storage=lambda d: True)
    tiles = [s for s in prog.shared if s.name.startswith("tile")]
    assert len(tiles) == 2 and all(s.vec for s in tiles), tiles

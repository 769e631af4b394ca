"""The kernel optimizer: which parallel strategy a kernel gets, as data a renderer follows.

Three strategies, each a way of splitting the kernel's ranges over the device:

* ``flat``: one invocation per output element (global ranges folded into one index),
  ``local`` invocations per workgroup. Elementwise kernels and small reductions.
* ``group``: one workgroup per output element; its invocations split the reduction range
  and combine partial results in workgroup memory (a tree). Row reductions: sum, max,
  softmax and layernorm statistics.
* ``tile``: a matmul-like kernel (a sum over k of a product of two operands, one not
  depending on n, the other not on m) computes TM x TN output tiles per workgroup, staging
  TK-deep slices of both operands in workgroup memory; each invocation accumulates an
  RM x RN register tile (upcast). The rest of the expression (bias, activation) runs as an
  epilogue on the accumulators.

``choose_opts`` is the hand-written heuristic; it reads the device limits, never constants
of one GPU. (A BEAM search over these parameters is future work; see docs.)
"""

from __future__ import annotations

from dataclasses import dataclass

from anneal_ir import Ops, UOp
from anneal_schedule.backend import Limits


@dataclass(frozen=True)
class Contraction:
    """The parts of a matmul-like kernel."""

    reduce: UOp  # the REDUCE(ADD) node
    k: tuple[UOp, ...]  # its ranges (several: a reduction over batch and time), flattened in order
    a: UOp  # factor depending on m (and k), not on n
    b: UOp  # factor depending on n (and k), not on m
    m: UOp  # global range of the output rows
    n: UOp  # global range of the output columns


@dataclass(frozen=True)
class KernelOpts:
    strategy: str  # "flat", "group" or "tile"
    local: int  # invocations per workgroup
    tile: tuple[int, int, int] = (0, 0, 0)  # TM, TN, TK (strategy "tile")
    upcast: tuple[int, int] = (1, 1)  # RM, RN register tile per invocation (strategy "tile")
    contraction: Contraction | None = None


def ranges_of(ast: UOp) -> dict[UOp, frozenset[UOp]]:
    """For every node, the RANGEs it varies with (a REDUCE closes its own)."""
    out: dict[UOp, frozenset[UOp]] = {}
    for n in ast.toposort():
        if n.op is Ops.RANGE:
            out[n] = frozenset({n})
        elif n.op is Ops.REDUCE:
            out[n] = out[n.src[0]] - frozenset(n.src[1:])
        else:
            out[n] = frozenset().union(*(out[s] for s in n.src))
    return out


def _end(r: UOp) -> int:
    """A range's extent for the heuristics (a symbolic one at its upper bound)."""
    return int(r.src[0].vmax)


def find_contraction(ast: UOp, deps: dict[UOp, frozenset[UOp]]) -> Contraction | None:
    reduces = [n for n in ast.toposort() if n.op is Ops.REDUCE]
    if len(reduces) != 1:
        return None
    red = reduces[0]
    if red.arg is not Ops.ADD or red.src[0].op is not Ops.MUL:
        return None
    k = tuple(red.src[1:])
    a, b = red.src[0].src
    da, db = deps[a] - set(k), deps[b] - set(k)
    if not all(r in deps[a] and r in deps[b] for r in k):
        return None
    only_a, only_b = sorted(da - db, key=_end), sorted(db - da, key=_end)
    if not only_a or not only_b:
        return None
    return Contraction(red, k, a, b, only_a[-1], only_b[-1])


def choose_opts(ast: UOp, limits: Limits) -> KernelOpts:
    """The heuristic: tile big contractions, group big row reductions, flat for the rest."""
    local = min(256, limits.max_workgroup_invocations, limits.max_workgroup_size[0])
    deps = ranges_of(ast)
    globals_ = [n for n in deps if n.op is Ops.RANGE and n.arg[1] == "global"]
    outputs = 1
    for r in globals_:
        outputs *= _end(r)
    c = find_contraction(ast, deps)
    k_size = 1
    for r in c.k if c is not None else ():
        k_size *= _end(r)
    if c is not None and _end(c.m) >= 32 and _end(c.n) >= 32 and k_size >= 16:
        tm = tn = 128 if _end(c.m) >= 128 and _end(c.n) >= 128 and outputs >= (1 << 20) else 64
        # TK=32 measured slower on an H200; for 128x128 tiles BEAM preferred an 8x4 register tile (512
        # invocations) to 8x8 (256) there: benchmarks/RESULTS.md
        tk, rm, rn = 16, tm // 16, tn // 16
        if tm == 128 and limits.max_workgroup_invocations >= 512:
            rn = 4
        shared = (tm + 1 + tn) * tk * 4
        if (tm // rm) * (tn // rn) <= limits.max_workgroup_invocations and shared <= limits.max_shared_memory:
            return KernelOpts("tile", (tm // rm) * (tn // rn), (tm, tn, tk), (rm, rn), c)
    reduces = [n for n in deps if n.op is Ops.REDUCE]
    if reduces and limits.max_shared_memory >= local * 4 * len(reduces):
        longest = 0
        for red in reduces:
            size = 1
            for r in red.src[1:]:
                size *= _end(r)
            longest = max(longest, size)
        if longest >= 128 and outputs <= 65536:  # few outputs, long reductions: share each across a workgroup
            return KernelOpts("group", local)
    return KernelOpts("flat", local)


def candidate_opts(ast: UOp, limits: Limits) -> list[KernelOpts]:
    """The heuristic's choice first, then the variants a BEAM search times on the device."""
    first = choose_opts(ast, limits)
    out = [first]
    max_local = min(limits.max_workgroup_invocations, limits.max_workgroup_size[0])
    locals_ = [n for n in (64, 128, 256, 512, 1024) if n <= max_local]
    deps = ranges_of(ast)
    c = find_contraction(ast, deps)
    if c is not None and first.strategy == "tile":
        for tm, tn in ((64, 64), (128, 128), (128, 64), (64, 128)):
            for tk in (8, 16, 32):
                for rm, rn in ((4, 4), (8, 8), (8, 4), (4, 8)):
                    threads = (tm // rm) * (tn // rn)
                    if threads > max_local or threads < 32 or (tm + 1 + tn) * tk * 4 > limits.max_shared_memory:
                        continue
                    out.append(KernelOpts("tile", threads, (tm, tn, tk), (rm, rn), c))
    if first.strategy == "group" or any(n.op is Ops.REDUCE for n in deps):
        out += [KernelOpts("group", n) for n in locals_ if limits.max_shared_memory >= n * 4]
    out += [KernelOpts("flat", n) for n in locals_]
    unique: list[KernelOpts] = []
    for o in out:
        if o not in unique:
            unique.append(o)
    return unique

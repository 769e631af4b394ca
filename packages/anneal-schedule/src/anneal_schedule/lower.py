"""Lowering: a kernel after opts becomes one linear program, which every renderer prints.

The program (``Program``) is a list of instructions: lets (one per computed value, its operands by
name), loops, accumulators and their updates, loads and stores, barriers, workgroup memory and
the cooperative tree that combines a grouped reduction. Renderers (WGSL, C) spell each instruction
from a table; the decisions are all made here, once:

* **hoisting**: every value is emitted once, in the outermost block where all the ranges it depends
  on exist (``Block``), so loop-invariant work leaves the loops;
* **ranges by kind** (``anneal_schedule.opt``): global ones come from the workgroup index ``w``, local
  and grouped ones from the invocation index ``lid``, loop and reduce ones are loops; upcast ranges
  are expanded (one copy of the store per value), unrolled ones become one accumulator update per
  value inside the loop, and with ``lanes`` a vector range is the four lanes of vec4 values (else it
  is expanded too);
* **reductions** that share their loops (the copies of an upcast register tile) share one loop nest,
  their updates interleaved;
* **staged operands** (DEFINE_LOCAL): before the reads, once per step of the loops around them, the
  workgroup fills the tile in workgroup memory (between barriers), four lanes at a time where the
  operand's memory is contiguous;
* **vec4 memory**: a buffer read or written as aligned vec4s somewhere is declared as vec4s; its
  other accesses pick components.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

from anneal_ir import DType, Ops, UOp, dtypes
from anneal_ir.sint import sint, sprod, upper, variables
from anneal_schedule.analysis import Affine, affine, const_extent, identity, kind, nodes_below
from anneal_schedule.blocks import Block
from anneal_schedule.decompose import decompositions
from anneal_schedule.opt import Opt, apply_opts, origin, stride, substitute
from anneal_schedule.simplify import simplify_kernel

Operand = str | UOp  # the name of an earlier instruction's value, or a CONST


@dataclass(frozen=True)
class Instr:
    """One instruction. ``op`` is an ALU Ops member for a computed value, else one of:

    load (arg: space, slot, mode), store (arg: space, slot, mode; srcs: index, value[, valid]),
    acc (arg: identity CONST), update (srcs: acc, value, or acc, a, b for acc + a * b; arg: Ops.ADD or
    Ops.MAX), reg (a mutable register: srcs: its first value), set (srcs: its new value), loop (srcs: start,
    end, step; arg: (kind, range id), kind "loop", "reduce" or "column"), end, barrier, acc_array (an array of
    accumulators, srcs: its size; arg: identity), update_at (srcs: array, element, value; arg: Ops.ADD), acc_at
    (srcs: array, element), group (srcs: own value; arg: shared name, size, combine, lanes kept apart), lanes (the
    vec4 0, 1, 2, 3), extract (srcs: vec4; arg: component), combine (the four lanes of a vec4 acc;
    arg: combine), exit (srcs: condition: every invocation of the workgroup leaves), var (arg: name).

    Load and store modes: "elem" (one element), "quad" (index counts vec4s), "gather" (a vec4 index:
    four elements). Spaces: "global" (a kernel argument, slot = its number) and "local" (workgroup
    memory, slot = its name)."""

    op: Ops | str
    name: str = ""
    dtype: DType = dtypes.void
    width: int = 1
    srcs: tuple[Operand, ...] = ()
    arg: Any = None


@dataclass(frozen=True)
class BufferDecl:
    slot: int
    dtype: DType
    written: bool
    vec: bool  # declared as vec4s


@dataclass(frozen=True)
class SharedDecl:
    name: str
    dtype: DType
    count: int  # elements (vec4s when vec)
    vec: bool


@dataclass
class Program:
    name: str
    instrs: list[Instr]
    buffers: tuple[BufferDecl, ...]
    shared: tuple[SharedDecl, ...]
    groups: sint  # workgroups to dispatch
    workgroup: int  # invocations per workgroup
    variables: tuple[str, ...]
    opts: tuple[Opt, ...]
    ast: UOp  # the kernel after opts and expansion

    def describe(self) -> str:
        return ", ".join(repr(o) for o in self.opts) or "no opts"


class LowerError(ValueError):
    """A kernel (or an opt list) this lowering cannot express; the message says why."""


def end_of(r: UOp) -> sint:
    return int(r.src[0].arg) if r.src[0].op is Ops.CONST else r.src[0]


def aligned_along(index: UOp, lanes: set[UOp] | frozenset[UOp], memo: dict[UOp, Affine | None],
                  deps: dict[UOp, frozenset[UOp]] | None = None) -> UOp | None:  # fmt: skip
    """The lane range along which index reads four neighbouring, 16-byte aligned elements (or None)."""
    aff = affine(index, memo)
    if aff is None:
        return None
    coeffs, offset = aff
    along = [r for r in coeffs if r in lanes]
    if len(along) != 1 or coeffs[along[0]] != 1 or offset % 4:
        return None
    for r, c in coeffs.items():
        if r is not along[0] and (c % 4 or (deps is not None and not deps.get(r, frozenset()).isdisjoint(lanes))):
            return None
    return along[0]


def quad_index(index: UOp, along: UOp, memo: dict[UOp, Affine | None]) -> UOp:
    """(index - along) / 4: the vec4 an aligned index falls in, as index arithmetic."""
    coeffs, offset = affine(index, memo)  # type: ignore[misc]
    terms = [
        r if c == 4 else r * (c // 4) for r, c in sorted(coeffs.items(), key=lambda kv: kv[0].key) if r is not along
    ]
    return _sum(terms, offset // 4)


def _sum(terms: list[UOp], offset: int) -> UOp:
    """terms + offset as index arithmetic, built in a fixed order (equal sums are one node)."""
    out: UOp | None = None
    for t in terms:
        out = t if out is None else out + t
    if out is None:
        return UOp.const(dtypes.int64, offset)
    return out + offset if offset else out


def expand(ast: UOp, kinds: frozenset[str]) -> UOp:
    """Each range of these kinds replaced by each of its values: one copy of every store per value (a
    register tile). Workgroup tiles (DEFINE_LOCAL) keep their ranges: the fill iterates them."""
    ranges = sorted({n for n in _outside_tiles(ast) if n.op is Ops.RANGE and kind(n) in kinds}, key=lambda r: r.arg[0])
    if not ranges:
        return ast
    stores: list[UOp] = []
    for values in itertools.product(*(range(int(r.src[0].arg)) for r in ranges)):
        mapping = {r: UOp.const(dtypes.int64, v) for r, v in zip(ranges, values)}
        stores += [_substitute_outside_tiles(s, mapping) for s in ast.src]
    return simplify_kernel(UOp(Ops.SINK, dtypes.void, tuple(stores)))


def _outside_tiles(root: UOp) -> list[UOp]:
    """The kernel's nodes, not looking inside staged tiles (their operands are computed by the fill)."""
    return nodes_below(root, lambda n: n.op is not Ops.DEFINE_LOCAL)


def _substitute_outside_tiles(root: UOp, mapping: dict[UOp, UOp]) -> UOp:
    done: dict[UOp, UOp] = dict(mapping)

    def visit(n: UOp) -> UOp:
        stack = [(n, False)]
        while stack:
            node, ready = stack.pop()
            if node in done:
                continue
            if node.op is Ops.DEFINE_LOCAL:
                done[node] = node
                continue
            if not ready:
                stack.append((node, True))
                stack.extend((s, False) for s in node.src if s not in done)
                continue
            src = tuple(done[s] for s in node.src)
            done[node] = node if src == node.src else node.replace(src=src)
        return done[n]

    return visit(root)


@dataclass
class Fill:
    """How a staged tile is filled: the operand over fresh ranges (one per tile range, iterated by the fill
    loop), which of them is four lanes (or None), and the tile's declaration."""

    decl: SharedDecl
    operand: UOp
    ranges: tuple[UOp, ...]  # the fresh ranges the fill iterates, in the tile's layout order
    lane: UOp | None  # the fresh range of the four lanes the fill computes at a time
    lanes_already: bool  # the tile's lane range is a vector range of the kernel
    order: tuple[UOp, ...] = ()  # the order invocations take the elements in: memory-contiguous ranges fastest
    skip: bool = False  # a step whose tile is all zeros leaves out its multiply-adds (opt SKIP)


@dataclass
class Lowerer:
    name: str
    ast: UOp
    lanes: bool  # vector ranges are vec4 lanes (WGSL); else they are expanded
    vec_storage: Any  # dtype -> bool: may this buffer be declared as vec4s?
    wide_float_sums: bool = False  # float32 sums accumulate in float64 (C, to match the numpy path)
    column_ids: frozenset[int] = frozenset()  # loop ranges (by id) whose sums run as columns
    instrs_of: dict[int, list[Instr]] = field(default_factory=dict)
    names: dict[UOp, tuple[Operand, Block]] = field(default_factory=dict)
    deps: dict[UOp, frozenset[UOp]] = field(default_factory=dict)
    lane_ranges: set[UOp] = field(default_factory=set)
    counter: int = 0
    affines: dict[UOp, Affine | None] = field(default_factory=dict)
    vec_buffers: set[int] = field(default_factory=set)
    shared: list[SharedDecl] = field(default_factory=list)
    group_arrays: dict[tuple[DType, int], str] = field(default_factory=dict)  # a grouped tree's array, shared
    fills: dict[UOp, Fill] = field(default_factory=dict)
    filled: set[tuple[UOp, int]] = field(default_factory=set)
    quads: dict[tuple[UOp, UOp], str] = field(default_factory=dict)
    quad_blocks: dict[str, Block] = field(default_factory=dict)
    reduces: list[UOp] = field(default_factory=list)
    workgroup: int = 1
    tree_lanes: int = 1  # local lanes a grouped reduction's tree keeps apart (1: its tree spans the workgroup)
    lane_name: str = ""
    block_ends: dict[int, list[Instr]] = field(default_factory=dict)  # instructions that close a loop body
    names_of_regs: dict[str, tuple[DType, int]] = field(default_factory=dict)
    lid: UOp = field(default_factory=lambda: UOp.const(dtypes.int64, 0))
    columns: set[UOp] = field(default_factory=set)  # the ranges of column_ids
    nonzero_steps: dict[int, list[str]] = field(default_factory=dict)  # step block -> "its tiles hold a nonzero"

    # ---- analysis ----
    def analyse(self) -> None:
        self.reduces = [n for n in _outside_tiles(self.ast) if n.op is Ops.REDUCE]
        self.deps = {}
        for n in self.ast.toposort():
            if n.op is Ops.RANGE:
                self.deps[n] = frozenset({n})
            elif n.op is Ops.REDUCE:
                self.deps[n] = self.deps[n.src[0]] - frozenset(n.src[1:])
            elif n.op is Ops.DEFINE_LOCAL and n in self.fills:  # varies with what its fill does not iterate
                fill = self.fills[n]
                self.note(fill.operand)
                self.deps[n] = self.deps[fill.operand] - frozenset(fill.ranges) - {fill.lane}
            elif n.op is Ops.DEFINE_LOCAL:
                self.deps[n] = self.deps[n.src[0]] - frozenset(n.src[1:])
            else:
                self.deps[n] = frozenset().union(*(self.deps[s] for s in n.src))

    def note(self, root: UOp) -> None:
        """deps for nodes made after analyse() (substituted copies)."""
        for n in root.toposort():
            if n not in self.deps:
                if n.op is Ops.RANGE:
                    self.deps[n] = frozenset({n})
                elif n.op in (Ops.REDUCE, Ops.DEFINE_LOCAL):
                    self.deps[n] = self.deps[n.src[0]] - frozenset(n.src[1:])
                else:
                    self.deps[n] = frozenset().union(*(self.deps[s] for s in n.src))

    def width(self, u: UOp) -> int:
        return 4 if self.lane_ranges and not self.deps[u].isdisjoint(self.lane_ranges) else 1

    # ---- emission helpers ----
    def fresh(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def emit(self, block: Block, instr: Instr) -> None:
        self.instrs_of.setdefault(id(block), []).append(instr)

    def place(self, u: UOp, current: Block) -> Block:
        found = current.outermost(self.deps[u])
        if found is None:
            raise LowerError(f"kernel {self.name}: {u.op.name} is used outside the loop of its range")
        return found

    def ref(self, u: UOp, current: Block) -> Operand:
        if u.op is Ops.CONST:
            return u
        found = self.names.get(u)
        if found is not None and found[1] in current.ancestors():
            return found[0]
        block = self.place(u, current)
        value = self.value(u, block)
        self.names[u] = (value, block)
        return value

    def let(self, block: Block, u: UOp, op: Ops | str, srcs: tuple[Operand, ...], arg: Any = None,
            width: int | None = None, dtype: DType | None = None) -> str:  # fmt: skip
        name = self.fresh()
        w = self.width(u) if width is None else width
        self.emit(block, Instr(op, name, dtype or u.dtype, w, srcs, arg))
        return name

    def value(self, u: UOp, b: Block) -> Operand:
        op = u.op
        if op is Ops.RANGE:
            raise LowerError(f"kernel {self.name}: range {u.arg} is used where it is not bound")
        if op is Ops.DEFINE_VAR:
            return self.let(b, u, "var", (), u.arg[0], width=1)
        if op is Ops.LOAD:
            return self.load(u, b)
        if op is Ops.REDUCE:
            self.reduce(u, b)
            return self.names[u][0]
        if op in (Ops.ERF, Ops.THREEFRY):  # expanded only here: the simplifier never walks their insides
            expanded = decompositions.rewrite(u)  # this node alone: its sources are the kernel's own nodes
            assert expanded is not None
            self.note(expanded)
            return self.ref(expanded, b)
        srcs = tuple(self.ref(s, b) for s in u.src)
        # a division of non-negative integers needs none of the care negative operands do
        nonneg = op in (Ops.IDIV, Ops.MOD) and u.dtype.is_int and u.src[0].vmin >= 0 and u.src[1].vmin > 0
        return self.let(b, u, op, srcs, "nonneg" if nonneg else None)

    # ---- memory ----
    def load(self, u: UOp, b: Block) -> Operand:
        buf = u.src[0]
        if buf.op is Ops.DEFINE_LOCAL:
            return self.load_tile(u, b)
        w = self.width(u)
        slot = buf.arg
        index, valid = u.src[1], (u.src[2] if len(u.src) == 3 else None)
        if w == 4 and self.lane_uniform(valid) and slot in self.vec_buffers:
            along = aligned_along(index, self.lane_ranges, self.affines, self.deps)
            if along is not None:
                q = quad_index(index, along, self.affines)
                self.note(q)
                gate = (self.ref(valid, b),) if valid is not None else ()
                return self.let(b, u, "load", (self.ref(q, b), *gate), ("global", slot, "quad"))
        index = self.hoisted(index)
        srcs = (self.ref(index, b),) + ((self.ref(valid, b),) if valid is not None else ())
        return self.let(b, u, "load", srcs, ("global", slot, "gather" if w == 4 else "elem"))

    def hoisted(self, index: UOp) -> UOp:
        """A load's index summed in the order its terms vary: those of fewer ranges first, those that differ
        between vec4 lanes last. The partial sum of loop-invariant terms then leaves the loop, and a gather makes
        its four addresses with one vec4 add (in the kernel's order, a lane term first made every add a vec4 add)."""
        aff = affine(index, self.affines)
        if aff is None or len(aff[0]) < 2:
            return index
        terms = sorted(aff[0].items(), key=lambda kv: (len(self.deps[kv[0]]), kv[0].key))
        uniform = [t if c == 1 else t * c for t, c in terms if self.width(t) == 1]
        lanes = [t if c == 1 else t * c for t, c in terms if self.width(t) == 4]
        out = _sum(uniform, aff[1]) if uniform or aff[1] else None  # (no scalar part: no vec4 add of a zero)
        for t in lanes:
            out = t if out is None else out + t
        assert out is not None
        self.note(out)
        return out

    def load_tile(self, u: UOp, b: Block) -> Operand:
        tile = u.src[0]
        fill = self.fills[tile]
        home = b.outermost(self.deps[tile])  # the block of the tile's step: reads may sit in loops inside it
        assert home is not None
        self.fill(tile, home)
        index = u.src[1]
        w = self.width(u)
        if not fill.decl.vec:
            return self.let(b, u, "load", (self.ref(index, b),), ("local", fill.decl.name, "elem"))
        if w == 4:
            along = aligned_along(index, self.lane_ranges, self.affines, self.deps)
            if along is None:
                raise LowerError(f"kernel {self.name}: a vec4 read of a tile that is not along its lanes")
            q = quad_index(index, along, self.affines)
            self.note(q)
            return self.let(b, u, "load", (self.ref(q, b),), ("local", fill.decl.name, "quad"))
        aff = affine(index, self.affines)
        if aff is None or any(c % 4 for c in aff[0].values()):
            return self.let(b, u, "load", (self.ref(index, b),), ("local", fill.decl.name, "elem"))
        q = _sum(
            [r if c == 4 else r * (c // 4) for r, c in sorted(aff[0].items(), key=lambda kv: kv[0].key)], aff[1] // 4
        )
        self.note(q)
        qname = self.quads.get((tile, q))
        if qname is None or not self.visible(qname, b):
            qb = self.place(q, b) if q.op is not Ops.CONST else b
            qb = qb if self.deps[tile] <= qb.scope else b
            qname = self.fresh()
            self.emit(qb, Instr("load", qname, u.dtype, 4, (self.ref(q, qb),), ("local", fill.decl.name, "quad")))
            self.quads[(tile, q)] = qname
            self.quad_blocks[qname] = qb
        return self.let(b, u, "extract", (qname,), aff[1] % 4, width=1)

    def visible(self, name: str, b: Block) -> bool:
        return self.quad_blocks.get(name) in b.ancestors()

    def fill(self, tile: UOp, b: Block) -> None:
        """Fill, in block b, every tile read there (once). Each invocation computes the same few elements of
        each tile in every step (unrolled: element e = lid + j * workgroup, four lanes at a time along the lane
        range). Inside a loop the tile's operand varies with (a step of k), the next step's elements are
        computed into registers while the workgroup multiplies this step's (double buffering): the loop body
        begins by storing the registers, then a barrier, then the next step's loads; it ends with a barrier."""
        if (tile, id(b)) in self.filled:
            return
        tiles = [t for t in self.fills if (t, id(b)) not in self.filled and b.outermost(self.deps[t]) is b]
        tiles = tiles if tile in tiles else [tile, *tiles]
        step = self.loop_range_of(b)
        prefetch = step is not None and b.parent is not None
        if not prefetch:
            self.emit(b, Instr("barrier"))
        nexts: list[tuple[str, UOp]] = []
        elements = []
        for t in tiles:
            self.filled.add((t, id(b)))
            elements += [(self.fills[t], *e) for e in self.fill_elements(self.fills[t])]
        stepped = [value for _, value, _, _ in elements if prefetch and step is not None and step in self.deps[value]]
        nonzero: list[tuple[Fill, Operand, int, UOp | None]] = []  # a skip tile's elements: (fill, value, width, valid)
        registers: dict[UOp, tuple[UOp, UOp]] = {}  # a stepped value -> (its first step's, the next step's)
        if stepped and step is not None:
            last = simplify_kernel(step.src[0] - 1)
            clamped = UOp(Ops.WHERE, dtypes.int64, (step < last, step + 1, last))  # the last step loads itself
            pairs = self.simplified([[substitute(v, {step: UOp.const(dtypes.int64, 0)}), substitute(v, {step: clamped})]
                                     for v in stepped])  # fmt: skip
            registers = {v: (p[0], p[1]) for v, p in zip(stepped, pairs)}
        for fill, value, index, valid in elements:
            store_srcs: tuple[Operand, ...]
            if value in registers:
                assert b.parent is not None
                first, following = registers[value]
                reg = self.fresh("pf")
                w = self.width(value)
                self.emit(b.parent, Instr("reg", reg, value.dtype, w, (self.ref(first, b.parent),)))
                self.names_of_regs[reg] = (value.dtype, w)
                nexts.append((reg, following))
                stored: Operand = reg
                vw = w
            else:
                stored, vw = self.ref(value, b), self.width(value)
            if fill.skip and prefetch:
                nonzero.append((fill, stored, vw, valid))
            if fill.decl.vec and vw == 1:
                stored = self.let(b, value, "splat", (stored,), width=4)
            store_srcs = (self.ref(index, b), stored) + ((self.ref(valid, b),) if valid is not None else ())
            self.emit(b, Instr("store", "", value.dtype, 4 if fill.decl.vec else 1, store_srcs,
                               ("local", fill.decl.name, "quad" if fill.decl.vec else "elem")))  # fmt: skip
        marks = self.mark_nonzero(nonzero, b) if nonzero else []
        self.emit(b, Instr("barrier"))
        for flag, mark in marks:  # this step's mark read back: some invocation stored a nonzero
            seen, same = self.fresh(), self.fresh()
            self.emit(b, Instr("load", seen, dtypes.int32, 1, (UOp.const(dtypes.int32, 0),), ("local", flag, "elem")))
            self.emit(b, Instr(Ops.CMPEQ, same, dtypes.bool, 1, (seen, mark)))
            self.nonzero_steps.setdefault(id(b), []).append(same)
        for reg, following in nexts:
            self.emit(b, Instr("set", reg, following.dtype, self.names_of_regs[reg][1], (self.ref(following, b),)))
        if prefetch:
            self.block_ends.setdefault(id(b), []).append(Instr("barrier"))

    def mark_nonzero(
        self, elements: list[tuple[Fill, Operand, int, UOp | None]], b: Block
    ) -> list[tuple[str, Operand]]:
        """Each skip tile's flag in workgroup memory, stored this step's mark (1 + the index of the step among the
        loops around it) by the invocations that fill a nonzero element: a mark, not a boolean reset per step,
        which would race with slower invocations still reading the last step's. Returns (flag, mark) per tile."""
        out = []
        fills: list[Fill] = []
        for f, *_ in elements:
            if all(f is not g for g in fills):
                fills.append(f)
        for fill in fills:
            steps = sorted((r for r in self.deps[fill.operand] if kind(r) == "reduce"), key=lambda r: r.arg[0])
            index = steps[-1]  # where an extent is not constant: a mark seen again only computes a zero step
            if all(const_extent(r) is not None for r in steps):
                index = UOp.const(dtypes.int64, 0)
                for r in steps:  # mixed radix over the step loops
                    index = index * int(const_extent(r) or 1) + r
            mark = self.ref(simplify_kernel(index + 1), b)
            anyone: Operand | None = None
            for f, value, width, valid in elements:
                if f is not fill:
                    continue
                nz = self.fresh()
                self.emit(b, Instr(Ops.CMPNE, nz, dtypes.bool, width, (value, UOp.const(fill.operand.dtype, 0))))
                if width == 4:
                    lanes, nz = nz, self.fresh()
                    self.emit(b, Instr("combine", nz, dtypes.bool, 1, (lanes,), Ops.ADD))
                if valid is not None:
                    gated, nz = nz, self.fresh()
                    self.emit(b, Instr(Ops.AND, nz, dtypes.bool, 1, (gated, self.ref(valid, b))))
                if anyone is not None:
                    either, nz = nz, self.fresh()
                    self.emit(b, Instr(Ops.OR, nz, dtypes.bool, 1, (anyone, either)))
                anyone = nz
            assert anyone is not None
            flag = f"skip{fill.decl.name}"
            self.shared.append(SharedDecl(flag, dtypes.int32, 1, False))
            self.emit(b, Instr("store", "", dtypes.int32, 1, (UOp.const(dtypes.int32, 0), mark, anyone),
                               ("local", flag, "elem")))  # fmt: skip
            out.append((flag, mark))
        return out

    def lane_name_for(self, root: Block) -> str:
        """The vec4 0, 1, 2, 3 (defined once, first thing in the kernel)."""
        if not self.lane_name:
            self.lane_name = self.fresh("lane")
            self.emit(root, Instr("lanes", self.lane_name, dtypes.int32, 4))
        return self.lane_name

    def loop_range_of(self, b: Block, of_kind: str = "reduce") -> UOp | None:
        """The range of the loop of this kind whose body b is (None for the root and other blocks)."""
        if b.parent is None:
            return None
        new = b.scope - b.parent.scope
        r = next(iter(new)) if len(new) == 1 else None
        return r if r is not None and kind(r) == of_kind else None

    def column_reduce(self, u: UOp, b: Block, column: UOp) -> None:
        """u (and its siblings) for every value of the column at once, outside the column's loop: an array of
        accumulators filled by a loop nest whose innermost loop is the column; u is then element [column]."""
        outside = b.parent
        assert outside is not None
        saved = self.names.pop(column)
        siblings = [n for n in self.reduces if n not in self.names and self.reduce_key(n) == self.reduce_key(u)
                    and column in self.deps[n] and b.outermost(self.deps[n]) is b]  # fmt: skip
        if u not in siblings:
            siblings.insert(0, u)
        arrays = []
        for s in siblings:
            arr = self.fresh("acc")
            self.emit(outside, Instr("acc_array", arr, self.acc_dtype(s), 1, (self.size_operand(column, outside),),
                                     identity(s)))  # fmt: skip
            arrays.append(arr)
        inner = outside
        opened = []
        for r in [*(r for r in u.src[1:] if kind(r) in ("reduce", "inner")), column]:
            is_column = r is column
            inner = self.open_loop(inner, r, "column" if is_column else "reduce", "c" if is_column else "r", outside)
            opened.append(inner)
        for s, arr in zip(siblings, arrays):
            srcs = (arr, self.names[column][0], self.ref(s.src[0], inner))
            self.emit(inner, Instr("update_at", "", self.acc_dtype(s), 1, srcs, s.arg))
        for blk in reversed(opened):
            self.close(blk)
        self.names[column] = saved
        for s, arr in zip(siblings, arrays):
            at = self.fresh()
            self.emit(b, Instr("acc_at", at, self.acc_dtype(s), 1, (arr, saved[0])))
            result = at
            if self.acc_dtype(s) != s.dtype:
                result = self.fresh()
                self.emit(b, Instr(Ops.CAST, result, s.dtype, 1, (at,)))
            self.names[s] = (result, b)

    def fill_elements(self, fill: Fill) -> list[tuple[UOp, UOp, UOp | None]]:
        """(value, tile index, valid) of each element this invocation fills: e = lid + j * workgroup."""
        ends = [int(r.src[0].arg) for r in fill.ranges]
        count = math.prod(ends)
        raw: list[tuple[UOp, UOp, UOp | None]] = []
        lid = self.lid
        layout = list(fill.ranges)
        for j in range(-(-count // self.workgroup)):
            e = lid + j * self.workgroup if j else lid
            digits = split_index(e, list(fill.order), simplify=False)
            value = _substitute_outside_tiles(fill.operand, digits)
            index = e
            if list(fill.order) != layout:  # the element's place in the tile's layout
                index = UOp.const(dtypes.int64, 0)
                for r in layout:
                    index = index * int(r.src[0].arg) + digits[r]
            raw.append((value, index, None if (j + 1) * self.workgroup <= count else e < count))
        return [(v, i, g) for v, i, g in self.simplified([list(e) for e in raw])]

    def simplified(self, groups: list[list[UOp | None]] | list[list[UOp]]) -> list[list[Any]]:
        """Every node of every group simplified in one pass over their shared graph, and noted for the
        lowering; a None stays None."""
        present = [n for g in groups for n in g if n is not None]
        simple = list(simplify_kernel(UOp(Ops.SINK, dtypes.void, tuple(present))).src) if present else []
        assert len(simple) == len(present)
        done = iter(simple)
        out = [[None if n is None else next(done) for n in g] for g in groups]
        for g in out:
            for n in g:
                if n is not None:
                    self.note(n)
        return out

    # ---- reductions ----
    def reduce(self, u: UOp, b: Block) -> None:
        """u and every reduction with the same loops in the same block: one loop nest, updates interleaved.

        A reduction inside the loop over a range of ``columns`` runs outside it instead, for every column at once (an
        accumulator array, the column the innermost loop): a sum down columns reads memory in order, and what
        depends on the row alone is computed once per row."""
        column = next((c for c in self.columns if c in self.deps[u] and self.loop_range_of(b, "loop") is c), None)
        if column is not None:
            self.column_reduce(u, b, column)
            return
        key = self.reduce_key(u)
        siblings = [n for n in self.reduces if n not in self.names and self.reduce_key(n) == key
                    and b.outermost(self.deps[n]) is b]  # fmt: skip
        if u not in siblings:
            siblings.insert(0, u)
        loops = [r for r in u.src[1:] if kind(r) in ("reduce", "inner")]
        unrolls = [r for r in u.src[1:] if kind(r) == "unroll"]
        groups = [r for r in u.src[1:] if kind(r) == "group"]
        own_lanes = [r for r in u.src[1:] if kind(r) == "vector"]
        accs = []
        for s in siblings:
            acc = self.fresh("acc")
            width = 4 if (own_lanes or self.width(s) == 4) else 1
            self.emit(b, Instr("acc", acc, self.acc_dtype(s), width, (), identity(s)))
            accs.append(acc)
        inner = b
        opened = []
        for r in loops:
            inner = self.open_loop(inner, r, "reduce", "r", b)
            opened.append(inner)
        if unrolls:
            combos = list(itertools.product(*(range(int(r.src[0].arg)) for r in unrolls)))
            copies = [
                [
                    _substitute_outside_tiles(s.src[0], {r: UOp.const(dtypes.int64, v) for r, v in zip(unrolls, c)})
                    for s in siblings
                ]  # fmt: skip
                for c in combos
            ]
            values = self.simplified(copies)
        else:
            values = [[s.src[0] for s in siblings]]
        for row in values:
            for s, acc, v in zip(siblings, accs, row):
                width = 4 if own_lanes or self.width(s) == 4 else 1
                if s.arg is Ops.ADD and v.op is Ops.MUL and v.dtype == self.acc_dtype(s):  # acc += a * b
                    srcs: tuple[Operand, ...] = (acc, self.ref(v.src[0], inner), self.ref(v.src[1], inner))
                else:
                    srcs = (acc, self.ref(v, inner))
                self.emit(inner, Instr("update", "", self.acc_dtype(s), width, srcs, s.arg))
        for blk in reversed(opened):
            self.close(blk)
        for s, acc in zip(siblings, accs):
            result: str = acc
            if own_lanes:
                result = self.fresh()
                self.emit(b, Instr("combine", result, self.acc_dtype(s), 1, (acc,), s.arg))
            if groups:
                size = self.group_span(groups)
                if size != self.workgroup:
                    raise LowerError(f"kernel {self.name}: a reduction grouped over {size} invocations in a "
                                     f"workgroup of {self.workgroup}")  # fmt: skip
                # one array per dtype and size for every tree: a tree ends with a barrier after its result is read,
                # so the next one may reuse it (150 gradient norms in one kernel would not fit 150 arrays)
                partial = self.group_arrays.get((s.dtype, size))
                if partial is None:
                    partial = self.group_arrays[(s.dtype, size)] = self.fresh("partial")
                    self.shared.append(SharedDecl(partial, s.dtype, size, False))
                red = self.fresh("red")
                self.emit(b, Instr("group", red, self.acc_dtype(s), 1, (result,),
                                   (partial, size, s.arg, self.tree_lanes)))  # fmt: skip
                result = red
            if self.acc_dtype(s) != s.dtype:
                cast = self.fresh()
                self.emit(b, Instr(Ops.CAST, cast, s.dtype, self.width(s), (result,)))
                result = cast
            self.names[s] = (result, b)

    def group_span(self, groups: list[UOp]) -> int:
        """Invocations a grouped reduction's tree spans: its groups, times the lanes it keeps apart."""
        return math.prod(int(r.src[0].arg) for r in groups) * self.tree_lanes

    def reduce_key(self, u: UOp) -> tuple:
        return (u.arg, tuple(u.src[1:]))

    def acc_dtype(self, u: UOp) -> DType:
        return dtypes.float64 if self.wide_float_sums and u.arg is Ops.ADD and u.dtype == dtypes.float32 else u.dtype

    def size_operand(self, r: UOp, b: Block) -> Operand:
        end = r.src[0]
        return UOp.const(dtypes.int32, int(end.arg)) if end.op is Ops.CONST else self.ref(end, b)

    # ---- blocks ----
    def open_loop(self, parent: Block, r: UOp, loop_kind: str, prefix: str, sizes: Block) -> Block:
        """The block of a loop over r inside parent (r's size read in block sizes); r is named there."""
        inner = Block(parent.scope | {r}, parent)
        name = self.fresh(prefix)
        self.names[r] = (name, inner)
        bounds = (UOp.const(dtypes.int32, 0), self.size_operand(r, sizes), UOp.const(dtypes.int32, 1))
        self.emit(inner, Instr("loop", name, dtypes.int32, 1, bounds, (loop_kind, r.arg[0])))
        return inner

    def close(self, blk: Block) -> None:
        """Append blk's instructions to its parent as a loop body (its first instruction opens the loop). The inner
        loop of a step whose skip tiles are all zero runs no times."""
        assert blk.parent is not None
        body = self.instrs_of.pop(id(blk), []) + self.block_ends.pop(id(blk), [])
        into = self.instrs_of.setdefault(id(blk.parent), [])
        marks = self.nonzero_steps.get(id(blk.parent), [])
        if marks and body and self.loop_range_of(blk, "inner") is not None:
            go = marks[0]
            for m in marks[1:]:
                both, go = go, self.fresh()
                into.append(Instr(Ops.AND, go, dtypes.bool, 1, (both, m)))
            loop, end = body[0], self.fresh()
            into.append(Instr(Ops.WHERE, end, dtypes.int32, 1, (go, loop.srcs[1], UOp.const(dtypes.int32, 0))))
            body[0] = Instr(loop.op, loop.name, loop.dtype, loop.width, (loop.srcs[0], end, loop.srcs[2]), loop.arg)
        into.extend([*body, Instr("end")])

    # ---- the kernel ----
    def lower(self, opts: tuple[Opt, ...]) -> Program:
        self.analyse()
        nodes = self.ast.toposort()
        ranges = sorted((n for n in nodes if n.op is Ops.RANGE), key=lambda r: r.arg[0])
        globals_ = [r for r in ranges if kind(r) == "global"]
        # the invocation index counts the innermost output dimension fastest (neighbouring invocations read
        # neighbouring memory; across a row of a tile they read one word of the other operand: a broadcast)
        locals_ = sorted((r for r in ranges if kind(r) == "local"), key=lambda r: (origin(r), -stride(r)))
        loops = [r for r in ranges if kind(r) == "loop"]
        self.columns = {r for r in loops if r.arg[0] in self.column_ids}
        groups_of = {n: [r for r in n.src[1:] if kind(r) == "group"] for n in nodes if n.op is Ops.REDUCE}
        groups_of = {n: g for n, g in groups_of.items() if g}
        local_size = math.prod(int(r.src[0].arg) for r in locals_) if locals_ else None
        # a grouped reduction that varies with the local ranges (a column sum: its outputs side by side over the
        # invocations) is grouped per local lane: the workgroup is lanes x groups, the lanes fastest; one that does
        # not (a row kernel's statistics) spans the whole workgroup, as the local ranges do
        per_lane = [bool(self.deps[n] & set(locals_)) for n in groups_of]
        if any(per_lane) and not all(per_lane):
            raise LowerError(f"kernel {self.name}: grouped reductions per local lane and across the workgroup at once")
        self.tree_lanes = local_size if local_size and any(per_lane) else 1
        sizes = {self.group_span(g) for g in groups_of.values()}
        sizes |= {local_size} if local_size and self.tree_lanes == 1 else set()
        if len(sizes) > 1:
            raise LowerError(f"kernel {self.name}: local ranges and grouped reductions need one workgroup size, "
                             f"got {sorted(sizes)}")  # fmt: skip
        self.workgroup = sizes.pop() if sizes else 1
        self.vec_buffers = self.plan_vec_buffers(nodes)
        for n in nodes:
            if n.op is Ops.DEFINE_LOCAL:
                self.plan_fill(n)
        groups = sprod(end_of(r) for r in globals_)
        if upper(groups) > 2**31 - 1:
            raise LowerError(f"kernel {self.name}: {groups} workgroups do not fit in i32 indexing")
        # global ranges from the workgroup's index, local and grouped ones from the invocation's: expressions of
        # two SPECIAL nodes, so equal indices are one node (a row read once for every pass over it)
        w = UOp(Ops.SPECIAL, dtypes.int64, (), ("w", max(1, int(upper(groups)))))
        lid = UOp(Ops.SPECIAL, dtypes.int64, (), ("lid", self.workgroup))
        lane = lid if self.tree_lanes == 1 else lid % self.tree_lanes
        mapping = split_index(w, globals_) | split_index(lane, locals_)
        for g in groups_of.values():
            mapping |= split_index(lid if self.tree_lanes == 1 else lid // self.tree_lanes, g)
        self.ast = expand(bind_specials(self.ast, mapping, simplify=False), frozenset({"upcast"}))
        storing = local_size or 1
        if groups_of and storing < self.workgroup:  # every invocation of a tree has its result: one stores it
            self.ast = _gate_stores(self.ast, UOp(Ops.CMPLT, dtypes.bool, (lid, UOp.const(dtypes.int64, storing))))
        for f in self.fills.values():
            f.operand = bind_specials(f.operand, mapping)
        self.analyse()
        stores = [s for s in self.ast.src if s.op is Ops.STORE]
        self.lid = lid
        fill_lanes = {f.lane for f in self.fills.values() if f.lane is not None}
        root = Block(frozenset(r for r in ranges if kind(r) == "vector") | fill_lanes, None)
        for f in self.fills.values():
            if f.lane is not None:
                self.names[f.lane] = (self.lane_name_for(root), root)
        self.names[w], self.names[lid] = ("w", root), ("lid", root)
        self.emit(root, Instr("exit", "", dtypes.bool, 1, (), groups))
        self.lane_name_for(root)
        for r in ranges:
            if kind(r) == "vector" and self.lanes and r not in self.names:
                self.names[r] = (self.lane_name, root)
                self.lane_ranges.add(r)
        inner = root
        opened = []
        for r in loops:
            inner = self.open_loop(inner, r, "loop", "l", root)
            opened.append(inner)
        for st in stores:
            self.store(st, inner)
        for blk in reversed(opened):
            self.close(blk)
        used_vars = variables(tuple(n for n in nodes if n.op is Ops.DEFINE_VAR))
        written = {s.src[0].arg for s in stores}
        globs = sorted({n.arg: n for n in nodes if n.op is Ops.DEFINE_GLOBAL}.items())
        buffers = tuple(BufferDecl(a, g.dtype, a in written, a in self.vec_buffers) for a, g in globs)
        shared = tuple(self.shared) + tuple(f.decl for f in self.fills.values())
        return Program(self.name, self.instrs_of.get(id(root), []), buffers, shared, groups, self.workgroup,
                       tuple(v.arg[0] for v in used_vars), tuple(opts), self.ast)  # fmt: skip

    def store(self, st: UOp, b: Block) -> None:
        block = self.place(st, b)
        buf, index, value = st.src[:3]
        valid = st.src[3] if len(st.src) == 4 else None
        w = max(self.width(value), self.width(index))
        v = self.ref(value, block)
        if w == 4 and self.width(value) == 1:
            v = self.let(block, value, "splat", (v,), width=4)
        tail = (self.ref(valid, block),) if valid is not None else ()
        if w == 4 and valid is None and buf.arg in self.vec_buffers:
            along = aligned_along(index, self.lane_ranges, self.affines, self.deps)
            if along is not None:
                q = quad_index(index, along, self.affines)
                self.note(q)
                self.emit(
                    block, Instr("store", "", value.dtype, 4, (self.ref(q, block), v), ("global", buf.arg, "quad"))
                )
                return
        mode = "gather" if w == 4 else "elem"
        self.emit(block, Instr("store", "", value.dtype, w, (self.ref(index, block), v, *tail),
                               ("global", buf.arg, mode)))  # fmt: skip

    def lane_uniform(self, valid: UOp | None) -> bool:
        """Is a gate the same for the four lanes of a vec4 (none, or one that does not vary with a lane range)? Such
        a gated read is one vec4 load (of quad 0 where the gate fails)."""
        return valid is None or self.deps[valid].isdisjoint(self.lane_ranges)

    # ---- planning ----
    def plan_vec_buffers(self, nodes: list[UOp]) -> set[int]:
        """Buffers some width-4 access reads or writes as aligned vec4s (the rest of their accesses pick
        components)."""
        if not self.lanes:
            return set()
        lanes = {r for r in nodes if r.op is Ops.RANGE and kind(r) == "vector"}
        out: set[int] = set()
        for n in _outside_tiles(self.ast):
            if n.op in (Ops.LOAD, Ops.STORE) and n.src[0].op is Ops.DEFINE_GLOBAL:
                gated = (n.op is Ops.LOAD and not self.lane_uniform_in(n, lanes)) or (n.op is Ops.STORE and
                                                                                      len(n.src) == 4)  # fmt: skip
                if not gated and self.vec_storage(n.src[0].dtype) and aligned_along(n.src[1], lanes, self.affines):
                    out.add(n.src[0].arg)
        for n in nodes:  # reads inside a fill that is four lanes along its innermost tile range
            if n.op is Ops.DEFINE_LOCAL:
                lane = self.fill_lane(n)
                if lane is not None:
                    for x in n.src[0].toposort():
                        if x.op is Ops.LOAD and x.src[0].op is Ops.DEFINE_GLOBAL and self.lane_uniform_in(x, {lane}):
                            if self.vec_storage(x.dtype) and aligned_along(x.src[1], {lane}, self.affines):
                                out.add(x.src[0].arg)
        return out

    def fill_lane(self, tile: UOp) -> UOp | None:
        """The tile range a fill computes four at a time: a vector range of the tile, else its innermost range
        when it has a multiple of 4 values and the operand's loads are contiguous along it."""
        if not self.lanes:
            return None
        ranges = list(tile.src[1:])
        vec = [r for r in ranges if kind(r) == "vector"]
        if vec:
            return vec[0]
        last = ranges[-1]
        if int(last.src[0].arg) % 4:
            return None
        loads = [x for x in tile.src[0].toposort() if x.op is Ops.LOAD and x.src[0].op is Ops.DEFINE_GLOBAL]
        if not loads or any(not self.lane_uniform_in(x, {last}) or aligned_along(x.src[1], {last}, self.affines) is None
                            for x in loads if last in self.deps[x]):  # fmt: skip
            return None
        return last

    def lane_uniform_in(self, load: UOp, lanes: set[UOp]) -> bool:
        """Is a load ungated, or gated alike for every lane of these lane ranges?"""
        return len(load.src) == 2 or self.deps[load.src[2]].isdisjoint(lanes)

    def plan_fill(self, tile: UOp) -> None:
        """The fill's own ranges: a fresh one per tile range, the lane range as quads times four plus lanes."""
        lane = self.fill_lane(tile)
        slot, size = tile.arg[:2]
        decl = SharedDecl(f"tile{slot}", tile.dtype, size // 4 if lane is not None else size, lane is not None)
        fresh: dict[UOp, UOp] = {}
        loop_ranges: list[UOp] = []
        quad_of: dict[UOp, UOp] = {}
        new_lane = None
        for r in tile.src[1:]:
            f = r.replace(arg=(r.arg[0] + 100000, "fill", *r.arg[2:]))
            if r is lane:
                q = f.replace(src=(UOp.const(dtypes.int64, int(r.src[0].arg) // 4),))
                new_lane = f.replace(src=(UOp.const(dtypes.int64, 4),), arg=(r.arg[0] + 200000, "fill", *r.arg[2:]))
                fresh[r] = q * 4 + new_lane
                quad_of[q] = new_lane
                loop_ranges.append(q)
            else:
                fresh[r] = f
                loop_ranges.append(f)
        operand = simplify_kernel(_substitute_outside_tiles(tile.src[0], fresh))
        self.note(operand)
        if new_lane is not None:
            self.note(new_lane)
            self.lane_ranges.add(new_lane)
        # neighbouring invocations take neighbouring elements in memory (a transposed operand is read coalesced
        # and written into the tile's layout), whatever order the tile is laid out in
        contiguous = {fresh_of for r, fresh_of in zip(tile.src[1:], loop_ranges) if r is not lane and
                      self.contiguous_in(tile.src[0], r)}  # fmt: skip
        order = tuple(r for r in loop_ranges if r not in contiguous) + tuple(r for r in loop_ranges if r in contiguous)
        vector = lane is not None and kind(lane) == "vector"
        self.fills[tile] = Fill(decl, operand, tuple(loop_ranges), new_lane, vector, order, tile.arg[2:] == ("skip",))

    def contiguous_in(self, operand: UOp, r: UOp) -> bool:
        steps = [affine(n.src[1], self.affines) for n in operand.toposort()
                 if n.op is Ops.LOAD and n.src[0].op is Ops.DEFINE_GLOBAL and r in self.deps[n]]  # fmt: skip
        return bool(steps) and all(a is not None and abs(a[0].get(r, 0)) == 1 for a in steps)


def _gate_stores(sink: UOp, gate: UOp) -> UOp:
    """sink with each store also gated by gate (the invocations of a grouped reduction's tree but the one that
    stores: another that read an in-place output after it stored would add the sum twice)."""

    def gated(st: UOp) -> UOp:
        valid = gate if len(st.src) == 3 else UOp(Ops.AND, dtypes.bool, (st.src[3], gate))
        return st.replace(src=(*st.src[:3], valid))

    return sink.replace(src=tuple(gated(s) if s.op is Ops.STORE else s for s in sink.src))


def split_index(flat: UOp, ranges: list[UOp], simplify: bool = True) -> dict[UOp, UOp]:
    """Each range as a digit of a flat index (the last fastest; the first without a modulo)."""
    out: dict[UOp, UOp] = {}
    step: UOp | int = 1
    for i in range(len(ranges) - 1, -1, -1):
        r = ranges[i]
        q = flat if isinstance(step, int) and step == 1 else flat // step
        digit = q if i == 0 else q % r.src[0]
        out[r] = simplify_kernel(digit) if simplify else digit
        step = r.src[0] if isinstance(step, int) and step == 1 else step * r.src[0]
    return out


def bind_specials(root: UOp, mapping: dict[UOp, UOp], simplify: bool = True) -> UOp:
    """root with ranges replaced by their index expressions, except where a REDUCE names its own ranges (a
    grouped reduction keeps its group ranges as markers) and inside workgroup tiles."""
    done: dict[UOp, UOp] = {}
    for n in root.toposort():
        if n in mapping:
            done[n] = mapping[n]
            continue
        if n.op is Ops.DEFINE_LOCAL:
            done[n] = n
            continue
        src = tuple(done.get(s, s) for s in n.src)
        if n.op is Ops.REDUCE:
            src = (src[0], *n.src[1:])
        done[n] = n if src == n.src else n.replace(src=src)
    return simplify_kernel(done[root]) if simplify else done[root]


def lower(name: str, ast: UOp, opts: tuple[Opt, ...] | list[Opt] = (), *, lanes: bool = True,
          vec_storage: Any = lambda d: False, wide_float_sums: bool = False,
          columns: frozenset[int] = frozenset()) -> Program:  # fmt: skip
    """The program of kernel ast under opts (checked: an opt that does not apply raises OptError).

    A reduction directly inside the loop over a range in ``columns`` (ids of "loop" ranges) runs for every
    value of that range at once, before the loop: see ``Lowerer.reduce``."""
    transformed = apply_opts(ast, tuple(opts))
    if not lanes:  # vector ranges are unrolled: global ones like upcasts, reduce ones like unrolls
        transformed = _lanes_unrolled(transformed)
    return Lowerer(name, transformed, lanes, vec_storage, wide_float_sums, columns).lower(tuple(opts))


def _lanes_unrolled(ast: UOp) -> UOp:
    mapping = {}
    for n in ast.toposort():
        if n.op is Ops.RANGE and kind(n) == "vector":
            reduce_side = any(m.op is Ops.REDUCE and n in m.src[1:] for m in ast.toposort())
            mapping[n] = n.replace(arg=(n.arg[0], "unroll" if reduce_side else "upcast", *n.arg[2:]))
    return substitute(ast, mapping) if mapping else ast

"""Render a kernel AST to C loops, with its contractions left to BLAS.

A kernel becomes a short Python function (the glue) that calls C *stages* and numpy:

- every sum of a product over some axes (a contraction, as the numpy renderer finds them)
  runs as one batched ``np.matmul`` (BLAS); each factor that is not a plain strided view
  of a buffer is first computed into a dense array by a C stage;
- a last C stage computes the stored value for every output element, reading contraction
  results as arrays, and stores it.

A C stage is a loop nest over its axes. Every node is emitted once, in the outermost loop
where all the ranges it depends on exist (so a reduction or a broadcast operand is hoisted
out of the loops it does not vary with), and each REDUCE is an inner loop with an
accumulator (float32 sums accumulate in double: C has no pairwise summation). Integer math
wraps (``-fwrapv``) and integer division by zero gives 0, as the numpy renderer does.

``render_c`` returns None for what it does not handle (16-bit floats; a kernel whose
reductions would be recomputed per output element); the backend then uses the numpy renderer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from anneal_cpu.render import affine, by_blas, prepare, size_expr, tuple_expr
from anneal_ir import DType, Ops, UOp, dtypes
from anneal_ir.sint import sadd, sint, size_code, sprod, variables
from anneal_schedule.blocks import Block

_CTYPE = {
    dtypes.bool: "_Bool", dtypes.int8: "int8_t", dtypes.int16: "int16_t", dtypes.int32: "int32_t",
    dtypes.int64: "int64_t", dtypes.uint8: "uint8_t", dtypes.uint16: "uint16_t", dtypes.uint32: "uint32_t",
    dtypes.uint64: "uint64_t", dtypes.float32: "float", dtypes.float64: "double",
}  # fmt: skip

C_PRELUDE = r"""#include <stdint.h>
#include <string.h>
#include <math.h>
/* numpy's maximum: NaN wins */
static inline float max_f32(float a, float b) { return (a > b || a != a) ? a : b; }
static inline double max_f64(double a, double b) { return (a > b || a != a) ? a : b; }
/* the same as vectorizable reductions: NaN still wins whatever the order, so a max may be split */
#pragma omp declare reduction(nanmax32 : float : omp_out = max_f32(omp_out, omp_in)) initializer(omp_priv = -INFINITY)
#pragma omp declare reduction(nanmax64 : double : omp_out = max_f64(omp_out, omp_in)) initializer(omp_priv = -INFINITY)
/* 2^x without a libm call, so loops around it vectorize: 2^round(x) from the exponent bits times
   2^f (|f| <= 1/2) by its Taylor polynomial to degree 7 (error ~1e-9 before float rounding).
   Results below 2^-126 flush to 0 (numpy keeps subnormals), x in [127.49, 128) gives 2^127.49 (the
   exponent bits stop at 2^127); NaN and +-inf behave as exp2f. backend._exp2 is the numpy twin. */
static inline float exp2_f32(float x) {
  float xc = x < -127.0f ? -127.0f : (x > 127.49f ? 127.49f : x);
  float n = __builtin_rintf(xc), f = xc - n;
  float p = 1.0f + f * (0.6931471805599453f + f * (0.2402265069591007f + f * (0.05550410866482158f
            + f * (0.009618129107628477f + f * (0.0013333558146428443f + f * (1.5403530393381608e-4f
            + f * 1.525273380405984e-5f))))));
  int32_t bits = ((int32_t)n + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  float r = p * scale;
  r = x >= 128.0f ? INFINITY : r;
  return x != x ? x : r;
}
/* the error function as the numpy and WGSL backends compute it (Abramowitz & Stegun 7.1.26) */
static inline float erf_f32(float x) {
  float a = fabsf(x), t = 1.0f / (1.0f + 0.3275911f * a);
  float p = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  float s = (x > 0.0f) ? 1.0f : ((x < 0.0f) ? -1.0f : 0.0f);
  return s * (1.0f - p * exp2_f32(-a * a * 1.4426950408889634f));
}
static inline double erf_f64(double x) {
  double a = fabs(x), t = 1.0 / (1.0 + 0.3275911 * a);
  double p = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
  double s = (x > 0.0) ? 1.0 : ((x < 0.0) ? -1.0 : 0.0);
  return s * (1.0 - p * exp(-a * a));
}
"""


class Unsupported(Exception):
    """This kernel is rendered by the numpy renderer instead."""


COLUMN_SUM_MAX = 4096  # columns summed at once (one double each, on the stack)
MAX_REDUCTION = {dtypes.float32: "nanmax32", dtypes.float64: "nanmax64"}  # C_PRELUDE's; integers: OpenMP's max


def ctype(d: DType) -> str:
    if d not in _CTYPE:
        raise Unsupported(d.name)
    return _CTYPE[d]


def literal(value: object, d: DType) -> str:
    if d == dtypes.bool:
        return "1" if value else "0"
    if d.is_float:
        v = float(value)  # type: ignore[arg-type]
        suffix = "f" if d == dtypes.float32 else ""
        if math.isnan(v):
            return f"(({ctype(d)})NAN)"
        if math.isinf(v):
            return f"(({ctype(d)})({'-' if v < 0 else ''}INFINITY))"
        return f"{v!r}{suffix}" if "e" in repr(v) or "." in repr(v) else f"{v!r}.0{suffix}"
    v = int(value)  # type: ignore[call-overload]
    if d.is_unsigned:
        return f"(({ctype(d)}){v & ((1 << (8 * d.itemsize)) - 1)}ULL)"
    if v == -(2**63):
        return "((int64_t)(-9223372036854775807LL - 1))"
    return f"(({ctype(d)}){v}LL)"


@dataclass
class Stage:
    """One C function: a loop nest computing ``value`` for every point of ``axes``."""

    name: str
    axes: list[UOp]  # the RANGEs it loops over, outermost first
    value: UOp
    target: str  # "store" (the kernel's STORE) or a temp's name
    lines: list[str] = field(default_factory=list)


@dataclass
class CRenderer:
    name: str
    ast: UOp
    ranges_of: dict[UOp, frozenset[UOp]] = field(default_factory=dict)
    axis_of: dict[UOp, int] = field(default_factory=dict)
    ends: dict[UOp, sint] = field(default_factory=dict)
    temps: dict[UOp, str] = field(default_factory=dict)  # contraction (or factor) -> temp array name
    layout: dict[UOp, list[UOp]] = field(default_factory=dict)  # a temp's axes, outermost first
    glue: list[str] = field(default_factory=list)
    stages: list[Stage] = field(default_factory=list)
    n_args: int = 0
    counter: int = 0
    names: dict[UOp, tuple[str, Block]] = field(default_factory=dict)

    # ---- analysis ----
    def analyse(self) -> list[UOp]:
        nodes = self.ast.toposort()
        ranges = sorted((n for n in nodes if n.op is Ops.RANGE), key=lambda r: r.arg[0])
        for i, r in enumerate(ranges):
            self.axis_of[r] = i
            end = r.src[0]
            self.ends[r] = int(end.arg) if end.op is Ops.CONST else end
        for n in nodes:
            if n.op is Ops.RANGE:
                self.ranges_of[n] = frozenset({n})
            elif n.op is Ops.REDUCE:
                self.ranges_of[n] = self.ranges_of[n.src[0]] - frozenset(n.src[1:])
            else:
                self.ranges_of[n] = frozenset().union(*(self.ranges_of[s] for s in n.src))
            if n.dtype != dtypes.void and n.op not in (Ops.DEFINE_GLOBAL, Ops.SINK):
                ctype(n.dtype)  # raises Unsupported for 16-bit floats
        self.n_args = len({n.arg for n in nodes if n.op is Ops.DEFINE_GLOBAL})
        return nodes

    def contraction_factors(self, u: UOp) -> tuple[UOp, UOp] | None:
        if u.op is not Ops.REDUCE or u.arg is not Ops.ADD or u.src[0].op is not Ops.MUL:
            return None
        a, b = u.src[0].src
        ranges = self.ranges_of
        return (a, b) if by_blas(ranges[u.src[0]], ranges[a], ranges[b], frozenset(u.src[1:])) else None

    # ---- the glue: contractions through BLAS, stages for the rest ----
    def render(self) -> tuple[str, str, list[str]]:
        nodes = self.analyse()
        store = self.ast.src[0]
        assert store.op is Ops.STORE, "a kernel is SINK(STORE)"
        if any(self.ends[r] == 0 for r in self.ends):
            raise Unsupported("empty range")
        contractions = [n for n in nodes if self.contraction_factors(n) is not None]
        var_names = [v.arg[0] for v in variables(tuple(n for n in nodes if n.op is Ops.DEFINE_VAR))]
        var_names += [v.arg[0] for v in variables(tuple(self.ends.values())) if v.arg[0] not in var_names]
        self.var_names = sorted(set(var_names))
        for c in contractions:
            self.render_contraction(c)
        out_axes = sorted((r for r in self.ranges_of[store.src[1]] | self.ranges_of[store.src[2]]),
                          key=lambda r: self.axis_of[r])  # fmt: skip
        self.add_stage(Stage(f"{self.name}_store", self.loop_order(out_axes, store.src[2]), store.src[2], "store"))
        args = ", ".join(f"b{i}" for i in range(self.n_args))
        head = [f"def {self.name}({args}, vars):"]
        if self.var_names:
            head.append(f"    v = _vars(vars, {tuple(self.var_names)!r})")
            head += [f"    v_{n} = int(vars[{n!r}])" for n in self.var_names]
        else:
            head.append("    v = None")
        buffers = ", ".join(f"b{i}" for i in range(self.n_args))
        head.append(f"    P = _ptrs({self.n_args + len(self.temps)}, {buffers})  # buffers, then temps")
        c_source = "\n".join([C_PRELUDE, *(ln for s in self.stages for ln in s.lines)]) + "\n"
        return "\n".join(head + ["    " + ln for ln in self.glue]) + "\n", c_source, [s.name for s in self.stages]

    def loop_order(self, axes: list[UOp], value: UOp) -> list[UOp]:
        """Axes a reduction varies with go outermost, so it is computed once per their values."""
        reduces = [n for n in self.walk(value) if n.op is Ops.REDUCE and n not in self.temps]
        deps = [self.ranges_of[r] & frozenset(axes) for r in reduces]
        if not deps:
            return axes
        outer = frozenset().union(*deps)
        order = sorted(axes, key=lambda r: r not in outer)  # stable: keeps the given order otherwise
        for d in deps:  # each reduction's ranges must be the first loops, or it would be recomputed
            if frozenset(order[: len(d)]) != d:
                raise Unsupported("reductions over different outer axes")
        return order

    def shape_of(self, axes: list[UOp]) -> str:
        return tuple_expr([self.ends[r] for r in axes])

    def render_contraction(self, c: UOp) -> None:
        factors = self.contraction_factors(c)
        assert factors is not None
        involved = sorted(self.ranges_of[factors[0]] | self.ranges_of[factors[1]], key=lambda r: self.axis_of[r])
        letter = {r: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"[i] for i, r in enumerate(involved)}
        out_axes = sorted(self.ranges_of[c], key=lambda r: self.axis_of[r])
        in_a, in_b = self.ranges_of[factors[0]], self.ranges_of[factors[1]]
        # the product's own layout, (batch, a's axes, b's axes): both contraction paths return it contiguous,
        # so the array needs no copy into another order
        out_axes = ([r for r in out_axes if r in in_a and r in in_b] + [r for r in out_axes if r not in in_b]
                    + [r for r in out_axes if r not in in_a])  # fmt: skip
        operands = []
        for f in factors:
            expr, axes = self.operand(f)
            operands.append((expr, "".join(letter[r] for r in axes)))
        out_sub = "".join(letter[r] for r in out_axes)
        name = self.fresh("t")
        (ea, sa), (eb, sb) = operands
        expr = f"_contract({ea}, '{sa}', {eb}, '{sb}', '{out_sub}')"
        missing = [r for r in c.src[1:] if r not in self.ranges_of[c.src[0]]]  # summed, yet constant along
        if missing:
            expr = f"({expr} * {size_expr(sprod(self.ends[r] for r in missing))})"
        self.new_temp(c, name, f"np.ascontiguousarray({expr}, dtype=np.{c.dtype.np.name}).reshape(-1)", out_axes)

    def operand(self, f: UOp) -> tuple[str, list[UOp]]:
        """A contraction factor as an array over its axes (and their order in it): a strided view of a
        plain load, else a dense array laid out as the stage computing it reads memory (BLAS takes a
        transposed operand as it is: no copy either way)."""
        axes = sorted(self.ranges_of[f], key=lambda r: self.axis_of[r])
        if f.op is Ops.LOAD and len(f.src) == 2:
            aff = affine(f.src[1], self.axis_of)
            if aff is not None and set(aff[0]) == {self.axis_of[r] for r in axes}:
                coeffs, offset = aff
                item = f.dtype.itemsize
                strides = tuple(coeffs[self.axis_of[r]] * item for r in axes)
                return f"_view(b{f.src[0].arg}, {offset}, {self.shape_of(axes)}, {strides})", axes
        axes = self.loop_order(self.by_stride(axes, f), f)
        name = self.fresh("t")
        self.new_temp(f, name, f"np.empty({self.shape_of(axes)}, dtype=np.{f.dtype.np.name})", axes)
        self.add_stage(Stage(f"{self.name}_{name}", axes, f, name))
        return name, axes

    def by_stride(self, axes: list[UOp], value: UOp) -> list[UOp]:
        """axes ordered so that the innermost loop has the smallest worst stride over value's reads (a
        read that does not vary with an axis costs nothing there)."""
        worst: dict[UOp, int] = {r: 0 for r in axes}
        by_axis = {self.axis_of[r]: r for r in axes}
        for n in self.walk(value):
            if n.op is Ops.LOAD and (aff := affine(n.src[1], self.axis_of)) is not None:
                for a, coeff in aff[0].items():
                    if a in by_axis:
                        worst[by_axis[a]] = max(worst[by_axis[a]], abs(coeff))
        return sorted(axes, key=lambda r: (-worst[r], self.axis_of[r]))

    def add_stage(self, stage: Stage) -> None:
        """Render the stage and call it with the kernel's pointer table (buffers, then temps by slot)."""
        self.render_stage(stage)
        outer = size_expr(self.ends[stage.axes[0]]) if stage.axes else "1"  # Python: the glue
        work = size_expr(sprod([*(self.ends[r] for r in stage.axes), self.inner_iterations(stage.value)]))
        self.glue.append(f"_run({stage.name}, P, v, {outer}, {work})")
        self.stages.append(stage)

    def inner_iterations(self, value: UOp) -> sint:
        """Loop iterations per point of the stage's own loops (its work estimate): one, plus each
        reduction's extent; a stage with several reductions runs their loops one after another."""
        total: sint = 1
        for n in self.walk(value):
            if n.op is Ops.REDUCE and n not in self.temps:
                total = sadd(total, sprod([self.ends[r] for r in n.src[1:]]))
        return total

    def temp_slot(self, name: str) -> int:
        """Where a temp's address goes in the pointer table: after the buffers, in creation order."""
        return self.n_args + list(self.temps.values()).index(name)

    def new_temp(self, node: UOp, name: str, expr: str, layout: list[UOp]) -> None:
        self.temps[node], self.layout[node] = name, layout
        self.glue.append(f"{name} = {expr}")
        self.glue.append(f"P[{self.temp_slot(name)}] = {name}.ctypes.data")

    def walk(self, root: UOp) -> list[UOp]:
        """The nodes a stage computes: below root, stopping at arrays computed before it."""
        out, seen, stack = [], set(), [root]
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            out.append(n)
            if n not in self.temps or n is root:
                stack.extend(n.src)
        return out

    # ---- one C function ----
    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def render_stage(self, stage: Stage) -> None:
        self.names = {}
        params = {t: self.temp_slot(t) for t in self.temps.values() if t != stage.target}
        body: list[str] = []
        for i, v in enumerate(self.var_names):
            body.append(f"const int64_t v_{v} = v[{i}];")
        root = Block(frozenset(), None)
        blocks = [root, *self.open_loops(root, stage.axes)]
        self.params, self.stage, self.pointers = params, stage, {}
        column = self.column_sum(stage)
        if column is not None:
            blocks[-1] = self.render_column_sum(column, stage, blocks)
        inner = blocks[-1]
        value = self.ref(stage.value, inner)
        if stage.target == "store":
            store = self.ast.src[0]
            out = store.src[0]
            index = self.ref(store.src[1], inner)
            inner.lines.append(f"{self.pointer(out.arg, out.dtype)}[{index}] = {value};")
        else:
            index = self.flat(self.layout[stage.value])  # the array's layout
            target = self.temp_slot(stage.target)
            inner.lines.append(f"{self.pointer(target, stage.value.dtype)}[{index}] = {value};")
        for blk in reversed(blocks[1:]):  # close innermost first, each into its parent
            # the outermost loop runs [lo, hi): the glue may split it over threads (stores are disjoint)
            self.close_loop(blk, *(("lo", "hi") if blk is blocks[1] else ()))
        # restrict: the arrays of one stage never overlap, so the compiler may vectorize freely
        body += [f"{ctype(d)}* restrict a{i} = ({ctype(d)}*)p[{i}];" for i, d in sorted(self.pointers.items())]
        body += root.lines
        stage.lines = [f"void {stage.name}(void** p, const int64_t* v, int64_t lo, int64_t hi) {{",
                       *("  " + ln for ln in body), "}"]  # fmt: skip

    # ---- sums down columns ----
    def column_sum(self, stage: Stage) -> UOp | None:
        """The stage's one float sum, when it is better run as columns: its reads are contiguous along
        the stage's innermost axis and strided along the sum's (a layer norm's weight gradient: a sum
        over rows for each of 128 columns). Then the sum's loops go outside that axis, with one
        accumulator per column, so what depends on the row alone is computed once per row."""
        reduces = [n for n in self.walk(stage.value) if n.op is Ops.REDUCE and n not in self.temps]
        if not stage.axes or len(reduces) != 1:
            return None
        red, column = reduces[0], stage.axes[-1]
        end = self.ends[column]
        if red.arg is not Ops.ADD or not red.dtype.is_float or self.ranges_of[red] != frozenset(stage.axes):
            return None
        if not isinstance(end, int) or end > COLUMN_SUM_MAX:
            return None
        along_column, along_sum = set(), set()  # strides of the reads that vary with the column
        for n in self.walk(red.src[0]):
            if n.op is Ops.LOAD:
                aff = affine(n.src[1], self.axis_of)
                if aff is None:
                    return None
                if aff[0].get(self.axis_of[column], 0) != 0:
                    along_column.add(abs(aff[0][self.axis_of[column]]))
                    along_sum.add(abs(aff[0].get(self.axis_of[red.src[-1]], 0)))
        return red if along_column == {1} and 1 not in along_sum else None

    def render_column_sum(self, red: UOp, stage: Stage, blocks: list[Block]) -> Block:
        """Emit the sum as columns into the block around the innermost axis; return the block (a loop
        over that axis again) in which the rest of the stage reads each column's total."""
        column, mid = stage.axes[-1], blocks[-2]
        rc = f"r{self.axis_of[column]}"
        split = blocks[1] is blocks[-1]  # the innermost axis is the outermost: it runs [lo, hi)
        start, end = ("lo", "hi") if split else ("0", self.size(self.ends[column]))
        acc = self.fresh("acc")
        mid.lines.append(f"double {acc}[{end} - {start}];")
        mid.lines.append(f"for (int64_t {acc}_i = 0; {acc}_i < {end} - {start}; {acc}_i++) {acc}[{acc}_i] = 0.0;")
        opened = self.open_loops(mid, [*red.src[1:], column])
        cells = opened.pop()
        cells.lines.append(f"{acc}[{rc} - {start}] += {self.ref(red.src[0], cells)};")
        self.close_loop(cells, start, end, pragma="#pragma omp simd")
        for blk in reversed(opened):
            self.close_loop(blk)
        totals = Block(mid.scope | {column}, mid)
        self.names[column] = (rc, totals)
        self.names[red] = (f"(({ctype(red.dtype)}){acc}[{rc} - {start}])", totals)
        return totals

    def open_loops(self, parent: Block, ranges: list[UOp] | tuple[UOp, ...]) -> list[Block]:
        """One nested block per range, outermost first, each range's loop variable named in its block."""
        opened, outer = [], parent
        for r in ranges:
            outer = Block(outer.scope | {r}, outer)
            self.names[r] = (f"r{self.axis_of[r]}", outer)
            opened.append(outer)
        return opened

    def close_loop(self, blk: Block, start: str = "0", end: str | None = None, pragma: str | None = None) -> None:
        """Append blk to its parent as the loop over its range (the one range its parent lacks)."""
        assert blk.parent is not None
        r = next(iter(blk.scope - blk.parent.scope))
        name, end = f"r{self.axis_of[r]}", end if end is not None else self.size(self.ends[r])
        if pragma:
            blk.parent.lines.append(pragma)
        blk.parent.lines.append(f"for (int64_t {name} = {start}; {name} < {end}; {name}++) {{")
        blk.parent.lines += ["  " + ln for ln in blk.lines] + ["}"]

    def pointer(self, index: int, d: DType) -> str:
        self.pointers[index] = d
        return f"a{index}"

    def flat(self, axes: list[UOp]) -> str:
        """Index of a point in a dense C-order array over axes (in the given order)."""
        terms = []
        for i, r in enumerate(axes):
            stride = sprod(self.ends[q] for q in axes[i + 1 :])
            name = f"r{self.axis_of[r]}"
            terms.append(name if stride == 1 else f"{name} * {self.size(stride)}")
        return " + ".join(terms) or "0"

    def size(self, x: sint) -> str:
        return size_code(x)  # C: `/` (Python's `//` would open a comment)

    def place(self, u: UOp, current: Block) -> Block:
        found = current.outermost(self.ranges_of[u])
        if found is None:
            raise Unsupported(f"{u.op.name} used outside the loop of its range")
        return found

    def ref(self, u: UOp, current: Block) -> str:
        if u.op is Ops.CONST:
            return literal(u.arg, u.dtype)
        found = self.names.get(u)
        if found is not None and found[1] in current.ancestors():
            return found[0]
        block = self.place(u, current)
        expr = self.expr(u, block)
        name = self.fresh("x")
        block.lines.append(f"const {ctype(u.dtype)} {name} = {expr};")
        self.names[u] = (name, block)
        return name

    def expr(self, u: UOp, b: Block) -> str:
        op, d = u.op, u.dtype
        if u in self.temps and self.temps[u] in self.params:  # computed by an earlier stage: read its array
            return f"{self.pointer(self.params[self.temps[u]], d)}[{self.flat(self.layout[u])}]"
        if op is Ops.RANGE:
            raise Unsupported("a range used outside its loop")
        if op is Ops.DEFINE_VAR:
            return f"v_{u.arg[0]}"
        if op is Ops.LOAD:
            buf = self.pointer(u.src[0].arg, d)
            idx = self.ref(u.src[1], b)
            if len(u.src) == 3:
                return f"({self.ref(u.src[2], b)} ? {buf}[{idx}] : {literal(0, d)})"
            return f"{buf}[{idx}]"
        if op is Ops.REDUCE:
            return self.reduce(u, b)
        src = [self.ref(s, b) for s in u.src]
        return self.alu(u, src)

    def alu(self, u: UOp, s: list[str]) -> str:
        op, d = u.op, u.dtype
        f32 = d == dtypes.float32
        if op is Ops.EXP2:
            return f"{'exp2_f32' if f32 else 'exp2'}({s[0]})"
        if op is Ops.LOG2:
            return f"{'log2f' if f32 else 'log2'}({s[0]})"
        if op is Ops.SIN:
            return f"{'sinf' if f32 else 'sin'}({s[0]})"
        if op is Ops.SQRT:
            return f"{'sqrtf' if f32 else 'sqrt'}({s[0]})"
        if op is Ops.TRUNC:
            return f"{'truncf' if f32 else 'trunc'}({s[0]})" if d.is_float else s[0]
        if op is Ops.ERF:
            return f"{'erf_f32' if f32 else 'erf_f64'}({s[0]})"
        if op is Ops.RECIPROCAL:
            return f"({literal(1, d)} / {s[0]})"
        if op is Ops.NEG:
            return f"(({ctype(d)})(-{s[0]}))" if d != dtypes.bool else f"(!{s[0]})"
        if op in (Ops.ADD, Ops.MUL):
            sym = "+" if op is Ops.ADD else "*"
            if d == dtypes.bool:
                return f"({s[0]} {'|' if op is Ops.ADD else '&'} {s[1]})"
            return f"(({ctype(d)})({s[0]} {sym} {s[1]}))"
        if op is Ops.MAX:
            if d.is_float:
                return f"{'max_f32' if f32 else 'max_f64'}({s[0]}, {s[1]})"
            return f"({s[0]} > {s[1]} ? {s[0]} : {s[1]})"
        if op in (Ops.IDIV, Ops.MOD):
            return self.div_mod(op, d, *s)
        if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ):
            sym = {Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.CMPEQ: "=="}[op]
            return f"({s[0]} {sym} {s[1]})"
        if op in (Ops.AND, Ops.OR, Ops.XOR):
            sym = {Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^"}[op]
            return f"(({ctype(d)})({s[0]} {sym} {s[1]}))"
        if op in (Ops.SHL, Ops.SHR):
            width = 8 * d.itemsize
            if op is Ops.SHL:
                return f"((uint64_t){s[1]} >= {width} ? 0 : ({ctype(d)})((uint64_t){s[0]} << {s[1]}))"
            edge = f"({s[0]} < 0 ? -1 : 0)" if not d.is_unsigned else "0"
            return f"((uint64_t){s[1]} >= {width} ? {edge} : ({ctype(d)})({s[0]} >> {s[1]}))"
        if op is Ops.WHERE:
            return f"({s[0]} ? {s[1]} : {s[2]})"
        if op is Ops.CAST:
            if d == dtypes.bool:
                return f"({s[0]} != 0)"
            return f"(({ctype(d)}){s[0]})"
        if op is Ops.BITCAST:
            return f"({{ {ctype(d)} bits_; memcpy(&bits_, &{s[0]}, sizeof bits_); bits_; }})"
        raise Unsupported(op.name)

    @staticmethod
    def div_mod(op: Ops, d: DType, a: str, c: str) -> str:
        """C truncating division and remainder; for integers x / 0 = x % 0 = 0 (as the numpy path), and
        INT_MIN / -1 wraps instead of trapping."""
        if d.is_float:
            f32 = d == dtypes.float32
            return (
                f"{'truncf' if f32 else 'trunc'}({a} / {c})"
                if op is Ops.IDIV
                else f"{'fmodf' if f32 else 'fmod'}({a}, {c})"
            )
        t = ctype(d)
        plain = f"({t})({a} / {c})" if op is Ops.IDIV else f"({t})({a} % {c})"
        if not d.is_unsigned:
            by_minus_one = f"(({t})(-{a}))" if op is Ops.IDIV else "0"
            plain = f"({c} == ({t})-1 ? {by_minus_one} : {plain})"
        return f"({c} == 0 ? 0 : {plain})"

    def reduce(self, u: UOp, b: Block) -> str:
        d = u.dtype
        acc = self.fresh("acc")
        wide = "double" if d == dtypes.float32 and u.arg is Ops.ADD else ctype(d)  # float sums in double
        if u.arg is Ops.ADD:
            identity = literal(0, d)
        elif d.is_float:
            identity = literal(-math.inf, d)
        elif d == dtypes.bool:
            identity = "0"
        else:
            identity = literal(int(np.iinfo(d.np).min), d)
        b.lines.append(f"{wide} {acc} = {identity};")
        opened = self.open_loops(b, u.src[1:])
        inner = opened[-1]
        value = self.ref(u.src[0], inner)
        if u.arg is Ops.ADD:
            inner.lines.append(f"{acc} = {acc} + {value};" if d != dtypes.bool else f"{acc} = {acc} | {value};")
        elif d.is_float:
            inner.lines.append(f"{acc} = {'max_f32' if d == dtypes.float32 else 'max_f64'}({acc}, {value});")
        else:
            inner.lines.append(f"{acc} = ({value} > {acc}) ? {value} : {acc};")
        kind = "+" if u.arg is Ops.ADD else MAX_REDUCTION.get(d, "max")
        # a sum may be reassociated, a max reordered: the innermost loop is a vector reduction
        simd = f"#pragma omp simd reduction({kind}:{acc})" if d != dtypes.bool else None
        for blk in reversed(opened):
            self.close_loop(blk, pragma=simd if blk is inner else None)
        return f"(({ctype(d)}){acc})"


def loop_iterations(ast: UOp) -> int:
    """How many points a kernel's loops visit (at the Variables' upper bounds)."""
    return math.prod(int(r.src[0].vmax) for r in ast.toposort() if r.op is Ops.RANGE)


def render_c(name: str, ast: UOp) -> tuple[str, str, list[str]] | None:
    """(Python glue, C source, stage function names), or None where the numpy renderer is used."""
    try:
        return CRenderer(name, prepare(ast)).render()
    except Unsupported:
        return None

"""Render a kernel AST to C loops, with its contractions left to BLAS.

A kernel becomes a short Python function (the glue) that calls C *stages* and numpy:

- every sum of a product over some axes (a contraction, as the numpy renderer finds them)
  runs as one batched ``np.matmul`` (BLAS); each factor that is not a plain strided view
  of a buffer is first computed into a dense array by a C stage;
- a last C stage computes the stored value for every output element, reading contraction
  results as arrays, and stores it.

A C stage is the kernel of its own that computes one array (or the store): it is lowered by
``anneal_schedule.lower`` like every GPU kernel (hoisting, reduction loops, sums down columns) and
``CPrinter`` only spells the program in C. Float32 sums accumulate in double (C has no pairwise
summation); integer math wraps (``-fwrapv``) and integer division by zero gives 0, as the numpy
renderer does.

``render_c`` returns None for what it does not handle (16-bit floats; a kernel whose
reductions would be recomputed per output element); the backend then uses the numpy renderer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from anneal_cpu.render import affine, by_blas, prepare, size_expr, tuple_expr
from anneal_ir import DType, Ops, UOp, dtypes
from anneal_ir.sint import sadd, sint, sprod, variables
from anneal_schedule.analysis import nodes_below, ranges_of
from anneal_schedule.lower import Instr, Operand, Program, lower
from anneal_schedule.opt import substitute
from anneal_schedule.simplify import simplify_kernel

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

    # ---- analysis ----
    def analyse(self) -> list[UOp]:
        nodes = self.ast.toposort()
        ranges = sorted((n for n in nodes if n.op is Ops.RANGE), key=lambda r: r.arg[0])
        for i, r in enumerate(ranges):
            self.axis_of[r] = i
            end = r.src[0]
            self.ends[r] = int(end.arg) if end.op is Ops.CONST else end
        self.ranges_of = ranges_of(self.ast)
        for n in nodes:
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
        return nodes_below(root, lambda n: n not in self.temps)

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    # ---- one C function: the stage as a kernel, lowered like every other ----
    def stage_kernel(self, stage: Stage) -> UOp:
        """The stage as a kernel of its own: arrays of earlier stages read as buffers (by pointer-table slot),
        its axes loops in stage order (the first one split over threads), the rest of its ranges reductions."""
        reads: dict[UOp, UOp] = {}
        for node, name in self.temps.items():
            if name != stage.target:
                buf = UOp(Ops.DEFINE_GLOBAL, node.dtype, (), self.temp_slot(name))
                reads[node] = UOp(Ops.LOAD, node.dtype, (buf, self.flat(self.layout[node])))
        if stage.target == "store":
            store = self.ast.src[0]
            sink = UOp(Ops.SINK, dtypes.void, (store,))
        else:
            buf = UOp(Ops.DEFINE_GLOBAL, stage.value.dtype, (), self.temp_slot(stage.target))
            sink = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (buf, self.flat(self.layout[stage.value]),
                                                                             stage.value)),))  # fmt: skip
        sink = substitute(sink, reads)
        renamed = {r: r.replace(arg=(i, "loop")) for i, r in enumerate(stage.axes)}
        others = sorted((n for n in sink.toposort() if n.op is Ops.RANGE and n not in renamed), key=lambda r: r.arg[0])
        renamed |= {r: r.replace(arg=(len(stage.axes) + i, "reduce")) for i, r in enumerate(others)}
        return substitute(sink, renamed)

    def render_stage(self, stage: Stage) -> None:
        columns = frozenset({len(stage.axes) - 1}) if self.sums_down_columns(stage) else frozenset()
        prog = lower(stage.name, self.stage_kernel(stage), lanes=False, wide_float_sums=True, columns=columns)
        stage.lines = CPrinter(prog, self.var_names).print()

    def flat(self, axes: list[UOp]) -> UOp:
        """Index of a point in a dense C-order array over axes (in the given order)."""
        index, stride = UOp.const(dtypes.int64, 0), UOp.const(dtypes.int64, 1)
        for r in reversed(axes):
            index = index + r * stride
            stride = stride * r.src[0]
        return simplify_kernel(index)

    # ---- sums down columns ----
    def sums_down_columns(self, stage: Stage) -> bool:
        """Is the stage's one float sum better run as columns? Yes when its reads are contiguous along
        the stage's innermost axis and strided along the sum's (a layer norm's weight gradient: a sum
        over rows for each of 128 columns). Then the sum's loops go outside that axis, with one
        accumulator per column, so what depends on the row alone is computed once per row."""
        reduces = [n for n in self.walk(stage.value) if n.op is Ops.REDUCE and n not in self.temps]
        if not stage.axes or len(reduces) != 1:
            return False
        red, column = reduces[0], stage.axes[-1]
        end = self.ends[column]
        if red.arg is not Ops.ADD or not red.dtype.is_float or self.ranges_of[red] != frozenset(stage.axes):
            return False
        if not isinstance(end, int) or end > COLUMN_SUM_MAX:
            return False
        along_column, along_sum = set(), set()  # strides of the reads that vary with the column
        for n in self.walk(red.src[0]):
            if n.op is Ops.LOAD:
                aff = affine(n.src[1], self.axis_of)
                if aff is None:
                    return False
                if aff[0].get(self.axis_of[column], 0) != 0:
                    along_column.add(abs(aff[0][self.axis_of[column]]))
                    along_sum.add(abs(aff[0].get(self.axis_of[red.src[-1]], 0)))
        return along_column == {1} and 1 not in along_sum


# ---- printing a program as C ----
def alu(op: Ops, d: DType, s: list[str], arg: object = None, src: DType | None = None) -> str:
    """One ALU instruction in C; integer math wraps (-fwrapv) and x / 0 = x % 0 = 0, as in the numpy path.
    src: the first operand's dtype, where the instruction needs it (a bitcast)."""
    f32 = d == dtypes.float32
    if op is Ops.EXP2:
        return f"{'exp2_f32' if f32 else 'exp2'}({s[0]})"
    if op in (Ops.LOG2, Ops.SIN, Ops.SQRT):
        fn = {Ops.LOG2: "log2", Ops.SIN: "sin", Ops.SQRT: "sqrt"}[op]
        return f"{fn}{'f' if f32 else ''}({s[0]})"
    if op is Ops.TRUNC:
        return f"{'truncf' if f32 else 'trunc'}({s[0]})" if d.is_float else s[0]
    if op is Ops.RECIPROCAL:
        return f"({literal(1, d)} / {s[0]})"
    if op is Ops.NEG:
        return f"(({ctype(d)})(-{s[0]}))" if d != dtypes.bool else f"(!{s[0]})"
    if op in (Ops.ADD, Ops.MUL):
        if d == dtypes.bool:
            return f"({s[0]} {'|' if op is Ops.ADD else '&'} {s[1]})"
        return f"(({ctype(d)})({s[0]} {'+' if op is Ops.ADD else '*'} {s[1]}))"
    if op is Ops.MAX:
        if d.is_float:
            return f"{'max_f32' if f32 else 'max_f64'}({s[0]}, {s[1]})"
        return f"({s[0]} > {s[1]} ? {s[0]} : {s[1]})"
    if op in (Ops.IDIV, Ops.MOD):
        return div_mod(op, d, s[0], s[1], nonneg=arg == "nonneg")
    if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ):
        return f"({s[0]} {({Ops.CMPLT: '<', Ops.CMPNE: '!=', Ops.CMPEQ: '=='})[op]} {s[1]})"
    if op in (Ops.AND, Ops.OR, Ops.XOR):
        return f"(({ctype(d)})({s[0]} {({Ops.AND: '&', Ops.OR: '|', Ops.XOR: '^'})[op]} {s[1]}))"
    if op in (Ops.SHL, Ops.SHR):
        width = 8 * d.itemsize
        if op is Ops.SHL:
            return f"((uint64_t){s[1]} >= {width} ? 0 : ({ctype(d)})((uint64_t){s[0]} << {s[1]}))"
        edge = f"({s[0]} < 0 ? -1 : 0)" if not d.is_unsigned else "0"
        return f"((uint64_t){s[1]} >= {width} ? {edge} : ({ctype(d)})({s[0]} >> {s[1]}))"
    if op is Ops.WHERE:
        return f"({s[0]} ? {s[1]} : {s[2]})"
    if op is Ops.CAST:
        return f"({s[0]} != 0)" if d == dtypes.bool else f"(({ctype(d)}){s[0]})"
    if op is Ops.BITCAST:  # through a variable of the source's type: the operand may be a literal (no address)
        assert src is not None
        return f"({{ {ctype(src)} from_ = {s[0]}; {ctype(d)} bits_; memcpy(&bits_, &from_, sizeof bits_); bits_; }})"
    raise Unsupported(op.name)


def div_mod(op: Ops, d: DType, a: str, c: str, nonneg: bool = False) -> str:
    """C truncating division and remainder; for integers x / 0 = x % 0 = 0 (as the numpy path), and
    INT_MIN / -1 wraps instead of trapping."""
    if d.is_float:
        f32 = d == dtypes.float32
        if op is Ops.IDIV:
            return f"{'truncf' if f32 else 'trunc'}({a} / {c})"
        return f"{'fmodf' if f32 else 'fmod'}({a}, {c})"
    t = ctype(d)
    plain = f"({t})({a} / {c})" if op is Ops.IDIV else f"({t})({a} % {c})"
    if nonneg:  # the lowering proved a >= 0 and c > 0
        return plain
    if not d.is_unsigned:
        by_minus_one = f"(({t})(-{a}))" if op is Ops.IDIV else "0"
        plain = f"({c} == ({t})-1 ? {by_minus_one} : {plain})"
    return f"({c} == 0 ? 0 : {plain})"


@dataclass
class CPrinter:
    """A lowered stage as one C function ``void name(void** p, const int64_t* v, int64_t lo, int64_t hi)``:
    p the pointer table, v the Variables' values, [lo, hi) the part of the first loop this call runs."""

    prog: Program
    var_names: list[str]  # the glue's order of v
    types: dict[str, DType] = field(default_factory=dict)

    def operand(self, x: Operand) -> str:
        return literal(x.arg, x.dtype) if isinstance(x, UOp) else x

    def src_dtype(self, x: Operand) -> DType:
        return x.dtype if isinstance(x, UOp) else self.types[x]

    def combine(self, op: Ops, d: DType, acc: str, v: str) -> str:
        if d == dtypes.bool:
            return f"({acc} | {v})"
        if op is Ops.ADD:
            return f"({acc} + {v})"
        return alu(Ops.MAX, d, [acc, v])

    def line(self, ins: Instr) -> str:
        op, name, d = ins.op, ins.name, ins.dtype
        if name:
            self.types[name] = d
        if op in ("exit", "lanes"):  # one invocation: nothing leaves, no vector lanes
            return ""
        if op == "var":
            return f"const int64_t {name} = v_{ins.arg};"
        if op == "load":
            space, slot, mode = ins.arg
            assert space == "global" and mode == "elem", ins
            idx = self.operand(ins.srcs[0])
            if len(ins.srcs) == 2:
                return f"const {ctype(d)} {name} = {self.operand(ins.srcs[1])} ? a{slot}[{idx}] : {literal(0, d)};"
            return f"const {ctype(d)} {name} = a{slot}[{idx}];"
        if op == "store":
            space, slot, mode = ins.arg
            assert space == "global" and mode == "elem", ins
            stored = f"a{slot}[{self.operand(ins.srcs[0])}] = {self.operand(ins.srcs[1])};"
            return f"if ({self.operand(ins.srcs[2])}) {{ {stored} }}" if len(ins.srcs) == 3 else stored
        if op == "acc":
            return f"{ctype(d)} {name} = {literal(ins.arg.arg, d)};"
        if op == "update":
            acc = str(ins.srcs[0])
            if len(ins.srcs) == 3:
                a, b = (self.operand(s) for s in ins.srcs[1:])
                return f"{acc} = {acc} + {a} * {b};"
            v = self.operand(ins.srcs[1])
            if self.src_dtype(ins.srcs[1]) != d:
                v = f"(({ctype(d)}){v})"
            return f"{acc} = {self.combine(ins.arg, d, acc, v)};"
        if op == "acc_array":
            (size,) = (self.operand(s) for s in ins.srcs)
            return (f"{ctype(d)} {name}[{size}]; "
                    f"for (int64_t i_ = 0; i_ < {size}; i_++) {name}[i_] = {literal(ins.arg.arg, d)};")  # fmt: skip
        if op == "update_at":
            arr, at, value = (self.operand(s) for s in ins.srcs)
            return f"{arr}[{at}] = {self.combine(Ops.ADD, d, f'{arr}[{at}]', value)};"
        if op == "acc_at":
            arr, at = (self.operand(s) for s in ins.srcs)
            return f"const {ctype(d)} {name} = {arr}[{at}];"
        if op == "loop":
            loop_kind, rid = ins.arg
            start, end = (self.operand(s) for s in ins.srcs[:2])
            if rid == 0 and loop_kind in ("loop", "column"):  # the first axis: the part [lo, hi) this call runs
                start, end = "lo", "hi"
            return f"for (int64_t {name} = {start}; {name} < {end}; {name}++) {{"
        if op == "end":
            return "}"
        if isinstance(op, Ops):
            srcs = [self.operand(s) for s in ins.srcs]
            src = self.src_dtype(ins.srcs[0]) if ins.srcs else None
            return f"const {ctype(d)} {name} = {alu(op, d, srcs, ins.arg, src)};"
        raise Unsupported(f"instruction {op}")

    def pragmas(self) -> dict[int, str]:
        """The innermost loops that update accumulators: vector reductions (a sum may be reassociated, a
        NaN-winning max reordered), or plain simd loops over a column array."""
        out: dict[int, str] = {}
        instrs = self.prog.instrs
        stack: list[int] = []
        body: dict[int, list[Instr]] = {}
        nested: set[int] = set()
        for i, ins in enumerate(instrs):
            if ins.op == "loop":
                if stack:
                    nested.add(stack[-1])
                stack.append(i)
                body[i] = []
            elif ins.op == "end":
                stack.pop()
            elif stack:
                body[stack[-1]].append(ins)
        for i, inner in body.items():
            if i in nested:
                continue
            updates = [ins for ins in inner if ins.op == "update"]
            if any(ins.op == "update_at" for ins in inner):
                out[i] = "#pragma omp simd"
            elif updates and all(u.dtype != dtypes.bool for u in updates):
                by_kind: dict[str, list[str]] = {}
                for u in updates:
                    k = "+" if u.arg is Ops.ADD else MAX_REDUCTION.get(u.dtype, "max")
                    by_kind.setdefault(k, []).append(str(u.srcs[0]))
                out[i] = "#pragma omp simd " + " ".join(f"reduction({k}:{','.join(dict.fromkeys(a))})"
                                                        for k, a in by_kind.items())  # fmt: skip
        return out

    def print(self) -> list[str]:
        prog = self.prog
        body = [f"const int64_t v_{v} = v[{i}];" for i, v in enumerate(self.var_names)]
        # restrict: the arrays of one stage never overlap, so the compiler may vectorize freely
        body += [f"{ctype(b.dtype)}* restrict a{b.slot} = ({ctype(b.dtype)}*)p[{b.slot}];" for b in prog.buffers]
        pragmas = self.pragmas()
        depth = 0
        for i, ins in enumerate(prog.instrs):
            text = self.line(ins)
            if ins.op == "end":
                depth -= 1
            if i in pragmas:
                body.append("  " * depth + pragmas[i])
            if text:
                body.append("  " * depth + text)
            if ins.op == "loop":
                depth += 1
        return [f"void {prog.name}(void** p, const int64_t* v, int64_t lo, int64_t hi) {{",
                *("  " + ln for ln in body), "}"]  # fmt: skip


def loop_iterations(ast: UOp) -> int:
    """How many points a kernel's loops visit (at the Variables' upper bounds)."""
    return math.prod(int(r.src[0].vmax) for r in ast.toposort() if r.op is Ops.RANGE)


def render_c(name: str, ast: UOp) -> tuple[str, str, list[str]] | None:
    """(Python glue, C source, stage function names), or None where the numpy renderer is used."""
    try:
        return CRenderer(name, prepare(ast)).render()
    except Unsupported:
        return None

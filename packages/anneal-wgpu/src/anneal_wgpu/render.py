"""Render a kernel AST to a WGSL compute shader.

One invocation computes one output element: the global ranges are recovered from the
flat invocation index, and each REDUCE becomes a loop nest with an accumulator. Every
node is emitted once, as a ``let``, in the outermost block where all the ranges it
depends on exist, so loop-invariant work is hoisted out of reduction loops.

Storage: WGSL has no 8/16/64-bit integers, no f64 and no host-shareable bool, so a
backend stores bool as u32 (0/1), int8/16/64 as i32, uint8/16/64 as u32, bfloat16 (and
float16 without ``shader-f16``) as f32. int64 values must fit in i32 (checked on copy-in).
Index arithmetic is i32; a kernel whose index bounds do not fit is refused at compile time.

Symbolic sizes: a kernel over a Variable reads its value from a small uniform buffer bound
after the storage buffers (``vars``); loop ends and the output count are expressions over it,
and the runtime computes the workgroup count per call from the values.
"""

from __future__ import annotations

import math
import struct
import sys
from dataclasses import dataclass, field
from typing import Any

from anneal_ir import DType, Ops, UOp, dtypes
from anneal_ir.sint import sadd, sdiv, sint, size_code, smul, sprod, upper, variables
from anneal_schedule.blocks import Block
from anneal_schedule.opt import (
    MAX_ROW_QUADS,
    KernelOpts,
    RowKernel,
    single_extent,
    tile_vectorizable,
    top_reduces,
    vectorizable,
)

I32_MIN, I32_MAX = -(2**31), 2**31 - 1


class RenderError(ValueError):
    """A kernel WGSL cannot express; the message names the kernel and the reason."""


def storage_type(d: DType, f16: bool) -> str:
    """The WGSL element type a buffer of dtype d is stored as."""
    if d == dtypes.float16 and f16:
        return "f16"
    if d.is_float:
        if d == dtypes.float64:
            raise RenderError("float64 is not supported by WGSL; cast to float32")
        return "f32"
    if d == dtypes.bool or d.is_unsigned:
        return "u32"
    return "i32"


def compute_type(d: DType, f16: bool) -> str:
    return "bool" if d == dtypes.bool else storage_type(d, f16)


def literal(value: object, d: DType, f16: bool) -> str:
    t = compute_type(d, f16)
    if t == "bool":
        return "true" if value else "false"
    if t in ("f32", "f16"):
        v = float(value)  # type: ignore[arg-type]
        if math.isnan(v) or math.isinf(v):
            bits = struct.unpack("<I", struct.pack("<f", v))[0]
            return f"{t}(bitcast<f32>({bits}u))"
        return f"{t}({v!r})"
    v = int(value)  # type: ignore[call-overload]
    if t == "u32":
        return f"{v & 0xFFFFFFFF}u"
    v = (v + 2**31) % 2**32 - 2**31  # the i32 it wraps to
    return f"i32({v})" if v != I32_MIN else "i32(-2147483647 - 1)"


# WGSL has no erf: Abramowitz & Stegun 7.1.26 (max abs error 1.5e-7), as the numpy backend computes it
ERF_WGSL = """fn erf_(x: f32) -> f32 {
  let t = 1.0 / (1.0 + 0.3275911 * abs(x));
  let p = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
  return sign(x) * (1.0 - p * exp(-x * x));
}
fn erf4_(x: vec4<f32>) -> vec4<f32> {
  let t = 1.0 / (1.0 + 0.3275911 * abs(x));
  let p = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
  return sign(x) * (1.0 - p * exp(-x * x));
}"""

# sin after an explicit reduction to [-pi, pi] (Cody-Waite, 2*pi split in two f32s): GPU sin
# approximations lose absolute accuracy as |x| grows (NVIDIA's, on an H200: sin_wide failed)
SIN_WGSL = """fn sin_(x: f32) -> f32 {
  let k = round(x * 0.15915494309189535);
  return sin(fma(-k, -1.7484556000744487e-07, fma(-k, 6.2831854820251465, x)));
}
fn sin4_(x: vec4<f32>) -> vec4<f32> {
  let k = round(x * 0.15915494309189535);
  return sin(fma(-k, vec4<f32>(-1.7484556000744487e-07), fma(-k, vec4<f32>(6.2831854820251465), x)));
}"""

_BINARY = {
    Ops.ADD: "({a} + {b})", Ops.MUL: "({a} * {b})", Ops.CMPLT: "({a} < {b})", Ops.CMPNE: "({a} != {b})",
    Ops.CMPEQ: "({a} == {b})", Ops.AND: "({a} & {b})", Ops.OR: "({a} | {b})", Ops.XOR: "({a} ^ {b})",
    Ops.SHL: "({a} << u32({b}))", Ops.SHR: "({a} >> u32({b}))",
}  # fmt: skip
_UNARY = {
    Ops.EXP2: "exp2({a})", Ops.LOG2: "log2({a})", Ops.SIN: "sin({a})", Ops.SQRT: "sqrt({a})",
    Ops.RECIPROCAL: "({one} / {a})", Ops.NEG: "(-{a})", Ops.TRUNC: "trunc({a})", Ops.ERF: "erf_({a})",
}  # fmt: skip


@dataclass
class Kernel:
    name: str
    source: str
    bindings: tuple[tuple[int, DType, bool], ...]  # (arg index, dtype, written)
    groups: sint  # workgroups to dispatch (the runtime folds them into 2-D past the per-dimension limit)
    workgroup: int  # invocations per workgroup
    strategy: str
    variables: tuple[str, ...] = ()  # Variable names, in the order of the ``vars`` uniform buffer


def end_of(r: UOp) -> sint:
    """A RANGE's extent: an int, or a symbolic size."""
    return int(r.src[0].arg) if r.src[0].op is Ops.CONST else r.src[0]


def ceil_div(a: sint, b: int) -> sint:
    return math.ceil(a / b) if isinstance(a, int) else sdiv(sadd(a, b - 1), b)


Affine = tuple[dict[UOp, int], int]  # {RANGE: coefficient}, offset
LANES = "vec4<i32>(0, 1, 2, 3)"
XYZW = "xyzw"


def combine_lanes(combine: Any, vec: str) -> str:
    """The four lanes of a vec4 accumulator combined into one value."""
    x, y, z, w = (f"{vec}.{c}" for c in XYZW)
    return combine(combine(x, y), combine(z, w))


def workgroup_reduce(i: int, t: str, wg: int, own: str, combine: Any) -> list[str]:
    """WGSL lines: each invocation stores its value `own` in partial{i}, the workgroup halves it down to
    partial{i}[0], bound as red{i}."""
    return [
        f"partial{i}[lid] = {own};",
        "workgroupBarrier();",
        f"for (var s: i32 = {wg // 2}; s > 0; s = s >> 1u) {{",
        f"  if (lid < s) {{ partial{i}[lid] = {combine(f'partial{i}[lid]', f'partial{i}[lid + s]')}; }}",
        "  workgroupBarrier();",
        "}",
        f"let red{i}: {t} = partial{i}[0];",
    ]


_VEC_STORAGE = ("f32", "i32", "u32")  # 4-byte element types: 16-byte vec4 accesses


@dataclass
class WGSLRenderer:
    name: str
    ast: UOp
    f16: bool = False
    workgroup: int = 64
    names: dict[UOp, tuple[str, Block]] = field(default_factory=dict)
    ranges_of: dict[UOp, frozenset[UOp]] = field(default_factory=dict)
    counter: int = 0
    variables: tuple[str, ...] = ()
    # vectorized ranges (range = 4 * quad + lane, the lane a vec4 component) -> the WGSL name of the quad index;
    # every node depending on one of them is a vec4 value
    vec: dict[UOp, str] = field(default_factory=dict)
    vec_bindings: set[int] = field(default_factory=set)  # buffers declared array<vec4<T>>
    affines: dict[UOp, Affine | None] = field(default_factory=dict)

    def size(self, x: sint) -> str:
        """A size as WGSL i32: an int, or an expression over the Variables (non-negative: / and % are exact)."""
        try:
            return size_code(x)
        except NotImplementedError as exc:
            raise RenderError(f"kernel {self.name}: {exc}") from None

    def fresh(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def width(self, u: UOp) -> int:
        return 4 if self.vec and not self.ranges_of[u].isdisjoint(self.vec) else 1

    def stype(self, u: UOp) -> str:
        return compute_type(u.dtype, self.f16)

    def ctype(self, u: UOp) -> str:
        return f"vec4<{self.stype(u)}>" if self.width(u) == 4 else self.stype(u)

    # ---- analysis ----
    def analyse(self) -> None:
        defined = tuple(n for n in self.ast.toposort() if n.op is Ops.DEFINE_VAR)
        self.variables = tuple(v.arg[0] for v in variables(defined))
        for n in self.ast.toposort():
            if n.op is Ops.RANGE:
                self.ranges_of[n] = frozenset({n})
            elif n.op is Ops.REDUCE:
                self.ranges_of[n] = self.ranges_of[n.src[0]] - frozenset(n.src[1:])
            else:
                self.ranges_of[n] = frozenset().union(*(self.ranges_of[s] for s in n.src))
        for n in self.ast.toposort():  # index arithmetic is i32 in WGSL: prove it fits
            if n.op in (Ops.LOAD, Ops.STORE):
                for i in n.src[1].toposort():
                    if not (I32_MIN <= i.vmin and i.vmax <= I32_MAX):
                        raise RenderError(f"kernel {self.name}: index value range [{i.vmin}, {i.vmax}] of "
                                          f"{i.op.name} does not fit in i32; split the tensor")  # fmt: skip

    def affine(self, u: UOp) -> Affine | None:
        """An index as sum(coefficient * range) + offset, or None if it is not of that form."""
        if u in self.affines:
            return self.affines[u]
        out: Affine | None = None
        if u.op is Ops.CONST:
            out = {}, int(u.arg)
        elif u.op is Ops.RANGE:
            out = {u: 1}, 0
        elif u.op is Ops.ADD:
            a, b = self.affine(u.src[0]), self.affine(u.src[1])
            if a is not None and b is not None:
                coeffs = dict(a[0])
                for k, v in b[0].items():
                    coeffs[k] = coeffs.get(k, 0) + v
                out = {k: v for k, v in coeffs.items() if v}, a[1] + b[1]
        elif u.op is Ops.MUL:
            for x, c in ((u.src[0], u.src[1]), (u.src[1], u.src[0])):
                inner = self.affine(x) if c.op is Ops.CONST else None
                if inner is not None:
                    factor = int(c.arg)
                    out = {r: v * factor for r, v in inner[0].items() if v * factor}, inner[1] * factor
                    break
        elif u.op is Ops.NEG:
            inner = self.affine(u.src[0])
            out = None if inner is None else ({r: -v for r, v in inner[0].items()}, -inner[1])
        self.affines[u] = out
        return out

    def aligned_range(self, index: UOp, vec: set[UOp] | dict[UOp, str]) -> UOp | None:
        """The vectorized range along which this index reads 4 neighbouring, 16-byte aligned elements."""
        aff = self.affine(index)
        if aff is None:
            return None
        coeffs, offset = aff
        along = [r for r in coeffs if r in vec]
        if len(along) != 1 or coeffs[along[0]] != 1 or offset % 4:
            return None
        if any(c % 4 for r, c in coeffs.items() if r is not along[0]):
            return None
        return along[0]

    def plan_bindings(self, contexts: list[tuple[UOp, set[UOp]]]) -> set[int]:
        """Buffers read or written as vec4 somewhere (each context: an expression and its vectorized ranges).
        Their other accesses pick a component: b[i >> 2][i & 3]."""
        out: set[int] = set()
        for root, vec in contexts:
            for n in root.toposort():
                if n.op is Ops.STORE or (n.op is Ops.LOAD and len(n.src) == 2):
                    if storage_type(n.src[0].dtype, self.f16) not in _VEC_STORAGE:
                        continue
                    if self.aligned_range(n.src[1], vec) is not None:
                        out.add(n.src[0].arg)
        return out

    # ---- emission ----
    def place(self, u: UOp, current: Block) -> Block:
        """The outermost block (an ancestor of current) in which all of u's ranges exist."""
        found = current.outermost(self.ranges_of[u])
        if found is None:
            raise RenderError(f"kernel {self.name}: {u.op.name} is used outside the loop of its range")
        return found

    def ref(self, u: UOp, current: Block) -> str:
        if u.op is Ops.CONST:
            return literal(u.arg, u.dtype, self.f16)
        found = self.names.get(u)
        if found is not None and found[1] in current.ancestors():
            return found[0]
        block = self.place(u, current)
        expr = self.expr(u, block)
        name = self.fresh()
        block.lines.append(f"let {name}: {self.ctype(u)} = {expr};")
        self.names[u] = (name, block)
        return name

    def arg(self, u: UOp, b: Block, width: int) -> str:
        """u as an operand of a node of this width: a scalar used by a vec4 node is splat."""
        r = self.ref(u, b)
        return f"vec4<{self.stype(u)}>({r})" if width == 4 and self.width(u) == 1 else r

    def expr(self, u: UOp, b: Block) -> str:
        op = u.op
        w = self.width(u)
        if op is Ops.RANGE:
            return self.names[u][0]
        if op is Ops.DEFINE_VAR:
            return f"v_{u.arg[0]}"
        if op is Ops.LOAD:
            return self.load(u, b)
        if op is Ops.REDUCE:
            return self.reduce(u, b)
        src = [self.arg(s, b, w) for s in u.src]
        if op is Ops.ERF and w == 4:
            return f"erf4_({src[0]})"
        if op is Ops.SIN and self.stype(u) == "f32":
            return f"{'sin4_' if w == 4 else 'sin_'}({src[0]})"
        if op in _UNARY:
            return _UNARY[op].format(a=src[0], one=literal(1, u.dtype, self.f16))
        if op is Ops.MAX:
            return f"({src[0]} | {src[1]})" if u.dtype == dtypes.bool else f"max({src[0]}, {src[1]})"
        if op in (Ops.IDIV, Ops.MOD):
            a, c = src
            if u.dtype.is_float:
                return f"trunc({a} / {c})" if op is Ops.IDIV else f"({a} - {c} * trunc({a} / {c}))"
            if op is Ops.IDIV:
                return f"({a} / {c})"
            # a - trunc(a / c) * c, not %: NVIDIA's Vulkan driver computed i32 % as unsigned (H200, 2026-11);
            # % by 0 is 0, as WGSL's % defines it
            zero = f"{self.ctype(u)}({literal(0, u.dtype, self.f16)})"
            return f"select({a} - ({a} / {c}) * {c}, {zero}, {c} == {zero})"
        if op is Ops.XOR and u.dtype == dtypes.bool:
            return f"({src[0]} != {src[1]})"
        if op in (Ops.SHL, Ops.SHR):
            return f"({src[0]} {'<<' if op is Ops.SHL else '>>'} {'vec4<u32>' if w == 4 else 'u32'}({src[1]}))"
        if op in _BINARY:
            return _BINARY[op].format(a=src[0], b=src[1])
        if op is Ops.WHERE:
            c, x, y = src
            return f"select({y}, {x}, {c})"
        if op is Ops.CAST:
            return self.cast(src[0], u.src[0].dtype, u.dtype, w)
        if op is Ops.BITCAST:
            return f"bitcast<{self.ctype(u)}>({src[0]})"
        raise RenderError(f"kernel {self.name}: WGSL renderer has no rule for {op.name}")

    def cast(self, x: str, src: DType, dst: DType, width: int = 1) -> str:
        st, dt = compute_type(src, self.f16), compute_type(dst, self.f16)
        if st == dt:
            return x

        def lit(v: int, d: DType, t: str) -> str:
            return f"vec4<{t}>({literal(v, d, self.f16)})" if width == 4 else literal(v, d, self.f16)

        if dt == "bool":
            return f"({x} != {lit(0, src, st)})"
        if st == "bool":
            return f"select({lit(0, dst, dt)}, {lit(1, dst, dt)}, {x})"
        return f"vec4<{dt}>({x})" if width == 4 else f"{dt}({x})"

    def access(self, arg: int, idx: str) -> str:
        """One element of a buffer (a component of a vec4 when the buffer is declared as vec4s)."""
        return f"b{arg}[({idx}) >> 2u][({idx}) & 3]" if arg in self.vec_bindings else f"b{arg}[{idx}]"

    def quad(self, index: UOp, b: Block) -> str | None:
        """The vec4 element an aligned index reads, as WGSL (None: not a vec4 access)."""
        along = self.aligned_range(index, self.vec)
        if along is None:
            return None
        coeffs, offset = self.affine(index)  # type: ignore[misc]
        terms = [self.vec[along]]
        for r, c in coeffs.items():
            if r is not along:
                name = self.ref(r, b)
                terms.append(name if c == 4 else f"{name} * {c // 4}")
        if offset:
            terms.append(str(offset // 4))
        return "(" + " + ".join(terms) + ")"

    def load(self, u: UOp, b: Block) -> str:
        arg, w, gated = u.src[0].arg, self.width(u), len(u.src) == 3
        t = self.stype(u)
        if w == 4 and not gated and arg in self.vec_bindings and (q := self.quad(u.src[1], b)) is not None:
            value = f"b{arg}[{q}]"
            return f"({value} != vec4<u32>(0u))" if u.dtype == dtypes.bool else value
        if w == 1:
            idx = self.ref(u.src[1], b)
            if gated:
                idx = f"select(0, {idx}, {self.ref(u.src[2], b)})"
            value = self.access(arg, idx)
            if u.dtype == dtypes.bool:
                value = f"({value} != 0u)"
            if gated:
                value = f"select({literal(0, u.dtype, self.f16)}, {value}, {self.ref(u.src[2], b)})"
            return value
        idx = self.arg(u.src[1], b, 4)  # a gather: four scalar loads
        valid = self.arg(u.src[2], b, 4) if gated else ""
        lanes = []
        for c in XYZW:
            lane = self.access(arg, f"select(0, {idx}.{c}, {valid}.{c})" if gated else f"{idx}.{c}")
            lanes.append(f"({lane} != 0u)" if u.dtype == dtypes.bool else lane)
        value = f"vec4<{t}>({', '.join(lanes)})"
        if gated:
            value = f"select(vec4<{t}>({literal(0, u.dtype, self.f16)}), {value}, {valid})"
        return value

    def store_lines(self, store: UOp, b: Block) -> list[str]:
        """The store of the kernel's value (a vec4 store where the index allows it)."""
        arg, is_bool = store.src[0].arg, store.src[0].dtype == dtypes.bool
        w = self.width(store.src[1])
        value = self.arg(store.src[2], b, w)
        if w == 4 and arg in self.vec_bindings and (q := self.quad(store.src[1], b)) is not None:
            if is_bool:
                value = f"select(vec4<u32>(0u), vec4<u32>(1u), {value})"
            return [f"b{arg}[{q}] = {value};"]
        idx = self.ref(store.src[1], b)
        if w == 1:
            return [f"{self.access(arg, idx)} = {f'select(0u, 1u, {value})' if is_bool else value};"]
        out = []
        for c in XYZW:
            lane = f"select(0u, 1u, {value}.{c})" if is_bool else f"{value}.{c}"
            out.append(f"{self.access(arg, f'{idx}.{c}')} = {lane};")
        return out

    def reduce(self, u: UOp, b: Block) -> str:
        acc = self.fresh("acc")
        w = self.width(u)
        identity = self.identity(u)
        if w == 4:
            identity = f"vec4<{self.stype(u)}>({identity})"
        b.lines.append(f"var {acc}: {self.ctype(u)} = {identity};")
        inner, opened = b, []
        for r in u.src[1:]:
            name = self.fresh("r")
            inner = Block(inner.scope | {r}, inner)
            self.names[r] = (name, inner)
            opened.append((inner, name, self.size(end_of(r))))
        value = self.arg(u.src[0], inner, w)
        inner.lines.append(f"{acc} = {self.combiner(u)(acc, value)};")
        for blk, name, end in reversed(opened):  # close innermost first, each into its parent
            assert blk.parent is not None
            blk.parent.lines.append(f"for (var {name}: i32 = 0; {name} < {end}; {name}++) {{")
            blk.parent.lines.extend("  " + ln for ln in blk.lines)
            blk.parent.lines.append("}")
        return acc

    # ---- rendering an expression with some ranges bound to given WGSL expressions ----
    def sub(self, bound: dict[UOp, str], vec: dict[UOp, str] | None = None) -> tuple[WGSLRenderer, Block]:
        """A renderer for one part of the kernel where each RANGE (or REDUCE) in bound is that expression,
        and the ranges in vec are vectorized (bound to a vec4<i32>, with that quad index)."""
        sub = WGSLRenderer(self.name, self.ast, self.f16, self.workgroup)
        sub.ranges_of, sub.counter, sub.variables = self.ranges_of, self.counter, self.variables
        sub.vec_bindings, sub.affines, sub.vec = self.vec_bindings, self.affines, dict(vec or {})
        block = Block(frozenset(n for n in bound if n.op is Ops.RANGE), None)  # nested loops open their own
        for node, expr in bound.items():
            sub.names[node] = (expr, block)
        return sub, block

    def inline(self, u: UOp, bound: dict[UOp, str], vec: dict[UOp, str] | None = None) -> tuple[list[str], str]:
        """Lines computing u, and its name (a vec4 value where u depends on a range in vec)."""
        sub, block = self.sub(bound, vec)
        value = sub.ref(u, block)
        self.counter = sub.counter
        return block.lines, value

    def store_value(self, store: UOp, bound: dict[UOp, str], vec: dict[UOp, str] | None = None) -> list[str]:
        """The epilogue: the stored value and index with bound ranges, and the store itself."""
        sub, block = self.sub(bound, vec)
        stores = sub.store_lines(store, block)
        self.counter = sub.counter
        return [*block.lines, *stores]

    def split(self, flat: str, ranges: list[UOp], names: list[str], ends: list[sint] | None = None) -> list[str]:
        """let-lines recovering each range's value from a flat index below the product of the ends (last range
        fastest; the first needs no modulo)."""
        ends = ends if ends is not None else [end_of(r) for r in ranges]
        lines = []
        for i, name in enumerate(names):
            stride = sprod(ends[i + 1 :])
            quotient = f"({flat} / {self.size(stride)})" if stride != 1 else flat
            lines.append(f"let {name}: i32 = {quotient if i == 0 else f'{quotient} % {self.size(ends[i])}'};")
        return lines

    def quads(self, flat: str, ranges: list[UOp], vectorize: bool) -> tuple[list[str], list[str], dict[UOp, str], sint]:
        """Split a flat index over ranges, the last one in quads when vectorize: (lines, names, vec, count)."""
        ends = [end_of(r) for r in ranges]
        names = [self.fresh("g") for _ in ranges]
        if not vectorize:
            return self.split(flat, ranges, names, ends), names, {}, sprod(ends)
        q = self.fresh("q")
        ends[-1] = int(ranges[-1].src[0].arg) // 4  # vectorizable: a constant multiple of 4
        lines = self.split(flat, ranges, [*names[:-1], q], ends)
        lines.append(f"let {names[-1]}: vec4<i32> = vec4<i32>({q} * 4) + {LANES};")
        return lines, names, {ranges[-1]: q}, sprod(ends)

    def render(self, opts: KernelOpts | None = None) -> Kernel:
        self.analyse()
        nodes = self.ast.toposort()
        store = self.ast.src[0]
        assert store.op is Ops.STORE, "a kernel is SINK(STORE)"
        globs = sorted({n.arg: n for n in nodes if n.op is Ops.DEFINE_GLOBAL}.items())
        global_ranges = sorted((n for n in nodes if n.op is Ops.RANGE and n.arg[1] == "global"), key=lambda r: r.arg[0])
        total = sprod(end_of(r) for r in global_ranges)
        if upper(total) > I32_MAX:
            raise RenderError(f"kernel {self.name}: {total} output elements do not fit in i32 indexing")
        if total == 0:  # an empty output: nothing to compute, and the runtime dispatches nothing
            source = f"// {self.name}: empty output\n@compute @workgroup_size(1)\nfn main() {{}}\n"
            return Kernel(self.name, source, (), 0, 1, "flat")
        opts = opts or KernelOpts("flat", self.workgroup)
        self.workgroup = opts.local
        c = opts.contraction
        if opts.strategy == "tile" and c is not None:
            rm, rn = opts.upcast
            if opts.width == 4 and tile_vectorizable(c) and rm % 4 == 0 and rn % 4 == 0 and opts.tile[2] % 4 == 0:
                body, groups = self.render_tile_vec(store, global_ranges, opts)
            else:
                body, groups = self.render_tile(store, global_ranges, opts)
        elif opts.strategy == "group":
            body, groups = self.render_group(store, global_ranges, opts.width)
        else:
            body, groups = self.render_flat(store, global_ranges, opts.width)
        header = ["enable f16;"] if self.f16 and any(n.dtype == dtypes.float16 for n in nodes) else []
        if any(n.op is Ops.ERF for n in nodes):
            header.append(ERF_WGSL)
        if any(n.op is Ops.SIN and compute_type(n.dtype, self.f16) == "f32" for n in nodes):
            header.append(SIN_WGSL)
        bindings = []
        for arg, g in globs:
            written = arg == store.src[0].arg
            access = "read_write" if written else "read"
            elem = storage_type(g.dtype, self.f16)
            if arg in self.vec_bindings:
                elem = f"vec4<{elem}>"
            header.append(f"@group(0) @binding({arg}) var<storage, {access}> b{arg}: array<{elem}>;")
            bindings.append((arg, g.dtype, written))
        if self.variables:  # uniform arrays have a 16-byte stride: four values per element
            header.append(f"struct Vars {{ v: array<vec4<i32>, {math.ceil(len(self.variables) / 4)}> }}")
            header.append(f"@group(0) @binding({len(globs)}) var<uniform> vars: Vars;")
        described = opts.strategy + (", vec4" if self.vec_bindings else "")
        source = "\n".join([f"// {self.name} ({described})", *header, *body]) + "\n"
        return Kernel(self.name, source, tuple(bindings), groups, self.workgroup, opts.strategy, self.variables)

    def entry(self) -> list[str]:
        return [
            f"@compute @workgroup_size({self.workgroup})",
            "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid_u: u32,",
            "        @builtin(num_workgroups) nwg: vec3<u32>) {",
            "  let w: i32 = i32(wid.x + wid.y * nwg.x);  // workgroups fold into 2-D past the dispatch limit",
            "  let lid: i32 = i32(lid_u);",
            *(f"  let v_{v}: i32 = vars.v[{i // 4}][{i % 4}];" for i, v in enumerate(self.variables)),
        ]

    def render_flat(self, store: UOp, global_ranges: list[UOp], width: int) -> tuple[list[str], sint]:
        """An invocation per output element, or per four neighbouring ones along the innermost range (vec4)."""
        vectorize = width == 4 and bool(global_ranges) and vectorizable(global_ranges[-1])
        root = Block(frozenset(global_ranges), None)
        lines, names, self.vec, count = self.quads("t", global_ranges, vectorize)
        if vectorize:
            self.vec_bindings = self.plan_bindings([(store, set(self.vec))])
        root.lines.extend(lines)
        for r, name in zip(global_ranges, names):
            self.names[r] = (name, root)
        root.lines.extend(self.store_lines(store, root))
        body = [
            *self.entry(),
            f"  let t: i32 = w * {self.workgroup} + lid;",
            f"  if (t >= {self.size(count)}) {{ return; }}",
            *("  " + ln for ln in root.lines),
            "}",
        ]
        return body, ceil_div(count, self.workgroup)

    def render_group(self, store: UOp, global_ranges: list[UOp], width: int) -> tuple[list[str], sint]:
        """One workgroup per row (the global ranges the reductions depend on; every output when they depend
        on all). For each reduction, the invocations stride over its range (in quads, as vec4s, where it
        allows), then a tree in shared memory; every invocation keeps the result. Then they stride over the
        rest of the global ranges (the row's elements), compute the rest of the expression and store."""
        top = top_reduces(self.ast, self.ranges_of)
        row_set = frozenset().union(*(self.ranges_of[t] for t in top)) if top else frozenset(global_ranges)
        rows = [r for r in global_ranges if r in row_set]
        inner = [r for r in global_ranges if r not in row_set]
        wg = self.workgroup
        extent = single_extent(RowKernel(tuple(rows), tuple(inner), tuple(top))) if top else None
        if width == 4 and extent is not None and extent % (4 * wg) == 0 and extent // (4 * wg) <= MAX_ROW_QUADS:
            return self.render_row_cached(store, rows, inner[0], top, extent // (4 * wg))
        vec_of = {t: t.src[-1] for t in top if width == 4 and vectorizable(t.src[-1])}
        inner_vec = width == 4 and bool(inner) and vectorizable(inner[-1])
        contexts = [(t.src[0], {v}) for t, v in vec_of.items()] + ([(store, {inner[-1]})] if inner_vec else [])
        self.vec_bindings = self.plan_bindings(contexts)
        rnames = [self.fresh("g") for _ in rows]
        bound: dict[UOp, str] = dict(zip(rows, rnames))
        shared: list[str] = []
        body_lines: list[str] = []
        for i, red in enumerate(top):
            t = self.stype(red)
            lines, names, vec, size = self.quads("f", list(red.src[1:]), red in vec_of)
            value_lines, value = self.inline(red.src[0], bound | dict(zip(red.src[1:], names)), vec)
            combine = self.combiner(red)
            acc_t, identity = t, self.identity(red)
            if vec:
                acc_t, identity = f"vec4<{t}>", f"vec4<{t}>({identity})"
                if self.ranges_of[red.src[0]].isdisjoint(vec):  # the same value in every lane: still four terms
                    value = f"vec4<{t}>({value})"
            shared.append(f"var<workgroup> partial{i}: array<{t}, {wg}>;")
            body_lines += [
                f"var acc{i}: {acc_t} = {identity};",
                f"for (var f: i32 = lid; f < {self.size(size)}; f += {wg}) {{",
                *("  " + ln for ln in lines),
                *("  " + ln for ln in value_lines),
                f"  acc{i} = {combine(f'acc{i}', value)};",
                "}",
            ]
            own = combine_lanes(combine, f"acc{i}") if vec else f"acc{i}"  # vec: the four lanes' partial results
            body_lines += workgroup_reduce(i, t, wg, own, combine)
            bound[red] = f"red{i}"
        if inner:
            lines, names, vec, count = self.quads("e", inner, inner_vec)
            epilogue = [
                f"for (var e: i32 = lid; e < {self.size(count)}; e += {wg}) {{",
                *("  " + ln for ln in lines),
                *("  " + ln for ln in self.store_value(store, bound | dict(zip(inner, names)), vec)),
                "}",
            ]
        else:
            epilogue = ["if (lid == 0) {", *("  " + ln for ln in self.store_value(store, bound)), "}"]
        groups = sprod(end_of(r) for r in rows)
        body = [
            *shared,
            *self.entry(),
            f"  if (w >= {self.size(groups)}) {{ return; }}  // uniform: the whole workgroup leaves together",
            *("  " + ln for ln in self.split("w", rows, rnames)),
            *("  " + ln for ln in body_lines),
            *("  " + ln for ln in epilogue),
            "}",
        ]
        return body, groups

    def render_row_cached(
        self, store: UOp, rows: list[UOp], along: UOp, top: list[UOp], quads: int
    ) -> tuple[list[str], sint]:
        """A row kernel whose passes (each reduction, then the stores) all run over one range of the same
        extent, a multiple of 4 x workgroup: each invocation owns the same ``quads`` quads of the row in
        every pass, unrolled, and keeps what it loaded and computed in registers. The row is read from
        memory once, and a value shared by passes (softmax's exp(x - max) in the sum and in the store) is
        computed once."""
        wg = self.workgroup
        self.vec_bindings = self.plan_bindings([(store, {along})])
        rnames = [self.fresh("g") for _ in rows]
        bound: dict[UOp, str] = dict(zip(rows, rnames))
        lanes: list[tuple[WGSLRenderer, Block]] = []
        body_lines: list[str] = []
        for u in range(quads):  # invocation lid owns quads lid, lid + wg, ...: neighbours read neighbours
            q, v = self.fresh("q"), self.fresh("g")
            body_lines += [f"let {q}: i32 = lid + {u * wg};", f"let {v}: vec4<i32> = vec4<i32>({q} * 4) + {LANES};"]
            lanes.append(self.sub(bound | {along: v}, {along: q}))
        for render, _ in lanes:  # one counter for all: their lines share one scope
            render.counter = self.counter
        shared: list[str] = []

        def emit(render: WGSLRenderer, block: Block, make: Any) -> tuple[list[str], Any]:
            mark = len(block.lines)
            out = make(render, block)
            self.counter = max(self.counter, render.counter)
            for other, _ in lanes:
                other.counter = self.counter
            return block.lines[mark:], out

        for i, red in enumerate(top):
            t = self.stype(red)
            value = substitute(red.src[0], {red.src[1]: along})
            self.note(value)
            combine = self.combiner(red)
            body_lines.append(f"var acc{i}: vec4<{t}> = vec4<{t}>({self.identity(red)});")
            for render, block in lanes:
                lines, name = emit(render, block, lambda r, b: r.arg(value, b, 4))  # noqa: B023
                body_lines += [*lines, f"acc{i} = {combine(f'acc{i}', name)};"]
            shared.append(f"var<workgroup> partial{i}: array<{t}, {wg}>;")
            body_lines += workgroup_reduce(i, t, wg, combine_lanes(combine, f"acc{i}"), combine)
            for render, block in lanes:
                render.names[red] = (f"red{i}", block)
        for render, block in lanes:
            lines, stores = emit(render, block, lambda r, b: r.store_lines(store, b))
            body_lines += [*lines, *stores]
        groups = sprod(end_of(r) for r in rows)
        body = [
            *shared,
            *self.entry(),
            f"  if (w >= {self.size(groups)}) {{ return; }}  // uniform: the whole workgroup leaves together",
            *("  " + ln for ln in self.split("w", rows, rnames)),
            *("  " + ln for ln in body_lines),
            "}",
        ]
        return body, groups

    def note(self, root: UOp) -> None:
        """ranges_of for nodes made after analyse() (substituted expressions)."""
        for n in root.toposort():
            if n not in self.ranges_of:
                if n.op is Ops.RANGE:
                    self.ranges_of[n] = frozenset({n})
                elif n.op is Ops.REDUCE:
                    self.ranges_of[n] = self.ranges_of[n.src[0]] - frozenset(n.src[1:])
                else:
                    self.ranges_of[n] = frozenset().union(*(self.ranges_of[s] for s in n.src))

    def combiner(self, red: UOp) -> Any:
        if red.arg is Ops.ADD:
            return lambda x, y: f"{x} + {y}"
        if red.dtype == dtypes.bool:
            return lambda x, y: f"{x} | {y}"
        return lambda x, y: f"max({x}, {y})"

    def tile_setup(self, global_ranges: list[UOp], opts: KernelOpts) -> tuple[list[str], dict[UOp, str], sint]:
        """The workgroup's output tile: (lines naming tile_m, tile_n and the outer ranges, their names, groups)."""
        c = opts.contraction
        assert c is not None
        tm, tn, _ = opts.tile
        tiles_m, tiles_n = ceil_div(end_of(c.m), tm), ceil_div(end_of(c.n), tn)
        outer = [r for r in global_ranges if r is not c.m and r is not c.n]
        groups = sprod([*(end_of(r) for r in outer), tiles_m, tiles_n])
        onames = [self.fresh("o") for _ in outer]
        lines = [
            f"  if (w >= {self.size(groups)}) {{ return; }}  // uniform: the whole workgroup leaves",
            f"  let tile_n: i32 = w % {self.size(tiles_n)};",
            f"  let tile_m: i32 = (w / {self.size(tiles_n)}) % {self.size(tiles_m)};",
            f"  let outer: i32 = w / {self.size(smul(tiles_n, tiles_m))};",
            *("  " + ln for ln in self.split("outer", outer, onames)),
        ]
        return lines, dict(zip(outer, onames)), groups

    def render_tile(self, store: UOp, global_ranges: list[UOp], opts: KernelOpts) -> tuple[list[str], sint]:
        """Shared-memory tiled contraction with an RM x RN register tile per invocation."""
        c = opts.contraction
        assert c is not None
        tm, tn, tk = opts.tile
        rm, rn = opts.upcast
        tx_count = tn // rn  # invocations along n
        m_end, n_end = self.size(end_of(c.m)), self.size(end_of(c.n))
        k_end = self.size(sprod(end_of(r) for r in c.k))
        ka = [self.fresh("ka") for _ in c.k]  # the k ranges recovered from the flat k of a tile element
        kb = [self.fresh("kb") for _ in c.k]
        setup, obound, groups = self.tile_setup(global_ranges, opts)
        t = self.stype(c.reduce)
        a_lines, a_val = self.inline(c.a, obound | {c.m: "am"} | dict(zip(c.k, ka)))
        b_lines, b_val = self.inline(c.b, obound | {c.n: "bn"} | dict(zip(c.k, kb)))
        a_lines = [*self.split("ak", list(c.k), ka), *a_lines]
        b_lines = [*self.split("bk", list(c.k), kb), *b_lines]
        epilogue_lines = []
        for i in range(rm):
            for j in range(rn):
                stored = self.store_value(store, obound | {c.m: f"m{i}", c.n: f"n{j}", c.reduce: f"c_{i}_{j}"})
                epilogue_lines += [
                    f"  if (m{i} < {m_end} && n{j} < {n_end}) {{",
                    *("    " + ln for ln in stored),
                    "  }",
                ]
        epilogue_lines = [
            *(f"  let m{i}: i32 = tile_m * TM + ty + {i * (tm // rm)};" for i in range(rm)),
            *(f"  let n{j}: i32 = tile_n * TN + tx + {j * (tn // rn)};" for j in range(rn)),
            *epilogue_lines,
        ]
        zero = literal(0, c.reduce.dtype, self.f16)
        loads_a, loads_b = math.ceil(tm * tk / self.workgroup), math.ceil(tn * tk / self.workgroup)
        body = [
            f"const TM: i32 = {tm}; const TN: i32 = {tn}; const TK: i32 = {tk};",
            f"const RM: i32 = {rm}; const RN: i32 = {rn};",
            f"var<workgroup> As: array<{t}, {(tm + 1) * tk}>;  // [TK][TM + 1]: the pad spreads stores over banks",
            f"var<workgroup> Bs: array<{t}, {tn * tk}>;  // [TK][TN]",
            *self.entry(),
            *setup,
            f"  let tx: i32 = lid % {tx_count};",
            f"  let ty: i32 = lid / {tx_count};",
            # the register tile: RM x RN scalars (constant names, so they live in registers)
            *(f"  var c_{i}_{j}: {t} = {zero};" for i in range(rm) for j in range(rn)),
            f"  for (var k0: i32 = 0; k0 < {k_end}; k0 += TK) {{",
            f"    for (var e: i32 = 0; e < {loads_a}; e++) {{",
            f"      let f: i32 = lid + e * {self.workgroup};",
            "      if (f < TM * TK) {",
            "        let am: i32 = tile_m * TM + f / TK;",
            "        let ak: i32 = k0 + f % TK;",
            f"        var av: {t} = {zero};",
            f"        if (am < {m_end} && ak < {k_end}) {{",
            *("          " + ln for ln in a_lines),
            f"          av = {a_val};",
            "        }",
            "        As[(f % TK) * (TM + 1) + f / TK] = av;",
            "      }",
            "    }",
            f"    for (var e: i32 = 0; e < {loads_b}; e++) {{",
            f"      let f: i32 = lid + e * {self.workgroup};",
            "      if (f < TN * TK) {",
            "        let bn: i32 = tile_n * TN + f % TN;",
            "        let bk: i32 = k0 + f / TN;",
            f"        var bv: {t} = {zero};",
            f"        if (bn < {n_end} && bk < {k_end}) {{",
            *("          " + ln for ln in b_lines),
            f"          bv = {b_val};",
            "        }",
            "        Bs[f] = bv;",
            "      }",
            "    }",
            "    workgroupBarrier();",
            "    for (var kk: i32 = 0; kk < TK; kk++) {",
            # invocation (tx, ty) owns rows ty + i*TM/RM and columns tx + j*TN/RN: neighbouring
            # invocations read neighbouring shared-memory words (no bank conflicts)
            *(f"      let a{i}: {t} = As[kk * (TM + 1) + ty + {i * (tm // rm)}];" for i in range(rm)),
            *(f"      let b{j}: {t} = Bs[kk * TN + tx + {j * (tn // rn)}];" for j in range(rn)),
            *(
                f"      c_{i}_{j} = fma(a{i}, b{j}, c_{i}_{j});"
                if t in ("f32", "f16")
                else f"      c_{i}_{j} = c_{i}_{j} + a{i} * b{j};"
                for i in range(rm)
                for j in range(rn)
            ),
            "    }",
            "    workgroupBarrier();",
            "  }",
            *epilogue_lines,
            "}",
        ]
        return body, groups

    def render_tile_vec(self, store: UOp, global_ranges: list[UOp], opts: KernelOpts) -> tuple[list[str], sint]:
        """The tiled contraction with vec4 everywhere: operand tiles are copied as vec4s (along k for the
        first operand, along n for the second) into shared memory laid out as [TM][TK/4] and [TK][TN/4]
        vec4s; each invocation owns RM rows and RN columns in groups of four neighbours, reads them as
        vec4s (one shared load per four FMAs) and keeps RM x RN/4 vec4 accumulators. The next k-slice is
        loaded into registers while the current one is multiplied (register double buffering). The
        epilogue stores four neighbouring columns as one vec4 where the output index allows."""
        c = opts.contraction
        assert c is not None
        (k,) = c.k
        tm, tn, tk = opts.tile
        rm, rn = opts.upcast
        tx_count, ty_count = tn // rn, tm // rm
        sm, sn = 4 * ty_count, 4 * tx_count  # distance between an invocation's groups of 4 rows / columns
        kq_count, nq_count = tk // 4, tn // 4
        m_end, n_end, k_end = self.size(end_of(c.m)), self.size(end_of(c.n)), self.size(end_of(k))
        setup, obound, groups = self.tile_setup(global_ranges, opts)
        self.vec_bindings = self.plan_bindings([(c.a, {k}), (c.b, {c.n}), (store, {c.n})])
        t = self.stype(c.reduce)
        v = f"vec4<{t}>"
        zero = f"{v}({literal(0, c.reduce.dtype, self.f16)})"
        loads_a = math.ceil(tm * kq_count / self.workgroup)
        loads_b = math.ceil(tk * nq_count / self.workgroup)

        def fetch(k0: str) -> list[str]:
            """Load the operand slice starting at k0 into the registers pa*, pb*."""
            out = []
            for e in range(loads_a):
                f = self.fresh("fl")
                am, akq, ak = self.fresh("am"), self.fresh("akq"), self.fresh("ak")
                lines, val = self.inline(c.a, obound | {c.m: am, k: ak}, {k: akq})
                if self.ranges_of[c.a].isdisjoint({k}):
                    val = f"{v}({val})"
                out += [
                    f"pa{e} = {zero};",
                    f"let {f}: i32 = lid + {e * self.workgroup};",
                    f"let {am}: i32 = tile_m * TM + {f} / {kq_count};",
                    f"let {akq}: i32 = ({k0}) / 4 + {f} % {kq_count};",
                    f"if ({f} < {tm * kq_count} && {am} < {m_end} && {akq} * 4 < {k_end}) {{",
                    f"  let {ak}: vec4<i32> = vec4<i32>({akq} * 4) + {LANES};",
                    *("  " + ln for ln in lines),
                    f"  pa{e} = {val};",
                    "}",
                ]
            for e in range(loads_b):
                f = self.fresh("fl")
                bk, bnq, bn = self.fresh("bk"), self.fresh("bnq"), self.fresh("bn")
                lines, val = self.inline(c.b, obound | {c.n: bn, k: bk}, {c.n: bnq})
                if self.ranges_of[c.b].isdisjoint({c.n}):
                    val = f"{v}({val})"
                out += [
                    f"pb{e} = {zero};",
                    f"let {f}: i32 = lid + {e * self.workgroup};",
                    f"let {bk}: i32 = {k0} + {f} / {nq_count};",
                    f"let {bnq}: i32 = tile_n * {nq_count} + {f} % {nq_count};",
                    f"if ({f} < {tk * nq_count} && {bnq} * 4 < {n_end} && {bk} < {k_end}) {{",
                    f"  let {bn}: vec4<i32> = vec4<i32>({bnq} * 4) + {LANES};",
                    *("  " + ln for ln in lines),
                    f"  pb{e} = {val};",
                    "}",
                ]
            return out

        def stash() -> list[str]:
            """Registers -> shared memory."""
            out = []
            for e in range(loads_a):
                out.append(
                    f"if (lid + {e * self.workgroup} < {tm * kq_count}) {{ As[lid + {e * self.workgroup}] = pa{e}; }}"
                )
            for e in range(loads_b):
                out.append(
                    f"if (lid + {e * self.workgroup} < {tk * nq_count}) {{ Bs[lid + {e * self.workgroup}] = pb{e}; }}"
                )
            return out

        rows = [f"{(i // 4) * sm} + ty * 4 + {i % 4}" for i in range(rm)]  # within the tile
        fma = (
            (lambda a, b, acc: f"fma({a}, {b}, {acc})")
            if t in ("f32", "f16")
            else (lambda a, b, acc: f"{acc} + {a} * {b}")
        )
        inner = []
        for i in range(rm):
            inner.append(f"let a{i}: {v} = As[({rows[i]}) * {kq_count} + kq];")
        for kk in range(4):
            for g in range(rn // 4):
                inner.append(f"let b{kk}_{g}: {v} = Bs[(kq * 4 + {kk}) * {nq_count} + {g * (sn // 4)} + tx];")
            for i in range(rm):
                for g in range(rn // 4):
                    inner.append(f"c_{i}_{g} = {fma(f'{v}(a{i}.{XYZW[kk]})', f'b{kk}_{g}', f'c_{i}_{g}')};")
        epilogue = []
        for g in range(rn // 4):
            epilogue += [
                f"let nq{g}: i32 = tile_n * {nq_count} + {g * (sn // 4)} + tx;",
                f"let n{g}: vec4<i32> = vec4<i32>(nq{g} * 4) + {LANES};",
            ]
        for i in range(rm):
            epilogue.append(f"let m{i}: i32 = tile_m * TM + {rows[i]};")
            for g in range(rn // 4):
                stored = self.store_value(store, obound | {c.m: f"m{i}", c.n: f"n{g}", c.reduce: f"c_{i}_{g}"},
                                          {c.n: f"nq{g}"})  # fmt: skip
                epilogue += [f"if (m{i} < {m_end} && nq{g} * 4 < {n_end}) {{", *("  " + ln for ln in stored), "}"]
        body = [
            f"const TM: i32 = {tm}; const TN: i32 = {tn}; const TK: i32 = {tk};",
            f"var<workgroup> As: array<{v}, {tm * kq_count}>;  // [TM][TK/4]",
            f"var<workgroup> Bs: array<{v}, {tk * nq_count}>;  // [TK][TN/4]",
            *self.entry(),
            *setup,
            f"  let tx: i32 = lid % {tx_count};",
            f"  let ty: i32 = lid / {tx_count};",
            *(f"  var c_{i}_{g}: {v} = {zero};" for i in range(rm) for g in range(rn // 4)),
            *(f"  var pa{e}: {v};" for e in range(loads_a)),
            *(f"  var pb{e}: {v};" for e in range(loads_b)),
            *("  " + ln for ln in fetch("0")),
            *("  " + ln for ln in stash()),
            "  workgroupBarrier();",
            f"  for (var k0: i32 = 0; k0 < {k_end}; k0 += TK) {{",
            f"    let more: bool = k0 + TK < {k_end};",
            "    if (more) {",
            *("      " + ln for ln in fetch("k0 + TK")),
            "    }",
            f"    for (var kq: i32 = 0; kq < {kq_count}; kq++) {{",
            *("      " + ln for ln in inner),
            "    }",
            "    workgroupBarrier();",
            "    if (more) {",
            *("      " + ln for ln in stash()),
            "    }",
            "    workgroupBarrier();",
            "  }",
            *("  " + ln for ln in epilogue),
            "}",
        ]
        return body, groups

    def identity(self, red: UOp) -> str:
        t = self.stype(red)
        if red.arg is Ops.ADD:
            return literal(0, red.dtype, self.f16)
        if red.dtype.is_float:
            return literal(-math.inf, red.dtype, self.f16)
        if red.dtype == dtypes.bool:
            return "false"
        return "i32(-2147483647 - 1)" if t == "i32" else "0u"


def substitute(root: UOp, mapping: dict[UOp, UOp]) -> UOp:
    """root with each node in mapping replaced (sources first, unchanged nodes kept as they are)."""
    done: dict[UOp, UOp] = dict(mapping)
    for n in root.toposort():
        if n not in done:
            src = tuple(done.get(x, x) for x in n.src)
            done[n] = n if src == n.src else n.replace(src=src)
    return done[root]


def render_wgsl(name: str, ast: UOp, f16: bool = False, workgroup: int = 64, opts: KernelOpts | None = None) -> Kernel:
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20000))  # deep fused expressions recurse once per node
    try:
        return WGSLRenderer(name, ast, f16, workgroup).render(opts)
    finally:
        sys.setrecursionlimit(limit)

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
from anneal_ir.sint import sadd, sdiv, sint, smul, sprod, upper, variables
from anneal_schedule.opt import KernelOpts

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
class Block:
    scope: frozenset[UOp]  # ranges that exist inside this block
    parent: Block | None
    lines: list[str] = field(default_factory=list)

    def ancestors(self) -> list[Block]:
        out: list[Block] = []
        b: Block | None = self
        while b is not None:
            out.append(b)
            b = b.parent
        return out  # self first, root last


@dataclass
class Kernel:
    name: str
    source: str
    bindings: tuple[tuple[int, DType, bool], ...]  # (arg index, dtype, written)
    groups: sint  # workgroups to dispatch (the runtime folds them into 2-D past the per-dimension limit)
    workgroup: int  # invocations per workgroup
    strategy: str
    variables: tuple[str, ...] = ()  # Variable names, in the order of the ``vars`` uniform buffer


_SIZE_OPS = {Ops.ADD: "+", Ops.MUL: "*", Ops.IDIV: "/", Ops.MOD: "%"}


def end_of(r: UOp) -> sint:
    """A RANGE's extent: an int, or a symbolic size."""
    return int(r.src[0].arg) if r.src[0].op is Ops.CONST else r.src[0]


def ceil_div(a: sint, b: int) -> sint:
    return math.ceil(a / b) if isinstance(a, int) else sdiv(sadd(a, b - 1), b)


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

    def size(self, x: sint) -> str:
        """A size as WGSL i32: an int, or an expression over the Variables (non-negative: / and % are exact)."""
        if isinstance(x, int):
            return str(x)
        if x.op is Ops.CONST:
            return str(int(x.arg))
        if x.op is Ops.DEFINE_VAR:
            return f"v_{x.arg[0]}"
        if x.op in _SIZE_OPS:
            return "(" + f" {_SIZE_OPS[x.op]} ".join(self.size(s) for s in x.src) + ")"
        if x.op is Ops.MAX:
            return f"max({self.size(x.src[0])}, {self.size(x.src[1])})"
        raise RenderError(f"kernel {self.name}: a symbolic size with {x.op.name}")

    def fresh(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def ctype(self, u: UOp) -> str:
        return compute_type(u.dtype, self.f16)

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

    # ---- emission ----
    def place(self, u: UOp, current: Block) -> Block:
        """The outermost block (an ancestor of current) in which all of u's ranges exist."""
        need = self.ranges_of[u]
        for b in reversed(current.ancestors()):
            if need <= b.scope:
                return b
        raise RenderError(f"kernel {self.name}: {u.op.name} is used outside the loop of its range")

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

    def expr(self, u: UOp, b: Block) -> str:
        op = u.op
        if op is Ops.RANGE:
            return self.names[u][0]
        if op is Ops.DEFINE_VAR:
            return f"v_{u.arg[0]}"
        if op is Ops.LOAD:
            return self.load(u, b)
        if op is Ops.REDUCE:
            return self.reduce(u, b)
        if op in _UNARY:
            one = literal(1, u.dtype, self.f16)
            return _UNARY[op].format(a=self.ref(u.src[0], b), one=one)
        if op is Ops.MAX:
            a, c = self.ref(u.src[0], b), self.ref(u.src[1], b)
            return f"({a} | {c})" if u.dtype == dtypes.bool else f"max({a}, {c})"
        if op in (Ops.IDIV, Ops.MOD):
            a, c = self.ref(u.src[0], b), self.ref(u.src[1], b)
            if u.dtype.is_float:
                return f"trunc({a} / {c})" if op is Ops.IDIV else f"({a} - {c} * trunc({a} / {c}))"
            return f"({a} / {c})" if op is Ops.IDIV else f"({a} % {c})"
        if op is Ops.XOR and u.dtype == dtypes.bool:
            return f"({self.ref(u.src[0], b)} != {self.ref(u.src[1], b)})"
        if op in _BINARY:
            return _BINARY[op].format(a=self.ref(u.src[0], b), b=self.ref(u.src[1], b))
        if op is Ops.WHERE:
            c, x, y = (self.ref(s, b) for s in u.src)
            return f"select({y}, {x}, {c})"
        if op is Ops.CAST:
            return self.cast(self.ref(u.src[0], b), u.src[0].dtype, u.dtype)
        if op is Ops.BITCAST:
            return f"bitcast<{self.ctype(u)}>({self.ref(u.src[0], b)})"
        raise RenderError(f"kernel {self.name}: WGSL renderer has no rule for {op.name}")

    def cast(self, x: str, src: DType, dst: DType) -> str:
        st, dt = compute_type(src, self.f16), compute_type(dst, self.f16)
        if st == dt:
            return x
        if dt == "bool":
            return f"({x} != {literal(0, src, self.f16)})"
        if st == "bool":
            return f"select({literal(0, dst, self.f16)}, {literal(1, dst, self.f16)}, {x})"
        return f"{dt}({x})"

    def load(self, u: UOp, b: Block) -> str:
        buf = f"b{u.src[0].arg}"
        idx = self.ref(u.src[1], b)
        if len(u.src) == 3:
            valid = self.ref(u.src[2], b)
            idx = f"select(0, {idx}, {valid})"
        value = f"{buf}[{idx}]"
        if u.dtype == dtypes.bool:
            value = f"({value} != 0u)"
        if len(u.src) == 3:
            value = f"select({literal(0, u.dtype, self.f16)}, {value}, {self.ref(u.src[2], b)})"
        return value

    def reduce(self, u: UOp, b: Block) -> str:
        acc = self.fresh("acc")
        t = self.ctype(u)
        identity = self.identity(u)
        b.lines.append(f"var {acc}: {t} = {identity};")
        inner, opened = b, []
        for r in u.src[1:]:
            name = self.fresh("r")
            inner = Block(inner.scope | {r}, inner)
            self.names[r] = (name, inner)
            opened.append((inner, name, self.size(end_of(r))))
        value = self.ref(u.src[0], inner)
        if u.arg is Ops.ADD:
            inner.lines.append(f"{acc} = {acc} + {value};")
        else:
            inner.lines.append(f"{acc} = {f'{acc} | {value}' if u.dtype == dtypes.bool else f'max({acc}, {value})'};")
        for blk, name, end in reversed(opened):  # close innermost first, each into its parent
            assert blk.parent is not None
            blk.parent.lines.append(f"for (var {name}: i32 = 0; {name} < {end}; {name}++) {{")
            blk.parent.lines.extend("  " + ln for ln in blk.lines)
            blk.parent.lines.append("}")
        return acc

    # ---- rendering an expression with some ranges bound to given WGSL expressions ----
    def inline(self, u: UOp, bound: dict[UOp, str]) -> tuple[list[str], str]:
        """Lines computing u, and its name, where each RANGE (or REDUCE) in bound is that expression."""
        sub = WGSLRenderer(self.name, self.ast, self.f16, self.workgroup)
        sub.ranges_of, sub.counter, sub.variables = self.ranges_of, self.counter, self.variables
        everything = frozenset(n for n in self.ranges_of if n.op is Ops.RANGE)
        block = Block(everything, None)
        for node, expr in bound.items():
            sub.names[node] = (expr, block)
        value = sub.ref(u, block)
        self.counter = sub.counter
        return block.lines, value

    def store_value(self, store: UOp, bound: dict[UOp, str]) -> list[str]:
        """The epilogue: the stored value and index with bound ranges, and the store itself."""
        lines, value = self.inline(store.src[2], bound)
        idx_lines, index = self.inline(store.src[1], bound)
        out = store.src[0]
        if out.dtype == dtypes.bool:
            value = f"select(0u, 1u, {value})"
        return [*lines, *idx_lines, f"b{out.arg}[{index}] = {value};"]

    def split(self, flat: str, ranges: list[UOp], names: list[str]) -> list[str]:
        """let-lines recovering each range's value from a flat index (last range fastest)."""
        lines = []
        for i, (r, name) in enumerate(zip(ranges, names)):
            stride = sprod(end_of(q) for q in ranges[i + 1 :])
            quotient = f"({flat} / {self.size(stride)})" if stride != 1 else flat
            lines.append(f"let {name}: i32 = {quotient} % {self.size(end_of(r))};")
        return lines

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
        if opts.strategy == "tile" and opts.contraction is not None:
            body, groups = self.render_tile(store, global_ranges, opts)
        elif opts.strategy == "group":
            body, groups = self.render_group(store, global_ranges, total)
        else:
            body, groups = self.render_flat(store, global_ranges, total)
        header = ["enable f16;"] if self.f16 and any(n.dtype == dtypes.float16 for n in nodes) else []
        if any(n.op is Ops.ERF for n in nodes):
            header.append(ERF_WGSL)
        bindings = []
        for arg, g in globs:
            written = arg == store.src[0].arg
            access = "read_write" if written else "read"
            header.append(f"@group(0) @binding({arg}) var<storage, {access}> b{arg}: "
                          f"array<{storage_type(g.dtype, self.f16)}>;")  # fmt: skip
            bindings.append((arg, g.dtype, written))
        if self.variables:  # uniform arrays have a 16-byte stride: four values per element
            header.append(f"struct Vars {{ v: array<vec4<i32>, {math.ceil(len(self.variables) / 4)}> }}")
            header.append(f"@group(0) @binding({len(globs)}) var<uniform> vars: Vars;")
        source = "\n".join([f"// {self.name} ({opts.strategy})", *header, *body]) + "\n"
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

    def render_flat(self, store: UOp, global_ranges: list[UOp], total: sint) -> tuple[list[str], sint]:
        root = Block(frozenset(global_ranges), None)
        names = [self.fresh("g") for _ in global_ranges]
        root.lines.extend(self.split("t", global_ranges, names))
        for r, name in zip(global_ranges, names):
            self.names[r] = (name, root)
        value = self.ref(store.src[2], root)
        index = self.ref(store.src[1], root)
        out = store.src[0]
        if out.dtype == dtypes.bool:
            value = f"select(0u, 1u, {value})"
        root.lines.append(f"b{out.arg}[{index}] = {value};")
        body = [
            *self.entry(),
            f"  let t: i32 = w * {self.workgroup} + lid;",
            f"  if (t >= {self.size(total)}) {{ return; }}",
            *("  " + ln for ln in root.lines),
            "}",
        ]
        return body, ceil_div(total, self.workgroup)

    def render_group(self, store: UOp, global_ranges: list[UOp], total: sint) -> tuple[list[str], sint]:
        """One workgroup per output: for each reduction, invocations stride over its range, then a tree
        in shared memory; invocation 0 computes the rest of the expression and stores."""
        reduces = [n for n in self.ast.toposort() if n.op is Ops.REDUCE]
        wg = self.workgroup
        gnames = [self.fresh("g") for _ in global_ranges]
        gbound = dict(zip(global_ranges, gnames))
        shared: list[str] = []
        body_lines: list[str] = []
        results: dict[UOp, str] = {}  # each reduction's value, once computed
        for i, red in enumerate(reduces):
            t = self.ctype(red)
            rranges = list(red.src[1:])
            size = sprod(end_of(r) for r in rranges)
            rnames = [self.fresh("r") for _ in rranges]
            value_lines, value = self.inline(red.src[0], gbound | dict(zip(rranges, rnames)) | results)
            combine = self.combiner(red)
            shared.append(f"var<workgroup> partial{i}: array<{t}, {wg}>;")
            body_lines += [
                f"var acc{i}: {t} = {self.identity(red)};",
                f"for (var f: i32 = lid; f < {self.size(size)}; f += {wg}) {{",
                *("  " + ln for ln in self.split("f", rranges, rnames)),
                *("  " + ln for ln in value_lines),
                f"  acc{i} = {combine(f'acc{i}', value)};",
                "}",
                f"partial{i}[lid] = acc{i};",
                "workgroupBarrier();",
                f"for (var s: i32 = {wg // 2}; s > 0; s = s >> 1u) {{",
                f"  if (lid < s) {{ partial{i}[lid] = {combine(f'partial{i}[lid]', f'partial{i}[lid + s]')}; }}",
                "  workgroupBarrier();",
                "}",
                f"let red{i}: {t} = partial{i}[0];",
            ]
            results[red] = f"red{i}"
        epilogue = self.store_value(store, gbound | results)
        body = [
            *shared,
            *self.entry(),
            f"  if (w >= {self.size(total)}) {{ return; }}  // uniform: the whole workgroup leaves together",
            *("  " + ln for ln in self.split("w", global_ranges, gnames)),
            *("  " + ln for ln in body_lines),
            "  if (lid == 0) {",
            *("    " + ln for ln in epilogue),
            "  }",
            "}",
        ]
        return body, total

    def combiner(self, red: UOp) -> Any:
        if red.arg is Ops.ADD:
            return lambda x, y: f"{x} + {y}"
        if red.dtype == dtypes.bool:
            return lambda x, y: f"{x} | {y}"
        return lambda x, y: f"max({x}, {y})"

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
        tiles_m, tiles_n = ceil_div(end_of(c.m), tm), ceil_div(end_of(c.n), tn)
        outer = [r for r in global_ranges if r is not c.m and r is not c.n]
        groups = sprod([*(end_of(r) for r in outer), tiles_m, tiles_n])
        onames = [self.fresh("o") for _ in outer]
        obound = dict(zip(outer, onames))
        t = self.ctype(c.reduce)
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
            f"  if (w >= {self.size(groups)}) {{ return; }}  // uniform: the whole workgroup leaves",
            f"  let tile_n: i32 = w % {self.size(tiles_n)};",
            f"  let tile_m: i32 = (w / {self.size(tiles_n)}) % {self.size(tiles_m)};",
            f"  let outer: i32 = w / {self.size(smul(tiles_n, tiles_m))};",
            *("  " + ln for ln in self.split("outer", outer, onames)),
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

    def identity(self, red: UOp) -> str:
        t = self.ctype(red)
        if red.arg is Ops.ADD:
            return literal(0, red.dtype, self.f16)
        if red.dtype.is_float:
            return literal(-math.inf, red.dtype, self.f16)
        if red.dtype == dtypes.bool:
            return "false"
        return "i32(-2147483647 - 1)" if t == "i32" else "0u"


def render_wgsl(name: str, ast: UOp, f16: bool = False, workgroup: int = 64, opts: KernelOpts | None = None) -> Kernel:
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20000))  # deep fused expressions recurse once per node
    try:
        return WGSLRenderer(name, ast, f16, workgroup).render(opts)
    finally:
        sys.setrecursionlimit(limit)

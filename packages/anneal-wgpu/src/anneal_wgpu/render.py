"""Render a kernel AST to a WGSL compute shader.

One invocation computes one output element: the global ranges are recovered from the
flat invocation index, and each REDUCE becomes a loop nest with an accumulator. Every
node is emitted once, as a ``let``, in the outermost block where all the ranges it
depends on exist, so loop-invariant work is hoisted out of reduction loops.

Storage: WGSL has no 8/16/64-bit integers, no f64 and no host-shareable bool, so a
backend stores bool as u32 (0/1), int8/16/64 as i32, uint8/16/64 as u32, bfloat16 (and
float16 without ``shader-f16``) as f32. int64 values must fit in i32 (checked on copy-in).
Index arithmetic is i32; a kernel whose index bounds do not fit is refused at compile time.
"""

from __future__ import annotations

import math
import struct
import sys
from dataclasses import dataclass, field

from anneal_ir import DType, Ops, UOp, dtypes

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


_BINARY = {
    Ops.ADD: "({a} + {b})", Ops.MUL: "({a} * {b})", Ops.CMPLT: "({a} < {b})", Ops.CMPNE: "({a} != {b})",
    Ops.CMPEQ: "({a} == {b})", Ops.AND: "({a} & {b})", Ops.OR: "({a} | {b})", Ops.XOR: "({a} ^ {b})",
    Ops.SHL: "({a} << u32({b}))", Ops.SHR: "({a} >> u32({b}))",
}  # fmt: skip
_UNARY = {
    Ops.EXP2: "exp2({a})", Ops.LOG2: "log2({a})", Ops.SIN: "sin({a})", Ops.SQRT: "sqrt({a})",
    Ops.RECIPROCAL: "({one} / {a})", Ops.NEG: "(-{a})", Ops.TRUNC: "trunc({a})",
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
    total: int  # invocations needed (the product of the global ranges)
    workgroup: int


@dataclass
class WGSLRenderer:
    name: str
    ast: UOp
    f16: bool = False
    workgroup: int = 64
    names: dict[UOp, tuple[str, Block]] = field(default_factory=dict)
    ranges_of: dict[UOp, frozenset[UOp]] = field(default_factory=dict)
    counter: int = 0

    def fresh(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def ctype(self, u: UOp) -> str:
        return compute_type(u.dtype, self.f16)

    # ---- analysis ----
    def analyse(self) -> None:
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
        if u.arg is Ops.ADD:
            identity = literal(0, u.dtype, self.f16)
        elif u.dtype.is_float:
            identity = literal(-math.inf, u.dtype, self.f16)
        elif u.dtype == dtypes.bool:
            identity = "false"
        else:
            identity = "i32(-2147483647 - 1)" if t == "i32" else "0u"
        b.lines.append(f"var {acc}: {t} = {identity};")
        inner, opened = b, []
        for r in u.src[1:]:
            name = self.fresh("r")
            inner = Block(inner.scope | {r}, inner)
            self.names[r] = (name, inner)
            opened.append((inner, name, int(r.src[0].arg)))
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

    def render(self) -> Kernel:
        self.analyse()
        nodes = self.ast.toposort()
        store = self.ast.src[0]
        assert store.op is Ops.STORE, "a kernel is SINK(STORE)"
        globs = sorted({n.arg: n for n in nodes if n.op is Ops.DEFINE_GLOBAL}.items())
        global_ranges = sorted((n for n in nodes if n.op is Ops.RANGE and n.arg[1] == "global"), key=lambda r: r.arg[0])
        root = Block(frozenset(global_ranges), None)
        total = 1
        for r in global_ranges:
            total *= int(r.src[0].arg)
        if total > I32_MAX:
            raise RenderError(f"kernel {self.name}: {total} output elements do not fit in i32 indexing")
        if total == 0:  # an empty output: nothing to compute, and the runtime dispatches nothing
            source = f"// {self.name}: empty output\n@compute @workgroup_size(1)\nfn main() {{}}\n"
            return Kernel(self.name, source, (), 0, self.workgroup)
        stride = total
        for r in global_ranges:
            end = int(r.src[0].arg)
            stride //= end
            name = self.fresh("g")
            root.lines.append(f"let {name}: i32 = (t / {stride}) % {end};" if stride > 1 else
                              f"let {name}: i32 = t % {end};")  # fmt: skip
            self.names[r] = (name, root)
        value = self.ref(store.src[2], root)
        index = self.ref(store.src[1], root)
        out = store.src[0]
        if out.dtype == dtypes.bool:
            value = f"select(0u, 1u, {value})"
        root.lines.append(f"b{out.arg}[{index}] = {value};")
        header = ["enable f16;"] if self.f16 and any(n.dtype == dtypes.float16 for n in nodes) else []
        bindings = []
        for arg, g in globs:
            written = arg == out.arg
            access = "read_write" if written else "read"
            header.append(f"@group(0) @binding({arg}) var<storage, {access}> b{arg}: "
                          f"array<{storage_type(g.dtype, self.f16)}>;")  # fmt: skip
            bindings.append((arg, g.dtype, written))
        body = [
            f"@compute @workgroup_size({self.workgroup})",
            "fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {",
            f"  let t: i32 = i32(gid.x + gid.y * nwg.x * {self.workgroup}u);",
            f"  if (t >= {total}) {{ return; }}",
            *("  " + ln for ln in root.lines),
            "}",
        ]
        return Kernel(self.name, "\n".join([f"// {self.name}", *header, "", *body]) + "\n", tuple(bindings), total,
                      self.workgroup)  # fmt: skip


def render_wgsl(name: str, ast: UOp, f16: bool = False, workgroup: int = 64) -> Kernel:
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20000))  # deep fused expressions recurse once per node
    try:
        return WGSLRenderer(name, ast, f16, workgroup).render()
    finally:
        sys.setrecursionlimit(limit)

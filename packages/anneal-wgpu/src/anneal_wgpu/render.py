"""Print a lowered kernel (anneal_schedule.lower.Program) as a WGSL compute shader.

Everything about the kernel's structure (which opts, what runs where, hoisting, staged tiles,
vec4 accesses) was decided by the lowering; this module only spells each instruction in WGSL.

Storage: WGSL has no 8/16/64-bit integers, no f64 and no host-shareable bool, so a backend stores
bool as u32 (0/1), int8/16/64 as i32, uint8/16/64 as u32, bfloat16 (and float16 without
``shader-f16``) as f32. int64 values must fit in i32 (checked on copy-in). Index arithmetic is i32;
a kernel whose index bounds do not fit is refused at compile time.

Symbolic sizes: a kernel over a Variable reads its value from a small uniform buffer bound after
the storage buffers (``vars``); loop ends and the workgroup count are expressions over it, and the
runtime computes the workgroup count per call from the values.
"""

from __future__ import annotations

import math
import struct
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from anneal_ir import DType, Ops, UOp, dtypes
from anneal_ir.sint import sint, size_code, upper
from anneal_schedule.lower import Instr, Program, lower
from anneal_schedule.opt import Opt

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

# a 16-bit float's bits from (and to) its float32 value, which holds it exactly: float16's exponent is rebiased
# (127 - 15 = 112) and its mantissa the top 10 of float32's; below 2^-14 it is subnormal (m * 2^-24)
HALF_BITS_WGSL = """fn f16_bits(x: f32) -> u32 {
  let b = bitcast<u32>(x);
  let e = (b >> 23u) & 255u;
  let m = b & 8388607u;
  var h = 0u;
  if (e == 255u) { h = 31744u | (m >> 13u); }
  else if (e > 112u) { h = ((e - 112u) << 10u) | (m >> 13u); }
  else if (e >= 103u) { h = (8388608u | m) >> (126u - e); }
  return ((b >> 16u) & 32768u) | h;
}
fn f16_from_bits(h: u32) -> f32 {
  let e = (h >> 10u) & 31u;
  let m = h & 1023u;
  let sign = (h & 32768u) << 16u;
  if (e == 0u) { return bitcast<f32>(sign | bitcast<u32>(f32(m) * 5.960464477539063e-08)); }
  let exponent = select((e + 112u) << 23u, 2139095040u, e == 31u);
  return bitcast<f32>(sign | exponent | (m << 13u));
}
fn bf16_bits(x: f32) -> u32 { return bitcast<u32>(x) >> 16u; }
fn bf16_from_bits(h: u32) -> f32 { return bitcast<f32>(h << 16u); }"""

_BINARY = {
    Ops.ADD: "({a} + {b})", Ops.MUL: "({a} * {b})", Ops.CMPLT: "({a} < {b})", Ops.CMPNE: "({a} != {b})",
    Ops.CMPEQ: "({a} == {b})", Ops.AND: "({a} & {b})", Ops.OR: "({a} | {b})", Ops.XOR: "({a} ^ {b})",
}  # fmt: skip
_UNARY = {
    Ops.EXP2: "exp2({a})", Ops.LOG2: "log2({a})", Ops.SIN: "sin({a})", Ops.SQRT: "sqrt({a})",
    Ops.RECIPROCAL: "({one} / {a})", Ops.NEG: "(-{a})", Ops.TRUNC: "trunc({a})",
}  # fmt: skip
# WGSL evaluates an op on literals when it compiles and refuses one whose value is not finite (log2(0.0), 1.0 / 0.0;
# the symbolic folder leaves those to the device): such an op is evaluated here, as IEEE arithmetic does
_LITERAL_FLOAT_OPS: dict[Ops, Any] = {
    Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.SIN: np.sin, Ops.SQRT: np.sqrt, Ops.RECIPROCAL: np.reciprocal,
    Ops.NEG: np.negative, Ops.TRUNC: np.trunc, Ops.ADD: np.add, Ops.MUL: np.multiply,
}  # fmt: skip
XYZW = "xyzw"
LANES = "vec4<i32>(0, 1, 2, 3)"


@dataclass
class Kernel:
    name: str
    source: str
    bindings: tuple[tuple[int, DType, bool], ...]  # (arg index, dtype, written)
    groups: sint  # workgroups to dispatch (the runtime folds them into 2-D past the per-dimension limit)
    workgroup: int  # invocations per workgroup
    strategy: str  # the opts, as text
    variables: tuple[str, ...] = ()  # Variable names, in the order of the ``vars`` uniform buffer


def combine(op: Ops, dtype: DType, x: str, y: str) -> str:
    if op is Ops.ADD:
        return f"({x} | {y})" if dtype == dtypes.bool else f"({x} + {y})"
    return f"({x} | {y})" if dtype == dtypes.bool else f"max({x}, {y})"


@dataclass
class WGSLPrinter:
    prog: Program
    f16: bool
    types: dict[str, tuple[DType, int]] = field(default_factory=dict)  # name -> (dtype, width)
    vec_buffers: set[int] = field(default_factory=set)
    vec_shared: set[str] = field(default_factory=set)
    helpers: set[str] = field(default_factory=set)  # WGSL functions the kernel calls

    def size(self, x: sint) -> str:
        try:
            return size_code(x)
        except NotImplementedError as exc:
            raise RenderError(f"kernel {self.prog.name}: {exc}") from None

    def stype(self, d: DType) -> str:
        return compute_type(d, self.f16)

    def ctype(self, d: DType, width: int) -> str:
        t = self.stype(d)
        return f"vec4<{t}>" if width == 4 else t

    def operand(self, x: Any, width: int = 1) -> str:
        """An operand as WGSL, splat to a vec4 where the instruction is four lanes wide."""
        if isinstance(x, UOp):
            lit = literal(x.arg, x.dtype, self.f16)
            return f"vec4<{self.stype(x.dtype)}>({lit})" if width == 4 else lit
        if x in ("lid", "w"):
            return x if width == 1 else f"vec4<i32>({x})"
        d, w = self.types[x]
        return f"vec4<{self.stype(d)}>({x})" if width == 4 and w == 1 else x

    def src_dtype(self, x: Any) -> DType:
        if isinstance(x, UOp):
            return x.dtype
        return dtypes.int32 if x in ("lid", "w") else self.types[x][0]

    def access(self, slot: int, idx: str) -> str:
        """One element of a buffer (a component of a vec4 when the buffer is declared as vec4s)."""
        return f"b{slot}[({idx}) >> 2u][({idx}) & 3]" if slot in self.vec_buffers else f"b{slot}[{idx}]"

    def line(self, ins: Instr) -> list[str]:
        op, name, w = ins.op, ins.name, ins.width
        t = self.ctype(ins.dtype, w) if ins.dtype != dtypes.void else ""
        if name:
            self.types[name] = (ins.dtype, w)
        if op == "exit":
            return [f"if (w >= {self.size(ins.arg)}) {{ return; }}  // uniform: the whole workgroup leaves"]
        if op == "lanes":
            return [f"let {name}: vec4<i32> = {LANES};"]
        if op == "var":
            return [f"let {name}: i32 = v_{ins.arg};"]
        if op == "splat":
            return [f"let {name}: {t} = {self.operand(ins.srcs[0], 4)};"]
        if op == "extract":
            return [f"let {name}: {t} = {self.operand(ins.srcs[0])}.{XYZW[ins.arg]};"]
        if op == "load":
            return [f"let {name}: {t} = {self.load(ins)};"]
        if op == "store":
            return self.store(ins)
        if op == "reg":
            return [f"var {name}: {t} = {self.operand(ins.srcs[0], w)};"]
        if op == "set":
            return [f"{name} = {self.operand(ins.srcs[0], w)};"]
        if op == "acc":  # an integer max starts at the smallest value of its 32-bit storage, not a wrapped one
            init = ins.arg
            if init.dtype.is_int and not init.dtype.is_unsigned and init.arg < I32_MIN:
                init = UOp.const(init.dtype, I32_MIN)
            return [f"var {name}: {t} = {self.operand(init, w)};"]
        if op == "update":
            return [f"{ins.srcs[0]} = {self.update(ins)};"]
        if op == "combine":
            (acc,) = ins.srcs
            x, y, z, q = (f"{acc}.{c}" for c in XYZW)
            d = ins.dtype
            return [f"let {name}: {t} = {combine(ins.arg, d, combine(ins.arg, d, x, y), combine(ins.arg, d, z, q))};"]
        if op == "group":
            (own,) = ins.srcs
            partial, size, red_op, lanes = ins.arg  # lanes: the lid % lanes kept apart (one sum each)
            c = lambda a, b: combine(red_op, ins.dtype, a, b)  # noqa: E731
            groups = size // lanes
            halves = 1 << (groups - 1).bit_length()  # a count of groups that is not a power of two: the first
            inside = "lid < s" if halves == groups else f"lid < s && lid + s < {size}"  # halving folds in the rest
            return [
                f"{partial}[lid] = {self.operand(own)};",
                "workgroupBarrier();",
                f"for (var s: i32 = {halves // 2 * lanes}; s >= {lanes}; s = s >> 1u) {{",
                f"  if ({inside}) {{ {partial}[lid] = {c(f'{partial}[lid]', f'{partial}[lid + s]')}; }}",
                "  workgroupBarrier();",
                "}",
                f"let {name}: {t} = {partial}[{'0' if lanes == 1 else f'lid % {lanes}'}];",
                "workgroupBarrier();",  # the array is free again for the next grouped reduction
            ]
        if op == "loop":
            start, end, step = (self.operand(s) for s in ins.srcs)
            return [f"for (var {name}: i32 = {start}; {name} < {end}; {name} += {step}) {{"]
        if op == "end":
            return ["}"]
        if op == "barrier":
            return ["workgroupBarrier();"]
        assert isinstance(op, Ops), f"unknown instruction {op}"
        return [f"let {name}: {t} = {self.alu(ins)};"]

    def update(self, ins: Instr) -> str:
        w, acc = ins.width, str(ins.srcs[0])
        if len(ins.srcs) == 3:  # acc + a * b
            a, b = (self.operand(s, w) for s in ins.srcs[1:])
            return f"fma({a}, {b}, {acc})" if ins.dtype.is_float else f"({acc} + {a} * {b})"
        value = ins.srcs[1]
        v = self.operand(value, w)
        if self.src_dtype(value) != ins.dtype:
            v = self.cast(v, self.src_dtype(value), ins.dtype, w)
        return combine(ins.arg, ins.dtype, acc, v)

    def load(self, ins: Instr) -> str:
        space, slot, mode = ins.arg
        bool_out = ins.dtype == dtypes.bool
        if space == "local":
            idx = self.operand(ins.srcs[0])
            return (
                f"{slot}[({idx}) >> 2u][({idx}) & 3]"
                if mode == "elem" and slot in self.vec_shared
                else f"{slot}[{idx}]"
            )
        if mode == "quad":
            q = self.operand(ins.srcs[0])
            valid = self.operand(ins.srcs[1]) if len(ins.srcs) == 2 else None  # one gate for the four lanes
            value = f"b{slot}[{q if valid is None else f'select(0, {q}, {valid})'}]"
            value = f"({value} != vec4<u32>(0u))" if bool_out else value
            if valid is None:
                return value
            t = self.stype(ins.dtype)
            zero = "vec4<bool>(false)" if bool_out else f"vec4<{t}>({literal(0, ins.dtype, self.f16)})"
            return f"select({zero}, {value}, {valid})"
        idx = self.operand(ins.srcs[0])
        gated = len(ins.srcs) == 2
        valid = self.operand(ins.srcs[1]) if gated else ""
        if mode == "elem":
            i = f"select(0, {idx}, {valid})" if gated else idx
            value = self.access(slot, i)
            if bool_out:
                value = f"({value} != 0u)"
            return f"select({literal(0, ins.dtype, self.f16)}, {value}, {valid})" if gated else value
        idx4 = self.operand(ins.srcs[0], 4)
        valid4 = self.operand(ins.srcs[1], 4) if gated else ""
        lanes = []
        for c in XYZW:
            lane = self.access(slot, f"select(0, {idx4}.{c}, {valid4}.{c})" if gated else f"{idx4}.{c}")
            lanes.append(f"({lane} != 0u)" if bool_out else lane)
        t = self.stype(ins.dtype)
        value = f"vec4<{t}>({', '.join(lanes)})"
        return f"select(vec4<{t}>({literal(0, ins.dtype, self.f16)}), {value}, {valid4})" if gated else value

    def store(self, ins: Instr) -> list[str]:
        space, slot, mode = ins.arg
        w = ins.width
        is_bool = ins.dtype == dtypes.bool
        idx_op, value_op = ins.srcs[0], ins.srcs[1]
        value = self.operand(value_op, w)
        valid = self.operand(ins.srcs[2]) if len(ins.srcs) == 3 else None
        if space == "local":
            line = f"{slot}[{self.operand(idx_op)}] = {value};"
            return [f"if ({valid}) {{ {line} }}" if valid else line]
        if mode == "quad":
            if is_bool:
                value = f"select(vec4<u32>(0u), vec4<u32>(1u), {value})"
            return [f"b{slot}[{self.operand(idx_op)}] = {value};"]
        if mode == "elem":
            stored = f"select(0u, 1u, {value})" if is_bool else value
            line = f"{self.access(slot, self.operand(idx_op))} = {stored};"
            return [f"if ({valid}) {{ {line} }}" if valid else line]
        idx4 = self.operand(idx_op, 4)
        valid4 = self.operand(ins.srcs[2], 4) if valid else None
        out = []
        for c in XYZW:
            lane = f"select(0u, 1u, {value}.{c})" if is_bool else f"{value}.{c}"
            line = f"{self.access(slot, f'{idx4}.{c}')} = {lane};"
            out.append(f"if ({valid4}.{c}) {{ {line} }}" if valid4 else line)
        return out

    def alu(self, ins: Instr) -> str:
        op, w, d = ins.op, ins.width, ins.dtype
        literals = [s.arg for s in ins.srcs if isinstance(s, UOp)]
        if op in _LITERAL_FLOAT_OPS and d.is_float and len(literals) == len(ins.srcs):
            ftype = np.float16 if self.stype(d) == "f16" else np.float32
            with np.errstate(all="ignore"):
                value = float(_LITERAL_FLOAT_OPS[op](*(ftype(v) for v in literals)))
            return self.operand(UOp.const(d, value), w)
        src = [self.operand(s, w) for s in ins.srcs]
        if op is Ops.SIN and self.stype(d) == "f32":
            return f"{'sin4_' if w == 4 else 'sin_'}({src[0]})"
        if op in _UNARY:
            return _UNARY[op].format(a=src[0], one=literal(1, d, self.f16) if w == 1 else
                                     f"vec4<{self.stype(d)}>({literal(1, d, self.f16)})")  # fmt: skip
        if op is Ops.MAX:
            return f"({src[0]} | {src[1]})" if d == dtypes.bool else f"max({src[0]}, {src[1]})"
        if op in (Ops.IDIV, Ops.MOD):
            a, c = src
            if d.is_float:
                return f"trunc({a} / {c})" if op is Ops.IDIV else f"({a} - {c} * trunc({a} / {c}))"
            if op is Ops.IDIV or ins.arg == "nonneg":
                return f"({a} {'/' if op is Ops.IDIV else '%'} {c})"
            # a - trunc(a / c) * c, not %: NVIDIA's Vulkan driver computed i32 % as unsigned (H200, 2026-11);
            # % by 0 is 0, as WGSL's % defines it
            zero = f"{self.ctype(d, w)}({literal(0, d, self.f16)})"
            return f"select({a} - ({a} / {c}) * {c}, {zero}, {c} == {zero})"
        if op is Ops.XOR and d == dtypes.bool:
            return f"({src[0]} != {src[1]})"
        if op in (Ops.SHL, Ops.SHR):
            return self.shift(op, d, w, src[0], src[1])
        if op in (Ops.ADD, Ops.MUL) and d == dtypes.bool:  # WGSL has no bool arithmetic: or / and
            return f"({src[0]} {'|' if op is Ops.ADD else '&'} {src[1]})"
        if op in _BINARY:
            return _BINARY[op].format(a=src[0], b=src[1])
        if op is Ops.WHERE:
            c, x, y = src
            return f"select({y}, {x}, {c})"
        if op is Ops.CAST:
            return self.cast(src[0], self.src_dtype(ins.srcs[0]), d, w)
        if op is Ops.BITCAST:
            return self.bitcast(src[0], self.src_dtype(ins.srcs[0]), d, w)
        raise RenderError(f"kernel {self.prog.name}: WGSL renderer has no rule for {op}")

    def shift(self, op: Ops, d: DType, w: int, a: str, s: str) -> str:
        """As torch's (and the C renderer's): a shift by 32 or more (or a negative one) gives 0, a right shift of a
        negative value -1. WGSL uses only the low 5 bits of the amount and refuses a constant one past 31, so the
        amount is masked and the edge selected. A narrower int lives in 32 bits, where its own edges fall out."""
        u = "vec4<u32>" if w == 4 else "u32"
        n = f"{u}({s})"
        shifted = f"({a} {'<<' if op is Ops.SHL else '>>'} ({n} & {u}(31u)))"
        if op is Ops.SHL or d.is_unsigned:
            edge = f"{self.ctype(d, w)}({literal(0, d, self.f16)})"
        else:
            edge = f"({a} >> {u}(31u))"
        return f"select({shifted}, {edge}, {n} >= {u}(32u))"

    def bitcast(self, x: str, src: DType, dst: DType, w: int) -> str:
        """Reinterpret bits. 32-bit types are one bitcast; a 16-bit float's bits are computed from its float32
        value (WGSL has no 16-bit integers to bitcast to, naga no vec2<f16> <-> u32); an integer narrower than
        its 32-bit word is wrapped to its own width."""
        st, dt = self.stype(src), self.stype(dst)
        if src == dst:
            return x
        if w == 4:  # lane by lane
            lanes = ", ".join(self.bitcast(f"{x}.{c}", src, dst, 1) for c in XYZW)
            return f"vec4<{dt}>({lanes})"
        half = {dtypes.float16: "f16", dtypes.bfloat16: "bf16"}
        if src in half or dst in half:
            if src.itemsize != dst.itemsize:
                raise RenderError(f"kernel {self.prog.name}: bitcast {src.name} -> {dst.name}: sizes differ")
            if src in half:
                self.helpers.add(HALF_BITS_WGSL)
                bits = f"{half[src]}_bits(f32({x}))"
                return self.narrow(f"bitcast<{dt}>({bits})" if dt != "u32" else bits, dst)
            self.helpers.add(HALF_BITS_WGSL)
            return f"{dt}({half[dst]}_from_bits(bitcast<u32>({x}) & 65535u))"
        return self.narrow(f"bitcast<{dt}>({x})" if st != dt else x, dst)

    def narrow(self, x: str, d: DType) -> str:
        """An integer held in a 32-bit word wrapped to its own width (sign-extended when signed)."""
        bits = 8 * d.itemsize
        if d.is_float or d == dtypes.bool or bits >= 32:
            return x
        if d.is_unsigned:
            return f"({x} & {(1 << bits) - 1}u)"
        return f"(({x} << {32 - bits}u) >> {32 - bits}u)"

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

    def print(self) -> Kernel:
        prog = self.prog
        self.vec_buffers = {b.slot for b in prog.buffers if b.vec}
        self.vec_shared = {s.name for s in prog.shared if s.vec}
        body: list[str] = []
        depth = 1
        for ins in prog.instrs:
            lines = self.line(ins)
            if ins.op == "end":
                depth -= 1
            body += ["  " * depth + ln for ln in lines]
            if ins.op == "loop":
                depth += 1
        uses_f16 = any(b.dtype == dtypes.float16 for b in prog.buffers) or any(
            i.dtype == dtypes.float16 for i in prog.instrs)  # fmt: skip
        header = ["enable f16;"] if self.f16 and uses_f16 else []
        if any(i.op is Ops.SIN and compute_type(i.dtype, self.f16) == "f32" for i in prog.instrs):
            header.append(SIN_WGSL)
        header += sorted(self.helpers)
        for s in prog.shared:
            t = self.stype(s.dtype)
            header.append(f"var<workgroup> {s.name}: array<{f'vec4<{t}>' if s.vec else t}, {s.count}>;")
        bindings = []
        for b in prog.buffers:
            elem = storage_type(b.dtype, self.f16)
            if b.vec:
                elem = f"vec4<{elem}>"
            header.append(f"@group(0) @binding({b.slot}) var<storage, {'read_write' if b.written else 'read'}> "
                          f"b{b.slot}: array<{elem}>;")  # fmt: skip
            bindings.append((b.slot, b.dtype, b.written))
        if prog.variables:  # uniform arrays have a 16-byte stride: four values per element
            header.append(f"struct Vars {{ v: array<vec4<i32>, {math.ceil(len(prog.variables) / 4)}> }}")
            header.append(f"@group(0) @binding({len(prog.buffers)}) var<uniform> vars: Vars;")
        entry = [
            f"@compute @workgroup_size({prog.workgroup})",
            "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid_u: u32,",
            "        @builtin(num_workgroups) nwg: vec3<u32>) {",
            "  let w: i32 = i32(wid.x + wid.y * nwg.x);  // workgroups fold into 2-D past the dispatch limit",
            "  let lid: i32 = i32(lid_u);",
            *(f"  let v_{v}: i32 = vars.v[{i // 4}][{i % 4}];" for i, v in enumerate(prog.variables)),
        ]
        described = prog.describe()
        source = "\n".join([f"// {prog.name} ({described})", *header, *entry, *body, "}"]) + "\n"
        return Kernel(prog.name, source, tuple(bindings), prog.groups, prog.workgroup, described, prog.variables)


def check_indices(name: str, ast: UOp) -> None:
    """Index arithmetic is i32 in WGSL: prove every load's and store's index fits. Where an index reads data (a
    gather's index, loaded or reduced in the kernel: an i32 already), only the index itself must be proved in
    range (its clamp bounds it whatever the data); the arithmetic on ranges and sizes is checked node by node."""
    for n in ast.toposort():
        if n.op in (Ops.LOAD, Ops.STORE) and n.src[0].op is Ops.DEFINE_GLOBAL:
            index = n.src[1]
            for i, reads_data in _index_nodes(index).items():
                checked = i is index or not (reads_data or i.op is Ops.CONST)  # a constant counts where it is used
                if checked and not (I32_MIN <= i.vmin and i.vmax <= I32_MAX):
                    raise RenderError(f"kernel {name}: index value range [{i.vmin}, {i.vmax}] of {i.op.name} does "
                                      "not fit in i32; split the tensor")  # fmt: skip


_DATA = frozenset({Ops.LOAD, Ops.REDUCE, Ops.THREEFRY})  # values a kernel reads or draws, not index arithmetic


def _index_nodes(index: UOp) -> dict[UOp, bool]:
    """The nodes of an index down to the values it reads, loads and reductions, not into them (a nested load's own
    index is checked as that load's), each with whether it depends on such a value."""
    reached: set[UOp] = set()
    todo = [index]
    while todo:
        u = todo.pop()
        if u not in reached:
            reached.add(u)
            if u.op not in _DATA:
                todo.extend(u.src)
    out: dict[UOp, bool] = {}
    for u in index.toposort():  # sources before their users
        if u in reached:
            out[u] = u.op in _DATA or any(out.get(s, False) for s in u.src)
    return out


def vec_storage(f16: bool) -> Any:
    return lambda d: storage_type(d, f16) in ("f32", "i32", "u32")


def render_wgsl(name: str, ast: UOp, f16: bool = False, opts: tuple[Opt, ...] | list[Opt] = ()) -> Kernel:
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20000))  # deep fused expressions recurse once per node
    try:
        check_indices(name, ast)
        total = 1
        for r in {n for n in ast.toposort() if n.op is Ops.RANGE and n.arg[1] == "global"}:
            total *= int(r.src[0].vmax)
        if upper(total) > I32_MAX:
            raise RenderError(f"kernel {name}: {total} output elements do not fit in i32 indexing")
        if total == 0:  # an empty output: nothing to compute, and the runtime dispatches nothing
            source = f"// {name}: empty output\n@compute @workgroup_size(1)\nfn main() {{}}\n"
            return Kernel(name, source, (), 0, 1, "empty")
        prog = lower(name, ast, tuple(opts), lanes=True, vec_storage=vec_storage(f16))
        return WGSLPrinter(prog, f16).print()
    finally:
        sys.setrecursionlimit(limit)

"""Render a kernel AST to the source of a small numpy function.

Each RANGE of the kernel is one axis of a rank-m array space; every value is an array that
has the full extent on the axes it depends on and size 1 elsewhere, so numpy broadcasting
does the loops. Loads whose index is affine in the ranges become zero-copy strided views;
a sum of a product becomes one batched ``np.matmul`` (BLAS), so a matmul never
materializes its M x N x K space; anything else falls back to index arrays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from anneal_ir import DType, Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite
from anneal_ir.sint import sint, size_code, variables
from anneal_schedule.analysis import affine as index_affine
from anneal_schedule.decompose import decompose

Affine = tuple[dict[int, int], int]  # {axis: coefficient}, offset


def affine(u: UOp, axis_of: dict[UOp, int]) -> Affine | None:
    """The index as sum(coeff * axis) + offset over the kernel's ranges, or None if it is not affine in them."""
    found = index_affine(u)
    if found is None or any(t.op is not Ops.RANGE for t in found[0]):
        return None
    return {axis_of[r]: c for r, c in found[0].items()}, found[1]


_BINARY = {
    Ops.ADD: "({a} + {b})", Ops.MUL: "({a} * {b})", Ops.MAX: "np.maximum({a}, {b})",
    Ops.CMPLT: "({a} < {b})", Ops.CMPNE: "({a} != {b})", Ops.CMPEQ: "({a} == {b})",
    Ops.AND: "({a} & {b})", Ops.OR: "({a} | {b})", Ops.XOR: "({a} ^ {b})",
    Ops.SHL: "({a} << {b})", Ops.SHR: "({a} >> {b})",
}  # fmt: skip
_UNARY = {
    Ops.EXP2: "_exp2({a})", Ops.LOG2: "np.log2({a})", Ops.SIN: "np.sin({a})", Ops.SQRT: "np.sqrt({a})",
    Ops.RECIPROCAL: "np.reciprocal({a})", Ops.NEG: "np.negative({a})", Ops.TRUNC: "np.trunc({a})",
}  # fmt: skip


def size_expr(x: sint) -> str:
    """A loop extent as Python: an int, or an expression over the kernel's Variables (``v_<name>``)."""
    return size_code(x, "//")


def tuple_expr(sizes: list[sint] | tuple[sint, ...]) -> str:
    inner = ", ".join(size_expr(d) for d in sizes)
    return f"({inner},)" if len(sizes) == 1 else f"({inner})"


def by_blas(value: frozenset, a: frozenset, b: frozenset, summed: frozenset) -> bool:
    """Does a sum over ``summed`` of a product a*b (``value`` = the product's axes) run as one matmul?
    Both renderers ask this, so both compute a sum the same way. Not when the product does not vary along
    a summed axis, nor when one factor varies along a subset of the other's axes: the product is then no
    bigger than that factor and is summed like any other value."""
    return bool(value & summed) and bool(a) and bool(b) and not (a <= b or b <= a)


def np_name(d: DType) -> str:
    """The numpy type a value of d is computed in (bfloat16 computes in float32)."""
    if d == dtypes.bfloat16:
        return "np.float32"
    return "np.bool_" if d == dtypes.bool else f"np.{d.np.name}"


@dataclass
class Renderer:
    name: str
    ast: UOp
    lines: list[str] = field(default_factory=list)
    names: dict[UOp, str] = field(default_factory=dict)
    deps: dict[UOp, frozenset[int]] = field(default_factory=dict)
    axis_of: dict[UOp, int] = field(default_factory=dict)
    ends: list[sint] = field(default_factory=list)  # each axis's extent (symbolic: over the Variables)
    n_args: int = 0
    itemsize: dict[int, int] = field(default_factory=dict)

    def render(self) -> str:
        nodes = self.ast.toposort()
        ranges = sorted((n for n in nodes if n.op is Ops.RANGE), key=lambda r: r.arg[0])
        for i, r in enumerate(ranges):
            self.axis_of[r] = i
            end = r.src[0]
            self.ends.append(int(end.arg) if end.op is Ops.CONST else end)
        globs = sorted({n.arg: n for n in nodes if n.op is Ops.DEFINE_GLOBAL}.items())
        self.n_args = len(globs)
        args = ", ".join(f"b{i}" for i, _ in globs)
        loops = ", ".join(f"r{i}<{size_expr(e)}" for i, e in enumerate(self.ends))
        head = [f"def {self.name}({args}, vars):", f"    # axes: {loops or 'none'}"]
        head += [f"    v_{v.arg[0]} = int(vars[{v.arg[0]!r}])" for v in variables(tuple(self.ends))]
        if any(e == 0 and r.arg[1] == "global" for r, e in zip(ranges, self.ends)):
            return "\n".join(head + ["    return  # an empty output"]) + "\n"
        for n in self.needed(nodes):
            self.visit(n)
        return "\n".join(head + ["    " + ln for ln in self.lines]) + "\n"

    def contraction_factors(self, u: UOp) -> tuple[UOp, UOp] | None:
        """The two factors of a sum of a product over some of its axes (rendered as one matmul)."""
        if u.op is not Ops.REDUCE or u.arg is not Ops.ADD:
            return None
        value = u.src[0]
        if value.op is Ops.MUL:
            a, b = value.src
            summed = frozenset(self.axis_of[r] for r in u.src[1:])
            if by_blas(self.static_deps(value), self.static_deps(a), self.static_deps(b), summed):
                return a, b
        return None

    def static_deps(self, u: UOp) -> frozenset[int]:
        """The axes a node varies along, worked out before any code is emitted."""
        if u not in self.deps:
            for n in u.toposort():
                if n in self.deps:
                    continue
                if n.op is Ops.RANGE:
                    d = frozenset({self.axis_of[n]})
                elif n.op is Ops.LOAD and len(n.src) == 2 and (aff := affine(n.src[1], self.axis_of)) is not None:
                    d = frozenset(aff[0])
                elif n.op is Ops.REDUCE:
                    d = self.deps[n.src[0]] - {self.axis_of[r] for r in n.src[1:]}
                elif n.op is Ops.DEFINE_GLOBAL:
                    d = frozenset()
                else:
                    d = frozenset().union(*(self.deps[s] for s in n.src))
                self.deps[n] = d
        return self.deps[u]

    def needed(self, nodes: list[UOp]) -> list[UOp]:
        """Nodes in order, minus those only a contraction's product used (never materialize M x N x K)."""
        self.static_deps(self.ast)
        keep: set[UOp] = set()
        stack = [self.ast]
        while stack:
            n = stack.pop()
            if n in keep:
                continue
            keep.add(n)
            factors = self.contraction_factors(n)
            if factors is not None:
                stack.extend(factors)  # the ranges of a REDUCE only name its axes
            elif n.op is Ops.REDUCE:
                stack.append(n.src[0])
            elif n.op is Ops.LOAD and len(n.src) == 2 and affine(n.src[1], self.axis_of) is not None:
                continue  # a strided view: its index expression is never evaluated
            elif n.op is Ops.STORE and affine(n.src[1], self.axis_of) is not None:
                stack.append(n.src[2])
            else:
                stack.extend(n.src)
        return [n for n in nodes if n in keep]

    # ---- helpers ----
    def shape_for(self, axes: frozenset[int]) -> str:
        return tuple_expr([e if i in axes else 1 for i, e in enumerate(self.ends)])

    def emit(self, u: UOp, expr: str, deps: frozenset[int]) -> None:
        if u.dtype == dtypes.bfloat16 and u.op in (Ops.LOAD, Ops.CAST):
            # bfloat16 is storage: bits in memory, float32 in the kernel (rounded where cast to it and when stored)
            expr = f"_bf16_to_f32({expr})" if u.op is Ops.LOAD else f"_round_bf16({expr})"
        name = f"v{len(self.names)}"
        self.lines.append(f"{name} = {expr}")
        self.names[u] = name
        assert deps == self.deps[u], f"{u.op}: rendered axes {deps} but expected {self.deps[u]}"

    def ref(self, u: UOp) -> str:
        return self.names[u]

    def view(self, buf: str, aff: Affine, itemsize: int) -> tuple[str, frozenset[int]]:
        coeffs, offset = aff
        axes = frozenset(coeffs)
        shape = self.shape_for(axes)
        strides = tuple(coeffs.get(i, 0) * itemsize for i in range(len(self.ends)))
        lo = " + ".join([str(offset)] + [f"{c} * ({size_expr(self.ends[a])} - 1)" for a, c in coeffs.items() if c < 0])
        hi = " + ".join([str(offset)] + [f"{c} * ({size_expr(self.ends[a])} - 1)" for a, c in coeffs.items() if c > 0])
        empty = [size_expr(e) for e in self.ends if not isinstance(e, int)]
        if all(self.ends):  # an empty range touches nothing
            guard = "".join(f"{e} == 0 or " for e in empty)
            self.lines.append(f"assert {guard}(0 <= {lo} and {hi} < {buf}.size), 'index out of bounds in {self.name}'")
        return f"_view({buf}, {offset}, {shape}, {strides})", axes

    def index_array(self, u: UOp) -> str:
        return f"np.broadcast_to({self.ref(u)}, {self.shape_for(self.deps[u])})"

    # ---- one rule per op ----
    def visit(self, u: UOp) -> None:
        op = u.op
        if op in (Ops.SINK, Ops.DEFINE_GLOBAL) or u in self.names:
            return
        if op is Ops.CONST:
            value = f"float('{u.arg}')" if isinstance(u.arg, float) and not math.isfinite(u.arg) else repr(u.arg)
            self.names[u] = f"{np_name(u.dtype)}({value})"
        elif op is Ops.RANGE:
            axis = self.axis_of[u]
            self.emit(u, f"np.arange({size_expr(self.ends[axis])}).reshape({self.shape_for(frozenset({axis}))})",
                      frozenset({axis}))  # fmt: skip
        elif op is Ops.DEFINE_VAR:
            self.names[u] = f"np.int64(vars[{u.arg[0]!r}])"
        elif op is Ops.LOAD:
            self.render_load(u)
        elif op is Ops.STORE:
            self.render_store(u)
        elif op is Ops.REDUCE:
            self.render_reduce(u)
        elif op in _UNARY:
            self.emit(u, _UNARY[op].format(a=self.ref(u.src[0])), self.deps[u.src[0]])
        elif op in (Ops.IDIV, Ops.MOD):
            a, b = u.src
            fast = a.vmin >= 0 and b.vmin > 0 and u.dtype.is_int
            if u.dtype.is_float:
                fn = "np.trunc({a} / {b})" if op is Ops.IDIV else "np.fmod({a}, {b})"
            else:
                fn = (
                    ("({a} // {b})" if op is Ops.IDIV else "({a} % {b})")
                    if fast
                    else ("_idiv({a}, {b})" if op is Ops.IDIV else "np.fmod({a}, {b})")
                )
            self.emit(u, fn.format(a=self.ref(a), b=self.ref(b)), self.deps[a] | self.deps[b])
        elif op in _BINARY:
            a, b = u.src
            self.emit(u, _BINARY[op].format(a=self.ref(a), b=self.ref(b)), self.deps[a] | self.deps[b])
        elif op is Ops.WHERE:
            c, a, b = u.src
            self.emit(u, f"np.where({self.ref(c)}, {self.ref(a)}, {self.ref(b)})",
                      self.deps[c] | self.deps[a] | self.deps[b])  # fmt: skip
        elif op is Ops.CAST:
            self.emit(u, f"_cast({self.ref(u.src[0])}, {np_name(u.dtype)})", self.deps[u.src[0]])
        elif op is Ops.BITCAST:
            self.emit(u, f"np.asarray({self.ref(u.src[0])}).view({np_name(u.dtype)})", self.deps[u.src[0]])
        else:
            raise NotImplementedError(f"cpu renderer: no rule for {op}")

    def render_load(self, u: UOp) -> None:
        buf, idx = f"b{u.src[0].arg}", u.src[1]
        aff = affine(idx, self.axis_of) if len(u.src) == 2 else None
        if aff is not None:
            expr, axes = self.view(buf, aff, u.dtype.itemsize)
            self.emit(u, expr, axes)
            return
        if len(u.src) == 2:
            self.emit(u, f"{buf}[{self.ref(idx)}]", self.deps[idx])
            return
        valid = u.src[2]
        deps = self.deps[idx] | self.deps[valid]
        self.emit(u, f"np.where({self.ref(valid)}, {buf}[np.where({self.ref(valid)}, {self.ref(idx)}, 0)], "
                     f"{np_name(u.dtype)}(0))", deps)  # fmt: skip

    def render_store(self, u: UOp) -> None:
        buf, idx, value = f"b{u.src[0].arg}", u.src[1], u.src[2]
        stored = self.ref(value) if u.src[0].dtype != dtypes.bfloat16 else f"_f32_to_bf16({self.ref(value)})"
        aff = affine(idx, self.axis_of)
        if aff is not None:
            expr, axes = self.view(buf, aff, u.src[0].dtype.itemsize)
            self.lines.append(f"out = {expr}")
            self.lines.append(f"np.copyto(out, {stored}, casting='unsafe')")
            return
        axes = self.deps[idx] | self.deps[value]
        shape = self.shape_for(axes)
        target = f"{buf}[np.broadcast_to({self.ref(idx)}, {shape})]"
        self.lines.append(f"{target} = np.broadcast_to({stored}, {shape})")

    def render_reduce(self, u: UOp) -> None:
        value, ranges = u.src[0], u.src[1:]
        axes = frozenset(self.axis_of[r] for r in ranges)
        out_deps = self.deps[value] - axes
        missing = [size_expr(self.ends[a]) for a in sorted(axes - self.deps[value])]  # summed but constant along
        out_shape = self.shape_for(out_deps)
        factors = self.contraction_factors(u)
        if factors is not None:
            a, b = factors
            letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
            sub = lambda d: "".join(letters[i] for i in sorted(d))  # noqa: E731
            da, db = self.deps[a], self.deps[b]
            expr = (
                f"_contract(np.reshape({self.ref(a)}, {tuple_expr([self.ends[i] for i in sorted(da)])}), '{sub(da)}', "
                f"np.reshape({self.ref(b)}, {tuple_expr([self.ends[i] for i in sorted(db)])}), '{sub(db)}', "
                f"'{sub(out_deps)}').reshape({out_shape})"
            )
        else:
            fn = "np.add.reduce" if u.arg is Ops.ADD else "np.maximum.reduce"
            present = tuple(sorted(axes & self.deps[value]))
            operand = self.ref(value)
            if u.arg is Ops.ADD and u.dtype == dtypes.float32:  # accumulate in double, as the C path does:
                operand = f"np.asarray({operand}, dtype=np.float64)"  # a sum is then the same in every kernel
            expr = f"{fn}({operand}, axis={present}, keepdims=True)" if present else self.ref(value)
            expr = f"np.asarray({expr}, dtype={np_name(u.dtype)}).reshape({out_shape})"
        if missing and u.arg is Ops.ADD:
            expr = f"({expr} * {np_name(u.dtype)}({' * '.join(missing)}))"
        self.emit(u, expr, out_deps)


def _sum_terms(x: UOp) -> list[UOp]:
    return [t for s in x.src for t in (_sum_terms(s) if s.op is Ops.ADD else [s])]


def _split_sum(r: UOp) -> UOp | None:
    """sum(a*b + c*d) = sum(a*b) + sum(c*d): each product can then be a contraction (BLAS), where the
    sum of the whole would loop over M x N x K (SwiGLU's backward sums two matmuls into one reduction)."""
    if r.arg is not Ops.ADD or r.src[0].op is not Ops.ADD or not r.dtype.is_float:
        return None
    terms = _sum_terms(r.src[0])
    if not any(t.op is Ops.MUL for t in terms):
        return None
    parts = [UOp(Ops.REDUCE, r.dtype, (t, *r.src[1:]), Ops.ADD) for t in terms]
    out = parts[0]
    for p in parts[1:]:
        out = out + p
    return out


split_sums = PatternMatcher([(UPat(Ops.REDUCE, name="r"), _split_sum)], "split_sums")


def prepare(ast: UOp) -> UOp:
    """The kernel as both CPU renderers take it (the same rewrites, so both compute a value the same way)."""
    return graph_rewrite(decompose(ast), split_sums, name="split_sums")


def render(name: str, ast: UOp) -> str:
    return Renderer(name, prepare(ast)).render()

"""UPat matching, PatternMatcher tables, and graph_rewrite (order, memoization, fixed point)."""

from __future__ import annotations

from collections.abc import Callable

from anneal_ir import CompileTrace, Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite

I64, F32 = dtypes.int64, dtypes.float32


def var(name: str, lo: int = 0, hi: int = 9) -> UOp:
    return UOp(Ops.DEFINE_VAR, I64, (), (name, lo, hi))


x, y, z = var("x"), var("y"), var("z")


# ---- UPat ----


def test_match_op_dtype_arg() -> None:
    assert UPat(Ops.ADD).match(x + y, {}) == [{}]
    assert UPat(Ops.MUL).match(x + y, {}) == []
    assert UPat((Ops.MUL, Ops.ADD)).match(x + y, {}) == [{}]
    assert UPat(Ops.ADD, dtype=F32).match(x + y, {}) == []
    assert UPat(Ops.ADD, dtype=(F32, I64)).match(x + y, {}) == [{}]
    assert UPat.const(1).match(UOp.const(I64, 1), {}) == [{}]
    assert UPat.const(1).match(UOp.const(dtypes.bool, True), {}) == []  # True is not 1 here
    assert UPat.const(1).match(UOp.const(F32, 1.0), {}) == []
    assert UPat(custom=lambda u: u.op is Ops.DEFINE_VAR).match(x, {}) == [{}]


def test_names_bind_and_must_agree() -> None:
    p = UPat(Ops.ADD, src=(UPat.var("a"), UPat.var("b")))
    assert p.match(x + y, {}) == [{"a": x, "b": y}]
    same = UPat(Ops.ADD, src=(UPat.var("a"), UPat.var("a")))
    assert same.match(x + x, {}) == [{"a": x}]
    assert same.match(x + y, {}) == []
    named_root = UPat(Ops.ADD, name="root", src=(UPat.var("a"), UPat.cvar("c")))
    assert named_root.match(x + 3, {}) == [{"root": x + 3, "a": x, "c": UOp.const(I64, 3)}]


def test_commutative_list_matches_either_order() -> None:
    p = UPat(Ops.ADD, src=[UPat.var("a"), UPat.cvar("c")])
    assert p.match(x + 3, {}) == [{"a": x, "c": UOp.const(I64, 3)}]
    assert p.match(3 + x, {}) == [{"a": x, "c": UOp.const(I64, 3)}]
    assert p.match(x + y, {}) == []
    nested = UPat(Ops.ADD, src=[UPat.var("a"), UPat(Ops.MUL, src=[UPat.var("a"), UPat.cvar("c")])])
    assert len(nested.match((-1 * x) + x, {})) == 1
    assert UPat.alu(Ops.ADD, UPat.var("a"), UPat.cvar("c"), commutative=True).match(3 + x, {}) != []


def test_src_pattern_for_every_source_and_any_len() -> None:
    all_const = UPat(Ops.ADD, src=UPat(Ops.CONST))
    assert all_const.match(UOp.const(I64, 1) + 2, {}) == [{}]
    assert all_const.match(x + 2, {}) == []
    w = (x < 5).where(y, z)
    assert UPat(Ops.WHERE, src=(UPat.var("c"),), allow_any_len=True).match(w, {}) == [{"c": x < 5}]
    assert UPat(Ops.WHERE, src=(UPat.var("c"),)).match(w, {}) == []


# ---- PatternMatcher ----


def test_rules_in_table_order_and_ctx() -> None:
    seen: list[str] = []

    def first(a: UOp) -> UOp | None:
        seen.append("first")
        return None  # passes: the next rule gets its turn

    def second(a: UOp, ctx: list[str]) -> UOp:
        ctx.append("second")
        return a

    pm = PatternMatcher(
        [(UPat(Ops.ADD, src=(UPat.var("a"), UPat())), first), (UPat(Ops.ADD, src=(UPat.var("a"), UPat())), second)]
    )
    log: list[str] = []
    assert pm.rewrite(x + y, log) is x
    assert seen == ["first"] and log == ["second"]
    assert pm.rewrite(x * y, log) is None


def test_wildcard_rules_apply_to_every_op_after_specific_ones() -> None:
    pm = PatternMatcher([(UPat(name="n"), lambda n: None), (UPat(Ops.ADD, name="n"), lambda n: n.src[0])])
    assert pm.rewrite(x + y) is x
    both = pm + PatternMatcher([(UPat(Ops.MUL, name="n"), lambda n: n.src[1])])
    assert both.rewrite(x * y) is y and both.rewrite(x + y) is x


# ---- graph_rewrite ----


def test_default_order_rewrites_sources_first() -> None:
    order: list[str] = []

    def on_add(n: UOp) -> None:
        order.append("add")

    def on_var(n: UOp) -> None:
        order.append(n.arg[0])

    pm = PatternMatcher([(UPat(Ops.ADD, name="n"), on_add), (UPat(Ops.DEFINE_VAR, name="n"), on_var)])
    graph_rewrite(x + y, pm)
    assert order == ["x", "y", "add"]
    order.clear()
    graph_rewrite(x + y, pm, bottom_up=True)
    assert order[0] == "add"  # the node before its sources


def test_bottom_up_sees_the_original_subgraph() -> None:
    # fold (a*2)+(a*2) -> a*4 only works if the ADD is seen before its MULs turn into shifts
    def to_shift(n: UOp) -> UOp:
        return n.src[0].alu(Ops.SHL, UOp.const(I64, 1))

    def double(a: UOp) -> UOp:
        return a * 4

    twice = UPat(Ops.MUL, src=(UPat.var("a"), UPat.const(2)))
    rules: list[tuple[UPat, Callable[..., UOp | None]]] = [
        (UPat(Ops.MUL, src=(UPat(), UPat.const(2)), name="n"), to_shift),
        (UPat(Ops.ADD, src=(twice, twice)), double),
    ]
    pm = PatternMatcher(rules)
    e = x * 2 + x * 2
    assert graph_rewrite(e, pm, bottom_up=True) is x * 4
    assert graph_rewrite(e, pm).op is Ops.ADD  # sources first: the MULs are shifts by then


def test_rewrites_to_a_fixed_point() -> None:
    # x+0 -> x applied repeatedly, also to the nodes a rewrite creates
    def drop_zero(a: UOp) -> UOp:
        return a

    def push_zero(a: UOp, b: UOp) -> UOp:
        return (a + 0) + (b + 0)  # creates new work that must be rewritten too

    pm = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("a"), UPat.const(0))), drop_zero)])
    assert graph_rewrite(((x + 0) + 0) + 0, pm) is x
    pm2 = PatternMatcher([(UPat(Ops.MUL, src=(UPat.var("a"), UPat.var("b"))), push_zero)]) + pm
    assert graph_rewrite(x * y, pm2) is x + y


def test_memoized_once_per_node() -> None:
    calls: list[UOp] = []

    def record(n: UOp) -> None:
        calls.append(n)

    shared = x * 3
    e = (shared + 1) * (shared + 2) + shared
    graph_rewrite(e, PatternMatcher([(UPat(name="n"), record)]))
    assert len(calls) == len(set(calls)) == len(e.toposort())


def test_unchanged_graph_is_returned_as_is_and_deep_graphs_work() -> None:
    deep = x
    for i in range(3000):
        deep = deep + (i % 5)
    pm = PatternMatcher([(UPat(Ops.MUL, name="n"), lambda n: n.src[0])])
    assert graph_rewrite(deep, pm) is deep
    pm0 = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("a"), UPat.const(0))), lambda a: a)])
    out = graph_rewrite(deep, pm0)
    assert len(out.toposort()) < len(deep.toposort())


def test_compile_trace_records_passes_and_firings() -> None:
    trace = CompileTrace()
    pm = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("a"), UPat.const(0))), drop_zero)], "zeros")
    graph = (x + 0) * y
    with trace.active():
        out = graph_rewrite(graph, pm)
        graph_rewrite(x, pm, name="named")
    assert [p.name for p in trace.passes] == ["zeros", "named"]
    first = trace.passes[0]
    assert first.root_in is graph and first.root_out is out and out is x * y
    assert [(f.rule, f.matched, f.result) for f in first.fired] == [("zeros.drop_zero", x + 0, x)]
    assert trace.passes[1].fired == []


def test_compile_trace_is_off_by_default_and_bounded() -> None:
    pm = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("a"), UPat.const(0))), drop_zero)], "zeros")
    assert graph_rewrite((x + 0) * y, pm) is x * y  # no trace set: nothing recorded anywhere
    trace = CompileTrace(max_passes=1)
    with trace.active():
        graph_rewrite((x + 0) * y, pm)
        graph_rewrite((y + 0) * x, pm)
    assert len(trace.passes) == 1 and trace.truncated


def test_compile_trace_gives_built_nodes_an_origin_and_rules_pass_it_on() -> None:
    trace = CompileTrace()
    pm = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("a"), UPat.const(0))), drop_zero_times_one)], "zeros")
    a = UOp(Ops.DEFINE_VAR, dtypes.int64, (), ("traced_a", 0, 9))
    with trace.active():
        with trace.within("forward", "block.0"):
            built = (a + 0) * 3
        out = graph_rewrite(built, pm)
    assert trace.origins[built].module == "block.0" and trace.origins[built].phase == "forward"
    made = out.src[0]  # a * 1, built by the rule while no module ran: it inherits a + 0's origin
    assert made.op is Ops.MUL and trace.origins[made].module == "block.0"
    assert trace.made_by[made] == "zeros.drop_zero_times_one"
    assert a not in trace.origins  # built before the trace started


def drop_zero(a: UOp) -> UOp:
    return a


def drop_zero_times_one(a: UOp) -> UOp:
    return a * 1

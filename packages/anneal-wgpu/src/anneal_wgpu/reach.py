"""How far into each buffer a kernel reaches: what lets it run without the shader compiler's bounds checks.

WGSL bounds-checks every storage access (naga clamps a read's index, skips an out-of-range write), which costs
instructions in every load of a tiled contraction: 4-13% of a contraction's time on an H200 (RESULTS.md). The
compiler knows its indices: each load's and store's index is bounded by the ranges it is made of and, where it is
gated, by its gate (a gated read in WGSL reads element 0 where the gate fails; a gated write is skipped). `reach`
proves the largest element each buffer argument is accessed at; the runtime creates such a kernel's pipeline
without the checks and binds it only to buffers at least that long (a checked pipeline otherwise). A kernel with
an index it cannot bound keeps the checks.
"""

from __future__ import annotations

from anneal_ir import Ops, UOp
from anneal_ir.symbolic import bounds_given_valid


def _gate(access: UOp) -> UOp | None:
    if access.op is Ops.LOAD:
        return access.src[2] if len(access.src) == 3 else None
    return access.src[3] if len(access.src) == 4 else None


def reach(ast: UOp) -> dict[int, int] | None:
    """For each buffer argument (by number), the largest element index the kernel accesses; None when some index
    is not proved to lie in [0, its bound] (where its gate holds)."""
    out: dict[int, int] = {}
    for n in ast.toposort():
        if n.op not in (Ops.LOAD, Ops.STORE) or n.src[0].op is not Ops.DEFINE_GLOBAL:
            continue
        index, gate = n.src[1], _gate(n)
        lo, hi = (index.vmin, index.vmax) if gate is None else bounds_given_valid(gate, index)
        if not (isinstance(lo, int) and isinstance(hi, int)) or lo < 0:
            return None
        slot = int(n.src[0].arg)
        out[slot] = max(out.get(slot, 0), hi)
    return out


def fits(reached: dict[int, int], capacities: dict[int, int]) -> bool:
    """Does every buffer hold the elements the kernel reaches (capacities: elements each argument's memory has)?"""
    return all(capacities.get(slot, 0) > last for slot, last in reached.items())

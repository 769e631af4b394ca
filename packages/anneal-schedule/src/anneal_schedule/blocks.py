"""Nested code blocks for renderers that emit loops: each value goes in the outermost block where
every range it depends on exists (so loop-invariant work is hoisted). Shared by the WGSL and C renderers."""

from __future__ import annotations

from dataclasses import dataclass, field

from anneal_ir import UOp


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

    def outermost(self, need: frozenset[UOp]) -> Block | None:
        """The outermost block (self or an ancestor) in which all the ranges in need exist."""
        for b in reversed(self.ancestors()):
            if need <= b.scope:
                return b
        return None

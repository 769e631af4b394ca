"""Index simplification of a kernel AST (the symbolic rules live in anneal_ir.symbolic)."""

from __future__ import annotations

from anneal_ir import UOp


def simplify_kernel(ast: UOp) -> UOp:
    try:
        from anneal_ir.symbolic import simplify
    except ImportError:  # symbolic rules not present yet
        return ast
    return simplify(ast)

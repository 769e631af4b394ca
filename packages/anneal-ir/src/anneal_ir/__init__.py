"""anneal_ir: the UOp intermediate representation and the plugin hook specs."""

from anneal_ir.dtype import DType, dtypes, promote_types
from anneal_ir.ops import GroupOp, Ops
from anneal_ir.pattern import PatternMatcher, UPat, graph_rewrite
from anneal_ir.plugins import (
    Availability,
    BackendEntry,
    DatasetEntry,
    ModelEntry,
    Plugins,
    hookimpl,
    hookspec,
    load_plugins,
)
from anneal_ir.settings import Settings
from anneal_ir.trace import CompileTrace
from anneal_ir.uop import UOp

__version__ = "0.1.0"

__all__ = [
    "Availability",
    "BackendEntry",
    "CompileTrace",
    "DType",
    "DatasetEntry",
    "GroupOp",
    "ModelEntry",
    "Ops",
    "PatternMatcher",
    "Plugins",
    "Settings",
    "UOp",
    "UPat",
    "dtypes",
    "graph_rewrite",
    "hookimpl",
    "hookspec",
    "load_plugins",
    "promote_types",
]

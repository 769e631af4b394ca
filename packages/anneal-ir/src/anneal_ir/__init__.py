"""anneal_ir: the UOp intermediate representation and the plugin hook specs."""

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

__version__ = "0.1.0"

__all__ = [
    "Availability",
    "BackendEntry",
    "DatasetEntry",
    "ModelEntry",
    "Plugins",
    "Settings",
    "hookimpl",
    "hookspec",
    "load_plugins",
]

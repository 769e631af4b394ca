"""`register_backend` (no s) is not a hook: the loader must refuse this plugin, not ignore the typo."""

from collections.abc import Callable

from anneal_ir.plugins import hookimpl


@hookimpl
def register_backend(register: Callable[..., None]) -> None:
    register("misspelled", object)

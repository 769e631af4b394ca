"""Whether ops record history for autodiff: `no_grad`, `enable_grad`, `set_grad_enabled` as torch's.

Inside `no_grad()` an op on tensors that require grad gives a tensor that does not, cut from its inputs'
history (a DETACH node), so a later backward never reaches through it: evaluation and in-place updates under
it build no gradient graph. The mode is a context variable: each thread and task has its own, and leaving the
block restores the one before it. Each works as a context manager and as a decorator.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable
from typing import Any, TypeVar

_enabled: contextvars.ContextVar[bool] = contextvars.ContextVar("anneal_grad_enabled", default=True)
F = TypeVar("F", bound=Callable[..., Any])


def is_grad_enabled() -> bool:
    return _enabled.get()


class set_grad_enabled:  # noqa: N801 - torch's name
    """Record history (True) or not (False) inside the block or the decorated function."""

    def __init__(self, mode: bool) -> None:
        self.mode = bool(mode)
        self._tokens: list[contextvars.Token[bool]] = []

    def __enter__(self) -> None:
        self._tokens.append(_enabled.set(self.mode))

    def __exit__(self, *exc: object) -> None:
        _enabled.reset(self._tokens.pop())

    def __call__(self, fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with set_grad_enabled(self.mode):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


class _Switch(set_grad_enabled):
    """A mode fixed by the class: usable as ``with no_grad():``, ``@no_grad()`` and, as torch's, ``@no_grad``."""

    MODE = True

    def __new__(cls, fn: Callable[..., Any] | None = None) -> Any:
        if fn is not None:  # @no_grad without parentheses: the class was called with the function
            return cls()(fn)
        return super().__new__(cls)

    def __init__(self, fn: Callable[..., Any] | None = None) -> None:
        super().__init__(self.MODE)


class no_grad(_Switch):  # noqa: N801 - torch's name
    MODE = False


class enable_grad(_Switch):  # noqa: N801 - torch's name
    MODE = True

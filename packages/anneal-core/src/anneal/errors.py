"""The errors anneal raises where torch raises a type anneal did not: each is both, so code written against either
catches it (torch's type first, then what anneal raised before)."""

from __future__ import annotations


class ShapeError(RuntimeError, ValueError):
    """A shape that does not fit the op: torch's type (RuntimeError), and a ValueError as anneal raised before."""


class DTypeError(TypeError, NotImplementedError):
    """An op not defined for a dtype (a bitwise op or shift of floats, a float index): torch raises
    NotImplementedError or RuntimeError for most and TypeError for ``~``; this is all three, raised when the op is
    built (NotImplementedError is a RuntimeError)."""


class IndexOutOfRange(IndexError, RuntimeError):
    """An index outside its dimension: torch raises IndexError for indexing, embedding and targets and
    RuntimeError for gather, scatter, one_hot and max_unpool; this is both."""


class EmptyReduction(IndexError, RuntimeError):
    """A max, min or arg-extreme over a size-0 dim: torch raises IndexError (anneal raised RuntimeError)."""

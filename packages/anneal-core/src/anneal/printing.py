"""A tensor's printed form, as torch prints it (torch/_tensor_str.py's rules, on the values read to the host).

Floats print in one of three modes chosen from the nonzero finite values: whole numbers (``1.``), fixed point
with 4 decimals, or scientific when they span more than 1000x, exceed 1e8 or fall below 1e-4; every element is
padded to the widest of those values (an inf, NaN or zero may be wider and is not). Past 1000 elements each dim
shows its first and last 3; lines break at 80 characters; the suffixes (device, dtype, ...) follow the values
and go on a line of their own when they would pass it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

PRECISION, THRESHOLD, EDGEITEMS, LINEWIDTH = 4, 1000, 3, 80


class _Formatter:
    def __init__(self, values: np.ndarray, floating: bool) -> None:
        self.floating, self.int_mode, self.sci_mode, self.max_width = floating, True, False, 1
        flat = values.reshape(-1)
        if not floating:
            self.max_width = max([1, *(len(str(v)) for v in flat.tolist())])
            return
        wide = flat.astype(np.float64)
        shown = wide[np.isfinite(wide) & (wide != 0)]
        if shown.size == 0:
            return
        magnitude = np.abs(shown)
        lo, hi = float(magnitude.min()), float(magnitude.max())
        self.int_mode = bool(np.all(shown == np.ceil(shown)))
        self.sci_mode = hi / lo > 1000.0 or hi > 1.0e8 or lo < 1.0e-4
        if self.sci_mode:
            widths = [len(f"{v:.{PRECISION}e}") for v in shown.tolist()]
        elif self.int_mode:
            widths = [len(f"{v:.0f}") + 1 for v in shown.tolist()]  # the "." that marks a float
        else:
            widths = [len(f"{v:.{PRECISION}f}") for v in shown.tolist()]
        self.max_width = max([1, *widths])

    def format(self, value: object) -> str:
        if not self.floating:
            text = str(value)
        else:
            v = float(value)  # type: ignore[arg-type]
            if self.sci_mode:
                text = f"{v:{self.max_width}.{PRECISION}e}"
            elif self.int_mode:
                text = f"{v:.0f}" + ("" if math.isinf(v) or math.isnan(v) else ".")
            else:
                text = f"{v:.{PRECISION}f}"
        return " " * (self.max_width - len(text)) + text


def _summarized(values: np.ndarray) -> np.ndarray:
    """The elements a summarized print shows: the first and last EDGEITEMS of every dim longer than twice that."""
    for d in range(values.ndim):
        if values.shape[d] > 2 * EDGEITEMS:
            keep = list(range(EDGEITEMS)) + list(range(values.shape[d] - EDGEITEMS, values.shape[d]))
            values = np.take(values, keep, axis=d)
    return values


def _vector(values: np.ndarray, indent: int, summarize: bool, fmt: _Formatter) -> str:
    per_line = max(1, math.floor((LINEWIDTH - indent) / (fmt.max_width + 2)))
    items = values.tolist()
    if summarize and len(items) > 2 * EDGEITEMS:
        data = [fmt.format(v) for v in items[:EDGEITEMS]] + [" ..."] + [fmt.format(v) for v in items[-EDGEITEMS:]]
    else:
        data = [fmt.format(v) for v in items]
    lines = [", ".join(data[i : i + per_line]) for i in range(0, len(data), per_line)]
    return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"


def _nested(values: np.ndarray, indent: int, summarize: bool, fmt: _Formatter) -> str:
    if values.ndim == 0:
        return fmt.format(values.item())
    if values.ndim == 1:
        return _vector(values, indent, summarize, fmt)
    n = values.shape[0]
    rows: Sequence[int | None] = range(n)
    if summarize and n > 2 * EDGEITEMS:
        rows = [*range(EDGEITEMS), None, *range(n - EDGEITEMS, n)]
    parts = ["..." if i is None else _nested(values[i], indent + 1, summarize, fmt) for i in rows]
    return "[" + ("," + "\n" * (values.ndim - 1) + " " * (indent + 1)).join(parts) + "]"


def values_str(values: np.ndarray, floating: bool, indent: int) -> str:
    """The values part of the repr (after ``tensor(``, which is indent characters)."""
    if values.size == 0:
        return "[]"
    summarize = values.size > THRESHOLD
    fmt = _Formatter(_summarized(values) if summarize else values, floating)
    return _nested(values, indent, summarize, fmt)


def with_suffixes(text: str, suffixes: Sequence[str], indent: int) -> str:
    """text, then each suffix after ", " or, where the line would pass LINEWIDTH, on a new line; then ")"."""
    out = [text]
    last = len(text) - text.rfind("\n") + 1
    for suffix in suffixes:
        if last + len(suffix) + 2 > LINEWIDTH:
            out.append(",\n" + " " * indent + suffix)
            last = indent + len(suffix)
        else:
            out.append(", " + suffix)
            last += len(suffix) + 2
    return "".join(out) + ")"

"""The studio's pages, as HTML text: every value that comes from a model, a run folder or a request is
escaped here, and the pages run no inline script (their CSP allows only the studio's own files)."""

from __future__ import annotations

import html
import urllib.parse
from collections.abc import Iterable, Sequence
from typing import Any

NAV = ["studio", "visualize", "kernels", "explain", "train", "generate", "history", "doctor"]
CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'"


def e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def link(path: str, **query: Any) -> str:
    return e(path + ("?" + urllib.parse.urlencode(query) if query else ""))


def layout(view: str, title: str, body: str, scripts: Sequence[str] = ()) -> str:
    nav = " ".join(f'<a href="/{v}"{" class=active" if v == view else ""}>{v}</a>' for v in NAV)
    tags = "".join(f'<script src="/static/{e(s)}"></script>' for s in scripts)
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>anneal {e(view)}: {e(title)}</title>'
            '<link rel="icon" href="data:,"><link rel="stylesheet" href="/static/studio.css"></head>'
            f'<body data-view="{e(view)}">'
            f'<header><b>anneal</b> <nav>{nav}</nav></header><main><h1>{e(title)}</h1>{body}</main>{tags}'
            "</body></html>")  # fmt: skip


def table(headers: Iterable[str], rows: Iterable[Iterable[str]], cls: str = "") -> str:
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)  # cells: HTML already
    return f'<table class="{e(cls)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def select(name: str, options: Iterable[str], chosen: str | None = None) -> str:
    opts = "".join(f"<option{' selected' if o == chosen else ''}>{e(o)}</option>" for o in options)
    return f'<select name="{e(name)}" id="{e(name)}">{opts}</select>'


def pre(text: str, cls: str = "") -> str:
    return f'<pre class="{e(cls)}">{e(text)}</pre>'


def loss_svg(rows: Sequence[tuple[int, float, float | None]], width: int = 320, height: int = 120) -> str:
    """A run's training (and validation) loss against step, log scale."""
    import math

    points = [(s, v) for s, v, _ in rows if v > 0 and math.isfinite(v)]
    if len(points) < 2:
        return f'<svg class="loss" width="{width}" height="{height}"></svg>'
    vals = [points[0][1], *(v for _, v in points)] + [v for _, _, v in rows if v and v > 0 and math.isfinite(v)]
    lo, hi = math.log(min(vals)), math.log(max(vals))
    span_x, span_y = max(1, points[-1][0] - points[0][0]), (hi - lo) or 1.0

    def xy(step: int, value: float) -> str:
        x = 4 + (step - points[0][0]) / span_x * (width - 8)
        y = 4 + (hi - math.log(value)) / span_y * (height - 8)
        return f"{x:.1f},{y:.1f}"

    train = " ".join(xy(s, v) for s, v in points)
    val = " ".join(xy(s, v) for s, _, v in rows if v and v > 0 and math.isfinite(v))
    return (f'<svg class="loss" width="{width}" height="{height}" viewBox="0 0 {width} {height}">'
            f'<polyline class="train" points="{train}"/><polyline class="val" points="{val}"/></svg>')  # fmt: skip


def graph_svg(nodes: Sequence[tuple[str, Sequence[int]]], highlight: set[int] = frozenset()) -> str:  # type: ignore[assignment]
    """A small DAG (label, source indices; sources first), drawn by depth: a mini-graph for the explain view."""
    depth: list[int] = []
    for _, src in nodes:
        depth.append(1 + max((depth[s] for s in src), default=-1))
    rows: dict[int, list[int]] = {}
    for i, d in enumerate(depth):
        rows.setdefault(d, []).append(i)
    box_w, box_h, gap_x, gap_y = 150, 24, 14, 26
    width = max(len(r) for r in rows.values()) * (box_w + gap_x) + gap_x if rows else 0
    height = len(rows) * (box_h + gap_y) + gap_y
    at = {i: (gap_x + k * (box_w + gap_x), gap_y + d * (box_h + gap_y))
          for d, r in rows.items() for k, i in enumerate(r)}  # fmt: skip
    edges = "".join(
        f'<line x1="{at[s][0] + box_w / 2}" y1="{at[s][1] + box_h}" x2="{at[i][0] + box_w / 2}" y2="{at[i][1]}"/>'
        for i, (_, src) in enumerate(nodes) for s in src
    )  # fmt: skip
    boxes = "".join(
        f'<g class="{"new" if i in highlight else ""}"><rect x="{x}" y="{y}" width="{box_w}" height="{box_h}"/>'
        f'<text x="{x + 6}" y="{y + 16}">{e(label[:24])}</text></g>'
        for i, ((label, _), (x, y)) in enumerate(zip(nodes, (at[i] for i in range(len(nodes)))))
    )  # fmt: skip
    return f'<svg class="mini" width="{width}" height="{height}">{edges}{boxes}</svg>'


def form(action: str, fields: str, button: str, method: str = "get", form_id: str = "") -> str:
    ident = f' id="{e(form_id)}"' if form_id else ""
    return (
        f'<form action="{e(action)}" method="{e(method)}"{ident}>{fields} '
        f'<button type="submit">{e(button)}</button></form>'
    )

"""The viz page: one self-contained HTML file (styles, scripts, the vendored layout library and the
step's data inline), so that the served page and `--export` are the same bytes and need no network."""

from __future__ import annotations

import html
import json
import re
from importlib import resources
from typing import Any


def _static(name: str) -> str:
    return resources.files("anneal_cli.viz").joinpath("static", name).read_text(encoding="utf-8")


def _inline_script(text: str) -> str:
    # A script element ends at the first "</script" (any case); in JS strings "<\/" reads the same.
    return re.sub(r"</(script)", r"<\\/\1", text, flags=re.IGNORECASE)


def _inline_json(data: Any) -> str:
    # No "<" at all in the data: nothing in it can close the script or open an HTML comment there.
    return json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")


def render_page(document: dict[str, Any]) -> str:
    """The page for one step document (anneal.step_record.record_step)."""
    page = _static("page.html")
    parts = {
        "__TITLE__": html.escape(str(document.get("title", ""))),
        "/*__STYLE__*/": _static("viz.css"),
        "/*__DAGRE__*/": _inline_script(_static("vendor/dagre.min.js")),
        "/*__WORKER__*/": _inline_script(_static("layout_worker.js")),
        "/*__APP__*/": _inline_script(_static("viz.js")),
        "__DATA__": _inline_json(document),
    }
    # one pass, so that no inserted text is searched for the markers after it
    return re.sub("|".join(re.escape(m) for m in parts), lambda m: parts[m.group(0)], page)

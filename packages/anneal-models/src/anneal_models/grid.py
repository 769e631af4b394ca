"""Sample grids as PNG files (Pillow): images tiled in rows, each row optionally labelled on its left."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from anneal.nn.state import atomic_write

ZOOM = 4  # pixels per image pixel: an 8x8 digit becomes 32x32
GAP = 2


def png(x: np.ndarray, columns: int, rows: Sequence[str] | None = None) -> bytes:
    """Images x (N, C, H, W) with values in [0, 1] (C 1 or 3) as PNG bytes: `columns` per row, row i labelled
    rows[i] when given."""
    n, c, h, w = x.shape
    if c not in (1, 3):
        raise ValueError(f"grid: images need 1 or 3 channels, got {c}")
    pixels = (np.clip(x, 0, 1) * 255 + 0.5).astype(np.uint8).transpose(0, 2, 3, 1)
    count = max(1, -(-n // columns))
    font = ImageFont.load_default()
    margin = 0 if not rows else max(int(font.getlength(str(r))) for r in rows) + 2 * GAP
    cell_h, cell_w = h * ZOOM + GAP, w * ZOOM + GAP
    sheet = Image.new("RGB", (margin + columns * cell_w + GAP, count * cell_h + GAP), "white")
    draw = ImageDraw.Draw(sheet)
    for i in range(n):
        r, k = divmod(i, columns)
        tile = Image.fromarray(pixels[i, ..., 0] if c == 1 else pixels[i]).convert("RGB")
        sheet.paste(tile.resize((w * ZOOM, h * ZOOM), Image.Resampling.NEAREST),
                    (margin + GAP + k * cell_w, GAP + r * cell_h))  # fmt: skip
    for r, label in enumerate(rows or ()):
        draw.text((GAP, GAP + r * cell_h + (h * ZOOM) // 2), str(label), fill="black", font=font, anchor="lm")
    out = io.BytesIO()
    sheet.save(out, format="PNG")
    return out.getvalue()


def write(path: Path, data: bytes) -> None:
    """Write a grid to path atomically (anneal.nn.state.atomic_write), making its folder first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, data)

"""Run folders: what `anneal train --out DIR` writes and `--resume DIR` reads.

    DIR/config.json              {"format", "model", "device", "config", "trainer_config", "derived"}
    DIR/loss.csv                 step,loss[,val][,ranks,comm_ms] — every step's training loss, val where evaluated;
                                 data-parallel steps add the rank count and the ms in the gradient exchange
    DIR/ranks.json               data-parallel: every rank's state sha256 at the last checkpoint (all equal)
    DIR/checkpoint.safetensors   the trainer's state_dict(); metadata: model, step, sha256 of the tensors
    DIR/summary.txt              what the trainer's finish() printed (the final report, a text sample)
    DIR/summary.json             a classifier's report(): test accuracy, per class, by epoch
    DIR/...                      whatever the model writes (samples: the CLI sets trainer.out_dir = DIR)

Every file is written to a temporary name in DIR and renamed over the old one, so a crash
never leaves a half-written file; loss.csv and the checkpoint agree on the step when a run
is resumed (rows after the checkpoint are dropped). A folder this module created is removed
again when the run fails before its first checkpoint (setup), so no half-made run is left.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import numpy as np

from anneal.files import atomic_write as atomic_write  # re-exported: the commands import it from here
from anneal_cli.errors import CommandError, one_line

CONFIG, LOSSES, CHECKPOINT, SUMMARY = "config.json", "loss.csv", "checkpoint.safetensors", "summary.txt"
SUMMARY_JSON, RANKS = "summary.json", "ranks.json"
FORMAT = 1


@dataclass
class Row:
    step: int
    loss: float
    val: float | None = None
    ranks: int | None = None  # data-parallel steps: how many ranks took it
    comm_ms: float | None = None  # and the ms rank 0 spent in its gradient exchange


def tensors_digest(arrays: dict[str, np.ndarray]) -> str:
    """sha256 over names, dtypes, shapes and bytes, in name order: catches a flipped bit safetensors cannot."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _json_safe(config: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in config.items():
        try:
            json.dumps(v)
        except (TypeError, ValueError):
            continue
        out[str(k)] = v
    return out


def csv_text(rows: list[Row]) -> str:
    with_val = any(r.val is not None for r in rows)
    with_ranks = any(r.ranks is not None for r in rows)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["step", "loss"] + (["val"] if with_val else []) + (["ranks", "comm_ms"] if with_ranks else []))
    for r in rows:
        row: list[Any] = [r.step, repr(r.loss)]
        if with_val:
            row.append("" if r.val is None else repr(r.val))
        if with_ranks:  # a single-process step of a run resumed from a data-parallel one: 1 rank, no exchange
            row += [r.ranks or 1, f"{r.comm_ms or 0.0:.3f}"]
        w.writerow(row)
    return buf.getvalue()


def read_csv(path: Path) -> list[Row]:
    rows: list[Row] = []
    if not path.is_file():
        return rows
    with open(path, newline="") as f:
        for rec in csv.DictReader(f):
            try:
                val = rec.get("val") or None
                ranks, comm = rec.get("ranks") or None, rec.get("comm_ms") or None
                rows.append(Row(int(rec["step"]), float(rec["loss"]), None if val is None else float(val),
                                None if ranks is None else int(ranks),
                                None if comm is None else float(comm)))  # fmt: skip
            except (KeyError, TypeError, ValueError):
                continue  # a row this version cannot read is only history: skip it
    return rows


@dataclass
class SavedRun:
    """A run folder, read for --resume: its configuration, checkpoint and loss history."""

    path: Path
    model: str
    config: dict[str, Any]
    step: int
    state: dict[str, Any]
    history: list[Row]
    derived: list[str] = field(default_factory=list)  # settings the trainer derived (steps from epochs)


def read_run(path: Path, model: str | None = None) -> SavedRun:
    """Read and check a run folder (of `model`, or of whichever model wrote it); every problem is one clear
    CommandError (exit 1)."""
    cfg_path = path / CONFIG
    if not cfg_path.is_file():
        raise CommandError(f"{path} is not an anneal run folder (it has no {CONFIG})")
    try:
        meta = json.loads(cfg_path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CommandError(f"{cfg_path} is unreadable or not JSON: {one_line(exc)}") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("model"), str) or not isinstance(meta.get("config"), dict):
        raise CommandError(f"{path} is not an anneal run folder ({CONFIG} has no model and config)")
    model = model or meta["model"]
    if meta["model"] != model:
        raise CommandError(f"{path} is a run of model {meta['model']!r}, not {model!r}")
    ckpt = path / CHECKPOINT
    if not ckpt.is_file():
        raise CommandError(f"{path} has no {CHECKPOINT} to resume from")
    state, info = load_checkpoint(ckpt)
    if info.get("anneal.model") != model:
        raise CommandError(f"checkpoint {ckpt} was written by model {info.get('anneal.model')!r}, not {model!r}")
    step = int(info["anneal.step"])
    history = [r for r in read_csv(path / LOSSES) if r.step <= step]
    derived = (
        [str(k) for k in meta.get("derived", []) if isinstance(k, str)] if isinstance(meta.get("derived"), list) else []
    )
    return SavedRun(path, model, dict(meta["config"]), step, state, history, derived)


def load_checkpoint(ckpt: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """The checkpoint's tensors (on the host) and metadata, or a CommandError saying it is corrupt."""
    from anneal.nn.state import safe_load

    try:
        info = _metadata(ckpt)
        state = safe_load(ckpt, "cpu")
        arrays = {k: t.numpy() for k, t in state.items()}
    except Exception as exc:  # safetensors raises its own error types for truncated or garbled files
        raise CommandError(f"checkpoint {ckpt} is corrupt or unreadable ({one_line(exc)})") from None
    if "anneal.step" not in info or "anneal.sha256" not in info or not info["anneal.step"].isdigit():
        raise CommandError(f"checkpoint {ckpt} was not written by anneal train (no step and checksum)")
    if tensors_digest(arrays) != info["anneal.sha256"]:
        raise CommandError(f"checkpoint {ckpt} is corrupt (its tensors do not match their sha256)")
    return state, info


def _metadata(ckpt: Path) -> dict[str, str]:
    """A safetensors file's __metadata__: an 8-byte little-endian header length, then the JSON header."""
    with open(ckpt, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        n = int.from_bytes(f.read(8), "little")
        if not 2 <= n <= size - 8:
            raise ValueError(f"header length {n} does not fit a file of {size} bytes")
        header = json.loads(f.read(n))
    meta = header.get("__metadata__") if isinstance(header, dict) else None
    return {str(k): str(v) for k, v in meta.items()} if isinstance(meta, dict) else {}


@dataclass
class RunFolder:
    """The run folder being written; an observer of the loop (it records every step's loss)."""

    path: Path
    model: str
    created: bool  # made by this run: removed again if the run fails during setup
    rows: list[Row] = field(default_factory=list)
    ready: bool = False  # has a config and a first checkpoint (or is a folder being resumed)
    ranks: Callable[[], tuple[int, float]] | None = None  # data-parallel: (rank count, last exchange's ms)

    @classmethod
    def create(cls, path: Path, model: str) -> RunFolder:
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise click.BadParameter(
                f"{path} exists and is not an empty folder; use --resume {path} to continue that run, "
                "or choose another --out",
                param_hint="--out",
            )
        created = not path.exists()
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CommandError(f"cannot create the run folder {path}: {one_line(exc)}") from None
        return cls(path, model, created)

    @classmethod
    def reopen(cls, saved: SavedRun) -> RunFolder:
        return cls(saved.path, saved.model, created=False, rows=list(saved.history), ready=True)

    def write_config(
        self,
        config: dict[str, Any],
        device: str,
        trainer_config: dict[str, Any] | None,
        derived: list[str] | None = None,
    ) -> None:
        meta: dict[str, Any] = {"format": FORMAT, "model": self.model, "device": device, "config": _json_safe(config)}
        if trainer_config and _json_safe(trainer_config) != meta["config"]:  # what the trainer derived or added
            meta["trainer_config"] = _json_safe(trainer_config)
        if derived:  # config keys the trainer filled in: --resume derives them again when a flag changes their inputs
            meta["derived"] = list(derived)
        atomic_write(self.path / CONFIG, (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode())

    def save_checkpoint(self, state: dict[str, Any], step: int) -> None:
        from anneal.nn.state import safe_save

        arrays = {k: (t.numpy() if hasattr(t, "numpy") else np.asarray(t)) for k, t in state.items()}
        info = {"anneal.format": str(FORMAT), "anneal.model": self.model, "anneal.step": str(step),
                "anneal.sha256": tensors_digest(arrays)}  # fmt: skip
        safe_save(state, self.path / CHECKPOINT, metadata=info)

    def write_losses(self) -> None:
        atomic_write(self.path / LOSSES, csv_text(self.rows).encode())

    # ---- observer ----
    def after_step(self, done: int, loss: float) -> None:
        ranks, comm = self.ranks() if self.ranks is not None else (None, None)
        self.rows.append(Row(done, loss, ranks=ranks, comm_ms=comm))

    def after_eval(self, done: int, val: float) -> None:
        if self.rows and self.rows[-1].step == done:
            self.rows[-1].val = val

    def logged(self, record: Any) -> None:
        self.write_losses()

    def discard(self) -> None:
        """Remove the folder if this run made it and never finished setting it up."""
        if self.created and not self.ready:
            shutil.rmtree(self.path, ignore_errors=True)


@contextlib.contextmanager
def setting_up(folder: RunFolder | None) -> Iterator[None]:
    """Remove a newly made run folder when anything in the block fails (or is interrupted)."""
    try:
        yield
    except BaseException:
        if folder is not None:
            folder.discard()
        raise

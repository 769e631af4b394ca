"""Training runs started from the studio: `anneal train` itself, as a child process writing a run folder,
so a run started here is the same as one started in a terminal (and survives nothing the CLI's would not)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class TrainingJob:
    id: str
    model: str
    folder: Path
    argv: list[str]
    records: list[dict[str, Any]] = field(default_factory=list)  # one per logged step, as `--json` prints
    lines: list[str] = field(default_factory=list)  # everything else it printed (errors included)
    returncode: int | None = None
    started: float = field(default_factory=time.time)
    _proc: subprocess.Popen[str] | None = None
    _changed: threading.Condition = field(default_factory=threading.Condition)

    def start(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "anneal_cli.main", *self.argv],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
        )  # fmt: skip
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            record = _record(line)
            with self._changed:
                (self.records.append(record) if record is not None else self.lines.append(line.rstrip()))
                self._changed.notify_all()
        code = self._proc.wait()
        with self._changed:
            self.returncode = code
            self._changed.notify_all()

    def stop(self) -> None:
        """As Ctrl-C in a terminal: the run stops at a step boundary."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGINT)

    def wait_for_change(self, seen: int, timeout: float) -> None:
        with self._changed:
            self._changed.wait_for(lambda: len(self.records) + len(self.lines) != seen or self.returncode is not None,
                                   timeout)  # fmt: skip

    def status(self) -> dict[str, Any]:
        state = "running" if self.returncode is None else ("finished" if self.returncode == 0 else "stopped")
        return {"id": self.id, "model": self.model, "folder": self.folder.name, "state": state,
                "returncode": self.returncode, "records": len(self.records), "output": self.lines[-20:]}  # fmt: skip


def _record(line: str) -> dict[str, Any] | None:
    text = line.strip()
    if not text.startswith("{"):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) and "step" in value and "loss" in value else None


@dataclass
class Jobs:
    runs_root: Path
    jobs: dict[str, TrainingJob] = field(default_factory=dict)

    def start(self, model: str, flags: list[str]) -> TrainingJob:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        name = f"{model}-{stamp}-{len(self.jobs)}"
        folder = self.runs_root / name
        self.runs_root.mkdir(parents=True, exist_ok=True)
        job = TrainingJob(name, model, folder, ["train", model, *flags, "--json", "--out", str(folder)])
        job.start()
        self.jobs[name] = job
        return job

    def stop_all(self) -> None:
        for job in self.jobs.values():
            job.stop()

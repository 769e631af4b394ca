"""A page in the tests' headless Chromium (Debian's, driven by Playwright) that records console errors and
every request it makes; the `browser` fixture (conftest.py) launches the browser."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from typing import Any

import pytest

READY = "body[data-ready='1']"  # the viz page sets it once its first layout is drawn


def chromium_path() -> str:
    found = os.environ.get("ANNEAL_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.fail("no Chromium: install Debian's (apt-get install chromium) or set ANNEAL_CHROMIUM")
    return found


class Page:
    def __init__(self, browser: Any, url: str, offline: bool = False, ready: str = READY) -> None:
        self.context = browser.new_context(viewport={"width": 1300, "height": 850})
        self.errors: list[str] = []
        self.requests: list[str] = []
        if offline:  # nothing but the file itself may load
            self.context.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:")
                               else route.abort())  # fmt: skip
        self.page = self.context.new_page()
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.goto(url)
        self.page.wait_for_selector(ready, timeout=60_000)

    def boxes(self) -> int:
        return int(self.page.locator("#viewport g.unit").count())

    def close(self) -> None:
        assert self.errors == [], self.errors
        self.context.close()


def start_server(argv: list[str], address: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], str]:
    """`anneal ARGV` as a user runs it; returns the process and the address its first line names (the regex
    `address` with one group)."""
    proc = subprocess.Popen([sys.executable, "-m", "anneal_cli.main", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    found = re.search(address, line)
    if not found:
        proc.kill()
        pytest.fail(f"anneal {argv[0]} printed no address: {line!r} {proc.stderr.read() if proc.stderr else ''}")
    return proc, found.group(1)


def stop_server(proc: subprocess.Popen[str]) -> None:
    """Ctrl-C, as a user stops it: it exits quietly (status 0)."""
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=20) == 0

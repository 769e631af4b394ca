"""Test helpers: a loopback HTTP server with Range support, and the shared data folder.

The machines that build and test anneal reach no web host, so tests run the real download
code against `LoopbackServer` (127.0.0.1 only) serving `../shared/data/` (byte-identical
copies of the pinned tinyshakespeare and GPT-2 vocab/merges) and generated files::

    from anneal.data import fetch
    from anneal.data.testing import LoopbackServer, shared_data_dir
    from anneal_ir.settings import Settings

    with LoopbackServer(shared_data_dir(__file__)) as server:
        path = fetch("tinyshakespeare", settings=Settings(cache_dir=str(tmp_path), mirror=server.url))
"""

from __future__ import annotations

import re
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

SEND_CHUNK = 1 << 16


def allow_loopback_only(monkeypatch: Any) -> None:
    """Make any connection to a host other than 127.0.0.1/::1 fail the test, and drop proxies.

    ``monkeypatch`` is pytest's fixture (anything with ``setattr`` and ``delenv``)."""
    for var in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    real_connect = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> None:
        host = address[0] if isinstance(address, tuple) else address
        if host not in ("127.0.0.1", "::1"):
            raise AssertionError(f"a test tried to reach {address!r}: only loopback traffic is allowed")
        real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)


def shared_data_dir(start: str | Path) -> Path:
    """`<repo root>/../shared/data`, the repo root being the first folder above `start` with a noxfile.py.

    Raises FileNotFoundError with the paths tried: tests that need it fail, never skip.
    """
    here = Path(start).resolve()
    for folder in [here, *here.parents]:
        if (folder / "noxfile.py").is_file() and (folder / "packages").is_dir():
            data = folder.parent / "shared" / "data"
            if not data.is_dir():
                raise FileNotFoundError(
                    f"the shared data folder {data} is missing: tests serve the pinned tinyshakespeare and GPT-2 "
                    f"vocab/merges from ../shared/data/ beside the repository ({folder})"
                )
            return data
    raise FileNotFoundError(f"no repository root (a folder with noxfile.py and packages/) above {here}")


@dataclass(frozen=True)
class Served:
    """One request the server answered."""

    path: str
    range: str | None  # the Range header, if any
    status: int
    sent: int  # body bytes it meant to send (fewer when it drops the connection on purpose)


class LoopbackServer:
    """An HTTP server on 127.0.0.1 in a thread: files from `root` and `files` (URL path -> bytes).

    Knobs, changeable between requests: `honour_range` (False: answer 200 with the whole
    file, as some servers do), `delay_s` (sleep per 64 KiB sent), `drop_after` / `drops`
    (the next `drops` responses close the connection after `drop_after` body bytes, with the
    full Content-Length announced), `status` (answer every request with this error code),
    `errors` (the next requests are answered with these codes, in order, then served normally).
    `requests` records every answer.
    """

    def __init__(self, root: Path | None = None, files: dict[str, bytes] | None = None) -> None:
        self.root = root.resolve() if root is not None else None
        self.files: dict[str, bytes] = dict(files or {})
        self.honour_range = True
        self.delay_s = 0.0
        self.drop_after = 0
        self.drops = 0
        self.status: int | None = None
        self.errors: list[int] = []
        self.requests: list[Served] = []
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._httpd is not None, "the server is not running"
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def gets(self, path: str) -> list[Served]:
        """The requests for one URL path (e.g. '/tinyshakespeare/input.txt')."""
        return [r for r in self.requests if r.path == path]

    def content(self, path: str) -> bytes | None:
        rel = path.lstrip("/")
        if rel in self.files:
            return self.files[rel]
        if self.root is None:
            return None
        target = (self.root / rel).resolve()
        if target.is_relative_to(self.root) and target.is_file():
            return target.read_bytes()
        return None

    def start(self) -> LoopbackServer:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.owner = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, name="loopback-http", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class _Handler(BaseHTTPRequestHandler):
    server_version = "anneal-loopback/1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        owner: LoopbackServer = self.server.owner  # type: ignore[attr-defined]
        path = self.path.split("?", 1)[0]
        wanted = self.headers.get("Range")

        def record(status: int, sent: int = 0) -> None:
            with owner._lock:
                owner.requests.append(Served(path, wanted, status, sent))

        with owner._lock:
            code = owner.errors.pop(0) if owner.errors else owner.status
        if code is not None:
            self.send_error(code)
            record(code)
            return
        body = owner.content(path)
        if body is None:
            self.send_error(404)
            record(404)
            return
        total = len(body)
        start, end, status = 0, total - 1, 200
        match = re.fullmatch(r"bytes=(\d+)-(\d*)", wanted or "")
        if owner.honour_range and match:
            start = int(match.group(1))
            end = min(int(match.group(2)), total - 1) if match.group(2) else total - 1
            if start >= total or start > end:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{total}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                record(416)
                return
            status = 206
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Accept-Ranges", "bytes" if owner.honour_range else "none")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{total}")
        self.end_headers()
        with owner._lock:
            cut = owner.drops > 0
            if cut:
                owner.drops -= 1
        limit = min(end + 1, start + owner.drop_after) if cut else end + 1
        record(status, limit - start)  # before the body: the client may be done before this thread
        pos = start
        try:
            while pos < limit:
                n = min(SEND_CHUNK, limit - pos)
                self.wfile.write(body[pos : pos + n])
                pos += n
                if owner.delay_s:
                    time.sleep(owner.delay_s)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        if cut:
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

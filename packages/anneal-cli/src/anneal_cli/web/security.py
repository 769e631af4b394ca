"""What the studio refuses: other addresses without a flag, requests without the token once one is set,
state-changing requests from another origin, and run paths outside the runs root."""

from __future__ import annotations

import ipaddress
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from starlette.requests import Request

TOKEN_COOKIE = "anneal_token"
TOKEN_HEADER = "x-anneal-token"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Refused(Exception):
    """A request the studio will not serve: (HTTP status, one line saying why)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


@dataclass
class Guard:
    runs_root: Path
    token: str | None = None  # set when serving beyond loopback: every request must carry it
    origins: set[str] = field(default_factory=set)  # the studio's own origins, filled in once it is bound

    @staticmethod
    def new_token() -> str:
        return secrets.token_urlsafe(24)

    def check(self, request: Request) -> None:
        if self.token is not None:
            given = (request.headers.get(TOKEN_HEADER) or request.cookies.get(TOKEN_COOKIE)
                     or request.query_params.get("token"))  # fmt: skip
            if not given or not secrets.compare_digest(given, self.token):
                raise Refused(403, "this studio needs its token: open the address `anneal web` printed")
        if request.method not in ("GET", "HEAD"):
            origin = request.headers.get("origin")
            if origin is None or origin not in self.origins:
                raise Refused(403, f"a state-changing request from origin {origin!r} is refused (not this studio)")

    def run_path(self, name: str) -> Path:
        """The run folder called name, which must lie inside the runs root."""
        root = self.runs_root.resolve()
        path = (root / name).resolve()
        if not name or not path.is_relative_to(root) or path == root:
            raise Refused(400, f"run {name!r} is outside the runs folder {root}")
        return path

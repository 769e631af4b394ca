"""Serving the viz page on the loopback interface (Starlette for the routes, uvicorn for HTTP)."""

from __future__ import annotations

import socket
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse
from starlette.routing import Route

from anneal_cli.viz.page import render_page

LOOPBACK = "127.0.0.1"


def viz_app(document: dict[str, Any]) -> Starlette:
    """`/`: the page; `/api/step.json`: the document it draws (for tools and tests)."""
    page = render_page(document)

    async def index(request: Request) -> HTMLResponse:
        return HTMLResponse(page, headers={"Cache-Control": "no-store"})

    async def step(request: Request) -> JSONResponse:
        return JSONResponse(document)

    return Starlette(routes=[Route("/", index), Route("/api/step.json", step)])


def bind(port: int, host: str = LOOPBACK) -> socket.socket:
    """A listening socket (port 0: any free one), so the address is known before serving starts."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port} ({exc.strerror}); pick another with --port") from None
    sock.listen(64)
    return sock


def serve(app: Starlette, sock: socket.socket) -> None:
    """Serve until interrupted (Ctrl-C)."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    server.run(sockets=[sock])

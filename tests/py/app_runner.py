"""How the test apps written on the Python SDK's `MCPServer` serve Streamable HTTP: under uvicorn,
on 127.0.0.1 at a port the OS picks (tests read it from /proc: no port race)."""

from __future__ import annotations

import asyncio
import socket

import uvicorn


def serve_on_a_free_port(server, wrap=None) -> None:
    """`wrap`, when given, wraps the ASGI app (a check the SDK does not make)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    app = server.streamable_http_app(host="127.0.0.1")
    if wrap is not None:
        app = wrap(app)
    config = uvicorn.Config(app, log_level="warning")
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))

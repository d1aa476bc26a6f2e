"""An MCP server over HTTPS, for the tests of `https://` apps (`test_mcp_tls.py`).

The official Python SDK's `MCPServer` (Streamable HTTP) served by uvicorn with TLS: a real server
that toolgate did not write, reached the way an internal MCP server behind a company's own
certificate authority is.

    python tls_upstream.py CERT KEY

Listens on 127.0.0.1 on a port the OS picks (the test reads it back from /proc). Tool `echo`
answers `tls: <message>`.
"""

from __future__ import annotations

import asyncio
import socket
import sys

import uvicorn
from mcp.server.mcpserver import MCPServer

server = MCPServer("tls-upstream")


@server.tool()
def echo(message: str) -> str:
    """Echoes the message back, prefixed with `tls: `."""
    return f"tls: {message}"


def main(cert: str, key: str) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    app = server.streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(app, ssl_certfile=cert, ssl_keyfile=key, log_level="warning")
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

"""An MCP app of the stateless revision (2026-07-28) for `test_mcp_stateless.py`: the official
Python SDK's `MCPServer` under uvicorn, on a port the OS picks. Its Streamable HTTP endpoint
answers `server/discover`, so toolgate speaks 2026-07-28 to it.

`ask_name` asks the client for its name the 2026-07-28 way: it returns an input-required result
with an elicitation and its own `requestState`, and completes when called again with the answer
and that state unchanged.

It speaks 2026-07-28 alone: the SDK serves both eras on one endpoint, so `initialize` is refused
here (HTTP 400, -32022), and a handshake-era client reaches it only through toolgate's
translation (`conformance_dual_app.py` is the app of both eras).
"""

from __future__ import annotations

import json
import os

from typing import Annotated

from pydantic import Field
from mcp.server.caching import CacheHint
from app_runner import serve_on_a_free_port
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ElicitRequest, ElicitRequestFormParams, InputRequiredResult

# Its tool list may be kept 7 s (or what STATELESS_APP_TTL_MS says): a gateway's list of it must
# not be kept longer.
TTL_MS = int(os.environ.get("STATELESS_APP_TTL_MS", "7000"))
server = MCPServer("stateless-app", cache_hints={"tools/list": CacheHint(ttl_ms=TTL_MS)})

STATE = "app-state:round-1"


@server.tool()
def greet(name: str) -> str:
    """Greets `name`."""
    return f"Hello, {name}! (from a 2026-07-28 app)"


@server.tool()
def ask_name(ctx: Context) -> str | InputRequiredResult:
    """Asks the client for a name, then greets it."""
    answer = (ctx.input_responses or {}).get("who")
    if answer is not None and ctx.request_state == STATE:
        content = answer.content if hasattr(answer, "content") else answer.get("content")
        return f"Hello, {(content or {}).get('name')}! (state {ctx.request_state})"
    ask = ElicitRequest(
        params=ElicitRequestFormParams(
            message="What is your name?",
            requested_schema={"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
        )
    )
    return InputRequiredResult(input_requests={"who": ask}, request_state=STATE)


@server.tool()
def regional(region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})]) -> str:
    """Declares `Mcp-Param-Region`: the SDK refuses a call whose header does not match."""
    return f"served in {region}"


@server.tool()
def envelope(ctx: Context) -> str:
    """The protocol version this call came with."""
    return json.dumps({"protocol_version": ctx.protocol_version})


def refusing_initialize(app):
    """ASGI wrapper: `initialize` gets the answer of a server of the stateless revision alone."""

    async def wrapped(scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST":
            return await app(scope, receive, send)
        body, more = b"", True
        while more:
            msg = await receive()
            body += msg.get("body", b"")
            more = msg.get("more_body", False)
        try:
            message = json.loads(body)
        except ValueError:
            message = None
        if isinstance(message, dict) and message.get("method") == "initialize":
            error = {"jsonrpc": "2.0", "id": message.get("id"), "error": {
                "code": -32022, "message": "this server speaks only 2026-07-28",
                "data": {"supported": ["2026-07-28"], "requested": (message.get("params") or {}).get("protocolVersion")}}}
            await send({"type": "http.response.start", "status": 400,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": json.dumps(error).encode()})
            return
        replayed = False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await app(scope, replay, send)

    return wrapped


if __name__ == "__main__":
    serve_on_a_free_port(server, wrap=refusing_initialize)

"""An MCP server over Streamable HTTP that reports the trace context it was called with
(`test_traces.py`): the official Python SDK's `MCPServer` under uvicorn, on a port the OS picks.

Tool `trace_context` answers, as JSON text, the `traceparent` and `tracestate` of the HTTP
request and of `params._meta`, and the request's `Authorization` header (`test_gateway_oauth.py`:
a client's token must not reach an app).
"""

from __future__ import annotations

import json

from app_runner import serve_on_a_free_port
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("trace-upstream")


@server.tool()
def trace_context(ctx: Context) -> str:
    """The trace context this call came with: HTTP headers and `params._meta`."""
    rc = ctx.request_context
    headers = rc.request.headers if rc.request is not None else {}
    meta = dict(rc.meta or {})
    return json.dumps({
        "header": headers.get("traceparent"),
        "header_state": headers.get("tracestate"),
        "meta": meta.get("traceparent"),
        "meta_state": meta.get("tracestate"),
        "authorization": headers.get("authorization"),
    })


if __name__ == "__main__":
    serve_on_a_free_port(server)

"""An app of both eras on one endpoint, for the conformance suite's `--requirements 2025-11-25` and
`--requirements 2026-07-28` runs (`test_mcp_dual_era.py`): the official Python SDK's `MCPServer`
answers `initialize` (a handshake-era session) and `server/discover` (2026-07-28, naming only that
version in `supportedVersions`, as the suite's own reference server does) at the same URL.

It is `conformance_2026_app.py`'s server (the tools, resources and prompts of the 2026-07-28
scenarios) with what the 2025-11-25 scenarios name besides: sampling, elicitation (with defaults,
with enums) and logging mid-call on the call's stream, resource subscriptions, the log level,
completion. A handshake-era client gets all of that only if it is spoken to in its own era.

One answer is framed by hand: a 2026-07-28 call of `test_streaming_elicitation` is answered as the
suite's reference server answers it, `application/json` streamed in chunks, one JSON-RPC message per
line (a progress notification, then the result), a framing the SDK does not produce.

Run under uvicorn on a port the OS picks (tests read it from /proc).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import mcp_types as types
from app_runner import serve_on_a_free_port
from conformance_2026_app import server
from mcp.server.mcpserver import Context
from mcp_types import SamplingMessage, TextContent

ELICIT_DEFAULTS = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "User name", "default": "John Doe"},
        "age": {"type": "integer", "description": "User age", "default": 30},
        "score": {"type": "number", "description": "User score", "default": 95.5},
        "status": {"type": "string", "description": "User status", "enum": ["active", "inactive", "pending"],
                   "default": "active"},
        "verified": {"type": "boolean", "description": "Verification status", "default": True},
    },
    "required": [],
}

ELICIT_ENUMS = {
    "type": "object",
    "properties": {
        "untitledSingle": {"type": "string", "description": "Select one option", "enum": ["option1", "option2", "option3"]},
        "titledSingle": {
            "type": "string",
            "description": "Select one option with titles",
            "oneOf": [
                {"const": "value1", "title": "First Option"},
                {"const": "value2", "title": "Second Option"},
                {"const": "value3", "title": "Third Option"},
            ],
        },
        "legacyEnum": {
            "type": "string",
            "description": "Select one option (legacy)",
            "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"],
        },
        "untitledMulti": {
            "type": "array",
            "description": "Select multiple options",
            "minItems": 1,
            "maxItems": 3,
            "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
        },
        "titledMulti": {
            "type": "array",
            "description": "Select multiple options with titles",
            "minItems": 1,
            "maxItems": 3,
            "items": {
                "anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                    {"const": "value3", "title": "Third Choice"},
                ]
            },
        },
    },
    "required": [],
}


@server.tool()
async def test_tool_with_logging(ctx: Context) -> str:
    """Emits log messages while running"""
    for data in ("Tool execution started", "Tool processing data", "Tool execution completed"):
        await ctx.info(data)
        await asyncio.sleep(0.05)
    return "Tool with logging executed successfully"


@server.tool()
async def test_sampling(prompt: str, ctx: Context) -> str:
    """Asks the client for an LLM completion (a server->client request on the call's stream)"""
    try:
        r = await ctx.session.create_message(
            [SamplingMessage(role="user", content=TextContent(type="text", text=prompt))],
            max_tokens=100,
            related_request_id=ctx.request_id,
        )
    except Exception as e:  # noqa: BLE001 (the scenario reads the reason from the result)
        return f"Sampling not supported or error: {e}"
    return f"LLM response: {getattr(r.content, 'text', 'No response')}"


async def _elicit(ctx: Context, message: str, schema: dict[str, Any]) -> str:
    try:
        r = await ctx.session.elicit_form(message, schema, related_request_id=ctx.request_id)
    except Exception as e:  # noqa: BLE001
        return f"Elicitation not supported or error: {e}"
    return f"Elicitation completed: action={r.action}, content={r.content or {}}"


@server.tool()
async def test_elicitation(message: str, ctx: Context) -> str:
    """Asks the user for input"""
    schema = {"type": "object", "properties": {"response": {"type": "string", "description": "User's response"}},
              "required": ["response"]}
    return await _elicit(ctx, message, schema)


@server.tool()
async def test_elicitation_sep1034_defaults(ctx: Context) -> str:
    """Elicitation with defaults"""
    return await _elicit(ctx, "Please review and update the form fields with defaults", ELICIT_DEFAULTS)


@server.tool()
async def test_elicitation_sep1330_enums(ctx: Context) -> str:
    """Elicitation with enum schemas"""
    return await _elicit(ctx, "Please select options from the enum fields", ELICIT_ENUMS)


async def _empty(ctx: Any, params: Any) -> types.EmptyResult:
    return types.EmptyResult()


async def _complete(ctx: Any, params: Any) -> types.CompleteResult:
    return types.CompleteResult(completion=types.Completion(values=[], total=0, has_more=False))


low = server._lowlevel_server
low.add_request_handler("resources/subscribe", types.SubscribeRequestParams, _empty)
low.add_request_handler("resources/unsubscribe", types.UnsubscribeRequestParams, _empty)
low.add_request_handler("logging/setLevel", types.SetLevelRequestParams, _empty)
low.add_request_handler("completion/complete", types.CompleteRequestParams, _complete)


def streamed_as_json_lines(app):
    """ASGI wrapper: the reference server's framing of `test_streaming_elicitation` (2026-07-28)."""

    async def wrapped(scope, receive, send):
        headers = dict(scope.get("headers") or []) if scope["type"] == "http" else {}
        if (scope["type"] == "http" and scope["method"] == "POST"
                and headers.get(b"mcp-protocol-version") == b"2026-07-28"
                and headers.get(b"mcp-name") == b"test_streaming_elicitation"):
            body, more = b"", True
            while more:
                msg = await receive()
                body += msg.get("body", b"")
                more = msg.get("more_body", False)
            rid = json.loads(body).get("id")
            progress = {"jsonrpc": "2.0", "method": "notifications/progress",
                        "params": {"progressToken": "token-abc", "total": 100, "progress": 50}}
            result = {"jsonrpc": "2.0", "id": rid,
                      "result": {"content": [{"type": "text", "text": "Streaming complete"}], "resultType": "complete"}}
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": (json.dumps(progress) + "\n").encode(), "more_body": True})
            await asyncio.sleep(0.05)
            await send({"type": "http.response.body", "body": json.dumps(result).encode()})
            return
        await app(scope, receive, send)

    return wrapped


if __name__ == "__main__":
    serve_on_a_free_port(server, wrap=streamed_as_json_lines)

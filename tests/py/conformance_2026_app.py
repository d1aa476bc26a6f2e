"""A 2026-07-28 app for the conformance suite's `--requirements 2026-07-28` run
(`test_mcp_stateless.py`): the tools, resources and prompts the suite's scenarios name, written
with the official Python SDK's `MCPServer`, which serves the stateless revision. The suite ships
no server; this one passes what the SDK lets it pass, and the test compares: every scenario it
passes directly must pass through toolgate too.

Run under uvicorn on a port the OS picks (tests read it from /proc).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from typing import Any

from app_runner import serve_on_a_free_port
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import (
    AudioContent,
    CallToolResult,
    CreateMessageRequest,
    CreateMessageRequestParams,
    ElicitRequest,
    ElicitRequestFormParams,
    EmbeddedResource,
    ImageContent,
    InputRequiredResult,
    ListRootsRequest,
    SamplingMessage,
    TextContent,
    TextResourceContents,
)

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
WAV = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="
SECRET = b"conformance-2026-app"

server = MCPServer("conformance-2026-app")


def sign(state: str) -> str:
    return state + "." + hmac.new(SECRET, state.encode(), hashlib.sha256).hexdigest()[:16]


def verified(signed: str | None) -> str | None:
    if not signed or "." not in signed:
        return None
    state, _ = signed.rsplit(".", 1)
    return state if hmac.compare_digest(sign(state), signed) else None


def elicit(message: str, prop: str, ty: str = "string") -> ElicitRequest:
    schema = {"type": "object", "properties": {prop: {"type": ty}}, "required": [prop]}
    return ElicitRequest(params=ElicitRequestFormParams(message=message, requested_schema=schema))


def sample(question: str) -> CreateMessageRequest:
    msg = SamplingMessage(role="user", content=TextContent(type="text", text=question))
    return CreateMessageRequest(params=CreateMessageRequestParams(messages=[msg], max_tokens=100))


def answers(ctx: Context) -> dict[str, Any]:
    out = {}
    for k, v in (ctx.input_responses or {}).items():
        out[k] = v.model_dump(mode="json", by_alias=True) if hasattr(v, "model_dump") else v
    return out


def valid_elicit(v: Any) -> bool:
    return isinstance(v, dict) and isinstance(v.get("action"), str)


@server.tool()
def test_simple_text() -> str:
    """Tests simple text content response"""
    return "This is a simple text response for testing."


@server.tool()
def test_image_content() -> CallToolResult:
    """Tests image content response"""
    return CallToolResult(content=[ImageContent(type="image", data=PNG, mime_type="image/png")])


@server.tool()
def test_audio_content() -> CallToolResult:
    """Tests audio content response"""
    return CallToolResult(content=[AudioContent(type="audio", data=WAV, mime_type="audio/wav")])


@server.tool()
def test_embedded_resource() -> CallToolResult:
    """Tests embedded resource content response"""
    res = TextResourceContents(uri="test://embedded-resource", mime_type="text/plain", text="This is an embedded resource content.")
    return CallToolResult(content=[EmbeddedResource(type="resource", resource=res)])


@server.tool()
def test_multiple_content_types() -> CallToolResult:
    """Tests text, image and resource content"""
    res = TextResourceContents(uri="test://mixed-content-resource", mime_type="application/json",
                               text=json.dumps({"test": "data", "value": 123}))
    return CallToolResult(content=[
        TextContent(type="text", text="Multiple content types test:"),
        ImageContent(type="image", data=PNG, mime_type="image/png"),
        EmbeddedResource(type="resource", resource=res),
    ])


@server.tool()
def test_error_handling() -> CallToolResult:
    """Always fails"""
    return CallToolResult(is_error=True, content=[TextContent(type="text", text="This tool intentionally returns an error for testing")])


@server.tool()
async def test_tool_with_progress(ctx: Context) -> str:
    """Reports progress notifications"""
    for p in (0, 50, 100):
        await ctx.report_progress(p, 100, f"Completed step {p} of 100")
        await asyncio.sleep(0.05)
    return "progress done"


@server.tool()
async def test_logging_tool(ctx: Context) -> str:
    """Emits log messages (sent only when the request asked for a log level)"""
    for data in ("started", "working", "done"):
        await ctx.info(data)
    return "logged three messages"


@server.tool()
def test_missing_capability(ctx: Context) -> str | InputRequiredResult:
    """Needs the client's sampling capability"""
    caps = ctx.client_capabilities
    if caps is None or caps.sampling is None:
        raise MCPError(-32021, "this tool needs the sampling capability", {"requiredCapabilities": {"sampling": {}}})
    return InputRequiredResult(input_requests={"q": sample("hi")}, request_state=sign("missing"))


@server.tool()
def test_streaming_elicitation(ctx: Context) -> str | InputRequiredResult:
    """Asks the user mid-call"""
    return test_input_required_result_elicitation(ctx)


@server.tool()
def test_input_required_result_elicitation(ctx: Context) -> str | InputRequiredResult:
    """Input-required flow: elicitation"""
    a = answers(ctx)
    if "user_name" in a:
        if not valid_elicit(a["user_name"]):
            raise MCPError(-32602, "inputResponses.user_name is not an elicitation result")
        return f"Hello, {a['user_name'].get('content', {}).get('name')}!"
    return InputRequiredResult(input_requests={"user_name": elicit("What is your name?", "name")})


@server.tool()
def test_input_required_result_sampling(ctx: Context) -> str | InputRequiredResult:
    """Input-required flow: sampling"""
    a = answers(ctx)
    if "capital_question" in a:
        return f"LLM said: {a['capital_question'].get('content', {}).get('text')}"
    return InputRequiredResult(input_requests={"capital_question": sample("What is the capital of France?")})


@server.tool()
def test_input_required_result_list_roots(ctx: Context) -> str | InputRequiredResult:
    """Input-required flow: roots"""
    a = answers(ctx)
    if "client_roots" in a:
        return "Roots: " + ", ".join(r.get("uri", "") for r in a["client_roots"].get("roots", []))
    return InputRequiredResult(input_requests={"client_roots": ListRootsRequest()})


@server.tool()
def test_input_required_result_request_state(ctx: Context) -> str | InputRequiredResult:
    """Input-required flow: requestState"""
    if "confirm" in answers(ctx) and verified(ctx.request_state) == "confirm":
        return "state-ok"
    return InputRequiredResult(input_requests={"confirm": elicit("Please confirm", "ok", "boolean")}, request_state=sign("confirm"))


@server.tool()
def test_input_required_result_tampered_state(ctx: Context) -> str | InputRequiredResult:
    """Input-required flow: a tampered requestState is refused"""
    if ctx.request_state is not None:
        if verified(ctx.request_state) != "tamper":
            raise MCPError(-32602, "requestState failed its integrity check")
        return "state verified"
    return InputRequiredResult(input_requests={"user_name": elicit("What is your name?", "name")}, request_state=sign("tamper"))


@server.tool()
def test_input_required_result_multiple_inputs(ctx: Context) -> str | InputRequiredResult:
    """Input-required flow: several questions at once"""
    a = answers(ctx)
    if {"user_name", "capital_question", "client_roots"} <= set(a) and verified(ctx.request_state) == "multi":
        return "all three answered"
    return InputRequiredResult(
        input_requests={
            "user_name": elicit("What is your name?", "name"),
            "capital_question": sample("What is the capital of France?"),
            "client_roots": ListRootsRequest(),
        },
        request_state=sign("multi"),
    )


@server.tool()
def test_input_required_result_multi_round(ctx: Context) -> str | InputRequiredResult:
    """Input-required flow: two rounds"""
    a = answers(ctx)
    state = verified(ctx.request_state)
    if state == "round-2" and "step2" in a:
        return "two rounds done"
    if state == "round-1" and "step1" in a:
        return InputRequiredResult(input_requests={"step2": elicit("Favourite colour?", "color")}, request_state=sign("round-2"))
    return InputRequiredResult(input_requests={"step1": elicit("What is your name?", "name")}, request_state=sign("round-1"))


@server.tool()
def test_input_required_result_capabilities(ctx: Context) -> str | InputRequiredResult:
    """Input-required flow: asks only what the client can answer"""
    caps = ctx.client_capabilities
    if answers(ctx):
        return "answered"
    if caps is not None and caps.elicitation is not None:
        return InputRequiredResult(input_requests={"user_name": elicit("What is your name?", "name")})
    if caps is not None and caps.sampling is not None:
        return InputRequiredResult(input_requests={"capital_question": sample("What is the capital of France?")})
    return "no capability to ask with"


@server.resource("test://static-text", name="static-text", title="Static Text Resource", mime_type="text/plain")
def static_text() -> str:
    return "This is the content of the static text resource."


@server.resource("test://static-binary", name="static-binary", title="Static Binary Resource", mime_type="image/png")
def static_binary() -> bytes:
    import base64

    return base64.b64decode(PNG)


@server.resource("test://template/{id}/data", name="template", title="Resource Template", mime_type="application/json")
def template(id: str) -> str:
    return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"})


@server.prompt(title="Simple Test Prompt", description="A simple prompt without arguments")
def test_simple_prompt() -> str:
    return "This is a simple prompt for testing."


@server.prompt(title="Prompt With Arguments", description="A prompt with required arguments")
def test_prompt_with_arguments(arg1: str, arg2: str) -> str:
    return f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"


@server.prompt(title="Prompt With Image", description="A prompt that includes image content")
def test_prompt_with_image() -> list[Any]:
    from mcp.server.mcpserver.prompts.base import UserMessage

    return [UserMessage(content=ImageContent(type="image", data=PNG, mime_type="image/png")),
            UserMessage(content="Please analyze the image above.")]


@server.prompt(title="Prompt With Embedded Resource", description="A prompt that includes an embedded resource")
def test_prompt_with_embedded_resource(resourceUri: str) -> list[Any]:  # noqa: N803 (the suite's argument name)
    from mcp.server.mcpserver.prompts.base import UserMessage

    res = TextResourceContents(uri=resourceUri, mime_type="text/plain", text="Embedded resource content for testing.")
    return [UserMessage(content=EmbeddedResource(type="resource", resource=res)),
            UserMessage(content="Please process the embedded resource above.")]


if __name__ == "__main__":
    serve_on_a_free_port(server)

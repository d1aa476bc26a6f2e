"""An app on the official Python SDK's low-level `Server` that runs what it received and says so
(`test_mcp_differential.py`).

Its tools `echo` and `slow` answer with the name and the arguments the SDK read from the request
(Python's `json`: a member written twice keeps its last value); its prompts `greeting` and
`secret` and its resources `echo://public` and `echo://secret` answer with their own name. Every
call is also appended, as one JSON line, to the file named by its first argument, so a test sees
what ran even when the answer did not reach the client. Served over Streamable HTTP on a port the
OS picks.
"""

from __future__ import annotations

import json
import sys

import mcp_types as types
from mcp.server.lowlevel import Server

from app_runner import serve_on_a_free_port

RAN = sys.argv[1]
OBJECT = {"type": "object", "properties": {"repo": {"type": "string"}}}


def ran(kind: str, name: str, arguments) -> str:
    line = json.dumps({"kind": kind, "name": name, "arguments": arguments})
    with open(RAN, "a", encoding="utf-8") as f:
        f.write(line + "\n")
    return line


async def list_tools(ctx, params) -> types.ListToolsResult:
    return types.ListToolsResult(
        tools=[types.Tool(name=n, description=f"Says what it ran ({n}).", input_schema=OBJECT) for n in ("echo", "slow")]
    )


async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    text = ran("tool", params.name, params.arguments)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


async def list_prompts(ctx, params) -> types.ListPromptsResult:
    return types.ListPromptsResult(prompts=[types.Prompt(name=n, description=n) for n in ("greeting", "secret")])


async def get_prompt(ctx, params: types.GetPromptRequestParams) -> types.GetPromptResult:
    text = ran("prompt", params.name, params.arguments)
    message = types.PromptMessage(role="user", content=types.TextContent(type="text", text=text))
    return types.GetPromptResult(messages=[message])


async def list_resources(ctx, params) -> types.ListResourcesResult:
    return types.ListResourcesResult(
        resources=[types.Resource(name=u.split("//")[1], uri=u) for u in ("echo://public", "echo://secret")]
    )


async def read_resource(ctx, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
    text = ran("resource", str(params.uri), None)
    return types.ReadResourceResult(contents=[types.TextResourceContents(uri=str(params.uri), text=text)])


server = Server(
    "echo-python",
    on_list_tools=list_tools,
    on_call_tool=call_tool,
    on_list_prompts=list_prompts,
    on_get_prompt=get_prompt,
    on_list_resources=list_resources,
    on_read_resource=read_resource,
)

if __name__ == "__main__":
    serve_on_a_free_port(server)

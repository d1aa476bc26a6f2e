"""A stdio MCP server whose tool list changes while it runs (`test_mcp_list_changed.py`).

Built on the official Python SDK's `MCPServer`, as any Python MCP server is. Tool `add_tool`
registers a new tool named by its argument and announces it with
`notifications/tools/list_changed`, as the MCP specification asks of a server whose tools change.
"""

from __future__ import annotations

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("dynamic-tools")


@server.tool()
async def add_tool(name: str, ctx: Context) -> str:
    """Adds a tool `name` that answers `<name>: <text>`, and announces the change."""

    def added(text: str = "") -> str:
        return f"{name}: {text}"

    server.add_tool(added, name=name, description=f"added at run time as {name}")
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


if __name__ == "__main__":
    server.run("stdio")

"""A stdio MCP server that serves resources it does not list (`test_mcp_resource_routing.py`).

Built on the official Python SDK's `MCPServer`. It lists one resource, `memo://KIND/listed`, and
one template, `notes://{owner}/KIND/{id}` (KIND is the first argument, so two copies can hold
templates with the same literal prefix), and also answers a read of any `memo://` URI, listed
or not, as the MCP specification allows ("servers may serve URIs they do not list").
"""

from __future__ import annotations

import sys

from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.mcpserver import MCPServer

KIND = sys.argv[1] if len(sys.argv) > 1 else "note"


class UnlistedResources(MCPServer):
    async def read_resource(self, uri, context=None):
        if str(uri).startswith("memo://") and str(uri) != f"memo://{KIND}/listed":
            return [ReadResourceContents(content=f"{KIND} served unlisted {uri}", mime_type="text/plain")]
        return await super().read_resource(uri, context)


server = UnlistedResources(f"unlisted-{KIND}")


@server.resource(f"memo://{KIND}/listed")
def listed() -> str:
    return f"{KIND} listed"


@server.resource(f"notes://{{owner}}/{KIND}/{{id}}")
def note(owner: str, id: str) -> str:
    return f"{KIND} of {owner} #{id}"


if __name__ == "__main__":
    server.run("stdio")

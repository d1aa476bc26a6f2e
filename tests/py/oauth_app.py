"""An MCP server that requires OAuth bearer tokens (`test_app_oauth.py`), built on the official
Python SDK's resource-server support: every request's token is checked at the provider given as
the first argument (its userinfo endpoint, `/me`, answers 200 for a live token only), so a
revoked or expired token is refused with 401. Tool `whoami` answers the token's subject;
`refuse_this_token` makes this server refuse (401) the token it was called with from now on,
though the provider still knows it; `forget_my_token` revokes at the provider the token it was
called with, and so its whole grant, refresh token included (client secret from
CLIENT_SECRET). Serves
Streamable HTTP on 127.0.0.1 at a port the OS picks (tests read it from /proc)."""

from __future__ import annotations

import asyncio
import os
import socket
import sys

import httpx2
import uvicorn
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer

ISSUER = sys.argv[1]
REFUSED: set[str] = set()


class UserinfoVerifier:
    async def verify_token(self, token: str) -> AccessToken | None:
        if token in REFUSED:
            return None
        async with httpx2.AsyncClient(timeout=10) as client:
            r = await client.get(f"{ISSUER}/me", headers={"Authorization": f"Bearer {token}"})
        if r.status_code != 200:
            return None
        return AccessToken(token=token, client_id="toolgate-app", scopes=[], subject=r.json().get("sub"))


def main() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = MCPServer(
        "oauth-app",
        token_verifier=UserinfoVerifier(),
        auth=AuthSettings(issuer_url=ISSUER, resource_server_url=f"http://127.0.0.1:{port}/mcp",
                          validate_token_resource=False),
    )

    @server.tool()
    async def whoami(ctx: Context) -> str:
        """The subject of the bearer token this call carried."""
        from mcp.server.auth.middleware.auth_context import get_access_token

        token = get_access_token()
        return f"subject: {token.subject if token else None}"

    @server.tool()
    async def refuse_this_token(ctx: Context) -> str:
        """Refuses from now on the bearer token this call carried."""
        from mcp.server.auth.middleware.auth_context import get_access_token

        REFUSED.add(get_access_token().token)
        return "refused from now on"

    @server.tool()
    async def forget_my_token(ctx: Context) -> str:
        """Revokes the bearer token this call carried."""
        from mcp.server.auth.middleware.auth_context import get_access_token

        token = get_access_token()
        async with httpx2.AsyncClient(timeout=10) as client:
            r = await client.post(f"{ISSUER}/token/revocation", data={
                "token": token.token, "client_id": "toolgate-app", "client_secret": os.environ["CLIENT_SECRET"]})
        return f"revoked: HTTP {r.status_code}"

    app = server.streamable_http_app(host="127.0.0.1")
    asyncio.run(uvicorn.Server(uvicorn.Config(app, log_level="warning")).serve(sockets=[sock]))


if __name__ == "__main__":
    main()

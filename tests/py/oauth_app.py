"""An MCP server that requires OAuth bearer tokens (`test_app_oauth.py`), built on the official
Python SDK's resource-server support (it serves the protected-resource metadata, RFC 9728, and
answers 401 with a `resource_metadata` challenge): every request's token is introspected at the
provider given as the first argument, so a revoked or expired token, or one minted for another
resource, is refused with 401. Tool `token_audience` answers the token's audience. Tool `whoami` answers the token's subject;
`refuse_this_token` makes this server refuse (401) the token it was called with from now on,
though the provider still knows it; `forget_my_token` revokes at the provider the token it was
called with, and so its whole grant, refresh token included (client secret from
CLIENT_SECRET). Tool `record` writes down, as a JSON line in the file CALL_LOG names, the
`caller` and `tag` its arguments say and the subject of the token the call carried (the test of
per-user connections compares them). GET /test/tokens answers the tokens it accepted, by
subject (for a test to ask the provider about them later). Serves Streamable HTTP on 127.0.0.1
at a port the OS picks (tests read it from /proc)."""

from __future__ import annotations

import asyncio
import json
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
SEEN: dict[str, set[str]] = {}
AUDIENCES: dict[str, object] = {}


class IntrospectionVerifier:
    """Asks the provider about every token (RFC 7662): live, and, when it names an audience
    (RFC 8707), minted for this server."""

    def __init__(self, resource: str):
        self.resource = resource

    async def verify_token(self, token: str) -> AccessToken | None:
        if token in REFUSED:
            return None
        async with httpx2.AsyncClient(timeout=10) as client:
            r = await client.post(f"{ISSUER}/token/introspection", data={
                "token": token, "client_id": "toolgate-app", "client_secret": os.environ["CLIENT_SECRET"]})
        info = r.json() if r.status_code == 200 else {}
        if not info.get("active"):
            return None
        audience = info.get("aud")
        if audience is not None and self.resource not in ([audience] if isinstance(audience, str) else audience):
            return None
        AUDIENCES[token] = audience
        SEEN.setdefault(str(info.get("sub")), set()).add(token)
        return AccessToken(token=token, client_id="toolgate-app", scopes=[], subject=info.get("sub"))


def main() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = MCPServer(
        "oauth-app",
        token_verifier=IntrospectionVerifier(f"http://127.0.0.1:{port}/mcp"),
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
    async def token_audience(ctx: Context) -> str:
        """The audience (RFC 8707 resource) of the bearer token this call carried."""
        from mcp.server.auth.middleware.auth_context import get_access_token

        return f"audience: {AUDIENCES.get(get_access_token().token)}"

    @server.tool()
    async def refuse_this_token(ctx: Context) -> str:
        """Refuses from now on the bearer token this call carried."""
        from mcp.server.auth.middleware.auth_context import get_access_token

        REFUSED.add(get_access_token().token)
        return "refused from now on"

    @server.tool()
    async def record(caller: str, tag: str, ctx: Context) -> str:
        """Writes down who the arguments say called and whose token the call carried."""
        from mcp.server.auth.middleware.auth_context import get_access_token

        token = get_access_token()
        subject = token.subject if token else None
        with open(os.environ["CALL_LOG"], "a") as log:
            log.write(json.dumps({"caller": caller, "tag": tag, "subject": subject}) + "\n")
        return f"{tag} as {subject}"

    @server.tool()
    async def forget_my_token(ctx: Context) -> str:
        """Revokes the bearer token this call carried."""
        from mcp.server.auth.middleware.auth_context import get_access_token

        token = get_access_token()
        async with httpx2.AsyncClient(timeout=10) as client:
            r = await client.post(f"{ISSUER}/token/revocation", data={
                "token": token.token, "client_id": "toolgate-app", "client_secret": os.environ["CLIENT_SECRET"]})
        return f"revoked: HTTP {r.status_code}"

    @server.custom_route("/test/tokens", methods=["GET"])
    async def tokens_seen(request):
        """The live tokens this server was called with, by subject: a test asks the provider
        about them after toolgate revoked them."""
        from starlette.responses import JSONResponse

        return JSONResponse({sub: sorted(tokens) for sub, tokens in SEEN.items()})

    app = server.streamable_http_app(host="127.0.0.1")
    asyncio.run(uvicorn.Server(uvicorn.Config(app, log_level="warning")).serve(sockets=[sock]))


if __name__ == "__main__":
    main()

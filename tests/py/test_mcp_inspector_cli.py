"""The MCP Inspector's CLI (`@modelcontextprotocol/inspector-cli`, pinned in tests/node), a
handshake-era client on the official TypeScript SDK, against a gateway: it lists the tools and
calls one, with the key in `X-API-Key`, the same on an endpoint that also serves the stateless
revision.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from mcp_helpers import NODE_DIR, node_bin


def inspector(url: str, key: str, *args: str) -> dict:
    cli = NODE_DIR / "node_modules" / "@modelcontextprotocol" / "inspector-cli" / "build" / "index.js"
    if not cli.exists():
        raise AssertionError(f"the Inspector CLI is missing at {cli}: run `npm ci` in {NODE_DIR}")
    p = subprocess.run(
        [str(node_bin()), str(cli), url, "--transport", "http", "--header", f"X-API-Key: {key}", *args],
        # The CLI finds its own package.json (for its client name) relative to the working directory.
        cwd=cli.parent, capture_output=True, text=True, timeout=60,
    )
    assert p.returncode == 0, f"inspector-cli {args} failed ({p.returncode}): {p.stdout[-1500:]} {p.stderr[-1500:]}"
    return json.loads(p.stdout)


@pytest.fixture(scope="module")
def gateway(time_gateway):
    """The endpoint URL and key of conftest's `time_gateway`."""
    _, url, key = time_gateway
    return url, key


def test_inspector_cli_lists_and_calls_tools(gateway):
    url, key = gateway
    tools = inspector(url, key, "--method", "tools/list")
    assert [t["name"] for t in tools["tools"]] == ["get_current_time"], tools
    r = inspector(url, key, "--method", "tools/call", "--tool-name", "get_current_time",
                  "--tool-arg", "format=YYYY", "timezone=UTC")
    assert r.get("isError") is not True and r["structuredContent"]["timezone"] == "UTC", r
    assert len(r["content"][0]["text"]) == 4, r


def test_inspector_cli_with_a_wrong_key_fails(gateway):
    url, _ = gateway
    cli = NODE_DIR / "node_modules" / "@modelcontextprotocol" / "inspector-cli" / "build" / "index.js"
    p = subprocess.run(
        [str(node_bin()), str(cli), url, "--transport", "http", "--header", "X-API-Key: ag_wrong", "--method", "tools/list"],
        cwd=cli.parent, capture_output=True, text=True, timeout=60,
    )
    assert p.returncode != 0 and "tools" not in p.stdout, f"{p.stdout[-500:]} {p.stderr[-500:]}"

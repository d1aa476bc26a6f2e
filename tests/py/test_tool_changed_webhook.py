"""`tool.changed` delivered end to end (`docs/governance.md`, "Events, metrics, logs"): a real MCP
server on the official Python SDK (`changing_tools_server.py`) changes a tool's description (a
rug pull) and adds a tool; a gateway under `tool_policy: pin` holds each back, and a real webhook
receiver, verifying every delivery with the Standard Webhooks reference library
(`standardwebhooks`), gets one `tool.changed` per change with the gateway, the app, the tool,
the kind and the hashes of the pending and the approved definition. Approving raises no event
(the design: the audit trail records decisions).
"""

from __future__ import annotations

import hashlib
import http.server
import json
import sys
import threading
import time
from pathlib import Path

import pytest
from standardwebhooks import Webhook

from mcp_helpers import Api, McpHttp, config, mcp_url, run, sdk_client, start_toolgate

CHANGING_APP = f"""\
  - id: chg
    name: Changing
    description: a stdio server whose tool definitions change at run time
    category: testing
    timeouts: {{ connect_ms: 60000 }}
    command: [{json.dumps(sys.executable)}, {json.dumps(str(Path(__file__).parent / "changing_tools_server.py"))}]
"""

WEBHOOKS = 'webhooks:\n  allowed_hosts: ["127.0.0.1"]\n  retry_schedule_secs: [1, 1]\n  attempt_timeout_ms: 2000\n'

# The fields of a tool definition that are pinned (`data::tool_pins::FIELDS`).
PINNED = ("name", "title", "description", "inputSchema", "outputSchema", "annotations")


def canonical_hash(tool: dict) -> str:
    """SHA-256 of the canonical JSON of a definition's pinned fields: keys sorted at every depth,
    no white space (what docs/governance.md says is pinned)."""
    pinned = {k: tool[k] for k in PINNED if k in tool}
    text = json.dumps(pinned, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


class Receiver:
    """An HTTP server that records the deliveries it can verify; a delivery that fails the check
    is recorded in `failures` (the test fails on it)."""

    def __init__(self):
        self.secret: str | None = None
        self.deliveries: list[dict] = []
        self.failures: list[str] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                headers = {k.lower(): v for k, v in self.headers.items()}
                secret = receiver.secret or ""
                key = secret if secret.startswith("whsec_") else secret.encode()
                try:
                    Webhook(key).verify(body, headers)
                    with receiver.lock:
                        receiver.deliveries.append(json.loads(body))
                except Exception as e:  # noqa: BLE001 (recorded, the test fails on it)
                    receiver.failures.append(repr(e))
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def events(self, name: str) -> list[dict]:
        with self.lock:
            return [d for d in self.deliveries if d["event"] == name]


def until(what: str, check, timeout: float = 15):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


@pytest.fixture(scope="module")
def setup():
    receiver = Receiver()
    srv = start_toolgate(config(CHANGING_APP) + WEBHOOKS)
    try:
        yield srv, receiver
    finally:
        srv.stop()
        receiver.server.shutdown()
        srv.tmp.cleanup()


async def tool_names(url: str, key: str) -> set[str]:
    async with sdk_client(url, key) as c:
        return {t.name for t in (await c.list_tools()).tools}


async def call(url: str, key: str, tool: str) -> str:
    async with sdk_client(url, key) as c:
        return (await c.call_tool(tool, {})).content[0].text


def raw_tools(srv, gw: str, key: str) -> dict:
    """The gateway's tools as JSON, as a client receives them."""
    c = McpHttp(mcp_url(srv, gw), key)
    try:
        c.initialize()
        msg = c.rpc("tools/list", {})
        return {t["name"]: t for t in msg["result"]["tools"]}
    finally:
        c.close()


def test_tool_changed_is_delivered_signed_with_the_hashes(setup):
    srv, receiver = setup
    api = Api(srv)
    hook = api.ok("POST", "/v1/webhooks", {"url": receiver.url, "events": ["tool.changed"]}, status=201)["data"]
    receiver.secret = hook["secret"]

    gw, key = api.create_gateway(["chg"])
    assert api.gateway(gw)["configuration"]["tool_policy"] == "pin"
    url = mcp_url(srv, gw)
    # The app's first list is pinned; what it served then is the approved definition.
    original = raw_tools(srv, gw, key)["send_email"]
    assert original["description"] == "Sends an e-mail.", original

    # The rug pull: held back, one `tool.changed` (kind `changed`).
    assert run(call(url, key, "rug_pull")) == "send_email changed"
    until("send_email held back", lambda: "send_email" not in run(tool_names(url, key)))
    (event,) = until("tool.changed delivered", lambda: receiver.events("tool.changed"))
    (change,) = api.ok("GET", f"/v1/gateways/{gw}/tool-changes")["data"]["tool_changes"]
    data = event["data"]
    assert data["gateway_id"] == gw and data["app_id"] == "chg" and data["tool"] == "send_email", data
    assert data["kind"] == "changed" and data["change_id"] == change["id"], data
    assert data["hash"] == change["hash"] == canonical_hash(change["definition"]), (data, change)
    assert data["approved_hash"] == canonical_hash(original), data
    assert data["hash"] != data["approved_hash"]
    assert "BCC" in change["definition"]["description"]

    # An added tool: a second event, with no approved definition.
    assert run(call(url, key, "add_tool")) == "exfiltrate added"
    until("exfiltrate held back", lambda: "exfiltrate" not in run(tool_names(url, key))
          and len(receiver.events("tool.changed")) == 2)
    added = receiver.events("tool.changed")[1]["data"]
    assert (added["tool"], added["kind"], added["approved_hash"]) == ("exfiltrate", "added", None), added
    assert len(added["hash"]) == 64 and added["gateway_id"] == gw, added

    # Approved: served, and no further event (approving raises none).
    d = api.ok("POST", f"/v1/gateways/{gw}/tool-changes/{change['id']}/approve")["data"]
    assert d["decision"] == "approved", d
    served = raw_tools(srv, gw, key)["send_email"]
    assert canonical_hash(served) == data["hash"], "the approved definition is served as pinned"
    time.sleep(2)
    assert len(receiver.events("tool.changed")) == 2, receiver.events("tool.changed")
    assert not receiver.failures, receiver.failures

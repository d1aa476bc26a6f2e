"""`tool.changed` delivered end to end (`docs/governance.md`, "Events, metrics, logs"): a real MCP
server on the official Python SDK (`changing_tools_server.py`) changes a tool's description (a
rug pull) and adds a tool; a gateway under `tool_policy: pin` holds each back, and a real webhook
receiver (`test_webhooks.Receiver`, verifying every delivery with the Standard Webhooks reference
library, `standardwebhooks`, and with docs/events.md's snippet) gets one `tool.changed` per
change with the gateway, the app, the tool, the kind and the hashes of the pending and the
approved definition. Approving raises no event (the design: the audit trail records decisions).
"""

from __future__ import annotations

import hashlib
import json
import time

import pytest

from mcp_helpers import Api, McpHttp, config, mcp_url, run, sdk_client, start_toolgate
from test_tool_pins import CHANGING_APP
from test_webhooks import WEBHOOKS, Receiver, wait_for

# The fields of a tool definition that are pinned (`data::tool_pins::FIELDS`).
PINNED = ("name", "title", "description", "inputSchema", "outputSchema", "annotations")


def canonical_hash(tool: dict) -> str:
    """SHA-256 of the canonical JSON of a definition's pinned fields: keys sorted at every depth,
    no white space (what docs/governance.md says is pinned)."""
    pinned = {k: tool[k] for k in PINNED if k in tool}
    text = json.dumps(pinned, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


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
    body = {"url": receiver.url("/hook"), "events": ["tool.changed"]}
    receiver.secrets["/hook"] = api.ok("POST", "/v1/webhooks", body, status=201)["data"]["secret"]

    def events() -> list[dict]:
        return [d["body"] for d in receiver.at("/hook") if d["body"]["event"] == "tool.changed"]

    gw, key = api.create_gateway(["chg"])
    assert api.gateway(gw)["configuration"]["tool_policy"] == "pin"
    url = mcp_url(srv, gw)
    # The app's first list is pinned; what it served then is the approved definition.
    original = raw_tools(srv, gw, key)["send_email"]
    assert original["description"] == "Sends an e-mail.", original

    # The rug pull: held back, one `tool.changed` (kind `changed`).
    assert run(call(url, key, "rug_pull")) == "send_email changed"
    wait_for(lambda: "send_email" not in run(tool_names(url, key)), 15)
    (event,) = wait_for(events, 15)
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
    wait_for(lambda: "exfiltrate" not in run(tool_names(url, key)) and len(events()) == 2, 15)
    added = events()[1]["data"]
    assert (added["tool"], added["kind"], added["approved_hash"]) == ("exfiltrate", "added", None), added
    assert len(added["hash"]) == 64 and added["gateway_id"] == gw, added

    # Approved: served, and no further event (approving raises none).
    d = api.ok("POST", f"/v1/gateways/{gw}/tool-changes/{change['id']}/approve")["data"]
    assert d["decision"] == "approved", d
    served = raw_tools(srv, gw, key)["send_email"]
    assert canonical_hash(served) == data["hash"], "the approved definition is served as pinned"
    time.sleep(2)
    assert len(events()) == 2, events()
    assert not receiver.failures, receiver.failures

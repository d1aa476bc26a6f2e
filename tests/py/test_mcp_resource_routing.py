"""Which app a resource URI goes to (issue 12, "transparency"): a URI that no listing shows is not
"not found" at the gateway. It goes to the only app of a single-app gateway, or to the app whose
resource template (RFC 6570) matches it, by shape rather than by literal prefix; only a URI that
several apps could serve and none claims is -32002. The app is `unlisted_resources_server.py`, a
Python SDK server that serves `memo://` URIs it does not list.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from mcp_helpers import STDIO_START, McpHttp, config, gateway_session

SERVER = Path(__file__).resolve().parent / "unlisted_resources_server.py"


def stdio_app(app_id: str, kind: str) -> str:
    argv = json.dumps([sys.executable, str(SERVER), kind])
    return f"""\
  - id: {app_id}
    name: Unlisted {kind}
    description: serves resources it does not list
    category: testing
    command: {argv}
{STDIO_START}"""


@pytest.fixture(scope="module")
def srv(module_toolgate_factory):
    """A toolgate with the two apps that serve resources they do not list."""
    return module_toolgate_factory(full_config=config(stdio_app("notes_a", "note") + stdio_app("notes_b", "todo")))


def session(srv, servers: list[str]) -> McpHttp:
    return gateway_session(srv, servers)[2]


def read(c: McpHttp, uri: str) -> dict:
    return c.rpc("resources/read", {"uri": uri})


def text_of(msg: dict) -> str:
    assert "result" in msg, msg
    return msg["result"]["contents"][0]["text"]


def test_a_single_app_gateway_reads_a_uri_no_listing_shows(srv):
    c = session(srv, ["notes_a"])
    listed = {r["uri"] for r in c.rpc("resources/list")["result"]["resources"]}
    assert listed == {"memo://note/listed"}, listed
    assert text_of(read(c, "memo://note/listed")) == "note listed"
    assert text_of(read(c, "memo://never/listed/42")) == "note served unlisted memo://never/listed/42"


def test_templates_route_by_shape_across_apps(srv):
    c = session(srv, ["notes_a", "notes_b"])
    templates = {t["uriTemplate"] for t in c.rpc("resources/templates/list")["result"]["resourceTemplates"]}
    assert templates == {"notes://{owner}/note/{id}", "notes://{owner}/todo/{id}"}, templates
    # Both templates start with `notes://`: the rest of their shape picks the app.
    assert text_of(read(c, "notes://alice/note/7")) == "note of alice #7"
    assert text_of(read(c, "notes://alice/todo/7")) == "todo of alice #7"
    assert text_of(read(c, "memo://todo/listed")) == "todo listed", "a listed resource goes to its app"


def test_a_uri_no_app_claims_on_a_several_app_gateway_is_not_found(srv):
    c = session(srv, ["notes_a", "notes_b"])
    msg = read(c, "memo://never/listed/42")
    assert msg.get("error", {}).get("code") == -32002, msg
    assert "memo://never/listed/42" in msg["error"]["message"], msg

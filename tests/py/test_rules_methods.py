"""A gateway's rules decide `prompts/get` and `resources/read` when they name them (issue 55, item 5).

A rule decides `tools/call` unless its `methods` names others, so a rule saved before rules could
name methods keeps its meaning: `deny when true` refuses calls and nothing else, and a rule on
`args.repo` does not start refusing every resource. A rule naming `resources/read` or
`prompts/get` decides them with the `method`, `prompt` and `uri` variables; its denial is a
JSON-RPC error naming the rule and what was asked, and an audit entry. Upstream:
`@modelcontextprotocol/server-everything` over Streamable HTTP.
"""

from __future__ import annotations

import time

import pytest

from mcp_helpers import Api, McpHttp, config, everything_server, http_app, list_all, mcp_url, start_toolgate

DENIED = -32012
TEXT = "demo://resource/dynamic/text/3"
BLOB = "demo://resource/dynamic/blob/2"
SIMPLE = "simple-prompt"


@pytest.fixture(scope="module")
def gateway():
    with everything_server() as ev:
        srv = start_toolgate(config(http_app("everything", ev.url)))
        try:
            api = Api(srv)
            gw_id, key = api.create_gateway(["everything"], {"everything": "*"})
            yield srv, api, gw_id, key
        finally:
            srv.stop()
            srv.tmp.cleanup()


def set_rules(api: Api, gw_id: str, rules: list[dict]) -> None:
    api.ok("PATCH", f"/v1/gateways/{gw_id}", {"rules": rules})


def session(srv, gw_id: str, key: str) -> McpHttp:
    c = McpHttp(mcp_url(srv, gw_id), key)
    c.initialize()
    return c


def served(msg: dict) -> dict:
    assert "error" not in msg, msg
    return msg["result"]


def denied(msg: dict, rule: str) -> dict:
    assert msg.get("error", {}).get("code") == DENIED, msg
    assert msg["error"]["data"]["rule"] == rule, msg
    return msg["error"]


def test_a_rule_without_methods_still_decides_only_tool_calls(gateway):
    srv, api, gw_id, key = gateway
    set_rules(
        api,
        gw_id,
        [
            {"name": "no-prod", "effect": "deny", "when": 'has(args.repo) && args.repo == "prod"'},
            {"name": "nothing", "effect": "deny", "when": "true"},
        ],
    )
    assert "methods" not in api.gateway(gw_id)["rules"][0], "a rule without methods is shown as saved"
    c = session(srv, gw_id, key)
    try:
        e = denied(c.rpc("tools/call", {"name": "echo", "arguments": {"message": "hi"}}), "nothing")
        assert e["message"] == "Tool call denied by rule `nothing`" and e["data"]["tool"] == "echo", e
        assert served(c.rpc("resources/read", {"uri": TEXT}))["contents"][0]["uri"] == TEXT
        assert served(c.rpc("prompts/get", {"name": SIMPLE}))["messages"], "the prompt is served"
    finally:
        c.close()


def test_rules_naming_methods_decide_prompts_and_resources_with_their_variables(gateway):
    srv, api, gw_id, key = gateway
    set_rules(
        api,
        gw_id,
        [
            {
                "name": "no-text-resources",
                "effect": "deny",
                "when": 'method == "resources/read" && uri.startsWith("demo://resource/dynamic/text/")',
                "methods": ["resources/read"],
            },
            {
                "name": "no-simple-prompt",
                "effect": "deny",
                "when": f'prompt == "{SIMPLE}" && app == "everything" && function == "simple-prompt"',
                "methods": ["prompts/get"],
            },
            {"name": "no-prod", "effect": "deny", "when": 'has(args.repo) && args.repo == "prod"'},
        ],
    )
    shown = api.gateway(gw_id)["rules"]
    assert shown[0]["methods"] == ["resources/read"] and shown[1]["methods"] == ["prompts/get"], shown
    c = session(srv, gw_id, key)
    try:
        e = denied(c.rpc("resources/read", {"uri": TEXT}), "no-text-resources")
        assert e["message"] == "Resource read denied by rule `no-text-resources`" and e["data"]["uri"] == TEXT, e
        assert served(c.rpc("resources/read", {"uri": BLOB}))["contents"][0]["uri"] == BLOB

        e = denied(c.rpc("prompts/get", {"name": SIMPLE}), "no-simple-prompt")
        assert e["message"] == "Prompt request denied by rule `no-simple-prompt`" and e["data"]["prompt"] == SIMPLE, e
        names = [p["name"] for p in list_all(c, "prompts/list", "prompts")]
        assert SIMPLE in names and "args-prompt" in names, "a denied prompt is still listed"
        served(c.rpc("prompts/get", {"name": "args-prompt", "arguments": {"city": "Paris"}}))

        # The tool calls are decided by the rule that names no method, as before.
        served(c.rpc("tools/call", {"name": "echo", "arguments": {"message": "hi"}}))
        denied(c.rpc("tools/call", {"name": "echo", "arguments": {"message": "hi", "repo": "prod"}}), "no-prod")
    finally:
        c.close()
    # The denials are in the audit trail, each with its method (appended in the background).
    wanted = {
        ("resources/read", "no-text-resources", TEXT),
        ("prompts/get", "no-simple-prompt", SIMPLE),
        ("tools/call", "no-prod", "echo"),
    }
    deadline = time.monotonic() + 30
    while True:
        audit = api.ok("GET", "/v1/audit?action=tool_call.denied&limit=100")["data"]["entries"]
        seen = {(e["detail"].get("method"), e["detail"]["rule"], e["detail"]["tool"]) for e in audit}
        if wanted <= seen or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert wanted <= seen, audit


@pytest.mark.parametrize(
    "methods, why",
    [([], "names none"), (["tools/list"], "an unknown method"), (["prompts/get", "prompts/get"], "one twice")],
)
def test_methods_that_name_nothing_or_an_unknown_method_are_refused(gateway, methods, why):
    _, api, gw_id, _ = gateway
    before = api.gateway(gw_id)["rules"]
    r = api.call("PATCH", f"/v1/gateways/{gw_id}", {"rules": [{"name": "r", "effect": "deny", "when": "true", "methods": methods}]})
    assert r.status_code == 400, (why, r.status_code, r.text)
    body = r.json()
    assert body["success"] is False and body["error"]["code"] == "VALIDATION_ERROR", body
    assert "methods" in r.text, (why, body)
    assert api.gateway(gw_id)["rules"] == before, "a refused change changes nothing"

"""Content checks (issue 58): hidden text and secrets in what an app answers never reach the
client unnoticed, and a result over its bound is refused saying the tool ran.

The app is `content_server.py`, a stdio server on the official Python SDK that hides a sample of
a class of hidden text in tool results (text, `structuredContent`, resource links, embedded
resources), a tool's error, a JSON-RPC error, `resources/read` contents and `prompts/get`
messages. The clients are the official Python SDK's, in both eras (`auto` speaks 2026-07-28
stateless, `legacy` the handshake era), and the official TypeScript SDK's
(`tests/node/ts_content_client.mjs`), checking exactly what arrives.

What an app sends outside a call's answer is checked the same way: a task's status message and
result (`tasks/get`, the tasks extension of 2026-07-28 stateless clients) and the progress and
log messages on a call's stream, from `tasks_app.py` (an HTTP app on the official Python SDK).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest
from mcp.shared.exceptions import MCPError

from mcp_helpers import (
    NODE_DIR,
    STATELESS,
    Api,
    McpHttp,
    config,
    http_app,
    mcp_url,
    node_bin,
    open_stream,
    python_app,
    run,
    sdk_client,
    stateless_post,
    task_to_its_end,
    WITH_TASKS,
)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from content_server import HONEST, LOOK_ALIKES, SAMPLES, SECRET  # noqa: E402

MODES = ["auto", "legacy"]
CONTENT_REFUSED = -32013

APP = f"""\
  - id: teller
    name: Teller
    description: an app that hides text in its answers
    category: testing
    command: {json.dumps([sys.executable, str(HERE / "content_server.py")])}
"""


@pytest.fixture(scope="module")
def srv(module_toolgate_factory):
    s = module_toolgate_factory(full_config=config(APP, mcp="  list_deadline_ms: 30000\n"))
    api = Api(s)
    off = {"tool_policy": "off"}
    redact = {"redact": {"detectors": ["secrets"], "exempt_tools": ["vault"]}, "max_result_bytes": 4000}
    gws = {
        "strip": api.create_gateway(["teller"], configuration=off),
        "block": api.create_gateway(["teller"], configuration={**off, "content_policy": "block"}),
        "log": api.create_gateway(["teller"], configuration={**off, "content_policy": "log"}),
        "redact": api.create_gateway(["teller"], configuration={**off, **redact}),
    }
    return s, gws


def session(s, gw, mode, go):
    gw_id, key = gw

    async def main():
        async with sdk_client(mcp_url(s, gw_id), key, mode=mode) as c:
            return await go(c)

    return run(main())


def dump(result) -> dict:
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("cls", list(SAMPLES))
def test_strip_removes_hidden_text_from_every_place_and_keeps_the_rest(srv, mode, cls):
    s, gws = srv

    async def go(c):
        result = dump(await c.call_tool("hide_result", {"cls": cls}))
        tool_err = dump(await c.call_tool("tool_error", {"cls": cls}))
        with pytest.raises(MCPError) as rpc:
            await c.call_tool("rpc_error", {"cls": cls})
        resource = dump(await c.read_resource(f"res://hide/{cls}"))
        prompt = dump(await c.get_prompt(f"say_{cls}"))
        return result, tool_err, rpc.value.error, resource, prompt

    result, tool_err, rpc, resource, prompt = session(s, gws["strip"], mode, go)
    assert result["content"][0]["text"] == "beforeafter"
    assert result["content"][1]["name"] == "report" and result["content"][1]["description"] == "ab"
    assert result["content"][1]["uri"] == "file:///report"
    assert result["content"][2]["resource"]["text"] == "innertext"
    assert result["structuredContent"] == {"deep": {"list": ["xy", 1, True]}, "plain": "ok"}
    assert tool_err["isError"] is True and tool_err["content"][0]["text"] == "Error executing tool tool_error: failedhere"
    assert rpc.message == "brokenhere" and rpc.code == -32000
    assert resource["contents"][0]["text"] == "resourcetext"
    assert prompt["messages"][0]["content"]["text"] == "saythis"


@pytest.mark.parametrize("mode", MODES)
def test_honest_emoji_and_scripts_pass_byte_for_byte_under_block(srv, mode):
    s, gws = srv

    async def go(c):
        return dump(await c.call_tool("honest", {}))

    result = session(s, gws["block"], mode, go)
    assert result["content"][0]["text"] == HONEST
    assert result["structuredContent"] == {"text": HONEST}


@pytest.mark.parametrize("mode", MODES)
def test_block_answers_an_error_naming_the_class_where_and_that_the_tool_ran(srv, mode):
    s, gws = srv

    async def go(c):
        errors = []
        for ask in (
            lambda: c.call_tool("hide_result", {"cls": "tag"}),
            lambda: c.read_resource("res://hide/zero_width"),
            lambda: c.get_prompt("say_bidi"),
        ):
            with pytest.raises(MCPError) as e:
                await ask()
            errors.append(e.value.error)
        return errors

    call, read, prompt = session(s, gws["block"], mode, go)
    assert call.code == CONTENT_REFUSED
    assert "the tool ran" in call.message and "U+E0050" in call.message, call.message
    assert call.data["class"] == "tag" and call.data["where"] == "result" and call.data["tool_ran"] is True
    assert read.code == CONTENT_REFUSED and read.data["where"] == "resource" and read.data["tool_ran"] is False
    assert read.data["class"] == "zero_width"
    assert prompt.code == CONTENT_REFUSED and prompt.data["where"] == "prompt" and prompt.data["class"] == "bidi"


def test_hidden_text_in_an_identifier_blocks_even_under_strip(srv):
    s, gws = srv

    async def go(c):
        with pytest.raises(MCPError) as e:
            await c.call_tool("hide_in_meta", {})
        return e.value.error

    e = session(s, gws["strip"], "legacy", go)
    assert e.code == CONTENT_REFUSED and e.data["at"] == "_meta.ui" and e.data["class"] == "tag", e


def test_log_passes_unchanged_and_counts(srv):
    s, gws = srv

    async def go(c):
        return dump(await c.call_tool("hide_result", {"cls": "zero_width"}))

    result = session(s, gws["log"], "legacy", go)
    assert result["content"][0]["text"] == "before" + SAMPLES["zero_width"] + "after"
    metrics = httpx2.get(s.metrics_url, timeout=10).text
    line = next(
        l for l in metrics.splitlines()
        if l.startswith("toolgate_hidden_text_total{")
        and 'class="zero_width"' in l and 'action="logged"' in l and 'where="result"' in l
    )
    assert float(line.rsplit(" ", 1)[1]) > 0, line
    assert "hidden text in an app's answer" in s.stderr_text()
    assert SAMPLES["zero_width"] not in s.stderr_text(), "the text itself is never logged"
    # The call's request log entry is marked with where and what was found.
    gw_id = gws["log"][0]

    def marked() -> list:
        entries = Api(s).ok("GET", f"/v1/logs?gateway_id={gw_id}&limit=100")["data"]["logs"]
        return [e["content"] for e in entries if "content" in e]

    deadline = time.monotonic() + 30
    while not marked():
        assert time.monotonic() < deadline, "no log entry of the call is marked"
        time.sleep(0.2)
    mark = marked()[0][0]
    assert mark["where"] == "result", mark
    assert {"class": "zero_width", "at": "content[0].text", "action": "logged"} in mark["hidden_text"], mark


@pytest.mark.parametrize("mode", MODES)
def test_secrets_are_redacted_look_alikes_kept_and_an_exempt_tool_untouched(srv, mode):
    s, gws = srv

    async def go(c):
        return dump(await c.call_tool("secrets", {})), dump(await c.call_tool("vault", {}))

    redacted, vault = session(s, gws["redact"], mode, go)
    assert redacted["content"][0]["text"] == f"key [redacted:aws_access_key_id] and {LOOK_ALIKES}"
    assert vault["content"][0]["text"] == f"key {SECRET}"
    metrics = httpx2.get(s.metrics_url, timeout=10).text
    assert any(
        l.startswith("toolgate_redacted_total{") and 'kind="aws_access_key_id"' in l for l in metrics.splitlines()
    )
    assert SECRET not in s.stderr_text()


def test_a_result_over_the_bound_is_refused_saying_the_tool_ran_and_its_size(srv):
    s, gws = srv

    async def go(c):
        with pytest.raises(MCPError) as e:
            await c.call_tool("big", {})
        return e.value.error

    e = session(s, gws["redact"], "legacy", go)
    assert e.code == CONTENT_REFUSED and e.data["reason"] == "too_large" and e.data["max_bytes"] == 4000
    assert e.data["bytes"] > 5000 and "the tool ran" in e.message, e


def test_the_settings_are_validated_and_shown(srv):
    s, gws = srv
    api = Api(s)
    gw_id = gws["redact"][0]
    conf = api.gateway(gw_id)["configuration"]
    assert conf["content_policy"] == "strip" and conf["max_result_bytes"] == 4000
    assert conf["redact"]["detectors"] == ["secrets"] and conf["redact"]["exempt_tools"] == ["vault"]
    r = api.call("PATCH", f"/v1/gateways/{gw_id}", {"configuration": {"redact": {"detectors": ["passwords"]}}})
    assert r.status_code == 400 and r.json()["error"]["details"]["field"] == "configuration.redact.detectors", r.text
    r = api.call("PATCH", f"/v1/gateways/{gw_id}", {"configuration": {"content_policy": "hide"}})
    assert r.status_code == 400, r.text


def run_ts_client(url: str, key: str, cls: str) -> dict:
    script = NODE_DIR / "ts_content_client.mjs"
    p = subprocess.run([str(node_bin()), str(script), url, key, cls], cwd=NODE_DIR, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, f"ts_content_client.mjs exited {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}"
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("cls", ["tag", "bidi"])
def test_the_typescript_sdk_sees_the_same(srv, cls):
    s, gws = srv
    strip = run_ts_client(mcp_url(s, gws["strip"][0]), gws["strip"][1], cls)
    result = strip["hide_result"]["result"]
    assert result["content"][0]["text"] == "beforeafter"
    assert result["content"][1]["name"] == "report" and result["content"][2]["resource"]["text"] == "innertext"
    assert result["structuredContent"] == {"deep": {"list": ["xy", 1, True]}, "plain": "ok"}
    assert strip["tool_error"]["result"]["content"][0]["text"] == "Error executing tool tool_error: failedhere"
    assert strip["rpc_error"]["code"] == -32000 and "brokenhere" in strip["rpc_error"]["message"]
    assert strip["resource"]["result"]["contents"][0]["text"] == "resourcetext"
    assert strip["prompt"]["result"]["messages"][0]["content"]["text"] == "saythis"
    assert strip["honest"]["result"]["content"][0]["text"] == HONEST
    block = run_ts_client(mcp_url(s, gws["block"][0]), gws["block"][1], cls)
    assert block["hide_result"]["code"] == CONTENT_REFUSED and block["hide_result"]["data"]["tool_ran"] is True
    assert block["resource"]["code"] == CONTENT_REFUSED and block["prompt"]["code"] == CONTENT_REFUSED
    assert block["honest"]["result"]["content"][0]["text"] == HONEST
    assert block["honest"]["result"]["structuredContent"] == {"text": HONEST}


# ------------------------------------------------------------------ tasks and call streams



@pytest.fixture(scope="module")
def tasks_srv(tmp_path_factory, module_toolgate_factory):
    """toolgate on `tasks_app.py` (HTTP, 2026-07-28 with the tasks extension), a gateway per
    policy: (server, {policy: (url, key)})."""
    with python_app("tasks_app.py", tmp_path_factory.mktemp("tasks-app") / "app.log") as addr:
        s = module_toolgate_factory(full_config=config(http_app("tasks", f"http://{addr}/mcp", name="Tasks")))
        api = Api(s)
        gws = {}
        for policy in ("strip", "block", "log"):
            gw_id, key = api.create_gateway(["tasks"], configuration={"content_policy": policy})
            gws[policy] = (mcp_url(s, gw_id), key)
        yield s, gws


def finished_task(url: str, key: str, cls: str) -> dict:
    """Runs a `hidden_report` task hiding `cls` to its end; returns the last JSON-RPC answer of
    `tasks/get`."""
    call = {"name": "hidden_report", "arguments": {"cls": cls}, "_meta": WITH_TASKS}
    return task_to_its_end(url, key, call)[1]


@pytest.mark.parametrize("cls", ["tag", "bidi"])
def test_a_task_s_status_message_and_result_are_stripped_under_strip(tasks_srv, cls):
    s, gws = tasks_srv
    got = finished_task(*gws["strip"], cls)["result"]
    assert got["status"] == "completed" and got["taskId"].startswith("tgt1."), got
    assert got["statusMessage"] == "halfway", got
    assert got["result"]["content"][0]["text"] == "beforeafter", got
    assert got["result"]["structuredContent"] == {"note": "xy"}, got


def test_a_task_s_hidden_text_blocks_tasks_get_saying_the_tool_ran(tasks_srv):
    s, gws = tasks_srv
    got = finished_task(*gws["block"], "tag")
    e = got["error"]
    assert e["code"] == CONTENT_REFUSED and e["data"]["where"] == "task" and e["data"]["class"] == "tag", got
    assert e["data"]["tool_ran"] is True and "the tool ran" in e["message"], got
    assert SAMPLES["tag"] not in json.dumps(got, ensure_ascii=False)


def test_a_task_s_hidden_text_is_logged_and_passed_under_log(tasks_srv):
    s, gws = tasks_srv
    got = finished_task(*gws["log"], "zero_width")["result"]
    assert got["statusMessage"] == "half" + SAMPLES["zero_width"] + "way", got
    metrics = httpx2.get(s.metrics_url, timeout=10).text
    assert any(
        l.startswith("toolgate_hidden_text_total{") and 'where="task"' in l and 'action="logged"' in l
        for l in metrics.splitlines()
    ), metrics


@pytest.mark.parametrize("mode", MODES)
def test_progress_and_log_messages_on_a_call_s_stream_are_stripped(tasks_srv, mode):
    s, gws = tasks_srv
    url, key = gws["strip"]
    logs, progress = [], []

    async def on_log(params):
        logs.append(params.data)

    async def on_progress(done, total, message):
        progress.append(message)

    async def main():
        async with sdk_client(url, key, mode=mode, logging_callback=on_log, log_level="info") as c:
            return await c.call_tool("chatty", {"cls": "tag"}, progress_callback=on_progress)

    result = run(main())
    assert result.content[0].text == "done", result
    assert progress == ["halfway"], progress
    # A stateless client's log messages do not arrive through toolgate yet (noticed, another
    # matter); whatever arrives carries no hidden text.
    if mode == "legacy":
        assert logs == ["logline"], logs
    assert not any(SAMPLES["tag"] in str(line) for line in logs), logs


def test_progress_hiding_text_ends_the_call_under_block(tasks_srv):
    s, gws = tasks_srv
    url, key = gws["block"]

    async def main():
        async with sdk_client(url, key, mode="legacy") as c:
            with pytest.raises(MCPError) as e:
                await c.call_tool("chatty", {"cls": "tag"}, progress_callback=lambda *a: None)
            return e.value.error

    e = run(main())
    assert e.code == CONTENT_REFUSED and e.data["where"] == "notification" and e.data["class"] == "tag", e


@pytest.mark.parametrize("policy", ["strip", "block", "log"])
def test_a_resource_update_on_the_get_stream_whose_uri_hides_text_is_dropped(tasks_srv, policy):
    """An app's GET stream carries, related to no call, an update of a resource whose uri hides
    text, then one of an honest uri: a uri is an identifier, never rewritten, so under `strip`
    and `block` that update is dropped, under `log` delivered. The app's log message on that
    stream reaches no client (it goes to the process log)."""
    s, gws = tasks_srv
    url, key = gws[policy]
    hidden = "res://doc" + SAMPLES["tag"]
    c = McpHttp(url, key)
    c.initialize()
    for uri in (hidden, "res://doc"):
        c.request("resources/subscribe", {"uri": uri})
    seen = []
    with open_stream(c) as r:
        assert r.status_code == 200, r.status_code
        lines = r.iter_lines()
        assert next(lines).startswith(":"), "the stream opens with a comment"
        assert "announced" in c.request("tools/call", {"name": "announce", "arguments": {"cls": "tag"}}).text
        for line in lines:
            if line.startswith("data:"):
                seen.append(json.loads(line[5:]))
                if seen[-1].get("params", {}).get("uri") == "res://doc":
                    break
    c.close()
    updated = [m["params"]["uri"] for m in seen if m["method"] == "notifications/resources/updated"]
    assert updated == ([hidden, "res://doc"] if policy == "log" else ["res://doc"]), seen
    assert all(m["method"] == "notifications/resources/updated" for m in seen), seen

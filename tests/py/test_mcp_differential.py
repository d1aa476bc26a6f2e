"""What toolgate decides on is what the app runs (Decision 22 of the design).

The crafted messages of `fuzz/corpus/client_message/` (members written twice at several depths,
escapes in keys and names, lone surrogates, a byte-order mark, deep nesting, huge numbers, bytes
that are not UTF-8) are sent, byte for byte, through a gateway to two apps that say what they
ran: one on the official Python SDK (`echo_app.py`), one on the official TypeScript SDK
(`tests/node/echo_app.mjs`). The gateway allows the tool `echo` only (not `slow`) and a rule
denies `args.repo == "prod"`. For every message, either toolgate refuses it (and the app runs
nothing), or what the app ran is what toolgate decided on: the allowed tool, an argument the rule
passed, the prompt or resource the message names as a reader keeping the first of a member
written twice would read it, and the name in the request log and the metrics.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import httpx2
import pytest

from mcp_helpers import VENV, Api, McpHttp, NodeServer, config, http_app, mcp_url, start_toolgate, wait_for_port

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "fuzz" / "corpus" / "client_message"
NODE_DIR = ROOT / "tests" / "node"

# Messages that must be refused whatever the app: each reads two ways, or cannot be read whole.
MUST_REFUSE = {
    "dup_name.json", "dup_name_escaped.json", "dup_arguments.json", "dup_in_arguments.json", "dup_deep.json",
    "dup_meta.json", "dup_id.json", "dup_method.json", "dup_prompt_name.json", "dup_resource_uri.json",
    "lone_surrogate.json", "lone_surrogate_in_key.json", "huge_number.json", "deep_nesting.json",
    "byte_order_mark.json", "not_utf8.json",
}
# Messages that read one way and that the gateway's allowlist and rule let through.
MUST_RUN = {"plain.json", "escaped_name.json", "big_integer.json", "surrogate_pair.json",
            "same_key_other_objects.json", "string_id.json", "prompt_escaped_name.json", "resource_plain.json"}
TOOL_CALLS = len(MUST_RUN) - 2
# Messages that read one way and that the rule denies: the app must not run them.
MUST_DENY = {"escaped_denied_value.json", "escaped_key.json"}

RULES = [{"name": "no-prod", "effect": "deny", "when": 'has(args.repo) && args.repo == "prod"'}]


def first_wins(data: bytes):
    """The message as a reader keeping the first of a member written twice reads it."""
    return json.loads(data.decode("utf-8"), object_pairs_hook=lambda pairs: dict(reversed(pairs)))


def as_read(value):
    """A value with its numbers as a double holds them: JavaScript reads 12345678901234567890123
    as 1.2345678901234568e+22, Python exactly, toolgate's rules as a double too."""
    if isinstance(value, dict):
        return {k: as_read(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_read(v) for v in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return value


class RanLog:
    """The JSON lines an echo app appends for each thing it ran."""

    def __init__(self, path: Path):
        self.path = path
        path.write_text("")

    def lines(self) -> list[dict]:
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def apps(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("differential")
    py_ran, ts_ran = RanLog(tmp / "py.jsonl"), RanLog(tmp / "ts.jsonl")
    py_proc = subprocess.Popen([str(VENV / "bin" / "python"), str(Path(__file__).parent / "echo_app.py"), str(py_ran.path)],
                               stdout=subprocess.DEVNULL, stderr=open(tmp / "py.log", "w"))
    ts = NodeServer(NODE_DIR / "echo_app.mjs", [str(ts_ran.path)], "echo-typescript", tmp)
    try:
        py_addr = wait_for_port(py_proc, "echo_app.py")
        ts.start()
        srv = start_toolgate(config(apps=http_app("py", f"http://{py_addr}/mcp", "Echo (Python SDK)")
                                    + http_app("ts", ts.url, "Echo (TypeScript SDK)")))
        try:
            api = Api(srv)
            gateways = {}
            for app, ran in (("py", py_ran), ("ts", ts_ran)):
                gw, key = api.create_gateway([app], allowed_tools={app: ["echo"]})
                api.ok("PATCH", f"/v1/gateways/{gw}", {"rules": RULES})
                gateways[app] = (srv, gw, key, ran)
            yield gateways
        finally:
            srv.stop()
            srv.tmp.cleanup()
    finally:
        ts.stop()
        py_proc.terminate()
        py_proc.wait(timeout=10)


def send(c: McpHttp, data: bytes) -> dict:
    r = c.post(None, raw=data)
    assert r.status_code in (200, 400, 403, 404), f"HTTP {r.status_code}: {r.text}"
    ct = r.headers.get("content-type", "")
    if ct.startswith("text/event-stream"):
        msgs = [json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:") and line[5:].strip()]
        msgs = [m for m in msgs if "result" in m or "error" in m]
        assert msgs, r.text
        return msgs[-1]
    return r.json()


def test_the_corpus_is_the_fuzz_targets_seeds():
    names = {p.name for p in CORPUS.iterdir()}
    assert names == MUST_REFUSE | MUST_RUN | MUST_DENY, f"corpus and test disagree: {names ^ (MUST_REFUSE | MUST_RUN | MUST_DENY)}"


@pytest.mark.parametrize("app", ["py", "ts"])
def test_what_toolgate_decided_on_is_what_the_app_ran(apps, app):
    srv, gw, key, ran = apps[app]
    c = McpHttp(mcp_url(srv, gw), key)
    c.initialize()
    ran_calls, wrong = 0, []
    for path in sorted(CORPUS.iterdir()):
        try:
            ran_calls += check_one(c, ran, app, path)
        except AssertionError as e:
            wrong.append(str(e).splitlines()[0])
    assert not wrong, "\n".join(wrong)
    assert ran_calls == len(MUST_RUN)
    # The tools the app never ran were never logged or counted either.
    functions = logged_functions(srv, gw, TOOL_CALLS)
    assert functions == ["echo"] * TOOL_CALLS, f"{app}: the request log names {functions}"
    metrics = httpx2.get(srv.metrics_url + "/metrics", timeout=10).text
    assert 'gen_ai_tool_name="slow"' not in metrics, f"{app}: a call of slow was counted"
    c.close()


def check_one(c: McpHttp, ran: RanLog, app: str, path: Path) -> int:
    """Sends one crafted message; 1 if the app ran it (as toolgate decided), 0 if refused."""
    data = path.read_bytes()
    before = len(ran.lines())
    answer = send(c, data)
    after = ran.lines()[before:]
    name = path.name
    if name in MUST_REFUSE:
        assert "error" in answer, f"{app} {name}: accepted a message that reads two ways: {answer}"
        err = answer["error"]
        assert err["code"] in (-32700, -32600, -32602), f"{app} {name}: {err}"
        assert after == [], f"{app} {name}: refused, yet the app ran {after}"
        if name.startswith("dup_") and name != "dup_id.json":
            assert "written twice" in err["message"], f"{app} {name}: the error does not name the member: {err}"
        return 0
    msg = first_wins(data)
    if name in MUST_DENY:
        assert "error" in answer and answer["error"]["code"] == -32012, f"{app} {name}: {answer}"
        assert after == [], f"{app} {name}: denied, yet the app ran {after}"
        return 0
    assert name in MUST_RUN
    assert "result" in answer and not answer["result"].get("isError"), f"{app} {name}: {answer}"
    assert len(after) == 1, f"{app} {name}: the app ran {after}"
    did, params = after[0], msg["params"]
    # What the app ran is what toolgate read (the first-member reading), and the reply said so.
    if msg["method"] == "tools/call":
        decided = {"kind": "tool", "name": params["name"], "arguments": params["arguments"]}
        assert did["name"] == "echo" and did["arguments"].get("repo") != "prod", f"{app} {name}: {did}"
        assert json.loads(answer["result"]["content"][0]["text"]) == did
    elif msg["method"] == "prompts/get":
        decided = {"kind": "prompt", "name": params["name"], "arguments": params.get("arguments")}
    else:
        decided = {"kind": "resource", "name": params["uri"], "arguments": None}
    assert as_read(did) == as_read(decided), f"{app} {name}: toolgate decided on {decided}, the app ran {did}"
    return 1


def logged_functions(srv, gw: str, want: int) -> list[str]:
    """The functions of the successful tool calls in the gateway's request log (entries are
    written in the background: waited for)."""
    deadline = time.monotonic() + 15
    while True:
        logs = Api(srv).ok("GET", f"/v1/logs?gateway_id={gw}&limit=100")
        entries = logs.get("data", logs)["logs"]
        functions = sorted(e.get("function") for e in entries if e.get("status") == "success" and e.get("function"))
        if len(functions) >= want or time.monotonic() > deadline:
            return functions
        time.sleep(0.2)

"""Decision 23, bytes kept for resumption (issue 54, item 6), and resumed call streams under the
stream bounds (item 5), through toolgate on `tasks_app.py` (the official Python SDK), whose
`slow_compute` sleeps, then answers `computed <label>` (as text and as structured content): a
label of half a megabyte makes a slow call whose answer is a megabyte.

A session client that takes SSE gets a slow call's answer as a resumable stream, kept after the
call ends so that a client that dropped can take it up with `Last-Event-ID`. Those buffers are
bounded per key and organisation (`mcp.resumable`): a key (organisation) that holds its bound is
refused new calls (HTTP 429, -32010, `data.scope`) until its buffers expire
(`mcp.resumable.keep_after_end_secs`); a call that ends while its key is past the bound is not
kept after its end. Before, 240 slow calls answering 3 MB each held 760 MiB for a minute after
they were answered.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time

import httpx2
import pytest

from mcp_helpers import (
    Api,
    McpHttp,
    config,
    first_event_then_drop,
    http_app,
    mcp_url,
    python_app,
    sse_events,
    start_toolgate,
)
from toolgate_harness import random_key

PER_KEY = 1_000_000
PER_ORG = 2_000_000
KEEP_SECS = 5
# The app's answer carries its text twice (`content` and `structuredContent`): a label of 550 KB
# makes an answer of 1.1 MB, past a key's bound.
BIG = "x" * 550_000
OTHER_KEY = random_key()


@pytest.fixture(scope="module")
def tasks_app(tmp_path_factory):
    out = tmp_path_factory.mktemp("tasks-app")
    with python_app("tasks_app.py", out / "app.log") as addr:
        yield addr


@pytest.fixture(scope="module")
def srv(tasks_app):
    """toolgate with small bounds: a megabyte of resumable answers per key, two per organisation,
    kept three seconds after their calls end; one stream per session; and a second organisation
    with its owner's key (`OTHER_KEY`)."""
    bounds = (f"  resumable: {{ bytes_per_key: {PER_KEY}, bytes_per_organization: {PER_ORG}, "
              f"keep_after_end_secs: {KEEP_SECS} }}\n"
              "  streams: { per_session: 1 }\n")
    other = (
        "organizations:\n  - { id: org_other, name: Other, tier: enterprise }\n"
        "users:\n  - { id: usr_other, email: o@other.example, name: O, role: owner, organization: org_other }\n"
        "api_keys:\n  - id: key_other\n    name: other owner\n    user: usr_other\n"
        f"    sha256: {hashlib.sha256(OTHER_KEY.encode()).hexdigest()}\n    scopes: [\"*\"]\n"
    )
    s = start_toolgate(config(http_app("tasks", f"http://{tasks_app}/mcp", name="Tasks"), mcp=bounds) + other)
    try:
        yield s
    finally:
        s.stop()
        s.tmp.cleanup()


def account_key(srv, name: str) -> str:
    created = Api(srv).ok("POST", "/v1/api-keys", {"name": name, "scopes": ["gateways:read"]}, status=201)
    return created.get("data", created)["key"]


def gateway_url(srv, key: str | None = None) -> str:
    """A gateway on the tasks app, of the admin's organisation (or of `key`'s)."""
    body = {"name": f"gw-{time.monotonic_ns()}", "servers": ["tasks"]}
    r = Api(srv).call("POST", "/v1/gateways", body, key=key)
    assert r.status_code == 201, r.text
    return mcp_url(srv, r.json()["data"]["id"])


def session(url: str, key: str) -> McpHttp:
    c = McpHttp(url, key)
    c.initialize()
    return c


def slow_call(c: McpHttp, label: str, seconds: float = 0.5) -> httpx2.Response:
    return c.request("tools/call", {"name": "slow_compute", "arguments": {"seconds": seconds, "label": label}})


def answered(r: httpx2.Response, label: str) -> None:
    """A slow call's answer: a resumable stream (priming event, then the result)."""
    assert r.status_code == 200, r.text[:500]
    assert r.headers["content-type"].startswith("text/event-stream"), r.headers
    events = sse_events(r.text)
    assert events[0].get("id") and not events[0].get("data"), events[0]
    result = json.loads(events[-1]["data"])
    assert result["result"]["content"][0]["text"] == f"computed {label}", str(result)[:300]


def assert_refused(r: httpx2.Response, scope: str, limit: int) -> None:
    assert r.status_code == 429, r.text
    error = r.json()["error"]
    assert error["code"] == -32010, error
    assert (error["data"]["scope"], error["data"]["limit"], error["data"]["code"]) == (scope, limit, "RESUMABLE_BYTES_HELD"), error
    assert error["data"]["setting"] in error["message"] and f"{KEEP_SECS} s" in error["message"], error


def metric(srv, line_start: str) -> float:
    text = httpx2.get(srv.metrics_url, timeout=10).text
    return next((float(line.split()[-1]) for line in text.splitlines() if line.startswith(line_start)), 0.0)


def test_a_key_and_an_organisation_at_their_bound_are_refused_until_their_buffers_expire(srv):
    url = gateway_url(srv)
    first, second, third = (session(url, account_key(srv, n)) for n in ("first", "second", "third"))
    assert metric(srv, 'toolgate_mcp_resumable_refusals_total{scope="key"} ') == 0.0, "the series exist from zero"

    # One slow answer past the key's bound: kept for resumption, and the key's next call is refused,
    # whether slow or quick, without reaching the app.
    answered(slow_call(first, BIG), BIG)
    assert metric(srv, "toolgate_mcp_resumable_bytes ") >= 2 * len(BIG)
    assert_refused(slow_call(first, "again"), "key", PER_KEY)
    assert_refused(slow_call(first, "quick", seconds=0), "key", PER_KEY)
    # A client that takes JSON only is never buffered for: it still calls.
    json_only = first.request("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.5, "label": "json"}},
                              headers=first.headers(Accept="application/json"))
    assert json_only.status_code == 200 and "computed json" in json_only.text, json_only.text

    # Another key of the organisation calls, and with it the organisation holds its bound: a third
    # key is refused, naming the organisation.
    answered(slow_call(second, BIG), BIG)
    assert_refused(slow_call(third, "org"), "organization", PER_ORG)
    # Another organisation is not held back.
    other = session(gateway_url(srv, key=OTHER_KEY), OTHER_KEY)
    answered(slow_call(other, "elsewhere"), "elsewhere")
    assert metric(srv, 'toolgate_mcp_resumable_refusals_total{scope="key"} ') == 2.0
    assert metric(srv, 'toolgate_mcp_resumable_refusals_total{scope="organization"} ') == 1.0
    # Refused calls are in the request log as the 429 they were answered with.
    gw_id = url.rsplit("/", 2)[-2]

    def refused_in_log() -> list:
        entries = Api(srv).ok("GET", f"/v1/logs?gateway_id={gw_id}&limit=100")["data"]["logs"]
        return [e for e in entries if e["response"]["status"] == 429]

    deadline = time.monotonic() + 10
    while len(refused_in_log()) < 3:
        assert time.monotonic() < deadline, "the refused calls are not in the log"
        time.sleep(0.2)
    assert all(e["response"]["data"]["code"] == -32010 for e in refused_in_log()), refused_in_log()

    # The buffers expire KEEP_SECS after their calls ended: the keys call again.
    deadline = time.monotonic() + KEEP_SECS + 10
    while (r := slow_call(first, "later")).status_code == 429:
        assert time.monotonic() < deadline, "the key was still refused after its buffers expired"
        time.sleep(0.5)
    answered(r, "later")
    answered(slow_call(third, "later"), "later")
    for c in (first, second, third, other):
        c.close()


def test_a_call_ending_past_its_key_s_bound_is_not_kept_after_its_end(srv):
    """Three slow calls of one key run at once, each answering 600 KB, ending one after the other:
    the first two end under the key's bound (a megabyte without them) and stay resumable; the
    third ends past it: its connection gets its answer, but it is not kept after its end (its
    `Last-Event-ID` is no longer known: the GET opens the listening stream instead). So the
    answers of calls running when a key crosses its bound do not stay in memory."""
    wait_until_nothing_is_kept(srv)
    url = gateway_url(srv)
    key = account_key(srv, "three")
    label = "y" * 300_000  # an answer of 600 KB
    sessions = [session(url, key) for _ in range(3)]
    answers: list[httpx2.Response | None] = [None, None, None]

    def call(i: int) -> None:
        answers[i] = slow_call(sessions[i], label, seconds=0.5 * (i + 1))

    threads = [threading.Thread(target=call, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for r in answers:
        answered(r, label)
    held = metric(srv, "toolgate_mcp_resumable_bytes ")
    assert 2 * 600_000 <= held < 3 * 600_000, f"two answers are kept, not the third: {held}"

    for i, c in enumerate(sessions):
        last_event_id = sse_events(answers[i].text)[0]["id"]
        h = c.headers(Accept="text/event-stream", Last_Event_ID=last_event_id, Content_Type=None)
        with httpx2.stream("GET", url, headers=h, timeout=30) as r:
            assert r.status_code == 200
            seen = ""
            for chunk in r.iter_text():
                seen += chunk
                if ": stream open" in seen or f"computed {label}" in seen:
                    break
        if i < 2:
            assert f"computed {label}" in seen, f"call {i}'s answer is resumable"
        else:
            assert ": stream open" in seen and "computed" not in seen, "the third answer was not kept"
        c.close()


def wait_until_nothing_is_kept(srv) -> None:
    deadline = time.monotonic() + KEEP_SECS + 10
    while metric(srv, "toolgate_mcp_resumable_bytes ") > 0:
        assert time.monotonic() < deadline, "the earlier tests' buffers did not expire"
        time.sleep(0.2)


def test_a_resumed_call_stream_counts_toward_its_session_s_streams(srv):
    """A GET that resumes a call's stream is a stream of its session like the listening one: with
    one stream per session and the listening stream open, the resumption is refused (429, scope
    `session`); once the listening stream closes, it gets the call's answer."""
    url = gateway_url(srv)
    c = session(url, account_key(srv, "resumer"))
    body = {"jsonrpc": "2.0", "id": 90, "method": "tools/call",
            "params": {"name": "slow_compute", "arguments": {"seconds": 2, "label": "resumed"}}}
    first = sse_events(first_event_then_drop(c, body))[0]  # the client drops while the app still works
    resume = c.headers(Accept="text/event-stream", Last_Event_ID=first["id"], Content_Type=None)
    listening = c.headers(Accept="text/event-stream", Content_Type=None)
    with httpx2.stream("GET", url, headers=listening, timeout=30) as stream:
        assert stream.status_code == 200
        refused = httpx2.get(url, headers=resume, timeout=30)
        assert refused.status_code == 429, refused.text
        error = refused.json()["error"]
        assert (error["code"], error["data"]["scope"], error["data"]["code"]) == (-32010, "session", "TOO_MANY_STREAMS")
    deadline = time.monotonic() + 10
    while (r := httpx2.get(url, headers=resume, timeout=30)).status_code == 429:
        assert time.monotonic() < deadline, "the closed listening stream kept its place"
        time.sleep(0.2)
    assert r.status_code == 200, r.text
    results = [json.loads(e["data"]) for e in sse_events(r.text) if '"result"' in e.get("data", "")]
    assert len(results) == 1 and results[0]["id"] == 90, r.text
    assert results[0]["result"]["content"][0]["text"] == "computed resumed", results
    c.close()

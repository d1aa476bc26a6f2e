"""The official TypeScript SDK (`@modelcontextprotocol/sdk`, StreamableHTTPClientTransport with
`requestInit.headers`) as a client: `tests/node/ts_client.mjs`, run with Node 22."""

from __future__ import annotations

import json
import subprocess

import pytest

from mcp_helpers import NODE_DIR, TIME_APP, Api, config, mcp_url, node_bin, start_toolgate, stdio_time_app


def run_ts_client(url: str, key: str, time_tool: str) -> dict:
    script = NODE_DIR / "ts_client.mjs"
    p = subprocess.run([str(node_bin()), str(script), url, key, time_tool], cwd=NODE_DIR,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"ts_client.mjs exited {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}"
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def srv():
    s = start_toolgate(config(TIME_APP + stdio_time_app("clock")))
    yield s
    s.stop()
    s.tmp.cleanup()


def test_ts_sdk_against_a_single_app_gateway(srv):
    gw_id, key = Api(srv).create_gateway(["time"])
    out = run_ts_client(mcp_url(srv, gw_id), key, "get_current_time")
    assert out["tools"] == ["get_current_time"], out


def test_ts_sdk_against_a_two_app_gateway(srv):
    gw_id, key = Api(srv).create_gateway(["time", "clock"])
    out = run_ts_client(mcp_url(srv, gw_id), key, "time__get_current_time")
    assert set(out["tools"]) == {"time__get_current_time", "clock__get_current_time", "clock__convert_time"}, out


def test_ts_sdk_session_is_ended_by_terminate(srv):
    api = Api(srv)
    gw_id, key = api.create_gateway(["time"])
    run_ts_client(mcp_url(srv, gw_id), key, "get_current_time")
    sessions = api.ok("GET", f"/v1/sessions?gateway_id={gw_id}")["data"]["sessions"]
    assert len(sessions) == 1 and sessions[0]["status"] == "ended", sessions
    assert sessions[0]["client"]["type"] == "toolgate-ts-test", sessions

"""Traces (issue 13): W3C `traceparent` from clients reaches the apps (HTTP header and
`params._meta`, MCP's trace-context convention), and with `observability.otlp_endpoint` set
toolgate exports spans over OTLP/HTTP: the request (server), the filter chain (internal) and the
call to the app (client), in the client's trace, the app's parent being toolgate's client span.

The app is `trace_upstream.py` (the official Python SDK's server, reporting the context it got).
The receiver decodes every export with the official `opentelemetry-proto` message types
(`ExportTraceServiceRequest`), so a body that is not valid OTLP fails the test.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from mcp_helpers import Api, McpHttp, config, http_app, mcp_url, response_message, start_toolgate, wait_for_port

HERE = Path(__file__).resolve().parent
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"


class Receiver:
    """An OTLP/HTTP trace endpoint: each POST body is parsed as `ExportTraceServiceRequest`."""

    def __init__(self):
        self.spans: list = []
        self.errors: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (the http.server API)
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                try:
                    assert self.path == "/v1/traces", self.path
                    assert self.headers.get("content-type") == "application/json", self.headers
                    req = ExportTraceServiceRequest()
                    # OTLP's JSON encodes ids in hex where protobuf's JSON mapping has base64.
                    doc = json.loads(body)
                    for rs in doc.get("resourceSpans", []):
                        for ss in rs.get("scopeSpans", []):
                            for s in ss.get("spans", []):
                                for k in ("traceId", "spanId", "parentSpanId"):
                                    if k in s:
                                        s[k] = base64.b64encode(bytes.fromhex(s[k])).decode()
                    json_format.ParseDict(doc, req)
                    for rs in req.resource_spans:
                        for ss in rs.scope_spans:
                            outer.spans.extend((rs.resource, s) for s in ss.spans)
                    self.send_response(200)
                except Exception as e:  # noqa: BLE001 (any failure is the test's)
                    outer.errors.append(f"{e!r}: {body[:500]!r}")
                    self.send_response(400)
                self.send_header("content-type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"

    def wait_for(self, predicate, what: str, timeout: float = 15):
        deadline = time.time() + timeout
        while time.time() < deadline:
            assert not self.errors, self.errors
            found = [s for _, s in self.spans if predicate(s)]
            if found:
                return found
            time.sleep(0.1)
        raise AssertionError(f"no span {what}; got {[(s.name, s.trace_id.hex()) for _, s in self.spans]}")


@pytest.fixture(scope="module")
def upstream():
    proc = subprocess.Popen([sys.executable, str(HERE / "trace_upstream.py")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        yield f"http://{wait_for_port(proc, 'trace_upstream.py (MCP server over HTTP)')}/mcp"
    finally:
        proc.kill()
        proc.communicate(timeout=10)


def call_trace_context(srv, headers: dict[str, str], meta: dict | None = None) -> dict:
    gw_id, key = Api(srv).create_gateway(["tracer"])
    c = McpHttp(mcp_url(srv, gw_id), key)
    c.initialize()
    params: dict = {"name": "trace_context", "arguments": {}}
    if meta:
        params["_meta"] = meta
    r = c.request("tools/call", params, headers=c.headers(**headers))
    assert r.status_code == 200, r.text
    msg = response_message(r)
    assert "result" in msg and not msg["result"].get("isError"), msg
    return json.loads(msg["result"]["content"][0]["text"])


def test_without_export_the_clients_context_reaches_the_app_unchanged(upstream):
    srv = start_toolgate(config(http_app("tracer", upstream, name="Tracer")))
    try:
        seen = call_trace_context(srv, {"traceparent": TRACEPARENT, "tracestate": "vendor=x"})
        assert seen == {"header": TRACEPARENT, "header_state": "vendor=x", "meta": TRACEPARENT, "meta_state": "vendor=x",
                        "authorization": None}
        # In `params._meta` only, as an MCP client may send it: the app gets it in both places.
        seen = call_trace_context(srv, {}, meta={"traceparent": TRACEPARENT})
        assert (seen["header"], seen["meta"]) == (TRACEPARENT, TRACEPARENT), seen
        # No context, nothing invented; a malformed one is not relayed.
        assert call_trace_context(srv, {})["header"] is None
        assert call_trace_context(srv, {"traceparent": "00-nothex-00f067aa0ba902b7-01"})["header"] is None
    finally:
        srv.stop()


def test_spans_are_exported_over_otlp_in_the_clients_trace(upstream):
    rx = Receiver()
    srv = start_toolgate(config(http_app("tracer", upstream, name="Tracer"))
                         + f"observability:\n  otlp_endpoint: {rx.url}\n  service_name: toolgate-test\n")
    try:
        seen = call_trace_context(srv, {"traceparent": TRACEPARENT})
        # The app's parent is toolgate's client span, in the client's trace.
        assert seen["header"] == seen["meta"], seen
        _, trace_id, app_parent, flags = seen["header"].split("-")
        assert (trace_id, flags) == (TRACE_ID, "01") and app_parent != CLIENT_SPAN, seen

        call = rx.wait_for(lambda s: s.name == "tools/call trace_context", "for the call to the app")[0]
        assert call.trace_id.hex() == TRACE_ID and call.span_id.hex() == app_parent
        assert call.kind == 3, "client"
        attrs = {a.key: a.value for a in call.attributes}
        assert attrs["mcp.method.name"].string_value == "tools/call"
        assert attrs["gen_ai.tool.name"].string_value == "trace_context"
        assert attrs["toolgate.app.id"].string_value == "tracer"
        assert call.end_time_unix_nano > call.start_time_unix_nano > 0

        # Its parent: the request's server span, whose parent is the client's span.
        request = rx.wait_for(lambda s: s.span_id == call.parent_span_id, "for the request")[0]
        assert request.kind == 2 and request.parent_span_id.hex() == CLIENT_SPAN, request
        rattrs = {a.key: a.value for a in request.attributes}
        assert rattrs["http.response.status_code"].int_value == 200
        assert rattrs["http.request.method"].string_value == "POST"
        chain = rx.wait_for(lambda s: s.name == "filter chain" and s.parent_span_id == request.span_id, "of the chain")
        assert chain[0].kind == 1 and chain[0].trace_id.hex() == TRACE_ID

        resource = next(r for r, s in rx.spans if s.span_id == request.span_id)
        names = {a.key: a.value.string_value for a in resource.attributes}
        assert names["service.name"] == "toolgate-test", names

        # A request without a context starts a trace of its own.
        r = Api(srv).call("GET", "/v1/user")
        assert r.status_code == 200
        own = rx.wait_for(lambda s: s.name == "GET management" and not s.parent_span_id, "of a new trace")
        assert own[0].trace_id.hex() != TRACE_ID and len(own[0].trace_id) == 16 and any(a.key == "toolgate.principal" for a in own[0].attributes)
    finally:
        srv.stop()

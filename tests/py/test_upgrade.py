"""Graceful upgrade: a new toolgate process (`--upgrade`) takes the listening sockets of the
running one (on SIGQUIT) while MCP calls keep coming, on new connections and on a kept-alive
one, and not one of them fails; sessions and records made on the old process carry over; an SSE
answer streaming from the old process when the signal comes streams to its end.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import httpx2

from mcp_helpers import TIME_APP, Api, ToolgateServer, config, everything_server, http_app, mcp_url, sse_messages
from toolgate_harness import toolgate_bin

CALL = {"jsonrpc": "2.0", "id": 0, "method": "tools/call",
        "params": {"name": "get_current_time", "arguments": {"timezone": "UTC", "format": "YYYY"}}}


def _headers(key: str, sid: str | None = None) -> dict[str, str]:
    h = {"X-API-Key": key, "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
         "MCP-Protocol-Version": "2025-11-25"}
    if sid:
        h["Mcp-Session-Id"] = sid
    return h


def _start_upgrade(srv: ToolgateServer) -> subprocess.Popen:
    """Starts `toolgate --upgrade` on the same config, waits until it waits on
    server.upgrade_sock, and sends the running process SIGQUIT."""
    env = dict(os.environ, TOOLGATE_ADMIN_KEY=srv.admin_key, RUST_LOG="info")
    new_log = open(srv.dir / "new.log", "wb")
    new = subprocess.Popen([str(toolgate_bin()), "--config", str(srv.config_path), "--upgrade"], cwd=srv.dir,
                           env=env, stdout=new_log, stderr=new_log, stdin=subprocess.DEVNULL)
    # The new process waits on server.upgrade_sock (default: in the store's directory) once it
    # has bound it; SIGQUIT before that would find no one to take the sockets.
    sock = srv.data_dir / "upgrade.sock"
    deadline = time.monotonic() + 10
    while not sock.exists():
        assert new.poll() is None, (srv.dir / "new.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "the new process did not bind server.upgrade_sock"
        time.sleep(0.02)
    os.kill(srv.proc.pid, signal.SIGQUIT)
    return new


def _stop_both(srv: ToolgateServer, new: subprocess.Popen | None) -> None:
    """Stops the new process (if it still runs) and the old one, and removes their directory."""
    if new is not None and new.poll() is None:
        new.kill()
        new.wait(timeout=10)
    srv.stop()
    srv.tmp.cleanup()


def _open_session(url: str, key: str) -> str:
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "upgrade-test", "version": "1"}}}
    r = httpx2.post(url, json=init, headers=_headers(key), timeout=10)
    assert r.status_code == 200, r.text
    sid = r.headers["mcp-session-id"]
    r = httpx2.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=_headers(key, sid),
                    timeout=10)
    assert r.status_code == 202, r.text
    return sid


class Load:
    """Calls `tools/call` in a loop until stopped; counts answers and failures."""

    def __init__(self, url: str, key: str, sid: str, keep_alive: bool):
        self.url, self.key, self.sid, self.keep_alive = url, key, sid, keep_alive
        self.ok = 0
        self.failures: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _call(self, client: httpx2.Client | None, n: int) -> None:
        body = dict(CALL, id=n)
        try:
            if client is not None:
                r = client.post(self.url, json=body, headers=_headers(self.key, self.sid))
            else:
                r = httpx2.post(self.url, json=body, headers=_headers(self.key, self.sid), timeout=10)
        except Exception as e:  # noqa: BLE001 - every failure is counted and reported
            self.failures.append(f"call {n}: {type(e).__name__}: {e}")
            return
        if r.status_code != 200 or '"result"' not in r.text or '"isError":true' in r.text:
            self.failures.append(f"call {n}: {r.status_code} {r.text[:200]}")
        else:
            self.ok += 1

    def _run(self) -> None:
        n = 0
        client = httpx2.Client(timeout=10) if self.keep_alive else None
        try:
            while not self.stop.is_set():
                n += 1
                self._call(client, n)
                time.sleep(0.005)
        finally:
            if client is not None:
                client.close()

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(timeout=15)


def test_upgrade_under_load_loses_no_call_and_keeps_sessions_and_records():
    srv = ToolgateServer(full_config=config(server="  grace_period_secs: 3\n")).start()
    new: subprocess.Popen | None = None
    try:
        api = Api(srv)
        # The load makes a few hundred calls a second: above the default gateway quota of
        # 1000 a minute on a fast machine, which would refuse calls for a reason of its own.
        gw, key = api.create_gateway(["time"], configuration={"rate_limit": 1000000})
        url = mcp_url(srv, gw)
        sid = _open_session(url, key)
        loads = [Load(url, key, sid, keep_alive=False), Load(url, key, sid, keep_alive=True)]
        time.sleep(1.0)

        new = _start_upgrade(srv)

        # During the overlap: a session and a gateway made (by whichever process answers).
        time.sleep(1.0)
        late_sid = _open_session(url, key)
        late_gw, late_key = api.create_gateway(["time"], name="made-during-the-upgrade")
        # Both processes accept from the same socket now: each comes to know the new gateway,
        # whichever made it (new connections land on either). Wait for that, then require 20
        # sessions in a row on new connections: a process that never learned it would answer
        # one of them (each lands on either process) with a refusal.
        late_url = mcp_url(srv, late_gw)

        def twenty_in_a_row() -> bool:
            for _ in range(20):
                try:
                    _open_session(late_url, late_key)  # asserts 200 and 202: the gateway is known
                except AssertionError:
                    return False
            return True

        deadline = time.monotonic() + 10  # a guard against a hang, not a promise
        while not twenty_in_a_row():
            assert time.monotonic() < deadline, "a process did not learn the gateway made during the overlap"
            time.sleep(0.1)

        # The old process exits after Pingora's close timeout (5 s) and the grace period (3 s).
        try:
            srv.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            raise AssertionError("the old process did not exit after SIGQUIT") from None
        assert srv.proc.returncode == 0, f"old process exit code {srv.proc.returncode}"
        time.sleep(1.5)  # calls answered by the new process alone
        for load in loads:
            load.finish()
        assert new.poll() is None, (srv.dir / "new.log").read_text()[-3000:]

        for load in loads:
            kind = "kept-alive" if load.keep_alive else "new connection per call"
            assert load.failures == [], f"{kind}: {len(load.failures)} failed calls: {load.failures[:5]}"
            assert load.ok > 50, f"{kind}: only {load.ok} calls"

        # The sessions (the first, made before; the late one, perhaps on the old process) and the
        # gateway made during the overlap are the new process's now.
        for s in (sid, late_sid):
            r = httpx2.post(url, json=dict(CALL, id=99), headers=_headers(key, s), timeout=10)
            assert r.status_code == 200 and '"result"' in r.text, r.text
        deadline = time.monotonic() + 5
        while True:
            r = api.call("GET", f"/v1/gateways/{late_gw}")
            if r.status_code == 200:
                break
            assert time.monotonic() < deadline, f"the gateway made during the upgrade is unknown: {r.text}"
            time.sleep(0.2)
        new_text = (srv.dir / "new.log").read_text()
        assert "records read again" in new_text, new_text[-3000:]
        assert "listener sockets sent" in srv.stderr_text(), srv.stderr_text()[-3000:]
        # Both processes answered calls: the old one before and during the hand-over, the new
        # one after (each writes an access line per call).
        assert srv.stderr_text().count('"route":"gateway"') > 10
        assert new_text.count('"route":"gateway"') > 10, new_text[-2000:]

        # A second process on the same store without --upgrade is refused.
        env = dict(os.environ, TOOLGATE_ADMIN_KEY=srv.admin_key)
        p = subprocess.run([str(toolgate_bin()), "--config", str(srv.config_path)], cwd=srv.dir, env=env,
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 1, p.stderr
        assert "in use by another toolgate process" in p.stderr, p.stderr
    finally:
        _stop_both(srv, new)


def test_an_sse_answer_streaming_from_the_old_process_streams_to_its_end():
    """A `tools/call` answered as an SSE stream (server-everything's long-running operation, 4
    progress events over 4 s) is open on the old process when SIGQUIT comes: every event and the
    result arrive, on the same response, and the old process exits once it has ended."""
    with everything_server() as ev:
        cfg = config(TIME_APP + http_app("everything", ev.url), server="  grace_period_secs: 15\n")
        srv = ToolgateServer(full_config=cfg).start()
        new: subprocess.Popen | None = None
        try:
            api = Api(srv)
            gw, key = api.create_gateway(["everything"])
            url = mcp_url(srv, gw)
            sid = _open_session(url, key)
            r = httpx2.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                            headers=_headers(key, sid), timeout=10)
            assert r.status_code == 200 and "trigger-long-running-operation" in r.text, r.text
            call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
                "name": "trigger-long-running-operation", "arguments": {"duration": 4, "steps": 4},
                "_meta": {"progressToken": "up-1"}}}
            first_event = threading.Event()
            got: dict = {}

            def stream() -> None:
                try:
                    with httpx2.stream("POST", url, json=call, headers=_headers(key, sid), timeout=30) as r:
                        got["status"], got["type"] = r.status_code, r.headers.get("content-type", "")
                        text = ""
                        for chunk in r.iter_text():
                            text += chunk
                            if "notifications/progress" in text:
                                first_event.set()
                        got["text"] = text
                except Exception as e:  # noqa: BLE001 - reported by the assertions below
                    got["error"] = f"{type(e).__name__}: {e}"
                finally:
                    first_event.set()

            t = threading.Thread(target=stream, daemon=True)
            t.start()
            assert first_event.wait(10), "no progress event within 10 s"
            assert "error" not in got, got
            new = _start_upgrade(srv)
            signalled = time.monotonic()
            t.join(30)
            assert not t.is_alive(), "the stream did not end"
            assert "error" not in got, got
            assert got["status"] == 200 and got["type"].startswith("text/event-stream"), got
            msgs = sse_messages(got["text"])
            progress = [m["params"]["progress"] for m in msgs if m.get("method") == "notifications/progress"]
            assert progress == [1, 2, 3, 4], msgs
            assert msgs[-1].get("id") == 7 and "completed" in msgs[-1]["result"]["content"][0]["text"], msgs
            # Idle once the stream has ended: the old process exits well before the 15 s grace.
            srv.proc.wait(timeout=30)
            assert srv.proc.returncode == 0, srv.stderr_text()[-3000:]
            assert time.monotonic() - signalled < 12, "the old process waited out the grace period"
            # The new process serves the session.
            r = httpx2.post(url, json={"jsonrpc": "2.0", "id": 8, "method": "tools/list"},
                            headers=_headers(key, sid), timeout=10)
            assert r.status_code == 200 and "trigger-long-running-operation" in r.text, r.text
            assert new.poll() is None, (srv.dir / "new.log").read_text()[-3000:]
        finally:
            _stop_both(srv, new)


def test_sighup_without_tls_keeps_the_process_running():
    srv = ToolgateServer(full_config=config()).start()
    try:
        os.kill(srv.proc.pid, signal.SIGHUP)
        deadline = time.monotonic() + 5
        while "the configuration file is unchanged" not in srv.stderr_text():
            assert srv.proc.poll() is None, f"SIGHUP ended the process: {srv.stderr_text()[-2000:]}"
            assert time.monotonic() < deadline, srv.stderr_text()[-2000:]
            time.sleep(0.05)
        assert httpx2.get(srv.base_url + "/healthz", timeout=5).status_code == 200
    finally:
        srv.stop()
        srv.tmp.cleanup()

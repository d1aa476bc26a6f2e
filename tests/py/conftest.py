"""Fixtures for Python tests of toolgate (official MCP SDK clients and the like).

`toolgate` gives a running server on OS-chosen ports (see toolgate_harness.py), and
`toolgate_factory` one with extra YAML (`module_toolgate_factory` for a module's tests together);
`time_gateway` a server and a gateway on its `time` app for a module; `mcp_session` opens a
gateway and an MCP session on a server; `node_dir` and `python_peer` locate the peers
installed by tests/run.sh. A missing peer
fails the test with a message saying how to install it: nothing is skipped.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mcp_helpers import (  # noqa: E402
    Api,
    McpHttp,
    config,
    everything_server,
    gateway_session,
    http_app,
    mcp_url,
    start_toolgate,
)
from toolgate_harness import ROOT, ToolgateServer  # noqa: E402


@pytest.fixture
def toolgate():
    """A fresh toolgate with the base config (embedded store, builtin `time` app)."""
    with ToolgateServer() as srv:
        yield srv


def _servers_started_by_make():
    """A `make(extra_yaml=..., full_config=...)` that starts a server, and stops every server it
    started when the fixture built on it ends."""
    started = []

    def make(extra_yaml: str = "", full_config: str | None = None) -> ToolgateServer:
        srv = ToolgateServer(extra_yaml=extra_yaml, full_config=full_config)
        started.append(srv)
        return srv.__enter__()

    yield make
    for srv in started:
        srv.__exit__(None, None, None)


@pytest.fixture
def toolgate_factory():
    """Start servers with extra YAML: `toolgate_factory(extra_yaml="...")`."""
    yield from _servers_started_by_make()


@pytest.fixture(scope="module")
def module_toolgate_factory():
    """`toolgate_factory` for a module's tests together: servers started once per module (a
    module fixture that configures something special builds on it), stopped after its last test."""
    yield from _servers_started_by_make()


@pytest.fixture(scope="module")
def time_gateway(module_toolgate_factory):
    """A toolgate (the `time` app) and a gateway on `time`, shared by a module's tests:
    (server, endpoint URL, the gateway's key)."""
    srv = module_toolgate_factory(full_config=config())
    gw_id, key = Api(srv).create_gateway(["time"])
    return srv, mcp_url(srv, gw_id), key


@pytest.fixture(scope="module")
def everything():
    """(toolgate, its API) with server-everything as the app `everything`, shared by a module's
    tests (a module that needs another set-up defines its own `everything`)."""
    with everything_server() as ev:
        srv = start_toolgate(config(http_app("everything", ev.url)))
        try:
            yield srv, Api(srv)
        finally:
            srv.stop()
            srv.tmp.cleanup()


@pytest.fixture
def mcp_session():
    """`mcp_session(srv, ["time"], configuration={...})`: a new gateway of those apps on `srv` and
    an initialized session on it, as (gateway id, its key, the `McpHttp` client); every client
    opened is closed after the test."""
    opened: list[McpHttp] = []

    def open_session(srv: ToolgateServer, servers: list[str], **gateway) -> tuple[str, str, McpHttp]:
        gw_id, key, c = gateway_session(srv, servers, **gateway)
        opened.append(c)
        return gw_id, key, c

    yield open_session
    for c in opened:
        c.close()


@pytest.fixture(scope="session")
def node_dir() -> Path:
    """tests/node with Node 22 and the MCP peers installed (npm ci)."""
    path = Path(os.environ.get("TOOLGATE_TEST_NODE_DIR", ROOT / "tests" / "node"))
    node = path / "node_modules" / ".bin" / "node"
    if not node.exists():
        pytest.fail(f"Node peers missing ({node}): run tests/run.sh or `npm ci` in {path}")
    return path


@pytest.fixture(scope="session")
def python_peer() -> Path:
    """The venv python that has mcp-server-time and the MCP SDK."""
    return Path(os.environ.get("TOOLGATE_TEST_PYTHON", sys.executable))

"""The console's client set-up runs as shown (issue 60, A.1): a signed-in owner creates a gateway
in the console; the page that shows its key once holds every client's snippet with the real
endpoint and key. The Python snippet runs on the MCP Python SDK 2.x (tests/py/.venv) and the
TypeScript one on the official SDK (tests/node), each as the page shows it, against the live
gateway; the JSON blocks have each client's own shape (Cursor's and Claude Desktop's
`mcpServers`, VS Code's `servers` with `type: "http"`), and Claude Code's and the Inspector's
command lines split into the words their CLIs take. The gateway's own page shows the same
snippets with a placeholder instead of the key (which is shown once)."""

from __future__ import annotations

import html
import json
import os
import re
import shlex
import subprocess
from pathlib import Path

from mcp_helpers import TIME_APP, config, on_port, start_on_a_chosen_port
from test_web_signin import Browser, set_password
from toolgate_harness import ROOT

PASSWORD = "console snippets passphrase"
PLACEHOLDER = "<your gateway key>"


def signed_in_owner(srv) -> Browser:
    """A browser signed in as the owner (the user of TOOLGATE_ADMIN_KEY)."""
    assert set_password(srv, PASSWORD).status_code == 200
    b = Browser(srv)
    assert b.sign_in("owner@localhost", PASSWORD).status_code == 303
    return b


def snippets(page: str) -> dict[str, str]:
    """Each `<code id="setup-<id>">` of a page, unescaped: what the copy button copies."""
    found = {m[0]: html.unescape(m[1]) for m in re.findall(r'<code id="setup-([a-z-]+)">(.*?)</code>', page, re.S)}
    assert found, page
    return found


def run_python(code: str, work: Path) -> str:
    venv = Path(os.environ.get("TOOLGATE_TEST_VENV", ROOT / "tests" / "py" / ".venv"))
    (work / "client.py").write_text(code)
    p = subprocess.run([str(venv / "bin" / "python3"), "client.py"], cwd=work, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"the Python snippet failed:\n{code}\n{p.stdout}\n{p.stderr}"
    return p.stdout


def run_typescript(code: str, work: Path, node_dir: Path) -> str:
    node = Path(os.environ.get("TOOLGATE_TEST_NODE", node_dir / "node_modules" / ".bin" / "node"))
    (work / "node_modules").symlink_to(node_dir / "node_modules")
    (work / "client.mjs").write_text(code)
    p = subprocess.run([str(node), "client.mjs"], cwd=work, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"the TypeScript snippet failed:\n{code}\n{p.stdout}\n{p.stderr}"
    return p.stdout


def check_json_shapes(s: dict[str, str], endpoint: str, key: str, name: str) -> None:
    cursor = json.loads(s["cursor"])
    assert list(cursor) == ["mcpServers"], cursor
    assert cursor["mcpServers"] == {name: {"url": endpoint, "headers": {"X-API-Key": key}}}, cursor
    vscode = json.loads(s["vscode"])
    assert list(vscode) == ["servers"], f"VS Code's mcp.json has `servers`: {vscode}"
    assert vscode["servers"] == {name: {"type": "http", "url": endpoint, "headers": {"X-API-Key": key}}}, vscode
    desktop = json.loads(s["claude-desktop"])
    assert list(desktop) == ["mcpServers"], desktop
    assert desktop["mcpServers"][name] == {
        "command": "npx", "args": ["-y", "mcp-remote", endpoint, "--header", f"X-API-Key:{key}"]
    }, desktop
    assert shlex.split(s["claude-code"]) == [
        "claude", "mcp", "add", "--transport", "http", name, endpoint, "--header", f"X-API-Key: {key}"
    ], s["claude-code"]
    # A backslash at a line's end continues the line, as the shell reads it.
    assert shlex.split(s["inspector"].replace("\\\n", "")) == [
        "npx", "@modelcontextprotocol/inspector", "--cli", endpoint, "--transport", "http",
        "--header", f"X-API-Key: {key}", "--method", "tools/list",
    ], s["inspector"]


def test_every_snippet_of_a_new_gateway_runs_as_shown_with_its_key(node_dir, tmp_path):
    srv = start_on_a_chosen_port(lambda port: on_port(config(TIME_APP), port))
    try:
        b = signed_in_owner(srv)
        csrf = b.form_csrf("/auth/console/gateways")
        made = b.request("POST", "/auth/console/gateways", data={"csrf": csrf, "name": "Snippet tools", "servers": "time"})
        assert made.status_code == 200, made.text
        key = html.unescape(re.search(r'<code id="secret">(ag_[^<]+)</code>', made.text).group(1))
        gateway = re.search(r'/auth/console/gateways/(gw_[A-Za-z0-9_-]+)"', made.text).group(1)
        endpoint = f"{srv.base_url}/gateway/{gateway}/mcp"
        shown = snippets(made.text)
        assert set(shown) == {"claude-code", "cursor", "vscode", "claude-desktop", "inspector", "python", "typescript"}
        for name, text in shown.items():
            assert key in text and PLACEHOLDER not in text, f"{name} has the real key: {text}"

        python = run_python(shown["python"], tmp_path)
        assert python.startswith("python sdk: [") and "'get_current_time'" in python, python
        typescript = run_typescript(shown["typescript"], tmp_path, node_dir)
        assert typescript.startswith("typescript sdk: [") and "'get_current_time'" in typescript, typescript
        check_json_shapes(shown, endpoint, key, "snippet-tools")

        # The gateway's page: the same snippets, the key a placeholder (it was shown once).
        page = b.request("GET", f"/auth/console/gateways/{gateway}")
        assert page.status_code == 200 and key not in page.text
        assert snippets(page.text) == {n: t.replace(key, PLACEHOLDER) for n, t in shown.items()}
    finally:
        srv.stop()
        srv.tmp.cleanup()

"""The README's five-minute tour, run as written against the real binary.

The shell block after `<!-- tour -->` runs in bash, in a directory holding the Python block after
`<!-- tour: python -->` as `tour.py`, with `python3` resolving to the test venv's Python (which
has the official MCP SDK, as `pip install mcp` would give a reader); then the TypeScript SDK's
snippet (`<!-- client: typescript -->`, its `gw_...` and `ag_...` filled in) runs with Node against the same gateway, with tests/node's
packages as `npm install @modelcontextprotocol/sdk` would give a reader. toolgate runs on the shipped
`conf/toolgate.yaml`, changed only to listen on ephemeral ports and keep its store in a temporary
directory; the tour's key is the one the first start prints, as the README tells a newcomer.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
from pathlib import Path

from toolgate_harness import ROOT, ToolgateServer

README = ROOT / "README.md"


def block_after(marker: str, text: str) -> str:
    found = re.search(re.escape(marker) + r"\n```[a-z]*\n(.*?)```", text, re.S)
    assert found, f"README.md has no fenced block after {marker}"
    return found.group(1)


def shipped_config(data_dir: Path) -> str:
    """conf/toolgate.yaml with ephemeral listeners and a temporary store, nothing else changed."""
    text = (ROOT / "conf" / "toolgate.yaml").read_text()
    for line, new in [
        ("  listen: 0.0.0.0:8080", "  listen: 127.0.0.1:0"),
        ("  metrics_listen: 127.0.0.1:9090", "  metrics_listen: 127.0.0.2:0"),
        ("  path: ./data", f"  path: {data_dir}"),
    ]:
        assert re.search(r"^" + re.escape(line) + r"\b", text, re.M), f"conf/toolgate.yaml has no `{line}`"
        text = re.sub(r"^" + re.escape(line) + r"\b", new, text, count=1, flags=re.M)
    return text


def first_start_key(srv: ToolgateServer) -> str:
    said = re.search(r"created the owner API key \(shown once, store it now\): (ag_\S+)", srv.stderr_text())
    assert said, f"the first start printed no owner key:\n{srv.stderr_text()[-2000:]}"
    return said.group(1)


def paste(work: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-euo", "pipefail", "tour.sh"], cwd=work, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_readme_tour_runs_as_written_and_can_be_pasted_again(tmp_path):
    utc_date = lambda: datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")  # noqa: E731
    dates = {utc_date()}
    text = README.read_text()
    shell = block_after("<!-- tour -->", text)
    python = block_after("<!-- tour: python -->", text)
    typescript = block_after("<!-- client: typescript -->", text)
    data = tmp_path / "data"
    data.mkdir()
    # An empty TOOLGATE_ADMIN_KEY is no key: the first start makes one and prints it.
    srv = ToolgateServer(full_config=shipped_config(data), env={"TOOLGATE_ADMIN_KEY": ""})
    with srv:
        key = first_start_key(srv)
        work = tmp_path / "tour"
        work.mkdir()
        (work / "tour.sh").write_text(shell)
        (work / "tour.py").write_text(python)
        venv_bin = Path(os.environ.get("TOOLGATE_TEST_VENV", ROOT / "tests" / "py" / ".venv")) / "bin"
        assert (venv_bin / "python3").exists(), f"no python3 in {venv_bin}: run tests/run.sh"
        env = {k: v for k, v in os.environ.items() if k not in ("TG", "KEY", "GW", "GW_KEY")}
        env.update(TG=srv.base_url, KEY=key, PATH=f"{venv_bin}:{env.get('PATH', '')}")
        run = paste(work, env)
        assert run.returncode == 0, f"the tour failed ({run.returncode}):\n{run.stdout}\n{run.stderr}"
        lines = run.stdout.splitlines()
        kept = (work / "gateway.json").read_bytes()
        # Pasted again, the block reuses its gateway: same id and key, gateway.json untouched.
        again = paste(work, env)
        assert again.returncode == 0, f"the tour pasted twice failed:\n{again.stdout}\n{again.stderr}"
        assert (work / "gateway.json").read_bytes() == kept, "a second paste overwrote gateway.json"
        assert again.stdout.splitlines()[0] == lines[0] and len(again.stdout.splitlines()) == 3, again.stdout
        # With gateway.json gone the name is taken: the answer is shown, nothing runs on an empty id,
        # and no file is left that a next paste would mistake for a gateway.
        (work / "gateway.json").rename(work / "gateway.kept.json")
        taken = paste(work, env)
        assert taken.returncode == 0, f"{taken.stdout}\n{taken.stderr}"
        assert taken.stdout.startswith("no gateway was made; toolgate answered:\n"), taken.stdout
        assert '"code":"CONFLICT"' in taken.stdout.replace(" ", ""), taken.stdout
        assert "Traceback" not in taken.stdout + taken.stderr and "python sdk" not in taken.stdout, taken
        assert not (work / "gateway.json").exists()
        (work / "gateway.kept.json").rename(work / "gateway.json")
        # The TypeScript SDK's snippet, against the tour's gateway.
        created = json.loads((work / "gateway.json").read_text())
        node_dir = Path(os.environ.get("TOOLGATE_TEST_NODE_DIR", ROOT / "tests" / "node"))
        node = Path(os.environ.get("TOOLGATE_TEST_NODE", node_dir / "node_modules" / ".bin" / "node"))
        assert node.exists(), f"no Node at {node}: run tests/run.sh"
        (work / "node_modules").symlink_to(node_dir / "node_modules")
        endpoint = f"{srv.base_url}/gateway/{created['data']['id']}/mcp"
        filled = typescript.replace("http://localhost:8080/gateway/gw_.../mcp", endpoint)
        (work / "sdk.mjs").write_text(filled.replace('"ag_..."', json.dumps(created["data"]["api_key"])))
        ts = subprocess.run([str(node), "sdk.mjs"], cwd=work, env=env, capture_output=True, text=True, timeout=60)
        assert ts.returncode == 0, f"the TypeScript snippet failed ({ts.returncode}):\n{ts.stdout}\n{ts.stderr}"
    dates.add(utc_date())  # a run across midnight may see either day

    # 1. The gateway was created, and its answer kept its id and its key.
    created = json.loads((work / "gateway.json").read_text())
    assert created["success"] is True, created
    gw, gw_key = created["data"]["id"], created["data"]["api_key"]
    assert lines[0] == f"gateway {gw}: {srv.base_url}/gateway/{gw}/mcp", lines
    assert gw.startswith("gw_") and gw_key.startswith("ag_"), created
    # 2. curl's call answered with the tool's result: today's date, in UTC.
    answer = json.loads(lines[1])
    assert answer["id"] == 1 and answer["result"]["resultType"] == "complete", answer
    assert answer["result"].get("isError") in (None, False), answer
    assert answer["result"]["content"] == [{"type": "text", "text": answer["result"]["content"][0]["text"]}], answer
    assert answer["result"]["content"][0]["text"] in dates, answer
    # 3. The Python SDK made the same call.
    assert re.fullmatch(r"python sdk: \d{4}-\d{2}-\d{2}", lines[2]), lines
    assert lines[2].removeprefix("python sdk: ") in dates, lines
    assert len(lines) == 3, lines
    # 4. The TypeScript SDK too.
    assert ts.stdout.startswith("typescript sdk: [") and "'get_current_time'" in ts.stdout, ts.stdout


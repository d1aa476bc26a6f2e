"""The guides of docs/guides/, run as written against the real binary.

A guide marks what a test runs: the block after `<!-- guide: file NAME -->` is saved as NAME in the
guide's directory (`toolgate.yaml` is the configuration its toolgate runs on, and `toolgate
check-config` must accept it as written), and the blocks after `<!-- guide: run -->` run in
order, in one `bash -euo pipefail`, in that directory, which also holds the repository's `docs/`,
`conf/` and `deploy/` (a reader runs them from a clone's root). The environment is the reader's:
`TG` and `METRICS`, toolgate's two listeners, `KEY` its owner key, and on `PATH` `toolgate` and
the test venv's Python programs (`mcp-server-time`, `kubernetes-validate`). toolgate runs on the
guide's file changed only to listen on ephemeral ports and keep its store in a temporary
directory, and to reach the peers each test starts (an MCP server, an OpenID provider, Redis) where
the guide names an address of the reader's. Each test then checks what the blocks printed.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
from pathlib import Path

from mcp_helpers import everything_server
from test_app_oauth import provider
from test_redis_scaleout import SECRET, redis_server
from toolgate_harness import ROOT, ToolgateServer, random_key, toolgate_bin

GUIDES = ROOT / "docs" / "guides"


def blocks(guide: str) -> tuple[dict[str, str], str]:
    """The guide's files by name, and its run blocks joined in order."""
    text = (GUIDES / guide).read_text()
    files = dict(re.findall(r"<!-- guide: file (\S+) -->\n```[a-z]*\n(.*?)```", text, re.S))
    runs = re.findall(r"<!-- guide: run -->\n```sh\n(.*?)```", text, re.S)
    assert runs, f"docs/guides/{guide} has no `<!-- guide: run -->` block"
    return files, "\n".join(runs)


def local(config: str, data: Path, **peers: str) -> str:
    """The guide's configuration on ephemeral ports and a temporary store, with the reader's
    addresses of peers replaced by the test's (`peers`: each given text must be in the file)."""
    swaps = [
        (r"^(\s*)listen: 0\.0\.0\.0:8080\b", r"\g<1>listen: 127.0.0.1:0"),
        (r"^(\s*)metrics_listen: [0-9.]+:9090\b", r"\g<1>metrics_listen: 127.0.0.2:0"),
        (r"^(\s*)path: (\./data|/var/lib/toolgate)\b", rf"\g<1>path: {data}"),
    ]
    for pattern, new in swaps:
        if "path" in pattern and "backend: redis" in config:
            continue
        assert re.search(pattern, config, re.M), f"the guide's configuration has no line matching {pattern}"
        config = re.sub(pattern, new, config, count=1, flags=re.M)
    for old, new in peers.items():
        assert old in config, f"the guide's configuration does not name {old}"
        config = config.replace(old, new)
    return config


def check_config(path: Path, env: dict[str, str]) -> None:
    run = subprocess.run([str(toolgate_bin()), "check-config", str(path)], capture_output=True, text=True,
                         env={**os.environ, **env}, timeout=60)
    assert run.returncode == 0, f"check-config refused {path.name}:\n{run.stdout}{run.stderr}"


def workdir(tmp_path: Path, files: dict[str, str]) -> Path:
    """The reader's directory: the repository's docs/, conf/ and deploy/, and the guide's files."""
    work = tmp_path / "guide"
    work.mkdir()
    for name in ("docs", "conf", "deploy"):
        (work / name).symlink_to(ROOT / name)
    for name, text in files.items():
        (work / name).write_text(text)
    return work


def reader_path() -> str:
    """The reader's PATH: `toolgate`, and the programs `pip install` gives (mcp-server-time, ...)."""
    venv_bin = Path(os.environ.get("TOOLGATE_TEST_VENV", ROOT / "tests" / "py" / ".venv")) / "bin"
    return f"{toolgate_bin().parent}:{venv_bin}:{os.environ['PATH']}"


def run(work: Path, script: str, env: dict[str, str]) -> list[str]:
    """The guide's run blocks, in bash, as a reader pastes them; their output's lines."""
    (work / "guide.sh").write_text(script)
    full = {k: v for k, v in os.environ.items() if not k.startswith(("TG", "KEY", "GW", "METRICS"))}
    full.update(env, PATH=reader_path())
    done = subprocess.run(["bash", "-euo", "pipefail", "guide.sh"], cwd=work, env=full, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, f"the guide's blocks failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done.stdout.splitlines()


def said(out: list[str]) -> dict[str, str]:
    """The `what: value` lines a guide printed, by `what`."""
    return dict(line.split(": ", 1) for line in out if ": " in line)


def reader_env(srv: ToolgateServer) -> dict[str, str]:
    return {"TG": srv.base_url, "KEY": srv.admin_key, "METRICS": f"http://{srv.metrics_addr}"}


def one_toolgate(tmp_path: Path, guide: str, env: dict[str, str] | None = None, config: str | None = None,
                 plain_http_peer: bool = False, **peers: str) -> list[str]:
    """Runs `guide` against one toolgate on its `toolgate.yaml` (or on `config`, or the harness's
    usual one for a guide that has none); the blocks' output lines. `plain_http_peer`: a peer the
    guide names by an https URL is the test's on plain http, which only `environment:
    development` allows."""
    files, script = blocks(guide)
    data = tmp_path / "data"
    data.mkdir()
    env = {**(env or {}), "PATH": reader_path()}
    if config is None and "toolgate.yaml" in files:
        as_written = tmp_path / "as-written.yaml"
        as_written.write_text(files["toolgate.yaml"])
        check_config(as_written, env)
        config = files["toolgate.yaml"]
    if config is not None:
        config = local(config, data, **peers)
        if plain_http_peer:
            config = "environment: development\n" + config
        files["toolgate.yaml"] = config
    work = workdir(tmp_path, files)
    with ToolgateServer(full_config=config, env=env) as srv:
        return run(work, script, reader_env(srv))


def test_add_an_mcp_server_over_http_and_stdio(tmp_path):
    with everything_server(tmp_path) as everything:
        out = one_toolgate(tmp_path, "add-an-mcp-server.md", **{"http://127.0.0.1:3001/mcp": everything.url})
    assert out[0] == "toolgate.yaml: ok", out
    assert "everything: Everything" in out and "clock: Clock" in out, out
    endpoint = [line for line in out if line.startswith("endpoint: ")]
    assert len(endpoint) == 1 and re.fullmatch(r"endpoint: http://localhost:8080/gateway/gw_\w+/mcp", endpoint[0]), out
    tools = out[out.index(endpoint[0]) + 1:-2]
    assert tools == ["clock__convert_time", "clock__get_current_time", "everything__echo"], out
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT21:00:00\+09:00", out[-2]), out
    assert out[-1] == "Echo: hello through toolgate", out


def test_sign_users_in_with_sso(tmp_path):
    callback = "http://localhost:8080/auth/callback/acme"
    with provider(tmp_path, signin_redirect=callback) as (issuer, secret):
        out = one_toolgate(tmp_path, "sso.md", env={"ACME_OIDC_SECRET": secret}, plain_http_peer=True,
                           **{"https://login.acme.example": issuer})
    assert "Sign in with Acme SSO" in out, out
    (to,) = [line for line in out if line.startswith("303 ")]
    assert to.startswith(f"303 {issuer}/"), (to, issuer)
    for asked in ("client_id=toolgate-signin", "code_challenge_method=S256", "redirect_uri=http%3A%2F%2Flocalhost"
                  "%3A8080%2Fauth%2Fcallback%2Facme"):
        assert asked in to, to


def test_restrict_tools_per_team_with_rules(tmp_path):
    out = one_toolgate(tmp_path, "rules.md")
    teams = said(out)
    assert teams["support sees"] == "clock__get_current_time time__get_current_time", out
    assert teams["finance sees"] == "clock__convert_time clock__get_current_time time__get_current_time", out
    assert teams["support converts"] == "-32012 Tool call denied by rule `support-no-conversions`", out
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT21:00:00\+09:00", teams["finance converts"]), out


def test_approve_tool_changes(tmp_path):
    out = one_toolgate(tmp_path, "tool-changes.md")
    review = said(out)
    assert review["served before review"] == "", out
    assert review["pending"] == "time get_current_time added", out
    assert review["decision"] == "approved", out
    assert review["served after review"] == "get_current_time", out
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", review["today"]), out


def test_run_three_instances_on_redis(tmp_path):
    files, script = blocks("redis.md")
    admin = random_key()
    env = {"TOOLGATE_SECRET_KEY": SECRET}
    as_written = tmp_path / "as-written.yaml"
    as_written.write_text(files["toolgate.yaml"])
    check_config(as_written, env)
    with redis_server() as redis:
        config = local(files["toolgate.yaml"], tmp_path, **{"redis://127.0.0.1:6379/0": redis.url})
        config = config.replace("key_prefix: toolgate", f"key_prefix: tg{secrets.token_hex(3)}")
        work = workdir(tmp_path, {**files, "toolgate.yaml": config})
        servers = [ToolgateServer(full_config=config, admin_key=admin, env=env) for _ in range(3)]
        try:
            for srv in servers:
                srv.start()
            reader = {f"TG{i + 1}": srv.base_url for i, srv in enumerate(servers)}
            out = run(work, script, {**reader, "KEY": admin})
        finally:
            for srv in servers:
                srv.stop()
                srv.tmp.cleanup()
    shared = said(out)
    assert re.fullmatch(r"gw_\w+", shared["made on 1"]), out
    assert shared["seen on 3"] == shared["made on 1"], out
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", shared["called through 2"]), out
    assert shared["revoked on 2, then on 1"] == "401", out


def test_run_on_kubernetes(tmp_path):
    """The guide probes toolgate as the single-instance manifests configure it (their ConfigMap's
    file), and validates the manifests offline."""
    import yaml

    (configmap,) = yaml.safe_load_all((ROOT / "deploy/kubernetes/single/config.yaml").read_text())
    out = one_toolgate(tmp_path, "kubernetes.md", env={"TOOLGATE_SECRET_KEY": SECRET},
                       config=configmap["data"]["toolgate.yaml"])
    assert out[:2] == ['{"status":"ok"}', '{"status":"ready"}'], out
    validated = out[2:]
    manifests = sorted((ROOT / "deploy" / "kubernetes").glob("*/*.yaml"))
    assert len(manifests) == 11 and len(validated) == len(manifests), (validated, manifests)
    crds = ("servicemonitor.yaml", "prometheusrule.yaml")
    for line in validated:
        if line.split()[1].endswith(crds):
            assert line.startswith("WARN ") and "Couldn't find schema" in line, line
        else:
            assert line.startswith("INFO ") and " passed for resource " in line, line


def test_monitor_with_prometheus_and_grafana(tmp_path):
    out = one_toolgate(tmp_path, "monitoring.md")
    said = "\n".join(out)
    assert "SUCCESS: prometheus.yml is valid prometheus config file syntax" in said, said
    assert "SUCCESS: 1 rule files found" in said and said.count("SUCCESS") >= 3, said
    assert re.search(r'^toolgate_requests_total\{[^}]*route="health"[^}]*\} [1-9]', said, re.M), said
    assert re.search(r'^toolgate_build_info\{', said, re.M), said

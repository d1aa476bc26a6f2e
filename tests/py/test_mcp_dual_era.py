"""An app of both eras behind toolgate: nothing a client gets directly may be lost through it.

`conformance_dual_app.py` (the official Python SDK's `MCPServer`) answers `initialize` and
`server/discover` at one URL, naming only 2026-07-28 in `supportedVersions`, as the conformance
suite's own reference server does. The conformance suite 0.2.0-alpha.12 (`conformance-2026` in
tests/node) runs `--requirements 2025-11-25` and `--requirements 2026-07-28` against it directly
and through a one-app gateway: for each revision, scenario by scenario, every check that passes
directly must pass through toolgate (or be told `INFO`, the suite's "does not apply to this answer",
as an SSE check of a list toolgate answers in JSON is). A handshake-era client keeps sampling, elicitation and
subscriptions only if toolgate speaks to the app in the client's era; a 2026-07-28 client reaches
it statelessly.
"""

from __future__ import annotations

from collections import Counter

import pytest

from mcp_helpers import NODE_DIR, gateway_for_suites, passes, python_app, suite_2026_run

REVISIONS = ["2025-11-25", "2026-07-28"]

# The required scenarios the dual-era app does not pass directly, by name: the handshake
# revision's whole set passes; of the stateless one, what the SDK's server does not do.
NOT_PASSED_DIRECTLY = {
    "2025-11-25": set(),
    "2026-07-28": {"input-required-result-non-tool-request"},
}


def required_scenarios(revision: str) -> list[str]:
    """The server scenarios a revision requires (the suite's frozen requirement set)."""
    path = NODE_DIR / "node_modules" / "conformance-2026" / "requirements" / f"{revision}.yaml"
    if not path.exists():
        raise AssertionError(f"conformance suite 0.2.0-alpha.12 missing at {path}: run `npm ci` in {NODE_DIR}")
    section = path.read_text().split("\nserver:\n", 1)[1].split("\n\n", 1)[0]
    return [line.strip()[2:] for line in section.splitlines() if line.strip().startswith("- ")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{revision: (direct results, results through toolgate)}, each scenario -> [checks]."""
    out = tmp_path_factory.mktemp("dual-era")
    direct, through = {}, {}
    with python_app("conformance_dual_app.py", out / "app.log") as addr:
        port = addr.rsplit(":", 1)[1]
        for revision in REVISIONS:
            direct[revision], _ = suite_2026_run(
                f"http://localhost:{port}/mcp", out / revision / "direct", "--requirements", revision)
        with gateway_for_suites("dual", f"http://{addr}/mcp", out, name="Dual-era app") as (url, _, _):
            for revision in REVISIONS:
                through[revision], _ = suite_2026_run(url, out / revision / "toolgate", "--requirements", revision)
    return {r: (direct[r], through[r]) for r in REVISIONS}


def succeeded(checks: list) -> Counter:
    return Counter(c.get("id") for c in checks if c.get("status") == "SUCCESS")


def held(checks: list) -> Counter:
    """Checks that did not fail: passed, or told `INFO` (the suite's word for a check that does
    not apply to the answer given, e.g. an SSE check of a call answered in JSON, which MCP
    allows)."""
    return Counter(c.get("id") for c in checks if c.get("status") in ("SUCCESS", "INFO"))


@pytest.mark.timeout(900)
@pytest.mark.parametrize("revision", REVISIONS)
def test_every_check_a_dual_era_app_passes_directly_passes_through_toolgate(runs, revision):
    direct, through = runs[revision]
    required = required_scenarios(revision)
    passing = [s for s in required if passes(direct.get(s, []))]
    # A pinned set, not a floor: a scenario that starts failing directly (the comparison got
    # weaker) and one that starts passing (take it off the pin) both show here.
    failing = set(required) - set(passing)
    assert failing == NOT_PASSED_DIRECTLY[revision], (
        f"the dual-era app fails directly: {sorted(failing)}; pinned: {sorted(NOT_PASSED_DIRECTLY[revision])}")
    lost = {}
    for scenario in required:
        missing = succeeded(direct.get(scenario, [])) - held(through.get(scenario, []))
        if missing:
            lost[scenario] = [
                f"{c.get('id')}: {c.get('errorMessage')}"
                for c in through.get(scenario, []) if c.get("status") not in ("SUCCESS", "INFO")
            ] or [f"{name}: no such check through toolgate" for name in missing]
    through_passing = [s for s in required if passes(through.get(s, []))]
    assert not lost, (
        f"{revision}: {len(passing)} scenarios pass directly, {len(through_passing)} through toolgate; "
        f"lost through toolgate: {lost}")
    assert set(passing) <= set(through_passing), sorted(set(passing) - set(through_passing))

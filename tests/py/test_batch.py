"""`POST /batch` (issue 16): operations run in order, each checked as if sent alone; the batch
costs 1 + 0.5 per operation, charged before any runs."""

from __future__ import annotations

import httpx2
import pytest

from mcp_helpers import TIME_APP, config

# A tier whose global bucket holds 10 and refills one a second: costs are counted exactly.
TINY = ("rate_limits:\n  tiers:\n"
        "    tiny: { requests_per_hour: unlimited, requests_per_minute: 60, burst: 10, concurrent: 5 }\n"
        "limits:\n  bootstrap_tier: tiny\n")


@pytest.fixture
def srv(toolgate_factory):
    """A toolgate whose bootstrap tier is TINY (conftest's factory stops it after the test)."""
    return toolgate_factory(full_config=config(TIME_APP) + TINY)


def post(srv, path, body, key=None):
    return httpx2.post(srv.base_url + path, json=body, timeout=30,
                       headers={"Authorization": f"Bearer {key or srv.admin_key}"})


def test_operations_run_in_order_each_as_if_sent_alone(srv):
    ops = [
        {"method": "POST", "path": "/v1/gateways", "body": {"name": "from-a-batch", "servers": ["time"]}},
        {"method": "GET", "path": "/api/v1/gateways?limit=5"},
        {"method": "GET", "path": "/v1/gateways/gw_nonexistent"},
        {"method": "POST", "path": "/v1/gateways", "body": {"name": "from-a-batch", "servers": ["time"]}},
        {"method": "PUT", "path": "/v1/gateways"},
        {"method": "POST", "path": "/v1/batch", "body": {"operations": []}},
        {"method": "GET", "path": "/v1/nowhere"},
    ]
    r = post(srv, "/v1/batch", {"operations": ops})
    assert r.status_code == 200, r.text
    results = r.json()["data"]["results"]
    assert [x["status"] for x in results] == [201, 200, 404, 409, 400, 400, 404], results
    assert results[0]["data"]["name"] == "from-a-batch" and results[0]["success"] is True
    # The second operation saw the first one's gateway.
    assert any(g["name"] == "from-a-batch" for g in results[1]["data"]["gateways"]), results[1]
    assert results[3]["error"]["code"] == "CONFLICT" and results[5]["success"] is False, results


def test_each_operation_is_checked_against_the_batch_s_credential(srv):
    r = post(srv, "/v1/api-keys", {"name": "reader", "scopes": ["gateways:read"]})
    reader = r.json()["data"]["key"]
    ops = [{"method": "GET", "path": "/v1/gateways"},
           {"method": "POST", "path": "/v1/gateways", "body": {"name": "not-allowed", "servers": ["time"]}}]
    results = post(srv, "/v1/batch", {"operations": ops}, key=reader).json()["data"]["results"]
    assert [x["status"] for x in results] == [200, 403], results
    assert results[1]["error"]["code"] == "INSUFFICIENT_SCOPE", results


def test_a_batch_costs_one_and_a_half_per_operation_charged_before_it_runs(srv):
    too_many = {"operations": [{"method": "GET", "path": "/v1/gateways"}] * 21}
    r = post(srv, "/v1/batch", too_many)
    assert r.status_code == 400 and r.json()["error"]["details"]["field"] == "operations", r.text
    # The refusal cost 1 (as any request); 16 operations cost 1 + 8 = 9: the rest of the bucket,
    # so the next request is refused.
    ops = [{"method": "GET", "path": "/v1/gateways"}] * 16
    r = post(srv, "/v1/batch", {"operations": ops})
    assert r.status_code == 200 and len(r.json()["data"]["results"]) == 16, r.text
    assert r.headers["x-ratelimit-remaining"] == "0", dict(r.headers)
    r = httpx2.get(srv.base_url + "/v1/gateways", headers={"Authorization": f"Bearer {srv.admin_key}"}, timeout=30)
    assert r.status_code == 429, r.text


def test_a_batch_the_bucket_cannot_pay_for_runs_nothing(srv):
    # 20 creations cost 1 + 10 = 11 > 10: refused before any runs.
    ops = [{"method": "POST", "path": "/v1/gateways", "body": {"name": f"g{i}", "servers": ["time"]}} for i in range(20)]
    r = post(srv, "/v1/batch", {"operations": ops})
    assert r.status_code == 429, r.text
    import time
    time.sleep(2.1)
    gws = httpx2.get(srv.base_url + "/v1/gateways", headers={"Authorization": f"Bearer {srv.admin_key}"}, timeout=30)
    assert gws.status_code == 200 and gws.json()["data"]["gateways"] == [], gws.text

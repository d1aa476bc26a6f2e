//! The metrics listener as an operator sees it: a real Prometheus (Debian package `prometheus`)
//! scrapes a real toolgate every second, a known workload runs through a gateway, and PromQL over
//! Prometheus's HTTP API gives back the workload's numbers. `promtool` checks the exposition, the
//! alert rules (`conf/prometheus/alerts.yml`, with their unit tests) and the Grafana dashboard's
//! queries (`conf/grafana/toolgate.json`: each parses and names a series toolgate exposes).

use crate::api_logs::call_time;
use crate::common::{declared_key, Peer, TestServer};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn tool(name: &str) -> String {
    for dir in ["/usr/bin", "/usr/local/bin", "/usr/sbin"] {
        let p = Path::new(dir).join(name);
        if p.exists() {
            return p.display().to_string();
        }
    }
    panic!("`{name}` is missing: install the Debian package `prometheus` (tests/run.sh does)")
}

fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// A Prometheus scraping `srv`'s metrics listener every second, on an OS-chosen port.
fn start_prometheus(srv: &TestServer) -> (Peer, tempfile::TempDir) {
    let conf = tempfile::Builder::new().prefix("toolgate-prom-conf-").tempdir().expect("tempdir");
    let yml = conf.path().join("prometheus.yml");
    std::fs::write(
        &yml,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: toolgate\n    static_configs:\n      - targets: ['{}']\n",
            repo_file("conf/prometheus/alerts.yml").display(),
            srv.metrics_addr()
        ),
    )
    .expect("write prometheus.yml");
    let mut cmd = Command::new(tool("prometheus"));
    cmd.arg(format!("--config.file={}", yml.display()))
        .arg(format!("--storage.tsdb.path={}", conf.path().join("data").display()))
        .arg("--web.listen-address=127.0.0.1:0");
    (Peer::spawn("prometheus", cmd), conf)
}

/// The result of an instant PromQL query (`data.result`), or the error Prometheus gave.
fn query(prom: &Peer, promql: &str) -> Result<Vec<Value>, String> {
    let r = reqwest::blocking::Client::new()
        .get(format!("http://127.0.0.1:{}/api/v1/query", prom.port))
        .query(&[("query", promql)])
        .send()
        .map_err(|e| format!("query {promql}: {e}"))?;
    let body: Value = r.json().map_err(|e| format!("query {promql}: {e}"))?;
    if body["status"] != "success" {
        return Err(format!("query {promql}: {body}"));
    }
    Ok(body["data"]["result"].as_array().cloned().unwrap_or_default())
}

/// The value of a query whose result is one sample, if it has one; an error while Prometheus
/// cannot answer (it answers 503 in plain text until its storage has started).
fn try_scalar(prom: &Peer, promql: &str) -> Result<Option<f64>, String> {
    let result = query(prom, promql)?;
    Ok(match result.as_slice() {
        [one] => one["value"][1].as_str().and_then(|v| v.parse().ok()),
        _ => None,
    })
}

/// [`try_scalar`] once Prometheus is known to answer.
fn scalar(prom: &Peer, promql: &str) -> Option<f64> {
    try_scalar(prom, promql).unwrap_or_else(|e| panic!("{e}"))
}

/// Waits until `promql` is `want` in Prometheus (it scrapes every second); errors while it
/// starts are waited out like a missing sample.
fn wait_for(prom: &Peer, promql: &str, want: f64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = Ok(None);
    while Instant::now() < deadline {
        last = try_scalar(prom, promql);
        if last == Ok(Some(want)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!("{promql}: want {want}, Prometheus has {last:?}\n{}", prom.logs_for_humans());
}

/// Metric families toolgate exposes (`# TYPE` lines of its exposition).
fn families(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .map(String::from)
        .collect()
}

/// The metric names in a PromQL expression that toolgate would expose (`mcp_*`, `toolgate_*`),
/// as family names (`_bucket`, `_count`, `_sum` removed); label names (in matchers and in
/// `by (...)` / `without (...)`) are not metric names.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let (mut word, mut grouping_next, mut in_grouping) = (String::new(), false, false);
    for c in expr.chars().chain([' ']) {
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            word.push(c);
            continue;
        }
        let is_label = in_grouping || matches!(c, '=' | '!' | '~');
        if !is_label && (word.starts_with("mcp_") || word.starts_with("toolgate_")) {
            let family = ["_bucket", "_count", "_sum"].iter().find_map(|s| word.strip_suffix(s)).unwrap_or(&word);
            names.insert(family.to_string());
        }
        if !word.is_empty() {
            grouping_next = word == "by" || word == "without";
        }
        match c {
            '(' if grouping_next => in_grouping = true,
            ')' => in_grouping = false,
            _ => {}
        }
        if !c.is_whitespace() {
            grouping_next = grouping_next && c == '(';
        }
        word.clear();
    }
    names
}

#[test]
fn prometheus_scrapes_toolgate_and_promql_gives_back_the_workload() {
    let (tiny_key, tiny_yaml) = declared_key("key_tiny", "usr_tiny", &["*"]);
    let srv = TestServer::start(&format!(
        "rate_limits:\n  tiers:\n    tiny: {{ requests_per_hour: 1000, requests_per_minute: 6, burst: 5, concurrent: 5 }}\n\
         organizations:\n  - {{ id: org_tiny, name: Tiny, tier: tiny }}\n\
         users:\n  - {{ id: usr_tiny, email: t@tiny.test, name: T, role: owner, organization: org_tiny }}\n\
         api_keys:\n{tiny_yaml}"
    ));
    let admin = srv.admin_key().to_string();
    let g = srv.api("POST", "/v1/gateways", Some(&admin), Some(json!({"name": "scraped", "servers": ["time"]})));
    assert_eq!(g.status, 201, "{g:?}");
    let (gw, key) = (g.data()["id"].as_str().unwrap().to_string(), g.data()["api_key"].as_str().unwrap().to_string());
    let (prom, _conf) = start_prometheus(&srv);
    wait_for(&prom, "up{job=\"toolgate\"}", 1.0);

    // Two rounds, so that `rate` over the histogram sees an increase between scrapes.
    // Two sessions.
    call_time(&srv, &gw, &key, &["UTC", "Europe/Paris", "Not/AZone"]);
    let calls =
        format!("sum(mcp_server_operation_duration_seconds_count{{mcp_method_name=\"tools/call\",gateway=\"{gw}\"}})");
    wait_for(&prom, &calls, 3.0);
    call_time(&srv, &gw, &key, &["Asia/Tokyo", "Not/AZone", "UTC", "America/New_York"]);
    wait_for(&prom, &calls, 7.0);

    // The tool is labelled by its name at the gateway; `isError` results are `tool_error`.
    let by_error = |e: &str| {
        format!("sum(mcp_server_operation_duration_seconds_count{{mcp_method_name=\"tools/call\",error_type=\"{e}\"}})")
    };
    assert_eq!(scalar(&prom, &by_error("tool_error")), Some(2.0));
    assert_eq!(scalar(&prom, &by_error("")), Some(5.0), "a success has no error_type");
    let tools = query(
        &prom,
        "count by (gen_ai_tool_name) (mcp_server_operation_duration_seconds_count{mcp_method_name=\"tools/call\"})",
    )
    .unwrap();
    assert_eq!(tools.len(), 1, "{tools:?}");
    assert!(
        tools[0]["metric"]["gen_ai_tool_name"].as_str().is_some_and(|t| t.ends_with("get_current_time")),
        "{tools:?}"
    );
    // What toolgate asked of the app: the same calls, labelled by app.
    assert_eq!(
        scalar(&prom, "sum(mcp_client_operation_duration_seconds_count{mcp_method_name=\"tools/call\",app=\"time\"})"),
        Some(7.0)
    );
    // `initialize` is answered by toolgate itself.
    assert_eq!(
        scalar(
            &prom,
            &format!(
                "sum(mcp_server_operation_duration_seconds_count{{mcp_method_name=\"initialize\",gateway=\"{gw}\"}})"
            )
        ),
        Some(2.0),
        "one per session"
    );
    // Percentiles from the histogram: a number, positive, and below the slowest bucket.
    let p99 = scalar(
        &prom,
        "histogram_quantile(0.99, sum by (le) (rate(mcp_server_operation_duration_seconds_bucket{mcp_method_name=\"tools/call\"}[1m])))",
    )
    .expect("a p99 over the last minute");
    assert!(p99.is_finite() && p99 > 0.0 && p99 < 5.0, "p99 {p99}");
    let rate =
        scalar(&prom, "sum(rate(mcp_server_operation_duration_seconds_count{mcp_method_name=\"tools/call\"}[1m]))")
            .expect("a rate");
    assert!(rate > 0.0, "rate {rate}");

    // Refusals by filter and reason: three requests without a key.
    for _ in 0..3 {
        let r = srv.api("GET", "/v1/gateways", None, None);
        assert_eq!(r.status, 401, "{r:?}");
    }
    wait_for(&prom, "sum(toolgate_filter_rejections_total{filter=\"authentication\",reason=\"UNAUTHORIZED\"})", 3.0);
    // A burst of 5 for the tiny tier: the 6th to 8th requests are refused by the rate limit.
    let statuses: Vec<u16> = (0..8).map(|_| srv.api("GET", "/v1/user", Some(&tiny_key), None).status).collect();
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429, 429, 429]);
    wait_for(&prom, "sum(toolgate_rate_limited_requests_total{reason=\"RATE_LIMITED\"})", 3.0);
    wait_for(&prom, "sum(toolgate_filter_rejections_total{filter=\"rate_limit\",reason=\"RATE_LIMITED\"})", 3.0);
    wait_for(&prom, "sum(toolgate_requests_total{status=\"429\"})", 3.0);

    // Gauges read at scrape time, and the build.
    wait_for(&prom, "toolgate_mcp_sessions_active", 2.0);
    wait_for(&prom, "toolgate_app_up{app=\"time\"}", 1.0);
    wait_for(&prom, &format!("toolgate_build_info{{version=\"{}\"}}", env!("CARGO_PKG_VERSION")), 1.0);
    assert!(scalar(&prom, "sum(toolgate_store_operation_duration_seconds_count)").is_some_and(|n| n > 0.0));
    assert!(scalar(&prom, "sum(toolgate_requests_total)").is_some_and(|n| n >= 10.0));

    // Alert rules load (Prometheus names them in its rules API) and none fires on a healthy run.
    let rules: Value =
        reqwest::blocking::get(format!("http://127.0.0.1:{}/api/v1/rules", prom.port)).unwrap().json().unwrap();
    let groups = rules["data"]["groups"].as_array().cloned().unwrap_or_default();
    assert!(!groups.is_empty(), "alerts.yml loaded: {rules}");
    let firing = query(&prom, "ALERTS{alertstate=\"firing\"}").unwrap();
    assert!(firing.is_empty(), "{firing:?}");

    // Every query of the dashboard parses in Prometheus and names only series toolgate exposes.
    let exposed = families(&srv.metrics());
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(repo_file("conf/grafana/toolgate.json")).expect("dashboard"))
            .expect("dashboard is JSON");
    let mut exprs = Vec::new();
    collect_exprs(&dashboard, &mut exprs);
    assert!(exprs.len() >= 8, "{exprs:?}");
    for expr in &exprs {
        let concrete = expr.replace("$__rate_interval", "1m").replace("$__interval", "1m").replace("$gateway", ".*");
        query(&prom, &concrete).unwrap_or_else(|e| panic!("dashboard query does not parse: {e}"));
        let names = metric_names(&concrete);
        assert!(!names.is_empty(), "{expr} names no toolgate series");
        for name in names {
            assert!(exposed.contains(&name), "{expr}: `{name}` is not exposed; toolgate has {exposed:?}");
        }
    }
}

/// Every `expr` of the dashboard's panels (and template variables' `query`).
fn collect_exprs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("expr", Value::String(s)) => out.push(s.clone()),
                    _ => collect_exprs(x, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| collect_exprs(x, out)),
        _ => {}
    }
}

#[test]
fn promtool_accepts_the_exposition_and_the_alert_rules_pass_their_tests() {
    let srv = TestServer::start("");
    let admin = srv.admin_key().to_string();
    let g = srv.api("POST", "/v1/gateways", Some(&admin), Some(json!({"name": "linted", "servers": ["time"]})));
    let (gw, key) = (g.data()["id"].as_str().unwrap().to_string(), g.data()["api_key"].as_str().unwrap().to_string());
    call_time(&srv, &gw, &key, &["UTC", "Not/AZone"]);
    let exposition = srv.metrics();
    assert!(exposition.contains("mcp_server_operation_duration_seconds_bucket"), "{exposition}");

    let promtool = tool("promtool");
    let mut check = Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool");
    use std::io::Write;
    check.stdin.take().unwrap().write_all(exposition.as_bytes()).unwrap();
    let out = check.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    for args in
        [vec!["check", "rules", "conf/prometheus/alerts.yml"], vec!["test", "rules", "conf/prometheus/alerts.test.yml"]]
    {
        let out =
            Command::new(&promtool).args(&args).current_dir(env!("CARGO_MANIFEST_DIR")).output().expect("promtool");
        assert!(
            out.status.success(),
            "promtool {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

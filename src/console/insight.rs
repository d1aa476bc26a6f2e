//! Logs (filter by gateway, app, status and time; pages; one entry on its page) and analytics
//! (requests, errors and latency percentiles over time, top functions; the API's periods).

use super::chart::{self, Measure, Point, Series};
use super::html::{self, escape};
use super::{seg, Ctx};
use crate::edge::error::ApiError;
use crate::identity::signin::Page;
use serde_json::Value;

fn encode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// The page's query parameters among `names`, encoded again for the API and the links.
fn kept(ctx: &Ctx<'_>, names: &[&str]) -> String {
    names.iter().filter_map(|n| ctx.query(n).map(|v| format!("{n}={}", encode(v)))).collect::<Vec<_>>().join("&")
}

pub(super) async fn logs(ctx: &Ctx<'_>) -> Result<Page, ApiError> {
    let filters = kept(ctx, &["gateway_id", "app_id", "status", "start_date", "end_date"]);
    let page = ctx.query("page").unwrap_or("1");
    let got = ctx.get(&format!("/logs?{filters}&page={}&limit=50", encode(page))).await?;
    let rows = got["logs"].as_array().cloned().unwrap_or_default();
    let q = |n: &str| ctx.query(n).unwrap_or("").to_string();
    let picker = super::gateways::picker(ctx, ctx.query("gateway_id"), false).await;
    let mut body = format!(
        "<form method=\"get\" action=\"{}\" role=\"search\">{}{}{}{}{}<button type=\"submit\">Filter</button></form>",
        ctx.href("/logs"),
        picker,
        html::input("App id", "app_id", &q("app_id"), ""),
        html::select(
            "Status",
            "status",
            &[("", "Any"), ("success", "Success"), ("error", "Error")],
            ctx.query("status")
        ),
        html::input("From (date or ISO 8601)", "start_date", &q("start_date"), "placeholder=\"2026-11-28\""),
        html::input("To", "end_date", &q("end_date"), "placeholder=\"2026-11-28T23:59:59Z\""),
    );
    // Names beside ids: the gateway's (when the role reads gateways) and the caller's user.
    let gateways = super::gateways::names(ctx).await;
    let mut table_rows = Vec::with_capacity(rows.len());
    for r in &rows {
        let mut r = r.clone();
        r["call"] = Value::String(format!("{}.{}", html::text(&r["app"]), html::text(&r["function"])));
        let id = html::text(&r["gateway_id"]);
        r["gateway"] = Value::String(named(gateways.get(&id).map(String::as_str), &id));
        r["caller"] = Value::String(caller(ctx, &r));
        table_rows.push(r);
    }
    let columns = [
        ("Time", "timestamp"),
        ("Gateway", "gateway"),
        ("Call", "call"),
        ("Caller", "caller"),
        ("Status", "status"),
        ("ms", "duration"),
    ];
    body.push_str(&logs_table(ctx, &table_rows, &columns));
    body.push_str(&html::pager(ctx, "/logs", &got["pagination"], &filters));
    Ok(ctx.page("Logs", "/logs", &body))
}

/// `name (id)`, or the id alone when there is no name.
fn named(name: Option<&str>, id: &str) -> String {
    match name.filter(|n| !n.is_empty()) {
        Some(n) => format!("{n} ({id})"),
        None => id.to_string(),
    }
}

/// Who made a logged call: the user's e-mail (a user of the organisation) and the credential by
/// its name, its id beside it: `alice@example.com · ci-bot (key_...)`; a console call names the
/// console (`web:ws_...`).
fn caller(ctx: &Ctx<'_>, r: &Value) -> String {
    let key = html::text(&r["key_id"]);
    let user = html::text(&r["user_id"]);
    let org = &ctx.principal.org_id;
    let who = ctx.server.state.user(&user).filter(|u| &u.org_id == org).map(|u| u.email.clone());
    let key_name = match key.starts_with("web:") {
        true => Some("console".to_string()),
        false => ctx.server.state.key(&key).filter(|k| &k.org_id == org).map(|k| k.name.clone()),
    };
    let credential = if key.is_empty() { String::new() } else { named(key_name.as_deref(), &key) };
    match (who, credential.is_empty()) {
        (Some(email), false) => format!("{email} · {credential}"),
        (Some(email), true) => email,
        (None, _) => credential,
    }
}

/// One entry on its own page (`/logs/{id}`, the API's `GET /logs/{id}`): another organisation's
/// or an unknown id is the API's 404.
pub(super) async fn entry_page(ctx: &Ctx<'_>, id: &str) -> Result<Page, ApiError> {
    let mut e = ctx.get(&format!("/logs/{}", seg(id))).await?;
    // Names beside ids, as in the list.
    let gateway = html::text(&e["gateway_id"]);
    e["gateway"] = Value::String(named(super::gateways::names(ctx).await.get(&gateway).map(String::as_str), &gateway));
    e["caller"] = Value::String(caller(ctx, &e));
    let body = format!("{}<p><a href=\"{}\">Back to the logs</a></p>", entry(&e), ctx.href("/logs"));
    Ok(ctx.page("Log entry", "/logs", &body))
}

/// The log table, each row's time a link to the entry's page.
fn logs_table(ctx: &Ctx<'_>, rows: &[Value], columns: &[(&str, &str)]) -> String {
    if rows.is_empty() {
        return "<p class=\"empty\">No calls.</p>".into();
    }
    let mut out =
        String::from("<div class=\"scroll\"><table class=\"logs\"><caption>Calls, newest first</caption><thead><tr>");
    for (h, _) in columns {
        out.push_str(&format!("<th scope=\"col\">{h}</th>"));
    }
    out.push_str("</tr></thead><tbody>");
    for r in rows {
        out.push_str("<tr>");
        for (i, (_, key)) in columns.iter().enumerate() {
            let v = escape(&html::text(&r[*key]));
            if i == 0 {
                let to = format!("/logs/{}", seg(&html::text(&r["id"])));
                out.push_str(&format!("<td class=\"id\"><a href=\"{}\">{v}</a></td>", ctx.href(&to)));
            } else if *key == "status" {
                let badge =
                    refusal(r).map(|k| format!(" <span class=\"badge refused\">{k}</span>")).unwrap_or_default();
                out.push_str(&format!("<td class=\"id\">{v}{badge}</td>"));
            } else if *key == "duration" {
                out.push_str(&format!("<td class=\"id\">{v}</td>"));
            } else {
                out.push_str(&format!("<td>{v}</td>"));
            }
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></div>");
    out
}

/// Whether a logged call was refused rather than failed, and how: `limited` (a rate or
/// concurrency limit: JSON-RPC `LimitExceeded`, a 429, or a tool limit's error result with its
/// `retry_after_ms`), `denied` (a rule, a forbidden or pending tool: a 403), `refused` (a content
/// check). Read from the entry's `response` (`{"status", "data"}`), so the logs page marks a
/// refusal whichever check made it.
fn refusal(r: &Value) -> Option<&'static str> {
    let response = &r["response"];
    let data = &response["data"];
    let code = data["code"].as_i64();
    let limited_result = data["isError"] == Value::Bool(true) && !data["_meta"]["retry_after_ms"].is_null();
    if response["status"] == 429 || code == Some(-32010) || limited_result {
        return Some("limited");
    }
    if response["status"] == 403 || matches!(code, Some(-32006 | -32011 | -32012)) {
        return Some("denied");
    }
    if code == Some(-32013) {
        return Some("refused");
    }
    // Any other error whose words say it: an app or a check that words its refusal.
    let message = html::text(&data["message"]).to_ascii_lowercase();
    if message.contains("limited") || message.contains("limit exceeded") {
        Some("limited")
    } else if message.contains("denied") {
        Some("denied")
    } else {
        None
    }
}

/// One entry in full: its fields (`gateway` and `caller` named by [`entry_page`]), the request's
/// arguments and the answer.
fn entry(e: &Value) -> String {
    let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_default();
    format!(
        "<section class=\"entry\" aria-label=\"Log entry\"><h2>Entry <code>{}</code></h2><dl><dt>Time</dt><dd>{}</dd>\
         <dt>Gateway</dt><dd>{}</dd><dt>App</dt><dd>{}</dd><dt>Function</dt><dd>{}</dd><dt>Status</dt><dd>{}{}</dd>\
         <dt>Duration (ms)</dt><dd>{}</dd><dt>Caller</dt><dd>{}</dd><dt>Request id</dt><dd><span class=\"id\">{}</span></dd></dl><h3>Request</h3><pre>{}</pre><h3>Response</h3><pre>{}</pre></section>",
        escape(&html::text(&e["id"])),
        escape(&html::text(&e["timestamp"])),
        escape(&html::text(&e["gateway"])),
        escape(&html::text(&e["app"])),
        escape(&html::text(&e["function"])),
        escape(&html::text(&e["status"])),
        refusal(e).map(|k| format!(" <span class=\"badge refused\">{k}</span>")).unwrap_or_default(),
        escape(&html::text(&e["duration"])),
        escape(&html::text(&e["caller"])),
        escape(&html::text(&e["request_id"])),
        escape(&pretty(&e["request"])),
        escape(&pretty(&e["response"])),
    )
}

/// A rate (0 to 1) as a percentage with one decimal: `64.7 %`.
fn percent(rate: &Value) -> String {
    rate.as_f64().map_or_else(String::new, |r| format!("{:.1} %", r * 100.0))
}

/// The points of field `key` of a time series.
fn points(series: &[Value], key: &str) -> Vec<Point> {
    series
        .iter()
        .map(|p| Point {
            t_ms: p["timestamp"]
                .as_str()
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .map_or(0, |t| t.timestamp_millis()),
            v: p[key].as_f64().unwrap_or(0.0),
        })
        .collect()
}

pub(super) async fn analytics(ctx: &Ctx<'_>) -> Result<Page, ApiError> {
    let period = ctx.query("period").unwrap_or("24h");
    let gateway = ctx.query("gateway_id");
    let got = ctx.get(&format!("/logs/analytics?{}", kept(ctx, &["period", "gateway_id"]))).await?;
    let s = &got["summary"];
    let picker = super::gateways::picker(ctx, gateway, false).await;
    let mut body = format!(
        "<form method=\"get\" action=\"{}\">{}{}<button type=\"submit\">Show</button></form>\
         <dl class=\"summary\"><dt>Requests</dt><dd id=\"total-requests\">{}</dd><dt>Errors</dt><dd>{}</dd>\
         <dt>Average (ms)</dt><dd>{}</dd><dt>Success rate</dt><dd id=\"success-rate\">{}</dd></dl>",
        ctx.href("/analytics"),
        html::select(
            "Period",
            "period",
            &[("1h", "1 hour"), ("24h", "24 hours"), ("7d", "7 days"), ("30d", "30 days")],
            Some(period)
        ),
        picker,
        escape(&html::text(&s["total_requests"])),
        escape(&html::text(&s["error_count"])),
        escape(&html::text(&s["avg_duration"])),
        percent(&s["success_rate"]),
    );
    let series = got["time_series"].as_array().cloned().unwrap_or_default();
    let (requests, errors) = (points(&series, "requests"), points(&series, "errors"));
    body.push_str(&chart::line_chart(
        "Requests and errors",
        "calls",
        &[
            Series { name: "requests", points: &requests, measure: Some(Measure::Calls) },
            Series { name: "errors", points: &errors, measure: Some(Measure::Errors) },
        ],
    ));
    let avg = points(&series, "avg_duration");
    body.push_str(&chart::line_chart(
        "Average duration",
        "ms",
        &[Series { name: "average", points: &avg, measure: Some(Measure::Duration) }],
    ));
    let top = got["top_functions"].as_array().cloned().unwrap_or_default();
    let names: Vec<String> = top.iter().map(|t| html::text(&t["function"])).collect();
    // Each function's calls: those that succeeded, then those that failed (the errors' red).
    let bars: Vec<(&str, Vec<f64>)> = names
        .iter()
        .zip(&top)
        .map(|(n, t)| {
            let (count, errors) = (t["count"].as_f64().unwrap_or(0.0), t["errors"].as_f64().unwrap_or(0.0));
            (n.as_str(), vec![(count - errors).max(0.0), errors])
        })
        .collect();
    let parts = [("succeeded", Measure::Calls), ("failed", Measure::Errors)];
    body.push_str(&chart::stacked_bar_chart("Top functions", "calls", &parts, &bars));
    if let Some(id) = gateway {
        body.push_str(&gateway_latency(ctx, id).await?);
    }
    Ok(ctx.page("Analytics", "/analytics", &body))
}

/// A gateway's latency percentiles over time (`/metrics/gateway/{id}`: 1h, 24h or 7d).
async fn gateway_latency(ctx: &Ctx<'_>, id: &str) -> Result<String, ApiError> {
    // The metrics' periods are 1h, 24h and 7d: 30d shows the last 24 hours.
    let period = ctx.query("period").filter(|p| matches!(*p, "1h" | "7d")).unwrap_or("24h");
    let got = ctx.get(&format!("/metrics/gateway/{}?period={period}", seg(id))).await?;
    let series = got["time_series"].as_array().cloned().unwrap_or_default();
    let (p50, p95, p99) = (points(&series, "p50"), points(&series, "p95"), points(&series, "p99"));
    Ok(chart::line_chart(
        "Latency percentiles",
        "ms",
        &[
            Series { name: "p50", points: &p50, measure: Some(Measure::P50) },
            Series { name: "p95", points: &p95, measure: Some(Measure::P95) },
            Series { name: "p99", points: &p99, measure: Some(Measure::P99) },
        ],
    ))
}

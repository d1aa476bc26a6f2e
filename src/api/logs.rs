//! `/logs`: the organisation's request log, newest first. Each `tools/call` through a gateway
//! leaves one entry (spec "Log entry"); the arguments and the answer are size-capped when they
//! are written, and credentials never reach them (they travel in headers, not in params).
//! Analytics and metrics read the log's rollups ([`crate::observe::rollup`]), never its entries, so that
//! a month costs what a month of buckets costs.

use super::{iso, ApiResult, Call, Reply};
use crate::data::reqlog::Urgency;
use crate::data::store::{LogQuery, LogRow, RollupQuery};
use crate::edge::error::ApiError;
use crate::observe::rollup::{self, Histogram, Rollup};
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

/// `start_date` / `end_date`: RFC 3339 (ISO 8601 with a time and an offset), or a bare date
/// (`2026-11-24`, the start of that UTC day for `start_date`, its end for `end_date`).
fn date(call: &Call<'_>, name: &'static str) -> Result<Option<DateTime<Utc>>, ApiError> {
    let Some(v) = call.query(name) else { return Ok(None) };
    if let Ok(t) = DateTime::parse_from_rfc3339(v) {
        return Ok(Some(t.with_timezone(&Utc)));
    }
    let day = chrono::NaiveDate::parse_from_str(v, "%Y-%m-%d")
        .map_err(|_| ApiError::validation(name, format!("`{v}` is not an ISO 8601 date or date-time")))?;
    let time = if name == "end_date" { day.and_hms_milli_opt(23, 59, 59, 999) } else { day.and_hms_opt(0, 0, 0) };
    Ok(time.map(|t| t.and_utc()))
}

/// An entry as the API shows it: the stored body with its id and time put back.
fn entry(row: LogRow) -> Value {
    let mut v: Value = serde_json::from_str(&row.body).unwrap_or_else(|e| {
        tracing::warn!(id = row.id, error = %e, "request-log entry is not JSON");
        json!({})
    });
    let timestamp = DateTime::from_timestamp_millis(row.ts_ms).map(|t| iso(&t));
    if let Some(obj) = v.as_object_mut() {
        obj.insert("id".into(), Value::String(row.id));
        obj.insert("timestamp".into(), timestamp.map_or(Value::Null, Value::String));
    }
    v
}

#[utoipa::path(get, path = "/v1/logs", tag = "logs",
    params(("gateway_id" = Option<String>, Query), ("app_id" = Option<String>, Query),
           ("status" = Option<String>, Query, description = "success or error"),
           ("start_date" = Option<String>, Query, description = "ISO 8601 date or date-time"),
           ("end_date" = Option<String>, Query, description = "ISO 8601 date or date-time, not before start_date"),
           ("page" = Option<u32>, Query, minimum = 1), ("limit" = Option<u32>, Query, minimum = 1, maximum = 100)),
    responses((status = 200, description = "logs (newest first) and pagination", body = crate::api::envelope::Envelope),
              (status = 400, body = crate::api::envelope::ErrorEnvelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn list(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let (page, limit) = call.pagination()?;
    let status = call.query_choice("status", &["success", "error"])?;
    let (since, until) = (date(call, "start_date")?, date(call, "end_date")?);
    if let (Some(s), Some(u)) = (since, until) {
        if u < s {
            return Err(ApiError::validation("end_date", "must not be before start_date"));
        }
    }
    let q = LogQuery {
        org_id: who.org_id.clone(),
        gateway_id: call.query("gateway_id").map(str::to_string),
        app: call.query("app_id").map(str::to_string),
        status,
        since_ms: since.map(|t| t.timestamp_millis()),
        until_ms: until.map(|t| t.timestamp_millis()),
    };
    // What was answered before this request is in the log it reads.
    call.server.reqlog.flush(Urgency::Now).await;
    let offset = u64::from(page - 1) * u64::from(limit);
    let (total, rows) = call.server.state.store.log_page(q, offset, limit).await?;
    let logs: Vec<Value> = rows.into_iter().map(entry).collect();
    let total = usize::try_from(total).unwrap_or(usize::MAX);
    Ok(Reply::ok(json!({ "logs": logs, "pagination": super::pagination_json(page, limit, total) })))
}

/// The time an entry's id carries (`log_<ms in hex>` and 8 characters, see
/// `secrets::write_ordered_id`): where the store finds it.
fn id_time(id: &str) -> Option<i64> {
    let hex = id.strip_prefix("log_")?;
    if hex.len() != 20 || !hex.is_char_boundary(12) {
        return None;
    }
    i64::from_str_radix(&hex[..12], 16).ok()
}

#[utoipa::path(get, path = "/v1/logs/{log_id}", tag = "logs", params(("log_id" = String, Path)),
    responses((status = 200, description = "one entry, as the list shows it (id, timestamp, gateway_id, app, function, duration, status, request, response)", body = crate::api::envelope::Envelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope), (status = 403, body = crate::api::envelope::ErrorEnvelope),
              (status = 404, description = "no such entry in the caller's organisation", body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn get(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let id = call.id();
    let ts = id_time(id).ok_or(ApiError::NotFound("log entry"))?;
    // The organisation's entries of that millisecond: a few, read a page at a time.
    let q = LogQuery { org_id: who.org_id.clone(), since_ms: Some(ts), until_ms: Some(ts), ..Default::default() };
    call.server.reqlog.flush(Urgency::Now).await;
    let mut offset = 0u64;
    loop {
        let (total, rows) = call.server.state.store.log_page(q.clone(), offset, 100).await?;
        let read = rows.len() as u64;
        if let Some(row) = rows.into_iter().find(|r| r.id == id) {
            return Ok(Reply::ok(entry(row)));
        }
        offset += read;
        if read == 0 || offset >= total {
            return Err(ApiError::NotFound("log entry"));
        }
    }
}

/// A period of `/logs/analytics` and the width of its time buckets: small enough to draw, few
/// enough to send (60, 24, 28 and 30 points).
fn period(call: &Call<'_>) -> Result<(&'static str, i64, i64), ApiError> {
    const MIN: i64 = 60_000;
    const HOUR: i64 = 60 * MIN;
    const DAY: i64 = 24 * HOUR;
    Ok(match call.query_choice("period", &["1h", "24h", "7d", "30d"])?.as_deref() {
        Some("1h") => ("1h", HOUR, MIN),
        None | Some("24h") => ("24h", DAY, HOUR),
        Some("7d") => ("7d", 7 * DAY, 6 * HOUR),
        _ => ("30d", 30 * DAY, DAY),
    })
}

/// Calls, errors and durations of a set of rollups.
#[derive(Debug, Clone, Default)]
struct Totals {
    requests: u64,
    errors: u64,
    total_us: u64,
    error_us: u64,
}

impl Totals {
    fn add(&mut self, r: &Rollup) {
        self.requests += r.requests;
        self.errors += r.errors;
        self.total_us = self.total_us.saturating_add(r.total_us);
        self.error_us = self.error_us.saturating_add(r.error_us);
    }

    /// The average duration, in whole milliseconds (the spec's integer).
    fn avg_ms(&self) -> u64 {
        self.total_us.checked_div(self.requests).map_or(0, |us| (us + 500) / 1000)
    }

    fn error_rate(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.errors as f64 / self.requests as f64
        }
    }
}

/// Totals per key (`key_of` a rollup, borrowed: a 30-day question adds up thousands of rows
/// of a few keys), named by `name`, most requests first, then by name.
fn ranked<'r, K: std::hash::Hash + Eq>(
    rows: &'r [Rollup],
    key_of: impl Fn(&'r Rollup) -> K,
    name: impl Fn(&K) -> String,
) -> Vec<(String, Totals)> {
    let mut by: std::collections::HashMap<K, Totals> = Default::default();
    for r in rows {
        by.entry(key_of(r)).or_default().add(r);
    }
    let mut v: Vec<_> = by.into_iter().map(|(k, t)| (name(&k), t)).collect();
    v.sort_by(|a, b| b.1.requests.cmp(&a.1.requests).then_with(|| a.0.cmp(&b.0)));
    v
}

/// The rollups of `q`'s organisation (and gateway or app) from `first` on, in the widest tier
/// that tiles buckets of `step_ms`.
async fn rollups(call: &Call<'_>, mut q: RollupQuery, first: i64, step_ms: i64) -> Result<Vec<Rollup>, ApiError> {
    q.tier_ms = rollup::tier_for(step_ms);
    q.since_ms = first;
    // What was answered before this request is in what it reads.
    call.server.reqlog.flush(Urgency::Now).await;
    Ok(call.server.state.store.rollups(q).await?)
}

/// The start of every bucket of `step_ms` from `first` up to the one that holds `now`.
fn bucket_starts(first: i64, step_ms: i64, now: i64) -> impl Iterator<Item = i64> {
    (0..).map(move |i| first + i * step_ms).take_while(move |start| *start <= now)
}

#[utoipa::path(get, path = "/v1/logs/analytics", tag = "logs",
    params(("gateway_id" = Option<String>, Query), ("period" = Option<String>, Query, description = "1h, 24h (default), 7d or 30d"),
           ("group_by" = Option<String>, Query, description = "app, function or status: adds `groups`")),
    responses((status = 200, description = "summary, time_series (every bucket of the period, oldest first), top_functions (and groups)", body = crate::api::envelope::Envelope),
              (status = 400, body = crate::api::envelope::ErrorEnvelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn analytics(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let (name, span_ms, bucket_ms) = period(call)?;
    let group_by = call.query_choice("group_by", &["app", "function", "status"])?;
    let now = crate::base::time::now_ms();
    // Whole buckets: the first starts at or before `now - span`, the last holds `now`.
    let first = (now - span_ms).div_euclid(bucket_ms) * bucket_ms;
    let q = RollupQuery {
        org_id: who.org_id.clone(),
        gateway_id: call.query("gateway_id").map(str::to_string),
        ..Default::default()
    };
    let rows = rollups(call, q, first, bucket_ms).await?;
    let mut summary = Totals::default();
    // Every bucket of the period, empty ones included, so that a chart needs no filling in.
    let mut buckets: Vec<Totals> = bucket_starts(first, bucket_ms, now).map(|_| Totals::default()).collect();
    for r in &rows {
        summary.add(r);
        let i = usize::try_from((r.start_ms - first) / bucket_ms).unwrap_or(usize::MAX);
        if let Some(b) = buckets.get_mut(i) {
            b.add(r);
        }
    }
    let series: Vec<Value> = bucket_starts(first, bucket_ms, now)
        .zip(&buckets)
        .map(|(start, b)| {
            let ts = DateTime::from_timestamp_millis(start).map(|t| iso(&t));
            json!({ "timestamp": ts, "requests": b.requests, "errors": b.errors, "avg_duration": b.avg_ms() })
        })
        .collect();
    let view = |name: &str, (key, t): &(String, Totals)| json!({ name: key, "count": t.requests, "errors": t.errors, "avg_duration": t.avg_ms(), "error_rate": t.error_rate() });
    let by_function = || ranked(&rows, |r: &Rollup| (r.app.as_str(), r.function.as_str()), |(a, f)| format!("{a}.{f}"));
    let top: Vec<Value> = by_function().iter().take(10).map(|t| view("function", t)).collect();
    let mut data = json!({
        "period": name,
        "summary": {
            "total_requests": summary.requests,
            "error_count": summary.errors,
            "avg_duration": summary.avg_ms(),
            "success_rate": if summary.requests == 0 { 1.0 } else { 1.0 - summary.error_rate() },
        },
        "time_series": series,
        "top_functions": top,
    });
    let groups = match group_by.as_deref() {
        None => None,
        Some("app") => Some(ranked(&rows, |r: &Rollup| r.app.as_str(), |a| a.to_string())),
        Some("function") => Some(by_function()),
        _ => {
            // Each rollup knows its errors and their duration; the rest succeeded.
            let errors = Totals {
                requests: summary.errors,
                errors: summary.errors,
                total_us: summary.error_us,
                error_us: summary.error_us,
            };
            let successes = Totals {
                requests: summary.requests - summary.errors,
                errors: 0,
                total_us: summary.total_us.saturating_sub(summary.error_us),
                error_us: 0,
            };
            let mut v = vec![("error".to_string(), errors), ("success".to_string(), successes)];
            v.retain(|(_, t)| t.requests > 0);
            v.sort_by(|a, b| b.1.requests.cmp(&a.1.requests).then_with(|| a.0.cmp(&b.0)));
            Some(v)
        }
    };
    if let Some(groups) = groups {
        data["groups"] = groups.iter().map(|g| view("key", g)).collect();
    }
    Ok(Reply::ok(data))
}

/// Microseconds as milliseconds with three decimals.
fn ms(us: f64) -> f64 {
    (us / 1000.0 * 1000.0).round() / 1000.0
}

/// Latency figures of a set of calls: count, errors, average and the percentiles of the
/// recorded durations (read from their histogram, never derived from averages), in ms.
fn latency(t: &Totals, h: &Histogram) -> Value {
    let avg = t.total_us.checked_div(t.requests).unwrap_or(0) as f64;
    json!({ "requests": t.requests, "errors": t.errors, "avg": ms(avg),
            "p50": ms(h.percentile(50)), "p95": ms(h.percentile(95)), "p99": ms(h.percentile(99)) })
}

/// `period` and `resolution` of the metrics endpoints; a resolution that would give more than
/// `MAX_POINTS` points for its period is refused (naming `resolution`) instead of answered.
fn metrics_window(call: &Call<'_>) -> Result<(&'static str, i64, &'static str, i64), ApiError> {
    const MAX_POINTS: i64 = 500;
    const MIN: i64 = 60_000;
    const HOUR: i64 = 60 * MIN;
    let (period, span) = match call.query_choice("period", &["1h", "24h", "7d"])?.as_deref() {
        Some("1h") => ("1h", HOUR),
        None | Some("24h") => ("24h", 24 * HOUR),
        _ => ("7d", 7 * 24 * HOUR),
    };
    let (resolution, step) = match call.query_choice("resolution", &["1m", "5m", "1h"])?.as_deref() {
        Some("1m") => ("1m", MIN),
        Some("5m") => ("5m", 5 * MIN),
        Some(_) => ("1h", HOUR),
        None if span == HOUR => ("1m", MIN),
        None => ("1h", HOUR),
    };
    if span / step > MAX_POINTS {
        return Err(ApiError::validation(
            "resolution",
            format!("{resolution} over {period} would be {} points; at most {MAX_POINTS}", span / step),
        ));
    }
    Ok((period, span, resolution, step))
}

/// The metrics of the calls that `q` selects over the window: the whole and every bucket.
async fn metrics(call: &Call<'_>, mut q: RollupQuery) -> Result<Value, ApiError> {
    let (period, span, resolution, step) = metrics_window(call)?;
    let now = crate::base::time::now_ms();
    let first = (now - span).div_euclid(step) * step;
    q.histograms = true;
    let rows = rollups(call, q, first, step).await?;
    let (mut total, mut whole) = (Totals::default(), Histogram::default());
    let mut buckets: Vec<(Totals, Histogram)> = bucket_starts(first, step, now).map(|_| Default::default()).collect();
    for r in &rows {
        total.add(r);
        whole.merge(&r.histogram);
        let i = usize::try_from((r.start_ms - first) / step).unwrap_or(usize::MAX);
        if let Some((t, h)) = buckets.get_mut(i) {
            t.add(r);
            h.merge(&r.histogram);
        }
    }
    let series: Vec<Value> = bucket_starts(first, step, now)
        .zip(&buckets)
        .map(|(start, (t, h))| {
            let l = latency(t, h);
            let ts = DateTime::from_timestamp_millis(start).map(|t| iso(&t));
            json!({ "timestamp": ts, "requests": l["requests"], "errors": l["errors"], "latency": l["avg"],
                    "p50": l["p50"], "p95": l["p95"], "p99": l["p99"] })
        })
        .collect();
    let l = latency(&total, &whole);
    Ok(json!({
        "period": period,
        "resolution": resolution,
        "metrics": { "requests": l["requests"], "errors": l["errors"], "avg_latency": l["avg"],
                     "p50_latency": l["p50"], "p95_latency": l["p95"], "p99_latency": l["p99"] },
        "time_series": series,
    }))
}

#[utoipa::path(get, path = "/v1/metrics/gateway/{gateway_id}", tag = "logs",
    params(("gateway_id" = String, Path), ("period" = Option<String>, Query, description = "1h, 24h (default) or 7d"),
           ("resolution" = Option<String>, Query, description = "1m, 5m or 1h; at most 500 points per period")),
    responses((status = 200, description = "metrics (requests, errors, avg, p50, p95, p99 latency in ms) and time_series", body = crate::api::envelope::Envelope),
              (status = 400, body = crate::api::envelope::ErrorEnvelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope), (status = 404, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn gateway_metrics(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let g = call.server.state.gateway_of(&who.org_id, call.id()).ok_or(ApiError::NotFound("gateway"))?;
    let q = RollupQuery { org_id: who.org_id.clone(), gateway_id: Some(g.id.clone()), ..Default::default() };
    let mut data = metrics(call, q).await?;
    data["gateway_id"] = Value::String(g.id.clone());
    Ok(Reply::ok(data))
}

#[utoipa::path(get, path = "/v1/metrics/app/{app_id}", tag = "logs",
    params(("app_id" = String, Path), ("period" = Option<String>, Query, description = "1h, 24h (default) or 7d"),
           ("resolution" = Option<String>, Query, description = "1m, 5m or 1h; at most 500 points per period")),
    responses((status = 200, description = "the app's calls across the organisation's gateways: metrics and time_series", body = crate::api::envelope::Envelope),
              (status = 400, body = crate::api::envelope::ErrorEnvelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope), (status = 404, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn app_metrics(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let app = call.server.state.app(call.id()).ok_or(ApiError::NotFound("app"))?;
    let q = RollupQuery { org_id: who.org_id.clone(), app: Some(app.id.clone()), ..Default::default() };
    let mut data = metrics(call, q).await?;
    data["app_id"] = Value::String(app.id.clone());
    Ok(Reply::ok(data))
}

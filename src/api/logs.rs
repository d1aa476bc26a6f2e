//! `/logs`: the organisation's request log, newest first. Each `tools/call` through a gateway
//! leaves one entry (spec "Log entry"); the arguments and the answer are size-capped when they
//! are written, and credentials never reach them (they travel in headers, not in params).

use super::{iso, ApiResult, Call, Reply};
use crate::error::ApiError;
use crate::reqlog::Urgency;
use crate::store::{LogQuery, LogRow};
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
pub async fn list(call: &Call<'_>) -> ApiResult {
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

/// The average duration of a slice, in whole milliseconds.
fn average(total_ms: u64, n: u64) -> u64 {
    total_ms.checked_div(n).unwrap_or(0)
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

#[utoipa::path(get, path = "/v1/logs/analytics", tag = "logs",
    params(("gateway_id" = Option<String>, Query), ("period" = Option<String>, Query, description = "1h, 24h (default), 7d or 30d"),
           ("group_by" = Option<String>, Query, description = "app, function or status: adds `groups`")),
    responses((status = 200, description = "summary, time_series (every bucket of the period, oldest first), top_functions (and groups)", body = crate::api::envelope::Envelope),
              (status = 400, body = crate::api::envelope::ErrorEnvelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope)))]
pub async fn analytics(call: &Call<'_>) -> ApiResult {
    use crate::store::LogGroup;
    let who = call.who()?;
    let (name, span_ms, bucket_ms) = period(call)?;
    let group = match call.query_choice("group_by", &["app", "function", "status"])?.as_deref() {
        None => None,
        Some("app") => Some(LogGroup::App),
        Some("function") => Some(LogGroup::Function),
        _ => Some(LogGroup::Status),
    };
    let now = Utc::now().timestamp_millis();
    // Whole buckets: the first starts at or before `now - span`, the last holds `now`.
    let first = (now - span_ms).div_euclid(bucket_ms) * bucket_ms;
    let q = LogQuery {
        org_id: who.org_id.clone(),
        gateway_id: call.query("gateway_id").map(str::to_string),
        since_ms: Some(first),
        ..Default::default()
    };
    call.server.reqlog.flush(Urgency::Now).await;
    let a = call.server.state.store.log_analytics(q, bucket_ms, 10, group).await?;
    let s = a.summary;
    // Every bucket of the period, empty ones included, so that a chart needs no filling in.
    let mut counted = a.series.into_iter().peekable();
    let mut series = Vec::new();
    let mut start = first;
    while start <= now {
        let slice = counted.next_if(|c| c.key.parse::<i64>().ok() == Some(start));
        let (n, e, d) = slice.map_or((0, 0, 0), |c| (c.requests, c.errors, c.total_duration_ms));
        let ts = DateTime::from_timestamp_millis(start).map(|t| iso(&t));
        series.push(json!({ "timestamp": ts, "requests": n, "errors": e, "avg_duration": average(d, n) }));
        start += bucket_ms;
    }
    let view = |name: &str, c: &crate::store::LogSlice| {
        json!({ name: c.key, "count": c.requests, "errors": c.errors, "avg_duration": average(c.total_duration_ms, c.requests),
                "error_rate": ratio(c.errors, c.requests) })
    };
    let mut data = json!({
        "period": name,
        "summary": {
            "total_requests": s.requests,
            "error_count": s.errors,
            "avg_duration": average(s.total_duration_ms, s.requests),
            "success_rate": if s.requests == 0 { 1.0 } else { 1.0 - ratio(s.errors, s.requests) },
        },
        "time_series": series,
        "top_functions": a.top_functions.iter().map(|c| view("function", c)).collect::<Vec<_>>(),
    });
    if group.is_some() {
        data["groups"] = a.groups.iter().map(|c| view("key", c)).collect();
    }
    Ok(Reply::ok(data))
}

/// Latency figures of a set of calls: count, errors, average and nearest-rank percentiles of
/// the recorded durations (never derived from averages).
#[derive(Debug, Default, PartialEq)]
struct Latency {
    requests: u64,
    errors: u64,
    avg: u64,
    p50: u64,
    p95: u64,
    p99: u64,
}

impl Latency {
    /// `durations` are sorted here; `errors` counted by the caller.
    fn of(durations: &mut [u64], errors: u64) -> Latency {
        durations.sort_unstable();
        let n = durations.len();
        let rank = |p: usize| if n == 0 { 0 } else { durations[(p * n).div_ceil(100).clamp(1, n) - 1] };
        Latency {
            requests: n as u64,
            errors,
            avg: average(durations.iter().sum(), n as u64),
            p50: rank(50),
            p95: rank(95),
            p99: rank(99),
        }
    }
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
async fn metrics(call: &Call<'_>, mut q: LogQuery) -> Result<Value, ApiError> {
    let (period, span, resolution, step) = metrics_window(call)?;
    let now = Utc::now().timestamp_millis();
    let first = (now - span).div_euclid(step) * step;
    q.since_ms = Some(first);
    call.server.reqlog.flush(Urgency::Now).await;
    let calls = call.server.state.store.log_durations(q).await?;
    let mut all: Vec<u64> = calls.iter().map(|c| c.1).collect();
    let whole = Latency::of(&mut all, calls.iter().filter(|c| c.2).count() as u64);
    let mut series = Vec::new();
    let mut rest = calls.as_slice();
    let mut start = first;
    while start <= now {
        let end = start + step;
        let n = rest.iter().take_while(|c| c.0 < end).count();
        let (bucket, later) = rest.split_at(n);
        rest = later;
        let mut d: Vec<u64> = bucket.iter().map(|c| c.1).collect();
        let l = Latency::of(&mut d, bucket.iter().filter(|c| c.2).count() as u64);
        let ts = DateTime::from_timestamp_millis(start).map(|t| iso(&t));
        series.push(json!({ "timestamp": ts, "requests": l.requests, "errors": l.errors, "latency": l.avg,
                            "p50": l.p50, "p95": l.p95, "p99": l.p99 }));
        start = end;
    }
    Ok(json!({
        "period": period,
        "resolution": resolution,
        "metrics": { "requests": whole.requests, "errors": whole.errors, "avg_latency": whole.avg,
                     "p50_latency": whole.p50, "p95_latency": whole.p95, "p99_latency": whole.p99 },
        "time_series": series,
    }))
}

#[utoipa::path(get, path = "/v1/metrics/gateway/{gateway_id}", tag = "logs",
    params(("gateway_id" = String, Path), ("period" = Option<String>, Query, description = "1h, 24h (default) or 7d"),
           ("resolution" = Option<String>, Query, description = "1m, 5m or 1h; at most 500 points per period")),
    responses((status = 200, description = "metrics (requests, errors, avg, p50, p95, p99 latency in ms) and time_series", body = crate::api::envelope::Envelope),
              (status = 400, body = crate::api::envelope::ErrorEnvelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope), (status = 404, body = crate::api::envelope::ErrorEnvelope)))]
pub async fn gateway_metrics(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let g = call.server.state.gateway_of(&who.org_id, call.id()).ok_or(ApiError::NotFound("gateway"))?;
    let q = LogQuery { org_id: who.org_id.clone(), gateway_id: Some(g.id.clone()), ..Default::default() };
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
pub async fn app_metrics(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let app = call.server.state.config.app(call.id()).ok_or(ApiError::NotFound("app"))?;
    let q = LogQuery { org_id: who.org_id.clone(), app: Some(app.id.clone()), ..Default::default() };
    let mut data = metrics(call, q).await?;
    data["app_id"] = Value::String(app.id.clone());
    Ok(Reply::ok(data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank_of_the_recorded_durations() {
        let mut d: Vec<u64> = (1..=100).rev().collect();
        let l = Latency::of(&mut d, 3);
        assert_eq!((l.requests, l.errors, l.avg, l.p50, l.p95, l.p99), (100, 3, 50, 50, 95, 99));
        let mut one = vec![7];
        assert_eq!(Latency::of(&mut one, 0).p99, 7);
        assert_eq!(Latency::of(&mut [], 0), Latency::default());
        // One slow call among twenty shows at p99 and p95, not in the median.
        let mut d = vec![10; 19];
        d.push(1000);
        let l = Latency::of(&mut d, 0);
        assert_eq!((l.p50, l.p95, l.p99), (10, 10, 1000));
    }
}

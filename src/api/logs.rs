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

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

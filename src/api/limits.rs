//! `/rate-limit` and `/metrics/rate-limits`: the caller's buckets and usage.

use super::{ApiResult, Call, Reply};
use serde_json::{json, Map, Value};

#[utoipa::path(get, path = "/v1/rate-limit", tag = "rate-limits",
    responses((status = 200, description = "tier, buckets {limit, remaining, reset}, and tools: each window of the gateways' tool_limits the caller counts in {gateway, tool, per, window, limit, remaining, reset}", body = crate::api::envelope::Envelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn status(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let s = call.server.limiter.current_status(who, call.ip_multiplier).await;
    let mut buckets = Map::new();
    for b in s.buckets {
        buckets
            .insert(b.bucket.as_str().into(), json!({ "limit": b.limit, "remaining": b.remaining, "reset": b.reset }));
    }
    // Each bucket of the gateways' per-tool limits the caller counts in (`tools`).
    let tools = super::tool_limits::status(call, who).await;
    Ok(Reply::ok(json!({ "tier": s.tier, "buckets": buckets, "tools": tools })))
}

#[utoipa::path(get, path = "/v1/metrics/rate-limits", tag = "rate-limits",
    params(("period" = Option<String>, Query, description = "1h (default), 24h, 7d or 30d")),
    responses((status = 200, description = "period, usage over the period (from per-minute counts kept in the store), by_bucket (the current windows)", body = crate::api::envelope::Envelope),
              (status = 400, body = crate::api::envelope::ErrorEnvelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope), (status = 403, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn report(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let (period, span_secs) = match call.query_choice("period", &["1h", "24h", "7d", "30d"])?.as_deref() {
        Some("24h") => ("24h", 24 * 3600),
        Some("7d") => ("7d", 7 * 24 * 3600),
        Some("30d") => ("30d", 30 * 24 * 3600),
        _ => ("1h", 3600),
    };
    // The counts of the last moments, this request's included, are in the store before it is read.
    call.server.flush_rate_usage().await;
    let since = (chrono::Utc::now().timestamp() - span_secs) / 60 * 60;
    let minutes = call.server.state.store.rate_usage(who.key_id.clone(), since).await?;
    let (mut total, mut limited, mut remaining_sum) = (0u64, 0u64, 0u64);
    // The busiest minute; the earliest of equals.
    let mut peak: Option<(u64, u64)> = None;
    for m in &minutes {
        total += m.requests;
        limited += m.rate_limited;
        remaining_sum = remaining_sum.saturating_add(m.remaining_sum);
        if peak.is_none_or(|(_, n)| m.requests > n) {
            peak = Some((m.minute_unix, m.requests));
        }
    }
    let average_remaining = if total == 0 { 0.0 } else { remaining_sum as f64 / total as f64 };
    let peak_ts = peak
        .and_then(|(t, _)| chrono::DateTime::from_timestamp(i64::try_from(t).unwrap_or(0), 0))
        .map_or(Value::Null, |t| Value::String(super::iso(&t)));
    let status = call.server.limiter.status(who, call.ip_multiplier);
    let mut by_bucket = Map::new();
    for b in status.buckets {
        by_bucket
            .insert(b.bucket.as_str().into(), json!({ "used": b.limit - b.remaining.min(b.limit), "limit": b.limit }));
    }
    Ok(Reply::ok(json!({
        "period": period,
        "usage": {
            "total_requests": total,
            "rate_limited_requests": limited,
            "average_remaining": (average_remaining * 100.0).round() / 100.0,
            "peak_usage": { "timestamp": peak_ts, "requests": peak.map_or(0, |p| p.1) },
        },
        "by_bucket": by_bucket,
    })))
}

//! `/rate-limit` and `/metrics/rate-limits`: the caller's buckets and usage.

use super::{ApiResult, Call, Reply};
use serde_json::{json, Map, Value};

#[utoipa::path(get, path = "/v1/rate-limit", tag = "rate-limits",
    responses((status = 200, description = "tier and buckets {limit, remaining, reset}", body = crate::api::envelope::Envelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope)))]
pub async fn status(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let s = call.server.limiter.status(who, call.ip_multiplier);
    let mut buckets = Map::new();
    for b in s.buckets {
        buckets
            .insert(b.bucket.as_str().into(), json!({ "limit": b.limit, "remaining": b.remaining, "reset": b.reset }));
    }
    Ok(Reply::ok(json!({ "tier": s.tier, "buckets": buckets })))
}

#[utoipa::path(get, path = "/v1/metrics/rate-limits", tag = "rate-limits",
    responses((status = 200, description = "period, usage, by_bucket", body = crate::api::envelope::Envelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope), (status = 403, body = crate::api::envelope::ErrorEnvelope)))]
pub async fn report(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let r = call.server.limiter.report(who, call.ip_multiplier);
    let mut by_bucket = Map::new();
    for (bucket, used, limit) in r.by_bucket {
        by_bucket.insert(bucket.as_str().into(), json!({ "used": used, "limit": limit }));
    }
    let peak_ts = chrono::DateTime::from_timestamp(r.usage.peak_minute_unix as i64, 0).map(|t| super::iso(&t));
    Ok(Reply::ok(json!({
        "period": "1h",
        "usage": {
            "total_requests": r.usage.total_requests,
            "rate_limited_requests": r.usage.rate_limited_requests,
            "average_remaining": r.average_remaining,
            "peak_usage": { "timestamp": peak_ts.map_or(Value::Null, Value::String), "requests": r.usage.peak_minute_requests },
        },
        "by_bucket": by_bucket,
    })))
}

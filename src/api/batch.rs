//! `POST /batch`: several management calls in one request. Each operation runs through the same
//! rate limit, route table, scope check, validation and MFA rule as if sent alone, in order,
//! with the batch's credential and headers; the answer lists each one's status and envelope.
//! An operation's `path` is relative to the API's base URL (`/gateways`, as the specification
//! writes paths) or carries the version prefix (`/v1/gateways`, `/api/v1/gateways`). The batch
//! itself costs 1 + 0.5 per operation (Decision 2), charged before any runs (`proxy.rs`); each
//! operation is then charged to its own bucket at its own cost (an analytics query 5 tokens of
//! `analytics`), and one its bucket cannot pay is answered 429 `RATE_LIMITED` in its place
//! without running, while the others go on. A batch may not contain `/batch`.

use super::{ApiResult, Call, Reply};
use crate::edge::error::ApiError;
use crate::edge::forms;
use serde::Deserialize;
use serde_json::{json, Value};
use utoipa::ToSchema;

/// Its path in the route table.
pub(crate) const PATH: &str = "/batch";

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Batch {
    /// At most `limits.batch_max_operations` (20).
    #[schema(min_items = 1)]
    pub operations: Vec<Operation>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Operation {
    /// GET, POST, PATCH or DELETE.
    pub method: String,
    /// A management path and query, relative to the API's base URL (`/gateways?limit=5`) or with
    /// its version prefix (`/v1/gateways?limit=5`).
    #[schema(max_length = 2048)]
    pub path: String,
    /// The operation's JSON body.
    #[schema(value_type = Option<Object>)]
    pub body: Option<Value>,
}

/// How many operations a batch body holds (for its charge, before it runs); 0 when it is not one.
pub(crate) fn operations_in(body: &[u8]) -> usize {
    #[derive(Deserialize)]
    struct Count {
        operations: Vec<serde::de::IgnoredAny>,
    }
    serde_json::from_slice::<Count>(body).map_or(0, |c| c.operations.len())
}

/// One operation's outcome as the batch answer lists it.
fn outcome(result: ApiResult) -> Value {
    match result {
        Ok(reply) => {
            let mut v = json!({ "status": reply.status, "success": true });
            if let Some(d) = reply.data {
                v["data"] = d;
            }
            if let Some(m) = reply.message {
                v["message"] = Value::String(m);
            }
            v
        }
        Err(e) => json!({ "status": e.status(), "success": false, "error": e.to_error_object() }),
    }
}

#[utoipa::path(post, path = "/v1/batch", tag = "batch", request_body = Batch,
    responses((status = 200, description = "each operation's status and envelope, in order", body = crate::api::envelope::Envelope),
              (status = 400, body = crate::api::envelope::ErrorEnvelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 429, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn run(call: &Call<'_>) -> ApiResult {
    call.who()?;
    let batch: Batch = call.json()?;
    let max = call.server.state.config().limits.batch_max_operations;
    if batch.operations.is_empty() || batch.operations.len() > max {
        return Err(ApiError::validation("operations", format!("1-{max} operations (limits.batch_max_operations)")));
    }
    let mut results = Vec::with_capacity(batch.operations.len());
    for op in batch.operations {
        results.push(outcome(one(call, op).await));
    }
    Ok(Reply::ok(json!({ "results": results })))
}

async fn one(call: &Call<'_>, op: Operation) -> ApiResult {
    let method = match op.method.to_ascii_uppercase().as_str() {
        "GET" => http::Method::GET,
        "POST" => http::Method::POST,
        "PATCH" => http::Method::PATCH,
        "DELETE" => http::Method::DELETE,
        _ => return Err(ApiError::validation("method", "must be GET, POST, PATCH or DELETE")),
    };
    let body = match op.body {
        Some(b) => serde_json::to_vec(&b).unwrap_or_default().into(),
        None => bytes::Bytes::new(),
    };
    operation(call, method, &op.path, body).await
}

/// Runs one management operation in-process with `call`'s credential, address and headers, as
/// if sent alone: charged to its own bucket at its own cost, then routed and dispatched (scope
/// check, MFA gate, audit, change feed). `path` is relative to the API's base URL or carries
/// the version prefix, with its query. A batch's operations and the console's pages run here.
pub(crate) async fn operation(call: &Call<'_>, method: http::Method, path: &str, body: bytes::Bytes) -> ApiResult {
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    // `{base_url}` includes the version: `/gateways` is `/v1/gateways`.
    let rest = toolgate_filters::rate_limit::strip_version_prefix(path);
    if !path.starts_with('/') {
        return Err(ApiError::validation("path", "must start with / (e.g. /gateways or /v1/gateways)"));
    }
    let routed = super::route(rest);
    if routed.is_some_and(|(e, _, _)| e.is_batch()) {
        return Err(ApiError::validation("path", "a batch cannot contain /batch"));
    }
    // Charged as if sent alone (an unknown path too): its bucket, its cost.
    if let Some(principal) = &call.principal {
        let view = toolgate_filters::RequestView {
            method: &method,
            path: rest,
            query: (!query.is_empty()).then_some(query),
            headers: call.headers,
            client_ip: call.client_ip,
            route: toolgate_filters::RouteClass::Management,
            gateway_id: None,
            client_certificate: None,
        };
        call.server.limiter.charge_operation(&view, principal.clone(), call.ip_multiplier).await?;
    }
    let Some((endpoint, id, sub_id)) = routed else { return Err(ApiError::NoRoute(path.to_string())) };
    let sub = Call {
        server: call.server,
        principal: call.principal.clone(),
        method,
        id: id.map(super::path_param),
        sub_id: sub_id.map(super::path_param),
        query: forms::parse_query((!query.is_empty()).then_some(query)),
        body,
        client_ip: call.client_ip,
        ip_multiplier: call.ip_multiplier,
        headers: call.headers,
    };
    // `dispatch` runs this handler, which runs `dispatch` (never deeper: no batch in a batch);
    // the route table's handlers are boxed futures already, which breaks the cycle.
    super::dispatch(endpoint, sub).await
}

//! `/gateways`: create, list, read, update and delete gateways. An update that loosens one of
//! the gateway's guards (`gateway_guards.rs`) passes the MFA gate, and its audit entry shows
//! the guards changed, before and after.

use super::{iso, page_of, pagination_json, ApiResult, Call, Reply};
use crate::base::secrets;
use crate::data::model::{
    AllowedTools, ApiKey, ContentPolicy, DescriptionPolicy, Discovery, Gateway, GatewayAuth, GatewayConfiguration,
    Redact, Rule, ToolLimit, ToolLimitAnswer, ToolOverride, ToolPolicy, SCHEMA_VERSION,
};
use crate::edge::error::ApiError;
use crate::edge::forms::display_name;
use crate::mcp::catalogue::Catalogue;
use crate::mcp::rules;
use chrono::Utc;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use utoipa::ToSchema;

/// Most function names in one app's `allowed_tools` list.
pub(crate) const MAX_ALLOWED_TOOLS: usize = 500;
/// Longest function name in an `allowed_tools` list, in characters.
pub(crate) const MAX_FUNCTION_NAME_CHARS: usize = 256;

/// Body of `POST /gateways`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateGateway {
    /// 1-100 characters, no control characters.
    #[schema(min_length = 1, max_length = 100, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    pub name: String,
    /// At most 1000 characters; no control characters but line breaks and tabs.
    #[serde(default)]
    #[schema(max_length = 1000, pattern = "^[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f]*$")]
    pub description: Option<String>,
    /// App ids, at most 50.
    #[serde(default)]
    #[schema(max_items = 50)]
    pub servers: Vec<String>,
    /// App id (one of `servers`) -> list of function names (at most 500, each 1-256 characters),
    /// or `"*"`.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub allowed_tools: Option<BTreeMap<String, AllowedTools>>,
    #[serde(default)]
    pub configuration: Option<ConfigurationPatch>,
    /// Per-tool rules, in order (at most 64; names 1-64 characters of `A-Z a-z 0-9 _ . -`,
    /// unique; `when` a CEL expression of at most 2048 characters). See docs/mcp.md, "Per-tool rules".
    #[serde(default)]
    #[schema(max_items = 64)]
    pub rules: Option<Vec<Rule>>,
    /// How tools are shown and called: renamed, their text replaced, arguments fixed, defaulted
    /// or hidden (at most 500). See docs/governance.md, "Shaped tools".
    #[serde(default)]
    #[schema(max_items = 500)]
    pub tool_overrides: Option<Vec<ToolOverride>>,
    /// External guards asked before and after each tool call (at most 8); each new one's
    /// secret is in the answer, once. See docs/governance.md, "External guards".
    #[serde(default)]
    #[schema(max_items = 8)]
    pub guards: Option<Vec<super::guard_callouts::GuardInput>>,
    /// Per-tool quotas (at most 100): each a glob over the exposed tool names, whose calls count
    /// together per `caller`, `user`, `organization` or `gateway`. See docs/mcp.md, "Per-tool
    /// limits".
    #[serde(default)]
    #[schema(max_items = 100)]
    pub tool_limits: Option<Vec<ToolLimit>>,
}

/// Body of `PATCH /gateways/{id}`: any subset of the gateway's fields.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpdateGateway {
    /// 1-100 characters, no control characters.
    #[schema(min_length = 1, max_length = 100, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    pub name: Option<String>,
    /// At most 1000 characters; no control characters but line breaks and tabs.
    #[schema(max_length = 1000, pattern = "^[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f]*$")]
    pub description: Option<String>,
    /// App ids, at most 50.
    #[schema(max_items = 50)]
    pub servers: Option<Vec<String>>,
    /// App id (one of `servers`) -> list of function names (at most 500, each 1-256 characters),
    /// or `"*"`.
    #[schema(value_type = Object)]
    pub allowed_tools: Option<BTreeMap<String, AllowedTools>>,
    pub configuration: Option<ConfigurationPatch>,
    /// Replaces the rules (`[]` removes them).
    #[schema(max_items = 64)]
    pub rules: Option<Vec<Rule>>,
    /// Replaces the tool overrides (`[]` removes them); a protected action.
    #[schema(max_items = 500)]
    pub tool_overrides: Option<Vec<ToolOverride>>,
    /// Replaces the external guards (`[]` removes them; a guard named by its `id` is kept with
    /// its secret); a protected action.
    #[schema(max_items = 8)]
    pub guards: Option<Vec<super::guard_callouts::GuardInput>>,
    /// Replaces the per-tool quotas (`[]` removes them); loosening them is a protected action.
    #[schema(max_items = 100)]
    pub tool_limits: Option<Vec<ToolLimit>>,
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConfigurationPatch {
    /// Requests per minute to this gateway, all callers together.
    #[schema(minimum = 1)]
    pub rate_limit: Option<u32>,
    /// Seconds the tool list is cached.
    pub cache_ttl: Option<u32>,
    pub cache_enabled: Option<bool>,
    /// Joins app id and tool name when the gateway has several apps (default `__`).
    pub tool_name_separator: Option<String>,
    /// `api_key` (default): the endpoint takes `X-API-Key` only. `oauth`: also access tokens of
    /// the server's `gateway_oauth` issuer for this gateway (refused when none is configured).
    pub auth: Option<GatewayAuth>,
    /// `strip` (default): hidden text (invisible and control characters) in the apps' tool,
    /// prompt and resource definitions is removed. `block`: such a definition is withheld, and a
    /// call of it is a JSON-RPC error naming the finding.
    pub description_policy: Option<DescriptionPolicy>,
    /// What the gateway does about its apps' tool definitions (`docs/governance.md`): `pin`
    /// (default for a new gateway: an app's first list is trusted, later changed or added tools
    /// wait for approval), `approve` (every tool waits for approval) or `off`.
    pub tool_policy: Option<ToolPolicy>,
    /// Hidden text in what the apps send that a model reads (results, errors, resources,
    /// prompts): `strip` (default), `block` (the answer becomes an error naming it), `log`
    /// (reported only) or `off`.
    pub content_policy: Option<ContentPolicy>,
    /// Secrets redacted from the apps' answers: `{"detectors": ["secrets"], "mode": "redact" |
    /// "log", "exempt_tools": [...]}`; `{"detectors": []}` turns it off.
    pub redact: Option<Redact>,
    /// The largest result in bytes a call may answer (0: no bound).
    pub max_result_bytes: Option<u64>,
    /// The same bound by tool name at the gateway, replacing the whole map (0: none).
    pub max_result_bytes_by_tool: Option<BTreeMap<String, u64>>,
    /// `all` (default): `tools/list` shows every tool the caller may call. `search`: it shows
    /// `search_tools` and the tools the session found (docs/mcp.md, "Search instead of a
    /// thousand tools").
    pub discovery: Option<Discovery>,
    /// How a call past one of `tool_limits` is answered: `result` (default: a tool result with
    /// `isError` the model reads) or `error` (JSON-RPC error -32010).
    pub tool_limit_answer: Option<ToolLimitAnswer>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct GatewayListItem {
    pub id: String,
    pub name: String,
    pub description: String,
    pub endpoint: String,
    pub servers: Vec<String>,
    #[schema(value_type = Object)]
    pub allowed_tools: BTreeMap<String, AllowedTools>,
    #[schema(value_type = Object)]
    pub configuration: GatewayConfiguration,
    pub rules: Vec<Rule>,
    pub tool_overrides: Vec<ToolOverride>,
    pub tool_limits: Vec<ToolLimit>,
    /// Its external guards as `GET /v1/gateways/{id}` shows them (never a secret).
    #[schema(value_type = Vec<Object>)]
    pub guards: Value,
    /// How many functions its apps serve it: under a `tool_policy`, tools awaiting approval
    /// (or rejected) are not counted.
    pub functions_count: usize,
    pub status: String,
    pub created_at: String,
    pub updated_at: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ServerView {
    pub id: String,
    pub name: String,
    pub status: String,
    /// The app's tools the gateway serves, by their names at the app: those outside
    /// `allowed_tools` and, under a `tool_policy`, those awaiting approval (or rejected) are not
    /// here (`GET /v1/gateways/{id}/tool-changes` lists the pending ones).
    pub functions: Vec<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct GatewayMetrics {
    pub requests_today: u64,
    pub errors_today: u64,
    /// Milliseconds.
    pub avg_response_time: u64,
}

/// `metrics` of the gateway detail, from today's hourly rollups (UTC day).
async fn metrics_today(server: &crate::server::Server, g: &Gateway) -> Result<GatewayMetrics, ApiError> {
    server.reqlog.flush(crate::data::reqlog::Urgency::Now).await;
    let now = crate::base::time::now_ms();
    let day = 24 * crate::observe::rollup::HOUR;
    let rows = server
        .state
        .store
        .rollups(crate::data::store::RollupQuery {
            org_id: g.org_id.clone(),
            gateway_id: Some(g.id.clone()),
            tier_ms: crate::observe::rollup::HOUR,
            since_ms: now.div_euclid(day) * day,
            ..Default::default()
        })
        .await?;
    let (requests, errors, total_us) =
        rows.iter().fold((0, 0, 0u64), |(n, e, t), r| (n + r.requests, e + r.errors, t.saturating_add(r.total_us)));
    let avg = total_us.checked_div(requests).map_or(0, |us| (us + 500) / 1000);
    Ok(GatewayMetrics { requests_today: requests, errors_today: errors, avg_response_time: avg })
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct GatewayDetail {
    pub id: String,
    pub name: String,
    pub description: String,
    pub endpoint: String,
    pub servers: Vec<ServerView>,
    #[schema(value_type = Object)]
    pub allowed_tools: BTreeMap<String, AllowedTools>,
    #[schema(value_type = Object)]
    pub configuration: GatewayConfiguration,
    pub rules: Vec<Rule>,
    pub tool_overrides: Vec<ToolOverride>,
    pub tool_limits: Vec<ToolLimit>,
    pub status: String,
    pub metrics: GatewayMetrics,
    pub created_at: String,
    pub updated_at: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct GatewayCreated {
    pub id: String,
    pub name: String,
    pub endpoint: String,
    /// The gateway access key; shown once.
    pub api_key: String,
    pub created_at: String,
}

/// The path's gateway of `org_id`: 404 when the organisation has none, 503 when this instance
/// cannot read it (written by a newer toolgate: shown, changed and deleted only by an instance
/// that reads it, and never written back from here).
fn found(call: &Call<'_>, org_id: &str) -> Result<Arc<Gateway>, ApiError> {
    let state = &call.server.state;
    if let Some(newer) = state.newer_gateway_of(org_id, call.id()) {
        crate::observe::metrics::newer_record_refused("gateway");
        return Err(ApiError::Unavailable(newer.refusal("gateway")));
    }
    state.gateway_of(org_id, call.id()).ok_or(ApiError::NotFound("gateway"))
}

fn endpoint(call: &Call<'_>, id: &str) -> String {
    format!("{}/gateway/{id}/mcp", call.server.state.config().server.public_url)
}

/// Under a `tool_policy` of `pin` or `approve`, the gateway's catalogue, which knows the tools
/// held back (pending or rejected): they cannot be called, so they are not functions.
async fn pinned_catalogue(call: &Call<'_>, gw: &Gateway) -> Option<Arc<Catalogue>> {
    if gw.configuration.tool_policy == ToolPolicy::Off {
        return None;
    }
    Some(call.server.mcp.catalogue(gw).await)
}

/// Names of the functions the gateway exposes from `app_id`, as far as they are known
/// (`catalogue`: [`pinned_catalogue`]).
async fn allowed_functions(
    call: &Call<'_>,
    gw: &Gateway,
    app_id: &str,
    catalogue: Option<&Catalogue>,
) -> (String, Vec<String>) {
    let state = &call.server.state;
    let Some(app) = state.app(app_id) else { return ("unknown".into(), vec![]) };
    if !state.is_connected(&gw.org_id, app_id) {
        return (state.app_status(&gw.org_id, &app), vec![]);
    }
    match call.server.mcp.apps.tools(&gw.org_id, app_id).await {
        Ok(tools) => {
            let names = tools
                .iter()
                .filter_map(|t| t.get("name").and_then(Value::as_str))
                .filter(|n| gw.allowed_tools.get(app_id).is_none_or(|a| a.allows(n)))
                .filter(|n| catalogue.is_none_or(|c| c.serves(gw, app_id, n)))
                .map(str::to_string)
                .collect();
            ("connected".into(), names)
        }
        Err(e) => {
            tracing::warn!(app = app_id, error = %e, "cannot list app tools");
            ("error".into(), vec![])
        }
    }
}

fn validate_name(name: &str) -> Result<String, ApiError> {
    display_name("name", name).map(str::to_string)
}

fn validate_servers(call: &Call<'_>, servers: &[String]) -> Result<Vec<String>, ApiError> {
    let max = call.server.state.config().limits.gateway_max_servers;
    if servers.len() > max {
        return Err(ApiError::validation("servers", format!("at most {max} apps (limits.gateway_max_servers)")));
    }
    let mut out: Vec<String> = Vec::with_capacity(servers.len());
    for (i, s) in servers.iter().enumerate() {
        if call.server.state.config().app(s).is_none() {
            return Err(ApiError::validation(format!("servers[{i}]"), format!("unknown app `{s}`")));
        }
        if !out.contains(s) {
            out.push(s.clone());
        }
    }
    Ok(out)
}

fn validate_allowed(
    servers: &[String],
    allowed: BTreeMap<String, AllowedTools>,
) -> Result<BTreeMap<String, AllowedTools>, ApiError> {
    for (app, tools) in &allowed {
        if !servers.contains(app) {
            return Err(ApiError::validation(format!("allowed_tools.{app}"), "is not one of the gateway's servers"));
        }
        match tools {
            AllowedTools::All(s) if s != "*" => {
                return Err(ApiError::validation(
                    format!("allowed_tools.{app}"),
                    "must be \"*\" or a list of function names",
                ));
            }
            AllowedTools::All(_) => {}
            AllowedTools::List(names) => {
                if names.len() > MAX_ALLOWED_TOOLS {
                    return Err(ApiError::validation(
                        format!("allowed_tools.{app}"),
                        format!("at most {MAX_ALLOWED_TOOLS} function names"),
                    ));
                }
                for (i, n) in names.iter().enumerate() {
                    let len = n.chars().count();
                    if len == 0 || len > MAX_FUNCTION_NAME_CHARS || n.chars().any(char::is_control) {
                        return Err(ApiError::validation(
                            format!("allowed_tools.{app}[{i}]"),
                            format!("must be 1-{MAX_FUNCTION_NAME_CHARS} characters without control characters"),
                        ));
                    }
                }
            }
        }
    }
    Ok(allowed)
}

/// The rules as given, once they compile within `mcp.rules`' budget: the first fault is a 400
/// naming the rule's member and the rule (for an expression that does not parse, its line and
/// column; for one over the budget, its worst case).
fn validate_rules(call: &Call<'_>, given: Vec<Rule>) -> Result<Vec<Rule>, ApiError> {
    let limits = call.server.state.config().mcp.rules;
    rules::compile(&given, Utc::now(), &limits).map_err(|e| ApiError::validation(e.field(), e.to_string()))?;
    Ok(given)
}

fn apply_configuration(c: &mut GatewayConfiguration, patch: ConfigurationPatch) -> Result<(), ApiError> {
    if let Some(r) = patch.rate_limit {
        if r == 0 {
            return Err(ApiError::validation("configuration.rate_limit", "must be at least 1"));
        }
        c.rate_limit = r;
    }
    if let Some(t) = patch.cache_ttl {
        c.cache_ttl = t;
    }
    if let Some(e) = patch.cache_enabled {
        c.cache_enabled = e;
    }
    if let Some(sep) = patch.tool_name_separator {
        if sep.is_empty() || sep.len() > 4 || !sep.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b)) {
            return Err(ApiError::validation(
                "configuration.tool_name_separator",
                "must be 1-4 characters of A-Z a-z 0-9 _ . -",
            ));
        }
        c.tool_name_separator = sep;
    }
    if let Some(auth) = patch.auth {
        // toolgate's own authorization server can always issue tokens for the gateway; a
        // configured `gateway_oauth` issuer's are taken too.
        c.auth = auth;
    }
    if let Some(policy) = patch.description_policy {
        c.description_policy = policy;
    }
    if let Some(policy) = patch.tool_policy {
        c.tool_policy = policy;
    }
    if let Some(d) = patch.discovery {
        c.discovery = d;
    }
    if let Some(answer) = patch.tool_limit_answer {
        c.tool_limit_answer = answer;
    }
    content_patch(c, patch.content_policy, patch.redact, patch.max_result_bytes, patch.max_result_bytes_by_tool)
}

/// The content checks' part of a configuration patch (`docs/governance.md`).
fn content_patch(
    c: &mut GatewayConfiguration,
    policy: Option<ContentPolicy>,
    redact: Option<Redact>,
    max: Option<u64>,
    by_tool: Option<BTreeMap<String, u64>>,
) -> Result<(), ApiError> {
    if let Some(policy) = policy {
        c.content_policy = policy;
    }
    if let Some(redact) = redact {
        if let Some(unknown) =
            redact.detectors.iter().find(|d| !crate::mcp::redact::DETECTOR_SETS.contains(&d.as_str()))
        {
            return Err(ApiError::validation(
                "configuration.redact.detectors",
                format!("`{unknown}` is not a detector set (known: secrets)"),
            ));
        }
        c.redact = redact;
    }
    if let Some(max) = max {
        c.max_result_bytes = (max > 0).then_some(max);
    }
    if let Some(by_tool) = by_tool {
        c.max_result_bytes_by_tool = by_tool.into_iter().filter(|(_, n)| *n > 0).collect();
    }
    Ok(())
}

fn name_taken(call: &Call<'_>, org_id: &str, name: &str, except: Option<&str>) -> bool {
    let same = |g: &Gateway| g.org_id == org_id && g.name.eq_ignore_ascii_case(name) && Some(g.id.as_str()) != except;
    !call.server.state.gateways_where(same).is_empty()
}

#[utoipa::path(get, path = "/v1/gateways", tag = "gateways",
    params(("page" = Option<u32>, Query, minimum = 1), ("limit" = Option<u32>, Query, minimum = 1, maximum = 100),
           ("sort" = Option<String>, Query, description = "name, created_at or updated_at"),
           ("order" = Option<String>, Query, description = "asc or desc"),
           ("q" = Option<String>, Query, max_length = 100, description = "only gateways whose name, description or id holds this text (any case)")),
    responses((status = 200, description = "gateways and pagination", body = crate::api::envelope::Envelope),
              (status = 400, body = crate::api::envelope::ErrorEnvelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn list(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let (page, limit) = call.pagination()?;
    let sort = call.query_choice("sort", &["name", "created_at", "updated_at"])?.unwrap_or_else(|| "created_at".into());
    let order = call.query_choice("order", &["asc", "desc"])?.unwrap_or_else(|| "desc".into());
    let q = call.query("q").map(str::trim).filter(|q| !q.is_empty()).map(str::to_lowercase);
    if q.as_ref().is_some_and(|q| q.chars().count() > 100) {
        return Err(ApiError::validation("q", "must be at most 100 characters"));
    }
    let holds = |g: &crate::data::model::Gateway, q: &str| {
        g.id.to_lowercase().contains(q) || g.name.to_lowercase().contains(q) || g.description.to_lowercase().contains(q)
    };
    let mut all: Vec<_> =
        call.server.state.gateways_where(|g| g.org_id == who.org_id && q.as_deref().is_none_or(|q| holds(g, q)));
    all.sort_by(|a, b| {
        let o = match sort.as_str() {
            "name" => a.name.to_lowercase().cmp(&b.name.to_lowercase()),
            "updated_at" => a.updated_at.cmp(&b.updated_at),
            _ => a.created_at.cmp(&b.created_at),
        }
        .then_with(|| a.id.cmp(&b.id));
        if order == "asc" {
            o
        } else {
            o.reverse()
        }
    });
    let total = all.len();
    let mut items = Vec::new();
    for g in page_of(all, page, limit) {
        let mut functions_count = 0;
        let catalogue = pinned_catalogue(call, &g).await;
        for app in &g.servers {
            functions_count += allowed_functions(call, &g, app, catalogue.as_deref()).await.1.len();
        }
        items.push(GatewayListItem {
            id: g.id.clone(),
            name: g.name.clone(),
            description: g.description.clone(),
            endpoint: endpoint(call, &g.id),
            servers: g.servers.clone(),
            allowed_tools: g.allowed_tools.clone(),
            configuration: g.configuration.clone(),
            rules: g.rules.clone(),
            tool_overrides: g.tool_overrides.clone(),
            tool_limits: g.tool_limits.clone(),
            guards: super::guard_callouts::shown_once(&g, &[]),
            functions_count,
            status: g.status.clone(),
            created_at: iso(&g.created_at),
            updated_at: iso(&g.updated_at),
        });
    }
    Ok(Reply::ok(json!({ "gateways": items, "pagination": pagination_json(page, limit, total) })))
}

#[utoipa::path(get, path = "/v1/gateways/{gateway_id}", tag = "gateways",
    params(("gateway_id" = String, Path)),
    responses((status = 200, body = crate::api::envelope::Envelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope), (status = 404, body = crate::api::envelope::ErrorEnvelope),
              (status = 503, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn get(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let g = found(call, &who.org_id)?;
    let mut servers = Vec::new();
    let catalogue = pinned_catalogue(call, &g).await;
    for app in &g.servers {
        let (status, functions) = allowed_functions(call, &g, app, catalogue.as_deref()).await;
        let name = call.server.state.config().app(app).map(|a| a.name.clone()).unwrap_or_default();
        servers.push(ServerView { id: app.clone(), name, status, functions });
    }
    let metrics = metrics_today(call.server, &g).await?;
    let detail = GatewayDetail {
        id: g.id.clone(),
        name: g.name.clone(),
        description: g.description.clone(),
        endpoint: endpoint(call, &g.id),
        servers,
        allowed_tools: g.allowed_tools.clone(),
        configuration: g.configuration.clone(),
        rules: g.rules.clone(),
        tool_overrides: g.tool_overrides.clone(),
        tool_limits: g.tool_limits.clone(),
        status: g.status.clone(),
        metrics,
        created_at: iso(&g.created_at),
        updated_at: iso(&g.updated_at),
    };
    let mut data = serde_json::to_value(detail).map_err(|e| ApiError::failed("showing a gateway", e))?;
    data["guards"] = super::guard_callouts::shown_once(&g, &[]);
    Ok(Reply::ok(data))
}

#[utoipa::path(post, path = "/v1/gateways", tag = "gateways", request_body = CreateGateway,
    responses((status = 201, description = "created; `api_key` is shown once", body = crate::api::envelope::Envelope),
              (status = 400, body = crate::api::envelope::ErrorEnvelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope), (status = 409, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn create(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let body: CreateGateway = call.json()?;
    let name = validate_name(&body.name)?;
    if let Some(d) = &body.description {
        super::description("description", d)?;
    }
    let servers = validate_servers(call, &body.servers)?;
    let allowed = validate_allowed(&servers, body.allowed_tools.unwrap_or_default())?;
    // A new gateway pins its apps' tools unless it says otherwise (a stored one without the
    // field stays `off`).
    let mut configuration = GatewayConfiguration { tool_policy: ToolPolicy::Pin, ..GatewayConfiguration::default() };
    apply_configuration(&mut configuration, body.configuration.unwrap_or_default())?;
    let rules = validate_rules(call, body.rules.unwrap_or_default())?;
    let state = &call.server.state;
    let _guard = state.lock_writes(&who.org_id).await?;
    if name_taken(call, &who.org_id, &name, None) {
        return Err(ApiError::Conflict(format!("a gateway named `{name}` already exists")));
    }
    super::quotas::check(state, &who.org_id, super::quotas::Quota::Gateways)?;
    let now = Utc::now();
    let id = secrets::new_id("gw");
    let plaintext = secrets::new_api_key();
    let key = ApiKey {
        schema_version: SCHEMA_VERSION,
        id: secrets::new_id("key"),
        org_id: who.org_id.clone(),
        user_id: who.user_id.clone(),
        name: format!("gateway {id} access key"),
        hash: secrets::hash_key(&plaintext),
        scopes: vec![],
        created_at: now,
        expires_at: None,
        revoked_at: None,
        bypass_ip_whitelist: false,
        gateway_id: Some(id.clone()),
        service_account_id: None,
        declared: false,
        retires_at: None,
    };
    let mut gw = Gateway {
        schema_version: SCHEMA_VERSION,
        id: id.clone(),
        org_id: who.org_id.clone(),
        name,
        description: body.description.unwrap_or_default(),
        servers,
        allowed_tools: allowed,
        configuration,
        rules,
        tool_overrides: Vec::new(),
        guards: Vec::new(),
        tool_limits: super::tool_limits::validate(body.tool_limits.unwrap_or_default())?,
        status: "active".into(),
        created_at: now,
        updated_at: now,
        access_key_id: key.id.clone(),
    };
    gw.tool_overrides = super::tool_overrides::validate(call, &gw, body.tool_overrides.unwrap_or_default()).await?;
    let (guards, secrets_made) = super::guard_callouts::validate(call, &[], body.guards.unwrap_or_default()).await?;
    gw.guards = guards;
    state.save_key(key).await?;
    let gw = state.save_gateway(gw).await?;
    let created = GatewayCreated {
        id: gw.id.clone(),
        name: gw.name.clone(),
        endpoint: endpoint(call, &gw.id),
        api_key: plaintext,
        created_at: iso(&gw.created_at),
    };
    let mut data = serde_json::to_value(created).map_err(|e| ApiError::failed("answering a new gateway", e))?;
    if !gw.guards.is_empty() {
        data["guards"] = super::guard_callouts::shown_once(&gw, &secrets_made);
    }
    Ok(Reply::created(data))
}

#[utoipa::path(patch, path = "/v1/gateways/{gateway_id}", tag = "gateways", request_body = UpdateGateway,
    params(("gateway_id" = String, Path),
           ("X-MFA-Token" = Option<String>, Header, description = "required when MFA is active and the change loosens a guard: widens what `servers` and `allowed_tools` serve, lowers `tool_policy` or `description_policy`, opens `auth` to OAuth, removes, edits, moves or adds an allow rule, sets or changes `tool_overrides`, loosens `tool_limits` (removes an entry, raises or drops a figure, counts per a narrower group, narrows a glob), or adds, removes or loosens an external guard (`guards`)")),
    responses((status = 200, body = crate::api::envelope::Envelope), (status = 400, body = crate::api::envelope::ErrorEnvelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope), (status = 403, body = crate::api::envelope::ErrorEnvelope),
              (status = 404, body = crate::api::envelope::ErrorEnvelope), (status = 409, body = crate::api::envelope::ErrorEnvelope),
              (status = 503, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn update(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let state = &call.server.state;
    found(call, &who.org_id)?;
    let patch: UpdateGateway = call.json()?;
    let _guard = state.lock_writes(&who.org_id).await?;
    let before = found(call, &who.org_id)?;
    let mut g = before.as_ref().clone();
    if let Some(name) = patch.name {
        let name = validate_name(&name)?;
        if name_taken(call, &who.org_id, &name, Some(&g.id)) {
            return Err(ApiError::Conflict(format!("a gateway named `{name}` already exists")));
        }
        g.name = name;
    }
    if let Some(d) = patch.description {
        super::description("description", &d)?;
        g.description = d;
    }
    if let Some(servers) = patch.servers {
        g.servers = validate_servers(call, &servers)?;
        // Entries for apps that left the gateway go with them.
        g.allowed_tools.retain(|app, _| g.servers.contains(app));
    }
    if let Some(allowed) = patch.allowed_tools {
        g.allowed_tools = validate_allowed(&g.servers, allowed)?;
    }
    if let Some(c) = patch.configuration {
        apply_configuration(&mut g.configuration, c)?;
    }
    if let Some(r) = patch.rules {
        g.rules = validate_rules(call, r)?;
    }
    if let Some(o) = patch.tool_overrides {
        g.tool_overrides = super::tool_overrides::validate(call, &g, o).await?;
    }
    let mut secrets_made = Vec::new();
    if let Some(given) = patch.guards {
        (g.guards, secrets_made) = super::guard_callouts::validate(call, &before.guards, given).await?;
    }
    if let Some(l) = patch.tool_limits {
        g.tool_limits = super::tool_limits::validate(l)?;
    }
    // Asked once the change is known to be valid, so a bad body does not use up an MFA token.
    let guards = super::gateway_guards::change(&before, &g);
    if guards.loosens() {
        super::mfa::gate(call).await?;
    }
    g.updated_at = Utc::now();
    let g = state.save_gateway(g).await?;
    drop(_guard);
    let mut reply = get(call).await?;
    reply.status = 200;
    if !secrets_made.is_empty() {
        super::guard_callouts::with_secrets(&mut reply, &g, &secrets_made);
    }
    reply.audit = guards.audit();
    Ok(reply)
}

#[utoipa::path(delete, path = "/v1/gateways/{gateway_id}", tag = "gateways",
    params(("gateway_id" = String, Path)),
    responses((status = 200, body = crate::api::envelope::MessageEnvelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope), (status = 404, body = crate::api::envelope::ErrorEnvelope),
              (status = 503, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn delete(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let state = &call.server.state;
    found(call, &who.org_id)?;
    super::mfa::gate(call).await?;
    let _guard = state.lock_writes(&who.org_id).await?;
    let g = found(call, &who.org_id)?;
    state.delete_gateway(&g.id).await?;
    // The access key dies with its gateway.
    state.delete_key(&g.access_key_id).await?;
    drop(_guard);
    Ok(Reply::message(format!("Gateway {} deleted", g.id)))
}

//! `/apps`: the catalogue declared in YAML, each organisation's connections, and a live test.

use super::app_connections::Holder;
use super::{ApiResult, Call, Reply};
use crate::base::secrets;
use crate::config::AppConfig;
use crate::data::model::Connection;
use crate::edge::error::ApiError;
use crate::identity::app_oauth;
use chrono::Utc;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::Instant;
use utoipa::ToSchema;

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AppListItem {
    pub id: String,
    pub name: String,
    pub description: String,
    pub category: String,
    pub status: String,
    pub auth_types: Vec<String>,
    pub functions_count: usize,
    pub icon: String,
    pub health: HealthView,
    /// `organization` or `user`, as in the app's detail (what the console offers to connect).
    pub connection_scope: String,
    /// For a `user`-scoped app, the caller's own connection: `none`, `pending`, `connected` or
    /// `error`; null for an app connected by the organisation.
    pub own_connection_status: Option<String>,
}

/// What the app's background probe found on this instance (`src/mcp/health.rs`). Apart from
/// `status`, which says whether the organisation's connection (its credentials, its settings)
/// is in place, not whether the app answers.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct HealthView {
    /// `up` (it answered its latest probe), `down` (it could not be reached, started or
    /// understood) or `unknown` (not probed yet; a stdio app whose process has not started).
    pub state: String,
    /// Why it is down or unknown, in words (`connection refused`, `timed out`, `answered HTTP
    /// 503`, ...); null when up.
    pub last_error: Option<String>,
    /// When the latest probe ended (ISO 8601); null before the first.
    pub checked_at: Option<String>,
}

impl HealthView {
    fn of(call: &Call<'_>, app_id: &str) -> HealthView {
        let h = call.server.mcp.apps.health.of(app_id);
        HealthView {
            state: h.state.as_str().to_string(),
            last_error: h.last_error,
            checked_at: h.checked_at.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct FunctionView {
    pub name: String,
    pub description: String,
    /// Parameter name -> type name.
    #[schema(value_type = Object)]
    pub parameters: Map<String, Value>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AppDetail {
    pub id: String,
    pub name: String,
    pub description: String,
    pub long_description: String,
    pub category: String,
    pub status: String,
    pub auth_types: Vec<String>,
    /// The auth type of the organisation's connection, or `none`.
    pub current_auth: String,
    /// The organisation's connection: `none`, `pending` (an OAuth authorization not finished),
    /// `connected`, or `error` (its OAuth authorization was refused or could not be renewed:
    /// connect the app again).
    pub connection_status: String,
    pub icon: String,
    pub functions: Vec<FunctionView>,
    pub configuration: AppConfiguration,
    pub health: HealthView,
    /// `organization` (connected once for the organisation) or `user` (each member connects it
    /// for themself, and calls go with the caller's own connection).
    pub connection_scope: String,
    /// For a `user`-scoped app, the caller's own connection beside the organisation's: `none`,
    /// `pending`, `connected` or `error`; null for an app connected by the organisation.
    pub own_connection_status: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AppConfiguration {
    pub base_url: String,
    /// Requests per minute the app accepts from the gateway, all callers together; 0: no limit.
    pub rate_limit: u32,
}

/// `data` of `GET /apps`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AppList {
    pub apps: Vec<AppListItem>,
}

/// The envelope of `GET /apps`, so that the document states the list view's fields.
#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct AppListEnvelope {
    success: bool,
    data: AppList,
    meta: crate::api::envelope::Meta,
}

/// The envelope of `GET /apps/{app_id}`, so that the document states the detail view's fields.
#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct AppDetailEnvelope {
    success: bool,
    data: AppDetail,
    meta: crate::api::envelope::Meta,
}

/// Body of `POST /apps/{id}/connect`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConnectApp {
    /// `api_key` or `oauth`.
    pub auth_type: String,
    pub credentials: Option<Credentials>,
    /// OAuth only: where the provider sends the user back.
    pub redirect_uri: Option<String>,
}

/// What the provider sent back to the `redirect_uri` of an OAuth connect: `state` with `code`,
/// or with `error` when the user (or the provider) refused.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConnectCallback {
    pub state: String,
    pub code: Option<String>,
    pub error: Option<String>,
    pub error_description: Option<String>,
    /// RFC 9207's issuer identifier: accepted (the struct refuses unknown fields) but not
    /// checked, since the flow is bound to its provider by `state` and PKCE.
    #[allow(dead_code)]
    pub iss: Option<String>,
}

#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Credentials {
    pub api_key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_secret: Option<String>,
}

fn app(call: &Call<'_>) -> Result<std::sync::Arc<AppConfig>, ApiError> {
    call.server.state.app(call.id()).ok_or(ApiError::NotFound("app"))
}

/// An app's functions as one organisation sees them: its own listing when it is connected,
/// else (or when the app cannot be reached) the YAML declaration, else the latest listing any
/// organisation got, else none.
enum Functions {
    Listed(Arc<Vec<Value>>),
    Declared,
    None,
}

impl Functions {
    async fn of(call: &Call<'_>, org_id: &str, a: &AppConfig, connected: bool) -> Functions {
        if connected {
            match call.server.mcp.apps.tools(org_id, &a.id).await {
                Ok(tools) => return Functions::Listed(tools),
                Err(e) => tracing::warn!(app = a.id, error = %e, "cannot list app tools"),
            }
        }
        if !a.functions.is_empty() {
            return Functions::Declared;
        }
        // Kept by the app clients; names, descriptions and parameter types are all it shows.
        match call.server.mcp.apps.last_tools(&a.id) {
            Some(tools) => Functions::Listed(tools),
            None => Functions::None,
        }
    }

    fn count(&self, a: &AppConfig) -> usize {
        match self {
            Functions::Listed(tools) => tools.len(),
            Functions::Declared => a.functions.len(),
            Functions::None => 0,
        }
    }

    fn views(&self, a: &AppConfig) -> Vec<FunctionView> {
        match self {
            Functions::Listed(tools) => function_views(tools),
            Functions::Declared => a
                .functions
                .iter()
                .map(|f| FunctionView {
                    name: f.name.clone(),
                    description: f.description.clone(),
                    parameters: f.parameters.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect(),
                })
                .collect(),
            Functions::None => vec![],
        }
    }
}

/// An app's functions in the API's shape: parameters as name -> JSON Schema type name.
fn function_views(tools: &[Value]) -> Vec<FunctionView> {
    tools
        .iter()
        .map(|t| {
            let mut parameters = Map::new();
            if let Some(props) = t.pointer("/inputSchema/properties").and_then(Value::as_object) {
                for (name, schema) in props {
                    let ty = match schema.get("type") {
                        Some(Value::String(s)) => s.clone(),
                        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join("|"),
                        _ => "any".into(),
                    };
                    parameters.insert(name.clone(), Value::String(ty));
                }
            }
            FunctionView {
                name: t.get("name").and_then(Value::as_str).unwrap_or_default().to_string(),
                description: t.get("description").and_then(Value::as_str).unwrap_or_default().to_string(),
                parameters,
            }
        })
        .collect()
}

#[utoipa::path(get, path = "/v1/apps", tag = "apps",
    params(("category" = Option<String>, Query), ("status" = Option<String>, Query, description = "available, connected or beta"),
           ("search" = Option<String>, Query, description = "matches name or description")),
    responses((status = 200, body = AppListEnvelope), (status = 400, body = crate::api::envelope::ErrorEnvelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope), (status = 403, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn list(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let status = call.query_choice("status", &["available", "connected", "beta"])?;
    let category = call.query("category").map(str::to_lowercase);
    let search = call.query("search").map(str::to_lowercase);
    let state = &call.server.state;
    let mut apps = Vec::new();
    for a in &state.config().apps {
        let st = state.app_status(&who.org_id, a);
        if status.as_deref().is_some_and(|s| s != st) {
            continue;
        }
        if category.as_deref().is_some_and(|c| a.category.to_lowercase() != c) {
            continue;
        }
        if let Some(q) = &search {
            if !a.name.to_lowercase().contains(q) && !a.description.to_lowercase().contains(q) {
                continue;
            }
        }
        let functions_count = Functions::of(call, &who.org_id, a, st == "connected").await.count(a);
        apps.push(AppListItem {
            id: a.id.clone(),
            name: a.name.clone(),
            description: a.description.clone(),
            category: a.category.clone(),
            status: st,
            auth_types: a.auth_types.clone(),
            functions_count,
            icon: a.icon.clone(),
            health: HealthView::of(call, &a.id),
            connection_scope: if a.per_user.is_some() { "user" } else { "organization" }.into(),
            own_connection_status: own_status(call, who, a),
        });
    }
    Ok(Reply::ok(serde_json::to_value(AppList { apps }).map_err(|e| ApiError::failed("listing apps", e))?))
}

#[utoipa::path(get, path = "/v1/apps/{app_id}", tag = "apps", params(("app_id" = String, Path)),
    responses((status = 200, body = AppDetailEnvelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope), (status = 404, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn get(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let a = app(call)?;
    let state = &call.server.state;
    let status = state.app_status(&who.org_id, &a);
    let functions = Functions::of(call, &who.org_id, &a, status == "connected").await.views(&a);
    // The auth in use: a pending connection (an OAuth flow not finished) uses none yet.
    let connection = state.connection(&who.org_id, &a.id);
    let current_auth = connection
        .as_ref()
        .filter(|c| c.status == "connected")
        .map(|c| c.auth_type.clone())
        .unwrap_or_else(|| "none".into());
    let connection_status = connection.map_or_else(|| "none".to_string(), |c| c.status.clone());
    // Apps are the operator's: only the owner of the operator's organisation (the one made for
    // TOOLGATE_ADMIN_KEY) sees where an app really runs.
    let operator = who.org_id == crate::data::state::BOOTSTRAP_ORG && who.role == toolgate_filters::Role::Owner;
    let base_url = if operator { a.base_url() } else { a.base_url_for_tenants() };
    let detail = AppDetail {
        id: a.id.clone(),
        name: a.name.clone(),
        description: a.description.clone(),
        long_description: a.long_description.clone(),
        category: a.category.clone(),
        status,
        auth_types: a.auth_types.clone(),
        current_auth,
        connection_status,
        icon: a.icon.clone(),
        functions,
        configuration: AppConfiguration { base_url, rate_limit: a.rate_limit.unwrap_or(0) },
        health: HealthView::of(call, &a.id),
        connection_scope: if a.per_user.is_some() { "user" } else { "organization" }.into(),
        own_connection_status: own_status(call, who, &a),
    };
    Ok(Reply::ok(serde_json::to_value(detail).map_err(|e| ApiError::failed("showing an app", e))?))
}

#[utoipa::path(post, path = "/v1/apps/{app_id}/connect", tag = "apps", params(("app_id" = String, Path),
           ("user_id" = Option<String>, Query, description = "a user-scoped app: whose own connection (a service account's, or another member's to remove; apps:write); default the caller's"),
           ("organization" = Option<bool>, Query, description = "a user-scoped app: true for the organisation's connection (apps:write)")), request_body = ConnectApp,
    responses((status = 200, description = "app_id, status, connection_id (and authorization_url for oauth)", body = crate::api::envelope::Envelope),
              (status = 400, body = crate::api::envelope::ErrorEnvelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope), (status = 404, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn connect(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let a = app(call)?;
    let body: ConnectApp = call.json()?;
    accepted(&a, &body.auth_type)?;
    let holder = Holder::of(call, &a)?;
    holder.may_connect(call, who)?;
    let (mut connection, authorization_url) = match body.auth_type.as_str() {
        "api_key" => (api_key_connection(call, &who.org_id, &a, body.credentials)?, None),
        _ => {
            let (c, url) = oauth_connection(call, &who.org_id, &a, body.redirect_uri).await?;
            (c, Some(url))
        }
    };
    connection.user_id = holder.user_id().map(str::to_string);
    let c = call.server.state.save_connection(connection).await?;
    let mut data = json!({ "app_id": a.id, "status": c.status, "connection_id": c.id });
    if let Some(url) = authorization_url {
        data["authorization_url"] = Value::String(url);
    }
    if let Some(user) = &c.user_id {
        data["user_id"] = Value::String(user.clone());
    }
    Ok(with_holder(Reply::ok(data), &holder))
}

/// The caller's own connection status of a per-user app (`none` when it has none).
fn own_status(call: &Call<'_>, who: &toolgate_filters::Principal, a: &AppConfig) -> Option<String> {
    a.per_user.as_ref()?;
    let own = Holder::of(call, a).ok().filter(|h| matches!(h, Holder::Own { callers: true, .. }));
    let conn = own.and_then(|h| h.connection(call, &who.org_id, &a.id));
    Some(conn.map_or_else(|| "none".to_string(), |c| c.status.clone()))
}

/// The reply, its audit entry naming the member or service account whose own connection it was.
fn with_holder(mut reply: Reply, holder: &Holder) -> Reply {
    if let Some(user) = holder.user_id() {
        reply.audit = Some(json!({ "connection_user_id": user }));
    }
    reply
}

/// Refuses an `auth_type` the app does not take, naming the ones it does.
fn accepted(a: &AppConfig, auth_type: &str) -> Result<(), ApiError> {
    if a.auth_types.iter().any(|t| t == auth_type) {
        return Ok(());
    }
    let accepted = if a.auth_types.is_empty() {
        "none (the app needs no credentials)".to_string()
    } else {
        a.auth_types.join(", ")
    };
    Err(ApiError::validation("auth_type", format!("`{auth_type}` is not accepted by this app; accepted: {accepted}")))
}

/// A new connection of the organisation to the app, its credentials sealed.
fn new_connection(
    call: &Call<'_>,
    org_id: &str,
    a: &AppConfig,
    auth_type: &str,
    status: &str,
    secret: &impl Serialize,
) -> Result<Connection, ApiError> {
    let sealed = call
        .server
        .state
        .sealer
        .seal(&serde_json::to_vec(secret).map_err(|e| ApiError::failed("sealing an app's credentials", e))?);
    Ok(Connection {
        id: secrets::new_id("conn"),
        org_id: org_id.to_string(),
        app_id: a.id.clone(),
        auth_type: auth_type.into(),
        status: status.into(),
        sealed_credentials: Some(sealed),
        redirect_uri: None,
        oauth_state: None,
        created_at: Utc::now(),
        user_id: None,
    })
}

/// `api_key`: connected at once with the key given.
fn api_key_connection(
    call: &Call<'_>,
    org_id: &str,
    a: &AppConfig,
    credentials: Option<Credentials>,
) -> Result<Connection, ApiError> {
    let creds = credentials.ok_or_else(|| ApiError::validation("credentials", "required for auth_type api_key"))?;
    if creds.api_key.trim().is_empty() {
        return Err(ApiError::validation("credentials.api_key", "must not be empty"));
    }
    new_connection(call, org_id, a, "api_key", "connected", &creds)
}

/// `oauth`: a pending connection (its PKCE verifier sealed, its `state` kept for the callback)
/// and the provider's authorization URL the user is sent to.
async fn oauth_connection(
    call: &Call<'_>,
    org_id: &str,
    a: &AppConfig,
    redirect_uri: Option<String>,
) -> Result<(Connection, String), ApiError> {
    let oauth = a.oauth.as_ref().ok_or_else(|| ApiError::Internal("oauth app without oauth settings".into()))?;
    let redirect = redirect_uri.ok_or_else(|| ApiError::validation("redirect_uri", "required for auth_type oauth"))?;
    match url::Url::parse(&redirect) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => {}
        _ => return Err(ApiError::validation("redirect_uri", "must be an absolute http or https URL")),
    }
    let oauth_state = secrets::new_session_id();
    let pkce = app_oauth::pkce();
    let allows_http = call.server.state.config().environment.allows_http();
    let authorize = app_oauth::endpoints(a, allows_http)
        .await
        .and_then(|e| app_oauth::authorization_url(oauth, &e, &redirect, &oauth_state, &pkce.challenge))
        .map_err(|e| ApiError::UnavailableBecause { context: "the app's authorization server", source: e.into() })?;
    let pending = app_oauth::Pending { pkce_verifier: pkce.verifier };
    let mut c = new_connection(call, org_id, a, "oauth", "pending", &pending)?;
    c.redirect_uri = Some(redirect);
    c.oauth_state = Some(oauth_state);
    Ok((c, authorize))
}

#[utoipa::path(post, path = "/v1/apps/{app_id}/connect/callback", tag = "apps", params(("app_id" = String, Path),
           ("user_id" = Option<String>, Query, description = "a user-scoped app: whose own connection (a service account's, or another member's to remove; apps:write); default the caller's"),
           ("organization" = Option<bool>, Query, description = "a user-scoped app: true for the organisation's connection (apps:write)")), request_body = ConnectCallback,
    responses((status = 200, description = "app_id, status (`connected`), connection_id", body = crate::api::envelope::Envelope),
              (status = 400, body = crate::api::envelope::ErrorEnvelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope), (status = 404, body = crate::api::envelope::ErrorEnvelope),
              (status = 503, body = crate::api::envelope::ErrorEnvelope)))]
/// Finishes an OAuth connect: the `state` must be the pending authorization's (once), the code
/// is exchanged with the PKCE verifier, and the tokens are kept sealed.
pub(crate) async fn connect_callback(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let a = app(call)?;
    let body: ConnectCallback = call.json()?;
    let state = &call.server.state;
    let holder = Holder::of(call, &a)?;
    let pending = holder
        .connection(call, &who.org_id, &a.id)
        .filter(|c| c.auth_type == "oauth" && c.status == "pending")
        .ok_or(ApiError::NotFound("pending OAuth authorization"))?;
    holder.may_change(who)?;
    let expected = pending.oauth_state.as_deref().unwrap_or_default();
    if expected.is_empty() || !secrets::hashes_equal(expected, &body.state) {
        return Err(ApiError::validation("state", "does not match the pending authorization (or was used already)"));
    }
    let verifier = pending
        .sealed_credentials
        .as_deref()
        .and_then(|s| state.sealer.open(s).ok())
        .and_then(|plain| serde_json::from_slice::<app_oauth::Pending>(&plain).ok())
        .ok_or_else(|| ApiError::Internal("the pending authorization's PKCE verifier cannot be read".into()))?;
    // Used once: a second callback with the same state finds nothing pending.
    let mut done = (*pending).clone();
    done.oauth_state = None;
    if let Some(error) = body.error {
        state.save_connection(failed(done)).await?;
        let said = body.error_description.map(|d| format!(": {d}")).unwrap_or_default();
        return Err(ApiError::validation("error", format!("the provider refused the authorization ({error}{said})")));
    }
    let code = body.code.filter(|c| !c.is_empty()).ok_or_else(|| ApiError::validation("code", "required"))?;
    let redirect = pending.redirect_uri.as_deref().unwrap_or_default();
    let allow_http = state.config().environment.allows_http();
    let tokens = match app_oauth::exchange_code(&a, allow_http, &code, redirect, &verifier.pkce_verifier).await {
        Ok(t) => t,
        Err(e) => {
            state.save_connection(failed(done)).await?;
            return Err(match e {
                app_oauth::AppOAuthError::Refused { .. } => ApiError::validation("code", e.to_string()),
                _ => ApiError::Unavailable(e.to_string()),
            });
        }
    };
    done.status = "connected".into();
    done.sealed_credentials = Some(
        state.sealer.seal(&serde_json::to_vec(&tokens).map_err(|e| ApiError::failed("sealing an app's tokens", e))?),
    );
    let c = state.save_connection(done).await?;
    let reply = Reply::ok(json!({ "app_id": a.id, "status": c.status, "connection_id": c.id }));
    Ok(with_holder(reply, &holder))
}

/// A connection whose OAuth authorization failed: `error`, holding nothing (connect again).
fn failed(mut c: Connection) -> Connection {
    c.status = "error".into();
    c.sealed_credentials = None;
    c.oauth_state = None;
    c
}

#[utoipa::path(delete, path = "/v1/apps/{app_id}/connection", tag = "apps", params(("app_id" = String, Path),
           ("user_id" = Option<String>, Query, description = "a user-scoped app: whose own connection (a service account's, or another member's to remove; apps:write); default the caller's"),
           ("organization" = Option<bool>, Query, description = "a user-scoped app: true for the organisation's connection (apps:write)")),
    responses((status = 200, body = crate::api::envelope::MessageEnvelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope), (status = 404, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn disconnect(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let a = app(call)?;
    let holder = Holder::of(call, &a)?;
    if holder.connection(call, &who.org_id, &a.id).is_none() {
        return Err(ApiError::NotFound("connection"));
    }
    holder.may_change(who)?;
    if !holder.delete(call, &who.org_id, &a.id).await? {
        return Err(ApiError::NotFound("connection"));
    }
    Ok(with_holder(Reply::message(format!("App {} disconnected", a.id)), &holder))
}

#[utoipa::path(post, path = "/v1/apps/{app_id}/test", tag = "apps", params(("app_id" = String, Path)),
    responses((status = 200, description = "status (`ok` or `error`), latency in ms, message", body = crate::api::envelope::Envelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope), (status = 403, body = crate::api::envelope::ErrorEnvelope),
              (status = 404, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn test(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let a = app(call)?;
    if !call.server.state.is_connected(&who.org_id, &a.id) {
        return Ok(Reply::ok(json!({ "status": "error", "latency": 0, "message": "app is not connected" })));
    }
    let started = Instant::now();
    let result = call.server.mcp.apps.refresh_tools(&who.org_id, &a.id).await;
    let latency = started.elapsed().as_millis() as u64;
    Ok(Reply::ok(match result {
        Ok(tools) => {
            json!({ "status": "ok", "latency": latency, "message": format!("{} tools available", tools.len()) })
        }
        Err(e) => json!({ "status": "error", "latency": latency, "message": e.to_string() }),
    }))
}

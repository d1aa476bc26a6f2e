//! `/oauth/clients`: the clients of toolgate's OAuth authorization server that an organisation
//! registers (scope `admin`). A confidential client's secret is shown once, when it is made, and
//! kept as its SHA-256 (it is 32 random bytes, so no slow hash is needed, as for API keys).
//! Deleting a client revokes every grant its users made it.

use super::{iso, ApiResult, Call, Reply};
use crate::base::secrets;
use crate::data::model::OAuthClient;
use crate::data::store::Kind;
use crate::edge::error::ApiError;
use crate::edge::forms::display_name;
use chrono::Utc;
use serde::Deserialize;
use serde_json::{json, Value};
use toolgate_filters::ScopeSet;
use utoipa::ToSchema;

/// Clients one organisation may register.
const MAX_CLIENTS: usize = 50;
const MAX_REDIRECT_URIS: usize = 10;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateClient {
    /// Shown to users on the consent page.
    #[schema(min_length = 1, max_length = 100)]
    pub name: String,
    /// Where users are sent back: absolute https URLs (http for a loopback host), no fragment;
    /// an authorization request's `redirect_uri` must equal one of them exactly.
    #[schema(min_items = 1, max_items = 10)]
    pub redirect_uris: Vec<String>,
    /// The most users may grant it: scope names of the management API.
    #[schema(min_items = 1, max_items = 12)]
    pub scopes: Vec<String>,
    /// A public client (a native or browser application) gets no secret and must use PKCE.
    #[serde(default)]
    pub public: bool,
}

fn view(c: &OAuthClient) -> Value {
    json!({
        "client_id": c.id, "name": c.name, "redirect_uris": c.redirect_uris, "scopes": c.scopes,
        "public": c.public, "token_endpoint_auth_method": if c.public { "none" } else { "client_secret_basic" },
        "created_by": c.created_by, "created_at": iso(&c.created_at),
    })
}

async fn clients_of(call: &Call<'_>, org_id: &str) -> Result<Vec<OAuthClient>, ApiError> {
    let rows = call.server.state.store.load_partition(Kind::OAuthClient, org_id).await?;
    let mut all: Vec<OAuthClient> = rows.iter().filter_map(|(_, json)| serde_json::from_str(json).ok()).collect();
    all.sort_by(|a, b| a.created_at.cmp(&b.created_at).then_with(|| a.id.cmp(&b.id)));
    Ok(all)
}

async fn find(call: &Call<'_>) -> Result<OAuthClient, ApiError> {
    let who = call.who()?;
    call.server
        .state
        .oauth_client(call.id())
        .await?
        .map(|c| OAuthClient::clone(&c))
        .filter(|c| c.org_id == who.org_id)
        .ok_or(ApiError::NotFound("OAuth client"))
}

#[utoipa::path(get, path = "/v1/oauth/clients", tag = "oauth",
    responses((status = 200, body = crate::api::envelope::Envelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn list(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let clients = clients_of(call, &who.org_id).await?;
    Ok(Reply::ok(json!({ "clients": clients.iter().map(view).collect::<Vec<_>>() })))
}

#[utoipa::path(post, path = "/v1/oauth/clients", tag = "oauth", request_body = CreateClient,
    responses((status = 201, description = "the client; `client_secret` (confidential clients) is shown this once", body = crate::api::envelope::Envelope),
              (status = 400, body = crate::api::envelope::ErrorEnvelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope), (status = 409, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn create(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let body: CreateClient = call.json()?;
    let name = display_name("name", &body.name)?.to_string();
    if body.redirect_uris.is_empty() || body.redirect_uris.len() > MAX_REDIRECT_URIS {
        return Err(ApiError::validation("redirect_uris", format!("1-{MAX_REDIRECT_URIS} URLs")));
    }
    let mut redirect_uris = Vec::with_capacity(body.redirect_uris.len());
    for raw in &body.redirect_uris {
        crate::identity::oauth_server::check_redirect_uri(raw).map_err(|e| ApiError::validation("redirect_uris", e))?;
        if !redirect_uris.contains(raw) {
            redirect_uris.push(raw.clone());
        }
    }
    if body.scopes.is_empty() || body.scopes.len() > 12 {
        return Err(ApiError::validation("scopes", "1-12 scope names"));
    }
    let scopes = ScopeSet::parse(body.scopes.iter().map(String::as_str)).map_err(|bad| {
        let bad: String = bad.chars().take(64).collect();
        ApiError::validation("scopes", format!("unknown scope `{bad}`"))
    })?;
    let state = &call.server.state;
    let _guard = state.lock_writes(&who.org_id).await?;
    if clients_of(call, &who.org_id).await?.len() >= MAX_CLIENTS {
        return Err(ApiError::Conflict(format!("an organisation registers at most {MAX_CLIENTS} OAuth clients")));
    }
    let secret = (!body.public).then(|| format!("tgs_{}", secrets::new_session_id()));
    let client = OAuthClient {
        id: secrets::new_id("tgc"),
        org_id: who.org_id.clone(),
        name,
        redirect_uris,
        scopes: scopes.each_name().into_iter().map(str::to_string).collect(),
        public: body.public,
        secret_hash: secret.as_deref().map(secrets::hash_key),
        created_by: who.user_id.clone(),
        created_at: Utc::now(),
    };
    state.save_oauth_client(&client, None).await?;
    let mut data = view(&client);
    if let Some(secret) = secret {
        data["client_secret"] = json!(secret);
    }
    Ok(Reply::created(data))
}

#[utoipa::path(get, path = "/v1/oauth/clients/{client_id}", tag = "oauth", params(("client_id" = String, Path)),
    responses((status = 200, body = crate::api::envelope::Envelope), (status = 401, body = crate::api::envelope::ErrorEnvelope),
              (status = 403, body = crate::api::envelope::ErrorEnvelope), (status = 404, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn get(call: &Call<'_>) -> ApiResult {
    let client = find(call).await?;
    let grants = call.server.state.grants_of_client(&client.id).len();
    let mut data = view(&client);
    data["active_grants"] = json!(grants);
    Ok(Reply::ok(data))
}

#[utoipa::path(delete, path = "/v1/oauth/clients/{client_id}", tag = "oauth", params(("client_id" = String, Path)),
    responses((status = 200, description = "deleted, and every token issued to it revoked", body = crate::api::envelope::MessageEnvelope),
              (status = 401, body = crate::api::envelope::ErrorEnvelope), (status = 403, body = crate::api::envelope::ErrorEnvelope),
              (status = 404, body = crate::api::envelope::ErrorEnvelope)))]
pub(crate) async fn delete(call: &Call<'_>) -> ApiResult {
    let who = call.who()?;
    let state = &call.server.state;
    let _guard = state.lock_writes(&who.org_id).await?;
    let client = find(call).await?;
    state.delete_oauth_client(&client).await?;
    Ok(Reply::message(format!("OAuth client {} deleted; its tokens are revoked", client.id)))
}

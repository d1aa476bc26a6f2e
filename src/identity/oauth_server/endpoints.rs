//! The authorization server's machine endpoints: token (RFC 6749 section 3.2), revocation
//! (RFC 7009) and metadata (RFC 8414). Form-encoded in, JSON out, errors as RFC 6749 section
//! 5.2 has them (`{"error", "error_description"}`), never cached.

use super::{param, OAuthServerError};
use crate::config::Config;
use crate::data::model::OAuthClient;
use crate::edge::exchange::Exchange;
use crate::edge::forms;
use crate::identity::IdentityService;
use base64::Engine as _;
use http::header::{HeaderName, HeaderValue};
use pingora::Result;
use serde_json::{json, Value};

/// Largest form accepted.
const MAX_FORM_BYTES: usize = 16 * 1024;

/// The metadata document (RFC 8414 section 2).
pub(crate) fn metadata(config: &Config) -> Value {
    let base = format!("{}{}", config.server.public_url, config.web.path);
    let auth_methods = ["client_secret_basic", "client_secret_post", "none"];
    let mut doc = json!({
        "issuer": config.server.public_url,
        "authorization_endpoint": format!("{base}/oauth/authorize"),
        "token_endpoint": format!("{base}/oauth/token"),
        "revocation_endpoint": format!("{base}/oauth/revoke"),
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": auth_methods,
        "revocation_endpoint_auth_methods_supported": auth_methods,
        "scopes_supported": toolgate_filters::ScopeSet::ALL.each_name(),
        "authorization_response_iss_parameter_supported": true,
    });
    if config.web.dynamic_registration {
        doc["registration_endpoint"] = json!(format!("{base}/oauth/register"));
    }
    if config.web.client_documents.is_some() {
        doc["client_id_metadata_document_supported"] = json!(true);
    }
    doc
}

/// Answers `POST {auth_url}/oauth/token`, `/oauth/revoke` and `/oauth/register` (`path` is after
/// the prefix).
pub(crate) async fn handle(identity: &IdentityService, ex: &mut Exchange<'_>, path: &str) -> Result<()> {
    if ex.request().method != http::Method::POST {
        let e = OAuthServerError::new("invalid_request", "use POST with an application/x-www-form-urlencoded body");
        return write(ex, 405, &e.to_body(), &[(http::header::ALLOW, HeaderValue::from_static("POST"))]).await;
    }
    if path == "/oauth/register" {
        return match register(identity, ex).await {
            Ok(body) => write(ex, 201, &body, &[]).await,
            Err(e) => write(ex, e.status(), &e.to_body(), &[]).await,
        };
    }
    let basic_used = ex.headers().contains_key(http::header::AUTHORIZATION);
    let outcome = match path {
        "/oauth/token" => token(identity, ex).await.map(|t| serde_json::to_value(t).unwrap_or_default()),
        _ => revoke(identity, ex).await.map(|()| json!({})),
    };
    match outcome {
        Ok(body) => write(ex, 200, &body, &[]).await,
        Err(e) => {
            let mut headers = Vec::new();
            if e.code == "invalid_client" && basic_used {
                // RFC 6749 section 5.2: a client that tried Basic is told the scheme.
                headers.push((http::header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic realm=\"toolgate\"")));
            }
            write(ex, e.status(), &e.to_body(), &headers).await
        }
    }
}

/// A refusal at the edge (the address's bucket), in the endpoints' own error form.
pub(crate) async fn refuse(ex: &mut Exchange<'_>, e: crate::edge::error::ApiError) -> Result<()> {
    let o = OAuthServerError::refused(&e);
    write(ex, o.status(), &o.to_body(), &[]).await
}

async fn write(ex: &mut Exchange<'_>, status: u16, body: &Value, extra: &[(HeaderName, HeaderValue)]) -> Result<()> {
    let mut headers = extra.to_vec();
    if let Some(secs) = body.get("retry_after").and_then(Value::as_u64) {
        headers.push((http::header::RETRY_AFTER, HeaderValue::from(secs)));
    }
    headers.push((http::header::PRAGMA, HeaderValue::from_static("no-cache")));
    ex.respond(status, "application/json", serde_json::to_vec(body).unwrap_or_default(), &headers).await
}

/// The form's fields; a field given twice is an error (RFC 6749 section 3.2).
async fn form(ex: &mut Exchange<'_>) -> std::result::Result<Vec<(String, String)>, OAuthServerError> {
    if !forms::is_form_type(ex.header("content-type")) {
        return Err(OAuthServerError::new("invalid_request", "the body must be application/x-www-form-urlencoded"));
    }
    let body = ex.read_body_within(MAX_FORM_BYTES).await.map_err(OAuthServerError::body)?;
    let fields = forms::parse(&body);
    if let Some(name) = forms::repeated(&fields) {
        return Err(OAuthServerError::new("invalid_request", format!("`{name}` is given twice")));
    }
    Ok(fields)
}

/// The client of the request (RFC 6749 section 2.3): HTTP Basic, or `client_id` (and
/// `client_secret`) in the form. A confidential client must prove its secret; a public one
/// has none to prove.
async fn authenticate(
    identity: &IdentityService,
    ex: &Exchange<'_>,
    fields: &[(String, String)],
) -> std::result::Result<OAuthClient, OAuthServerError> {
    let refused = || OAuthServerError::new("invalid_client", "client authentication failed");
    let (id, secret) = match ex.header("authorization") {
        Some(value) => {
            let encoded = value.strip_prefix("Basic ").ok_or_else(refused)?;
            let decoded = base64::engine::general_purpose::STANDARD.decode(encoded.trim()).map_err(|_| refused())?;
            let decoded = String::from_utf8(decoded).map_err(|_| refused())?;
            let (id, secret) = decoded.split_once(':').ok_or_else(refused)?;
            // Both parts are form-encoded before they are joined (RFC 6749 section 2.3.1).
            (forms::decode_component(id), Some(forms::decode_component(secret)))
        }
        None => (
            param(fields, "client_id").ok_or_else(refused)?.to_string(),
            param(fields, "client_secret").map(str::to_string),
        ),
    };
    let client = super::client(identity, &id, ex.ctx.client_ip).await?.ok_or_else(refused)?;
    match (&client.secret_hash, secret) {
        (Some(stored), Some(given))
            if crate::base::secrets::hashes_equal(stored, &crate::base::secrets::hash_key(&given)) => {}
        (None, None) => {}
        _ => return Err(refused()),
    }
    Ok(client)
}

async fn token(
    identity: &IdentityService,
    ex: &mut Exchange<'_>,
) -> std::result::Result<super::Tokens, OAuthServerError> {
    let fields = form(ex).await?;
    let client = authenticate(identity, ex, &fields).await?;
    let state = &identity.state;
    match param(&fields, "grant_type") {
        Some("authorization_code") => {
            let code =
                param(&fields, "code").ok_or_else(|| OAuthServerError::new("invalid_request", "code is missing"))?;
            let (redirect_uri, verifier) = (param(&fields, "redirect_uri"), param(&fields, "code_verifier"));
            let resource = param(&fields, "resource");
            super::exchange_code(state, &client, code, redirect_uri, verifier, resource, ex.ctx.client_ip).await
        }
        Some("refresh_token") => {
            let token = param(&fields, "refresh_token")
                .ok_or_else(|| OAuthServerError::new("invalid_request", "refresh_token is missing"))?;
            super::refresh(state, &client, token, param(&fields, "scope"), ex.ctx.client_ip).await
        }
        Some(_) => Err(OAuthServerError::new(
            "unsupported_grant_type",
            "grant_type must be authorization_code or refresh_token",
        )),
        None => Err(OAuthServerError::new("invalid_request", "grant_type is missing")),
    }
}

async fn revoke(identity: &IdentityService, ex: &mut Exchange<'_>) -> std::result::Result<(), OAuthServerError> {
    let fields = form(ex).await?;
    let client = authenticate(identity, ex, &fields).await?;
    let token = param(&fields, "token").ok_or_else(|| OAuthServerError::new("invalid_request", "token is missing"))?;
    super::revoke(&identity.state, &client, token).await
}

/// What a client registering itself sends (RFC 7591 section 2); other fields are ignored.
#[derive(serde::Deserialize)]
struct Registration {
    redirect_uris: Vec<String>,
    client_name: Option<String>,
    token_endpoint_auth_method: Option<String>,
}

/// Dynamic client registration (RFC 7591), when `web.dynamic_registration` is on: a public
/// client of no organisation, which may ask only for a gateway's endpoint (MCP clients signing
/// in to gateways, as the MCP authorization specification has them register).
async fn register(identity: &IdentityService, ex: &mut Exchange<'_>) -> std::result::Result<Value, OAuthServerError> {
    if !identity.state.config().web.dynamic_registration {
        return Err(OAuthServerError::new("access_denied", "this server does not take dynamic registrations"));
    }
    let ip = ex.ctx.client_ip;
    let body = ex.read_body_within(MAX_FORM_BYTES).await.map_err(OAuthServerError::body)?;
    let asked: Registration = serde_json::from_slice(&body)
        .map_err(|e| OAuthServerError::new("invalid_client_metadata", format!("not client metadata: {e}")))?;
    if asked.token_endpoint_auth_method.as_deref().is_some_and(|m| m != "none") {
        return Err(OAuthServerError::new(
            "invalid_client_metadata",
            "only public clients (token_endpoint_auth_method none) register here",
        ));
    }
    if asked.redirect_uris.is_empty() || asked.redirect_uris.len() > 10 {
        return Err(OAuthServerError::new("invalid_redirect_uri", "1-10 redirect_uris"));
    }
    for uri in &asked.redirect_uris {
        super::check_redirect_uri(uri)
            .map_err(|e| OAuthServerError::new("invalid_redirect_uri", format!("`{uri}`: {e}")))?;
    }
    let name = asked.client_name.unwrap_or_else(|| "An MCP client".into());
    let name = crate::edge::forms::display_name("client_name", &name)
        .map_err(|e| OAuthServerError::new("invalid_client_metadata", e.to_string()))?
        .to_string();
    // Counted per network (/24, /56), once the metadata is good (a refused registration stores
    // nothing): each one is a stored record, and a host often holds a whole block of addresses.
    let block = crate::data::limiter::address_block(ip, true);
    let (limit, window) = (crate::identity::BLOCK_REGISTRATIONS, crate::identity::ADDRESS_WINDOW);
    if let Err(wait) = identity.guesses.count(&format!("registrations:{block}"), limit, window).await {
        let secs = wait.as_secs().max(1);
        return Err(OAuthServerError::new(
            "rate_limited",
            format!("too many registrations from {block}; try in {secs} s"),
        )
        .with_retry_after(secs));
    }
    let client = OAuthClient {
        id: crate::base::secrets::new_id("tgc"),
        org_id: String::new(),
        name,
        redirect_uris: asked.redirect_uris,
        scopes: Vec::new(),
        public: true,
        secret_hash: None,
        created_by: format!("registration from {ip}"),
        created_at: chrono::Utc::now(),
    };
    keep(identity, &client).await?;
    tracing::info!(client = client.id, %ip, "OAuth client registered itself");
    Ok(json!({
        "client_id": client.id,
        "client_id_issued_at": client.created_at.timestamp(),
        "client_name": client.name,
        "redirect_uris": client.redirect_uris,
        "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
    }))
}

/// What `created_by` starts with for a client that registered itself.
const SELF_REGISTERED: &str = "registration from ";

/// Whether a stored client registered itself (RFC 7591): such a client expires unused.
pub(super) fn self_registered(client: &OAuthClient) -> bool {
    client.org_id.is_empty() && client.created_by.starts_with(SELF_REGISTERED)
}

/// Stores a self-registered client until `web.registration_unused_secs` from now.
async fn keep(
    identity: &IdentityService,
    client: &OAuthClient,
) -> std::result::Result<(), crate::data::store::StoreError> {
    let unused = identity.state.config().web.registration_unused;
    let until = crate::base::time::now_ms().saturating_add(i64::try_from(unused.as_millis()).unwrap_or(i64::MAX));
    identity.state.save_oauth_client(client, Some(until)).await?;
    identity.registrations_kept.insert(client.id.clone(), std::time::Instant::now());
    Ok(())
}

/// A self-registered client is in use (an authorization request or a token request named it):
/// it is kept for another `web.registration_unused_secs`. Written again at most every tenth of
/// that (an hour at most) per instance, not at every request.
pub(super) async fn used(
    identity: &IdentityService,
    client: &OAuthClient,
) -> std::result::Result<(), crate::data::store::StoreError> {
    let unused = identity.state.config().web.registration_unused;
    let every = (unused / 10).min(std::time::Duration::from_secs(3600));
    let fresh = identity.registrations_kept.get(&client.id).is_some_and(|at| at.elapsed() < every);
    if fresh {
        return Ok(());
    }
    let kept = &identity.registrations_kept;
    if kept.len() >= 100_000 {
        kept.retain(|_, at| at.elapsed() < every);
    }
    keep(identity, client).await
}

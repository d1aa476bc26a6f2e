//! toolgate as an OAuth 2.0 authorization server (RFC 6749), for user-delegated access by
//! third-party applications: an organisation registers clients (`/v1/oauth/clients`), its users
//! grant them scopes on a consent page (`{auth_url}/oauth/authorize`, on their web session), and
//! the clients call the management API with the access tokens `{auth_url}/oauth/token` issues.
//! Decisions (README here):
//! - Tokens are opaque (`tga_<grant>.<secret>`, `tgr_<grant>.<secret>`), stored as SHA-256 in
//!   their grant, and grants are held in memory as keys are: a token is checked without a store
//!   read and a revocation takes effect at once.
//! - Codes live 60 s (`web.authorization_code_secs`), are taken once, and a second use revokes what the first one issued
//!   (RFC 6749 section 4.1.2). Refresh tokens rotate; a rotated-out one presented again revokes
//!   the grant (OAuth 2.0 Security BCP, RFC 9700 section 4.14).
//! - PKCE S256 is required of public clients and checked whenever a challenge was sent.
//! - A request naming a gateway's endpoint as its `resource` (RFC 8707) gets tokens for that
//!   gateway alone (an MCP client signing in to a gateway with `configuration.auth: oauth`).
//! - MCP clients without an account register themselves (RFC 7591) or, preferably, are named by
//!   the URL of their metadata document (`documents.rs`); either kind belongs to no
//!   organisation and may ask only for a gateway's endpoint.
//! - The organisation's IP allowlist holds here too: a code exchange or a refresh from an
//!   address it does not allow is `invalid_grant` (400), and the consent page sends
//!   `access_denied` back to the client.

pub(crate) mod authorize;
mod documents;
mod endpoints;

pub(crate) use documents::ClientDocuments;
pub(crate) use documents::FETCH_WINDOW;
pub(crate) use endpoints::{handle, metadata, refuse};

use crate::base::secrets;
use crate::data::model::{Gateway, OAuthClient, OAuthGrant, User};
use crate::data::state::State;
use crate::data::store::{Kind, PutRecord, Store, StoreError};
use crate::edge::error::ApiError;
pub(crate) use crate::edge::error::OAuthServerError;
use chrono::Utc;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;
use toolgate_filters::ip_allowlist::IpPolicySource;
use toolgate_filters::{Role, ScopeSet};

const ACCESS_PREFIX: &str = "tga_";
const REFRESH_PREFIX: &str = "tgr_";
/// How long a used code is remembered, so that a second use revokes its tokens.
const USED_CODE_MEMORY: Duration = Duration::from_secs(10 * 60);
/// Rotated-out refresh tokens a grant remembers for reuse detection.
const USED_REFRESH_KEPT: usize = 50;

/// The grant's organisation does not allow requests from the client's address (its IP
/// allowlist): `invalid_grant`, 400. RFC 6749 section 5.2 gives the token endpoint no
/// `access_denied`; the grant is sound but not to be honoured from there.
fn address_refused() -> OAuthServerError {
    OAuthServerError::invalid_grant("the organisation's IP allowlist does not allow requests from this address")
}

/// The grant id in an access token, when `token` has an access token's shape.
pub(crate) fn access_token_grant(token: &str) -> Option<&str> {
    grant_of(token, ACCESS_PREFIX)
}

fn grant_of<'t>(token: &'t str, prefix: &str) -> Option<&'t str> {
    let (grant, secret) = token.strip_prefix(prefix)?.split_once('.')?;
    (!grant.is_empty() && !secret.is_empty()).then_some(grant)
}

/// A redirect URI a client may register: https, or http on a loopback host (a native
/// application, RFC 8252), with a host and no fragment or user information.
pub(crate) fn check_redirect_uri(raw: &str) -> Result<(), String> {
    if raw.len() > 2048 {
        return Err("each at most 2048 characters".into());
    }
    let url = url::Url::parse(raw).map_err(|e| format!("`{raw}` is not a URL: {e}"))?;
    let loopback = matches!(url.host_str(), Some("localhost" | "127.0.0.1" | "[::1]"));
    match url.scheme() {
        "https" => {}
        "http" if loopback => {}
        _ => return Err("must be https (http only for localhost or 127.0.0.1)".into()),
    }
    if url.fragment().is_some() || url.host_str().is_none() || !url.username().is_empty() {
        return Err("must have a host and no fragment or user information".into());
    }
    Ok(())
}

/// Why a `client_id` names no usable client, beyond its simply being unknown.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClientLookupError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the client's metadata document cannot be used: {0}")]
    Document(String),
    /// Fetching the client's metadata document is refused for now (its bounds are reached).
    #[error("too many client metadata documents fetched; try again in {} s", .0.as_secs().max(1))]
    Busy(Duration),
}

impl From<ClientLookupError> for ApiError {
    fn from(e: ClientLookupError) -> Self {
        match e {
            ClientLookupError::Store(e) => e.into(),
            e @ ClientLookupError::Document(_) => ApiError::validation("client_id", e.to_string()),
            ClientLookupError::Busy(wait) => ApiError::too_many("client metadata documents fetched", wait),
        }
    }
}

impl From<ClientLookupError> for OAuthServerError {
    fn from(e: ClientLookupError) -> Self {
        match e {
            ClientLookupError::Store(e) => e.into(),
            e @ ClientLookupError::Document(_) => OAuthServerError::new("invalid_client", e.to_string()),
            e @ ClientLookupError::Busy(wait) => {
                OAuthServerError::new("temporarily_unavailable", e.to_string()).with_retry_after(wait.as_secs().max(1))
            }
        }
    }
}

/// The client a protocol request names: one registered with toolgate, or, when
/// `web.client_id_metadata_documents` is on and the id is an https URL, the one its document
/// describes.
/// `ip` asked: a document fetched for it counts against its bounds. A self-registered client
/// found is kept for another `web.registration_unused_secs` (it is in use).
pub(crate) async fn client(
    identity: &crate::identity::IdentityService,
    id: &str,
    ip: std::net::IpAddr,
) -> Result<Option<OAuthClient>, ClientLookupError> {
    if documents::is_document_url(id) {
        let config = identity.state.config().web.client_documents.clone();
        let Some(config) = config else { return Ok(None) };
        let docs = &identity.client_documents;
        let client = docs.client(&config, id, ip, &identity.guesses).await.map_err(|e| match e {
            documents::DocumentError::Refused(why) => ClientLookupError::Document(why),
            documents::DocumentError::Busy(wait) => ClientLookupError::Busy(wait),
        })?;
        return Ok(Some(OAuthClient::clone(&client)));
    }
    let client = identity.state.oauth_client(id).await?.map(|c| OAuthClient::clone(&c));
    if let Some(c) = client.as_ref().filter(|c| endpoints::self_registered(c)) {
        endpoints::used(identity, c).await?;
    }
    Ok(client)
}

/// A code waiting for its exchange.
#[derive(Debug, Serialize, Deserialize)]
struct Code {
    client_id: String,
    redirect_uri: String,
    user_id: String,
    org_id: String,
    scopes: Vec<String>,
    /// The PKCE S256 challenge, when the client sent one.
    challenge: Option<String>,
    /// The gateway endpoint the tokens will be for (RFC 8707), if the client named one.
    #[serde(default)]
    resource: Option<String>,
    expires_ms: i64,
}

/// An authorization request, checked: what the consent page shows and the decision acts on.
#[derive(Debug, Clone)]
pub(crate) struct AuthorizationRequest {
    pub client: OAuthClient,
    pub redirect_uri: String,
    pub state: Option<String>,
    /// What the client asked for (its registered scopes when it named none).
    pub scopes: ScopeSet,
    pub challenge: Option<String>,
    /// A gateway's endpoint (RFC 8707 `resource`): the tokens are for that gateway alone.
    pub resource: Option<String>,
}

/// A request parameter (or form field), when it is given and not empty.
pub(crate) fn param<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    crate::edge::forms::first(params, name).filter(|v| !v.is_empty())
}

/// Checks the client and its redirect URI, for a user of organisation `org_id` (another
/// organisation's client is unknown). A failure here is told to the user, never redirected
/// (RFC 6749 section 4.1.2.1), so that nobody can bounce a user to a URI of their choosing.
pub(crate) async fn check_client(
    identity: &crate::identity::IdentityService,
    params: &[(String, String)],
    org_id: Option<&str>,
    ip: std::net::IpAddr,
) -> Result<(OAuthClient, String), ApiError> {
    let id = param(params, "client_id")
        .ok_or_else(|| ApiError::validation("client_id", "the request names no client_id"))?;
    let client = client(identity, id, ip)
        .await?
        .filter(|c| org_id.is_none_or(|o| c.org_id == o || c.org_id.is_empty()))
        .ok_or_else(|| ApiError::validation("client_id", "the client_id names no client of your organisation"))?;
    let redirect = param(params, "redirect_uri")
        .ok_or_else(|| ApiError::validation("redirect_uri", "the request names no redirect_uri"))?;
    if !client.redirect_uris.iter().any(|r| r == redirect) {
        return Err(ApiError::validation(
            "redirect_uri",
            "the redirect_uri is not one the client registered (compared exactly)",
        ));
    }
    Ok((client.clone(), redirect.to_string()))
}

/// Checks the rest of an authorization request whose client and redirect URI are good; an
/// error here goes back to the client's redirect URI.
pub(crate) fn check_request(
    client: OAuthClient,
    redirect_uri: String,
    params: &[(String, String)],
) -> Result<AuthorizationRequest, OAuthServerError> {
    match param(params, "response_type") {
        Some("code") => {}
        Some(_) => {
            return Err(OAuthServerError::new("unsupported_response_type", "only response_type=code is supported"))
        }
        None => return Err(OAuthServerError::new("invalid_request", "response_type is missing")),
    }
    let allowed = ScopeSet::parse(client.scopes.iter().map(String::as_str)).unwrap_or(ScopeSet::EMPTY);
    let resource = param(params, "resource").map(str::to_string);
    if client.org_id.is_empty() && resource.is_none() {
        return Err(OAuthServerError::new(
            "invalid_target",
            "a client of no organisation (registered by itself, or by its metadata document) may ask only for a gateway's endpoint (resource)",
        ));
    }
    let scopes = match (param(params, "scope"), &resource) {
        (None, _) => allowed,
        // A token for a gateway carries none of the management API's scopes, so what an MCP
        // client asks for (often the gateway's own `mcp`) is not refused (RFC 6749 section 3.3
        // lets the server issue another scope than requested).
        (Some(_), Some(_)) => ScopeSet::EMPTY,
        (Some(s), None) => ScopeSet::parse(s.split(' ').filter(|s| !s.is_empty()))
            .map_err(|name| OAuthServerError::new("invalid_scope", format!("unknown scope `{name}`")))?,
    };
    if !scopes.is_subset_of(allowed) {
        return Err(OAuthServerError::new("invalid_scope", "the client may not ask for that scope"));
    }
    let challenge = match (param(params, "code_challenge"), param(params, "code_challenge_method")) {
        (None, _) if client.public => {
            return Err(OAuthServerError::new(
                "invalid_request",
                "a public client must send a PKCE code_challenge (S256)",
            ))
        }
        (None, _) => None,
        (Some(c), Some("S256"))
            if c.len() == 43 && c.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b)) =>
        {
            Some(c.to_string())
        }
        (Some(_), Some("S256")) => {
            return Err(OAuthServerError::new("invalid_request", "code_challenge is not a S256 challenge"))
        }
        (Some(_), _) => return Err(OAuthServerError::new("invalid_request", "code_challenge_method must be S256")),
    };
    Ok(AuthorizationRequest {
        client,
        redirect_uri,
        state: param(params, "state").map(str::to_string),
        scopes,
        challenge,
        resource,
    })
}

/// The gateway a `resource` names: one of organisation `org_id` that takes OAuth, whose
/// endpoint the resource is exactly (`invalid_target`, RFC 8707 section 2, otherwise).
pub(crate) fn gateway_of_resource(
    state: &State,
    resource: &str,
    org_id: &str,
) -> Result<Arc<Gateway>, OAuthServerError> {
    let public_url = state.config().server.public_url.clone();
    let refused =
        || OAuthServerError::new("invalid_target", "the resource is not the endpoint of a gateway that takes OAuth");
    let id = resource
        .strip_prefix(&public_url)
        .and_then(|rest| rest.strip_prefix("/gateway/"))
        .and_then(|rest| rest.strip_suffix("/mcp"))
        .ok_or_else(refused)?;
    // Stripping the prefix and the suffix leaves exactly the id: the resource is that gateway's.
    state.oauth_gateway(id).filter(|g| g.org_id == org_id).ok_or_else(refused)
}

/// What `user` would grant: the request's scopes within the user's role.
pub(crate) fn granted(request: &AuthorizationRequest, user: &User) -> ScopeSet {
    request.scopes.intersect(Role::parse(&user.role).unwrap_or(Role::Viewer).allowed())
}

/// `redirect_uri` with `pairs` added to its query, then the request's `state` when it had one
/// and the issuer (RFC 9207): every answer sent back to a client.
pub(crate) fn redirect_with(redirect_uri: &str, issuer: &str, state: Option<&str>, pairs: &[(&str, &str)]) -> String {
    let Ok(mut url) = url::Url::parse(redirect_uri) else { return redirect_uri.to_string() };
    {
        let mut q = url.query_pairs_mut();
        for (k, v) in pairs {
            q.append_pair(k, v);
        }
        if let Some(state) = state {
            q.append_pair("state", state);
        }
        q.append_pair("iss", issuer);
    }
    url.to_string()
}

/// The user allowed the request: a code for it, valid for `lifetime`.
pub(crate) async fn issue_code(
    store: &dyn Store,
    request: &AuthorizationRequest,
    user: &User,
    lifetime: Duration,
) -> Result<String, StoreError> {
    let code = secrets::new_session_id();
    let expires_ms = crate::base::time::now_ms() + lifetime.as_millis() as i64;
    let record = Code {
        client_id: request.client.id.clone(),
        redirect_uri: request.redirect_uri.clone(),
        user_id: user.id.clone(),
        org_id: user.org_id.clone(),
        scopes: granted(request, user).each_name().into_iter().map(str::to_string).collect(),
        challenge: request.challenge.clone(),
        resource: request.resource.clone(),
        expires_ms,
    };
    store.put_record_until(Kind::OAuthCode, &request.client.id, &secrets::hash_key(&code), &record, expires_ms).await?;
    Ok(code)
}

/// A token response (RFC 6749 section 5.1).
#[derive(Debug, Serialize)]
pub(crate) struct Tokens {
    pub access_token: String,
    pub token_type: &'static str,
    pub expires_in: u64,
    pub refresh_token: String,
    pub scope: String,
}

/// New access and refresh tokens for `grant`, written into it.
fn mint(grant: &mut OAuthGrant, access: Duration, refresh: Duration) -> Tokens {
    let now = crate::base::time::now_ms();
    let access_token = format!("{ACCESS_PREFIX}{}.{}", grant.id, secrets::new_session_id());
    let refresh_token = format!("{REFRESH_PREFIX}{}.{}", grant.id, secrets::new_session_id());
    grant.access_hash = secrets::hash_key(&access_token);
    grant.access_expires_ms = now + access.as_millis() as i64;
    grant.refresh_hash = secrets::hash_key(&refresh_token);
    grant.refresh_expires_ms = now + refresh.as_millis() as i64;
    Tokens {
        access_token,
        token_type: "Bearer",
        expires_in: access.as_secs(),
        refresh_token,
        scope: grant.scopes.join(" "),
    }
}

fn lifetimes(state: &State) -> (Duration, Duration) {
    let web = &state.config().web;
    (web.access_token_lifetime, web.refresh_token_lifetime)
}

/// Where a used code (by its hash) names the grant it made, so that a second use revokes it.
fn used_code(hash: &str) -> String {
    format!("used:{hash}")
}

/// The `authorization_code` grant.
pub(crate) async fn exchange_code(
    state: &State,
    client: &OAuthClient,
    code: &str,
    redirect_uri: Option<&str>,
    verifier: Option<&str>,
    resource: Option<&str>,
    ip: IpAddr,
) -> Result<Tokens, OAuthServerError> {
    let hash = secrets::hash_key(code);
    // The client is checked before the code is taken: another client presenting a code (a
    // leaked one, or a guess) is refused without using it up, so it cannot destroy the code of
    // the client it was issued to.
    let waiting =
        state.store.get(Kind::OAuthCode, &hash).await?.and_then(|json| serde_json::from_str::<Code>(&json).ok());
    if waiting.as_ref().is_some_and(|c| c.client_id != client.id) {
        return Err(OAuthServerError::invalid_grant("the code was issued to another client"));
    }
    // Taken and turned into a grant under the organisation's write lock, which revoking a
    // user's grants holds too (`revoke_user`): a code is either gone before that or its grant
    // is there to be revoked.
    let _guard = match &waiting {
        Some(c) => Some(state.lock_writes(&c.org_id).await?),
        None => None,
    };
    let code = take_code(state, client, &hash).await?;
    check_code(&code, client, redirect_uri, verifier, resource)?;
    // Checked last, once the code is known good (and used up): only its holder learns of it.
    if state.refuses_address(&code.org_id, ip) {
        return Err(address_refused());
    }
    let mut grant = OAuthGrant {
        id: secrets::new_id("grt"),
        org_id: code.org_id,
        user_id: code.user_id,
        client_id: client.id.clone(),
        scopes: code.scopes,
        created_at: Utc::now(),
        access_hash: String::new(),
        access_expires_ms: 0,
        refresh_hash: String::new(),
        refresh_expires_ms: 0,
        used_refresh: Vec::new(),
        resource: code.resource,
    };
    let expires = crate::base::time::now_ms() + USED_CODE_MEMORY.as_millis() as i64;
    state.store.put_expiring(Kind::OAuthCode, &client.id, &used_code(&hash), grant.id.clone(), expires).await?;
    let (access, refresh) = lifetimes(state);
    let tokens = mint(&mut grant, access, refresh);
    state.save_grant(grant).await?;
    Ok(tokens)
}

/// Takes (uses up) the code whose hash is `hash`. A code already used revokes the grant it made
/// (RFC 6749 section 4.1.2).
async fn take_code(state: &State, client: &OAuthClient, hash: &str) -> Result<Code, OAuthServerError> {
    let Some(json) = state.store.take(Kind::OAuthCode, hash).await? else {
        if let Some(grant_id) = state.store.get(Kind::OAuthCode, &used_code(hash)).await? {
            state.delete_grant(&grant_id).await?;
            tracing::warn!(grant = grant_id, client = client.id, "authorization code used twice: its grant is revoked");
            return Err(OAuthServerError::invalid_grant(
                "the code was already used; the tokens issued for it are revoked",
            ));
        }
        return Err(OAuthServerError::invalid_grant("the code is unknown or expired"));
    };
    serde_json::from_str(&json).map_err(|_| OAuthServerError::invalid_grant("the code is unreadable"))
}

/// Checks a taken code against the token request: its client, its time, its redirect URI, its
/// PKCE challenge and its resource.
fn check_code(
    code: &Code,
    client: &OAuthClient,
    redirect_uri: Option<&str>,
    verifier: Option<&str>,
    resource: Option<&str>,
) -> Result<(), OAuthServerError> {
    if code.client_id != client.id {
        return Err(OAuthServerError::invalid_grant("the code was issued to another client"));
    }
    if code.expires_ms <= crate::base::time::now_ms() {
        return Err(OAuthServerError::invalid_grant("the code has expired"));
    }
    if redirect_uri != Some(code.redirect_uri.as_str()) {
        return Err(OAuthServerError::invalid_grant("redirect_uri is not the one of the authorization request"));
    }
    match (&code.challenge, verifier) {
        (Some(challenge), Some(v)) => {
            let ok_shape =
                (43..=128).contains(&v.len()) && v.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b));
            if !ok_shape || !secrets::hashes_equal(&crate::identity::app_oauth::pkce_challenge(v), challenge) {
                return Err(OAuthServerError::invalid_grant("the code_verifier does not match the code_challenge"));
            }
        }
        (Some(_), None) => return Err(OAuthServerError::invalid_grant("code_verifier is missing (PKCE)")),
        (None, Some(_)) => return Err(OAuthServerError::invalid_grant("no code_challenge was sent for this code")),
        (None, None) => {}
    }
    if resource.is_some() && resource != code.resource.as_deref() {
        return Err(OAuthServerError::new(
            "invalid_target",
            "the resource is not the one of the authorization request",
        ));
    }
    Ok(())
}

/// The `refresh_token` grant: both tokens rotate; `scope`, when given, narrows the grant.
pub(crate) async fn refresh(
    state: &State,
    client: &OAuthClient,
    token: &str,
    scope: Option<&str>,
    ip: IpAddr,
) -> Result<Tokens, OAuthServerError> {
    let grant_id =
        grant_of(token, REFRESH_PREFIX).ok_or_else(|| OAuthServerError::invalid_grant("not a refresh token"))?;
    let Some(mut grant) = state.stored_grant(grant_id).await? else {
        return Err(OAuthServerError::invalid_grant("the refresh token is unknown, expired or revoked"));
    };
    let _guard = state.lock_writes(&grant.org_id).await?;
    // Read again under the lock: a concurrent refresh of the same token must see the rotation.
    grant = state
        .stored_grant(grant_id)
        .await?
        .ok_or_else(|| OAuthServerError::invalid_grant("the refresh token is unknown, expired or revoked"))?;
    if grant.client_id != client.id {
        return Err(OAuthServerError::invalid_grant("the refresh token was issued to another client"));
    }
    let hash = secrets::hash_key(token);
    if grant.used_refresh.iter().any(|used| secrets::hashes_equal(used, &hash)) {
        state.delete_grant(&grant.id).await?;
        tracing::warn!(
            grant = grant.id,
            client = client.id,
            "a rotated-out refresh token was used: the grant is revoked"
        );
        return Err(OAuthServerError::invalid_grant("the refresh token was already used; the grant is revoked"));
    }
    if !secrets::hashes_equal(&grant.refresh_hash, &hash) || grant.refresh_expires_ms <= crate::base::time::now_ms() {
        return Err(OAuthServerError::invalid_grant("the refresh token is unknown, expired or revoked"));
    }
    if state.user(&grant.user_id).is_none_or(|u| u.org_id != grant.org_id) {
        state.delete_grant(&grant.id).await?;
        return Err(OAuthServerError::invalid_grant("the user of this grant no longer exists"));
    }
    // The grant stays: the same refresh token works again from an address the list allows.
    if state.refuses_address(&grant.org_id, ip) {
        return Err(address_refused());
    }
    if let Some(scope) = scope {
        let held = ScopeSet::parse(grant.scopes.iter().map(String::as_str)).unwrap_or(ScopeSet::EMPTY);
        let asked = ScopeSet::parse(scope.split(' ').filter(|s| !s.is_empty()))
            .map_err(|name| OAuthServerError::new("invalid_scope", format!("unknown scope `{name}`")))?;
        if !asked.is_subset_of(held) {
            return Err(OAuthServerError::new("invalid_scope", "a refresh may narrow the scope, not widen it"));
        }
        grant.scopes = asked.each_name().into_iter().map(str::to_string).collect();
    }
    let old = std::mem::take(&mut grant.refresh_hash);
    grant.used_refresh.push(old);
    let excess = grant.used_refresh.len().saturating_sub(USED_REFRESH_KEPT);
    grant.used_refresh.drain(..excess);
    let (access, refresh) = lifetimes(state);
    let tokens = mint(&mut grant, access, refresh);
    state.save_grant(grant).await?;
    Ok(tokens)
}

/// Revokes everything `user` granted OAuth clients (its password changed): every grant, with
/// its access and refresh tokens, and the codes still waiting for their exchange. Under the
/// organisation's write lock, which a code's exchange and a refresh also take, so that neither
/// brings back a grant revoked here. Returns how many grants were revoked.
pub(crate) async fn revoke_user(state: &State, user: &User) -> Result<usize, StoreError> {
    let _guard = state.lock_writes(&user.org_id).await?;
    // Codes live a minute, so there are few: a scan is fine for a rare event.
    for (id, json) in state.store.load_all(Kind::OAuthCode).await? {
        if serde_json::from_str::<Code>(&json).is_ok_and(|c| c.user_id == user.id) {
            state.store.delete(Kind::OAuthCode, &id).await?;
        }
    }
    let grants = state.grants_of_user(&user.id);
    for grant in &grants {
        state.delete_grant(&grant.id).await?;
    }
    if !grants.is_empty() {
        tracing::info!(user = user.id, grants = grants.len(), "password changed: the user's OAuth grants are revoked");
    }
    Ok(grants.len())
}

/// Revocation (RFC 7009): an access or refresh token of `client` revokes its whole grant. An
/// unknown token, or another client's, changes nothing and is not an error (section 2.2).
pub(crate) async fn revoke(state: &State, client: &OAuthClient, token: &str) -> Result<(), OAuthServerError> {
    let Some(grant_id) = grant_of(token, ACCESS_PREFIX).or_else(|| grant_of(token, REFRESH_PREFIX)) else {
        return Ok(());
    };
    let Some(grant) = state.stored_grant(grant_id).await? else { return Ok(()) };
    let hash = secrets::hash_key(token);
    let its_token = secrets::hashes_equal(&grant.access_hash, &hash)
        || secrets::hashes_equal(&grant.refresh_hash, &hash)
        || grant.used_refresh.iter().any(|u| secrets::hashes_equal(u, &hash));
    if its_token && grant.client_id == client.id {
        state.delete_grant(&grant.id).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(public: bool) -> OAuthClient {
        OAuthClient {
            id: "tgc_1".into(),
            org_id: "org_1".into(),
            name: "App".into(),
            redirect_uris: vec!["https://app.example/cb".into()],
            scopes: vec!["gateways:read".into(), "logs:read".into()],
            public,
            secret_hash: None,
            created_by: "usr_1".into(),
            created_at: Utc::now(),
        }
    }

    fn params(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn redirect_uris_are_https_or_loopback_http_without_fragments() {
        for good in ["https://app.example/cb?x=1", "http://127.0.0.1:8123/cb", "http://localhost/cb"] {
            assert!(check_redirect_uri(good).is_ok(), "{good}");
        }
        for bad in
            ["http://app.example/cb", "https://app.example/cb#f", "javascript:alert(1)", "cb", "https://u@app.example/"]
        {
            assert!(check_redirect_uri(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn tokens_name_their_grant_and_nothing_else_parses() {
        assert_eq!(access_token_grant("tga_grt_abc.secret"), Some("grt_abc"));
        assert_eq!(access_token_grant("tgr_grt_abc.secret"), None);
        assert_eq!(access_token_grant("tga_.secret"), None);
        assert_eq!(access_token_grant("tga_grt_abc."), None);
        assert_eq!(access_token_grant("eyJhbGciOi.x.y"), None);
    }

    #[test]
    fn a_request_is_checked_against_what_the_client_registered() {
        let ok = params(&[("response_type", "code"), ("scope", "logs:read")]);
        let r = check_request(client(false), "https://app.example/cb".into(), &ok).unwrap();
        assert_eq!(r.scopes.each_name(), ["logs:read"]);
        let wide = params(&[("response_type", "code"), ("scope", "admin")]);
        assert_eq!(check_request(client(false), String::new(), &wide).unwrap_err().code, "invalid_scope");
        let token = params(&[("response_type", "token")]);
        assert_eq!(check_request(client(false), String::new(), &token).unwrap_err().code, "unsupported_response_type");
        let no_pkce = params(&[("response_type", "code")]);
        assert_eq!(check_request(client(true), String::new(), &no_pkce).unwrap_err().code, "invalid_request");
        let plain = params(&[
            ("response_type", "code"),
            ("code_challenge", &"a".repeat(43)),
            ("code_challenge_method", "plain"),
        ]);
        assert_eq!(check_request(client(true), String::new(), &plain).unwrap_err().code, "invalid_request");
    }

    #[test]
    fn redirects_keep_the_clients_query_and_name_the_issuer() {
        assert_eq!(
            redirect_with("https://app.example/cb?x=1", "https://tg.example", Some("a b"), &[("code", "c")]),
            "https://app.example/cb?x=1&code=c&state=a+b&iss=https%3A%2F%2Ftg.example"
        );
    }
}

//! Sign-in through an external OpenID Connect provider (`web.oidc_providers`): toolgate is its
//! client. The authorization code flow with PKCE (S256), a `state` and a `nonce` kept in the
//! store for ten minutes and used once; the code exchanged at the provider's token endpoint;
//! the ID token verified with the provider's keys (RS256, issuer, audience = client id, times,
//! the nonce). The user is the toolgate user with the token's `email`, which the provider must
//! say is verified: an unverified address would let anyone claim anyone's account.

use crate::config::OidcProvider;
use crate::data::store::{Kind, PutRecord, Store};
use crate::edge::error::ApiError;
use dashmap::DashMap;
use serde::{Deserialize, Serialize};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long a sign-in may take at the provider.
const STATE_TTL: Duration = Duration::from_secs(600);
/// How long a provider's metadata is kept.
const METADATA_TTL: Duration = Duration::from_secs(3600);

/// A sign-in under way, as stored (kind `sign_in_state`, by the SHA-256 of its state).
#[derive(Serialize, Deserialize)]
struct Started {
    provider: String,
    nonce: String,
    pkce_verifier: String,
    next: String,
}

/// The parts of a provider's OpenID metadata the sign-in uses.
#[derive(Clone, Deserialize)]
struct Metadata {
    issuer: String,
    authorization_endpoint: String,
    token_endpoint: String,
}

fn unavailable(provider: &OidcProvider, what: impl std::fmt::Display) -> ApiError {
    ApiError::Unavailable(format!("sign-in with {} is unavailable: {what}", provider.name))
}

/// The provider's metadata, fetched at first use and kept an hour.
async fn metadata(provider: &OidcProvider) -> Result<Metadata, ApiError> {
    static CACHE: OnceLock<DashMap<String, (Metadata, Instant)>> = OnceLock::new();
    let cache = CACHE.get_or_init(DashMap::new);
    if let Some(m) = cache.get(&provider.issuer).filter(|m| m.1.elapsed() < METADATA_TTL) {
        return Ok(m.0.clone());
    }
    let mut tried = Vec::new();
    for url in crate::base::well_known::authorization_server_metadata(&provider.issuer).into_iter().rev() {
        let Ok(r) = crate::identity::app_oauth::http().get(&url).send().await else { continue };
        let Ok(meta) = r.error_for_status().map(|r| r.json::<Metadata>()) else { continue };
        match meta.await {
            Ok(m) if m.issuer.trim_end_matches('/') == provider.issuer.trim_end_matches('/') => {
                cache.insert(provider.issuer.clone(), (m.clone(), Instant::now()));
                return Ok(m);
            }
            Ok(m) => tried.push(format!("{url} names issuer {}", m.issuer)),
            Err(_) => tried.push(format!("{url}: not OpenID metadata")),
        }
    }
    Err(unavailable(provider, format!("no usable metadata ({})", tried.join("; "))))
}

/// Starts a sign-in: where to send the browser.
pub(super) async fn start(
    store: &dyn Store,
    provider: &OidcProvider,
    redirect_uri: &str,
    next: &str,
) -> Result<String, ApiError> {
    let meta = metadata(provider).await?;
    let state = crate::base::secrets::new_session_id();
    let nonce = crate::base::secrets::new_session_id();
    let pkce = crate::identity::app_oauth::pkce();
    let started = Started {
        provider: provider.id.clone(),
        nonce: nonce.clone(),
        pkce_verifier: pkce.verifier,
        next: next.into(),
    };
    let expires = crate::base::time::now_ms() + STATE_TTL.as_millis() as i64;
    let key = crate::base::secrets::hash_key(&state);
    store.put_record_until(Kind::SignInState, crate::data::store::NO_PARTITION, &key, &started, expires).await?;
    let mut url = url::Url::parse(&meta.authorization_endpoint).map_err(|e| unavailable(provider, e))?;
    url.query_pairs_mut()
        .append_pair("response_type", "code")
        .append_pair("client_id", &provider.client_id)
        .append_pair("redirect_uri", redirect_uri)
        .append_pair("scope", &provider.scopes.join(" "))
        .append_pair("state", &state)
        .append_pair("nonce", &nonce)
        .append_pair("code_challenge", &pkce.challenge)
        .append_pair("code_challenge_method", "S256");
    Ok(url.into())
}

/// Who signed in: the verified e-mail address, and where the browser goes next.
pub(super) struct Finished {
    pub email: String,
    pub next: String,
}

#[derive(Deserialize)]
struct TokenAnswer {
    id_token: Option<String>,
}

/// Finishes a sign-in that provider `callback` (the callback's path) sent back (`state`,
/// `code`): the e-mail it vouches for. The state must be one started with that provider: a
/// code arriving at another provider's callback is a mix-up, refused (and the state used up).
pub(super) async fn finish(
    store: &dyn Store,
    providers: &[OidcProvider],
    redirect_uri: impl Fn(&str) -> String,
    callback: &str,
    state: &str,
    code: &str,
) -> Result<Finished, ApiError> {
    let stale = || ApiError::validation("state", "unknown, used or expired: sign in again");
    let json = store.take(Kind::SignInState, &crate::base::secrets::hash_key(state)).await?.ok_or_else(stale)?;
    let started: Started = serde_json::from_str(&json).map_err(|_| stale())?;
    if started.provider != callback {
        return Err(ApiError::validation("state", "this sign-in was started with another provider: sign in again"));
    }
    let provider = providers.iter().find(|p| p.id == started.provider).ok_or_else(stale)?;
    let meta = metadata(provider).await?;
    let redirect = redirect_uri(&provider.id);
    let mut form = vec![
        ("grant_type", "authorization_code"),
        ("code", code),
        ("redirect_uri", redirect.as_str()),
        ("client_id", provider.client_id.as_str()),
        ("code_verifier", started.pkce_verifier.as_str()),
    ];
    if let Some(secret) = &provider.client_secret {
        form.push(("client_secret", secret));
    }
    let answer = crate::identity::app_oauth::http()
        .post(&meta.token_endpoint)
        .form(&form)
        .send()
        .await
        .map_err(|e| unavailable(provider, e))?;
    if !answer.status().is_success() {
        let status = answer.status().as_u16();
        return Err(ApiError::Unauthorized(format!("{} refused the sign-in (HTTP {status})", provider.name)));
    }
    let tokens: TokenAnswer = answer.json().await.map_err(|e| unavailable(provider, e))?;
    let id_token = tokens.id_token.ok_or_else(|| unavailable(provider, "the token answer has no id_token"))?;
    let claims = match provider.verifier.verify(&id_token) {
        Ok(c) => Ok(c),
        // The provider may have rotated its keys since they were fetched (or they never were).
        Err(_) => {
            crate::outbound::jwks::refresh(&provider.verifier).await;
            provider.verifier.verify(&id_token)
        }
    }
    .map_err(|_| ApiError::Unauthorized(format!("{}'s ID token does not verify", provider.name)))?;
    let nonce_ok = claims.nonce.as_deref().is_some_and(|n| crate::base::secrets::hashes_equal(n, &started.nonce));
    if !nonce_ok {
        return Err(ApiError::Unauthorized("the ID token is not this sign-in's (nonce)".into()));
    }
    let email = match (claims.email, claims.email_verified) {
        (Some(e), Some(true)) => e.to_lowercase(),
        (Some(_), _) => {
            return Err(ApiError::Forbidden(format!("{} does not say the e-mail address is verified", provider.name)))
        }
        (None, _) => return Err(ApiError::Forbidden(format!("{} gave no e-mail address", provider.name))),
    };
    Ok(Finished { email, next: started.next })
}

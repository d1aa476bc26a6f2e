//! The remote keys of a JWT verifier (`jwt.jwks_url`, or the `jwks_uri` the issuer's metadata
//! names when `discover_jwks` is on): fetched at each refresh, the verifier's local keys (PEM
//! files, the JWKS file) read again beside them. A fetch that fails keeps the keys in use.
//!
//! The verifier itself lives in `base::jwt`, below the configuration that builds it; fetching
//! is outbound work, so it is done here with the one client builder.

use crate::base::jwt::{keys_from_jwks, JwtVerifier, Keys};
use serde::Deserialize;
use std::sync::OnceLock;
use std::time::Duration;

/// How long one fetch (a JWKS, an issuer's metadata) may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// The client of every verifier: the operator's issuer, so redirects are followed (as many as
/// reqwest's default allows).
fn http() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        super::client::builder()
            .follow_redirects(10)
            .timeout(FETCH_TIMEOUT)
            .build()
            .expect("an HTTP client with default TLS settings")
    })
}

/// Re-reads the verifier's JWKS file and fetches its JWKS URL; on failure the previous keys stay.
pub(crate) async fn refresh(verifier: &JwtVerifier) {
    let mut keys = match verifier.begin_refresh() {
        Ok(k) => k,
        Err(e) => {
            tracing::warn!(error = %e, "cannot reload JWT keys; keeping the previous ones");
            return;
        }
    };
    let config = verifier.config();
    let discovered = match (&config.jwks_url, &config.issuer) {
        (None, Some(issuer)) if config.discover_jwks => jwks_url_of(issuer).await,
        _ => None,
    };
    if let Some(url) = config.jwks_url.as_ref().or(discovered.as_ref()) {
        match fetch(url).await {
            Some(remote) => keys.extend(remote),
            None => {
                tracing::warn!(url, "cannot fetch the JWKS; keeping the previous keys");
                verifier.keep_previous(&mut keys);
            }
        }
    }
    if config.discover_jwks && config.jwks_url.is_none() && discovered.is_none() {
        tracing::warn!(
            issuer = config.issuer,
            "cannot find the issuer's jwks_uri in its metadata; keeping the previous keys"
        );
        verifier.keep_previous(&mut keys);
    }
    verifier.install(keys);
}

async fn fetch(url: &str) -> Option<Keys> {
    let resp = http().get(url).send().await.ok()?;
    let text = resp.error_for_status().ok()?.text().await.ok()?;
    keys_from_jwks(&text, "jwks_uri").ok()
}

/// The `jwks_uri` of `issuer`'s metadata, when its metadata names that issuer.
async fn jwks_url_of(issuer: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct Metadata {
        issuer: Option<String>,
        jwks_uri: Option<String>,
    }
    for url in crate::base::well_known::authorization_server_metadata(issuer) {
        let Ok(resp) = http().get(&url).send().await else { continue };
        let Ok(meta) = resp.error_for_status().map(|r| r.json::<Metadata>()) else { continue };
        let Ok(meta) = meta.await else { continue };
        // RFC 8414 section 3.3: metadata about another issuer is not this one's.
        if meta.issuer.as_deref().map(|i| i.trim_end_matches('/')) == Some(issuer.trim_end_matches('/')) {
            return meta.jwks_uri;
        }
    }
    None
}

//! Client ID metadata documents (the MCP authorization specification's preferred registration,
//! draft-ietf-oauth-client-id-metadata-document): a client whose `client_id` is an https URL is
//! described by the JSON document at that URL, which toolgate fetches when the client first
//! appears and keeps for a while. Such a client belongs to no organisation and, like a
//! dynamically registered one, may ask only for a gateway's endpoint.
//!
//! The URL is a stranger's, so fetching it follows the webhooks' egress rules (no address
//! inside the network unless the host is in `allowed_hosts`; the connection goes to the address
//! checked), no redirects, 5 seconds, 5 KiB. The document must name itself (`client_id` equal to
//! the URL), list its redirect URIs, and be a public client (`token_endpoint_auth_method`
//! `none`, no secret). A document is kept as long as its `Cache-Control: max-age` says, between
//! one minute and a day (five minutes without one); a refusal is remembered for 30 seconds, so a
//! bad `client_id` cannot make toolgate fetch on every request.
//!
//! Anyone may name a document, so fetches are bounded: per address (`fetches_per_address` per
//! ten minutes, 10), in all (`fetches_in_all`, 100, shared by the instances on Redis) and at
//! once ([`MAX_FETCHES_AT_ONCE`] per instance). A request past a bound is refused
//! `temporarily_unavailable` (503 with `Retry-After`), and nothing is fetched.

use crate::config::ClientDocumentsConfig;
use crate::data::model::OAuthClient;
use crate::outbound::egress::Egress;
use dashmap::DashMap;
use serde::Deserialize;
use std::sync::Arc;
use std::time::{Duration, Instant};

const MAX_DOCUMENT_BYTES: usize = 5 * 1024;
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
const DEFAULT_KEEP: Duration = Duration::from_secs(300);
const MIN_KEEP: Duration = Duration::from_secs(60);
const MAX_KEEP: Duration = Duration::from_secs(86_400);
const REFUSAL_KEEP: Duration = Duration::from_secs(30);
/// Documents kept at most; past it the cache starts again (each entry is small, and a fetch is
/// only a fetch).
const MAX_ENTRIES: usize = 10_000;

/// Documents fetched at once at most, per instance.
pub(super) const MAX_FETCHES_AT_ONCE: usize = 8;
/// The window of the fetch bounds.
pub(crate) const FETCH_WINDOW: Duration = Duration::from_secs(10 * 60);

/// Why a document's client cannot be had.
#[derive(Debug)]
pub enum DocumentError {
    /// The document is refused (fetch failed, or its content is not acceptable).
    Refused(String),
    /// A fetch bound is reached: retry after this long.
    Busy(Duration),
}

/// Whether a `client_id` is the URL of a metadata document (an ordinary client id never is).
pub(super) fn is_document_url(client_id: &str) -> bool {
    client_id.starts_with("https://")
}

/// A `client_id` that may be a document's URL: https, a path, no credentials, query, fragment
/// or dot segments (the URL parser removes those, so the URL must be in its normal form).
fn check_url(raw: &str) -> Result<url::Url, String> {
    let url = url::Url::parse(raw).map_err(|e| format!("not a URL: {e}"))?;
    if url.scheme() != "https" || url.host_str().is_none() {
        return Err("must be an https URL".into());
    }
    if !url.username().is_empty() || url.password().is_some() || url.query().is_some() || url.fragment().is_some() {
        return Err("must carry no user information, query or fragment".into());
    }
    if matches!(url.path(), "" | "/") {
        return Err("must have a path".into());
    }
    if url.as_str() != raw {
        return Err("must be in normal form (no dot segments, lower-case scheme and host)".into());
    }
    Ok(url)
}

/// The fields toolgate reads; the rest of a document is ignored.
#[derive(Deserialize)]
struct Document {
    client_id: String,
    client_name: Option<String>,
    #[serde(default)]
    redirect_uris: Vec<String>,
    token_endpoint_auth_method: Option<String>,
    client_secret: Option<serde_json::Value>,
    client_secret_expires_at: Option<serde_json::Value>,
}

enum Entry {
    Client(Arc<OAuthClient>, Instant),
    Refused(String, Instant),
}

pub struct ClientDocuments {
    cache: DashMap<String, Entry>,
    fetching: tokio::sync::Semaphore,
}

impl Default for ClientDocuments {
    fn default() -> Self {
        ClientDocuments { cache: DashMap::new(), fetching: tokio::sync::Semaphore::new(MAX_FETCHES_AT_ONCE) }
    }
}

impl ClientDocuments {
    /// The client `url` describes (fetched, or kept from an earlier fetch); `Err` says why the
    /// document cannot be used. `ip` asked for it: a fetch is counted against its bounds.
    pub async fn client(
        &self,
        config: &ClientDocumentsConfig,
        url: &str,
        ip: std::net::IpAddr,
        guesses: &crate::data::limiter::Guesses,
    ) -> Result<Arc<OAuthClient>, DocumentError> {
        let now = Instant::now();
        match self.cache.get(url).as_deref() {
            Some(Entry::Client(c, until)) if *until > now => return Ok(c.clone()),
            Some(Entry::Refused(why, until)) if *until > now => return Err(DocumentError::Refused(why.clone())),
            _ => {}
        }
        // A `client_id` that cannot name a document costs no fetch, and is not counted.
        if let Err(why) = check_url(url) {
            return Err(DocumentError::Refused(why));
        }
        let per_address = format!("document fetches:{}", crate::data::limiter::address_block(ip, false));
        let busy = DocumentError::Busy;
        guesses.count(&per_address, config.fetches_per_address, FETCH_WINDOW).await.map_err(busy)?;
        guesses.count("document fetches:all", config.fetches_in_all, FETCH_WINDOW).await.map_err(busy)?;
        let Ok(_fetching) = self.fetching.try_acquire() else {
            return Err(DocumentError::Busy(Duration::from_secs(1)));
        };
        if self.cache.len() >= MAX_ENTRIES {
            self.cache.clear();
        }
        match fetch(config, url).await {
            Ok((client, keep)) => {
                let client = Arc::new(client);
                self.cache.insert(url.to_string(), Entry::Client(client.clone(), now + keep));
                Ok(client)
            }
            Err(why) => {
                tracing::info!(client_id = url, reason = why, "client metadata document refused");
                self.cache.insert(url.to_string(), Entry::Refused(why.clone(), now + REFUSAL_KEEP));
                Err(DocumentError::Refused(why))
            }
        }
    }

    /// Drops every document kept: after a reload of `web`, a document is judged again by the
    /// settings in force (a host no longer allowed, another CA).
    pub fn forget(&self) {
        self.cache.clear();
    }
}

/// How long a document may be kept, from its `Cache-Control`.
fn keep_for(headers: &reqwest::header::HeaderMap) -> Duration {
    let Some(value) = headers.get(reqwest::header::CACHE_CONTROL).and_then(|v| v.to_str().ok()) else {
        return DEFAULT_KEEP;
    };
    let directives = value.split(',').map(|d| d.trim().to_ascii_lowercase());
    let mut keep = DEFAULT_KEEP;
    for d in directives {
        if d == "no-store" || d == "no-cache" {
            return MIN_KEEP;
        }
        if let Some(secs) = d.strip_prefix("max-age=").and_then(|s| s.parse::<u64>().ok()) {
            keep = Duration::from_secs(secs);
        }
    }
    keep.clamp(MIN_KEEP, MAX_KEEP)
}

async fn fetch(config: &ClientDocumentsConfig, raw: &str) -> Result<(OAuthClient, Duration), String> {
    let url = check_url(raw)?;
    let egress = Egress { allowed_hosts: config.allowed_hosts.clone(), allow_http: false };
    let target = egress.resolve(raw).await.map_err(|e| e.to_string())?;
    let http = crate::outbound::client::builder()
        .timeout(FETCH_TIMEOUT)
        .connect_to(&target)
        .roots(config.extra_roots.as_deref())
        .build()
        .map_err(|e| e.to_string())?;
    let mut response = http
        .get(url.clone())
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|e| format!("cannot fetch it: {e}"))?;
    if !response.status().is_success() {
        return Err(format!("fetching it answered {}", response.status()));
    }
    let keep = keep_for(response.headers());
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| format!("cannot read it: {e}"))? {
        body.extend_from_slice(&chunk);
        if body.len() > MAX_DOCUMENT_BYTES {
            return Err(format!("it is larger than {MAX_DOCUMENT_BYTES} bytes"));
        }
    }
    let doc: Document = serde_json::from_slice(&body).map_err(|e| format!("it is not client metadata: {e}"))?;
    if doc.client_id != raw {
        return Err("its client_id is not its own URL".into());
    }
    if doc.client_secret.is_some() || doc.client_secret_expires_at.is_some() {
        return Err("it carries a client secret, which a document must not".into());
    }
    if doc.token_endpoint_auth_method.as_deref().is_some_and(|m| m != "none") {
        return Err("only public clients (token_endpoint_auth_method none) are taken".into());
    }
    if doc.redirect_uris.is_empty() || doc.redirect_uris.len() > 10 {
        return Err("it must list 1-10 redirect_uris".into());
    }
    for uri in &doc.redirect_uris {
        super::check_redirect_uri(uri).map_err(|e| format!("redirect_uri `{uri}`: {e}"))?;
    }
    let name = doc.client_name.unwrap_or_else(|| "An MCP client".into());
    let name = crate::edge::forms::display_name("client_name", &name).map_err(|e| e.to_string())?;
    Ok((
        OAuthClient {
            id: raw.to_string(),
            org_id: String::new(),
            // The consent page shows where the client's description came from.
            name: format!("{name} ({})", target.host),
            redirect_uris: doc.redirect_uris,
            scopes: Vec::new(),
            public: true,
            secret_hash: None,
            created_by: "client metadata document".into(),
            created_at: chrono::Utc::now(),
        },
        keep,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_urls_in_normal_form_with_a_path_name_documents() {
        assert!(check_url("https://client.example.com/oauth/metadata.json").is_ok());
        assert!(check_url("https://client.example.com:8443/m").is_ok());
        for bad in [
            "http://client.example.com/m",
            "https://client.example.com",
            "https://client.example.com/",
            "https://client.example.com/a/../m",
            "https://client.example.com/./m",
            "https://u:p@client.example.com/m",
            "https://client.example.com/m?x=1",
            "https://client.example.com/m#f",
            "https://CLIENT.example.com/m",
        ] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn documents_are_kept_as_their_cache_control_says_within_bounds() {
        let with = |v: &str| {
            let mut h = reqwest::header::HeaderMap::new();
            h.insert(reqwest::header::CACHE_CONTROL, v.parse().unwrap());
            keep_for(&h)
        };
        assert_eq!(keep_for(&reqwest::header::HeaderMap::new()), DEFAULT_KEEP);
        assert_eq!(with("public, max-age=600"), Duration::from_secs(600));
        assert_eq!(with("max-age=1"), MIN_KEEP);
        assert_eq!(with("max-age=99999999"), MAX_KEEP);
        assert_eq!(with("no-store"), MIN_KEEP);
    }
}

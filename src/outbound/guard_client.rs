//! The HTTP side of a gateway's external guards: one signed POST to the guard's URL and its
//! answer's bytes. The URL passes the webhooks' egress rules (`egress.rs`) and the client
//! connects to exactly the address checked; the body is signed as toolgate's webhooks are
//! (Standard Webhooks' `webhook-id`, `webhook-timestamp`, `webhook-signature`: `sign.rs`) with
//! the guard's own secret, so the guard can tell toolgate from anyone else who finds its URL.
//!
//! A guard is asked on a call's path, so what can be kept is kept: the checked address of a URL
//! for [`RESOLVED_FOR`] (a name that resolves elsewhere meanwhile still reaches the address that
//! was checked, so rebinding gains nothing) with its parsed URL, one client, with its idle
//! (keep-alive) connections, per host and address, and each guard's signing key, opened from its
//! sealed secret once. A call then opens, decodes, parses and resolves nothing (BENCHMARKS.md:
//! one guard on `request`). What the call decides on the answer is `mcp/callout/`'s.

use super::client::{self, ClientError};
use super::egress::{Egress, EgressError, Target};
use super::sign;
use dashmap::DashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the checked address of a guard's URL is used before it is resolved and checked
/// again.
const RESOLVED_FOR: Duration = Duration::from_secs(30);
/// The largest answer a guard may give, in bytes: a replaced result is a result, and the apps'
/// messages are capped at 16 MiB too.
pub(crate) const MAX_ANSWER_BYTES: usize = 16 << 20;
/// Clients kept at most (one per guard host and address); past it they are all dropped and
/// made again, as the webhooks' are.
const MAX_CLIENTS: usize = 1024;

/// Why a guard gave no answer toolgate can read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GuardHttpError {
    #[error("the guard's URL is refused")]
    Egress(#[source] EgressError),
    #[error("the guard did not answer within {0} ms")]
    Timeout(u64),
    #[error("the guard cannot be reached")]
    Unreachable(#[source] reqwest::Error),
    #[error("the guard answered HTTP {0}")]
    Status(u16),
    #[error("the guard's answer is over {MAX_ANSWER_BYTES} bytes")]
    TooLarge,
    #[error("no client for the guard")]
    Client(#[source] ClientError),
}

impl GuardHttpError {
    /// The outcome label of `toolgate_guard_calls_total`: `timeout` or `error`.
    pub(crate) fn outcome(&self) -> &'static str {
        match self {
            GuardHttpError::Timeout(_) => "timeout",
            _ => "error",
        }
    }
}

/// One signed call to a guard.
pub(crate) struct SignedPost<'a> {
    pub url: &'a str,
    /// The key the guard's secret signs with ([`GuardClient::key`]).
    pub key: &'a [u8],
    /// `webhook-id`: unique per call and phase.
    pub id: &'a str,
    pub body: Vec<u8>,
    pub timeout: Duration,
}

/// What is kept of a guard's URL between calls: its checked URL, when it was checked, and the
/// client that connects to the checked address.
struct Kept {
    at: Instant,
    url: url::Url,
    client: reqwest::Client,
}

/// The clients, checked addresses and signing keys of the guards, shared by every call. A call
/// finds all it needs in two map look-ups by borrowed keys: nothing is resolved, built, opened or
/// decoded on the call's path but after a URL's [`RESOLVED_FOR`] or for a new guard.
#[derive(Default)]
pub(crate) struct GuardClient {
    /// Per guard URL (as configured).
    kept: DashMap<String, Kept>,
    /// One client per host and checked address, so guards on one host share its connections.
    clients: DashMap<(String, Option<SocketAddr>), reqwest::Client>,
    /// Per guard secret (as sealed): the key it signs with, opened once.
    keys: DashMap<String, Arc<[u8]>>,
}

impl GuardClient {
    /// POSTs `post` to its URL under the egress rules (`egress` makes them, needed only when
    /// the URL's checked address is not kept); the answer's body when the guard answered 2xx
    /// within the time-out.
    pub(crate) async fn post(
        &self,
        egress: impl FnOnce() -> Egress,
        post: SignedPost<'_>,
    ) -> Result<Vec<u8>, GuardHttpError> {
        let timeout_ms = post.timeout.as_millis() as u64;
        let limited = tokio::time::timeout(post.timeout, self.exchange(egress, post)).await;
        limited.unwrap_or(Err(GuardHttpError::Timeout(timeout_ms)))
    }

    /// The key the guard secret sealed as `sealed` signs with: kept once `open` has opened it
    /// (the sealed text names the secret: a new secret is a new entry).
    pub(crate) fn key(&self, sealed: &str, open: impl FnOnce() -> Option<String>) -> Option<Arc<[u8]>> {
        if let Some(key) = self.keys.get(sealed) {
            return Some(Arc::clone(&key));
        }
        let key: Arc<[u8]> = sign::key_of(&open()?).ok()?.into();
        if self.keys.len() >= MAX_CLIENTS {
            self.keys.clear();
        }
        self.keys.insert(sealed.to_owned(), Arc::clone(&key));
        Some(key)
    }

    async fn exchange(&self, egress: impl FnOnce() -> Egress, post: SignedPost<'_>) -> Result<Vec<u8>, GuardHttpError> {
        let (url, client) = self.kept(egress, post.url).await?;
        let now = chrono::Utc::now().timestamp();
        let signature = sign::standard(post.key, post.id, now, &post.body);
        let mut resp = client
            .post(url)
            .header("content-type", "application/json")
            .header("webhook-id", post.id)
            .header("webhook-timestamp", now)
            .header("webhook-signature", signature)
            .body(post.body)
            .send()
            .await
            .map_err(GuardHttpError::Unreachable)?;
        if !resp.status().is_success() {
            return Err(GuardHttpError::Status(resp.status().as_u16()));
        }
        if resp.content_length().is_some_and(|n| n > MAX_ANSWER_BYTES as u64) {
            return Err(GuardHttpError::TooLarge);
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(GuardHttpError::Unreachable)? {
            if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(GuardHttpError::TooLarge);
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// The URL's checked form and its client: kept for [`RESOLVED_FOR`], then resolved and
    /// checked again.
    async fn kept(
        &self,
        egress: impl FnOnce() -> Egress,
        url: &str,
    ) -> Result<(url::Url, reqwest::Client), GuardHttpError> {
        if let Some(k) = self.kept.get(url).filter(|k| k.at.elapsed() < RESOLVED_FOR) {
            return Ok((k.url.clone(), k.client.clone()));
        }
        let target = egress().resolve(url).await.map_err(GuardHttpError::Egress)?;
        let client = self.client_for(&target)?;
        if self.kept.len() >= MAX_CLIENTS {
            self.kept.clear();
        }
        let kept = Kept { at: Instant::now(), url: target.url.clone(), client: client.clone() };
        self.kept.insert(url.to_string(), kept);
        Ok((target.url, client))
    }

    fn client_for(&self, target: &Target) -> Result<reqwest::Client, GuardHttpError> {
        let key = (target.host.clone(), target.addr);
        if let Some(c) = self.clients.get(&key) {
            return Ok(c.clone());
        }
        let client = client::builder()
            .connect_to(target)
            .pool(Duration::from_secs(60), 64)
            .nodelay()
            .build()
            .map_err(GuardHttpError::Client)?;
        if self.clients.len() >= MAX_CLIENTS {
            self.clients.clear();
        }
        self.clients.insert(key, client.clone());
        Ok(client)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn a_guard_s_key_is_opened_once_per_sealed_secret() {
        let c = GuardClient::default();
        let secret = sign::new_secret();
        let opened = Cell::new(0);
        let open = || {
            opened.set(opened.get() + 1);
            Some(secret.clone())
        };
        let first = c.key("sealed-1", open).expect("a whsec_ secret");
        let again = c.key("sealed-1", open).expect("kept");
        assert_eq!((opened.get(), &*first), (1, &*again), "opened once");
        assert_eq!(&*first, sign::key_of(&secret).unwrap().as_slice());
        // Another sealed text (a new secret, or the same re-sealed) is opened again; a secret
        // that does not open, or is no key, gives none and is not kept.
        assert!(c.key("sealed-2", open).is_some() && opened.get() == 2);
        assert!(c.key("sealed-3", || None).is_none() && c.key("sealed-3", || Some("short".into())).is_none());
    }
}

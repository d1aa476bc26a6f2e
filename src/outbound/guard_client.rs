//! The HTTP side of a gateway's external guards: one signed POST to the guard's URL and its
//! answer's bytes. The URL passes the webhooks' egress rules (`egress.rs`) and the client
//! connects to exactly the address checked; the body is signed as toolgate's webhooks are
//! (Standard Webhooks' `webhook-id`, `webhook-timestamp`, `webhook-signature`: `sign.rs`) with
//! the guard's own secret, so the guard can tell toolgate from anyone else who finds its URL.
//!
//! A guard is asked on a call's path, so what can be kept is kept: the checked address of a URL
//! for [`RESOLVED_FOR`] (a name that resolves elsewhere meanwhile still reaches the address that
//! was checked, so rebinding gains nothing) and one client, with its idle connections, per host
//! and address. What the call decides on the answer is `mcp/callout/`'s.

use super::client::{self, ClientError};
use super::egress::{Egress, EgressError, Target};
use super::sign;
use dashmap::DashMap;
use std::net::SocketAddr;
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
    #[error("the guard's secret cannot be opened")]
    Secret,
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
    /// The guard's secret (`whsec_...`), opened.
    pub secret: &'a str,
    /// `webhook-id`: unique per call and phase.
    pub id: &'a str,
    pub body: Vec<u8>,
    pub timeout: Duration,
}

/// The clients and checked addresses of the guards' URLs, shared by every call.
#[derive(Default)]
pub(crate) struct GuardClient {
    resolved: DashMap<String, (Instant, Target)>,
    clients: DashMap<(String, Option<SocketAddr>), reqwest::Client>,
}

impl GuardClient {
    /// POSTs `post` to its URL under the `egress` rules; the answer's body when the guard
    /// answered 2xx within the time-out.
    pub(crate) async fn post(&self, egress: &Egress, post: SignedPost<'_>) -> Result<Vec<u8>, GuardHttpError> {
        let timeout_ms = post.timeout.as_millis() as u64;
        let limited = tokio::time::timeout(post.timeout, self.exchange(egress, post)).await;
        limited.unwrap_or(Err(GuardHttpError::Timeout(timeout_ms)))
    }

    async fn exchange(&self, egress: &Egress, post: SignedPost<'_>) -> Result<Vec<u8>, GuardHttpError> {
        let target = self.target(egress, post.url).await?;
        let client = self.client_for(&target)?;
        let key = sign::key_of(post.secret).map_err(|_| GuardHttpError::Secret)?;
        let now = chrono::Utc::now().timestamp();
        let signature = sign::standard(&key, post.id, now, &post.body);
        let mut resp = client
            .post(target.url)
            .header("content-type", "application/json")
            .header("webhook-id", post.id)
            .header("webhook-timestamp", now.to_string())
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

    /// The URL's checked target: kept for [`RESOLVED_FOR`], then resolved and checked again.
    async fn target(&self, egress: &Egress, url: &str) -> Result<Target, GuardHttpError> {
        if let Some(kept) = self.resolved.get(url).filter(|k| k.0.elapsed() < RESOLVED_FOR) {
            return Ok(kept.1.clone());
        }
        let target = egress.resolve(url).await.map_err(GuardHttpError::Egress)?;
        if self.resolved.len() >= MAX_CLIENTS {
            self.resolved.clear();
        }
        self.resolved.insert(url.to_string(), (Instant::now(), target.clone()));
        Ok(target)
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

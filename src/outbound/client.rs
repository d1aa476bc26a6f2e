//! The one way toolgate builds an outbound HTTP client (webhooks, client metadata documents,
//! SMS, app OAuth and web sign-in, JWKS, OTLP export, https upstreams), so that what every
//! request leaving toolgate does is decided in one place:
//!
//! * **Redirects are not followed** unless the caller asks ([`Builder::follow_redirects`]): a
//!   redirect would carry a credential, a signed body or a checked request somewhere nobody
//!   checked.
//! * **Egress rules, with the address actually connected to**: a caller that checks a URL
//!   against [`Egress`](super::egress::Egress) hands the [`Target`] it got to
//!   [`Builder::connect_to`], and the client connects the host to that address only, whatever
//!   the name resolves to later (DNS rebinding gains nothing).
//! * **Time-outs**: connecting and the whole exchange, each where the caller has one.
//! * **One user agent**, `toolgate/<version>` (a request that names its own keeps it).
//! * **Extra trust roots** (PEM) besides the webpki roots, where the caller's configuration has
//!   them (an app's `tls_ca_file`, `web.client_id_metadata_documents.ca_file`).
//!
//! Proxies are reqwest's default: the `HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY` variables of the
//! process, as before this builder existed. HTTP/2 is offered by ALPN on https.

use super::egress::Target;
use std::time::Duration;

/// The `User-Agent` of every request toolgate sends.
pub(crate) const USER_AGENT: &str = concat!("toolgate/", env!("CARGO_PKG_VERSION"));

/// Why a client cannot be built.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClientError {
    #[error("extra roots cannot be read")]
    Roots(#[source] reqwest::Error),
    #[error("cannot build the HTTP client")]
    Build(#[source] reqwest::Error),
}

/// An outbound client being described; [`Builder::build`] makes it.
#[must_use]
pub(crate) struct Builder {
    inner: reqwest::ClientBuilder,
    roots: Option<Vec<u8>>,
}

/// A builder with redirects off, no time-out and the user agent set.
pub(crate) fn builder() -> Builder {
    let inner = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).user_agent(USER_AGENT);
    Builder { inner, roots: None }
}

impl Builder {
    /// The whole exchange, from connecting to the last byte of the answer.
    pub(crate) fn timeout(mut self, limit: Duration) -> Self {
        self.inner = self.inner.timeout(limit);
        self
    }

    /// Opening a connection (TCP and TLS).
    pub(crate) fn connect_timeout(mut self, limit: Duration) -> Self {
        self.inner = self.inner.connect_timeout(limit);
        self
    }

    /// Follows up to `max` redirects, for a caller whose peer is the operator's (a JWKS, an
    /// OTLP collector) and whose request carries nothing a redirect could leak.
    pub(crate) fn follow_redirects(mut self, max: usize) -> Self {
        self.inner = self.inner.redirect(reqwest::redirect::Policy::limited(max));
        self
    }

    /// Connects `target`'s host to the address the egress rules checked, never to what the
    /// name resolves to by then. A target of an allowed host (no address checked) resolves as
    /// usual.
    pub(crate) fn connect_to(mut self, target: &Target) -> Self {
        if let Some(addr) = target.addr {
            self.inner = self.inner.resolve(&target.host, addr);
        }
        self
    }

    /// Trusts the certificates of a PEM bundle besides the webpki roots.
    pub(crate) fn roots(mut self, pem: Option<&[u8]>) -> Self {
        self.roots = pem.map(<[u8]>::to_vec);
        self
    }

    /// Keeps idle connections this long, at most `per_host` of them per host.
    pub(crate) fn pool(mut self, idle_timeout: Duration, per_host: usize) -> Self {
        self.inner = self.inner.pool_idle_timeout(idle_timeout).pool_max_idle_per_host(per_host);
        self
    }

    /// Sends small writes at once (a request and its answer are latency, not throughput).
    pub(crate) fn nodelay(mut self) -> Self {
        self.inner = self.inner.tcp_nodelay(true);
        self
    }

    pub(crate) fn build(self) -> Result<reqwest::Client, ClientError> {
        let mut inner = self.inner;
        if let Some(pem) = &self.roots {
            for cert in reqwest::Certificate::from_pem_bundle(pem).map_err(ClientError::Roots)? {
                inner = inner.add_root_certificate(cert);
            }
        }
        inner.build().map_err(ClientError::Build)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbound::egress::{Egress, EgressError};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A one-request HTTP server on loopback: answers `answer` and hands back the request head.
    async fn serve_once(answer: impl Into<String>) -> (std::net::SocketAddr, tokio::task::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let answer = answer.into();
        let task = tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = sock.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                head.extend_from_slice(&buf[..n]);
            }
            sock.write_all(answer.as_bytes()).await.unwrap();
            sock.shutdown().await.ok();
            String::from_utf8_lossy(&head).into_owned()
        });
        (addr, task)
    }

    #[tokio::test]
    async fn redirects_are_not_followed_and_the_user_agent_is_sent() {
        let (addr, head) =
            serve_once("HTTP/1.1 302 Found\r\nlocation: http://127.0.0.1:9/elsewhere\r\ncontent-length: 0\r\n\r\n")
                .await;
        let client = builder().timeout(Duration::from_secs(5)).build().unwrap();
        let resp = client.get(format!("http://{addr}/start")).send().await.unwrap();
        assert_eq!(resp.status(), 302, "the redirect is the answer");
        let head = head.await.unwrap().to_ascii_lowercase();
        assert!(head.starts_with("get /start "), "{head}");
        assert!(head.contains(&format!("user-agent: {}\r\n", USER_AGENT.to_ascii_lowercase())), "{head}");
    }

    #[tokio::test]
    async fn redirects_are_followed_when_asked() {
        let (to, second) = serve_once("HTTP/1.1 204 No Content\r\n\r\n").await;
        let (from, _) =
            serve_once(format!("HTTP/1.1 302 Found\r\nlocation: http://{to}/there\r\ncontent-length: 0\r\n\r\n")).await;
        let client = builder().follow_redirects(1).timeout(Duration::from_secs(5)).build().unwrap();
        assert_eq!(client.get(format!("http://{from}/")).send().await.unwrap().status(), 204);
        assert!(second.await.unwrap().starts_with("GET /there "));
    }

    #[tokio::test]
    async fn the_egress_rules_refuse_a_private_address_and_the_client_connects_to_the_one_checked() {
        let (addr, head) = serve_once("HTTP/1.1 204 No Content\r\n\r\n").await;
        let url = format!("http://{addr}/hook");
        let refused = Egress { allowed_hosts: Vec::new(), allow_http: true }.resolve(&url).await.unwrap_err();
        assert!(matches!(refused, EgressError::Internal { .. }), "{refused}");
        // A name that resolves nowhere, checked as the loopback listener: the client goes to the
        // address checked, not to what the name would resolve to.
        let target = Target {
            url: format!("http://hook.invalid:{}/hook", addr.port()).parse().unwrap(),
            host: "hook.invalid".into(),
            addr: Some(addr),
        };
        let client = builder().connect_to(&target).timeout(Duration::from_secs(5)).build().unwrap();
        assert_eq!(client.get(target.url.clone()).send().await.unwrap().status(), 204);
        assert!(head.await.unwrap().to_ascii_lowercase().contains("host: hook.invalid:"));
    }

    #[test]
    fn roots_that_are_not_pem_certificates_are_refused() {
        let e = builder().roots(Some(b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")).build();
        assert!(matches!(e, Err(ClientError::Roots(_))));
    }
}

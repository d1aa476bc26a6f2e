//! TLS termination on the main listener: certificates chosen by SNI, a minimum protocol version,
//! ALPN (`h2`, `http/1.1`), optional client certificates (mTLS), and certificates reloaded from
//! disk without a restart.
//!
//! Why toolgate builds rustls' `ServerConfig` itself instead of Pingora's `TlsSettings`: Pingora
//! 0.9's rustls settings fix the protocol versions (1.2 and 1.3), load one certificate pair once,
//! and panic on a bad file. Here the configuration is built (and rebuilt on a change) by
//! [`EdgeTls`], and the handshake runs inside the connection wrapper ([`crate::edge::conn_limits`]),
//! so it counts against the connection caps and the header deadline like any slow client, and
//! a connection always takes the newest certificates while older connections keep theirs.
//!
//! A reload is all or nothing: the files are read and checked again (chain and key parse, key
//! matches the certificate, CA file holds certificates); if anything fails the running
//! configuration stays and the failure is logged with the field and counted.

use crate::config::{CertificatePaths, ClientAuth, TlsConfig, TlsVersion};
use arc_swap::ArcSwap;
use async_trait::async_trait;
use parking_lot::Mutex;
use pingora::listeners::tls::Acceptor;
use pingora::listeners::TlsAccept;
use pingora::protocols::tls::TlsRef;
use pingora_prometheus::prometheus::{
    register_int_counter_vec, register_int_gauge_vec, IntCounter, IntCounterVec, IntGaugeVec,
};
use rustls::crypto::ring as provider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};
use std::any::Any;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

/// Why a TLS configuration could not be built; `field` names the YAML field, as in
/// [`crate::config::ConfigError`].
#[derive(Debug, thiserror::Error)]
#[error("{field}: {message}")]
pub struct TlsError {
    pub field: String,
    pub message: String,
}

/// A TLS file that does not load is a configuration error like any other (`check-config`).
impl From<TlsError> for crate::config::ConfigError {
    fn from(e: TlsError) -> crate::config::ConfigError {
        crate::config::ConfigError::Invalid { field: e.field, message: e.message }
    }
}

fn error(field: impl Into<String>, message: impl Into<String>) -> TlsError {
    TlsError { field: field.into(), message: message.into() }
}

/// The verified client certificate of a connection (mTLS), handed to every request on it
/// through Pingora's TLS digest.
#[derive(Debug, Clone)]
pub struct ClientCertificate {
    /// The subject's distinguished name, RFC 4514 style (`CN=agent-1, O=Example`).
    pub subject: Arc<str>,
}

/// The TLS side of the main listener: the acceptor in use, and what it was built from.
pub struct EdgeTls {
    config: TlsConfig,
    /// ALPN offered: `h2` first when HTTP/2 is on.
    alpn: Vec<Vec<u8>>,
    acceptor: ArcSwap<Acceptor>,
    /// The files' modification times and sizes when `acceptor` was built (or last tried).
    seen: Mutex<Vec<FileStamp>>,
}

type FileStamp = (PathBuf, Option<SystemTime>, u64);

impl EdgeTls {
    /// Reads and checks every file now: a start with a bad certificate fails with the field.
    pub fn load(config: &TlsConfig, http2: bool) -> Result<Arc<EdgeTls>, TlsError> {
        let alpn = if http2 { vec![b"h2".to_vec(), b"http/1.1".to_vec()] } else { vec![b"http/1.1".to_vec()] };
        let seen = stamps(config);
        let server_config = build(config, &alpn)?;
        Ok(Arc::new(EdgeTls {
            config: config.clone(),
            alpn,
            acceptor: ArcSwap::from_pointee(Acceptor::from_server_config(server_config)),
            seen: Mutex::new(seen),
        }))
    }

    /// The TLS side of `server` if it has one: what the start and `check-config` both read.
    pub fn for_server(server: &crate::config::ServerConfig) -> Result<Option<Arc<EdgeTls>>, TlsError> {
        server.tls.as_ref().map(|tls| EdgeTls::load(tls, server.http2)).transpose()
    }

    /// The acceptor new connections use.
    pub(crate) fn acceptor(&self) -> Arc<Acceptor> {
        self.acceptor.load_full()
    }

    pub(crate) fn reload_check(&self) -> Option<std::time::Duration> {
        self.config.reload_check
    }

    /// Rebuilds the configuration when a file changed since the last build (or attempt);
    /// `forced` (SIGHUP) rebuilds even when nothing seems to have changed.
    pub fn reload(&self, forced: bool) -> Reloaded {
        let now = stamps(&self.config);
        {
            let mut seen = self.seen.lock();
            if !forced && *seen == now {
                return Reloaded::Unchanged;
            }
            // Recorded before the attempt: a broken file is reported once, not at every check.
            *seen = now;
        }
        match build(&self.config, &self.alpn) {
            Ok(server_config) => {
                self.acceptor.store(Arc::new(Acceptor::from_server_config(server_config)));
                metrics().reloads_ok.inc();
                tracing::info!("TLS certificates reloaded");
                Reloaded::Applied
            }
            Err(e) => {
                metrics().reloads_failed.inc();
                tracing::error!(field = %e.field, error = %e.message, "TLS reload refused; the running certificates stay");
                Reloaded::Refused(e)
            }
        }
    }
}

#[derive(Debug)]
pub enum Reloaded {
    Unchanged,
    Applied,
    Refused(TlsError),
}

/// Modification time and size of every file the configuration reads.
fn stamps(config: &TlsConfig) -> Vec<FileStamp> {
    let mut files: Vec<&Path> = config.certificates.iter().flat_map(|c| [&*c.cert_file, &*c.key_file]).collect();
    if let ClientAuth::Required(ca) | ClientAuth::Optional(ca) = &config.client_auth {
        files.push(ca);
    }
    files
        .into_iter()
        .map(|f| {
            let meta = std::fs::metadata(f).ok();
            (f.to_path_buf(), meta.as_ref().and_then(|m| m.modified().ok()), meta.map_or(0, |m| m.len()))
        })
        .collect()
}

fn build(config: &TlsConfig, alpn: &[Vec<u8>]) -> Result<Arc<ServerConfig>, TlsError> {
    let crypto = Arc::new(provider::default_provider());
    let versions: &[&rustls::SupportedProtocolVersion] = match config.min_version {
        TlsVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        TlsVersion::Tls13 => &[&rustls::version::TLS13],
    };
    let builder = ServerConfig::builder_with_provider(crypto.clone())
        .with_protocol_versions(versions)
        .map_err(|e| error("server.tls.min_version", e.to_string()))?;
    let builder = match &config.client_auth {
        ClientAuth::None => builder.with_no_client_auth(),
        ClientAuth::Required(ca) | ClientAuth::Optional(ca) => {
            let field = "server.tls.client_ca_file";
            let mut roots = RootCertStore::empty();
            for cert in read_certs(field, ca)? {
                roots.add(cert).map_err(|e| error(field, format!("{}: {e}", ca.display())))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), crypto.clone());
            let verifier = if matches!(config.client_auth, ClientAuth::Optional(_)) {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            builder.with_client_cert_verifier(verifier.build().map_err(|e| error(field, e.to_string()))?)
        }
    };
    let mut resolver = SniResolver::default();
    for (i, paths) in config.certificates.iter().enumerate() {
        resolver.add(i, paths, &crypto)?;
    }
    let mut server_config = builder.with_cert_resolver(Arc::new(resolver));
    server_config.alpn_protocols = alpn.to_vec();
    let (sessions, tickets) = resumption();
    server_config.session_storage = sessions.clone();
    if let Some(tickets) = tickets {
        server_config.ticketer = tickets.clone();
    }
    Ok(Arc::new(server_config))
}

/// Session resumption, one for the process so that a certificate reload does not forget the
/// sessions clients hold: stateless tickets (rustls' ring ticketer: ChaCha20-Poly1305 keys
/// rotated every 6 hours, nothing kept per client), which TLS 1.3 and 1.2 clients resume with,
/// and for TLS 1.2 clients without tickets a cache of session ids larger than rustls' 256. A
/// resumed handshake skips the certificate signature. Early data (0-RTT) stays off: it could be
/// replayed. Without a ticketer (it could not be made) rustls' default, no tickets, stays.
fn resumption() -> &'static Resumption {
    static RESUMPTION: OnceLock<Resumption> = OnceLock::new();
    RESUMPTION.get_or_init(|| {
        let tickets = provider::Ticketer::new()
            .inspect_err(
                |e| tracing::warn!(error = %e, "TLS session tickets unavailable; resumption by session id only"),
            )
            .ok();
        (rustls::server::ServerSessionMemoryCache::new(SESSION_CACHE_ENTRIES), tickets)
    })
}

/// The session-id cache and the ticketer every rebuilt configuration gets.
type Resumption = (Arc<dyn rustls::server::StoresServerSessions>, Option<Arc<dyn rustls::server::ProducesTickets>>);

/// TLS 1.2 session ids remembered for resumption (a few hundred bytes each).
const SESSION_CACHE_ENTRIES: usize = 8192;

fn read_certs(field: &str, file: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(file)
        .map_err(|e| error(field, format!("{}: {e}", file.display())))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| error(field, format!("{}: {e}", file.display())))?;
    if certs.is_empty() {
        return Err(error(field, format!("{} holds no PEM certificate", file.display())));
    }
    Ok(certs)
}

/// The certificates by the DNS names they are valid for (exact, and `*.parent` wildcards); a
/// client whose SNI matches none (or that sends none) gets the first certificate.
#[derive(Debug, Default)]
struct SniResolver {
    default: Option<Arc<CertifiedKey>>,
    exact: HashMap<String, Arc<CertifiedKey>>,
    /// Keyed by the parent domain: `*.example.com` under `example.com`.
    wildcard: HashMap<String, Arc<CertifiedKey>>,
}

impl SniResolver {
    fn add(
        &mut self,
        i: usize,
        paths: &CertificatePaths,
        crypto: &rustls::crypto::CryptoProvider,
    ) -> Result<(), TlsError> {
        let cert_field = format!("server.tls.certificates[{i}].cert_file");
        let key_field = format!("server.tls.certificates[{i}].key_file");
        let chain = read_certs(&cert_field, &paths.cert_file)?;
        let key = PrivateKeyDer::from_pem_file(&paths.key_file)
            .map_err(|e| error(&key_field, format!("{}: {e}", paths.key_file.display())))?;
        let certified = CertifiedKey::from_der(chain, key, crypto).map_err(|e| {
            error(&key_field, format!("{} does not fit {}: {e}", paths.key_file.display(), paths.cert_file.display()))
        })?;
        let (names, not_after) = leaf_names(&certified.cert[0]).map_err(|m| error(&cert_field, m))?;
        let label = names.first().cloned().unwrap_or_else(|| format!("certificates[{i}]"));
        metrics().not_after.with_label_values(&[&label]).set(not_after);
        let certified = Arc::new(certified);
        for name in names {
            match name.strip_prefix("*.") {
                Some(parent) => self.wildcard.entry(parent.to_string()).or_insert_with(|| certified.clone()),
                None => self.exact.entry(name).or_insert_with(|| certified.clone()),
            };
        }
        self.default.get_or_insert(certified);
        Ok(())
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let by_name = hello.server_name().and_then(|name| {
            // rustls hands over the SNI as sent; DNS names compare without case.
            let name = name.to_ascii_lowercase();
            self.exact.get(&name).or_else(|| {
                let (_, parent) = name.split_once('.')?;
                self.wildcard.get(parent)
            })
        });
        by_name.or(self.default.as_ref()).cloned()
    }
}

/// The leaf's DNS names (subject alternative names, or the common name when it has none) and
/// its expiry as a Unix time.
fn leaf_names(der: &CertificateDer<'_>) -> Result<(Vec<String>, i64), String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| format!("not an X.509 certificate: {e}"))?;
    let mut names: Vec<String> = match cert.subject_alternative_name() {
        Ok(Some(san)) => san
            .value
            .general_names
            .iter()
            .filter_map(|n| match n {
                x509_parser::extensions::GeneralName::DNSName(d) => Some(d.to_ascii_lowercase()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    if names.is_empty() {
        names.extend(cert.subject().iter_common_name().filter_map(|cn| cn.as_str().ok()).map(str::to_ascii_lowercase));
    }
    Ok((names, cert.validity().not_after.timestamp()))
}

/// Runs after each handshake: keeps the verified client certificate's subject for the
/// connection's requests.
pub(crate) struct ClientSubject;

#[async_trait]
impl TlsAccept for ClientSubject {
    async fn handshake_complete_callback(&self, tls: &TlsRef) -> Option<Arc<dyn Any + Send + Sync>> {
        metrics().handshakes_ok.inc();
        let der = tls.peer_certificate_der()?;
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        Some(Arc::new(ClientCertificate { subject: cert.subject().to_string().into() }))
    }
}

/// The client certificate of the connection a request came on, if it presented one.
pub fn client_certificate(digest: Option<&pingora::protocols::Digest>) -> Option<ClientCertificate> {
    digest?.ssl_digest.as_ref()?.extension.get::<ClientCertificate>().cloned()
}

/// Counts a handshake that failed or timed out (the successful ones count in the callback).
pub(crate) fn handshake_failed(timed_out: bool) {
    let m = metrics();
    if timed_out {
        m.handshakes_timeout.inc()
    } else {
        m.handshakes_failed.inc()
    }
}

struct Metrics {
    handshakes_ok: IntCounter,
    handshakes_failed: IntCounter,
    handshakes_timeout: IntCounter,
    reloads_ok: IntCounter,
    reloads_failed: IntCounter,
    not_after: IntGaugeVec,
}

fn metrics() -> &'static Metrics {
    static M: OnceLock<Metrics> = OnceLock::new();
    M.get_or_init(|| {
        let handshakes: IntCounterVec = register_int_counter_vec!(
            "toolgate_tls_handshakes_total",
            "TLS handshakes on the main listener (result: ok, failed, timeout)",
            &["result"]
        )
        .expect("metric registers once");
        let reloads = register_int_counter_vec!(
            "toolgate_tls_reloads_total",
            "Rebuilds of the TLS configuration after a file changed or SIGHUP (result: applied, refused)",
            &["result"]
        )
        .expect("metric registers once");
        Metrics {
            handshakes_ok: handshakes.with_label_values(&["ok"]),
            handshakes_failed: handshakes.with_label_values(&["failed"]),
            handshakes_timeout: handshakes.with_label_values(&["timeout"]),
            reloads_ok: reloads.with_label_values(&["applied"]),
            reloads_failed: reloads.with_label_values(&["refused"]),
            not_after: register_int_gauge_vec!(
                "toolgate_tls_certificate_not_after_seconds",
                "Expiry (Unix time) of each served certificate, by its first DNS name",
                &["name"]
            )
            .expect("metric registers once"),
        }
    })
}

/// The accepted connection as the TLS handshake needs it: Pingora hands the app a boxed
/// stream (`Box<dyn IO>`), and its handshake takes a sized `IO`; this forwards every part of
/// `IO` to the box.
#[derive(Debug)]
pub struct Accepted(pub pingora::protocols::Stream);

impl tokio::io::AsyncRead for Accepted {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Accepted {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}

#[async_trait]
impl pingora::protocols::Shutdown for Accepted {
    async fn shutdown(&mut self) {
        self.0.shutdown().await
    }
}

impl pingora::protocols::UniqueID for Accepted {
    fn id(&self) -> pingora::protocols::UniqueIDType {
        self.0.id()
    }
}

impl pingora::protocols::Ssl for Accepted {}

impl pingora::protocols::GetTimingDigest for Accepted {
    fn get_timing_digest(&self) -> Vec<Option<pingora::protocols::TimingDigest>> {
        self.0.get_timing_digest()
    }
}

impl pingora::protocols::GetProxyDigest for Accepted {
    fn get_proxy_digest(&self) -> Option<Arc<pingora::protocols::raw_connect::ProxyDigest>> {
        self.0.get_proxy_digest()
    }
}

impl pingora::protocols::GetSocketDigest for Accepted {
    fn get_socket_digest(&self) -> Option<Arc<pingora::protocols::SocketDigest>> {
        self.0.get_socket_digest()
    }
}

#[async_trait]
impl pingora::protocols::Peek for Accepted {
    async fn try_peek(&mut self, buf: &mut [u8]) -> std::io::Result<bool> {
        self.0.try_peek(buf).await
    }
}

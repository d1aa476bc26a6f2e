//! Connection bounds on the main listener: a total deadline for each request's header, an idle
//! time limit between keep-alive requests, and caps on open connections (all, and per client
//! address), so that slow or idle clients cannot hold sockets, memory and tasks without end.
//!
//! Why the listener's own connection loop and not Pingora's knobs: Pingora 0.9 times each
//! *read* of a request header (60 s, restarted by every byte, and no limit at all once a
//! keep-alive request has been answered), so a client trickling one header line at a time keeps
//! its connection for ever. Its `ConnectionFilter` (feature `connection_filter`) sees a connection
//! only at accept and never learns when it ends, so it cannot count open connections, and
//! `TcpSocketOptions` has no connection cap. [`BoundedHttp`] is the [`ServerApp`] the listener
//! runs: it takes a slot for the connection's whole life (refusing it when a cap is reached),
//! reads each request's header against its deadline, and only then hands the request to the
//! app ([`Answer`]), which never sees a request whose header is incomplete.
//!
//! The per-address cap counts the TCP peer, never `X-Forwarded-For` (the header is not read when
//! the connection is accepted, and it is the client's to write). Peers in `server.trusted_proxies`
//! are exempt from it (a load balancer carries many clients on its connections) but count towards
//! the global cap. IPv6 peers are counted by /64, the block one subscriber usually holds.

use crate::base::deadline;
use crate::base::fast_map::FastMap;
use crate::config::ServerConfig;
use crate::edge::tls::{Accepted, ClientSubject, EdgeTls};
use async_trait::async_trait;
use futures_util::future::BoxFuture;
use ipnet::IpNet;
use pingora::apps::{HttpPersistentSettings, HttpServerApp, ReusedHttpStream, ServerApp};
use pingora::protocols::http::ServerSession;
use pingora::protocols::tls::server::handshake_with_callback;
use pingora::protocols::{Stream, ALPN};
use pingora::server::ShutdownWatch;
use pingora_prometheus::prometheus::{register_int_counter_vec, register_int_gauge, IntCounter, IntGauge};
use std::future::Future;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::time::Instant;

/// How long a kept-alive connection that is idle when the server starts shutting down still
/// waits for a next request, and a request whose header is being read then still has to
/// complete it (each answered with `Connection: close`). HTTP/1.1 cannot tell an idle client
/// "closing"; a client already sending would otherwise meet a reset. Bounds how long an idle
/// server takes to exit on SIGTERM.
const SHUTDOWN_DRAIN: Duration = Duration::from_secs(1);

/// Why a connection was refused or ended early; also the `reason` label of the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// `server.max_connections` connections are open.
    Global,
    /// `server.max_connections_per_ip` connections from this address are open.
    PerAddress,
}

/// The limits, read from `server.*` at start.
#[derive(Debug, Clone)]
pub(crate) struct ConnLimitsConfig {
    pub header_timeout: Duration,
    pub keepalive_idle: Duration,
    pub max_connections: usize,
    pub max_connections_per_ip: usize,
    /// Peers exempt from the per-address cap (`server.trusted_proxies`).
    pub exempt: Vec<IpNet>,
}

impl ConnLimitsConfig {
    pub(crate) fn from_server(s: &ServerConfig) -> ConnLimitsConfig {
        ConnLimitsConfig {
            header_timeout: s.header_timeout,
            keepalive_idle: s.keepalive_idle,
            max_connections: s.max_connections,
            max_connections_per_ip: s.max_connections_per_ip,
            exempt: s.trusted_proxies.clone(),
        }
    }
}

/// Open connections, in all and per client address. Taken once per connection (not per
/// request): an atomic for the total and a sharded map for the addresses, no global lock.
#[derive(Debug)]
pub(crate) struct ConnLimits {
    config: ConnLimitsConfig,
    open: AtomicUsize,
    per_address: FastMap<IpAddr, usize>,
}

/// A connection's place in [`ConnLimits`], given back when it drops (when the connection ends).
#[derive(Debug)]
pub(crate) struct ConnSlot {
    limits: Arc<ConnLimits>,
    address: Option<IpAddr>,
}

impl ConnLimits {
    pub(crate) fn new(config: ConnLimitsConfig) -> Arc<ConnLimits> {
        Arc::new(ConnLimits { config, open: AtomicUsize::new(0), per_address: FastMap::default() })
    }

    /// Connections open now.
    #[cfg(test)]
    pub(crate) fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Takes a slot for a connection from `peer` (None: not an IP peer, e.g. a Unix socket,
    /// which only the global cap bounds).
    pub(crate) fn admit(self: &Arc<Self>, peer: Option<IpAddr>) -> Result<ConnSlot, Refusal> {
        if self.open.fetch_add(1, Ordering::AcqRel) >= self.config.max_connections {
            self.open.fetch_sub(1, Ordering::AcqRel);
            return Err(Refusal::Global);
        }
        // From here on the slot gives the global count back on every path, refusals included.
        let mut slot = ConnSlot { limits: self.clone(), address: None };
        let Some(address) = peer.map(address_key) else { return Ok(slot) };
        if self.config.exempt.iter().any(|net| net.contains(&address)) {
            return Ok(slot);
        }
        let mut count = self.per_address.entry(address).or_insert(0);
        if *count >= self.config.max_connections_per_ip {
            return Err(Refusal::PerAddress);
        }
        *count += 1;
        slot.address = Some(address);
        Ok(slot)
    }
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        if let Some(address) = self.address {
            // The entry goes when its last connection does, so the map holds only addresses
            // with open connections.
            self.limits.per_address.remove_if_mut(&address, |_, n| {
                *n = n.saturating_sub(1);
                *n == 0
            });
        }
        self.limits.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The address a connection counts against: IPv4 (also when it arrives IPv4-mapped on an IPv6
/// socket) as is, IPv6 by its /64.
pub(crate) fn address_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !u128::from(u64::MAX))),
        },
    }
}

/// An HTTP app whose HTTP/1 requests arrive with their header read: [`BoundedHttp`] reads it,
/// within the header deadline, and hands the session over. (HTTP/2 streams arrive through
/// Pingora's HTTP/2 loop and the app's `HttpServerApp::process_new_http`.)
///
/// Not an `async_trait`: the answer's future is held inline in the connection's future (boxed
/// once per connection), instead of a box per request. That future is allocated at its largest
/// for the connection's whole life, so an implementation boxes its large and rare steps
/// (`Proxy::answer`).
pub(crate) trait Answer: HttpServerApp + Send + Sync + 'static {
    /// Answers one request whose header has been read, and says what the connection does next.
    fn answer(self: &Arc<Self>, session: ServerSession, shutdown: &ShutdownWatch) -> impl Future<Output = Next> + Send;
}

/// What a connection does after an answer.
pub(crate) enum Next {
    /// Carries another request.
    Request(ReusedHttpStream),
    /// Closes.
    Close,
    /// Goes on with an answer that runs by itself: an open event stream on the bare connection
    /// (`edge::exchange::EventStream`). It runs as a task of its own that keeps the connection's
    /// slot, so the connection's loop, the request's state and Pingora's session are freed
    /// while the stream stays open.
    Alone(BoxFuture<'static, ()>),
}

impl Next {
    /// For Pingora's HTTP/2 loop, whose streams never go on alone (`Exchange::stream_on` runs
    /// them in place).
    pub(crate) fn reused(self) -> Option<ReusedHttpStream> {
        match self {
            Next::Request(reused) => Some(reused),
            Next::Close | Next::Alone(_) => None,
        }
    }
}

/// The outcome of reading a request's header: `true` when there is a request to answer. An
/// unparsable header gets a 400 and the connection is closed, as Pingora's own HTTP apps do.
pub(crate) async fn header_read(session: &mut ServerSession, read: pingora::Result<bool>) -> bool {
    match read {
        Ok(read) => read,
        Err(e) => {
            if matches!(e.etype(), pingora::ErrorType::InvalidHTTPHeader) {
                tracing::debug!(error = %e, "request header cannot be parsed");
                let _ = session.respond_error(400).await;
            }
            session.shutdown().await;
            false
        }
    }
}

/// The listener's application: an HTTP app ([`Answer`]) with connection bounds.
///
/// This runs the HTTP/1 keep-alive loop itself (as Pingora's `ServerApp for HttpServerApp`
/// does), with these differences: the connection holds a [`ConnSlot`]; the wait for a
/// keep-alive connection's next request ends after `keepalive_idle`; and each request's header
/// must be complete within `header_timeout` of the request's first byte (of the accept, for a
/// connection's first request), or the connection is closed.
///
/// On a TLS listener the handshake runs first, within the same deadline as the first header;
/// a connection that negotiates `h2` by ALPN (or, with `h2c`, opens with the HTTP/2 preface)
/// is handed to Pingora's HTTP/2 server loop, whose streams each run the same app.
pub(crate) struct BoundedHttp<A> {
    app: Arc<A>,
    limits: Arc<ConnLimits>,
    tls: Option<Arc<EdgeTls>>,
    h2c: bool,
}

/// What every HTTP/2 connection starts with ("prior knowledge", RFC 9113 section 3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

impl<A> BoundedHttp<A> {
    pub(crate) fn new(app: A, limits: Arc<ConnLimits>) -> BoundedHttp<A> {
        BoundedHttp { app: Arc::new(app), limits, tls: None, h2c: false }
    }

    /// The same app and connection caps on another listener, with TLS (`Some`) or without.
    pub(crate) fn sibling(&self, tls: Option<Arc<EdgeTls>>) -> BoundedHttp<A> {
        BoundedHttp { app: self.app.clone(), limits: self.limits.clone(), tls, h2c: self.h2c }
    }

    pub(crate) fn with_tls(mut self, tls: Option<Arc<EdgeTls>>) -> BoundedHttp<A> {
        self.tls = tls;
        self
    }

    /// Accept HTTP/2 with prior knowledge on plain connections (the app's server options must
    /// allow h2c too: Pingora's HTTP/2 loop checks them).
    pub(crate) fn with_h2c(mut self, h2c: bool) -> BoundedHttp<A> {
        self.h2c = h2c;
        self
    }

    /// Pingora's keep-alive setting in whole seconds (at least 1: 0 would mean "no limit").
    fn idle_secs(&self) -> u64 {
        self.limits.config.keepalive_idle.as_secs().max(1)
    }
}

#[async_trait]
impl<A: Answer> ServerApp for BoundedHttp<A> {
    async fn process_new(self: &Arc<Self>, stream: Stream, shutdown: &ShutdownWatch) -> Option<Stream> {
        let accepted = Instant::now();
        let peer = stream.get_socket_digest().and_then(|d| d.peer_addr().and_then(|a| a.as_inet()).map(|a| a.ip()));
        let slot = match self.limits.admit(peer) {
            Ok(slot) => slot,
            Err(refusal) => {
                metrics().refused(refusal).inc();
                tracing::debug!(peer = ?peer, reason = ?refusal, "connection refused");
                return None;
            }
        };
        let open = OpenGuard::new();
        let config = &self.limits.config;
        // Boxed: the handshake's future is 5 KB, and this future lives as long as the
        // connection; boxed, it is freed once the handshake is done (and a plain connection
        // never pays for it).
        let mut stream = match &self.tls {
            Some(tls) => Box::pin(secure(tls, stream, accepted + config.header_timeout, peer)).await?,
            None => stream,
        };
        if self.speaks_h2(&mut stream, accepted + config.header_timeout).await {
            // Pingora's HTTP/2 loop (its blanket `ServerApp` for HTTP apps): each stream is a
            // request of the same app; the connection keeps its slot until the loop ends.
            return <A as ServerApp>::process_new(&self.app, stream, shutdown).await;
        }
        let mut settings: Option<HttpPersistentSettings> = None;
        let mut first = true;
        loop {
            let started =
                if first { accepted } else { next_request(&mut stream, config.keepalive_idle, shutdown).await? };
            let mut session = ServerSession::new_http1(stream);
            if let Some(s) = settings.take() {
                s.apply_to_session(&mut session);
            }
            // Pingora turns keep-alive on without a limit once it has read a request; each
            // request starts again from the configured idle time (this also bounds every single
            // read of the header).
            session.set_keepalive(if *shutdown.borrow() { None } else { Some(self.idle_secs()) });
            let deadline = started + config.header_timeout;
            // Biased, the header first: a header that is there whole (the usual case) is read
            // in the first poll, and neither the deadline's timer nor the shutdown's waiter is
            // made.
            let read = tokio::select! {
                biased;
                read = session.read_request() => read,
                () = deadline::sleep_until(deadline) => {
                    // Dropping the session drops the connection: the client reads EOF.
                    metrics().header_timeouts.inc();
                    tracing::debug!(peer = ?peer, "request header not complete in time; connection closed");
                    return None;
                }
                () = drain_ended(shutdown) => return None,
            };
            if !header_read(&mut session, read).await {
                return None;
            }
            match self.app.answer(session, shutdown).await {
                Next::Request(reused) => (stream, settings) = reused.consume(),
                Next::Close => return None,
                Next::Alone(rest) => {
                    let held = (slot, open);
                    tokio::spawn(async move {
                        rest.await;
                        drop(held);
                    });
                    return None;
                }
            }
            first = false;
        }
    }
}

/// The TLS handshake of an accepted connection, within the header's `deadline`; a failed or late
/// one closes the connection (counted, and logged at debug level).
async fn secure(tls: &EdgeTls, stream: Stream, deadline: Instant, peer: Option<IpAddr>) -> Option<Stream> {
    let acceptor = tls.acceptor();
    let handshake = handshake_with_callback(&acceptor, Accepted(stream), &ClientSubject);
    match deadline::until(deadline, handshake).await {
        Ok(Ok(secured)) => {
            let secured: Stream = Box::new(secured);
            Some(secured)
        }
        Ok(Err(e)) => {
            crate::edge::tls::handshake_failed(false);
            tracing::debug!(peer = ?peer, error = %e, "TLS handshake failed");
            None
        }
        Err(_) => {
            crate::edge::tls::handshake_failed(true);
            tracing::debug!(peer = ?peer, "TLS handshake not complete in time; connection closed");
            None
        }
    }
}

/// Between keep-alive requests: waits for the next request's first byte, at most `idle`, and
/// returns when its header's time starts; `None` closes the connection.
async fn next_request(stream: &mut Stream, idle: Duration, shutdown: &ShutdownWatch) -> Option<Instant> {
    let mut byte = [0u8; 1];
    let peeked = tokio::select! {
        peeked = pingora::time::timeout(idle, stream.try_peek(&mut byte)) => peeked,
        // Shutting down (or handing over to a new process). Closing at once would race a
        // request the client is sending on this connection into a reset; a request that comes
        // within `SHUTDOWN_DRAIN` is still answered (with `Connection: close`), a connection
        // quiet for that long is closed.
        () = drain_ended(shutdown) => return None,
    };
    match peeked {
        Ok(Ok(true)) => Some(Instant::now()),
        // A TLS stream cannot be peeked: the wait for the next request is Pingora's keep-alive
        // read timeout (`keepalive_idle`), so the header's deadline counts from its end.
        Ok(Ok(false)) => Some(Instant::now() + idle),
        Ok(Err(_)) => None,
        Err(_) => {
            metrics().idle_closed.inc();
            None
        }
    }
}

/// Completes `SHUTDOWN_DRAIN` after the server starts shutting down (or handing over to a new
/// process); never otherwise. A request whose header is still being read then (the first
/// request of a connection accepted a moment before included: its client is sending and would
/// read EOF without an answer, which an upgrade under load met) has that long to complete it,
/// as a kept-alive connection's next request has; each is still bounded by its header deadline.
async fn drain_ended(shutdown: &ShutdownWatch) {
    let mut stopping = shutdown.clone();
    if stopping.wait_for(|stop| *stop).await.is_ok() {
        pingora::time::sleep(SHUTDOWN_DRAIN).await;
    } else {
        std::future::pending::<()>().await;
    }
}

impl<A> BoundedHttp<A> {
    /// HTTP/2 on this connection: ALPN `h2` on TLS, or the preface on a plain h2c listener.
    /// A client that sends nothing before `deadline` is treated as HTTP/1.1, whose header
    /// deadline (the same) then closes the connection.
    async fn speaks_h2(&self, stream: &mut Stream, deadline: Instant) -> bool {
        if matches!(stream.selected_alpn_proto(), Some(ALPN::H2)) {
            return true;
        }
        if !self.h2c || self.tls.is_some() {
            return false;
        }
        let mut preface = [0u8; H2_PREFACE.len()];
        let peeked = deadline::until(deadline, stream.try_peek(&mut preface)).await;
        matches!(peeked, Ok(Ok(true))) && preface == H2_PREFACE
    }
}

/// Connections open now on the main listener (all [`ConnLimits`] together): a shutdown waits
/// for it to reach 0.
pub(crate) fn open_connections() -> i64 {
    metrics().open.get()
}

/// Keeps `toolgate_connections_open` right on every way out of `process_new`.
struct OpenGuard;

impl OpenGuard {
    fn new() -> OpenGuard {
        metrics().open.inc();
        OpenGuard
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        metrics().open.dec();
    }
}

struct Metrics {
    open: IntGauge,
    refused_global: IntCounter,
    refused_per_address: IntCounter,
    header_timeouts: IntCounter,
    idle_closed: IntCounter,
}

impl Metrics {
    fn refused(&self, r: Refusal) -> &IntCounter {
        match r {
            Refusal::Global => &self.refused_global,
            Refusal::PerAddress => &self.refused_per_address,
        }
    }
}

fn metrics() -> &'static Metrics {
    static M: OnceLock<Metrics> = OnceLock::new();
    M.get_or_init(|| {
        let refused = register_int_counter_vec!(
            "toolgate_connections_refused_total",
            "Connections closed at accept because a cap was reached (reason: global, per_address)",
            &["reason"]
        )
        .expect("metric registers once");
        let closed = register_int_counter_vec!(
            "toolgate_connections_closed_total",
            "Connections closed by the server's time limits (reason: header_timeout, keepalive_idle)",
            &["reason"]
        )
        .expect("metric registers once");
        Metrics {
            open: register_int_gauge!("toolgate_connections_open", "Open connections on the main listener")
                .expect("metric registers once"),
            refused_global: refused.with_label_values(&["global"]),
            refused_per_address: refused.with_label_values(&["per_address"]),
            header_timeouts: closed.with_label_values(&["header_timeout"]),
            idle_closed: closed.with_label_values(&["keepalive_idle"]),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(total: usize, per_ip: usize, exempt: &[&str]) -> Arc<ConnLimits> {
        ConnLimits::new(ConnLimitsConfig {
            header_timeout: Duration::from_secs(1),
            keepalive_idle: Duration::from_secs(1),
            max_connections: total,
            max_connections_per_ip: per_ip,
            exempt: exempt.iter().map(|n| n.parse().unwrap()).collect(),
        })
    }

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn per_address_cap_counts_each_address_and_frees_on_drop() {
        let l = limits(100, 2, &[]);
        let a1 = l.admit(ip("10.0.0.1")).unwrap();
        let _a2 = l.admit(ip("10.0.0.1")).unwrap();
        assert_eq!(l.admit(ip("10.0.0.1")).unwrap_err(), Refusal::PerAddress);
        let _b = l.admit(ip("10.0.0.2")).unwrap();
        assert_eq!(l.open(), 3, "a refusal gives its global slot back");
        drop(a1);
        let _a3 = l.admit(ip("10.0.0.1")).unwrap();
        drop((_a2, _a3, _b));
        assert_eq!(l.open(), 0);
        assert!(l.per_address.is_empty(), "addresses without connections are forgotten");
    }

    #[test]
    fn global_cap_counts_every_peer() {
        let l = limits(2, 10, &[]);
        let _a = l.admit(ip("10.0.0.1")).unwrap();
        let _b = l.admit(None).unwrap();
        assert_eq!(l.admit(ip("10.0.0.3")).unwrap_err(), Refusal::Global);
        assert_eq!(l.open(), 2);
    }

    #[test]
    fn trusted_proxies_skip_the_per_address_cap_only() {
        let l = limits(3, 1, &["10.9.0.0/16"]);
        let held: Vec<_> = (0..3).map(|_| l.admit(ip("10.9.1.1")).unwrap()).collect();
        assert_eq!(l.admit(ip("10.9.1.1")).unwrap_err(), Refusal::Global);
        drop(held);
        let _x = l.admit(ip("10.0.0.1")).unwrap();
        assert_eq!(l.admit(ip("10.0.0.1")).unwrap_err(), Refusal::PerAddress);
    }

    #[test]
    fn ipv6_counts_by_64_and_mapped_ipv4_as_ipv4() {
        let l = limits(100, 1, &[]);
        let _a = l.admit(ip("2001:db8:1:2::1")).unwrap();
        assert_eq!(l.admit(ip("2001:db8:1:2:ffff::9")).unwrap_err(), Refusal::PerAddress);
        let _b = l.admit(ip("2001:db8:1:3::1")).unwrap();
        let _c = l.admit(ip("192.0.2.7")).unwrap();
        assert_eq!(l.admit(ip("::ffff:192.0.2.7")).unwrap_err(), Refusal::PerAddress);
    }

    #[test]
    fn server_settings_have_defaults_and_named_errors() {
        let c = crate::config::Config::parse("server:\n  listen: 127.0.0.1:0\n").unwrap();
        let l = ConnLimitsConfig::from_server(&c.server);
        assert_eq!(l.header_timeout, Duration::from_secs(10));
        assert_eq!(l.keepalive_idle, Duration::from_secs(60));
        assert_eq!((l.max_connections, l.max_connections_per_ip), (10_000, 256));
        for (line, field) in [
            ("header_timeout_ms: 0", "server.header_timeout_ms"),
            ("keepalive_idle_secs: 0", "server.keepalive_idle_secs"),
            ("max_connections: 0", "server.max_connections"),
            ("max_connections_per_ip: 0", "server.max_connections_per_ip"),
            ("max_connections: 10\n  max_connections_per_ip: 11", "server.max_connections_per_ip"),
        ] {
            let err = crate::config::Config::parse(&format!("server:\n  {line}\n")).unwrap_err().to_string();
            assert!(err.starts_with(field), "{line}: {err}");
        }
    }
}

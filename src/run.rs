//! Starting the server: configuration, state, the Pingora services, and the first-start key.

use crate::config::Config;
use crate::data::state::State;
use crate::edge::conn_limits::{BoundedHttp, ConnLimits, ConnLimitsConfig};
use crate::edge::tls::EdgeTls;
use crate::proxy::Proxy;
use crate::server::{Flusher, Server};
use pingora::listeners::{L4BufferSettings, ListenerConfig};
use pingora::server::configuration::{Opt, ServerConf};
use pingora::services::listening::Service;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use toolgate_filters::auth::Authenticate;
use toolgate_filters::ip_allowlist::IpAllowlist;
use toolgate_filters::rate_limit::RateLimit;
use toolgate_filters::FilterChain;

/// Runs toolgate until SIGTERM (graceful: in-flight requests finish), SIGINT, or SIGQUIT (a
/// graceful upgrade: the listening sockets go to a process started with `upgrade`). In stages:
/// the configuration, the state, the services, the listeners.
pub fn run(config_path: &Path, upgrade: bool) -> ExitCode {
    let Configuration { text, config, edge, admin_key } = match configuration(config_path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    // Bootstrap first: with `upgrade` this waits (up to 5 s) for the running process's sockets,
    // so the records below are read once that process has been told to hand over.
    let claim = match crate::server::upgrade::claim(&config.storage, upgrade) {
        Ok(claim) => claim,
        Err(e) => {
            eprintln!("toolgate: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Pingora would retry a taken address for 30 s and then run on without that listener.
    if !upgrade {
        if let Err(e) = crate::server::ports::check_free(&crate::server::ports::listeners(&config.server)) {
            eprintln!("toolgate: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    }
    let mut pingora_server = bootstrap(&config, upgrade);
    let (server, printed) = match open_state(config_path, text, &config, admin_key) {
        Ok(opened) => opened,
        Err(code) => return code,
    };
    // The lock on the embedded store is kept for the process's life (`run_forever` never
    // returns); after `--upgrade` a background service waits for the old process to free it.
    let _instance_lock = hand_over(&mut pingora_server, &config, &server, claim);
    if let Some(key) = printed {
        eprintln!("toolgate: created the owner API key (shown once, store it now): {key}");
    }
    let o = &config.observability;
    crate::observe::metrics::init(crate::observe::metrics::LabelLimits {
        gateways: o.metric_gateway_labels,
        tools: o.metric_tool_labels,
    });
    server.register_scrape_gauges();
    let proxy = proxy(&config, &server);
    crate::proxy::InProcess::install(&server);
    listeners(&mut pingora_server, &config, &server, proxy, edge);
    background(&mut pingora_server, &config, &server);
    tracing::info!(listen = %config.server.listen, tls = config.server.tls.is_some(), plain_listen = ?config.server.plain_listen, metrics = %config.server.metrics_listen, environment = config.environment.as_str(), "toolgate starting");
    pingora_server.run_forever()
}

/// What starting takes from the configuration file and the environment: the file's text (the
/// reloader compares it with the next), the configuration, the edge certificates, the owner key.
struct Configuration {
    text: String,
    config: Arc<Config>,
    edge: Option<Arc<EdgeTls>>,
    admin_key: Option<String>,
}

/// Reads and validates the configuration; a bad one is reported and exits with 2. Logging starts
/// here, as soon as the configuration says how.
fn configuration(config_path: &Path) -> Result<Configuration, ExitCode> {
    let text = match std::fs::read_to_string(config_path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("toolgate: bad configuration {}: cannot read it: {e}", config_path.display());
            return Err(ExitCode::from(2));
        }
    };
    let config = match Config::parse(&text) {
        Ok(c) => Arc::new(c),
        Err(e) => {
            eprintln!("toolgate: bad configuration {}: {e}", config_path.display());
            return Err(ExitCode::from(2));
        }
    };
    // The certificates are read before anything else starts: a bad file is a configuration
    // error, reported like one.
    let edge = match EdgeTls::for_server(&config.server) {
        Ok(edge) => edge,
        Err(e) => {
            eprintln!("toolgate: bad configuration {}: {e}", config_path.display());
            return Err(ExitCode::from(2));
        }
    };
    crate::observe::logging::init(&config.observability);
    for warning in crate::config::warnings(&config) {
        tracing::warn!("{warning}");
    }
    let admin_key = std::env::var("TOOLGATE_ADMIN_KEY").ok().filter(|k| !k.is_empty());
    if let Some(k) = &admin_key {
        if !k.starts_with(crate::base::secrets::KEY_PREFIX) || k.len() < 35 {
            eprintln!("toolgate: TOOLGATE_ADMIN_KEY must start with `ag_` and have at least 32 characters after it");
            return Err(ExitCode::from(2));
        }
    }
    Ok(Configuration { text, config, edge, admin_key })
}

/// Pingora's server, bootstrapped (with `upgrade`, holding the running process's sockets).
fn bootstrap(config: &Config, upgrade: bool) -> pingora::server::Server {
    let upgrade_sock = config.server.upgrade_sock.clone().unwrap_or_else(|| config.storage.default_upgrade_sock());
    let conf = ServerConf {
        threads: config.server.threads,
        work_stealing: config.server.work_stealing,
        // Beyond the grace period the flusher still writes the last entries and stops the apps,
        // then exits the process itself; Pingora's end is only the bound.
        grace_period_seconds: Some((config.server.grace_period + crate::server::SHUTDOWN_WORK).as_secs()),
        graceful_shutdown_timeout_seconds: Some(5),
        upgrade_sock: upgrade_sock.to_string_lossy().into_owned(),
        ..ServerConf::default()
    };
    let opt = Opt { upgrade, ..Opt::default() };
    let mut pingora_server = pingora::server::Server::new_with_opt_and_conf(opt, conf);
    pingora_server.bootstrap();
    pingora_server
}

/// The running server (holding the state), opened on a runtime of its own that ends before
/// Pingora starts its: the store, the rate limiter's backend, the peers' feed on Redis; and the
/// owner key created at first start (to be shown once).
fn open_state(
    config_path: &Path,
    text: String,
    config: &Arc<Config>,
    admin_key: Option<String>,
) -> Result<(Arc<Server>, Option<String>), ExitCode> {
    let startup = match tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("toolgate: cannot start: {e}");
            return Err(ExitCode::FAILURE);
        }
    };
    let opened = startup.block_on(async {
        let (state, printed) = State::open(config.clone(), admin_key).await.map_err(|e| e.to_string())?;
        let (backend, exact, sharing) = crate::data::limiter::open(&config.storage, &config.rate_limits);
        let limiter = RateLimit::new(config.rate_limit_policy.clone(), backend).with_exact(exact);
        let source = Arc::new(crate::config::ConfigSource::new(config_path, text));
        let server =
            Server::new(state.clone(), limiter, sharing, source).await.map_err(|e| crate::edge::error::chain(&e))?;
        if let crate::config::StorageConfig::Redis { key_prefix, .. } = &config.storage {
            let target = crate::data::store::redis::Target::of(&config.storage).map_err(|e| e.to_string())?;
            crate::data::peers::start(state.clone(), target, key_prefix);
        }
        Ok::<_, String>((Arc::new(server), printed))
    });
    opened.map_err(|e| {
        eprintln!("toolgate: cannot open storage: {e}");
        ExitCode::FAILURE
    })
}

/// The services of a graceful upgrade: after `--upgrade` the one that takes the embedded store
/// over once the old process frees it, and (one instance on its own store) the one that hands
/// it to the next. Returns the store's lock when this process holds it.
fn hand_over(
    pingora_server: &mut pingora::server::Server,
    config: &Config,
    server: &Arc<Server>,
    claim: crate::server::upgrade::Claim,
) -> Option<std::fs::File> {
    let lock = match claim {
        crate::server::upgrade::Claim::Held(file) => Some(file),
        crate::server::upgrade::Claim::Waiting(file) => {
            server.mcp.sessions.adopt_unknown();
            pingora_server.add_service(pingora::services::background::background_service(
                "takeover after upgrade",
                crate::server::upgrade::Takeover {
                    lock: parking_lot::Mutex::new(Some(file)),
                    state: server.state.clone(),
                },
            ));
            None
        }
        crate::server::upgrade::Claim::Shared => None,
    };
    if !config.storage.is_shared() {
        pingora_server.add_service(pingora::services::background::background_service(
            "upgrade hand-over",
            crate::server::upgrade::Handover { server: server.clone() },
        ));
    }
    lock
}

/// toolgate's HTTP app with its filter chains.
fn proxy(config: &Config, server: &Arc<Server>) -> Proxy {
    let state = &server.state;
    // The order is pinned (and tested): IP allowlist -> authentication -> rate limit; the gateway
    // routes then check `Origin`, after the rate limit so that a refusal is counted.
    let credentials = Arc::new(crate::identity::credentials::Credentials::new(state.clone()));
    let chain = || {
        FilterChain::new()
            .with(IpAllowlist::new(credentials.clone(), state.clone()))
            .with(Authenticate::new(credentials.clone()))
            .with(server.limiter.clone())
    };
    Proxy {
        server: server.clone(),
        management: chain(),
        gateway: chain().with(server.origin_check.clone()),
        identity: toolgate_filters::FilterChain::new().with(server.limiter.clone()),
        trusted_proxies: config.server.trusted_proxies.clone(),
        identity_path: config.web.path.clone(),
        server_options: {
            // Pingora's HTTP/2 loop reads `h2c` too: without it a preface would be read as HTTP/1.
            let mut options = pingora::apps::HttpServerOptions::default();
            options.h2c = config.server.h2c;
            options
        },
    }
}

/// The L4 read buffer of each accepted connection, instead of Pingora's 64 KiB (sized to batch
/// TLS's 16 KiB record reads): the buffer is allocated (and zeroed) for every connection, idle,
/// slow and streaming ones included, and with 64 KiB each cost about 86 KiB of RSS (5000 slow
/// connections: +432 MiB, BENCHMARKS.md). 2 KiB holds a typical request header of the MCP SDKs
/// or curl and a small body with it, so the wait for a keep-alive connection's next request
/// (conn_limits' one-byte peek) fetches the request in one read; a larger request takes a second
/// read, and larger reads (bodies, TLS records) bypass the buffer. It was 4 KiB until 2026-12-01:
/// 2 KiB less per open connection or stream (BENCHMARKS.md, "Scale on one instance").
const L4_READ_BUFFER: usize = 2048;

/// The listening services: the app on `server.listen` (with TLS when configured, and then plain
/// HTTP beside it on `server.plain_listen`), the metrics on `server.metrics_listen`, and the
/// reloader of the configuration and the certificates.
fn listeners(
    pingora_server: &mut pingora::server::Server,
    config: &Config,
    server: &Arc<Server>,
    proxy: Proxy,
    edge: Option<Arc<EdgeTls>>,
) {
    // toolgate's HTTP app behind the connection bounds (header deadline, idle keep-alive limit,
    // connection caps): see src/edge/conn_limits.rs for why this wraps the app instead of using
    // a Pingora setting.
    let limits = ConnLimits::new(ConnLimitsConfig::from_server(&config.server));
    let app = BoundedHttp::new(proxy, limits).with_h2c(config.server.h2c);
    let mut plain_beside = None;
    pingora_server.add_service(pingora::services::background::background_service(
        "SIGHUP and TLS certificate reloader",
        crate::server::reload::Reloader { server: server.clone(), tls: edge.clone() },
    ));
    let app = match edge {
        None => app,
        Some(edge) => {
            plain_beside = config.server.plain_listen.map(|addr| (addr, app.sibling(None)));
            app.with_tls(Some(edge))
        }
    };
    let mut service = Service::new("toolgate".to_string(), app);
    service.add_listener(
        ListenerConfig::tcp(config.server.listen.to_string())
            .l4_buffer(L4BufferSettings::default().read(L4_READ_BUFFER)),
    );
    if let Some((addr, plain)) = plain_beside {
        let mut plain_service = Service::new("toolgate (plain HTTP)".to_string(), plain);
        plain_service.add_listener(
            ListenerConfig::tcp(addr.to_string()).l4_buffer(L4BufferSettings::default().read(L4_READ_BUFFER)),
        );
        pingora_server.add_service(plain_service);
    }
    let mut prometheus = pingora_prometheus::prometheus_http_service();
    prometheus.add_tcp(&config.server.metrics_listen.to_string());
    pingora_server.add_service(service);
    pingora_server.add_service(prometheus);
}

/// The background services: the flusher (activity, the request log, sweeps), the webhooks'
/// deliveries, and the OTLP span exporter when configured.
fn background(pingora_server: &mut pingora::server::Server, config: &Config, server: &Arc<Server>) {
    let flusher = Flusher { server: server.clone(), period: std::time::Duration::from_millis(500) };
    pingora_server.add_service(pingora::services::background::background_service("flusher", flusher));
    pingora_server.add_service(pingora::services::background::background_service(
        "webhooks",
        crate::events::EventsService(server.events.clone()),
    ));
    if let Some(endpoint) = &config.observability.otlp_endpoint {
        let service_name = config.observability.service_name.clone();
        if let Some(exporter) = crate::observe::trace::start_export(endpoint.clone(), service_name) {
            pingora_server
                .add_service(pingora::services::background::background_service("OTLP span exporter", exporter));
        }
    }
}

//! The running server's shared parts: the state, the MCP runtime, the request log, MFA and the
//! rate limiter, and the background service that flushes buffered activity and sweeps what
//! expired.

pub mod backup;
pub(crate) mod connections_ended;
pub(crate) mod gateway_calls;
pub mod keys;
pub(crate) mod ports;
pub(crate) mod reload;
pub(crate) mod upgrade;

use crate::data::reqlog::{RequestLog, Urgency};
use crate::data::state::State;
use crate::data::store::StoreError;
use crate::identity::mfa::Mfa;
use crate::mcp::runtime::McpRuntime;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolgate_filters::rate_limit::{RateLimit, RateLimiter, UsageMinute};

pub struct Server {
    pub state: Arc<State>,
    /// The MCP side: app clients, protocol sessions, quotas, catalogues, GET streams.
    pub mcp: Arc<McpRuntime>,
    pub reqlog: Arc<RequestLog>,
    /// The MFA service (the management API's MFA routes; the identity service holds it too).
    pub mfa: Arc<Mfa>,
    /// The identity service: sign-in pages, web sessions and guessing bounds, the
    /// authorization server's endpoints.
    pub identity: crate::identity::IdentityService,
    /// Where e-mail and text messages leave (alerts, MFA codes).
    pub courier: Arc<crate::outbound::courier::Courier>,
    /// Events and the webhooks' outbox.
    pub events: Arc<crate::events::Events>,
    /// The audit trail: management writes, protected actions, tool decisions, denied calls.
    pub audit: Arc<crate::data::audit::Audit>,
    /// A handle on the rate-limit filter, for `/rate-limit` and extra charges; its backend
    /// also counts the MCP quotas.
    pub limiter: RateLimit<dyn RateLimiter>,
    /// Whether the limiter's buckets are being shared with the other instances.
    pub sharing: crate::data::limiter::Sharing,
    /// The gateway routes' `Origin` check (`mcp.allowed_origins`), shared with their chain so a
    /// reload can replace the list.
    pub origin_check: toolgate_filters::origin::OriginCheck,
    /// The configuration file and the text the running configuration came from, for reloads.
    pub config_source: Arc<crate::config::ConfigSource>,
    /// Calls to a gateway made on the server's side (the console's playground), installed by
    /// the proxy at start; unset in a server without listeners.
    pub(crate) gateway_calls: std::sync::OnceLock<Box<dyn gateway_calls::GatewayCalls>>,
    /// A pruning of the request log is running ([`Server::prune_logs`]).
    pruning: AtomicBool,
    /// Rate-limit usage the store did not take yet ([`Server::flush_rate_usage`]).
    unsaved_usage: parking_lot::Mutex<Vec<UsageMinute>>,
}

/// The file beside the master key (`storage.path`) that keeps the last audit checkpoint this
/// instance signed per organisation.
pub(crate) const AUDIT_KEPT_FILE: &str = "audit-checkpoints.json";

/// Per-minute usage counts kept while the store refuses them: a day of 70 busy callers.
const UNSAVED_USAGE_CAP: usize = 100_000;

/// Why the running server's parts could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ServerPartsError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The e-mail and SMS transports (`outbound::courier`) refused their configuration.
    #[error("the e-mail and SMS transports cannot be set up")]
    Courier(#[source] crate::config::ConfigError),
}

impl Server {
    pub async fn new(
        state: Arc<State>,
        limiter: RateLimit<dyn RateLimiter>,
        sharing: crate::data::limiter::Sharing,
        config_source: Arc<crate::config::ConfigSource>,
    ) -> Result<Server, ServerPartsError> {
        let reqlog = Arc::new(RequestLog::new(state.store.clone()));
        let checkpoint_key = (state.config().audit.checkpoint_key.clone())
            .unwrap_or_else(|| state.sealer.derive(crate::data::audit::chain::DERIVED_KEY_LABEL).to_vec());
        let audit = crate::data::audit::Audit::new(state.store.clone(), checkpoint_key);
        // The last checkpoint signed is kept beside the master key (`secret.key`), outside the
        // store's database; on Redis there is no such file, and it is kept in memory.
        let audit = Arc::new(match &state.config().storage {
            crate::config::StorageConfig::Embedded { path } => audit.keeping_in(path.join(AUDIT_KEPT_FILE)),
            crate::config::StorageConfig::Redis { .. } => audit,
        });
        let public = audit.signer().public_key_json();
        tracing::info!(
            key_id = public["key_id"].as_str(),
            public_key = public["public_key"].as_str(),
            "audit checkpoints are signed with this Ed25519 public key (also at GET /v1/audit/key); \
             `toolgate audit verify --public-key` checks an export with it"
        );
        let mcp = Arc::new(McpRuntime::new(state.clone(), reqlog.clone(), limiter.clone(), audit.clone()).await?);
        // The runtime's caches follow the state through the change feed. Held weakly: the feed
        // lives in the state, which the runtime itself holds.
        let weak = Arc::downgrade(&mcp);
        state.changes.listen(move |change| {
            if let Some(mcp) = weak.upgrade() {
                mcp.on_change(change);
            }
        });
        let courier =
            Arc::new(crate::outbound::courier::Courier::new(&state.config()).map_err(ServerPartsError::Courier)?);
        let guesses = Arc::new(crate::data::limiter::Guesses::open(&state.config().storage));
        let mfa = Arc::new(Mfa::load(state.store.clone(), courier.clone(), guesses).await?);
        let events = crate::events::Events::load(state.clone(), courier.clone()).await?;
        let origin_check = toolgate_filters::origin::OriginCheck::new(state.config().mcp.allowed_origins.clone());
        let to_webhooks = events.clone();
        audit.on_notice(move |n| {
            let events = to_webhooks.clone();
            tokio::spawn(async move { events.emit(&n.org_id, n.event, n.data).await });
        });
        Ok(Server {
            audit: audit.clone(),
            origin_check,
            mcp,
            reqlog,
            identity: crate::identity::IdentityService::new(state.clone(), mfa.clone(), audit.clone()),
            mfa,
            events,
            courier,
            limiter,
            sharing,
            state,
            config_source,
            gateway_calls: std::sync::OnceLock::new(),
            pruning: AtomicBool::new(false),
            unsaved_usage: parking_lot::Mutex::default(),
        })
    }

    /// Prunes the request log past `observability.log_retention_days` and `max_log_rows`, and
    /// its rollups past theirs, in a task of its own so that flushes never wait for it; one
    /// pruning at a time.
    pub(crate) fn prune_logs(self: &Arc<Self>) {
        if self.pruning.swap(true, Ordering::AcqRel) {
            return;
        }
        let server = self.clone();
        tokio::spawn(async move {
            let o = &server.state.config().observability;
            let retention = i64::try_from(o.log_retention.as_millis()).unwrap_or(i64::MAX);
            let now = crate::base::time::now_ms();
            let before = now.saturating_sub(retention);
            match server.state.store.prune_logs(before, o.max_log_rows).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(entries = n, "pruned the request log"),
                Err(e) => tracing::warn!(error = %e, "cannot prune the request log; the next sweep retries"),
            }
            const FINE_TIERS_KEPT: i64 = 2 * 24 * crate::observe::rollup::HOUR;
            let hourly = i64::try_from(o.rollup_retention.as_millis()).unwrap_or(i64::MAX);
            for tier in crate::observe::rollup::TIERS {
                let kept = if tier == crate::observe::rollup::HOUR { hourly } else { FINE_TIERS_KEPT };
                if let Err(e) = server.state.store.prune_rollups(tier, now.saturating_sub(kept)).await {
                    tracing::warn!(error = %e, tier, "cannot prune the request-log rollups; the next sweep retries");
                }
            }
            let usage_before = now.saturating_sub(hourly) / 1000;
            if let Err(e) = server.state.store.prune_rate_usage(usage_before).await {
                tracing::warn!(error = %e, "cannot prune rate-limit usage; the next sweep retries");
            }
            server.pruning.store(false, Ordering::Release);
        });
    }

    /// The gauges read at each scrape: live sessions, open streams, bytes kept for resumption,
    /// slow calls, stdio processes, app health.
    pub(crate) fn register_scrape_gauges(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        let read = move |f: fn(&Server) -> usize| {
            let weak = weak.clone();
            move || weak.upgrade().map_or(0, |s| i64::try_from(f(&s)).unwrap_or(i64::MAX))
        };
        crate::observe::metrics::gauge_at_scrape(
            "toolgate_mcp_sessions_active",
            "MCP sessions live now (neither ended nor expired)",
            read(|s| s.mcp.sessions.live_count()),
        );
        crate::observe::metrics::gauge_at_scrape(
            "toolgate_mcp_streams_open",
            "Long-lived MCP streams open now: GET streams (listening or resuming a call) and subscriptions/listen streams",
            read(|s| s.mcp.open_streams()),
        );
        crate::observe::metrics::gauge_at_scrape(
            "toolgate_mcp_resumable_bytes",
            "Bytes of call answers kept now for resumption (Last-Event-ID), all keys together",
            read(|s| s.mcp.call_streams.held_bytes()),
        );
        crate::observe::metrics::gauge_at_scrape(
            "toolgate_mcp_slow_calls",
            "MCP calls answered with a resumable stream that still run, each in a task of its own",
            read(|_| crate::mcp::dispatch::calls_going_on_alone()),
        );
        crate::observe::metrics::gauge_at_scrape(
            "toolgate_stdio_processes",
            "Stdio app processes running now",
            read(|s| s.mcp.apps.stdio_processes()),
        );
        let weak = Arc::downgrade(self);
        crate::observe::metrics::gauge_vec_at_scrape(
            "toolgate_newer_records",
            "Gateways and API keys written by a newer toolgate, which this instance neither serves nor writes",
            "kind",
            move || {
                let Some(s) = weak.upgrade() else { return Vec::new() };
                s.state
                    .newer_records()
                    .into_iter()
                    .map(|(k, n)| (k.to_string(), i64::try_from(n).unwrap_or(i64::MAX)))
                    .collect()
            },
        );
        let weak = Arc::downgrade(self);
        crate::observe::metrics::gauge_vec_at_scrape(
            "toolgate_app_up",
            "1 when an app's latest health probe got an answer, 0 when it could not be reached, started or understood; no sample while unknown",
            "app",
            move || {
                let Some(s) = weak.upgrade() else { return Vec::new() };
                s.mcp.apps.health.known().into_iter().map(|(app, up)| (app, i64::from(up))).collect()
            },
        );
    }

    /// Writes buffered activity (sessions, request log) to the store and hands apps that keep
    /// failing to the events; `Background` is the
    /// periodic flush (request log at idle priority), `Now` one that someone waits for.
    pub async fn flush(&self, urgency: Urgency) {
        self.reqlog.flush(urgency).await;
        self.mcp.sessions.flush().await;
        self.state.flush_usage().await;
        self.flush_rate_usage().await;
        self.audit.retry_unsaved().await;
        let failing = self.mcp.apps.failures.take_reports();
        if !failing.is_empty() {
            self.events.observe_app_failures(&failing).await;
        }
    }

    /// Hands the rate limiter's per-minute usage counts to the store. Counts the store refused
    /// are kept for the next flush (up to [`UNSAVED_USAGE_CAP`] minutes, beyond which the
    /// oldest are dropped with a warning).
    pub(crate) async fn flush_rate_usage(&self) {
        let reached = self.mcp.quotas.take_reached();
        if !reached.is_empty() {
            self.events.observe_gateway_quotas(&reached).await;
        }
        let fresh = self.limiter.backend().take_usage();
        // Alerts and usage warnings read the counts as they are taken (each count once).
        if !fresh.is_empty() {
            self.events.observe_usage(&fresh).await;
        }
        let mut minutes = std::mem::take(&mut *self.unsaved_usage.lock());
        minutes.extend(fresh);
        if minutes.is_empty() {
            return;
        }
        let minutes = Arc::new(minutes);
        if let Err(e) = self.state.store.add_rate_usage(minutes.clone()).await {
            tracing::warn!(error = %e, minutes = minutes.len(), "cannot write rate-limit usage; the next flush retries");
            let mut kept = Arc::unwrap_or_clone(minutes);
            let mut unsaved = self.unsaved_usage.lock();
            kept.append(&mut unsaved);
            if kept.len() > UNSAVED_USAGE_CAP {
                let over = kept.len() - UNSAVED_USAGE_CAP;
                tracing::warn!(minutes = over, "dropped rate-limit usage the store did not take");
                kept.drain(..over);
            }
            *unsaved = kept;
        }
    }
}

/// How often, after SIGTERM, the open connections are counted to exit once none is left.
const IDLE_CHECK: Duration = Duration::from_millis(20);

/// How long after the shutdown signal the open connections are first counted. Pingora's accept
/// loops wake on the same signal as this task, and a connection one of them accepts at that
/// moment counts as open only once its own task first runs: counted at once, the process could
/// find none open and exit under it, and its client would read EOF without an answer.
const LISTENERS_SETTLE: Duration = Duration::from_millis(100);

/// What the process does after the grace period's requests, and the time Pingora is told to
/// allow for it beyond `server.grace_period` (see `run`): stopping the apps (all at once, each
/// within the stdio transport's bound) and a second for the last flush. The process exits by
/// itself as soon as that is done.
pub(crate) const SHUTDOWN_WORK: Duration = Duration::from_secs(crate::mcp::upstream::stdio::STOP_BOUND.as_secs() + 1);

/// Runs [`Server::flush`] every `period` until the process stops; a Pingora background service.
pub(crate) struct Flusher {
    pub server: Arc<Server>,
    pub period: Duration,
}

#[async_trait::async_trait]
impl pingora::services::background::BackgroundService for Flusher {
    async fn start(&self, mut shutdown: pingora::server::ShutdownWatch) {
        let mut tick = tokio::time::interval(self.period);
        let mut last_sweep = Instant::now();
        let mut last_session_sweep = Instant::now();
        let mut last_call_stream_sweep = Instant::now();
        let mut last_jwt_refresh: Option<Instant> = None;
        let mut last_gateway_oauth_refresh: Option<Instant> = None;
        let mut last_checkpoint = Instant::now();
        let mut notices = self.server.mcp.apps.take_notices();
        // The apps' health probes run beside the flushes, in a task of their own, until the
        // same shutdown.
        tokio::spawn(crate::mcp::health::probe_apps(Arc::clone(&self.server.mcp), shutdown.clone()));
        loop {
            tokio::select! {
                _ = tick.tick() => self.server.flush(Urgency::Background).await,
                Some(change) = next_notice(&mut notices) => self.server.mcp.app_notice(&change),
                _ = shutdown.changed() => break,
            }
            // Idle rate-limit buckets are dropped so memory follows active callers only, and idle
            // upstream connections past their time are closed.
            self.server.mcp.end_sessions_of_unusable_keys();
            // Expired and ended sessions leave memory here; their store records are deleted by a
            // task of their own (one durable write each), so flushes never wait for them.
            // The period follows the time-outs in force (a reload may change them).
            if last_session_sweep.elapsed() >= self.server.mcp.sessions.limits().sweep_period() {
                self.server.mcp.sessions.sweep().await;
                if self.server.mcp.sessions.claim_deletion() {
                    let server = self.server.clone();
                    tokio::spawn(async move { server.mcp.sessions.delete_removed().await });
                }
                last_session_sweep = Instant::now();
            }
            // Call streams ended longer ago than a client may take to resume them, every second:
            // their bytes count toward their key's and organisation's bound until they go.
            if last_call_stream_sweep.elapsed() >= Duration::from_secs(1) {
                let keep = self.server.state.config().mcp.resumable.keep_after_end;
                self.server.mcp.call_streams.sweep(keep);
                last_call_stream_sweep = Instant::now();
            }
            if last_sweep.elapsed() >= Duration::from_secs(60) {
                self.server.limiter.sweep();
                self.server.identity.sweep();
                self.server.mcp.apps.sweep_idle();
                self.server.prune_logs();
                last_sweep = Instant::now();
            }
            if last_checkpoint.elapsed() >= self.server.state.config().audit.checkpoint_interval {
                self.server.audit.checkpoint(self.server.state.config().audit.checkpoint_interval).await;
                last_checkpoint = Instant::now();
            }
            if let Some(jwt) = self.server.state.jwt.load_full() {
                if jwt.refresh_due(last_jwt_refresh.map(|t: Instant| t.elapsed())) {
                    crate::outbound::jwks::refresh(&jwt).await;
                    last_jwt_refresh = Some(Instant::now());
                }
            }
            let gateway_oauth = self.server.state.config().gateway_oauth.as_ref().map(|o| o.verifier.clone());
            if let Some(verifier) = gateway_oauth {
                if verifier.refresh_due(last_gateway_oauth_refresh.map(|t: Instant| t.elapsed())) {
                    crate::outbound::jwks::refresh(&verifier).await;
                    last_gateway_oauth_refresh = Some(Instant::now());
                }
            }
        }
        // In-flight requests run for the grace period after SIGTERM; the apps must keep serving
        // them, so they are stopped only when the last connection has closed and the last call
        // going on alone has ended (`mcp::dispatch::go_on_alone`; idle keep-alive
        // connections close at once on shutdown) or at the period's end, after the last writes.
        // Then the process exits: Pingora would sleep out the whole grace period, which only
        // delays a restart, and its own end (`SHUTDOWN_WORK` later) drops this task wherever it
        // is, which could leave a stdio app's process unreaped.
        let grace = self.server.state.config().server.grace_period.saturating_sub(Duration::from_millis(500));
        let started = Instant::now();
        tokio::time::sleep(LISTENERS_SETTLE.min(grace)).await;
        let mut flushed = Instant::now();
        let idle = loop {
            if crate::edge::conn_limits::open_connections() == 0 && crate::mcp::dispatch::calls_going_on_alone() == 0 {
                break true;
            }
            if started.elapsed() >= grace {
                break false;
            }
            tokio::time::sleep(IDLE_CHECK.min(grace - started.elapsed())).await;
            if flushed.elapsed() >= self.period {
                self.server.flush(Urgency::Now).await;
                flushed = Instant::now();
            }
        };
        self.server.flush(Urgency::Now).await;
        self.server.audit.checkpoint(self.server.state.config().audit.checkpoint_interval).await;
        self.server.mcp.apps.shutdown().await;
        tracing::info!(elapsed_ms = started.elapsed().as_millis() as u64, idle, "flushed and stopped apps");
        crate::observe::logging::flush();
        std::process::exit(0);
    }
}

async fn next_notice(
    rx: &mut Option<tokio::sync::mpsc::UnboundedReceiver<crate::mcp::upstream::AppNotice>>,
) -> Option<crate::mcp::upstream::AppNotice> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

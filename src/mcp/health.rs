//! The apps' health, probed in the background (Decision 25): each app is asked something cheap
//! on an interval whether or not anyone calls it, so `toolgate_app_up`, the apps' `health` in
//! the API and the console, and the alerts built on them follow the app within one interval,
//! down and up again.
//!
//! * Remote (`url`) apps: an MCP `ping` on the probe's own upstream (its own connection pool and
//!   upstream session, sent without any organisation's credential: a probe never uses a
//!   tenant's; marked `X-Toolgate-Probe: health`). Any answer is up: a JSON-RPC error, and HTTP 401 or 403 (the server is there;
//!   it wants a credential a probe does not send).
//! * Built-in apps: the same `ping`, answered in process.
//! * Stdio apps: a `ping` on each of the app's processes that the app runtime has started (the
//!   process the calls use, restarted by the runtime as for a call); no process is started for
//!   a probe, so an app no one has called yet is `unknown`.
//!
//! Probes run every `interval` (±10 %, so that apps probed together drift apart), each within
//! `timeout`, at most `mcp.app_health.concurrency` at once; one app is never probed twice at
//! once. They go to the apps directly, not through a gateway: they are in no request log,
//! analytics, quota or failure run. Each instance probes and reports its own view (the metric
//! carries the instance's label); a reload keeps every app's state, and a changed app's probe
//! upstream is built again with its new settings.

use crate::base::fast_map::FastMap;
use crate::config::{AppConfig, AppUpstream};
use crate::mcp::runtime::McpRuntime;
use crate::mcp::upstream::{CallContext, Upstream, UpstreamError, UpstreamSettings, UpstreamShared};
use chrono::{DateTime, Utc};
use rand::Rng;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// How often the prober looks for apps whose probe is due.
const TICK: Duration = Duration::from_millis(200);
/// The first probe of an app comes within this (or its interval, if shorter) after the start,
/// spread so that the apps are not all probed at once.
const FIRST_PROBE_WITHIN: Duration = Duration::from_secs(1);

/// What the latest probe of an app found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthState {
    /// It answered.
    Up,
    /// It could not be reached, started or understood.
    Down,
    /// Not probed yet, or nothing to probe (a stdio app with no process running).
    Unknown,
}

impl HealthState {
    pub fn as_str(self) -> &'static str {
        match self {
            HealthState::Up => "up",
            HealthState::Down => "down",
            HealthState::Unknown => "unknown",
        }
    }
}

/// An app's health as of its latest probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    pub state: HealthState,
    /// Why it is down (or unknown), in words: no address, command line or secret.
    pub last_error: Option<String>,
    /// When the latest probe ended; none before the first.
    pub checked_at: Option<DateTime<Utc>>,
}

impl Health {
    const NOT_YET: Health = Health { state: HealthState::Unknown, last_error: None, checked_at: None };
}

/// Every app's health on this instance, kept across reloads.
#[derive(Default)]
pub struct AppHealth {
    states: FastMap<String, Health>,
}

impl AppHealth {
    /// The app's health; `unknown` before its first probe.
    pub fn of(&self, app_id: &str) -> Health {
        self.states.get(app_id).map_or(Health::NOT_YET, |h| h.value().clone())
    }

    /// The apps probed up or down (app id, up), in app id order: `toolgate_app_up`. An app
    /// whose health is unknown has no sample.
    pub fn known(&self) -> Vec<(String, bool)> {
        let mut all: Vec<(String, bool)> = self
            .states
            .iter()
            .filter(|e| e.value().state != HealthState::Unknown)
            .map(|e| (e.key().clone(), e.value().state == HealthState::Up))
            .collect();
        all.sort_unstable();
        all
    }

    /// Keeps what a probe found; a change between up and down is logged, with the error in full.
    fn record(&self, app_id: &str, probed: Probed) {
        let (state, last_error) = match &probed {
            Probed::Up => (HealthState::Up, None),
            Probed::Down(e) => (HealthState::Down, Some(e.in_words().into_owned())),
            Probed::TimedOut(_) => (HealthState::Down, Some("timed out".to_string())),
            Probed::Unknown(why) => (HealthState::Unknown, Some(why.to_string())),
        };
        let before = self.of(app_id).state;
        match (&probed, before) {
            (Probed::Down(error), HealthState::Up | HealthState::Unknown) => {
                tracing::warn!(app = app_id, %error, "app is down (its health probe failed)")
            }
            (Probed::TimedOut(after), HealthState::Up | HealthState::Unknown) => {
                tracing::warn!(
                    app = app_id,
                    timeout_ms = after.as_millis() as u64,
                    "app is down (its health probe timed out)"
                )
            }
            (Probed::Up, HealthState::Down) => tracing::info!(app = app_id, "app is up again"),
            _ => {}
        }
        self.states.insert(app_id.to_string(), Health { state, last_error, checked_at: Some(Utc::now()) });
    }

    /// Forgets the apps no longer configured.
    fn retain(&self, apps: &[Arc<AppConfig>]) {
        self.states.retain(|id, _| apps.iter().any(|a| &a.id == id));
    }
}

/// What one probe found.
enum Probed {
    Up,
    Down(UpstreamError),
    TimedOut(Duration),
    Unknown(&'static str),
}

/// The prober's own upstreams (remote and built-in apps) and the apps being probed now.
struct Prober {
    mcp: Arc<McpRuntime>,
    /// Its own connection pools, and no notice reporting: a probe's session is nobody's.
    shared: UpstreamShared,
    upstreams: parking_lot::Mutex<HashMap<String, (UpstreamSettings, Arc<Upstream>)>>,
    probing: parking_lot::Mutex<HashSet<String>>,
}

/// Probes the apps until `shutdown` (a task of the server's background service).
pub(crate) async fn probe_apps(mcp: Arc<McpRuntime>, mut shutdown: pingora::server::ShutdownWatch) {
    let prober = Arc::new(Prober {
        mcp,
        shared: UpstreamShared::new(1),
        upstreams: parking_lot::Mutex::default(),
        probing: parking_lot::Mutex::default(),
    });
    let mut due: HashMap<String, Instant> = HashMap::new();
    let mut slots = (0, Arc::new(Semaphore::new(0)));
    let mut tick = tokio::time::interval(TICK);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => break,
        }
        let config = prober.mcp.state.config();
        let global = config.mcp.app_health;
        // The bound in force (a reload may change it); probes holding the old one finish.
        if slots.0 != global.concurrency {
            slots = (global.concurrency, Arc::new(Semaphore::new(global.concurrency)));
        }
        prober.mcp.apps.health.retain(&config.apps);
        prober.upstreams.lock().retain(|id, _| config.apps.iter().any(|a| &a.id == id));
        due.retain(|id, _| config.apps.iter().any(|a| &a.id == id));
        let now = Instant::now();
        for app in &config.apps {
            let (interval, timeout) = app.health_probe(&global);
            let next = due.entry(app.id.clone()).or_insert_with(|| now + spread(interval.min(FIRST_PROBE_WITHIN)));
            if now < *next || !prober.probing.lock().insert(app.id.clone()) {
                continue;
            }
            *next = now + interval.mul_f64(rand::thread_rng().gen_range(0.9..1.1));
            let (prober, app, slots) = (prober.clone(), app.clone(), slots.1.clone());
            tokio::spawn(async move {
                if let Ok(_slot) = slots.acquire_owned().await {
                    let probed = match tokio::time::timeout(timeout, prober.probe(&app)).await {
                        Ok(p) => p,
                        Err(_) => Probed::TimedOut(timeout),
                    };
                    prober.mcp.apps.health.record(&app.id, probed);
                }
                prober.probing.lock().remove(&app.id);
            });
        }
    }
    let all: Vec<Arc<Upstream>> = prober.upstreams.lock().drain().map(|(_, (_, up))| up).collect();
    futures_util::future::join_all(all.iter().map(|up| up.shutdown())).await;
}

/// A random point within `d`.
fn spread(d: Duration) -> Duration {
    d.mul_f64(rand::thread_rng().gen_range(0.0..1.0))
}

impl Prober {
    async fn probe(&self, app: &AppConfig) -> Probed {
        match &app.upstream {
            AppUpstream::Command { .. } => self.probe_processes(app).await,
            AppUpstream::Url(_) | AppUpstream::Builtin(_) => match self.upstream(app) {
                Ok(up) => outcome(ping(&up).await),
                Err(e) => Probed::Down(e),
            },
        }
    }

    /// Each process of a stdio app that runs now: up when all answer.
    async fn probe_processes(&self, app: &AppConfig) -> Probed {
        let running = self.mcp.apps.stdio_upstreams(&app.id);
        if running.is_empty() {
            return Probed::Unknown("not started: a stdio app starts at its first call");
        }
        for up in running {
            if let Err(e) = ping(&up).await {
                return Probed::Down(e);
            }
        }
        Probed::Up
    }

    /// The probe's upstream of a remote or built-in app, built again when its settings changed.
    fn upstream(&self, app: &AppConfig) -> Result<Arc<Upstream>, UpstreamError> {
        let settings = self.mcp.apps.probe_settings(app);
        let mut all = self.upstreams.lock();
        if let Some((was, up)) = all.get(&app.id) {
            if *was == settings {
                return Ok(up.clone());
            }
        }
        let up = Arc::new(Upstream::for_owner("", &settings, &self.shared)?);
        if let Some((_, old)) = all.insert(app.id.clone(), (settings, up.clone())) {
            tokio::spawn(async move { old.shutdown().await });
        }
        Ok(up)
    }
}

/// An MCP `ping`: any answer counts, a JSON-RPC error too, and an HTTP 401 or 403 (the server
/// answered; it wants a credential).
async fn ping(up: &Upstream) -> Result<(), UpstreamError> {
    match up.request("ping", None, &CallContext::default()).await {
        Ok(reply) => reply.into_response().await.map(drop),
        Err(UpstreamError::Http { status: 401 | 403, .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

fn outcome(r: Result<(), UpstreamError>) -> Probed {
    match r {
        Ok(()) => Probed::Up,
        Err(e) => Probed::Down(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_sets_the_state_and_unknown_has_no_sample() {
        let h = AppHealth::default();
        assert_eq!(h.of("a"), Health::NOT_YET);
        h.record("a", Probed::Up);
        h.record("b", Probed::Down(UpstreamError::Connect("ConnectRefused context: 10.0.0.1:80".into())));
        h.record("c", Probed::Unknown("not started"));
        assert_eq!(h.known(), vec![("a".to_string(), true), ("b".to_string(), false)]);
        let b = h.of("b");
        assert_eq!((b.state, b.last_error.as_deref()), (HealthState::Down, Some("connection refused")));
        assert!(b.checked_at.is_some());
        h.record("b", Probed::TimedOut(Duration::from_millis(5)));
        assert_eq!(h.of("b").last_error.as_deref(), Some("timed out"));
        h.record("b", Probed::Up);
        assert_eq!((h.of("b").state, h.of("b").last_error), (HealthState::Up, None));
    }
}

//! `mcp:`: the MCP endpoint's sessions, paging, allowed origins, stdio processes, the bounds on
//! what one tenant's streams hold (`mcp.streams`, `mcp.resumable`) and of the gateways' rules
//! (`mcp.rules`), and of the calls of their external guards (`mcp.guards`).

use crate::config::*;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMcp {
    session_idle_timeout_secs: Option<u64>,
    #[serde(default)]
    allowed_origins: Vec<String>,
    max_stdio_processes: Option<usize>,
    page_size: Option<usize>,
    session_retention_secs: Option<u64>,
    max_sessions_per_key: Option<usize>,
    max_sessions_per_organization: Option<usize>,
    list_deadline_ms: Option<u64>,
    #[serde(default)]
    streams: RawStreams,
    #[serde(default)]
    resumable: RawResumable,
    #[serde(default)]
    rules: RawRules,
    #[serde(default)]
    app_health: RawAppHealth,
    #[serde(default)]
    guards: RawGuards,
}

/// `mcp.guards`: the external guards' calls in flight.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGuards {
    concurrency_per_gateway: Option<usize>,
    concurrency_per_organization: Option<usize>,
}

impl RawGuards {
    fn build(self) -> Result<GuardsConfig, ConfigError> {
        let d = GuardsConfig::default();
        let g = GuardsConfig {
            concurrency_per_gateway: self.concurrency_per_gateway.unwrap_or(d.concurrency_per_gateway),
            concurrency_per_organization: self.concurrency_per_organization.unwrap_or(d.concurrency_per_organization),
        };
        // Zero would refuse every guard call (each then following its `failure`).
        for (field, n) in [
            ("mcp.guards.concurrency_per_gateway", g.concurrency_per_gateway),
            ("mcp.guards.concurrency_per_organization", g.concurrency_per_organization),
        ] {
            if !(1..=100_000).contains(&n) {
                return Err(invalid(field, "must be between 1 and 100000"));
            }
        }
        Ok(g)
    }
}

/// `mcp.app_health`: the apps' background probes.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAppHealth {
    interval_secs: Option<u64>,
    timeout_ms: Option<u64>,
    concurrency: Option<usize>,
}

/// Bounds of a probe's interval (a day at most) and time-out (a minute at most).
const MAX_PROBE_INTERVAL_SECS: u64 = 86_400;
const MAX_PROBE_TIMEOUT_MS: u64 = 60_000;

/// An interval and a time-out of the apps' probes, checked; `at` names the section in a
/// refusal (`mcp.app_health`, `apps[i].health`).
pub(super) fn probe_settings(
    interval_secs: Option<u64>,
    timeout_ms: Option<u64>,
    at: &str,
) -> Result<AppHealthOverrides, ConfigError> {
    if let Some(s) = interval_secs.filter(|s| !(1..=MAX_PROBE_INTERVAL_SECS).contains(s)) {
        let why = format!("{s}: must be between 1 and {MAX_PROBE_INTERVAL_SECS}");
        return Err(invalid(format!("{at}.interval_secs"), why));
    }
    if let Some(ms) = timeout_ms.filter(|ms| !(1..=MAX_PROBE_TIMEOUT_MS).contains(ms)) {
        let why = format!("{ms}: must be between 1 and {MAX_PROBE_TIMEOUT_MS}");
        return Err(invalid(format!("{at}.timeout_ms"), why));
    }
    Ok(AppHealthOverrides {
        interval: interval_secs.map(Duration::from_secs),
        timeout: timeout_ms.map(Duration::from_millis),
    })
}

impl RawAppHealth {
    fn build(self) -> Result<AppHealthConfig, ConfigError> {
        let d = AppHealthConfig::default();
        let given = probe_settings(self.interval_secs, self.timeout_ms, "mcp.app_health")?;
        let concurrency = self.concurrency.unwrap_or(d.concurrency);
        // A semaphore's permits: zero would never probe.
        if !(1..=1024).contains(&concurrency) {
            return Err(invalid("mcp.app_health.concurrency", "must be between 1 and 1024"));
        }
        Ok(AppHealthConfig {
            interval: given.interval.unwrap_or(d.interval),
            timeout: given.timeout.unwrap_or(d.timeout),
            concurrency,
        })
    }
}

/// `mcp.rules`: what a gateway's rules may cost.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRules {
    max_cost: Option<u64>,
    max_input_items: Option<usize>,
    max_input_bytes: Option<usize>,
    concurrency_per_organization: Option<usize>,
}

impl RawRules {
    fn build(self) -> Result<RulesConfig, ConfigError> {
        let d = RulesConfig::default();
        let r = RulesConfig {
            max_cost: self.max_cost.unwrap_or(d.max_cost),
            max_input_items: self.max_input_items.unwrap_or(d.max_input_items),
            max_input_bytes: self.max_input_bytes.unwrap_or(d.max_input_bytes),
            concurrency_per_organization: self.concurrency_per_organization.unwrap_or(d.concurrency_per_organization),
        };
        // The bound's arithmetic is in f64: far below 2^53 it stays exact.
        if !(1_000..=1_000_000_000).contains(&r.max_cost) {
            return Err(invalid("mcp.rules.max_cost", "must be between 1000 and 1000000000"));
        }
        // The rules' own variables hold up to 16 entries (`caller` its eight members): the
        // bound must cover them.
        if !(16..=1_000_000).contains(&r.max_input_items) {
            return Err(invalid("mcp.rules.max_input_items", "must be between 16 and 1000000"));
        }
        if !(1024..=1024 * 1024 * 1024).contains(&r.max_input_bytes) {
            return Err(invalid("mcp.rules.max_input_bytes", "must be between 1024 and 1073741824"));
        }
        // A semaphore's permits; zero would refuse every dear rule set.
        if !(1..=1024).contains(&r.concurrency_per_organization) {
            return Err(invalid("mcp.rules.concurrency_per_organization", "must be between 1 and 1024"));
        }
        Ok(r)
    }
}

/// `mcp.streams`: open long-lived streams per session, key and organisation.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStreams {
    per_session: Option<usize>,
    per_key: Option<usize>,
    per_organization: Option<usize>,
}

/// `mcp.resumable`: bytes kept for resumable call streams per key and organisation.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawResumable {
    bytes_per_key: Option<usize>,
    bytes_per_organization: Option<usize>,
    keep_after_end_secs: Option<u64>,
}

/// Streams one session may hold: its listening stream and the resumption of several calls whose
/// connection dropped together, which MCP allows on separate GETs.
const STREAMS_PER_SESSION: usize = 8;
/// Streams one key may hold: a quarter of its organisation's, so one key (a leaked one, a client
/// in a reconnect loop) leaves room for the organisation's other keys.
const STREAMS_PER_KEY: usize = 250;
/// Streams one organisation may hold: a tenth of the listener's default connection cap
/// (`server.max_connections`, 10,000), so ten organisations at their bound still leave it room,
/// as a key's share of parked calls is a tenth of the table.
const STREAMS_PER_ORG: usize = 1_000;
/// Bytes of resumable answers one key may keep: sixteen call streams at their own bound (4 MiB).
const RESUMABLE_BYTES_PER_KEY: usize = 64 << 20;
/// ...and one organisation: four keys at their bound.
const RESUMABLE_BYTES_PER_ORG: usize = 256 << 20;
/// How long an ended call stream can be resumed, and at most.
const KEEP_AFTER_END_SECS: u64 = 60;
const MAX_KEEP_AFTER_END_SECS: u64 = 3600;

/// Upper bounds of `mcp.session_idle_timeout_secs` and `mcp.session_retention_secs`.
const MAX_SESSION_SECS: u64 = 365 * 24 * 3600;
/// Upper bound of `mcp.max_stdio_processes`: far above what one host runs.
const MAX_STDIO_PROCESSES: usize = 10_000;

impl RawMcp {
    pub(super) fn build(self) -> Result<McpConfig, ConfigError> {
        let m = self;
        // Session times are added to instants and to each other: a bound keeps that from
        // overflowing (a panic at start once sessions are stored).
        for (field, value) in [
            ("mcp.session_idle_timeout_secs", m.session_idle_timeout_secs),
            ("mcp.session_retention_secs", m.session_retention_secs),
        ] {
            if value.is_some_and(|v| v > MAX_SESSION_SECS) {
                return Err(invalid(field, format!("must be at most {MAX_SESSION_SECS} (a year)")));
            }
        }
        let mcp = McpConfig {
            session_idle_timeout: Duration::from_secs(m.session_idle_timeout_secs.unwrap_or(1800)),
            allowed_origins: m.allowed_origins,
            max_stdio_processes: m.max_stdio_processes.unwrap_or(super::DEFAULT_MAX_STDIO_PROCESSES),
            page_size: m.page_size.unwrap_or(100),
            session_retention: Duration::from_secs(m.session_retention_secs.unwrap_or(300)),
            max_sessions_per_key: m.max_sessions_per_key.unwrap_or(1000),
            max_sessions_per_org: m.max_sessions_per_organization.unwrap_or(10_000),
            list_deadline: Duration::from_millis(m.list_deadline_ms.unwrap_or(5_000)),
            streams: m.streams.build()?,
            resumable: m.resumable.build()?,
            rules: m.rules.build()?,
            app_health: m.app_health.build()?,
            guards: m.guards.build()?,
        };
        if !(1..=600_000).contains(&mcp.list_deadline.as_millis()) {
            return Err(invalid("mcp.list_deadline_ms", "must be between 1 and 600000"));
        }
        // The stdio permits are a semaphore, which panics at start above its maximum; zero would
        // refuse every stdio app.
        if !(1..=MAX_STDIO_PROCESSES).contains(&mcp.max_stdio_processes) {
            return Err(invalid("mcp.max_stdio_processes", format!("must be between 1 and {MAX_STDIO_PROCESSES}")));
        }
        if mcp.page_size == 0 {
            return Err(invalid("mcp.page_size", "must be at least 1"));
        }
        if mcp.max_sessions_per_key == 0 {
            return Err(invalid("mcp.max_sessions_per_key", "must be at least 1"));
        }
        if mcp.max_sessions_per_org == 0 {
            return Err(invalid("mcp.max_sessions_per_organization", "must be at least 1"));
        }
        Ok(mcp)
    }
}

impl RawStreams {
    fn build(self) -> Result<StreamBounds, ConfigError> {
        let b = StreamBounds {
            per_session: self.per_session.unwrap_or(STREAMS_PER_SESSION),
            per_key: self.per_key.unwrap_or(STREAMS_PER_KEY),
            per_org: self.per_organization.unwrap_or(STREAMS_PER_ORG),
        };
        // Zero would refuse every stream; a narrower bound above a wider one would never be met.
        at_least_one_and_nested([
            ("mcp.streams.per_session", b.per_session),
            ("mcp.streams.per_key", b.per_key),
            ("mcp.streams.per_organization", b.per_org),
        ])?;
        Ok(b)
    }
}

impl RawResumable {
    fn build(self) -> Result<ResumableBounds, ConfigError> {
        let keep = self.keep_after_end_secs.unwrap_or(KEEP_AFTER_END_SECS);
        if !(1..=MAX_KEEP_AFTER_END_SECS).contains(&keep) {
            let field = "mcp.resumable.keep_after_end_secs";
            return Err(invalid(field, format!("must be between 1 and {MAX_KEEP_AFTER_END_SECS}")));
        }
        let b = ResumableBounds {
            bytes_per_key: self.bytes_per_key.unwrap_or(RESUMABLE_BYTES_PER_KEY),
            bytes_per_org: self.bytes_per_organization.unwrap_or(RESUMABLE_BYTES_PER_ORG),
            keep_after_end: Duration::from_secs(keep),
        };
        at_least_one_and_nested([
            ("mcp.resumable.bytes_per_key", b.bytes_per_key),
            ("mcp.resumable.bytes_per_organization", b.bytes_per_org),
        ])?;
        Ok(b)
    }
}

/// Each bound at least 1 and at most the next, wider one; a refusal names the field.
fn at_least_one_and_nested<const N: usize>(bounds: [(&str, usize); N]) -> Result<(), ConfigError> {
    if let Some((field, _)) = bounds.iter().find(|(_, value)| *value == 0) {
        return Err(invalid(*field, "must be at least 1"));
    }
    for (i, (field, value)) in bounds.iter().enumerate() {
        if let Some((wider, most)) = bounds.get(i + 1).filter(|(_, most)| value > most) {
            return Err(invalid(*field, format!("must be at most {wider} ({most})")));
        }
    }
    Ok(())
}

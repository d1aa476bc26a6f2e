//! Reloading the configuration file in place: SIGHUP, or `POST /v1/admin/reload` by the
//! operator. All or nothing, and nothing dropped: the new file is read and validated whole (a
//! refusal names the field, as at start), compared with the text the running configuration came
//! from, section by section, and applied only when every changed section can change in place.
//! Connections, MCP sessions and bucket state carry over.
//!
//! In place: `apps` (an app whose entry changed has its upstream connections and lists dropped,
//! so the next call uses the new settings; the gateways that include it tell their open
//! streams), `organizations`, `users`, `api_keys` (declared records are written again, as at
//! start; one removed from the file stays until deleted through the API), `rate_limits` (the
//! policy: tiers, shares, sizes) and `limits`, `alerts`, and of `mcp` the allowed origins, the
//! page size, the list deadline, the apps' health probes (`mcp.app_health`, read at each probe), the bounds of the gateways' guard calls (`mcp.guards`, read at each call), the session caps (new sessions only) and time-outs (every
//! session at its next check), `jwt` and `gateway_oauth` (the new verifier takes over at
//! once, its JWKS fetched first), `web` but its `path` (read at each sign-in, authorization
//! and SAML request; the client documents kept are forgotten, so the new allowed hosts and CA
//! judge the next fetch), `smtp` and `sms` (the next message goes through the new transport), of `webhooks` the
//! allowed hosts, time-outs, retry schedule and retention (read at each delivery), and of
//! `observability` the log level (the process log's filter is replaced; `RUST_LOG`, when set,
//! still wins) and the log's and rollups' retention (read at each pruning). The others (the
//! listeners, the store, the pipeline, TLS file names, the bounds of the delivery queues, ...)
//! are read once by the parts they build, so a change there is refused and named:
//! `toolgate --upgrade` applies it without dropping a request.

use crate::config::{Config, ConfigError, ConfigSource};
use crate::data::state::State;
use crate::data::store::StoreError;
use crate::edge::tls::EdgeTls;
use crate::mcp::runtime::McpRuntime;
use crate::server::Server;
use async_trait::async_trait;
use serde_yaml::{Mapping, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use toolgate_filters::origin::OriginCheck;
use toolgate_filters::rate_limit::{RateLimit, RateLimiter};

/// Top-level sections a reload applies in place.
const IN_PLACE: &[&str] = &[
    "apps",
    "organizations",
    "users",
    "api_keys",
    "rate_limits",
    "limits",
    "alerts",
    "mcp",
    "jwt",
    "gateway_oauth",
    "smtp",
    "sms",
    "web",
];

/// Sections of which only these fields change in place (the parts built from the others read
/// them once).
const FIELDS_IN_PLACE: &[(&str, &[&str])] = &[
    ("observability", &["log_level", "log_retention_days", "max_log_rows", "rollup_retention_days"]),
    (
        "webhooks",
        &[
            "allowed_hosts",
            "attempt_timeout_ms",
            "retry_schedule_secs",
            "delivery_retention_days",
            "disable_after_secs",
        ],
    ),
];

/// Fields of in-place sections that the parts built at start read once.
const READ_AT_START: &[(&str, &str)] = &[
    ("rate_limits", "distributed"),
    ("rate_limits", "sync_ms"),
    ("alerts", "limit_warning_percent"),
    ("mcp", "max_stdio_processes"),
    ("web", "path"),
];

#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The file does not read or validate; names the field.
    #[error(transparent)]
    Invalid(#[from] ConfigError),
    /// Settings changed that only a new process applies.
    #[error("{} changed: these settings are read once at start; apply them with `toolgate --upgrade` (nothing was reloaded)", .0.join(", "))]
    NeedsUpgrade(Vec<String>),
    /// The declared records could not be written; the new configuration is in place.
    #[error("the new configuration is in place, but its declared records could not be saved: {0}")]
    Store(#[from] StoreError),
}

/// What a reload did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reloaded {
    /// The sections that changed (and were applied), in file order; empty when none did.
    pub changed: Vec<String>,
}

/// What a reload replaces or tells: the parts that read the configuration at use, not once.
pub struct Reloadable<'a> {
    pub state: &'a State,
    pub limiter: &'a RateLimit<dyn RateLimiter>,
    pub mcp: &'a McpRuntime,
    pub origins: &'a OriginCheck,
    pub courier: &'a crate::outbound::courier::Courier,
    pub identity: &'a crate::identity::IdentityService,
}

impl<'a> Reloadable<'a> {
    pub fn of(server: &'a Server) -> Reloadable<'a> {
        Reloadable {
            state: &server.state,
            limiter: &server.limiter,
            mcp: &server.mcp,
            origins: &server.origin_check,
            courier: &server.courier,
            identity: &server.identity,
        }
    }
}

/// Reloading is defined here, beside what it replaces; the source itself is `config`'s.
impl ConfigSource {
    /// Reads the file again and applies what changed (see the module's comment). One reload at
    /// a time; a refused one leaves everything as it was.
    pub async fn reload(&self, parts: &Reloadable<'_>) -> Result<Reloaded, ReloadError> {
        let mut running = self.running_text().await;
        let path = self.path();
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        let config = Config::parse(&text)?;
        let (before, after) = (sections(&running), sections(&text));
        let mut changed: Vec<String> = names(&after).chain(names(&before)).collect();
        changed.retain(|k| before.get(k.as_str()) != after.get(k.as_str()));
        let mut seen = std::collections::HashSet::new();
        changed.retain(|k| seen.insert(k.clone()));
        let mut refused = Vec::new();
        for section in &changed {
            match FIELDS_IN_PLACE.iter().find(|(name, _)| name == section) {
                Some((_, fields)) => refused.extend(
                    changed_fields(&before, &after, section)
                        .into_iter()
                        .filter(|f| !fields.contains(&f.as_str()))
                        .map(|f| if f.is_empty() { section.clone() } else { format!("{section}.{f}") }),
                ),
                None if !IN_PLACE.contains(&section.as_str()) => refused.push(section.clone()),
                None => {}
            }
        }
        for (section, field) in READ_AT_START {
            if field_of(&before, section, field) != field_of(&after, section, field) {
                refused.push(format!("{section}.{field}"));
            }
        }
        if !refused.is_empty() {
            return Err(ReloadError::NeedsUpgrade(refused));
        }
        let apps_changed = changed_apps(&before, &after);
        // What can still fail is made before anything is replaced.
        let transports = crate::outbound::courier::Courier::prepare(&config)?;
        if let Some(jwt) = &config.jwt {
            crate::outbound::jwks::refresh(jwt).await;
        }
        if let Some(oauth) = &config.gateway_oauth {
            crate::outbound::jwks::refresh(&oauth.verifier).await;
        }
        parts.state.check_declarations(&config)?;
        let config = Arc::new(config);
        parts.state.replace_config(config.clone());
        parts.limiter.set_policy(config.rate_limit_policy.clone());
        parts.origins.set(config.mcp.allowed_origins.clone());
        parts.courier.install(transports);
        if let Err(e) = crate::observe::logging::set_level(&config.observability.log_level) {
            tracing::warn!(error = e, "the new observability.log_level could not be applied; the log keeps its filter");
        }
        parts.mcp.sessions.set_limits(crate::mcp::sessions::SessionLimits::of(&config.mcp));
        // The rules' bounds are read at each compilation (a compiled set under others is
        // compiled again at its next call); their slots take the new size.
        parts.mcp.rule_slots.set_per_org(config.mcp.rules.concurrency_per_organization);
        if changed.iter().any(|s| s == "web") {
            parts.identity.client_documents.forget();
        }
        for app_id in &apps_changed {
            parts.mcp.app_reconfigured(app_id);
        }
        *running = text;
        drop(running);
        tracing::info!(path = %path.display(), changed = ?changed, apps = ?apps_changed, "configuration reloaded");
        parts.state.apply_declarations().await?;
        Ok(Reloaded { changed })
    }
}

/// The file's top-level sections, in file order (`serde_yaml`'s mapping keeps it; a file that
/// is not a mapping has none: it was validated before this is asked).
fn sections(text: &str) -> Mapping {
    match serde_yaml::from_str::<Value>(text) {
        Ok(Value::Mapping(m)) => m,
        _ => Mapping::new(),
    }
}

fn names(sections: &Mapping) -> impl Iterator<Item = String> + '_ {
    sections.keys().filter_map(|k| k.as_str().map(str::to_string))
}

/// The fields of `section` whose values differ; `""` when the section is not a mapping in
/// both (then the whole section changed).
fn changed_fields(before: &Mapping, after: &Mapping, section: &str) -> Vec<String> {
    let empty = Mapping::new();
    let as_map = |m: &Mapping| match m.get(section) {
        None | Some(Value::Null) => Some(empty.clone()),
        Some(Value::Mapping(fields)) => Some(fields.clone()),
        Some(_) => None,
    };
    let (Some(b), Some(a)) = (as_map(before), as_map(after)) else { return vec![String::new()] };
    let mut fields: Vec<String> = names(&a).chain(names(&b)).collect();
    fields.retain(|f| b.get(f.as_str()) != a.get(f.as_str()));
    let mut seen = std::collections::HashSet::new();
    fields.retain(|f| seen.insert(f.clone()));
    fields
}

fn field_of<'a>(sections: &'a Mapping, section: &str, field: &str) -> Option<&'a Value> {
    sections.get(section).and_then(|s| s.get(field))
}

/// Ids of the apps whose entry changed, was added or was removed.
fn changed_apps(before: &Mapping, after: &Mapping) -> Vec<String> {
    let by_id = |s: &Mapping| -> BTreeMap<String, Value> {
        let mut out = BTreeMap::new();
        if let Some(Value::Sequence(apps)) = s.get("apps") {
            for a in apps {
                if let Some(id) = a.get("id").and_then(Value::as_str) {
                    out.insert(id.to_string(), a.clone());
                }
            }
        }
        out
    };
    let (b, a) = (by_id(before), by_id(after));
    let mut ids: Vec<String> = b.keys().chain(a.keys()).filter(|id| b.get(*id) != a.get(*id)).cloned().collect();
    ids.sort();
    ids.dedup();
    ids
}

/// SIGHUP, for every process: reloads the configuration file (see the module's comment) and
/// the TLS certificates (when TLS is on; their files are also checked every `reload_check`).
/// Without this a SIGHUP would end the process.
pub(crate) struct Reloader {
    pub server: Arc<Server>,
    pub tls: Option<Arc<EdgeTls>>,
}

#[async_trait]
impl pingora::services::background::BackgroundService for Reloader {
    async fn start(&self, mut shutdown: pingora::server::ShutdownWatch) {
        let mut hangup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGHUP; certificates reload on file changes only");
                None
            }
        };
        let period = self.tls.as_ref().and_then(|tls| tls.reload_check());
        loop {
            let tick = async {
                match period {
                    Some(p) => tokio::time::sleep(p).await,
                    None => std::future::pending().await,
                }
            };
            let signalled = async {
                match hangup.as_mut() {
                    Some(h) => h.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = tick => {
                    if let Some(tls) = &self.tls {
                        tls.reload(false);
                    }
                }
                _ = signalled => {
                    let source = &self.server.config_source;
                    tracing::info!(path = %source.path().display(), "SIGHUP: reloading the configuration");
                    match source.reload(&Reloadable::of(&self.server)).await {
                        Ok(r) if r.changed.is_empty() => tracing::info!("SIGHUP: the configuration file is unchanged"),
                        Ok(_) => {}
                        Err(e) => tracing::error!(error = %e, "SIGHUP: configuration not reloaded; the running one stays"),
                    }
                    if let Some(tls) = &self.tls {
                        tls.reload(true);
                    }
                }
                _ = shutdown.changed() => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_and_apps_that_changed_are_found() {
        let before = sections("server:\n  listen: 1\napps:\n  - {id: a, url: x}\n  - {id: b, url: y}\n");
        let after =
            sections("apps:\n  - {id: a, url: x}\n  - {id: b, url: z}\n  - {id: c, url: w}\nserver:\n  listen: 1\n");
        assert_eq!(before.get("server"), after.get("server"), "order of sections does not matter");
        assert_eq!(changed_apps(&before, &after), vec!["b".to_string(), "c".to_string()]);
        let removed = sections("apps:\n  - {id: b, url: y}\n");
        assert_eq!(changed_apps(&before, &removed), vec!["a".to_string()]);
        assert_eq!(
            field_of(&sections("rate_limits:\n  sync_ms: 5\n"), "rate_limits", "sync_ms"),
            Some(&Value::from(5))
        );
    }
}

//! The records toolgate keeps, as stored (JSON in the store) and cached in memory.
//! API views are built from these in `api`; secrets (key hashes, app credentials) never leave
//! through a view.
//!
//! The records that hold guard settings (a gateway with its configuration and rules, an API
//! key) carry a schema version and take no member they do not know: during a rolling upgrade an
//! instance that meets a record written by a newer toolgate ([`read_versioned`]) must not serve
//! it as if the newer setting were absent, nor write it back without it (docs/operations.md,
//! "Rolling upgrades").

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

mod callout;
pub use callout::*;

pub(crate) type Timestamp = DateTime<Utc>;

/// The schema version of the versioned records this build writes, and the newest it reads. A
/// record stored before versions existed has none and reads as this one (1). A change that
/// adds a guard setting bumps it (docs/operations.md says how).
pub const SCHEMA_VERSION: u32 = 1;

fn current_schema() -> u32 {
    SCHEMA_VERSION
}

/// A stored record this build cannot read as it was meant: written by a newer toolgate (a
/// higher `schema_version`, or at this one a member or value this build does not know: a newer
/// build that forgot to bump it is treated the same). It is neither served nor written back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct NewerRecord {
    pub id: String,
    pub org_id: String,
    /// The version it says it is (this build's when it says none).
    pub schema_version: u32,
    /// What this build does not know of it.
    pub reason: String,
}

impl NewerRecord {
    /// The refusal's sentence, for `what` (`gateway`, `key`).
    pub(crate) fn refusal(&self, what: &str) -> String {
        format!(
            "{what} {} was written by a newer toolgate ({}); this instance reads schema version {SCHEMA_VERSION} \
             and neither serves nor changes it: retry on an upgraded instance",
            self.id, self.reason
        )
    }
}

/// A versioned record as read: understood, or newer than this build.
#[derive(Debug)]
pub(crate) enum Versioned<T> {
    Known(T),
    Newer(NewerRecord),
}

/// Reads a versioned record (`T` takes no unknown member). `Err` only for a body that is not
/// such a record at all (corrupt).
pub(crate) fn read_versioned<T: DeserializeOwned>(body: &str) -> Result<Versioned<T>, serde_json::Error> {
    #[derive(Deserialize)]
    struct Probe {
        #[serde(default)]
        id: String,
        #[serde(default)]
        org_id: String,
        #[serde(default = "current_schema")]
        schema_version: u32,
    }
    let probe: Probe = serde_json::from_str(body)?;
    let newer = |reason: String| {
        let Probe { id, org_id, schema_version } = probe;
        Versioned::Newer(NewerRecord { id, org_id, schema_version, reason })
    };
    if probe.schema_version > SCHEMA_VERSION {
        return Ok(newer(format!("schema version {}", probe.schema_version)));
    }
    match serde_json::from_str::<T>(body) {
        Ok(record) => Ok(Versioned::Known(record)),
        Err(e) if unknown_to_this_build(&e) => Ok(newer(e.to_string())),
        Err(e) => Err(e),
    }
}

/// serde's words for a member, a variant or a form of a value this build does not have.
fn unknown_to_this_build(e: &serde_json::Error) -> bool {
    let m = e.to_string();
    m.starts_with("unknown field") || m.starts_with("unknown variant") || m.contains("did not match any variant")
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Organization {
    pub id: String,
    pub name: String,
    pub tier: String,
    pub created_at: Timestamp,
    /// CIDRs of `PATCH /account/security`.
    #[serde(default)]
    pub ip_whitelist: Vec<String>,
    #[serde(default)]
    pub enforce_ip_whitelist: bool,
    /// Enterprise `allowed_ips`.
    #[serde(default)]
    pub allowed_ips: Vec<String>,
    /// Entries of `POST /account/whitelist`: allowed addresses with a rate-limit multiplier.
    #[serde(default)]
    pub whitelist: Vec<WhitelistEntry>,
    /// Declared in YAML (re-applied at every start).
    #[serde(default)]
    pub declared: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WhitelistEntry {
    pub id: String,
    pub ip: String,
    pub rate_limit_multiplier: f64,
    #[serde(default)]
    pub description: String,
    pub created_at: Timestamp,
}

impl Organization {
    /// The organisation's IP policy in the filter's terms.
    pub(crate) fn ip_policy_config(&self) -> toolgate_filters::ip_allowlist::IpPolicyConfig {
        use toolgate_filters::ip_allowlist::{IpEntryConfig, IpPolicyConfig};
        IpPolicyConfig {
            ip_whitelist: self.ip_whitelist.clone(),
            enforce_ip_whitelist: self.enforce_ip_whitelist,
            allowed_ips: self.allowed_ips.clone(),
            whitelist: self
                .whitelist
                .iter()
                .map(|e| IpEntryConfig {
                    ip: e.ip.clone(),
                    rate_limit_multiplier: e.rate_limit_multiplier,
                    description: Some(e.description.clone()),
                })
                .collect(),
        }
    }
}

/// A service account: a non-human owner of keys, with its own scopes and rate-limit multiplier.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServiceAccount {
    pub id: String,
    pub org_id: String,
    pub name: String,
    pub description: String,
    pub scopes: Vec<String>,
    pub rate_limit_multiplier: f64,
    /// The user who made it; its keys act within that user's role.
    pub created_by: String,
    pub created_at: Timestamp,
}

/// An organisation's outbound webhook (spec "Webhook"): where events are delivered, signed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Webhook {
    pub id: String,
    pub org_id: String,
    pub url: String,
    /// Event names (`gateway.created`, ...) or `*`.
    pub events: Vec<String>,
    /// The signing secret (`whsec_` + base64), sealed like app credentials; shown once.
    pub sealed_secret: String,
    pub enabled: bool,
    /// Why toolgate disabled it (the endpoint answered 410, or failed too long), if it did.
    #[serde(default)]
    pub disabled_reason: Option<String>,
    /// Since when its attempts have failed without a success in between.
    #[serde(default)]
    pub failing_since: Option<Timestamp>,
    /// The secret before the last rotation, sealed, which keeps signing beside the new one
    /// until `previous_secret_until`.
    #[serde(default)]
    pub sealed_previous_secret: Option<String>,
    #[serde(default)]
    pub previous_secret_until: Option<Timestamp>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// Events a webhook takes only when it names them, not with `*`: `audit.checkpoint` is a stream
/// for archives (one per organisation and checkpoint interval), not news for every receiver.
pub(crate) const NAMED_ONLY_EVENTS: [&str; 1] = ["audit.checkpoint"];

impl Webhook {
    /// Whether it takes deliveries of `event`.
    pub fn wants(&self, event: &str) -> bool {
        self.enabled && self.events.iter().any(|e| e == event || (e == "*" && !NAMED_ONLY_EVENTS.contains(&event)))
    }
}

/// One event's delivery to one webhook: the outbox entry, durable from the moment the event is
/// recorded until it is delivered or given up, and the record `GET /webhooks/{id}/deliveries`
/// lists. Its `id` is the `webhook-id` every attempt carries.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Delivery {
    pub id: String,
    pub org_id: String,
    /// The webhook it goes to; empty for an alert's notification.
    pub webhook_id: String,
    /// For an alert's notification: the alert, and the channel (`slack` or `email`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    pub event: String,
    pub timestamp: Timestamp,
    pub data: serde_json::Value,
    /// `pending`, `delivered`, `failed` (given up) or `disabled` (the endpoint answered 410).
    pub status: String,
    pub attempts: u32,
    pub next_attempt_at: Option<Timestamp>,
    pub last_status_code: Option<u16>,
    pub last_error: Option<String>,
    /// Of the last attempt, in milliseconds.
    pub latency_ms: Option<u64>,
    pub created_at: Timestamp,
    pub delivered_at: Option<Timestamp>,
}

impl Delivery {
    /// A new delivery `id` of `event` to webhook `webhook_id` (empty for an alert's
    /// notification), due now.
    pub fn pending(id: String, org_id: &str, webhook_id: &str, event: &str, data: serde_json::Value) -> Delivery {
        let now = chrono::Utc::now();
        Delivery {
            id,
            org_id: org_id.to_string(),
            webhook_id: webhook_id.to_string(),
            alert_id: None,
            channel: None,
            event: event.to_string(),
            timestamp: now,
            data,
            status: "pending".into(),
            attempts: 0,
            next_attempt_at: Some(now),
            last_status_code: None,
            last_error: None,
            latency_ms: None,
            created_at: now,
            delivered_at: None,
        }
    }
}

/// An organisation's usage alert (`POST /alerts`): when a key of the organisation uses
/// `threshold` percent of a rate limit, one notification per crossing goes to its channels and a
/// `usage.limit_warning` event to the webhooks.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Alert {
    pub id: String,
    pub org_id: String,
    /// `rate_limit` (the only type the spec names).
    pub kind: String,
    /// Percent of a limit, 1-100.
    pub threshold: u8,
    pub email: Option<String>,
    /// The Slack incoming-webhook URL, sealed like credentials (whoever has it can post).
    pub sealed_slack: Option<String>,
    /// The Slack URL's scheme and host, for display.
    pub slack_host: Option<String>,
    pub created_at: Timestamp,
    #[serde(default)]
    pub last_triggered_at: Option<Timestamp>,
}

/// What `GET /api-keys/{id}/usage` reports; kept in memory, written in the background.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub(crate) struct KeyUsage {
    pub last_used: Option<Timestamp>,
    pub last_ip: Option<String>,
    /// Day of `requests_today`, in days since 1970-01-01 (UTC).
    pub day: i64,
    pub requests_today: u64,
    /// Month of `requests_this_month`, as year * 12 + month index (UTC).
    pub month: i32,
    pub requests_this_month: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct NotificationPreferences {
    pub email: bool,
    pub slack: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct User {
    pub id: String,
    pub org_id: String,
    pub email: String,
    pub name: String,
    /// `owner`, `admin`, `developer`, `viewer`.
    pub role: String,
    pub created_at: Timestamp,
    #[serde(default)]
    pub notification_preferences: NotificationPreferences,
    #[serde(default)]
    pub declared: bool,
}

/// Versioned ([`read_versioned`]): it holds guard settings (scopes, a gateway, the IP
/// allowlist's bypass).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKey {
    /// [`SCHEMA_VERSION`] when written by this build.
    #[serde(default = "current_schema")]
    pub schema_version: u32,
    pub id: String,
    pub org_id: String,
    pub user_id: String,
    pub name: String,
    /// Lower-case hex SHA-256 of the full key; the key itself is never stored.
    pub hash: String,
    pub scopes: Vec<String>,
    pub created_at: Timestamp,
    pub expires_at: Option<Timestamp>,
    pub revoked_at: Option<Timestamp>,
    #[serde(default)]
    pub bypass_ip_whitelist: bool,
    /// Set for a gateway access key: valid on that gateway's endpoint only.
    #[serde(default)]
    pub gateway_id: Option<String>,
    #[serde(default)]
    pub service_account_id: Option<String>,
    #[serde(default)]
    pub declared: bool,
    /// When a rotation retires the key (the end of its grace period). Kept apart from
    /// `expires_at`, which a YAML declaration sets at every start, so that a rotated declared key
    /// stays retired across restarts.
    #[serde(default)]
    pub retires_at: Option<Timestamp>,
}

impl ApiKey {
    /// When the key stops working by itself: its own expiry or the end of a rotation's grace.
    pub(crate) fn ends_at(&self) -> Option<Timestamp> {
        self.expires_at.into_iter().chain(self.retires_at).min()
    }

    /// Why the key cannot be used at `now`, if it cannot.
    pub(crate) fn unusable(&self, now: Timestamp) -> Option<toolgate_filters::auth::AuthError> {
        use toolgate_filters::auth::AuthError;
        if self.revoked_at.is_some_and(|t| t <= now) {
            return Some(AuthError::Revoked);
        }
        if self.expires_at.is_some_and(|t| t <= now) || self.retires_at.is_some_and(|t| t <= now) {
            return Some(AuthError::Expired);
        }
        None
    }
}

/// `allowed_tools` value for one app: every function, or a list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged, expecting = "\"*\" or a list of function names")]
pub enum AllowedTools {
    /// The string `*`.
    All(String),
    List(Vec<String>),
}

impl AllowedTools {
    pub fn allows(&self, function: &str) -> bool {
        match self {
            AllowedTools::All(_) => true,
            AllowedTools::List(l) => l.iter().any(|f| f == function),
        }
    }
}

/// Part of the versioned gateway record: no member it does not know.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GatewayConfiguration {
    /// Requests per minute to this gateway, all callers together.
    pub rate_limit: u32,
    /// Seconds a gateway's tool list is cached.
    pub cache_ttl: u32,
    pub cache_enabled: bool,
    /// Joins app id and function name when a gateway has several apps (Decision 5).
    #[serde(default = "default_separator")]
    pub tool_name_separator: String,
    /// How MCP clients authenticate at the gateway's endpoint (Decision 17).
    #[serde(default)]
    pub auth: GatewayAuth,
    /// What the catalogue does with hidden text in the apps' definitions (`strip` for a
    /// gateway stored before the setting existed).
    #[serde(default)]
    pub description_policy: DescriptionPolicy,
    /// What the gateway does about its apps' tool definitions (`docs/governance.md`). A gateway
    /// stored before the field existed reads as `off`; one created through the API is `pin`
    /// unless it says otherwise.
    #[serde(default)]
    pub tool_policy: ToolPolicy,
    /// What the gateway does with hidden text in what its apps send that a model reads (results,
    /// errors, resources, prompts: `docs/governance.md`); `strip` for a gateway stored before.
    #[serde(default)]
    pub content_policy: ContentPolicy,
    /// Secrets redacted from what the apps send (`docs/governance.md`); none unless asked.
    #[serde(default, skip_serializing_if = "Redact::is_off")]
    pub redact: Redact,
    /// The largest result, in bytes of JSON, a call of any tool may answer; larger is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_result_bytes: Option<u64>,
    /// The same bound for named tools (by their name at the gateway), over `max_result_bytes`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub max_result_bytes_by_tool: BTreeMap<String, u64>,
    /// How a call past one of `tool_limits` is answered: `result` (default) or `error`.
    #[serde(default, skip_serializing_if = "ToolLimitAnswer::is_result")]
    pub tool_limit_answer: ToolLimitAnswer,
    /// How clients find the tools (`docs/mcp.md`, "Search instead of a thousand tools").
    /// Written only when `search`, so a gateway that lists all is the record an older build reads.
    #[serde(default, skip_serializing_if = "Discovery::is_all")]
    pub discovery: Discovery,
}

/// What a gateway's `tools/list` shows (`configuration.discovery`).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Discovery {
    /// Every tool the caller may call.
    #[default]
    All,
    /// `search_tools` and the tools found (`call_tool` without a session).
    Search,
}

impl Discovery {
    pub(crate) fn is_all(&self) -> bool {
        *self == Discovery::All
    }
}

/// What a gateway does with hidden text in what its apps send that a model reads
/// (`configuration.content_policy`).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ContentPolicy {
    /// Hidden text is removed from the text the model reads; in an identifier it blocks.
    #[default]
    Strip,
    /// The answer is replaced by an error naming the class and where it was found.
    Block,
    /// Reported (counted and logged), passed unchanged.
    Log,
    /// Not looked at.
    Off,
}

/// A gateway's secrets redaction (`configuration.redact`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Redact {
    /// The detector sets: `secrets` (the built-in detectors).
    #[serde(default)]
    pub detectors: Vec<String>,
    /// `redact` (default) replaces each match with `[redacted:<kind>]`; `log` reports only.
    #[serde(default)]
    pub mode: RedactMode,
    /// Tools (by their name at the gateway) whose answers are not redacted: a secrets manager's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exempt_tools: Vec<String>,
}

impl Redact {
    pub(crate) fn is_off(&self) -> bool {
        self.detectors.is_empty()
    }
}

/// Whether redaction replaces or only reports (`configuration.redact.mode`).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RedactMode {
    #[default]
    Redact,
    Log,
}

/// What a gateway does with a tool, prompt or resource whose description, title or schema
/// carries hidden text: invisible or control characters (docs/governance.md).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DescriptionPolicy {
    /// The hidden text is removed and the definition listed clean.
    #[default]
    Strip,
    /// The definition is withheld: not listed, and a call of it is refused naming the finding.
    Block,
}

/// A gateway's rule for its apps' tool definitions (`configuration.tool_policy`).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolPolicy {
    /// Every tool an app lists is served as it comes.
    #[default]
    Off,
    /// Trust on first use: the definitions an app lists the first time it is listed for the
    /// gateway are pinned; a later changed or added tool is pending until approved.
    Pin,
    /// Nothing is approved at first: every tool is pending until approved.
    Approve,
}

/// One app tool of one gateway under a `tool_policy` (one record per gateway, app and upstream
/// tool name): the definition approved, the one waiting for a decision, and the last one
/// rejected. A tool is served only while the app lists the approved definition.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ToolPin {
    /// `tpn_` and a hash of (gateway, app, tool): the same on every instance.
    pub id: String,
    pub org_id: String,
    pub gateway_id: String,
    pub app_id: String,
    /// The tool's name as the app lists it.
    pub tool: String,
    #[serde(default)]
    pub approved: Option<PinnedDefinition>,
    #[serde(default)]
    pub pending: Option<PendingDefinition>,
    /// The hash of the last definition rejected: while the app lists it, it stays hidden and no
    /// new change is raised for it.
    #[serde(default)]
    pub rejected: Option<String>,
}

/// A definition as the app sent it, with its canonical hash (`data::tool_pins`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PinnedDefinition {
    pub hash: String,
    pub definition: serde_json::Value,
    pub at: Timestamp,
}

/// A definition waiting for an admin's decision.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PendingDefinition {
    /// `tch_` and a hash of (pin, definition hash): what approve and reject name.
    pub id: String,
    pub hash: String,
    pub definition: serde_json::Value,
    pub reason: PendingReason,
    pub detected_at: Timestamp,
}

/// Why a definition waits for a decision.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PendingReason {
    /// The app lists another definition than the approved one.
    Changed,
    /// The app lists a tool that has no approved definition.
    Added,
    /// The definition carries text a reader does not see, under `description_policy: block`:
    /// each finding in words, and the classes found (`tag`, `bidi`, ...), each once.
    HiddenText {
        findings: Vec<String>,
        #[serde(default)]
        classes: Vec<String>,
    },
}

impl PendingReason {
    pub fn kind(&self) -> &'static str {
        match self {
            PendingReason::Changed => "changed",
            PendingReason::Added => "added",
            PendingReason::HiddenText { .. } => "hidden_text",
        }
    }
}

/// The credentials a gateway's MCP endpoint accepts.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum GatewayAuth {
    /// `X-API-Key` only: the specification's rule.
    #[default]
    ApiKey,
    /// `X-API-Key`, and `Authorization: Bearer` access tokens of the `gateway_oauth` issuer
    /// for this gateway's resource (RFC 8707); a 401 points at its protected-resource metadata.
    Oauth,
}

pub(crate) fn default_separator() -> String {
    "__".to_string()
}

impl Default for GatewayConfiguration {
    fn default() -> Self {
        GatewayConfiguration {
            rate_limit: 1000,
            cache_ttl: 300,
            cache_enabled: true,
            tool_name_separator: default_separator(),
            auth: GatewayAuth::ApiKey,
            description_policy: DescriptionPolicy::Strip,
            tool_policy: ToolPolicy::Off,
            content_policy: ContentPolicy::Strip,
            redact: Redact::default(),
            max_result_bytes: None,
            max_result_bytes_by_tool: BTreeMap::new(),
            discovery: Discovery::All,
            tool_limit_answer: ToolLimitAnswer::Result,
        }
    }
}

/// Versioned ([`read_versioned`]): its configuration and rules are guards.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gateway {
    /// [`SCHEMA_VERSION`] when written by this build.
    #[serde(default = "current_schema")]
    pub schema_version: u32,
    pub id: String,
    pub org_id: String,
    pub name: String,
    pub description: String,
    pub servers: Vec<String>,
    pub allowed_tools: BTreeMap<String, AllowedTools>,
    pub configuration: GatewayConfiguration,
    /// Per-tool rules, in order: the first whose `when` holds decides a call (none: allowed).
    #[serde(default)]
    pub rules: Vec<Rule>,
    /// How tools are shown and called (`docs/governance.md`, "Shaped tools"). Written only when
    /// there are some, so a gateway without them is the record an older build reads; one with
    /// them is a member an older build does not know, so it holds the gateway apart rather than
    /// serve the tools unshaped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_overrides: Vec<ToolOverride>,
    /// External guards asked about its tool calls (`docs/governance.md`, "External guards");
    /// written only when there are some, as `tool_overrides`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub guards: Vec<Callout>,
    /// Per-tool quotas (`docs/mcp.md`, "Per-tool limits"); written only when there are some,
    /// for the same reason as `tool_overrides`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_limits: Vec<ToolLimit>,
    pub status: String,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// The id of the gateway access key made at creation.
    pub access_key_id: String,
}

/// One tool of a gateway as its clients see and call it: renamed, its text replaced, some of
/// its arguments fixed, defaulted or hidden (`src/mcp/shaped.rs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolOverride {
    /// The tool as the gateway exposes it without the override (`everything__echo`).
    pub tool: String,
    /// The name clients see and call instead (1-64 characters of `A-Z a-z 0-9 _ . -`); the old
    /// name is then unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Arguments always sent with these values; gone from the input schema, refused if sent.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    #[schema(value_type = Object)]
    pub fixed_arguments: serde_json::Map<String, serde_json::Value>,
    /// Arguments put in with these values when a call leaves them out.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    #[schema(value_type = Object)]
    pub default_arguments: serde_json::Map<String, serde_json::Value>,
    /// Arguments gone from the input schema and refused if sent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hidden_arguments: Vec<String>,
}

/// A quota on the calls of the tools a glob matches (`src/mcp/tool_limits.rs`): every call of
/// any of them counts in one bucket per `per`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolLimit {
    /// A glob over the names the gateway exposes (an override's alias, not the app's name):
    /// `*` any run of characters, `?` one.
    pub tool: String,
    /// Whose calls count together.
    pub per: LimitPer,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_minute: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_hour: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_day: Option<u32>,
    /// Calls in flight at once, per instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrent: Option<u32>,
}

/// Whose calls a [`ToolLimit`] counts together, widest last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LimitPer {
    /// The credential (API key, token) that calls.
    Caller,
    /// The user the credential belongs to, whichever of their keys calls.
    User,
    /// Everyone of the caller's organisation.
    Organization,
    /// Every caller of the gateway together.
    Gateway,
}

impl LimitPer {
    pub fn as_str(self) -> &'static str {
        match self {
            LimitPer::Caller => "caller",
            LimitPer::User => "user",
            LimitPer::Organization => "organization",
            LimitPer::Gateway => "gateway",
        }
    }
}

/// How a call past a tool limit is answered (`configuration.tool_limit_answer`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolLimitAnswer {
    /// A tool result with `isError`, which clients hand to the model (it reads the wait).
    #[default]
    Result,
    /// A JSON-RPC error -32010 (`LimitExceeded`), which SDK clients throw.
    Error,
}

impl ToolLimitAnswer {
    pub fn is_result(&self) -> bool {
        *self == ToolLimitAnswer::Result
    }
}

/// What a rule does to the calls it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RuleEffect {
    Allow,
    Deny,
}

/// A method a rule decides. Rules decide `tools/call` unless they name others, so a rule saved
/// before rules could name methods keeps its meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
pub enum RuleMethod {
    #[serde(rename = "tools/call")]
    ToolsCall,
    #[serde(rename = "prompts/get")]
    PromptsGet,
    #[serde(rename = "resources/read")]
    ResourcesRead,
}

impl RuleMethod {
    /// The JSON-RPC method's name.
    pub fn as_str(self) -> &'static str {
        match self {
            RuleMethod::ToolsCall => "tools/call",
            RuleMethod::PromptsGet => "prompts/get",
            RuleMethod::ResourcesRead => "resources/read",
        }
    }
}

/// One of a gateway's per-tool rules: a CEL expression over the call (`src/mcp/rules.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Unique within the gateway; named by a denied call's error.
    #[schema(min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9_.-]+$")]
    pub name: String,
    pub effect: RuleEffect,
    /// A CEL expression that gives a boolean.
    #[schema(min_length = 1, max_length = 2048)]
    pub when: String,
    /// The methods the rule decides; absent: `tools/call` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_items = 1)]
    pub methods: Option<Vec<RuleMethod>>,
}

#[cfg(test)]
impl Gateway {
    /// A gateway of organisation `org_id` with nothing configured, for unit tests that need one
    /// to point at (request-log entries, store rows).
    pub(crate) fn for_tests(id: &str, org_id: &str) -> Gateway {
        let now = chrono::Utc::now();
        Gateway {
            schema_version: SCHEMA_VERSION,
            id: id.into(),
            org_id: org_id.into(),
            name: "test".into(),
            description: String::new(),
            servers: Vec::new(),
            allowed_tools: BTreeMap::new(),
            configuration: GatewayConfiguration::default(),
            rules: Vec::new(),
            tool_overrides: Vec::new(),
            guards: Vec::new(),
            tool_limits: Vec::new(),
            status: "active".into(),
            created_at: now,
            updated_at: now,
            access_key_id: "key_test".into(),
        }
    }
}

/// An organisation's connection to an app, or, for an app connected by each user
/// (`connection_scope: user`), one member's or service account's own.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Connection {
    pub id: String,
    pub org_id: String,
    pub app_id: String,
    /// The member (`usr_...`) or service account (`sa_...`) whose own connection this is;
    /// none for the organisation's (and in every record stored before per-user connections).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// `api_key` or `oauth`.
    pub auth_type: String,
    /// `connected`, or `pending` while an OAuth authorisation is outstanding.
    pub status: String,
    /// AES-256-GCM sealed credentials (nonce + ciphertext, base64); never returned.
    pub sealed_credentials: Option<String>,
    pub redirect_uri: Option<String>,
    pub oauth_state: Option<String>,
    pub created_at: Timestamp,
}

/// What a client declared at `initialize` that it can do for a server: which server->client
/// requests the gateway may relay to it (the others it refuses to the app on the client's
/// behalf, so that no app waits for an answer that cannot come).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientCapabilities {
    #[serde(default)]
    pub sampling: bool,
    #[serde(default)]
    pub elicitation: bool,
    /// URL-mode elicitation (`elicitation.url`, 2025-11-25): the client can send its user to a
    /// page, as toolgate does when a per-user app is not connected yet (-32042).
    #[serde(default)]
    pub elicitation_url: bool,
}

/// An MCP protocol session of a gateway.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct McpSession {
    pub id: String,
    pub org_id: String,
    pub gateway_id: String,
    /// The key the session is bound to: another credential cannot use it.
    pub key_id: String,
    pub protocol_version: String,
    pub client_type: String,
    pub client_version: String,
    pub client_ip: String,
    pub started_at: Timestamp,
    pub last_activity: Timestamp,
    pub requests_count: u64,
    /// `active` or `ended`.
    pub status: String,
    /// Absent in sessions stored before it existed: nothing declared.
    #[serde(default)]
    pub capabilities: ClientCapabilities,
}

/// A client of toolgate's OAuth authorization server (`/v1/oauth/clients`, `oauth_server`): a
/// third-party application that users of the organisation may let act for them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OAuthClient {
    /// The `client_id` (`tgc_...`).
    pub id: String,
    /// Empty for a client that registered itself (RFC 7591): it belongs to no organisation and
    /// may ask only for a gateway's endpoint, of whichever organisation the user is in.
    pub org_id: String,
    pub name: String,
    /// Compared exactly with an authorization request's `redirect_uri`.
    pub redirect_uris: Vec<String>,
    /// The most a user may grant it.
    pub scopes: Vec<String>,
    /// A public client (no secret; PKCE required), such as a native or browser application.
    pub public: bool,
    /// SHA-256 (hex) of the client secret, shown once; `None` for a public client.
    pub secret_hash: Option<String>,
    pub created_by: String,
    pub created_at: Timestamp,
}

/// What a user granted a client: one family of tokens, from one authorization code. Its tokens
/// are `tga_<grant id>.<secret>` (access) and `tgr_<grant id>.<secret>` (refresh); only their
/// SHA-256 is kept. A refresh rotates both; presenting a refresh token that was rotated out
/// revokes the grant (reuse detection), as does a second use of its authorization code.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OAuthGrant {
    /// `grt_...`
    pub id: String,
    pub org_id: String,
    pub user_id: String,
    pub client_id: String,
    /// Granted scope names: within the client's and, at each use, the user's role.
    pub scopes: Vec<String>,
    pub created_at: Timestamp,
    pub access_hash: String,
    pub access_expires_ms: i64,
    pub refresh_hash: String,
    pub refresh_expires_ms: i64,
    /// Refresh tokens rotated out (SHA-256 hex), newest last, for reuse detection.
    #[serde(default)]
    pub used_refresh: Vec<String>,
    /// A gateway's endpoint (RFC 8707) when the grant is for that gateway alone: its tokens are
    /// taken there and nowhere else (not by the management API).
    #[serde(default)]
    pub resource: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gateway_json(edit: impl FnOnce(&mut serde_json::Value)) -> String {
        let mut v = serde_json::to_value(Gateway::for_tests("gw_1", "org_1")).unwrap();
        edit(&mut v);
        v.to_string()
    }

    fn newer(body: &str) -> NewerRecord {
        match read_versioned::<Gateway>(body).unwrap() {
            Versioned::Newer(n) => n,
            Versioned::Known(g) => panic!("read as known: {g:?}"),
        }
    }

    #[test]
    fn a_record_is_known_up_to_this_version_and_newer_past_it_or_with_what_this_build_lacks() {
        let ok = |body: &str| matches!(read_versioned::<Gateway>(body), Ok(Versioned::Known(_)));
        assert!(ok(&gateway_json(|_| {})), "this build's own");
        let unversioned = gateway_json(|v| drop(v.as_object_mut().unwrap().remove("schema_version")));
        match read_versioned::<Gateway>(&unversioned).unwrap() {
            Versioned::Known(g) => assert_eq!(g.schema_version, SCHEMA_VERSION, "read as today"),
            Versioned::Newer(n) => panic!("{n:?}"),
        }
        let n = newer(&gateway_json(|v| v["schema_version"] = 2.into()));
        assert_eq!((n.id.as_str(), n.org_id.as_str(), n.schema_version), ("gw_1", "org_1", 2));
        assert_eq!(n.reason, "schema version 2");
        assert!(n.refusal("gateway").starts_with("gateway gw_1 was written by a newer toolgate (schema version 2)"));
        // At this version, a member or a value this build does not know: a newer build that
        // did not bump the version.
        let n = newer(&gateway_json(|v| v["configuration"]["new_guard"] = true.into()));
        assert!(n.reason.contains("unknown field `new_guard`"), "{}", n.reason);
        assert!(newer(&gateway_json(|v| v["rate_guard"] = 1.into())).reason.contains("`rate_guard`"));
        assert!(newer(&gateway_json(|v| v["configuration"]["tool_policy"] = "strict".into()))
            .reason
            .contains("variant"));
        let rules = serde_json::json!([{"name": "r", "effect": "quarantine", "when": "true"}]);
        assert!(newer(&gateway_json(|v| v["rules"] = rules)).reason.contains("variant"));
        // Not a record at all: corrupt, as before.
        assert!(read_versioned::<Gateway>("[1, 2]").is_err());
        assert!(read_versioned::<Gateway>(&gateway_json(|v| v["servers"] = 7.into())).is_err());
    }
}

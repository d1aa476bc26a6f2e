//! Configuration: the YAML file as written (`raw`), and the validated runtime configuration the
//! server runs on. A bad file never starts a half-working server: loading fails with the path of
//! the offending field.

mod raw;
pub use raw::app_connections::{ListAs, PerUserConnections};
mod source;
mod warnings;

pub use raw::RawConfig;
pub(crate) use source::ConfigSource;
pub use warnings::warnings;

use ipnet::IpNet;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toolgate_filters::{Role, ScopeSet};

/// `mcp.max_stdio_processes` when the YAML says nothing: how many stdio app processes may run at
/// once (the one default, also of the upstreams built without a configuration in tests).
pub(crate) const DEFAULT_MAX_STDIO_PROCESSES: usize = 16;

/// A configuration error, naming the field (`server.listen`, `apps[2].url`, ...).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { field: field.into(), message: message.into() }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Environment {
    Production,
    Development,
}

impl Environment {
    pub fn as_str(self) -> &'static str {
        match self {
            Environment::Production => "production",
            Environment::Development => "development",
        }
    }

    /// Whether URLs toolgate calls out to (webhooks, discovered OAuth endpoints) may be plain
    /// http: in development only.
    pub(crate) fn allows_http(self) -> bool {
        self == Environment::Development
    }
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub environment: Environment,
    pub server: ServerConfig,
    pub storage: StorageConfig,
    /// Shared, so that a reader keeps its app's settings while a reload replaces the list.
    pub apps: Vec<std::sync::Arc<AppConfig>>,
    pub organizations: Vec<OrgConfig>,
    pub users: Vec<UserConfig>,
    pub api_keys: Vec<KeyConfig>,
    /// Tiers, buckets and their sizes (Decisions 1-3), validated into a policy at load.
    pub rate_limits: toolgate_filters::rate_limit::RateLimitConfig,
    pub rate_limit_policy: std::sync::Arc<toolgate_filters::rate_limit::RateLimitPolicy>,
    pub limits: LimitsConfig,
    pub mcp: McpConfig,
    pub observability: ObservabilityConfig,
    pub webhooks: WebhooksConfig,
    pub alerts: AlertsConfig,
    pub audit: AuditConfig,
    /// Where e-mail (alerts' notifications) leaves; `None`: alerts may not name an e-mail.
    pub smtp: Option<SmtpConfig>,
    /// `sms:`: the HTTP API text messages (MFA codes) are handed to.
    pub sms: Option<SmsConfig>,
    /// JWT bearer tokens on the management API (the verifier, holding its [`JwtConfig`] and the
    /// keys read while validating); `None` refuses every non-key bearer value.
    pub jwt: Option<std::sync::Arc<crate::base::jwt::JwtVerifier>>,
    /// OAuth for MCP clients on the gateways that opt in; `None`: no gateway may.
    pub gateway_oauth: Option<GatewayOAuthConfig>,
    pub web: WebConfig,
}

/// Web sign-in (`src/identity/signin/`): where its pages are, and the web sessions' bounds.
#[derive(Debug, Clone)]
pub struct WebConfig {
    /// The identity service's path prefix on the main listener (`{auth_url}`, default `/auth`);
    /// read once at start.
    pub path: String,
    /// A web session ends after this long without use (24 hours).
    pub session_idle: Duration,
    /// Web sessions a user may hold at once; a new one ends the oldest.
    pub max_sessions_per_user: usize,
    /// How long an authorization code may wait for its exchange (60 s).
    pub authorization_code_lifetime: Duration,
    /// How long an access token of toolgate's authorization server lives (an hour).
    pub access_token_lifetime: Duration,
    /// How long a refresh token lives unused (30 days); each use rotates it.
    pub refresh_token_lifetime: Duration,
    /// Whether clients may register themselves (RFC 7591) to sign in to gateways (off).
    pub dynamic_registration: bool,
    /// A self-registered client not used (authorized or given tokens) for this long is deleted
    /// (`web.registration_unused_secs`, 30 days).
    pub registration_unused: Duration,
    /// How long a request body of the identity service may take to arrive (10 s; 408 past it).
    pub body_timeout: Duration,
    /// Password hashes checked at once at most (each holds 19 MiB; the number of cores), read
    /// at start.
    pub password_checks: usize,
    /// External OpenID Connect providers users may sign in with (the specification's "social"
    /// sign-in).
    pub oidc_providers: Vec<OidcProvider>,
    /// Whether an https URL is taken as a `client_id` whose metadata document toolgate fetches
    /// (the MCP authorization specification's client ID metadata documents); off when `None`.
    pub client_documents: Option<ClientDocumentsConfig>,
    /// SAML 2.0 identity providers, one per organisation at most.
    pub saml: Vec<SamlIdp>,
}

/// `web.saml[]`: an organisation's SAML identity provider. Its users sign in at
/// `{auth_url}/saml/login/{organization}`; the IdP answers at `{auth_url}/saml/callback`.
#[derive(Debug, Clone)]
pub struct SamlIdp {
    pub organization: String,
    /// Shown on the sign-in page's button.
    pub name: String,
    pub idp_entity_id: String,
    /// Where the authentication request is sent (HTTP-Redirect binding).
    pub sso_url: String,
    /// The IdP's signing certificate (DER): every response must carry a valid signature by it.
    pub certificate_der: Vec<u8>,
    /// The role of a user created at its first sign-in, unless a group says otherwise.
    pub default_role: String,
    /// (group, role): the first group of the user found here gives its role.
    pub group_roles: Vec<(String, String)>,
    /// The attributes read (by Name or FriendlyName); common names are tried when unset.
    pub email_attribute: Option<String>,
    pub name_attribute: Option<String>,
    pub groups_attribute: Option<String>,
}

/// `web.client_id_metadata_documents`: where toolgate may fetch client metadata documents from.
#[derive(Debug, Clone)]
pub struct ClientDocumentsConfig {
    /// Hosts exempt from the address check (a document served inside the deployment's network);
    /// every other host must resolve to public addresses only, as a webhook's must.
    pub allowed_hosts: Vec<String>,
    /// PEM certificates trusted besides the public roots (a private PKI), read at load.
    pub extra_roots: Option<Vec<u8>>,
    /// Documents one address may have fetched per ten minutes (10), and all addresses together
    /// (100); past either a client is refused `temporarily_unavailable`.
    pub fetches_per_address: u32,
    pub fetches_in_all: u32,
}

/// An OpenID Connect provider of web sign-in: toolgate is its client (authorization code with
/// PKCE; the ID token verified with the provider's keys).
#[derive(Debug, Clone)]
pub struct OidcProvider {
    pub id: String,
    /// Shown on the sign-in page.
    pub name: String,
    pub issuer: String,
    pub client_id: String,
    pub client_secret: Option<String>,
    pub scopes: Vec<String>,
    /// The organisation whose users it signs in; with none, an e-mail that users of several
    /// organisations hold is refused.
    pub organization: Option<String>,
    /// Verifies ID tokens: RS256, the issuer, the audience `client_id`, their times.
    pub verifier: std::sync::Arc<crate::base::jwt::JwtVerifier>,
}

/// The issuer whose access tokens the gateways with `configuration.auth: oauth` accept.
#[derive(Debug, Clone)]
pub struct GatewayOAuthConfig {
    /// Named in each gateway's protected-resource metadata, and required as the tokens' `iss`.
    pub issuer: String,
    /// Required in every token (all of them) and advertised in the metadata.
    pub scopes: Vec<String>,
    /// Verifies the signature, issuer and times with the issuer's keys; the audience (the
    /// gateway's resource) is checked per request.
    pub verifier: std::sync::Arc<crate::base::jwt::JwtVerifier>,
}

/// The JWT settings are the verifier's own type (`jwt` is a leaf the configuration builds on).
pub(crate) use crate::base::jwt::{JwtConfig, JwtKeyConfig};

#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The main listener: TLS when `tls` is set, plain HTTP otherwise.
    pub listen: SocketAddr,
    /// With `tls`, an optional plain-HTTP listener beside the TLS one (behind a load balancer
    /// that terminates TLS itself, or for health checks).
    pub plain_listen: Option<SocketAddr>,
    /// TLS termination on `listen` (`src/edge/tls.rs`).
    pub tls: Option<TlsConfig>,
    /// Offer HTTP/2 by ALPN on the TLS listener (HTTP/1.1 is always offered).
    pub http2: bool,
    /// HTTP/2 without TLS ("prior knowledge") on the plain listeners, beside HTTP/1.1.
    pub h2c: bool,
    /// Where a process started with `--upgrade` waits for the running one's sockets (None:
    /// `upgrade.sock` in the embedded store's directory, `/tmp/toolgate-upgrade.sock` on Redis).
    pub upgrade_sock: Option<PathBuf>,
    pub metrics_listen: SocketAddr,
    /// Public base URL, used to build each gateway's `endpoint` (no trailing slash).
    pub public_url: String,
    pub trusted_proxies: Vec<IpNet>,
    pub threads: usize,
    /// Pingora's runtime flavour: one work-stealing runtime for all worker threads (Pingora's
    /// default), or, when false, one single-threaded runtime per thread with each connection
    /// staying on the thread that accepted it (no cross-thread wake-ups).
    pub work_stealing: bool,
    /// Largest request body accepted, in bytes (default 4 MiB).
    pub max_body_bytes: usize,
    /// How long in-flight requests get to finish after SIGTERM.
    pub grace_period: Duration,
    /// A request's header must be complete this long after the request's first byte (after the
    /// accept, for a connection's first request); Pingora alone only times single reads.
    pub header_timeout: Duration,
    /// How long a keep-alive connection may wait for its next request.
    pub keepalive_idle: Duration,
    /// Open connections on the main listener, in all and per client address (`src/edge/conn_limits.rs`).
    pub max_connections: usize,
    pub max_connections_per_ip: usize,
}

/// `server.tls`: what the TLS listener presents and asks of clients.
#[derive(Debug, Clone)]
pub struct TlsConfig {
    /// Certificate chains and keys (PEM); the first is presented when the client's SNI names
    /// none of the others' DNS names (or sends no SNI).
    pub certificates: Vec<CertificatePaths>,
    pub min_version: TlsVersion,
    pub client_auth: ClientAuth,
    /// How often the files are checked for changes (None: only on SIGHUP).
    pub reload_check: Option<Duration>,
}

#[derive(Debug, Clone)]
pub struct CertificatePaths {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsVersion {
    Tls12,
    Tls13,
}

/// Client certificates (mTLS), verified against the CA file's certificates.
#[derive(Debug, Clone)]
pub enum ClientAuth {
    None,
    /// A connection without a valid client certificate is refused in the handshake.
    Required(PathBuf),
    /// A certificate, when sent, must be valid; connections without one are served.
    Optional(PathBuf),
}

/// Where records live. `backend: redis` is refused at load until the shared backend exists, so
/// no value here is one the server cannot open.
#[derive(Debug, Clone)]
pub enum StorageConfig {
    Embedded {
        path: PathBuf,
    },
    /// Several instances sharing one Redis (`store/redis.rs`).
    Redis {
        url: String,
        key_prefix: String,
        connect_timeout: std::time::Duration,
        command_timeout: std::time::Duration,
        /// How long calls go on from this instance's copy of the records while Redis cannot be
        /// reached; past it authenticated requests are answered 503.
        outage_grace: std::time::Duration,
        /// With `rediss://`: a private CA and a client certificate, read at load.
        tls: RedisTls,
        /// `Some` for a Redis Cluster: seed nodes besides `url` (`storage.cluster_nodes`).
        cluster_nodes: Option<Vec<String>>,
    },
}

/// TLS to Redis beyond the system's roots: the CA that issued the server's certificate, and
/// this instance's certificate when the server requires one.
#[derive(Debug, Clone, Default)]
pub struct RedisTls {
    pub ca: Option<TlsRoots>,
    pub client: Option<ClientIdentity>,
}

/// A client certificate chain and its private key (PEM), read at load.
#[derive(Clone)]
pub struct ClientIdentity {
    pub cert_file: PathBuf,
    pub cert_pem: std::sync::Arc<[u8]>,
    pub key_pem: std::sync::Arc<[u8]>,
}

impl std::fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key's bytes are a secret.
        f.debug_struct("ClientIdentity").field("cert_file", &self.cert_file).finish_non_exhaustive()
    }
}

/// `audit:` (see `config/raw/audit.rs` and `data/audit/`).
#[derive(Clone, PartialEq, Eq)]
pub struct AuditConfig {
    /// The checkpoints' HMAC key, from the variable `audit.checkpoint_key_env` names; `None`:
    /// a key derived from the master key.
    pub checkpoint_key: Option<Vec<u8>>,
    pub checkpoint_interval: std::time::Duration,
}

impl std::fmt::Debug for AuditConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is a secret.
        f.debug_struct("AuditConfig")
            .field("checkpoint_key", &self.checkpoint_key.as_ref().map(|_| "<from the environment>"))
            .field("checkpoint_interval", &self.checkpoint_interval)
            .finish()
    }
}

/// `webhooks:` (see `config/raw/webhooks.rs` and `events/`).
#[derive(Debug, Clone, PartialEq)]
pub struct WebhooksConfig {
    /// Hosts a webhook may name although they resolve inside the network (and over plain http).
    pub allowed_hosts: Vec<String>,
    pub attempt_timeout: std::time::Duration,
    /// The waits between attempts; after the last, the delivery is given up (`failed`).
    pub retry_schedule: Vec<std::time::Duration>,
    pub per_endpoint_concurrency: usize,
    /// Deliveries in flight, all endpoints together.
    pub concurrency: usize,
    /// How long finished deliveries stay listed.
    pub delivery_retention: std::time::Duration,
    /// A webhook whose attempts have all failed for this long is disabled (and `error.critical`
    /// raised).
    pub disable_after: std::time::Duration,
}

/// `alerts:`.
#[derive(Debug, Clone)]
pub struct AlertsConfig {
    /// Share of a rate limit (percent) whose crossing by a key raises `usage.limit_warning` for
    /// the webhooks even without an alert; 0 turns that off (alerts' own thresholds still do).
    pub limit_warning_percent: u8,
    /// Failed exchanges in a row with an app, within `app_failure_window`, that raise
    /// `error.critical` (`kind: app_failing`) for the organisation; 0 turns that off.
    pub app_failures: u32,
    pub app_failure_window: std::time::Duration,
}

/// How the SMTP connection is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmtpTls {
    /// Plain text (a relay on the same host or network only).
    None,
    /// Plain, then upgraded with STARTTLS (required: refused if the server does not offer it).
    StartTls,
    /// TLS from the first byte (port 465).
    Tls,
}

/// `smtp:`: the server e-mail is handed to.
#[derive(Clone)]
pub struct SmtpConfig {
    pub host: String,
    pub port: u16,
    pub tls: SmtpTls,
    pub username: Option<String>,
    /// Read from the environment variable `smtp.password_env` names, never from the file.
    pub password: Option<String>,
    /// The sender, e.g. `toolgate <alerts@example.com>`.
    pub from: String,
    pub timeout: std::time::Duration,
    /// `smtp.ca_file`'s PEM certificates, trusted besides the public roots.
    pub ca_pem: Option<Vec<u8>>,
}

impl std::fmt::Debug for SmtpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmtpConfig")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("tls", &self.tls)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "(set)"))
            .field("from", &self.from)
            .field("timeout", &self.timeout)
            .field("ca_pem", &self.ca_pem.as_ref().map(|_| "(set)"))
            .finish()
    }
}

/// `sms:`: an SMS provider's HTTP API. Each message is a `POST` of JSON `{"to", "from", "body"}`
/// (E.164 number, the configured sender if any, the text) with `Authorization: Bearer` when a
/// token is set; any 2xx answer means the provider took it.
#[derive(Clone)]
pub struct SmsConfig {
    pub url: url::Url,
    /// Read from the environment variable `sms.token_env` names, never from the file.
    pub token: Option<String>,
    pub from: Option<String>,
    pub timeout: std::time::Duration,
}

impl std::fmt::Debug for SmsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmsConfig")
            .field("url", &self.url.as_str())
            .field("token", &self.token.as_ref().map(|_| "(set)"))
            .field("from", &self.from)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl StorageConfig {
    /// `server.upgrade_sock` when it is not set.
    pub(crate) fn default_upgrade_sock(&self) -> PathBuf {
        match self {
            StorageConfig::Embedded { path } => path.join("upgrade.sock"),
            StorageConfig::Redis { .. } => PathBuf::from("/tmp/toolgate-upgrade.sock"),
        }
    }

    /// Several instances may share this store (so each must hear of the others' changes).
    pub(crate) fn is_shared(&self) -> bool {
        matches!(self, StorageConfig::Redis { .. })
    }
}

/// Where an app's MCP server lives.
#[derive(Debug, Clone, PartialEq)]
pub enum AppUpstream {
    /// A Streamable HTTP MCP server.
    Url(String),
    /// A stdio MCP server: argv and extra environment.
    Command { argv: Vec<String>, env: BTreeMap<String, String> },
    /// An in-process app, e.g. `time`.
    Builtin(String),
}

/// A PEM bundle of CA certificates trusted for one `https` app besides the public (webpki)
/// roots: internal MCP servers are often behind a company's own CA.
#[derive(Clone)]
pub struct TlsRoots {
    pub file: PathBuf,
    /// The file as read at load (checked to hold at least one certificate).
    pub pem: std::sync::Arc<[u8]>,
}

impl std::fmt::Debug for TlsRoots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsRoots").field("file", &self.file).finish_non_exhaustive()
    }
}

#[derive(Debug, Clone)]
pub struct AppConfig {
    pub id: String,
    pub name: String,
    pub description: String,
    pub long_description: String,
    pub category: String,
    /// `available` or `beta` as declared; `connected` is computed per organisation.
    pub status: String,
    pub icon: String,
    /// `api_key`, `oauth`; empty means the app needs no credentials.
    pub auth_types: Vec<String>,
    pub upstream: AppUpstream,
    /// Requests per minute this upstream accepts from the gateway (all callers together).
    pub rate_limit: Option<u32>,
    pub timeouts: AppTimeouts,
    /// How connection credentials reach the upstream: header name and value prefix.
    pub credential_header: String,
    pub credential_prefix: String,
    /// MCP version offered to a `url` app (default: the newest toolgate speaks).
    pub protocol_version: Option<String>,
    /// Extra roots an `https` app's certificate may chain to (a private CA), read at load.
    pub tls_roots: Option<TlsRoots>,
    pub oauth: Option<OAuthConfig>,
    /// The functions the catalogue shows for the app before an organisation's own listing
    /// (`functions:` in YAML); empty when the app declares none.
    pub functions: Vec<FunctionDecl>,
    /// `health:`: how often and how long this app's health probe runs, where it differs from
    /// `mcp.app_health`.
    pub health: AppHealthOverrides,
    /// `connection_scope: user`: each member connects the app for themself, and calls go with
    /// the caller's own credential; `None` for an app connected once per organisation.
    pub per_user: Option<PerUserConnections>,
}

/// An app's own probe settings (`apps[].health`); `None`: `mcp.app_health`'s.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AppHealthOverrides {
    pub interval: Option<Duration>,
    pub timeout: Option<Duration>,
}

impl AppConfig {
    /// The interval and time-out of this app's probe: its own, else the global ones.
    pub(crate) fn health_probe(&self, global: &AppHealthConfig) -> (Duration, Duration) {
        (self.health.interval.unwrap_or(global.interval), self.health.timeout.unwrap_or(global.timeout))
    }
}

/// A function declared in YAML for the catalogue: name, description, parameter name -> type.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionDecl {
    pub name: String,
    pub description: String,
    pub parameters: BTreeMap<String, String>,
}

impl AppConfig {
    /// An app that needs no credentials is connected from the start.
    pub(crate) fn needs_credentials(&self) -> bool {
        !self.auth_types.is_empty()
    }

    pub fn base_url(&self) -> String {
        match &self.upstream {
            AppUpstream::Url(u) => u.clone(),
            AppUpstream::Command { argv, .. } => format!("stdio:{}", argv.join(" ")),
            AppUpstream::Builtin(b) => format!("builtin:{b}"),
        }
    }

    /// What a tenant is told of the upstream: its kind, not its address or command line, which
    /// describe the operator's network and hosts.
    pub(crate) fn base_url_for_tenants(&self) -> String {
        match &self.upstream {
            AppUpstream::Url(_) => "remote".into(),
            AppUpstream::Command { .. } => "stdio".into(),
            AppUpstream::Builtin(b) => format!("builtin:{b}"),
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct AppTimeouts {
    pub connect: Duration,
    pub first_byte: Duration,
    pub total: Duration,
}

/// An app's OAuth 2.0 authorization server, toolgate being its client (`app_oauth.rs`).
#[derive(Clone)]
pub struct OAuthConfig {
    /// As configured; none: discovered from the app's protected-resource metadata (RFC 9728)
    /// and its authorization server's metadata (RFC 8414).
    pub endpoints: Option<OAuthEndpoints>,
    /// `oauth.revocation_url`: where the tokens of an ended connection are revoked (RFC 7009);
    /// none: the `revocation_endpoint` of the discovered metadata, if it names one.
    pub revocation_url: Option<String>,
    pub client_id: String,
    /// Read from the environment variable `client_secret_env` names, never from the file; none
    /// for a public client (PKCE alone).
    pub client_secret: Option<String>,
    pub scopes: Vec<String>,
    /// `token_exchange`: calls go with a token exchanged for each caller's own (RFC 8693,
    /// `identity::token_exchange`) instead of the organisation's connection.
    pub token_exchange: Option<TokenExchangeConfig>,
}

/// An app's `oauth.token_exchange` (RFC 8693): what toolgate asks the app's authorization server
/// for, in exchange for a caller's own token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenExchangeConfig {
    /// `audience`, sent when configured (the app's name at its authorization server).
    pub audience: Option<String>,
    /// `resource` (RFC 8707): the app's URL unless configured.
    pub resource: String,
    /// The kinds of caller token that may be exchanged.
    pub subject_token_types: Vec<SubjectTokenType>,
    /// As configured; none: the token endpoint the app's OAuth settings name or discovery finds.
    pub token_endpoint: Option<String>,
    /// How toolgate authenticates as `client_id` (RFC 6749 section 2.3.1).
    pub client_auth: TokenClientAuth,
}

/// A kind of subject token (RFC 8693 section 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubjectTokenType {
    /// An OAuth access token (toolgate's own authorization server's).
    AccessToken,
    /// A JWT (a configured issuer's).
    Jwt,
}

impl SubjectTokenType {
    /// Its URI (RFC 8693 section 3).
    pub fn urn(self) -> &'static str {
        match self {
            SubjectTokenType::AccessToken => "urn:ietf:params:oauth:token-type:access_token",
            SubjectTokenType::Jwt => "urn:ietf:params:oauth:token-type:jwt",
        }
    }

    /// Its name in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            SubjectTokenType::AccessToken => "access_token",
            SubjectTokenType::Jwt => "jwt",
        }
    }
}

/// How a client authenticates at a token endpoint with its secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TokenClientAuth {
    /// `client_id` and `client_secret` in the form.
    #[default]
    ClientSecretPost,
    /// HTTP Basic with the form-encoded id and secret.
    ClientSecretBasic,
}

impl std::fmt::Debug for OAuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthConfig")
            .field("endpoints", &self.endpoints)
            .field("revocation_url", &self.revocation_url)
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret.as_ref().map(|_| "…"))
            .field("scopes", &self.scopes)
            .field("token_exchange", &self.token_exchange)
            .finish()
    }
}

/// Where an app's authorization server takes the user and the code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthEndpoints {
    pub authorize_url: String,
    pub token_url: String,
    /// The resource the tokens are for (RFC 8707 `resource`), when the app's metadata named it.
    pub resource: Option<String>,
    /// The metadata's `revocation_endpoint` (RFC 7009), when discovered and named.
    pub revocation_url: Option<String>,
}

#[derive(Debug, Clone)]
pub struct OrgConfig {
    pub id: String,
    pub name: String,
    pub tier: String,
}

#[derive(Debug, Clone)]
pub struct UserConfig {
    pub id: String,
    /// No other organisation's user may hold it ([`same_email`]).
    pub email: String,
    pub name: String,
    pub role: Role,
    pub organization: String,
}

/// Whether two e-mail addresses are one: compared in any letter case once trimmed. An address
/// belongs to the users of one organisation (the YAML's `users:`, the team API and SSO's
/// first sign-in refuse to give another organisation's address), so a sign-in provider that
/// names no organisation finds one user by it, and nobody claims another's address.
pub(crate) fn same_email(a: &str, b: &str) -> bool {
    fn folded(s: &str) -> impl Iterator<Item = char> + '_ {
        s.trim().chars().flat_map(char::to_lowercase)
    }
    folded(a).eq(folded(b))
}

#[derive(Debug, Clone)]
pub struct KeyConfig {
    pub id: String,
    pub name: String,
    pub user: String,
    /// Lower-case hex SHA-256 of the full key: the file never holds the secret.
    pub sha256: String,
    pub scopes: Vec<String>,
    pub expires_at: Option<chrono::DateTime<chrono::Utc>>,
    pub bypass_ip_whitelist: bool,
}

#[derive(Debug, Clone)]
pub struct LimitsConfig {
    /// Default `rate_limit_multiplier` of service accounts (Decision 1).
    pub service_account_multiplier: f64,
    /// Tier of the organisation made for the bootstrap owner.
    pub bootstrap_tier: String,
    /// `limits.quotas`: one row for every tier of the rate-limit table.
    pub quotas: BTreeMap<String, TierQuotas>,
    /// The row of `rate_limits.default_tier`, for an organisation whose tier is not in the table
    /// (the rate limiter treats it the same way).
    pub fallback_quotas: TierQuotas,
    /// Most operations in one `POST /batch`.
    pub batch_max_operations: usize,
    /// Most apps in one gateway's `servers` (the OpenAPI document's `maxItems` is the default).
    pub gateway_max_servers: usize,
}

impl LimitsConfig {
    /// The quotas of an organisation of `tier`.
    pub fn quotas(&self, tier: &str) -> &TierQuotas {
        self.quotas.get(tier).unwrap_or(&self.fallback_quotas)
    }
}

/// What one organisation of a tier may hold (`limits.quotas.<tier>`), so that a tenant cannot
/// grow memory, the store and list answers without bound, nor raise its own rate limits past
/// its tier. Revoked, expired and retired keys and gateway access keys do not count as keys.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TierQuotas {
    pub gateways: u32,
    pub api_keys: u32,
    pub service_accounts: u32,
    pub whitelist_entries: u32,
    pub webhooks: u32,
    /// The largest `rate_limit_multiplier` a service account or whitelist entry may be given,
    /// and the ceiling of their product where limits are applied.
    pub max_multiplier: f64,
}

impl TierQuotas {
    /// The built-in row of a tier; a tier of the operator's own gets `free`'s.
    pub fn defaults(tier: &str) -> TierQuotas {
        let q = |gateways, api_keys, service_accounts, whitelist_entries, webhooks, max_multiplier| TierQuotas {
            gateways,
            api_keys,
            service_accounts,
            whitelist_entries,
            webhooks,
            max_multiplier,
        };
        match tier {
            "starter" => q(50, 100, 20, 100, 20, 5.0),
            "professional" => q(200, 500, 100, 500, 50, 10.0),
            "enterprise" => q(1000, 5000, 1000, 1000, 200, 100.0),
            // Decision 1's service-account default (x5) holds on every built-in tier.
            _ => q(10, 25, 5, 20, 5, 5.0),
        }
    }
}

/// How long the request log keeps its entries and its rollups; the process's log.
#[derive(Debug, Clone)]
pub struct ObservabilityConfig {
    /// Entries older than this are pruned in the background.
    pub log_retention: Duration,
    /// At most this many entries are kept; the oldest go first.
    pub max_log_rows: u64,
    /// Hourly rollups older than this are pruned (analytics and metrics read them, so they
    /// outlive the entries). Minute and five-minute rollups are kept two days: no query reads
    /// them beyond 24 hours.
    pub rollup_retention: Duration,
    /// Distinct gateways, and tools, that get Prometheus series of their own; the rest fold
    /// into `other` (0: no such label).
    pub metric_gateway_labels: usize,
    pub metric_tool_labels: usize,
    /// How the process's log lines are written on standard error; `None`: by what standard
    /// error is (`observe::logging::format_for`).
    pub log_format: Option<LogFormat>,
    /// What is logged (`RUST_LOG` overrides it): a level or an `EnvFilter` directive list.
    pub log_level: String,
    /// Where spans are posted (OTLP/HTTP, JSON), e.g. `http://collector:4318/v1/traces`; `None`
    /// records none.
    pub otlp_endpoint: Option<String>,
    /// `service.name` of the exported spans.
    pub service_name: String,
}

/// One JSON object per line (for collectors) or text (for a person).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Json,
    Text,
}

/// Info, without Pingora's own per-connection chatter.
pub(crate) const DEFAULT_LOG_LEVEL: &str = "info,pingora=warn";

#[derive(Debug, Clone)]
pub struct McpConfig {
    /// Idle time after which a protocol session expires.
    pub session_idle_timeout: Duration,
    /// Origins accepted on the MCP endpoint; requests without `Origin` are always accepted.
    pub allowed_origins: Vec<String>,
    /// Upper bound on concurrently running stdio app processes.
    pub max_stdio_processes: usize,
    /// Page size of `tools/list` and the other list methods.
    pub page_size: usize,
    /// How long an ended or expired session stays readable before it is removed.
    pub session_retention: Duration,
    /// Caps on live sessions, so that clients cannot grow memory and the store without bound.
    pub max_sessions_per_key: usize,
    pub max_sessions_per_org: usize,
    /// How long a gateway's list (`tools/list`, ...) waits for each app when its catalogue is
    /// built: the apps are asked in parallel, and one that has not answered by then is left out
    /// (named in the catalogue's failures) instead of holding back the others' tools.
    pub list_deadline: Duration,
    /// `mcp.streams`: the long-lived streams one session, key and organisation may hold open.
    pub streams: StreamBounds,
    /// `mcp.resumable`: the bytes of call answers kept for resumption, per key and organisation.
    pub resumable: ResumableBounds,
    /// The bounds of the gateways' per-tool rules (`mcp.rules`).
    pub rules: RulesConfig,
    /// `mcp.app_health`: the apps' background health probes (`src/mcp/health.rs`).
    pub app_health: AppHealthConfig,
    /// `mcp.guards`: the gateways' external guards' calls in flight (`src/mcp/callout/`).
    pub guards: GuardsConfig,
}

/// How many calls of the gateways' external guards may be in flight at once, per gateway and
/// per organisation: a slow guard of one tenant holds its own calls, not another's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuardsConfig {
    pub concurrency_per_gateway: usize,
    pub concurrency_per_organization: usize,
}

impl Default for GuardsConfig {
    fn default() -> Self {
        GuardsConfig { concurrency_per_gateway: 64, concurrency_per_organization: 256 }
    }
}

/// How the apps are probed in the background: every `interval` (jittered), each probe bounded
/// by `timeout`, at most `concurrency` probes at once. An app's `health:` may change the first two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppHealthConfig {
    pub interval: Duration,
    pub timeout: Duration,
    pub concurrency: usize,
}

impl Default for AppHealthConfig {
    fn default() -> Self {
        AppHealthConfig { interval: Duration::from_secs(30), timeout: Duration::from_millis(5_000), concurrency: 8 }
    }
}

/// How many long-lived streams (GET streams, listening or resuming a call, and
/// `subscriptions/listen` streams) may be open at once on one instance: each holds a
/// connection of the listener for as long as its client listens (Decision 23).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamBounds {
    pub per_session: usize,
    pub per_key: usize,
    pub per_org: usize,
}

/// How many bytes of answers the resumable call streams of one key, and of one organisation,
/// may hold on one instance, and how long an ended call stream stays resumable. SSE has no
/// acknowledgement, so a buffer is kept until its time runs out: the bound is the only guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResumableBounds {
    pub bytes_per_key: usize,
    pub bytes_per_org: usize,
    pub keep_after_end: Duration,
}

/// What one gateway's rules may cost (`mcp.rules`, `src/mcp/rules.rs`): a rule set's worst case
/// is bounded when it is saved, from the sizes of what it reads; a call larger than those sizes
/// is refused before a rule whose cost depends on them runs; and the dear rule sets of one
/// organisation are evaluated off the worker threads, a few at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RulesConfig {
    /// Most steps (about one node of the CEL interpreter each) a gateway's rules may take on
    /// one call, worst case.
    pub max_cost: u64,
    /// Most entries of one list or map in what a rule reads from the call (its arguments, the
    /// caller's token claims), assumed by the bound.
    pub max_input_items: usize,
    /// Most bytes of what a rule reads from the call (the arguments' JSON text, the token's
    /// claims, the tool's name), assumed by the bound.
    pub max_input_bytes: usize,
    /// Dear rule sets of one organisation evaluated at once, on the blocking pool.
    pub concurrency_per_organization: usize,
}

impl Default for RulesConfig {
    fn default() -> Self {
        RulesConfig {
            max_cost: 1_000_000,
            max_input_items: 256,
            max_input_bytes: 1024 * 1024,
            concurrency_per_organization: 1,
        }
    }
}

impl Config {
    /// Reads and validates a file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        Config::parse(&text)
    }

    /// Parses and validates YAML text.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let de = serde_yaml::Deserializer::from_str(text);
        let raw: RawConfig = serde_path_to_error::deserialize(de).map_err(|e| {
            let field = e.path().to_string();
            let message = e.into_inner().to_string();
            // An empty path is a top-level key that is itself empty (`"": 1`, or an anchor with
            // no key text): still name where the problem is.
            invalid(if field == "." || field.is_empty() { "(top level)".to_string() } else { field }, message)
        })?;
        raw.validate()
    }

    pub fn app(&self, id: &str) -> Option<&std::sync::Arc<AppConfig>> {
        self.apps.iter().find(|a| a.id == id)
    }
}

/// Parses scope names, reporting the first unknown one against `field`.
pub(crate) fn parse_scopes(field: &str, names: &[String]) -> Result<ScopeSet, ConfigError> {
    ScopeSet::parse(names.iter().map(String::as_str)).map_err(|bad| invalid(field, format!("unknown scope `{bad}`")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "server:\n  listen: 127.0.0.1:0\n";

    #[test]
    fn minimal_config_gets_spec_defaults() {
        let c = Config::parse(MINIMAL).unwrap();
        assert_eq!(c.rate_limits.tiers["free"].requests_per_minute, 20);
        assert_eq!(c.rate_limits.tiers["enterprise"].burst, 1000);
        assert_eq!(c.server.max_body_bytes, 4 * 1024 * 1024);
        assert_eq!(c.rate_limits.unauthenticated.requests_per_hour, Some(60));
        assert_eq!(c.limits.bootstrap_tier, "enterprise");
    }

    #[test]
    fn mcp_session_bounds_have_defaults_and_refuse_zero_caps() {
        let c = Config::parse(MINIMAL).unwrap();
        assert_eq!(c.mcp.session_retention, Duration::from_secs(300));
        assert_eq!((c.mcp.max_sessions_per_key, c.mcp.max_sessions_per_org), (1000, 10_000));
        let c = Config::parse("mcp:\n  session_retention_secs: 0\n  max_sessions_per_organization: 3\n").unwrap();
        assert_eq!((c.mcp.session_retention, c.mcp.max_sessions_per_org), (Duration::ZERO, 3));
        for field in ["max_sessions_per_key", "max_sessions_per_organization"] {
            let err = Config::parse(&format!("mcp:\n  {field}: 0\n")).unwrap_err().to_string();
            assert!(err.starts_with(&format!("mcp.{field}")), "{err}");
        }
    }

    #[test]
    fn stream_and_resumable_bounds_have_defaults_and_refuse_zero_and_crossed_bounds() {
        let c = Config::parse(MINIMAL).unwrap();
        assert_eq!(c.mcp.streams, StreamBounds { per_session: 8, per_key: 250, per_org: 1000 });
        let r = c.mcp.resumable;
        assert_eq!((r.bytes_per_key, r.bytes_per_org), (64 << 20, 256 << 20));
        assert_eq!(r.keep_after_end, Duration::from_secs(60));
        let c = Config::parse(
            "mcp:\n  streams: { per_session: 1, per_key: 1, per_organization: 2 }\n  \
             resumable: { bytes_per_key: 1024, bytes_per_organization: 1024, keep_after_end_secs: 2 }\n",
        )
        .unwrap();
        assert_eq!(c.mcp.streams, StreamBounds { per_session: 1, per_key: 1, per_org: 2 });
        assert_eq!(c.mcp.resumable.keep_after_end, Duration::from_secs(2));
        for (yaml, field) in [
            ("streams: { per_session: 0 }", "mcp.streams.per_session"),
            ("streams: { per_key: 0 }", "mcp.streams.per_key"),
            ("streams: { per_organization: 0 }", "mcp.streams.per_organization"),
            ("streams: { per_session: 9, per_key: 5 }", "mcp.streams.per_session"),
            ("streams: { per_key: 2000 }", "mcp.streams.per_key"),
            ("streams: { per_socket: 1 }", "mcp.streams"),
            ("resumable: { bytes_per_key: 0 }", "mcp.resumable.bytes_per_key"),
            ("resumable: { bytes_per_organization: 0 }", "mcp.resumable.bytes_per_organization"),
            ("resumable: { bytes_per_key: 1073741824 }", "mcp.resumable.bytes_per_key"),
            ("resumable: { keep_after_end_secs: 0 }", "mcp.resumable.keep_after_end_secs"),
            ("resumable: { keep_after_end_secs: 3601 }", "mcp.resumable.keep_after_end_secs"),
        ] {
            let err = Config::parse(&format!("mcp:\n  {yaml}\n")).unwrap_err().to_string();
            assert!(err.starts_with(field), "{yaml}: {err}");
        }
    }

    #[test]
    fn a_redis_store_is_read_with_its_defaults() {
        let c = Config::parse("storage:\n  backend: redis\n  url: redis://127.0.0.1:6379/2\n").unwrap();
        let StorageConfig::Redis { url, key_prefix, connect_timeout, command_timeout, .. } = &c.storage else {
            panic!("{:?}", c.storage)
        };
        assert_eq!((url.as_str(), key_prefix.as_str()), ("redis://127.0.0.1:6379/2", "toolgate"));
        assert_eq!((*connect_timeout, *command_timeout), (Duration::from_secs(2), Duration::from_secs(2)));
        assert!(c.storage.is_shared());
        let c =
            Config::parse("storage:\n  backend: redis\n  url: unix:///run/redis.sock\n  key_prefix: tg1\n").unwrap();
        assert!(matches!(&c.storage, StorageConfig::Redis { key_prefix, outage_grace, .. }
            if key_prefix == "tg1" && *outage_grace == Duration::from_secs(300)));
        let e = Config::parse("storage:\n  backend: redis\n  url: redis://x\n  outage_grace_secs: 0\n").unwrap_err();
        assert!(e.to_string().starts_with("storage.outage_grace_secs"), "{e}");
        let e = Config::parse("storage:\n  outage_grace_secs: 5\n").unwrap_err();
        assert!(e.to_string().starts_with("storage.outage_grace_secs"), "{e}");
        let e = Config::parse("storage:\n  backend: redis\n  url: redis://x\n  path: ./data\n").unwrap_err();
        assert!(e.to_string().starts_with("storage.path"), "{e}");
        assert!(!Config::parse(MINIMAL).unwrap().storage.is_shared());
    }

    #[test]
    fn a_redis_cluster_is_named_by_seed_nodes_reached_over_tcp() {
        let c = Config::parse(
            "storage:\n  backend: redis\n  url: redis://10.0.0.1:7000\n  cluster: true\n  \
             cluster_nodes: [redis://10.0.0.2:7000, redis://10.0.0.3:7000]\n",
        )
        .unwrap();
        assert!(matches!(&c.storage, StorageConfig::Redis { cluster_nodes: Some(n), .. } if n.len() == 2));
        let c = Config::parse("storage:\n  backend: redis\n  url: redis://h:7000\n  cluster: true\n").unwrap();
        assert!(matches!(&c.storage, StorageConfig::Redis { cluster_nodes: Some(n), .. } if n.is_empty()));
        let c = Config::parse("storage:\n  backend: redis\n  url: redis://h:6379\n").unwrap();
        assert!(matches!(&c.storage, StorageConfig::Redis { cluster_nodes: None, .. }));
        for (yaml, field) in [
            ("storage:\n  backend: redis\n  url: unix:///r.sock\n  cluster: true\n", "storage.url"),
            ("storage:\n  backend: redis\n  url: redis://h\n  cluster_nodes: [redis://g]\n", "storage.cluster_nodes"),
            (
                "storage:\n  backend: redis\n  url: redis://h\n  cluster: true\n  cluster_nodes: [rediss://g]\n",
                "storage.cluster_nodes",
            ),
            ("storage:\n  cluster: true\n", "storage.cluster"),
        ] {
            let e = Config::parse(yaml).unwrap_err().to_string();
            assert!(e.starts_with(field), "{yaml}: {e}");
        }
    }

    /// Each of these passed validation and then failed the start (a refusal or a panic), so
    /// `check-config` said `ok` to a file that could not run.
    #[test]
    fn values_the_start_would_refuse_are_refused_at_load() {
        for (yaml, field) in [
            ("storage:\n  backend: redis\n  url: redis://x\n  tls_ca_file: /ca.pem\n", "storage.tls_ca_file"),
            ("rate_limits:\n  outage: maybe\n", "rate_limits.outage"),
            ("storage:\n  backend: redis\n  url: rediss://x\n  tls_ca_file: /nonexistent.pem\n", "storage.tls_ca_file"),
            ("storage:\n  backend: redis\n  url: rediss://x\n  tls_cert_file: /c.pem\n", "storage.tls_key_file"),
            ("storage:\n  backend: redis\n  url: redis://x\n  key_prefix: 'a{b}'\n", "storage.key_prefix"),
            ("storage:\n  backend: redis\n  url: redis://x\n  command_timeout_ms: 0\n", "storage.command_timeout_ms"),
            ("mcp:\n  max_stdio_processes: 18446744073709551615\n", "mcp.max_stdio_processes"),
            ("mcp:\n  max_stdio_processes: 0\n", "mcp.max_stdio_processes"),
            ("mcp:\n  session_idle_timeout_secs: 18446744073709551615\n", "mcp.session_idle_timeout_secs"),
            ("mcp:\n  session_retention_secs: 18446744073709551615\n", "mcp.session_retention_secs"),
            ("server:\n  listen: 0.0.0.0:8080\n  metrics_listen: 127.0.0.1:8080\n", "server.metrics_listen"),
            ("server:\n  listen: 127.0.0.1:9090\n  metrics_listen: '[::]:9090'\n", "server.metrics_listen"),
            ("apps:\n  - { id: a, name: A, builtin: time, rate_limit: 0 }\n", "apps[0].rate_limit"),
        ] {
            let e = Config::parse(yaml).unwrap_err().to_string();
            assert!(e.starts_with(field), "{yaml}: {e}");
        }
        // Still accepted: the storage URL is checked before the backend, distinct ports, and
        // both listeners on port 0.
        let e = Config::parse("storage:\n  backend: redis\n  url: http://x\n").unwrap_err().to_string();
        assert!(e.starts_with("storage.url"), "{e}");
        Config::parse("server:\n  listen: 0.0.0.0:8080\n  metrics_listen: 127.0.0.1:9090\n").unwrap();
        Config::parse("server:\n  listen: 127.0.0.1:0\n  metrics_listen: 0.0.0.0:0\n").unwrap();
        Config::parse("mcp:\n  max_stdio_processes: 10000\n  session_idle_timeout_secs: 31536000\n").unwrap();
    }

    #[test]
    fn declared_functions_are_read_and_checked() {
        let y = "apps:\n  - id: a\n    name: A\n    builtin: time\n    functions:\n      \
                 - { name: now, description: The time, parameters: { timezone: string } }\n      - { name: zones }\n";
        let c = Config::parse(y).unwrap();
        let f = &c.apps[0].functions;
        assert_eq!((f[0].name.as_str(), f[0].parameters["timezone"].as_str()), ("now", "string"));
        assert_eq!((f[1].name.as_str(), f[1].description.as_str(), f[1].parameters.len()), ("zones", "", 0));
        let dup = "apps:\n  - { id: a, name: A, builtin: time, functions: [{ name: x }, { name: x }] }\n";
        assert!(Config::parse(dup).unwrap_err().to_string().starts_with("apps[0].functions[1].name"));
        let extra = "apps:\n  - { id: a, name: A, builtin: time, functions: [{ name: x, params: {} }] }\n";
        assert!(Config::parse(extra).unwrap_err().to_string().starts_with("apps[0].functions[0]"));
    }

    #[test]
    fn unknown_field_is_named() {
        let err = Config::parse("server:\n  lisen: 1\n").unwrap_err().to_string();
        assert!(err.contains("server"), "{err}");
        assert!(err.contains("lisen"), "{err}");
    }

    /// Found by fuzzing (fuzz/, target `config`): an empty top-level key gave the error an
    /// empty field, `: unknown field ``, ...`.
    #[test]
    fn empty_top_level_key_is_still_named() {
        for y in ["\"\": 1\n", "&a : x\n"] {
            let err = Config::parse(y).unwrap_err().to_string();
            assert!(err.starts_with("(top level): unknown field"), "{y:?} -> {err}");
        }
    }

    #[test]
    fn app_with_two_upstreams_is_refused() {
        let y = "apps:\n  - id: a\n    name: A\n    url: http://x/mcp\n    builtin: time\n";
        let err = Config::parse(y).unwrap_err().to_string();
        assert!(err.starts_with("apps[0]"), "{err}");
    }

    #[test]
    fn tls_ca_file_is_read_and_checked_at_load() {
        let app =
            |url: &str, file: &str| format!("apps:\n  - {{ id: a, name: A, url: {url}, tls_ca_file: {file:?} }}\n");
        let err = |y: String| Config::parse(&y).unwrap_err().to_string();
        let dir = std::env::temp_dir().join(format!("toolgate-tls-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let not_pem = dir.join("not.pem");
        std::fs::write(&not_pem, "no certificate here\n").unwrap();
        let not_pem = not_pem.to_str().unwrap();

        let e = err(app("http://x/mcp", not_pem));
        assert!(e.starts_with("apps[0].tls_ca_file") && e.contains("only applies to https"), "{e}");
        let stdio = format!("apps:\n  - {{ id: a, name: A, command: [x], tls_ca_file: {not_pem:?} }}\n");
        assert!(err(stdio).starts_with("apps[0].tls_ca_file"));
        let e = err(app("https://x/mcp", "/no/such/ca.pem"));
        assert!(e.starts_with("apps[0].tls_ca_file") && e.contains("/no/such/ca.pem"), "{e}");
        let e = err(app("https://x/mcp", not_pem));
        assert!(e.starts_with("apps[0].tls_ca_file") && e.contains("no PEM certificate"), "{e}");
        // The other CA files are read by the same rules.
        for (yaml, field) in [
            (
                format!("storage:\n  backend: redis\n  url: rediss://x\n  tls_ca_file: {not_pem:?}\n"),
                "storage.tls_ca_file",
            ),
            (
                format!("web:\n  client_id_metadata_documents: {{ enabled: true, ca_file: {not_pem:?} }}\n"),
                "web.client_id_metadata_documents.ca_file",
            ),
        ] {
            let e = err(yaml);
            assert!(e.starts_with(field) && e.contains("no PEM certificate"), "{field}: {e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn protocol_version_is_checked() {
        let ok = "apps:\n  - { id: a, name: A, url: http://x/mcp, protocol_version: 2025-06-18 }\n";
        assert_eq!(Config::parse(ok).unwrap().apps[0].protocol_version.as_deref(), Some("2025-06-18"));
        let bad = "apps:\n  - { id: a, name: A, url: http://x/mcp, protocol_version: 2020-01-01 }\n";
        assert!(Config::parse(bad).unwrap_err().to_string().starts_with("apps[0].protocol_version"));
        let stdio = "apps:\n  - { id: a, name: A, command: [x], protocol_version: 2025-06-18 }\n";
        assert!(Config::parse(stdio).unwrap_err().to_string().starts_with("apps[0].protocol_version"));
    }

    #[test]
    fn bad_listen_is_named() {
        let err = Config::parse("server:\n  listen: nowhere\n").unwrap_err().to_string();
        assert!(err.starts_with("server.listen"), "{err}");
    }

    #[test]
    fn quotas_default_per_tier_and_are_configured_by_tier() {
        let c = Config::parse(MINIMAL).unwrap();
        assert_eq!(c.limits.quotas("free").gateways, 10);
        assert_eq!(c.limits.quotas("free").max_multiplier, 5.0);
        assert_eq!(c.limits.quotas("enterprise").max_multiplier, 100.0);
        assert_eq!(c.limits.quotas("no-such-tier"), c.limits.quotas("free"), "an unknown tier is the default tier");
        let yaml = "rate_limits:\n  tiers:\n    gold: { requests_per_hour: 9, requests_per_minute: 9, burst: 9, concurrent: 9 }\n\
                    limits:\n  quotas:\n    free: { webhooks: 0 }\n    gold: { gateways: 7, max_multiplier: 3 }\n";
        let c = Config::parse(yaml).unwrap();
        assert_eq!(c.limits.quotas("free").webhooks, 0);
        assert_eq!(c.limits.quotas("free").gateways, 10, "fields left out keep the default");
        assert_eq!((c.limits.quotas("gold").gateways, c.limits.quotas("gold").api_keys), (7, 25));
        // The ceiling reaches the rate limiter.
        let p = toolgate_filters::Principal {
            key_id: "k".into(),
            user_id: "u".into(),
            org_id: "o".into(),
            role: Role::Owner,
            credential: toolgate_filters::CredentialKind::ServiceAccount { account_id: "sa".into() },
            scopes: ScopeSet::ALL,
            tier: "gold".into(),
            rate_limit_multiplier: 10.0,
            bypass_ip_whitelist: false,
            expires_at: None,
        };
        assert_eq!(c.rate_limit_policy.multiplier(&p, Some(10.0)), 3.0);

        for (yaml, field) in [
            ("limits:\n  quotas:\n    platinum: { gateways: 1 }\n", "limits.quotas.platinum"),
            ("limits:\n  quotas:\n    free: { max_multiplier: 0.5 }\n", "limits.quotas.free.max_multiplier"),
            ("limits:\n  quotas:\n    free: { gateway: 1 }\n", "limits.quotas.free"),
        ] {
            let e = Config::parse(yaml).unwrap_err().to_string();
            assert!(e.starts_with(field), "{yaml}: {e}");
        }
    }
}

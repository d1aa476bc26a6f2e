//! The YAML file as written. Every struct refuses unknown fields, and `validate` turns it into
//! the runtime [`Config`](super::Config), naming the field of the first problem.

use super::*;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default)]
    environment: Option<String>,
    #[serde(default)]
    server: RawServer,
    #[serde(default)]
    storage: RawStorage,
    #[serde(default)]
    apps: Vec<RawApp>,
    #[serde(default)]
    organizations: Vec<RawOrg>,
    #[serde(default)]
    users: Vec<RawUser>,
    #[serde(default)]
    api_keys: Vec<RawKey>,
    #[serde(default)]
    rate_limits: toolgate_filters::rate_limit::RateLimitConfig,
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    mcp: RawMcp,
    jwt: Option<RawJwt>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJwt {
    issuer: Option<String>,
    audience: Option<String>,
    leeway_secs: Option<u64>,
    #[serde(default)]
    keys: Vec<RawJwtKey>,
    jwks_file: Option<String>,
    jwks_url: Option<String>,
    refresh_secs: Option<u64>,
    max_lifetime_secs: Option<u64>,
    #[serde(default)]
    insecure_skip_issuer_audience: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJwtKey {
    kid: String,
    pem_file: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    listen: Option<String>,
    metrics_listen: Option<String>,
    public_url: Option<String>,
    #[serde(default)]
    trusted_proxies: Vec<String>,
    threads: Option<usize>,
    work_stealing: Option<bool>,
    max_body_bytes: Option<usize>,
    grace_period_secs: Option<u64>,
    header_timeout_ms: Option<u64>,
    keepalive_idle_secs: Option<u64>,
    max_connections: Option<usize>,
    max_connections_per_ip: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStorage {
    backend: Option<String>,
    path: Option<String>,
    url: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawApp {
    id: String,
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    long_description: String,
    #[serde(default)]
    category: String,
    status: Option<String>,
    #[serde(default)]
    icon: String,
    #[serde(default)]
    auth_types: Vec<String>,
    url: Option<String>,
    command: Option<Vec<String>>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    builtin: Option<String>,
    rate_limit: Option<u32>,
    #[serde(default)]
    timeouts: RawTimeouts,
    credential_header: Option<String>,
    credential_prefix: Option<String>,
    protocol_version: Option<String>,
    tls_ca_file: Option<String>,
    oauth: Option<RawOAuth>,
    #[serde(default)]
    functions: Vec<RawFunction>,
}

/// A function as the app's catalogue entry shows it before any organisation has connected.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFunction {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    parameters: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTimeouts {
    connect_ms: Option<u64>,
    first_byte_ms: Option<u64>,
    total_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOAuth {
    authorize_url: String,
    token_url: String,
    client_id: String,
    #[serde(default)]
    scopes: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOrg {
    id: String,
    name: String,
    tier: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUser {
    id: String,
    email: String,
    #[serde(default)]
    name: String,
    role: String,
    organization: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKey {
    id: String,
    name: String,
    user: String,
    sha256: String,
    #[serde(default)]
    scopes: Vec<String>,
    expires_at: Option<String>,
    #[serde(default)]
    bypass_ip_whitelist: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    service_account_multiplier: Option<f64>,
    bootstrap_tier: Option<String>,
    #[serde(default)]
    quotas: BTreeMap<String, RawQuotas>,
}

/// One tier's row of `limits.quotas`; absent fields keep the built-in figure.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawQuotas {
    gateways: Option<u32>,
    api_keys: Option<u32>,
    service_accounts: Option<u32>,
    whitelist_entries: Option<u32>,
    webhooks: Option<u32>,
    max_multiplier: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMcp {
    session_idle_timeout_secs: Option<u64>,
    #[serde(default)]
    allowed_origins: Vec<String>,
    max_stdio_processes: Option<usize>,
    page_size: Option<usize>,
    session_retention_secs: Option<u64>,
    max_sessions_per_key: Option<usize>,
    max_sessions_per_organization: Option<usize>,
}

/// Upper bounds of `mcp.session_idle_timeout_secs` and `mcp.session_retention_secs`.
const MAX_SESSION_SECS: u64 = 365 * 24 * 3600;
/// Upper bound of `mcp.max_stdio_processes`: far above what one host runs.
const MAX_STDIO_PROCESSES: usize = 10_000;

fn is_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn parse_addr(field: &str, value: Option<&str>, default: &str) -> Result<SocketAddr, ConfigError> {
    let v = value.unwrap_or(default);
    v.parse().map_err(|_| invalid(field, format!("`{v}` is not an address like 127.0.0.1:8080")))
}

impl RawConfig {
    pub fn validate(self) -> Result<Config, ConfigError> {
        let environment = match self.environment.as_deref() {
            None | Some("production") => Environment::Production,
            Some("development") => Environment::Development,
            Some(other) => {
                return Err(invalid("environment", format!("`{other}`: expected production or development")))
            }
        };
        let s = self.server;
        let listen = parse_addr("server.listen", s.listen.as_deref(), "0.0.0.0:8080")?;
        let metrics_listen = parse_addr("server.metrics_listen", s.metrics_listen.as_deref(), "127.0.0.1:9090")?;
        if metrics_listen == listen {
            return Err(invalid(
                "server.metrics_listen",
                "must differ from server.listen (use another address, e.g. 127.0.0.2:0, when both use port 0)",
            ));
        }
        // A wildcard address holds its port on every address of its family (`[::]` on IPv4 too,
        // Linux's dual-stack default): the second listener could not bind.
        let covers = |a: &SocketAddr, b: &SocketAddr| a.ip().is_unspecified() && (a.is_ipv6() || b.is_ipv4());
        if listen.port() != 0
            && metrics_listen.port() == listen.port()
            && (covers(&listen, &metrics_listen) || covers(&metrics_listen, &listen))
        {
            return Err(invalid(
                "server.metrics_listen",
                format!("port {} is already taken by server.listen {listen}", listen.port()),
            ));
        }
        let public_url = s.public_url.unwrap_or_else(|| format!("http://localhost:{}", listen.port()));
        let parsed =
            url::Url::parse(&public_url).map_err(|e| invalid("server.public_url", format!("`{public_url}`: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(invalid("server.public_url", "must be an http or https URL"));
        }
        let mut trusted_proxies = Vec::new();
        for (i, p) in s.trusted_proxies.iter().enumerate() {
            let net = p
                .parse::<IpNet>()
                .or_else(|_| p.parse::<std::net::IpAddr>().map(IpNet::from))
                .map_err(|_| invalid(format!("server.trusted_proxies[{i}]"), format!("`{p}` is not a CIDR")))?;
            trusted_proxies.push(net);
        }
        let threads = s.threads.unwrap_or(2);
        if threads == 0 {
            return Err(invalid("server.threads", "must be at least 1"));
        }
        let max_body_bytes = s.max_body_bytes.unwrap_or(4 * 1024 * 1024);
        if max_body_bytes < 1024 {
            return Err(invalid("server.max_body_bytes", "must be at least 1024"));
        }
        let header_timeout_ms = s.header_timeout_ms.unwrap_or(10_000);
        if !(100..=600_000).contains(&header_timeout_ms) {
            return Err(invalid("server.header_timeout_ms", "must be between 100 and 600000"));
        }
        let keepalive_idle_secs = s.keepalive_idle_secs.unwrap_or(60);
        if !(1..=3600).contains(&keepalive_idle_secs) {
            return Err(invalid("server.keepalive_idle_secs", "must be between 1 and 3600"));
        }
        let max_connections = s.max_connections.unwrap_or(10_000);
        if max_connections == 0 {
            return Err(invalid("server.max_connections", "must be at least 1"));
        }
        let max_connections_per_ip = s.max_connections_per_ip.unwrap_or(256);
        if max_connections_per_ip == 0 || max_connections_per_ip > max_connections {
            return Err(invalid("server.max_connections_per_ip", "must be between 1 and server.max_connections"));
        }
        let server = ServerConfig {
            listen,
            metrics_listen,
            public_url: public_url.trim_end_matches('/').to_string(),
            trusted_proxies,
            threads,
            work_stealing: s.work_stealing.unwrap_or(true),
            max_body_bytes,
            grace_period: Duration::from_secs(s.grace_period_secs.unwrap_or(5)),
            header_timeout: Duration::from_millis(header_timeout_ms),
            keepalive_idle: Duration::from_secs(keepalive_idle_secs),
            max_connections,
            max_connections_per_ip,
        };

        let storage = match self.storage.backend.as_deref() {
            None | Some("embedded") => {
                if self.storage.url.is_some() {
                    return Err(invalid("storage.url", "only used with backend: redis"));
                }
                StorageConfig::Embedded { path: PathBuf::from(self.storage.path.unwrap_or_else(|| "./data".into())) }
            }
            Some("redis") => {
                let url = self.storage.url.ok_or_else(|| invalid("storage.url", "required with backend: redis"))?;
                if !url.starts_with("redis://") && !url.starts_with("rediss://") {
                    return Err(invalid("storage.url", "must start with redis:// or rediss://"));
                }
                // Refused here rather than when the store opens, so that `check-config` and the
                // start agree: a file that check-config passes starts.
                return Err(invalid("storage.backend", "redis is not available in this build yet"));
            }
            Some(other) => return Err(invalid("storage.backend", format!("`{other}`: expected embedded or redis"))),
        };

        let mut apps = Vec::with_capacity(self.apps.len());
        for (i, a) in self.apps.into_iter().enumerate() {
            let f = |name: &str| format!("apps[{i}].{name}");
            if !is_id(&a.id) {
                return Err(invalid(f("id"), "must be 1-64 characters of A-Z a-z 0-9 _ -"));
            }
            if apps.iter().any(|x: &AppConfig| x.id == a.id) {
                return Err(invalid(f("id"), format!("duplicate app id `{}`", a.id)));
            }
            if a.name.trim().is_empty() {
                return Err(invalid(f("name"), "must not be empty"));
            }
            let upstream = match (a.url, a.command, a.builtin) {
                (Some(url), None, None) => {
                    let u = url::Url::parse(&url).map_err(|e| invalid(f("url"), format!("`{url}`: {e}")))?;
                    if !matches!(u.scheme(), "http" | "https") {
                        return Err(invalid(f("url"), "must be an http or https URL"));
                    }
                    AppUpstream::Url(url)
                }
                (None, Some(argv), None) => {
                    if argv.is_empty() || argv[0].is_empty() {
                        return Err(invalid(f("command"), "must name a program"));
                    }
                    AppUpstream::Command { argv, env: a.env }
                }
                (None, None, Some(b)) => {
                    if b != "time" {
                        return Err(invalid(f("builtin"), format!("unknown built-in app `{b}` (known: time)")));
                    }
                    AppUpstream::Builtin(b)
                }
                _ => return Err(invalid(format!("apps[{i}]"), "needs exactly one of url, command, builtin")),
            };
            if let Some(v) = &a.protocol_version {
                if !matches!(upstream, AppUpstream::Url(_)) {
                    return Err(invalid(f("protocol_version"), "only applies to url apps"));
                }
                if !crate::mcp::protocol::VERSIONS.contains(&v.as_str()) {
                    let known = crate::mcp::protocol::VERSIONS.join(", ");
                    return Err(invalid(f("protocol_version"), format!("`{v}`: expected one of {known}")));
                }
            }
            let tls_roots = match a.tls_ca_file {
                None => None,
                Some(file) => Some(tls_roots(&upstream, file).map_err(|m| invalid(f("tls_ca_file"), m))?),
            };
            let status = a.status.unwrap_or_else(|| "available".into());
            if !matches!(status.as_str(), "available" | "beta") {
                return Err(invalid(f("status"), format!("`{status}`: expected available or beta")));
            }
            for (j, t) in a.auth_types.iter().enumerate() {
                if !matches!(t.as_str(), "api_key" | "oauth") {
                    return Err(invalid(
                        format!("apps[{i}].auth_types[{j}]"),
                        format!("`{t}`: expected api_key or oauth"),
                    ));
                }
            }
            if a.auth_types.iter().any(|t| t == "oauth") && a.oauth.is_none() {
                return Err(invalid(f("oauth"), "required when auth_types contains oauth"));
            }
            // An app's quota of 0 would refuse every call; the API shows 0 for "no limit".
            if a.rate_limit == Some(0) {
                return Err(invalid(f("rate_limit"), "must be at least 1 (leave it out for no limit)"));
            }
            let mut functions = Vec::with_capacity(a.functions.len());
            for (j, func) in a.functions.into_iter().enumerate() {
                let field = format!("apps[{i}].functions[{j}].name");
                if func.name.is_empty() || func.name.chars().any(char::is_control) {
                    return Err(invalid(field, "must be a non-empty name without control characters"));
                }
                if functions.iter().any(|x: &FunctionDecl| x.name == func.name) {
                    return Err(invalid(field, format!("duplicate function `{}`", func.name)));
                }
                functions.push(FunctionDecl {
                    name: func.name,
                    description: func.description,
                    parameters: func.parameters,
                });
            }
            let ms = |v: Option<u64>, d: u64| Duration::from_millis(v.unwrap_or(d));
            let timeouts = AppTimeouts {
                connect: ms(a.timeouts.connect_ms, 5_000),
                first_byte: ms(a.timeouts.first_byte_ms, 30_000),
                total: ms(a.timeouts.total_ms, 60_000),
            };
            if timeouts.connect.is_zero() || timeouts.first_byte.is_zero() || timeouts.total.is_zero() {
                return Err(invalid(f("timeouts"), "timeouts must be positive"));
            }
            apps.push(AppConfig {
                id: a.id,
                name: a.name,
                description: a.description,
                long_description: a.long_description,
                category: a.category,
                status,
                icon: a.icon,
                auth_types: a.auth_types,
                upstream,
                rate_limit: a.rate_limit,
                timeouts,
                credential_header: a.credential_header.unwrap_or_else(|| "Authorization".into()),
                credential_prefix: a.credential_prefix.unwrap_or_else(|| "Bearer ".into()),
                protocol_version: a.protocol_version,
                tls_roots,
                oauth: a.oauth.map(|o| OAuthConfig {
                    authorize_url: o.authorize_url,
                    token_url: o.token_url,
                    client_id: o.client_id,
                    scopes: o.scopes,
                }),
                functions,
            });
        }

        let mut rate_limits = self.rate_limits;
        // Tiers given in YAML add to or replace the spec's table by name; the others stay.
        for (name, tier) in toolgate_filters::rate_limit::RateLimitConfig::default_tiers() {
            rate_limits.tiers.entry(name).or_insert(tier);
        }
        let mut rate_limit_policy = toolgate_filters::rate_limit::RateLimitPolicy::try_from(&rate_limits)
            .map_err(|e| invalid("rate_limits", e.to_string()))?;
        let tiers = &rate_limits.tiers;

        let mut organizations = Vec::new();
        for (i, o) in self.organizations.into_iter().enumerate() {
            if !is_id(&o.id) {
                return Err(invalid(format!("organizations[{i}].id"), "must be 1-64 characters of A-Z a-z 0-9 _ -"));
            }
            let tier = o.tier.unwrap_or_else(|| "free".into());
            if !tiers.contains_key(&tier) {
                return Err(invalid(format!("organizations[{i}].tier"), format!("unknown tier `{tier}`")));
            }
            organizations.push(OrgConfig { id: o.id, name: o.name, tier });
        }
        let mut users = Vec::new();
        for (i, u) in self.users.into_iter().enumerate() {
            let role = Role::parse(&u.role).ok_or_else(|| {
                invalid(format!("users[{i}].role"), format!("`{}`: expected owner, admin, developer or viewer", u.role))
            })?;
            if !organizations.iter().any(|o| o.id == u.organization) {
                return Err(invalid(
                    format!("users[{i}].organization"),
                    format!("unknown organization `{}`", u.organization),
                ));
            }
            if !is_id(&u.id) {
                return Err(invalid(format!("users[{i}].id"), "must be 1-64 characters of A-Z a-z 0-9 _ -"));
            }
            users.push(UserConfig { id: u.id, email: u.email, name: u.name, role, organization: u.organization });
        }
        let mut api_keys = Vec::new();
        for (i, k) in self.api_keys.into_iter().enumerate() {
            let f = |name: &str| format!("api_keys[{i}].{name}");
            if !users.iter().any(|u| u.id == k.user) {
                return Err(invalid(f("user"), format!("unknown user `{}`", k.user)));
            }
            let hash = k.sha256.to_ascii_lowercase();
            if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(invalid(f("sha256"), "must be 64 hex characters (the SHA-256 of the key)"));
            }
            parse_scopes(&f("scopes"), &k.scopes)?;
            let expires_at = match k.expires_at {
                None => None,
                Some(s) => Some(
                    chrono::DateTime::parse_from_rfc3339(&s)
                        .map_err(|e| invalid(f("expires_at"), format!("`{s}`: {e}")))?
                        .with_timezone(&chrono::Utc),
                ),
            };
            if !is_id(&k.id) {
                return Err(invalid(f("id"), "must be 1-64 characters of A-Z a-z 0-9 _ -"));
            }
            api_keys.push(KeyConfig {
                id: k.id,
                name: k.name,
                user: k.user,
                sha256: hash,
                scopes: k.scopes,
                expires_at,
                bypass_ip_whitelist: k.bypass_ip_whitelist,
            });
        }

        let l = self.limits;
        let bootstrap_tier = l.bootstrap_tier.unwrap_or_else(|| "enterprise".into());
        if !tiers.contains_key(&bootstrap_tier) {
            return Err(invalid("limits.bootstrap_tier", format!("unknown tier `{bootstrap_tier}`")));
        }
        for name in l.quotas.keys() {
            if !tiers.contains_key(name) {
                return Err(invalid(format!("limits.quotas.{name}"), format!("unknown tier `{name}`")));
            }
        }
        let mut quotas = BTreeMap::new();
        for name in tiers.keys() {
            let mut q = TierQuotas::defaults(name);
            if let Some(r) = l.quotas.get(name) {
                q.gateways = r.gateways.unwrap_or(q.gateways);
                q.api_keys = r.api_keys.unwrap_or(q.api_keys);
                q.service_accounts = r.service_accounts.unwrap_or(q.service_accounts);
                q.whitelist_entries = r.whitelist_entries.unwrap_or(q.whitelist_entries);
                q.webhooks = r.webhooks.unwrap_or(q.webhooks);
                q.max_multiplier = r.max_multiplier.unwrap_or(q.max_multiplier);
            }
            // Below 1 the ceiling would cut every caller's limits, not only multiplied ones.
            if !(q.max_multiplier.is_finite() && q.max_multiplier >= 1.0) {
                return Err(invalid(format!("limits.quotas.{name}.max_multiplier"), "must be a number >= 1"));
            }
            rate_limit_policy.set_max_multiplier(name, q.max_multiplier);
            quotas.insert(name.clone(), q);
        }
        let fallback_quotas = quotas.get(&rate_limits.default_tier).copied().unwrap_or(TierQuotas::defaults("free"));
        let limits = LimitsConfig {
            service_account_multiplier: l.service_account_multiplier.unwrap_or(5.0),
            bootstrap_tier,
            quotas,
            fallback_quotas,
        };
        if limits.service_account_multiplier.is_nan() || limits.service_account_multiplier <= 0.0 {
            return Err(invalid("limits.service_account_multiplier", "must be positive"));
        }

        let m = self.mcp;
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
        };
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

        let jwt = match self.jwt {
            None => None,
            Some(j) => {
                if j.keys.is_empty() && j.jwks_file.is_none() && j.jwks_url.is_none() {
                    return Err(invalid("jwt", "needs keys, jwks_file or jwks_url"));
                }
                let max_lifetime_secs = j.max_lifetime_secs.unwrap_or(86_400);
                if max_lifetime_secs == 0 {
                    return Err(invalid("jwt.max_lifetime_secs", "must be at least 1"));
                }
                if let Some(u) = &j.jwks_url {
                    if url::Url::parse(u).map(|u| !matches!(u.scheme(), "http" | "https")).unwrap_or(true) {
                        return Err(invalid("jwt.jwks_url", "must be an http or https URL"));
                    }
                }
                let cfg = JwtConfig {
                    issuer: j.issuer,
                    audience: j.audience,
                    leeway_secs: j.leeway_secs.unwrap_or(30),
                    keys: j
                        .keys
                        .into_iter()
                        .map(|k| JwtKeyConfig { kid: k.kid, pem_file: PathBuf::from(k.pem_file) })
                        .collect(),
                    jwks_file: j.jwks_file.map(PathBuf::from),
                    jwks_url: j.jwks_url,
                    refresh_secs: j.refresh_secs.unwrap_or(300).max(10),
                    max_lifetime_secs,
                };
                // Keys that cannot be read stop the start (and `check-config`), naming the field.
                // The verifier that read them is the server's: one verifier, built once.
                let verifier = crate::jwt::JwtVerifier::new(cfg.clone()).map_err(|e| {
                    let text = e.to_string();
                    let (field, message) = text.split_once(": ").unwrap_or(("jwt", &text));
                    invalid(field, message)
                })?;
                // A token minted by any party that holds a trusted key, for any audience, would
                // otherwise be accepted: production binds tokens to one issuer and audience.
                if environment == Environment::Production
                    && !j.insecure_skip_issuer_audience
                    && (cfg.issuer.is_none() || cfg.audience.is_none())
                {
                    let field = if cfg.issuer.is_none() { "jwt.issuer" } else { "jwt.audience" };
                    return Err(invalid(
                        field,
                        "is required in production (set jwt.issuer and jwt.audience, or \
                         jwt.insecure_skip_issuer_audience: true to accept any)",
                    ));
                }
                Some(std::sync::Arc::new(verifier))
            }
        };

        Ok(Config {
            environment,
            server,
            storage,
            apps,
            organizations,
            users,
            api_keys,
            rate_limits,
            rate_limit_policy: std::sync::Arc::new(rate_limit_policy),
            limits,
            mcp,
            jwt,
        })
    }
}

/// Reads an app's `tls_ca_file` at load, so that a wrong path or a file without a certificate
/// stops the start instead of failing the app's first call.
fn tls_roots(upstream: &AppUpstream, file: String) -> Result<TlsRoots, String> {
    let https = matches!(upstream, AppUpstream::Url(u) if url::Url::parse(u).is_ok_and(|u| u.scheme() == "https"));
    if !https {
        return Err("only applies to https url apps".into());
    }
    let pem = std::fs::read(&file).map_err(|e| format!("`{file}`: {e}"))?;
    match reqwest::Certificate::from_pem_bundle(&pem) {
        Ok(certs) if !certs.is_empty() => Ok(TlsRoots { file: PathBuf::from(file), pem: pem.into() }),
        Ok(_) => Err(format!("`{file}` holds no PEM certificate")),
        Err(e) => Err(format!("`{file}`: {e}")),
    }
}

//! `apps:`: the MCP servers the gateways can bundle (Streamable HTTP, stdio, built in).

use super::{is_id, secret_from_env};
use crate::config::*;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawApp {
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
    #[serde(default)]
    health: RawHealth,
    connection_scope: Option<String>,
    list_as: Option<String>,
    max_user_sessions: Option<usize>,
}

/// `apps[].health`: this app's probe, where it differs from `mcp.app_health`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHealth {
    interval_secs: Option<u64>,
    timeout_ms: Option<u64>,
}

/// A function as the app's catalogue entry shows it before any organisation has connected.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFunction {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    parameters: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTimeouts {
    connect_ms: Option<u64>,
    first_byte_ms: Option<u64>,
    total_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOAuth {
    authorize_url: Option<String>,
    token_url: Option<String>,
    revocation_url: Option<String>,
    client_id: String,
    client_secret_env: Option<String>,
    #[serde(default)]
    scopes: Vec<String>,
    token_exchange: Option<super::token_exchange::RawTokenExchange>,
}

impl RawApp {
    /// The `i`-th app, given the apps before it (its id must be new).
    pub(super) fn build(self, i: usize, earlier: &[std::sync::Arc<AppConfig>]) -> Result<AppConfig, ConfigError> {
        let a = self;
        let f = |name: &str| format!("apps[{i}].{name}");
        if !is_id(&a.id) {
            return Err(invalid(f("id"), "must be 1-64 characters of A-Z a-z 0-9 _ -"));
        }
        if earlier.iter().any(|x| x.id == a.id) {
            return Err(invalid(f("id"), format!("duplicate app id `{}`", a.id)));
        }
        if a.name.trim().is_empty() {
            return Err(invalid(f("name"), "must not be empty"));
        }
        // The app's name and descriptions are shown to people and sent on (the apps list, the
        // console): text they would not see is refused, naming the field.
        for (field, text) in
            [("name", &a.name), ("description", &a.description), ("long_description", &a.long_description)]
        {
            if let Some(hit) = crate::base::hidden_text::strip(text).1.first() {
                return Err(invalid(f(field), format!("must not contain hidden text: {hit}")));
            }
        }
        let upstream = upstream(i, a.url, a.command, a.env, a.builtin)?;
        if let Some(v) = &a.protocol_version {
            check_protocol_version(i, &upstream, v)?;
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
                return Err(invalid(format!("apps[{i}].auth_types[{j}]"), format!("`{t}`: expected api_key or oauth")));
            }
        }
        if a.auth_types.iter().any(|t| t == "oauth") && a.oauth.is_none() {
            return Err(invalid(f("oauth"), "required when auth_types contains oauth"));
        }
        let oauth = a.oauth.map(|o| o.build(i, &upstream)).transpose()?;
        // An app's quota of 0 would refuse every call; the API shows 0 for "no limit".
        if a.rate_limit == Some(0) {
            return Err(invalid(f("rate_limit"), "must be at least 1 (leave it out for no limit)"));
        }
        let functions = functions(i, a.functions)?;
        let timeouts = a.timeouts.build(i)?;
        let health = super::mcp::probe_settings(a.health.interval_secs, a.health.timeout_ms, &f("health"))?;
        let per_user = super::app_connections::per_user(
            i,
            !a.auth_types.is_empty(),
            a.connection_scope,
            a.list_as,
            a.max_user_sessions,
        )?;
        // Two ways of calling as each user: the caller's own connection, or a token exchanged
        // for the caller's own. One app takes one, so a reader knows which credential goes out.
        if per_user.is_some() && oauth.as_ref().is_some_and(|o| o.token_exchange.is_some()) {
            return Err(invalid(
                f("connection_scope"),
                "`user` and oauth.token_exchange both call as each user: choose one",
            ));
        }
        Ok(AppConfig {
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
            oauth,
            functions,
            health,
            per_user,
        })
    }
}

/// The `i`-th app's upstream: exactly one of an http(s) `url`, a `command` (with its `env`), a
/// `builtin` name.
fn upstream(
    i: usize,
    url: Option<String>,
    command: Option<Vec<String>>,
    env: BTreeMap<String, String>,
    builtin: Option<String>,
) -> Result<AppUpstream, ConfigError> {
    let f = |name: &str| format!("apps[{i}].{name}");
    match (url, command, builtin) {
        (Some(url), None, None) => {
            let u = url::Url::parse(&url).map_err(|e| invalid(f("url"), format!("`{url}`: {e}")))?;
            if !matches!(u.scheme(), "http" | "https") {
                return Err(invalid(f("url"), "must be an http or https URL"));
            }
            Ok(AppUpstream::Url(url))
        }
        (None, Some(argv), None) => {
            if argv.is_empty() || argv[0].is_empty() {
                return Err(invalid(f("command"), "must name a program"));
            }
            Ok(AppUpstream::Command { argv, env })
        }
        (None, None, Some(b)) => {
            if b != "time" {
                return Err(invalid(f("builtin"), format!("unknown built-in app `{b}` (known: time)")));
            }
            Ok(AppUpstream::Builtin(b))
        }
        _ => Err(invalid(format!("apps[{i}]"), "needs exactly one of url, command, builtin")),
    }
}

/// An app's `protocol_version`: for url apps only, the stateless revision or a handshake one.
fn check_protocol_version(i: usize, upstream: &AppUpstream, v: &str) -> Result<(), ConfigError> {
    let field = format!("apps[{i}].protocol_version");
    if !matches!(upstream, AppUpstream::Url(_)) {
        return Err(invalid(field, "only applies to url apps"));
    }
    let stateless = v == crate::mcp::protocol::STATELESS;
    if !stateless && !crate::mcp::protocol::VERSIONS.contains(&v) {
        let known = format!("{}, {}", crate::mcp::protocol::STATELESS, crate::mcp::protocol::VERSIONS.join(", "));
        return Err(invalid(field, format!("`{v}`: expected one of {known}")));
    }
    Ok(())
}

impl RawOAuth {
    /// The `i`-th app's OAuth client: its endpoints (both or neither: an app with a url has its
    /// authorization server discovered from it) and its secret, read from the environment.
    fn build(self, i: usize, upstream: &AppUpstream) -> Result<OAuthConfig, ConfigError> {
        let f = |name: &str| format!("apps[{i}].{name}");
        let endpoints = match (self.authorize_url, self.token_url) {
            (None, None) => {
                if !matches!(upstream, AppUpstream::Url(_)) {
                    return Err(invalid(
                        f("oauth.authorize_url"),
                        "required for an app without a url (its authorization server is discovered from its url otherwise)",
                    ));
                }
                None
            }
            (Some(authorize_url), Some(token_url)) => {
                for (name, url) in [("authorize_url", &authorize_url), ("token_url", &token_url)] {
                    if !url::Url::parse(url).is_ok_and(|u| matches!(u.scheme(), "http" | "https")) {
                        return Err(invalid(f(&format!("oauth.{name}")), format!("`{url}` is not an http(s) URL")));
                    }
                }
                Some(OAuthEndpoints { authorize_url, token_url, resource: None, revocation_url: None })
            }
            (Some(_), None) => return Err(invalid(f("oauth.token_url"), "required with authorize_url")),
            (None, Some(_)) => return Err(invalid(f("oauth.authorize_url"), "required with token_url")),
        };
        if let Some(url) = &self.revocation_url {
            if !url::Url::parse(url).is_ok_and(|u| matches!(u.scheme(), "http" | "https")) {
                return Err(invalid(f("oauth.revocation_url"), format!("`{url}` is not an http(s) URL")));
            }
        }
        let client_secret = secret_from_env(|| f("oauth.client_secret_env"), self.client_secret_env.as_deref())?;
        let token_exchange = self.token_exchange.map(|t| t.build(i, upstream, client_secret.is_some())).transpose()?;
        Ok(OAuthConfig {
            endpoints,
            revocation_url: self.revocation_url,
            client_id: self.client_id,
            client_secret,
            scopes: self.scopes,
            token_exchange,
        })
    }
}

/// The `i`-th app's declared functions: named, each name once.
fn functions(i: usize, raw: Vec<RawFunction>) -> Result<Vec<FunctionDecl>, ConfigError> {
    let mut functions = Vec::with_capacity(raw.len());
    for (j, func) in raw.into_iter().enumerate() {
        let field = format!("apps[{i}].functions[{j}].name");
        if func.name.is_empty() || func.name.chars().any(char::is_control) {
            return Err(invalid(field, "must be a non-empty name without control characters"));
        }
        if functions.iter().any(|x: &FunctionDecl| x.name == func.name) {
            return Err(invalid(field, format!("duplicate function `{}`", func.name)));
        }
        functions.push(FunctionDecl { name: func.name, description: func.description, parameters: func.parameters });
    }
    Ok(functions)
}

impl RawTimeouts {
    /// The `i`-th app's time-outs per phase (connect 5 s, first byte 30 s, total 60 s unless set).
    fn build(self, i: usize) -> Result<AppTimeouts, ConfigError> {
        let ms = |v: Option<u64>, d: u64| Duration::from_millis(v.unwrap_or(d));
        let timeouts = AppTimeouts {
            connect: ms(self.connect_ms, 5_000),
            first_byte: ms(self.first_byte_ms, 30_000),
            total: ms(self.total_ms, 60_000),
        };
        if timeouts.connect.is_zero() || timeouts.first_byte.is_zero() || timeouts.total.is_zero() {
            return Err(invalid(format!("apps[{i}].timeouts"), "timeouts must be positive"));
        }
        Ok(timeouts)
    }
}

/// An app's `tls_ca_file`, for https apps only.
fn tls_roots(upstream: &AppUpstream, file: String) -> Result<TlsRoots, String> {
    let https = matches!(upstream, AppUpstream::Url(u) if url::Url::parse(u).is_ok_and(|u| u.scheme() == "https"));
    if !https {
        return Err("only applies to https url apps".into());
    }
    let pem = super::read_ca_pem(&file)?;
    Ok(TlsRoots { file: PathBuf::from(file), pem: pem.into() })
}

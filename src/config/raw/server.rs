//! `server:`: listeners, the public URL, proxies trusted for `X-Forwarded-For`, threads and
//! the bounds of connections and requests.

use crate::config::*;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
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
    /// With `tls`: a second listener that serves plain HTTP beside the TLS one.
    plain_listen: Option<String>,
    /// Says that whatever reaches `plain_listen` has been authenticated already (a load
    /// balancer that checks client certificates itself): needed beside `tls.client_auth:
    /// required`, which the plain listener cannot apply.
    plain_listen_trusted: Option<bool>,
    h2c: Option<bool>,
    http2: Option<bool>,
    tls: Option<RawTls>,
    upgrade_sock: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTls {
    #[serde(default)]
    certificates: Vec<RawCertificate>,
    min_version: Option<String>,
    client_ca_file: Option<String>,
    client_auth: Option<String>,
    reload_check_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCertificate {
    cert_file: Option<String>,
    key_file: Option<String>,
}

impl RawTls {
    fn build(self) -> Result<TlsConfig, ConfigError> {
        if self.certificates.is_empty() {
            return Err(invalid(
                "server.tls.certificates",
                "at least one certificate (cert_file, key_file) is required",
            ));
        }
        let mut certificates = Vec::with_capacity(self.certificates.len());
        for (i, c) in self.certificates.into_iter().enumerate() {
            let field = |f: &str| format!("server.tls.certificates[{i}].{f}");
            let cert_file =
                c.cert_file.filter(|f| !f.is_empty()).ok_or_else(|| invalid(field("cert_file"), "required"))?;
            let key_file =
                c.key_file.filter(|f| !f.is_empty()).ok_or_else(|| invalid(field("key_file"), "required"))?;
            certificates.push(CertificatePaths { cert_file: cert_file.into(), key_file: key_file.into() });
        }
        let min_version = match self.min_version.as_deref() {
            None | Some("1.2") => TlsVersion::Tls12,
            Some("1.3") => TlsVersion::Tls13,
            Some(other) => return Err(invalid("server.tls.min_version", format!("`{other}`: use \"1.2\" or \"1.3\""))),
        };
        let client_auth = match (self.client_ca_file, self.client_auth.as_deref()) {
            (None, None) => ClientAuth::None,
            (None, Some(_)) => return Err(invalid("server.tls.client_auth", "needs server.tls.client_ca_file")),
            (Some(ca), None | Some("required")) => ClientAuth::Required(ca.into()),
            (Some(ca), Some("optional")) => ClientAuth::Optional(ca.into()),
            (Some(_), Some(other)) => {
                return Err(invalid("server.tls.client_auth", format!("`{other}`: use required or optional")))
            }
        };
        let reload_check_ms = self.reload_check_ms.unwrap_or(10_000);
        if reload_check_ms != 0 && reload_check_ms < 100 {
            return Err(invalid("server.tls.reload_check_ms", "must be 0 (on SIGHUP only) or at least 100"));
        }
        Ok(TlsConfig {
            certificates,
            min_version,
            client_auth,
            reload_check: (reload_check_ms > 0).then(|| Duration::from_millis(reload_check_ms)),
        })
    }
}

fn parse_addr(field: &str, value: Option<&str>, default: &str) -> Result<SocketAddr, ConfigError> {
    let v = value.unwrap_or(default);
    v.parse().map_err(|_| invalid(field, format!("`{v}` is not an address like 127.0.0.1:8080")))
}

/// `server.metrics_listen` must not be `server.listen`, nor a port a wildcard address of the
/// other already holds.
fn check_metrics_listen(listen: SocketAddr, metrics_listen: SocketAddr) -> Result<(), ConfigError> {
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
    Ok(())
}

/// `server.trusted_proxies`: CIDRs, or single addresses.
fn trusted_proxies(raw: &[String]) -> Result<Vec<IpNet>, ConfigError> {
    let mut trusted_proxies = Vec::new();
    for (i, p) in raw.iter().enumerate() {
        let net = p
            .parse::<IpNet>()
            .or_else(|_| p.parse::<std::net::IpAddr>().map(IpNet::from))
            .map_err(|_| invalid(format!("server.trusted_proxies[{i}]"), format!("`{p}` is not a CIDR")))?;
        trusted_proxies.push(net);
    }
    Ok(trusted_proxies)
}

/// `server.plain_listen`, plain HTTP beside TLS: an address of its own, only with `server.tls`,
/// and not beside required client certificates unless declared trusted (only a proxy that
/// checks them reaches it).
fn plain_listen(
    raw: Option<&str>,
    trusted: Option<bool>,
    tls: Option<&TlsConfig>,
    listen: SocketAddr,
    metrics_listen: SocketAddr,
) -> Result<Option<SocketAddr>, ConfigError> {
    let plain_listen = match (raw, tls) {
        (None, _) => None,
        (Some(_), None) => {
            return Err(invalid("server.plain_listen", "only with server.tls (server.listen is plain already)"))
        }
        (Some(a), Some(_)) => {
            let addr = parse_addr("server.plain_listen", Some(a), "")?;
            if addr == listen || addr == metrics_listen {
                return Err(invalid("server.plain_listen", "must differ from server.listen and server.metrics_listen"));
            }
            Some(addr)
        }
    };
    let trusted = trusted.unwrap_or(false);
    if trusted && plain_listen.is_none() {
        return Err(invalid("server.plain_listen_trusted", "only with server.plain_listen"));
    }
    let required = tls.is_some_and(|t| matches!(t.client_auth, ClientAuth::Required(_)));
    if required && plain_listen.is_some() && !trusted {
        return Err(invalid(
            "server.plain_listen",
            "server.tls.client_auth: required is not applied on server.plain_listen, which would let every \
             request in without a client certificate: remove server.plain_listen, or set \
             server.plain_listen_trusted: true if only a proxy that checks client certificates can reach it",
        ));
    }
    Ok(plain_listen)
}

impl RawServer {
    pub(super) fn build(self) -> Result<ServerConfig, ConfigError> {
        let s = self;
        let listen = parse_addr("server.listen", s.listen.as_deref(), "0.0.0.0:8080")?;
        let metrics_listen = parse_addr("server.metrics_listen", s.metrics_listen.as_deref(), "127.0.0.1:9090")?;
        check_metrics_listen(listen, metrics_listen)?;
        let public_url = s.public_url.unwrap_or_else(|| format!("http://localhost:{}", listen.port()));
        let parsed =
            url::Url::parse(&public_url).map_err(|e| invalid("server.public_url", format!("`{public_url}`: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(invalid("server.public_url", "must be an http or https URL"));
        }
        let trusted_proxies = trusted_proxies(&s.trusted_proxies)?;
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
        let tls = s.tls.map(RawTls::build).transpose()?;
        let plain_listen =
            plain_listen(s.plain_listen.as_deref(), s.plain_listen_trusted, tls.as_ref(), listen, metrics_listen)?;
        Ok(ServerConfig {
            listen,
            plain_listen,
            tls,
            http2: s.http2.unwrap_or(true),
            h2c: s.h2c.unwrap_or(false),
            upgrade_sock: s.upgrade_sock.filter(|p| !p.is_empty()).map(PathBuf::from),
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
        })
    }
}

//! Where webhook deliveries may go. A webhook URL names a host the server will connect to on a
//! tenant's behalf, so addresses inside the deployment's network are refused: loopback,
//! private (RFC 1918, ULA), link-local (cloud metadata at 169.254.169.254 included), CGNAT,
//! unspecified, multicast and the documentation ranges; in IPv6 also site-local (`fec0::/10`),
//! IPv4-compatible (`::/96`), NAT64 (`64:ff9b::/32`), and the 6to4 (`2002::/16`) and Teredo
//! (`2001::/32`, obfuscated) forms of an IPv4 address that is refused itself. The check runs
//! when a webhook is saved and again at each delivery, on the addresses the name resolves to
//! then, and the delivery connects to exactly the address checked (a name that resolves
//! elsewhere the second time, DNS rebinding, gains nothing). Hosts listed in `webhooks.allowed_hosts` skip the address check
//! (a receiver on the same machine, in tests or behind a sidecar).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// How long a name may take to resolve.
const RESOLVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Why a URL is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum EgressError {
    #[error("must be an absolute http(s) URL: {0}")]
    NotHttp(String),
    /// Not a URL at all: the parser's reason is kept as the cause.
    #[error("must be an absolute http(s) URL")]
    Unparsable(#[source] url::ParseError),
    #[error("must use https (http is allowed only in development or for a host in webhooks.allowed_hosts)")]
    NotHttps,
    #[error("must not carry credentials (user:password@)")]
    Credentials,
    #[error("{host} resolves to {addr}, an address inside the network (loopback, private, link-local or reserved)")]
    Internal { host: String, addr: IpAddr },
    #[error("{0} does not resolve")]
    Unresolved(String),
}

/// The rules a deployment applies.
#[derive(Debug, Clone, Default)]
pub(crate) struct Egress {
    pub allowed_hosts: Vec<String>,
    /// `environment: development`: plain http to any host.
    pub allow_http: bool,
}

/// A URL that passed the checks: where to connect.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub url: url::Url,
    pub host: String,
    /// The address to connect to (checked), or `None` for an allowed host (resolved as usual).
    pub addr: Option<SocketAddr>,
}

/// Whether an address is one a tenant's webhook must not reach.
pub(crate) fn internal(ip: IpAddr) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast()
                || v4.is_documentation()
                || o[0] == 0
                || (o[0] == 100 && (64..128).contains(&o[1]))
                || (o[0] == 192 && o[1] == 0 && o[2] == 0)
                || (o[0] == 198 && (o[1] == 18 || o[1] == 19))
                || o[0] >= 240
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            let v4 = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                // IPv4-compatible (`::a.b.c.d`, deprecated by RFC 4291 and never routed).
                || s[..6] == [0; 6]
                || (s[0] & 0xfe00) == 0xfc00
                || (s[0] & 0xffc0) == 0xfe80
                // Site-local (deprecated by RFC 3879, still routed inside some networks).
                || (s[0] & 0xffc0) == 0xfec0
                || (s[0] == 0x2001 && s[1] == 0x0db8)
                // NAT64, well-known and local-use prefixes: the IPv4 address is anyone's.
                || (s[0] == 0x0064 && s[1] == 0xff9b)
                // 6to4: the IPv4 address of the relay that carries it, in bits 16-47.
                || (s[0] == 0x2002 && internal(IpAddr::V4(v4(s[1], s[2]))))
                // Teredo: the server's IPv4 address in bits 32-63, the client's inverted in
                // bits 96-127.
                || (s[0] == 0x2001
                    && s[1] == 0
                    && (internal(IpAddr::V4(v4(s[2], s[3]))) || internal(IpAddr::V4(v4(!s[6], !s[7])))))
        }
    }
}

impl Egress {
    /// The URL's shape: absolute, http(s), no credentials; https unless allowed.
    pub(crate) fn check_url(&self, raw: &str) -> Result<(url::Url, String), EgressError> {
        let url = url::Url::parse(raw).map_err(EgressError::Unparsable)?;
        let host = match url.host_str() {
            Some(h) if matches!(url.scheme(), "http" | "https") => h.trim_start_matches('[').trim_end_matches(']'),
            _ => return Err(EgressError::NotHttp(raw.chars().take(200).collect())),
        };
        if !url.username().is_empty() || url.password().is_some() {
            return Err(EgressError::Credentials);
        }
        let host = host.to_ascii_lowercase();
        if url.scheme() == "http" && !self.allow_http && !self.allowed(&host) {
            return Err(EgressError::NotHttps);
        }
        Ok((url, host))
    }

    fn allowed(&self, host: &str) -> bool {
        self.allowed_hosts.iter().any(|h| h.eq_ignore_ascii_case(host))
    }

    /// The URL checked and resolved: the first address it resolves to, refused if any address
    /// is internal (unless the host is allowed).
    pub(crate) async fn resolve(&self, raw: &str) -> Result<Target, EgressError> {
        let (url, host) = self.check_url(raw)?;
        if self.allowed(&host) {
            return Ok(Target { url, host, addr: None });
        }
        let port = url.port_or_known_default().unwrap_or(443);
        let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => {
                let lookup = tokio::net::lookup_host((host.as_str(), port));
                match tokio::time::timeout(RESOLVE_TIMEOUT, lookup).await {
                    Ok(Ok(addrs)) => addrs.collect(),
                    _ => return Err(EgressError::Unresolved(host.clone())),
                }
            }
        };
        if let Some(bad) = addrs.iter().find(|a| internal(a.ip())) {
            return Err(EgressError::Internal { host, addr: bad.ip() });
        }
        let addr = *addrs.first().ok_or_else(|| EgressError::Unresolved(host.clone()))?;
        Ok(Target { url, host, addr: Some(addr) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_addresses_are_refused_public_ones_taken() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "224.0.0.1",
        ] {
            assert!(internal(ip.parse().unwrap()), "{ip}");
        }
        // IPv4 inside IPv6: IPv4-compatible, 6to4 and Teredo (client address inverted).
        for ip in [
            "::7f00:1",
            "::a9fe:a9fe",
            "::808:808",
            "fec0::1",
            "feff:ffff::1",
            "2002:7f00:1::1",
            "2002:a00:1::",
            "2002:a9fe:a9fe::1",
            "2002:c0a8:101:1::1",
            // Teredo: server 93.184.216.34, client 127.0.0.1 (0x7f000001 inverted).
            "2001:0:5db8:d822:0:0:80ff:fffe",
            // Teredo: server 10.0.0.1, client 93.184.216.34 inverted.
            "2001:0:a00:1::a247:27dd",
            // Teredo: client 169.254.169.254.
            "2001:0:5db8:d822::5601:5601",
            "64:ff9b:1::a00:1",
        ] {
            assert!(internal(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "93.184.216.34",
            "8.8.8.8",
            "2606:4700::1111",
            // 6to4 of 93.184.216.34, Teredo of server and client 93.184.216.34.
            "2002:5db8:d822::1",
            "2001:0:5db8:d822::a247:27dd",
            "2001:4860::8888",
        ] {
            assert!(!internal(ip.parse().unwrap()), "{ip}");
        }
    }

    #[tokio::test]
    async fn urls_are_checked_before_and_after_resolution() {
        let e = Egress::default();
        assert_eq!(e.check_url("http://example.com/h").unwrap_err(), EgressError::NotHttps);
        assert!(matches!(e.check_url("ftp://example.com").unwrap_err(), EgressError::NotHttp(_)));
        assert_eq!(e.check_url("https://u:p@example.com/").unwrap_err(), EgressError::Credentials);
        for raw in [
            "https://127.0.0.1/h",
            "https://[::1]:8443/",
            "https://169.254.169.254/latest/meta-data",
            "https://localhost/",
        ] {
            assert!(matches!(e.resolve(raw).await.unwrap_err(), EgressError::Internal { .. }), "{raw}");
        }
        let dev = Egress { allowed_hosts: vec!["127.0.0.1".into()], allow_http: false };
        let t = dev.resolve("http://127.0.0.1:9/hook").await.unwrap();
        assert!(t.addr.is_none() && t.host == "127.0.0.1");
    }
}

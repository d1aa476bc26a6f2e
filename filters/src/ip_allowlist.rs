//! The organisation's IP allowlist (spec "IP allowlist"; enterprise `allowed_ips`).
//!
//! The allowlist belongs to the caller's organisation, and the organisation is only known from
//! the credential, yet the chain order is pinned as IP allowlist -> authentication -> rate limit.
//! So this filter resolves the credential itself (through the same [`CredentialResolver`] and
//! [`resolve_credential`] as authentication) and leaves the result in the context: the principal
//! on success, the [`AuthError`](crate::auth::AuthError) otherwise. It never refuses a missing or
//! bad credential; authentication does that with a 401, so a stranger cannot learn whether an
//! organisation restricts addresses.

use crate::auth::{resolve_credential, CredentialResolver};
use crate::{FilterContext, Rejection, RequestFilter, RequestView, RouteClass};
use ipnet::IpNet;
use serde::Deserialize;
use std::net::IpAddr;
use std::sync::Arc;

/// Why an allowlist could not be built; names the offending field and entry.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum IpPolicyError {
    #[error("{field}[{index}]: `{value}` is not an IP address or CIDR network")]
    InvalidNetwork { field: &'static str, index: usize, value: String },
    #[error("whitelist[{index}].rate_limit_multiplier: must be a positive number, got {value}")]
    InvalidMultiplier { index: usize, value: f64 },
}

/// One `POST /account/whitelist` entry: an allowed address that may also raise or lower the
/// rate limits of requests coming from it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IpEntry {
    pub network: IpNet,
    pub rate_limit_multiplier: f64,
}

/// An organisation's allowlist, compiled for lookups: the allowed networks are merged into
/// sorted, disjoint integer ranges (one binary search per request), and the multiplier entries
/// are kept longest-prefix first so the most specific entry wins.
#[derive(Debug, Clone, PartialEq)]
pub struct IpPolicy {
    enforce: bool,
    networks: Vec<IpNet>,
    entries: Vec<IpEntry>,
    v4: Vec<(u32, u32)>,
    v6: Vec<(u128, u128)>,
}

impl IpPolicy {
    /// Builds the policy. `networks` is `ip_whitelist` plus the enterprise `allowed_ips`; each
    /// entry's address is allowed too, since adding an address to the whitelist is how the
    /// spec allows it. That makes an entry as strong as an `ip_whitelist` network, so the API
    /// puts adding and deleting one behind the same MFA gate as the list itself.
    pub fn new(
        enforce: bool,
        networks: impl IntoIterator<Item = IpNet>,
        entries: impl IntoIterator<Item = IpEntry>,
    ) -> Result<IpPolicy, IpPolicyError> {
        let networks: Vec<IpNet> = networks.into_iter().map(canonical_net).collect();
        let mut entries: Vec<IpEntry> =
            entries.into_iter().map(|e| IpEntry { network: canonical_net(e.network), ..e }).collect();
        for (index, e) in entries.iter().enumerate() {
            let m = e.rate_limit_multiplier;
            if !(m.is_finite() && m > 0.0) {
                return Err(IpPolicyError::InvalidMultiplier { index, value: m });
            }
        }
        // Stable sort: among equally specific entries, the first one given wins.
        entries.sort_by_key(|e| std::cmp::Reverse(e.network.prefix_len()));

        let mut v4 = Vec::new();
        let mut v6 = Vec::new();
        for net in networks.iter().chain(entries.iter().map(|e| &e.network)) {
            match net {
                IpNet::V4(n) => v4.push((u32::from(n.network()), u32::from(n.broadcast()))),
                IpNet::V6(n) => v6.push((u128::from(n.network()), u128::from(n.broadcast()))),
            }
        }
        Ok(IpPolicy { enforce, networks, entries, v4: merge(v4), v6: merge(v6) })
    }

    /// Whether refusals happen at all (`enforce_ip_whitelist`).
    pub fn enforce(&self) -> bool {
        self.enforce
    }

    /// The allowed networks as given (without the entries), for reading the settings back.
    pub fn networks(&self) -> &[IpNet] {
        &self.networks
    }

    pub fn entries(&self) -> &[IpEntry] {
        &self.entries
    }

    /// Whether `ip` is on the list, regardless of enforcement. An IPv4-mapped IPv6 address
    /// counts as its IPv4 address, so a dual-stack listener cannot be used to slip past a v4
    /// list.
    pub fn allows(&self, ip: IpAddr) -> bool {
        match ip.to_canonical() {
            IpAddr::V4(a) => in_ranges(&self.v4, u32::from(a)),
            IpAddr::V6(a) => in_ranges(&self.v6, u128::from(a)),
        }
    }

    /// Whether a request from `ip` is refused under this policy (keys without
    /// `bypass_ip_whitelist`).
    pub fn refuses(&self, ip: IpAddr) -> bool {
        self.enforce && !self.allows(ip)
    }

    /// The multiplier of the most specific entry containing `ip`. It applies whether or not the
    /// list is enforced: the organisation asked for that address to get different limits. The
    /// rate limiter caps its product with the caller's own multiplier at the tier's ceiling
    /// ([`crate::rate_limit::RateLimitPolicy::multiplier`]), so entries cannot raise a tier.
    pub fn multiplier_for(&self, ip: IpAddr) -> Option<f64> {
        let ip = ip.to_canonical();
        self.entries.iter().find(|e| e.network.contains(&ip)).map(|e| e.rate_limit_multiplier)
    }
}

/// Whether saving `policy` would refuse the very caller that is saving it, from `ip`. The API
/// refuses such a change rather than lock the organisation out of its own account.
pub fn would_lock_out(policy: &IpPolicy, ip: IpAddr) -> bool {
    policy.refuses(ip)
}

/// The allowlist settings as the API and YAML state them, as strings; [`IpPolicy::try_from`]
/// turns them into a policy or an error that names the field.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IpPolicyConfig {
    #[serde(default)]
    pub enforce_ip_whitelist: bool,
    #[serde(default)]
    pub ip_whitelist: Vec<String>,
    /// Enterprise accounts' allowed ranges.
    #[serde(default)]
    pub allowed_ips: Vec<String>,
    /// `POST /account/whitelist` entries.
    #[serde(default)]
    pub whitelist: Vec<IpEntryConfig>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IpEntryConfig {
    pub ip: String,
    #[serde(default = "one")]
    pub rate_limit_multiplier: f64,
    #[serde(default)]
    pub description: Option<String>,
}

fn one() -> f64 {
    1.0
}

impl TryFrom<&IpPolicyConfig> for IpPolicy {
    type Error = IpPolicyError;

    fn try_from(c: &IpPolicyConfig) -> Result<Self, Self::Error> {
        let mut networks = Vec::with_capacity(c.ip_whitelist.len() + c.allowed_ips.len());
        for (field, list) in [("ip_whitelist", &c.ip_whitelist), ("allowed_ips", &c.allowed_ips)] {
            for (index, value) in list.iter().enumerate() {
                networks.push(parse_net(value).ok_or_else(|| IpPolicyError::InvalidNetwork {
                    field,
                    index,
                    value: value.clone(),
                })?);
            }
        }
        let mut entries = Vec::with_capacity(c.whitelist.len());
        for (index, e) in c.whitelist.iter().enumerate() {
            let network = parse_net(&e.ip).ok_or_else(|| IpPolicyError::InvalidNetwork {
                field: "whitelist",
                index,
                value: e.ip.clone(),
            })?;
            entries.push(IpEntry { network, rate_limit_multiplier: e.rate_limit_multiplier });
        }
        IpPolicy::new(c.enforce_ip_whitelist, networks, entries)
    }
}

/// Accepts a CIDR network or a bare address (a /32 or /128).
pub fn parse_net(s: &str) -> Option<IpNet> {
    let s = s.trim();
    s.parse::<IpNet>().ok().or_else(|| s.parse::<IpAddr>().ok().map(IpNet::from))
}

/// IPv4-mapped IPv6 networks (`::ffff:a.b.c.d/n`, n >= 96) become IPv4 networks, matching how
/// client addresses are canonicalised.
fn canonical_net(net: IpNet) -> IpNet {
    if let IpNet::V6(n) = net {
        if let (Some(v4), true) = (n.addr().to_ipv4_mapped(), n.prefix_len() >= 96) {
            if let Ok(v4net) = ipnet::Ipv4Net::new(v4, n.prefix_len() - 96) {
                return IpNet::V4(v4net.trunc());
            }
        }
    }
    net.trunc()
}

fn merge<T: Ord + Copy + num_like::Succ>(mut ranges: Vec<(T, T)>) -> Vec<(T, T)> {
    ranges.sort_unstable();
    let mut out: Vec<(T, T)> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match out.last_mut() {
            Some(last) if last.1.succ().is_none_or(|next| start <= next) => {
                last.1 = last.1.max(end);
            }
            _ => out.push((start, end)),
        }
    }
    out
}

fn in_ranges<T: Ord + Copy>(ranges: &[(T, T)], x: T) -> bool {
    let i = ranges.partition_point(|r| r.0 <= x);
    i > 0 && x <= ranges[i - 1].1
}

mod num_like {
    /// The next integer, for merging adjacent ranges.
    pub trait Succ: Sized {
        fn succ(self) -> Option<Self>;
    }
    impl Succ for u32 {
        fn succ(self) -> Option<u32> {
            self.checked_add(1)
        }
    }
    impl Succ for u128 {
        fn succ(self) -> Option<u128> {
            self.checked_add(1)
        }
    }
}

/// Where the allowlists live: the server's store, per organisation.
pub trait IpPolicySource: Send + Sync {
    /// The organisation's compiled policy; `None` when it has none (everything allowed).
    /// Called once per request, so implementations hand out a cached `Arc`, rebuilt when the
    /// settings change.
    fn policy(&self, org_id: &str) -> Option<Arc<IpPolicy>>;

    /// Whether the organisation refuses requests from `ip` ([`IpPolicy::refuses`] of its
    /// policy): the check for callers that hold no key (so no `bypass_ip_whitelist`), such as
    /// a user signing in to the identity service or an OAuth grant being used.
    fn refuses_address(&self, org_id: &str, ip: IpAddr) -> bool {
        self.policy(org_id).is_some_and(|p| p.refuses(ip))
    }
}

/// The allowlist filter: 403 `IP_NOT_ALLOWED` when the caller's organisation enforces a list
/// that the client address is not on, unless the key has `bypass_ip_whitelist`.
pub struct IpAllowlist {
    resolver: Arc<dyn CredentialResolver>,
    policies: Arc<dyn IpPolicySource>,
}

impl IpAllowlist {
    pub fn new(resolver: Arc<dyn CredentialResolver>, policies: Arc<dyn IpPolicySource>) -> Self {
        IpAllowlist { resolver, policies }
    }
}

impl RequestFilter for IpAllowlist {
    fn name(&self) -> &'static str {
        "ip_allowlist"
    }

    /// Resolves the credential (leaving the principal or the error in `ctx` for
    /// authentication), records the matching entry's rate-limit multiplier, and refuses an
    /// address the organisation does not allow. Passes when there is no valid credential.
    fn filter(&self, req: &RequestView<'_>, ctx: &mut FilterContext) -> Result<(), Rejection> {
        if req.route == RouteClass::Public {
            return Ok(());
        }
        if ctx.principal.is_none() && ctx.credential_error.is_none() {
            match resolve_credential(self.resolver.as_ref(), req) {
                Ok(p) => ctx.principal = p,
                Err(e) => ctx.credential_error = Some(e),
            }
        }
        let Some(principal) = ctx.principal.as_deref() else {
            return Ok(());
        };
        let Some(policy) = self.policies.policy(&principal.org_id) else {
            return Ok(());
        };
        ctx.ip_rate_limit_multiplier = policy.multiplier_for(req.client_ip);
        if !principal.bypass_ip_whitelist && policy.refuses(req.client_ip) {
            return Err(Rejection::forbidden(
                "IP_NOT_ALLOWED",
                "requests from this address are not allowed by the organisation's IP allowlist",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{principal, request, FakePolicies, FakeResolver};
    use crate::RouteClass;

    fn net(s: &str) -> IpNet {
        parse_net(s).unwrap()
    }
    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn refuses_address_is_the_policy_of_the_organisation_or_nothing() {
        let enforced = FakePolicies::with("org_a", IpPolicy::new(true, [net("203.0.113.0/24")], []).unwrap());
        assert!(enforced.refuses_address("org_a", ip("127.0.0.1")));
        assert!(!enforced.refuses_address("org_a", ip("203.0.113.9")));
        assert!(!enforced.refuses_address("org_b", ip("127.0.0.1")), "no policy: everything allowed");
        let open = FakePolicies::with("org_a", IpPolicy::new(false, [net("203.0.113.0/24")], []).unwrap());
        assert!(!open.refuses_address("org_a", ip("127.0.0.1")), "not enforced");
    }

    #[test]
    fn ranges_merge_and_match_at_the_edges() {
        let p =
            IpPolicy::new(true, [net("10.0.0.0/24"), net("10.0.1.0/24"), net("192.168.1.7"), net("2001:db8::/32")], [])
                .unwrap();
        assert_eq!(p.v4.len(), 2, "adjacent /24s merge: {:?}", p.v4);
        for ok in ["10.0.0.0", "10.0.1.255", "192.168.1.7", "2001:db8::1", "::ffff:10.0.0.9"] {
            assert!(p.allows(ip(ok)), "{ok}");
        }
        for no in ["9.255.255.255", "10.0.2.0", "192.168.1.8", "2001:db9::1", "::1"] {
            assert!(!p.allows(ip(no)), "{no}");
        }
    }

    #[test]
    fn most_specific_entry_gives_the_multiplier_and_entries_are_allowed() {
        let p = IpPolicy::new(
            true,
            [],
            [
                IpEntry { network: net("10.0.0.0/8"), rate_limit_multiplier: 2.0 },
                IpEntry { network: net("10.1.2.3"), rate_limit_multiplier: 10.0 },
            ],
        )
        .unwrap();
        assert_eq!(p.multiplier_for(ip("10.1.2.3")), Some(10.0));
        assert_eq!(p.multiplier_for(ip("10.9.9.9")), Some(2.0));
        assert_eq!(p.multiplier_for(ip("11.0.0.1")), None);
        assert!(p.allows(ip("10.200.0.1")));
    }

    #[test]
    fn config_errors_name_the_field() {
        let c = IpPolicyConfig {
            enforce_ip_whitelist: true,
            ip_whitelist: vec!["10.0.0.0/8".into()],
            allowed_ips: vec!["1.2.3.4".into(), "nope".into()],
            whitelist: vec![],
        };
        let e = IpPolicy::try_from(&c).unwrap_err();
        assert_eq!(e.to_string(), "allowed_ips[1]: `nope` is not an IP address or CIDR network");
        let c = IpPolicyConfig {
            whitelist: vec![IpEntryConfig { ip: "1.2.3.4".into(), rate_limit_multiplier: 0.0, description: None }],
            ..Default::default()
        };
        assert!(matches!(IpPolicy::try_from(&c), Err(IpPolicyError::InvalidMultiplier { index: 0, .. })));
    }

    #[test]
    fn lock_out_check() {
        let p = IpPolicy::new(true, [net("10.0.0.0/8")], []).unwrap();
        assert!(would_lock_out(&p, ip("192.0.2.1")));
        assert!(!would_lock_out(&p, ip("10.0.0.1")));
        let off = IpPolicy::new(false, [net("10.0.0.0/8")], []).unwrap();
        assert!(!would_lock_out(&off, ip("192.0.2.1")));
        let empty = IpPolicy::new(true, [], []).unwrap();
        assert!(would_lock_out(&empty, ip("10.0.0.1")), "an enforced empty list refuses everyone");
    }

    fn filter_with(policy: IpPolicy) -> IpAllowlist {
        let resolver = FakeResolver::with([
            ("ag_good", principal("k1", "org1")),
            ("ag_bypass", {
                let mut p = principal("k2", "org1");
                p.bypass_ip_whitelist = true;
                p
            }),
        ]);
        IpAllowlist::new(Arc::new(resolver), Arc::new(FakePolicies::with("org1", policy)))
    }

    #[test]
    fn refuses_unlisted_address_and_keeps_the_principal() {
        let policy = IpPolicy::new(
            true,
            [net("10.0.0.0/8")],
            [IpEntry { network: net("10.0.0.1"), rate_limit_multiplier: 3.0 }],
        )
        .unwrap();
        let f = filter_with(policy);
        let headers = crate::testing::bearer("ag_good");

        let mut ctx = FilterContext::default();
        let r = f.filter(&request(&headers, "192.0.2.1", RouteClass::Management), &mut ctx);
        let e = r.unwrap_err();
        assert_eq!((e.status, e.code), (403, "IP_NOT_ALLOWED"));
        assert_eq!(ctx.principal.as_ref().unwrap().key_id, "k1");

        let mut ctx = FilterContext::default();
        f.filter(&request(&headers, "10.0.0.1", RouteClass::Management), &mut ctx).unwrap();
        assert_eq!(ctx.ip_rate_limit_multiplier, Some(3.0));
    }

    #[test]
    fn bypass_key_and_bad_credentials_pass() {
        let f = filter_with(IpPolicy::new(true, [net("10.0.0.0/8")], []).unwrap());
        let bypass = crate::testing::bearer("ag_bypass");
        let mut ctx = FilterContext::default();
        f.filter(&request(&bypass, "192.0.2.1", RouteClass::Management), &mut ctx).unwrap();

        let bad = crate::testing::bearer("ag_unknown");
        let mut ctx = FilterContext::default();
        f.filter(&request(&bad, "192.0.2.1", RouteClass::Management), &mut ctx).unwrap();
        assert!(ctx.principal.is_none());
        assert_eq!(ctx.credential_error, Some(crate::auth::AuthError::Unknown));

        let none = http::HeaderMap::new();
        let mut ctx = FilterContext::default();
        f.filter(&request(&none, "192.0.2.1", RouteClass::Management), &mut ctx).unwrap();
        assert_eq!(ctx.credential_error, Some(crate::auth::AuthError::Missing));
    }
}

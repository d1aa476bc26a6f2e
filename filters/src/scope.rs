//! Scopes and roles (spec "Scopes", DESIGN.md Decision 8), as a bit set so that a scope check on
//! the hot path is one AND.

use std::fmt;

/// One grantable permission.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum Scope {
    GatewaysRead = 1 << 0,
    GatewaysWrite = 1 << 1,
    GatewaysDelete = 1 << 2,
    AppsRead = 1 << 3,
    AppsWrite = 1 << 4,
    LogsRead = 1 << 5,
    SessionsManage = 1 << 6,
    TeamManage = 1 << 7,
    BillingManage = 1 << 8,
    /// Account administration: webhooks, API keys, service accounts, security, alerts.
    Admin = 1 << 9,
    /// Connecting an app for oneself (an app connected by each user): every role holds it,
    /// and `apps:write` allows it too.
    AppsConnectSelf = 1 << 10,
}

impl Scope {
    pub const ALL: [Scope; 11] = [
        Scope::GatewaysRead,
        Scope::GatewaysWrite,
        Scope::GatewaysDelete,
        Scope::AppsRead,
        Scope::AppsWrite,
        Scope::LogsRead,
        Scope::SessionsManage,
        Scope::TeamManage,
        Scope::BillingManage,
        Scope::Admin,
        Scope::AppsConnectSelf,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::GatewaysRead => "gateways:read",
            Scope::GatewaysWrite => "gateways:write",
            Scope::GatewaysDelete => "gateways:delete",
            Scope::AppsRead => "apps:read",
            Scope::AppsWrite => "apps:write",
            Scope::LogsRead => "logs:read",
            Scope::SessionsManage => "sessions:manage",
            Scope::TeamManage => "team:manage",
            Scope::BillingManage => "billing:manage",
            Scope::Admin => "admin",
            Scope::AppsConnectSelf => "apps:connect_self",
        }
    }
}

/// A set of scopes. `*` and `admin` grant everything; `gateways:*` grants the three gateway scopes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ScopeSet(u16);

impl ScopeSet {
    pub const EMPTY: ScopeSet = ScopeSet(0);
    pub const ALL: ScopeSet = ScopeSet((1 << 11) - 1);

    pub const fn bits(self) -> u16 {
        self.0
    }

    pub fn contains(self, scope: Scope) -> bool {
        self.0 & scope as u16 != 0
    }

    /// Whether a route needing `scope` admits this set: `contains`, except that `apps:write`
    /// (which connects the organisation's apps) also allows connecting one's own.
    pub fn allows(self, scope: Scope) -> bool {
        self.contains(scope) || (scope == Scope::AppsConnectSelf && self.contains(Scope::AppsWrite))
    }

    pub fn insert(&mut self, scope: Scope) {
        self.0 |= scope as u16;
    }

    pub fn intersect(self, other: ScopeSet) -> ScopeSet {
        ScopeSet(self.0 & other.0)
    }

    pub fn is_subset_of(self, other: ScopeSet) -> bool {
        self.0 & !other.0 == 0
    }

    /// Parses one scope name as the API accepts it; `None` for an unknown name.
    pub fn parse_one(name: &str) -> Option<ScopeSet> {
        let bits = match name {
            "*" | "admin" => return Some(ScopeSet::ALL),
            "gateways:*" => Scope::GatewaysRead as u16 | Scope::GatewaysWrite as u16 | Scope::GatewaysDelete as u16,
            "apps:*" => Scope::AppsRead as u16 | Scope::AppsWrite as u16 | Scope::AppsConnectSelf as u16,
            other => *Scope::ALL.iter().find(|s| s.as_str() == other)? as u16,
        };
        Some(ScopeSet(bits))
    }

    /// Parses a list of names; the error is the first unknown name.
    pub fn parse<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<ScopeSet, String> {
        let mut set = ScopeSet::EMPTY;
        for name in names {
            match ScopeSet::parse_one(name) {
                Some(s) => set.0 |= s.0,
                None => return Err(name.to_string()),
            }
        }
        Ok(set)
    }

    /// The names to show a caller: `*` for the full set, otherwise each scope.
    pub fn names(self) -> Vec<&'static str> {
        if self == ScopeSet::ALL {
            return vec!["*"];
        }
        self.each_name()
    }

    /// Each scope's own name, never `*` (an OAuth token's `scope`, which lists them).
    pub fn each_name(self) -> Vec<&'static str> {
        Scope::ALL.iter().filter(|s| self.contains(**s)).map(|s| s.as_str()).collect()
    }
}

impl fmt::Debug for ScopeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

/// Team roles. A key's effective scopes are its own scopes within its user's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    Owner,
    Admin,
    Developer,
    Viewer,
}

impl Role {
    pub fn parse(name: &str) -> Option<Role> {
        match name.to_ascii_lowercase().as_str() {
            "owner" => Some(Role::Owner),
            "admin" => Some(Role::Admin),
            "developer" => Some(Role::Developer),
            "viewer" => Some(Role::Viewer),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Owner => "owner",
            Role::Admin => "admin",
            Role::Developer => "developer",
            Role::Viewer => "viewer",
        }
    }

    /// What the role allows at most (Decision 8).
    pub fn allowed(self) -> ScopeSet {
        use Scope::*;
        let bits = |scopes: &[Scope]| ScopeSet(scopes.iter().fold(0, |acc, s| acc | *s as u16));
        match self {
            Role::Owner => ScopeSet::ALL,
            Role::Admin => ScopeSet(ScopeSet::ALL.0 & !(TeamManage as u16) & !(BillingManage as u16)),
            Role::Developer => bits(&[GatewaysRead, GatewaysWrite, AppsRead, AppsWrite, LogsRead, AppsConnectSelf]),
            Role::Viewer => bits(&[GatewaysRead, AppsRead, LogsRead, AppsConnectSelf]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inheritance_and_roles() {
        let gw = ScopeSet::parse(["gateways:*"]).unwrap();
        assert!(gw.contains(Scope::GatewaysDelete));
        assert!(!gw.contains(Scope::AppsRead));
        assert_eq!(ScopeSet::parse(["admin"]).unwrap(), ScopeSet::ALL);
        assert_eq!(ScopeSet::parse(["nope"]), Err("nope".to_string()));
        let viewer = ScopeSet::ALL.intersect(Role::Viewer.allowed());
        assert!(viewer.contains(Scope::LogsRead));
        assert!(!viewer.contains(Scope::GatewaysWrite));
        assert!(!Role::Admin.allowed().contains(Scope::BillingManage));
        assert!(Role::Admin.allowed().contains(Scope::Admin));
        assert_eq!(ScopeSet::ALL.names(), vec!["*"]);
        // Every role connects itself; `apps:write` allows it, `apps:read` does not.
        for role in [Role::Owner, Role::Admin, Role::Developer, Role::Viewer] {
            assert!(role.allowed().contains(Scope::AppsConnectSelf), "{role:?}");
        }
        let write = ScopeSet::parse(["apps:write"]).unwrap();
        assert!(write.allows(Scope::AppsConnectSelf) && !write.contains(Scope::AppsConnectSelf));
        assert!(!ScopeSet::parse(["apps:read"]).unwrap().allows(Scope::AppsConnectSelf));
        assert_eq!(ScopeSet::parse(["apps:connect_self"]).unwrap().names(), vec!["apps:connect_self"]);
    }
}

//! Who may act on which key (security issue: privilege boundaries). Rotating, revoking or
//! minting a key hands out or takes away rights, so a caller may do it only for keys whose rights
//! are within its own:
//!
//! - the key's effective scopes (its scopes within its owner's role *today*) are a subset of the
//!   caller's effective scopes, and
//! - the key is the caller's own (same user, or the same service account), or the caller's role
//!   dominates the key owner's role: strictly for another user's key (two Admins cannot take
//!   over each other's keys), at least equal for a service account's key (a service account is
//!   bounded by its creator's role, and an Admin may manage the keys of an Admin's account but
//!   never of an account an Owner made).
//!
//! A service-account key acts as the service account: it is never "the same user" as its
//! creator, and a call made with it manages only that account's own keys.
//!
//! A role is rights too: making an Owner or an Admin, or raising a member to one, hands that
//! role's administration (keys, service accounts, account security; an Owner's team too) to
//! whoever signs in as the member, so the caller's credential must hold every scope the role
//! allows ([`may_grant_role`]): a narrow key with `team:manage` cannot make an Owner whose `*`
//! key then reads what the narrow key could not.

use crate::data::model::{ApiKey, ServiceAccount};
use crate::data::state::State;
use crate::edge::error::ApiError;
use toolgate_filters::{CredentialKind, Principal, Role, Scope, ScopeSet};

/// The scope `held` lacks of everything `role` allows (`admin` first, when the role allows
/// it), or `None` when it holds them all: what a credential needs to set a password or MFA for
/// its own role, or to hand a role to a member.
pub(crate) fn missing_for_role(held: ScopeSet, role: Role) -> Option<Scope> {
    let allowed = role.allowed();
    if allowed.contains(Scope::Admin) && !held.contains(Scope::Admin) {
        return Some(Scope::Admin);
    }
    // Connecting oneself to an app signs nothing in: a credential holding the rest of the role
    // holds the whole of it.
    Scope::ALL.into_iter().find(|s| allowed.contains(*s) && !held.contains(*s) && *s != Scope::AppsConnectSelf)
}

/// `Ok` when `who` may make a member of `role` or set a member's role to it: for an Owner or
/// an Admin, its credential holds every scope the role allows (an Owner's `*` or `admin` key,
/// or a web session); a 403 `INSUFFICIENT_SCOPE` naming a missing scope otherwise. A Developer
/// or a Viewer administers nothing, and `team:manage` is enough to give those roles.
pub(crate) fn may_grant_role(who: &Principal, role: Role) -> Result<(), ApiError> {
    if !matches!(role, Role::Owner | Role::Admin) {
        return Ok(());
    }
    match missing_for_role(who.scopes, role) {
        Some(scope) => Err(ApiError::InsufficientScope(scope.as_str())),
        None => Ok(()),
    }
}

/// Roles from least to most powerful (Decision 8).
fn rank(role: Role) -> u8 {
    match role {
        Role::Viewer => 0,
        Role::Developer => 1,
        Role::Admin => 2,
        Role::Owner => 3,
    }
}

/// The holder of a key, as far as authority goes.
#[derive(Debug, PartialEq, Eq)]
enum Holder<'a> {
    User(&'a str),
    ServiceAccount(&'a str),
}

/// What a key (existing or about to be minted) can do.
pub(crate) struct Rights<'a> {
    holder: Holder<'a>,
    /// The owner's role: the user's, or the creator's for a service account.
    role: Role,
    scopes: ScopeSet,
}

fn role_of(state: &State, user_id: &str) -> Role {
    // A user that no longer exists bounds nothing: treat it as the strongest role, so only its
    // own holder (none) or nobody can act on the key.
    state.user(user_id).and_then(|u| Role::parse(&u.role)).unwrap_or(Role::Owner)
}

impl<'a> Rights<'a> {
    /// The rights of a stored key.
    pub(crate) fn of_key(state: &State, key: &'a ApiKey) -> Rights<'a> {
        let role = role_of(state, &key.user_id);
        let own = ScopeSet::parse(key.scopes.iter().map(String::as_str)).unwrap_or(ScopeSet::ALL);
        let holder = match &key.service_account_id {
            Some(a) => Holder::ServiceAccount(a),
            None => Holder::User(&key.user_id),
        };
        Rights { holder, role, scopes: own.intersect(role.allowed()) }
    }

    /// The rights a new key of service account `a` would have.
    pub(crate) fn of_service_account(state: &State, a: &'a ServiceAccount) -> Rights<'a> {
        let role = role_of(state, &a.created_by);
        let own = ScopeSet::parse(a.scopes.iter().map(String::as_str)).unwrap_or(ScopeSet::ALL);
        Rights { holder: Holder::ServiceAccount(&a.id), role, scopes: own.intersect(role.allowed()) }
    }

    fn held_by(&self, who: &Principal) -> bool {
        let caller = match &who.credential {
            CredentialKind::ServiceAccount { account_id } => Holder::ServiceAccount(account_id),
            _ => Holder::User(&who.user_id),
        };
        caller == self.holder
    }

    /// The key belongs to the caller and can do strictly less: revoking it is the caller
    /// defending itself (a leaked narrow key), which the MFA gate must never block.
    pub(crate) fn strictly_weaker_own(&self, who: &Principal) -> bool {
        self.held_by(who) && self.scopes.is_subset_of(who.scopes) && self.scopes != who.scopes
    }

    /// `Ok` when `who` may rotate, revoke or mint a key with these rights; a 403 otherwise.
    pub(crate) fn check(&self, who: &Principal) -> Result<(), ApiError> {
        if !self.scopes.is_subset_of(who.scopes) {
            return Err(ApiError::Forbidden("this key holds rights that your credential does not".into()));
        }
        let caller_is_account = matches!(who.credential, CredentialKind::ServiceAccount { .. });
        let allowed = self.held_by(who)
            || (!caller_is_account
                && match self.holder {
                    Holder::User(_) => rank(who.role) > rank(self.role),
                    Holder::ServiceAccount(_) => rank(who.role) >= rank(self.role),
                });
        if !allowed {
            return Err(ApiError::Forbidden(format!(
                "this key belongs to a {} and your role ({}) does not dominate it",
                self.role.as_str(),
                who.role.as_str()
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principal(user: &str, role: Role, scopes: ScopeSet, credential: CredentialKind) -> Principal {
        Principal {
            key_id: "key_caller".into(),
            user_id: user.into(),
            org_id: "org".into(),
            role,
            credential,
            scopes: scopes.intersect(role.allowed()),
            tier: "free".into(),
            rate_limit_multiplier: 1.0,
            bypass_ip_whitelist: false,
            expires_at: None,
        }
    }

    fn rights(holder: Holder<'static>, role: Role, scopes: &[&str]) -> Rights<'static> {
        Rights { holder, role, scopes: ScopeSet::parse(scopes.iter().copied()).unwrap().intersect(role.allowed()) }
    }

    #[test]
    fn another_users_key_needs_a_dominating_role_and_contained_scopes() {
        let admin = principal("usr_admin", Role::Admin, ScopeSet::ALL, CredentialKind::ApiKey);
        let owner = principal("usr_owner", Role::Owner, ScopeSet::ALL, CredentialKind::ApiKey);
        let owners_key = rights(Holder::User("usr_owner"), Role::Owner, &["*"]);
        assert!(owners_key.check(&admin).is_err(), "an Admin rotates the Owner's key");
        assert!(owners_key.check(&owner).is_ok(), "the Owner's own key");
        let owners_narrow_key = rights(Holder::User("usr_owner"), Role::Owner, &["gateways:read"]);
        assert!(owners_narrow_key.check(&admin).is_err(), "narrow, but the Owner's");
        let devs_key = rights(Holder::User("usr_dev"), Role::Developer, &["gateways:*"]);
        assert!(devs_key.check(&admin).is_ok(), "an Admin over a Developer");
        let other_admin = rights(Holder::User("usr_admin2"), Role::Admin, &["gateways:read"]);
        assert!(other_admin.check(&admin).is_err(), "peers cannot act on each other's keys");
        let narrow_admin =
            principal("usr_admin", Role::Admin, ScopeSet::parse(["admin"]).unwrap(), CredentialKind::ApiKey);
        let wide_dev = rights(Holder::User("usr_dev"), Role::Developer, &["gateways:*", "apps:*", "logs:read"]);
        assert!(wide_dev.check(&narrow_admin).is_ok());
        let reader =
            principal("usr_dev", Role::Developer, ScopeSet::parse(["gateways:read"]).unwrap(), CredentialKind::ApiKey);
        assert!(wide_dev.check(&reader).is_err(), "scopes must be contained, even for one's own key");
    }

    #[test]
    fn service_account_keys_act_as_the_account() {
        let admin = principal("usr_admin", Role::Admin, ScopeSet::ALL, CredentialKind::ApiKey);
        let owner = principal("usr_owner", Role::Owner, ScopeSet::ALL, CredentialKind::ApiKey);
        let owners_account = rights(Holder::ServiceAccount("sa_1"), Role::Owner, &["*"]);
        assert!(owners_account.check(&admin).is_err(), "an Admin mints a key of the Owner's account");
        assert!(owners_account.check(&owner).is_ok());
        let admins_account = rights(Holder::ServiceAccount("sa_2"), Role::Admin, &["gateways:read"]);
        assert!(admins_account.check(&admin).is_ok(), "an Admin manages an Admin-made account");
        // A key of a service account is not its creator.
        let as_account = principal(
            "usr_owner",
            Role::Owner,
            ScopeSet::ALL,
            CredentialKind::ServiceAccount { account_id: "sa_1".into() },
        );
        let owners_own = rights(Holder::User("usr_owner"), Role::Owner, &["gateways:read"]);
        assert!(owners_own.check(&as_account).is_err(), "an account's key acts on its creator's keys");
        assert!(owners_account.check(&as_account).is_ok(), "its own account's keys");
    }

    #[test]
    fn owners_and_admins_are_made_only_with_the_whole_role() {
        let scoped = |names: &[&str]| {
            principal("usr_owner", Role::Owner, ScopeSet::parse(names.iter().copied()).unwrap(), CredentialKind::ApiKey)
        };
        let team = scoped(&["team:manage"]);
        let all_but_admin = scoped(&["gateways:*", "apps:*", "logs:read", "sessions:manage", "team:manage"]);
        for role in [Role::Owner, Role::Admin] {
            for who in [&team, &all_but_admin] {
                let e = may_grant_role(who, role).expect_err("a narrow key gives a role that administers");
                assert_eq!(e.code(), "INSUFFICIENT_SCOPE");
            }
            assert!(may_grant_role(&scoped(&["*"]), role).is_ok());
        }
        for role in [Role::Developer, Role::Viewer] {
            assert!(may_grant_role(&team, role).is_ok(), "{role:?} administers nothing");
        }
        assert_eq!(missing_for_role(team.scopes, Role::Owner), Some(Scope::Admin));
        let dev_reader = ScopeSet::parse(["gateways:read"]).unwrap();
        assert_eq!(missing_for_role(dev_reader, Role::Developer), Some(Scope::GatewaysWrite));
    }

    #[test]
    fn strictly_weaker_own_keys() {
        let owner = principal("usr_owner", Role::Owner, ScopeSet::ALL, CredentialKind::ApiKey);
        assert!(rights(Holder::User("usr_owner"), Role::Owner, &["gateways:read"]).strictly_weaker_own(&owner));
        assert!(!rights(Holder::User("usr_owner"), Role::Owner, &["*"]).strictly_weaker_own(&owner));
        assert!(!rights(Holder::User("usr_other"), Role::Viewer, &["gateways:read"]).strictly_weaker_own(&owner));
    }
}

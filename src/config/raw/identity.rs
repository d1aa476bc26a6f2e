//! `organizations:`, `users:` and `api_keys:` declared in YAML (applied to the store at start).

use super::is_id;
use crate::config::*;
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOrg {
    id: String,
    name: String,
    tier: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawUser {
    id: String,
    email: String,
    #[serde(default)]
    name: String,
    role: String,
    organization: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKey {
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

impl RawOrg {
    pub(super) fn build(
        self,
        i: usize,
        tiers: &BTreeMap<String, toolgate_filters::rate_limit::TierLimits>,
    ) -> Result<OrgConfig, ConfigError> {
        let o = self;
        if !is_id(&o.id) {
            return Err(invalid(format!("organizations[{i}].id"), "must be 1-64 characters of A-Z a-z 0-9 _ -"));
        }
        let tier = o.tier.unwrap_or_else(|| "free".into());
        if !tiers.contains_key(&tier) {
            return Err(invalid(format!("organizations[{i}].tier"), format!("unknown tier `{tier}`")));
        }
        Ok(OrgConfig { id: o.id, name: o.name, tier })
    }
}

impl RawUser {
    pub(super) fn build(self, i: usize, organizations: &[OrgConfig]) -> Result<UserConfig, ConfigError> {
        let u = self;
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
        Ok(UserConfig { id: u.id, email: u.email, name: u.name, role, organization: u.organization })
    }
}

impl RawKey {
    pub(super) fn build(self, i: usize, users: &[UserConfig]) -> Result<KeyConfig, ConfigError> {
        let k = self;
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
        Ok(KeyConfig {
            id: k.id,
            name: k.name,
            user: k.user,
            sha256: hash,
            scopes: k.scopes,
            expires_at,
            bypass_ip_whitelist: k.bypass_ip_whitelist,
        })
    }
}

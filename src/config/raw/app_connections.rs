//! `apps[].connection_scope`, `list_as` and `max_user_sessions`: an app whose connections are
//! each member's own (docs/identity.md, "Per-user connections").

use super::is_id;
use crate::config::*;

/// Whose view of a per-user app the gateway's catalogue, pins and lists are made with: the
/// tools are listed once per gateway, not once per caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListAs {
    /// The organisation's own connection of the app.
    Organization,
    /// A service account's connection (its id).
    ServiceAccount(String),
}

/// How a `connection_scope: user` app is called: with each caller's own connection, on an
/// upstream session per caller and app, at most `max_user_sessions` of them at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PerUserConnections {
    pub list_as: ListAs,
    /// Upstreams (each with its MCP session) kept at once for this app, one per caller; the
    /// least recently used idle one is closed to make room for another.
    pub max_user_sessions: usize,
}

/// At most this many callers' upstreams per app, unless the app says otherwise.
const DEFAULT_MAX_USER_SESSIONS: usize = 1000;
/// A bound the operator may not exceed: each upstream may hold a connection and a stream.
const MOST_USER_SESSIONS: usize = 100_000;

/// The `i`-th app's per-user settings: `None` for `connection_scope: organization` (the
/// default), which takes neither `list_as` nor `max_user_sessions`.
pub(super) fn per_user(
    i: usize,
    needs_credentials: bool,
    scope: Option<String>,
    list_as: Option<String>,
    max_user_sessions: Option<usize>,
) -> Result<Option<PerUserConnections>, ConfigError> {
    let f = |name: &str| format!("apps[{i}].{name}");
    match scope.as_deref().unwrap_or("organization") {
        "organization" => {
            if list_as.is_some() {
                return Err(invalid(f("list_as"), "only applies to connection_scope: user"));
            }
            if max_user_sessions.is_some() {
                return Err(invalid(f("max_user_sessions"), "only applies to connection_scope: user"));
            }
            Ok(None)
        }
        "user" => {
            if !needs_credentials {
                return Err(invalid(
                    f("connection_scope"),
                    "`user` needs auth_types: an app without credentials has nothing to connect per user",
                ));
            }
            let list_as = match list_as.as_deref().unwrap_or("organization") {
                "organization" => ListAs::Organization,
                id if id.starts_with("sa_") && is_id(id) => ListAs::ServiceAccount(id.to_string()),
                other => {
                    return Err(invalid(
                        f("list_as"),
                        format!("`{other}`: expected organization or a service account's id (sa_...)"),
                    ))
                }
            };
            let max_user_sessions = max_user_sessions.unwrap_or(DEFAULT_MAX_USER_SESSIONS);
            if !(1..=MOST_USER_SESSIONS).contains(&max_user_sessions) {
                return Err(invalid(f("max_user_sessions"), format!("must be 1 to {MOST_USER_SESSIONS}")));
            }
            Ok(Some(PerUserConnections { list_as, max_user_sessions }))
        }
        other => Err(invalid(f("connection_scope"), format!("`{other}`: expected organization or user"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_user_settings_are_checked_naming_the_field() {
        assert_eq!(per_user(0, true, None, None, None).unwrap(), None);
        let p = per_user(0, true, Some("user".into()), Some("sa_x1".into()), Some(5)).unwrap().unwrap();
        assert_eq!(p, PerUserConnections { list_as: ListAs::ServiceAccount("sa_x1".into()), max_user_sessions: 5 });
        let d = per_user(0, true, Some("user".into()), None, None).unwrap().unwrap();
        assert_eq!((d.list_as, d.max_user_sessions), (ListAs::Organization, DEFAULT_MAX_USER_SESSIONS));
        let refused = |e: ConfigError, field: &str| assert!(e.to_string().contains(field), "{e}");
        refused(per_user(1, false, Some("user".into()), None, None).unwrap_err(), "apps[1].connection_scope");
        refused(per_user(1, true, Some("team".into()), None, None).unwrap_err(), "apps[1].connection_scope");
        refused(per_user(1, true, Some("user".into()), Some("usr_1".into()), None).unwrap_err(), "apps[1].list_as");
        refused(per_user(1, true, Some("user".into()), None, Some(0)).unwrap_err(), "apps[1].max_user_sessions");
        refused(per_user(1, true, None, Some("organization".into()), None).unwrap_err(), "apps[1].list_as");
        refused(per_user(1, true, None, None, Some(3)).unwrap_err(), "apps[1].max_user_sessions");
    }
}

#[cfg(test)]
mod both_ways {
    use crate::config::Config;

    #[test]
    fn an_app_is_called_as_each_user_one_way_only() {
        let yaml = "apps:\n  - id: crm\n    name: CRM\n    category: testing\n    url: https://crm.example/mcp\n    \
                    auth_types: [api_key]\n    connection_scope: user\n    oauth:\n      client_id: toolgate\n      \
                    token_exchange: {}\n";
        let e = Config::parse(yaml).unwrap_err().to_string();
        assert!(e.contains("apps[0].connection_scope") && e.contains("choose one"), "{e}");
        let one = yaml.replace("    connection_scope: user\n", "");
        assert!(Config::parse(&one).is_ok(), "token exchange alone is accepted");
    }
}

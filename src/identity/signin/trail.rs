//! Web sign-ins and OAuth consents in the audit trail of the user's organisation: who signed
//! in (and how), who was refused (a wrong password for a known e-mail, an address the
//! organisation's allowlist refuses); which client a user allowed or denied is recorded by the
//! authorization endpoint (`oauth_server/authorize.rs`) as the same actor. Refusals are
//! folded into counts past a share per minute (`Audit::refused`), so a guessing flood cannot
//! stall the organisation's appender; an e-mail no user has belongs to no organisation and is
//! not in any trail (the guessing bounds still count it).

use super::super::IdentityService;
use crate::data::audit::{Actor, AuditEvent, Target};
use crate::data::model::User;
use serde_json::json;
use std::net::IpAddr;

/// The user as the actor of its own sign-ins and consents.
pub(crate) fn user_actor(user: &User) -> Actor {
    Actor { kind: "user".into(), id: user.id.clone() }
}

fn user_target(user: &User) -> Target {
    Target { kind: "user".into(), id: user.id.clone() }
}

/// `user` signed in: a web session was made for it (by password, second factor or provider).
pub(super) fn signed_in(identity: &IdentityService, user: &User, ip: IpAddr) {
    let detail = json!({ "outcome": "signed_in", "address": ip.to_string() });
    let event = AuditEvent::Write {
        action: "signin.succeeded".into(),
        target: user_target(user),
        before_hash: None,
        after_hash: None,
        detail,
    };
    identity.audit.record(&user.org_id, user_actor(user), event);
}

/// A sign-in as `user` was refused (`reason`: `wrong_password`, `ip_not_allowed`).
pub(super) fn refused(identity: &IdentityService, user: &User, reason: &str, ip: IpAddr) {
    let detail = json!({ "outcome": "refused", "reason": reason, "address": ip.to_string() });
    identity.audit.refused(&user.org_id, user_actor(user), "signin.failed", user_target(user), detail);
}

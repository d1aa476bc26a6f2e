//! A gateway's `tool_limits` as `POST` and `PATCH /v1/gateways` take them (each entry's glob,
//! `per` and figures checked; the first fault a 400 naming the member), which changes of them
//! loosen a guard (`gateway_guards.rs`), and the caller's tool buckets that `GET
//! /v1/rate-limit` shows.

use super::Call;
use crate::data::model::{Gateway, ToolLimit};
use crate::edge::error::ApiError;
use crate::mcp::tool_limits::{Glob, MAX_TOOL_LIMITS};
use serde_json::Value;
use toolgate_filters::{CredentialKind, Principal};

/// The entries given, once each has a glob, at least one figure, and none of them 0.
pub(super) fn validate(given: Vec<ToolLimit>) -> Result<Vec<ToolLimit>, ApiError> {
    if given.len() > MAX_TOOL_LIMITS {
        return Err(ApiError::validation("tool_limits", format!("at most {MAX_TOOL_LIMITS} entries")));
    }
    for (i, l) in given.iter().enumerate() {
        let field = |m: &str| format!("tool_limits[{i}].{m}");
        Glob::parse(&l.tool).map_err(|e| ApiError::validation(field("tool"), e))?;
        let figures = [
            ("requests_per_minute", l.requests_per_minute),
            ("requests_per_hour", l.requests_per_hour),
            ("requests_per_day", l.requests_per_day),
            ("concurrent", l.concurrent),
        ];
        if let Some((name, _)) = figures.iter().find(|(_, n)| *n == Some(0)) {
            return Err(ApiError::validation(field(name), "must be at least 1 (leave it out for no limit)"));
        }
        if figures.iter().all(|(_, n)| n.is_none()) {
            return Err(ApiError::validation(
                format!("tool_limits[{i}]"),
                "give at least one of requests_per_minute, requests_per_hour, requests_per_day, concurrent",
            ));
        }
    }
    Ok(given)
}

/// Whether going from `before` to `after` lets through a call that `before` refused: some
/// entry of `before` is no longer held by an entry of `after` at least as strict (a glob that
/// covers it, the same group or a wider one, and every figure it had, no higher). Removing an
/// entry, raising a figure or dropping it, counting per a narrower group (`gateway` -> `caller`
/// gives each caller a whole allowance), or narrowing the glob all loosen.
pub(super) fn loosen(before: &[ToolLimit], after: &[ToolLimit]) -> bool {
    before.iter().any(|b| !after.iter().any(|a| holds(a, b)))
}

/// Whether `a` refuses at least every call that `b` refuses.
fn holds(a: &ToolLimit, b: &ToolLimit) -> bool {
    let (Ok(ga), Ok(gb)) = (Glob::parse(&a.tool), Glob::parse(&b.tool)) else { return false };
    let at_most = |x: Option<u32>, y: Option<u32>| y.is_none_or(|y| x.is_some_and(|x| x <= y));
    ga.covers(&gb)
        && a.per >= b.per
        && at_most(a.requests_per_minute, b.requests_per_minute)
        && at_most(a.requests_per_hour, b.requests_per_hour)
        && at_most(a.requests_per_day, b.requests_per_day)
        && at_most(a.concurrent, b.concurrent)
}

/// The caller's tool buckets on the gateways it may call (its organisation's, or the one its
/// gateway credential is bound to) that have limits.
pub(super) async fn status(call: &Call<'_>, who: &Principal) -> Vec<Value> {
    let bound = match &who.credential {
        CredentialKind::GatewayKey { gateway_id } | CredentialKind::GatewayToken { gateway_id } => Some(gateway_id),
        _ => None,
    };
    let gateways = call.server.state.gateways_where(|g: &Gateway| {
        g.org_id == who.org_id && !g.tool_limits.is_empty() && bound.is_none_or(|b| *b == g.id)
    });
    let mut rows = Vec::new();
    for gw in gateways {
        rows.extend(call.server.mcp.tool_limits.status(&gw, who).await);
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::model::LimitPer;

    fn l(tool: &str, per: LimitPer, rpm: Option<u32>, concurrent: Option<u32>) -> ToolLimit {
        ToolLimit {
            tool: tool.into(),
            per,
            requests_per_minute: rpm,
            requests_per_hour: None,
            requests_per_day: None,
            concurrent,
        }
    }

    #[test]
    fn removing_raising_narrowing_or_counting_per_a_narrower_group_loosens() {
        let before = vec![l("crm__*", LimitPer::Gateway, Some(5), Some(2))];
        let same = before.clone();
        assert!(!loosen(&before, &same));
        assert!(!loosen(&before, &[before.clone(), vec![l("*", LimitPer::Caller, Some(1), None)]].concat()), "added");
        assert!(!loosen(&before, &[l("*", LimitPer::Gateway, Some(4), Some(1))]), "wider glob, lower figures");
        assert!(!loosen(&[], &before), "setting limits where there were none tightens");
        assert!(loosen(&before, &[]), "removed");
        assert!(loosen(&before, &[l("crm__*", LimitPer::Gateway, Some(6), Some(2))]), "raised");
        assert!(loosen(&before, &[l("crm__*", LimitPer::Gateway, None, Some(2))]), "a figure dropped");
        assert!(loosen(&before, &[l("crm__*", LimitPer::Caller, Some(5), Some(2))]), "per a narrower group");
        assert!(loosen(&before, &[l("crm__d*", LimitPer::Gateway, Some(5), Some(2))]), "narrower glob");
        assert!(loosen(&before, &[l("crm__*", LimitPer::Gateway, Some(5), Some(3))]), "more at once");
        assert!(loosen(&before, &[l("crm__*", LimitPer::Organization, Some(5), Some(2))]), "gateway -> organization");
        let per_caller = vec![l("crm__*", LimitPer::Caller, Some(5), None)];
        assert!(!loosen(&per_caller, &[l("crm__*", LimitPer::User, Some(5), None)]), "caller -> user tightens");
    }

    #[test]
    fn a_bad_entry_is_refused_naming_its_member() {
        let field = |r: Result<Vec<ToolLimit>, ApiError>| match r.unwrap_err() {
            ApiError::Validation { field, .. } => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(field(validate(vec![l("crm/*", LimitPer::Caller, Some(1), None)])), "tool_limits[0].tool");
        assert_eq!(field(validate(vec![l("", LimitPer::Caller, Some(1), None)])), "tool_limits[0].tool");
        assert_eq!(field(validate(vec![l("a", LimitPer::Caller, None, None)])), "tool_limits[0]");
        assert_eq!(
            field(validate(vec![l("a", LimitPer::Caller, Some(1), None), l("b", LimitPer::Caller, Some(0), None)])),
            "tool_limits[1].requests_per_minute"
        );
        let many = vec![l("a", LimitPer::Caller, Some(1), None); MAX_TOOL_LIMITS + 1];
        assert_eq!(field(validate(many)), "tool_limits");
        assert!(validate(vec![l("crm__*", LimitPer::Gateway, None, Some(3))]).is_ok());
    }
}

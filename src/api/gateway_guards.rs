//! Which changes of a gateway loosen a guard. A gateway's guards decide what reaches its apps
//! and who reaches it (the allowlist, the tool policy, the hidden-text policy, the endpoint's
//! credentials, the rules); a change that loosens one is a protected action like approving a
//! tool: `PATCH /v1/gateways/{id}` passes the MFA gate for it (Decision 9), and its audit entry
//! carries the guards it changed, before and after. Tightening a guard needs no code.
//!
//! [`GUARDS`] is the one list of guards and [`change`] the one decision: a setting added to
//! gateways later that guards anything (tool overrides, tool limits, a content policy, external
//! guards) is one more row of [`GUARDS`], and is then gated and audited like the rest.
//! `configuration.discovery` is not a row: search mode changes what a list shows, never what a
//! caller may call (a search returns only callable tools, and `call_tool` goes through every
//! check of the tool inside it).

use crate::data::model::{
    AllowedTools, Callout, CalloutFailure, CalloutMode, DescriptionPolicy, Gateway, GatewayAuth, Rule, RuleEffect,
    ToolPolicy,
};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet};

/// One setting of a gateway that guards what reaches its apps or who reaches it.
struct Guard {
    /// Its name, as the API spells the setting.
    name: &'static str,
    /// Its value, as the audit entry shows it.
    shown: fn(&Gateway) -> Value,
    /// Whether going from the first gateway's value to the second's lets through a call,
    /// a definition or a caller that the first did not. When unsure, it says yes: asking for a
    /// code once too often is the safe mistake.
    loosens: fn(&Gateway, &Gateway) -> bool,
}

/// Every guard of a gateway: a new one is a row here (see the module's comment).
const GUARDS: &[Guard] = &[
    // `servers` and `allowed_tools` together: what the gateway serves of each of its apps.
    Guard { name: "allowed_tools", shown: allowlist_shown, loosens: allowlist_widens },
    Guard {
        name: "configuration.tool_policy",
        shown: |g| json!(g.configuration.tool_policy),
        loosens: |b, a| tool_policy_rank(a.configuration.tool_policy) < tool_policy_rank(b.configuration.tool_policy),
    },
    Guard {
        name: "configuration.description_policy",
        shown: |g| json!(g.configuration.description_policy),
        loosens: |b, a| {
            b.configuration.description_policy == DescriptionPolicy::Block
                && a.configuration.description_policy != DescriptionPolicy::Block
        },
    },
    Guard {
        name: "configuration.auth",
        shown: |g| json!(g.configuration.auth),
        loosens: |b, a| b.configuration.auth == GatewayAuth::ApiKey && a.configuration.auth != GatewayAuth::ApiKey,
    },
    Guard { name: "rules", shown: |g| json!(g.rules), loosens: |b, a| rules_loosen(&b.rules, &a.rules) },
    // An override changes what a model reads of a tool and what the app is sent: setting,
    // changing or removing one is a protected action whichever way it goes.
    Guard {
        name: "tool_overrides",
        shown: |g| json!(g.tool_overrides),
        loosens: |b, a| b.tool_overrides != a.tool_overrides,
    },
    // External guards: adding one sends call data to a new place, and a guard removed, moved,
    // sent elsewhere or asked less holds back less.
    Guard {
        name: "guards",
        shown: |g| Value::Array(g.guards.iter().map(super::guard_callouts::shown).collect()),
        loosens: |b, a| callouts_loosen(&b.guards, &a.guards),
    },
    // A per-tool quota keeps a model from calling a tool too often: removing one, raising a
    // figure, counting per a narrower group or narrowing its glob lets more calls through.
    Guard {
        name: "tool_limits",
        shown: |g| json!(g.tool_limits),
        loosens: |b, a| super::tool_limits::loosen(&b.tool_limits, &a.tool_limits),
    },
];

/// What a change of a gateway did to its guards.
#[derive(Debug, Default)]
pub(crate) struct GuardChange {
    before: Map<String, Value>,
    after: Map<String, Value>,
    /// The names of the guards it loosened.
    loosened: Vec<&'static str>,
}

/// The guards that going from `before` to `after` changes, and which of them it loosens: the
/// one place that decides whether a gateway's change is a protected action.
pub(crate) fn change(before: &Gateway, after: &Gateway) -> GuardChange {
    let mut c = GuardChange::default();
    for guard in GUARDS {
        let (was, is) = ((guard.shown)(before), (guard.shown)(after));
        if was == is {
            continue;
        }
        if (guard.loosens)(before, after) {
            c.loosened.push(guard.name);
        }
        c.before.insert(guard.name.into(), was);
        c.after.insert(guard.name.into(), is);
    }
    c
}

impl GuardChange {
    /// Whether the change loosens a guard: it passes the MFA gate.
    pub(crate) fn loosens(&self) -> bool {
        !self.loosened.is_empty()
    }

    /// The audit entry's `guards` (the guards changed, before and after, and those loosened), or
    /// `None` when no guard changed.
    pub(crate) fn audit(self) -> Option<Value> {
        if self.before.is_empty() {
            return None;
        }
        Some(json!({ "guards": { "before": self.before, "after": self.after, "loosened": self.loosened } }))
    }
}

/// What the gateway serves of each of its apps: `None` for every function, or the names allowed
/// (an app without an `allowed_tools` entry serves every function).
fn allowlist(g: &Gateway) -> BTreeMap<&str, Option<BTreeSet<&str>>> {
    let of = |app: &str| match g.allowed_tools.get(app) {
        None | Some(AllowedTools::All(_)) => None,
        Some(AllowedTools::List(names)) => Some(names.iter().map(String::as_str).collect()),
    };
    g.servers.iter().map(|app| (app.as_str(), of(app))).collect()
}

fn allowlist_shown(g: &Gateway) -> Value {
    let shown = |names: &Option<BTreeSet<&str>>| names.as_ref().map_or(json!("*"), |n| json!(n));
    Value::Object(allowlist(g).iter().map(|(app, names)| (app.to_string(), shown(names))).collect())
}

/// An app added with anything to serve, a list become `*`, or a name added to a list.
fn allowlist_widens(before: &Gateway, after: &Gateway) -> bool {
    let was = allowlist(before);
    allowlist(after).iter().any(|(app, now)| match (was.get(app), now) {
        (None, Some(names)) => !names.is_empty(),
        (None, None) | (Some(Some(_)), None) => true,
        (Some(None), _) => false,
        (Some(Some(old)), Some(names)) => !names.is_subset(old),
    })
}

/// `off` serves every definition as it comes, `pin` trusts an app's first list, `approve` none.
fn tool_policy_rank(p: ToolPolicy) -> u8 {
    match p {
        ToolPolicy::Off => 0,
        ToolPolicy::Pin => 1,
        ToolPolicy::Approve => 2,
    }
}

/// The rules are tried in order and the first that matches decides (an expression that fails
/// denies). Only adding `deny` rules, anywhere, while every rule before stays, unchanged and in
/// its order, can never let a call through that the rules before refused; anything else (a
/// rule removed, edited or moved, an `allow` added) may, so it counts as loosening.
fn rules_loosen(before: &[Rule], after: &[Rule]) -> bool {
    let mut kept = before.iter().peekable();
    for rule in after {
        if kept.peek() == Some(&rule) {
            kept.next();
        } else if rule.effect != RuleEffect::Deny {
            return true;
        }
    }
    kept.peek().is_some()
}

/// Whether the external guards after hold back less than before, or send calls somewhere new:
/// a guard added, removed or moved (the order decides whose replacement the next one sees), its
/// URL changed, `enforce` become `log`, `closed` become `open`, its `tools` changed to anything
/// but `*` (a glob is not compared for width: narrowed or not, it counts), or its phases
/// changed. A longer or shorter time-out, `log` become `enforce`, `open` become `closed` or
/// `tools` become `*` only tighten.
fn callouts_loosen(before: &[Callout], after: &[Callout]) -> bool {
    let ids = |l: &[Callout]| l.iter().map(|c| c.id.clone()).collect::<Vec<_>>();
    if ids(before) != ids(after) {
        return true;
    }
    before.iter().zip(after).any(|(b, a)| {
        b.url != a.url
            || (b.mode == CalloutMode::Enforce && a.mode == CalloutMode::Log)
            || (b.failure == CalloutFailure::Closed && a.failure == CalloutFailure::Open)
            || (b.tools != a.tools && a.tools != "*")
            || b.on != a.on
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gateway(servers: &[&str]) -> Gateway {
        let mut g = Gateway::for_tests("gw_1", "org_1");
        g.servers = servers.iter().map(|s| s.to_string()).collect();
        g
    }

    fn list(names: &[&str]) -> AllowedTools {
        AllowedTools::List(names.iter().map(|s| s.to_string()).collect())
    }

    fn rule(name: &str, effect: RuleEffect) -> Rule {
        Rule { name: name.into(), effect, when: "true".into(), methods: None }
    }

    fn loosened(before: &Gateway, after: &Gateway) -> Vec<&'static str> {
        change(before, after).loosened
    }

    #[test]
    fn the_allowlist_loosens_when_it_serves_more() {
        let mut before = gateway(&["a", "b"]);
        before.allowed_tools.insert("a".into(), list(&["echo", "add"]));
        let narrowed = |f: &dyn Fn(&mut Gateway)| {
            let mut g = before.clone();
            f(&mut g);
            g
        };
        // Narrower: a name dropped, an app dropped, `*` become a list.
        assert!(loosened(&before, &narrowed(&|g| _ = g.allowed_tools.insert("a".into(), list(&["echo"])))).is_empty());
        assert!(loosened(&before, &narrowed(&|g| g.servers.retain(|s| s == "a"))).is_empty());
        assert!(loosened(&before, &narrowed(&|g| _ = g.allowed_tools.insert("b".into(), list(&[])))).is_empty());
        // Wider: a name added, a list become `*`, an app added.
        let wider = [
            narrowed(&|g| _ = g.allowed_tools.insert("a".into(), list(&["echo", "add", "slow"]))),
            narrowed(&|g| _ = g.allowed_tools.remove("a")),
            narrowed(&|g| _ = g.allowed_tools.insert("a".into(), AllowedTools::All("*".into()))),
            narrowed(&|g| g.servers.push("c".into())),
        ];
        for after in &wider {
            assert_eq!(loosened(&before, after), ["allowed_tools"], "{:?}", after.allowed_tools);
        }
        // An app added that serves nothing is no wider.
        let empty = narrowed(&|g| {
            g.servers.push("c".into());
            g.allowed_tools.insert("c".into(), list(&[]));
        });
        assert!(loosened(&before, &empty).is_empty());
        assert!(change(&before, &empty).audit().is_some(), "a change of a guard is audited all the same");
    }

    #[test]
    fn policies_loosen_downwards_only() {
        let mut before = gateway(&["a"]);
        before.configuration.tool_policy = ToolPolicy::Pin;
        before.configuration.description_policy = DescriptionPolicy::Block;
        let mut after = before.clone();
        after.configuration.tool_policy = ToolPolicy::Off;
        after.configuration.description_policy = DescriptionPolicy::Strip;
        after.configuration.auth = GatewayAuth::Oauth;
        assert_eq!(
            loosened(&before, &after),
            ["configuration.tool_policy", "configuration.description_policy", "configuration.auth"]
        );
        // Back the other way: each tightens.
        assert!(loosened(&after, &before).is_empty());
        let mut approve = before.clone();
        approve.configuration.tool_policy = ToolPolicy::Approve;
        assert!(loosened(&before, &approve).is_empty());
        assert_eq!(loosened(&approve, &before), ["configuration.tool_policy"]);
        // Settings that guard nothing are neither gated nor part of `guards`.
        let mut faster = before.clone();
        faster.configuration.cache_ttl += 1;
        faster.name = "renamed".into();
        assert!(change(&before, &faster).audit().is_none());
    }

    #[test]
    fn only_added_deny_rules_leave_the_rules_as_strict() {
        use RuleEffect::{Allow, Deny};
        let mut before = gateway(&["a"]);
        before.rules = vec![rule("ok", Allow), rule("no", Deny)];
        let with = |rules: Vec<Rule>| {
            let mut g = before.clone();
            g.rules = rules;
            g
        };
        let tighter = [
            vec![rule("first", Deny), rule("ok", Allow), rule("no", Deny)],
            vec![rule("ok", Allow), rule("mid", Deny), rule("no", Deny), rule("last", Deny)],
        ];
        for rules in tighter {
            assert!(loosened(&before, &with(rules.clone())).is_empty(), "{rules:?}");
        }
        let mut edited = rule("no", Deny);
        edited.when = "false".into();
        let looser = [
            vec![],
            vec![rule("ok", Allow)],
            vec![rule("no", Deny), rule("ok", Allow)],
            vec![rule("ok", Allow), edited],
            vec![rule("first", Allow), rule("ok", Allow), rule("no", Deny)],
        ];
        for rules in looser {
            assert_eq!(loosened(&before, &with(rules.clone())), ["rules"], "{rules:?}");
        }
    }

    #[test]
    fn switching_discovery_guards_nothing() {
        let before = gateway(&["a"]);
        let mut after = before.clone();
        after.configuration.discovery = crate::data::model::Discovery::Search;
        let c = change(&before, &after);
        assert!(!c.loosens() && c.audit().is_none());
        assert!(!change(&after, &before).loosens());
    }

    #[test]
    fn any_change_of_the_tool_overrides_is_protected() {
        let before = gateway(&["a"]);
        let mut after = before.clone();
        let shaped: crate::data::model::ToolOverride =
            serde_json::from_value(json!({ "tool": "echo", "name": "say" })).expect("an override");
        after.tool_overrides.push(shaped);
        assert_eq!(loosened(&before, &after), ["tool_overrides"], "set");
        assert_eq!(loosened(&after, &before), ["tool_overrides"], "removed");
        let mut edited = after.clone();
        edited.tool_overrides[0].description = Some("Says it".into());
        assert_eq!(loosened(&after, &edited), ["tool_overrides"], "changed");
    }

    #[test]
    fn external_guards_loosen_when_removed_opened_narrowed_or_sent_elsewhere() {
        use crate::data::model::CalloutPhase;
        let guard = |id: &str| Callout {
            id: id.into(),
            url: "https://guard.example/check".into(),
            on: vec![CalloutPhase::Request],
            tools: "*".into(),
            timeout_ms: 500,
            failure: CalloutFailure::Closed,
            mode: CalloutMode::Enforce,
            sealed_secret: "sealed".into(),
        };
        let mut before = gateway(&["a"]);
        before.guards = vec![guard("grd_1"), guard("grd_2")];
        let with = |f: &dyn Fn(&mut Callout)| {
            let mut g = before.clone();
            f(&mut g.guards[0]);
            g
        };
        let looser = [
            with(&|c| c.mode = CalloutMode::Log),
            with(&|c| c.failure = CalloutFailure::Open),
            with(&|c| c.tools = "everything__*".into()),
            with(&|c| c.url = "https://elsewhere.example/check".into()),
            with(&|c| c.on = vec![CalloutPhase::Request, CalloutPhase::Response]),
            {
                let mut g = before.clone();
                g.guards.remove(1);
                g
            },
            {
                let mut g = before.clone();
                g.guards.reverse();
                g
            },
        ];
        for after in &looser {
            assert_eq!(loosened(&before, after), ["guards"], "{:?}", after.guards);
        }
        assert_eq!(loosened(&gateway(&["a"]), &before), ["guards"], "setting guards is protected");
        // Tighter: open to closed, log to enforce, a glob become `*`, another time-out.
        let mut loose = before.clone();
        loose.guards[0].failure = CalloutFailure::Open;
        loose.guards[0].mode = CalloutMode::Log;
        loose.guards[0].tools = "everything__*".into();
        assert!(loosened(&loose, &before).is_empty());
        let slower = with(&|c| c.timeout_ms = 900);
        assert!(loosened(&before, &slower).is_empty());
        let audit = change(&before, &slower).audit().expect("a guard changed");
        assert!(!audit.to_string().contains("sealed"), "no secret in the audit entry: {audit}");
    }

    #[test]
    fn the_audit_shows_the_changed_guards_before_and_after() {
        let before = gateway(&["a"]);
        let mut after = before.clone();
        after.configuration.tool_policy = ToolPolicy::Approve;
        after.allowed_tools.insert("a".into(), list(&["echo"]));
        let audit = change(&before, &after).audit().expect("guards changed");
        assert_eq!(
            audit,
            json!({ "guards": {
                "before": { "allowed_tools": { "a": "*" }, "configuration.tool_policy": "off" },
                "after": { "allowed_tools": { "a": ["echo"] }, "configuration.tool_policy": "approve" },
                "loosened": [],
            }})
        );
    }
}

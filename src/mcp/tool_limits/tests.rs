use super::*;
use crate::data::model::{Gateway, ToolLimit};
use toolgate_filters::rate_limit::{LocalRateLimiter, RateLimitPolicy};

fn limit(tool: &str, per: LimitPer) -> ToolLimit {
    ToolLimit {
        tool: tool.into(),
        per,
        requests_per_minute: None,
        requests_per_hour: None,
        requests_per_day: None,
        concurrent: None,
    }
}

fn gateway(limits: Vec<ToolLimit>) -> Gateway {
    let mut gw = Gateway::for_tests("gw_1", "org_1");
    gw.tool_limits = limits;
    gw
}

fn principal(key: &str, user: &str) -> Principal {
    use toolgate_filters::{CredentialKind, Role, ScopeSet};
    Principal {
        key_id: key.into(),
        user_id: user.into(),
        org_id: "org_1".into(),
        role: Role::Developer,
        credential: CredentialKind::ApiKey,
        scopes: ScopeSet::parse(["gateways:read"]).unwrap(),
        tier: "free".into(),
        rate_limit_multiplier: 1.0,
        bypass_ip_whitelist: false,
        expires_at: None,
    }
}

fn limiter() -> ToolLimits {
    let backend: Arc<dyn RateLimiter> = Arc::new(LocalRateLimiter::new());
    ToolLimits::new(RateLimit::new(Arc::new(RateLimitPolicy::default()), backend))
}

#[test]
fn globs_match_names_with_star_and_question_mark() {
    let g = |s: &str| Glob::parse(s).unwrap();
    assert!(g("crm__*").matches("crm__delete"));
    assert!(g("crm__*").matches("crm__"));
    assert!(!g("crm__*").matches("crm_delete"));
    assert!(g("*delete").matches("crm__delete"));
    assert!(g("*__del*e").matches("crm__delete"));
    assert!(g("crm__d?lete").matches("crm__delete"));
    assert!(!g("crm__d?lete").matches("crm__dlete"));
    assert!(g("*").matches("anything"));
    assert!(g("a*b*c").matches("aXbYbZc"));
    assert!(!g("a*b*c").matches("aXbYbZ"));
    assert!(g("exact").matches("exact") && !g("exact").matches("exact2"));
    assert!(Glob::parse("").is_err());
    assert!(Glob::parse("crm/*").unwrap_err().contains('/'));
    assert!(Glob::parse(&"a".repeat(129)).is_err());
    assert!(g("*").covers(&g("crm__*")));
    assert!(g("crm__*").covers(&g("crm__delete")));
    assert!(!g("crm__delete").covers(&g("crm__*")));
    assert!(!g("crm__*").covers(&g("crm__d*")), "unsure: not covered");
}

#[tokio::test]
async fn a_limit_refuses_past_its_figure_with_the_wait_and_counts_per_caller() {
    let l = limiter();
    let gw = gateway(vec![ToolLimit { requests_per_minute: Some(2), ..limit("crm__*", LimitPer::Caller) }]);
    let (a, b) = (principal("key_a", "usr_1"), principal("key_b", "usr_1"));
    for _ in 0..2 {
        assert!(l.admit(&gw, "crm__delete", &a).await.unwrap().is_empty());
    }
    let r = l.admit(&gw, "crm__list", &a).await.unwrap_err();
    assert_eq!((r.limit, r.span, r.per), (2, Span::Minute, LimitPer::Caller));
    assert!(r.retry_after_ms > 29_000 && r.retry_after_ms <= 30_000, "{r:?}");
    assert_eq!(
        r.message(),
        "`crm__list` is limited to 2 calls a minute for you (counted with every tool matching `crm__*`); try again in 30 s"
    );
    let result = r.result();
    assert_eq!(result["isError"], true);
    assert_eq!(result["_meta"]["window"], "minute");
    assert_eq!(result["_meta"]["limit"], 2);
    assert!(l.admit(&gw, "other", &a).await.is_ok(), "a tool the glob does not match");
    assert!(l.admit(&gw, "crm__delete", &b).await.is_ok(), "another caller has its own bucket");
}

#[tokio::test]
async fn per_user_and_gateway_share_a_bucket_and_the_hour_and_day_count_too() {
    let l = limiter();
    let gw = gateway(vec![
        ToolLimit { requests_per_minute: Some(10), requests_per_hour: Some(1), ..limit("t", LimitPer::User) },
        ToolLimit { requests_per_day: Some(2), ..limit("*", LimitPer::Gateway) },
    ]);
    let (a, b, c) = (principal("key_a", "usr_1"), principal("key_b", "usr_1"), principal("key_c", "usr_2"));
    assert!(l.admit(&gw, "t", &a).await.is_ok());
    let r = l.admit(&gw, "t", &b).await.unwrap_err();
    assert_eq!((r.limit, r.span), (1, Span::Hour), "the user's other key shares the hour");
    assert!(r.message().contains("1 call an hour for your user"), "{}", r.message());
    assert!(l.admit(&gw, "t", &c).await.is_ok(), "another user; the gateway's day now has 2");
    let r = l.admit(&gw, "u", &c).await.unwrap_err();
    assert_eq!((r.limit, r.span, r.per), (2, Span::Day, LimitPer::Gateway));
}

#[tokio::test]
async fn concurrent_slots_are_held_until_released_with_the_requests_own() {
    let l = limiter();
    let gw = gateway(vec![ToolLimit { concurrent: Some(1), ..limit("slow", LimitPer::Caller) }]);
    let a = principal("key_a", "usr_1");
    let held = l.admit(&gw, "slow", &a).await.unwrap();
    assert_eq!(held.len(), 1);
    let r = l.admit(&gw, "slow", &a).await.unwrap_err();
    assert_eq!(r.span, Span::Concurrent);
    let mut own = None;
    hold_with(&mut own, held);
    assert!(l.admit(&gw, "slow", &a).await.is_err(), "still held through the request's slot");
    drop(own);
    assert!(l.admit(&gw, "slow", &a).await.is_ok());
}

#[tokio::test]
async fn a_changed_record_is_compiled_again_and_the_status_shows_each_window() {
    let l = limiter();
    let mut gw = gateway(vec![ToolLimit {
        requests_per_minute: Some(1),
        requests_per_hour: Some(5),
        requests_per_day: Some(9),
        ..limit("t", LimitPer::Caller)
    }]);
    let a = principal("key_a", "usr_1");
    assert!(l.admit(&gw, "t", &a).await.is_ok());
    assert!(l.admit(&gw, "t", &a).await.is_err());
    let rows = l.status(&gw, &a).await;
    let of = |w: &str| rows.iter().find(|r| r["window"] == w).cloned().unwrap();
    assert_eq!((of("minute")["limit"].clone(), of("minute")["remaining"].clone()), (json!(1), json!(0)));
    assert_eq!((of("hour")["limit"].clone(), of("hour")["remaining"].clone()), (json!(5), json!(4)));
    assert_eq!((of("day")["limit"].clone(), of("day")["remaining"].clone()), (json!(9), json!(8)));
    gw.tool_limits[0].requests_per_minute = Some(3);
    gw.updated_at += chrono::Duration::seconds(1);
    assert!(l.admit(&gw, "t", &a).await.is_ok(), "the raised limit applies to the next call");
}

//! Events and their webhooks (issue 16; spec "Events", DESIGN Decisions 10 and 15).
//!
//! Events are not raised by the handlers: [`Events`] subscribes to the change feed and turns a
//! change into an event (`gateway.created` from a new gateway's save, `app.connected` from a
//! connection saved as connected, ...). Subscribers hear only the changes their own instance
//! made, so with several instances each event is recorded once.
//!
//! Each event becomes one delivery per webhook of the organisation that takes it, written to the
//! store (the outbox) before anything is sent: a delivery recorded is delivered at least once,
//! across a crash and a restart, every attempt under the same `webhook-id` (the delivery's id)
//! so that receivers can drop repeats. Attempts run in the background, at most
//! `webhooks.concurrency` at once and `webhooks.per_endpoint_concurrency` per webhook, each
//! bounded by `webhooks.attempt_timeout_ms`: a slow or dead receiver delays neither an API
//! answer nor another receiver. 2xx is delivered; 410 disables the webhook; anything else, a
//! time-out or a refused connection is tried again after the next wait of
//! `webhooks.retry_schedule_secs` (with up to 20 % of jitter), and after the last the delivery
//! is `failed`. Redirects are not followed; where a delivery may go is `egress.rs`'s decision,
//! taken again at every attempt.

pub(crate) mod alerts;

use crate::base::time::now_ms;
use crate::data::changes::Change;
use crate::data::model::{Alert, Delivery, Webhook};
use crate::data::state::State;
use crate::data::store::{Kind, PutRecord, StoreError};
use crate::outbound::egress::Egress;
use crate::outbound::sign;
use chrono::Utc;
use dashmap::DashMap;
use rand::Rng;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, Notify, Semaphore};

/// How long one attempt may hold a delivery's lock (more than an attempt's time-out can take).
const CLAIM_TTL: Duration = Duration::from_secs(300);

/// How overdue another instance's pending delivery must be before this one takes it up, and
/// how often it looks.
const ADOPT_AFTER: Duration = Duration::from_secs(10);

/// HTTP clients kept (one per receiver address); beyond, the cache starts again.
const MAX_CLIENTS: usize = 1024;

/// How often finished deliveries past their retention are removed.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// The events a webhook may take (spec "Events"; the `audit.` ones: docs/events.md).
pub(crate) const EVENTS: [&str; 10] = [
    "gateway.created",
    "gateway.updated",
    "gateway.deleted",
    "app.connected",
    "app.disconnected",
    "error.critical",
    "usage.limit_warning",
    "tool.changed",
    "audit.checkpoint",
    "audit.tampered",
];

/// The webhooks' outbox and its deliverer.
pub struct Events {
    state: Arc<State>,
    /// Pending deliveries by id.
    pending: DashMap<String, Delivery>,
    /// (due, id) of every pending delivery not being attempted.
    due: parking_lot::Mutex<BTreeSet<(i64, String)>>,
    wake: Notify,
    in_flight: Arc<Semaphore>,
    per_webhook: DashMap<String, Arc<Semaphore>>,
    /// HTTP clients by (host, address connected to).
    clients: DashMap<(String, Option<std::net::SocketAddr>), reqwest::Client>,
    changes: parking_lot::Mutex<Option<broadcast::Receiver<Change>>>,
    /// Usage crossings (alerts and `usage.limit_warning`).
    pub watcher: alerts::Watcher,
    /// Where alerts' e-mail leaves.
    courier: Arc<crate::outbound::courier::Courier>,
}

/// Whether a receiver took a delivery: a 2xx (an SMTP server's 250 among them).
fn sent(code: u16) -> bool {
    (200..300).contains(&code)
}

/// Ends a delivery that has nowhere to go any more.
fn give_up(d: &mut Delivery, reason: &str) {
    d.status = "failed".into();
    d.last_error = Some(reason.to_string());
    d.next_attempt_at = None;
}

impl Events {
    /// Loads the pending deliveries of the outbox, and starts listening to the change feed
    /// (changes made from now on are not lost, even before [`Events::run`] runs).
    pub async fn load(
        state: Arc<State>,
        courier: Arc<crate::outbound::courier::Courier>,
    ) -> Result<Arc<Events>, StoreError> {
        let events = Events {
            changes: parking_lot::Mutex::new(Some(state.changes.subscribe())),
            in_flight: Arc::new(Semaphore::new(state.config().webhooks.concurrency)),
            state: state.clone(),
            pending: DashMap::new(),
            due: parking_lot::Mutex::new(BTreeSet::new()),
            wake: Notify::new(),
            per_webhook: DashMap::new(),
            clients: DashMap::new(),
            watcher: alerts::Watcher::new(state.clone()),
            courier,
        };
        for (id, body) in state.store.load_all(Kind::Delivery).await? {
            let Ok(d) = serde_json::from_str::<Delivery>(&body) else {
                tracing::warn!(delivery = id, "skipping an unreadable webhook delivery");
                continue;
            };
            if d.status == "pending" {
                events.queue(d);
            }
        }
        Ok(Arc::new(events))
    }

    /// The rules a webhook URL is checked against, as the configuration says now.
    pub(crate) fn egress(&self) -> Egress {
        let config = self.state.config();
        Egress { allowed_hosts: config.webhooks.allowed_hosts.clone(), allow_http: config.environment.allows_http() }
    }

    fn queue(&self, d: Delivery) {
        let due = d.next_attempt_at.map_or_else(now_ms, |t| t.timestamp_millis());
        self.due.lock().insert((due, d.id.clone()));
        self.pending.insert(d.id.clone(), d);
        self.wake.notify_one();
    }

    /// Records `event` for every webhook of `org_id` that takes it: durably, then queued.
    pub(crate) async fn emit(&self, org_id: &str, event: &str, data: Value) {
        for w in self.state.webhooks_of(org_id).into_iter().filter(|w| w.wants(event)) {
            if let Err(e) = self.record(&w, event, data.clone()).await {
                tracing::error!(error = %e, event, webhook = w.id, "cannot record a webhook delivery; the event is lost for it");
            }
        }
    }

    /// Tells the crossings in a batch of usage counts: `usage.limit_warning` to the webhooks
    /// that take it and, for an alert, a notification to each of its channels (through the
    /// outbox, retried like a webhook's delivery).
    pub(crate) async fn observe_usage(&self, minutes: &[toolgate_filters::rate_limit::UsageMinute]) {
        for c in self.watcher.crossings(minutes).await {
            if !self.watcher.claim(&c).await {
                continue;
            }
            tracing::info!(org = c.org_id, key = c.key_id, alert = ?c.alert.as_ref().map(|a| &a.id),
                usage_percent = c.usage_percent, bucket = c.bucket, "usage crossed a threshold");
            let data = c.data();
            self.emit(&c.org_id, "usage.limit_warning", data.clone()).await;
            let Some(alert) = &c.alert else { continue };
            let mut triggered = alert.clone();
            triggered.last_triggered_at = Some(Utc::now());
            if let Err(e) = self.save_alert(&triggered).await {
                tracing::warn!(error = %e, alert = alert.id, "cannot record when an alert fired");
            }
            let mut data = data;
            data["summary"] = Value::String(c.summary());
            let channels = [("slack", alert.sealed_slack.is_some()), ("email", alert.email.is_some())];
            for (channel, _) in channels.into_iter().filter(|(_, on)| *on) {
                if let Err(e) = self.record_notification(alert, channel, data.clone()).await {
                    tracing::error!(error = %e, alert = alert.id, channel, "cannot record an alert notification; it is lost");
                }
            }
        }
    }

    /// Tells the gateways that reached `alerts.limit_warning_percent` of their quota:
    /// `usage.limit_warning` (`type: gateway_quota`) to the organisation's webhooks.
    pub(crate) async fn observe_gateway_quotas(&self, reached: &[crate::mcp::quota::Reached]) {
        for r in reached {
            if let Some((org_id, data)) = self.watcher.gateway_crossing(r).await {
                tracing::info!(org = org_id, gateway = r.gateway_id, "a gateway's quota crossed the warning share");
                self.emit(&org_id, "usage.limit_warning", data).await;
            }
        }
    }

    /// Tells the organisations whose apps failed `alerts.app_failures` times in a row:
    /// `error.critical` (`kind: app_failing`) to their webhooks.
    pub(crate) async fn observe_app_failures(&self, reports: &[crate::mcp::failures::AppFailing]) {
        for r in reports {
            tracing::warn!(
                org = r.org_id,
                app = r.app_id,
                failures = r.failures,
                error = r.last_error,
                "an app keeps failing"
            );
            let data = json!({
                "kind": "app_failing",
                "app_id": r.app_id,
                "failures": r.failures,
                "window_secs": r.window.as_secs(),
                "since": r.since.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                "last_error": r.last_error,
            });
            self.emit(&r.org_id, "error.critical", data).await;
        }
    }

    /// Saves an alert and forgets this instance's copy of its organisation's list.
    pub(crate) async fn save_alert(&self, a: &Alert) -> Result<(), StoreError> {
        self.state.store.put_record(Kind::Alert, &a.org_id, &a.id, a).await?;
        self.watcher.forget(&a.org_id);
        Ok(())
    }

    pub(crate) async fn delete_alert(&self, a: &Alert) -> Result<(), StoreError> {
        self.state.store.delete(Kind::Alert, &a.id).await?;
        self.watcher.forget(&a.org_id);
        Ok(())
    }

    /// An alert of `org_id` (another organisation's is "not found").
    pub(crate) async fn alert_of(&self, org_id: &str, id: &str) -> Result<Option<Alert>, StoreError> {
        let Some(body) = self.state.store.get(Kind::Alert, id).await? else { return Ok(None) };
        Ok(serde_json::from_str::<Alert>(&body).ok().filter(|a| a.org_id == org_id))
    }

    /// Whether alerts may name an e-mail address (`smtp:` is configured).
    pub(crate) fn can_email(&self) -> bool {
        self.courier.can_email()
    }

    async fn record_notification(&self, alert: &Alert, channel: &str, data: Value) -> Result<Delivery, StoreError> {
        let mut d =
            Delivery::pending(crate::base::secrets::new_id("msg"), &alert.org_id, "", "usage.limit_warning", data);
        d.alert_id = Some(alert.id.clone());
        d.channel = Some(channel.to_string());
        self.enqueue(d).await
    }

    /// A `webhook.test` delivery to one webhook, whatever events it takes.
    pub async fn test(&self, w: &Webhook) -> Result<Delivery, StoreError> {
        self.record(w, "webhook.test", json!({ "webhook_id": w.id })).await
    }

    async fn record(&self, w: &Webhook, event: &str, data: Value) -> Result<Delivery, StoreError> {
        self.enqueue(Delivery::pending(crate::base::secrets::new_id("msg"), &w.org_id, &w.id, event, data)).await
    }

    /// Writes a new delivery to the outbox, then queues it.
    async fn enqueue(&self, d: Delivery) -> Result<Delivery, StoreError> {
        self.save(&d).await?;
        self.queue(d.clone());
        Ok(d)
    }

    async fn save(&self, d: &Delivery) -> Result<(), StoreError> {
        self.state.store.put_record(Kind::Delivery, &d.org_id, &d.id, d).await
    }

    /// The event a change is, if it is one, with its `data`.
    fn event_of(&self, change: &Change) -> Option<(&'static str, Value)> {
        match change {
            Change::GatewaySaved { gateway_id, created, .. } => {
                let gw = self.state.gateway(gateway_id)?;
                let name = if *created { "gateway.created" } else { "gateway.updated" };
                Some((name, json!({ "gateway_id": gw.id, "name": gw.name, "servers": gw.servers })))
            }
            Change::GatewayDeleted { gateway_id, .. } => Some(("gateway.deleted", json!({ "gateway_id": gateway_id }))),
            // The organisation's connections; a user's own is in the audit trail.
            Change::ConnectionSaved { org_id, app_id, renewed: false, user_id: None } => {
                let c = self.state.connection(org_id, app_id)?;
                (c.status == "connected").then(|| {
                    ("app.connected", json!({ "app_id": app_id, "auth_type": c.auth_type, "connection_id": c.id }))
                })
            }
            Change::ConnectionDeleted { app_id, user_id: None, .. } => {
                Some(("app.disconnected", json!({ "app_id": app_id })))
            }
            Change::ToolChangeDetected { gateway_id, change_id, app_id, tool, kind, hash, approved_hash, .. } => {
                let data = json!({ "gateway_id": gateway_id, "change_id": change_id, "app_id": app_id, "tool": tool,
                    "kind": kind, "hash": hash, "approved_hash": approved_hash });
                Some(("tool.changed", data))
            }
            _ => None,
        }
    }

    /// Turns the changes this instance makes into events, and delivers the outbox; until the
    /// process ends.
    pub async fn run(self: Arc<Self>) {
        let Some(mut rx) = self.changes.lock().take() else { return };
        let emitter = self.clone();
        tokio::spawn(async move {
            loop {
                match rx.recv().await {
                    Ok(change) => {
                        if let Some((event, data)) = emitter.event_of(&change) {
                            emitter.emit(change.org_id(), event, data).await;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        tracing::error!(missed = n, "changes came faster than events could be recorded; some were not");
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        let pruner = self.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(PRUNE_EVERY);
            loop {
                every.tick().await;
                pruner.prune().await;
            }
        });
        if self.state.config().storage.is_shared() {
            let adopter = self.clone();
            tokio::spawn(async move {
                let mut every = tokio::time::interval(ADOPT_AFTER);
                loop {
                    every.tick().await;
                    adopter.adopt().await;
                }
            });
        }
        loop {
            let next = self.due.lock().first().map(|(t, _)| *t);
            let wait = next.map_or(Duration::from_secs(60), |t| Duration::from_millis((t - now_ms()).max(0) as u64));
            if !wait.is_zero() {
                let _ = tokio::time::timeout(wait, self.wake.notified()).await;
                continue;
            }
            let Some((_, id)) = self.due.lock().pop_first() else { continue };
            let permit = self.in_flight.clone().acquire_owned().await.expect("the semaphore is never closed");
            let events = self.clone();
            tokio::spawn(async move {
                events.attempt(&id).await;
                drop(permit);
            });
        }
    }

    /// One attempt of a delivery, its outcome recorded. With several instances on one store, an
    /// attempt holds the delivery's lock there, so that one instance at a time sends it; a
    /// delivery another instance holds is left to it (and taken back if that instance dies:
    /// [`Events::adopt`]).
    async fn attempt(&self, id: &str) {
        let lock = format!("delivery:{id}");
        let held = match self.state.store.lock(&lock, CLAIM_TTL, Duration::ZERO).await {
            Ok(token) => token,
            Err(_) => {
                // Another instance is sending it: it records the outcome; this one forgets it.
                self.pending.remove(id);
                return;
            }
        };
        self.attempt_held(id).await;
        if let Some(token) = held {
            let _ = self.state.store.unlock(&lock, &token).await;
        }
    }

    async fn attempt_held(&self, id: &str) {
        let Some(mut d) = self.pending.get(id).map(|d| d.clone()) else { return };
        // The store's copy is the truth: another instance may have delivered it meanwhile.
        if self.state.config().storage.is_shared() {
            match self.state.store.get(Kind::Delivery, id).await {
                Ok(Some(body)) => match serde_json::from_str::<Delivery>(&body) {
                    Ok(stored) if stored.status != "pending" => {
                        self.pending.remove(id);
                        return;
                    }
                    Ok(stored) => d = stored,
                    Err(_) => {}
                },
                Ok(None) => {
                    self.pending.remove(id);
                    return;
                }
                Err(_) => {}
            }
        }
        if let Some(alert_id) = d.alert_id.clone() {
            return self.attempt_notification(d, &alert_id).await;
        }
        let webhook = self.state.webhook_of(&d.org_id, &d.webhook_id);
        let Some(w) = webhook.filter(|w| w.enabled) else {
            // Deleted or disabled since: nothing to send it to.
            give_up(&mut d, "the webhook was deleted or disabled");
            self.finish(d).await;
            return;
        };
        let _slot = self.endpoint_slot(&w.id).await;
        let started = Instant::now();
        let outcome = self.send(&w, &d).await;
        self.note_health(&w, !matches!(outcome, Ok(code) if sent(code))).await;
        if outcome == Ok(410) {
            d.attempts += 1;
            d.latency_ms = Some(started.elapsed().as_millis() as u64);
            d.status = "disabled".into();
            d.last_status_code = Some(410);
            d.next_attempt_at = None;
            self.disable(&w, "the endpoint answered 410 Gone").await;
        } else {
            self.record_attempt(&mut d, started, outcome);
        }
        self.finish(d).await;
    }

    /// A slot of the endpoint's (a webhook's, an alert's) `webhooks.per_endpoint_concurrency`.
    async fn endpoint_slot(&self, endpoint: &str) -> tokio::sync::OwnedSemaphorePermit {
        let gate = self
            .per_webhook
            .entry(endpoint.to_string())
            .or_insert_with(|| Arc::new(Semaphore::new(self.state.config().webhooks.per_endpoint_concurrency)))
            .clone();
        gate.acquire_owned().await.expect("the semaphore is never closed")
    }

    /// Counts an attempt begun at `started` and records what came of it: delivered on a 2xx
    /// (an SMTP server's 250 included), else retried on the schedule.
    fn record_attempt(&self, d: &mut Delivery, started: Instant, outcome: Result<u16, String>) {
        d.attempts += 1;
        d.latency_ms = Some(started.elapsed().as_millis() as u64);
        match outcome {
            Ok(code) if sent(code) => {
                d.status = "delivered".into();
                d.last_status_code = Some(code);
                d.last_error = None;
                d.delivered_at = Some(Utc::now());
                d.next_attempt_at = None;
            }
            Ok(code) => {
                d.last_status_code = Some(code);
                d.last_error = Some(format!("HTTP {code}"));
                self.schedule_retry(d);
            }
            Err(e) => {
                d.last_status_code = None;
                d.last_error = Some(e);
                self.schedule_retry(d);
            }
        }
    }

    /// The next attempt of a failed delivery, or `failed` after the schedule's last wait.
    fn schedule_retry(&self, d: &mut Delivery) {
        match self.state.config().webhooks.retry_schedule.get(d.attempts as usize - 1) {
            Some(wait) => {
                let jitter = rand::thread_rng().gen_range(0.0..0.2);
                let wait = wait.mul_f64(1.0 + jitter);
                d.next_attempt_at = Some(Utc::now() + chrono::Duration::from_std(wait).unwrap_or_default());
            }
            None => {
                d.status = "failed".into();
                d.next_attempt_at = None;
            }
        }
    }

    /// One attempt of an alert's notification: to Slack (an incoming webhook: 2xx is sent) or
    /// by e-mail (the SMTP server took it). Failures are retried on the webhooks' schedule; an
    /// alert deleted meanwhile ends it.
    async fn attempt_notification(&self, mut d: Delivery, alert_id: &str) {
        let alert = match self.alert_of(&d.org_id, alert_id).await {
            Ok(Some(a)) => a,
            Ok(None) => {
                give_up(&mut d, "the alert was deleted");
                self.finish(d).await;
                return;
            }
            Err(e) => {
                // The store is unavailable: try again later, the attempt not counted.
                tracing::warn!(error = %e, delivery = d.id, "cannot read an alert to notify; will retry");
                d.next_attempt_at = Some(Utc::now() + chrono::Duration::seconds(5));
                self.finish(d).await;
                return;
            }
        };
        let _slot = self.endpoint_slot(&alert.id).await;
        let started = Instant::now();
        let outcome = match d.channel.as_deref() {
            Some("slack") => self.send_slack(&alert, &d).await,
            Some("email") => match &alert.email {
                Some(to) => self.send_email(to, &d).await,
                None => Err("the alert has no e-mail address".to_string()),
            },
            other => Err(format!("unknown channel {other:?}")),
        };
        self.record_attempt(&mut d, started, outcome);
        self.finish(d).await;
    }

    /// Posts a notification to the alert's Slack incoming webhook: `{"text": ...}`, under the
    /// same egress rules as webhooks.
    /// An alert's notification by e-mail: the subject is its summary, the body the summary
    /// and its data; the delivery's id is the message's, so a retry is recognisable.
    async fn send_email(&self, to: &str, d: &Delivery) -> Result<u16, String> {
        let summary = d.data.get("summary").and_then(Value::as_str).unwrap_or("toolgate: usage alert");
        let body = format!(
            "{summary}\n\nEvent: {}\nNotification id: {}\n\n{}\n",
            d.event,
            d.id,
            serde_json::to_string_pretty(&d.data).unwrap_or_default()
        );
        self.courier.email(to, summary, body, Some(&d.id)).await.map(|()| 250).map_err(|e| e.to_string())
    }

    async fn send_slack(&self, alert: &Alert, d: &Delivery) -> Result<u16, String> {
        let sealed = alert.sealed_slack.as_deref().ok_or("the alert has no Slack URL")?;
        let url = self.state.sealer.open(sealed).map_err(|_| "the alert's Slack URL cannot be opened")?;
        let url = String::from_utf8(url).map_err(|_| "the alert's Slack URL is not text")?;
        let target = self.egress().resolve(&url).await.map_err(|e| e.to_string())?;
        let client = self.client_for(&target)?;
        let text = d.data.get("summary").and_then(Value::as_str).unwrap_or("toolgate: usage alert");
        let resp = client.post(target.url).json(&json!({ "text": text })).send().await.map_err(|e| {
            if e.is_timeout() {
                "timed out".to_string()
            } else {
                format!("request failed: {e}")
            }
        })?;
        Ok(resp.status().as_u16())
    }

    /// Writes a delivery's new state; queues it again while it is pending. A write that fails
    /// leaves the stored delivery pending, so it is attempted again after a restart (at least
    /// once, never lost).
    async fn finish(&self, d: Delivery) {
        if let Err(e) = self.save(&d).await {
            tracing::warn!(error = %e, delivery = d.id, "cannot record a delivery attempt");
        }
        if d.status == "pending" {
            self.queue(d);
        } else {
            self.pending.remove(&d.id);
        }
    }

    /// Keeps `failing_since` (written only when it changes) and disables a webhook whose
    /// attempts have all failed for `webhooks.disable_after`.
    async fn note_health(&self, w: &Webhook, failed: bool) {
        // The current record: another attempt may have changed it meanwhile.
        let Some(current) = self.state.webhook_of(&w.org_id, &w.id) else { return };
        match (failed, current.failing_since) {
            (false, None) => {}
            (false, Some(_)) => {
                let mut healthy = current.as_ref().clone();
                healthy.failing_since = None;
                if let Err(e) = self.state.save_webhook(healthy).await {
                    tracing::warn!(error = %e, webhook = w.id, "cannot record a webhook's recovery");
                }
            }
            (true, None) => {
                let mut failing = current.as_ref().clone();
                failing.failing_since = Some(Utc::now());
                if let Err(e) = self.state.save_webhook(failing).await {
                    tracing::warn!(error = %e, webhook = w.id, "cannot record a webhook's failure");
                }
            }
            (true, Some(since)) => {
                let limit = chrono::Duration::from_std(self.state.config().webhooks.disable_after).unwrap_or_default();
                if current.enabled && Utc::now() - since >= limit {
                    let reason = format!(
                        "every attempt failed for more than {} s (since {})",
                        self.state.config().webhooks.disable_after.as_secs(),
                        since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                    );
                    self.disable(&current, &reason).await;
                }
            }
        }
    }

    /// Disables a webhook, and tells the organisation's other webhooks (`error.critical`).
    async fn disable(&self, w: &Webhook, reason: &str) {
        let Some(mut disabled) = self.state.webhook_of(&w.org_id, &w.id).map(|c| c.as_ref().clone()) else { return };
        if !disabled.enabled {
            return;
        }
        disabled.enabled = false;
        disabled.disabled_reason = Some(reason.to_string());
        disabled.updated_at = Utc::now();
        if let Err(e) = self.state.save_webhook(disabled).await {
            tracing::warn!(error = %e, webhook = w.id, "cannot disable a webhook");
            return;
        }
        tracing::warn!(webhook = w.id, org = w.org_id, reason, "webhook disabled");
        let data = json!({ "kind": "webhook_disabled", "webhook_id": w.id, "url": w.url, "reason": reason });
        self.emit(&w.org_id, "error.critical", data).await;
    }

    /// A client that connects the target's host to its address (the address checked, whatever
    /// the name resolves to by then), kept so that attempts to one receiver reuse its connections.
    fn client_for(&self, target: &crate::outbound::egress::Target) -> Result<reqwest::Client, String> {
        let key = (target.host.clone(), target.addr);
        if let Some(c) = self.clients.get(&key) {
            return Ok(c.clone());
        }
        let client = crate::outbound::client::builder()
            .timeout(self.state.config().webhooks.attempt_timeout)
            .connect_to(target)
            .build()
            .map_err(|e| e.to_string())?;
        if self.clients.len() >= MAX_CLIENTS {
            self.clients.clear();
        }
        self.clients.insert(key, client.clone());
        Ok(client)
    }

    /// Sends one attempt; the status code, or why there is none.
    async fn send(&self, w: &Webhook, d: &Delivery) -> Result<u16, String> {
        let target = self.egress().resolve(&w.url).await.map_err(|e| e.to_string())?;
        let key_of = |sealed: &str| {
            let secret = self.state.sealer.open(sealed).ok()?;
            sign::key_of(&String::from_utf8_lossy(&secret)).ok()
        };
        let key = key_of(&w.sealed_secret).ok_or("the webhook's secret cannot be opened")?;
        // During a rotation's grace period the old secret signs too (Standard Webhooks takes
        // several signatures, space-separated; the body's signature is the new secret's).
        let previous = match (&w.sealed_previous_secret, w.previous_secret_until) {
            (Some(sealed), Some(until)) if until > Utc::now() => key_of(sealed),
            _ => None,
        };
        let timestamp = d.timestamp.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let (body, signature) = sign::body(&key, &d.event, &timestamp, &d.data);
        let now = Utc::now().timestamp();
        let client = self.client_for(&target)?;
        let resp = client
            .post(target.url)
            .header("content-type", "application/json")
            .header("x-webhook-signature", &signature)
            .header("x-webhook-event", &d.event)
            .header("webhook-id", &d.id)
            .header("webhook-timestamp", now.to_string())
            .header("webhook-signature", {
                let mut signatures = sign::standard(&key, &d.id, now, &body);
                if let Some(old) = &previous {
                    signatures.push(' ');
                    signatures.push_str(&sign::standard(old, &d.id, now, &body));
                }
                signatures
            })
            .body(body)
            .send()
            .await
            .map_err(|e| if e.is_timeout() { "timed out".to_string() } else { format!("request failed: {e}") })?;
        Ok(resp.status().as_u16())
    }

    /// With several instances on one store: takes up the pending deliveries this instance does
    /// not know (recorded by an instance that died, or that restarted), so none waits for an
    /// instance that is gone. Each attempt's lock keeps two instances from sending one delivery
    /// at once.
    async fn adopt(&self) {
        let Ok(all) = self.state.store.load_all(Kind::Delivery).await else { return };
        let now = now_ms();
        for (id, body) in all {
            if self.pending.contains_key(&id) {
                continue;
            }
            let Ok(d) = serde_json::from_str::<Delivery>(&body) else { continue };
            // Overdue by a while: its instance would have tried it by now if it were alive.
            let due = d.next_attempt_at.map_or(now, |t| t.timestamp_millis());
            if d.status == "pending" && now - due > ADOPT_AFTER.as_millis() as i64 {
                self.queue(d);
            }
        }
    }

    /// Removes finished deliveries older than `webhooks.delivery_retention_days`, and those of
    /// webhooks deleted since; pending ones stay until they finish.
    async fn prune(&self) {
        let all = match self.state.store.load_all(Kind::Delivery).await {
            Ok(all) => all,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the webhook deliveries to prune them");
                return;
            }
        };
        let cutoff = Utc::now()
            - chrono::Duration::from_std(self.state.config().webhooks.delivery_retention).unwrap_or_default();
        let mut removed = 0;
        for (id, body) in all {
            let Ok(d) = serde_json::from_str::<Delivery>(&body) else { continue };
            let orphan = d.alert_id.is_none() && self.state.webhook_of(&d.org_id, &d.webhook_id).is_none();
            let done = d.status != "pending" && (d.created_at < cutoff || orphan);
            if done && self.state.store.delete(Kind::Delivery, &id).await.is_ok() {
                removed += 1;
            }
        }
        if removed > 0 {
            tracing::info!(removed, "pruned finished webhook deliveries");
        }
    }

    /// A webhook's deliveries, newest first.
    pub async fn deliveries(&self, org_id: &str, webhook_id: &str) -> Result<Vec<Delivery>, StoreError> {
        self.deliveries_where(org_id, |d| d.alert_id.is_none() && d.webhook_id == webhook_id).await
    }

    /// An alert's notifications, newest first.
    pub async fn notifications(&self, org_id: &str, alert_id: &str) -> Result<Vec<Delivery>, StoreError> {
        self.deliveries_where(org_id, |d| d.alert_id.as_deref() == Some(alert_id)).await
    }

    async fn deliveries_where(
        &self,
        org_id: &str,
        wanted: impl Fn(&Delivery) -> bool,
    ) -> Result<Vec<Delivery>, StoreError> {
        let mut all: Vec<Delivery> = self
            .state
            .store
            .load_partition(Kind::Delivery, org_id)
            .await?
            .into_iter()
            .filter_map(|(_, body)| serde_json::from_str::<Delivery>(&body).ok())
            .filter(|d| wanted(d))
            .map(|d| self.pending.get(&d.id).map_or(d, |p| p.clone()))
            .collect();
        all.sort_by(|a, b| b.created_at.cmp(&a.created_at).then_with(|| b.id.cmp(&a.id)));
        Ok(all)
    }
}

/// Runs [`Events::run`] as a Pingora background service.
pub(crate) struct EventsService(pub Arc<Events>);

#[async_trait::async_trait]
impl pingora::services::background::BackgroundService for EventsService {
    async fn start(&self, mut shutdown: pingora::server::ShutdownWatch) {
        tokio::select! {
            _ = self.0.clone().run() => {}
            _ = shutdown.changed() => {}
        }
    }
}

//! The change feed: every create, update and delete of a record (organisation, user, key,
//! gateway, connection, service account, MCP session, webhook, and the identity records: OAuth
//! clients and grants, web sessions, passwords) becomes one typed [`Change`], published by the
//! owner of that record (`State`'s write methods, `mcp::sessions`,
//! `identity::signin::sessions`) after the write is durable. Whoever must react subscribes here
//! instead of being called by each handler.
//!
//! Two kinds of subscriber, by what they can afford:
//! - **Listeners** ([`Feed::listen`]) run synchronously inside [`Feed::publish`], before the
//!   writer returns. In-process caches (the MCP catalogue cache, `list_changed` notices, the
//!   sessions of a revoked key) are listeners: when the management API has answered 2xx, the
//!   next MCP request already sees the change, with no window in which a stale cache answers.
//!   A listener must be quick and must not block or await.
//! - **Subscribers** ([`Feed::subscribe`]) get a `tokio::sync::broadcast` receiver, for work that
//!   may wait (webhooks, an audit log, propagation to other instances). The channel keeps the
//!   last [`Feed::CAPACITY`] changes; a subscriber that falls further behind gets
//!   `RecvError::Lagged(n)` and must resynchronise from the state (it cannot know which records
//!   the lost changes named). Publishing never waits for a subscriber. A new MCP session is
//!   told to the listeners only ([`Change::for_subscribers`]).

use parking_lot::RwLock;
use std::sync::Arc;
use tokio::sync::broadcast;

/// One change of state, naming the organisation and the record. Serialised as it travels between
/// instances (`peers.rs`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Change {
    OrganizationSaved {
        org_id: String,
    },
    UserSaved {
        org_id: String,
        user_id: String,
    },
    /// A member removed from its organisation (`DELETE /team/members/{id}`).
    UserDeleted {
        org_id: String,
        user_id: String,
    },
    KeySaved {
        org_id: String,
        key_id: String,
    },
    KeyDeleted {
        org_id: String,
        key_id: String,
    },
    /// `created`: the gateway is new (a `gateway.created` event, else `gateway.updated`).
    GatewaySaved {
        org_id: String,
        gateway_id: String,
        #[serde(default)]
        created: bool,
    },
    GatewayDeleted {
        org_id: String,
        gateway_id: String,
    },
    ConnectionSaved {
        org_id: String,
        app_id: String,
        /// Only its OAuth tokens were renewed: the upstreams take the new token, no event is
        /// raised.
        #[serde(default)]
        renewed: bool,
        /// A member's or service account's own connection; none for the organisation's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        user_id: Option<String>,
    },
    ConnectionDeleted {
        org_id: String,
        app_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        user_id: Option<String>,
    },
    ServiceAccountSaved {
        org_id: String,
        account_id: String,
    },
    /// A service account deleted (`DELETE /service-accounts/{id}`): its keys no longer resolve,
    /// and every instance closes its upstreams.
    ServiceAccountDeleted {
        org_id: String,
        account_id: String,
    },
    SessionCreated {
        org_id: String,
        gateway_id: String,
        session_id: String,
    },
    SessionEnded {
        org_id: String,
        gateway_id: String,
        session_id: String,
    },
    WebhookSaved {
        org_id: String,
        webhook_id: String,
    },
    WebhookDeleted {
        org_id: String,
        webhook_id: String,
    },
    /// A user's grant to an OAuth client, made or its tokens rotated.
    GrantSaved {
        org_id: String,
        grant_id: String,
    },
    /// A grant revoked: its tokens stop working.
    GrantDeleted {
        org_id: String,
        grant_id: String,
    },
    /// A client of the authorization server registered (by an organisation, or by itself:
    /// `org_id` empty), or its life extended.
    OAuthClientSaved {
        org_id: String,
        client_id: String,
    },
    /// A client deleted: it is refused from now on (its grants go with their own changes).
    OAuthClientDeleted {
        org_id: String,
        client_id: String,
    },
    /// A web session started (a sign-in); `session_id` is its public id (`ws_...`).
    WebSessionStarted {
        org_id: String,
        user_id: String,
        session_id: String,
    },
    /// A web session ended (sign-out, ended by its user, or pushed out by a newer one).
    WebSessionEnded {
        org_id: String,
        user_id: String,
        session_id: String,
    },
    /// A user's password set or changed (its web sessions and grants end with their own
    /// changes).
    PasswordChanged {
        org_id: String,
        user_id: String,
    },
    /// A gateway's tool pins were written: `decided`, by an admin's approval or rejection (the
    /// gateway's clients are told its list changed), else pinned on first use.
    ToolPinsSaved {
        org_id: String,
        gateway_id: String,
        #[serde(default)]
        decided: bool,
    },
    /// A tool definition of a gateway's app became pending (a `tool.changed` event).
    ToolChangeDetected {
        org_id: String,
        gateway_id: String,
        change_id: String,
        app_id: String,
        tool: String,
        /// `changed`, `added` or `hidden_text`.
        kind: String,
        /// The canonical hash of the pending definition (`data::tool_pins`).
        #[serde(default)]
        hash: String,
        /// The approved definition's, if one is.
        #[serde(default)]
        approved_hash: Option<String>,
    },
    /// A URL-mode elicitation sent to a caller without a connection (`mcp/elicitations.rs`):
    /// every instance remembers whose call it was, so its connect page can be used on any.
    ElicitationIssued {
        org_id: String,
        elicitation_id: String,
        user_id: String,
        gateway_id: String,
        session_id: String,
        app_id: String,
    },
    /// The person signed in as `user_id` connected for the elicitation: the instances holding a
    /// stream of its session tell the client, if `user_id` made its call.
    ElicitationCompleted {
        org_id: String,
        elicitation_id: String,
        user_id: String,
    },
}

impl Change {
    /// The organisation whose record changed.
    pub fn org_id(&self) -> &str {
        match self {
            Change::OrganizationSaved { org_id }
            | Change::UserSaved { org_id, .. }
            | Change::UserDeleted { org_id, .. }
            | Change::KeySaved { org_id, .. }
            | Change::KeyDeleted { org_id, .. }
            | Change::GatewaySaved { org_id, .. }
            | Change::GatewayDeleted { org_id, .. }
            | Change::ConnectionSaved { org_id, .. }
            | Change::ConnectionDeleted { org_id, .. }
            | Change::ServiceAccountSaved { org_id, .. }
            | Change::ServiceAccountDeleted { org_id, .. }
            | Change::SessionCreated { org_id, .. }
            | Change::SessionEnded { org_id, .. }
            | Change::WebhookSaved { org_id, .. }
            | Change::WebhookDeleted { org_id, .. }
            | Change::GrantSaved { org_id, .. }
            | Change::GrantDeleted { org_id, .. }
            | Change::OAuthClientSaved { org_id, .. }
            | Change::OAuthClientDeleted { org_id, .. }
            | Change::WebSessionStarted { org_id, .. }
            | Change::WebSessionEnded { org_id, .. }
            | Change::PasswordChanged { org_id, .. }
            | Change::ToolPinsSaved { org_id, .. }
            | Change::ToolChangeDetected { org_id, .. }
            | Change::ElicitationIssued { org_id, .. }
            | Change::ElicitationCompleted { org_id, .. } => org_id,
        }
    }
}

impl Change {
    /// Whether the subscribers hear of this change. Not of a new MCP session: none acts on one
    /// (it raises no webhook event; another instance reads a session it does not know from the
    /// store), and `initialize` makes them by tens of thousands a second. Each woke every
    /// subscriber's task on its thread (the webhooks' runtime, on Redis the propagation to the
    /// other instances, an `XADD` each), some 15 % of the CPU of an `initialize` flood, and
    /// pushed the changes they act on toward the channel's end (`RecvError::Lagged`: a gateway
    /// change lost to the webhooks). Its end is still told to all: other instances end it too.
    pub(crate) fn for_subscribers(&self) -> bool {
        !matches!(self, Change::SessionCreated { .. })
    }
}

type Listener = Box<dyn Fn(&Change) + Send + Sync>;

struct Inner {
    /// Read on every publish, written only when a listener is added (at start).
    listeners: RwLock<Vec<Listener>>,
    tx: broadcast::Sender<Change>,
}

/// The one in-process feed of changes; cloning it shares it.
#[derive(Clone)]
pub struct Feed {
    inner: Arc<Inner>,
}

impl Default for Feed {
    fn default() -> Self {
        Feed::new()
    }
}

impl Feed {
    /// A change another instance made (and published there): this instance's caches follow it,
    /// but the subscribers, whose work (a webhook, propagation) is done once, by the instance
    /// that made the change, do not hear of it.
    pub(crate) fn follow_peer(&self, change: &Change) {
        self.tell_listeners(change);
    }

    fn tell_listeners(&self, change: &Change) {
        for listener in self.inner.listeners.read().iter() {
            listener(change);
        }
    }

    /// Changes a broadcast subscriber may fall behind by before it lags.
    pub(crate) const CAPACITY: usize = 1024;

    pub fn new() -> Feed {
        let (tx, _) = broadcast::channel(Self::CAPACITY);
        Feed { inner: Arc::new(Inner { listeners: RwLock::new(Vec::new()), tx }) }
    }

    /// Runs `listener` for every later change, synchronously, in the publisher's task.
    pub fn listen(&self, listener: impl Fn(&Change) + Send + Sync + 'static) {
        self.inner.listeners.write().push(Box::new(listener));
    }

    /// A receiver of every later change.
    pub fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.inner.tx.subscribe()
    }

    /// Tells the listeners, then queues the change for the subscribers (if there are any and it
    /// is [`Change::for_subscribers`]).
    pub(crate) fn publish(&self, change: Change) {
        self.tell_listeners(&change);
        if self.inner.tx.receiver_count() > 0 && change.for_subscribers() {
            // An error means no receiver is left; nothing to do.
            let _ = self.inner.tx.send(change);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn gateway_saved(n: usize) -> Change {
        Change::GatewaySaved { org_id: "org_1".into(), gateway_id: format!("gw_{n}"), created: false }
    }

    #[test]
    fn listeners_run_before_publish_returns_and_subscribers_get_every_change() {
        let feed = Feed::new();
        let seen = Arc::new(AtomicUsize::new(0));
        let s = seen.clone();
        feed.listen(move |c| {
            assert_eq!(c.org_id(), "org_1");
            s.fetch_add(1, Ordering::SeqCst);
        });
        let mut rx = feed.subscribe();
        feed.publish(gateway_saved(1));
        assert_eq!(seen.load(Ordering::SeqCst), 1, "the listener ran inside publish");
        feed.publish(Change::KeyDeleted { org_id: "org_1".into(), key_id: "key_1".into() });
        assert_eq!(rx.try_recv().unwrap(), gateway_saved(1));
        assert_eq!(rx.try_recv().unwrap(), Change::KeyDeleted { org_id: "org_1".into(), key_id: "key_1".into() });
        assert!(rx.try_recv().is_err(), "nothing else");
        // A clone is the same feed.
        feed.clone().publish(gateway_saved(2));
        assert_eq!(seen.load(Ordering::SeqCst), 3);
        assert_eq!(rx.try_recv().unwrap(), gateway_saved(2));
    }

    #[test]
    fn a_new_mcp_session_is_told_to_the_listeners_only_and_its_end_to_all() {
        let feed = Feed::new();
        let seen = Arc::new(AtomicUsize::new(0));
        let s = seen.clone();
        feed.listen(move |_| {
            s.fetch_add(1, Ordering::SeqCst);
        });
        let mut rx = feed.subscribe();
        let (org_id, gateway_id, session_id) = ("org_1".to_string(), "gw_1".to_string(), "s1".to_string());
        for _ in 0..Feed::CAPACITY + 5 {
            feed.publish(Change::SessionCreated {
                org_id: org_id.clone(),
                gateway_id: gateway_id.clone(),
                session_id: session_id.clone(),
            });
        }
        assert_eq!(seen.load(Ordering::SeqCst), Feed::CAPACITY + 5, "every one told to the listener");
        assert_eq!(rx.try_recv(), Err(broadcast::error::TryRecvError::Empty), "none to the subscriber, nor a lag");
        feed.publish(gateway_saved(1));
        let ended = Change::SessionEnded { org_id, gateway_id, session_id };
        feed.publish(ended.clone());
        assert_eq!(rx.try_recv().unwrap(), gateway_saved(1), "the flood pushed no change out");
        assert_eq!(rx.try_recv().unwrap(), ended);
    }

    #[test]
    fn a_subscriber_that_falls_behind_is_told_how_far_not_silently_skipped() {
        let feed = Feed::new();
        let mut rx = feed.subscribe();
        for n in 0..Feed::CAPACITY + 5 {
            feed.publish(gateway_saved(n));
        }
        match rx.try_recv() {
            Err(broadcast::error::TryRecvError::Lagged(n)) => assert_eq!(n, 5),
            other => panic!("expected Lagged(5), got {other:?}"),
        }
        // Then it goes on from the oldest change still kept.
        assert_eq!(rx.try_recv().unwrap(), gateway_saved(5));
    }

    #[test]
    fn publishing_without_subscribers_still_tells_the_listeners_and_keeps_nothing() {
        let feed = Feed::new();
        let seen = Arc::new(AtomicUsize::new(0));
        let s = seen.clone();
        feed.listen(move |_| {
            s.fetch_add(1, Ordering::SeqCst);
        });
        feed.publish(gateway_saved(1));
        assert_eq!(seen.load(Ordering::SeqCst), 1, "the listener ran without any subscriber");
        // A subscriber gets what is published after it subscribed, not what came before.
        let mut rx = feed.subscribe();
        assert_eq!(rx.try_recv(), Err(broadcast::error::TryRecvError::Empty), "nothing kept from before");
        feed.publish(gateway_saved(2));
        assert_eq!(rx.try_recv().unwrap(), gateway_saved(2));
    }
}

//! Who is subscribed to which resource of which upstream. An app's one upstream session serves
//! every client of the gateway, so the app sees one subscriber; the gateway keeps the client
//! sessions behind it, tells the app only of the first subscriber and the last to leave, and
//! delivers each update to the sessions subscribed.

use dashmap::DashMap;
use std::collections::HashSet;

/// A resource of one upstream: (owner as in [`crate::mcp::upstream::AppNotice::owner`], app id,
/// uri).
pub(crate) type Subscription = (String, String, String);

#[derive(Default)]
pub struct Subscriptions(DashMap<Subscription, HashSet<String>>);

impl Subscriptions {
    /// Records a client session's subscription (idempotent).
    pub fn add(&self, subscription: Subscription, session_id: &str) {
        self.0.entry(subscription).or_default().insert(session_id.to_string());
    }

    /// Forgets a client session's subscription; true when no session is left on it, so the app
    /// can be told to stop.
    pub fn remove(&self, subscription: &Subscription, session_id: &str) -> bool {
        let Some(mut sessions) = self.0.get_mut(subscription) else { return true };
        sessions.remove(session_id);
        let empty = sessions.is_empty();
        drop(sessions);
        if empty {
            self.0.remove_if(subscription, |_, s| s.is_empty());
        }
        empty
    }

    /// The sessions subscribed to `subscription` (a copy: delivery must not hold the map).
    pub fn sessions(&self, subscription: &Subscription) -> Vec<String> {
        self.0.get(subscription).map(|s| s.iter().cloned().collect()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(owner: &str) -> Subscription {
        (owner.into(), "everything".into(), "demo://doc/1".into())
    }

    #[test]
    fn the_app_hears_of_the_first_subscriber_and_the_last_to_leave_only() {
        let subs = Subscriptions::default();
        subs.add(doc(""), "s1");
        subs.add(doc(""), "s1");
        subs.add(doc(""), "s2");
        subs.add(doc("org_b"), "s3");
        let mut shared = subs.sessions(&doc(""));
        shared.sort();
        assert_eq!(shared, ["s1", "s2"]);
        assert_eq!(subs.sessions(&doc("org_b")), ["s3"], "another owner's upstream is another subscription");

        assert!(!subs.remove(&doc(""), "s1"), "s2 still wants the updates");
        assert_eq!(subs.sessions(&doc("")), ["s2"]);
        assert!(subs.remove(&doc(""), "s2"), "the last one left: the app can be told");
        assert!(subs.sessions(&doc("")).is_empty());
        assert!(subs.remove(&doc(""), "s9"), "nobody was subscribed");
        assert_eq!(subs.sessions(&doc("org_b")), ["s3"]);
    }
}

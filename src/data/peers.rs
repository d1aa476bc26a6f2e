//! Changes between instances sharing one Redis (DESIGN Decisions 13 and 14).
//!
//! Each instance keeps every record in memory ([`State`]) and publishes its own changes on its
//! in-process feed. With several instances, this module carries them: every change this
//! instance makes goes onto one Redis stream (`<prefix>:changes`, trimmed to about
//! [`STREAM_LENGTH`] entries), and every other instance reads the stream and follows each
//! change ([`State::apply_peer_change`]: the record named is read from Redis, whose copy is the
//! truth, and the local caches hear of it). A change reaches the other instances within one
//! round trip of the stream's blocking read.
//!
//! An instance that may have missed changes (at start, or after its connection to Redis was
//! lost) reads every record again ([`State::reload`]) and then follows the stream from where it
//! stood before the reload, so nothing falls between the two. It also reloads every
//! [`RESYNC`], which bounds how long a change lost on the way (an instance that died between its
//! write and its publication) can go unseen.

use crate::data::changes::Change;
use crate::data::state::State;
use crate::data::store::redis::{spawn_on_redis_runtime, Target};
use redis::streams::{StreamReadOptions, StreamReadReply};
use redis::AsyncCommands;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::broadcast::error::RecvError;

/// About how many changes the stream keeps (an instance further behind reloads).
pub(crate) const STREAM_LENGTH: usize = 100_000;

/// How long one blocking read of the stream waits for a change.
const BLOCK: Duration = Duration::from_millis(1000);

/// How often every record is read again regardless.
pub(crate) const RESYNC: Duration = Duration::from_secs(300);

/// After a failed read or write, the wait before the next attempt.
const RETRY: Duration = Duration::from_millis(500);

/// Starts carrying changes between this instance and the others on the Redis `target`.
pub(crate) fn start(state: Arc<State>, target: Target, prefix: &str) {
    let stream = format!("{prefix}:changes");
    let instance = crate::base::secrets::new_id("inst");
    tracing::info!(instance, stream, "following the other instances' changes on Redis");
    let rx = state.changes.subscribe();
    spawn_on_redis_runtime(publish(target.clone(), stream.clone(), instance.clone(), rx));
    spawn_on_redis_runtime(follow(target, stream, instance, state));
}

/// Puts this instance's changes onto the stream, in order. A change that cannot be written
/// (Redis away) is retried until it is; if the feed outran this task meanwhile, the other
/// instances are asked to reload (a `reload` entry), since they cannot know what was lost.
async fn publish(target: Target, stream: String, instance: String, mut rx: tokio::sync::broadcast::Receiver<Change>) {
    let mut conn = None;
    loop {
        let entry = match rx.recv().await {
            Ok(change) => serde_json::to_string(&change).unwrap_or_default(),
            Err(RecvError::Lagged(n)) => {
                tracing::warn!(missed = n, "changes were made faster than they reached Redis; the others will reload");
                "reload".to_string()
            }
            Err(RecvError::Closed) => return,
        };
        loop {
            if conn.is_none() {
                conn = target.dedicated(Duration::from_secs(2), Duration::from_secs(2)).await.ok();
            }
            let Some(c) = conn.as_mut() else {
                tokio::time::sleep(RETRY).await;
                continue;
            };
            let options = redis::streams::StreamMaxlen::Approx(STREAM_LENGTH);
            let written: redis::RedisResult<String> =
                c.xadd_maxlen(&stream, options, "*", &[("i", instance.as_str()), ("c", entry.as_str())]).await;
            match written {
                Ok(_) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "could not publish a change to the other instances; retrying");
                    conn = None;
                    tokio::time::sleep(RETRY).await;
                }
            }
        }
    }
}

/// Follows the other instances' changes.
async fn follow(target: Target, stream: String, instance: String, state: Arc<State>) {
    loop {
        // (Re)starting: where the stream stands, then every record, then what came after.
        // A blocking read holds its answer up to BLOCK: the connection waits longer than that.
        let mut conn = match target.dedicated(Duration::from_secs(2), BLOCK + Duration::from_secs(2)).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "cannot reach Redis for the change feed; retrying");
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        let last: redis::RedisResult<redis::streams::StreamRangeReply> =
            conn.xrevrange_count(&stream, "+", "-", 1).await;
        let mut from = match last {
            Ok(r) => r.ids.first().map_or_else(|| "0-0".to_string(), |e| e.id.clone()),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the change feed; retrying");
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        if let Err(e) = state.reload().await {
            tracing::warn!(error = %e, "cannot reload the records from Redis; retrying");
            tokio::time::sleep(RETRY).await;
            continue;
        }
        state.note_shared_contact();
        let synced = Instant::now();
        let options = StreamReadOptions::default().block(BLOCK.as_millis() as usize).count(256);
        loop {
            if synced.elapsed() > RESYNC {
                break;
            }
            let read: redis::RedisResult<Option<StreamReadReply>> =
                conn.xread_options(&[&stream], &[&from], &options).await;
            let reply = match read {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(error = %e, "lost the change feed; reloading when Redis answers");
                    tokio::time::sleep(RETRY).await;
                    break;
                }
            };
            state.note_shared_contact();
            let Some(reply) = reply else { continue };
            let mut reload = false;
            for key in reply.keys {
                for entry in key.ids {
                    from = entry.id.clone();
                    let from_self = entry.get::<String>("i").is_some_and(|i| i == instance);
                    if from_self {
                        continue;
                    }
                    let Some(body) = entry.get::<String>("c") else { continue };
                    if body == "reload" {
                        reload = true;
                        continue;
                    }
                    match serde_json::from_str::<Change>(&body) {
                        Ok(change) => {
                            if let Err(e) = state.apply_peer_change(&change).await {
                                tracing::warn!(error = %e, ?change, "cannot follow another instance's change; reloading");
                                reload = true;
                            }
                        }
                        Err(e) => tracing::warn!(error = %e, "skipping an unreadable change on the feed"),
                    }
                }
            }
            if reload {
                break;
            }
        }
    }
}
